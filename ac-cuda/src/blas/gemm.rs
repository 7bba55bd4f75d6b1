//! The gemm family: `cublasSgemm`, `cublasDgemm`, `cublasHgemm` (binary16), `cublasCgemm`,
//! `cublasZgemm` (complex) and their strided-batched forms, each a launch of the backend's
//! builtin `blas_sgemm`, `blas_dgemm`, `blas_gemm_ex`, `blas_cgemm` or `blas_zgemm` on the
//! handle's stream; and [`launch`], which the level-1 and level-2 functions
//! ([`super::vectors`]), the `Ex` forms on any mix of types ([`super::gemm_ex`]) and cuBLASLt
//! use too.

use std::ffi::{c_int, c_longlong, c_void};

use ac_frontend::{DevicePtr, KernelArg};
use ac_proto::backend::builtin::{f16_to_f32, f32_to_f16, Gemm, GemmElement};

use super::{guard, handle, Target};
use crate::builtins::builtins;
use crate::error::{code, CuResult, Error};
use crate::managed::calls::at_device_memory;
use crate::memory::device_to_host;
use crate::state;

/// Threads of a gemm launch's block (a thread an element of C).
const BLOCK: u32 = 256;

/// The type a gemm computes in and takes its scalars in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Precision {
    Single,
    Double,
    /// Scalars in binary16 (`cublasHgemm`, `CUBLAS_COMPUTE_16F`), computed in `f32`: every
    /// product and sum rounded less often than cuBLAS's half-precision compute would.
    Half,
    /// `cuComplex`: two `f32`, the real part first.
    ComplexSingle,
    /// `cuDoubleComplex`: two `f64`.
    ComplexDouble,
}

impl Precision {
    /// Bytes of one element.
    pub fn bytes(self) -> usize {
        match self {
            Precision::Single => 4,
            Precision::Double | Precision::ComplexSingle => 8,
            Precision::Half => 2,
            Precision::ComplexDouble => 16,
        }
    }

    /// The type of its elements' parts: itself for a real type.
    pub fn real(self) -> Precision {
        match self {
            Precision::ComplexSingle => Precision::Single,
            Precision::ComplexDouble => Precision::Double,
            real => real,
        }
    }

    /// Whether its elements are complex.
    pub fn is_complex(self) -> bool {
        matches!(self, Precision::ComplexSingle | Precision::ComplexDouble)
    }

    /// A scalar of this type (a complex one's real or imaginary part) as a kernel argument.
    pub fn arg(self, value: f64) -> KernelArg {
        match self {
            // Exact: every value came from an f32 (or a half) of the program's.
            Precision::Single | Precision::Half | Precision::ComplexSingle => KernelArg::F32(value as f32),
            Precision::Double | Precision::ComplexDouble => KernelArg::F64(value),
        }
    }

    /// One element's real and imaginary parts (0 for a real type) from its little-endian bytes.
    pub fn parts(self, bytes: &[u8]) -> [f64; 2] {
        let single = |at: usize| f64::from(f32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")));
        let double = |at: usize| f64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        match self {
            Precision::Single => [single(0), 0.0],
            Precision::Double => [double(0), 0.0],
            Precision::Half => [f64::from(f16_to_f32(u16::from_le_bytes([bytes[0], bytes[1]]))), 0.0],
            Precision::ComplexSingle => [single(0), single(4)],
            Precision::ComplexDouble => [double(0), double(8)],
        }
    }

    /// A real element's little-endian bytes (a complex one's: its imaginary part 0).
    pub fn encode(self, value: f64) -> Vec<u8> {
        self.encode_parts([value, 0.0])
    }

    /// An element's little-endian bytes from its real and imaginary parts (the imaginary one
    /// dropped for a real type).
    pub fn encode_parts(self, [re, im]: [f64; 2]) -> Vec<u8> {
        match self {
            Precision::Single => (re as f32).to_le_bytes().to_vec(),
            Precision::Double => re.to_le_bytes().to_vec(),
            Precision::Half => f32_to_f16(re as f32).to_le_bytes().to_vec(),
            Precision::ComplexSingle => [re as f32, im as f32].iter().flat_map(|v| v.to_le_bytes()).collect(),
            Precision::ComplexDouble => [re, im].iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }
}

/// What a gemm computes in, and its matrices' types where they are not all of that type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Types {
    /// The scalars' type (and the compute type, but that binary16 is computed in `f32`).
    pub precision: Precision,
    /// `None` when all three matrices are of `precision` (`blas_sgemm`, `blas_dgemm`); else
    /// A's, B's and C's (`blas_gemm_ex`).
    pub elements: Option<[GemmElement; 3]>,
}

impl Types {
    /// All three matrices of the compute type.
    pub const fn uniform(precision: Precision) -> Self {
        Types { precision, elements: None }
    }

