//! The compute path end to end: memory, copies of every size class, kernels, streams.

use ac_backend::device::gemm::Gemm;
use ac_frontend::{CopyOptions, ErrorKind, KernelArg, LaunchDims};
use ac_tests::dft_kernels::dft_args;
use ac_tests::kernels::gemm_args;
use ac_tests::{pattern, TestBackend};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_kernels_match_cpu_references() {
    let tb = TestBackend::start(256).await;
    let acc = tb.connect().await;
    let module = acc.builtin().await.unwrap();
    let n = 10_000usize;
    let (a, b) = (pattern(n, 1), pattern(n, 2));
    let (da, db) = (acc.alloc_from(&a).await.unwrap(), acc.alloc_from(&b).await.unwrap());
    let dc = acc.alloc::<f32>(n).await.unwrap();

    let add = module.function("vector_add").await.unwrap();
    add.launch(LaunchDims::linear(n as u64, 128), &[da.arg(), db.arg(), dc.arg(), (n as u64).into()]).await.unwrap();
    let sum: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    assert_eq!(dc.to_vec().await.unwrap(), sum);

    let saxpy = module.function("saxpy").await.unwrap();
    saxpy
        .launch(LaunchDims::linear(n as u64, 256), &[0.5f32.into(), da.arg(), db.arg(), (n as u64).into()])
        .await
        .unwrap();
    let expect: Vec<f32> = a.iter().zip(&b).map(|(x, y)| 0.5 * x + y).collect();
    assert_eq!(db.to_vec().await.unwrap(), expect);

    let fill = module.function("fill").await.unwrap();
    fill.launch(LaunchDims::linear(100, 32), &[dc.at(10), 7.0f32.into(), 100u64.into()]).await.unwrap();
    let filled = dc.to_vec().await.unwrap();
    assert!(filled[10..110].iter().all(|&v| v == 7.0));
    assert_eq!(filled[9], sum[9]);
    assert_eq!(filled[110], sum[110]);

    let out = acc.alloc::<f32>(1).await.unwrap();
    let reduce = module.function("reduce_sum").await.unwrap();
    reduce.launch(LaunchDims::linear(n as u64, 256), &[da.arg(), out.arg(), (n as u64).into()]).await.unwrap();
    let expected: f64 = a.iter().map(|&v| v as f64).sum();
    let got = out.to_vec().await.unwrap()[0] as f64;
    assert!((got - expected).abs() / expected < 1e-6, "reduce_sum {got} vs {expected}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sgemm_matches_reference() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    let (m, n, k) = (33usize, 17usize, 29usize);
    let (a, b, c) = (pattern(m * k, 3), pattern(k * n, 4), pattern(m * n, 5));
    let (da, db, dc) =
        (acc.alloc_from(&a).await.unwrap(), acc.alloc_from(&b).await.unwrap(), acc.alloc_from(&c).await.unwrap());
    let sgemm = acc.builtin().await.unwrap().function("sgemm").await.unwrap();
    let args = [
        (m as u32).into(),
        (n as u32).into(),
        (k as u32).into(),
        2.0f32.into(),
        da.arg(),
        db.arg(),
        (-1.0f32).into(),
        dc.arg(),
    ];
    sgemm.launch(LaunchDims::new([2, 3, 1], [16, 16, 1]), &args).await.unwrap();
    let got = dc.to_vec().await.unwrap();
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k).map(|p| a[i * k + p] as f64 * b[p * n + j] as f64).sum();
            let want = 2.0 * dot - c[i * n + j] as f64;
            let g = got[i * n + j] as f64;
            assert!((g - want).abs() <= 1e-4 * want.abs().max(1.0), "C[{i},{j}] = {g}, want {want}");
        }
    }
}

