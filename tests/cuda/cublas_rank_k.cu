// cuBLAS's symmetric rank-k updates from a plain CUDA program linked against libcublas.so.13:
// syrk (C = alpha op(A) op(A)^T + beta C), syrkx (op(A) op(B)^T) and syr2k (both products), on
// the lower or the upper triangle of C, operations N and T, in single, double and both complex
// precisions, scalars on the host or in device memory, C padded; and their Hermitian forms
// herk, herkx and her2k (the conjugate transpose, operations N and C, a real beta and herk's
// real alpha, C's diagonal made real). Every element of C is checked exactly against a
// reference computed here (small integers): the triangle updated, the other triangle and the
// padding as they were.
// Usage: cublas_rank_k [--native] (--native: leaves out what the shim refuses that cuBLAS's
// documentation does too, so that a native run does not depend on it)
#include <complex>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cublas_helpers.h"
#include "cublas_typed.h"

// Matrices and scalars as untyped pointers: the same symbols, whatever the element type.
extern "C" {
#define SYRK(name) \
    cublasStatus_t name(cublasHandle_t, int, int, int, int, const void*, const void*, int, const void*, void*, int);
#define SYRKX(name)                                                                                                \
    cublasStatus_t name(cublasHandle_t, int, int, int, int, const void*, const void*, int, const void*, int,       \
                        const void*, void*, int);
SYRK(cublasSsyrk_v2)
SYRK(cublasDsyrk_v2)
SYRK(cublasCsyrk_v2)
SYRK(cublasZsyrk_v2)
SYRKX(cublasSsyrkx)
SYRKX(cublasDsyrkx)
SYRKX(cublasCsyrkx)
SYRKX(cublasZsyrkx)
SYRKX(cublasSsyr2k_v2)
SYRKX(cublasDsyr2k_v2)
SYRKX(cublasCsyr2k_v2)
SYRKX(cublasZsyr2k_v2)
SYRK(cublasCherk_v2)
SYRK(cublasZherk_v2)
SYRKX(cublasCherkx)
SYRKX(cublasZherkx)
SYRKX(cublasCher2k_v2)
SYRKX(cublasZher2k_v2)
}

// The three updates of one element type: by one operand, by two, by both products (syrk,
// syrkx, syr2k; herk, herkx, her2k), as one_, x_ and two_.
template <typename E>
struct RankK;
template <typename E>
struct Hermitian;
#define UPDATES_OF(S, E, P, one, x, two)         \
    template <>                                  \
    struct S<E> {                                \
        static constexpr const char* name = P;   \
        static constexpr auto one_ = one;        \
        static constexpr auto x_ = x;            \
        static constexpr auto two_ = two;        \
    };
UPDATES_OF(RankK, float, "s", cublasSsyrk_v2, cublasSsyrkx, cublasSsyr2k_v2)
UPDATES_OF(RankK, double, "d", cublasDsyrk_v2, cublasDsyrkx, cublasDsyr2k_v2)
UPDATES_OF(RankK, c32, "c", cublasCsyrk_v2, cublasCsyrkx, cublasCsyr2k_v2)
UPDATES_OF(RankK, c64, "z", cublasZsyrk_v2, cublasZsyrkx, cublasZsyr2k_v2)
UPDATES_OF(Hermitian, c32, "c", cublasCherk_v2, cublasCherkx, cublasCher2k_v2)
UPDATES_OF(Hermitian, c64, "z", cublasZherk_v2, cublasZherkx, cublasZher2k_v2)

enum Kind { SYRK, SYRKX, SYR2K };
static const char* const KIND_NAMES[] = {"syrk", "syrkx", "syr2k"};
static const char* const HERMITIAN_NAMES[] = {"herk", "herkx", "her2k"};

