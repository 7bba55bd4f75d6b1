//! Level-2 BLAS on a matrix in BLAS's packed storage (one triangle of an `n x n` matrix, column
//! by column, `n (n + 1) / 2` elements): `cublas<S|D>spmv`, `cublas<C|Z>hpmv`,
//! `cublas<S|D|C|Z>tpmv` and `tpsv`, `cublas<S|D>spr` and `spr2`, `cublas<C|Z>hpr` and `hpr2`.
//!
//! None has a kernel of its own. Each unpacks `AP` into a square buffer of the shim's on the
//! handle's stream (the builtin `blas_<t>tpttr`, [`super::packed`]), runs the routine on that
//! triangle ([`super::triangle_vectors`]'s `symv`, `trmv`, `trsv`, `syr`, ...), and, for the
//! updates, packs the triangle back into `AP`; the buffer is freed after the work queued before
//! it. The other triangle of the buffer is never written nor read. `hpr` and `hpr2` then make
//! the diagonal real in the buffer before packing it back, as cuBLAS does (a byte memset an
//! element). The buffer is gone by the time a captured graph would run, so these calls are
//! refused while their stream captures.

use std::ffi::c_int;

use ac_frontend::{DeviceBuffer, KernelArg};

use super::gemm::{self, scalar_parts, Operand, Precision, Scalar};
use super::packed::{launch_conversion, packed_len};
use super::structured::{scratch, Kind};
use super::triangle_vectors::{self, rank_update, symv, triangular, trmv, trsv};
use super::{guard, handle, Target};
use crate::error::CuResult;
use crate::graph;
use crate::state;
use crate::stream::stream_of;

/// A vector of the program's: its address and increment.
type Vector = (u64, c_int);

/// Refuses what cuBLAS refuses of a call on a packed `n x n` triangle (as of one stored in a
/// square, [`triangle_vectors::check`]); gives whether there
/// is work ([`has_work`]).
fn check(target: Target, what: &str, uplo: c_int, n: c_int, incs: &[c_int]) -> CuResult<bool> {
    triangle_vectors::check(what, uplo, n, n.max(1), incs)?;
    has_work(target, what, n)
}

/// Whether a checked call has work (`n > 0`), which a capturing stream cannot record (the
/// buffer would be gone when the graph ran): refused.
fn has_work(target: Target, what: &str, n: c_int) -> CuResult<bool> {
    if n == 0 {
        return Ok(false);
    }
    graph::refuse_if_capturing(target.stream, what)?;
    Ok(true)
}

/// The program's packed triangle `uplo` at `ap` unpacked on the target's stream into an
/// `n x n` buffer of the shim's (leading dimension `n`).
struct Unpacked {
    buffer: DeviceBuffer<u8>,
    uplo: c_int,
    n: c_int,
    precision: Precision,
    /// The program's `AP`, checked to lie in its allocation, as a kernel argument.
    ap: KernelArg,
}

impl Unpacked {
    /// Unpacks the program's `ap` (`n > 0`).
    fn new(target: Target, precision: Precision, [uplo, n]: [c_int; 2], ap: u64) -> CuResult<Self> {
        let element = precision.bytes() as u64;
        let ap = gemm::matrix(target, ap, packed_len(n), element)?;
        let buffer = scratch(target, n as u64 * n as u64 * element)?;
        launch_conversion(target, precision, true, [uplo, n], ap, (buffer.at(0), n))?;
        Ok(Unpacked { buffer, uplo, n, precision, ap })
    }

    /// The square matrix as a routine's `(A, lda)`.
    fn matrix(&self) -> (Operand, c_int) {
        (Operand::Slot(self.buffer.at(0)), self.n)
    }

    /// Sets the imaginary part of each diagonal element to +0, on the target's stream.
    fn make_diagonal_real(&self, target: Target) -> CuResult<()> {
        let shim = state::shim()?;
        let stream = stream_of(target.stream, target.device)?;
        let (element, n) = (self.precision.bytes(), self.n as usize);
        let part = element / 2;
        for j in 0..n {
            shim.block_on(self.buffer.memset_range(&stream, j * (n + 1) * element + part, part, 0))?;
        }
        Ok(())
    }

