//! Loading a checked module image into a session's context (`cuModuleLoadDataEx`), with the
//! driver's JIT log on failure.

use std::ffi::{c_void, CString};
use std::sync::atomic::Ordering;

use ac_proto::backend::{ErrorKind, WireError};
use cudarc::driver::sys::{self, CUresult};

use super::context::{CudaContext, Module, Region};
use super::driver::Handle;
use super::image::aligned_copy;
use super::signature::Signatures;
use crate::device::{DeviceMem, DeviceModule, DeviceResult};

/// Size of the buffer that receives the driver's JIT log when PTX fails to load.
const JIT_LOG_BYTES: usize = 16 << 10;

impl CudaContext {
    /// A module's variable `name`: its address and size, recorded as a region of the module's.
    pub(super) fn global_of(&self, module: DeviceModule, name: &str) -> DeviceResult<(DeviceMem, u64)> {
        self.enter()?;
        let raw_module = self.raw_module(module)?;
        let c_name = CString::new(name)
            .map_err(|_| WireError::new(ErrorKind::UnknownKernel, "a variable's name cannot contain a NUL byte"))?;
        let (mut ptr, mut size) = (0, 0);
        // SAFETY: the module is loaded in this context; valid out-pointers; NUL-terminated name.
        let code = unsafe { sys::cuModuleGetGlobal_v2(&mut ptr, &mut size, raw_module.0, c_name.as_ptr()) };
        if code == CUresult::CUDA_ERROR_NOT_FOUND {
            return Err(WireError::new(ErrorKind::UnknownKernel, format!("no variable `{name}` in the module")));
        }
        self.check("cuModuleGetGlobal", code)?;
        let region = Region { size: size as u64, module: Some(module.0), reserved: false, opened: false };
        self.allocations.lock().expect("allocations poisoned").insert(ptr, region);
        Ok((DeviceMem(ptr), size as u64))
    }

    /// The names of the kernels `module` holds (`cuModuleEnumerateFunctions`, CUDA 12.4 drivers
    /// and newer).
    pub(super) fn kernel_names_of(&self, module: DeviceModule) -> DeviceResult<Vec<String>> {
        self.enter()?;
        if !super::driver::has_symbol("cuModuleEnumerateFunctions") {
            return Err(WireError::new(
                ErrorKind::NeedsCuda,
                "the GPU host's driver cannot list a module's kernels (it predates CUDA 12.4)",
            ));
        }
        let raw = self.raw_module(module)?;
        let mut count = 0;
        // SAFETY: the module is loaded in this context; a valid out-pointer.
        self.check("cuModuleGetFunctionCount", unsafe { sys::cuModuleGetFunctionCount(&mut count, raw.0) })?;
        if count == 0 {
            // An image of variables alone: nothing to enumerate (and no room to enumerate into).
            return Ok(Vec::new());
        }
        let mut functions = vec![std::ptr::null_mut(); count as usize];
        // SAFETY: room for `count` handles.
        let code = unsafe { sys::cuModuleEnumerateFunctions(functions.as_mut_ptr(), count, raw.0) };
        self.check("cuModuleEnumerateFunctions", code)?;
        let name_of = |function| {
            let mut name = std::ptr::null();
            // SAFETY: a function of the module; the driver's name lives as long as the module.
            self.check("cuFuncGetName", unsafe { sys::cuFuncGetName(&mut name, function) })?;
            // SAFETY: a NUL-terminated name, or null (refused).
            let name = unsafe { name.as_ref().map(|n| std::ffi::CStr::from_ptr(n)) };
            Ok(name.map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())
        };
        functions.into_iter().map(name_of).collect()
    }

    /// The driver's handle of `module`.
    fn raw_module(&self, module: DeviceModule) -> DeviceResult<Handle<sys::CUmodule>> {
        let modules = self.modules.lock().expect("modules poisoned");
        let m = modules.get(&module.0).ok_or_else(|| WireError::new(ErrorKind::InvalidModule, "module unloaded"))?;
        Ok(m.raw)
    }

    /// Loads an image checked by [`image`], with its kernels' parameter sizes. The driver gets
    /// an 8-byte-aligned copy: a payload cut out of a network frame may lie at any address,
    /// and the driver reads ELF and fatbin headers in place (nvcc itself embeds fatbins as
    /// `unsigned long long` arrays).
    pub(super) fn load_image(&self, image: &[u8], builtin: bool, signatures: Signatures) -> DeviceResult<DeviceModule> {
        let aligned = aligned_copy(image);
        let mut log = vec![0u8; JIT_LOG_BYTES];
        let mut options =
            [sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER, sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
        let mut values = [log.as_mut_ptr() as *mut c_void, JIT_LOG_BYTES as *mut c_void];
        let mut raw = std::ptr::null_mut();
        // SAFETY: the image was checked to be PTX text ending in NUL, or a cubin/fatbin whose
        // headers lie inside the buffer, and its aligned copy holds all of it; the log buffer
        // is as large as announced.
        let code = unsafe {
            sys::cuModuleLoadDataEx(
                &mut raw,
                aligned.as_ptr() as *const c_void,
                options.len() as u32,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
        };
        if let Err(mut e) = self.check("cuModuleLoadData", code) {
            let log = String::from_utf8_lossy(&log);
            let log = log.trim_end_matches('\0').trim();
            if !log.is_empty() {
                e.message.push_str(&format!(":\n{log}"));
            }
            return Err(e);
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.modules.lock().expect("modules poisoned").insert(id, Module { raw: Handle(raw), builtin, signatures });
        Ok(DeviceModule(id))
    }
}