    /// Bytes of one element of `C`.
    pub fn result_bytes(&self) -> usize {
        self.widths()[2] as usize
    }

    /// Bytes of one element of `A`, `B` and `C`.
    pub fn widths(&self) -> [u64; 3] {
        self.elements.map_or([self.precision.bytes() as u64; 3], |types| types.map(GemmElement::bytes))
    }
}

/// The types of `cublasHgemm`: binary16 matrices and scalars.
pub(super) const HALF: Types = Types { precision: Precision::Half, elements: Some([GemmElement::F16; 3]) };

/// `alpha` or `beta`: where the program keeps it, or a value of the shim's own.
#[derive(Debug, Clone, Copy)]
pub(super) enum Scalar {
    /// The program's pointer: host or device memory as the call's pointer mode says.
    At(*const c_void),
    /// A constant (a level-1 call done as a gemm).
    Value(f64),
    /// A complex constant's real and imaginary parts (a scalar read already, or derived from
    /// one: her2k's conjugate alpha).
    Parts([f64; 2]),
}

/// A matrix of a gemm: program memory, or a buffer of the shim's own.
#[derive(Debug, Clone, Copy)]
pub(super) enum Operand {
    /// A device address of the program's.
    Memory(u64),
    /// The constant one (a 1 x 1 matrix).
    One,
    /// A buffer of the shim's own, given as it is passed to the kernel: the result slot (which
    /// the caller holds and reads back), a row of ones.
    Slot(KernelArg),
}

impl Operand {
    /// A matrix of program memory or the shim's own buffer as a kernel argument: the program's
    /// `elements` elements of `width` bytes must lie in one of its allocations. The constant
    /// one is the gemm's own ([`launch_reading`]).
    pub(super) fn argument(self, target: Target, elements: u64, width: u64) -> CuResult<KernelArg> {
        match self {
            Operand::Memory(address) => matrix(target, address, elements, width),
            Operand::Slot(slot) => Ok(slot),
            Operand::One => Err(Error::said(code::INVALID_VALUE, "the constant one where a matrix is read")),
        }
    }