    /// Packs the triangle back into the program's `ap`, on the target's stream.
    fn pack(self, target: Target) -> CuResult<()> {
        launch_conversion(target, self.precision, false, [self.uplo, self.n], self.ap, (self.buffer.at(0), self.n))
    }
}

/// `spmv` (`kind` symmetric) or `hpmv` (Hermitian): `y = alpha A x + beta y`.
#[allow(clippy::too_many_arguments)] // BLAS's arguments
unsafe fn spmv(
    h: usize,
    precision: Precision,
    kind: Kind,
    [uplo, n]: [c_int; 2],
    alpha: Scalar,
    ap: u64,
    x: Vector,
    beta: Scalar,
    y: Vector,
) -> CuResult<()> {
    let target = handle(h)?.target();
    if !check(target, "spmv", uplo, n, &[x.1, y.1])? {
        return Ok(());
    }
    let a = Unpacked::new(target, precision, [uplo, n], ap)?;
    symv(target, precision, kind, [uplo, n], alpha, a.matrix(), x, beta, y)
}

/// `tpmv` (`solve` false: `x = op(A) x`) or `tpsv` (`op(A) x = b` over `b`), `A` triangular.
unsafe fn tpmv(
    h: usize,
    precision: Precision,
    codes: [c_int; 3],
    n: c_int,
    ap: u64,
    x: Vector,
    solve: bool,
) -> CuResult<()> {
    let target = handle(h)?.target();
    let what = if solve { "tpsv" } else { "tpmv" };
    // As the routine will check the unpacked matrix (leading dimension n), before unpacking.
    triangular(what, codes, n, n.max(1), x.1)?;
    if !has_work(target, what, n)? {
        return Ok(());
    }
    let a = Unpacked::new(target, precision, [codes[0], n], ap)?;
    if solve {
        trsv(target, precision, codes, n, a.matrix(), x)
    } else {
        trmv(target, precision, codes, n, a.matrix(), x)
    }
}

/// `spr`, `spr2` (`y` given), or with `hermitian` `hpr` and `hpr2`: the packed triangle
/// updated.
#[allow(clippy::too_many_arguments)] // BLAS's arguments
unsafe fn spr(
    h: usize,
    precision: Precision,
    hermitian: bool,
    [uplo, n]: [c_int; 2],
    alpha: Scalar,
    x: Vector,
    y: Option<Vector>,
    ap: u64,
) -> CuResult<()> {
    let target = handle(h)?.target();
    let incs: Vec<c_int> = [Some(x), y].into_iter().flatten().map(|(_, inc)| inc).collect();
    let what = if y.is_some() { "spr2" } else { "spr" };
    if !check(target, what, uplo, n, &incs)? {
        return Ok(());
    }
    // Nothing to do before anything is unpacked: alpha 0 (A left as it is, as reference BLAS
    // returns at once).
    let alpha_type = if hermitian && y.is_none() { precision.real() } else { precision };
    let alpha = scalar_parts(target, alpha_type, alpha)?;
    if alpha == [0.0; 2] {
        return Ok(());
    }
    let a = Unpacked::new(target, precision, [uplo, n], ap)?;
    if rank_update(target, precision, hermitian, [uplo, n], Scalar::Parts(alpha), x, y, a.matrix())? {
        a.make_diagonal_real(target)?;
    }
    a.pack(target)
}

/// Defines `cublas<T>spmv` (or `hpmv`, `$kind` Hermitian) for element type `$t`.
macro_rules! spmv_entry {
    ($name:ident, $t:ty, $precision:expr, $kind:expr) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            uplo: c_int,
            n: c_int,
            alpha: *const $t,
            ap: u64,
            x: u64,
            incx: c_int,
            beta: *const $t,
            y: u64,
            incy: c_int,
        ) -> u32 {
            let (alpha, beta) = (Scalar::At(alpha.cast()), Scalar::At(beta.cast()));
            guard(stringify!($name), || spmv(h, $precision, $kind, [uplo, n], alpha, ap, (x, incx), beta, (y, incy)))
        }
    };
}

