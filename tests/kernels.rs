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
