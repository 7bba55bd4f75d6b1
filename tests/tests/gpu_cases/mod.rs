//! The CUDA device's end-to-end cases that need no user kernel: run on a GPU by `gpu.rs`
//! (through `scripts/gpu-check`) and against the CUDA driver stand-in by `device_contract.rs`
//! (in `scripts/test`). Each takes a backend already started on the device to test.

pub mod arrays;

use std::time::Duration;

use ac_frontend::{Accelerator, DeviceKind, ErrorKind, LaunchDims};
use ac_tests::{pattern, TestBackend};

/// A kernel that stores to an address outside every allocation (a real fault on a GPU, an
/// injected one in the stand-in).
pub const ILLEGAL_STORE_PTX: &str = include_str!("../../fixtures/illegal_store.ptx");

fn relative_error(got: &[f32], want: &[f64]) -> f64 {
    let norm = want.iter().map(|v| v * v).sum::<f64>().sqrt();
    let diff = got.iter().zip(want).map(|(g, w)| (*g as f64 - w).powi(2)).sum::<f64>().sqrt();
    diff / norm.max(f64::MIN_POSITIVE)
}

pub async fn reports_itself(tb: &TestBackend) {
    let acc = tb.connect().await;
    let info = acc.info();
    assert_eq!(info.kind, DeviceKind::Cuda);
    assert!(info.compute_capability.is_some_and(|(major, _)| major >= 5), "{info:?}");
    assert!(info.memory_total > 1 << 30 && info.memory_free <= info.memory_total, "{info:?}");
    eprintln!("device: {} (compute {:?}), {} MiB", info.name, info.compute_capability, info.memory_total >> 20);
}

pub async fn builtin_kernels_match_the_cpu(tb: &TestBackend) {
    let acc = tb.connect().await;
    let builtin = acc.builtin().await.unwrap();

    let n = 1usize << 22;
    let (x, y) = (pattern(n, 1), pattern(n, 2));
    let (dx, dy) = (acc.alloc_from(&x).await.unwrap(), acc.alloc_from(&y).await.unwrap());
    let saxpy = builtin.function("saxpy").await.unwrap();
    saxpy
        .launch(LaunchDims::linear(n as u64, 256), &[1.5f32.into(), dx.arg(), dy.arg(), (n as u64).into()])
        .await
        .unwrap();
    let got = dy.to_vec().await.unwrap();
    assert!(got.iter().zip(x.iter().zip(&y)).all(|(g, (a, b))| (g - (1.5 * a + b)).abs() <= 1e-5));

    let (m, nn, k) = (300usize, 200usize, 150usize);
    let (a, b, c) = (pattern(m * k, 3), pattern(k * nn, 4), pattern(m * nn, 5));
    let mut want = c.clone();
    ac_backend::device::builtin::sgemm(m, nn, k, 1.25, &a, &b, 0.5, &mut want);
    let (da, db, dc) =
        (acc.alloc_from(&a).await.unwrap(), acc.alloc_from(&b).await.unwrap(), acc.alloc_from(&c).await.unwrap());
    let sgemm = builtin.function("sgemm").await.unwrap();
    let args = [
        (m as u32).into(),
        (nn as u32).into(),
        (k as u32).into(),
        1.25f32.into(),
        da.arg(),
        db.arg(),
        0.5f32.into(),
        dc.arg(),
    ];
    sgemm.launch(LaunchDims::new([13, 19, 1], [16, 16, 1]), &args).await.unwrap();
    let want: Vec<f64> = want.iter().map(|&v| v as f64).collect();
    let rel = relative_error(&dc.to_vec().await.unwrap(), &want);
    assert!(rel <= 1e-5, "sgemm relative error {rel:e}");

    blas_gemm_matches_the_cpu(&acc, &builtin).await;
    ac_tests::kernels::gemm_ex_rounds_each_type_exactly(&acc, &builtin).await;
    ac_tests::kernels::complex_gemms_conjugate_exactly(&acc, &builtin).await;
    ac_tests::kernels::triangular_solves_exactly(&acc, &builtin).await;
    ac_tests::lu_kernels::lu_factors_solves_and_inverts_exactly(&acc, &builtin).await;
    ac_tests::kernels::magnitudes_reduce_exactly(&acc, &builtin).await;
    ac_tests::kernels::triangle_gemms_compute_one_triangle_exactly(&acc, &builtin).await;
    ac_tests::kernels::structured_gemms_read_one_triangle_exactly(&acc, &builtin).await;
    ac_tests::kernels::packed_triangles_move_exactly(&acc, &builtin).await;
    ac_tests::qr_kernels::householder_factors_and_solves_as_the_reference(&acc, &builtin).await;
    dft_matches_the_cpu(&acc, &builtin).await;
    ac_tests::dft_kernels::half_precision_transforms_round_to_their_types(&acc, &builtin).await;
    ac_tests::kernels::activations_apply_in_place_to_each_type(&acc, &builtin).await;
    ac_tests::epilogue_kernels::epilogues_keep_and_read_their_auxiliary_matrices(&acc, &builtin).await;
    ac_tests::copy_kernels::copies_read_vectors_backwards_exactly(&acc, &builtin).await;

    let data = pattern(10_000_019, 6);
    let expected: f64 = data.iter().map(|&v| v as f64).sum();
    let (din, dout) = (acc.alloc_from(&data).await.unwrap(), acc.alloc_from(&[0.0f32]).await.unwrap());
    let reduce = builtin.function("reduce_sum").await.unwrap();
    reduce
        .launch(LaunchDims::new([512, 1, 1], [96, 1, 1]), &[din.arg(), dout.arg(), (data.len() as u64).into()])
        .await
        .unwrap();
    let sum = dout.to_vec().await.unwrap()[0] as f64;
    assert!((sum - expected).abs() <= 1e-5 * expected.abs().max(1.0), "sum {sum} vs {expected}");

    // The builtins check their footprint before launching, as on the CPU device.
    let short = acc.alloc::<f32>(10).await.unwrap();
    saxpy.launch(LaunchDims::linear(100, 64), &[1.0f32.into(), short.arg(), short.arg(), 100u64.into()]).await.unwrap();
    let err = acc.synchronize().await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::OutOfBounds), "{err}");
}

