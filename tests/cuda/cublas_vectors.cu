// cuBLAS's level-1 and level-2 functions from a plain CUDA program linked against
// libcublas.so.13: dot, nrm2, axpy, copy, scal, gemv (both operations), ger, sbmv, in float and
// double, on strided vectors and padded matrices (what lies between the elements must stay as
// it was); results and scalars in host and in device memory (cublasSetPointerMode); four threads
// taking dot products into host memory through one handle at once; and what cuBLAS refuses.
// Every result is checked exactly against a reference computed here (small integers).
// Usage: cublas_vectors [--native] (--native: leaves out what only the shim refuses:
// a dot product's increment of 0, which NVIDIA's cuBLAS takes as one element n times)
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "cublas_helpers.h"

// Element i of a vector `inc` apart.
template <typename T>
static T& at(std::vector<T>& v, int i, int inc) {
    return v[(size_t)i * inc];
}

template <typename T>
static T dot_reference(int n, std::vector<T> x, int incx, std::vector<T> y, int incy) {
    T acc = 0;
    for (int i = 0; i < n; i++) acc += at(x, i, incx) * at(y, i, incy);
    return acc;
}

template <typename T>
static bool dots(cublasHandle_t h) {
    const int n = 50;
    auto x = small_integers<T>(n * 2, 1), y = small_integers<T>(n * 3, 2);
    T *dx = upload(x), *dy = upload(y);
    T plain = 99, strided = 99, none = 99;
    if constexpr (sizeof(T) == 4) {
        CUBLAS(cublasSdot_v2(h, n, dx, 1, dy, 1, &plain));
        CUBLAS(cublasSdot_v2(h, n, dx, 2, dy, 3, &strided));
        CUBLAS(cublasSdot_v2(h, 0, dx, 1, dy, 1, &none));
    } else {
        CUBLAS(cublasDdot_v2(h, n, dx, 1, dy, 1, &plain));
        CUBLAS(cublasDdot_v2(h, n, dx, 2, dy, 3, &strided));
        CUBLAS(cublasDdot_v2(h, 0, dx, 1, dy, 1, &none));
    }
    bool ok = equal(sizeof(T) == 4 ? "sdot" : "ddot", plain, dot_reference(n, x, 1, y, 1));
    ok &= equal(sizeof(T) == 4 ? "sdot strided" : "ddot strided", strided, dot_reference(n, x, 2, y, 3));
    ok &= equal("dot of no elements", none, (T)0);
    // nrm2 of (2, 3, 6), every other element: 7.
    std::vector<T> v = {2, -1, 3, -1, 6, -1};
    T* dv = upload(v);
    T norm = 0;
    if constexpr (sizeof(T) == 4) CUBLAS(cublasSnrm2_v2(h, 3, dv, 2, &norm));
    else CUBLAS(cublasDnrm2_v2(h, 3, dv, 2, &norm));
    ok &= equal(sizeof(T) == 4 ? "snrm2" : "dnrm2", norm, (T)7);
    for (T* p : {dx, dy, dv}) CHECK(cudaFree(p));
    return ok;
}

// y = alpha x + y, a copy, and x = alpha x, strided: the gaps keep their values.
template <typename T>
static bool updates(cublasHandle_t h) {
    const int n = 40, incx = 2, incy = 3;
    auto x = small_integers<T>(n * incx, 3), y = small_integers<T>(n * incy, 4);
    T *dx = upload(x), *dy = upload(y);
    T alpha = 3, scale = -2;
    auto want = y;
    for (int i = 0; i < n; i++) at(want, i, incy) = alpha * at(x, i, incx) + at(y, i, incy);
    bool ok = true;
    if constexpr (sizeof(T) == 4) CUBLAS(cublasSaxpy_v2(h, n, &alpha, dx, incx, dy, incy));
    else CUBLAS(cublasDaxpy_v2(h, n, &alpha, dx, incx, dy, incy));
    ok &= same("axpy", download(dy, want.size()), want);
    for (int i = 0; i < n; i++) at(want, i, incy) = at(x, i, incx);
    if constexpr (sizeof(T) == 4) CUBLAS(cublasScopy_v2(h, n, dx, incx, dy, incy));
    else CUBLAS(cublasDcopy_v2(h, n, dx, incx, dy, incy));
    ok &= same("copy", download(dy, want.size()), want);
    auto scaled = x;
    for (int i = 0; i < n; i++) at(scaled, i, incx) *= scale;
    if constexpr (sizeof(T) == 4) CUBLAS(cublasSscal_v2(h, n, &scale, dx, incx));
    else CUBLAS(cublasDscal_v2(h, n, &scale, dx, incx));
    ok &= same("scal", download(dx, scaled.size()), scaled);
    if (ok) printf("%s axpy, copy, scal strided exact\n", sizeof(T) == 4 ? "float" : "double");
    for (T* p : {dx, dy}) CHECK(cudaFree(p));
    return ok;
}

