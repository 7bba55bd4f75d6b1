//! Occupancy queries: how many blocks of a kernel fit on a multiprocessor, the dynamic shared
//! memory that leaves each, and the block size that keeps the most threads resident, from the
//! device's architecture limits (`init::attribute_of`), counted as CUDA's own calculator
//! (`cuda_occupancy.h`) counts them.

use std::ffi::{c_int, c_uint};

use ac_frontend::LaunchDims;

use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::module::kernels;
use crate::state::{self, put};

#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessor(
    blocks: *mut c_int,
    function: usize,
    block_size: c_int,
    dynamic_shared: usize,
) -> u32 {
    guard("cuOccupancyMaxActiveBlocksPerMultiprocessor", || {
        if block_size <= 0 {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        let limits = Limits::of_function(function)?;
        put(blocks, limits.blocks_per_multiprocessor(block_size, dynamic_shared))
    })
}

/// A cluster occupancy query's configuration and kernel (looked up on its device).
unsafe fn cluster_query<'a>(
    function: usize,
    config: *const crate::launch_config::LaunchConfig,
) -> CuResult<(&'a crate::launch_config::LaunchConfig, std::sync::Arc<crate::module::Resolved>)> {
    let config = config.as_ref().ok_or(Error::Code(code::INVALID_VALUE))?;
    let kernel = kernels().get(function)?;
    Ok((config, kernel.on(kernel.device()?)?))
}

/// Clusters of `cluster` blocks, with `config`'s block and dynamic shared memory, the remote
/// GPU holds at once.
fn active_clusters(
    resolved: &crate::module::Resolved,
    config: &crate::launch_config::LaunchConfig,
    cluster: [u32; 3],
) -> CuResult<u32> {
    let shim = state::shim()?;
    Ok(shim.block_on(resolved.function.max_active_clusters(config.dims_in(cluster), cluster))?)
}

/// Clusters of a launch's cluster shape (`CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION` in `config`,
/// else the kernel's required one) the remote GPU holds at once, with the launch's block and
/// dynamic shared memory: the remote driver's answer. Without either, refused as CUDA refuses.
#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxActiveClusters(
    clusters: *mut c_int,
    function: usize,
    config: *const crate::launch_config::LaunchConfig,
) -> u32 {
    guard("cuOccupancyMaxActiveClusters", || {
        let (config, resolved) = cluster_query(function, config)?;
        let asked = crate::launch_config::cluster_asked(config)?.or_else(|| resolved.attributes.required_cluster());
        let Some(cluster) = asked else {
            return Err(Error::said(code::INVALID_CLUSTER_SIZE, "no cluster dimension in the launch configuration"));
        };
        crate::launch_config::check_cluster(cluster, cluster, resolved.attributes.most_cluster_blocks())?;
        put(clusters, c_int::try_from(active_clusters(&resolved, config, cluster)?).unwrap_or(c_int::MAX))
    })
}

/// The largest cluster of the launch's block and dynamic shared memory the remote GPU holds at
/// least one of, up to CUDA's portable 8 blocks, or 16 once the kernel allows non-portable
/// sizes: the remote driver asked for 8 (16), 7, ... blocks in x; 1 when none of 2 or more fits.
#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxPotentialClusterSize(
    size: *mut c_int,
    function: usize,
    config: *const crate::launch_config::LaunchConfig,
) -> u32 {
    guard("cuOccupancyMaxPotentialClusterSize", || {
        let (config, resolved) = cluster_query(function, config)?;
        for blocks in (2..=resolved.attributes.most_cluster_blocks() as u32).rev() {
            if active_clusters(&resolved, config, [blocks, 1, 1])? > 0 {
                return put(size, blocks as c_int);
            }
        }
        put(size, 1)
    })
}

/// How many blocks of a launch of `function` with `dims` the device holds at once: a
/// cooperative launch's limit.
pub(crate) fn resident_blocks(function: usize, dims: &LaunchDims) -> CuResult<u64> {
    let limits = Limits::of_function(function)?;
    let threads = dims.block.iter().map(|&d| u64::from(d)).product::<u64>();
    let per_multiprocessor =
        limits.blocks_per_multiprocessor(c_int::try_from(threads).unwrap_or(c_int::MAX), dims.shared_mem as usize);
    Ok(u64::try_from(per_multiprocessor).unwrap_or(0) * u64::try_from(limits.multiprocessors).unwrap_or(0))
}