/// `blas_sgemm` and `blas_dgemm` (A transposed, B not, leading dimensions above the rows, two
/// strided batches) against the CPU device's implementation of the same kernels.
async fn blas_gemm_matches_the_cpu(acc: &Accelerator, builtin: &ac_frontend::Module) {
    use ac_backend::device::gemm::{run, Gemm};
    let (m, n, k, batch) = (70u64, 50u64, 40u64, 2u64);
    let g = Gemm { trans_a: true, trans_b: false, m, n, k, ld: [k + 3, k + 1, m + 2], stride: [0; 3], batch };
    let g = Gemm { stride: [g.ld[0] * m + 7, g.ld[1] * n, g.ld[2] * n + 1], ..g };
    let lens = g.stride.map(|s| (s * batch) as usize);
    let (a, b, c) = (pattern(lens[0], 7), pattern(lens[1], 8), pattern(lens[2], 9));
    let args = |alpha, ptrs, beta| ac_tests::kernels::gemm_args(&g, alpha, ptrs, beta);
    let dims = LaunchDims::new([7, 1, 1], [128, 1, 1]);
    let mut want = c.clone();
    run(&g, 1.25f32, &a, &b, 0.5, &mut want);
    let (da, db, dc) =
        (acc.alloc_from(&a).await.unwrap(), acc.alloc_from(&b).await.unwrap(), acc.alloc_from(&c).await.unwrap());
    let sgemm = builtin.function("blas_sgemm").await.unwrap();
    sgemm.launch(dims, &args(1.25f32.into(), [da.arg(), db.arg(), dc.arg()], 0.5f32.into())).await.unwrap();
    let want64: Vec<f64> = want.iter().map(|&v| v as f64).collect();
    let rel = relative_error(&dc.to_vec().await.unwrap(), &want64);
    assert!(rel <= 1e-5, "blas_sgemm relative error {rel:e}");

    let widen = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<f64>>();
    let (a, b, c) = (widen(&a), widen(&b), widen(&c));
    let mut want = c.clone();
    run(&g, 1.25f64, &a, &b, 0.5, &mut want);
    let (da, db, dc) =
        (acc.alloc_from(&a).await.unwrap(), acc.alloc_from(&b).await.unwrap(), acc.alloc_from(&c).await.unwrap());
    let dgemm = builtin.function("blas_dgemm").await.unwrap();
    dgemm.launch(dims, &args(1.25f64.into(), [da.arg(), db.arg(), dc.arg()], 0.5f64.into())).await.unwrap();
    let got = dc.to_vec().await.unwrap();
    let worst = got.iter().zip(&want).map(|(g, w)| (g - w).abs() / w.abs().max(1.0)).fold(0.0, f64::max);
    assert!(worst <= 1e-12, "blas_dgemm relative error {worst:e}");
}

