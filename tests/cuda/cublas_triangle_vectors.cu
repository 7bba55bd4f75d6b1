// cuBLAS's level-2 routines on a matrix stored as one triangle, from a plain CUDA program
// linked against libcublas.so.13: symv and hemv (y = alpha A x + beta y), trmv (x = op(A) x:
// N, T and C, unit or not), trsv (op(A) x = b, x over b; b made from an integer x so that the
// solve is exact), syr and her (A = alpha x x^T + A, alpha x x^H + A), syr2 and her2
// (both products), on either triangle, in every precision they have, vectors strided. The
// triangle not read holds NaN for the products (and a unit diagonal does); the updates must
// leave it, A's padding and the vectors' gaps as they were. Every element is checked exactly
// against a reference computed here (small integers).
// Usage: cublas_triangle_vectors [--native] (--native: leaves out what the shim refuses that
// cuBLAS serves, so that a native run does not depend on it: a capture the shim cannot record)
#include <complex>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "cublas_helpers.h"
#include "cublas_typed.h"

// Matrices, vectors and scalars as untyped pointers: the same symbols, whatever the type.
extern "C" {
#define SYMV(name)                                                                                              \
    cublasStatus_t name(cublasHandle_t, int, int, const void*, const void*, int, const void*, int, const void*, \
                        void*, int);
#define TRMV(name) cublasStatus_t name(cublasHandle_t, int, int, int, int, const void*, int, void*, int);
TRMV(cublasStrsv_v2) TRMV(cublasDtrsv_v2) TRMV(cublasCtrsv_v2) TRMV(cublasZtrsv_v2)
#define SYR(name) cublasStatus_t name(cublasHandle_t, int, int, const void*, const void*, int, void*, int);
#define SYR2(name) \
    cublasStatus_t name(cublasHandle_t, int, int, const void*, const void*, int, const void*, int, void*, int);
SYMV(cublasSsymv_v2) SYMV(cublasDsymv_v2) SYMV(cublasCsymv_v2) SYMV(cublasZsymv_v2) SYMV(cublasChemv_v2)
SYMV(cublasZhemv_v2) TRMV(cublasStrmv_v2) TRMV(cublasDtrmv_v2) TRMV(cublasCtrmv_v2) TRMV(cublasZtrmv_v2)
SYR(cublasSsyr_v2) SYR(cublasDsyr_v2) SYR(cublasCsyr_v2) SYR(cublasZsyr_v2) SYR(cublasCher_v2) SYR(cublasZher_v2)
SYR2(cublasSsyr2_v2) SYR2(cublasDsyr2_v2) SYR2(cublasCsyr2_v2) SYR2(cublasZsyr2_v2) SYR2(cublasCher2_v2)
SYR2(cublasZher2_v2)
}

typedef cublasStatus_t (*Symv)(cublasHandle_t, int, int, const void*, const void*, int, const void*, int,
                               const void*, void*, int);
typedef cublasStatus_t (*Trmv)(cublasHandle_t, int, int, int, int, const void*, int, void*, int);
typedef cublasStatus_t (*Syr)(cublasHandle_t, int, int, const void*, const void*, int, void*, int);
typedef cublasStatus_t (*Syr2)(cublasHandle_t, int, int, const void*, const void*, int, const void*, int, void*,
                               int);

// The calls of one element type (the Hermitian ones: none for a real type).
template <typename E>
struct Calls;
#define CALLS_OF(E, P, symv, hemv, trmv, trsv, syr, her, syr2, her2)                                               \
    template <>                                                                                              \
    struct Calls<E> {                                                                                        \
        static constexpr const char* name = P;                                                               \
        static constexpr Symv symv_ = symv, hemv_ = hemv;                                                    \
        static constexpr Trmv trmv_ = trmv, trsv_ = trsv;                                                    \
        static constexpr Syr syr_ = syr, her_ = her;                                                         \
        static constexpr Syr2 syr2_ = syr2, her2_ = her2;                                                    \
    };
CALLS_OF(float, "s", cublasSsymv_v2, nullptr, cublasStrmv_v2, cublasStrsv_v2, cublasSsyr_v2, nullptr, cublasSsyr2_v2, nullptr)
CALLS_OF(double, "d", cublasDsymv_v2, nullptr, cublasDtrmv_v2, cublasDtrsv_v2, cublasDsyr_v2, nullptr, cublasDsyr2_v2, nullptr)
CALLS_OF(c32, "c", cublasCsymv_v2, cublasChemv_v2, cublasCtrmv_v2, cublasCtrsv_v2, cublasCsyr_v2, cublasCher_v2, cublasCsyr2_v2,
         cublasCher2_v2)
