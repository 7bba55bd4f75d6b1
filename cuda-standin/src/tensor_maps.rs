//! Tensor maps (`cuTensorMapEncodeTiled`, `cuTensorMapEncodeIm2col`, compute capability 9.0):
//! the arguments checked as the driver reference lists its requirements (each breach
//! `CUDA_ERROR_INVALID_VALUE`), and a tensor that is not the current context's memory a
//! violation (the backend must hand the driver its session's device address). NVIDIA's
//! descriptor layout is undocumented; the stand-in lays out its own ([`Descriptor`]), which the
//! `tiles` fixture reads as a GPU's copy engine reads NVIDIA's.

use std::ffi::{c_int, c_uint, c_void};

use crate::{code, with_context};

/// Bytes of a `CUtensorMap`.
const MAP_BYTES: usize = 128;
/// The first bytes of the stand-in's descriptors.
const MAGIC: &[u8; 4] = b"TMAP";
/// `CU_TENSOR_MAP_INTERLEAVE_32B`.
const INTERLEAVE_32B: c_uint = 2;

/// What a descriptor tells a kernel's copies; its bytes are [`Descriptor::encode`]'s.
#[derive(Debug, Clone, PartialEq)]
pub struct Descriptor {
    /// `CUtensorMapDataType`.
    pub data_type: u8,
    /// Where the tensor starts.
    pub address: u64,
    /// Elements in each dimension (rank of them).
    pub dims: Vec<u64>,
    /// Bytes between elements of each dimension but the innermost.
    pub strides: Vec<u64>,
    /// A tiled map's box (rank of them; none for im2col).
    pub box_dims: Vec<u32>,
    /// Elements past the tensor read as NaN (else zero).
    pub nan_fill: bool,
    /// An im2col map.
    pub im2col: bool,
}

impl Descriptor {
    /// Its 128 bytes: the magic, type, rank, kind and fill, then the address, the dimensions
    /// and strides (8 bytes each) and the box (2 bytes each).
    fn encode(&self) -> [u8; MAP_BYTES] {
        let mut b = [0u8; MAP_BYTES];
        b[..4].copy_from_slice(MAGIC);
        b[4..8].copy_from_slice(&[self.data_type, self.dims.len() as u8, self.im2col as u8, self.nan_fill as u8]);
        b[8..16].copy_from_slice(&self.address.to_le_bytes());
        let words = self.dims.iter().chain(&self.strides);
        for (i, word) in words.enumerate() {
            b[16 + 8 * i..24 + 8 * i].copy_from_slice(&word.to_le_bytes());
        }
        for (i, &d) in self.box_dims.iter().enumerate() {
            b[96 + 2 * i..98 + 2 * i].copy_from_slice(&(d as u16).to_le_bytes());
        }
        b
    }

    /// The descriptor in `bytes`, or `None` for bytes no encoding made (a kernel handed those
    /// faults).
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != MAP_BYTES || &bytes[..4] != MAGIC {
            return None;
        }
        let rank = bytes[5] as usize;
        if !(1..=5).contains(&rank) {
            return None;
        }
        let word = |i: usize| u64::from_le_bytes(bytes[16 + 8 * i..24 + 8 * i].try_into().expect("8 bytes"));
        let im2col = bytes[6] == 1;
        let box_dims = (0..rank).map(|i| u16::from_le_bytes([bytes[96 + 2 * i], bytes[97 + 2 * i]]) as u32);
        Some(Descriptor {
            data_type: bytes[4],
            address: u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")),
            dims: (0..rank).map(word).collect(),
            strides: (rank..2 * rank - 1).map(word).collect(),
            box_dims: if im2col { Vec::new() } else { box_dims.collect() },
            nan_fill: bytes[7] == 1,
            im2col,
        })
    }
}

/// The arguments both encodings share.
struct Tensor {
    data_type: c_uint,
    rank: usize,
    address: u64,
    dims: Vec<u64>,
    strides: Vec<u64>,
    element_strides: Vec<u32>,
    interleave: c_uint,
    swizzle: c_uint,
    l2_promotion: c_uint,
    oob_fill: c_uint,
}

