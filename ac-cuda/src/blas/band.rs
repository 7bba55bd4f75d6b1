//! cuBLAS's band matrix-vector products: `cublas<S|D|C|Z>gbmv` (`y = alpha op(A) x + beta y`,
//! `A` an `m x n` band), `cublas<S|D>sbmv` (CuPy's `cupy.cublas.sbmv`) and `cublas<C|Z>hbmv`
//! (`A` symmetric or Hermitian, one triangle stored), and `cublas<S|D|C|Z>tbmv` (`x = op(A) x`,
//! `A` triangular; its entry points are [`super::band_triangular`]'s, with the solve `tbsv`).
//!
//! BLAS's band layout keeps `A[i, j]` at `AB[ku + i - j + j lda]`, `kl` diagonals below the main
//! one and `ku` above (a triangle's upper band: `ku = k`, `kl = 0`; its lower: `kl = k`,
//! `ku = 0`). Each stored diagonal is a strided vector, `lda` apart, so these need no kernel of
//! their own: a diagonal's element-wise products are one strided batch of `1 x 1` gemms
//! (`C_b = alpha op(A_b) x_b + C_b`):
//!
//! | routine | launches |
//! |---|---|
//! | gbmv | `y = beta y` (a gemm of no terms), then each diagonal's elements times `x`'s of their columns into `y`'s of their rows (`op` N), or, `op` T or C (a `1 x 1` matrix's transpose, or conjugate), times `x`'s of their rows into `y`'s of their columns |
//! | sbmv, hbmv | `y = beta y`; each diagonal into the rows, and each but the main one mirrored into the columns (conjugated, hbmv); hbmv's main diagonal as real gemms on the complex vectors' parts, so that its imaginary parts are not read (cuBLAS takes them as 0) |
//! | tbmv | gbmv's, `alpha` 1 and `beta` 0, from a copy of `x` (a unit diagonal: `x` kept, the main diagonal not read) |
//!
//! `alpha` and `beta` are read once, after the checks (from device memory after the work queued
//! before: such a call waits). Each term is rounded as it is added (exact on small integers, in
//! the last place otherwise, against cuBLAS's order). A vector BLAS reads backwards (a negative
//! increment) is read forwards from a copy ([`super::contiguous`]). tbmv's copy, and those,
//! are work a graph does not record: while its stream captures, such a call is refused.

use std::ffi::{c_int, c_longlong};

use super::contiguous::{in_place, launch_forwards, Along};
use super::gemm::{launch, product, scalar_parts, GemmCall, Operand, Precision, Scalar};
use super::structured::copy_of;
use super::vectors::gemv_lengths;
use super::{guard, handle, Target};
use crate::error::{code, CuResult, Error};

/// A strided vector: where its first element is, and its increment.
type Vector = (Operand, c_int);

/// Reads a checked call's `alpha` or `beta`: its real and imaginary parts.
type Read<'a> = &'a dyn Fn(Scalar) -> CuResult<[f64; 2]>;

/// A band matrix of the program's: `rows x cols`, `kl` diagonals below the main one and `ku`
/// above, at `ab` with leading dimension `lda`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Band {
    pub ab: u64,
    pub lda: c_int,
    pub rows: c_int,
    pub cols: c_int,
    pub kl: c_int,
    pub ku: c_int,
}

/// One stored diagonal: the address of its first element, that element's row and column, and
/// its length.
#[derive(Debug, Clone, Copy)]
struct Diagonal {
    first: u64,
    row: c_int,
    col: c_int,
    len: c_int,
}

impl Band {
    /// The `n x n` triangle `uplo` (1 upper) of a symmetric, Hermitian or triangular band with
    /// `k` diagonals besides the main one.
    pub fn triangle(uplo: c_int, n: c_int, k: c_int, (ab, lda): (u64, c_int)) -> Band {
        let (kl, ku) = if uplo == 1 { (0, k) } else { (k, 0) };
        Band { ab, lda, rows: n, cols: n, kl, ku }
    }

