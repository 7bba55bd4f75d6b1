//! Linking relocatable device code on the GPU's own driver (`cuLinkCreate`, `cuLinkAddData`,
//! `cuLinkComplete`; backend protocol 21): the CUDA shim's `cuLinkComplete`. The driver links
//! for the context's device, so the image fits the GPU it will be loaded on.

use std::ffi::{c_void, CString};

use ac_proto::backend::device_code::ptx_until_nul;
use ac_proto::backend::jit_link::is_forwarded;
use ac_proto::backend::{ErrorKind, JitOption, LinkInput, LinkInputKind, WireError};
use cudarc::driver::sys;

use super::context::CudaContext;
use super::image::{aligned_copy, check_link_input};
use crate::device::{DeviceResult, Linked};

/// Size of each of the two buffers that receive the linker's logs.
const LINK_LOG_BYTES: usize = 64 << 10;

/// `CUjit_option`s of the log buffers: info, its size, errors, its size.
const LOG_OPTIONS: [u32; 4] = [3, 4, 5, 6];

/// A link in progress, destroyed when dropped (the image it made goes with it).
struct LinkState(sys::CUlinkState);

impl Drop for LinkState {
    fn drop(&mut self) {
        // SAFETY: made by cuLinkCreate and destroyed once, here.
        unsafe { sys::cuLinkDestroy(self.0) };
    }
}

impl CudaContext {
    /// Links `inputs` for this context's device: the image and the linker's info log; a failure
    /// answers [`ErrorKind::ModuleLoad`] with the linker's error log.
    pub(super) fn link_inputs(&self, inputs: &[(LinkInput, &[u8])], options: &[JitOption]) -> DeviceResult<Linked> {
        self.enter()?;
        let mut info = vec![0u8; LINK_LOG_BYTES];
        let mut errors = vec![0u8; LINK_LOG_BYTES];
        let (mut keys, mut values) = numbers(options)?;
        keys.extend(LOG_OPTIONS);
        values.extend([
            info.as_mut_ptr() as *mut c_void,
            LINK_LOG_BYTES as *mut c_void,
            errors.as_mut_ptr() as *mut c_void,
            LINK_LOG_BYTES as *mut c_void,
        ]);
        let mut raw = std::ptr::null_mut();
        // SAFETY: as many option values as options, each option a `CUjit_option` number the
        // driver reads as such; the log buffers outlive the link state (declared before it).
        let code =
            unsafe { sys::cuLinkCreate_v2(keys.len() as u32, keys.as_mut_ptr().cast(), values.as_mut_ptr(), &mut raw) };
        self.check("cuLinkCreate", code)?;
        let state = LinkState(raw);
        for (input, bytes) in inputs {
            self.add_input(&state, input, bytes).map_err(|e| with_log(e, &errors))?;
        }
        let (mut image, mut size) = (std::ptr::null_mut(), 0usize);
        // SAFETY: a link state of this context with its inputs added.
        let code = unsafe { sys::cuLinkComplete(state.0, &mut image, &mut size) };
        self.check("cuLinkComplete", code).map_err(|e| with_log(e, &errors))?;
        // SAFETY: the driver's image of `size` bytes, alive until the state is destroyed below.
        let image = unsafe { std::slice::from_raw_parts(image as *const u8, size) }.to_vec();
        drop(state);
        Ok(Linked { image, info_log: log_text(&info) })
    }

