//! The builtin gemm kernels (`blas_sgemm`, `blas_dgemm`, `blas_gemm_ex`, `blas_cgemm`,
//! `blas_zgemm`) as `kernels.cu`
//! computes them, for the stand-in: column-major, one element of `C` at a time through the
//! context's memory, so that an access outside its allocations faults as on a GPU. Written apart
//! from the backend's CPU implementation (`ac-backend/src/device/gemm.rs`; half precision
//! converted here by the `half` crate, there by `ac-proto`'s own code), so that a mistake in one
//! shows.

use std::ops::{Add, Div, Mul, Neg, Sub};

use half::{bf16, f16};

use crate::kernels::{f32_arg, u32_arg, u64_arg, Memory, Shape};

/// Which of the gemm kernels runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kernel {
    /// `blas_sgemm`: `f32` matrices and scalars.
    Single,
    /// `blas_dgemm`: `f64` matrices and scalars.
    Double,
    /// `blas_gemm_ex`: `f32` scalars, each matrix of the type its last argument codes.
    Ex,
    /// `blas_cgemm`: complex `f32` matrices and scalars (imaginary parts after `batch`).
    ComplexSingle,
    /// `blas_zgemm`: complex `f64` matrices and scalars.
    ComplexDouble,
}

impl Kernel {
    /// The gemm kernel named `name`, if it is one.
    pub(crate) fn named(name: &str) -> Option<Self> {
        Some(match name {
            "blas_sgemm" => Kernel::Single,
            "blas_dgemm" => Kernel::Double,
            "blas_gemm_ex" => Kernel::Ex,
            "blas_cgemm" => Kernel::ComplexSingle,
            "blas_zgemm" => Kernel::ComplexDouble,
            _ => return None,
        })
    }
}

/// How one matrix's elements are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stored {
    F32,
    F64,
    F16,
    Bf16,
}

impl Stored {
    /// `blas_gemm_ex`'s code of a matrix's type (`kernels.cu`'s `Coded`).
    fn coded(code: usize) -> Option<Self> {
        [Stored::F32, Stored::F16, Stored::Bf16].get(code).copied()
    }

    fn width(self) -> u64 {
        match self {
            Stored::F64 => 8,
            Stored::F32 => 4,
            Stored::F16 | Stored::Bf16 => 2,
        }
    }

    /// Element `index` of the matrix at `base`, exactly.
    fn load(self, memory: &mut dyn Memory, base: u64, index: u64) -> Option<f64> {
        let at = base.checked_add(index.checked_mul(self.width())?)?;
        let bytes = memory.load_bytes(at, self.width() as usize)?;
        Some(match self {
            Stored::F64 => f64::from_le_bytes(bytes[..8].try_into().ok()?),
            Stored::F32 => f32::from_le_bytes(bytes[..4].try_into().ok()?).into(),
            Stored::F16 => f16::from_le_bytes([bytes[0], bytes[1]]).into(),
            Stored::Bf16 => bf16::from_le_bytes([bytes[0], bytes[1]]).into(),
        })
    }

    /// Stores `value` (of the kernel's compute type) as element `index`, rounded to this type.
    fn store(self, memory: &mut dyn Memory, base: u64, index: u64, value: f64) -> Option<()> {
        let at = base.checked_add(index.checked_mul(self.width())?)?;
        match self {
            Stored::F64 => memory.store_bytes(at, &value.to_le_bytes()),
            Stored::F32 => memory.store_bytes(at, &(value as f32).to_le_bytes()),
            Stored::F16 => memory.store_bytes(at, &f16::from_f32(value as f32).to_le_bytes()),
            Stored::Bf16 => memory.store_bytes(at, &bf16::from_f32(value as f32).to_le_bytes()),
        }
    }
}

/// Runs gemm kernel `kernel`. `None`: a fault (an access outside the context's memory, or a
/// type code `kernels.cu` does not know, which the backend refuses first).
pub(crate) fn gemm(kernel: Kernel, args: &[Vec<u8>], shape: Shape, memory: &mut dyn Memory) -> Option<()> {
    let stored = match kernel {
        Kernel::Single => [Stored::F32; 3],
        Kernel::Double => [Stored::F64; 3],
        Kernel::Ex => {
            let types = u32_arg(&args[17]);
            [Stored::coded(types & 15)?, Stored::coded(types >> 4 & 15)?, Stored::coded(types >> 8 & 15)?]
        }
        Kernel::ComplexSingle => return complex_gemm::<f32>(args, shape, memory),
        Kernel::ComplexDouble => return complex_gemm::<f64>(args, shape, memory),
    };
    real_gemm(kernel == Kernel::Double, stored, args, shape, memory)
}