/// Column-major `C_b = alpha op(A_b) op(B_b) + beta C_b`, in f64, C unread when beta is 0.
#[allow(clippy::too_many_arguments)]
fn gemm_reference(
    trans: [bool; 2],
    [m, n, k]: [usize; 3],
    alpha: f64,
    a: &[f64],
    b: &[f64],
    beta: f64,
    c: &mut [f64],
    [lda, ldb, ldc]: [usize; 3],
    [sa, sb, sc]: [usize; 3],
    batch: usize,
) {
    for bi in 0..batch {
        for j in 0..n {
            for i in 0..m {
                let dot: f64 = (0..k)
                    .map(|p| {
                        let x = if trans[0] { a[bi * sa + p + i * lda] } else { a[bi * sa + i + p * lda] };
                        let y = if trans[1] { b[bi * sb + j + p * ldb] } else { b[bi * sb + p + j * ldb] };
                        x * y
                    })
                    .sum();
                let out = &mut c[bi * sc + i + j * ldc];
                *out = if beta == 0.0 { alpha * dot } else { alpha * dot + beta * *out };
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blas_gemm_ex_rounds_half_precision_results_to_nearest_even() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    ac_tests::kernels::gemm_ex_rounds_each_type_exactly(&acc, &acc.builtin().await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blas_complex_gemms_conjugate_and_transpose() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    ac_tests::kernels::complex_gemms_conjugate_exactly(&acc, &acc.builtin().await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blas_triangular_solves_for_every_side_triangle_and_operation() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    ac_tests::kernels::triangular_solves_exactly(&acc, &acc.builtin().await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blas_lu_factors_solves_and_inverts_exactly() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    ac_tests::lu_kernels::lu_factors_solves_and_inverts_exactly(&acc, &acc.builtin().await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blas_magnitudes_reduce_exactly() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    ac_tests::kernels::magnitudes_reduce_exactly(&acc, &acc.builtin().await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blas_triangle_gemms_compute_one_triangle_exactly() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    ac_tests::kernels::triangle_gemms_compute_one_triangle_exactly(&acc, &acc.builtin().await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blas_structured_gemms_read_one_triangle_exactly() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    ac_tests::kernels::structured_gemms_read_one_triangle_exactly(&acc, &acc.builtin().await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blas_householder_factors_and_solves_as_the_reference() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    ac_tests::qr_kernels::householder_factors_and_solves_as_the_reference(&acc, &acc.builtin().await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blas_packed_triangles_move_exactly() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    ac_tests::kernels::packed_triangles_move_exactly(&acc, &acc.builtin().await.unwrap()).await;
}

/// Small integers: every product and sum below is exact in f32.
fn small_integers(n: usize, seed: usize) -> Vec<f64> {
    (0..n).map(|i| ((i * 7 + seed * 13) % 9) as f64 - 4.0).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blas_gemm_kernels_are_column_major_with_transposes_padding_and_batches() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    let module = acc.builtin().await.unwrap();
    let (sgemm, dgemm) = (module.function("blas_sgemm").await.unwrap(), module.function("blas_dgemm").await.unwrap());
    // A transposed and padded, B plain, two batches, C's padding rows set to a marker that
    // must survive; then the same on doubles with B transposed; then the two batches' results
    // side by side in each column of C (stride_c = m, ldc above 2 m), as attention heads are.
    let ([m, n, k], batch) = ([13usize, 11, 7], 2usize);
    for (double, trans, side_by_side) in
        [(false, [true, false], false), (true, [false, true], false), (false, [false, false], true)]
    {
        let lda = if trans[0] { k + 2 } else { m + 2 };
        let ldb = if trans[1] { n + 1 } else { k + 1 };
        let ldc = if side_by_side { batch * m + 1 } else { m + 3 };
        let cols = [if trans[0] { m } else { k }, if trans[1] { k } else { n }, n];
        let stride_c = if side_by_side { m } else { ldc * n + 2 };
        let strides = [lda * cols[0] + 5, ldb * cols[1], stride_c];
        let a = small_integers(strides[0] * batch, 1);
        let b = small_integers(strides[1] * batch, 2);
        let mut want = vec![99.0; ldc * n + stride_c * batch];
        let c = want.clone();
        gemm_reference(trans, [m, n, k], 2.0, &a, &b, -1.0, &mut want, [lda, ldb, ldc], strides, batch);
        let g = Gemm {
            trans_a: trans[0],
            trans_b: trans[1],
            m: m as u64,
            n: n as u64,
            k: k as u64,
            ld: [lda, ldb, ldc].map(|v| v as u64),
            stride: strides.map(|v| v as u64),
            batch: batch as u64,
        };
        let shape = |alpha, ptrs, beta| gemm_args(&g, alpha, ptrs, beta);
        let dims = LaunchDims::linear((m * n * batch) as u64, 64);
        let got: Vec<f64> = if double {
            let (da, db, dc) = (
                acc.alloc_from(&a).await.unwrap(),
                acc.alloc_from(&b).await.unwrap(),
                acc.alloc_from(&c).await.unwrap(),
            );
            dgemm.launch(dims, &shape(2.0f64.into(), [da.arg(), db.arg(), dc.arg()], (-1.0f64).into())).await.unwrap();
            dc.to_vec().await.unwrap()
        } else {
            let single = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
            let (da, db) = (acc.alloc_from(&single(&a)).await.unwrap(), acc.alloc_from(&single(&b)).await.unwrap());
            let dc = acc.alloc_from(&single(&c)).await.unwrap();
            sgemm.launch(dims, &shape(2.0f32.into(), [da.arg(), db.arg(), dc.arg()], (-1.0f32).into())).await.unwrap();
            dc.to_vec().await.unwrap().into_iter().map(f64::from).collect()
        };
        assert_eq!(
            got, want,
            "double {double}, trans {trans:?}, side by side {side_by_side}: C (its padding included)"
        );
    }

    // A launch that computes nothing touches nothing, whatever its strides and batches (m = 0,
    // 4 billion batches of nothing, C's stride 0).
    let d = acc.alloc::<f64>(64).await.unwrap();
    let nothing = Gemm {
        trans_a: false,
        trans_b: false,
        m: 0,
        n: 2,
        k: 3,
        ld: [1, 3, 1],
        stride: [0; 3],
        batch: u32::MAX as u64,
    };
    let args = gemm_args(&nothing, 1.0f64.into(), [d.arg(), d.arg(), d.arg()], 1.0f64.into());
    dgemm.launch(LaunchDims::linear(16, 16), &args).await.unwrap();
    acc.synchronize().await.expect("an empty product is no error");

    // What the kernels refuse before they run: C too small for its ld and columns, a double
    // pointer not 8-byte aligned, a leading dimension below its matrix's rows, batches whose
    // results overlap.
    let square = Gemm { trans_a: false, trans_b: false, m: 4, n: 4, k: 4, ld: [4; 3], stride: [0; 3], batch: 1 };
    let args = |c: KernelArg, ldc: u64| {
        let g = Gemm { ld: [4, 4, ldc], ..square };
        gemm_args(&g, 1.0f64.into(), [d.arg(), d.arg(), c], 0.0f64.into())
    };
    let misaligned = KernelArg::Ptr(ac_proto::backend::DevicePtr { buffer: d.id(), offset: 4 });
    for (what, args, kind) in [
        ("C past its buffer", args(d.at(60), 4), ErrorKind::OutOfBounds),
        ("a misaligned double", args(misaligned, 4), ErrorKind::InvalidArgument),
        ("ldc below m", args(d.arg(), 3), ErrorKind::InvalidArgument),
        (
            "batches overlapping",
            gemm_args(
                &Gemm { stride: [0, 0, 15], batch: 2, ..square },
                1.0f64.into(),
                [d.arg(), d.arg(), d.arg()],
                0.0f64.into(),
            ),
            ErrorKind::InvalidArgument,
        ),
    ] {
        let e = dgemm.launch(LaunchDims::linear(16, 16), &args).await.and(acc.synchronize().await).unwrap_err();
        assert_eq!(e.kind(), Some(kind), "{what}: {e}");
    }
}

/// The builtin transforms on the CPU device through the SDK, against their definitions: an
/// impulse's spectrum (complex, lines strided), a tone's (real to complex, doubles), a real
/// round trip scaled by n (complex to real), the padding between lines untouched; and what they
/// refuse before they run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_dft_kernels_transform_strided_lines_exactly_and_refuse_overruns() {
    use ac_backend::device::dft::{Dft, DftKind, DftStrides};
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    let module = acc.builtin().await.unwrap();
    let (f32s, f64s) = (module.function("dft_f32").await.unwrap(), module.function("dft_f64").await.unwrap());
    let dims = LaunchDims::linear(64, 32);
    let tau = std::f64::consts::TAU;

    // Two lines of 16 complex elements, line 1 starting 20 elements on: x[1] = 1 in each.
    let n = 16u64;
    let lines = DftStrides { step: 1, line: [20, 0, 0] };
    let impulse =
        Dft { kind: DftKind::ComplexToComplex, inverse: false, n, lines: [2, 1, 1], input: lines, output: lines };
    let mut x = vec![0.0f32; 2 * 36];
    x[2] = 1.0;
    x[2 * 21] = 1.0;
    let (dx, dy) = (acc.alloc_from(&x).await.unwrap(), acc.alloc_from(&vec![7.0f32; 2 * 36]).await.unwrap());
    f32s.launch(dims, &dft_args(&impulse, dx.arg(), dy.arg())).await.unwrap();
    let y = dy.to_vec().await.unwrap();
    for (line, k) in (0..2).flat_map(|l| (0..n as usize).map(move |k| (l, k))) {
        let at = 2 * (20 * line + k);
        let angle = -tau * k as f64 / n as f64;
        let (re, im) = (y[at] as f64, y[at + 1] as f64);
        assert!((re - angle.cos()).abs() < 1e-6 && (im - angle.sin()).abs() < 1e-6, "line {line}, k {k}: {re} {im}");
    }
    assert!(y[2 * 16..2 * 20].iter().all(|&v| v == 7.0), "the padding between lines is untouched");

    // A tone of frequency 5 in 40 doubles: n / 2 at k = 5, nothing elsewhere; back by the
    // inverse complex-to-real transform, 40 times the tone.
    let n = 40u64;
    let packed = |len| DftStrides { step: 1, line: [len, 0, 0] };
    let tone: Vec<f64> = (0..n).map(|j| (tau * 5.0 * j as f64 / n as f64).cos()).collect();
    let r2c =
        Dft { kind: DftKind::RealToComplex, inverse: false, n, lines: [1; 3], input: packed(n), output: packed(21) };
    let (dt, ds) = (acc.alloc_from(&tone).await.unwrap(), acc.alloc::<f64>(42).await.unwrap());
    f64s.launch(dims, &dft_args(&r2c, dt.arg(), ds.arg())).await.unwrap();
    let spectrum = ds.to_vec().await.unwrap();
    for k in 0..21 {
        let want = if k == 5 { 20.0 } else { 0.0 };
        assert!((spectrum[2 * k] - want).abs() < 1e-9 && spectrum[2 * k + 1].abs() < 1e-9, "k {k}");
    }
    let c2r =
        Dft { kind: DftKind::ComplexToReal, inverse: true, n, lines: [1; 3], input: packed(21), output: packed(n) };
    let back = acc.alloc::<f64>(n as usize).await.unwrap();
    f64s.launch(dims, &dft_args(&c2r, ds.arg(), back.arg())).await.unwrap();
    let back = back.to_vec().await.unwrap();
    assert!(back.iter().zip(&tone).all(|(b, t)| (b / n as f64 - t).abs() < 1e-12), "round trip");

    // Refused before running: an output past its buffer, an unknown kind.
    let past = Dft { lines: [3, 1, 1], ..impulse };
    let mut unknown = dft_args(&impulse, dx.arg(), dy.arg());
    unknown[0] = KernelArg::U32(7);
    for (what, args, kind) in [
        ("an output past its buffer", dft_args(&past, dy.arg(), dx.arg()), ErrorKind::OutOfBounds),
        ("an unknown kind", unknown, ErrorKind::InvalidArgument),
    ] {
        let e = f32s.launch(dims, &args).await.and(acc.synchronize().await).unwrap_err();
        assert_eq!(e.kind(), Some(kind), "{what}: {e}");
    }
}

/// `dft_ex` on the CPU device: binary16 and bfloat16 buffers in and out, within one rounding
/// to the output's type; an unknown type refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_dft_ex_rounds_half_precision_transforms_to_their_types() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    ac_tests::dft_kernels::half_precision_transforms_round_to_their_types(&acc, &acc.builtin().await.unwrap()).await;
}

/// `blas_activation` on the CPU device: ReLU and GELU in place on matrices of each type, the
/// padding untouched; what it refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_activation_applies_relu_and_gelu_in_place() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    ac_tests::kernels::activations_apply_in_place_to_each_type(&acc, &acc.builtin().await.unwrap()).await;
}

/// `blas_epilogue` on the CPU device: ReLU keeping its mask and GELU its input on matrices of
/// each type, `f64` included, their gradients reading them back, the padding untouched; what it
/// refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_epilogue_keeps_and_reads_auxiliary_matrices() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    let builtin = acc.builtin().await.unwrap();
    ac_tests::epilogue_kernels::epilogues_keep_and_read_their_auxiliary_matrices(&acc, &builtin).await;
}

/// `blas_copy` on the CPU device: elements of each width between vectors read forwards,
/// backwards and repeated, the gaps untouched; what it refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_copy_reads_vectors_backwards() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    ac_tests::copy_kernels::copies_read_vectors_backwards_exactly(&acc, &acc.builtin().await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_of_every_size_and_path_round_trip() {
    let tb = TestBackend::start(512).await;
    let acc = tb.connect().await;
    // Inline, one bulk stream, striped; pipelined and not; at an offset.
    for &(len, pipelined) in
        &[(10usize, true), (16 << 10, true), (3 << 20, false), (3 << 20, true), (40 << 20, true), (40 << 20, false)]
    {
        acc.set_copy_options(CopyOptions { pipelined, stripe_min: 8 << 20, ..CopyOptions::default() });
        let data: Vec<u8> = (0..len).map(|i| (i * 31 + len) as u8).collect();
        let buf = acc.alloc::<u8>(len + 100).await.unwrap();
        buf.copy_from_host_at(100, &data).await.unwrap();
        let mut back = vec![0u8; len];
        buf.copy_to_host_at(100, &mut back).await.unwrap();
        assert!(back == data, "round trip of {len} bytes (pipelined {pipelined}) differs");
        let mut head = vec![1u8; 100];
        buf.copy_to_host(&mut head).await.unwrap();
        assert!(head.iter().all(|&b| b == 0), "bytes before the offset were touched");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_run_in_order_and_sync_copies_see_async_work() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    let stream = acc.create_stream().await.unwrap();
    let n = 1 << 16;
    let x = acc.alloc::<f32>(n).await.unwrap();
    let y = acc.alloc::<f32>(n).await.unwrap();
    let module = acc.builtin().await.unwrap();
    let fill = module.function("fill").await.unwrap();
    let saxpy = module.function("saxpy").await.unwrap();
    // async write, fill, saxpy, device-to-device copy: all on one stream, in order.
    x.copy_from_host_async(&stream, 0, &vec![2.0f32; n]).await.unwrap();
    fill.launch_on(&stream, LaunchDims::linear(n as u64, 256), &[y.arg(), 1.0f32.into(), (n as u64).into()])
        .await
        .unwrap();
    for _ in 0..10 {
        saxpy
            .launch_on(
                &stream,
                LaunchDims::linear(n as u64, 256),
                &[3.0f32.into(), x.arg(), y.arg(), (n as u64).into()],
            )
            .await
            .unwrap();
    }
    x.copy_from_device(&stream, &y).await.unwrap();
    // A synchronous copy on the default stream must wait for the other stream's work.
    let got = x.to_vec().await.unwrap();
    assert!(got.iter().all(|&v| v == 61.0), "got {}", got[0]);
    y.memset(&stream, 0).await.unwrap();
    stream.synchronize().await.unwrap();
    assert!(y.to_vec().await.unwrap().iter().all(|&v| v == 0.0));
    stream.destroy().await.unwrap();
}

/// The backend hands launches to a stream in batches (up to 256, or when the control stream
/// goes quiet): bursts longer than a batch, interleaved over two streams, must all run, in
/// order, before a synchronous copy that follows them with no synchronize in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bursts_of_launches_longer_than_a_batch_all_run_before_a_copy() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    let other = acc.create_stream().await.unwrap();
    let n = 64usize;
    let x = acc.alloc_from(&vec![1.0f32; n]).await.unwrap();
    let zeros = vec![0.0f32; n];
    let (y0, y1) = (acc.alloc_from(&zeros).await.unwrap(), acc.alloc_from(&zeros).await.unwrap());
    let saxpy = acc.builtin().await.unwrap().function("saxpy").await.unwrap();
    let dims = LaunchDims::linear(n as u64, 32);
    for round in 1..=3u32 {
        for _ in 0..1000 {
            saxpy.launch(dims, &[1.0f32.into(), x.arg(), y0.arg(), (n as u64).into()]).await.unwrap();
            saxpy.launch_on(&other, dims, &[2.0f32.into(), x.arg(), y1.arg(), (n as u64).into()]).await.unwrap();
        }
        // A synchronous copy names its position: it must see every launch before it, on both
        // streams, although nothing synchronized.
        let expected = (1000 * round) as f32;
        assert!(y0.to_vec().await.unwrap().iter().all(|&v| v == expected), "default stream, round {round}");
        assert!(y1.to_vec().await.unwrap().iter().all(|&v| v == 2.0 * expected), "other stream, round {round}");
    }
    acc.synchronize().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freeing_returns_memory_and_info_reports_it() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    let total = acc.info().memory_total;
    assert_eq!(total, 64 << 20);
    let buf = acc.alloc::<u8>(10 << 20).await.unwrap();
    assert_eq!(acc.device_info().await.unwrap().memory_free, total - (10 << 20));
    buf.free().await.unwrap();
    assert_eq!(acc.device_info().await.unwrap().memory_free, total);
    {
        let _dropped = acc.alloc::<u8>(1 << 20).await.unwrap();
    }
    acc.ping().await.unwrap();
    assert_eq!(acc.device_info().await.unwrap().memory_free, total, "drop frees the buffer");
    let err = acc.alloc::<u8>(0).await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::InvalidArgument));
}

#[test]
fn blocking_api_works_from_plain_main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tb = rt.block_on(TestBackend::start(64));
    let options = tb.options();
    let result = std::thread::spawn(move || {
        let acc = ac_frontend::blocking::Accelerator::connect(&options).unwrap();
        let x = acc.alloc_from(&[1.0f32, 2.0, 3.0]).unwrap();
        let y = acc.alloc_from(&[10.0f32, 20.0, 30.0]).unwrap();
        let saxpy = acc.builtin().unwrap().function("saxpy").unwrap();
        saxpy.launch(LaunchDims::linear(3, 32), &[2.0f32.into(), x.arg(), y.arg(), 3u64.into()]).unwrap();
        y.to_vec().unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(result, vec![12.0, 24.0, 36.0]);
    assert!(
        rt.block_on(tb.eventually(std::time::Duration::from_secs(3), |b| b.sessions() == 0)),
        "closing the blocking handle ends the session"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_on_one_handle_each_get_their_own_answers() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    let mut tasks = Vec::new();
    for t in 0..16u32 {
        let acc = acc.clone();
        tasks.push(tokio::spawn(async move {
            let buf = acc.alloc::<u32>(64).await.unwrap();
            for i in 0..100u32 {
                let data: Vec<u32> = (0..64).map(|k| t * 1_000_000 + i * 100 + k).collect();
                buf.copy_from_host(&data).await.unwrap();
                acc.ping().await.unwrap();
                assert_eq!(buf.to_vec().await.unwrap(), data, "task {t} iteration {i} got another caller's data");
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_gives_up_does_not_corrupt_the_reply_stream() {
    let tb = TestBackend::start(64).await;
    let acc = tb.connect().await;
    // Each round's contents differ, so that a reply meant for an abandoned read, delivered to a
    // later one, is seen.
    let contents = |round: u64| (0..60_000u64).map(|k| (k * 7 + round * 13) as u8).collect::<Vec<u8>>();
    let buf = acc.alloc_from(&contents(0)).await.unwrap();
    // Start reads and abandon them at various points; later calls must still line up.
    for i in 0..50u64 {
        let _ = tokio::time::timeout(std::time::Duration::from_micros(i * 20), buf.to_vec()).await;
        buf.copy_from_host(&contents(i + 1)).await.unwrap();
    }
    assert!(buf.to_vec().await.unwrap() == contents(50), "the last read got the last contents");
    acc.ping().await.unwrap();
}
