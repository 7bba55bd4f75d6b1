// cuBLAS's level-2 routines on a matrix in BLAS's packed storage, from a plain CUDA program
// linked against libcublas.so.13: spmv and hpmv (y = alpha A x + beta y), tpmv (x = op(A) x:
// N, T and C, unit or not), tpsv (op(A) x = b, x over b; b made from an integer x so that the
// solve is exact), spr and hpr (A = alpha x x^T + A, alpha x x^H + A), spr2 and hpr2 (both
// products), on either triangle, in every precision they have, vectors strided. A unit
// diagonal holds NaN (it must not be read) and a Hermitian diagonal an imaginary part (it must
// be taken as 0, and hpr and hpr2 leave it 0). Every element is checked exactly against a
// reference computed here (small integers), the vectors' gaps included.
// Usage: cublas_packed_vectors [--native] (--native: leaves out what the shim refuses that
// cuBLAS serves, so that a native run does not depend on it)
#include <complex>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "cublas_helpers.h"
#include "cublas_typed.h"

// Matrices, vectors and scalars as untyped pointers: the same symbols, whatever the type.
extern "C" {
#define SPMV(name) \
    cublasStatus_t name(cublasHandle_t, int, int, const void*, const void*, const void*, int, const void*, void*, int);
#define TPMV(name) cublasStatus_t name(cublasHandle_t, int, int, int, int, const void*, void*, int);
#define SPR(name) cublasStatus_t name(cublasHandle_t, int, int, const void*, const void*, int, void*);
#define SPR2(name) \
    cublasStatus_t name(cublasHandle_t, int, int, const void*, const void*, int, const void*, int, void*);
SPMV(cublasSspmv_v2) SPMV(cublasDspmv_v2) SPMV(cublasChpmv_v2) SPMV(cublasZhpmv_v2)
TPMV(cublasStpmv_v2) TPMV(cublasDtpmv_v2) TPMV(cublasCtpmv_v2) TPMV(cublasZtpmv_v2)
TPMV(cublasStpsv_v2) TPMV(cublasDtpsv_v2) TPMV(cublasCtpsv_v2) TPMV(cublasZtpsv_v2)
SPR(cublasSspr_v2) SPR(cublasDspr_v2) SPR(cublasChpr_v2) SPR(cublasZhpr_v2)
SPR2(cublasSspr2_v2) SPR2(cublasDspr2_v2) SPR2(cublasChpr2_v2) SPR2(cublasZhpr2_v2)
}

typedef cublasStatus_t (*Spmv)(cublasHandle_t, int, int, const void*, const void*, const void*, int, const void*,
                               void*, int);
typedef cublasStatus_t (*Tpmv)(cublasHandle_t, int, int, int, int, const void*, void*, int);
typedef cublasStatus_t (*Spr)(cublasHandle_t, int, int, const void*, const void*, int, void*);
typedef cublasStatus_t (*Spr2)(cublasHandle_t, int, int, const void*, const void*, int, const void*, int, void*);

// The calls of one element type: spmv is hpmv, spr hpr and spr2 hpr2 for a complex type.
template <typename E>
struct Calls;
#define CALLS_OF(E, P, spmv, tpmv, tpsv, spr, spr2)                                 \
    template <>                                                                     \
    struct Calls<E> {                                                               \
        static constexpr const char* name = P;                                      \
        static constexpr bool hermitian = !std::is_floating_point<E>::value;        \
        static constexpr Spmv spmv_ = spmv;                                         \
        static constexpr Tpmv tpmv_ = tpmv, tpsv_ = tpsv;                           \
        static constexpr Spr spr_ = spr;                                            \
        static constexpr Spr2 spr2_ = spr2;                                         \
    };
CALLS_OF(float, "s", cublasSspmv_v2, cublasStpmv_v2, cublasStpsv_v2, cublasSspr_v2, cublasSspr2_v2)
CALLS_OF(double, "d", cublasDspmv_v2, cublasDtpmv_v2, cublasDtpsv_v2, cublasDspr_v2, cublasDspr2_v2)
CALLS_OF(c32, "c", cublasChpmv_v2, cublasCtpmv_v2, cublasCtpsv_v2, cublasChpr_v2, cublasChpr2_v2)
CALLS_OF(c64, "z", cublasZhpmv_v2, cublasZtpmv_v2, cublasZtpsv_v2, cublasZhpr_v2, cublasZhpr2_v2)

