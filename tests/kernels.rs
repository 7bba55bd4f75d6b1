//! Launch arguments of the builtin kernels, for tests that call them through the SDK.

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
    let bytes = crate::dft_kernels::stored;
    for types in [[F16, F16, F16], [Bf16, Bf16, Bf16], [F16, F16, F32], [Bf16, F32, Bf16]] {
        // What C holds: its values as stored (rounded to its type), then the product.
        let stored = |values: &[f32], t: GemmElement| -> Vec<f32> {
            bytes(values, t).chunks_exact(t.bytes() as usize).map(|e| t.load(e)).collect()
        };
        let (a, b, mut want) = (stored(&a, types[0]), stored(&b, types[1]), stored(&c, types[2]));
        // C = 3 A^T B - C, in f64 (exact here), then rounded by ac_proto.
        for (bi, j, i) in (0..batch).flat_map(|bi| (0..n).flat_map(move |j| (0..m).map(move |i| (bi, j, i)))) {
            let dot: f64 = (0..k)
                .map(|p| {
                    let x = a[(bi * g.stride[0] + p + i * g.ld[0]) as usize];
                    let y = b[(bi * g.stride[1] + p + j * g.ld[1]) as usize];
                    f64::from(x) * f64::from(y)
                })
                .sum();
            let out = &mut want[(bi * g.stride[2] + i + j * g.ld[2]) as usize];
            *out = (3.0 * dot - f64::from(*out)) as f32;
        }
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

/// Launches `blas_cgemm` and `blas_zgemm` (A conjugate-transposed and padded, B transposed,
/// two strided batches, complex `alpha` and `beta`; then A plain, B conjugate-transposed) and
/// checks every element of C, its padding included, against a product computed here: the
/// inputs are small Gaussian integers, so every sum is exact in either precision.
pub async fn complex_gemms_conjugate_exactly(acc: &ac_frontend::Accelerator, builtin: &ac_frontend::Module) {
    let ([m, n, k], batch) = ([6u64, 5, 7], 2u64);
    let scalars = [(2.0, -1.0), (1.0, 1.0)];
    for (double, ops) in [(false, [2u32, 1]), (true, [2, 1]), (false, [0, 2]), (true, [0, 2])] {
        let stored = |op: u32, rows: u64, cols: u64| if op == 0 { (rows, cols) } else { (cols, rows) };
        let [(ar, ac), (br, bc)] = [stored(ops[0], m, k), stored(ops[1], k, n)];
        let g = Gemm {
            trans_a: ops[0] != 0,
            trans_b: ops[1] != 0,
            m,
            n,
            k,
            ld: [ar + 1, br + 2, m + 3],
            stride: [(ar + 1) * ac + 4, (br + 2) * bc, (m + 3) * n + 1],
            batch,
        };
        let (a, b) = (gaussian(g.stride[0] * batch, 1, true), gaussian(g.stride[1] * batch, 2, true));
        let c: Vec<(f64, f64)> = (0..g.stride[2] * batch)
            .map(|i| if i % g.ld[2] < m { ((i % 3) as f64, 1.0) } else { (99.0, -99.0) })
            .collect();
        let mut want = c.clone();
        reference_gemm(&g, ops, scalars, [&a, &b], &mut want, |_, _| true);
        let name = if double { "blas_zgemm" } else { "blas_cgemm" };
        let got = launch_gemm(acc, builtin, name, &g, ops, scalars, [&a, &b, &c], None, [double, true]).await;
        assert_eq!(got, parts(&want, true), "double {double}, operations {ops:?}: C (its padding included)");
    }
}

/// Launches `blas_strsm`, `blas_dtrsm`, `blas_ctrsm` and `blas_ztrsm` for every side, triangle,
/// operation and diagonal, two strided batches, `B` padded, and checks every element of `B`, its
/// padding included: the right-hand sides are `op(A) X / alpha` (or `X op(A) / alpha`) for a
/// known `X` of small Gaussian integers, `A`'s diagonal 2 (or not read: NaN, for a unit
/// diagonal), `alpha` -1 or `i`, so that every step of the substitution is exact.
pub async fn triangular_solves_exactly(acc: &ac_frontend::Accelerator, builtin: &ac_frontend::Module) {
    let (m, n, batch) = (4u64, 3u64, 2u64);
    for (name, double, complex) in [
        ("blas_strsm", false, false),
        ("blas_dtrsm", true, false),
        ("blas_ctrsm", false, true),
        ("blas_ztrsm", true, true),
    ] {
        let solve = builtin.function(name).await.unwrap();
        for combination in 0..24u32 {
            let (left, lower, trans, unit) =
                (combination & 1 == 0, combination & 2 == 0, (combination >> 2) % 3, combination >= 12);
            let k = if left { m } else { n };
            let (lda, ldb) = (k + 1, m + 2);
            let (sa, sb) = (lda * k + 3, ldb * n + 1);
            let gaussian = |i: u64, seed: u64| {
                let re = ((i * 7 + seed * 13) % 5) as f64 - 2.0;
                (re, if complex { ((i * 5 + seed) % 5) as f64 - 2.0 } else { 0.0 })
            };
            // A: the triangle of small integers, 2 (or NaN) on the diagonal, the other
            // triangle and the padding 99 (never read).
            let a: Vec<(f64, f64)> = (0..sa * batch)
                .map(|e| {
                    let (at, i, j) = (e % sa, e % sa % lda, e % sa / lda);
                    if at >= lda * k || i >= k {
                        (99.0, 99.0)
                    } else if i == j {
                        if unit {
                            (f64::NAN, f64::NAN)
                        } else {
                            (2.0, 0.0)
                        }
                    } else if (i > j) == lower {
                        gaussian(e, 1)
                    } else {
                        (99.0, -99.0)
                    }
                })
                .collect();
            let mul = |(a, b): (f64, f64), (c, d): (f64, f64)| (a * c - b * d, a * d + b * c);
            let op_a = |bi: u64, r: u64, c: u64| {
                let (i, j) = if trans == 0 { (r, c) } else { (c, r) };
                let inside = i == j || (i > j) == lower;
                let (re, im) = if i == j && unit {
                    (1.0, 0.0)
                } else if inside {
                    a[(bi * sa + i + j * lda) as usize]
                } else {
                    (0.0, 0.0)
                };
                (re, if trans == 2 { -im } else { im })
            };
            let x = |bi: u64, i: u64, j: u64| gaussian(bi * 31 + i * 5 + j, 2);
            let alpha = if complex { (0.0, 1.0) } else { (-1.0, 0.0) };
            let over_alpha = if complex { (0.0, -1.0) } else { (-1.0, 0.0) };
            let mut b = vec![(77.0, -77.0); (sb * batch) as usize];
            let mut want = b.clone();
            for bi in 0..batch {
                for j in 0..n {
                    for i in 0..m {
                        let terms = (0..k).map(|p| {
                            if left {
                                mul(op_a(bi, i, p), x(bi, p, j))
                            } else {
                                mul(x(bi, i, p), op_a(bi, p, j))
                            }
                        });
                        let sum = terms.fold((0.0, 0.0), |s, t| (s.0 + t.0, s.1 + t.1));
                        let at = (bi * sb + i + j * ldb) as usize;
                        b[at] = mul(over_alpha, sum);
                        want[at] = x(bi, i, j);
                    }
                }
            }
            let bytes = |v: &[(f64, f64)]| -> Vec<u8> {
                let parts = v.iter().flat_map(|&(re, im)| if complex { vec![re, im] } else { vec![re] });
                if double {
                    parts.flat_map(f64::to_le_bytes).collect()
                } else {
                    parts.flat_map(|p| (p as f32).to_le_bytes()).collect()
                }
            };
            let (da, db) = (acc.alloc_from(&bytes(&a)).await.unwrap(), acc.alloc_from(&bytes(&b)).await.unwrap());
            let scalar = |v: f64| if double { KernelArg::F64(v) } else { KernelArg::F32(v as f32) };
            let u = |v: u64| KernelArg::U32(v as u32);
            #[rustfmt::skip] // as the kernel's signature reads
            let mut args = vec![
                u((!left).into()), u((!lower).into()), u(trans.into()), u(unit.into()), u(m), u(n), scalar(alpha.0),
                da.arg(), u(lda), KernelArg::U64(sa),
                db.arg(), u(ldb), KernelArg::U64(sb), u(batch),
            ];
            if complex {
                args.push(scalar(alpha.1));
            }
            solve.launch(ac_frontend::LaunchDims::new([2, 1, 1], [4, 1, 1]), &args).await.unwrap();
            let back = db.to_vec().await.unwrap();
            let got: Vec<u8> = back;
            let what = format!("{name}: left {left}, lower {lower}, trans {trans}, unit {unit}");
            assert_eq!(got, bytes(&want), "{what}: B (its padding included)");
        }
    }
}

/// Launches each `blas_<t>abs_reduce` on a strided vector (every other element skipped, those
/// huge, so reading one would show): the sum of magnitudes (`|re| + |im|` for complex ones) is
/// exact, iamax and iamin give the first of equal extremes, 1-based, and no elements give 0.
pub async fn magnitudes_reduce_exactly(acc: &ac_frontend::Accelerator, builtin: &ac_frontend::Module) {
    // (re, im) at even positions; 1000 between them.
    let values: [(f64, f64); 5] = [(1.0, -2.0), (-4.0, 0.5), (0.25, 0.0), (3.0, -1.5), (-0.5, 0.25)];
    for (t, double, complex) in [("s", false, false), ("d", true, false), ("c", false, true), ("z", true, true)] {
        let reduce = builtin.function(&format!("blas_{t}abs_reduce")).await.unwrap();
        let parts: Vec<f64> = values
            .iter()
            .flat_map(|&(re, im)| {
                let element = if complex { vec![re, im] } else { vec![re] };
                let skipped = if complex { vec![1000.0, 1000.0] } else { vec![1000.0] };
                element.into_iter().chain(skipped)
            })
            .collect();
        let x = if double {
            acc.alloc_from(&parts.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).await.unwrap()
        } else {
            acc.alloc_from(&parts.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect::<Vec<u8>>()).await.unwrap()
        };
        let magnitude = |(re, im): (f64, f64)| re.abs() + if complex { im.abs() } else { 0.0 };
        let want_sum: f64 = values.iter().copied().map(magnitude).sum();
        let out = acc.alloc_from(&[0u8; 8]).await.unwrap();
        let u = |v: u32| KernelArg::U32(v);
        for (op, n) in [(0u32, 5u32), (1, 5), (2, 5), (1, 0)] {
            let args = [u(op), u(n), x.arg(), KernelArg::U64(2), out.arg()];
            reduce.launch(ac_frontend::LaunchDims::new([2, 1, 1], [32, 1, 1]), &args).await.unwrap();
            let bytes = out.to_vec().await.unwrap();
            let got = match (op, double) {
                (0, true) => f64::from_le_bytes(bytes[..8].try_into().unwrap()),
                (0, false) => f32::from_le_bytes(bytes[..4].try_into().unwrap()).into(),
                _ => i32::from_le_bytes(bytes[..4].try_into().unwrap()).into(),
            };
            // Magnitudes: real 1, 4, 0.25, 3, 0.5 (max the 2nd, min the 3rd); complex 3, 4.5,
            // 0.25, 4.5, 0.75 (max the first 4.5: the 2nd).
            let want = match (op, n) {
                (0, _) => want_sum,
                (_, 0) => 0.0,
                (1, _) => 2.0,
                _ => 3.0,
            };
            assert_eq!(got, want, "blas_{t}abs_reduce op {op}, n {n}");
        }
    }
}

/// Launches `blas_sgemmt`, `blas_dgemmt`, `blas_cgemmt` and `blas_zgemmt` on each triangle of a
/// square `C` (two strided batches, padded), A transposed or not (conjugated for the complex
/// kernels), B transposed, and checks every element of `C`: the triangle is
/// `alpha op(A) op(B) + beta C` exactly (small Gaussian integers), the other triangle and the
/// padding keep their markers.
pub async fn triangle_gemms_compute_one_triangle_exactly(
    acc: &ac_frontend::Accelerator,
    builtin: &ac_frontend::Module,
) {
    let ([n, k], batch) = ([5u64, 4], 2u64);
    for (t, double, complex) in [("s", false, false), ("d", true, false), ("c", false, true), ("z", true, true)] {
        for (fill, op_a) in [(0u32, 0u32), (1, 1), (0, 2), (1, 2)] {
            let scalars = if complex { [(2.0, -1.0), (1.0, 1.0)] } else { [(2.0, 0.0), (-3.0, 0.0)] };
            let ops = [op_a, 1];
            let stored_a = if op_a == 0 { (n, k) } else { (k, n) };
            let g = Gemm {
                trans_a: op_a != 0,
                trans_b: true,
                m: n,
                n,
                k,
                ld: [stored_a.0 + 1, n + 2, n + 3],
                stride: [(stored_a.0 + 1) * stored_a.1 + 2, (n + 2) * k, (n + 3) * n + 1],
                batch,
            };
            let (a, b) = (gaussian(g.stride[0] * batch, 1, complex), gaussian(g.stride[1] * batch, 2, complex));
            let marker = if complex { 99.0 } else { 0.0 };
            let c: Vec<(f64, f64)> = (0..g.stride[2] * batch).map(|i| ((i % 5) as f64 - 2.0, marker)).collect();
            let mut want = c.clone();
            let holds = |i: u64, j: u64| if fill == 0 { i >= j } else { i <= j };
            reference_gemm(&g, ops, scalars, [&a, &b], &mut want, holds);
            let name = format!("blas_{t}gemmt");
            let got = launch_gemm(acc, builtin, &name, &g, ops, scalars, [&a, &b, &c], Some(fill), [double, complex]);
            let what = format!("{name} fill {fill}, operations {ops:?}: C (all of it)");
            assert_eq!(got.await, parts(&want, complex), "{what}");
        }
    }
}

/// Launches `blas_sgemm_tri`, `blas_dgemm_tri`, `blas_cgemm_tri` and `blas_zgemm_tri` with A or
/// B read from its lower or upper triangle as a symmetric, Hermitian, triangular or unit
/// triangular matrix, under each operation, NaN stored where nothing may be read (outside the
/// triangle, on a unit diagonal), and checks every element of `C` (padded) against the
/// reference gemm of the matrix completed here: exact (small Gaussian integers).
pub async fn structured_gemms_read_one_triangle_exactly(acc: &ac_frontend::Accelerator, builtin: &ac_frontend::Module) {
    let [m, n] = [4u64, 3];
    for (t, double, complex) in [("s", false, false), ("d", true, false), ("c", false, true), ("z", true, true)] {
        // form: bit 0 upper, bits 1-2 symmetric, Hermitian, triangular, unit; bit 3 B.
        for (form, ops) in [(0b0000, [0, 0]), (0b0011, [2, 1]), (0b1100, [0, 1]), (0b1111, [1, 2]), (0b1010, [0, 0])] {
            let scalars = if complex { [(2.0, -1.0), (1.0, 1.0)] } else { [(2.0, 0.0), (-3.0, 0.0)] };
            let operand = (form >> 3) as usize;
            let k = if operand == 0 { m } else { n };
            let stored_a = if ops[0] == 0 { (m, k) } else { (k, m) };
            let stored_b = if ops[1] == 0 { (k, n) } else { (n, k) };
            let g = Gemm {
                trans_a: ops[0] != 0,
                trans_b: ops[1] != 0,
                m,
                n,
                k,
                ld: [stored_a.0 + 1, stored_b.0 + 2, m + 1],
                stride: [0; 3],
                batch: 1,
            };
            let mut a = gaussian(g.ld[0] * stored_a.1, 1, complex);
            let mut b = gaussian(g.ld[1] * stored_b.1, 2, complex);
            let c = gaussian(g.ld[2] * n, 3, complex);
            let (read, completed) = if operand == 0 {
                let full = complete_triangle(&mut a, k, g.ld[0], form);
                (full, b.clone())
            } else {
                let full = complete_triangle(&mut b, k, g.ld[1], form);
                (a.clone(), full)
            };
            let mut want = c.clone();
            reference_gemm(&g, ops, scalars, [&read, &completed], &mut want, |_, _| true);
            let name = format!("blas_{t}gemm_tri");
            let got = launch_gemm(acc, builtin, &name, &g, ops, scalars, [&a, &b, &c], Some(form), [double, complex]);
            assert_eq!(got.await, parts(&want, complex), "{name} form {form:#06b}, operations {ops:?}: C");
        }
    }
}

/// The `k x k` matrix (leading dimension `ld`) that `blas_<t>gemm_tri`'s `form` reads from the
/// triangle of `x`, completed; `x` then holds NaN wherever that reading must not look.
fn complete_triangle(x: &mut [(f64, f64)], k: u64, ld: u64, form: u32) -> Vec<(f64, f64)> {
    let (upper, kind) = (form & 1 == 1, (form >> 1) & 3);
    let mut full = x.to_vec();
    for j in 0..k {
        for i in 0..k {
            let (at, mirror) = ((i + j * ld) as usize, x[(j + i * ld) as usize]);
            let held = if upper { i <= j } else { i >= j };
            full[at] = match kind {
                3 if i == j => (1.0, 0.0),
                2 | 3 if !held => (0.0, 0.0),
                1 if i == j => (x[at].0, 0.0),
                0 if !held => mirror,
                1 if !held => (mirror.0, -mirror.1),
                _ => x[at],
            };
        }
    }
    for j in 0..k {
        for i in 0..k {
            let held = if upper { i <= j } else { i >= j };
            if !held || (kind == 3 && i == j) {
                x[(i + j * ld) as usize] = (f64::NAN, f64::NAN);
            }
        }
    }
    full
}

/// Small Gaussian integers, `len` of them (their imaginary parts 0 unless `complex`).
fn gaussian(len: u64, seed: u64, complex: bool) -> Vec<(f64, f64)> {
    let im = |i: u64| if complex { ((i * 5 + seed) % 7) as f64 - 3.0 } else { 0.0 };
    (0..len).map(|i| (((i * 7 + seed * 13) % 9) as f64 - 4.0, im(i))).collect()
}

fn complex_mul((a, b): (f64, f64), (c, d): (f64, f64)) -> (f64, f64) {
    (a * c - b * d, a * d + b * c)
}

/// `C_b = alpha op(A_b) op(B_b) + beta C_b` computed here into `c`, on the elements `holds`
/// keeps; operation 2 conjugates.
fn reference_gemm(
    g: &Gemm,
    ops: [u32; 2],
    [alpha, beta]: [(f64, f64); 2],
    [a, b]: [&[(f64, f64)]; 2],
    c: &mut [(f64, f64)],
    holds: impl Fn(u64, u64) -> bool,
) {
    let element = |x: &[(f64, f64)], op: u32, ld: u64, base: u64, row: u64, col: u64| {
        let (re, im) = if op == 0 { x[(base + row + col * ld) as usize] } else { x[(base + col + row * ld) as usize] };
        (re, if op == 2 { -im } else { im })
    };
    for bi in 0..g.batch {
        for j in 0..g.n {
            for i in (0..g.m).filter(|&i| holds(i, j)) {
                let mut sum = (0.0, 0.0);
                for p in 0..g.k {
                    let xy = complex_mul(
                        element(a, ops[0], g.ld[0], bi * g.stride[0], i, p),
                        element(b, ops[1], g.ld[1], bi * g.stride[1], p, j),
                    );
                    sum = (sum.0 + xy.0, sum.1 + xy.1);
                }
                let out = &mut c[(bi * g.stride[2] + i + j * g.ld[2]) as usize];
                let (scaled, old) = (complex_mul(alpha, sum), complex_mul(beta, *out));
                *out = (scaled.0 + old.0, scaled.1 + old.1);
            }
        }
    }
}

/// The parts of elements as stored: real and imaginary for complex ones, else the real.
fn parts(v: &[(f64, f64)], complex: bool) -> Vec<f64> {
    v.iter().flat_map(|&(re, im)| if complex { vec![re, im] } else { vec![re] }).collect()
}

/// Launches gemm kernel `name` (real or complex, `f32` or `f64`: `[double, complex]`) of shape
/// `g` on matrices A, B, C uploaded here, operations `ops`, one triangle (`fill`) or all of C,
/// and gives back all of C's parts.
#[allow(clippy::too_many_arguments)] // a gemm's operands
async fn launch_gemm(
    acc: &ac_frontend::Accelerator,
    builtin: &ac_frontend::Module,
    name: &str,
    g: &Gemm,
    ops: [u32; 2],
    [alpha, beta]: [(f64, f64); 2],
    matrices: [&[(f64, f64)]; 3],
    fill: Option<u32>,
    [double, complex]: [bool; 2],
) -> Vec<f64> {
    let scalar = |v: f64| if double { KernelArg::F64(v) } else { KernelArg::F32(v as f32) };
    let [a, b, c] = matrices.map(|m| encode(m, [double, complex]));
    let (da, db) = (acc.alloc_from(&a).await.unwrap(), acc.alloc_from(&b).await.unwrap());
    let dc = acc.alloc_from(&c).await.unwrap();
    let mut args = gemm_args(g, scalar(alpha.0), [da.arg(), db.arg(), dc.arg()], scalar(beta.0));
    if complex {
        args.extend([scalar(alpha.1), scalar(beta.1)]);
    }
    args.extend(fill.map(KernelArg::U32));
    args[..2].copy_from_slice(&ops.map(KernelArg::U32));
    let kernel = builtin.function(name).await.unwrap();
    kernel.launch(ac_frontend::LaunchDims::new([3, 1, 1], [32, 1, 1]), &args).await.unwrap();
    decode(&dc.to_vec().await.unwrap(), double)
}

/// Elements' bytes as stored: their [`parts`] as `f64` (`double`) or `f32`.
fn encode(v: &[(f64, f64)], [double, complex]: [bool; 2]) -> Vec<u8> {
    let parts = parts(v, complex).into_iter();
    if double {
        parts.flat_map(f64::to_le_bytes).collect()
    } else {
        parts.flat_map(|x| (x as f32).to_le_bytes()).collect()
    }
}

/// The numbers in `bytes`: `f64` (`double`) or `f32`.
fn decode(bytes: &[u8], double: bool) -> Vec<f64> {
    if double {
        bytes.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect()
    } else {
        bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap()).into()).collect()
    }
}

