//! cuBLASLt's lower-level algorithm API, for programs that pick an algorithm themselves rather
//! than take the heuristic's (PyTorch's tuning, benchmarks sweeping configurations):
//! `cublasLtMatmulAlgoGetIds`, `AlgoInit`, `AlgoCapGetAttribute`,
//! `AlgoConfigSetAttribute`/`GetAttribute` and `AlgoCheck`.
//!
//! The shim has one algorithm, the builtin gemm (id 0), for the types [`matmul`] serves. Its
//! record ([`Algo`]) lives in the caller's `cublasLtMatmulAlgo_t` as the descriptors do; its
//! capabilities say what that kernel does (strided batches, host or device scalars, the
//! epilogues; no split-K, swizzling or tile choice), so a configuration asking
//! for more is refused by `AlgoCheck` and by `cublasLtMatmul` rather than run otherwise.
//!
//! [`matmul`]: super::matmul

use std::ffi::{c_int, c_void};
use std::mem::size_of;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{bytes_of, epilogue, get_attribute, read, set_attribute, unserved, write, Layout, MatmulDesc, Record};
use crate::blas::gemm::Types;
use crate::blas::gemm_ex::{ex_types, scale_type};
use crate::blas::{guard, handle};
use crate::error::{code, CuResult, Error};
use crate::state::put;

/// Bytes NVIDIA's header gives `cublasLtMatmulAlgo_t`.
pub(super) const ALGO_BYTES: usize = 8 * 8;
const ALGO_MARK: u32 = u32::from_le_bytes(*b"acLa");
/// The one algorithm's id.
const GEMM_ID: c_int = 0;

/// A `cublasLtMatmulAlgo_t`'s record: the types it was made for and its configuration.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Algo {
    mark: u32,
    id: i32,
    compute_type: i32,
    scale_type: i32,
    /// `cudaDataType`s of A, B, C, D.
    types: [u32; 4],
    tile: u32,
    splitk: i32,
    reduction: u32,
    swizzling: u32,
    custom: u32,
    stages: u32,
    inner_shape: u16,
    cluster_shape: u16,
}

const _: () = assert!(size_of::<Algo>() <= ALGO_BYTES);

impl Record for Algo {
    const MARK: u32 = ALGO_MARK;
    const BYTES: usize = ALGO_BYTES;
    const NAME: &'static str = "cublasLtMatmulAlgo";
    fn field(&mut self, attr: c_int) -> CuResult<&mut [u8]> {
        Ok(match attr {
            0 => bytes_of(&mut self.id),
            1 => bytes_of(&mut self.tile),
            2 => bytes_of(&mut self.splitk),
            3 => bytes_of(&mut self.reduction),
            4 => bytes_of(&mut self.swizzling),
            5 => bytes_of(&mut self.custom),
            6 => bytes_of(&mut self.stages),
            7 => bytes_of(&mut self.inner_shape),
            8 => bytes_of(&mut self.cluster_shape),
            _ => return unserved(Self::NAME, attr),
        })
    }
}

impl Algo {
    /// The builtin gemm's record for these types, in its one configuration (cuBLASLt's
    /// defaults: tile and stages undefined, one split, no reduction scheme).
    pub(super) fn gemm(compute_type: c_int, scale_type: c_int, types: [u32; 4]) -> Algo {
        Algo { mark: ALGO_MARK, id: GEMM_ID, compute_type, scale_type, types, splitk: 1, ..Algo::default() }
    }

    /// The record of the matmul `desc` over layouts `layouts`.
    pub(super) fn of(desc: &MatmulDesc, layouts: [&Layout; 4]) -> Algo {
        Algo::gemm(desc.compute_type, desc.scale_type, layouts.map(|l| l.data_type))
    }