// An update's operands, A and B (B is A for one operand; op(A), op(B) n x k, stored padded by
// one and two rows), C (n x n, ldc n + 2), and the C expected after it on triangle `uplo`:
// products with the transpose, or (`hermitian`) with the conjugate transpose, her2k's second by
// conj(alpha), the diagonal real.
template <typename E>
struct Case {
    int lda, ldb, ldc;
    std::vector<E> a, b, c, want;
    Case(Kind kind, int uplo, int trans, int n, int k, E alpha, E beta, bool hermitian) {
        int rows = trans ? k : n, cols = trans ? n : k;
        lda = rows + 1, ldb = kind == SYRK ? lda : rows + 2, ldc = n + 2;
        a = values<E>((size_t)lda * cols, 1);
        b = kind == SYRK ? a : values<E>((size_t)ldb * cols, 2);
        c = values<E>((size_t)ldc * n, 3);
        want = c;
        auto with = [&](E x) { return hermitian ? conj_of(x) : x; };
        for (int j = 0; j < n; j++)
            for (int i = 0; i < n; i++) {
                if (uplo == 0 ? i < j : i > j) continue;
                E ab = 0, ba = 0;
                for (int p = 0; p < k; p++) {
                    ab += op_at(a, lda, trans, i, p) * with(op_at(b, ldb, trans, j, p));
                    ba += op_at(b, ldb, trans, i, p) * with(op_at(a, lda, trans, j, p));
                }
                E v = alpha * ab + (kind == SYR2K ? with(alpha) * ba : E(0)) + beta * c[i + j * ldc];
                want[i + j * ldc] = hermitian && i == j ? real_only(v) : v;
            }
    }
};

// One update of an n x n C (ldc n + 2) by op(A), op(B) n x k (stored padded by one row), on
// triangle `uplo` (0 lower, 1 upper), its scalars in device memory if `device_scalars`.
template <typename E>
static bool update(cublasHandle_t h, Kind kind, int uplo, int trans, int n, int k, E alpha, E beta,
                   bool device_scalars = false) {
    Case<E> t(kind, uplo, trans, n, k, alpha, beta, false);
    int lda = t.lda, ldb = t.ldb, ldc = t.ldc;
    E *da = upload(t.a), *db = upload(t.b), *dc = upload(t.c);
    {
        Scalars<E> scalars(h, alpha, beta, device_scalars);
        const E *pa = scalars.alpha(), *pb = scalars.beta();
        if (kind == SYRK) CUBLAS(RankK<E>::one_(h, uplo, trans, n, k, pa, da, lda, pb, dc, ldc));
        else if (kind == SYRKX) CUBLAS(RankK<E>::x_(h, uplo, trans, n, k, pa, da, lda, db, ldb, pb, dc, ldc));
        else CUBLAS(RankK<E>::two_(h, uplo, trans, n, k, pa, da, lda, db, ldb, pb, dc, ldc));
    }
    char name[96];
    snprintf(name, sizeof name, "%s%s %s %s%s", RankK<E>::name, KIND_NAMES[kind], uplo ? "upper" : "lower",
             trans ? "T" : "N", device_scalars ? " device scalars" : "");
    bool ok = exact(name, download(dc, t.c.size()), t.want);
    for (E* p : {da, db, dc}) CHECK(cudaFree(p));
    return ok;
}

