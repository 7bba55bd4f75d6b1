// cuBLAS's triangular solves, from a plain CUDA program linked against libcublas.so.13: trsm in
// single, double and both complex precisions, on each side, either triangle, each operation
// (the conjugate transpose included), a unit diagonal (its stored values never read: NaN here),
// padded matrices (what lies between the columns must stay as it was); alpha 0 (B set to zeros,
// A not read); and trsmBatched, its arrays of pointers in device memory. The right-hand sides are
// op(A) X / alpha for a known X of small (Gaussian) integers and a diagonal of 2, so every
// solution is exact: each is compared with X element by element. Usage: cublas_solve
#include <cmath>
#include <complex>
#include <cstdio>
#include <string>
#include <vector>

#include "cublas_helpers.h"

extern "C" {
cublasStatus_t cublasStrsm_v2(cublasHandle_t, int, int, cublasOperation_t, int, int, int, const float*, const float*,
                              int, float*, int);
cublasStatus_t cublasDtrsm_v2(cublasHandle_t, int, int, cublasOperation_t, int, int, int, const double*,
                              const double*, int, double*, int);
cublasStatus_t cublasCtrsm_v2(cublasHandle_t, int, int, cublasOperation_t, int, int, int, const void*, const void*,
                              int, void*, int);
cublasStatus_t cublasZtrsm_v2(cublasHandle_t, int, int, cublasOperation_t, int, int, int, const void*, const void*,
                              int, void*, int);
cublasStatus_t cublasDtrsmBatched(cublasHandle_t, int, int, cublasOperation_t, int, int, int, const double*,
                                  const double* const*, int, double* const*, int, int);
}

enum { LEFT = 0, RIGHT = 1, LOWER = 0, UPPER = 1, NON_UNIT = 0, UNIT = 1 };

template <typename E>
static bool is_nan(E v) { return std::isnan(std::real(v)) || std::isnan(std::imag(v)); }
template <typename E>
static E conjugate(E v) { return v; }
template <typename R>
static std::complex<R> conjugate(std::complex<R> v) { return std::conj(v); }

// A small Gaussian integer (its imaginary part dropped for a real E).
template <typename E>
static E value(int i, int seed) {
    std::complex<double> c((i * 7 + seed * 13) % 5 - 2, (i * 5 + seed) % 5 - 2);
    if constexpr (std::is_floating_point<E>::value) return (E)c.real();
    else return E((typename E::value_type)c.real(), (typename E::value_type)c.imag());
}

// One solve's problem: A (k x k, lda k + 1), X and B (m x n, ldb m + 2), B = op(A) X / alpha
// (left) or X op(A) / alpha (right), padding 77.
template <typename E>
struct Problem {
    int side, uplo, trans, diag, m, n, k, lda, ldb;
    E alpha;
    std::vector<E> a, x, b;

    Problem(int side, int uplo, int trans, int diag, int m, int n, E alpha, int seed)
        : side(side), uplo(uplo), trans(trans), diag(diag), m(m), n(n), k(side == LEFT ? m : n), lda(k + 1),
          ldb(m + 2), alpha(alpha) {
        a.assign(lda * k, E(99));
        for (int j = 0; j < k; j++)
            for (int i = 0; i < k; i++)
                if (i == j) a[i + j * lda] = diag == UNIT ? E(NAN) : E(2);
                else if ((i > j) == (uplo == LOWER)) a[i + j * lda] = value<E>(i + j * k, seed);
        x.assign(ldb * n, E(77));
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) x[i + j * ldb] = value<E>(i + j * m, seed + 1);
        b = x;
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                E sum = E(0);
                for (int p = 0; p < k; p++)
                    sum += side == LEFT ? op(i, p) * x[p + j * ldb] : x[i + p * ldb] * op(p, j);
                b[i + j * ldb] = sum / alpha;
            }
    }

    // op(A)(r, c), the unused triangle zero and a unit diagonal one.
    E op(int r, int c) const {
        int i = trans == CUBLAS_OP_N ? r : c, j = trans == CUBLAS_OP_N ? c : r;
        E v = i == j ? (diag == UNIT ? E(1) : a[i + j * lda]) : (i > j) == (uplo == LOWER) ? a[i + j * lda] : E(0);
        return trans == CUBLAS_OP_C ? conjugate(v) : v;
    }
};

template <typename E>
static bool same_as(const char* what, const std::vector<E>& got, const std::vector<E>& want) {
    for (size_t i = 0; i < want.size(); i++)
        if (!(got[i] == want[i]) && !(is_nan(got[i]) && is_nan(want[i]))) {
            printf("%s: element %zu is (%g, %g), expected (%g, %g)\n", what, i, (double)std::real(got[i]),
                   (double)std::imag(got[i]), (double)std::real(want[i]), (double)std::imag(want[i]));
            return false;
        }
    printf("%s exact\n", what);
    return true;
}

