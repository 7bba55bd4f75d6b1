// cuBLAS's symmetric rank-k updates from a plain CUDA program linked against libcublas.so.13:
// syrk (C = alpha op(A) op(A)^T + beta C), syrkx (op(A) op(B)^T) and syr2k (both products), on
// the lower or the upper triangle of C, operations N and T, in single, double and both complex
// precisions, scalars on the host or in device memory, C padded. Every element of C is checked
// exactly against a reference computed here (small integers): the triangle updated, the other
// triangle and the padding as they were.
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
}

// The functions of one element type.
template <typename E>
struct RankK;
#define RANK_K_OF(E, P, syrk, syrkx, syr2k)      \
    template <>                                  \
    struct RankK<E> {                            \
        static constexpr const char* name = P;   \
        static constexpr auto syrk_ = syrk;      \
        static constexpr auto syrkx_ = syrkx;    \
        static constexpr auto syr2k_ = syr2k;    \
    };
RANK_K_OF(float, "s", cublasSsyrk_v2, cublasSsyrkx, cublasSsyr2k_v2)
RANK_K_OF(double, "d", cublasDsyrk_v2, cublasDsyrkx, cublasDsyr2k_v2)
RANK_K_OF(c32, "c", cublasCsyrk_v2, cublasCsyrkx, cublasCsyr2k_v2)
RANK_K_OF(c64, "z", cublasZsyrk_v2, cublasZsyrkx, cublasZsyr2k_v2)

enum Kind { SYRK, SYRKX, SYR2K };
static const char* const KIND_NAMES[] = {"syrk", "syrkx", "syr2k"};

// One update of an n x n C (ldc n + 2) by op(A), op(B) n x k (stored padded by one row), on
// triangle `uplo` (0 lower, 1 upper), its scalars in device memory if `device_scalars`.
template <typename E>
static bool update(cublasHandle_t h, Kind kind, int uplo, int trans, int n, int k, E alpha, E beta,
                   bool device_scalars = false) {
    int rows = trans ? k : n, cols = trans ? n : k, lda = rows + 1, ldb = rows + 2, ldc = n + 2;
    auto a = values<E>((size_t)lda * cols, 1), b = kind == SYRK ? a : values<E>((size_t)ldb * cols, 2);
    if (kind == SYRK) ldb = lda;
    auto c = values<E>((size_t)ldc * n, 3), want = c;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) {
            if (uplo == 0 ? i < j : i > j) continue;
            E ab = 0, ba = 0;
            for (int p = 0; p < k; p++) {
                ab += op_at(a, lda, trans, i, p) * op_at(b, ldb, trans, j, p);
                ba += op_at(b, ldb, trans, i, p) * op_at(a, lda, trans, j, p);
            }
            want[i + j * ldc] = alpha * (kind == SYR2K ? ab + ba : ab) + beta * c[i + j * ldc];
        }
    E *da = upload(a), *db = upload(b), *dc = upload(c);
    {
        Scalars<E> scalars(h, alpha, beta, device_scalars);
        const E *pa = scalars.alpha(), *pb = scalars.beta();
        if (kind == SYRK) CUBLAS(RankK<E>::syrk_(h, uplo, trans, n, k, pa, da, lda, pb, dc, ldc));
        else if (kind == SYRKX) CUBLAS(RankK<E>::syrkx_(h, uplo, trans, n, k, pa, da, lda, db, ldb, pb, dc, ldc));
        else CUBLAS(RankK<E>::syr2k_(h, uplo, trans, n, k, pa, da, lda, db, ldb, pb, dc, ldc));
    }
    char name[96];
    snprintf(name, sizeof name, "%s%s %s %s%s", RankK<E>::name, KIND_NAMES[kind], uplo ? "upper" : "lower",
             trans ? "T" : "N", device_scalars ? " device scalars" : "");
    bool ok = exact(name, download(dc, c.size()), want);
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
    if (!native) {
        // A complex C is symmetric: the conjugate transpose (herk's) is refused, as cuBLAS's
        // documentation says.
        std::vector<c32> v(16, c32(1, 0));
        c32 *d = upload(v), one(1, 0);
        cublasStatus_t s = cublasCsyrk_v2(h, 0, CUBLAS_OP_C, 2, 2, &one, d, 2, &one, d + 8, 2);
        printf("csyrk operation C: %d %s\n", (int)s, cublasGetStatusName(s));
        CHECK(cudaFree(d));
    }
    CUBLAS(cublasDestroy_v2(h));
    printf(ok ? "cublas_rank_k: all exact\n" : "cublas_rank_k: FAILED\n");
    return ok ? 0 : 1;
}
