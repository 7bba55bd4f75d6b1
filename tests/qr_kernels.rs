//! The builtin QR kernels (`blas_<s|d|c|z>geqrf`, `blas_<s|d|c|z>gels`) through the SDK, against
//! `ac_proto`'s reference run here in the kernel's own precision: bit for bit on the CPU device
//! and the driver stand-in (which runs `kernels.cu` on the host), within a few units in the last
//! place on a GPU (which may fuse a multiply-add where the reference rounds twice); padding and
//! gaps untouched.

use ac_backend::device::gemm::{Complex, Element};
use ac_backend::device::qr::{self, Gels, Geqrf, Reflect};
use ac_frontend::{DeviceKind, ErrorKind, KernelArg, LaunchDims};

/// Bytes of `values` as the kernel reads them.
fn bytes<T: Element>(values: &[T]) -> Vec<u8> {
    let mut out = vec![0; values.len() * T::BYTES];
    values.iter().zip(out.chunks_exact_mut(T::BYTES)).for_each(|(v, b)| v.write_le(b));
    out
}

/// Elements read back from a device buffer's bytes.
fn elements<T: Element>(bytes: &[u8]) -> Vec<T> {
    bytes.chunks_exact(T::BYTES).map(T::from_le).collect()
}

/// Whether `got` is `want` within `tolerance` of each part's magnitude (at least 1).
fn assert_close<T: Reflect>(got: &[T], want: &[T], tolerance: f64, what: &str)
where
    T::Real: Into<f64>,
{
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (e, (&g, &w)) in got.iter().zip(want).enumerate() {
        for (g, w) in [(g.re().into(), w.re().into()), (g.im().into(), w.im().into())] {
            let (g, w): (f64, f64) = (g, w);
            assert!((g - w).abs() <= tolerance * w.abs().max(1.0), "{what}: element {e} is {g}, the reference's {w}");
        }
    }
}

