//! Checks of the builtin `blas_copy` that run against any device (the CPU device in
//! `e2e/compute.rs`; the CUDA device on the driver stand-in and on a GPU through `gpu_cases`).

use ac_backend::device::vector_copy::VectorCopy;
use ac_frontend::{Accelerator, ErrorKind, KernelArg, LaunchDims, Module};

/// Launches `blas_copy` for elements of each width (1, 2, 4, 8, 16 bytes) between vectors read
/// forwards, backwards and (`x` only) repeated, and checks every byte of `y`, the gaps between
/// its elements included; then what it refuses: a width not served, `incy` 0 over more than one
/// element, `x` and `y` overlapping in one allocation, a vector past its allocation.
pub async fn copies_read_vectors_backwards_exactly(acc: &Accelerator, builtin: &Module) {
    let copy = builtin.function("blas_copy").await.unwrap();
    let n = 37u64;
    let args = |width: u64, x: KernelArg, incx: i64, y: KernelArg, incy: i64| {
        [KernelArg::U32(n as u32), KernelArg::U32(width as u32), x, KernelArg::I64(incx), y, KernelArg::I64(incy)]
    };
    for width in [1u64, 2, 4, 8, 16] {
        for (incx, incy) in [(-3, 1), (2, -1), (-1, -2), (0, 2), (1, 1)] {
            let [x_span, y_span] = VectorCopy { n, width, incx, incy }.spans().map(|e| (e * width) as usize);
            let x: Vec<u8> = (0..x_span).map(|i| (i * 7 + 3) as u8).collect();
            let y: Vec<u8> = (0..y_span).map(|i| (i * 11 + 200) as u8).collect();
            let (dx, dy) = (acc.alloc_from(&x).await.unwrap(), acc.alloc_from(&y).await.unwrap());
            copy.launch(LaunchDims::linear(n, 32), &args(width, dx.arg(), incx, dy.arg(), incy)).await.unwrap();
            let mut want = y.clone();
            for i in 0..n {
                let [from, to] = [incx, incy].map(|inc| (VectorCopy::index(n, inc, i) * width) as usize);
                want[to..to + width as usize].copy_from_slice(&x[from..from + width as usize]);
            }
            assert_eq!(dy.to_vec().await.unwrap(), want, "width {width}, incx {incx}, incy {incy}");
        }
    }
    let (dx, dy) = (acc.alloc::<u8>(1024).await.unwrap(), acc.alloc::<u8>(1024).await.unwrap());
    let refused = [
        ("width 3", args(3, dx.arg(), 1, dy.arg(), 1)),
        ("incy 0", args(4, dx.arg(), 1, dy.arg(), 0)),
        ("overlapping", args(4, dx.arg(), -1, dx.at(64), 1)),
        ("past the allocation", args(16, dx.arg(), -2, dy.arg(), 1)),
    ];
    for (what, args) in refused {
        let err = match copy.launch(LaunchDims::linear(n, 32), &args).await {
            Err(e) => e,
            Ok(()) => acc.synchronize().await.unwrap_err(),
        };
        let kinds = [ErrorKind::InvalidArgument, ErrorKind::OutOfBounds];
        assert!(err.kind().is_some_and(|k| kinds.contains(&k)), "{what}: {err}");
    }
    // The session goes on.
    acc.synchronize().await.unwrap();
}
