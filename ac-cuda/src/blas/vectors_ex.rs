//! cuBLAS's level-1 `Ex` forms, whose vectors, scalars and results are of `cudaDataType`s
//! given at the call: `cublasAxpyEx`, `ScalEx`, `CopyEx`, `Nrm2Ex`, `SwapEx`, `AsumEx`,
//! `IamaxEx`, `IaminEx`, `RotEx`, `RotmEx`, `RotgEx` and `RotmgEx` (`DotEx` and `DotcEx` are
//! [`super::gemm_ex`]'s), and their ILP64 forms.
//!
//! | vectors | served as |
//! |---|---|
//! | `f32`, `f64`, complex `f32`, complex `f64` | the typed function of that type (`cublasSaxpy`, `cublasCsrot`, ...) |
//! | binary16, bfloat16 (axpy, scal, copy, nrm2) | one launch of the builtin `blas_gemm_ex`, computed in `f32` |
//!
//! The other types must be those the typed function takes, executed in its type: scalars of
//! the vectors' type, or of their real type where a typed form takes one (`Csscal`, `Csrot`,
//! a complex vector's norm and sum of magnitudes). Half-precision vectors take `f32` scalars
//! (or, `ScalEx`, one of their own type) and execute in `f32`, as cuBLAS lists them; their
//! norm comes back in their type. Any other mix, and half-precision vectors in the calls whose
//! typed forms are not one gemm (swap, the rotations, the reductions of magnitudes), answer
//! `CUBLAS_STATUS_NOT_SUPPORTED`, naming the types. A call served by a typed entry point logs
//! under that entry point's name.

use std::ffi::{c_int, c_void};

use ac_proto::backend::builtin::GemmElement;

use super::gemm::{load, Precision, Scalar, Types};
use super::gemm_ex::{element, CUDA_C_32F, CUDA_C_64F, CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F, CUDA_R_64F};
use super::magnitudes::{
    cublasDasum_v2, cublasDzasum_v2, cublasIcamax_v2, cublasIcamin_v2, cublasIdamax_v2, cublasIdamin_v2,
    cublasIsamax_v2, cublasIsamin_v2, cublasIzamax_v2, cublasIzamin_v2, cublasSasum_v2, cublasScasum_v2, index_64,
};
use super::rotations::{
    cublasCrot_v2, cublasCrotg_v2, cublasCsrot_v2, cublasCswap_v2, cublasDrot_v2, cublasDrotg_v2, cublasDrotm_v2,
    cublasDrotmg_v2, cublasDswap_v2, cublasSrot_v2, cublasSrotg_v2, cublasSrotm_v2, cublasSrotmg_v2, cublasSswap_v2,
    cublasZdrot_v2, cublasZrot_v2, cublasZrotg_v2, cublasZswap_v2,
};
use super::vectors::{axpby, dot, scal, scal_by_real, Finish};
use super::{guard, handle};
use crate::error::{code, CuResult, Error};

/// What an `Ex` call's vectors hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Vectors {
    /// `f32`, `f64` or their complex types: served by the typed functions.
    Typed(Precision),
    /// binary16 or bfloat16, computed in `f32`.
    Narrow(GemmElement),
}

impl Vectors {
    /// The vectors of `cudaDataType` `t`.
    fn of(t: c_int) -> CuResult<Vectors> {
        Ok(match t {
            CUDA_R_32F => Vectors::Typed(Precision::Single),
            CUDA_R_64F => Vectors::Typed(Precision::Double),
            CUDA_C_32F => Vectors::Typed(Precision::ComplexSingle),
            CUDA_C_64F => Vectors::Typed(Precision::ComplexDouble),
            CUDA_R_16F | CUDA_R_16BF => Vectors::Narrow(element(t).expect("a half-precision type")),
            _ => return Err(unserved(&[("vectors", t)])),
        })
    }

    /// A gemm's types over such vectors: `A` the shim's constant one (an `f32`), `B` and `C`
    /// the vectors.
    fn types(self) -> Types {
        match self {
            Vectors::Typed(precision) => Types::uniform(precision),
            Vectors::Narrow(e) => Types { precision: Precision::Single, elements: Some([GemmElement::F32, e, e]) },
        }
    }

    /// The type scalars and execution are of: the vectors' own, or `f32` for half precision.
    fn compute_type(self) -> c_int {
        match self {
            Vectors::Typed(precision) => data_type(precision),
            Vectors::Narrow(_) => CUDA_R_32F,
        }
    }

