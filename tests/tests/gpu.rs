//! The CUDA device, end to end: a real backend with `--device cuda` on loopback and real
//! clients. These need an NVIDIA GPU and run through `scripts/gpu-check`.

use std::time::Duration;

use ac_backend::DeviceChoice;
use ac_frontend::{Accelerator, DeviceKind, ErrorKind, LaunchDims};
use ac_tests::{pattern, TestBackend};

async fn gpu_backend() -> TestBackend {
    TestBackend::start_with(|c| {
        c.device = DeviceChoice::Cuda;
        c.staging_mib = 64;
    })
    .await
}

fn relative_error(got: &[f32], want: &[f64]) -> f64 {
    let norm = want.iter().map(|v| v * v).sum::<f64>().sqrt();
    let diff = got.iter().zip(want).map(|(g, w)| (*g as f64 - w).powi(2)).sum::<f64>().sqrt();
    diff / norm.max(f64::MIN_POSITIVE)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a CUDA GPU: scripts/gpu-check"]
async fn gpu_reports_itself() {
    let tb = gpu_backend().await;
    let acc = tb.connect().await;
    let info = acc.info();
    assert_eq!(info.kind, DeviceKind::Cuda);
    assert!(info.compute_capability.is_some_and(|(major, _)| major >= 5), "{info:?}");
    assert!(info.memory_total > 1 << 30 && info.memory_free <= info.memory_total, "{info:?}");
    eprintln!("GPU: {} (compute {:?}), {} MiB", info.name, info.compute_capability, info.memory_total >> 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a CUDA GPU: scripts/gpu-check"]
async fn gpu_builtin_kernels_match_the_cpu() {
    let tb = gpu_backend().await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a CUDA GPU: scripts/gpu-check"]
async fn gpu_modules_from_ptx_cubin_and_cuda_c_with_any_arguments() {
    let tb = gpu_backend().await;
    let acc = tb.connect().await;
    let n = 1000u32;
    let buf = acc.alloc_from(&vec![1.0f32; n as usize + 8]).await.unwrap();

    let ptx = acc.load_ptx(include_str!("../fixtures/add_one.ptx")).await.unwrap();
    ptx.function("add_one")
        .await
        .unwrap()
        .launch(LaunchDims::linear(n as u64, 128), &[buf.at(8), n.into()])
        .await
        .unwrap();
    let cubin = acc.load_cubin(include_bytes!("../fixtures/add_one.sm_90.cubin")).await;
    if acc.info().compute_capability == Some((9, 0)) {
        let f = cubin.unwrap().function("add_one").await.unwrap();
        f.launch(LaunchDims::linear(n as u64, 128), &[buf.at(8), n.into()]).await.unwrap();
    }
    let expected = if acc.info().compute_capability == Some((9, 0)) { 3.0 } else { 2.0 };
    let got = buf.to_vec().await.unwrap();
    assert!(got[..8].iter().all(|&v| v == 1.0) && got[8..].iter().all(|&v| v == expected), "{:?}", &got[..12]);

    let source = r#"extern "C" __global__ void mix(int* out, int a, unsigned long long b, double c, float d) {
        extern __shared__ int scratch[];
        scratch[threadIdx.x] = a + (int)b + (int)c + (int)d + OFFSET;
        __syncthreads();
        out[threadIdx.x] = scratch[blockDim.x - 1 - threadIdx.x] + threadIdx.x;
    }"#;
    let module = acc.compile_cuda(source, &["-DOFFSET=100"]).await.unwrap();
    let mix = module.function("mix").await.unwrap();
    let out = acc.alloc::<i32>(64).await.unwrap();
    let dims = LaunchDims::new([1, 1, 1], [64, 1, 1]).with_shared_mem(64 * 4);
    mix.launch(dims, &[out.arg(), 1i32.into(), 2u64.into(), 3.0f64.into(), 4.0f32.into()]).await.unwrap();
    let got = out.to_vec().await.unwrap();
    assert_eq!(got, (0..64).map(|i| 110 + i).collect::<Vec<i32>>());

    // Wrong argument count or widths: refused (drivers from CUDA 12.4 report parameter sizes).
    mix.launch(dims, &[out.arg(), 1i32.into()]).await.unwrap();
    let err = acc.synchronize().await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::InvalidArgument), "{err}");

    let err = acc.compile_cuda("extern \"C\" __global__ void k() { nope; }", &[]).await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::ModuleLoad));
    assert!(err.to_string().contains("nope"), "the log comes back: {err}");
    let err = acc.load_ptx(".version 7.0\n.target sm_70\nthis is not ptx").await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::ModuleLoad), "{err}");
    let err = module.function("absent").await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::UnknownKernel), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a CUDA GPU: scripts/gpu-check"]
async fn gpu_copies_round_trip_through_the_staging_pipeline() {
    let tb = gpu_backend().await;
    let acc = tb.connect().await;
    let n = (96usize << 20) / 4 + 3;
    let data = pattern(n, 7);
    for pipelined in [true, false] {
        let mut options = acc.copy_options();
        options.pipelined = pipelined;
        acc.set_copy_options(options);
        let buf = acc.alloc_from(&data).await.unwrap();
        assert!(buf.to_vec().await.unwrap() == data, "pipelined {pipelined}");
    }
    // Device to device, overlapping, on one GPU; memset.
    let buf = acc.alloc_from(&(0..1024).map(|i| i as f32).collect::<Vec<_>>()).await.unwrap();
    let stream = acc.default_stream();
    let view = acc.alloc_from(&vec![0.0f32; 1024]).await.unwrap();
    view.copy_from_device(&stream, &buf).await.unwrap();
    view.memset(&stream, 0).await.unwrap();
    acc.synchronize().await.unwrap();
    assert!(view.to_vec().await.unwrap().iter().all(|&v| v == 0.0));
    let err = acc.alloc::<u8>(acc.info().memory_total as usize * 2).await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::OutOfMemory), "{err}");
    assert_eq!(buf.to_vec().await.unwrap()[1023], 1023.0, "the session survives a failed allocation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a CUDA GPU: scripts/gpu-check"]
async fn gpu_fault_in_one_session_leaves_the_others_working() {
    let tb = gpu_backend().await;
    let healthy = tb.connect().await;
    let victim = tb.connect().await;
    ac_tests::computes(&healthy).await.unwrap();

    let source = "extern \"C\" __global__ void wild(unsigned long long a) { *(volatile int*)a = 1; }";
    let wild = victim.compile_cuda(source, &[]).await.unwrap().function("wild").await.unwrap();
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
    drop(victim);
    assert!(tb.eventually(Duration::from_secs(5), |b| b.sessions() == 1).await);
}

/// Sessions on one GPU each get a context of their own: measures what one costs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a CUDA GPU: scripts/gpu-check"]
async fn gpu_context_cost() {
    let tb = gpu_backend().await;
    let first = tb.connect().await;
    let before = first.device_info().await.unwrap().memory_free;
    let mut sessions: Vec<Accelerator> = Vec::new();
    let start = std::time::Instant::now();
    for _ in 0..4 {
        sessions.push(tb.connect().await);
    }
    let per_session = start.elapsed() / 4;
    let after = first.device_info().await.unwrap().memory_free;
    let mib = (before.saturating_sub(after) / 4) >> 20;
    println!("GPU-CONTEXT open_ms={:.1} device_mib={mib}", per_session.as_secs_f64() * 1e3);
    for s in &sessions {
        ac_tests::computes(s).await.unwrap();
    }
}