    /// Refuses what cuBLAS refuses (negative sizes, an `lda` below the diagonals stored, an
    /// increment of 0), for `what`.
    pub fn check(&self, what: &str, incs: &[c_int]) -> CuResult<()> {
        let b = self;
        let stored = i64::from(b.kl) + i64::from(b.ku);
        if [b.rows, b.cols, b.kl, b.ku].iter().any(|&v| v < 0) || i64::from(b.lda) <= stored || incs.contains(&0) {
            let why = format!(
                "{what}: m {}, n {}, kl {}, ku {}, lda {}, increments {incs:?}",
                b.rows, b.cols, b.kl, b.ku, b.lda
            );
            return Err(Error::said(code::INVALID_VALUE, why));
        }
        Ok(())
    }

    /// Whether the matrix has no element.
    fn is_empty(&self) -> bool {
        self.rows == 0 || self.cols == 0
    }

    /// Diagonal `d` (above the main one for `d > 0`, below it for `d < 0`) of elements `bytes`
    /// wide; `None` where the matrix has no element on it.
    fn diagonal(&self, d: c_int, bytes: u64) -> Option<Diagonal> {
        let (row, col) = if d >= 0 { (0, d) } else { (-d, 0) };
        let len = (self.rows - row).min(self.cols - col);
        // A[row, col] at AB[ku + row - col + col lda]; ku - d is not negative for d <= ku.
        let index = (i64::from(self.ku) - i64::from(d) + i64::from(col) * i64::from(self.lda)) as u64;
        (len > 0).then_some(Diagonal { first: self.ab + index * bytes, row, col, len })
    }

    /// The diagonals stored that hold elements of the matrix (none: it has none), from the
    /// lowest.
    fn diagonals(&self) -> std::ops::RangeInclusive<c_int> {
        -self.kl.min(self.rows - 1)..=self.ku.min(self.cols - 1)
    }
}

/// How a diagonal's products are added: `y[row] += alpha A[row, col] x[col]` (as stored), or
/// `y[col] += alpha op(A[row, col]) x[row]` (transposed; `conjugate`: each element conjugated).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    Stored,
    Transposed { conjugate: bool },
}

impl Way {
    /// The way of `op` (cuBLAS's code: 0 N, 1 T, 2 C).
    fn of(op: c_int) -> Way {
        if op == 0 {
            Way::Stored
        } else {
            Way::Transposed { conjugate: op == 2 }
        }
    }
}

/// `x`'s element `index`, its elements `bytes` wide.
fn element((x, inc): Vector, index: c_int, bytes: u64) -> Operand {
    x.offset(index as u64 * inc as u64 * bytes)
}

/// The strided batch of `1 x 1` gemms that adds a diagonal's products into `y` as `way` says.
fn products(
    precision: Precision,
    diagonal: Diagonal,
    lda: c_int,
    way: Way,
    alpha: Scalar,
    x: Vector,
    y: Vector,
) -> GemmCall {
    let bytes = precision.bytes() as u64;
    let (from_x, from_y, trans) = match way {
        Way::Stored => (diagonal.col, diagonal.row, 0),
        Way::Transposed { conjugate } => (diagonal.row, diagonal.col, if conjugate { 2 } else { 0 }),
    };
    let matrices = [Operand::Memory(diagonal.first), element(x, from_x, bytes), element(y, from_y, bytes)];
    GemmCall {
        stride: [c_longlong::from(lda), c_longlong::from(x.1), c_longlong::from(y.1)],
        batch: diagonal.len,
        ..product(precision, [trans, 0], [1, 1, 1], alpha, matrices, [1; 3], Scalar::Value(1.0))
    }
}

/// The products of `band`'s diagonals `diagonals` added into `y` as `way` says.
#[allow(clippy::too_many_arguments)] // the products' parts
fn band_products(
    precision: Precision,
    band: Band,
    diagonals: impl Iterator<Item = c_int>,
    way: Way,
    alpha: Scalar,
    x: Vector,
    y: Vector,
) -> impl Iterator<Item = GemmCall> {
    let bytes = precision.bytes() as u64;
    diagonals
        .filter_map(move |d| band.diagonal(d, bytes))
        .map(move |diagonal| products(precision, diagonal, band.lda, way, alpha, x, y))
}