    /// The typed precision, or the refusal of half-precision vectors (of `cudaDataType` `t`).
    fn typed(self, t: c_int) -> CuResult<Precision> {
        match self {
            Vectors::Typed(precision) => Ok(precision),
            Vectors::Narrow(_) => Err(unserved(&[("half-precision vectors (not one gemm)", t)])),
        }
    }
}

/// The `cudaDataType` of `precision`'s elements.
fn data_type(precision: Precision) -> c_int {
    match precision {
        Precision::Single => CUDA_R_32F,
        Precision::Double => CUDA_R_64F,
        Precision::ComplexSingle => CUDA_C_32F,
        Precision::ComplexDouble => CUDA_C_64F,
        Precision::Half => CUDA_R_16F,
    }
}

/// The refusal of a call of these (named) types.
fn unserved(types: &[(&str, c_int)]) -> Error {
    let named: Vec<String> = types.iter().map(|(what, t)| format!("{what} {t}")).collect();
    Error::said(code::NOT_SUPPORTED, format!("cudaDataType {}: not a mix the shim serves", named.join(", ")))
}

/// Refuses a call unless each type (named, as given) is the one wanted.
fn expect(types: &[(&str, c_int, c_int)]) -> CuResult<()> {
    if types.iter().all(|(_, got, want)| got == want) {
        return Ok(());
    }
    Err(unserved(&types.iter().map(|&(what, got, _)| (what, got)).collect::<Vec<_>>()))
}

/// The status of the typed entry point `chosen` ran, or the refusal of `call`.
fn answer(call: &str, chosen: CuResult<u32>) -> u32 {
    match chosen {
        Ok(status) => status,
        Err(refusal) => guard(call, || Err(refusal)),
    }
}

