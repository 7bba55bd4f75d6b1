// cuBLAS's batched matrix-vector products and the complex level-3 forms that name an algorithm
// or take types, from a plain CUDA program linked against libcublas.so.13:
// - gemvStridedBatched in four precisions (N, T, C; C into a strided y too), gemvBatched on
//   arrays of addresses evenly and unevenly spaced;
// - the mixed-precision forms HSH, HSS, TST and TSS (binary16 or bfloat16 A and x; y of their
//   type or f32; f32 scalars), strided and on arrays;
// - cublasGemmBatchedEx (binary16 A and B, f32 C) on arrays of addresses;
// - Cgemm3m, Zgemm3m, Cgemm3mStridedBatched, Cgemm3mBatched, CgemmEx and Cgemm3mEx on complex
//   f32 matrices, and CsyrkEx, Csyrk3mEx, CherkEx and Cherk3mEx.
// Every result is checked exactly, the padding and the vectors' gaps included, against a
// reference computed here (small integers: every product and sum is exact, in binary16 too).
// Usage: cublas_batched_vectors [--native] (--native: leaves out what the shim refuses that
// cuBLAS serves: complex matrices of CUDA_C_8I)
#include <complex>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cublas_helpers.h"
#include "cublas_typed.h"

// Scalars and matrices as untyped pointers: the same symbols, whatever the type.
extern "C" {
#define GEMV_STRIDED(name)                                                                                     \
    cublasStatus_t name(cublasHandle_t, int, int, int, const void*, const void*, int, long long, const void*, \
                        int, long long, const void*, void*, int, long long, int);
#define GEMV_ARRAYS(name)                                                                                   \
    cublasStatus_t name(cublasHandle_t, int, int, int, const void*, const void* const*, int, const void* const*, \
                        int, const void*, void* const*, int, int);
GEMV_STRIDED(cublasSgemvStridedBatched) GEMV_STRIDED(cublasDgemvStridedBatched)
GEMV_STRIDED(cublasCgemvStridedBatched) GEMV_STRIDED(cublasZgemvStridedBatched)
GEMV_STRIDED(cublasHSHgemvStridedBatched) GEMV_STRIDED(cublasHSSgemvStridedBatched)
GEMV_STRIDED(cublasTSTgemvStridedBatched) GEMV_STRIDED(cublasTSSgemvStridedBatched)
GEMV_ARRAYS(cublasSgemvBatched) GEMV_ARRAYS(cublasDgemvBatched) GEMV_ARRAYS(cublasCgemvBatched)
GEMV_ARRAYS(cublasZgemvBatched) GEMV_ARRAYS(cublasHSHgemvBatched) GEMV_ARRAYS(cublasHSSgemvBatched)
GEMV_ARRAYS(cublasTSTgemvBatched) GEMV_ARRAYS(cublasTSSgemvBatched)
cublasStatus_t cublasGemmBatchedEx(cublasHandle_t, int, int, int, int, int, const void*, const void* const*, int,
                                   int, const void* const*, int, int, const void*, void* const*, int, int, int, int,
                                   int);
#define GEMM(name)                                                                                                \
    cublasStatus_t name(cublasHandle_t, int, int, int, int, int, const void*, const void*, int, const void*, int, \
                        const void*, void*, int);
GEMM(cublasCgemm3m) GEMM(cublasZgemm3m)
cublasStatus_t cublasCgemm3mStridedBatched(cublasHandle_t, int, int, int, int, int, const void*, const void*, int,
                                           long long, const void*, int, long long, const void*, void*, int, long long,
                                           int);
cublasStatus_t cublasCgemm3mBatched(cublasHandle_t, int, int, int, int, int, const void*, const void* const*, int,
                                    const void* const*, int, const void*, void* const*, int, int);
#define GEMM_EX(name)                                                                                         \
    cublasStatus_t name(cublasHandle_t, int, int, int, int, int, const void*, const void*, int, int, const void*, \
                        int, int, const void*, void*, int, int);
GEMM_EX(cublasCgemmEx) GEMM_EX(cublasCgemm3mEx)
#define RANK_K_EX(name) \
    cublasStatus_t name(cublasHandle_t, int, int, int, int, const void*, const void*, int, int, const void*, void*, int, int);
RANK_K_EX(cublasCsyrkEx) RANK_K_EX(cublasCsyrk3mEx) RANK_K_EX(cublasCherkEx) RANK_K_EX(cublasCherk3mEx)
}

