//! CUDA arrays, texture objects and surface objects (`cuArray3DCreate`, `cuMemcpy3DAsync`
//! between device memory and an array, `cuTexObjectCreate`, `cuSurfObjectCreate`), and how the
//! `textures` fixtures read through them. An array is device memory of its context laid out
//! row after row, slice after slice (a GPU's layout is its own, which only copies and texture
//! reads see). A texture reads as a GPU's texture unit does ([`sampling`]).
//!
//! Violations: an array destroyed, or memory freed, while an object reads it (the backend must
//! hold both for as long as its objects live); memory or arrays of another context; a copy
//! outside its array. The descriptors are read as `cuda.h` lays them out, as 8-byte words
//! (every 32-bit enumeration of `CUDA_MEMCPY3D` is followed by a pointer).

use std::ffi::c_void;

mod sampling;

pub use sampling::{element_bytes, Array, Object, Sampler};

use crate::state::{Driver, Op};
use crate::{code, id, with_context, Handle};

#[no_mangle]
pub unsafe extern "C" fn cuArray3DCreate_v2(out: *mut Handle, descriptor: *const [u64; 5]) -> u32 {
    with_context("cuArray3DCreate", |d, context| {
        if out.is_null() || descriptor.is_null() {
            return Err(code::INVALID_VALUE);
        }
        // SAFETY: the caller passes a CUDA_ARRAY3D_DESCRIPTOR, five words.
        let [width, height, depth, format_channels, flags] = unsafe { *descriptor };
        let (format, channels) = (format_channels as u32, format_channels >> 32);
        let element = element_bytes(format, channels).ok_or(code::INVALID_VALUE)?;
        // A 1-D layered array (`CUDA_ARRAY3D_LAYERED`) has layers and no rows; any other with
        // slices has rows.
        let layered = flags & 0x01 != 0;
        if width == 0 || (height == 0 && depth > 0 && !layered) || (layered && depth == 0) {
            return Err(code::INVALID_VALUE);
        }
        let extent = [width, height.max(1), depth.max(1)].map(|n| n as usize);
        let bytes = extent.iter().try_fold(element, |n, &d| n.checked_mul(d)).ok_or(code::INVALID_VALUE)?;
        let address = d.alloc(context, bytes)?;
        let handle = d.handle();
        let surface_ldst = flags & 0x02 != 0;
        d.arrays.insert(handle, Array { context, address, extent, element, format, surface_ldst });
        // SAFETY: checked non-null above.
        unsafe { *out = handle as Handle };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuArrayDestroy(array: Handle) -> u32 {
    with_context("cuArrayDestroy", |d, context| {
        let owner = d.arrays.get(&id(array)).map(|a| a.context);
        crate::owned(d, "array", owner, context)?;
        if d.objects.values().any(|o| o.array == Some(id(array))) {
            d.violation(format!("array {:#x} destroyed while a texture or surface object reads it", id(array)));
        }
        let gone = d.arrays.remove(&id(array)).expect("owned above");
        d.memory.remove(&gone.address);
        Ok(())
    })
}

/// Records a violation when a texture object reads the allocation of `len` bytes at `base`,
/// which is being freed.
pub fn check_unread(d: &mut Driver, base: u64, len: usize) {
    let reads = |o: &Object| o.array.is_none() && o.address >= base && o.address < base + len as u64;
    if d.objects.values().any(reads) {
        d.violation(format!("memory at {base:#x} freed while a texture object reads it"));
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpy3DAsync_v2(copy: *const [u64; 25], stream: Handle) -> u32 {
    with_context("cuMemcpy3DAsync", |d, context| {
        if copy.is_null() {
            return Err(code::INVALID_VALUE);
        }
        let stream = d.stream(context, id(stream))?;
        // SAFETY: the caller passes a CUDA_MEMCPY3D, 25 words.
        let w = unsafe { *copy };
        let (src, dst) = (side(d, context, &w[0..11])?, side(d, context, &w[11..22])?);
        let [width, rows, slices] = [w[22], w[23], w[24]].map(|n| n as usize);
        for (z, y) in (0..slices).flat_map(|z| (0..rows).map(move |y| (z, y))) {
            let (from, to) = (src.at(y, z), dst.at(y, z));
            for (at, s) in [(from, &src), (to, &dst)] {
                if d.locate(context, at, width).is_none() || s.past_row(width) {
                    d.violation(format!("cuMemcpy3DAsync of {width} bytes a row at {at:#x}, outside its memory"));
                    return Err(code::INVALID_VALUE);
                }
            }
            d.queue(stream, Op::DtoD { dst: to, src: from, len: width });
        }
        Ok(())
    })
}

/// One side of a 3-D copy: its first byte, pitches, and for an array its row's bytes and x.
struct Side {
    start: u64,
    pitch: usize,
    slice: usize,
    /// An array's bytes a row and the side's x in bytes: a row must not run past it.
    row: Option<(usize, usize)>,
}

impl Side {
    fn at(&self, y: usize, z: usize) -> u64 {
        self.start + (z * self.slice + y * self.pitch) as u64
    }

    fn past_row(&self, width: usize) -> bool {
        self.row.is_some_and(|(row, x)| x + width > row)
    }
}

/// The side `w` describes (x, y, z, lod, type, host, device, array, reserved, pitch, height):
/// device memory or an array of `context`.
fn side(d: &mut Driver, context: u64, w: &[u64]) -> Result<Side, u32> {
    let [x, y, z] = [w[0], w[1], w[2]].map(|n| n as usize);
    match w[4] as u32 {
        2 => {
            let (pitch, height) = (w[9] as usize, w[10] as usize);
            let start = w[6] + (z * pitch * height + y * pitch + x) as u64;
            Ok(Side { start, pitch, slice: pitch * height, row: None })
        }
        3 => {
            let owner = d.arrays.get(&w[7]).map(|a| a.context);
            crate::owned(d, "array", owner, context)?;
            let a = &d.arrays[&w[7]];
            let row = a.extent[0] * a.element;
            let start = a.address + (z * row * a.extent[1] + y * row + x) as u64;
            Ok(Side { start, pitch: row, slice: row * a.extent[1], row: Some((row, x)) })
        }
        _ => {
            d.violation("cuMemcpy3DAsync with a side other than device memory or an array".into());
            Err(code::NOT_SUPPORTED)
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuTexObjectCreate(
    out: *mut u64,
    resource: *const [u64; 18],
    texture: *const [u32; 26],
    view: *const c_void,
) -> u32 {
    if texture.is_null() || !view.is_null() {
        return code::INVALID_VALUE;
    }
    // SAFETY: the caller passes a CUDA_TEXTURE_DESC, 26 32-bit words.
    let t = unsafe { *texture };
    let sampler = Sampler {
        address_modes: [t[0], t[1], t[2]],
        linear: t[3] == 1,
        normalized: t[4] & 0x02 != 0,
        border: f32::from_bits(t[10]),
    };
    // SAFETY: as the caller promises.
    unsafe { create_object("cuTexObjectCreate", out, resource, Some(sampler)) }
}

#[no_mangle]
pub unsafe extern "C" fn cuSurfObjectCreate(out: *mut u64, resource: *const [u64; 18]) -> u32 {
    // SAFETY: as the caller promises.
    unsafe { create_object("cuSurfObjectCreate", out, resource, None) }
}

/// A texture object (`sampler`) or surface object over `resource` (`CUDA_RESOURCE_DESC`:
/// its kind, the union's 16 words, its flags).
unsafe fn create_object(call: &str, out: *mut u64, resource: *const [u64; 18], sampler: Option<Sampler>) -> u32 {
    with_context(call, |d, context| {
        if out.is_null() || resource.is_null() {
            return Err(code::INVALID_VALUE);
        }
        // SAFETY: checked non-null above; the caller passes a CUDA_RESOURCE_DESC.
        let r = unsafe { *resource };
        let object = match (r[0] as u32, sampler.is_some()) {
            (0, _) => {
                let owner = d.arrays.get(&r[1]).map(|a| a.context);
                crate::owned(d, "array", owner, context)?;
                let a = d.arrays[&r[1]].clone();
                if sampler.is_none() && !a.surface_ldst {
                    return Err(code::INVALID_VALUE); // not made for surface loads and stores
                }
                let row = a.extent[0] * a.element;
                let pitches = [row, row * a.extent[1]];
                Object {
                    context,
                    address: a.address,
                    extent: a.extent,
                    pitches,
                    element: a.element,
                    format: a.format,
                    array: Some(r[1]),
                    sampler,
                }
            }
            (kind @ (2 | 3), true) => {
                let (format, channels) = (r[2] as u32, r[2] >> 32);
                let element = element_bytes(format, channels).ok_or(code::INVALID_VALUE)?;
                let (extent, pitch, bytes) = if kind == 2 {
                    ([r[3] as usize / element, 1, 1], r[3] as usize, r[3] as usize)
                } else {
                    let (width, height, pitch) = (r[3] as usize, r[4] as usize, r[5] as usize);
                    ([width, height, 1], pitch, pitch * height.saturating_sub(1) + width * element)
                };
                if extent[0] == 0 || extent[1] == 0 {
                    return Err(code::INVALID_VALUE); // no element to read
                }
                if d.locate(context, r[1], bytes).is_none() {
                    d.violation(format!("{call} over {bytes} bytes at {:#x}, not memory of the context", r[1]));
                    return Err(code::INVALID_VALUE);
                }
                Object {
                    context,
                    address: r[1],
                    extent,
                    pitches: [pitch, bytes],
                    element,
                    format,
                    array: None,
                    sampler,
                }
            }
            _ => return Err(code::NOT_SUPPORTED),
        };
        let value = d.handle();
        d.objects.insert(value, object);
        // SAFETY: checked non-null above.
        unsafe { *out = value };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuTexObjectDestroy(object: u64) -> u32 {
    destroy_object("cuTexObjectDestroy", object, true)
}

#[no_mangle]
pub extern "C" fn cuSurfObjectDestroy(object: u64) -> u32 {
    destroy_object("cuSurfObjectDestroy", object, false)
}

fn destroy_object(call: &str, object: u64, texture: bool) -> u32 {
    with_context(call, |d, context| {
        let owner = d.objects.get(&object).filter(|o| o.sampler.is_some() == texture).map(|o| o.context);
        crate::owned(d, if texture { "texture object" } else { "surface object" }, owner, context)?;
        d.objects.remove(&object);
        Ok(())
    })
}
