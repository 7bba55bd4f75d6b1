//! CUDA arrays, texture objects and surface objects (`cuArray3DCreate`, `cuMemcpy3DAsync`
//! between device memory and an array, `cuTexObjectCreate`, `cuSurfObjectCreate`), and how the
//! `textures` fixtures read through them. An array is device memory of its context laid out
//! row after row, slice after slice (a GPU's layout is its own, which only copies and texture
//! reads see). A texture reads as a GPU's texture unit does (the CUDA programming guide's
//! appendix on texture fetching): point or linear filtering (the weights in 8-bit fixed point),
//! clamp, border, wrap and mirror addressing, normalized coordinates.
//!
//! Violations: an array destroyed, or memory freed, while an object reads it (the backend must
//! hold both for as long as its objects live); memory or arrays of another context; a copy
//! outside its array. The descriptors are read as `cuda.h` lays them out, as 8-byte words
//! (every 32-bit enumeration of `CUDA_MEMCPY3D` is followed by a pointer).

use std::ffi::c_void;

use crate::state::{Driver, Op};
use crate::{code, id, with_context, Handle};

/// A CUDA array.
#[derive(Debug, Clone)]
pub struct Array {
    /// Its context.
    pub context: u64,
    /// The device memory holding it.
    pub address: u64,
    /// Elements a row, rows, slices (each at least one).
    pub extent: [usize; 3],
    /// Bytes of an element.
    pub element: usize,
    /// `CUarray_format`.
    pub format: u32,
    /// `CUDA_ARRAY3D_SURFACE_LDST` was asked.
    pub surface_ldst: bool,
}

/// A texture or surface object: where its elements are and how it reads them.
#[derive(Debug, Clone)]
pub struct Object {
    /// Its context.
    pub context: u64,
    /// Its first element.
    pub address: u64,
    /// Elements a row, rows, slices.
    pub extent: [usize; 3],
    /// Bytes from one row to the next, and from one slice to the next.
    pub pitches: [usize; 2],
    /// Bytes of an element.
    pub element: usize,
    /// `CUarray_format`.
    pub format: u32,
    /// The array it reads, if it reads one.
    pub array: Option<u64>,
    /// How it samples; `None`: a surface object.
    pub sampler: Option<Sampler>,
}

/// `CUDA_TEXTURE_DESC`'s fields that the fixtures' reads use.
#[derive(Debug, Clone, Copy)]
pub struct Sampler {
    /// `CUaddress_mode` in x, y, z: 0 wrap, 1 clamp, 2 mirror, 3 border.
    pub address_modes: [u32; 3],
    /// `CUfilter_mode`: 0 point, 1 linear.
    pub linear: bool,
    /// `CU_TRSF_NORMALIZED_COORDINATES`.
    pub normalized: bool,
    /// What border addressing reads (its first channel).
    pub border: f32,
}

/// `CU_AD_FORMAT_FLOAT`.
const FLOAT: u32 = 0x20;

/// Bytes of one channel of `format`, for the formats of one value a channel.
fn channel_bytes(format: u32) -> Option<usize> {
    Some(match format {
        0x01 | 0x08 => 1,
        0x02 | 0x09 | 0x10 => 2,
        0x03 | 0x0a | FLOAT => 4,
        _ => return None,
    })
}

