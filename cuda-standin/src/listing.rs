//! A module's kernels listed (`cuModuleGetFunctionCount`, `cuModuleEnumerateFunctions`, CUDA
//! 12.4) and a function's name (`cuFuncGetName`), as the backend asks them for the CUDA shim's
//! `cuLibraryGetKernelCount`: the kernels the stand-in read from the module's image, in its
//! order; each listed function is the one `cuModuleGetFunction` gives for its name.

use std::collections::HashMap;
use std::ffi::{c_char, c_uint, CStr, CString};
use std::sync::LazyLock;

use parking_lot::Mutex;

use crate::{code, cuModuleGetFunction, id, owned, with_context, Handle};

/// The names of `module`'s kernels, checked to be the current context's.
fn names(call: &str, module: Handle) -> Result<Vec<String>, u32> {
    let mut names = Vec::new();
    let result = with_context(call, |d, context| {
        let owner = d.modules.get(&id(module)).map(|m| m.context);
        owned(d, "module", owner, context)?;
        names = d.modules[&id(module)].kernels.clone();
        Ok(())
    });
    if result == code::SUCCESS {
        Ok(names)
    } else {
        Err(result)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunctionCount(count: *mut c_uint, module: Handle) -> u32 {
    match names("cuModuleGetFunctionCount", module) {
        Ok(_) if count.is_null() => code::INVALID_VALUE,
        Ok(names) => {
            *count = names.len() as c_uint;
            code::SUCCESS
        }
        Err(result) => result,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleEnumerateFunctions(functions: *mut Handle, room: c_uint, module: Handle) -> u32 {
    let names = match names("cuModuleEnumerateFunctions", module) {
        Ok(_) if functions.is_null() => return code::INVALID_VALUE,
        Ok(names) => names,
        Err(result) => return result,
    };
    for (i, name) in names.iter().take(room as usize).enumerate() {
        let Ok(name) = CString::new(name.as_str()) else { return code::INVALID_VALUE };
        let result = cuModuleGetFunction(functions.add(i), module, name.as_ptr());
        if result != code::SUCCESS {
            return result;
        }
    }
    code::SUCCESS
}

/// Kernel names as C strings, kept for the process (a function's name outlives no module on a
/// real driver; these outlive every one).
fn c_name(name: &str) -> *const c_char {
    static NAMES: LazyLock<Mutex<HashMap<String, Box<CStr>>>> = LazyLock::new(Mutex::default);
    let mut names = NAMES.lock();
    let kept = names
        .entry(name.to_string())
        .or_insert_with(|| CString::new(name).unwrap_or_else(|_| CString::from(c"?")).into_boxed_c_str());
    kept.as_ptr()
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetName(name: *mut *const c_char, function: Handle) -> u32 {
    with_context("cuFuncGetName", |d, context| {
        let owner = d.functions.get(&id(function)).map(|f| f.context);
        owned(d, "function", owner, context)?;
        if name.is_null() {
            return Err(code::INVALID_VALUE);
        }
        *name = c_name(&d.functions[&id(function)].name);
        Ok(())
    })
}