/// `y = beta y` over `len` elements: a gemm of no terms.
fn scaling(precision: Precision, len: c_int, beta: Scalar, (y, incy): Vector) -> GemmCall {
    let matrices = [Operand::One, Operand::One, y];
    product(precision, [0; 2], [1, len, 0], Scalar::Value(0.0), matrices, [1, 1, incy], beta)
}

/// The gemms of `y = alpha op(A) x + beta y`, `A` a band, in the order they run (none: it
/// computes nothing), checked as cuBLAS checks the call; the scalars read by `read`.
fn gbmv_calls(
    precision: Precision,
    op: c_int,
    band: &Band,
    [alpha, beta]: [Scalar; 2],
    x: Vector,
    y: Vector,
    read: Read,
) -> CuResult<Vec<GemmCall>> {
    if !(0..=2).contains(&op) {
        return Err(Error::said(code::INVALID_VALUE, format!("gbmv: trans {op}")));
    }
    band.check("gbmv", &[x.1, y.1])?;
    if band.is_empty() {
        return Ok(Vec::new());
    }
    let [alpha, beta] = [read(alpha)?, read(beta)?].map(Scalar::Parts);
    let len = if op == 0 { band.rows } else { band.cols };
    let mut calls = vec![scaling(precision, len, beta, y)];
    calls.extend(band_products(precision, *band, band.diagonals(), Way::of(op), alpha, x, y));
    Ok(calls)
}

/// The gemms of `y = alpha A x + beta y`, `A` the symmetric (or, `hermitian`, Hermitian)
/// matrix whose triangle `band` is, in the order they run, checked as cuBLAS checks the call;
/// the scalars read by `read`.
#[allow(clippy::too_many_arguments)] // BLAS's arguments
fn symmetric_calls(
    precision: Precision,
    hermitian: bool,
    uplo: c_int,
    band: &Band,
    [alpha, beta]: [Scalar; 2],
    x: Vector,
    y: Vector,
    read: Read,
) -> CuResult<Vec<GemmCall>> {
    let what = if hermitian { "hbmv" } else { "sbmv" };
    if !(0..=1).contains(&uplo) {
        return Err(Error::said(code::INVALID_VALUE, format!("{what}: uplo {uplo}")));
    }
    band.check(what, &[x.1, y.1])?;
    if band.is_empty() {
        return Ok(Vec::new());
    }
    let (alpha_parts, beta) = (read(alpha)?, Scalar::Parts(read(beta)?));
    let alpha = Scalar::Parts(alpha_parts);
    let mut calls = vec![scaling(precision, band.rows, beta, y)];
    // A Hermitian diagonal's imaginary parts are not read: its products come after.
    let rows = band.diagonals().filter(|&d| !(hermitian && d == 0));
    calls.extend(band_products(precision, *band, rows, Way::Stored, alpha, x, y));
    let mirrored = band.diagonals().filter(|&d| d != 0);
    calls.extend(band_products(precision, *band, mirrored, Way::Transposed { conjugate: hermitian }, alpha, x, y));
    if hermitian {
        let main = band.diagonal(0, precision.bytes() as u64).expect("a matrix with elements has a main diagonal");
        calls.extend(real_diagonal(precision, main, band.lda, alpha_parts, x, y));
    }
    Ok(calls)
}

/// hbmv's main diagonal, `y[i] += alpha Re(A[i, i]) x[i]`, as strided batches of real gemms on
/// the complex elements' parts: `[Re y, Im y] += Re(alpha) Re(a) [Re x, Im x]` (a `1 x 2`
/// product), then, for a complex `alpha`, `Re y -= Im(alpha) Re(a) Im x` and
/// `Im y += Im(alpha) Re(a) Re x`.
fn real_diagonal(
    precision: Precision,
    main: Diagonal,
    lda: c_int,
    [re, im]: [f64; 2],
    x: Vector,
    y: Vector,
) -> Vec<GemmCall> {
    let real = precision.real();
    let part = real.bytes() as u64;
    // In real elements, a diagonal's elements are 2 lda apart, a vector's 2 inc.
    let stride = [lda, x.1, y.1].map(|v| 2 * c_longlong::from(v));
    let batch = |scale: f64, [x_part, y_part]: [u64; 2], width: c_int| {
        let matrices = [Operand::Memory(main.first), x.0.offset(x_part * part), y.0.offset(y_part * part)];
        let call = product(real, [0; 2], [1, width, 1], Scalar::Value(scale), matrices, [1; 3], Scalar::Value(1.0));
        GemmCall { stride, batch: main.len, ..call }
    };
    // The main diagonal starts at row and column 0: x's and y's elements from their first.
    let mut calls = vec![batch(re, [0, 0], 2)];
    if im != 0.0 {
        calls.extend([batch(-im, [1, 0], 1), batch(im, [0, 1], 1)]);
    }
    calls
}