// y = alpha op(A) x + beta y, A m x n padded, x and y strided.
template <typename T>
static bool gemv(cublasHandle_t h, bool trans, const char* what) {
    const int m = 23, n = 17, lda = m + 4, incx = 2, incy = 3;
    const int rows = trans ? n : m, cols = trans ? m : n;
    auto a = small_integers<T>((size_t)lda * n, 5), x = small_integers<T>(cols * incx, 6);
    auto y = small_integers<T>(rows * incy, 7), want = y;
    T alpha = 2, beta = -1;
    for (int i = 0; i < rows; i++) {
        T acc = 0;
        for (int j = 0; j < cols; j++) acc += (trans ? a[j + i * lda] : a[i + j * lda]) * at(x, j, incx);
        at(want, i, incy) = alpha * acc + beta * at(y, i, incy);
    }
    T *da = upload(a), *dx = upload(x), *dy = upload(y);
    cublasOperation_t op = trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    if constexpr (sizeof(T) == 4) CUBLAS(cublasSgemv_v2(h, op, m, n, &alpha, da, lda, dx, incx, &beta, dy, incy));
    else CUBLAS(cublasDgemv_v2(h, op, m, n, &alpha, da, lda, dx, incx, &beta, dy, incy));
    bool ok = same(what, download(dy, want.size()), want);
    if (ok) printf("%s exact\n", what);
    for (T* p : {da, dx, dy}) CHECK(cudaFree(p));
    return ok;
}

// A = alpha x y^T + A, A m x n padded: the padding rows keep their values.
template <typename T>
static bool ger(cublasHandle_t h) {
    const int m = 19, n = 11, lda = m + 2, incx = 3, incy = 2;
    auto a = small_integers<T>((size_t)lda * n, 8), x = small_integers<T>(m * incx, 9);
    auto y = small_integers<T>(n * incy, 10), want = a;
    T alpha = -3;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) want[i + j * lda] += alpha * at(x, i, incx) * at(y, j, incy);
    T *da = upload(a), *dx = upload(x), *dy = upload(y);
    if constexpr (sizeof(T) == 4) CUBLAS(cublasSger_v2(h, m, n, &alpha, dx, incx, dy, incy, da, lda));
    else CUBLAS(cublasDger_v2(h, m, n, &alpha, dx, incx, dy, incy, da, lda));
    const char* what = sizeof(T) == 4 ? "sger" : "dger";
    bool ok = same(what, download(da, want.size()), want);
    if (ok) printf("%s exact\n", what);
    for (T* p : {da, dx, dy}) CHECK(cudaFree(p));
    return ok;
}

// y = alpha A x + beta y, A symmetric band (k diagonals each side) stored as one triangle in
// BLAS's band layout with a spare row (lda k + 2), x and y strided: the spare row is never read
// (it holds NaN).
template <typename T>
static bool sbmv(cublasHandle_t h, int uplo) {
    const int n = 9, k = 3, lda = k + 2, incx = 2, incy = 3;
    auto ab = small_integers<T>((size_t)lda * n, 11), x = small_integers<T>(n * incx, 12);
    auto y = small_integers<T>(n * incy, 13), want = y;
    for (int j = 0; j < n; j++) ab[k + 1 + j * lda] = NAN;
    // A[i, j] of the stored triangle: upper at ab[k + i - j + j lda] (i <= j), lower at
    // ab[i - j + j lda] (i >= j); 0 outside the band.
    auto element = [&](int i, int j) -> T {
        if (uplo == 1 ? i > j : i < j) std::swap(i, j);
        if (std::abs(i - j) > k) return 0;
        return uplo == 1 ? ab[k + i - j + j * lda] : ab[i - j + j * lda];
    };
    T alpha = 2, beta = -3;
    for (int i = 0; i < n; i++) {
        T acc = 0;
        for (int j = 0; j < n; j++) acc += element(i, j) * at(x, j, incx);
        at(want, i, incy) = alpha * acc + beta * at(y, i, incy);
    }
    T *da = upload(ab), *dx = upload(x), *dy = upload(y);
    if constexpr (sizeof(T) == 4) CUBLAS(cublasSsbmv_v2(h, uplo, n, k, &alpha, da, lda, dx, incx, &beta, dy, incy));
    else CUBLAS(cublasDsbmv_v2(h, uplo, n, k, &alpha, da, lda, dx, incx, &beta, dy, incy));
    char what[32];
    snprintf(what, sizeof what, "%ssbmv %s", sizeof(T) == 4 ? "s" : "d", uplo ? "upper" : "lower");
    bool ok = same(what, download(dy, want.size()), want);
    if (ok) printf("%s exact\n", what);
    for (T* p : {da, dx, dy}) CHECK(cudaFree(p));
    return ok;
}