/// `dft_f32` and `dft_f64` (each kind: complex to complex over lines along two dimensions,
/// strided elements; real to complex and back; a copy) against the CPU device's implementation.
async fn dft_matches_the_cpu(acc: &Accelerator, builtin: &ac_frontend::Module) {
    use ac_backend::device::dft::{run, Dft, DftKind, DftStrides};
    let n = 60u64;
    let half = n / 2 + 1;
    // Lines (3 x 2) of n elements two apart, 7 elements of padding between lines.
    let strided = DftStrides { step: 2, line: [2 * (2 * n + 7), 2 * n + 7, 0] };
    let packed = |len: u64| DftStrides { step: 1, line: [2 * len, len, 0] };
    let cases = [
        Dft { kind: DftKind::ComplexToComplex, inverse: false, n, lines: [3, 2, 1], input: strided, output: strided },
        Dft {
            kind: DftKind::RealToComplex,
            inverse: false,
            n,
            lines: [3, 2, 1],
            input: packed(n),
            output: packed(half),
        },
        Dft {
            kind: DftKind::ComplexToReal,
            inverse: true,
            n,
            lines: [3, 2, 1],
            input: packed(half),
            output: packed(n),
        },
        Dft { kind: DftKind::Copy, inverse: false, n, lines: [3, 2, 1], input: strided, output: packed(n) },
    ];
    let dims = LaunchDims::new([5, 1, 1], [64, 1, 1]);
    for d in cases {
        let scalars = |footprint: u64, complex: bool| (footprint * if complex { 2 } else { 1 }) as usize;
        let [in_len, out_len] = [0, 1].map(|x| scalars(d.footprints()[x], d.complex()[x]));
        let input = pattern(in_len, 11);
        let output = pattern(out_len, 12);
        let mut want = output.clone();
        run(&d, &input, &mut want);
        let (din, dout) = (acc.alloc_from(&input).await.unwrap(), acc.alloc_from(&output).await.unwrap());
        let f32s = builtin.function("dft_f32").await.unwrap();
        f32s.launch(dims, &ac_tests::dft_kernels::dft_args(&d, din.arg(), dout.arg())).await.unwrap();
        let want64: Vec<f64> = want.iter().map(|&v| v as f64).collect();
        let rel = relative_error(&dout.to_vec().await.unwrap(), &want64);
        assert!(rel <= 1e-5, "dft_f32 {:?}: relative error {rel:e}", d.kind);

        let widen = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<f64>>();
        let (input, output) = (widen(&input), widen(&output));
        let mut want = output.clone();
        run(&d, &input, &mut want);
        let (din, dout) = (acc.alloc_from(&input).await.unwrap(), acc.alloc_from(&output).await.unwrap());
        let f64s = builtin.function("dft_f64").await.unwrap();
        f64s.launch(dims, &ac_tests::dft_kernels::dft_args(&d, din.arg(), dout.arg())).await.unwrap();
        // Over the whole output: outputs near 0 carry the sums' rounding, and twiddles differ in
        // their last bits between devices.
        let got = dout.to_vec().await.unwrap();
        let norm = want.iter().map(|w| w * w).sum::<f64>().sqrt();
        let rel = got.iter().zip(&want).map(|(g, w)| (g - w).powi(2)).sum::<f64>().sqrt() / norm;
        assert!(rel <= 1e-13, "dft_f64 {:?}: relative error {rel:e}", d.kind);
    }
}

