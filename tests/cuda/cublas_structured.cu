// cuBLAS's products with a matrix stored as one triangle, from a plain CUDA program linked
// against libcublas.so.13: symm (C = alpha A B + beta C or alpha B A + beta C, A symmetric) in
// every precision, hemm (A Hermitian, its diagonal's imaginary parts ignored) in both complex
// ones, trmm (C = alpha op(A) B or alpha B op(A), A triangular, N, T and C, unit or not) in
// every precision, out of place and in place (B given as C, BLAS's form), both sides, both
// triangles, scalars on the host or in device memory. The triangle not stored (and a unit
// diagonal) holds NaN, and so does trmm's C before the call: a product that read them would
// not come out exact. Every element of C is checked exactly against a reference computed here
// (small integers), the padding rows as they were.
// Usage: cublas_structured [--native] (--native: leaves out what cuBLAS's documentation does
// not promise, so that a native run does not depend on it)
#include <complex>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "cublas_helpers.h"
#include "cublas_typed.h"

// Matrices and scalars as untyped pointers: the same symbols, whatever the element type.
extern "C" {
#define SYMM(name)                                                                                                \
    cublasStatus_t name(cublasHandle_t, int, int, int, int, const void*, const void*, int, const void*, int,      \
                        const void*, void*, int);
#define TRMM(name)                                                                                                \
    cublasStatus_t name(cublasHandle_t, int, int, int, int, int, int, const void*, const void*, int, const void*, \
                        int, void*, int);
SYMM(cublasSsymm_v2)
SYMM(cublasDsymm_v2)
SYMM(cublasCsymm_v2)
SYMM(cublasZsymm_v2)
SYMM(cublasChemm_v2)
SYMM(cublasZhemm_v2)
TRMM(cublasStrmm_v2)
TRMM(cublasDtrmm_v2)
TRMM(cublasCtrmm_v2)
TRMM(cublasZtrmm_v2)
}

typedef cublasStatus_t (*Symm)(cublasHandle_t, int, int, int, int, const void*, const void*, int, const void*, int,
                               const void*, void*, int);
typedef cublasStatus_t (*Trmm)(cublasHandle_t, int, int, int, int, int, int, const void*, const void*, int,
                               const void*, int, void*, int);

// The calls of one element type (hemm: none for a real type).
template <typename E>
struct Calls;
#define CALLS_OF(E, P, symm, hemm, trmm)                  \
    template <>                                           \
    struct Calls<E> {                                     \
        static constexpr const char* name = P;            \
        static constexpr Symm symm_ = symm;               \
        static constexpr Symm hemm_ = hemm;               \
        static constexpr Trmm trmm_ = trmm;               \
    };
CALLS_OF(float, "s", cublasSsymm_v2, nullptr, cublasStrmm_v2)
CALLS_OF(double, "d", cublasDsymm_v2, nullptr, cublasDtrmm_v2)
CALLS_OF(c32, "c", cublasCsymm_v2, cublasChemm_v2, cublasCtrmm_v2)
CALLS_OF(c64, "z", cublasZsymm_v2, cublasZhemm_v2, cublasZtrmm_v2)

// What A is: its elements outside the stored triangle from that triangle, or zeros.
enum Kind { SYMMETRIC, HERMITIAN, TRIANGULAR, UNIT };

// Element (i, j) of A as `kind` completes it from triangle `uplo` (0 lower, 1 upper) of `a`.
template <typename E>
static E full_at(const std::vector<E>& a, int lda, int uplo, Kind kind, int i, int j) {
    bool held = uplo ? i <= j : i >= j;
    if (kind == UNIT && i == j) return E(1);
    if (kind >= TRIANGULAR) return held ? a[i + j * lda] : E(0);
    if (kind == HERMITIAN && i == j) return real_only(a[i + j * lda]);
    if (held) return a[i + j * lda];
    return kind == HERMITIAN ? conj_of(a[j + i * lda]) : a[j + i * lda];
}

