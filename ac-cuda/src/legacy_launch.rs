//! CUDA 2.0's launch calls, deprecated since CUDA 4.0 but still declared in `cuda.h`, exported
//! by NVIDIA's driver, and called by older driver-API programs: a kernel's block shape, dynamic
//! shared memory and parameter bytes are set by separate calls (`cuFuncSetBlockShape`,
//! `cuFuncSetSharedSize`, `cuParamSetSize`, `cuParamSeti`, `cuParamSetf`, `cuParamSetv`), then
//! `cuLaunch`, `cuLaunchGrid` or `cuLaunchGridAsync` launches it with them. The launch is
//! `cuLaunchKernel`'s with a parameter buffer (`CU_LAUNCH_PARAM_BUFFER_POINTER`), so it is
//! sized and checked against the kernel's parameter layout as any other launch.
//!
//! The driver keeps these settings in the function, shared by every thread of the program;
//! here they are kept per function handle, under one lock, until the program ends. A handle is
//! the address of its kernel record, which an unloaded module frees: each entry holds a `Weak`
//! of the record, which keeps that address from going to another function while its settings
//! are kept. `cuParamSetTexRef` stays unsupported: texture references are not served.

use std::collections::HashMap;
use std::ffi::{c_float, c_int, c_uint, c_void};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use ac_frontend::LaunchDims;

use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::module::{kernels, Kernel};

/// The most parameter bytes a kernel takes (CUDA 12.1's limit on Volta and later).
const MOST_PARAMETER_BYTES: usize = 32_764;

/// What the legacy calls set for one function.
#[derive(Debug, Default, Clone, PartialEq)]
struct Settings {
    /// Threads of a block in x, y, z (`cuFuncSetBlockShape`); `None` until set.
    block: Option<[u32; 3]>,
    /// Dynamic shared memory per block, bytes (`cuFuncSetSharedSize`).
    shared: u32,
    /// The parameter bytes written so far (`cuParamSet[ifv]`), at their offsets.
    written: Vec<u8>,
    /// The parameter bytes a launch passes (`cuParamSetSize`): programs write the parameters
    /// first and set the size last, so the size does not bound the writes.
    size: usize,
}

impl Settings {
    /// Writes `bytes` at parameter offset `offset`.
    fn put(&mut self, offset: c_int, bytes: &[u8]) -> CuResult<()> {
        let start = usize::try_from(offset).map_err(|_| parameter_range(offset, bytes.len()))?;
        let end = start.checked_add(bytes.len()).filter(|&e| e <= MOST_PARAMETER_BYTES);
        let end = end.ok_or_else(|| parameter_range(offset, bytes.len()))?;
        if self.written.len() < end {
            self.written.resize(end, 0);
        }
        self.written[start..end].copy_from_slice(bytes);
        Ok(())
    }

    /// The launch these settings make on a grid of `grid` blocks, and the parameter bytes it
    /// passes: the first `size` written, zero past what was written.
    fn launch(&self, grid: [c_int; 2]) -> CuResult<(LaunchDims, Vec<u8>)> {
        let Some(block) = self.block else {
            return Err(Error::said(code::INVALID_VALUE, "a legacy launch before cuFuncSetBlockShape set its block"));
        };
        let [Ok(width), Ok(height)] = grid.map(u32::try_from) else {
            return Err(Error::said(code::INVALID_VALUE, format!("a legacy launch on a grid of {grid:?} blocks")));
        };
        if width == 0 || height == 0 {
            return Err(Error::said(code::INVALID_VALUE, format!("a legacy launch on a grid of {grid:?} blocks")));
        }
        let mut bytes = self.written.clone();
        bytes.resize(self.size, 0);
        Ok((LaunchDims { grid: [width, height, 1], block, shared_mem: self.shared }, bytes))
    }
}

/// The refusal of `len` parameter bytes at `offset`.
fn parameter_range(offset: c_int, len: usize) -> Error {
    Error::said(
        code::INVALID_VALUE,
        format!("{len} parameter bytes at offset {offset}: a kernel takes at most {MOST_PARAMETER_BYTES}"),
    )
}

/// A function's settings, and its kernel record, pinned.
#[derive(Debug)]
struct Entry {
    /// Keeps the record's address (the handle) from being another function's.
    _pinned: Weak<Kernel>,
    settings: Settings,
}

/// Each function's settings, by handle.
fn settings() -> &'static Mutex<HashMap<usize, Entry>> {
    static SETTINGS: OnceLock<Mutex<HashMap<usize, Entry>>> = OnceLock::new();
    SETTINGS.get_or_init(Mutex::default)
}

/// Changes `function`'s settings with `change`, once the handle is known to be a function.
fn set(function: usize, change: impl FnOnce(&mut Settings) -> CuResult<()>) -> CuResult<()> {
    let kernel = kernels().get(function)?;
    let mut all = settings().lock().unwrap_or_else(|p| p.into_inner());
    let entry = all
        .entry(function)
        .or_insert_with(|| Entry { _pinned: Arc::downgrade(&kernel), settings: Settings::default() });
    change(&mut entry.settings)
}

