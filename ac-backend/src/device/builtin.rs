//! The `builtin` module: kernels every device provides under the same names and signatures, so
//! programs run unchanged on the CPU and CUDA devices.
//!
//! All are grid-stride loops: any launch shape computes the whole result; the shape only sets
//! the parallelism. Pointers are to `f32`, little-endian, row-major for matrices.
//!
//! | kernel | parameters | effect |
//! |---|---|---|
//! | `fill` | `(f32* out, f32 value, u64 n)` | `out[i] = value` |
//! | `vector_add` | `(const f32* a, const f32* b, f32* c, u64 n)` | `c[i] = a[i] + b[i]` |
//! | `saxpy` | `(f32 a, const f32* x, f32* y, u64 n)` | `y[i] = a * x[i] + y[i]` |
//! | `sgemm` | `(u32 m, u32 n, u32 k, f32 alpha, const f32* A, const f32* B, f32 beta, f32* C)` | `C = alpha A B + beta C`, `A` m×k, `B` k×n, `C` m×n |
//! | `reduce_sum` | `(const f32* in, f32* out, u64 n)` | `out[0] += sum(in[0..n])` (zero `out` first) |

use ac_proto::backend::ParamKind::{self, Ptr, F32, U32, U64};

/// The module's name.
pub const MODULE: &str = "builtin";

/// The builtin kernels and their signatures.
pub const KERNELS: &[(&str, &[ParamKind])] = &[
    ("fill", &[Ptr, F32, U64]),
    ("vector_add", &[Ptr, Ptr, Ptr, U64]),
    ("saxpy", &[F32, Ptr, Ptr, U64]),
    ("sgemm", &[U32, U32, U32, F32, Ptr, Ptr, F32, Ptr]),
    ("reduce_sum", &[Ptr, Ptr, U64]),
];

/// The index and signature of a builtin kernel.
pub fn lookup(name: &str) -> Option<(usize, &'static [ParamKind])> {
    KERNELS.iter().position(|(n, _)| *n == name).map(|i| (i, KERNELS[i].1))
}

/// `C = alpha A B + beta C` on row-major slices; `c` holds C on entry.
#[allow(clippy::too_many_arguments)] // the BLAS sgemm signature, kept recognisable
pub fn sgemm(m: usize, n: usize, k: usize, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: &mut [f32]) {
    for row in 0..m {
        let c_row = &mut c[row * n..(row + 1) * n];
        for v in c_row.iter_mut() {
            *v *= beta;
        }
        for (p, &a_val) in a[row * k..(row + 1) * k].iter().enumerate() {
            let scaled = alpha * a_val;
            for (cv, &bv) in c_row.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                *cv += scaled * bv;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sgemm_small() {
        // [1 2; 3 4] x [5 6; 7 8] = [19 22; 43 50]
        let mut c = vec![1.0; 4];
        sgemm(2, 2, 2, 1.0, &[1., 2., 3., 4.], &[5., 6., 7., 8.], 2.0, &mut c);
        assert_eq!(c, vec![21., 24., 45., 52.]);
    }

    #[test]
    fn every_kernel_is_found() {
        for (name, params) in KERNELS {
            assert_eq!(lookup(name).unwrap().1, *params);
        }
        assert!(lookup("nope").is_none());
    }
}