    /// Refused unless it was made for this matmul's types (`INVALID_VALUE`, as cuBLASLt) and
    /// asks for nothing the builtin gemm does not do (`NOT_SUPPORTED`).
    pub(super) fn check(&self, desc: &MatmulDesc, layouts: [&Layout; 4]) -> CuResult<()> {
        let wanted = Algo::of(desc, layouts);
        let made_for = (self.compute_type, self.scale_type, self.types);
        if made_for != (wanted.compute_type, wanted.scale_type, wanted.types) {
            let why = format!(
                "an algorithm made for compute type {}, scale type {}, matrices {:?} used for {}, {}, {:?}",
                self.compute_type, self.scale_type, self.types, wanted.compute_type, wanted.scale_type, wanted.types
            );
            return Err(Error::said(code::INVALID_VALUE, why));
        }
        if self.id != GEMM_ID {
            return Err(Error::said(code::INVALID_VALUE, format!("algorithm id {}", self.id)));
        }
        let config = Algo { mark: self.mark, ..wanted };
        if *self != config {
            let why = format!(
                "a configuration the builtin gemm does not run (tile {}, split-K {}, reduction {}, swizzling {}, \
                 option {}, stages {}, inner shape {}, cluster {}): served is cublasLtMatmulAlgoInit's",
                self.tile,
                self.splitk,
                self.reduction,
                self.swizzling,
                self.custom,
                self.stages,
                self.inner_shape,
                self.cluster_shape
            );
            return Err(Error::said(code::NOT_SUPPORTED, why));
        }
        Ok(())
    }
}

/// The types of a matmul computed as `compute` with scalars of `scale` over matrices of
/// `cudaDataType`s `types` (A, B, C, D), or why they are not served (`NOT_SUPPORTED`).
pub(super) fn served_types(compute: c_int, scale: c_int, [a, b, c, d]: [u32; 4]) -> CuResult<Types> {
    if c != d {
        return Err(Error::said(code::NOT_SUPPORTED, format!("C of type {c} and D of type {d}")));
    }
    let types = ex_types([a, b, d].map(|t| t as c_int), compute)?;
    if types.precision.is_complex() {
        return Err(Error::said(code::NOT_SUPPORTED, format!("complex matrices (type {d})")));
    }
    if scale != scale_type(types.precision) {
        return Err(Error::said(code::NOT_SUPPORTED, format!("scale type {scale} with matrices of type {d}")));
    }
    Ok(types)
}

/// Bytes of one element of `cudaDataType` `data_type` (of the served ones).
fn element_bytes(data_type: u32) -> u32 {
    match data_type {
        2 | 14 => 2, // CUDA_R_16F, CUDA_R_16BF
        1 | 4 => 8,  // CUDA_R_64F, CUDA_C_32F
        5 => 16,     // CUDA_C_64F
        _ => 4,      // CUDA_R_32F
    }
}

