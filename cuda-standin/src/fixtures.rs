//! The test fixtures of the later CUDA programs, which the stand-in runs by their mangled names
//! as [`crate::kernels`] runs the others: `tests/cuda/managed_variables.cu`'s (a module's
//! `__managed__` variables), `tests/cuda/clusters.cu`'s (a launch's cluster shape) and
//! `tests/cuda/tensor_maps.cu`'s (a tensor map's boxes); [`textures`] holds `tests/cuda/textures.cu`'s.

use crate::kernels::{element, i32_arg, int_elements, u64_arg, Memory, Shape};
use crate::tensor_maps::Descriptor;

mod textures;

/// `tally(const int* x, int n)` of `tests/cuda/managed_variables.cu`: for `i < n`, one element a
/// thread, `totals[i % 4] += (int)(gain * x[i])` and `histogram[x[i] % 1024] += 1`, with the
/// module's `__managed__` variables `int totals[4]`, `float gain` and `int histogram[1024]`.
pub const TALLY_KERNEL: &str = "_Z5tallyPKii";

/// `add_to(int* p, int v, int n)` of `tests/cuda/managed_variables.cu`: `p[i] += v` for `i < n`,
/// one element a thread.
pub const ADD_TO_KERNEL: &str = "_Z6add_toPiii";

/// `ranks(int* out)` of `tests/cuda/clusters.cu`: each block's thread 0 writes
/// `out[its linear block index] = its rank in its cluster + 1000 * the cluster's blocks`
/// (cooperative groups' `this_cluster()`), so that a launch's cluster shape shows.
pub const RANKS_KERNEL: &str = "_Z5ranksPi";

/// `tiles(const __grid_constant__ CUtensorMap map, float* out, int width)` of
/// `tests/cuda/tensor_maps.cu`: block (x, y) copies the map's box at (x, y) times the box's
/// shape (a 2-D float tensor's) into `out`, rows `width` floats apart, elements past the
/// tensor's edge zero or NaN as the map says; a map no encoding made faults.
pub const TILES_KERNEL: &str = "_Z5tiles14CUtensorMap_stPfi";

/// Parameter sizes of a kernel the stand-in runs: a builtin or test fixture of
/// [`crate::kernels`], or one of these.
pub fn any_signature(name: &str) -> Option<Vec<usize>> {
    crate::kernels::signature(name).or_else(|| signature(name).map(<[usize]>::to_vec))
}

/// Parameter sizes of these fixtures, as their sources declare them.
pub fn signature(name: &str) -> Option<&'static [usize]> {
    Some(match name {
        TALLY_KERNEL => &[8, 4],
        ADD_TO_KERNEL => &[8, 4, 4],
        RANKS_KERNEL => &[8],
        TILES_KERNEL => &[128, 8, 4],
        _ => return textures::signature(name),
    })
}

/// Runs fixture `name` (whose arguments were checked against [`signature`]) with the threads of
/// `shape`; `None`: it faulted (or it is no fixture).
pub fn run(name: &str, args: &[Vec<u8>], shape: Shape, memory: &mut dyn Memory) -> Option<()> {
    match name {
        TALLY_KERNEL => {
            let (x, n) = (u64_arg(&args[0]), i32_arg(&args[1]));
            let (totals, histogram) = (memory.variable("totals")?, memory.variable("histogram")?);
            let gain = memory.load(memory.variable("gain")?, 1)?[0];
            for i in int_elements(&shape, n) {
                let v = load_i32(memory, element(x, i)?)?;
                add_i32(memory, element(totals, i % 4)?, (gain * v as f32) as i32)?;
                add_i32(memory, element(histogram, i64::from(v % 1024))?, 1)?;
            }
            Some(())
        }
        ADD_TO_KERNEL => {
            let (p, v) = (u64_arg(&args[0]), i32_arg(&args[1]));
            for i in int_elements(&shape, i32_arg(&args[2])) {
                add_i32(memory, element(p, i)?, v)?;
            }
            Some(())
        }
        RANKS_KERNEL => {
            let out = u64_arg(&args[0]);
            let ([gx, gy, gz], [cx, cy, cz]) = (shape.grid.map(u64::from), shape.cluster.map(u64::from));
            for (bz, by, bx) in (0..gz).flat_map(|z| (0..gy).flat_map(move |y| (0..gx).map(move |x| (z, y, x)))) {
                let rank = bx % cx + (by % cy) * cx + (bz % cz) * cx * cy;
                let at = out.checked_add((bx + by * gx + bz * gx * gy).checked_mul(4)?)?;
                memory.store_u32(at, &[(rank + 1000 * cx * cy * cz) as u32])?;
            }
            Some(())
        }
        TILES_KERNEL => tiles(&Descriptor::decode(&args[0])?, u64_arg(&args[1]), i32_arg(&args[2]), shape, memory),
        _ => textures::run(name, args, shape, memory),
    }
}

/// `tiles`' blocks over the tensor `map` describes, into `out`.
fn tiles(map: &Descriptor, out: u64, width: i32, shape: Shape, memory: &mut dyn Memory) -> Option<()> {
    if map.im2col || map.data_type != 7 || map.dims.len() != 2 {
        return None; // a 2-D float tensor's boxes are what the kernel reads
    }
    let [box_x, box_y] = [map.box_dims[0], map.box_dims[1]].map(u64::from);
    let [grid_x, grid_y] = [shape.grid[0], shape.grid[1]].map(u64::from);
    let points = (0..grid_y * box_y).flat_map(|y| (0..grid_x * box_x).map(move |x| (x, y)));
    for (x, y) in points {
        let value = if x < map.dims[0] && y < map.dims[1] {
            memory.load(map.address.checked_add(y.checked_mul(map.strides[0])?.checked_add(x * 4)?)?, 1)?[0]
        } else if map.nan_fill {
            f32::NAN
        } else {
            0.0
        };
        memory.store(element(out, i64::try_from(y).ok()? * i64::from(width) + i64::try_from(x).ok()?)?, &[value])?;
    }
    Some(())
}

/// The `int` at `at`.
fn load_i32(memory: &mut dyn Memory, at: u64) -> Option<i32> {
    Some(memory.load(at, 1)?[0].to_bits() as i32)
}

/// `*at += v` on the `int` at `at` (wrapping, as a GPU's integer add).
fn add_i32(memory: &mut dyn Memory, at: u64, v: i32) -> Option<()> {
    let sum = load_i32(memory, at)?.wrapping_add(v);
    memory.store_u32(at, &[sum as u32])
}