    /// The matrix `bytes` further on (the constant one stays itself).
    pub(super) fn offset(self, bytes: u64) -> Operand {
        match self {
            Operand::Memory(address) => Operand::Memory(address + bytes),
            Operand::Slot(KernelArg::Ptr(p)) => {
                Operand::Slot(KernelArg::Ptr(DevicePtr { offset: p.offset + bytes, ..p }))
            }
            other => other,
        }
    }
}

/// One gemm call's arguments, as cuBLAS takes them (`stride` and `batch` are 0 and 1 for a
/// plain gemm).
#[derive(Debug, Clone, Copy)]
pub(super) struct GemmCall {
    pub types: Types,
    pub trans: [c_int; 2],
    pub m: c_int,
    pub n: c_int,
    pub k: c_int,
    pub alpha: Scalar,
    pub matrices: [Operand; 3],
    pub ld: [c_int; 3],
    pub stride: [c_longlong; 3],
    pub beta: Scalar,
    pub batch: c_int,
}

/// Checks a call as cuBLAS does (dimensions and counts not negative, a known operation, each
/// leading dimension at least its matrix's rows) and as the backend will (batches' results
/// apart), and gives its shape.
pub(super) fn check(call: &GemmCall) -> CuResult<Gemm> {
    let invalid = |why: String| Err(Error::said(code::INVALID_VALUE, why));
    if [call.m, call.n, call.k, call.batch].iter().any(|&d| d < 0) || call.stride.iter().any(|&s| s < 0) {
        return invalid(format!("negative sizes (m {}, n {}, k {}, batch {})", call.m, call.n, call.k, call.batch));
    }
    if call.trans.iter().any(|t| !(0..=2).contains(t)) {
        return invalid(format!("unknown operation {:?} (N 0, T 1, C 2)", call.trans));
    }
    if call.ld.iter().any(|&ld| ld < 0) {
        return invalid(format!("a negative leading dimension {:?}", call.ld));
    }
    let shape = Gemm {
        trans_a: call.trans[0] != 0,
        trans_b: call.trans[1] != 0,
        m: call.m as u64,
        n: call.n as u64,
        k: call.k as u64,
        ld: call.ld.map(|ld| ld as u64),
        stride: call.stride.map(|s| s as u64),
        batch: call.batch as u64,
    };
    match shape.refusal() {
        Some(why) => invalid(why),
        None => Ok(shape),
    }
}

/// The value of a real `alpha` or `beta`: [`scalar_parts`]'s real part.
pub(super) unsafe fn scalar_value(target: Target, precision: Precision, scalar: Scalar) -> CuResult<f64> {
    Ok(scalar_parts(target, precision, scalar)?[0])
}

/// The real and imaginary parts (0 for a real type) of `alpha` or `beta`: read from host
/// memory, or (`CUBLAS_POINTER_MODE_DEVICE`) from device memory after the work queued before,
/// as cuBLAS's kernel would read it when it runs (so such a call waits).
pub(super) unsafe fn scalar_parts(target: Target, precision: Precision, scalar: Scalar) -> CuResult<[f64; 2]> {
    let p = match scalar {
        Scalar::Value(v) => return Ok([v, 0.0]),
        Scalar::Parts(parts) => return Ok(parts),
        Scalar::At(p) => p,
    };
    let mut bytes = [0u8; 16];
    let bytes = &mut bytes[..precision.bytes()];
    load(target, p, bytes)?;
    Ok(precision.parts(bytes))
}

/// Fills `bytes` from the program's `p`: host or (`CUBLAS_POINTER_MODE_DEVICE`) device memory,
/// the latter after the work queued before (so such a call waits).
pub(super) unsafe fn load(target: Target, p: *const c_void, bytes: &mut [u8]) -> CuResult<()> {
    if p.is_null() {
        return Err(Error::said(code::INVALID_VALUE, "a scalar's pointer is null"));
    }
    if target.host_pointers() {
        crate::managed::settle_host(p as u64)?;
        std::ptr::copy_nonoverlapping(p.cast::<u8>(), bytes.as_mut_ptr(), bytes.len());
        Ok(())
    } else {
        at_device_memory(p as u64, || device_to_host(bytes.as_mut_ptr().cast(), p as u64, bytes.len()))
    }
}

/// Which elements of C a gemm computes and how it reads A and B: which builtin it launches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reading {
    /// All of C, from A and B as they are stored (`blas_<t>gemm`).
    Plain,
    /// The lower (`fill` 0) or upper (1) triangle of a square C (`blas_<t>gemmt`).
    Triangle(c_int),
    /// All of C, A or B read from one triangle as `form` says (`blas_<t>gemm_tri`: symm,
    /// hemm, trmm; the backend's `device/structured.rs`).
    Structured(u32),
}

/// Launches a gemm on the target's stream: checked, its scalars read, its matrices found in
/// the program's allocations (or the device's scratch), sent without waiting.
pub(super) unsafe fn launch(target: Target, call: GemmCall) -> CuResult<()> {
    launch_reading(target, call, Reading::Plain)
}

/// [`launch`] computing only the lower (`fill` 0) or upper (1) triangle of a square C, the
/// diagonal included (`blas_<t>gemmt`); C's other elements are not touched.
pub(super) unsafe fn launch_triangle(target: Target, call: GemmCall, fill: c_int) -> CuResult<()> {
    if call.m != call.n || !(0..=1).contains(&fill) || call.batch != 1 {
        let why = format!("a triangle (fill {fill}) of C {} x {} ({} of them)", call.m, call.n, call.batch);
        return Err(Error::said(code::INVALID_VALUE, why));
    }
    launch_reading(target, call, Reading::Triangle(fill))
}