enum { R_32F = 0, R_16F = 2, C_32F = 4, C_64F = 5, C_8I = 7, COMPUTE_32F = 68 };
static const char* OPS[] = {"N", "T", "C"};

// An element of a mixed-precision operand: its value's bits as binary16, bfloat16 or f32.
enum Kind { F32, F16, BF16 };
static size_t bytes_of(Kind k) { return k == F32 ? 4 : 2; }
static void put(std::vector<unsigned char>& v, Kind k, size_t i, float value) {
    if (k == F32) {
        memcpy(&v[i * 4], &value, 4);
        return;
    }
    unsigned short bits = k == F16 ? half_of(value) : bfloat16_of(value);
    memcpy(&v[i * 2], &bits, 2);
}
static float get(const std::vector<unsigned char>& v, Kind k, size_t i) {
    float f;
    if (k == F32) {
        memcpy(&f, &v[i * 4], 4);
        return f;
    }
    unsigned short bits;
    memcpy(&bits, &v[i * 2], 2);
    return k == F16 ? float_of_half(bits) : float_of_bfloat16(bits);
}

// y_b = alpha op(A_b) x_b + beta y_b for b < count, each operand `stride` elements after the
// last (E: the elements' type, computed as E).
template <typename E>
static void gemv_reference(int trans, int m, int n, E alpha, const std::vector<E>& a, int lda, long long sa,
                           const std::vector<E>& x, int incx, long long sx, E beta, std::vector<E>& y, int incy,
                           long long sy, int count) {
    int rows = trans == 0 ? m : n, cols = trans == 0 ? n : m;
    for (int b = 0; b < count; b++)
        for (int i = 0; i < rows; i++) {
            E acc = 0;
            for (int j = 0; j < cols; j++) {
                E v = a[b * sa + (trans == 0 ? i + (size_t)j * lda : j + (size_t)i * lda)];
                acc += (trans == 2 ? conj_of(v) : v) * x[b * sx + (size_t)j * incx];
            }
            E& out = y[b * sy + (size_t)i * incy];
            out = alpha * acc + beta * out;
        }
}

// The call of one precision's gemvStridedBatched and gemvBatched.
template <typename E>
struct Gemv;
#define GEMV_OF(E, prefix)                                                                \
    template <>                                                                           \
    struct Gemv<E> {                                                                      \
        static constexpr const char* name = #prefix;                                      \
        static constexpr auto strided = cublas##prefix##gemvStridedBatched;              \
        static constexpr auto arrays = cublas##prefix##gemvBatched;                      \
    };
GEMV_OF(float, S)
GEMV_OF(double, D)
GEMV_OF(c32, C)
GEMV_OF(c64, Z)

// gemvStridedBatched of 3 products, A m x n padded, x and y strided (y with increment incy).
template <typename E>
static bool gemv_strided(cublasHandle_t h, int trans, int incy) {
    const int m = 7, n = 5, lda = m + 2, incx = 2, count = 3, rows = trans == 0 ? m : n, cols = trans == 0 ? n : m;
    const long long sa = (long long)lda * n + 3, sx = (long long)cols * incx + 1, sy = (long long)rows * incy + 2;
    auto a = values<E>(sa * count, 1), x = values<E>(sx * count, 2), y = values<E>(sy * count, 3), want = y;
    E alpha = make<E>(2, 1), beta = make<E>(-1, 2);
    gemv_reference(trans, m, n, alpha, a, lda, sa, x, incx, sx, beta, want, incy, sy, count);
    E *da = upload(a), *dx = upload(x), *dy = upload(y);
    CUBLAS(Gemv<E>::strided(h, trans, m, n, &alpha, da, lda, sa, dx, incx, sx, &beta, dy, incy, sy, count));
    char name[96];
    snprintf(name, sizeof name, "%sgemvStridedBatched %s incy %d", Gemv<E>::name, OPS[trans], incy);
    bool ok = exact(name, download(dy, want.size()), want);
    for (E* p : {da, dx, dy}) CHECK(cudaFree(p));
    return ok;
}