// One product's operands and the C expected: A k x k (lda k + 1) with NaN outside the stored
// triangle (and on a unit diagonal), B and C m x n (ldb m + 2, ldc m + 1; trmm's C NaN but for
// its padding).
template <typename E>
struct Case {
    int k, lda, ldb, ldc;
    std::vector<E> a, b, c, want;
    Case(Kind kind, int side, int uplo, int trans, int m, int n, E alpha, E beta) {
        k = side == 0 ? m : n, lda = k + 1, ldb = m + 2, ldc = m + 1;
        a = values<E>((size_t)lda * k, 1);
        for (int j = 0; j < k; j++)
            for (int i = 0; i < k; i++)
                if ((uplo ? i > j : i < j) || (kind == UNIT && i == j)) a[i + j * lda] = poison<E>();
        b = values<E>((size_t)ldb * n, 2);
        c = values<E>((size_t)ldc * n, 3);
        if (kind >= TRIANGULAR)
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) c[i + j * ldc] = poison<E>();
        want = c;
        auto op_a = [&](int i, int j) {
            E v = trans == 0 ? full_at(a, lda, uplo, kind, i, j) : full_at(a, lda, uplo, kind, j, i);
            return trans == 2 ? conj_of(v) : v;
        };
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                E acc = 0;
                for (int p = 0; p < k; p++) acc += side == 0 ? op_a(i, p) * b[p + j * ldb] : b[i + p * ldb] * op_a(p, j);
                E& out = want[i + j * ldc];
                out = kind >= TRIANGULAR ? alpha * acc : alpha * acc + beta * out;
            }
    }
};

static const char* const SIDES[] = {"left", "right"};
static const char* const TRIANGLES[] = {"lower", "upper"};
static const char* const OPS[] = {"N", "T", "C"};

// symm (or, `kind` HERMITIAN, hemm) on an m x n C, A on `side` stored in triangle `uplo`.
template <typename E>
static bool symmetric(cublasHandle_t h, Kind kind, int side, int uplo, int m, int n, E alpha, E beta,
                      bool device_scalars = false) {
    Case<E> t(kind, side, uplo, 0, m, n, alpha, beta);
    E *da = upload(t.a), *db = upload(t.b), *dc = upload(t.c);
    {
        Scalars<E> scalars(h, alpha, beta, device_scalars);
        Symm call = kind == HERMITIAN ? Calls<E>::hemm_ : Calls<E>::symm_;
        CUBLAS(call(h, side, uplo, m, n, scalars.alpha(), da, t.lda, db, t.ldb, scalars.beta(), dc, t.ldc));
    }
    char name[96];
    snprintf(name, sizeof name, "%s%s %s %s%s", Calls<E>::name, kind == HERMITIAN ? "hemm" : "symm", SIDES[side],
             TRIANGLES[uplo], device_scalars ? " device scalars" : "");
    bool ok = exact(name, download(dc, t.c.size()), t.want);
    for (E* p : {da, db, dc}) CHECK(cudaFree(p));
    return ok;
}

// trmm on an m x n B into C; `in_place`: into B itself (C is B, ldc ldb).
template <typename E>
static bool triangular(cublasHandle_t h, bool unit, int side, int uplo, int trans, int m, int n, E alpha,
                       bool in_place = false) {
    Case<E> t(unit ? UNIT : TRIANGULAR, side, uplo, trans, m, n, alpha, E(0));
    E *da = upload(t.a), *db = upload(t.b), *dc = upload(t.c);
    E* out = in_place ? db : dc;
    int ldc = in_place ? t.ldb : t.ldc;
    CUBLAS(Calls<E>::trmm_(h, side, uplo, trans, unit, m, n, &alpha, da, t.lda, db, t.ldb, out, ldc));
    std::vector<E> want = t.want;
    if (in_place) {
        // B's elements are the product's, its padding as it was.
        want = t.b;
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) want[i + j * t.ldb] = t.want[i + j * t.ldc];
    }
    char name[96];
    snprintf(name, sizeof name, "%strmm %s %s %s%s%s", Calls<E>::name, SIDES[side], TRIANGLES[uplo], OPS[trans],
             unit ? " unit" : "", in_place ? " in place" : "");
    bool ok = exact(name, download(out, want.size()), want);
    for (E* p : {da, db, dc}) CHECK(cudaFree(p));
    return ok;
}