/// Launches `blas_stpttr`, `blas_dtpttr`, `blas_ctpttr` and `blas_ztpttr` on each triangle of a
/// padded 5 x 5 `A` whose elements are all different: packing gives BLAS's packed order, column
/// by column; unpacking into a matrix of markers writes the triangle and nothing else.
pub async fn packed_triangles_move_exactly(acc: &ac_frontend::Accelerator, builtin: &ac_frontend::Module) {
    let (n, lda) = (5u64, 7u64);
    for (t, double, complex) in [("s", false, false), ("d", true, false), ("c", false, true), ("z", true, true)] {
        let kernel = builtin.function(&format!("blas_{t}tpttr")).await.unwrap();
        // Element (i, j) is 10 i + j (+ (100 + i) i when complex); the padding rows hold -1.
        let element = |i: u64, j: u64| ((10 * i + j) as f64, if complex { (100 + i) as f64 } else { 0.0 });
        let a: Vec<(f64, f64)> =
            (0..lda * n).map(|e| if e % lda < n { element(e % lda, e / lda) } else { (-1.0, -1.0) }).collect();
        for upper in [false, true] {
            let in_triangle = |i: u64, j: u64| if upper { i <= j } else { i >= j };
            let packed: Vec<(f64, f64)> =
                (0..n).flat_map(|j| (0..n).filter(move |&i| in_triangle(i, j)).map(move |i| element(i, j))).collect();
            let encode = |v: &[(f64, f64)]| encode(v, [double, complex]);
            let decode = |bytes: Vec<u8>| decode(&bytes, double);
            let u = KernelArg::U32;
            let dims = ac_frontend::LaunchDims::new([2, 1, 1], [8, 1, 1]);
            let da = acc.alloc_from(&encode(&a)).await.unwrap();
            let dap = acc.alloc_from(&encode(&vec![(7.0, 7.0); packed.len()])).await.unwrap();
            let args = |dir: u32, a: KernelArg| [u(dir), u(upper.into()), u(n as u32), dap.arg(), a, u(lda as u32)];
            kernel.launch(dims, &args(1, da.arg())).await.unwrap();
            assert_eq!(
                decode(dap.to_vec().await.unwrap()),
                parts(&packed, complex),
                "blas_{t}tpttr pack, upper {upper}"
            );
            let markers = vec![(99.0, -99.0); a.len()];
            let dback = acc.alloc_from(&encode(&markers)).await.unwrap();
            kernel.launch(dims, &args(0, dback.arg())).await.unwrap();
            let want: Vec<(f64, f64)> = (0..lda * n)
                .map(|e| if e % lda < n && in_triangle(e % lda, e / lda) { a[e as usize] } else { markers[0] })
                .collect();
            assert_eq!(
                decode(dback.to_vec().await.unwrap()),
                parts(&want, complex),
                "blas_{t}tpttr unpack, upper {upper}"
            );
        }
    }
}