// gemvBatched of 4 products whose operands lie in one allocation each, `spacing` elements
// apart, or (uneven) at the offsets of `uneven`.
template <typename E>
static bool gemv_arrays(cublasHandle_t h, int trans, bool uneven) {
    const int m = 6, n = 4, lda = m + 1, incx = 1, incy = 2, count = 4, rows = trans == 0 ? m : n;
    const size_t room = 64, offsets[2][4] = {{0, 64, 128, 192}, {0, 128, 64, 200}};
    auto a = values<E>(room * 4 + 64, 4), x = values<E>(room * 4 + 64, 5), y = values<E>(room * 4 + 64, 6), want = y;
    E alpha = make<E>(1, -2), beta = make<E>(2, 0);
    E *da = upload(a), *dx = upload(x), *dy = upload(y);
    std::vector<const E*> pa, px;
    std::vector<E*> py;
    for (int b = 0; b < count; b++) {
        size_t at = offsets[uneven][b];
        pa.push_back(da + at), px.push_back(dx + at), py.push_back(dy + at);
        std::vector<E> ab(a.begin() + at, a.end()), xb(x.begin() + at, x.end()), yb(want.begin() + at, want.end());
        gemv_reference(trans, m, n, alpha, ab, lda, 0, xb, incx, 0, beta, yb, incy, 0, 1);
        for (int i = 0; i < rows; i++) want[at + (size_t)i * incy] = yb[(size_t)i * incy];
    }
    const E **dpa = upload(pa), **dpx = upload(px);
    E** dpy = upload(py);
    CUBLAS(Gemv<E>::arrays(h, trans, m, n, &alpha, (const void* const*)dpa, lda, (const void* const*)dpx, incx, &beta,
                           (void* const*)dpy, incy, count));
    char name[96];
    snprintf(name, sizeof name, "%sgemvBatched %s%s", Gemv<E>::name, OPS[trans], uneven ? " uneven" : "");
    bool ok = exact(name, download(dy, want.size()), want);
    for (void* p : {(void*)da, (void*)dx, (void*)dy, (void*)dpa, (void*)dpx, (void*)dpy}) CHECK(cudaFree(p));
    return ok;
}

// A mixed-precision form (`name`, A and x of `in`, y of `out`) of 3 products, strided or on
// arrays of addresses; the products computed in f32 and rounded once to y's type (small
// integers: exact).
typedef cublasStatus_t (*StridedCall)(cublasHandle_t, int, int, int, const void*, const void*, int, long long,
                                      const void*, int, long long, const void*, void*, int, long long, int);
typedef cublasStatus_t (*ArraysCall)(cublasHandle_t, int, int, int, const void*, const void* const*, int,
                                     const void* const*, int, const void*, void* const*, int, int);
