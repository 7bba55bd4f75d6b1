// cuBLAS's BLAS-like extensions from a plain CUDA program linked against libcublas.so.13: geam
// (sums, scalings and transposes of matrices: operations N, T and the conjugate transpose; in
// place as C = A and as C = B; beta 0 with no B, a plain transpose; scalars in device memory)
// dgmm (a diagonal on the left or on the right, a strided x, in place) and the packed storage
// of a triangle (trttp, tpttr), in single, double
// and both complex precisions, on padded matrices (what lies between columns must stay as it
// was). Every result is checked exactly against a reference computed here (small integers:
// every product and sum is exact).
// Usage: cublas_extensions [--native] (--native: leaves out what only the shim refuses: C, A
// and B the same matrix)
#include <complex>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cublas_helpers.h"
#include "cublas_typed.h"

// Matrices and scalars as untyped pointers: the same symbols, whatever the element type.
extern "C" {
#define GEAM(name)                                                                                                  \
    cublasStatus_t name(cublasHandle_t, int, int, int, int, const void*, const void*, int, const void*, const void*, \
                        int, void*, int);
#define DGMM(name) cublasStatus_t name(cublasHandle_t, int, int, int, const void*, int, const void*, int, void*, int);
GEAM(cublasSgeam)
GEAM(cublasDgeam)
GEAM(cublasCgeam)
GEAM(cublasZgeam)
DGMM(cublasSdgmm)
DGMM(cublasDdgmm)
DGMM(cublasCdgmm)
DGMM(cublasZdgmm)
#define TPTTR(name) cublasStatus_t name(cublasHandle_t, int, int, const void*, void*, int);
#define TRTTP(name) cublasStatus_t name(cublasHandle_t, int, int, const void*, int, void*);
TPTTR(cublasStpttr)
TPTTR(cublasDtpttr)
TPTTR(cublasCtpttr)
TPTTR(cublasZtpttr)
TRTTP(cublasStrttp)
TRTTP(cublasDtrttp)
TRTTP(cublasCtrttp)
TRTTP(cublasZtrttp)
}

// The functions of one element type.
template <typename E>
struct Ext;
#define EXT_OF(E, P, geam, dgmm, tpttr, trttp)              \
    template <>                                             \
    struct Ext<E> {                                         \
        static constexpr const char* name = P;              \
        static constexpr auto geam_ = geam;                 \
        static constexpr auto dgmm_ = dgmm;                 \
        static constexpr auto tpttr_ = tpttr;               \
        static constexpr auto trttp_ = trttp;               \
    };
EXT_OF(float, "s", cublasSgeam, cublasSdgmm, cublasStpttr, cublasStrttp)
EXT_OF(double, "d", cublasDgeam, cublasDdgmm, cublasDtpttr, cublasDtrttp)
EXT_OF(c32, "c", cublasCgeam, cublasCdgmm, cublasCtpttr, cublasCtrttp)
EXT_OF(c64, "z", cublasZgeam, cublasZdgmm, cublasZtpttr, cublasZtrttp)

// C = alpha op(A) + beta op(B) on padded matrices, C = A or C = B in place (`in_place` 'A' or
// 'B'), B left out when beta is 0 (`no_b`), the scalars in device memory.
template <typename E>
static bool geam(cublasHandle_t h, const char* what, int ta, int tb, int m, int n, E alpha, E beta, int pad,
                 char in_place = 0, bool no_b = false, bool device_scalars = false) {
    int lda = (ta ? n : m) + pad, ldb = (tb ? n : m) + pad + 1, ldc = m + pad;
    if (in_place == 'A') lda = ldc;
    if (in_place == 'B') ldb = ldc;
    auto a = values<E>((size_t)lda * (ta ? m : n), 1), b = values<E>((size_t)ldb * (tb ? m : n), 2);
    auto c = values<E>((size_t)ldc * n, 3);
    if (in_place == 'A') c = a;
    if (in_place == 'B') c = b;
    auto want = c;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            E sum = alpha * op_at(a, lda, ta, i, j);
            if (!no_b) sum += beta * op_at(b, ldb, tb, i, j);
            want[i + j * ldc] = sum;
        }
    E *da = upload(a), *db = upload(b), *dc = upload(c);
    Scalars<E> scalars(h, alpha, beta, device_scalars);
    const E* first = in_place == 'A' ? dc : da;
    const E* second = no_b ? nullptr : in_place == 'B' ? dc : db;
    CUBLAS(Ext<E>::geam_(h, ta, tb, m, n, scalars.alpha(), first, lda, scalars.beta(), second, ldb, dc, ldc));
    char name[96];
    snprintf(name, sizeof name, "%sgeam %s", Ext<E>::name, what);
    bool ok = exact(name, download(dc, c.size()), want);
    for (E* p : {da, db, dc}) CHECK(cudaFree(p));
    return ok;
}