#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    blocks: *mut c_int,
    function: usize,
    block_size: c_int,
    dynamic_shared: usize,
    _flags: c_uint,
) -> u32 {
    cuOccupancyMaxActiveBlocksPerMultiprocessor(blocks, function, block_size, dynamic_shared)
}

#[no_mangle]
pub unsafe extern "C" fn cuOccupancyAvailableDynamicSMemPerBlock(
    dynamic_shared: *mut usize,
    function: usize,
    blocks: c_int,
    block_size: c_int,
) -> u32 {
    guard("cuOccupancyAvailableDynamicSMemPerBlock", || {
        let limits = Limits::of_function(function)?;
        // As CUDA's calculator: blocks that cannot all fit, even without shared memory, are
        // an invalid request.
        let available = limits.available_dynamic_shared(blocks, block_size).ok_or(Error::Code(code::INVALID_VALUE))?;
        put(dynamic_shared, available)
    })
}

/// What bounds how many blocks share a multiprocessor, as the device's attributes say
/// (`init::attribute_of`: its architecture's limits) and the kernel's (its registers, static
/// shared memory and dynamic shared memory limit, as the backend says: `attributes`; none on a
/// backend too old to say), counted as CUDA's occupancy calculator counts them
/// (`cuda_occupancy.h`).
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// Threads per block, at most.
    threads_per_block: c_int,
    /// Threads per multiprocessor.
    threads: c_int,
    /// Blocks per multiprocessor.
    blocks: c_int,
    /// Shared memory per multiprocessor, bytes.
    shared: usize,
    /// Shared memory a block may have, bytes, the system's reservation included: the kernel's
    /// static shared memory and its dynamic limit (`cuFuncSetAttribute` raises it).
    shared_per_block: usize,
    /// Shared memory the system reserves for each block, bytes, and the kernel's static
    /// shared memory.
    reserved: usize,
    /// Registers per thread (0: not known).
    registers: c_int,
    /// Registers per multiprocessor.
    register_file: c_int,
    /// Multiprocessors on the device.
    multiprocessors: c_int,
}

/// Shared memory is given to blocks in units of this many bytes.
const SHARED_UNIT: usize = 128;

/// Threads in a warp: a block takes whole warps, and block sizes are tried in its multiples.
const WARP: c_int = 32;

/// The warps `threads` threads take.
fn warps(threads: c_int) -> c_int {
    (threads + WARP - 1) / WARP
}

impl Limits {
    /// The limits of the device `function` was loaded on.
    fn of_function(function: usize) -> CuResult<Self> {
        let k = kernels().get(function)?;
        let device = k.device()?;
        let resolved = k.on(device)?;
        let (registers, static_shared) = resolved.attributes.resources(&resolved.function)?.unwrap_or((0, 0));
        let (static_shared, dynamic) =
            (static_shared as usize, resolved.attributes.max_dynamic_shared(&resolved.function)? as usize);
        let shim = state::shim()?;
        let d = shim.devices.get(device).ok_or(Error::Code(code::INVALID_DEVICE))?;
        let attribute = |a| crate::init::attribute_of(d, 0, a);
        let bytes = |a| usize::try_from(attribute(a)).unwrap_or(0);
        let reserved = bytes(111) + static_shared;
        Ok(Self {
            threads_per_block: attribute(1),
            threads: attribute(39),
            blocks: attribute(106),
            shared: bytes(81),
            shared_per_block: reserved + dynamic,
            reserved,
            registers: c_int::try_from(registers).unwrap_or(c_int::MAX),
            register_file: attribute(82),
            multiprocessors: attribute(16),
        })
    }

    /// How many blocks of `warps` warps the register file holds, as `cuda_occupancy.h` counts:
    /// registers are given to warps in units of 256, within each of 4 quarters of the file.
    fn blocks_by_registers(&self, warps: c_int) -> c_int {
        if self.registers <= 0 {
            return c_int::MAX;
        }
        let per_warp = (self.registers.saturating_mul(WARP) + 255) / 256 * 256;
        let warps_per_quarter = (self.register_file / 4) / per_warp;
        warps_per_quarter * 4 / warps
    }