static bool gemv_mixed(cublasHandle_t h, const char* name, StridedCall strided, ArraysCall arrays, Kind in, Kind out,
                       int trans) {
    const int m = 5, n = 4, lda = 6, incx = 2, incy = 1, count = 3;
    const long long sa = lda * n, sx = 16, sy = 8;
    // y's allocation twice the batch's span: a launch that spaced y's in elements of another
    // width would not be refused for running past it, and would show in the results.
    auto fa = values<float>(sa * count, 7), fx = values<float>(sx * count, 8), fy = values<float>(sy * count * 2, 9);
    std::vector<unsigned char> a(fa.size() * bytes_of(in)), x(fx.size() * bytes_of(in)), y(fy.size() * bytes_of(out));
    for (size_t i = 0; i < fa.size(); i++) put(a, in, i, fa[i]);
    for (size_t i = 0; i < fx.size(); i++) put(x, in, i, fx[i]);
    for (size_t i = 0; i < fy.size(); i++) put(y, out, i, fy[i]);
    const float alpha = 2, beta = -1;
    std::vector<float> want = fy;
    gemv_reference(trans, m, n, alpha, fa, lda, sa, fx, incx, sx, beta, want, incy, sy, count);
    unsigned char *da = upload(a), *dx = upload(x), *dy = upload(y);
    bool ok = true;
    for (bool on_arrays : {false, true}) {
        CHECK(cudaMemcpy(dy, y.data(), y.size(), cudaMemcpyHostToDevice));
        if (on_arrays) {
            std::vector<const void*> pa, px;
            std::vector<void*> py;
            for (int b = 0; b < count; b++) {
                pa.push_back(da + b * sa * bytes_of(in)), px.push_back(dx + b * sx * bytes_of(in));
                py.push_back(dy + b * sy * bytes_of(out));
            }
            const void **dpa = upload(pa), **dpx = upload(px);
            void** dpy = upload(py);
            CUBLAS(arrays(h, trans, m, n, &alpha, dpa, lda, dpx, incx, &beta, dpy, incy, count));
            for (void* p : {(void*)dpa, (void*)dpx, (void*)dpy}) CHECK(cudaFree(p));
        } else {
            CUBLAS(strided(h, trans, m, n, &alpha, da, lda, sa, dx, incx, sx, &beta, dy, incy, sy, count));
        }
        auto got_bytes = download(dy, y.size());
        std::vector<float> got(want.size());
        for (size_t i = 0; i < got.size(); i++) got[i] = get(got_bytes, out, i);
        char what[96];
        snprintf(what, sizeof what, "%s %s %s", name, on_arrays ? "gemvBatched" : "gemvStridedBatched", OPS[trans]);
        ok &= exact(what, got, want);
    }
    for (void* p : {(void*)da, (void*)dx, (void*)dy}) CHECK(cudaFree(p));
    return ok;
}

// cublasGemmBatchedEx: binary16 A (m x k) and B (k x n), f32 C, 3 products on arrays, in
// order (evenly spaced, each array in its own type's elements: one strided launch) or not.
static bool gemm_batched_ex(cublasHandle_t h, bool in_order) {
    const int m = 4, n = 3, k = 5, count = 3, lda = m, ldb = k, ldc = m + 1;
    const size_t sa = 32, sb = 24, sc = 24;
    auto fa = values<float>(sa * count, 10), fb = values<float>(sb * count, 11), fc = values<float>(sc * count, 12);
    std::vector<unsigned char> a(fa.size() * 2), b(fb.size() * 2);
    for (size_t i = 0; i < fa.size(); i++) put(a, F16, i, fa[i]);
    for (size_t i = 0; i < fb.size(); i++) put(b, F16, i, fb[i]);
    const float alpha = 1, beta = 2;
    std::vector<float> want = fc;
    for (int p = 0; p < count; p++)
        reference(false, false, m, n, k, alpha, &fa[p * sa], lda, &fb[p * sb], ldb, beta, &want[p * sc], ldc);
    unsigned char *da = upload(a), *db = upload(b);
    float* dc = upload(fc);
    // Out of order: the second and third products swapped, not evenly spaced.
    std::vector<const void*> pa, pb;
    std::vector<void*> pc;
    for (int p : in_order ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 2, 1}) pa.push_back(da + p * sa * 2), pb.push_back(db + p * sb * 2), pc.push_back(dc + p * sc);
    const void **dpa = upload(pa), **dpb = upload(pb);
    void** dpc = upload(pc);
    CUBLAS(cublasGemmBatchedEx(h, 0, 0, m, n, k, &alpha, dpa, R_16F, lda, dpb, R_16F, ldb, &beta, dpc, R_32F, ldc, count,
                               COMPUTE_32F, -1));
    bool ok = exact(in_order ? "GemmBatchedEx f16 into f32" : "GemmBatchedEx f16 into f32 out of order",
                    download(dc, want.size()), want);
    for (void* p : {(void*)da, (void*)db, (void*)dc, (void*)dpa, (void*)dpb, (void*)dpc}) CHECK(cudaFree(p));
    return ok;
}