static const char* const TRIANGLES[] = {"lower", "upper"};
static const char* const OPS[] = {"N", "T", "C"};

// Triangle `uplo` of an n x n matrix packed column by column, small integers (complex: in
// both parts, the diagonal's imaginary parts too); NaN on a `unit` diagonal.
template <typename E>
struct Packed {
    int n, uplo;
    std::vector<E> ap;
    Packed(int n, int uplo, bool unit) : n(n), uplo(uplo), ap(values<E>((size_t)n * (n + 1) / 2, 4)) {
        if (unit)
            for (int i = 0; i < n; i++) ap[index(i, i)] = poison<E>();
    }
    bool held(int i, int j) const { return uplo ? i <= j : i >= j; }
    // Where (i, j) of the stored triangle lies in ap.
    size_t index(int i, int j) const {
        return uplo ? (size_t)i + (size_t)j * (j + 1) / 2 : (size_t)i + (size_t)(2 * n - j - 1) * j / 2;
    }
    // The element (i, j) a routine reads: symmetric or Hermitian (`hermitian`: the mirror
    // conjugated, the diagonal real), or triangular (zeros, ones on a unit diagonal).
    E at(int i, int j, bool hermitian, bool triangular, bool unit) const {
        if (triangular) return unit && i == j ? E(1) : held(i, j) ? ap[index(i, j)] : E(0);
        if (hermitian && i == j) return real_only(ap[index(i, i)]);
        if (held(i, j)) return ap[index(i, j)];
        return hermitian ? conj_of(ap[index(j, i)]) : ap[index(j, i)];
    }
};

// spmv (hpmv for a complex type) on n, x and y strided by incx and incy, alpha and beta on the
// host or (`on_device`) in device memory.
template <typename E>
static bool spmv(cublasHandle_t h, int uplo, int n, int incx, int incy, E alpha, E beta, bool on_device = false) {
    Packed<E> p(n, uplo, false);
    bool hermitian = Calls<E>::hermitian;
    std::vector<E> x = values<E>((size_t)n * incx, 2), y = values<E>((size_t)n * incy, 3), want = y;
    for (int i = 0; i < n; i++) {
        E acc = 0;
        for (int q = 0; q < n; q++) acc += p.at(i, q, hermitian, false, false) * x[(size_t)q * incx];
        want[(size_t)i * incy] = alpha * acc + beta * y[(size_t)i * incy];
    }
    E *dap = upload(p.ap), *dx = upload(x), *dy = upload(y);
    {
        Scalars<E> scalars(h, alpha, beta, on_device);
        CUBLAS(Calls<E>::spmv_(h, uplo, n, scalars.alpha(), dap, dx, incx, scalars.beta(), dy, incy));
    }
    char name[96];
    snprintf(name, sizeof name, "%s%s %s incx %d incy %d%s", Calls<E>::name, hermitian ? "hpmv" : "spmv",
             TRIANGLES[uplo], incx, incy, on_device ? " device scalars" : "");
    bool ok = exact(name, download(dy, y.size()), want);
    for (E* q : {dap, dx, dy}) CHECK(cudaFree(q));
    return ok;
}