    /// How many blocks of `block_size` threads, each with `dynamic_shared` bytes of dynamic
    /// shared memory, fit on one multiprocessor (0: not even one).
    fn blocks_per_multiprocessor(&self, block_size: c_int, dynamic_shared: usize) -> c_int {
        if block_size <= 0 || block_size > self.threads_per_block {
            return 0;
        }
        let Some(asked) = dynamic_shared.checked_add(self.reserved) else { return 0 };
        // The limit is on what the block asks; the multiprocessor gives it whole units.
        if asked > self.shared_per_block {
            return 0;
        }
        let per_block = asked.next_multiple_of(SHARED_UNIT).max(SHARED_UNIT);
        let by_shared = c_int::try_from(self.shared / per_block).unwrap_or(c_int::MAX);
        let by_warps = (self.threads / WARP) / warps(block_size);
        by_warps.min(self.blocks).min(by_shared).min(self.blocks_by_registers(warps(block_size)))
    }

    /// The block size (`limit` at most when positive; the limit itself, then the multiples of
    /// the warp below it) that keeps the most threads resident on a multiprocessor, the larger
    /// on a tie, with each block's dynamic shared memory as `shared` says for its size; and how
    /// many such blocks fit. (0, 0) when none fits.
    fn best_block_size(&self, limit: c_int, shared: impl Fn(c_int) -> usize) -> (c_int, c_int) {
        let most = if limit > 0 { limit.min(self.threads_per_block) } else { self.threads_per_block };
        let mut best = (0, 0);
        for size in (1..=warps(most)).rev().map(|w| (w * WARP).min(most)) {
            let blocks = self.blocks_per_multiprocessor(size, shared(size));
            if blocks * size > best.0 * best.1 {
                best = (size, blocks);
            }
        }
        best
    }

    /// The most dynamic shared memory each of `blocks` blocks of `block_size` threads may have
    /// for all of them to fit on one multiprocessor; `None` when they cannot, even without any.
    fn available_dynamic_shared(&self, blocks: c_int, block_size: c_int) -> Option<usize> {
        if blocks <= 0 || self.blocks_per_multiprocessor(block_size, 0) < blocks {
            return None;
        }
        // One block may have all that a block may; more share the multiprocessor's.
        let pool = if blocks == 1 { self.shared_per_block } else { self.shared };
        let share = (pool / blocks as usize) / SHARED_UNIT * SHARED_UNIT;
        Some(share.min(self.shared_per_block).saturating_sub(self.reserved))
    }
}

/// `CUoccupancyB2DSize`: the dynamic shared memory a kernel needs for a block size.
type SharedOfBlock = Option<unsafe extern "C" fn(c_int) -> usize>;

