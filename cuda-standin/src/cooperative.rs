//! Cooperative launches (`cuLaunchCooperativeKernel`): a launch whose blocks must all be
//! resident at once, refused (`CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE`) when the grid holds
//! more blocks than the device does; the kernel then runs as any other.

use std::ffi::{c_uint, c_void};

use crate::state::{MULTIPROCESSORS, THREADS_PER_MULTIPROCESSOR};
use crate::{code, launch, Handle};

/// Blocks a multiprocessor holds at once, at most: a cooperative launch's bound with the
/// thread limit (64 warps a multiprocessor), as on an H100.
const RESIDENT_BLOCKS: u64 = 32;

/// Blocks of `block` threads a multiprocessor holds at once.
pub fn blocks_per_multiprocessor(block: [c_uint; 3]) -> u64 {
    let warps = block.iter().fold(1u64, |n, &d| n.saturating_mul(d as u64)).div_ceil(32).max(1);
    (THREADS_PER_MULTIPROCESSOR / 32 / warps).min(RESIDENT_BLOCKS)
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // the driver API's signature
pub unsafe extern "C" fn cuLaunchCooperativeKernel(
    function: Handle,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared: c_uint,
    stream: Handle,
    params: *mut *mut c_void,
) -> u32 {
    // Every block resident at once: no more than the multiprocessors hold.
    let blocks = [grid_x, grid_y, grid_z].iter().fold(1u64, |n, &d| n.saturating_mul(d as u64));
    if blocks > blocks_per_multiprocessor([block_x, block_y, block_z]) * MULTIPROCESSORS {
        return code::COOPERATIVE_LAUNCH_TOO_LARGE;
    }
    let shape = crate::kernels::Shape::of([grid_x, grid_y, grid_z], [block_x, block_y, block_z]);
    launch("cuLaunchCooperativeKernel", function, shape, shared, stream, params, std::ptr::null_mut())
}
