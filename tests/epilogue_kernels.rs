//! Checks of the builtin `blas_epilogue` that run against any device (the CPU device in
//! `e2e/compute.rs`; the CUDA device on the driver stand-in and on a GPU through `gpu_cases`).

use ac_backend::device::epilogue::{EpilogueElement, EpilogueOp, GemmElement, Kept};
use ac_frontend::{Accelerator, ErrorKind, KernelArg, LaunchDims, Module};

/// Three 11 x 3 matrices of D, ld 14, 45 apart: the last column's rows run into a mask byte's
/// middle (11 is not a multiple of 8), and padding lies between the columns and batches. (Neither
/// is a multiple of the test data's periods, 13 and 11: no two columns hold the same values.)
const M: u64 = 11;
const N: u64 = 3;
const LD: u64 = 14;
const STRIDE: u64 = 45;
const BATCH: u64 = 3;
/// A mask's leading dimension and stride in bits (bytes 2 and 8), an input's in elements.
const MASK: [u64; 2] = [16, 64];
const INPUT: [u64; 2] = [12, 40];

/// `values` stored as `element`s, little-endian.
fn stored(values: &[f64], element: EpilogueElement) -> Vec<u8> {
    match element {
        EpilogueElement::Double => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        EpilogueElement::Single(t) => {
            crate::dft_kernels::stored(&values.iter().map(|&v| v as f32).collect::<Vec<_>>(), t)
        }
    }
}

/// The `element`s in `bytes`, as `f64` (exact).
fn loaded(bytes: &[u8], element: EpilogueElement) -> Vec<f64> {
    match element {
        EpilogueElement::Double => bytes.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect(),
        EpilogueElement::Single(t) => bytes.chunks_exact(t.bytes() as usize).map(|b| t.load(b).into()).collect(),
    }
}

/// Each element of D: its batch, column and row.
fn each_element() -> impl Iterator<Item = (u64, u64, u64)> {
    (0..BATCH).flat_map(|b| (0..N).flat_map(move |j| (0..M).map(move |i| (b, j, i))))
}

/// Where element `(i, j)` of batch `b` lies, for a leading dimension and stride.
fn at([ld, stride]: [u64; 2], b: u64, j: u64, i: u64) -> usize {
    (b * stride + j * ld + i) as usize
}

/// What `op` makes of `x` given `kept`, computed as the device computes it (in `f32`, or `f64`
/// for `f64` matrices) and rounded to D's type; and what it keeps.
fn expected(op: EpilogueOp, x: f64, kept: Kept<f64>, element: EpilogueElement) -> (f64, Option<Kept<f64>>) {
    let (value, keep) = match element {
        EpilogueElement::Double => op.element(x, kept),
        EpilogueElement::Single(_) => {
            let kept = match kept {
                Kept::Bit(bit) => Kept::Bit(bit),
                Kept::Value(v) => Kept::Value(v as f32),
            };
            let (value, keep) = op.element(x as f32, kept);
            let keep = keep.map(|k| match k {
                Kept::Bit(bit) => Kept::Bit(bit),
                Kept::Value(v) => Kept::Value(f64::from(v)),
            });
            (f64::from(value), keep)
        }
    };
    (loaded(&stored(&[value], element), element)[0], keep)
}

/// How far a device's result may be from the host's: none for ReLU's; GELU's within a rounding
/// to the type (a device's `tanh` may differ from the host's in the last bit).
fn tolerance(op: EpilogueOp, element: EpilogueElement) -> f64 {
    match (op.function(), element) {
        (ac_backend::device::epilogue::ActivationOp::Relu, _) => 0.0,
        (_, EpilogueElement::Double) => 1e-14,
        (_, EpilogueElement::Single(GemmElement::F32)) => 1.0 / f64::from(1 << 20),
        (_, EpilogueElement::Single(GemmElement::F16)) => 1.0 / 1024.0,
        (_, EpilogueElement::Single(GemmElement::Bf16)) => 1.0 / 128.0,
    }
}