/// `kernels.cu`'s `gemm<T, M>` on real matrices stored as `stored` says, element by element as
/// its threads compute it: column-major, `C_b = alpha op(A_b) op(B_b) + beta C_b`, `C` unread
/// when `beta` is 0, accumulated in `f64` when `double` and in `f32` otherwise.
fn real_gemm(double: bool, stored: [Stored; 3], args: &[Vec<u8>], shape: Shape, memory: &mut dyn Memory) -> Option<()> {
    let scalar = |arg: &[u8]| {
        if double {
            f64::from_ne_bytes(arg[..8].try_into().expect("8-byte parameter"))
        } else {
            f32_arg(arg) as f64
        }
    };
    let (ta, tb) = (u32_arg(&args[0]) != 0, u32_arg(&args[1]) != 0);
    let (m, n, k) = (u32_arg(&args[2]) as u64, u32_arg(&args[3]) as u64, u32_arg(&args[4]) as u64);
    let (alpha, beta) = (scalar(&args[5]), scalar(&args[12]));
    let [a, b, c] = [6, 9, 13].map(|i| u64_arg(&args[i]));
    let [lda, ldb, ldc] = [7, 10, 14].map(|i| u32_arg(&args[i]) as u64);
    let [sa, sb, sc] = [8, 11, 15].map(|i| u64_arg(&args[i]));
    let batch = u32_arg(&args[16]) as u64;
    for e in shape.grid_stride((m * n * batch) as usize) {
        let e = e as u64;
        let (i, j, bi) = (e % m, (e / m) % n, e / (m * n));
        // Accumulated in the kernel's own type, as the GPU does.
        let (mut acc32, mut acc64) = (0f32, 0f64);
        for p in 0..k {
            let x = stored[0].load(memory, a, bi * sa + if ta { p + i * lda } else { i + p * lda })?;
            let y = stored[1].load(memory, b, bi * sb + if tb { j + p * ldb } else { p + j * ldb })?;
            acc32 += (x as f32) * (y as f32);
            acc64 += x * y;
        }
        let at = bi * sc + i + j * ldc;
        let old = if beta == 0.0 { 0.0 } else { stored[2].load(memory, c, at)? };
        // `beta == 0 ? alpha * acc : alpha * acc + beta * c`, as kernels.cu writes it.
        let value = if double {
            if beta == 0.0 {
                alpha * acc64
            } else {
                alpha * acc64 + beta * old
            }
        } else {
            let scaled = alpha as f32 * acc32;
            f64::from(if beta == 0.0 { scaled } else { scaled + beta as f32 * old as f32 })
        };
        stored[2].store(memory, c, at, value)?;
    }
    Some(())
}

/// A real part's type of `blas_cgemm` (`f32`) and `blas_zgemm` (`f64`).
pub(crate) trait Real:
    Copy
    + PartialEq
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Neg<Output = Self>
    + Div<Output = Self>
{
    const ZERO: Self;
    /// Bytes of one.
    const WIDTH: usize;
    /// One from its little-endian bytes (a kernel parameter's, or memory's).
    fn from_bytes(bytes: &[u8]) -> Self;
    fn to_bytes(self) -> Vec<u8>;
}

macro_rules! real {
    ($t:ty) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const WIDTH: usize = std::mem::size_of::<$t>();
            fn from_bytes(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes[..Self::WIDTH].try_into().expect("a real part's bytes"))
            }
            fn to_bytes(self) -> Vec<u8> {
                self.to_le_bytes().to_vec()
            }
        }
    };
}

real!(f32);
real!(f64);

/// `(re, im)` products and sums as `kernels.cu`'s `Complex<R>` computes them.
fn times<R: Real>((a, b): (R, R), (c, d): (R, R)) -> (R, R) {
    (a * c - b * d, a * d + b * c)
}

/// `kernels.cu`'s `gemm<Complex<R>, Typed<Complex<R>>>`, element by element: as [`gemm`], on
/// complex elements (real part first), `alpha` and `beta` their real parts where a real gemm's
/// are and their imaginary parts after `batch`, operation 2 reading its matrix conjugated.
fn complex_gemm<R: Real>(args: &[Vec<u8>], shape: Shape, memory: &mut dyn Memory) -> Option<()> {
    let element = 2 * R::WIDTH as u64;
    let (ta, tb) = (u32_arg(&args[0]), u32_arg(&args[1]));
    let (m, n, k) = (u32_arg(&args[2]) as u64, u32_arg(&args[3]) as u64, u32_arg(&args[4]) as u64);
    let alpha = (R::from_bytes(&args[5]), R::from_bytes(&args[17]));
    let beta = (R::from_bytes(&args[12]), R::from_bytes(&args[18]));
    let [a, b, c] = [6, 9, 13].map(|i| u64_arg(&args[i]));
    let [lda, ldb, ldc] = [7, 10, 14].map(|i| u32_arg(&args[i]) as u64);
    let [sa, sb, sc] = [8, 11, 15].map(|i| u64_arg(&args[i]));
    let batch = u32_arg(&args[16]) as u64;
    let load = |memory: &mut dyn Memory, base: u64, index: u64, conjugate: bool| -> Option<(R, R)> {
        let bytes = memory.load_bytes(base.checked_add(index.checked_mul(element)?)?, element as usize)?;
        let (re, im) = (R::from_bytes(&bytes), R::from_bytes(&bytes[R::WIDTH..]));
        Some((re, if conjugate { -im } else { im }))
    };
    for e in shape.grid_stride((m * n * batch) as usize) {
        let e = e as u64;
        let (i, j, bi) = (e % m, (e / m) % n, e / (m * n));
        let mut acc = (R::ZERO, R::ZERO);
        for p in 0..k {
            let x = load(memory, a, bi * sa + if ta != 0 { p + i * lda } else { i + p * lda }, ta == 2)?;
            let y = load(memory, b, bi * sb + if tb != 0 { j + p * ldb } else { p + j * ldb }, tb == 2)?;
            let xy = times(x, y);
            acc = (acc.0 + xy.0, acc.1 + xy.1);
        }
        let at = bi * sc + i + j * ldc;
        let scaled = times(alpha, acc);
        let value = if beta == (R::ZERO, R::ZERO) {
            scaled
        } else {
            let old = times(beta, load(memory, c, at, false)?);
            (scaled.0 + old.0, scaled.1 + old.1)
        };
        let mut bytes = value.0.to_bytes();
        bytes.extend(value.1.to_bytes());
        memory.store_bytes(c.checked_add(at.checked_mul(element)?)?, &bytes)?;
    }
    Some(())
}
