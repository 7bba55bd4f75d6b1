//! CUDA arrays, texture objects and surface objects (protocol 16): the memory a GPU's texture
//! units read (`cuArray3DCreate`: laid out as the GPU likes it, opaque to the host, so that it
//! is reached only by copies and by kernels through a texture or surface object) and the
//! objects a kernel takes as a 64-bit parameter to read it (`cuTexObjectCreate`: filtered,
//! clamped or wrapped at the edges) or to read and write it (`cuSurfObjectCreate`).
//!
//! An array's bytes move only between it and linear device memory ([`ArrayCopy`]): a copy
//! from the host goes to linear memory first, then on the device into the array. A texture
//! reads an array or linear memory of the session ([`TextureResource`]); its object's value is
//! the device's own, since kernels hand it to the GPU.

use serde::{Deserialize, Serialize};

use super::DevicePtr;

/// A CUDA array of a session, as the backend numbers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ArrayId(pub u64);

/// A CUDA array's shape and elements (`CUDA_ARRAY3D_DESCRIPTOR`): `height` 0 for a 1-D array,
/// `depth` 0 for a 1-D or 2-D one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ArraySpec {
    /// Elements in a row.
    pub width: u64,
    /// Rows (0: one).
    pub height: u64,
    /// Slices, or layers of a layered array (0: one).
    pub depth: u64,
    /// `CUarray_format`: each channel's type.
    pub format: u32,
    /// Channels of an element: 1, 2 or 4.
    pub channels: u32,
    /// `CUDA_ARRAY3D_*` flags (layered, surface load and store, ...).
    pub flags: u32,
}

/// The `CUDA_ARRAY3D_*` flags served: layered, surface load and store, cube map, texture
/// gather. Depth textures, sparse and deferred-mapping arrays are not.
pub const SERVED_ARRAY_FLAGS: u32 = 0x0f;

/// `CUDA_ARRAY3D_LAYERED`: `depth` counts layers (a 1-D layered array has no height).
const LAYERED: u32 = 0x01;

/// The most elements in any dimension of an array (a compute capability 9.0 GPU's 3-D limit is
/// 16,384; its 1-D and 2-D limits are larger, and the device refuses past its own).
pub const MOST_ARRAY_ELEMENTS: u64 = 1 << 17;

/// Bytes of one channel of `format` (`CUarray_format`), for the formats of one value a channel.
pub fn channel_bytes(format: u32) -> Option<u64> {
    Some(match format {
        0x01 | 0x08 => 1,        // unsigned and signed 8-bit integers
        0x02 | 0x09 | 0x10 => 2, // 16-bit integers, half
        0x03 | 0x0a | 0x20 => 4, // 32-bit integers, float
        _ => return None,
    })
}

impl ArraySpec {
    /// Bytes of one element, for the formats served and 1, 2 or 4 channels.
    pub fn element_bytes(&self) -> Option<u64> {
        matches!(self.channels, 1 | 2 | 4).then_some(channel_bytes(self.format)? * u64::from(self.channels))
    }

    /// Bytes of a row.
    pub fn row_bytes(&self) -> Option<u64> {
        self.width.checked_mul(self.element_bytes()?)
    }

    /// Rows and slices, each at least one.
    pub fn rows_and_slices(&self) -> [u64; 2] {
        [self.height.max(1), self.depth.max(1)]
    }

    /// Bytes of all its elements, packed.
    pub fn bytes(&self) -> Option<u64> {
        let [rows, slices] = self.rows_and_slices();
        self.row_bytes()?.checked_mul(rows)?.checked_mul(slices)
    }

    /// Whether its format, channels and flags are ones served (its shape aside).
    pub fn served(&self) -> bool {
        self.element_bytes().is_some() && self.flags & !SERVED_ARRAY_FLAGS == 0
    }

    /// Why an array of this shape cannot be made, if it cannot.
    pub fn misshapen(&self) -> Option<String> {
        if self.element_bytes().is_none() {
            return Some(format!(
                "an array of format {:#x} with {} channels (served: 8, 16 and 32-bit integers, half and float; 1, 2 or 4 channels)",
                self.format, self.channels
            ));
        }
        if self.flags & !SERVED_ARRAY_FLAGS != 0 {
            return Some(format!("an array with flags {:#x} (served: {SERVED_ARRAY_FLAGS:#x})", self.flags));
        }
        let dims = [self.width, self.height, self.depth];
        let no_rows_but_slices = self.height == 0 && self.depth > 0 && self.flags & LAYERED == 0;
        if self.width == 0 || no_rows_but_slices || dims.iter().any(|&d| d > MOST_ARRAY_ELEMENTS) {
            return Some(format!("an array of {} x {} x {} elements", self.width, self.height, self.depth));
        }
        None
    }
}

