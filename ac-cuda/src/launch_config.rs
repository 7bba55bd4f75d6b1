//! What a launch configuration asks (`CUlaunchConfig`, `cuLaunchKernelEx`'s and the cluster
//! occupancy queries'): its shape, its attributes, and a cluster shape checked as CUDA checks
//! it.

use std::ffi::c_uint;

use ac_frontend::LaunchDims;

use crate::error::{code, CuResult, Error};

/// `CUlaunchConfig`.
#[repr(C)]
#[derive(Debug)]
pub struct LaunchConfig {
    pub(crate) grid: [c_uint; 3],
    block: [c_uint; 3],
    shared: c_uint,
    pub(crate) stream: usize,
    attrs: *const LaunchAttribute,
    num_attrs: c_uint,
}

/// `CUlaunchAttribute`: an id, padding to 8 bytes, and a 64-byte value (`CUlaunchAttributeValue`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct LaunchAttribute {
    pub(crate) id: c_uint,
    pad: [u8; 4],
    value: [u8; 64],
}

impl LaunchAttribute {
    /// The value's `i`th 32-bit word.
    pub(crate) fn word(&self, i: usize) -> u32 {
        u32::from_ne_bytes(self.value[4 * i..4 * i + 4].try_into().expect("4 bytes"))
    }

    /// The value's first 8 bytes, as a handle (`CUevent`).
    pub(crate) fn handle(&self) -> usize {
        u64::from_ne_bytes(self.value[..8].try_into().expect("8 bytes")) as usize
    }
}

/// The cluster shape a `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION` attribute asks for: `None` for
/// one block (a dimension of 0 counts as 1, as CUDA takes it).
pub(crate) fn cluster_of(attribute: &LaunchAttribute) -> Option<[u32; 3]> {
    let cluster = [0, 1, 2].map(|i| attribute.word(i).max(1));
    (cluster != [1, 1, 1]).then_some(cluster)
}

/// The cluster shape `config` asks for, if any.
pub(crate) fn cluster_asked(config: &LaunchConfig) -> CuResult<Option<[u32; 3]>> {
    Ok(config.attributes()?.iter().filter(|a| a.id == 4).find_map(cluster_of))
}

impl LaunchConfig {
    /// Its attributes.
    pub(crate) fn attributes(&self) -> CuResult<&[LaunchAttribute]> {
        match self.num_attrs {
            0 => Ok(&[]),
            _ if self.attrs.is_null() => Err(Error::Code(code::INVALID_VALUE)),
            // SAFETY: the caller's array of `num_attrs` attributes.
            n => Ok(unsafe { std::slice::from_raw_parts(self.attrs, n as usize) }),
        }
    }

    /// Its block and dynamic shared memory, in a grid of `grid`.
    pub(crate) fn dims_in(&self, grid: [u32; 3]) -> LaunchDims {
        LaunchDims { grid, block: self.block, shared_mem: self.shared }
    }
}

/// Checks a cluster shape against a grid and the kernel's most blocks a cluster
/// (`Attributes::most_cluster_blocks`; see `launch::Prepared::in_clusters`).
pub(crate) fn check_cluster(grid: [u32; 3], cluster: [u32; 3], most: u64) -> CuResult<()> {
    if cluster.contains(&0) || grid.iter().zip(cluster).any(|(&g, c)| g % c != 0) {
        return Err(Error::said(code::INVALID_VALUE, format!("a cluster of {cluster:?} blocks in a grid of {grid:?}")));
    }
    let blocks = cluster.iter().map(|&c| u64::from(c)).product::<u64>();
    if blocks > most {
        let why = match most {
            8 => format!(
                "a cluster of {blocks} blocks: more than the portable 8 needs the kernel's \
                 cudaFuncAttributeNonPortableClusterSizeAllowed (backend protocol 13)"
            ),
            _ => format!("a cluster of {blocks} blocks: more than {most}"),
        };
        return Err(Error::said(code::INVALID_CLUSTER_SIZE, why));
    }
    Ok(())
}
