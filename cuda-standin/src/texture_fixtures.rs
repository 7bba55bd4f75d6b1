//! The kernels of `tests/cuda/textures.cu`, which the stand-in runs by their mangled names as
//! [`crate::fixtures`] runs the others, reading through texture and surface objects as
//! [`crate::textures`] describes. Each thread of the launch's grid that falls inside the
//! kernel's extent does its element; an object of another context, or none, faults.

use crate::kernels::{element, f32_arg, i32_arg, u64_arg, Memory, Shape};
use crate::textures::Object;

/// `sample2d(cudaTextureObject_t tex, float* out, int w, int h, float dx, float dy)`:
/// `out[y * w + x] = tex2D<float>(tex, x + 0.5 + dx, y + 0.5 + dy)`.
pub const SAMPLE_2D_KERNEL: &str = "_Z8sample2dyPfiiff";

/// `sample3d(cudaTextureObject_t tex, float* out, int w, int h, int d)`:
/// `out[(z * h + y) * w + x] = tex3D<float>(tex, x + 0.5, y + 0.5, z + 0.5)`.
pub const SAMPLE_3D_KERNEL: &str = "_Z8sample3dyPfiii";

/// `fetch1d(cudaTextureObject_t tex, float* out, int n)`: `out[i] = 2 * tex1Dfetch<float>(tex, i)`.
pub const FETCH_1D_KERNEL: &str = "_Z7fetch1dyPfi";

/// `double_surface(cudaSurfaceObject_t surf, int w, int h)`: each float of the surface's
/// `w` x `h` doubled in place (`surf2Dread`, `surf2Dwrite`).
pub const DOUBLE_SURFACE_KERNEL: &str = "_Z14double_surfaceyii";

/// Parameter sizes of these fixtures, as their sources declare them.
pub fn signature(name: &str) -> Option<&'static [usize]> {
    Some(match name {
        SAMPLE_2D_KERNEL => &[8, 8, 4, 4, 4, 4],
        SAMPLE_3D_KERNEL => &[8, 8, 4, 4, 4],
        FETCH_1D_KERNEL => &[8, 8, 4],
        DOUBLE_SURFACE_KERNEL => &[8, 4, 4],
        _ => return None,
    })
}

/// Runs fixture `name` with the threads of `shape`; `None`: it faulted (or it is no fixture).
pub fn run(name: &str, args: &[Vec<u8>], shape: Shape, memory: &mut dyn Memory) -> Option<()> {
    let object = memory.object(u64_arg(&args[0]))?;
    let int = |i: usize| usize::try_from(i32_arg(&args[i])).ok();
    match name {
        SAMPLE_2D_KERNEL => {
            let (dx, dy) = (f32_arg(&args[4]), f32_arg(&args[5]));
            each(&shape, [int(2)?, int(3)?, 1], |[x, y, _], i| {
                let v = sample(&object, memory, &[x as f32 + 0.5 + dx, y as f32 + 0.5 + dy])?;
                memory.store(element(u64_arg(&args[1]), i)?, &[v])
            })
        }
        SAMPLE_3D_KERNEL => each(&shape, [int(2)?, int(3)?, int(4)?], |[x, y, z], i| {
            let v = sample(&object, memory, &[x, y, z].map(|c| c as f32 + 0.5))?;
            memory.store(element(u64_arg(&args[1]), i)?, &[v])
        }),
        FETCH_1D_KERNEL => each(&shape, [int(2)?, 1, 1], |[x, _, _], i| {
            let v = if x < object.extent[0] { memory.load(object.element_at([x, 0, 0]), 1)?[0] } else { 0.0 };
            memory.store(element(u64_arg(&args[1]), i)?, &[2.0 * v])
        }),
        DOUBLE_SURFACE_KERNEL if object.sampler.is_none() => each(&shape, [int(1)?, int(2)?, 1], |[x, y, _], _| {
            let at = object.surface_element(i64::try_from(x).ok()? * 4, i64::try_from(y).ok()?)?;
            let v = memory.load(at, 1)?[0];
            memory.store(at, &[2.0 * v])
        }),
        _ => None,
    }
}

/// What the texture reads at `coords`.
fn sample(object: &Object, memory: &mut dyn Memory, coords: &[f32]) -> Option<f32> {
    object.sample(coords, &mut |at| memory.load(at, 1).map(|v| v[0]))
}

/// `body` for each thread of `shape` inside `extent` (x, y, z), with its linear index.
fn each(shape: &Shape, extent: [usize; 3], mut body: impl FnMut([usize; 3], i64) -> Option<()>) -> Option<()> {
    let threads: [usize; 3] =
        std::array::from_fn(|d| (shape.grid[d] as usize * shape.block[d] as usize).min(extent[d]));
    for z in 0..threads[2] {
        for y in 0..threads[1] {
            for x in 0..threads[0] {
                body([x, y, z], i64::try_from((z * extent[1] + y) * extent[0] + x).ok()?)?;
            }
        }
    }
    Some(())
}
