//! The builtin LU kernels (`blas_<s|d|c|z>getrf`, `blas_<s|d|c|z>getrs`) through the SDK, on
//! problems whose every step is exact, so that each device's result is compared element by
//! element, padding included.

use ac_frontend::{KernelArg, LaunchDims};

/// A number as `(re, im)`; a real kernel's has `im` 0.
type C = (f64, f64);

fn mul((a, b): C, (c, d): C) -> C {
    (a * c - b * d, a * d + b * c)
}

fn add(x: C, y: C) -> C {
    (x.0 + y.0, x.1 + y.1)
}

/// Column-major `n x n` `A = P^-1 L U` for a unit lower `L` of quarters below 1 in magnitude
/// (so that partial pivoting finds `P` again) and an upper `U` of small integers whose
/// diagonal's squared magnitudes are powers of two (so that every quotient is exact): `A`, and
/// `L` and `U` packed as getrf leaves them.
fn problem(n: usize, seed: usize, pivots: &[i32], complex: bool) -> (Vec<C>, Vec<C>) {
    let quarter = |i: usize, s: usize| ((i * 7 + s * 3) % 5) as f64 * 0.25 - 0.5;
    let l = |i: usize, j: usize| match i.cmp(&j) {
        std::cmp::Ordering::Equal => (1.0, 0.0),
        std::cmp::Ordering::Greater if complex => (quarter(i + 3 * j, seed) / 2.0, quarter(i + j, seed + 1) / 2.0),
        std::cmp::Ordering::Greater => (quarter(i + 3 * j, seed), 0.0),
        std::cmp::Ordering::Less => (0.0, 0.0),
    };
    let diagonal: [C; 4] = if complex {
        [(2.0, 0.0), (0.0, 2.0), (1.0, 1.0), (-2.0, 0.0)]
    } else {
        [(2.0, 0.0), (-4.0, 0.0), (1.0, 0.0), (8.0, 0.0)]
    };
    let u = |i: usize, j: usize| match i.cmp(&j) {
        std::cmp::Ordering::Equal => diagonal[(i + seed) % 4],
        std::cmp::Ordering::Less => {
            (((i + 2 * j + seed) % 5) as f64 - 2.0, if complex { ((i + j) % 3) as f64 - 1.0 } else { 0.0 })
        }
        std::cmp::Ordering::Greater => (0.0, 0.0),
    };
    let mut a = vec![(0.0, 0.0); n * n];
    let mut packed = a.clone();
    for i in 0..n {
        for j in 0..n {
            a[i + j * n] = (0..n).map(|p| mul(l(i, p), u(p, j))).fold((0.0, 0.0), add);
            packed[i + j * n] = if i > j { l(i, j) } else { u(i, j) };
        }
    }
    // A = P_0 P_1 ... P_(n-1) (L U): the interchanges undone, last first.
    for j in (0..n).rev() {
        let p = pivots[j] as usize - 1;
        (0..n).for_each(|k| a.swap(j + k * n, p + k * n));
    }
    (a, packed)
}

/// The bytes of `values` as the kernel's elements.
fn bytes(values: &[C], double: bool, complex: bool) -> Vec<u8> {
    let parts = values.iter().flat_map(|&(re, im)| if complex { vec![re, im] } else { vec![re] });
    if double {
        parts.flat_map(f64::to_le_bytes).collect()
    } else {
        parts.flat_map(|p| (p as f32).to_le_bytes()).collect()
    }
}

/// Numbers back from the kernel's elements.
fn numbers(bytes: &[u8], double: bool, complex: bool) -> Vec<C> {
    let parts: Vec<f64> = if double {
        bytes.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect()
    } else {
        bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap()).into()).collect()
    };
    if complex {
        parts.chunks_exact(2).map(|p| (p[0], p[1])).collect()
    } else {
        parts.into_iter().map(|re| (re, 0.0)).collect()
    }
}

/// `n x n` matrices of a batch laid out `ld` apart in columns and `stride` apart, the rest
/// `pad`.
fn laid_out(matrices: &[Vec<C>], rows: usize, ld: usize, stride: usize, pad: C) -> Vec<C> {
    let mut out = vec![pad; stride * matrices.len()];
    for (b, m) in matrices.iter().enumerate() {
        for (e, &v) in m.iter().enumerate() {
            out[b * stride + e % rows + e / rows * ld] = v;
        }
    }
    out
}

