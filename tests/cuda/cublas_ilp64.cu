// cuBLAS's ILP64 API (the `_64` functions: sizes, leading dimensions and increments as
// int64_t), from a plain CUDA program linked against libcublas.so.13: cublasSetMatrix_64 and
// GetMatrix_64 (a padded round trip), Sgemm_v2_64, Dgemv_v2_64 (T), Zdotc_v2_64, Saxpy_v2_64
// and Snrm2_v2_64, Dgbmv_v2_64, Ctrsm_v2_64, SgemmStridedBatched_64, GemmEx_64, and
// Isamax_v2_64/Icamin_v2_64 into host and device memory (the whole int64_t written: it held -1
// before), each checked exactly against a reference computed here (small integers); sizes
// beyond 2^31 - 1 (2^32 + 2 among them, which an int would take as 2) and a negative one (refused by the 32-bit form, as cuBLAS refuses it).
// Usage: cublas_ilp64 [--native] (--native: leaves out what only the shim refuses: sizes beyond
// an int, which NVIDIA's cuBLAS may serve)
#include <complex>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cublas_helpers.h"
#include "cublas_typed.h"

extern "C" {
cublasStatus_t cublasSetMatrix_64(int64_t, int64_t, int64_t, const void*, int64_t, void*, int64_t);
cublasStatus_t cublasGetMatrix_64(int64_t, int64_t, int64_t, const void*, int64_t, void*, int64_t);
cublasStatus_t cublasSgemm_v2_64(cublasHandle_t, int, int, int64_t, int64_t, int64_t, const float*, const float*,
                                 int64_t, const float*, int64_t, const float*, float*, int64_t);
cublasStatus_t cublasDgemv_v2_64(cublasHandle_t, int, int64_t, int64_t, const double*, const double*, int64_t,
                                 const double*, int64_t, const double*, double*, int64_t);
cublasStatus_t cublasZdotc_v2_64(cublasHandle_t, int64_t, const void*, int64_t, const void*, int64_t, void*);
cublasStatus_t cublasSaxpy_v2_64(cublasHandle_t, int64_t, const float*, const float*, int64_t, float*, int64_t);
cublasStatus_t cublasSnrm2_v2_64(cublasHandle_t, int64_t, const float*, int64_t, float*);
cublasStatus_t cublasDgbmv_v2_64(cublasHandle_t, int, int64_t, int64_t, int64_t, int64_t, const double*, const double*,
                                 int64_t, const double*, int64_t, const double*, double*, int64_t);
cublasStatus_t cublasCtrsm_v2_64(cublasHandle_t, int, int, int, int, int64_t, int64_t, const void*, const void*, int64_t,
                                 void*, int64_t);
cublasStatus_t cublasSgemmStridedBatched_64(cublasHandle_t, int, int, int64_t, int64_t, int64_t, const float*,
                                            const float*, int64_t, long long, const float*, int64_t, long long,
                                            const float*, float*, int64_t, long long, int64_t);
cublasStatus_t cublasGemmEx_64(cublasHandle_t, int, int, int64_t, int64_t, int64_t, const void*, const void*, int,
                               int64_t, const void*, int, int64_t, const void*, void*, int, int64_t, int, int);
cublasStatus_t cublasIsamax_v2_64(cublasHandle_t, int64_t, const float*, int64_t, int64_t*);
cublasStatus_t cublasIcamin_v2_64(cublasHandle_t, int64_t, const void*, int64_t, int64_t*);
}

// C (m x n) = A (m x k) B (k x n), column-major, leading dimensions given.
template <typename E>
static std::vector<E> product(int m, int n, int k, const std::vector<E>& a, int lda, const std::vector<E>& b, int ldb,
                              std::vector<E> c, int ldc, E alpha, E beta) {
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            E acc = 0;
            for (int q = 0; q < k; q++) acc += a[i + q * lda] * b[q + j * ldb];
            c[i + j * ldc] = alpha * acc + beta * c[i + j * ldc];
        }
    return c;
}