/// A copy between a region of an array and linear device memory, `A` naming the array and `P`
/// the linear memory's start: on the wire an [`ArrayId`] and a [`DevicePtr`], on the device
/// their handle and address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ArrayCopy<A = ArrayId, P = DevicePtr> {
    /// The array.
    pub array: A,
    /// The region's first byte in a row, row and slice of the array.
    pub origin: [u64; 3],
    /// The region's bytes a row, rows and slices.
    pub extent: [u64; 3],
    /// Where the linear side's first byte is.
    pub linear: P,
    /// Bytes from one row of the linear side to the next (at least a row's bytes).
    pub pitch: u64,
    /// Rows from one slice of the linear side to the next (at least the region's rows).
    pub slice_rows: u64,
    /// Whether the bytes go into the array (else out of it).
    pub to_array: bool,
}

impl<A, P> ArrayCopy<A, P> {
    /// Bytes the linear side spans, first to last.
    pub fn linear_span(&self) -> Option<u64> {
        let [width, rows, slices] = self.extent;
        let slice = self.pitch.checked_mul(self.slice_rows)?;
        slice
            .checked_mul(slices.checked_sub(1)?)?
            .checked_add(self.pitch.checked_mul(rows.checked_sub(1)?)?)?
            .checked_add(width)
    }

    /// Why this copy does not fit `spec`'s array or its own linear side, if it does not.
    pub fn misfit(&self, spec: &ArraySpec) -> Option<String> {
        let [width, rows, slices] = self.extent;
        let [x, y, z] = self.origin;
        let row_bytes = spec.row_bytes().unwrap_or(0);
        let [array_rows, array_slices] = spec.rows_and_slices();
        let past = |at: u64, len: u64, size: u64| at.checked_add(len).is_none_or(|end| end > size);
        if width == 0 || rows == 0 || slices == 0 {
            return Some(format!("a copy of {width} x {rows} x {slices} bytes, rows and slices"));
        }
        if past(x, width, row_bytes) || past(y, rows, array_rows) || past(z, slices, array_slices) {
            return Some(format!(
                "a copy of {width} bytes x {rows} rows x {slices} slices at ({x}, {y}, {z}) lies outside an array of {row_bytes} bytes x {array_rows} rows x {array_slices} slices"
            ));
        }
        if let Some(element) = spec.element_bytes().filter(|e| x % e != 0 || width % e != 0) {
            return Some(format!("a copy of {width} bytes at byte {x} of a row cuts elements of {element} bytes"));
        }
        if self.pitch < width || self.slice_rows < rows {
            return Some(format!(
                "a linear side of pitch {} and {} rows a slice holds no {width} x {rows} region",
                self.pitch, self.slice_rows
            ));
        }
        None
    }

    /// The same copy between `array` and `linear`.
    pub fn between<B, Q>(&self, array: B, linear: Q) -> ArrayCopy<B, Q> {
        let Self { origin, extent, pitch, slice_rows, to_array, .. } = *self;
        ArrayCopy { array, origin, extent, linear, pitch, slice_rows, to_array }
    }
}

/// What a texture object reads (`CUDA_RESOURCE_DESC`), `A` naming an array and `P` linear
/// memory's start, as in [`ArrayCopy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TextureResource<A = ArrayId, P = DevicePtr> {
    /// A CUDA array.
    Array(A),
    /// Linear memory read as a 1-D texture (`tex1Dfetch`).
    Linear {
        /// Its first byte.
        address: P,
        /// `CUarray_format`.
        format: u32,
        /// Channels of an element.
        channels: u32,
        /// Its size.
        bytes: u64,
    },
    /// Pitched linear memory read as a 2-D texture.
    Pitch2D {
        /// Its first byte.
        address: P,
        /// `CUarray_format`.
        format: u32,
        /// Channels of an element.
        channels: u32,
        /// Elements a row.
        width: u64,
        /// Rows.
        height: u64,
        /// Bytes from one row to the next.
        pitch: u64,
    },
}

impl<A: Copy, P: Copy> TextureResource<A, P> {
    /// Linear memory's start and the bytes it spans; `None` for an array.
    pub fn linear_span(&self) -> Option<(P, Option<u64>)> {
        match *self {
            Self::Array(_) => None,
            Self::Linear { address, bytes, .. } => Some((address, Some(bytes))),
            Self::Pitch2D { address, format, channels, width, height, pitch } => {
                let spec = ArraySpec { width, height, depth: 0, format, channels, flags: 0 };
                let last = spec.row_bytes().filter(|&row| row <= pitch && height > 0);
                Some((address, last.and_then(|row| pitch.checked_mul(height - 1)?.checked_add(row))))
            }
        }
    }

    /// The same resource over `array` or `linear`.
    pub fn over<B, Q>(&self, array: impl FnOnce(A) -> B, linear: impl FnOnce(P) -> Q) -> TextureResource<B, Q> {
        match *self {
            Self::Array(a) => TextureResource::Array(array(a)),
            Self::Linear { address, format, channels, bytes } => {
                TextureResource::Linear { address: linear(address), format, channels, bytes }
            }
            Self::Pitch2D { address, format, channels, width, height, pitch } => {
                TextureResource::Pitch2D { address: linear(address), format, channels, width, height, pitch }
            }
        }
    }
}

