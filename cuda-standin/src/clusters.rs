//! Thread block clusters (`cuLaunchKernelEx` with `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`,
//! compute capability 9.0): a launch whose blocks run in clusters, refused as the driver
//! refuses it (a cluster that does not divide the grid: `CUDA_ERROR_INVALID_VALUE`; more than
//! the portable 8 blocks, or than 16 for a kernel that allows non-portable sizes:
//! `CUDA_ERROR_INVALID_CLUSTER_SIZE`); the kernel then runs with its cluster shape, which the test fixtures
//! read (a block's rank in its cluster). And `cuOccupancyMaxActiveClusters`.

use std::ffi::{c_int, c_uint, c_void};

use crate::cooperative::blocks_per_multiprocessor;
use crate::kernels::Shape;
use crate::state::MULTIPROCESSORS;
use crate::{code, driver, id, launch, Handle};

/// `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`.
const CLUSTER_DIMENSION: c_uint = 4;
/// Multiprocessors of one GPU processing cluster, where a cluster's blocks all run: an H100's
/// (132 multiprocessors, in GPCs of 16 to 18).
const GPC_MULTIPROCESSORS: u64 = 16;

/// `CUlaunchConfig`.
#[repr(C)]
pub struct LaunchConfig {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared: c_uint,
    stream: Handle,
    attrs: *const LaunchAttribute,
    num_attrs: c_uint,
}

/// `CUlaunchAttribute`: an id, padding, a 64-byte value.
#[repr(C)]
pub struct LaunchAttribute {
    id: c_uint,
    pad: [u8; 4],
    value: [c_uint; 16],
}

impl LaunchConfig {
    /// The launch's shape, its cluster's from the attributes; any other attribute is refused.
    unsafe fn shape(&self) -> Result<Shape, u32> {
        let mut shape = Shape::of(self.grid, self.block);
        let attributes = match self.num_attrs {
            0 => &[][..],
            _ if self.attrs.is_null() => return Err(code::INVALID_VALUE),
            n => std::slice::from_raw_parts(self.attrs, n as usize),
        };
        for attribute in attributes {
            match attribute.id {
                CLUSTER_DIMENSION => shape.cluster = [0, 1, 2].map(|i| attribute.value[i].max(1)),
                _ => return Err(code::NOT_SUPPORTED),
            }
        }
        Ok(shape)
    }
}

/// Checks a cluster shape of `function`'s against its grid, as the driver does: at most the
/// portable 8 blocks, or 16 once the kernel allows non-portable sizes (an H100's most).
fn check(shape: &Shape, function: Handle) -> Result<(), u32> {
    if shape.grid.iter().zip(shape.cluster).any(|(&g, c)| g % c != 0) {
        return Err(code::INVALID_VALUE);
    }
    let non_portable = driver().functions.get(&id(function)).is_some_and(|f| f.non_portable);
    let most = if non_portable { 16 } else { 8 };
    if shape.cluster.iter().map(|&c| c as u64).product::<u64>() > most {
        return Err(code::INVALID_CLUSTER_SIZE);
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernelEx(
    config: *const LaunchConfig,
    function: Handle,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> u32 {
    let Some(config) = config.as_ref() else { return code::INVALID_VALUE };
    let shape = match config.shape().and_then(|shape| check(&shape, function).map(|()| shape)) {
        Ok(shape) => shape,
        Err(e) => return e,
    };
    launch("cuLaunchKernelEx", function, shape, config.shared, config.stream, params, extra)
}

#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxActiveClusters(
    clusters: *mut c_int,
    function: Handle,
    config: *const LaunchConfig,
) -> u32 {
    let Some(config) = config.as_ref() else { return code::INVALID_VALUE };
    let shape = match config.shape().and_then(|shape| check(&shape, function).map(|()| shape)) {
        Ok(shape) if shape.cluster != [1, 1, 1] => shape,
        Ok(_) => return code::INVALID_CLUSTER_SIZE,
        Err(e) => return e,
    };
    // Each GPC holds whole clusters of the blocks its multiprocessors hold at once.
    let per_gpc = GPC_MULTIPROCESSORS * blocks_per_multiprocessor(shape.block);
    let blocks = shape.cluster.iter().map(|&c| c as u64).product::<u64>();
    let count = (per_gpc / blocks) * (MULTIPROCESSORS / GPC_MULTIPROCESSORS);
    *clusters = c_int::try_from(count).unwrap_or(c_int::MAX);
    code::SUCCESS
}
