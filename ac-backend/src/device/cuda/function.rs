//! What the driver says of a kernel (a `CUfunction`): its parameters' sizes, its attributes, and
//! the attributes a program sets on it.

use std::ffi::c_void;

use ac_proto::backend::{KernelAttributes, KernelSetting, LaunchDims};
use cudarc::driver::sys::{self, CUfunction_attribute as Attribute, CUresult};

use super::driver;
use crate::device::{DeviceResult, LaunchMode};

/// Parameter sizes of a kernel (CUDA 12.4 drivers and newer), or `None`.
pub(super) fn param_sizes(function: sys::CUfunction) -> Option<Vec<usize>> {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*AVAILABLE.get_or_init(|| driver::has_symbol("cuFuncGetParamInfo")) {
        return None;
    }
    let mut sizes = Vec::new();
    loop {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: valid function and out-pointers; an index past the last parameter
        // answers CUDA_ERROR_INVALID_VALUE, which ends the list.
        let code = unsafe { sys::cuFuncGetParamInfo(function, sizes.len(), &mut offset, &mut size) };
        match code {
            CUresult::CUDA_SUCCESS => sizes.push(size),
            CUresult::CUDA_ERROR_INVALID_VALUE => return Some(sizes),
            _ => return None,
        }
    }
}

/// One attribute of a kernel, as the driver answers it.
fn attribute(function: sys::CUfunction, attribute: Attribute) -> DeviceResult<i32> {
    let mut value = 0;
    // SAFETY: a function of the current context and a valid out-pointer.
    driver::check("cuFuncGetAttribute", unsafe { sys::cuFuncGetAttribute(&mut value, attribute, function) })?;
    Ok(value)
}

/// A kernel's attributes, as the driver answers them.
pub(super) fn attributes(function: sys::CUfunction) -> DeviceResult<KernelAttributes> {
    // The driver answers counts and sizes, never negative.
    let count = |a| attribute(function, a).map(|v| u32::try_from(v).unwrap_or(0));
    Ok(KernelAttributes {
        max_threads_per_block: count(Attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        static_shared: count(Attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?,
        constant: count(Attribute::CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES)?,
        local: count(Attribute::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?,
        registers: count(Attribute::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
        ptx_version: count(Attribute::CU_FUNC_ATTRIBUTE_PTX_VERSION)?,
        binary_version: count(Attribute::CU_FUNC_ATTRIBUTE_BINARY_VERSION)?,
        max_dynamic_shared: count(Attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)?,
        preferred_carveout: attribute(function, Attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT)?,
    })
}

/// Sets one of a kernel's attributes; the driver checks the value against the device's limits.
pub(super) fn set_attribute(function: sys::CUfunction, setting: KernelSetting) -> DeviceResult<()> {
    let (attribute, value) = match setting {
        KernelSetting::MaxDynamicShared(bytes) => {
            (Attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, i32::try_from(bytes).unwrap_or(i32::MAX))
        }
        KernelSetting::PreferredCarveout(percent) => {
            (Attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, percent)
        }
        KernelSetting::NonPortableClusterSizeAllowed(allowed) => {
            (Attribute::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, i32::from(allowed))
        }
    };
    // SAFETY: a function of the current context; the driver checks the value.
    driver::check("cuFuncSetAttribute", unsafe { sys::cuFuncSetAttribute(function, attribute, value) })
}

/// Launches `function` (of the current context) on `stream`, its blocks run as `mode` says:
/// the call made and its result.
pub(super) fn launch(
    function: sys::CUfunction,
    dims: &LaunchDims,
    stream: sys::CUstream,
    params: &mut [*mut c_void],
    mode: LaunchMode,
) -> (&'static str, CUresult) {
    let ([gx, gy, gz], [bx, by, bz]) = (dims.grid, dims.block);
    let params = params.as_mut_ptr();
    // SAFETY: (the caller's) one pointer per parameter, each to its first 8-byte slot, holding
    // the value in its first bytes (a wider parameter in the consecutive slots after it); the
    // driver copies the values before returning.
    unsafe {
        match mode {
            LaunchMode::Plain => {
                let null = std::ptr::null_mut();
                let code = sys::cuLaunchKernel(function, gx, gy, gz, bx, by, bz, dims.shared_mem, stream, params, null);
                ("cuLaunchKernel", code)
            }
            LaunchMode::Cooperative => {
                let code =
                    sys::cuLaunchCooperativeKernel(function, gx, gy, gz, bx, by, bz, dims.shared_mem, stream, params);
                ("cuLaunchCooperativeKernel", code)
            }
            LaunchMode::Clustered(cluster) => {
                let mut attribute = cluster_attribute(cluster);
                let config = config(dims, stream, &mut attribute);
                ("cuLaunchKernelEx", sys::cuLaunchKernelEx(&config, function, params, std::ptr::null_mut()))
            }
        }
    }
}

/// How many clusters of `cluster` blocks of `function` (of the current context), with `dims`'
/// block and dynamic shared memory, the device holds at once.
pub(super) fn max_active_clusters(
    function: sys::CUfunction,
    dims: &LaunchDims,
    cluster: [u32; 3],
) -> DeviceResult<u32> {
    let mut attribute = cluster_attribute(cluster);
    // The grid is the cluster's: the driver asks it to divide into clusters.
    let config = config(&LaunchDims { grid: cluster, ..*dims }, std::ptr::null_mut(), &mut attribute);
    let mut count: std::ffi::c_int = 0;
    // SAFETY: a configuration whose one attribute outlives the call; a valid out-pointer.
    let code = unsafe { sys::cuOccupancyMaxActiveClusters(&mut count, function, &config) };
    driver::check("cuOccupancyMaxActiveClusters", code)?;
    Ok(u32::try_from(count).unwrap_or(0))
}

/// The launch attribute of a cluster of `cluster` blocks.
fn cluster_attribute(cluster: [u32; 3]) -> sys::CUlaunchAttribute {
    // SAFETY: a plain C struct and union, all zeros a valid value.
    let mut attribute: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attribute.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attribute.value.clusterDim.x = cluster[0];
    attribute.value.clusterDim.y = cluster[1];
    attribute.value.clusterDim.z = cluster[2];
    attribute
}

/// A launch configuration of `dims` on `stream` with the one `attribute`, which must outlive it.
fn config(dims: &LaunchDims, stream: sys::CUstream, attribute: &mut sys::CUlaunchAttribute) -> sys::CUlaunchConfig {
    let ([gx, gy, gz], [bx, by, bz]) = (dims.grid, dims.block);
    sys::CUlaunchConfig {
        gridDimX: gx,
        gridDimY: gy,
        gridDimZ: gz,
        blockDimX: bx,
        blockDimY: by,
        blockDimZ: bz,
        sharedMemBytes: dims.shared_mem,
        hStream: stream,
        attrs: attribute,
        numAttrs: 1,
    }
}