/// Capability `attr` of `algo` as its bytes, or why it is refused.
fn capability(algo: &Algo, attr: c_int) -> CuResult<Vec<u8>> {
    let int = |v: i32| v.to_le_bytes().to_vec();
    Ok(match attr {
        // Split-K, reduction schemes, swizzling: none.
        0..=2 => int(0),
        // Strided batches: yes; D apart from C: no (D must be C unless beta is 0); triangles:
        // no.
        3 => int(1),
        4 | 5 => int(0),
        // Tile ids and stages ids: only "undefined".
        6 | 13 => int(0),
        // Custom options: none beyond 0; memory orders: column-major only; negative leading
        // dimensions: no.
        7 | 10 | 14 => int(0),
        // Pointer modes: host and device (CUBLASLT_POINTER_MODE_MASK_HOST | _DEVICE).
        11 => int(0b11),
        // Epilogues: every one of cuBLASLt's 16, on each type served.
        12 => int(epilogue::CAPABILITY as i32),
        // Numerical implementation: an FMA in the compute type, none of the tensor-core kinds.
        15 => 1u64.to_le_bytes().to_vec(),
        // Alignment of A, B, C, D: an element.
        16..=19 => int(element_bytes(algo.types[attr as usize - 16]) as i32),
        // Pointer-array batches, emulation, grouped batches: no.
        21..=23 => int(0),
        _ => return Err(Error::said(code::INVALID_VALUE, format!("algorithm capability {attr}"))),
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuBLASLt's signature
pub unsafe extern "C" fn cublasLtMatmulAlgoGetIds(
    h: usize,
    compute: c_int,
    scale: c_int,
    a: u32,
    b: u32,
    c: u32,
    d: u32,
    requested: c_int,
    ids: *mut c_int,
    count: *mut c_int,
) -> u32 {
    guard("cublasLtMatmulAlgoGetIds", || {
        handle(h)?;
        if requested < 1 || ids.is_null() {
            return Err(Error::said(code::INVALID_VALUE, format!("{requested} ids asked for")));
        }
        match served_types(compute, scale, [a, b, c, d]) {
            Ok(_) => {
                put(ids, GEMM_ID)?;
                put(count, 1)
            }
            Err(_) => put(count, 0),
        }
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuBLASLt's signature
pub unsafe extern "C" fn cublasLtMatmulAlgoInit(
    h: usize,
    compute: c_int,
    scale: c_int,
    a: u32,
    b: u32,
    c: u32,
    d: u32,
    id: c_int,
    algo: *mut c_void,
) -> u32 {
    guard("cublasLtMatmulAlgoInit", || {
        handle(h)?;
        if algo.is_null() || id != GEMM_ID {
            return Err(Error::said(code::INVALID_VALUE, format!("algorithm id {id} (the one served is {GEMM_ID})")));
        }
        served_types(compute, scale, [a, b, c, d])?;
        write(algo, Algo::gemm(compute, scale, [a, b, c, d]));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasLtMatmulAlgoCapGetAttribute(
    algo: *const c_void,
    attr: c_int,
    buf: *mut c_void,
    size: usize,
    written: *mut usize,
) -> u32 {
    guard("cublasLtMatmulAlgoCapGetAttribute", || {
        let value = capability(&read::<Algo>(algo)?, attr)?;
        if size == 0 {
            return put(written, value.len());
        }
        if buf.is_null() || size < value.len() {
            return Err(Error::said(code::INVALID_VALUE, format!("{size} bytes for algorithm capability {attr}")));
        }
        std::ptr::copy_nonoverlapping(value.as_ptr(), buf.cast::<u8>(), value.len());
        if !written.is_null() {
            put(written, value.len())?;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasLtMatmulAlgoConfigSetAttribute(
    algo: *mut c_void,
    attr: c_int,
    buf: *const c_void,
    size: usize,
) -> u32 {
    guard("cublasLtMatmulAlgoConfigSetAttribute", || {
        if attr == 0 {
            return Err(Error::said(
                code::INVALID_VALUE,
                "the algorithm id is read-only (set by cublasLtMatmulAlgoInit)",
            ));
        }
        set_attribute::<Algo>(algo, attr, buf, size)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasLtMatmulAlgoConfigGetAttribute(
    algo: *const c_void,
    attr: c_int,
    buf: *mut c_void,
    size: usize,
    written: *mut usize,
) -> u32 {
    guard("cublasLtMatmulAlgoConfigGetAttribute", || get_attribute::<Algo>(algo, attr, buf, size, written))
}

/// cuBLASLt's heuristics cache capacity (entries; 0 turns the cache off): kept and answered.
/// The shim's heuristic answers one algorithm at once, and caches nothing.
static HEURISTICS_CACHE_CAPACITY: AtomicUsize = AtomicUsize::new(HEURISTICS_CACHE_DEFAULT);

/// cuBLASLt's default capacity, unless `CUBLASLT_HEURISTICS_CACHE_CAPACITY` says otherwise.
const HEURISTICS_CACHE_DEFAULT: usize = 8192;

/// The capacity first answered: the environment's, else the default.
fn initial_capacity() -> usize {
    static READ: std::sync::Once = std::sync::Once::new();
    READ.call_once(|| {
        let set = std::env::var("CUBLASLT_HEURISTICS_CACHE_CAPACITY").ok().and_then(|v| v.parse().ok());
        if let Some(capacity) = set {
            HEURISTICS_CACHE_CAPACITY.store(capacity, Ordering::Relaxed);
        }
    });
    HEURISTICS_CACHE_CAPACITY.load(Ordering::Relaxed)
}

#[no_mangle]
pub unsafe extern "C" fn cublasLtHeuristicsCacheGetCapacity(capacity: *mut usize) -> u32 {
    guard("cublasLtHeuristicsCacheGetCapacity", || put(capacity, initial_capacity()))
}

#[no_mangle]
pub extern "C" fn cublasLtHeuristicsCacheSetCapacity(capacity: usize) -> u32 {
    guard("cublasLtHeuristicsCacheSetCapacity", || {
        initial_capacity();
        HEURISTICS_CACHE_CAPACITY.store(capacity, Ordering::Relaxed);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::super::{layout, matmul_desc};
    use super::*;

    fn f32_matmul() -> (MatmulDesc, [Layout; 4]) {
        (matmul_desc(68, 0), [layout(0, 4, 3, 4), layout(0, 3, 2, 3), layout(0, 4, 2, 4), layout(0, 4, 2, 4)])
    }

    fn check(algo: &Algo, (desc, l): &(MatmulDesc, [Layout; 4])) -> CuResult<()> {
        algo.check(desc, [&l[0], &l[1], &l[2], &l[3]])
    }

    #[test]
    fn an_algorithm_runs_only_the_types_it_was_made_for_in_its_one_configuration() {
        let matmul = f32_matmul();
        let algo = Algo::gemm(68, 0, [0; 4]);
        check(&algo, &matmul).unwrap();
        // Made for f64, used for f32: cuBLASLt's INVALID_VALUE.
        let double = Algo::gemm(70, 1, [1; 4]);
        assert_eq!(check(&double, &matmul).unwrap_err().code(), code::INVALID_VALUE);
        // Split in K, or swizzled: not what the builtin gemm does.
        for configured in [Algo { splitk: 4, ..algo }, Algo { swizzling: 1, ..algo }, Algo { tile: 15, ..algo }] {
            assert_eq!(check(&configured, &matmul).unwrap_err().code(), code::NOT_SUPPORTED, "{configured:?}");
        }
        assert_eq!(check(&Algo { id: 3, ..algo }, &matmul).unwrap_err().code(), code::INVALID_VALUE);
    }

    #[test]
    fn a_configuration_set_reads_back_and_the_id_is_read_only() {
        let mut memory = [0u64; ALGO_BYTES / 8];
        let at = memory.as_mut_ptr().cast::<c_void>();
        unsafe {
            write(at, Algo::gemm(68, 0, [0; 4]));
            let splits: i32 = 2;
            set_attribute::<Algo>(at, 2, (&splits as *const i32).cast(), 4).unwrap();
            let shape: u16 = 7;
            // A 16-bit attribute takes two bytes, not four.
            assert!(set_attribute::<Algo>(at, 7, (&splits as *const i32).cast(), 4).is_err());
            set_attribute::<Algo>(at, 7, (&shape as *const u16).cast(), 2).unwrap();
            let record: Algo = read(at).unwrap();
            assert_eq!((record.splitk, record.inner_shape, record.id), (2, 7, 0));
            let s = cublasLtMatmulAlgoConfigSetAttribute(at, 0, (&splits as *const i32).cast(), 4);
            assert_eq!(s, crate::blas::status::INVALID_VALUE);
        }
    }

    #[test]
    fn capabilities_say_what_the_builtin_gemm_does() {
        let half = Algo::gemm(68, 0, [2, 2, 0, 0]);
        let int = |attr| i32::from_le_bytes(capability(&half, attr).unwrap()[..4].try_into().unwrap());
        assert_eq!(int(0), 0, "no split-K");
        assert_eq!(int(3), 1, "strided batches");
        // Every epilogue's bits: 1 DEFAULT to 512 BGRADB, on f64 too.
        assert_eq!(int(12), 1023, "every epilogue");
        let double = Algo::gemm(70, 1, [1; 4]);
        assert_eq!(capability(&double, 12).unwrap()[..4], 1023i32.to_le_bytes(), "every epilogue on f64");
        assert_eq!([16, 17, 18, 19].map(int), [2, 2, 4, 4], "alignment: an element");
        assert_eq!(capability(&half, 9).unwrap_err().code(), code::INVALID_VALUE);
        // What the heuristic's matmuls are made of is served; complex or mixed C/D is not.
        assert!(served_types(68, 0, [2, 2, 0, 0]).is_ok());
        assert_eq!(served_types(68, 4, [4; 4]).unwrap_err().code(), code::NOT_SUPPORTED);
        assert_eq!(served_types(68, 0, [0, 0, 0, 2]).unwrap_err().code(), code::NOT_SUPPORTED);
    }
}
