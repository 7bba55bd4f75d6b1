//! Tensor maps (protocol 13): what a Hopper GPU's tensor memory accelerator (TMA) is told of a
//! tensor in global memory, as `cuTensorMapEncodeTiled` and `cuTensorMapEncodeIm2col` take it.
//! The driver encodes it into an opaque 128-byte descriptor that a kernel takes as a parameter
//! (`const __grid_constant__ CUtensorMap`) and hands to the copy instructions; only the remote
//! driver knows its layout, so the backend encodes it there ([`super::Request::EncodeTensorMap`]).

use serde::{Deserialize, Serialize};

use super::DevicePtr;

/// Bytes of an encoded tensor map (`CUtensorMap`).
pub const TENSOR_MAP_BYTES: usize = 128;

/// The most dimensions a tensor map has.
pub const MAX_TENSOR_RANK: usize = 5;

/// A tensor in global memory and how its boxes are cut, `A` being where it starts: on the wire
/// a [`DevicePtr`], or `None` for a null address (a map of no memory, as CUTLASS encodes one for
/// an operand its kernel does not read: a copy through it faults); the device address on the
/// device.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TensorMapSpec<A = Option<DevicePtr>> {
    /// The element type, as `CUtensorMapDataType` numbers it.
    pub data_type: u32,
    /// Where the tensor starts.
    pub address: A,
    /// Elements in each dimension, innermost first; their count is the rank.
    pub dims: Vec<u64>,
    /// Bytes between consecutive elements of each dimension but the innermost (rank - 1 of them).
    pub strides: Vec<u64>,
    /// Every how many elements of each dimension the box takes one (rank of them).
    pub element_strides: Vec<u32>,
    /// `CUtensorMapInterleave`.
    pub interleave: u32,
    /// `CUtensorMapSwizzle`.
    pub swizzle: u32,
    /// `CUtensorMapL2promotion`.
    pub l2_promotion: u32,
    /// `CUtensorMapFloatOOBfill`.
    pub oob_fill: u32,
    /// How boxes are cut from it.
    pub layout: TensorMapLayout,
}

/// How a tensor map's boxes are cut from its tensor.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TensorMapLayout {
    /// Boxes of `box_dims` elements (`cuTensorMapEncodeTiled`; rank of them).
    Tiled {
        /// Elements of a box in each dimension.
        box_dims: Vec<u32>,
    },
    /// Columns of pixels for a convolution (`cuTensorMapEncodeIm2col`): the bounding box of
    /// the spatial dimensions (all but the innermost and the outermost; rank - 2 of each).
    Im2col {
        /// The box's lower corner, relative to each spatial dimension's start.
        lower_corner: Vec<i32>,
        /// The box's upper corner, relative to each spatial dimension's end.
        upper_corner: Vec<i32>,
        /// Channels of a pixel.
        channels_per_pixel: u32,
        /// Pixels of a column.
        pixels_per_column: u32,
    },
}

impl<A> TensorMapSpec<A> {
    /// The same tensor at `address`.
    pub fn at<B>(self, address: B) -> TensorMapSpec<B> {
        let TensorMapSpec {
            data_type,
            dims,
            strides,
            element_strides,
            interleave,
            swizzle,
            l2_promotion,
            oob_fill,
            layout,
            ..
        } = self;
        TensorMapSpec {
            data_type,
            address,
            dims,
            strides,
            element_strides,
            interleave,
            swizzle,
            l2_promotion,
            oob_fill,
            layout,
        }
    }

    /// Why its arrays do not fit its rank (a driver reads `rank` elements of each), if they do not.
    pub fn misshapen(&self) -> Option<String> {
        let rank = self.dims.len();
        let lengths = match &self.layout {
            TensorMapLayout::Tiled { box_dims } => vec![("box dimensions", box_dims.len(), rank)],
            TensorMapLayout::Im2col { lower_corner, upper_corner, .. } => vec![
                ("lower corner coordinates", lower_corner.len(), rank.saturating_sub(2)),
                ("upper corner coordinates", upper_corner.len(), rank.saturating_sub(2)),
            ],
        };
        let fixed = [
            ("strides", self.strides.len(), rank.saturating_sub(1)),
            ("element strides", self.element_strides.len(), rank),
        ];
        if !(1..=MAX_TENSOR_RANK).contains(&rank) {
            return Some(format!("a tensor map has 1 to {MAX_TENSOR_RANK} dimensions, not {rank}"));
        }
        let min_rank = if matches!(self.layout, TensorMapLayout::Im2col { .. }) { 3 } else { 1 };
        if rank < min_rank {
            return Some(format!("an im2col tensor map has at least 3 dimensions, not {rank}"));
        }
        fixed
            .into_iter()
            .chain(lengths)
            .find(|&(_, len, wanted)| len != wanted)
            .map(|(what, len, wanted)| format!("a tensor map of {rank} dimensions has {wanted} {what}, not {len}"))
    }