/// Bulk copies, pipelined through the pinned pool and not, plus device-to-device, memset and a
/// failed allocation. With `staging_mib = 0` in the backend, they take the pageable path.
pub async fn copies_round_trip_through_the_staging_pipeline(tb: &TestBackend) {
    let acc = tb.connect().await;
    // Store-and-forward holds a whole copy, so it stays under the session's payload budget
    // (64 MiB by default).
    for (pipelined, mib) in [(true, 96usize), (false, 48)] {
        let data = pattern((mib << 20) / 4 + 3, 7);
        let mut options = acc.copy_options();
        options.pipelined = pipelined;
        acc.set_copy_options(options);
        let buf = acc.alloc_from(&data).await.unwrap();
        assert!(buf.to_vec().await.unwrap() == data, "pipelined {pipelined}");
    }
    // Device to device on one GPU, then a memset over part of the copy: each checked, so that
    // neither can do nothing unseen.
    let counting: Vec<f32> = (0..1024).map(|i| i as f32).collect();
    let buf = acc.alloc_from(&counting).await.unwrap();
    let stream = acc.default_stream();
    let view = acc.alloc_from(&vec![0.0f32; 1024]).await.unwrap();
    view.copy_from_device(&stream, &buf).await.unwrap();
    acc.synchronize().await.unwrap();
    assert!(view.to_vec().await.unwrap() == counting, "the device-to-device copy");
    view.memset_range(&stream, 256, 512, 0x3F).await.unwrap();
    acc.synchronize().await.unwrap();
    let set = view.to_vec().await.unwrap();
    let expected = |i: usize| if (256..768).contains(&i) { f32::from_bits(0x3F3F_3F3F) } else { i as f32 };
    assert!(set.iter().enumerate().all(|(i, v)| v.to_bits() == expected(i).to_bits()), "memset of elements 256..768");
    let err = acc.alloc::<u8>(acc.info().memory_total as usize * 2).await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::OutOfMemory), "{err}");
    assert_eq!(buf.to_vec().await.unwrap()[1023], 1023.0, "the session survives a failed allocation");
}

pub async fn fault_in_one_session_leaves_the_others_working(tb: &TestBackend) {
    let healthy = tb.connect().await;
    let victim = tb.connect().await;
    ac_tests::computes(&healthy).await.unwrap();

    let wild = victim.load_ptx(ILLEGAL_STORE_PTX).await.unwrap().function("illegal_store").await.unwrap();
    // Keep the healthy session busy while the fault happens.
    let busy = {
        let healthy = healthy.clone();
        tokio::spawn(async move {
            for _ in 0..20 {
                ac_tests::computes(&healthy).await?;
            }
            Ok::<_, ac_frontend::Error>(())
        })
    };
    wild.launch(LaunchDims::linear(1, 1), &[0x10u64.into()]).await.unwrap();
    let err = victim.synchronize().await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::ContextLost), "{err}");
    assert!(err.to_string().contains("CUDA_ERROR_"), "the CUDA error is named: {err}");
    let again = victim.alloc::<f32>(4).await.unwrap_err();
    assert_eq!(again.kind(), Some(ErrorKind::ContextLost), "{again}");
    busy.await.unwrap().expect("the other session never noticed");
    ac_tests::computes(&tb.connect().await).await.expect("a new session works");
    // The function holds the session too: both go, and the lost context with them.
    drop((wild, victim));
    assert!(tb.eventually(Duration::from_secs(5), |b| b.sessions() == 1).await);
}

/// Unloading a module ends its functions: a launch of one is refused with a clear error, and
/// other modules' functions go on (finding 3). Needs only the builtin module: runs on the CPU
/// device too.
pub async fn functions_of_an_unloaded_module_are_refused(acc: &Accelerator) {
    let (kept, gone) = (acc.builtin().await.unwrap(), acc.builtin().await.unwrap());
    let fill_kept = kept.function("fill").await.unwrap();
    let fill_gone = gone.function("fill").await.unwrap();
    let out = acc.alloc::<f32>(16).await.unwrap();
    gone.unload().await.unwrap();
    fill_gone.launch(LaunchDims::linear(16, 16), &[out.arg(), 2.0f32.into(), 16u64.into()]).await.unwrap();
    let err = acc.synchronize().await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::InvalidFunction), "{err}");
    assert!(err.to_string().contains("which was unloaded"), "{err}");
    fill_kept.launch(LaunchDims::linear(16, 16), &[out.arg(), 3.0f32.into(), 16u64.into()]).await.unwrap();
    assert_eq!(out.to_vec().await.unwrap(), vec![3.0; 16]);
}

