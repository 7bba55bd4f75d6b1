// cuBLAS's level-2 routines on band matrices, from a plain CUDA program linked against
// libcublas.so.13: gbmv (y = alpha op(A) x + beta y, N, T and C, more diagonals than rows
// too), hbmv (A Hermitian, either triangle), tbmv (x = op(A) x, unit or not) and tbsv
// (op(A) x = b over b, b made from an integer x so that the solve is exact: one block of
// unknowns and several, bands wider than the matrix too), in every precision they have,
// vectors strided, scalars on the host and in device memory. A spare row of each band and its
// corners past the matrix's edges hold NaN (they must not be read), as does a unit diagonal; a Hermitian diagonal's imaginary parts
// must be taken as 0. Every element is checked exactly against a reference computed here
// (small integers), the vectors' gaps included.
// Usage: cublas_band [--native] (--native: leaves out what the shim refuses that cuBLAS serves)
#include <complex>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cublas_helpers.h"
#include "cublas_typed.h"

// Matrices, vectors and scalars as untyped pointers: the same symbols, whatever the type.
extern "C" {
#define GBMV(name)                                                                                                \
    cublasStatus_t name(cublasHandle_t, int, int, int, int, int, const void*, const void*, int, const void*, int, \
                        const void*, void*, int);
#define HBMV(name) \
    cublasStatus_t name(cublasHandle_t, int, int, int, const void*, const void*, int, const void*, int, const void*, void*, int);
#define TBMV(name) cublasStatus_t name(cublasHandle_t, int, int, int, int, int, const void*, int, void*, int);
GBMV(cublasSgbmv_v2) GBMV(cublasDgbmv_v2) GBMV(cublasCgbmv_v2) GBMV(cublasZgbmv_v2)
HBMV(cublasChbmv_v2) HBMV(cublasZhbmv_v2)
TBMV(cublasStbmv_v2) TBMV(cublasDtbmv_v2) TBMV(cublasCtbmv_v2) TBMV(cublasZtbmv_v2)
TBMV(cublasStbsv_v2) TBMV(cublasDtbsv_v2) TBMV(cublasCtbsv_v2) TBMV(cublasZtbsv_v2)
}

typedef cublasStatus_t (*Gbmv)(cublasHandle_t, int, int, int, int, int, const void*, const void*, int, const void*,
                               int, const void*, void*, int);
typedef cublasStatus_t (*Hbmv)(cublasHandle_t, int, int, int, const void*, const void*, int, const void*, int,
                               const void*, void*, int);
typedef cublasStatus_t (*Tbmv)(cublasHandle_t, int, int, int, int, int, const void*, int, void*, int);

// The calls of one element type (hbmv: complex types only).
template <typename E>
struct Calls;
#define CALLS_OF(E, P, gbmv, hbmv, tbmv, tbsv)          \
    template <>                                         \
    struct Calls<E> {                                   \
        static constexpr const char* name = P;          \
        static constexpr Gbmv gbmv_ = gbmv;             \
        static constexpr Hbmv hbmv_ = hbmv;             \
        static constexpr Tbmv tbmv_ = tbmv, tbsv_ = tbsv; \
    };
CALLS_OF(float, "s", cublasSgbmv_v2, nullptr, cublasStbmv_v2, cublasStbsv_v2)
CALLS_OF(double, "d", cublasDgbmv_v2, nullptr, cublasDtbmv_v2, cublasDtbsv_v2)
CALLS_OF(c32, "c", cublasCgbmv_v2, cublasChbmv_v2, cublasCtbmv_v2, cublasCtbsv_v2)
CALLS_OF(c64, "z", cublasZgbmv_v2, cublasZhbmv_v2, cublasZtbmv_v2, cublasZtbsv_v2)

static const char* const TRIANGLES[] = {"lower", "upper"};
static const char* const OPS[] = {"N", "T", "C"};