    /// Bytes from the tensor's start to the end of its last element, or `None` for an element
    /// type this build does not know or a size past 64 bits. Padding between rows counts; the
    /// driver reads no byte past it.
    pub fn extent(&self) -> Option<u64> {
        let bits = element_bits(self.data_type)?;
        let row = self.dims.first()?.checked_mul(bits)?.div_ceil(8);
        self.dims
            .iter()
            .skip(1)
            .zip(&self.strides)
            .try_fold(row, |end, (&dim, &stride)| end.checked_add(dim.checked_sub(1)?.checked_mul(stride)?))
    }
}

/// Bits an element of `CUtensorMapDataType` `data_type` takes in memory.
fn element_bits(data_type: u32) -> Option<u64> {
    Some(match data_type {
        0 => 8,                    // UINT8
        1 | 6 | 9 => 16,           // UINT16, FLOAT16, BFLOAT16
        2 | 3 | 7 | 10..=12 => 32, // UINT32, INT32, FLOAT32 (and FTZ), TFLOAT32 (and FTZ)
        4 | 5 | 8 => 64,           // UINT64, INT64, FLOAT64
        13 => 4,                   // 16U4_ALIGN8B: sixteen 4-bit elements in 8 bytes
        14 | 15 => 8,              // 16U4_ALIGN16B, 16U6_ALIGN16B: sixteen in 16 bytes
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiled(dims: Vec<u64>, strides: Vec<u64>) -> TensorMapSpec<u64> {
        let rank = dims.len();
        TensorMapSpec {
            data_type: 7,
            address: 0,
            dims,
            strides,
            element_strides: vec![1; rank],
            interleave: 0,
            swizzle: 0,
            l2_promotion: 0,
            oob_fill: 0,
            layout: TensorMapLayout::Tiled { box_dims: vec![16; rank] },
        }
    }

    #[test]
    fn a_tensors_extent_ends_at_its_last_element() {
        // 24 rows of 40 floats, 160 bytes apart: 23 rows' strides and one row.
        assert_eq!(tiled(vec![40, 24], vec![160]).extent(), Some(23 * 160 + 160));
        // Rows padded to 256 bytes: the last row's padding is not read.
        assert_eq!(tiled(vec![40, 24], vec![256]).extent(), Some(23 * 256 + 160));
        assert_eq!(tiled(vec![40, 24, 2], vec![256, 8192]).extent(), Some(8192 + 23 * 256 + 160));
        assert_eq!(tiled(vec![u64::MAX, 2], vec![16]).extent(), None);
        assert_eq!(TensorMapSpec { data_type: 99, ..tiled(vec![4], vec![]) }.extent(), None);
    }

    #[test]
    fn arrays_that_do_not_fit_the_rank_are_named() {
        assert_eq!(tiled(vec![40, 24], vec![160]).misshapen(), None);
        let short = tiled(vec![40, 24], vec![]);
        assert_eq!(short.misshapen().as_deref(), Some("a tensor map of 2 dimensions has 1 strides, not 0"));
        let deep = tiled(vec![1; 6], vec![16; 5]);
        assert!(deep.misshapen().unwrap().contains("1 to 5 dimensions, not 6"));
        let flat = TensorMapSpec {
            layout: TensorMapLayout::Im2col {
                lower_corner: vec![],
                upper_corner: vec![],
                channels_per_pixel: 8,
                pixels_per_column: 8,
            },
            ..tiled(vec![40, 24], vec![160])
        };
        assert!(flat.misshapen().unwrap().contains("at least 3 dimensions"));
    }
}