#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxPotentialBlockSize(
    min_grid: *mut c_int,
    block: *mut c_int,
    function: usize,
    shared_of_block: SharedOfBlock,
    dynamic_shared: usize,
    limit: c_int,
) -> u32 {
    guard("cuOccupancyMaxPotentialBlockSize", || {
        let limits = Limits::of_function(function)?;
        let shared = |size| match shared_of_block {
            // SAFETY: the caller's function, called as CUDA's occupancy calculator calls it.
            Some(f) => unsafe { f(size) },
            None => dynamic_shared,
        };
        let (size, blocks) = limits.best_block_size(limit, shared);
        put(block, size)?;
        put(min_grid, blocks * limits.multiprocessors)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxPotentialBlockSizeWithFlags(
    min_grid: *mut c_int,
    block: *mut c_int,
    function: usize,
    shared_of_block: SharedOfBlock,
    dynamic_shared: usize,
    limit: c_int,
    _flags: c_uint,
) -> u32 {
    cuOccupancyMaxPotentialBlockSize(min_grid, block, function, shared_of_block, dynamic_shared, limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Hopper multiprocessor's limits, as `init::attribute_of` gives them.
    const HOPPER: Limits = Limits {
        threads_per_block: 1024,
        threads: 2048,
        blocks: 32,
        shared: 228 << 10,
        shared_per_block: 48 << 10,
        reserved: 1 << 10,
        registers: 0,
        register_file: 65536,
        multiprocessors: 132,
    };

    #[test]
    fn a_block_at_its_kernels_limit_fits_whatever_its_static_shared_memory() {
        // 1,000 bytes of static shared memory (not a multiple of the 128-byte unit), a 64 KiB
        // limit, a launch asking all of it: 3 blocks of 67,584 bytes (whole units) in 228 KiB,
        // not none.
        let reserved = (1 << 10) + 1000;
        let limits = Limits { reserved, shared_per_block: reserved + (64 << 10), ..HOPPER };
        assert_eq!(limits.blocks_per_multiprocessor(256, 64 << 10), 3);
        assert_eq!(limits.blocks_per_multiprocessor(256, (64 << 10) + 1), 0, "over its limit");
    }

    #[test]
    fn registers_bound_the_blocks_as_cudas_calculator_counts() {
        // 64 registers a thread: 2,048 a warp, 8 warps a quarter of the file, 32 an SM.
        let limits = Limits { registers: 64, ..HOPPER };
        assert_eq!(limits.blocks_per_multiprocessor(256, 0), 4);
        // 40 registers round up to 1,280 a warp: 12 warps a quarter, 48 an SM.
        let limits = Limits { registers: 40, ..HOPPER };
        assert_eq!(limits.blocks_per_multiprocessor(128, 0), 12);
        assert_eq!(Limits { registers: 255, ..HOPPER }.blocks_per_multiprocessor(1024, 0), 0);
    }

    #[test]
    fn blocks_are_bounded_by_warps_blocks_and_shared_memory() {
        assert_eq!(HOPPER.blocks_per_multiprocessor(256, 0), 8, "64 warps");
        assert_eq!(HOPPER.blocks_per_multiprocessor(100, 0), 16, "100 threads take 4 warps");
        assert_eq!(HOPPER.blocks_per_multiprocessor(32, 0), 32, "32 blocks");
        // 40 KiB each, 1 KiB reserved: five of 41 KiB fit in 228 KiB, six do not.
        assert_eq!(HOPPER.blocks_per_multiprocessor(128, 40 << 10), 5);
        assert_eq!(HOPPER.blocks_per_multiprocessor(128, 47 << 10), 4, "47 KiB + 1 KiB: the default limit");
        assert_eq!(HOPPER.blocks_per_multiprocessor(128, (47 << 10) + 1), 0, "over the default limit");
        assert_eq!(HOPPER.blocks_per_multiprocessor(128, usize::MAX), 0);
        assert_eq!(HOPPER.blocks_per_multiprocessor(2048, 0), 0, "over the block's thread limit");
        assert_eq!(HOPPER.blocks_per_multiprocessor(0, 0), 0);
    }

    #[test]
    fn the_dynamic_shared_memory_available_lets_exactly_that_many_blocks_fit() {
        for block_size in [32, 64, 100, 128, 256, 512, 1024] {
            for blocks in 1..=HOPPER.blocks_per_multiprocessor(block_size, 0) {
                let available = HOPPER.available_dynamic_shared(blocks, block_size).expect("they fit");
                let fit = HOPPER.blocks_per_multiprocessor(block_size, available);
                assert!(fit >= blocks, "{blocks} x {block_size}: {available} bytes let {fit} fit");
                let more = HOPPER.blocks_per_multiprocessor(block_size, available + SHARED_UNIT);
                assert!(
                    more < blocks,
                    "{blocks} x {block_size}: {available} + {SHARED_UNIT} bytes still let {more} fit"
                );
            }
        }
        assert_eq!(HOPPER.available_dynamic_shared(1, 1024), Some(47 << 10), "one block: the default limit");
        // cuda_occupancy.h's figure for 8 blocks of 256 on Hopper: 228 KiB / 8, less the reserve.
        assert_eq!(HOPPER.available_dynamic_shared(8, 256), Some(29_184 - 1024));
        assert_eq!(HOPPER.available_dynamic_shared(3, 1024), None, "three blocks of 1,024 threads never fit");
        assert_eq!(HOPPER.available_dynamic_shared(0, 256), None);
    }

    #[test]
    fn the_best_block_size_keeps_the_most_threads_resident() {
        // No shared memory: 1,024 threads a block, two blocks, 2,048 threads (the largest of the
        // sizes that reach them).
        assert_eq!(HOPPER.best_block_size(0, |_| 0), (1024, 2));
        // Up to 200: 200 itself (7 warps, 9 blocks) keeps 1,800; 128 x 16 and 64 x 32 keep
        // 2,048: the larger.
        assert_eq!(HOPPER.best_block_size(200, |_| 0), (128, 16));
        assert_eq!(HOPPER.best_block_size(16, |_| 0), (16, 32), "a limit under a warp is tried");
        // 100 bytes a thread: 512 threads and more are over the default limit; 256 x 8 keeps
        // 2,048 (26.6 KiB each), more than any other size.
        assert_eq!(HOPPER.best_block_size(0, |size| size as usize * 100), (256, 8));
        assert_eq!(HOPPER.best_block_size(0, |_| 48 << 10), (0, 0), "nothing fits");
    }
}