// Scalars and results in device memory: a dot product left on the device and used as the next
// call's alpha there, a gemm whose alpha and beta are device memory, all on a stream, read once
// at the end.
static bool device_pointers(cublasHandle_t h) {
    const int n = 30;
    auto x = small_integers<float>(n, 11), y = small_integers<float>(n, 12), z = small_integers<float>(n, 13);
    float *dx = upload(x), *dy = upload(y), *dz = upload(z);
    std::vector<float> scalars = {0.0f, 2.0f, -1.0f};  // the dot lands in [0]; [1], [2] are alpha, beta
    float* ds = upload(scalars);
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CUBLAS(cublasSetStream_v2(h, s));
    CUBLAS(cublasSetPointerMode_v2(h, CUBLAS_POINTER_MODE_DEVICE));
    CUBLAS(cublasSdot_v2(h, n, dx, 1, dy, 1, ds));
    // z = dot * x + z, alpha read from where the dot product went.
    CUBLAS(cublasSaxpy_v2(h, n, ds, dx, 1, dz, 1));
    // z (a 1 x n matrix) = alpha [dot] y + beta z, alpha and beta read from device memory.
    CUBLAS(cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, n, 1, ds + 1, ds, 1, dy, 1, ds + 2, dz, 1));
    CUBLAS(cublasSetPointerMode_v2(h, CUBLAS_POINTER_MODE_HOST));
    CHECK(cudaStreamSynchronize(s));
    float d = dot_reference(n, x, 1, y, 1);
    std::vector<float> want(n);
    for (int i = 0; i < n; i++) want[i] = 2.0f * d * y[i] - (d * x[i] + z[i]);
    bool ok = same("device pointers", download(dz, n), want) && equal("dot into device memory", download(ds, 1)[0], d);
    CUBLAS(cublasSetStream_v2(h, 0));
    CHECK(cudaStreamDestroy(s));
    if (ok) printf("device pointer mode exact\n");
    for (float* p : {dx, dy, dz, ds}) CHECK(cudaFree(p));
    return ok;
}

// asum, iamax and iamin on strided vectors (every other element a skipped 1000: reading one
// shows), real and complex (a complex magnitude is |re| + |im|, as BLAS's): magnitudes 1, 4,
// 0.25, 4, 0.5 (sum 9.75) and 3, 4.5, 0.25, 4.5, 0.75 (sum 13), where iamax gives the first of
// the equal largest (2) and iamin the smallest (3); results into host memory and, in
// CUBLAS_POINTER_MODE_DEVICE, into device memory.
static bool magnitudes(cublasHandle_t h) {
    std::vector<float> xs = {1, 1000, -4, 1000, 0.25f, 1000, 4, 1000, -0.5f, 1000};
    std::vector<double> xd(xs.begin(), xs.end());
    std::vector<float> xc = {1, -2, 1e3f, 1e3f, -4, 0.5f, 1e3f, 1e3f, 0.25f, 0, 1e3f, 1e3f, 3, -1.5f, 1e3f, 1e3f, -0.5f, 0.25f, 1e3f, 1e3f};
    std::vector<double> xz(xc.begin(), xc.end());
    float *ds = upload(xs), *dc = upload(xc);
    double *dd = upload(xd), *dz = upload(xz);
    float fs = 0, fc = 0;
    double gd = 0, gz = 0;
    int i = -1;
    bool ok = true;
    CUBLAS(cublasSasum_v2(h, 5, ds, 2, &fs));
    ok &= equal("sasum strided", fs, 9.75f);
    CUBLAS(cublasDasum_v2(h, 5, dd, 2, &gd));
    ok &= equal("dasum strided", gd, 9.75);
    CUBLAS(cublasScasum_v2(h, 5, dc, 2, &fc));
    ok &= equal("scasum strided", fc, 13.0f);
    CUBLAS(cublasDzasum_v2(h, 5, dz, 2, &gz));
    ok &= equal("dzasum strided", gz, 13.0);
    CUBLAS(cublasIsamax_v2(h, 5, ds, 2, &i));
    ok &= equal("isamax first of equals", i, 2);
    CUBLAS(cublasIdamin_v2(h, 5, dd, 2, &i));
    ok &= equal("idamin", i, 3);
    CUBLAS(cublasIcamax_v2(h, 5, dc, 2, &i));
    ok &= equal("icamax first of equals", i, 2);
    CUBLAS(cublasIzamin_v2(h, 5, dz, 2, &i));
    ok &= equal("izamin", i, 3);
    CUBLAS(cublasIsamax_v2(h, 0, ds, 2, &i));
    ok &= equal("isamax of no elements", i, 0);

    CUBLAS(cublasSetPointerMode_v2(h, CUBLAS_POINTER_MODE_DEVICE));
    double* dsum = upload(std::vector<double>(1, -1));
    int* dindex = upload(std::vector<int>(1, -1));
    CUBLAS(cublasDzasum_v2(h, 5, dz, 2, dsum));
    CUBLAS(cublasIzamax_v2(h, 5, dz, 2, dindex));
    CUBLAS(cublasSetPointerMode_v2(h, CUBLAS_POINTER_MODE_HOST));
    ok &= equal("dzasum into device memory", download(dsum, 1)[0], 13.0);
    ok &= equal("izamax into device memory", download(dindex, 1)[0], 2);
    for (void* p : {(void*)ds, (void*)dc, (void*)dd, (void*)dz, (void*)dsum, (void*)dindex}) CHECK(cudaFree(p));
    return ok;
}