// C = A diag(x) (side 1) or diag(x) A (side 0), x every incx-th element, C = A in place.
template <typename E>
static bool dgmm(cublasHandle_t h, const char* what, int side, int m, int n, int incx, int pad, bool in_place = false) {
    int lda = m + pad, ldc = in_place ? lda : m + pad + 2, len = side ? n : m;
    auto a = values<E>((size_t)lda * n, 4), x = values<E>((size_t)(len - 1) * incx + 1, 5);
    auto c = in_place ? a : values<E>((size_t)ldc * n, 6);
    auto want = c;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) want[i + j * ldc] = a[i + j * lda] * x[(side ? j : i) * incx];
    E *da = upload(a), *dx = upload(x), *dc = in_place ? da : upload(c);
    CUBLAS(Ext<E>::dgmm_(h, side, m, n, da, lda, dx, incx, dc, ldc));
    char name[96];
    snprintf(name, sizeof name, "%sdgmm %s", Ext<E>::name, what);
    bool ok = exact(name, download(dc, c.size()), want);
    CHECK(cudaFree(da));
    CHECK(cudaFree(dx));
    if (!in_place) CHECK(cudaFree(dc));
    return ok;
}

// trttp then tpttr: triangle uplo (0 lower, 1 upper) of a padded n x n A into AP (BLAS's
// packed order, column by column), then back into a matrix of markers, whose other triangle
// and padding must keep them.
template <typename E>
static bool packed(cublasHandle_t h, int uplo) {
    const int n = 6, lda = n + 2;
    auto a = values<E>((size_t)lda * n, 7);
    std::vector<E> want_ap, markers(a.size(), make<E>(99, -99));
    auto want_back = markers;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++)
            if (uplo ? i <= j : i >= j) {
                want_ap.push_back(a[i + j * lda]);
                want_back[i + j * lda] = a[i + j * lda];
            }
    E *da = upload(a), *dap = upload(std::vector<E>(want_ap.size(), make<E>(7, 7))), *dback = upload(markers);
    CUBLAS(Ext<E>::trttp_(h, uplo, n, da, lda, dap));
    CUBLAS(Ext<E>::tpttr_(h, uplo, n, dap, dback, lda));
    char packing[64], unpacking[64];
    snprintf(packing, sizeof packing, "%strttp %s", Ext<E>::name, uplo ? "upper" : "lower");
    snprintf(unpacking, sizeof unpacking, "%stpttr %s", Ext<E>::name, uplo ? "upper" : "lower");
    bool ok = exact(packing, download(dap, want_ap.size()), want_ap);
    ok &= exact(unpacking, download(dback, markers.size()), want_back);
    for (E* p : {da, dap, dback}) CHECK(cudaFree(p));
    return ok;
}

int main(int argc, char** argv) {
    bool native = argc > 1 && strcmp(argv[1], "--native") == 0;
    cublasHandle_t h;
    CUBLAS(cublasCreate_v2(&h));
    bool ok = true;
    ok &= geam<float>(h, "NN", 0, 0, 5, 4, 2.0f, -3.0f, 1);
    ok &= geam<double>(h, "TN", 1, 0, 3, 6, -1.0, 2.0, 2);
    ok &= geam<c32>(h, "CT", 2, 1, 4, 3, c32(1, 2), c32(-1, 1), 1);
    ok &= geam<c64>(h, "NC", 0, 2, 3, 5, c64(2, -1), c64(0, 3), 0);
    ok &= geam<double>(h, "device scalars", 0, 1, 4, 4, 3.0, -2.0, 1, 0, false, true);
    ok &= geam<float>(h, "transpose", 1, 0, 7, 5, 1.0f, 0.0f, 0, 0, true);
    ok &= geam<c32>(h, "in place C = A", 0, 1, 4, 4, c32(2, 1), c32(1, -1), 1, 'A');
    ok &= geam<c64>(h, "in place C = B", 2, 0, 3, 3, c64(-1, 2), c64(3, 0), 2, 'B');
    ok &= dgmm<float>(h, "left incx 2", 0, 5, 3, 2, 1);
    ok &= dgmm<double>(h, "right", 1, 4, 6, 1, 0);
    ok &= dgmm<c32>(h, "left", 0, 3, 4, 1, 2);
    ok &= dgmm<c64>(h, "right incx 3", 1, 2, 5, 3, 1);
    ok &= dgmm<float>(h, "right in place", 1, 4, 3, 1, 1, true);
    ok &= packed<float>(h, 0) && packed<double>(h, 1) && packed<c32>(h, 1) && packed<c64>(h, 0);

    if (!native) {
        // What the shim refuses: C, A and B the same matrix; and what cuBLAS refuses: in place
        // with a transpose (x read backwards: cublas_backwards.cu).
        std::vector<float> v(16, 1.0f);
        float *d = upload(v), one = 1.0f;
        cublasStatus_t s = cublasSgeam(h, 0, 0, 2, 2, &one, d, 2, &one, d, 2, d, 2);
        printf("geam C = A = B: %d %s\n", (int)s, cublasGetStatusName(s));
        s = cublasSgeam(h, 1, 0, 2, 2, &one, d, 2, &one, d + 8, 2, d, 2);
        printf("geam in place transposed: %d %s\n", (int)s, cublasGetStatusName(s));
        CHECK(cudaFree(d));
    }
    CUBLAS(cublasDestroy_v2(h));
    printf(ok ? "cublas_extensions: all exact\n" : "cublas_extensions: FAILED\n");
    return ok ? 0 : 1;
}