/// Factors two padded strided matrices with each `blas_<t>getrf`, then solves with their
/// factors for each operation and inverts them with `blas_<t>getrs`: the factors, pivots,
/// `info`, solutions and inverses all exact, padding and the pivots' gaps untouched; and a zero
/// pivot without pivoting reported in `info`, the pivots not touched.
pub async fn lu_factors_solves_and_inverts_exactly(acc: &ac_frontend::Accelerator, builtin: &ac_frontend::Module) {
    let (n, nrhs, batch) = (4usize, 3usize, 2usize);
    let (lda, ldb, sp) = (n + 1, n + 2, n + 1);
    let (sa, sb) = (lda * n + 3, ldb * nrhs + 1);
    let pivots = [[3, 3, 4, 4], [2, 4, 3, 4]];
    let u = |v: usize| KernelArg::U32(v as u32);
    let l = |v: usize| KernelArg::U64(v as u64);
    let dims = LaunchDims::new([2, 1, 1], [2, 1, 1]);
    for (t, double, complex) in [("s", false, false), ("d", true, false), ("c", false, true), ("z", true, true)] {
        let (getrf, getrs) = (
            builtin.function(&format!("blas_{t}getrf")).await.unwrap(),
            builtin.function(&format!("blas_{t}getrs")).await.unwrap(),
        );
        let problems: Vec<_> = (0..batch).map(|b| problem(n, b, &pivots[b], complex)).collect();
        let a: Vec<Vec<C>> = problems.iter().map(|p| p.0.clone()).collect();
        let packed: Vec<Vec<C>> = problems.iter().map(|p| p.1.clone()).collect();
        let da = acc.alloc_from(&bytes(&laid_out(&a, n, lda, sa, (99.0, -99.0)), double, complex)).await.unwrap();
        let dp = acc.alloc_from(&[-7i32; 2 * (4 + 1)]).await.unwrap();
        let dinfo = acc.alloc_from(&[-7i32; 2]).await.unwrap();
        #[rustfmt::skip] // as the kernel's signature reads
        let args = [u(n), da.arg(), u(lda), l(sa), u(1), dp.arg(), l(sp), dinfo.arg(), u(batch)];
        getrf.launch(dims, &args).await.unwrap();
        let what = format!("blas_{t}getrf");
        let got = numbers(&da.to_vec().await.unwrap(), double, complex);
        assert_eq!(got, laid_out(&packed, n, lda, sa, (99.0, if complex { -99.0 } else { 0.0 })), "{what}: A");
        let want_pivots: Vec<i32> = pivots.iter().flat_map(|p| p.iter().copied().chain([-7])).collect();
        assert_eq!(dp.to_vec().await.unwrap(), want_pivots, "{what}: pivots (and the gaps)");
        assert_eq!(dinfo.to_vec().await.unwrap(), [0, 0], "{what}: info");

        for trans in [0usize, 1, 2] {
            // B = op(A) X for small Gaussian integers X.
            let x: Vec<Vec<C>> = (0..batch)
                .map(|b| {
                    (0..n * nrhs)
                        .map(|e| {
                            (((e * 7 + b) % 5) as f64 - 2.0, if complex { ((e + b) % 3) as f64 - 1.0 } else { 0.0 })
                        })
                        .collect()
                })
                .collect();
            let op = |b: usize, r: usize, c: usize| {
                let v = if trans == 0 { a[b][r + c * n] } else { a[b][c + r * n] };
                if trans == 2 {
                    (v.0, -v.1)
                } else {
                    v
                }
            };
            let rhs: Vec<Vec<C>> = (0..batch)
                .map(|b| {
                    (0..n * nrhs)
                        .map(|e| (0..n).map(|p| mul(op(b, e % n, p), x[b][p + e / n * n])).fold((0.0, 0.0), add))
                        .collect()
                })
                .collect();
            let pad = (77.0, if complex { -77.0 } else { 0.0 });
            let db = acc.alloc_from(&bytes(&laid_out(&rhs, n, ldb, sb, pad), double, complex)).await.unwrap();
            #[rustfmt::skip] // as the kernel's signature reads
            let args = [
                u(trans), u(n), u(nrhs), da.arg(), u(lda), l(sa), u(1), dp.arg(), l(sp),
                db.arg(), u(ldb), l(sb), dinfo.arg(), u(batch),
            ];
            getrs.launch(dims, &args).await.unwrap();
            let got = numbers(&db.to_vec().await.unwrap(), double, complex);
            assert_eq!(got, laid_out(&x, n, ldb, sb, pad), "blas_{t}getrs trans {trans}: X (padding included)");
        }

        // The inverses: A C = I exactly (every entry of C is a short dyadic fraction).
        let dc = acc.alloc_from(&bytes(&vec![(f64::NAN, f64::NAN); 2 * n * n], double, complex)).await.unwrap();
        #[rustfmt::skip] // as the kernel's signature reads
        let args = [
            u(0), u(n), u(n), da.arg(), u(lda), l(sa), u(3), dp.arg(), l(sp),
            dc.arg(), u(n), l(n * n), dinfo.arg(), u(batch),
        ];
        dinfo.copy_from_host(&[-7, -7]).await.unwrap();
        getrs.launch(dims, &args).await.unwrap();
        let c = numbers(&dc.to_vec().await.unwrap(), double, complex);
        for b in 0..batch {
            for i in 0..n {
                for j in 0..n {
                    let product = (0..n).map(|p| mul(a[b][i + p * n], c[b * n * n + p + j * n])).fold((0.0, 0.0), add);
                    let want = (f64::from(u8::from(i == j)), 0.0);
                    assert_eq!(product, want, "blas_{t}getrs inverse {b}: (A C)({i}, {j})");
                }
            }
        }
        assert_eq!(dinfo.to_vec().await.unwrap(), [0, 0], "blas_{t}getrs inverse: info");

        // Without pivoting, A(0, 0) = 0 is the first zero pivot: info 1; the pivot pointer
        // (here A's own, as the CUDA shim passes for cuBLAS's null pivots) is not touched.
        let zero_first = [(0.0, 0.0), (1.0, 0.0), (1.0, 0.0), (1.0, 0.0)];
        let dz = acc.alloc_from(&bytes(&zero_first, double, complex)).await.unwrap();
        let args = [u(2), dz.arg(), u(2), l(4), u(0), dz.arg(), l(0), dinfo.arg(), u(1)];
        getrf.launch(dims, &args).await.unwrap();
        let got = numbers(&dz.to_vec().await.unwrap(), double, complex);
        assert_eq!(got, [(0.0, 0.0), (1.0, 0.0), (1.0, 0.0), (0.0, 0.0)], "{what} without pivoting: A");
        assert_eq!(dinfo.to_vec().await.unwrap(), [1, 0], "{what} without pivoting: info (the first matrix's)");
    }
}