/// The gemms of `x = op(A) x`, `A` the triangle `band` (`unit`: its diagonal ones, not read),
/// from `copy` (a copy of `x`), in the order they run: `x` zeroed (unless `unit`), then the
/// diagonals' products.
fn tbmv_calls(
    precision: Precision,
    op: c_int,
    unit: bool,
    band: &Band,
    copy: Operand,
    (x, incx): Vector,
) -> Vec<GemmCall> {
    let one = Scalar::Value(1.0);
    let scale = (!unit).then(|| scaling(precision, band.rows, Scalar::Value(0.0), (x, incx)));
    let diagonals = band.diagonals().filter(move |&d| !(unit && d == 0));
    scale
        .into_iter()
        .chain(band_products(precision, *band, diagonals, Way::of(op), one, (copy, incx), (x, incx)))
        .collect()
}

/// Checks a triangular band call's codes (`uplo`, `trans`, `diag`) as cuBLAS does; gives
/// whether the diagonal is unit.
pub(super) fn triangular_codes(what: &str, [uplo, trans, diag]: [c_int; 3]) -> CuResult<bool> {
    if !(0..=1).contains(&uplo) || !(0..=2).contains(&trans) || !(0..=1).contains(&diag) {
        return Err(Error::said(code::INVALID_VALUE, format!("{what}: uplo {uplo}, trans {trans}, diag {diag}")));
    }
    Ok(diag == 1)
}

/// `tbmv` on `target`: `x = op(A) x`, `A` the `n x n` triangular band of `k` diagonals besides
/// the main one.
#[allow(clippy::too_many_arguments)] // BLAS's arguments
pub(super) unsafe fn tbmv(
    target: Target,
    precision: Precision,
    codes: [c_int; 3],
    [n, k]: [c_int; 2],
    a: (u64, c_int),
    (x, incx): (u64, c_int),
) -> CuResult<()> {
    let unit = triangular_codes("tbmv", codes)?;
    let band = Band::triangle(codes[0], n, k, a);
    band.check("tbmv", &[incx])?;
    if band.is_empty() {
        return Ok(());
    }
    if incx < 0 {
        return in_place(target, precision, "tbmv", n, (x, incx), |x| tbmv(target, precision, codes, [n, k], a, x));
    }
    // The products read x while they write it: its old values through a copy.
    let span = (n as u64 - 1) * incx as u64 + 1;
    let copy = copy_of(target, x, span * precision.bytes() as u64)?;
    let calls = tbmv_calls(precision, codes[1], unit, &band, Operand::Slot(copy.at(0)), (Operand::Memory(x), incx));
    calls.into_iter().try_for_each(|call| launch(target, call))
}

/// Launches `calls` on handle `h`'s target, made by `make` from the call's `x` and `y` read
/// forwards ([`launch_forwards`]: `what` names the call) with the handle's way of reading
/// scalars (host or device memory as its pointer mode says).
unsafe fn launch_calls(
    h: usize,
    precision: Precision,
    what: &str,
    [x, y]: [(c_int, (u64, c_int)); 2],
    make: impl Fn(Read, Vector, Vector) -> CuResult<Vec<GemmCall>>,
) -> CuResult<()> {
    let target = handle(h)?.target();
    let read = |scalar| unsafe { scalar_parts(target, precision, scalar) };
    let vectors = [Along::read(precision, x.0, x.1), Along::written(precision, y.0, y.1)];
    launch_forwards(target, what, vectors, |[(x, incx), (y, incy)]| {
        make(&read, (Operand::Memory(x), incx), (Operand::Memory(y), incy))
    })
}