int main(int argc, char** argv) {
    bool native = argc > 1 && strcmp(argv[1], "--native") == 0;
    cublasHandle_t h;
    CUBLAS(cublasCreate_v2(&h));
    bool ok = true;
    ok &= symmetric<float>(h, SYMMETRIC, 0, 0, 4, 3, 2.0f, -1.0f);
    ok &= symmetric<double>(h, SYMMETRIC, 1, 1, 3, 5, -1.0, 2.0);
    ok &= symmetric<c32>(h, SYMMETRIC, 0, 1, 3, 4, c32(1, 2), c32(0, 1));
    ok &= symmetric<c64>(h, SYMMETRIC, 1, 0, 5, 3, c64(2, -1), c64(1, 1));
    ok &= symmetric<double>(h, SYMMETRIC, 0, 1, 4, 2, 3.0, -2.0, true);
    ok &= symmetric<c32>(h, HERMITIAN, 0, 0, 4, 3, c32(2, 1), c32(-1, 0));
    ok &= symmetric<c64>(h, HERMITIAN, 1, 1, 3, 4, c64(-1, 2), c64(1, -1));
    ok &= triangular<float>(h, false, 0, 0, 0, 4, 3, 2.0f);
    ok &= triangular<double>(h, true, 1, 1, 1, 3, 4, -1.0);
    ok &= triangular<c32>(h, false, 0, 1, 2, 3, 5, c32(1, -1));
    ok &= triangular<c64>(h, true, 1, 0, 2, 4, 3, c64(2, 1));
    ok &= triangular<float>(h, false, 0, 1, 1, 5, 3, -2.0f, true);
    ok &= triangular<c64>(h, false, 1, 0, 0, 3, 4, c64(1, 1), true);
    // More elements of C than a block has threads: no ordering of the block's loads and stores
    // hides a product that read B while it wrote it.
    ok &= triangular<float>(h, false, 0, 0, 0, 40, 33, 1.0f, true);
    {
        // Wrong codes are refused, as cuBLAS refuses them.
        std::vector<float> v(16, 1.0f);
        float *d = upload(v), one = 1;
        cublasStatus_t s = cublasSsymm_v2(h, 2, 0, 2, 2, &one, d, 2, d + 4, 2, &one, d + 8, 2);
        printf("ssymm side 2: %d %s\n", (int)s, cublasGetStatusName(s));
        s = cublasStrmm_v2(h, 0, 0, 0, 2, 2, 2, &one, d, 2, d + 4, 2, d + 8, 2);
        printf("strmm diagonal 2: %d %s\n", (int)s, cublasGetStatusName(s));
        s = cublasSsymm_v2(h, 0, 0, 2, 2, &one, d, 1, d + 4, 2, &one, d + 8, 2);
        printf("ssymm lda 1: %d %s\n", (int)s, cublasGetStatusName(s));
        CHECK(cudaFree(d));
    }
    if (!native) {
        // alpha 0 reads no A (all NaN here): C = beta C, as reference BLAS's quick return.
        Case<float> t(SYMMETRIC, 0, 0, 0, 3, 2, 0.0f, 2.0f);
        for (float& x : t.a) x = poison<float>();
        for (int j = 0; j < 2; j++)
            for (int i = 0; i < 3; i++) t.want[i + j * t.ldc] = 2.0f * t.c[i + j * t.ldc];
        float *da = upload(t.a), *db = upload(t.b), *dc = upload(t.c), zero = 0, two = 2;
        CUBLAS(cublasSsymm_v2(h, 0, 0, 3, 2, &zero, da, t.lda, db, t.ldb, &two, dc, t.ldc));
        ok &= exact("ssymm alpha 0", download(dc, t.c.size()), t.want);
        for (float* p : {da, db, dc}) CHECK(cudaFree(p));
    }
    CUBLAS(cublasDestroy_v2(h));
    printf(ok ? "cublas_structured: all exact\n" : "cublas_structured: FAILED\n");
    return ok ? 0 : 1;
}