/// New memory reads as zeros, as the SDK and `ac.h` promise: fresh, large, and allocated again
/// where a freed buffer full of data was (a GPU hands that memory out again as it was, possibly
/// another session's; the stand-in fills new memory with stale bytes). Runs on the CPU device
/// too.
pub async fn new_memory_reads_as_zeros(acc: &Accelerator) {
    for len in [1usize, 1000, (16 << 20) / 4 + 1] {
        let fresh = acc.alloc::<f32>(len).await.unwrap();
        assert!(fresh.to_vec().await.unwrap().iter().all(|&v| v.to_bits() == 0), "a fresh {len}-float buffer");
        drop(fresh);
        let written = acc.alloc_from(&pattern(len, 11)).await.unwrap();
        acc.synchronize().await.unwrap();
        drop(written);
        acc.synchronize().await.unwrap();
        let again = acc.alloc::<f32>(len).await.unwrap();
        assert!(again.to_vec().await.unwrap().iter().all(|&v| v.to_bits() == 0), "a {len}-float buffer after a free");
    }
}

/// `add_one` (one element a thread, no loop: `tests/fixtures/add_one.ptx`) changes only the
/// elements its launch has threads for: 3 blocks of 32 threads over 100 elements leave the last
/// 4 as they were; a fourth block reaches them.
pub async fn a_launch_runs_only_the_threads_it_launched(acc: &Accelerator) {
    let ptx = acc.load_ptx(include_str!("../../fixtures/add_one.ptx")).await.unwrap();
    let add_one = ptx.function("add_one").await.unwrap();
    let buf = acc.alloc_from(&[0.0f32; 100]).await.unwrap();
    add_one.launch(LaunchDims::new([3, 1, 1], [32, 1, 1]), &[buf.arg(), 100u32.into()]).await.unwrap();
    let got = buf.to_vec().await.unwrap();
    assert!(got[..96].iter().all(|&v| v == 1.0), "the launched threads ran: {:?}", &got[..96]);
    assert!(got[96..].iter().all(|&v| v == 0.0), "threads not launched ran: {:?}", &got[96..]);
    add_one.launch(LaunchDims::new([4, 1, 1], [32, 1, 1]), &[buf.arg(), 100u32.into()]).await.unwrap();
    let got = buf.to_vec().await.unwrap();
    assert!(got[..96].iter().all(|&v| v == 2.0) && got[96..].iter().all(|&v| v == 1.0), "{got:?}");
}

/// The cubin nvcc builds of `tests/cuda/variables.cu`'s device code (its header says how):
/// `__constant__ float coefficients[4]`, `__device__ int offsets[4] = {1, 2, 3, 4}`,
/// `__device__ unsigned counted`, and `polynomial(float* x, int n)`, which reads the first two
/// and counts into the third.
pub const VARIABLES_CUBIN: &[u8] = include_bytes!("../../fixtures/variables.sm_90.cubin");

/// The cubin nvcc builds of `tests/cuda/shared_memory.cu`'s device code (its header says how):
/// `reverse_blocks(float* x, int chunk)`, in which block `b` reverses `x[b * chunk ..][..chunk]`
/// through `chunk` floats of dynamic shared memory, with a static `__shared__` array.
pub const SHARED_MEMORY_CUBIN: &[u8] = include_bytes!("../../fixtures/shared_memory.sm_90.cubin");