/// Defines `cublas<T>gbmv` for element type `$t`.
macro_rules! gbmv_entry {
    ($name:ident, $t:ty, $precision:expr) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            trans: c_int,
            m: c_int,
            n: c_int,
            kl: c_int,
            ku: c_int,
            alpha: *const $t,
            ab: u64,
            lda: c_int,
            x: u64,
            incx: c_int,
            beta: *const $t,
            y: u64,
            incy: c_int,
        ) -> u32 {
            let band = Band { ab, lda, rows: m, cols: n, kl, ku };
            let scalars = [Scalar::At(alpha.cast()), Scalar::At(beta.cast())];
            let [x_len, y_len] = gemv_lengths(trans, [m, n]);
            let vectors = [(x_len, (x, incx)), (y_len, (y, incy))];
            guard(stringify!($name), || {
                launch_calls(h, $precision, "gbmv", vectors, |read, x, y| {
                    gbmv_calls($precision, trans, &band, scalars, x, y, read)
                })
            })
        }
    };
}

/// Defines `cublas<T>sbmv` (or, `$hermitian`, `cublas<T>hbmv`) for element type `$t`.
macro_rules! symmetric_entry {
    ($name:ident, $t:ty, $precision:expr, $hermitian:expr) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)] // cuBLAS's signature
        pub unsafe extern "C" fn $name(
            h: usize,
            uplo: c_int,
            n: c_int,
            k: c_int,
            alpha: *const $t,
            ab: u64,
            lda: c_int,
            x: u64,
            incx: c_int,
            beta: *const $t,
            y: u64,
            incy: c_int,
        ) -> u32 {
            let band = Band::triangle(uplo, n, k, (ab, lda));
            let scalars = [Scalar::At(alpha.cast()), Scalar::At(beta.cast())];
            let what = if $hermitian { "hbmv" } else { "sbmv" };
            guard(stringify!($name), || {
                launch_calls(h, $precision, what, [(n, (x, incx)), (n, (y, incy))], |read, x, y| {
                    symmetric_calls($precision, $hermitian, uplo, &band, scalars, x, y, read)
                })
            })
        }
    };
}

gbmv_entry!(cublasSgbmv_v2, f32, Precision::Single);
gbmv_entry!(cublasDgbmv_v2, f64, Precision::Double);
gbmv_entry!(cublasCgbmv_v2, [f32; 2], Precision::ComplexSingle);
gbmv_entry!(cublasZgbmv_v2, [f64; 2], Precision::ComplexDouble);
symmetric_entry!(cublasSsbmv_v2, f32, Precision::Single, false);
symmetric_entry!(cublasDsbmv_v2, f64, Precision::Double, false);
symmetric_entry!(cublasChbmv_v2, [f32; 2], Precision::ComplexSingle, true);
symmetric_entry!(cublasZhbmv_v2, [f64; 2], Precision::ComplexDouble, true);

#[cfg(test)]
mod tests {
    use super::super::gemm::at;
    use super::super::gemm::check;
    use super::*;

    const AB: u64 = 0x10_0000;
    const X: u64 = 0x20_0000;
    const Y: u64 = 0x30_0000;
    const ONE: Scalar = Scalar::Value(1.0);

    /// Reads scalars the tests give as values.
    fn known(scalar: Scalar) -> CuResult<[f64; 2]> {
        match scalar {
            Scalar::Value(v) => Ok([v, 0.0]),
            Scalar::Parts(parts) => Ok(parts),
            Scalar::At(_) => panic!("the tests give values"),
        }
    }

    fn vectors(incx: c_int, incy: c_int) -> (Vector, Vector) {
        ((Operand::Memory(X), incx), (Operand::Memory(Y), incy))
    }

    fn sbmv(uplo: c_int, [n, k, lda]: [c_int; 3], incx: c_int, incy: c_int) -> CuResult<Vec<GemmCall>> {
        let (x, y) = vectors(incx, incy);
        symmetric_calls(Precision::Double, false, uplo, &Band::triangle(uplo, n, k, (AB, lda)), [ONE; 2], x, y, &known)
    }