// An m x n band, kl diagonals below the main one and ku above, in BLAS's band layout with one
// spare row (lda kl + ku + 2): small integers (complex: in both parts), NaN where the layout
// holds no element of the matrix (the spare row, the corners past its edges).
template <typename E>
struct Band {
    int m, n, kl, ku, lda;
    std::vector<E> ab;
    Band(int m, int n, int kl, int ku, int seed)
        : m(m), n(n), kl(kl), ku(ku), lda(kl + ku + 2), ab(values<E>((size_t)(kl + ku + 2) * n, seed)) {
        for (int j = 0; j < n; j++)
            for (int r = 0; r < lda; r++) {
                int i = r - ku + j;
                if (r == lda - 1 || i < 0 || i >= m) ab[(size_t)r + (size_t)j * lda] = poison<E>();
            }
    }
    bool held(int i, int j) const { return i < m && j < n && j - i <= ku && i - j <= kl; }
    size_t index(int i, int j) const { return (size_t)(ku + i - j) + (size_t)j * lda; }
    E stored(int i, int j) const { return held(i, j) ? ab[index(i, j)] : E(0); }
};

// An n x n triangular, symmetric or Hermitian band: one triangle (`uplo`) of k diagonals
// besides the main one.
template <typename E>
struct Triangle : Band<E> {
    int uplo;
    Triangle(int n, int k, int uplo, int seed) : Band<E>(n, n, uplo ? 0 : k, uplo ? k : 0, seed), uplo(uplo) {}
    // The element (i, j) a routine reads: Hermitian (the mirror conjugated, the diagonal
    // real), or triangular (ones on a unit diagonal) as cublas_typed.h's times_op asks.
    E at(int i, int j, bool hermitian, bool triangular, bool unit) const {
        if (triangular) return unit && i == j ? E(1) : this->stored(i, j);
        if (hermitian && i == j) return real_only(this->stored(i, i));
        return this->held(i, j) ? this->stored(i, j) : conj_of(this->stored(j, i));
    }
};

// gbmv: y = alpha op(A) x + beta y, alpha and beta on the host or (`on_device`) in device memory.
template <typename E>
static bool gbmv(cublasHandle_t h, int trans, int m, int n, int kl, int ku, int incx, int incy, E alpha, E beta,
                 bool on_device = false) {
    Band<E> a(m, n, kl, ku, 3);
    int rows = trans == 0 ? m : n, cols = trans == 0 ? n : m;
    std::vector<E> x = values<E>((size_t)cols * incx, 4), y = values<E>((size_t)rows * incy, 5), want = y;
    // beta 0 reads no y (it holds NaN then).
    if (beta == E(0))
        for (int i = 0; i < rows; i++) y[(size_t)i * incy] = poison<E>();
    for (int i = 0; i < rows; i++) {
        E acc = 0;
        for (int q = 0; q < cols; q++) {
            E v = trans == 0 ? a.stored(i, q) : a.stored(q, i);
            acc += (trans == 2 ? conj_of(v) : v) * x[(size_t)q * incx];
        }
        want[(size_t)i * incy] = alpha * acc + (beta == E(0) ? E(0) : beta * y[(size_t)i * incy]);
    }
    E *dab = upload(a.ab), *dx = upload(x), *dy = upload(y);
    {
        Scalars<E> scalars(h, alpha, beta, on_device);
        CUBLAS(Calls<E>::gbmv_(h, trans, m, n, kl, ku, scalars.alpha(), dab, a.lda, dx, incx, scalars.beta(), dy, incy));
    }
    char name[96];
    snprintf(name, sizeof name, "%sgbmv %s %dx%d kl %d ku %d incx %d incy %d%s", Calls<E>::name, OPS[trans], m, n, kl,
             ku, incx, incy, on_device ? " device scalars" : "");
    bool ok = exact(name, download(dy, y.size()), want);
    for (E* q : {dab, dx, dy}) CHECK(cudaFree(q));
    return ok;
}

