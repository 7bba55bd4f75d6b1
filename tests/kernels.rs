//! Launch arguments of the builtin kernels, for tests that call them through the SDK.

use ac_backend::device::dft::Dft;
use ac_backend::device::gemm::Gemm;
use ac_frontend::KernelArg;

/// The arguments of `blas_sgemm`/`blas_dgemm` for shape `g`: `alpha` and `beta` of the
/// kernel's type, and pointers to A, B and C.
pub fn gemm_args(g: &Gemm, alpha: KernelArg, [a, b, c]: [KernelArg; 3], beta: KernelArg) -> Vec<KernelArg> {
    let u = |v: u64| KernelArg::U32(v as u32);
    let l = KernelArg::U64;
    #[rustfmt::skip] // one line per matrix, as the kernel's signature reads
    let args = vec![
        u(g.trans_a.into()), u(g.trans_b.into()), u(g.m), u(g.n), u(g.k), alpha,
        a, u(g.ld[0]), l(g.stride[0]),
        b, u(g.ld[1]), l(g.stride[1]),
        beta, c, u(g.ld[2]), l(g.stride[2]), u(g.batch),
    ];
    args
}

/// The arguments of `dft_f32`/`dft_f64` for transform `d`, from pointers to its input and
/// output.
pub fn dft_args(d: &Dft, input: KernelArg, output: KernelArg) -> Vec<KernelArg> {
    let u = |v: u64| KernelArg::U32(v as u32);
    let l = KernelArg::U64;
    let (i, o) = (d.input, d.output);
    #[rustfmt::skip] // one line per buffer, as the kernel's signature reads
    let args = vec![
        u(d.kind.code().into()), u(d.inverse.into()), u(d.n), u(d.lines[0]), u(d.lines[1]), u(d.lines[2]),
        input, l(i.step), l(i.line[0]), l(i.line[1]), l(i.line[2]),
        output, l(o.step), l(o.line[0]), l(o.line[1]), l(o.line[2]),
    ];
    args
}

/// Launches `blas_gemm_ex` on matrices of each mix of types the CUDA shim sends (f16 and bf16
/// in and out, f16 in and f32 out, a bf16 bias times an f32 row of ones), A transposed and
/// padded, B plain, two strided batches, and checks every byte of C against the product rounded
/// to C's type (`ac_proto`'s rounding): the inputs are small integers, so the sums before the
/// rounding are exact on any device, and results past 256 or 2048 round to even in bf16 or f16.
/// C's padding holds a marker that must survive.
pub async fn gemm_ex_rounds_each_type_exactly(acc: &ac_frontend::Accelerator, builtin: &ac_frontend::Module) {
    use ac_backend::device::gemm::GemmElement::{self, Bf16, F16, F32};
    let gemm_ex = builtin.function("blas_gemm_ex").await.unwrap();
    let ([m, n, k], batch) = ([9u64, 7, 33], 2u64);
    let g = Gemm { trans_a: true, trans_b: false, m, n, k, ld: [k + 2, k + 1, m + 3], stride: [0; 3], batch };
    let g = Gemm { stride: [g.ld[0] * m + 5, g.ld[1] * n, g.ld[2] * n + 2], ..g };
    let integers = |len: u64, seed: u64| (0..len).map(|i| ((i * 7 + seed * 13) % 17) as f32 - 8.0).collect::<Vec<_>>();
    let (a, b) = (integers(g.stride[0] * batch, 1), integers(g.stride[1] * batch, 2));
    let c: Vec<f32> = (0..g.stride[2] * batch).map(|i| if i % g.ld[2] < m { (i % 5) as f32 } else { 99.0 }).collect();
    let bytes = |values: &[f32], t: GemmElement| -> Vec<u8> {
        let mut out = vec![0u8; values.len() * t.bytes() as usize];
        for (v, dst) in values.iter().zip(out.chunks_exact_mut(t.bytes() as usize)) {
            t.store(*v, dst);
        }
        out
    };
    for types in [[F16, F16, F16], [Bf16, Bf16, Bf16], [F16, F16, F32], [Bf16, F32, Bf16]] {
        // What C holds: its values as stored (rounded to its type), then the product.
        let stored = |values: &[f32], t: GemmElement| -> Vec<f32> {
            bytes(values, t).chunks_exact(t.bytes() as usize).map(|e| t.load(e)).collect()
        };
        let (a, b, mut want) = (stored(&a, types[0]), stored(&b, types[1]), stored(&c, types[2]));
        ac_backend::device::gemm::run(&g, 3.0f32, &a, &b, -1.0, &mut want);
        let want = bytes(&want, types[2]);
        let (da, db) =
            (acc.alloc_from(&bytes(&a, types[0])).await.unwrap(), acc.alloc_from(&bytes(&b, types[1])).await.unwrap());
        let dc = acc.alloc_from(&bytes(&c, types[2])).await.unwrap();
        let mut args = gemm_args(&g, 3.0f32.into(), [da.arg(), db.arg(), dc.arg()], (-1.0f32).into());
        args.push(KernelArg::U32(GemmElement::encode(types)));
        gemm_ex.launch(ac_frontend::LaunchDims::new([5, 1, 1], [64, 1, 1]), &args).await.unwrap();
        let got = dc.to_vec().await.unwrap();
        let first_wrong = got.iter().zip(&want).position(|(g, w)| g != w);
        assert_eq!(first_wrong, None, "types {types:?}: C's bytes differ from byte {first_wrong:?}");
    }
    // A type code past bf16 is refused before the launch.
    let d = acc.alloc::<u8>(4096).await.unwrap();
    let mut args = gemm_args(&g, 1.0f32.into(), [d.arg(), d.arg(), d.arg()], 0.0f32.into());
    args.push(KernelArg::U32(0x311));
    let refused = gemm_ex.launch(ac_frontend::LaunchDims::new([1, 1, 1], [32, 1, 1]), &args).await;
    let err = match refused {
        Err(e) => e,
        Ok(()) => acc.synchronize().await.unwrap_err(),
    };
    assert_eq!(err.kind(), Some(ac_frontend::ErrorKind::InvalidArgument), "{err}");
}