// swap: x (increment incx) and y (incy) exchanged, the gaps between their elements untouched.
template <typename T>
static bool swap(cublasHandle_t h, cublasStatus_t (*call)(cublasHandle_t, int, T*, int, T*, int), const char* name,
                 int n, int incx, int incy) {
    auto x = small_integers<T>((size_t)n * incx, 40), y = small_integers<T>((size_t)n * incy, 43);
    auto want_x = x, want_y = y;
    for (int i = 0; i < n; i++) std::swap(want_x[(size_t)i * incx], want_y[(size_t)i * incy]);
    T *dx = upload(x), *dy = upload(y);
    CUBLAS(call(h, n, dx, incx, dy, incy));
    bool ok = same(name, download(dx, x.size()), want_x) && same(name, download(dy, y.size()), want_y);
    if (ok) printf("%s exact\n", name);
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dy));
    return ok;
}

// The Async copies on a stream of the handle's: a padded matrix set, scaled by a call on that
// stream, got back into a padded matrix; a strided vector set and got back strided.
static bool async_copies(cublasHandle_t h) {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CUBLAS(cublasSetStream_v2(h, s));
    const int m = 3, n = 4, lda = 5;
    auto a = small_integers<float>(lda * n, 50);
    float *d, two = 2.0f;
    CHECK(cudaMalloc(&d, m * n * sizeof(float)));
    CUBLAS(cublasSetMatrixAsync(m, n, sizeof(float), a.data(), lda, d, m, s));
    CUBLAS(cublasSscal_v2(h, m * n, &two, d, 1));
    std::vector<float> back(lda * n, -7.0f), want(lda * n, -7.0f);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) want[i + j * lda] = 2.0f * a[i + j * lda];
    CUBLAS(cublasGetMatrixAsync(m, n, sizeof(float), d, m, back.data(), lda, s));
    CHECK(cudaStreamSynchronize(s));
    bool ok = same("async matrix", back, want);
    auto x = small_integers<float>(10, 51);
    std::vector<float> got(15, -7.0f), want_v(15, -7.0f);
    for (int i = 0; i < 5; i++) want_v[i * 3] = x[i * 2];
    CUBLAS(cublasSetVectorAsync(5, sizeof(float), x.data(), 2, d, 1, s));
    CUBLAS(cublasGetVectorAsync(5, sizeof(float), d, 1, got.data(), 3, s));
    CHECK(cudaStreamSynchronize(s));
    ok &= same("async vector", got, want_v);
    if (ok) printf("async copies on a stream exact\n");
    CUBLAS(cublasSetStream_v2(h, 0));
    CHECK(cudaFree(d));
    CHECK(cudaStreamDestroy(s));
    return ok;
}