static bool matrices(cublasHandle_t h) {
    bool ok = true;
    // A padded round trip: 5 x 3 into rows of 8 on the device, back into rows of 6.
    std::vector<float> a = values<float>(7 * 3, 1), back(6 * 3, -9.0f), want = back;
    float* d = upload(std::vector<float>(8 * 3, 0.0f));
    CUBLAS(cublasSetMatrix_64(5, 3, 4, a.data(), 7, d, 8));
    CUBLAS(cublasGetMatrix_64(5, 3, 4, d, 8, back.data(), 6));
    for (int j = 0; j < 3; j++)
        for (int i = 0; i < 5; i++) want[i + j * 6] = a[i + j * 7];
    ok &= exact("SetMatrix_64 and GetMatrix_64", back, want);
    CHECK(cudaFree(d));
    // Sgemm: C 4 x 3 = 2 A (4 x 5, ld 6) B (5 x 3, ld 5) - C (ld 7).
    std::vector<float> ga = values<float>(6 * 5, 2), gb = values<float>(5 * 3, 3), gc = values<float>(7 * 3, 4);
    float alpha = 2, beta = -1;
    std::vector<float> gwant = product(4, 3, 5, ga, 6, gb, 5, gc, 7, alpha, beta);
    float *dga = upload(ga), *dgb = upload(gb), *dgc = upload(gc);
    CUBLAS(cublasSgemm_v2_64(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 3, 5, &alpha, dga, 6, dgb, 5, &beta, dgc, 7));
    ok &= exact("Sgemm_v2_64", download(dgc, gc.size()), gwant);
    // Two batches of the same shapes, strided apart.
    std::vector<float> sa = values<float>(2 * 30, 5), sb = values<float>(2 * 15, 6), sc = values<float>(2 * 21, 7);
    std::vector<float> swant = sc;
    for (int b = 0; b < 2; b++) {
        std::vector<float> pa(sa.begin() + b * 30, sa.begin() + b * 30 + 30), pb(sb.begin() + b * 15, sb.begin() + b * 15 + 15),
            pc(sc.begin() + b * 21, sc.begin() + b * 21 + 21);
        std::vector<float> r = product(4, 3, 5, pa, 6, pb, 5, pc, 7, alpha, beta);
        std::copy(r.begin(), r.end(), swant.begin() + b * 21);
    }
    float *dsa = upload(sa), *dsb = upload(sb), *dsc = upload(sc);
    CUBLAS(cublasSgemmStridedBatched_64(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 3, 5, &alpha, dsa, 6, 30, dsb, 5, 15, &beta, dsc,
                                        7, 21, 2));
    ok &= exact("SgemmStridedBatched_64", download(dsc, sc.size()), swant);
    // GemmEx in f32 (CUDA_R_32F 0, CUBLAS_COMPUTE_32F 68, the default algorithm -1).
    float *dgc2 = upload(gc);
    CUBLAS(cublasGemmEx_64(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 3, 5, &alpha, dga, 0, 6, dgb, 0, 5, &beta, dgc2, 0, 7, 68, -1));
    ok &= exact("GemmEx_64", download(dgc2, gc.size()), gwant);
    for (float* p : {dga, dgb, dgc, dsa, dsb, dsc, dgc2}) CHECK(cudaFree(p));
    return ok;
}