// The complex gemm forms that name an algorithm (3m) or take types (Ex): C = alpha op(A) op(B)
// + beta C, A m x k (op N) or k x m (op C), B k x n.
template <typename E>
static bool complex_gemm(cublasHandle_t h, const char* name, int form, int opa) {
    const int m = 5, n = 4, k = 3, lda = opa == 0 ? m + 1 : k + 1, ldb = k + 2, ldc = m + 1, count = form == 2 ? 2 : 1;
    const long long sa = (long long)lda * (opa == 0 ? k : m), sb = (long long)ldb * n, sc = (long long)ldc * n;
    auto a = values<E>(sa * count, 13), b = values<E>(sb * count, 14), c = values<E>(sc * count, 15), want = c;
    E alpha = make<E>(1, 2), beta = make<E>(-1, 1);
    for (int p = 0; p < count; p++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                E acc = 0;
                for (int q = 0; q < k; q++) {
                    E v = a[p * sa + (opa == 0 ? i + q * lda : q + i * lda)];
                    acc += (opa == 2 ? conj_of(v) : v) * b[p * sb + q + j * ldb];
                }
                E& out = want[p * sc + i + j * ldc];
                out = alpha * acc + beta * out;
            }
    E *da = upload(a), *db = upload(b), *dc = upload(c);
    switch (form) {
    case 0:  // Cgemm3m, Zgemm3m
        CUBLAS((sizeof(E) == 8 ? cublasCgemm3m : cublasZgemm3m)(h, opa, 0, m, n, k, &alpha, da, lda, db, ldb, &beta, dc,
                                                                 ldc));
        break;
    case 1:  // CgemmEx, Cgemm3mEx on C_32F
        CUBLAS((strstr(name, "3m") ? cublasCgemm3mEx : cublasCgemmEx)(h, opa, 0, m, n, k, &alpha, da, C_32F, lda, db,
                                                                       C_32F, ldb, &beta, dc, C_32F, ldc));
        break;
    case 2:  // Cgemm3mStridedBatched
        CUBLAS(cublasCgemm3mStridedBatched(h, opa, 0, m, n, k, &alpha, da, lda, sa, db, ldb, sb, &beta, dc, ldc, sc,
                                           count));
        break;
    default: {  // Cgemm3mBatched, one product
        const E** dpa = upload(std::vector<const E*>{da});
        const E** dpb = upload(std::vector<const E*>{db});
        E** dpc = upload(std::vector<E*>{dc});
        CUBLAS(cublasCgemm3mBatched(h, opa, 0, m, n, k, &alpha, (const void* const*)dpa, lda, (const void* const*)dpb,
                                    ldb, &beta, (void* const*)dpc, ldc, 1));
        for (void* p : {(void*)dpa, (void*)dpb, (void*)dpc}) CHECK(cudaFree(p));
    }
    }
    char what[64];
    snprintf(what, sizeof what, "%s %s", name, OPS[opa]);
    bool ok = exact(what, download(dc, want.size()), want);
    for (E* p : {da, db, dc}) CHECK(cudaFree(p));
    return ok;
}

// CsyrkEx, Csyrk3mEx (C = alpha op(A) op(A)^T + beta C) and CherkEx, Cherk3mEx (alpha op(A)
// op(A)^H + beta C, real scalars, C's diagonal made real), the lower triangle of C n x n, A
// n x k (op N); the upper triangle untouched.
static bool rank_k_ex(cublasHandle_t h, const char* name, bool hermitian, bool three_m) {
    const int n = 4, k = 3, lda = n + 1, ldc = n + 2;
    auto a = values<c32>((size_t)lda * k, 16), c = values<c32>((size_t)ldc * n, 17);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < j; i++) c[i + j * ldc] = c32(99, -99);
    auto want = c;
    c32 alpha = hermitian ? c32(2, 0) : c32(1, -1), beta = hermitian ? c32(-1, 0) : c32(2, 1);
    for (int j = 0; j < n; j++)
        for (int i = j; i < n; i++) {
            c32 acc = 0;
            for (int q = 0; q < k; q++) acc += a[i + q * lda] * (hermitian ? std::conj(a[j + q * lda]) : a[j + q * lda]);
            c32 old = hermitian && i == j ? c32(c[i + j * ldc].real(), 0) : c[i + j * ldc];
            c32 v = alpha * acc + beta * old;
            want[i + j * ldc] = hermitian && i == j ? c32(v.real(), 0) : v;
        }
    c32 *da = upload(a), *dc = upload(c);
    float ra = alpha.real(), rb = beta.real();
    const void* pa = hermitian ? (const void*)&ra : (const void*)&alpha;
    const void* pb = hermitian ? (const void*)&rb : (const void*)&beta;
    auto f = hermitian ? (three_m ? cublasCherk3mEx : cublasCherkEx) : (three_m ? cublasCsyrk3mEx : cublasCsyrkEx);
    CUBLAS(f(h, 0, 0, n, k, pa, da, C_32F, lda, pb, dc, C_32F, ldc));
    bool ok = exact(name, download(dc, want.size()), want);
    for (c32* p : {da, dc}) CHECK(cudaFree(p));
    return ok;
}