// hbmv: y = alpha A x + beta y, A Hermitian; beta 0 leaves y unread (it holds NaN then).
template <typename E>
static bool hbmv(cublasHandle_t h, int uplo, int n, int k, int incx, int incy, E alpha, E beta, bool on_device = false) {
    Triangle<E> a(n, k, uplo, 6);
    std::vector<E> x = values<E>((size_t)n * incx, 7), y = values<E>((size_t)n * incy, 8), want = y;
    if (beta == E(0))
        for (int i = 0; i < n; i++) y[(size_t)i * incy] = poison<E>();
    for (int i = 0; i < n; i++) {
        E acc = 0;
        for (int q = 0; q < n; q++) acc += a.at(i, q, true, false, false) * x[(size_t)q * incx];
        want[(size_t)i * incy] = alpha * acc + (beta == E(0) ? E(0) : beta * y[(size_t)i * incy]);
    }
    E *dab = upload(a.ab), *dx = upload(x), *dy = upload(y);
    {
        Scalars<E> scalars(h, alpha, beta, on_device);
        CUBLAS(Calls<E>::hbmv_(h, uplo, n, k, scalars.alpha(), dab, a.lda, dx, incx, scalars.beta(), dy, incy));
    }
    char name[96];
    snprintf(name, sizeof name, "%shbmv %s n %d k %d incx %d incy %d%s", Calls<E>::name, TRIANGLES[uplo], n, k, incx,
             incy, on_device ? " device scalars" : "");
    bool ok = exact(name, download(dy, y.size()), want);
    for (E* q : {dab, dx, dy}) CHECK(cudaFree(q));
    return ok;
}

// tbmv (x = op(A) x) or, `solve`, tbsv (op(A) x = b over b, b = op(A) x of an integer x, the
// diagonal 2 or 4 (complex: 2 + 2i or 4 + 4i, whose |d|^2 and |re| + |im| are powers of two) so
// that every quotient is exact however the library divides).
template <typename E>
static bool tbmv(cublasHandle_t h, bool solve, int uplo, int trans, bool unit, int n, int k, int incx) {
    Triangle<E> a(n, k, uplo, 9);
    for (int i = 0; i < n; i++)
        a.ab[a.index(i, i)] = unit ? poison<E>() : solve ? make<E>(2 + 2 * (i % 2), 2 + 2 * (i % 2)) : a.ab[a.index(i, i)];
    std::vector<E> x = values<E>((size_t)n * incx, 10), product = times_op(a, trans, unit, x, incx);
    std::vector<E> given = solve ? product : x, want = solve ? x : product;
    E *dab = upload(a.ab), *dx = upload(given);
    CUBLAS((solve ? Calls<E>::tbsv_ : Calls<E>::tbmv_)(h, uplo, trans, unit, n, k, dab, a.lda, dx, incx));
    char name[96];
    snprintf(name, sizeof name, "%s%s %s %s%s n %d k %d incx %d", Calls<E>::name, solve ? "tbsv" : "tbmv",
             TRIANGLES[uplo], OPS[trans], unit ? " unit" : "", n, k, incx);
    bool ok = exact(name, download(dx, given.size()), want);
    for (E* q : {dab, dx}) CHECK(cudaFree(q));
    return ok;
}