// tpmv (x = op(A) x) or, `solve`, tpsv (op(A) x = b over b, b = op(A) x of an integer x, the
// diagonal 2 or 4 (complex: 2 + 2i or 4 + 4i, whose |d|^2 and |re| + |im| are powers of two) so
// that every quotient is exact however the library divides).
template <typename E>
static bool tpmv(cublasHandle_t h, bool solve, int uplo, int trans, bool unit, int n, int incx) {
    Packed<E> p(n, uplo, unit);
    if (solve && !unit)
        for (int i = 0; i < n; i++) p.ap[p.index(i, i)] = make<E>(2 + 2 * (i % 2), 2 + 2 * (i % 2));
    std::vector<E> x = values<E>((size_t)n * incx, 2), product = times_op(p, trans, unit, x, incx);
    std::vector<E> given = solve ? product : x, want = solve ? x : product;
    E *dap = upload(p.ap), *dx = upload(given);
    CUBLAS((solve ? Calls<E>::tpsv_ : Calls<E>::tpmv_)(h, uplo, trans, unit, n, dap, dx, incx));
    char name[96];
    snprintf(name, sizeof name, "%s%s %s %s%s incx %d", Calls<E>::name, solve ? "tpsv" : "tpmv", TRIANGLES[uplo],
             OPS[trans], unit ? " unit" : "", incx);
    bool ok = exact(name, download(dx, given.size()), want);
    for (E* q : {dap, dx}) CHECK(cudaFree(q));
    return ok;
}

// spr and spr2 (`two`; hpr and hpr2 for a complex type): the packed triangle updated, a
// Hermitian one's diagonal left real.
template <typename E>
static bool update(cublasHandle_t h, bool two, int uplo, int n, int incx, int incy, E alpha) {
    Packed<E> p(n, uplo, false);
    bool hermitian = Calls<E>::hermitian;
    std::vector<E> x = values<E>((size_t)n * incx, 5), y = values<E>((size_t)n * incy, 6), want = p.ap;
    // alpha 0 leaves A as it is (reference BLAS returns at once).
    for (int j = 0; j < n && !(alpha == E(0)); j++)
        for (int i = 0; i < n; i++) {
            if (!p.held(i, j)) continue;
            E xi = x[(size_t)i * incx], xj = x[(size_t)j * incx], yi = y[(size_t)i * incy], yj = y[(size_t)j * incy];
            E add = two ? alpha * xi * conj_of(yj) + conj_of(alpha) * yi * conj_of(xj) : alpha * xi * conj_of(xj);
            if (!hermitian) add = two ? alpha * (xi * yj + yi * xj) : alpha * xi * xj;
            E v = p.ap[p.index(i, j)] + add;
            want[p.index(i, j)] = hermitian && i == j ? real_only(v) : v;
        }
    E *dap = upload(p.ap), *dx = upload(x), *dy = upload(y);
    if (two) {
        CUBLAS(Calls<E>::spr2_(h, uplo, n, &alpha, dx, incx, dy, incy, dap));
    } else {
        decltype(std::real(E())) real_alpha = std::real(alpha);
        CUBLAS(Calls<E>::spr_(h, uplo, n, hermitian ? (const void*)&real_alpha : (const void*)&alpha, dx, incx, dap));
    }
    char name[96], second[16] = "";
    if (two) snprintf(second, sizeof second, " incy %d", incy);
    snprintf(name, sizeof name, "%s%s%s %s incx %d%s%s", Calls<E>::name, hermitian ? "hpr" : "spr", two ? "2" : "",
             TRIANGLES[uplo], incx, second, alpha == E(0) ? " alpha 0" : "");
    bool ok = exact(name, download(dap, want.size()), want);
    for (E* q : {dap, dx, dy}) CHECK(cudaFree(q));
    return ok;
}