static bool vectors(cublasHandle_t h) {
    bool ok = true;
    // Dgemv T: y (3, every 2nd) = A^T (A 4 x 3, ld 5) x (4, every 3rd) - y.
    std::vector<double> a = values<double>(5 * 3, 8), x = values<double>(4 * 3, 9), y = values<double>(3 * 2, 10);
    std::vector<double> want = y;
    double one = 1, minus = -1;
    for (int j = 0; j < 3; j++) {
        double acc = 0;
        for (int i = 0; i < 4; i++) acc += a[i + j * 5] * x[i * 3];
        want[j * 2] = acc - y[j * 2];
    }
    double *da = upload(a), *dx = upload(x), *dy = upload(y);
    CUBLAS(cublasDgemv_v2_64(h, CUBLAS_OP_T, 4, 3, &one, da, 5, dx, 3, &minus, dy, 2));
    ok &= exact("Dgemv_v2_64 T", download(dy, y.size()), want);
    // Dgbmv N: a 5 x 4 band, kl 1, ku 2, lda 4 (the band's rows).
    std::vector<double> ab = values<double>(4 * 4, 11), bx = values<double>(4, 12), by = values<double>(5, 13), bwant = by;
    for (int i = 0; i < 5; i++) {
        double acc = 0;
        for (int j = 0; j < 4; j++)
            if (j - i <= 2 && i - j <= 1) acc += ab[2 + i - j + j * 4] * bx[j];
        bwant[i] = acc + by[i];
    }
    double *dab = upload(ab), *dbx = upload(bx), *dby = upload(by);
    CUBLAS(cublasDgbmv_v2_64(h, CUBLAS_OP_N, 5, 4, 1, 2, &one, dab, 4, dbx, 1, &one, dby, 1));
    ok &= exact("Dgbmv_v2_64 N", download(dby, by.size()), bwant);
    // Zdotc: conj(x) . y over 6 elements, x every 2nd.
    std::vector<c64> zx = values<c64>(12, 14), zy = values<c64>(6, 15);
    c64 zwant = 0, zgot;
    for (int i = 0; i < 6; i++) zwant += std::conj(zx[i * 2]) * zy[i];
    c64 *dzx = upload(zx), *dzy = upload(zy);
    CUBLAS(cublasZdotc_v2_64(h, 6, dzx, 2, dzy, 1, &zgot));
    ok &= exact("Zdotc_v2_64", std::vector<c64>{zgot}, std::vector<c64>{zwant});
    // Saxpy: 2 (1, 2) + (1, 0) is (3, 4), whose norm is 5.
    std::vector<float> sx = {1, 2}, sy = {1, 0};
    float two = 2, norm = 0;
    float *dsx = upload(sx), *dsy = upload(sy);
    CUBLAS(cublasSaxpy_v2_64(h, 2, &two, dsx, 1, dsy, 1));
    CUBLAS(cublasSnrm2_v2_64(h, 2, dsy, 1, &norm));
    ok &= exact("Saxpy_v2_64 and Snrm2_v2_64", std::vector<float>{norm}, std::vector<float>{5});
    for (void* p : {(void*)da, (void*)dx, (void*)dy, (void*)dab, (void*)dbx, (void*)dby, (void*)dzx, (void*)dzy,
                    (void*)dsx, (void*)dsy})
        CHECK(cudaFree(p));
    return ok;
}

// Ctrsm (side left 0, lower 0, non-unit 0): op(A) X = B, A 3 x 3 lower with a diagonal of 2 + 2i (an exact quotient), B 3 x 2.
static bool solve(cublasHandle_t h) {
    std::vector<c32> a = values<c32>(3 * 3, 16), x = values<c32>(3 * 2, 17);
    for (int i = 0; i < 3; i++) a[i + i * 3] = c32(2, 2);
    std::vector<c32> b = x;
    for (int j = 0; j < 2; j++)
        for (int i = 0; i < 3; i++) {
            c32 acc = 0;
            for (int q = 0; q <= i; q++) acc += a[i + q * 3] * x[q + j * 3];
            b[i + j * 3] = acc;
        }
    c32 one(1, 0);
    c32 *da = upload(a), *db = upload(b);
    CUBLAS(cublasCtrsm_v2_64(h, 0, 0, CUBLAS_OP_N, 0, 3, 2, &one, da, 3,
                             db, 3));
    bool ok = exact("Ctrsm_v2_64", download(db, b.size()), x);
    for (c32* p : {da, db}) CHECK(cudaFree(p));
    return ok;
}