/// A kernel's dynamic shared memory limit (protocol 10): the device's answer counts its static
/// shared memory; a launch over the limit fails (at the next synchronization) and the session
/// goes on; raised to 64 KiB the same launch runs, every block reversing its chunk; a limit past
/// Hopper's opt-in maximum (227 KiB) less the static memory is refused and the limit stays.
pub async fn a_kernel_opts_in_to_more_dynamic_shared_memory(acc: &Accelerator) {
    use ac_frontend::KernelSetting::{MaxDynamicShared, PreferredCarveout};
    let module = acc.load_cubin(SHARED_MEMORY_CUBIN).await.unwrap();
    let reverse = module.function("_Z14reverse_blocksPfi").await.unwrap();
    let before = reverse.attributes().await.unwrap();
    assert!(before.static_shared >= 1024, "the 1 KiB array: {before:?}");
    assert!(before.max_dynamic_shared <= 48 << 10, "the default: {before:?}");
    let (blocks, chunk) = (4usize, 16384usize);
    let host: Vec<f32> = (0..blocks * chunk).map(|i| (i % 1000) as f32).collect();
    let x = acc.alloc_from(&host).await.unwrap();
    let dims = LaunchDims::new([blocks as u32, 1, 1], [256, 1, 1]).with_shared_mem((chunk * 4) as u32);
    let args = [x.arg(), (chunk as i32).into()];
    reverse.launch(dims, &args).await.unwrap();
    let err = acc.synchronize().await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::InvalidArgument), "64 KiB before opting in: {err}");

    reverse.set_attribute(MaxDynamicShared((chunk * 4) as u32)).await.unwrap();
    assert_eq!(reverse.attributes().await.unwrap().max_dynamic_shared, (chunk * 4) as u32);
    reverse.launch(dims, &args).await.unwrap();
    let want: Vec<f32> = (0..blocks * chunk).map(|i| host[i / chunk * chunk + chunk - 1 - i % chunk]).collect();
    assert_eq!(x.to_vec().await.unwrap(), want, "every block reversed its chunk");

    let past = (227 << 10) - before.static_shared + 1;
    let err = reverse.set_attribute(MaxDynamicShared(past)).await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::InvalidArgument), "past the opt-in maximum: {err}");
    let err = reverse.set_attribute(PreferredCarveout(101)).await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::InvalidArgument), "a carveout of 101%: {err}");
    reverse.set_attribute(PreferredCarveout(50)).await.unwrap();
    let after = reverse.attributes().await.unwrap();
    assert_eq!((after.max_dynamic_shared, after.preferred_carveout), ((chunk * 4) as u32, 50), "{after:?}");
}

/// Little-endian bytes of 32-bit values, as a variable's buffer holds them.
fn bytes_of<T: Copy>(values: &[T], to_le: fn(T) -> [u8; 4]) -> Vec<u8> {
    values.iter().flat_map(|&v| to_le(v)).collect()
}

/// A module's variables are buffers of their module: an initializer reads back, what the
/// program writes (at an offset too) is what its kernel reads, what the kernel writes reads
/// back, a second lookup answers the same buffer, a name the module lacks and a free of a
/// variable are refused, and unloading the module ends them while the session goes on.
pub async fn module_variables_belong_to_their_module(acc: &Accelerator) {
    let module = acc.load_cubin(VARIABLES_CUBIN).await.unwrap();
    let offsets = module.global("offsets").await.unwrap();
    assert_eq!(offsets.size, 16);
    assert_eq!(offsets.buffer.to_vec().await.unwrap(), bytes_of(&[1i32, 2, 3, 4], i32::to_le_bytes), "initializer");
    let again = module.global("offsets").await.unwrap();
    assert_eq!((again.address, again.buffer.id()), (offsets.address, offsets.buffer.id()), "one buffer a variable");
    let c = [1.0f32, 2.0, 0.5, 0.25];
    module.global("coefficients").await.unwrap().buffer.copy_from_host(&bytes_of(&c, f32::to_le_bytes)).await.unwrap();
    offsets.buffer.copy_from_host_at(8, &10i32.to_le_bytes()).await.unwrap();
    let counted = module.global("counted").await.unwrap();
    assert_eq!(counted.size, 4);
    counted.buffer.copy_from_host(&[0; 4]).await.unwrap();

    let n = 100;
    let x = acc.alloc_from(&(0..n).map(|i| (i % 7) as f32).collect::<Vec<_>>()).await.unwrap();
    let polynomial = module.function("_Z10polynomialPfi").await.unwrap();
    polynomial.launch(LaunchDims::linear(n as u64, 64), &[x.arg(), (n as i32).into()]).await.unwrap();
    let offsets_now = [1.0f32, 2.0, 10.0, 4.0];
    let want: Vec<f32> = (0..n)
        .map(|i| {
            let v = (i % 7) as f32;
            ((c[3] * v + c[2]) * v + c[1]) * v + c[0] + offsets_now[i % 4]
        })
        .collect();
    assert_eq!(x.to_vec().await.unwrap(), want, "the kernel read the variables as written");
    assert_eq!(counted.buffer.to_vec().await.unwrap(), (n as u32).to_le_bytes(), "the kernel's count");

    let err = module.global("missing").await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::UnknownKernel), "{err}");
    assert!(err.to_string().contains("no variable `missing`"), "{err}");
    let err = again.buffer.free().await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::InvalidBuffer), "{err}");
    assert!(err.to_string().contains("module's variable"), "{err}");
    assert_eq!(offsets.buffer.to_vec().await.unwrap(), bytes_of(&[1i32, 2, 10, 4], i32::to_le_bytes));

    module.unload().await.unwrap();
    let err = offsets.buffer.to_vec().await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::InvalidBuffer), "a variable of an unloaded module: {err}");
    assert_eq!(x.to_vec().await.unwrap(), want, "the session goes on");
}