    #[test]
    fn each_symmetric_diagonal_is_added_to_its_rows_and_mirrored_to_its_columns() {
        // n 5, k 2, lda 4 (one spare row), f64 (8 bytes), x every 2nd element, y every 3rd.
        let upper = sbmv(1, [5, 2, 4], 2, 3).unwrap();
        // beta y, the three diagonals' rows (main, 1, 2), then 1 and 2 mirrored.
        assert_eq!(upper.len(), 1 + 3 + 2);
        // Upper diagonal 1: A[j-1, j] at AB[(2 - 1) + j * 4], j = 1..5: from AB[1 + 4].
        let (rows, mirrored) = (upper[2], upper[4]);
        assert_eq!((at(rows.matrices[0]), rows.batch, rows.stride), (AB + 5 * 8, 4, [4, 2, 3]));
        // Its rows 0..4 of y get x's columns 1..5; the mirror the other way round.
        assert_eq!((at(rows.matrices[1]), at(rows.matrices[2])), (X + 2 * 8, Y));
        assert_eq!((at(mirrored.matrices[1]), at(mirrored.matrices[2])), (X, Y + 3 * 8));
        assert_eq!(check(&rows).unwrap().footprints(), [3 * 4 + 1, 3 * 2 + 1, 3 * 3 + 1]);
        // Lower diagonal 2: A[j+2, j] at AB[2 + j * 4]: rows 2..5 of y, columns 0..3 of x.
        let lower = sbmv(0, [5, 2, 4], 2, 3).unwrap();
        let (rows, mirrored) = (lower[1], lower[4]);
        assert_eq!((at(rows.matrices[0]), at(rows.matrices[1]), at(rows.matrices[2])), (AB + 2 * 8, X, Y + 6 * 8));
        assert_eq!((at(mirrored.matrices[1]), at(mirrored.matrices[2]), mirrored.batch), (X + 4 * 8, Y, 3));
        assert!(upper.iter().chain(&lower).all(|call| call.trans == [0, 0]), "nothing conjugated");
    }

    #[test]
    fn what_cublas_refuses_is_refused_and_more_diagonals_than_rows_are_not_read() {
        assert_eq!(sbmv(0, [3, 2, 2], 1, 1).unwrap_err().code(), code::INVALID_VALUE, "lda below k + 1");
        assert_eq!(sbmv(0, [3, 1, 2], 0, 1).unwrap_err().code(), code::INVALID_VALUE, "incx 0");
        assert_eq!(sbmv(2, [3, 1, 2], 1, 1).unwrap_err().code(), code::INVALID_VALUE, "uplo 2");
        // k 5 on a 3 x 3 matrix: diagonals 0, 1, 2 only.
        assert_eq!(sbmv(0, [3, 5, 6], 1, 1).unwrap().len(), 1 + 3 + 2);
        assert!(sbmv(0, [0, 5, 6], 1, 1).unwrap().is_empty(), "no elements: nothing read");
    }

    #[test]
    fn a_general_band_reads_each_diagonal_once_the_way_its_operation_goes() {
        // 6 x 4, kl 2, ku 1, lda 5 (one spare), complex f32 (8 bytes), x and y contiguous.
        let band = Band { ab: AB, lda: 5, rows: 6, cols: 4, kl: 2, ku: 1 };
        let (x, y) = vectors(1, 1);
        let calls = |op| gbmv_calls(Precision::ComplexSingle, op, &band, [ONE; 2], x, y, &known).unwrap();
        let n = calls(0);
        // y (6 elements) scaled, then diagonals -2, -1, 0, 1.
        assert_eq!((n.len(), n[0].n), (1 + 4, 6));
        // Diagonal -2: A[i + 2, i] at AB[1 + 2 + i * 5], i < 4; into y's rows 2..6 from x's 0..4.
        let low = n[1];
        assert_eq!((at(low.matrices[0]), at(low.matrices[1]), at(low.matrices[2])), (AB + 3 * 8, X, Y + 2 * 8));
        assert_eq!((low.batch, low.stride, low.trans), (4, [5, 1, 1], [0, 0]));
        // Diagonal 1: A[i, i + 1] at AB[1 - 1 + (i + 1) 5], i < 3.
        let up = n[4];
        assert_eq!((at(up.matrices[0]), at(up.matrices[1]), at(up.matrices[2]), up.batch), (AB + 5 * 8, X + 8, Y, 3));
        // C: y has 4 elements; each diagonal conjugated, from x's rows into y's columns.
        let c = calls(2);
        assert_eq!(c[0].n, 4);
        let low = c[1];
        assert_eq!((at(low.matrices[1]), at(low.matrices[2]), low.trans), (X + 2 * 8, Y, [2, 0]));
        assert_eq!(calls(1)[1].trans, [0, 0], "T transposes 1 x 1 matrices: nothing");
        assert_eq!(
            gbmv_calls(Precision::Single, 3, &band, [ONE; 2], x, y, &known).unwrap_err().code(),
            code::INVALID_VALUE
        );
        let thin = Band { lda: 3, ..band };
        assert_eq!(
            gbmv_calls(Precision::Single, 0, &thin, [ONE; 2], x, y, &known).unwrap_err().code(),
            code::INVALID_VALUE
        );
    }