/// Launches `blas_epilogue` for each op on D of each type (`f64` included), and checks every
/// element of D and of the auxiliary matrix, the padding and a mask's bits past the rows
/// included: ReLU keeping its mask, then the ReLU gradient reading that mask back on other
/// values; GELU keeping its input, then the GELU gradient at that input; ReLU and GELU alone on
/// `f64`. Then what it refuses: an unknown op or type, a mask's column not on a byte, D and the
/// auxiliary matrix overlapping, an auxiliary matrix past its allocation.
pub async fn epilogues_keep_and_read_their_auxiliary_matrices(acc: &Accelerator, builtin: &Module) {
    let epilogue = builtin.function("blas_epilogue").await.unwrap();
    let span = (STRIDE * BATCH) as usize;
    // Halves of small integers (exact in every type), zeros among them; gradients likewise.
    let x: Vec<f64> = (0..span).map(|i| ((i * 5 + 2) % 13) as f64 / 2.0 - 3.0).collect();
    let g: Vec<f64> = (0..span).map(|i| ((i * 3 + 1) % 11) as f64 / 4.0 - 1.0).collect();
    let in_d = |e: usize| (e as u64 % STRIDE) < N * LD && (e as u64 % STRIDE) % LD < M;
    let elements = [GemmElement::F32, GemmElement::F16, GemmElement::Bf16].map(EpilogueElement::Single);
    for element in elements.into_iter().chain([EpilogueElement::Double]) {
        let launch = |op: EpilogueOp, d: KernelArg, aux: KernelArg, [aux_ld, aux_stride]: [u64; 2]| {
            let u = |v: u64| KernelArg::U32(v as u32);
            let args = [u(op.code().into()), u(M), u(N), d, u(LD), KernelArg::U64(STRIDE), u(BATCH)];
            let aux = [u(element.code().into()), aux, KernelArg::U64(aux_ld), KernelArg::U64(aux_stride)];
            let args: Vec<KernelArg> = args.into_iter().chain(aux).collect();
            let epilogue = &epilogue;
            async move { epilogue.launch(LaunchDims::linear(M * N * BATCH, 32), &args).await.unwrap() }
        };
        let check = |what: &str, op: EpilogueOp, got: &[f64], want: &[f64]| {
            let tol = tolerance(op, element);
            for (e, (g, w)) in got.iter().zip(want).enumerate() {
                assert!((g - w).abs() <= tol * w.abs().max(1.0), "{what} {element:?}: element {e} is {g}, not {w}");
            }
        };

        // ReLU keeping its mask, over a mask of 0xa5 bytes: bits past row 11 of each column kept.
        let mask_bytes = at(MASK, BATCH - 1, N - 1, M).div_ceil(8);
        let mask = vec![0xa5u8; mask_bytes];
        let (d, aux) = (acc.alloc_from(&stored(&x, element)).await.unwrap(), acc.alloc_from(&mask).await.unwrap());
        launch(EpilogueOp::ReluMask, d.arg(), aux.arg(), MASK).await;
        let (mut want_d, mut want_mask) = (x.clone(), mask.clone());
        for (b, j, i) in each_element() {
            let e = at([LD, STRIDE], b, j, i);
            let (value, keep) = expected(EpilogueOp::ReluMask, x[e], Kept::Bit(false), element);
            want_d[e] = value;
            let bit = at(MASK, b, j, i);
            let Some(Kept::Bit(set)) = keep else { unreachable!("ReLU keeps a bit") };
            want_mask[bit / 8] = want_mask[bit / 8] & !(1 << (bit % 8)) | u8::from(set) << (bit % 8);
        }
        check("ReLU", EpilogueOp::ReluMask, &loaded(&d.to_vec().await.unwrap(), element), &want_d);
        let got_mask = aux.to_vec().await.unwrap();
        assert_eq!(got_mask, want_mask, "ReLU's mask over {element:?}");
        assert_ne!(want_mask, mask, "the mask is written");

        // Its gradient, reading that mask back: D zeroed where the bit is clear.
        let d = acc.alloc_from(&stored(&g, element)).await.unwrap();
        launch(EpilogueOp::ReluGradient, d.arg(), aux.arg(), MASK).await;
        let want: Vec<f64> = (0..span)
            .map(|e| {
                let (b, j, i) = (e as u64 / STRIDE, e as u64 % STRIDE / LD, e as u64 % STRIDE % LD);
                if !in_d(e) {
                    return g[e];
                }
                let bit = at(MASK, b, j, i);
                expected(EpilogueOp::ReluGradient, g[e], Kept::Bit(want_mask[bit / 8] >> (bit % 8) & 1 == 1), element).0
            })
            .collect();
        check("ReLU's gradient", EpilogueOp::ReluGradient, &loaded(&d.to_vec().await.unwrap(), element), &want);
        assert_eq!(aux.to_vec().await.unwrap(), want_mask, "the gradient leaves the mask");

        // GELU keeping its input (over markers of 99), then its gradient at that input.
        let aux_span = at(INPUT, BATCH, 0, 0);
        let d = acc.alloc_from(&stored(&x, element)).await.unwrap();
        let aux = acc.alloc_from(&stored(&vec![99.0; aux_span], element)).await.unwrap();
        launch(EpilogueOp::GeluInput, d.arg(), aux.arg(), INPUT).await;
        let (mut want_d, mut want_aux) = (x.clone(), vec![99.0; aux_span]);
        for (b, j, i) in each_element() {
            let e = at([LD, STRIDE], b, j, i);
            want_d[e] = expected(EpilogueOp::GeluInput, x[e], Kept::Value(0.0), element).0;
            want_aux[at(INPUT, b, j, i)] = x[e];
        }
        check("GELU", EpilogueOp::GeluInput, &loaded(&d.to_vec().await.unwrap(), element), &want_d);
        assert_eq!(loaded(&aux.to_vec().await.unwrap(), element), want_aux, "GELU's input over {element:?}");
        let d = acc.alloc_from(&stored(&g, element)).await.unwrap();
        launch(EpilogueOp::GeluGradient, d.arg(), aux.arg(), INPUT).await;
        let mut want = g.clone();
        for (b, j, i) in each_element() {
            let e = at([LD, STRIDE], b, j, i);
            want[e] = expected(EpilogueOp::GeluGradient, g[e], Kept::Value(want_aux[at(INPUT, b, j, i)]), element).0;
        }
        check("GELU's gradient", EpilogueOp::GeluGradient, &loaded(&d.to_vec().await.unwrap(), element), &want);

        // ReLU and GELU alone: D passed as the auxiliary matrix, which they do not touch.
        for op in [EpilogueOp::Relu, EpilogueOp::Gelu] {
            let d = acc.alloc_from(&stored(&x, element)).await.unwrap();
            launch(op, d.arg(), d.arg(), [0, 0]).await;
            let want: Vec<f64> = (0..span)
                .map(|e| if in_d(e) { expected(op, x[e], Kept::Bit(false), element).0 } else { x[e] })
                .collect();
            check("alone", op, &loaded(&d.to_vec().await.unwrap(), element), &want);
        }
    }
    refusals(acc, &epilogue).await;
}

