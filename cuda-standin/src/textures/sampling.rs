//! What a texture or surface object is and how it reads ([`super`] makes them): where its
//! elements lie, and the reads of a GPU's texture unit (the CUDA programming guide's appendix on
//! texture fetching): point or linear filtering (the weights in 8-bit fixed point), clamp,
//! border, wrap and mirror addressing, normalized coordinates; and a surface's element reads
//! and writes (the trap boundary mode).

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
pub fn element_bytes(format: u32, channels: u64) -> Option<usize> {
    matches!(channels, 1 | 2 | 4).then_some(channel_bytes(format)? * channels as usize)
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
                    (address((i as i64).saturating_add(1), n, mode, sampler.normalized), alpha),
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