    #[test]
    fn a_hermitian_diagonal_is_read_by_its_real_parts_only() {
        // n 3, k 1 upper, lda 2, complex f64 (16 bytes, parts 8), x every 2nd, y every 3rd.
        let band = Band::triangle(1, 3, 1, (AB, 2));
        let (x, y) = vectors(2, 3);
        let calls = |alpha| {
            symmetric_calls(Precision::ComplexDouble, true, 1, &band, [Scalar::Parts(alpha), ONE], x, y, &known)
                .unwrap()
        };
        let real_alpha = calls([2.0, 0.0]);
        // beta y, diagonal 1's rows, its conjugated mirror, then the diagonal's real product.
        assert_eq!(real_alpha.len(), 1 + 1 + 1 + 1);
        assert_eq!(real_alpha[2].trans, [2, 0], "the mirror conjugated");
        let main = real_alpha[3];
        // Re(A[i, i]) at AB[1 + 2 i]: real elements 2 * 2 apart; [Re y, Im y] += 2 a [Re x, Im x].
        assert_eq!((main.types.precision, main.n, main.batch), (Precision::Double, 2, 3));
        assert_eq!((at(main.matrices[0]), main.stride), (AB + 16, [4, 4, 6]));
        assert_eq!((at(main.matrices[1]), at(main.matrices[2])), (X, Y));
        assert!(matches!(main.alpha, Scalar::Value(v) if v == 2.0));
        // A complex alpha's imaginary part moves each part into the other.
        let complex_alpha = calls([2.0, 3.0]);
        let [re, im] = [complex_alpha[4], complex_alpha[5]];
        assert_eq!((at(re.matrices[1]), at(re.matrices[2]), re.n), (X + 8, Y, 1));
        assert!(matches!(re.alpha, Scalar::Value(v) if v == -3.0));
        assert_eq!((at(im.matrices[1]), at(im.matrices[2])), (X, Y + 8));
        assert!(matches!(im.alpha, Scalar::Value(v) if v == 3.0));
        assert!(check(&main).is_ok() && check(&re).is_ok());
    }

    #[test]
    fn a_triangular_product_reads_the_copy_and_a_unit_diagonal_not_at_all() {
        // Lower, n 4, k 2, lda 3, f32, x every 2nd element.
        let band = Band::triangle(0, 4, 2, (AB, 3));
        let copy = Operand::Memory(X + 0x1000);
        let x = (Operand::Memory(X), 2);
        let full = tbmv_calls(Precision::Single, 1, false, &band, copy, x);
        // x zeroed, then diagonals -2, -1, 0 from the copy, transposed (T).
        assert_eq!(full.len(), 1 + 3);
        assert!(matches!(full[0].beta, Scalar::Value(v) if v == 0.0));
        let low = full[1];
        // A[i + 2, i]: x's (the copy's) rows 2.. into x's columns 0..
        assert_eq!((at(low.matrices[1]), at(low.matrices[2]), low.batch), (X + 0x1000 + 4 * 4, X, 2));
        let unit = tbmv_calls(Precision::Single, 0, true, &band, copy, x);
        assert_eq!(unit.len(), 2, "x kept, the main diagonal not read");
        assert!(unit.iter().all(|call| at(call.matrices[0]) != AB), "A[0, 0] is the main diagonal's first");
        assert_eq!(triangular_codes("tbmv", [0, 0, 2]).unwrap_err().code(), code::INVALID_VALUE);
    }
}