    /// Adds one input to `state`: PTX up to its first NUL, and one NUL after it.
    fn add_input(&self, state: &LinkState, input: &LinkInput, bytes: &[u8]) -> DeviceResult<()> {
        // The driver reads the headers of a cubin, a fat binary, an object and a library's
        // members as they say, past `size` too: they are checked to lie inside the bytes first,
        // as a module's image is, and each input to be the kind it is declared as.
        check_link_input(input.kind, bytes)?;
        let (mut keys, mut values) = numbers(&input.options)?;
        // PTX's size counts the NUL that `data` gets after it.
        let (bytes, nul) = match input.kind {
            LinkInputKind::Ptx => (ptx_until_nul(bytes), 1),
            _ => (bytes, 0),
        };
        let size = bytes.len() + nul;
        // Zero-padded to whole words: PTX ends in NUL, and the driver may read headers in place.
        let data = aligned_copy(&[bytes, &[0]].concat());
        let name = CString::new(input.name.replace('\0', "")).expect("no NUL left");
        // SAFETY: `data` holds `size` bytes (and a NUL after PTX); as many values as options.
        let code = unsafe {
            sys::cuLinkAddData_v2(
                state.0,
                input_type(input.kind),
                data.as_ptr() as *mut c_void,
                size,
                name.as_ptr(),
                keys.len() as u32,
                keys.as_mut_ptr().cast(),
                values.as_mut_ptr(),
            )
        };
        self.check("cuLinkAddData", code)
    }
}

/// The driver's input type of `kind`.
fn input_type(kind: LinkInputKind) -> sys::CUjitInputType {
    use sys::CUjitInputType as T;
    match kind {
        LinkInputKind::Cubin => T::CU_JIT_INPUT_CUBIN,
        LinkInputKind::Ptx => T::CU_JIT_INPUT_PTX,
        LinkInputKind::Fatbinary => T::CU_JIT_INPUT_FATBINARY,
        LinkInputKind::Object => T::CU_JIT_INPUT_OBJECT,
        LinkInputKind::Library => T::CU_JIT_INPUT_LIBRARY,
        LinkInputKind::Nvvm => T::CU_JIT_INPUT_NVVM,
    }
}

/// The options as the driver takes them: numbers, and each value in a pointer's place. One not
/// [`is_forwarded`] is refused: the shim sends no other.
fn numbers(options: &[JitOption]) -> DeviceResult<(Vec<u32>, Vec<*mut c_void>)> {
    if let Some(o) = options.iter().find(|o| !is_forwarded(o.option)) {
        return Err(WireError::new(
            ErrorKind::InvalidArgument,
            format!("JIT option {} is not one to link with", o.option),
        ));
    }
    Ok(options.iter().map(|o| (o.option, o.value as usize as *mut c_void)).unzip())
}

/// `e` with the linker's error log, as a failed load of the image: a link failure is the
/// program's image, not the device (a lost context, no memory or a refused argument stay so).
fn with_log(mut e: WireError, log: &[u8]) -> WireError {
    if !matches!(e.kind, ErrorKind::ContextLost | ErrorKind::OutOfMemory | ErrorKind::InvalidArgument) {
        e.kind = ErrorKind::ModuleLoad;
    }
    let log = log_text(log);
    if !log.is_empty() {
        e.message.push_str(&format!(":\n{log}"));
    }
    e
}

/// A log buffer's text, up to its first NUL.
fn log_text(buffer: &[u8]) -> String {
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    String::from_utf8_lossy(&buffer[..end]).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_failure_is_the_images_with_its_log_unless_the_device_or_memory_failed() {
        let log = b"nvlink error : Undefined reference to 'f'\0garbage";
        let failed = with_log(WireError::new(ErrorKind::Device, "cuLinkComplete: CUDA_ERROR_UNKNOWN"), log);
        assert_eq!(failed.kind, ErrorKind::ModuleLoad);
        assert!(failed.message.ends_with(":\nnvlink error : Undefined reference to 'f'"), "{}", failed.message);
        for kept in [ErrorKind::OutOfMemory, ErrorKind::ContextLost, ErrorKind::InvalidArgument] {
            assert_eq!(with_log(WireError::new(kept, "x"), b"\0").kind, kept);
        }
        assert_eq!(with_log(WireError::new(ErrorKind::Device, "x"), b"\0").message, "x");
    }

    #[test]
    fn only_numeric_options_reach_the_driver() {
        assert!(numbers(&[JitOption { option: 17, value: 0 }]).is_err(), "global symbol names carry a pointer");
        let (keys, values) = numbers(&[JitOption { option: 12, value: 1 }]).unwrap();
        assert_eq!((keys, values[0] as usize), (vec![12], 1));
    }
}