/// Bytes of an element of `format` with `channels` channels (1, 2 or 4).
fn element_bytes(format: u32, channels: u64) -> Option<usize> {
    matches!(channels, 1 | 2 | 4).then_some(channel_bytes(format)? * channels as usize)
}

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
        if width == 0 || (height == 0 && depth > 0) {
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

// ---- Reads, as a GPU's texture unit and surface instructions make them ----

impl Object {
    /// The byte address of element (x, y, z), which lies inside the object.
    pub fn element_at(&self, [x, y, z]: [usize; 3]) -> u64 {
        self.address + (z * self.pitches[1] + y * self.pitches[0] + x * self.element) as u64
    }

    /// What `tex1Dfetch`, `tex2D` or `tex3D` reads at `coords` (one per dimension used) of a
    /// one-float texture, through `load` (an element's address to its value).
    pub fn sample(&self, coords: &[f32], load: &mut dyn FnMut(u64) -> Option<f32>) -> Option<f32> {
        let sampler = self.sampler?;
        if self.format != FLOAT || self.element != 4 {
            return None; // the fixtures read single floats
        }
        let dims = coords.len();
        // Per dimension: the texels and weights the filter blends.
        let mut taps: Vec<[(Option<usize>, f32); 2]> = Vec::with_capacity(dims);
        for (d, &c) in coords.iter().enumerate() {
            let n = self.extent[d];
            let c = if sampler.normalized { c * n as f32 } else { c };
            let mode = sampler.address_modes[d];
            taps.push(if sampler.linear {
                let b = c - 0.5;
                let i = b.floor();
                let alpha = ((b - i) * 256.0).round() / 256.0; // 8 fractional bits, as the hardware keeps
                [
                    (address(i as i64, n, mode, sampler.normalized), 1.0 - alpha),
                    (address(i as i64 + 1, n, mode, sampler.normalized), alpha),
                ]
            } else {
                [(address(c.floor() as i64, n, mode, sampler.normalized), 1.0), (None, 0.0)]
            });
        }
        let mut value = 0.0;
        for corner in 0..1usize << dims {
            let (mut at, mut weight) = ([0usize; 3], 1.0);
            let mut border = false;
            for (d, tap) in taps.iter().enumerate() {
                let (index, w) = tap[corner >> d & 1];
                weight *= w;
                match index {
                    Some(i) => at[d] = i,
                    None => border = true,
                }
            }
            if weight != 0.0 {
                value += weight * if border { sampler.border } else { load(self.element_at(at))? };
            }
        }
        Some(value)
    }

    /// The element a surface read or write at byte `x_bytes` of row `y` touches; `None` (a
    /// fault, the trap boundary mode) outside the object or off an element.
    pub fn surface_element(&self, x_bytes: i64, y: i64) -> Option<u64> {
        let (x, y) = (usize::try_from(x_bytes).ok()?, usize::try_from(y).ok()?);
        (x % self.element == 0 && x / self.element < self.extent[0] && y < self.extent[1])
            .then(|| self.element_at([x / self.element, y, 0]))
    }
}

/// Texel `i` of a dimension of `n` texels under address mode `mode` (`None`: the border).
/// Wrap and mirror apply to normalized coordinates only; unnormalized ones clamp.
fn address(i: i64, n: usize, mode: u32, normalized: bool) -> Option<usize> {
    let n = n as i64;
    Some(match (mode, normalized) {
        (0, true) => i.rem_euclid(n),
        (2, true) => {
            let m = i.rem_euclid(2 * n);
            if m < n {
                m
            } else {
                2 * n - 1 - m
            }
        }
        (3, _) if i < 0 || i >= n => return None,
        _ => i.clamp(0, n - 1),
    } as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn floats(extent: [usize; 3], sampler: Sampler) -> Object {
        let pitches = [extent[0] * 4, extent[0] * extent[1] * 4];
        Object {
            context: 1,
            address: 0,
            extent,
            pitches,
            element: 4,
            format: FLOAT,
            array: None,
            sampler: Some(sampler),
        }
    }

    fn sampler(mode: u32, linear: bool, normalized: bool) -> Sampler {
        Sampler { address_modes: [mode; 3], linear, normalized, border: -1.0 }
    }

    /// Texel (x, y) of a 4 x 3 texture holds 10 y + x.
    fn load(at: u64) -> Option<f32> {
        let i = at / 4;
        Some((10 * (i / 4) + i % 4) as f32)
    }

    #[test]
    fn point_reads_take_the_texel_the_coordinate_falls_in_and_clamp_at_the_edges() {
        let t = floats([4, 3, 1], sampler(1, false, false));
        assert_eq!(t.sample(&[2.5, 1.5], &mut load), Some(12.0));
        assert_eq!(t.sample(&[2.99, 1.01], &mut load), Some(12.0));
        assert_eq!(t.sample(&[-7.0, 9.0], &mut load), Some(20.0));
        let border = floats([4, 3, 1], sampler(3, false, false));
        assert_eq!(border.sample(&[4.5, 0.5], &mut load), Some(-1.0));
    }

    #[test]
    fn linear_reads_blend_the_four_texels_around_the_coordinate() {
        let t = floats([4, 3, 1], sampler(1, true, false));
        assert_eq!(t.sample(&[1.5, 0.5], &mut load), Some(1.0)); // a texel's centre
        assert_eq!(t.sample(&[2.0, 1.0], &mut load), Some(6.5)); // between 1, 2, 11, 12
        assert_eq!(t.sample(&[1.75, 0.5], &mut load), Some(1.25));
    }

    #[test]
    fn normalized_coordinates_wrap_and_mirror() {
        let wrap = floats([4, 3, 1], sampler(0, false, true));
        assert_eq!(wrap.sample(&[1.1, 0.0], &mut load), Some(0.0));
        let mirror = floats([4, 3, 1], sampler(2, false, true));
        assert_eq!(mirror.sample(&[1.1, 0.0], &mut load), Some(3.0));
        assert_eq!(address(-1, 4, 2, true), Some(0));
    }

    #[test]
    fn surface_accesses_off_an_element_or_outside_fault() {
        let s = Object { sampler: None, ..floats([4, 3, 1], sampler(1, false, false)) };
        assert_eq!(s.surface_element(8, 2), Some(2 * 16 + 8));
        assert_eq!(s.surface_element(6, 0), None);
        assert_eq!(s.surface_element(16, 0), None);
        assert_eq!(s.surface_element(0, -1), None);
    }
}