// One Hermitian update (herk for SYRK, herkx for SYRKX, her2k for SYR2K) of an n x n C (ldc
// n + 2), operation `trans` N (0) or C (2): as update() with the conjugate transpose, her2k's
// second product by conj(alpha), a real beta, herk's alpha its real part; C's diagonal, which
// starts with imaginary parts, comes out real.
template <typename E>
static bool hermitian(cublasHandle_t h, Kind kind, int uplo, int trans, int n, int k, E alpha,
                      typename E::value_type beta) {
    typename E::value_type real_alpha = alpha.real();
    if (kind == SYRK) alpha = E(real_alpha, 0);
    Case<E> t(kind, uplo, trans, n, k, alpha, E(beta, 0), true);
    int lda = t.lda, ldb = t.ldb, ldc = t.ldc;
    E *da = upload(t.a), *db = upload(t.b), *dc = upload(t.c);
    if (kind == SYRK) CUBLAS(Hermitian<E>::one_(h, uplo, trans, n, k, &real_alpha, da, lda, &beta, dc, ldc));
    else if (kind == SYRKX) CUBLAS(Hermitian<E>::x_(h, uplo, trans, n, k, &alpha, da, lda, db, ldb, &beta, dc, ldc));
    else CUBLAS(Hermitian<E>::two_(h, uplo, trans, n, k, &alpha, da, lda, db, ldb, &beta, dc, ldc));
    char name[96];
    snprintf(name, sizeof name, "%s%s %s %s", Hermitian<E>::name, HERMITIAN_NAMES[kind], uplo ? "upper" : "lower",
             trans ? "C" : "N");
    bool ok = exact(name, download(dc, t.c.size()), t.want);
    for (E* p : {da, db, dc}) CHECK(cudaFree(p));
    return ok;
}

int main(int argc, char** argv) {
    bool native = argc > 1 && strcmp(argv[1], "--native") == 0;
    cublasHandle_t h;
    CUBLAS(cublasCreate_v2(&h));
    bool ok = true;
    ok &= update<float>(h, SYRK, 0, 0, 5, 3, 2.0f, -1.0f);
    ok &= update<double>(h, SYRK, 1, 1, 4, 6, -1.0, 3.0);
    ok &= update<c32>(h, SYRK, 0, 1, 4, 3, c32(1, 2), c32(0, 1));
    ok &= update<c64>(h, SYRK, 1, 0, 3, 4, c64(2, -1), c64(1, 1));
    ok &= update<float>(h, SYRKX, 1, 0, 4, 2, 1.0f, 2.0f);
    ok &= update<c64>(h, SYRKX, 0, 1, 5, 3, c64(-1, 1), c64(2, 0));
    ok &= update<double>(h, SYR2K, 0, 0, 4, 3, 2.0, 1.0);
    ok &= update<c32>(h, SYR2K, 1, 1, 3, 5, c32(1, -1), c32(-2, 1));
    ok &= update<double>(h, SYRK, 0, 0, 6, 2, 3.0, -2.0, true);
    ok &= hermitian<c32>(h, SYRK, 0, 0, 5, 3, c32(2, 0), -1.0f);
    ok &= hermitian<c64>(h, SYRK, 1, 2, 4, 6, c64(-1, 0), 3.0);
    ok &= hermitian<c32>(h, SYRKX, 1, 0, 4, 2, c32(1, 2), 2.0f);
    ok &= hermitian<c64>(h, SYRKX, 0, 2, 3, 5, c64(-2, 1), 0.0);
    ok &= hermitian<c64>(h, SYR2K, 0, 2, 3, 4, c64(2, -1), 1.0);
    ok &= hermitian<c32>(h, SYR2K, 1, 0, 4, 3, c32(-1, 1), -2.0f);
    if (!native) {
        // A complex C is symmetric: the conjugate transpose (herk's) is refused, as cuBLAS's
        // documentation says.
        std::vector<c32> v(16, c32(1, 0));
        c32 *d = upload(v), one(1, 0);
        cublasStatus_t s = cublasCsyrk_v2(h, 0, CUBLAS_OP_C, 2, 2, &one, d, 2, &one, d + 8, 2);
        printf("csyrk operation C: %d %s\n", (int)s, cublasGetStatusName(s));
        // A Hermitian C: the plain transpose (syrk's) is refused.
        float real_one = 1;
        s = cublasCherk_v2(h, 0, CUBLAS_OP_T, 2, 2, &real_one, d, 2, &real_one, d + 8, 2);
        printf("cherk operation T: %d %s\n", (int)s, cublasGetStatusName(s));
        CHECK(cudaFree(d));
    }
    CUBLAS(cublasDestroy_v2(h));
    printf(ok ? "cublas_rank_k: all exact\n" : "cublas_rank_k: FAILED\n");
    return ok ? 0 : 1;
}