int main(int argc, char** argv) {
    bool native = argc > 1 && strcmp(argv[1], "--native") == 0;
    cublasHandle_t h;
    CUBLAS(cublasCreate_v2(&h));
    bool ok = true;
    ok &= gbmv<float>(h, 0, 9, 7, 2, 3, 2, 3, 2.0f, -1.0f);
    ok &= gbmv<double>(h, 1, 6, 10, 1, 4, 1, 2, -1.0, 2.0);
    ok &= gbmv<c32>(h, 2, 8, 5, 3, 1, 2, 1, c32(2, 1), c32(1, -1));
    ok &= gbmv<c64>(h, 0, 5, 5, 0, 0, 1, 1, c64(-1, 2), c64(0, 1));
    ok &= gbmv<float>(h, 0, 3, 8, 4, 2, 1, 1, 1.0f, 1.0f);
    ok &= gbmv<c64>(h, 1, 7, 4, 2, 2, 3, 2, c64(1, 1), c64(2, 0), true);
    ok &= gbmv<double>(h, 2, 6, 9, 3, 2, 2, 2, 3.0, 0.0);
    ok &= hbmv<c32>(h, 1, 9, 2, 2, 1, c32(2, 1), c32(1, -1));
    ok &= hbmv<c64>(h, 0, 7, 3, 1, 3, c64(-1, 0), c64(0, 0));
    ok &= hbmv<c32>(h, 0, 4, 6, 1, 1, c32(1, 0), c32(2, 0));
    ok &= hbmv<c64>(h, 1, 6, 1, 2, 2, c64(0, 2), c64(1, 1), true);
    ok &= tbmv<float>(h, false, 1, 0, false, 9, 2, 2);
    ok &= tbmv<double>(h, false, 0, 1, true, 10, 3, 1);
    ok &= tbmv<c32>(h, false, 1, 2, false, 8, 1, 2);
    ok &= tbmv<c64>(h, false, 0, 0, false, 6, 4, 1);
    // Solves of one block and of several (blocks of 32, or k when wider), a band wider than
    // the matrix, a diagonal one.
    ok &= tbmv<float>(h, true, 1, 0, false, 70, 3, 2);
    ok &= tbmv<double>(h, true, 0, 1, false, 70, 40, 1);
    ok &= tbmv<c32>(h, true, 1, 2, false, 70, 3, 1);
    ok &= tbmv<c64>(h, true, 0, 0, true, 40, 0, 3);
    ok &= tbmv<float>(h, true, 0, 0, false, 70, 100, 1);
    ok &= tbmv<c64>(h, true, 1, 1, false, 10, 12, 1);
    ok &= tbmv<double>(h, true, 1, 0, false, 90, 40, 2);
    ok &= tbmv<double>(h, true, 1, 1, true, 33, 5, 1);
    ok &= tbmv<c32>(h, true, 0, 2, false, 9, 2, 1);
    ok &= tbmv<c64>(h, true, 1, 0, false, 5, 2, 2);
    // A conjugated strided x: solved as a contiguous copy, in one block and in several.
    ok &= tbmv<c32>(h, true, 0, 2, false, 70, 3, 2);
    ok &= tbmv<c64>(h, true, 1, 2, true, 9, 2, 3);
    if (!native) {
        // What the shim does not serve: a band solve or product captured (reversed vectors:
        // cublas_backwards.cu).
        while_capturing(h, "stbsv", [h](float* d) { return cublasStbsv_v2(h, 0, 0, 0, 3, 1, d, 2, d + 8, 1); });
        while_capturing(h, "stbmv", [h](float* d) { return cublasStbmv_v2(h, 0, 0, 0, 3, 1, d, 2, d + 8, 1); });
    }
    {
        // Wrong arguments are refused, as cuBLAS refuses them; no elements is nothing to do.
        std::vector<float> v(16, 1.0f);
        float *d = upload(v), one = 1;
        cublasStatus_t s = cublasSgbmv_v2(h, 0, 4, 4, 1, 1, &one, d, 2, d + 8, 1, &one, d + 12, 1);
        printf("sgbmv lda 2 for 3 diagonals: %d %s\n", (int)s, cublasGetStatusName(s));
        s = cublasChbmv_v2(h, 2, 2, 0, &one, d, 1, d + 8, 1, &one, d + 12, 1);
        printf("chbmv uplo 2: %d %s\n", (int)s, cublasGetStatusName(s));
        s = cublasStbmv_v2(h, 0, 0, 2, 2, 0, d, 1, d + 8, 1);
        printf("stbmv diag 2: %d %s\n", (int)s, cublasGetStatusName(s));
        s = cublasStbsv_v2(h, 0, 0, 0, 2, 0, d, 1, d + 8, 0);
        printf("stbsv incx 0: %d %s\n", (int)s, cublasGetStatusName(s));
        s = cublasStbsv_v2(h, 0, 0, 0, 0, 0, nullptr, 1, nullptr, 1);
        printf("stbsv of no elements: %d %s\n", (int)s, cublasGetStatusName(s));
        CHECK(cudaFree(d));
    }
    CUBLAS(cublasDestroy_v2(h));
    printf(ok ? "cublas_band: all exact\n" : "cublas_band: FAILED\n");
    return ok ? 0 : 1;
}