/// How a texture reads (`CUDA_TEXTURE_DESC`), its enumerations as `cuda.h` numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sampler {
    /// `CUaddress_mode` in x, y and z: wrap, clamp, mirror or border.
    pub address_modes: [u32; 3],
    /// `CUfilter_mode`: point or linear.
    pub filter_mode: u32,
    /// `CU_TRSF_*`: read as integers, normalized coordinates, sRGB, ...
    pub flags: u32,
    /// The most anisotropy.
    pub max_anisotropy: u32,
    /// `CUfilter_mode` between mipmap levels.
    pub mipmap_filter_mode: u32,
    /// Added to the mipmap level.
    pub mipmap_level_bias: f32,
    /// The lowest mipmap level.
    pub min_mipmap_level_clamp: f32,
    /// The highest mipmap level.
    pub max_mipmap_level_clamp: f32,
    /// What border addressing reads past the edges.
    pub border_color: [f32; 4],
}

#[cfg(test)]
mod tests {
    use super::*;

    fn floats(width: u64, height: u64, depth: u64) -> ArraySpec {
        ArraySpec { width, height, depth, format: 0x20, channels: 1, flags: 0 }
    }

    fn copy(origin: [u64; 3], extent: [u64; 3], pitch: u64, slice_rows: u64) -> ArrayCopy<(), u64> {
        ArrayCopy { array: (), origin, extent, linear: 0, pitch, slice_rows, to_array: true }
    }

    #[test]
    fn arrays_have_the_bytes_of_their_elements() {
        assert_eq!(floats(37, 23, 0).bytes(), Some(37 * 23 * 4));
        assert_eq!(floats(8, 0, 0).bytes(), Some(32));
        let rgba8 = ArraySpec { format: 0x01, channels: 4, ..floats(5, 3, 2) };
        assert_eq!(rgba8.bytes(), Some(5 * 3 * 2 * 4));
        assert!(ArraySpec { channels: 3, ..floats(4, 4, 0) }.misshapen().is_some());
        assert!(ArraySpec { format: 0x91, ..floats(4, 4, 0) }.misshapen().is_some()); // BC1
        assert!(floats(0, 4, 0).misshapen().is_some());
        assert!(floats(4, 0, 4).misshapen().is_some());
        assert_eq!(ArraySpec { flags: LAYERED, ..floats(4, 0, 4) }.misshapen(), None, "a 1-D layered array");
        let sparse = ArraySpec { flags: 0x40, ..floats(4, 4, 0) };
        assert!(sparse.misshapen().is_some() && !sparse.served(), "a sparse array");
        assert!(floats(0, 4, 0).served() && !ArraySpec { channels: 3, ..floats(4, 4, 0) }.served());
        assert!(floats(MOST_ARRAY_ELEMENTS + 1, 1, 0).misshapen().is_some());
        assert_eq!(floats(4, 4, 4).misshapen(), None);
    }

    #[test]
    fn copies_must_lie_inside_their_array_and_cut_no_element() {
        let spec = floats(37, 23, 0);
        assert_eq!(copy([0, 0, 0], [148, 23, 1], 148, 23).misfit(&spec), None);
        assert_eq!(copy([12, 2, 0], [20, 4, 1], 20, 4).misfit(&spec), None);
        assert!(copy([4, 0, 0], [148, 1, 1], 148, 1).misfit(&spec).is_some()); // past a row
        assert!(copy([0, 20, 0], [4, 4, 1], 4, 4).misfit(&spec).is_some()); // past the rows
        assert!(copy([0, 0, 1], [4, 1, 1], 4, 1).misfit(&spec).is_some()); // past the slice
        assert!(copy([2, 0, 0], [4, 1, 1], 4, 1).misfit(&spec).is_some()); // cuts a float
        assert!(copy([0, 0, 0], [8, 2, 1], 4, 2).misfit(&spec).is_some()); // pitch < row
        assert!(copy([u64::MAX, 0, 0], [4, 1, 1], 4, 1).misfit(&spec).is_some());
    }

    #[test]
    fn a_copys_linear_side_spans_its_last_row_but_not_its_pitch() {
        assert_eq!(copy([0; 3], [16, 3, 2], 64, 5).linear_span(), Some(64 * 5 + 64 * 2 + 16));
        assert_eq!(copy([0; 3], [16, 1, 1], 16, 1).linear_span(), Some(16));
        assert_eq!(copy([0; 3], [16, 0, 1], 16, 1).linear_span(), None);
        assert_eq!(copy([0; 3], [16, 2, 2], u64::MAX, 2).linear_span(), None);
    }

    #[test]
    fn a_pitched_texture_spans_its_last_row_and_refuses_a_pitch_below_a_row() {
        let pitched = |pitch| TextureResource::<(), u64>::Pitch2D {
            address: 0,
            format: 0x20,
            channels: 2,
            width: 10,
            height: 3,
            pitch,
        };
        assert_eq!(pitched(128).linear_span(), Some((0, Some(128 * 2 + 80))));
        assert_eq!(pitched(64).linear_span(), Some((0, None)));
        assert_eq!(TextureResource::<u8, u64>::Array(3).linear_span(), None);
    }
}