// The index of the largest (Isamax) or smallest (Icamin) magnitude, into an int64_t that held -1:
// on the host, then in device memory.
static bool indices(cublasHandle_t h) {
    std::vector<float> x = {1, -7, 3, 7, 2};
    std::vector<c32> z = {c32(3, 1), c32(-1, 1), c32(0, -2), c32(5, 0)};
    float* dx = upload(x);
    c32* dz = upload(z);
    int64_t host[2] = {-1, -1};
    CUBLAS(cublasIsamax_v2_64(h, 5, dx, 1, &host[0]));
    CUBLAS(cublasIcamin_v2_64(h, 4, dz, 1, &host[1]));
    int64_t* device = upload(std::vector<int64_t>{-1, -1});
    CUBLAS(cublasSetPointerMode_v2(h, CUBLAS_POINTER_MODE_DEVICE));
    CUBLAS(cublasIsamax_v2_64(h, 5, dx, 1, device));
    CUBLAS(cublasIcamin_v2_64(h, 4, dz, 1, device + 1));
    CUBLAS(cublasSetPointerMode_v2(h, CUBLAS_POINTER_MODE_HOST));
    std::vector<int64_t> got = download(device, 2);
    bool ok = true;
    // 1-based: the first of -7 and 7 is element 2; |-1| + |1| = 2 is the least at element 2.
    for (int64_t v : {host[0], host[1], got[0], got[1]})
        if (v != 2) ok = false;
    printf("Isamax_v2_64 and Icamin_v2_64: host %lld %lld, device %lld %lld%s\n", (long long)host[0], (long long)host[1],
           (long long)got[0], (long long)got[1], ok ? " exact" : "");
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dz));
    CHECK(cudaFree(device));
    return ok;
}

int main(int argc, char** argv) {
    bool native = argc > 1 && strcmp(argv[1], "--native") == 0;
    cublasHandle_t h;
    CUBLAS(cublasCreate_v2(&h));
    bool ok = matrices(h) & vectors(h) & solve(h) & indices(h);
    {
        std::vector<float> v(16, 1.0f);
        float *d = upload(v), one = 1;
        cublasStatus_t s;
        if (!native) {
            // 2^31 rows: more than an int; not served by the shim (NVIDIA's cuBLAS may serve them).
            s = cublasSgemm_v2_64(h, CUBLAS_OP_N, CUBLAS_OP_N, 1ll << 31, 1, 1, &one, d, 1ll << 31, d, 1, &one, d, 1ll << 31);
            printf("Sgemm_v2_64 of 2^31 rows: %d %s\n", (int)s, cublasGetStatusName(s));
            // 2^32 + 2: a wrapper that took it as an int would see 2, and run.
            const int64_t wide = (1ll << 32) + 2;
            double dd = 1;
            s = cublasDgemv_v2_64(h, CUBLAS_OP_N, wide, 1, &dd, (double*)d, wide, (double*)d, 1, &dd, (double*)d, 1);
            printf("Dgemv_v2_64 of 2^32 + 2 rows: %d %s\n", (int)s, cublasGetStatusName(s));
            c64 r;
            s = cublasZdotc_v2_64(h, wide, d, 1, d, 1, &r);
            printf("Zdotc_v2_64 of 2^32 + 2 elements: %d %s\n", (int)s, cublasGetStatusName(s));
            int64_t index;
            s = cublasIsamax_v2_64(h, wide, d, 1, &index);
            printf("Isamax_v2_64 of 2^32 + 2 elements: %d %s\n", (int)s, cublasGetStatusName(s));
            s = cublasSetMatrix_64(wide, 1, 4, v.data(), wide, d, wide);
            printf("SetMatrix_64 of 2^32 + 2 rows: %d %s\n", (int)s, cublasGetStatusName(s));
        }
        s = cublasSgemm_v2_64(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 1, 1, &one, d, 1, d, 1, &one, d, 1);
        printf("Sgemm_v2_64 m -1: %d %s\n", (int)s, cublasGetStatusName(s));
        CHECK(cudaFree(d));
    }
    CUBLAS(cublasDestroy_v2(h));
    printf(ok ? "cublas_ilp64: all exact\n" : "cublas_ilp64: FAILED\n");
    return ok ? 0 : 1;
}
