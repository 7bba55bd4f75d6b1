//! The builtin gemm kernels (`blas_sgemm`, `blas_dgemm`) as `kernels.cu` computes them, for
//! the stand-in: column-major, one element of `C` at a time through the context's memory, so
//! that an access outside its allocations faults as on a GPU. Written apart from the backend's
//! CPU implementation (`ac-backend/src/device/gemm.rs`), so that a mistake in one shows.

use crate::kernels::{f32_arg, u32_arg, u64_arg, Memory, Shape};

/// `kernels.cu`'s `gemm<T>`, element by element as its threads compute it: column-major,
/// `C_b = alpha op(A_b) op(B_b) + beta C_b`, `C` unread when `beta` is 0; `f64` when `double`
/// (each element two 4-byte words of the memory).
pub(crate) fn gemm(double: bool, args: &[Vec<u8>], shape: Shape, memory: &mut dyn Memory) -> Option<()> {
    let width: u64 = if double { 8 } else { 4 };
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
    let load = |memory: &mut dyn Memory, base: u64, index: u64| -> Option<f64> {
        let at = base.checked_add(index.checked_mul(width)?)?;
        let words = memory.load(at, width as usize / 4)?;
        Some(if double {
            f64::from_bits(u64::from(words[0].to_bits()) | u64::from(words[1].to_bits()) << 32)
        } else {
            words[0] as f64
        })
    };
    for e in shape.grid_stride((m * n * batch) as usize) {
        let e = e as u64;
        let (i, j, bi) = (e % m, (e / m) % n, e / (m * n));
        // Accumulated in the kernel's own type, as the GPU does.
        let (mut acc32, mut acc64) = (0f32, 0f64);
        for p in 0..k {
            let x = load(memory, a, bi * sa + if ta { p + i * lda } else { i + p * lda })?;
            let y = load(memory, b, bi * sb + if tb { j + p * ldb } else { p + j * ldb })?;
            acc32 += (x as f32) * (y as f32);
            acc64 += x * y;
        }
        let at = bi * sc + i + j * ldc;
        let old = if beta == 0.0 { 0.0 } else { load(memory, c, at)? };
        let address = c.checked_add(at.checked_mul(width)?)?;
        // `beta == 0 ? alpha * acc : alpha * acc + beta * c`, as kernels.cu writes it.
        if double {
            let value = if beta == 0.0 { alpha * acc64 } else { alpha * acc64 + beta * old };
            let bits = value.to_bits();
            memory.store_u32(address, &[bits as u32, (bits >> 32) as u32])?;
        } else {
            let scaled = alpha as f32 * acc32;
            memory.store(address, &[if beta == 0.0 { scaled } else { scaled + beta as f32 * old as f32 }])?;
        }
    }
    Some(())
}