/// [`launch`] of the builtin `reading` names.
pub(super) unsafe fn launch_reading(target: Target, mut call: GemmCall, reading: Reading) -> CuResult<()> {
    let mut shape = check(&call)?;
    let precision = call.types.precision;
    let alpha = scalar_parts(target, precision, call.alpha)?;
    let beta = scalar_parts(target, precision, call.beta)?;
    if shape.is_empty() {
        return Ok(());
    }
    // BLAS reads neither A nor B when k or alpha is 0: C = beta C (alpha 0 too, so that an
    // infinite alpha times the empty sum is not NaN).
    let (alpha, reading) = if call.k == 0 || alpha == [0.0; 2] {
        (call.k, shape.k) = (0, 0);
        // Nothing is read of A and B: no structure to read them by.
        ([0.0; 2], if let Reading::Structured(_) = reading { Reading::Plain } else { reading })
    } else {
        (alpha, reading)
    };
    let device = builtins(target.device)?;
    let widths = call.types.widths();
    let mut pointers: [Option<KernelArg>; 3] = [None; 3];
    for (x, elements) in shape.footprints().into_iter().enumerate() {
        if elements == 0 {
            continue;
        }
        pointers[x] = Some(match call.matrices[x] {
            // The shim's own 1 x 1 matrices: its callers pass ld 1, no stride, one batch.
            // An `f32` or `f64` one (real or complex) as the compute type: the shim's callers
            // use it only where A is of that type (level 1, not `cublasHgemm`'s binary16).
            Operand::One => device.one(precision.real() == Precision::Double),
            operand => operand.argument(target, elements, widths[x])?,
        });
    }
    // A matrix of no elements (k = 0) is not read: C's pointer stands in for it.
    let c = pointers[2].ok_or(Error::Code(code::INVALID_VALUE))?;
    let [a, b] = [0, 1].map(|x| pointers[x].unwrap_or(c));
    send(target, &call, reading, [a, b, c], [alpha, beta])
}

/// A matrix of the program's at `address` as a kernel argument: its `elements` elements of
/// `width` bytes (from its pointer, over every batch) must lie in one of its allocations.
pub(super) fn matrix(target: Target, address: u64, elements: u64, width: u64) -> CuResult<KernelArg> {
    let len = elements.checked_mul(width).ok_or_else(|| Error::said(code::INVALID_VALUE, "a matrix beyond memory"))?;
    let (alloc, offset) = state::shim()?.find(target.device, address, len)?;
    Ok(alloc.buffer.at(offset as usize))
}

/// The builtin gemms of each type (`f32`, `f64`, `cuComplex`, `cuDoubleComplex`) by reading.
const NAMES: [[&str; 3]; 4] = [
    ["blas_sgemm", "blas_sgemmt", "blas_sgemm_tri"],
    ["blas_dgemm", "blas_dgemmt", "blas_dgemm_tri"],
    ["blas_cgemm", "blas_cgemmt", "blas_cgemm_tri"],
    ["blas_zgemm", "blas_zgemmt", "blas_zgemm_tri"],
];

