//! Kernel argument layouts as a backend checks a launch (`control.rs::prepare_launch`): the
//! wire arguments against the kernel's parameter kinds, the launch shape, pointers resolved
//! into allocations (offset inside the allocation, as `resolve_pointer` guarantees), a
//! builtin's memory footprint, and the argument array laid out for `cuLaunchKernel` against
//! the parameter sizes read from the image. Asserts: no panic; a layout is made only when the
//! count and every width match (a parameter of another width than 4 or 8 as its 8-byte
//! pieces), one 8-byte slot per argument holding its value.
#![no_main]

use ac_backend::device::cuda::args;
use ac_backend::device::{builtin, check_signature, validate_dims, DeviceArg, DeviceMem, Kernel};
use ac_proto::backend::{BufferId, DevicePtr, KernelArg, LaunchDims, ParamKind};
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
enum Arg {
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    /// A pointer `offset` bytes into an allocation of `size` bytes at device address `base`.
    Mem {
        base: u64,
        size: u64,
        offset: u64,
    },
}

#[derive(Debug, Arbitrary)]
struct Launch {
    /// A builtin kernel's index, or another (loaded) kernel's.
    kernel: u8,
    /// Parameter kinds the device knows (`None`: unknown), by `ParamKind` index.
    params: Option<Vec<u8>>,
    /// Parameter sizes read from the image (`None`: unknown).
    sizes: Option<Vec<u8>>,
    args: Vec<Arg>,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem: u32,
}

const KINDS: [ParamKind; 7] =
    [ParamKind::U32, ParamKind::I32, ParamKind::U64, ParamKind::I64, ParamKind::F32, ParamKind::F64, ParamKind::Ptr];

/// Device addresses are canonical user-space addresses (below 2^47), and an allocation lies
/// inside that space.
fn allocation(base: u64, size: u64, offset: u64) -> DeviceArg {
    let base = base & ((1 << 47) - 1);
    let size = size % ((1 << 47) - base + 1);
    let offset = offset % (size + 1);
    DeviceArg::Mem { mem: DeviceMem(base), offset, len: size - offset }
}

fuzz_target!(|launch: Launch| {
    let builtin = builtin::KERNELS.get(launch.kernel as usize);
    let name = builtin.map_or("user_kernel", |(name, _)| name);
    let params = match builtin {
        Some((_, kinds)) => Some(kinds.to_vec()),
        None => launch.params.map(|p| p.iter().map(|&k| KINDS[k as usize % KINDS.len()]).collect()),
    };
    let sizes: Option<Vec<usize>> = launch.sizes.map(|s| s.iter().map(|&b| b as usize).collect());
    let kernel = Kernel { handle: 1, name: name.to_string(), params, sizes: sizes.clone() };
    let wire: Vec<KernelArg> = launch
        .args
        .iter()
        .map(|a| match *a {
            Arg::U32(v) => KernelArg::U32(v),
            Arg::I32(v) => KernelArg::I32(v),
            Arg::U64(v) => KernelArg::U64(v),
            Arg::I64(v) => KernelArg::I64(v),
            Arg::F32(v) => KernelArg::F32(v),
            Arg::F64(v) => KernelArg::F64(v),
            Arg::Mem { offset, .. } => KernelArg::Ptr(DevicePtr { buffer: BufferId(1), offset }),
        })
        .collect();
    if check_signature(&kernel, &wire).is_err() {
        return;
    }
    let dims = LaunchDims { grid: launch.grid, block: launch.block, shared_mem: launch.shared_mem };
    let _ = validate_dims(&dims);
    let resolved: Vec<DeviceArg> = launch
        .args
        .iter()
        .zip(&wire)
        .map(|(a, w)| match *a {
            Arg::Mem { base, size, offset } => allocation(base, size, offset),
            _ => DeviceArg::Scalar(*w),
        })
        .collect();
    if builtin.is_some() {
        let _ = builtin::check_footprint(name, &resolved);
    }
    if let Ok(packed) = args::pack(name, &resolved, sizes.as_deref()) {
        let sizes = sizes.expect("a layout needs the sizes");
        assert_eq!(packed.slots.len(), resolved.len());
        assert_eq!(packed.starts.len(), sizes.len());
        // Each parameter starts where the ones before it ended: one slot for 4 and 8 bytes
        // (of that width), else its 8-byte pieces.
        let mut at = 0;
        for (&start, &size) in packed.starts.iter().zip(&sizes) {
            assert_eq!(start, at);
            let pieces = args::pieces(size);
            for arg in &resolved[at..at + pieces] {
                let width = if size == 4 || size == 8 { size } else { 8 };
                assert_eq!(args::width(arg), width);
            }
            at += pieces;
        }
        assert_eq!(at, resolved.len());
        for (slot, arg) in packed.slots.iter().zip(&resolved) {
            if let DeviceArg::Mem { mem, offset, .. } = arg {
                assert_eq!(*slot, mem.0 + offset);
            }
        }
    }
});
