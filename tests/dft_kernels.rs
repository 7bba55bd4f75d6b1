//! The builtin transforms (`dft_f32`, `dft_f64`, `dft_ex`) through the SDK: their launch
//! arguments, and the half-precision transforms checked on any device.

use ac_backend::device::dft::{run, Dft, DftKind, DftStrides, GemmElement};
use ac_frontend::{Accelerator, ErrorKind, KernelArg, LaunchDims, Module};

/// The arguments of `dft_f32`/`dft_f64` for transform `d`, from pointers to its input and
/// output (`dft_ex`'s: these, then its types).
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

/// `values` stored as `t`, little-endian (each rounded to it).
pub fn stored(values: &[f32], t: GemmElement) -> Vec<u8> {
    let width = t.bytes() as usize;
    let mut out = vec![0u8; values.len() * width];
    for (v, dst) in values.iter().zip(out.chunks_exact_mut(width)) {
        t.store(*v, dst);
    }
    out
}

/// Launches `dft_ex` on each mix of types the CUDA shim sends (binary16 or bfloat16 in and out,
/// either in and `f32` out, `f32` in and either out), over two strided lines of each kind, in
/// buffers of exactly the bytes the launch touches, and checks the output against the same
/// transform computed here in `f64` from the stored input: within one rounding to the output's
/// type (relative to the largest value), and the elements between the lines untouched. The
/// inputs are quarters of small integers, which both half-precision types hold exactly. A type
/// code past bf16 is refused before the launch.
pub async fn half_precision_transforms_round_to_their_types(acc: &Accelerator, builtin: &Module) {
    use GemmElement::{Bf16, F16, F32};
    let dft_ex = builtin.function("dft_ex").await.unwrap();
    let n = 12u64;
    let cases = [
        (DftKind::ComplexToComplex, [F16, F16]),
        (DftKind::RealToComplex, [Bf16, F32]),
        (DftKind::ComplexToReal, [F32, F16]),
        (DftKind::ComplexToComplex, [F16, F32]),
        (DftKind::Copy, [Bf16, Bf16]),
    ];
    for (kind, types) in cases {
        let (inverse, none) = (kind == DftKind::ComplexToReal, DftStrides::default());
        let probe = Dft { kind, inverse, n, lines: [2, 1, 1], input: none, output: none };
        let [in_len, out_len] = probe.lengths();
        let [in_scalars, out_scalars] = probe.complex().map(|complex| if complex { 2 } else { 1 });
        // Line 1 starts 3 elements after line 0 ends, in both buffers.
        let strides = |len: u64| DftStrides { step: 1, line: [len + 3, 0, 0] };
        let d = Dft { input: strides(in_len), output: strides(out_len), ..probe };
        let [in_span, out_span] = d.footprints();
        let input: Vec<f32> = (0..in_span * in_scalars).map(|i| ((i * 5 + 3) % 17) as f32 / 4.0 - 2.0).collect();
        let marker = vec![7.0f32; (out_span * out_scalars) as usize];
        let read_back = |bytes: &[u8], t: GemmElement| -> Vec<f32> {
            bytes.chunks_exact(t.bytes() as usize).map(|e| t.load(e)).collect()
        };
        // The transform in f64 of what the buffers hold as stored, then as f32.
        let as_stored =
            |values: &[f32], t| -> Vec<f64> { read_back(&stored(values, t), t).into_iter().map(f64::from).collect() };
        let mut want_f64 = as_stored(&marker, types[1]);
        run(&d, &as_stored(&input, types[0]), &mut want_f64);
        let want: Vec<f32> = want_f64.iter().map(|&v| v as f32).collect();
        let (din, dout) = (
            acc.alloc_from(&stored(&input, types[0])).await.unwrap(),
            acc.alloc_from(&stored(&marker, types[1])).await.unwrap(),
        );
        let mut args = dft_args(&d, din.arg(), dout.arg());
        args.push(KernelArg::U32(GemmElement::encode(types)));
        dft_ex.launch(LaunchDims::linear(64, 32), &args).await.unwrap();
        let got = read_back(&dout.to_vec().await.unwrap(), types[1]);
        let largest = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        // One rounding of the largest value to the output's type (11 or 8 significant bits), and f32's sums.
        let bound = largest
            * match types[1] {
                F16 => 1.0 / 1024.0,
                Bf16 => 1.0 / 128.0,
                F32 => 1e-5,
            };
        let worst = got.iter().zip(&want).map(|(g, w)| (g - w).abs()).fold(0f32, f32::max);
        assert!(worst <= bound, "{kind:?} {types:?}: off by {worst} (bound {bound}):\n{got:?}\n{want:?}");
        let between = (out_len * out_scalars) as usize..((out_len + 3) * out_scalars) as usize;
        assert!(
            got[between].iter().all(|&v| v == 7.0),
            "{kind:?} {types:?}: the elements between the lines are untouched"
        );
    }
    let packed = DftStrides { step: 1, line: [4, 0, 0] };
    let d = Dft { kind: DftKind::ComplexToComplex, inverse: false, n: 4, lines: [1; 3], input: packed, output: packed };
    let buffer = acc.alloc::<u8>(64).await.unwrap();
    let mut args = dft_args(&d, buffer.arg(), buffer.at(32));
    args.push(KernelArg::U32(0x31));
    let refused = dft_ex.launch(LaunchDims::linear(1, 32), &args).await;
    let err = match refused {
        Err(e) => e,
        Ok(()) => acc.synchronize().await.unwrap_err(),
    };
    assert_eq!(err.kind(), Some(ErrorKind::InvalidArgument), "{err}");
}
