//! The limits a launch and a kernel's settings are checked against, shared by the devices so
//! that what fails on a GPU fails the same way on the CPU device.

use ac_proto::backend::{ErrorKind, LaunchDims, WireError};
use serde::{Deserialize, Serialize};

use super::DeviceResult;

/// A context limit as the device set it ([`super::Context::set_limit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limited {
    /// The value in effect, bytes (the driver may round what was asked).
    pub value: u64,
    /// The device memory the limit reserves at that value beyond what its default does, bytes:
    /// a stack for every thread the device holds at once, the printf buffer or heap; 0 at or
    /// below the default, which every context has.
    pub reserved: u64,
}

/// How a launch runs its blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LaunchMode {
    /// Each block whenever the device has room for it.
    Plain,
    /// Every block resident at once, so that blocks may wait for each other (cooperative).
    Cooperative,
    /// In clusters of this many blocks (x, y, z), each cluster's blocks resident at once on one
    /// GPU processing cluster.
    Clustered([u32; 3]),
}

/// The most blocks a cluster may have on any CUDA device (16 on compute capability 9.0, with
/// the kernel's non-portable size allowed; the driver holds the rest of the rules).
pub const MAX_CLUSTER_BLOCKS: u64 = 16;

/// Checks a cluster shape against a launch's grid: each dimension at least 1 and dividing the
/// grid's, at most [`MAX_CLUSTER_BLOCKS`] blocks in all, as CUDA requires.
pub fn check_cluster(dims: &LaunchDims, cluster: [u32; 3]) -> DeviceResult<()> {
    use ac_proto::backend::ErrorKind::InvalidArgument;
    if cluster.contains(&0) || dims.grid.iter().zip(cluster).any(|(&g, c)| g % c != 0) {
        let why = format!("a cluster of {cluster:?} blocks does not divide the grid of {:?}", dims.grid);
        return Err(WireError::new(InvalidArgument, why));
    }
    let blocks = cluster.iter().map(|&c| c as u64).product::<u64>();
    if blocks > MAX_CLUSTER_BLOCKS {
        let why = format!("a cluster of {blocks} blocks: at most {MAX_CLUSTER_BLOCKS}");
        return Err(WireError::new(InvalidArgument, why));
    }
    Ok(())
}

/// Checks a launch shape against the limits CUDA devices share, so that a launch that fails on
/// a GPU fails the same way on the CPU device.
pub fn validate_dims(dims: &LaunchDims) -> DeviceResult<()> {
    use ac_proto::backend::ErrorKind::InvalidArgument;
    if dims.grid.contains(&0) || dims.block.contains(&0) {
        return Err(WireError::new(InvalidArgument, "grid and block dimensions must be at least 1"));
    }
    // Saturating: three u32s can overflow a u64 product, and a wrapped one can look small.
    let threads = dims.block.iter().fold(1u64, |n, &d| n.saturating_mul(d as u64));
    if threads > 1024 {
        return Err(WireError::new(InvalidArgument, format!("{threads} threads per block exceed 1024")));
    }
    if dims.grid[1] > 65_535 || dims.grid[2] > 65_535 {
        return Err(WireError::new(InvalidArgument, "grid y and z must be at most 65535"));
    }
    Ok(())
}

/// The dynamic shared memory a launch may ask for unless its kernel's limit was raised
/// ([`KernelSetting::MaxDynamicShared`]), as on CUDA devices.
pub const DEFAULT_DYNAMIC_SHARED: u32 = 48 << 10;

/// Checks `bytes` of dynamic shared memory against a kernel's `limit`.
pub fn check_shared(bytes: u32, limit: u32) -> DeviceResult<()> {
    if bytes > limit {
        return Err(WireError::new(
            ErrorKind::InvalidArgument,
            format!("{bytes} bytes of dynamic shared memory exceed the kernel's limit of {limit}"),
        ));
    }
    Ok(())
}

/// Checks a preferred shared memory carveout: a percentage, or -1 for none.
pub fn check_carveout(percent: i32) -> DeviceResult<()> {
    if !(-1..=100).contains(&percent) {
        return Err(WireError::new(ErrorKind::InvalidArgument, format!("a carveout of {percent}% is not in -1..=100")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_whose_thread_count_overflows_is_refused() {
        // 2^22 * 2^21 * 2^21 = 2^64: wrapped to 0 it passed as "at most 1024 threads", and with
        // overflow checks it panicked (found by the `kernel_args` fuzz target).
        let dims = LaunchDims::new([1, 1, 1], [1 << 22, 1 << 21, 1 << 21]);
        assert!(validate_dims(&dims).unwrap_err().message.contains("exceed 1024"));
        let dims = LaunchDims::new([1, 1, 1], [u32::MAX, u32::MAX, u32::MAX]);
        assert!(validate_dims(&dims).is_err());
        assert!(validate_dims(&LaunchDims::new([1, 1, 1], [32, 32, 1])).is_ok());
    }

    #[test]
    fn a_cluster_must_divide_its_grid_and_hold_at_most_16_blocks() {
        let dims = LaunchDims::new([8, 4, 1], [32, 1, 1]);
        assert!(check_cluster(&dims, [2, 2, 1]).is_ok() && check_cluster(&dims, [8, 2, 1]).is_ok());
        assert!(check_cluster(&dims, [3, 1, 1]).unwrap_err().message.contains("does not divide the grid"));
        assert!(check_cluster(&dims, [0, 1, 1]).is_err(), "a dimension of 0");
        let err = check_cluster(&dims, [8, 4, 1]).unwrap_err();
        assert!(err.message.contains("a cluster of 32 blocks: at most 16"), "{err:?}");
    }

    #[test]
    fn shared_memory_and_carveouts_are_checked_against_their_limits() {
        assert!(check_shared(DEFAULT_DYNAMIC_SHARED, DEFAULT_DYNAMIC_SHARED).is_ok());
        let err = check_shared(DEFAULT_DYNAMIC_SHARED + 1, DEFAULT_DYNAMIC_SHARED).unwrap_err();
        assert!(
            err.message.contains("49153 bytes of dynamic shared memory exceed the kernel's limit of 49152"),
            "{err:?}"
        );
        assert!(check_carveout(-1).is_ok() && check_carveout(100).is_ok());
        assert!(check_carveout(-2).is_err() && check_carveout(101).is_err());
    }
}