impl Tensor {
    /// The tensor's arguments, read from the caller's arrays once the map is one the driver
    /// writes and the rank one it takes (1 to 5; 3 to 5 interleaved or im2col).
    #[allow(clippy::too_many_arguments)] // cuda.h's
    unsafe fn read(
        map: *mut c_void,
        data_type: c_uint,
        rank: c_uint,
        address: *mut c_void,
        dims: *const u64,
        strides: *const u64,
        element_strides: *const u32,
        [interleave, swizzle, l2_promotion, oob_fill]: [c_uint; 4],
        least_rank: usize,
    ) -> Result<Self, u32> {
        writable(map)?;
        let rank = rank as usize;
        let least_rank = if interleave != 0 { 3 } else { least_rank };
        if !(least_rank..=5).contains(&rank) {
            return Err(code::INVALID_VALUE);
        }
        Ok(Tensor {
            data_type,
            rank,
            address: address as u64,
            dims: array(dims, rank)?,
            strides: array(strides, rank - 1)?,
            element_strides: array(element_strides, rank)?,
            interleave,
            swizzle,
            l2_promotion,
            oob_fill,
        })
    }

    /// Bits an element takes in memory (the packed types: sixteen 4-bit elements in 8 bytes,
    /// or sixteen in 16). The stand-in's own table, not `ac-proto`'s: an independent reading of
    /// the reference, so that a mistake in the backend's shows.
    fn element_bits(&self) -> u64 {
        match self.data_type {
            13 => 4,
            0 | 14 | 15 => 8,
            1 | 6 | 9 => 16,
            4 | 5 | 8 => 64,
            _ => 32,
        }
    }

    /// Bytes `n` consecutive elements take.
    fn bytes_of(&self, n: u64) -> u64 {
        n.saturating_mul(self.element_bits()).div_ceil(8)
    }

    /// The driver reference's requirements of the tensor (not of the box).
    fn check(&self) -> Result<(), u32> {
        let aligned = if self.interleave == INTERLEAVE_32B { 32 } else { 16 };
        let floating = matches!(self.data_type, 6..=12);
        let valid = self.data_type <= 15
            && self.interleave <= 2
            && self.swizzle <= 6
            && self.l2_promotion <= 3
            && self.oob_fill <= 1
            && (self.oob_fill == 0 || floating)
            && self.address.is_multiple_of(aligned)
            && self.dims.iter().all(|&d| (1..=1 << 31).contains(&d))
            && self.strides.iter().all(|&s| s.is_multiple_of(aligned) && s < 1 << 40)
            && self.element_strides.iter().all(|&s| (1..=8).contains(&s));
        valid.then_some(()).ok_or(code::INVALID_VALUE)
    }

    /// Bytes from the tensor's start to its last element's end (saturated: a tensor past
    /// 2^64 bytes lies in no allocation).
    fn extent(&self) -> u64 {
        let outer = self.dims[1..].iter().zip(&self.strides).map(|(&d, &s)| (d - 1).saturating_mul(s));
        outer.fold(self.bytes_of(self.dims[0]), u64::saturating_add)
    }

    /// Its descriptor, once it is the current context's memory (the backend hands the driver
    /// its session's device address, never an offset or a host pointer).
    fn encode(self, box_dims: Vec<u32>, map: *mut c_void, call: &str) -> u32 {
        if let Err(e) = self.check() {
            return e;
        }
        with_context(call, |d, context| {
            // A null address is a map of no memory (CUTLASS's for an operand it does not read).
            if self.address != 0 && d.locate(context, self.address, self.extent() as usize).is_none() {
                d.violation(format!(
                    "{call}: the tensor of {} bytes at {:#x} is not the current context's memory",
                    self.extent(),
                    self.address
                ));
            }
            let descriptor = Descriptor {
                data_type: self.data_type as u8,
                address: self.address,
                im2col: box_dims.is_empty(),
                box_dims,
                nan_fill: self.oob_fill == 1,
                dims: self.dims,
                strides: self.strides,
            };
            // SAFETY: the caller's map is 128 writable bytes (checked 64-byte aligned).
            unsafe { map.cast::<[u8; MAP_BYTES]>().write(descriptor.encode()) };
            Ok(())
        })
    }
}