/// Defines `cublas<T>tpmv` (or, `$solve`, `cublas<T>tpsv`) for `$precision`.
macro_rules! tpmv_entry {
    ($name:ident, $precision:expr, $solve:expr) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            uplo: c_int,
            trans: c_int,
            diag: c_int,
            n: c_int,
            ap: u64,
            x: u64,
            incx: c_int,
        ) -> u32 {
            guard(stringify!($name), || tpmv(h, $precision, [uplo, trans, diag], n, ap, (x, incx), $solve))
        }
    };
}

/// Defines `cublas<T>spr` (or `hpr`, `$hermitian`), `alpha` of type `$alpha`.
macro_rules! spr_entry {
    ($name:ident, $alpha:ty, $precision:expr, $hermitian:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            h: usize,
            uplo: c_int,
            n: c_int,
            alpha: *const $alpha,
            x: u64,
            incx: c_int,
            ap: u64,
        ) -> u32 {
            let alpha = Scalar::At(alpha.cast());
            guard(stringify!($name), || spr(h, $precision, $hermitian, [uplo, n], alpha, (x, incx), None, ap))
        }
    };
}

/// Defines `cublas<T>spr2` (or `hpr2`, `$hermitian`) for element type `$t`.
macro_rules! spr2_entry {
    ($name:ident, $t:ty, $precision:expr, $hermitian:expr) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            uplo: c_int,
            n: c_int,
            alpha: *const $t,
            x: u64,
            incx: c_int,
            y: u64,
            incy: c_int,
            ap: u64,
        ) -> u32 {
            let (alpha, x, y) = (Scalar::At(alpha.cast()), (x, incx), Some((y, incy)));
            guard(stringify!($name), || spr(h, $precision, $hermitian, [uplo, n], alpha, x, y, ap))
        }
    };
}

spmv_entry!(cublasSspmv_v2, f32, Precision::Single, Kind::Symmetric);
spmv_entry!(cublasDspmv_v2, f64, Precision::Double, Kind::Symmetric);
spmv_entry!(cublasChpmv_v2, [f32; 2], Precision::ComplexSingle, Kind::Hermitian);
spmv_entry!(cublasZhpmv_v2, [f64; 2], Precision::ComplexDouble, Kind::Hermitian);
tpmv_entry!(cublasStpmv_v2, Precision::Single, false);
tpmv_entry!(cublasDtpmv_v2, Precision::Double, false);
tpmv_entry!(cublasCtpmv_v2, Precision::ComplexSingle, false);
tpmv_entry!(cublasZtpmv_v2, Precision::ComplexDouble, false);
tpmv_entry!(cublasStpsv_v2, Precision::Single, true);
tpmv_entry!(cublasDtpsv_v2, Precision::Double, true);
tpmv_entry!(cublasCtpsv_v2, Precision::ComplexSingle, true);
tpmv_entry!(cublasZtpsv_v2, Precision::ComplexDouble, true);
spr_entry!(cublasSspr_v2, f32, Precision::Single, false);
spr_entry!(cublasDspr_v2, f64, Precision::Double, false);
spr_entry!(cublasChpr_v2, f32, Precision::ComplexSingle, true);
spr_entry!(cublasZhpr_v2, f64, Precision::ComplexDouble, true);
spr2_entry!(cublasSspr2_v2, f32, Precision::Single, false);
spr2_entry!(cublasDspr2_v2, f64, Precision::Double, false);
spr2_entry!(cublasChpr2_v2, [f32; 2], Precision::ComplexSingle, true);
spr2_entry!(cublasZhpr2_v2, [f64; 2], Precision::ComplexDouble, true);