/// The vectors of a call with two (`x` and `y`), which must be of one type.
fn pair(x_type: c_int, y_type: c_int) -> CuResult<Vectors> {
    expect(&[("y", y_type, x_type)])?;
    Vectors::of(x_type)
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuBLAS's signature
pub unsafe extern "C" fn cublasAxpyEx(
    h: usize,
    n: c_int,
    alpha: *const c_void,
    alpha_type: c_int,
    x: u64,
    x_type: c_int,
    incx: c_int,
    y: u64,
    y_type: c_int,
    incy: c_int,
    execution: c_int,
) -> u32 {
    guard("cublasAxpyEx", || {
        let vectors = pair(x_type, y_type)?;
        let compute = vectors.compute_type();
        expect(&[("alpha", alpha_type, compute), ("execution", execution, compute)])?;
        axpby(h, vectors.types(), n, Scalar::At(alpha), (x, incx), 1.0, (y, incy))
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuBLAS's signature
pub unsafe extern "C" fn cublasCopyEx(
    h: usize,
    n: c_int,
    x: u64,
    x_type: c_int,
    incx: c_int,
    y: u64,
    y_type: c_int,
    incy: c_int,
) -> u32 {
    guard("cublasCopyEx", || {
        let vectors = pair(x_type, y_type)?;
        axpby(h, vectors.types(), n, Scalar::Value(1.0), (x, incx), 0.0, (y, incy))
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuBLAS's signature
pub unsafe extern "C" fn cublasScalEx(
    h: usize,
    n: c_int,
    alpha: *const c_void,
    alpha_type: c_int,
    x: u64,
    x_type: c_int,
    incx: c_int,
    execution: c_int,
) -> u32 {
    guard("cublasScalEx", || {
        let vectors = Vectors::of(x_type)?;
        let compute = vectors.compute_type();
        expect(&[("execution", execution, compute)])?;
        match vectors {
            // Csscal, Zdscal: a complex vector scaled by a real.
            Vectors::Typed(p) if p.is_complex() && alpha_type == data_type(p.real()) => {
                scal_by_real(h, p, n, alpha, x, incx)
            }
            // A half-precision scalar of the vectors' own type, read here.
            Vectors::Narrow(e) if alpha_type == x_type => {
                let target = handle(h)?.target();
                let mut bits = [0u8; 2];
                if n > 0 && incx > 0 {
                    load(target, alpha, &mut bits)?;
                }
                scal(h, vectors.types(), n, Scalar::Value(f64::from(e.load(&bits))), x, incx)
            }
            _ => {
                expect(&[("alpha", alpha_type, compute)])?;
                scal(h, vectors.types(), n, Scalar::At(alpha), x, incx)
            }
        }
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuBLAS's signature
pub unsafe extern "C" fn cublasNrm2Ex(
    h: usize,
    n: c_int,
    x: u64,
    x_type: c_int,
    incx: c_int,
    result: *mut c_void,
    result_type: c_int,
    execution: c_int,
) -> u32 {
    guard("cublasNrm2Ex", || {
        // BLAS answers 0 for an increment below 1.
        let n = if incx <= 0 { 0 } else { n };
        let (types, finish, result_is) = match Vectors::of(x_type)? {
            Vectors::Typed(p) => (Types::uniform(p), Finish::Norm, data_type(p.real())),
            // The sum of squares kept in f32, the root rounded to the vectors' type.
            Vectors::Narrow(e) => {
                let types = Types { precision: Precision::Single, elements: Some([e, e, GemmElement::F32]) };
                (types, Finish::NarrowNorm(e), x_type)
            }
        };
        let execution_is = data_type(types.precision.real());
        expect(&[("result", result_type, result_is), ("execution", execution, execution_is)])?;
        dot(h, types, n, (x, incx), (x, incx), true, result, finish)
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuBLAS's signature
pub unsafe extern "C" fn cublasSwapEx(
    h: usize,
    n: c_int,
    x: u64,
    x_type: c_int,
    incx: c_int,
    y: u64,
    y_type: c_int,
    incy: c_int,
) -> u32 {
    let chosen = pair(x_type, y_type).and_then(|v| v.typed(x_type)).map(|precision| {
        let swap = match precision {
            Precision::Single => cublasSswap_v2,
            Precision::Double => cublasDswap_v2,
            Precision::ComplexSingle => cublasCswap_v2,
            _ => cublasZswap_v2,
        };
        swap(h, n, x, incx, y, incy)
    });
    answer("cublasSwapEx", chosen)
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuBLAS's signature
pub unsafe extern "C" fn cublasAsumEx(
    h: usize,
    n: c_int,
    x: u64,
    x_type: c_int,
    incx: c_int,
    result: *mut c_void,
    result_type: c_int,
    execution: c_int,
) -> u32 {
    let chosen = Vectors::of(x_type).and_then(|v| v.typed(x_type)).and_then(|precision| {
        let real = data_type(precision.real());
        expect(&[("result", result_type, real), ("execution", execution, real)])?;
        Ok(match precision {
            Precision::Single => cublasSasum_v2(h, n, x, incx, result.cast()),
            Precision::Double => cublasDasum_v2(h, n, x, incx, result.cast()),
            Precision::ComplexSingle => cublasScasum_v2(h, n, x, incx, result.cast()),
            _ => cublasDzasum_v2(h, n, x, incx, result.cast()),
        })
    });
    answer("cublasAsumEx", chosen)
}

/// The typed index reduction of vectors of `cudaDataType` `x_type`: `cublasI<t>amax`, or
/// (`smallest`) `amin`.
fn index_of(
    x_type: c_int,
    smallest: bool,
) -> CuResult<unsafe extern "C" fn(usize, c_int, u64, c_int, *mut c_int) -> u32> {
    let precision = Vectors::of(x_type)?.typed(x_type)?;
    let [largest, least] = match precision {
        Precision::Single => [cublasIsamax_v2, cublasIsamin_v2],
        Precision::Double => [cublasIdamax_v2, cublasIdamin_v2],
        Precision::ComplexSingle => [cublasIcamax_v2, cublasIcamin_v2],
        _ => [cublasIzamax_v2, cublasIzamin_v2],
    };
    Ok(if smallest { least } else { largest })
}

/// Defines `cublasIamaxEx` or `cublasIaminEx` (`$smallest`) and its ILP64 form `$name_64`.
macro_rules! index_ex {
    ($name:ident, $name_64:ident, $smallest:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            h: usize,
            n: c_int,
            x: u64,
            x_type: c_int,
            incx: c_int,
            result: *mut c_int,
        ) -> u32 {
            answer(stringify!($name), index_of(x_type, $smallest).map(|index| index(h, n, x, incx, result)))
        }

        #[no_mangle]
        pub unsafe extern "C" fn $name_64(h: usize, n: i64, x: u64, x_type: c_int, incx: i64, result: *mut i64) -> u32 {
            let base = |n, incx| $name(h, n, x, x_type, incx, result.cast());
            index_64(base, stringify!($name_64), h, [n, incx], result)
        }
    };
}

index_ex!(cublasIamaxEx, cublasIamaxEx_64, false);
index_ex!(cublasIaminEx, cublasIaminEx_64, true);

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuBLAS's signature
pub unsafe extern "C" fn cublasRotEx(
    h: usize,
    n: c_int,
    x: u64,
    x_type: c_int,
    incx: c_int,
    y: u64,
    y_type: c_int,
    incy: c_int,
    c: *const c_void,
    s: *const c_void,
    cs_type: c_int,
    execution: c_int,
) -> u32 {
    let chosen = pair(x_type, y_type).and_then(|v| v.typed(x_type)).and_then(|precision| {
        expect(&[("execution", execution, x_type)])?;
        // A complex vector's s is complex (Crot) or real (Csrot); c is always real.
        let real_s = cs_type == data_type(precision.real()) && precision.is_complex();
        if !real_s {
            expect(&[("c and s", cs_type, x_type)])?;
        }
        Ok(match (precision, real_s) {
            (Precision::Single, _) => cublasSrot_v2(h, n, x, incx, y, incy, c.cast(), s.cast()),
            (Precision::Double, _) => cublasDrot_v2(h, n, x, incx, y, incy, c.cast(), s.cast()),
            (Precision::ComplexSingle, false) => cublasCrot_v2(h, n, x, incx, y, incy, c.cast(), s.cast()),
            (Precision::ComplexSingle, true) => cublasCsrot_v2(h, n, x, incx, y, incy, c.cast(), s.cast()),
            (_, false) => cublasZrot_v2(h, n, x, incx, y, incy, c.cast(), s.cast()),
            (_, true) => cublasZdrot_v2(h, n, x, incx, y, incy, c.cast(), s.cast()),
        })
    });
    answer("cublasRotEx", chosen)
}

/// The real precision of a modified rotation's values of `cudaDataType` `t` (all of one).
fn modified(types: &[(&str, c_int)]) -> CuResult<Precision> {
    let t = types[0].1;
    let wanted: Vec<_> = types.iter().map(|&(what, got)| (what, got, t)).collect();
    expect(&wanted)?;
    match t {
        CUDA_R_32F => Ok(Precision::Single),
        CUDA_R_64F => Ok(Precision::Double),
        _ => Err(unserved(types)),
    }
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuBLAS's signature
pub unsafe extern "C" fn cublasRotmEx(
    h: usize,
    n: c_int,
    x: u64,
    x_type: c_int,
    incx: c_int,
    y: u64,
    y_type: c_int,
    incy: c_int,
    param: *const c_void,
    param_type: c_int,
    execution: c_int,
) -> u32 {
    let types = [("x", x_type), ("y", y_type), ("param", param_type), ("execution", execution)];
    let chosen = modified(&types).map(|precision| match precision {
        Precision::Single => cublasSrotm_v2(h, n, x, incx, y, incy, param.cast()),
        _ => cublasDrotm_v2(h, n, x, incx, y, incy, param.cast()),
    });
    answer("cublasRotmEx", chosen)
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuBLAS's signature
pub unsafe extern "C" fn cublasRotmgEx(
    h: usize,
    d1: *mut c_void,
    d1_type: c_int,
    d2: *mut c_void,
    d2_type: c_int,
    x1: *mut c_void,
    x1_type: c_int,
    y1: *const c_void,
    y1_type: c_int,
    param: *mut c_void,
    param_type: c_int,
    execution: c_int,
) -> u32 {
    let types = [
        ("d1", d1_type),
        ("d2", d2_type),
        ("x1", x1_type),
        ("y1", y1_type),
        ("param", param_type),
        ("execution", execution),
    ];
    let chosen = modified(&types).map(|precision| match precision {
        Precision::Single => cublasSrotmg_v2(h, d1.cast(), d2.cast(), x1.cast(), y1.cast(), param.cast()),
        _ => cublasDrotmg_v2(h, d1.cast(), d2.cast(), x1.cast(), y1.cast(), param.cast()),
    });
    answer("cublasRotmgEx", chosen)
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // cuBLAS's signature
pub unsafe extern "C" fn cublasRotgEx(
    h: usize,
    a: *mut c_void,
    b: *mut c_void,
    ab_type: c_int,
    c: *mut c_void,
    s: *mut c_void,
    cs_type: c_int,
    execution: c_int,
) -> u32 {
    // As the typed rotg: s of a and b's type, c of its real type.
    let chosen = Vectors::of(ab_type).and_then(|v| v.typed(ab_type)).and_then(|precision| {
        expect(&[("c and s", cs_type, ab_type), ("execution", execution, ab_type)])?;
        Ok(match precision {
            Precision::Single => cublasSrotg_v2(h, a.cast(), b.cast(), c.cast(), s.cast()),
            Precision::Double => cublasDrotg_v2(h, a.cast(), b.cast(), c.cast(), s.cast()),
            Precision::ComplexSingle => cublasCrotg_v2(h, a.cast(), b.cast(), c.cast(), s.cast()),
            _ => cublasZrotg_v2(h, a.cast(), b.cast(), c.cast(), s.cast()),
        })
    });
    answer("cublasRotgEx", chosen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use GemmElement::{Bf16, F16, F32};

    #[test]
    fn vectors_of_each_served_type_and_what_they_compute_in() {
        assert_eq!(Vectors::of(CUDA_R_32F).unwrap(), Vectors::Typed(Precision::Single));
        assert_eq!(Vectors::of(CUDA_C_64F).unwrap(), Vectors::Typed(Precision::ComplexDouble));
        assert_eq!(Vectors::of(CUDA_R_16F).unwrap(), Vectors::Narrow(F16));
        assert_eq!(Vectors::of(CUDA_R_16BF).unwrap(), Vectors::Narrow(Bf16));
        // Integers (CUDA_R_8I), complex binary16 (CUDA_C_16F).
        assert_eq!(Vectors::of(3).unwrap_err().code(), code::NOT_SUPPORTED);
        assert_eq!(Vectors::of(6).unwrap_err().code(), code::NOT_SUPPORTED);
        // Half precision: the constant one an f32, the vectors their own, scalars in f32.
        let narrow = Vectors::Narrow(Bf16);
        assert_eq!(narrow.types().elements, Some([F32, Bf16, Bf16]));
        assert_eq!((narrow.types().precision, narrow.compute_type()), (Precision::Single, CUDA_R_32F));
        assert_eq!(Vectors::Typed(Precision::ComplexSingle).compute_type(), CUDA_C_32F);
        assert_eq!(narrow.typed(CUDA_R_16BF).unwrap_err().code(), code::NOT_SUPPORTED);
    }

    #[test]
    fn types_other_than_the_typed_forms_are_refused_by_name() {
        assert!(expect(&[("y", CUDA_R_32F, CUDA_R_32F), ("alpha", CUDA_R_32F, CUDA_R_32F)]).is_ok());
        let refused = expect(&[("y", CUDA_R_32F, CUDA_R_32F), ("alpha", CUDA_R_64F, CUDA_R_32F)]).unwrap_err();
        assert_eq!(refused.code(), code::NOT_SUPPORTED);
        assert!(refused.to_string().contains("alpha 1"), "{refused}");
        assert_eq!(pair(CUDA_R_32F, CUDA_R_64F).unwrap_err().code(), code::NOT_SUPPORTED);
        // Modified rotations: one real type throughout.
        assert_eq!(modified(&[("x", CUDA_R_64F), ("param", CUDA_R_64F)]).unwrap(), Precision::Double);
        assert!(modified(&[("x", CUDA_R_64F), ("param", CUDA_R_32F)]).is_err());
        assert!(modified(&[("x", CUDA_C_32F), ("param", CUDA_C_32F)]).is_err());
    }

    #[test]
    fn index_reductions_pick_the_typed_form_of_their_vectors() {
        type Index = unsafe extern "C" fn(usize, c_int, u64, c_int, *mut c_int) -> u32;
        let same = |a: Index, b: Index| std::ptr::fn_addr_eq(a, b);
        assert!(same(index_of(CUDA_C_32F, false).unwrap(), cublasIcamax_v2));
        assert!(same(index_of(CUDA_R_64F, true).unwrap(), cublasIdamin_v2));
        assert!(!same(index_of(CUDA_R_64F, false).unwrap(), cublasIdamin_v2));
        assert_eq!(index_of(CUDA_R_16F, false).unwrap_err().code(), code::NOT_SUPPORTED);
    }
}