/// Sends the launch of `blas_sgemm`, `blas_dgemm`, `blas_gemm_ex`, `blas_cgemm` or
/// `blas_zgemm` on the target's stream; of `blas_<s|d|c|z>gemmt` or `gemm_tri` as `reading` says.
fn send(
    target: Target,
    call: &GemmCall,
    reading: Reading,
    [a, b, c]: [KernelArg; 3],
    [alpha, beta]: [[f64; 2]; 2],
) -> CuResult<()> {
    let u = |v: c_int| KernelArg::U32(v as u32);
    let l = |v: c_longlong| KernelArg::U64(v as u64);
    // A real matrix's conjugate transpose is its transpose.
    let precision = call.types.precision;
    let op = |t: c_int| if precision.is_complex() { t } else { t.min(1) };
    let mut args = vec![
        u(op(call.trans[0])),
        u(op(call.trans[1])),
        u(call.m),
        u(call.n),
        u(call.k),
        precision.arg(alpha[0]),
        a,
        u(call.ld[0]),
        l(call.stride[0]),
        b,
        u(call.ld[1]),
        l(call.stride[1]),
        precision.arg(beta[0]),
        c,
        u(call.ld[2]),
        l(call.stride[2]),
        u(call.batch),
    ];
    let (column, last) = match reading {
        Reading::Plain => (0, None),
        Reading::Triangle(fill) => (1, Some(fill as u32)),
        Reading::Structured(form) => (2, Some(form)),
    };
    let name = match (call.types.elements, precision) {
        (Some(types), Precision::Single | Precision::Half) if reading == Reading::Plain => {
            args.push(KernelArg::U32(GemmElement::encode(types)));
            "blas_gemm_ex"
        }
        (None, Precision::Single) => NAMES[0][column],
        (None, Precision::Double) => NAMES[1][column],
        (None, Precision::ComplexSingle | Precision::ComplexDouble) => {
            args.extend([precision.arg(alpha[1]), precision.arg(beta[1])]);
            NAMES[if precision == Precision::ComplexSingle { 2 } else { 3 }][column]
        }
        (types, precision) => {
            let why = format!("matrices of types {types:?} computed in {precision:?} ({reading:?})");
            return Err(Error::said(code::NOT_SUPPORTED, why));
        }
    };
    args.extend(last.map(KernelArg::U32));
    target.launch(name, &args, call.m as u64 * call.n as u64 * call.batch as u64, BLOCK)
}

/// The device address of a program's operand, for tests that check which matrix a call reads.
#[cfg(test)]
pub(super) fn at(operand: Operand) -> u64 {
    match operand {
        Operand::Memory(address) => address,
        other => panic!("{other:?} is not program memory"),
    }
}

/// A gemm entry point's body: the call on handle `h`.
pub(super) unsafe fn gemm(h: usize, call: GemmCall) -> CuResult<()> {
    launch(handle(h)?.target(), call)
}

/// Defines `cublas<S|D|H|C|Z>gemm` for element type `$t` (scalars' pointee) and `$types`.
macro_rules! typed_gemm {
    ($name:ident, $t:ty, $types:expr, $call:literal) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            transa: c_int,
            transb: c_int,
            m: c_int,
            n: c_int,
            k: c_int,
            alpha: *const $t,
            a: u64,
            lda: c_int,
            b: u64,
            ldb: c_int,
            beta: *const $t,
            c: u64,
            ldc: c_int,
        ) -> u32 {
            let call =
                plain($types, [transa, transb], [m, n, k], alpha.cast(), [a, b, c], [lda, ldb, ldc], beta.cast());
            guard($call, || gemm(h, call))
        }
    };
}

/// Defines `cublas<S|D|H|C|Z>gemmStridedBatched` for element type `$t` and `$types`.
macro_rules! typed_gemm_strided_batched {
    ($name:ident, $t:ty, $types:expr, $call:literal) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            transa: c_int,
            transb: c_int,
            m: c_int,
            n: c_int,
            k: c_int,
            alpha: *const $t,
            a: u64,
            lda: c_int,
            stride_a: c_longlong,
            b: u64,
            ldb: c_int,
            stride_b: c_longlong,
            beta: *const $t,
            c: u64,
            ldc: c_int,
            stride_c: c_longlong,
            batch: c_int,
        ) -> u32 {
            let mut call =
                plain($types, [transa, transb], [m, n, k], alpha.cast(), [a, b, c], [lda, ldb, ldc], beta.cast());
            (call.stride, call.batch) = ([stride_a, stride_b, stride_c], batch);
            guard($call, || gemm(h, call))
        }
    };
}

