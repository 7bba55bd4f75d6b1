//! The builtin gemm kernels (`blas_sgemm`, `blas_dgemm`, `blas_gemm_ex`) as `kernels.cu`
//! computes them, for the stand-in: column-major, one element of `C` at a time through the
//! context's memory, so that an access outside its allocations faults as on a GPU. Written apart
//! from the backend's CPU implementation (`ac-backend/src/device/gemm.rs`; half precision
//! converted here by the `half` crate, there by `ac-proto`'s own code), so that a mistake in one
//! shows.

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
}

impl Kernel {
    /// The gemm kernel named `name`, if it is one.
    pub(crate) fn named(name: &str) -> Option<Self> {
        Some(match name {
            "blas_sgemm" => Kernel::Single,
            "blas_dgemm" => Kernel::Double,
            "blas_gemm_ex" => Kernel::Ex,
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

/// `kernels.cu`'s `gemm<T, M>`, element by element as its threads compute it: column-major,
/// `C_b = alpha op(A_b) op(B_b) + beta C_b`, `C` unread when `beta` is 0, accumulated in `f64`
/// for `blas_dgemm` and in `f32` otherwise. `None`: a fault (an access outside the context's
/// memory, or a type code `kernels.cu` does not know, which the backend refuses first).
pub(crate) fn gemm(kernel: Kernel, args: &[Vec<u8>], shape: Shape, memory: &mut dyn Memory) -> Option<()> {
    let double = kernel == Kernel::Double;
    let scalar = |arg: &[u8]| {
        if double {
            f64::from_ne_bytes(arg[..8].try_into().expect("8-byte parameter"))
        } else {
            f32_arg(arg) as f64
        }
    };
    let stored: [Stored; 3] = match kernel {
        Kernel::Single => [Stored::F32; 3],
        Kernel::Double => [Stored::F64; 3],
        Kernel::Ex => {
            let types = u32_arg(&args[17]);
            [Stored::coded(types & 15)?, Stored::coded(types >> 4 & 15)?, Stored::coded(types >> 8 & 15)?]
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