/// A tensor map describes only the session's memory (backend protocol 13): the device's driver
/// encodes 128 bytes, the same again for the same tensor and others for another tensor and for
/// a null address (a map of no memory, as CUTLASS makes for an operand it does not read); a tensor one
/// row past its buffer, an offset that takes it past, and a buffer the session does not hold are
/// refused before the driver sees them, as are arrays that do not fit the rank; what the driver
/// refuses (a stride not a multiple of 16) comes back as an invalid argument naming the call;
/// the session goes on.
pub async fn tensor_maps_describe_only_the_sessions_memory(acc: &Accelerator) {
    use ac_proto::backend::{BufferId, DevicePtr, TensorMapLayout, TensorMapSpec};
    let x = acc.alloc_from(&vec![1.5f32; 40 * 24]).await.unwrap();
    let tiled = |buffer, offset, rows, stride| TensorMapSpec {
        data_type: 7, // FLOAT32
        address: Some(DevicePtr { buffer, offset }),
        dims: vec![40, rows],
        strides: vec![stride],
        element_strides: vec![1, 1],
        interleave: 0,
        swizzle: 0,
        l2_promotion: 0,
        oob_fill: 0,
        layout: TensorMapLayout::Tiled { box_dims: vec![16, 16] },
    };
    let map = acc.encode_tensor_map(tiled(x.id(), 0, 24, 160)).await.unwrap();
    assert_ne!(map, [0; 128], "an encoding");
    assert_eq!(acc.encode_tensor_map(tiled(x.id(), 0, 24, 160)).await.unwrap(), map, "the same tensor, the same map");
    let half = acc.encode_tensor_map(tiled(x.id(), 12 * 160, 12, 160)).await.unwrap();
    assert_ne!(half, map, "another tensor, another map");
    let null = acc.encode_tensor_map(TensorMapSpec { address: None, ..tiled(x.id(), 0, 24, 160) }).await.unwrap();
    assert!(null != map && null != half, "a map of a null address, another map");
    let misshapen = TensorMapSpec { strides: vec![], ..tiled(x.id(), 0, 24, 160) };
    for (spec, kind, why) in [
        (tiled(x.id(), 0, 25, 160), ErrorKind::OutOfBounds, "access of 4000 bytes at offset 0 is outside buffer"),
        (tiled(x.id(), 16, 24, 160), ErrorKind::OutOfBounds, "access of 3840 bytes at offset 16"),
        (tiled(BufferId(u64::MAX), 0, 24, 160), ErrorKind::InvalidBuffer, "buffer"),
        (misshapen, ErrorKind::InvalidArgument, "a tensor map of 2 dimensions has 1 strides, not 0"),
        (tiled(x.id(), 0, 1, 100), ErrorKind::InvalidArgument, "cuTensorMapEncodeTiled"),
    ] {
        let err = acc.encode_tensor_map(spec.clone()).await.unwrap_err();
        assert_eq!(err.kind(), Some(kind), "{spec:?}: {err}");
        assert!(err.to_string().contains(why), "{spec:?}: {err}");
    }
    assert_eq!(x.to_vec().await.unwrap(), vec![1.5f32; 40 * 24], "the session goes on");
}