#[no_mangle]
pub extern "C" fn cuFuncSetBlockShape(function: usize, x: c_int, y: c_int, z: c_int) -> u32 {
    guard("cuFuncSetBlockShape", || {
        let block = [x, y, z].map(|d| u32::try_from(d).ok().filter(|&d| d > 0));
        let [Some(x), Some(y), Some(z)] = block else {
            return Err(Error::said(code::INVALID_VALUE, format!("a block of {x} x {y} x {z} threads")));
        };
        set(function, |s| {
            s.block = Some([x, y, z]);
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn cuFuncSetSharedSize(function: usize, bytes: c_uint) -> u32 {
    guard("cuFuncSetSharedSize", || {
        set(function, |s| {
            s.shared = bytes;
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn cuParamSetSize(function: usize, bytes: c_uint) -> u32 {
    guard("cuParamSetSize", || {
        let size = bytes as usize;
        if size > MOST_PARAMETER_BYTES {
            return Err(parameter_range(0, size));
        }
        set(function, |s| {
            s.size = size;
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn cuParamSeti(function: usize, offset: c_int, value: c_uint) -> u32 {
    guard("cuParamSeti", || set(function, |s| s.put(offset, &value.to_ne_bytes())))
}

#[no_mangle]
pub extern "C" fn cuParamSetf(function: usize, offset: c_int, value: c_float) -> u32 {
    guard("cuParamSetf", || set(function, |s| s.put(offset, &value.to_ne_bytes())))
}

#[no_mangle]
pub unsafe extern "C" fn cuParamSetv(function: usize, offset: c_int, data: *mut c_void, bytes: c_uint) -> u32 {
    guard("cuParamSetv", || {
        if data.is_null() && bytes > 0 {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        if bytes as usize > MOST_PARAMETER_BYTES {
            return Err(parameter_range(offset, bytes as usize));
        }
        let bytes = if bytes == 0 { &[][..] } else { std::slice::from_raw_parts(data as *const u8, bytes as usize) };
        set(function, |s| s.put(offset, bytes))
    })
}

#[no_mangle]
pub extern "C" fn cuLaunch(function: usize) -> u32 {
    guard("cuLaunch", || launch_grid(function, [1, 1], 0))
}

#[no_mangle]
pub extern "C" fn cuLaunchGrid(function: usize, width: c_int, height: c_int) -> u32 {
    guard("cuLaunchGrid", || launch_grid(function, [width, height], 0))
}

#[no_mangle]
pub extern "C" fn cuLaunchGridAsync(function: usize, width: c_int, height: c_int, stream: usize) -> u32 {
    guard("cuLaunchGridAsync", || launch_grid(function, [width, height], stream))
}

/// Launches `function` on `grid` blocks in `stream` with the settings the legacy calls made.
fn launch_grid(function: usize, grid: [c_int; 2], stream: usize) -> CuResult<()> {
    kernels().get(function)?;
    let settings = settings().lock().unwrap_or_else(|p| p.into_inner()).get(&function).map(|e| e.settings.clone());
    let (dims, bytes) = settings.unwrap_or_default().launch(grid)?;
    crate::launch::launch_with_buffer(function, dims, stream, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_written_at_their_offsets_and_passed_to_the_size_set_last() {
        let mut s = Settings { block: Some([128, 1, 1]), ..Settings::default() };
        s.put(0, &0x1122_3344_5566_7788u64.to_ne_bytes()).unwrap();
        s.put(12, &7u32.to_ne_bytes()).unwrap();
        s.put(8, &2.5f32.to_ne_bytes()).unwrap();
        s.size = 16;
        let (dims, bytes) = s.launch([3, 2]).unwrap();
        assert_eq!(dims, LaunchDims { grid: [3, 2, 1], block: [128, 1, 1], shared_mem: 0 });
        let mut expected = 0x1122_3344_5566_7788u64.to_ne_bytes().to_vec();
        expected.extend(2.5f32.to_ne_bytes());
        expected.extend(7u32.to_ne_bytes());
        assert_eq!(bytes, expected);
        // A smaller size passes fewer bytes; a larger one, zeros past what was written.
        s.size = 8;
        assert_eq!(s.launch([1, 1]).unwrap().1, expected[..8]);
        s.size = 20;
        assert_eq!(s.launch([1, 1]).unwrap().1[16..], [0; 4]);
    }

    #[test]
    fn parameters_outside_a_kernels_parameter_space_are_refused() {
        let mut s = Settings::default();
        for (offset, len) in [(-1, 4), (MOST_PARAMETER_BYTES as c_int - 3, 4), (c_int::MAX, 8)] {
            let refused = s.put(offset, &vec![1; len]).unwrap_err();
            assert_eq!(refused.code(), code::INVALID_VALUE, "{offset} + {len}");
        }
        assert!(s.written.is_empty(), "a refused write writes nothing");
        s.put(MOST_PARAMETER_BYTES as c_int - 4, &[1; 4]).unwrap();
        assert_eq!(s.written.len(), MOST_PARAMETER_BYTES);
    }

    #[test]
    fn a_launch_needs_a_block_shape_and_a_grid_of_blocks() {
        let unshaped = Settings::default();
        assert_eq!(unshaped.launch([1, 1]).unwrap_err().code(), code::INVALID_VALUE);
        let shaped = Settings { block: Some([1, 1, 1]), shared: 64, ..Settings::default() };
        for grid in [[0, 1], [1, 0], [-1, 1]] {
            assert_eq!(shaped.launch(grid).unwrap_err().code(), code::INVALID_VALUE, "{grid:?}");
        }
        assert_eq!(shaped.launch([2, 1]).unwrap().0.shared_mem, 64);
    }
}