CALLS_OF(c64, "z", cublasZsymv_v2, cublasZhemv_v2, cublasZtrmv_v2, cublasZtrsv_v2, cublasZsyr_v2, cublasZher_v2, cublasZsyr2_v2,
         cublasZher2_v2)

static const char* const TRIANGLES[] = {"lower", "upper"};
static const char* const OPS[] = {"N", "T", "C"};

// An n x n A (lda n + 1) stored in triangle `uplo`, NaN in the other (and, `unit`, on the
// diagonal); and the element (i, j) a routine reads: symmetric, Hermitian (`hermitian`: the
// mirror conjugated, the diagonal real) or triangular (`triangular`: zeros, ones on a unit
// diagonal).
template <typename E>
struct Triangle {
    int n, lda, uplo;
    std::vector<E> a;
    Triangle(int n, int uplo, bool unit) : n(n), lda(n + 1), uplo(uplo), a(values<E>((size_t)(n + 1) * n, 1)) {
        for (int j = 0; j < n; j++)
            for (int i = 0; i < n; i++)
                if ((uplo ? i > j : i < j) || (unit && i == j)) a[i + j * lda] = poison<E>();
    }
    bool held(int i, int j) const { return uplo ? i <= j : i >= j; }
    E at(int i, int j, bool hermitian, bool triangular, bool unit) const {
        if (triangular) return unit && i == j ? E(1) : held(i, j) ? a[i + j * lda] : E(0);
        if (hermitian && i == j) return real_only(a[i + i * lda]);
        if (held(i, j)) return a[i + j * lda];
        return hermitian ? conj_of(a[j + i * lda]) : a[j + i * lda];
    }
};

// symv (or hemv) on n, x and y strided by incx and incy.
template <typename E>
static bool symv(cublasHandle_t h, bool hermitian, int uplo, int n, int incx, int incy, E alpha, E beta) {
    Triangle<E> t(n, uplo, false);
    std::vector<E> x = values<E>((size_t)n * incx, 2), y = values<E>((size_t)n * incy, 3), want = y;
    for (int i = 0; i < n; i++) {
        E acc = 0;
        for (int p = 0; p < n; p++) acc += t.at(i, p, hermitian, false, false) * x[(size_t)p * incx];
        want[(size_t)i * incy] = alpha * acc + beta * y[(size_t)i * incy];
    }
    E *da = upload(t.a), *dx = upload(x), *dy = upload(y);
    Symv call = hermitian ? Calls<E>::hemv_ : Calls<E>::symv_;
    CUBLAS(call(h, uplo, n, &alpha, da, t.lda, dx, incx, &beta, dy, incy));
    char name[96];
    snprintf(name, sizeof name, "%s%s %s incx %d incy %d", Calls<E>::name, hermitian ? "hemv" : "symv",
             TRIANGLES[uplo], incx, incy);
    bool ok = exact(name, download(dy, y.size()), want);
    for (E* p : {da, dx, dy}) CHECK(cudaFree(p));
    return ok;
}

// trmv: x = op(A) x, x strided by incx.
template <typename E>
static bool trmv(cublasHandle_t h, int uplo, int trans, bool unit, int n, int incx) {
    Triangle<E> t(n, uplo, unit);
    std::vector<E> x = values<E>((size_t)n * incx, 2), want = times_op(t, trans, unit, x, incx);
    E *da = upload(t.a), *dx = upload(x);
    CUBLAS(Calls<E>::trmv_(h, uplo, trans, unit, n, da, t.lda, dx, incx));
    char name[96];
    snprintf(name, sizeof name, "%strmv %s %s%s incx %d", Calls<E>::name, TRIANGLES[uplo], OPS[trans],
             unit ? " unit" : "", incx);
    bool ok = exact(name, download(dx, x.size()), want);
    for (E* p : {da, dx}) CHECK(cudaFree(p));
    return ok;
}