/// One precision's checks; `t` its letter, `number(re, im)` its element.
async fn householder<T: Reflect + Element>(
    acc: &ac_frontend::Accelerator,
    builtin: &ac_frontend::Module,
    t: &str,
    number: impl Fn(f64, f64) -> T,
    tolerance: f64,
) where
    T::Real: Into<f64>,
{
    let (m, n, nrhs, batch) = (5u64, 3u64, 2u64, 2u64);
    let (lda, ldc, stride_t) = (m + 1, m + 2, n + 1);
    let (stride_a, stride_c) = (lda * n + 2, ldc * nrhs + 1);
    let u = |v: u64| KernelArg::U32(v as u32);
    let l = KernelArg::U64;
    let dims = LaunchDims::new([1, 1, 1], [4, 1, 1]);
    let marker = number(99.0, -99.0);
    // `batch` matrices `rows x cols` (leading dimension `ld`, `stride` apart) of small integers
    // and halves in both parts; the padding and the gaps between them the marker.
    let laid_out = |[rows, cols, ld, stride]: [u64; 4], seed: u64| -> Vec<T> {
        let inside = |offset: u64| offset < ld * cols && offset % ld < rows;
        let value = |e: u64| number(((e * 7 + seed) % 11) as f64 / 2.0 - 2.5, ((e * 3 + seed) % 7) as f64 - 3.0);
        (0..stride * batch).map(|e| if inside(e % stride) { value(e) } else { marker }).collect()
    };
    let a = laid_out([m, n, lda, stride_a], 1);

    // geqrf: A and the taus (their gaps kept).
    let g = Geqrf { m, n, lda, stride_a, stride_t, batch };
    let (mut want_a, mut want_tau) = (a.clone(), vec![marker; (stride_t * batch) as usize]);
    qr::factor(&g, &mut want_a, &mut want_tau);
    let da = acc.alloc_from(&bytes(&a)).await.unwrap();
    let dtau = acc.alloc_from(&bytes(&vec![marker; want_tau.len()])).await.unwrap();
    let geqrf = builtin.function(&format!("blas_{t}geqrf")).await.unwrap();
    #[rustfmt::skip] // as the kernel's signature reads
    let args = [u(m), u(n), da.arg(), u(lda), l(stride_a), dtau.arg(), l(stride_t), u(batch)];
    geqrf.launch(dims, &args).await.unwrap();
    assert_close(&elements::<T>(&da.to_vec().await.unwrap()), &want_a, tolerance, &format!("blas_{t}geqrf A"));
    assert_close(&elements::<T>(&dtau.to_vec().await.unwrap()), &want_tau, tolerance, &format!("blas_{t}geqrf tau"));

    // A tau buffer too short for the second matrix's: refused before it runs, nothing written.
    let short = acc.alloc_from(&bytes(&vec![marker; stride_t as usize])).await.unwrap();
    let args = [u(m), u(n), da.arg(), u(lda), l(stride_a), short.arg(), l(stride_t), u(batch)];
    let refused = geqrf.launch(dims, &args).await.and(acc.synchronize().await).unwrap_err();
    assert_eq!(refused.kind(), Some(ErrorKind::OutOfBounds), "blas_{t}geqrf with a short tau: {refused}");
    assert_close(&elements::<T>(&short.to_vec().await.unwrap()), &[marker; 4], 0.0, "a short tau: nothing written");

    // gels: A factored, C's first n rows the solution, info 0; C's padding kept.
    let s = Gels { m, n, nrhs, ld: [lda, ldc], stride: [stride_a, stride_c], info: true, batch };
    let c = laid_out([m, nrhs, ldc, stride_c], 4);
    let (mut want_a, mut want_c, mut want_info) = (a.clone(), c.clone(), vec![-7; batch as usize]);
    qr::solve(&s, &mut want_a, &mut want_c, &mut want_info);
    assert_eq!(want_info, [0, 0], "the reference solved both");
    let (da, dc) = (acc.alloc_from(&bytes(&a)).await.unwrap(), acc.alloc_from(&bytes(&c)).await.unwrap());
    let dinfo = acc.alloc_from(&[-7i32, -7]).await.unwrap();
    let gels = builtin.function(&format!("blas_{t}gels")).await.unwrap();
    #[rustfmt::skip] // as the kernel's signature reads
    let args = [
        u(m), u(n), u(nrhs), da.arg(), u(lda), l(stride_a), dc.arg(), u(ldc), l(stride_c), u(1), dinfo.arg(), u(batch),
    ];
    gels.launch(dims, &args).await.unwrap();
    assert_close(&elements::<T>(&da.to_vec().await.unwrap()), &want_a, tolerance, &format!("blas_{t}gels A"));
    assert_close(&elements::<T>(&dc.to_vec().await.unwrap()), &want_c, tolerance, &format!("blas_{t}gels C"));
    assert_eq!(dinfo.to_vec().await.unwrap(), [0, 0], "blas_{t}gels info");

    // A rank-deficient A (column 1 twice column 0, whose reflection is exact): info 2, C is
    // Q^H C and not solved; without flag 0 info is not touched.
    let deficient = [3.0, 4.0, 0.0, 6.0, 8.0, 0.0].map(|v| number(v, 0.0));
    let one = Gels { m: 3, n: 2, nrhs: 1, ld: [3, 3], stride: [6, 3], info: true, batch: 1 };
    let rhs = [1.0, 2.0, 3.0].map(|v| number(v, 0.0));
    let (mut want_a, mut want_c, mut want_info) = (deficient.to_vec(), rhs.to_vec(), vec![0]);
    qr::solve(&one, &mut want_a, &mut want_c, &mut want_info);
    assert_eq!(want_info, [2], "the reference found R(1, 1) zero");
    let (da, dc) = (acc.alloc_from(&bytes(&deficient)).await.unwrap(), acc.alloc_from(&bytes(&rhs)).await.unwrap());
    for flags in [0u64, 1] {
        dinfo.copy_from_host(&[-7, -7]).await.unwrap();
        da.copy_from_host(&bytes(&deficient)).await.unwrap();
        dc.copy_from_host(&bytes(&rhs)).await.unwrap();
        #[rustfmt::skip] // as the kernel's signature reads
        let args = [u(3), u(2), u(1), da.arg(), u(3), l(6), dc.arg(), u(3), l(3), u(flags), dinfo.arg(), u(1)];
        gels.launch(dims, &args).await.unwrap();
        let what = format!("blas_{t}gels rank 1, flags {flags}");
        assert_close(&elements::<T>(&dc.to_vec().await.unwrap()), &want_c, tolerance, &what);
        let info = if flags == 1 { [2, -7] } else { [-7, -7] };
        assert_eq!(dinfo.to_vec().await.unwrap(), info, "{what}: info");
    }
}

/// Factors two padded, strided `5 x 3` matrices with each `blas_<t>geqrf` and solves two
/// least-squares problems with each `blas_<t>gels`: `A`, the `tau`s and `C` match the reference
/// (exactly, but on a GPU),
/// `info` 0; a rank-deficient `A` gives `info` 2 (and `C` unsolved), a short `tau` is refused.
pub async fn householder_factors_and_solves_as_the_reference(
    acc: &ac_frontend::Accelerator,
    builtin: &ac_frontend::Module,
) {
    let info = acc.info();
    let exact = info.kind == DeviceKind::Cpu || info.name.contains("stand-in");
    let [single, double] = if exact { [0.0; 2] } else { [1e-5, 1e-13] };
    householder(acc, builtin, "s", |re, _| re as f32, single).await;
    householder(acc, builtin, "d", |re, _| re, double).await;
    householder(acc, builtin, "c", |re, im| Complex { re: re as f32, im: im as f32 }, single).await;
    householder(acc, builtin, "z", |re, im| Complex { re, im }, double).await;
}