/// What `blas_epilogue` refuses, each with a clear error; the session goes on.
async fn refusals(acc: &Accelerator, epilogue: &ac_frontend::Function) {
    let (d, aux) = (acc.alloc::<f32>(512).await.unwrap(), acc.alloc::<u8>(64).await.unwrap());
    let u = |v: u64| KernelArg::U32(v as u32);
    let args = |op: u64, type_code: u64, aux: KernelArg, aux_ld: u64| {
        [u(op), u(M), u(N), d.arg(), u(LD), KernelArg::U64(STRIDE), u(BATCH), u(type_code), aux]
            .into_iter()
            .chain([KernelArg::U64(aux_ld), KernelArg::U64(4 * aux_ld)])
            .collect::<Vec<_>>()
    };
    let refused = [
        ("an unknown op", args(6, 0, aux.arg(), 16), ErrorKind::InvalidArgument),
        ("an unknown type", args(0, 4, aux.arg(), 16), ErrorKind::InvalidArgument),
        ("a mask's column not on a byte", args(2, 0, aux.arg(), 12), ErrorKind::InvalidArgument),
        ("D and the mask overlapping", args(2, 0, d.at(100), 16), ErrorKind::InvalidArgument),
        ("a mask past its allocation", args(4, 0, aux.arg(), 64), ErrorKind::OutOfBounds),
    ];
    for (what, args, kind) in refused {
        let err = match epilogue.launch(LaunchDims::linear(64, 32), &args).await {
            Err(e) => e,
            Ok(()) => acc.synchronize().await.unwrap_err(),
        };
        assert_eq!(err.kind(), Some(kind), "{what}: {err}");
    }
    acc.synchronize().await.unwrap();
}