// trsv: op(A) x = b for an integer x, b = op(A) x computed here (exact), x strided by incx;
// a non-unit diagonal of 2s and 4s (complex: 2 + 2i and 4 + 4i, whose |d|^2 and |re| + |im| are
// powers of two), so that each quotient is exact however the library divides.
template <typename E>
static bool trsv(cublasHandle_t h, int uplo, int trans, bool unit, int n, int incx) {
    Triangle<E> t(n, uplo, unit);
    if (!unit)
        for (int i = 0; i < n; i++) t.a[i + i * t.lda] = make<E>(2 + 2 * (i % 2), 2 + 2 * (i % 2));
    std::vector<E> x = values<E>((size_t)n * incx, 2), b = times_op(t, trans, unit, x, incx);
    E *da = upload(t.a), *db = upload(b);
    CUBLAS(Calls<E>::trsv_(h, uplo, trans, unit, n, da, t.lda, db, incx));
    char name[96];
    snprintf(name, sizeof name, "%strsv %s %s%s incx %d", Calls<E>::name, TRIANGLES[uplo], OPS[trans],
             unit ? " unit" : "", incx);
    bool ok = exact(name, download(db, b.size()), x);
    for (E* p : {da, db}) CHECK(cudaFree(p));
    return ok;
}

// trmv on a managed x the host wrote last: x reaches the device before the product reads it.
static bool managed_trmv(cublasHandle_t h) {
    const int n = 4;
    Triangle<float> t(n, 0, false);
    float* x;
    CHECK(cudaMallocManaged(&x, n * sizeof(float)));
    std::vector<float> before(n), want(n);
    for (int i = 0; i < n; i++) x[i] = before[i] = (float)(i + 1);
    for (int i = 0; i < n; i++)
        for (int p = 0; p < n; p++) want[i] += t.at(i, p, false, true, false) * before[p];
    float* da = upload(t.a);
    CUBLAS(cublasStrmv_v2(h, 0, 0, 0, n, da, t.lda, x, 1));
    CHECK(cudaDeviceSynchronize());
    bool ok = exact("strmv managed x", std::vector<float>(x, x + n), want);
    CHECK(cudaFree(x));
    CHECK(cudaFree(da));
    return ok;
}

// syr (y none) or syr2 on triangle uplo of an n x n A (lda n + 2); `hermitian`: her, her2
// (her's alpha its real part), the diagonal made real.
template <typename E>
static bool update(cublasHandle_t h, bool hermitian, bool two, int uplo, int n, int incx, int incy, E alpha) {
    int lda = n + 2;
    std::vector<E> a = values<E>((size_t)lda * n, 1), x = values<E>((size_t)n * incx, 2);
    std::vector<E> y = values<E>((size_t)n * incy, 3), want = a;
    auto with = [&](E v) { return hermitian ? conj_of(v) : v; };
    if (hermitian && !two) alpha = real_only(alpha);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) {
            if (uplo ? i > j : i < j) continue;
            E xi = x[(size_t)i * incx], xj = x[(size_t)j * incx];
            E v = want[i + j * lda] + alpha * xi * with(xj);
            if (two) v = want[i + j * lda] + alpha * xi * with(y[(size_t)j * incy]) +
                         with(alpha) * y[(size_t)i * incy] * with(xj);
            want[i + j * lda] = hermitian && i == j ? real_only(v) : v;
        }
    E *da = upload(a), *dx = upload(x), *dy = upload(y);
    if (two) {
        Syr2 call = hermitian ? Calls<E>::her2_ : Calls<E>::syr2_;
        CUBLAS(call(h, uplo, n, &alpha, dx, incx, dy, incy, da, lda));
    } else {
        decltype(std::real(E())) real_alpha = std::real(alpha);
        const void* pa = hermitian ? (const void*)&real_alpha : (const void*)&alpha;
        CUBLAS((hermitian ? Calls<E>::her_ : Calls<E>::syr_)(h, uplo, n, pa, dx, incx, da, lda));
    }
    char name[96], second[16] = "";
    if (two) snprintf(second, sizeof second, " incy %d", incy);
    snprintf(name, sizeof name, "%s%s%s %s incx %d%s", Calls<E>::name, hermitian ? "her" : "syr", two ? "2" : "",
             TRIANGLES[uplo], incx, second);
    bool ok = exact(name, download(da, a.size()), want);
    for (E* p : {da, dx, dy}) CHECK(cudaFree(p));
    return ok;
}