/// Launches `blas_activation` on two padded batches of a 5 x 3 matrix of each element type,
/// ReLU and GELU, and checks every element, the padding included: ReLU exactly, GELU within one
/// rounding to the type (a device's `tanh` may differ from the host's in the last bit); then
/// what it refuses (`ld < m`, an unknown op, batches that overlap).
pub async fn activations_apply_in_place_to_each_type(acc: &ac_frontend::Accelerator, builtin: &ac_frontend::Module) {
    use ac_backend::device::epilogue::ActivationOp as Op;
    use ac_backend::device::gemm::GemmElement::{Bf16, F16, F32};
    let activation = builtin.function("blas_activation").await.unwrap();
    let ([m, n, ld, stride, batch], u) = ([5u64, 3, 7, 23, 2], |v: u64| KernelArg::U32(v as u32));
    let span = stride * batch;
    // Halves of small integers: exact in every type.
    let values: Vec<f32> = (0..span).map(|i| ((i * 5 + 2) % 13) as f32 / 2.0 - 3.0).collect();
    use crate::dft_kernels::stored;
    for (op, element) in [(Op::Relu, F32), (Op::Relu, F16), (Op::Gelu, F32), (Op::Gelu, Bf16), (Op::Gelu, F16)] {
        let in_matrix = |i: u64| i % stride < n * ld && i % stride % ld < m;
        let want: Vec<f32> =
            (0..span).map(|i| if in_matrix(i) { op.apply(values[i as usize]) } else { values[i as usize] }).collect();
        let want: Vec<f32> =
            stored(&want, element).chunks_exact(element.bytes() as usize).map(|e| element.load(e)).collect();
        let d = acc.alloc_from(&stored(&values, element)).await.unwrap();
        let args =
            [u(op.code().into()), u(m), u(n), d.arg(), u(ld), KernelArg::U64(stride), u(batch), u(element as u64)];
        activation.launch(ac_frontend::LaunchDims::linear(4, 32), &args).await.unwrap();
        let got: Vec<f32> =
            d.to_vec().await.unwrap().chunks_exact(element.bytes() as usize).map(|e| element.load(e)).collect();
        let ulp = match (op, element) {
            (Op::Relu, _) => 0.0,
            (_, F32) => 1.0 / (1 << 20) as f32,
            (_, F16) => 1.0 / 1024.0,
            (_, Bf16) => 1.0 / 128.0,
        };
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= ulp * w.abs().max(1.0), "{op:?} {element:?}: element {i} is {g}, not {w}");
        }
    }
    let d = acc.alloc::<f32>(span as usize).await.unwrap();
    // No rows: nothing touched, nothing refused.
    let empty = [u(0), u(0), u(n), d.arg(), u(ld), KernelArg::U64(stride), u(batch), u(0)];
    activation.launch(ac_frontend::LaunchDims::linear(1, 32), &empty).await.unwrap();
    acc.synchronize().await.unwrap();
    for (what, [op, ld, stride]) in
        [("ld below m", [0, 4, stride]), ("an unknown op", [2, ld, stride]), ("overlapping batches", [1, ld, 10])]
    {
        let args = [u(op), u(m), u(n), d.arg(), u(ld), KernelArg::U64(stride), u(batch), u(0)];
        let err = match activation.launch(ac_frontend::LaunchDims::linear(1, 32), &args).await {
            Err(e) => e,
            Ok(()) => acc.synchronize().await.unwrap_err(),
        };
        assert_eq!(err.kind(), Some(ac_frontend::ErrorKind::InvalidArgument), "{what}: {err}");
    }
}