/// The `n` elements at `p`.
unsafe fn array<T: Copy>(p: *const T, n: usize) -> Result<Vec<T>, u32> {
    match (p.is_null(), n) {
        (_, 0) => Ok(Vec::new()),
        (true, _) => Err(code::INVALID_VALUE),
        (false, n) => Ok(std::slice::from_raw_parts(p, n).to_vec()),
    }
}

/// A map pointer the driver writes: not null, 64-byte aligned.
fn writable(map: *mut c_void) -> Result<(), u32> {
    (!map.is_null() && (map as usize).is_multiple_of(64)).then_some(()).ok_or(code::INVALID_VALUE)
}

#[no_mangle]
pub unsafe extern "C" fn cuTensorMapEncodeTiled(
    map: *mut c_void,
    data_type: c_uint,
    rank: c_uint,
    address: *mut c_void,
    dims: *const u64,
    strides: *const u64,
    box_dims: *const u32,
    element_strides: *const u32,
    interleave: c_uint,
    swizzle: c_uint,
    l2_promotion: c_uint,
    oob_fill: c_uint,
) -> u32 {
    let modes = [interleave, swizzle, l2_promotion, oob_fill];
    let tensor = match Tensor::read(map, data_type, rank, address, dims, strides, element_strides, modes, 1) {
        Ok(tensor) => tensor,
        Err(e) => return e,
    };
    let Ok(box_dims) = array(box_dims, tensor.rank) else { return code::INVALID_VALUE };
    // Each box dimension 1 to 256; without interleaving, the box's rows whole 16-byte units
    // and no wider than the swizzle's span (32, 64, 128 bytes).
    let inner = tensor.bytes_of(box_dims[0] as u64);
    let span = [u64::MAX, 32, 64, 128, 128, 128, 128][swizzle.min(6) as usize];
    if box_dims.iter().any(|&b| !(1..=256).contains(&b))
        || (interleave == 0 && (!inner.is_multiple_of(16) || inner > span))
    {
        return code::INVALID_VALUE;
    }
    tensor.encode(box_dims, map, "cuTensorMapEncodeTiled")
}

#[no_mangle]
pub unsafe extern "C" fn cuTensorMapEncodeIm2col(
    map: *mut c_void,
    data_type: c_uint,
    rank: c_uint,
    address: *mut c_void,
    dims: *const u64,
    strides: *const u64,
    lower_corner: *const c_int,
    upper_corner: *const c_int,
    channels_per_pixel: c_uint,
    pixels_per_column: c_uint,
    element_strides: *const u32,
    interleave: c_uint,
    swizzle: c_uint,
    l2_promotion: c_uint,
    oob_fill: c_uint,
) -> u32 {
    let modes = [interleave, swizzle, l2_promotion, oob_fill];
    let tensor = match Tensor::read(map, data_type, rank, address, dims, strides, element_strides, modes, 3) {
        Ok(tensor) => tensor,
        Err(e) => return e,
    };
    // The corners' range narrows with the spatial dimensions: 16 bits shared among them.
    let spatial = tensor.rank - 2;
    let bound = 1i32 << (16 / spatial - 1);
    let corners = [lower_corner, upper_corner].map(|c| array(c, spatial));
    let in_range = corners.iter().all(|c| c.as_ref().is_ok_and(|c| c.iter().all(|v| (-bound..bound).contains(v))));
    if !in_range || !(1..=256).contains(&channels_per_pixel) || !(1..=1024).contains(&pixels_per_column) {
        return code::INVALID_VALUE;
    }
    tensor.encode(Vec::new(), map, "cuTensorMapEncodeIm2col")
}