int main(int argc, char** argv) {
    bool native = argc > 1 && strcmp(argv[1], "--native") == 0;
    cublasHandle_t h;
    CUBLAS(cublasCreate_v2(&h));
    bool ok = true;
    ok &= symv<float>(h, false, 0, 5, 2, 3, 2.0f, -1.0f);
    ok &= symv<double>(h, false, 1, 4, 1, 1, -1.0, 2.0);
    ok &= symv<c64>(h, false, 1, 3, 1, 2, c64(1, -1), c64(0, 1));
    ok &= symv<c32>(h, true, 0, 4, 1, 1, c32(2, 1), c32(1, 0));
    ok &= symv<c64>(h, true, 1, 5, 2, 1, c64(-1, 2), c64(1, -1));
    ok &= trmv<float>(h, 0, 0, true, 5, 2);
    ok &= trmv<double>(h, 1, 1, false, 4, 1);
    ok &= trmv<c32>(h, 0, 2, false, 4, 1);
    ok &= trmv<c64>(h, 1, 0, true, 3, 3);
    ok &= trmv<c32>(h, 1, 1, false, 5, 2);
    // A conjugated strided x (the shim solves a contiguous copy of it).
    ok &= trmv<c32>(h, 0, 2, false, 5, 3);
    ok &= trmv<c64>(h, 1, 2, true, 4, 2);
    ok &= managed_trmv(h);
    ok &= trsv<float>(h, 0, 0, true, 5, 2);
    ok &= trsv<double>(h, 1, 1, false, 4, 1);
    ok &= trsv<c32>(h, 0, 2, false, 4, 1);
    ok &= trsv<c64>(h, 1, 0, false, 3, 3);
    ok &= trsv<float>(h, 1, 1, false, 5, 2);
    ok &= trsv<c32>(h, 1, 2, false, 5, 2);
    ok &= trsv<c64>(h, 0, 2, true, 4, 3);
    ok &= update<float>(h, false, false, 0, 5, 2, 1, 2.0f);
    ok &= update<c64>(h, false, false, 1, 4, 1, 1, c64(1, 2));
    ok &= update<c32>(h, true, false, 0, 4, 1, 1, c32(-2, 0));
    ok &= update<c64>(h, true, false, 1, 3, 1, 1, c64(3, 0));
    ok &= update<double>(h, false, true, 1, 4, 2, 1, -1.0);
    ok &= update<c32>(h, false, true, 0, 3, 1, 2, c32(1, -1));
    ok &= update<c32>(h, true, true, 1, 4, 1, 1, c32(2, 1));
    ok &= update<c64>(h, true, true, 0, 5, 1, 1, c64(-1, 1));
    // Hermitian updates of strided vectors (conjugated through a contiguous copy).
    ok &= update<c32>(h, true, false, 1, 5, 2, 1, c32(2, 0));
    ok &= update<c64>(h, true, true, 0, 4, 3, 2, c64(1, -2));
    ok &= update<c32>(h, true, true, 1, 4, 1, 3, c32(-1, 2));
    if (!native) {
        // That copy is gone before a captured graph would run: refused while capturing.
        // (16 floats: A 2 x 2 and x, 2 elements 2 apart, complex.)
        while_capturing(h, "ctrsv C incx 2", [h](float* d) { return cublasCtrsv_v2(h, 0, 2, 0, 2, d, 2, d + 8, 2); });
    }
    {
        // Wrong arguments are refused, as cuBLAS refuses them.
        std::vector<float> v(16, 1.0f);
        float *d = upload(v), one = 1;
        cublasStatus_t s = cublasSsymv_v2(h, 2, 2, &one, d, 2, d + 8, 1, &one, d + 12, 1);
        printf("ssymv uplo 2: %d %s\n", (int)s, cublasGetStatusName(s));
        s = cublasStrmv_v2(h, 0, 0, 0, 2, d, 2, d + 8, 0);
        printf("strmv incx 0: %d %s\n", (int)s, cublasGetStatusName(s));
        s = cublasStrsv_v2(h, 0, 5, 0, 2, d, 2, d + 8, -1);
        printf("strsv trans 5 incx -1: %d %s\n", (int)s, cublasGetStatusName(s));
        s = cublasSsyr_v2(h, 0, 3, &one, d + 8, 1, d, 2);
        printf("ssyr lda 2 for n 3: %d %s\n", (int)s, cublasGetStatusName(s));
        CHECK(cudaFree(d));
    }
    CUBLAS(cublasDestroy_v2(h));
    printf(ok ? "cublas_triangle_vectors: all exact\n" : "cublas_triangle_vectors: FAILED\n");
    return ok ? 0 : 1;
}