int main(int argc, char** argv) {
    bool native = argc > 1 && strcmp(argv[1], "--native") == 0;
    cublasHandle_t h;
    CUBLAS(cublasCreate_v2(&h));
    bool ok = true;
    ok &= gemv_strided<float>(h, 0, 3) & gemv_strided<double>(h, 1, 1);
    ok &= gemv_strided<c32>(h, 2, 1) & gemv_strided<c64>(h, 2, 3) & gemv_strided<c32>(h, 1, 2);
    ok &= gemv_arrays<float>(h, 1, false) & gemv_arrays<double>(h, 0, true);
    ok &= gemv_arrays<c32>(h, 2, false) & gemv_arrays<c64>(h, 0, true);
    ok &= gemv_mixed(h, "HSH", cublasHSHgemvStridedBatched, cublasHSHgemvBatched, F16, F16, 0);
    ok &= gemv_mixed(h, "HSS", cublasHSSgemvStridedBatched, cublasHSSgemvBatched, F16, F32, 1);
    ok &= gemv_mixed(h, "TST", cublasTSTgemvStridedBatched, cublasTSTgemvBatched, BF16, BF16, 1);
    ok &= gemv_mixed(h, "TSS", cublasTSSgemvStridedBatched, cublasTSSgemvBatched, BF16, F32, 0);
    ok &= gemm_batched_ex(h, true) & gemm_batched_ex(h, false);
    ok &= complex_gemm<c32>(h, "Cgemm3m", 0, 0) & complex_gemm<c64>(h, "Zgemm3m", 0, 2);
    ok &= complex_gemm<c32>(h, "CgemmEx", 1, 2) & complex_gemm<c32>(h, "Cgemm3mEx", 1, 0);
    ok &= complex_gemm<c32>(h, "Cgemm3mStridedBatched", 2, 2) & complex_gemm<c32>(h, "Cgemm3mBatched", 3, 0);
    ok &= rank_k_ex(h, "CsyrkEx", false, false) & rank_k_ex(h, "Csyrk3mEx", false, true);
    ok &= rank_k_ex(h, "CherkEx", true, false) & rank_k_ex(h, "Cherk3mEx", true, true);
    {
        // What cuBLAS refuses: a negative batch count, CgemmEx on complex f64 matrices.
        std::vector<c32> v(64, c32(1, 0));
        c32 *d = upload(v), one(1, 0);
        cublasStatus_t s = cublasSgemvStridedBatched(h, 0, 2, 2, &one, d, 2, 4, d + 8, 1, 2, &one, d + 16, 1, 2, -1);
        printf("sgemvStridedBatched of -1: %d %s\n", (int)s, cublasGetStatusName(s));
        s = cublasCgemmEx(h, 0, 0, 2, 2, 2, &one, d, C_64F, 2, d + 8, C_64F, 2, &one, d + 16, C_64F, 2);
        printf("CgemmEx of C_64F: %d %s\n", (int)s, cublasGetStatusName(s));
        if (!native) {
            // What the shim does not serve: complex integer matrices.
            s = cublasCherkEx(h, 0, 0, 2, 2, &one, d, C_8I, 2, &one, d + 16, C_32F, 2);
            printf("CherkEx of C_8I: %d %s\n", (int)s, cublasGetStatusName(s));
        }
        CHECK(cudaFree(d));
    }
    CUBLAS(cublasDestroy_v2(h));
    printf(ok ? "cublas_batched_vectors: all exact\n" : "cublas_batched_vectors: FAILED\n");
    return ok ? 0 : 1;
}