/// Physical memory mapped into reserved ranges (backend protocol 14): fresh physical memory
/// reads zero (a GPU's holds whatever it held last); a copy reaches the bytes mapped and runs
/// across two pieces side by side, and is refused by name where nothing is mapped; a mapping
/// over mapped bytes, past the range or larger than its physical memory, an unmap of part of a
/// mapping or of nothing, and a map into a buffer that is not a range are refused; a piece
/// unmapped and mapped elsewhere, or back at once where it was, keeps its bytes, and lives on in
/// its mapping once released; the session goes on. (A session with a process of its own: a
/// mapping is its process's.)
pub async fn ranges_hold_only_their_mapped_memory(acc: &Accelerator) {
    const GRAN: u64 = 2 << 20;
    let (range, _address) = acc.reserve_range(4 * GRAN, 0).await.unwrap();
    let first = acc.create_physical(GRAN).await.unwrap();
    let second = acc.create_physical(GRAN).await.unwrap();
    let err = range.copy_from_host(&[1u8; 16]).await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::OutOfBounds), "{err}");
    assert!(err.to_string().contains("byte 0 of a reserved range is not mapped"), "{err}");
    acc.map_physical(&range, 0, GRAN, &first).await.unwrap();
    acc.map_physical(&range, GRAN, GRAN, &second).await.unwrap();
    let mut fresh = vec![0xffu8; 2 * GRAN as usize];
    range.copy_to_host(&mut fresh).await.unwrap();
    assert!(fresh.iter().all(|&b| b == 0), "fresh physical memory reads zero");
    let pattern: Vec<u8> = (0..2 * GRAN as usize).map(|i| (i % 251) as u8).collect();
    range.copy_from_host(&pattern).await.unwrap();
    let mut across = vec![0u8; 4096];
    range.copy_to_host_at(GRAN as usize - 2048, &mut across).await.unwrap();
    assert_eq!(across, pattern[GRAN as usize - 2048..GRAN as usize + 2048], "a copy across two pieces");

    let plain = acc.alloc::<u8>(GRAN as usize).await.unwrap();
    for (offset, bytes, range, kind, why) in [
        (GRAN, GRAN, &range, ErrorKind::InvalidArgument, "mapped already"),
        (3 * GRAN, 2 * GRAN, &range, ErrorKind::OutOfBounds, "lies past the range's 8388608 bytes"),
        (2 * GRAN, 2 * GRAN, &range, ErrorKind::OutOfBounds, "of physical memory of 2097152 bytes"),
        (0, GRAN, &plain, ErrorKind::InvalidBuffer, "is not a reserved range"),
    ] {
        let err = acc.map_physical(range, offset, bytes, &second).await.unwrap_err();
        assert_eq!(err.kind(), Some(kind), "{offset} {bytes}: {err}");
        assert!(err.to_string().contains(why), "{offset} {bytes}: {err}");
    }
    for (offset, bytes, why) in [(GRAN / 2, GRAN, "lies partly outside"), (3 * GRAN, GRAN, "nothing is mapped")] {
        let err = acc.unmap_range(&range, offset, bytes).await.unwrap_err();
        assert_eq!(err.kind(), Some(ErrorKind::InvalidArgument), "{err}");
        assert!(err.to_string().contains(why), "{err}");
    }

    acc.unmap_range(&range, 0, GRAN).await.unwrap();
    let err = range.copy_to_host(&mut [0u8; 16]).await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::OutOfBounds), "unmapped: {err}");
    acc.map_physical(&range, 2 * GRAN, GRAN, &first).await.unwrap();
    drop(first); // released: its mapping holds it
                 // Unmapped and mapped back at once: the unmap is done on the device when it is answered.
    acc.unmap_range(&range, GRAN, GRAN).await.unwrap();
    acc.map_physical(&range, GRAN, GRAN, &second).await.unwrap();
    let mut moved_bytes = vec![0u8; GRAN as usize];
    range.copy_to_host_at(2 * GRAN as usize, &mut moved_bytes).await.unwrap();
    assert_eq!(moved_bytes, pattern[..GRAN as usize], "a piece mapped elsewhere keeps its bytes");
    let stream = acc.create_stream().await.unwrap();
    range.memset_range(&stream, GRAN as usize, 2 * GRAN as usize, 3).await.unwrap();
    stream.synchronize().await.unwrap();
    range.copy_to_host_at(GRAN as usize, &mut fresh).await.unwrap();
    assert!(fresh.iter().all(|&b| b == 3), "a memset across two pieces");
    drop(range);
    drop(second);
    let x = acc.alloc_from(&[1u32, 2, 3]).await.unwrap();
    assert_eq!(x.to_vec().await.unwrap(), [1, 2, 3], "the session goes on");
}