int main(int argc, char** argv) {
    bool native = argc > 1 && strcmp(argv[1], "--native") == 0;
    cublasHandle_t h;
    CUBLAS(cublasCreate_v2(&h));
    bool ok = true;
    ok &= spmv<float>(h, 0, 5, 2, 3, 2.0f, -1.0f);
    ok &= spmv<double>(h, 1, 4, 1, 1, -1.0, 2.0);
    ok &= spmv<c32>(h, 0, 4, 1, 2, c32(2, 1), c32(1, 0));
    ok &= spmv<c64>(h, 1, 5, 2, 1, c64(-1, 2), c64(1, -1));
    ok &= spmv<double>(h, 0, 4, 2, 1, 3.0, -2.0, true);
    ok &= tpmv<float>(h, false, 0, 0, true, 5, 2);
    ok &= tpmv<double>(h, false, 1, 1, false, 4, 1);
    ok &= tpmv<c32>(h, false, 0, 2, false, 4, 1);
    ok &= tpmv<c64>(h, false, 1, 0, true, 3, 3);
    ok &= tpmv<float>(h, true, 0, 0, true, 5, 2);
    ok &= tpmv<double>(h, true, 1, 1, false, 4, 1);
    ok &= tpmv<c32>(h, true, 0, 2, false, 4, 1);
    ok &= tpmv<c64>(h, true, 1, 0, false, 3, 3);
    // A conjugated strided x (through a contiguous copy in the shim).
    ok &= tpmv<c32>(h, false, 1, 2, true, 5, 2);
    ok &= tpmv<c64>(h, true, 0, 2, false, 4, 3);
    ok &= update<float>(h, false, 0, 5, 2, 1, 2.0f);
    ok &= update<double>(h, false, 1, 4, 1, 1, -1.0);
    ok &= update<c32>(h, false, 0, 4, 1, 1, c32(-2, 0));
    ok &= update<c64>(h, false, 1, 3, 1, 1, c64(3, 0));
    ok &= update<float>(h, true, 1, 4, 2, 1, -1.0f);
    ok &= update<double>(h, true, 0, 3, 1, 2, 2.0);
    ok &= update<c32>(h, true, 1, 4, 1, 1, c32(2, 1));
    ok &= update<c64>(h, true, 0, 5, 1, 1, c64(-1, 1));
    ok &= update<c32>(h, false, 0, 5, 3, 1, c32(2, 0));
    ok &= update<c64>(h, true, 1, 4, 2, 3, c64(1, -1));
    // alpha 0: A as it was (a Hermitian diagonal's imaginary parts too, as reference BLAS
    // returns at once).
    ok &= update<float>(h, false, 1, 4, 1, 1, 0.0f);
    ok &= update<c32>(h, false, 1, 4, 1, 1, c32(0, 0));
    if (!native) {
        // alpha 0 reads nothing, not even AP (here none), as reference BLAS returns at once.
        std::vector<c32> v(32, c32(1, 0));
        c32* d = upload(v);
        float zero = 0;
        cublasStatus_t s = cublasSspr_v2(h, 0, 3, &zero, (const float*)(d + 8), 1, nullptr);
        printf("sspr alpha 0 without AP: %d %s\n", (int)s, cublasGetStatusName(s));
        CHECK(cudaFree(d));
        static const float unit = 1;
        while_capturing(h, "sspmv", [h](float* d) { return cublasSspmv_v2(h, 0, 3, &unit, d, d + 8, 1, &unit, d + 12, 1); });
        while_capturing(h, "stpsv", [h](float* d) { return cublasStpsv_v2(h, 0, 0, 0, 3, d, d + 8, 1); });
    }
    {
        // Wrong arguments are refused, as cuBLAS refuses them.
        std::vector<float> v(16, 1.0f);
        float *d = upload(v), one = 1;
        cublasStatus_t s = cublasSspmv_v2(h, 2, 2, &one, d, d + 8, 1, &one, d + 12, 1);
        printf("sspmv uplo 2: %d %s\n", (int)s, cublasGetStatusName(s));
        s = cublasSspmv_v2(h, 0, 0, &one, d, d + 8, 1, &one, d + 12, 1);
        printf("sspmv of no elements: %d %s\n", (int)s, cublasGetStatusName(s));
        s = cublasStpsv_v2(h, 0, 5, 0, 2, d, d + 8, 1);
        printf("stpsv trans 5: %d %s\n", (int)s, cublasGetStatusName(s));
        s = cublasSspr_v2(h, 0, 3, &one, d + 8, 0, d);
        printf("sspr incx 0: %d %s\n", (int)s, cublasGetStatusName(s));
        CHECK(cudaFree(d));
    }
    CUBLAS(cublasDestroy_v2(h));
    printf(ok ? "cublas_packed_vectors: all exact\n" : "cublas_packed_vectors: FAILED\n");
    return ok ? 0 : 1;
}