// Solves `p` with `solve` (a cublas<t>trsm) and compares B with X.
template <typename E, typename Solve>
static bool solves(cublasHandle_t h, Solve solve, const char* what, const Problem<E>& p) {
    E* da = upload(p.a);
    E* db = upload(p.b);
    CUBLAS(solve(h, p.side, p.uplo, (cublasOperation_t)p.trans, p.diag, p.m, p.n, &p.alpha, da, p.lda, db, p.ldb));
    bool ok = same_as(what, download(db, p.b.size()), p.x);
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    return ok;
}

template <typename E>
static cublasStatus_t complex_solve(cublasHandle_t h, int s, int u, cublasOperation_t t, int d, int m, int n,
                                    const E* alpha, const E* a, int lda, E* b, int ldb) {
    if constexpr (sizeof(E) == 8) return cublasCtrsm_v2(h, s, u, t, d, m, n, alpha, a, lda, b, ldb);
    else return cublasZtrsm_v2(h, s, u, t, d, m, n, alpha, a, lda, b, ldb);
}

int main() {
    cublasHandle_t h;
    CUBLAS(cublasCreate_v2(&h));
    bool ok = true;
    typedef std::complex<float> C;
    typedef std::complex<double> Z;
    ok &= solves<float>(h, cublasStrsm_v2, "strsm left lower N", Problem<float>(LEFT, LOWER, 0, NON_UNIT, 5, 3, -1, 1));
    ok &= solves<float>(h, cublasStrsm_v2, "strsm right upper T unit", Problem<float>(RIGHT, UPPER, 1, UNIT, 4, 3, 2, 2));
    ok &= solves<double>(h, cublasDtrsm_v2, "dtrsm left upper T", Problem<double>(LEFT, UPPER, 1, NON_UNIT, 4, 2, -1, 3));
    ok &= solves<double>(h, cublasDtrsm_v2, "dtrsm right lower N unit", Problem<double>(RIGHT, LOWER, 0, UNIT, 3, 4, 1, 4));
    ok &= solves<C>(h, complex_solve<C>, "ctrsm left lower C", Problem<C>(LEFT, LOWER, 2, NON_UNIT, 4, 3, C(0, 1), 5));
    ok &= solves<C>(h, complex_solve<C>, "ctrsm right upper C unit", Problem<C>(RIGHT, UPPER, 2, UNIT, 3, 4, C(0, -1), 6));
    ok &= solves<Z>(h, complex_solve<Z>, "ztrsm left upper N", Problem<Z>(LEFT, UPPER, 0, NON_UNIT, 4, 2, Z(0, 1), 7));
    ok &= solves<Z>(h, complex_solve<Z>, "ztrsm right lower C", Problem<Z>(RIGHT, LOWER, 2, NON_UNIT, 2, 3, Z(-1, 0), 8));

    // alpha 0: B becomes zeros (its padding kept), A is not read (here: not even allocated).
    {
        Problem<double> p(LEFT, LOWER, 0, NON_UNIT, 3, 2, 1, 9);
        double* db = upload(p.b);
        const double zero = 0;
        CUBLAS(cublasDtrsm_v2(h, LEFT, LOWER, CUBLAS_OP_N, NON_UNIT, 3, 2, &zero, nullptr, p.lda, db, p.ldb));
        std::vector<double> want = p.b;
        for (int j = 0; j < 2; j++)
            for (int i = 0; i < 3; i++) want[i + j * p.ldb] = 0;
        ok &= same_as("dtrsm alpha 0", download(db, p.b.size()), want);
        CHECK(cudaFree(db));
    }

    // trsmBatched: three systems, their pointers in device memory.
    {
        std::vector<Problem<double>> ps;
        std::vector<double*> as, bs;
        for (int i = 0; i < 3; i++) {
            ps.emplace_back(LEFT, UPPER, 0, NON_UNIT, 4, 3, -1, 10 + i);
            as.push_back(upload(ps[i].a));
            bs.push_back(upload(ps[i].b));
        }
        double** das = upload(as);
        double** dbs = upload(bs);
        const double alpha = -1;
        CUBLAS(cublasDtrsmBatched(h, LEFT, UPPER, CUBLAS_OP_N, NON_UNIT, 4, 3, &alpha, das, ps[0].lda, dbs, ps[0].ldb, 3));
        for (int i = 0; i < 3; i++) {
            std::string what = "dtrsmBatched system " + std::to_string(i);
            ok &= same_as(what.c_str(), download(bs[i], ps[i].b.size()), ps[i].x);
        }
    }

    // What cuBLAS refuses: a side of 2.
    const float one = 1;
    cublasStatus_t s = cublasStrsm_v2(h, 2, LOWER, CUBLAS_OP_N, NON_UNIT, 2, 2, &one, nullptr, 2, nullptr, 2);
    printf("strsm side 2: %d %s\n", (int)s, cublasGetStatusName(s));
    ok &= s == CUBLAS_STATUS_INVALID_VALUE;

    CUBLAS(cublasDestroy_v2(h));
    printf(ok ? "cublas_solve: all exact\n" : "cublas_solve: FAILED\n");
    return ok ? 0 : 1;
}