const SINGLE: Types = Types::uniform(Precision::Single);
const DOUBLE: Types = Types::uniform(Precision::Double);
typed_gemm!(cublasSgemm_v2, f32, SINGLE, "cublasSgemm");
typed_gemm!(cublasDgemm_v2, f64, DOUBLE, "cublasDgemm");
// binary16 scalars and matrices, as their bits (`__half`).
typed_gemm!(cublasHgemm, u16, HALF, "cublasHgemm");
typed_gemm_strided_batched!(cublasSgemmStridedBatched, f32, SINGLE, "cublasSgemmStridedBatched");
typed_gemm_strided_batched!(cublasDgemmStridedBatched, f64, DOUBLE, "cublasDgemmStridedBatched");
typed_gemm_strided_batched!(cublasHgemmStridedBatched, u16, HALF, "cublasHgemmStridedBatched");
// Complex scalars and matrices (`cuComplex`, `cuDoubleComplex`), operation 2 the conjugate
// transpose.
const COMPLEX_SINGLE: Types = Types::uniform(Precision::ComplexSingle);
const COMPLEX_DOUBLE: Types = Types::uniform(Precision::ComplexDouble);
typed_gemm!(cublasCgemm_v2, [f32; 2], COMPLEX_SINGLE, "cublasCgemm");
typed_gemm!(cublasZgemm_v2, [f64; 2], COMPLEX_DOUBLE, "cublasZgemm");
typed_gemm_strided_batched!(cublasCgemmStridedBatched, [f32; 2], COMPLEX_SINGLE, "cublasCgemmStridedBatched");
typed_gemm_strided_batched!(cublasZgemmStridedBatched, [f64; 2], COMPLEX_DOUBLE, "cublasZgemmStridedBatched");
// The 3m forms name cuBLAS's Gauss algorithm (three real products for four): the same product,
// which the builtin kernel computes as the plain forms'.
typed_gemm!(cublasCgemm3m, [f32; 2], COMPLEX_SINGLE, "cublasCgemm3m");
typed_gemm!(cublasZgemm3m, [f64; 2], COMPLEX_DOUBLE, "cublasZgemm3m");
typed_gemm_strided_batched!(cublasCgemm3mStridedBatched, [f32; 2], COMPLEX_SINGLE, "cublasCgemm3mStridedBatched");

/// A gemm call of one product, its scalars and matrices given.
pub(super) fn product(
    precision: Precision,
    trans: [c_int; 2],
    [m, n, k]: [c_int; 3],
    alpha: Scalar,
    matrices: [Operand; 3],
    ld: [c_int; 3],
    beta: Scalar,
) -> GemmCall {
    GemmCall { types: Types::uniform(precision), trans, m, n, k, alpha, matrices, ld, stride: [0; 3], beta, batch: 1 }
}

/// A cuBLAS entry point's one-product call of the given types: the program's scalar pointers
/// and matrices.
pub(super) fn plain(
    types: Types,
    trans: [c_int; 2],
    mnk: [c_int; 3],
    alpha: *const c_void,
    matrices: [u64; 3],
    ld: [c_int; 3],
    beta: *const c_void,
) -> GemmCall {
    let call =
        product(types.precision, trans, mnk, Scalar::At(alpha), matrices.map(Operand::Memory), ld, Scalar::At(beta));
    GemmCall { types, ..call }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(trans: [c_int; 2], mnk: [c_int; 3], ld: [c_int; 3]) -> GemmCall {
        plain(SINGLE, trans, mnk, std::ptr::null(), [0; 3], ld, std::ptr::null())
    }

    #[test]
    fn calls_are_checked_as_cublas_checks_them() {
        assert!(check(&call([0, 0], [4, 3, 2], [4, 2, 4])).is_ok());
        // The shape's rules (ac-proto, tested there) apply: A transposed is stored k x m.
        assert_eq!(check(&call([1, 0], [4, 3, 2], [1, 2, 4])).unwrap_err().code(), code::INVALID_VALUE);
        assert_eq!(check(&call([3, 0], [4, 3, 2], [4, 2, 4])).unwrap_err().code(), code::INVALID_VALUE);
        assert_eq!(check(&call([0, 0], [-1, 3, 2], [4, 2, 4])).unwrap_err().code(), code::INVALID_VALUE);
        assert_eq!(check(&call([0, 0], [4, 3, 2], [4, -2, 4])).unwrap_err().code(), code::INVALID_VALUE);
    }
}