// An Async copy on a capturing stream: the shim makes its copies at once, which a graph would
// not record, so it is refused and the capture invalidated (never made once at capture time).
static void async_copy_while_capturing() {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    float host[4] = {1, 2, 3, 4}, *d;
    CHECK(cudaMalloc(&d, sizeof host));
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cublasStatus_t st = cublasSetVectorAsync(4, sizeof(float), host, 1, d, 1, s);
    printf("async copy while capturing: %d %s\n", (int)st, cublasGetStatusName(st));
    cudaGraph_t g = nullptr;
    cudaError_t e = cudaStreamEndCapture(s, &g);
    printf("its capture: %s\n", e == cudaErrorStreamCaptureInvalidated ? "invalidated" : cudaGetErrorName(e));
    if (g) CHECK(cudaGraphDestroy(g));
    cudaGetLastError();
    CHECK(cudaFree(d));
    CHECK(cudaStreamDestroy(s));
}

int main(int argc, char** argv) {
    bool native = argc > 1 && strcmp(argv[1], "--native") == 0;
    cublasHandle_t h;
    CUBLAS(cublasCreate_v2(&h));
    bool ok = dots<float>(h) && dots<double>(h);
    ok &= updates<float>(h) && updates<double>(h);
    ok &= gemv<float>(h, false, "sgemv N") && gemv<float>(h, true, "sgemv T");
    ok &= gemv<double>(h, false, "dgemv N") && gemv<double>(h, true, "dgemv T");
    ok &= ger<float>(h) && ger<double>(h);
    ok &= sbmv<float>(h, 1) && sbmv<float>(h, 0) && sbmv<double>(h, 1) && sbmv<double>(h, 0);
    ok &= device_pointers(h);
    ok &= swap<float>(h, cublasSswap_v2, "sswap incx 2 incy 3", 5, 2, 3);
    ok &= swap<double>(h, cublasDswap_v2, "dswap", 6, 1, 1);
    ok &= async_copies(h);

    // Four threads, one handle, each taking its own dot products into host memory at once: each
    // gets its own answer.
    int failures = 0;
    {
        std::vector<std::thread> threads;
        for (int t = 0; t < 4; t++)
            threads.emplace_back([&failures, h, t] {
                const int n = 64 + t;
                auto x = small_integers<float>(n, 20 + t), y = small_integers<float>(n, 30 + t);
                float *dx = upload(x), *dy = upload(y);
                float want = dot_reference(n, x, 1, y, 1);
                for (int round = 0; round < 20; round++) {
                    float got = 0.0f;
                    CUBLAS(cublasSdot_v2(h, n, dx, 1, dy, 1, &got));
                    if (got != want) {
                        printf("thread %d round %d: got %g, expected %g\n", t, round, got, want);
                        __atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);
                        break;
                    }
                }
                CHECK(cudaFree(dx));
                CHECK(cudaFree(dy));
            });
        for (auto& t : threads) t.join();
    }
    if (failures == 0) printf("threads' dot products exact\n");
    ok &= failures == 0;
    ok &= magnitudes(h);

    // What cuBLAS refuses: a leading dimension below the rows, an increment of 0.
    {
        float *d, alpha = 1.0f, beta = 0.0f, result = 0.0f;
        CHECK(cudaMalloc(&d, 64 * sizeof(float)));
        cublasStatus_t lda = cublasSgemv_v2(h, CUBLAS_OP_N, 4, 4, &alpha, d, 3, d + 16, 1, &beta, d + 32, 1);
        printf("gemv lda below m: %d %s\n", (int)lda, cublasGetStatusName(lda));
        cublasStatus_t inc = cublasSger_v2(h, 4, 4, &alpha, d, 0, d + 16, 1, d + 32, 4);
        printf("ger incx 0: %d %s\n", (int)inc, cublasGetStatusName(inc));
        if (!native) {
            async_copy_while_capturing();
            // One element taken n times: BLAS's, not served (cublas_backwards.cu takes the
            // negative increments).
            cublasStatus_t repeated = cublasSdot_v2(h, 4, d, 0, d + 16, 1, &result);
            printf("dot incx 0: %d %s\n", (int)repeated, cublasGetStatusName(repeated));
            cublasStatus_t past = cublasSdot_v2(h, 40, d, 2, d + 16, 1, &result);
            printf("dot past the allocation: %d %s\n", (int)past, cublasGetStatusName(past));
        }
        CHECK(cudaFree(d));
    }
    ok &= dots<float>(h);
    CUBLAS(cublasDestroy_v2(h));
    printf(ok ? "cublas_vectors: all exact\n" : "cublas_vectors: FAILED\n");
    return ok ? 0 : 1;
}
