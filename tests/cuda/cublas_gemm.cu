// cuBLAS's gemm family from a plain CUDA program linked against libcublas.so.13: plain,
// transposed, padded (leading dimensions above the rows), beta 0 over garbage, double
// precision, strided batches on a stream, cublasGemmEx (f32 and binary16), cublasHgemm, two threads with handles of their own,
// and calls cuBLAS refuses. Every result is checked exactly against a reference computed here
// (small integers: every product and sum is exact in float). Usage: cublas_gemm [--native]
// (--native: leaves out what only the shim refuses and NVIDIA's cuBLAS would run into a fault:
// a host matrix, a matrix past its allocation, a destroyed handle)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"
#include "cublas_helpers.h"
#include "cublas_min.h"

// One gemm through cuBLAS against the reference: m x n x k, transposes, leading dimensions
// `pad` above the rows, C holding `fill` first.
template <typename T>
static bool one(cublasHandle_t h, const char* what, bool ta, bool tb, int m, int n, int k, T alpha, T beta, int pad,
                T fill) {
    int lda = (ta ? k : m) + pad, ldb = (tb ? n : k) + pad, ldc = m + pad;
    auto a = small_integers<T>((size_t)lda * (ta ? m : k), 1);
    auto b = small_integers<T>((size_t)ldb * (tb ? k : n), 2);
    std::vector<T> c((size_t)ldc * n, fill), want = c;
    T *da = upload(a), *db = upload(b), *dc = upload(c);
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if constexpr (sizeof(T) == 4)
        CUBLAS(cublasSgemm_v2(h, oa, ob, m, n, k, &alpha, da, lda, db, ldb, &beta, dc, ldc));
    else
        CUBLAS(cublasDgemm_v2(h, oa, ob, m, n, k, &alpha, da, lda, db, ldb, &beta, dc, ldc));
    reference(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, want.data(), ldc);
    bool ok = same(what, download(dc, c.size()), want);
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
    if (ok) printf("%s exact\n", what);
    return ok;
}

// Four products of one shape, strided through three allocations, on a stream of its own.
static bool batched(cublasHandle_t h) {
    const int m = 9, n = 7, k = 5, batch = 4;
    const long long sa = m * k + 3, sb = k * n, sc = m * n + 1;
    auto a = small_integers<float>(sa * batch, 3), b = small_integers<float>(sb * batch, 4);
    std::vector<float> c(sc * batch, 1.0f), want = c;
    float *da = upload(a), *db = upload(b), *dc = upload(c);
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CUBLAS(cublasSetStream_v2(h, s));
    float alpha = 3.0f, beta = 2.0f;
    CUBLAS(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da, m, sa, db, k, sb, &beta, dc,
                                     m, sc, batch));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < batch; i++)
        reference(false, false, m, n, k, alpha, &a[i * sa], m, &b[i * sb], k, beta, &want[i * sc], m);
    bool ok = same("strided batched", download(dc, c.size()), want);
    CUBLAS(cublasSetStream_v2(h, 0));
    CHECK(cudaStreamDestroy(s));
    if (ok) printf("strided batched on a stream exact\n");
    return ok;
}

// gemmBatched, its arrays of addresses in device memory: three products side by side in one
// allocation sharing one B (one strided launch through the shim), then three apart (each in an
// allocation of its own, A transposed: a launch a product).
static bool pointer_arrays(cublasHandle_t h) {
    const int m = 6, n = 5, k = 4, batch = 3;
    auto a = small_integers<float>(m * k * batch, 5), b = small_integers<float>(k * n, 6);
    std::vector<float> c(m * n * batch, 2.0f), want = c;
    float *da = upload(a), *db = upload(b), *dc = upload(c);
    std::vector<float*> as, bs, cs;
    for (int i = 0; i < batch; i++) {
        as.push_back(da + i * m * k);
        bs.push_back(db);
        cs.push_back(dc + i * m * n);
    }
    float alpha = 2.0f, beta = -1.0f;
    CUBLAS(cublasSgemmBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, upload(as), m, upload(bs), k, &beta,
                              upload(cs), m, batch));
    for (int i = 0; i < batch; i++)
        reference(false, false, m, n, k, alpha, &a[i * m * k], m, b.data(), k, beta, &want[i * m * n], m);
    bool ok = same("gemmBatched side by side", download(dc, c.size()), want);
    if (ok) printf("sgemmBatched side by side exact\n");

    std::vector<double*> da2, db2, dc2;
    std::vector<std::vector<double>> a2, b2, c2;
    for (int i = 0; i < batch; i++) {
        a2.push_back(small_integers<double>(k * m, 7 + i));
        b2.push_back(small_integers<double>(k * n, 8 + i));
        c2.push_back(small_integers<double>(m * n, 9 + i));
        da2.push_back(upload(a2[i]));
        db2.push_back(upload(b2[i]));
        dc2.push_back(upload(c2[i]));
    }
    double alpha2 = -1.0, beta2 = 3.0;
    CUBLAS(cublasDgemmBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha2, upload(da2), k, upload(db2), k, &beta2,
                              upload(dc2), m, batch));
    bool apart = true;
    for (int i = 0; i < batch; i++) {
        std::vector<double> w = c2[i];
        reference(true, false, m, n, k, alpha2, a2[i].data(), k, b2[i].data(), k, beta2, w.data(), m);
        apart &= same("gemmBatched apart", download(dc2[i], w.size()), w);
    }
    if (apart) printf("dgemmBatched apart exact\n");
    return ok && apart;
}

int main(int argc, char** argv) {
    bool native = argc > 1 && strcmp(argv[1], "--native") == 0;
    cublasHandle_t h;
    CUBLAS(cublasCreate_v2(&h));
    int version = 0;
    CUBLAS(cublasGetVersion_v2(h, &version));
    printf("cublas version %d\n", version);
    bool ok = true;
    ok &= one<float>(h, "sgemm NN padded", false, false, 70, 45, 33, 2.0f, -1.0f, 10, 7.0f);
    ok &= one<float>(h, "sgemm TN beta 0 over NaN", true, false, 31, 17, 40, 1.0f, 0.0f, 3, NAN);
    ok &= one<float>(h, "sgemm TT", true, true, 16, 24, 8, -1.0f, 0.5f, 0, 2.0f);
    ok &= one<double>(h, "dgemm NT", false, true, 33, 21, 19, 0.5f, 3.0f, 5, 1.0);
    ok &= one<float>(h, "sgemm alpha 0", false, false, 12, 10, 6, 0.0f, 4.0f, 2, 3.0f);
    ok &= batched(h);
    ok &= pointer_arrays(h);

    // cublasGemmEx on f32 matrices; f16 ones are refused.
    {
        const int m = 20, n = 12, k = 8;
        auto a = small_integers<float>(m * k, 5), b = small_integers<float>(k * n, 6);
        std::vector<float> c(m * n, 0.0f), want = c;
        float *da = upload(a), *db = upload(b), *dc = upload(c);
        float alpha = 1.0f, beta = 0.0f;
        CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da, CUDA_R_32F_, m, db, CUDA_R_32F_, k, &beta,
                            dc, CUDA_R_32F_, m, CUBLAS_COMPUTE_32F, -1));
        reference(false, false, m, n, k, alpha, a.data(), m, b.data(), k, beta, want.data(), m);
        if (same("gemmex", download(dc, c.size()), want)) printf("gemmex f32 exact\n");
        else ok = false;
        // cublasSgemmEx (as CuPy's dot calls it), C accumulated: C = 2 A B + C.
        float two = 2.0f, one = 1.0f;
        CUBLAS(cublasSgemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &two, da, CUDA_R_32F_, m, db, CUDA_R_32F_, k, &one, dc,
                             CUDA_R_32F_, m));
        reference(false, false, m, n, k, two, a.data(), m, b.data(), k, one, want.data(), m);
        if (same("sgemmex", download(dc, c.size()), want)) printf("sgemmex exact\n");
        else ok = false;
        // binary16: cublasGemmEx computed in f32 (PyTorch's), cublasSgemmEx into an f32 C (CuPy's),
        // cublasHgemm with binary16 scalars, C accumulated: C = 2 A B + C. Exact: every value
        // here is an integer below 2048.
        {
            auto a16 = halves_of(a), b16 = halves_of(b);
            std::vector<unsigned short> c16(m * n, half_of(3.0f));
            unsigned short *ha = upload(a16), *hb = upload(b16), *hc = upload(c16);
            CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, ha, CUDA_R_16F_, m, hb, CUDA_R_16F_, k,
                                &beta, hc, CUDA_R_16F_, m, CUBLAS_COMPUTE_32F, -1));
            std::vector<float> want16(m * n, 3.0f);
            reference(false, false, m, n, k, alpha, a.data(), m, b.data(), k, beta, want16.data(), m);
            bool half_ok = same("gemmex f16", floats_of(download(hc, c16.size())), want16);
            CUBLAS(cublasSgemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &two, ha, CUDA_R_16F_, m, hb, CUDA_R_16F_, k, &one,
                                 dc, CUDA_R_32F_, m));
            reference(false, false, m, n, k, two, a.data(), m, b.data(), k, one, want.data(), m);
            half_ok &= same("sgemmex f16 into f32", download(dc, c.size()), want);
            unsigned short alpha16 = half_of(2.0f), beta16 = half_of(1.0f);
            CUBLAS(cublasHgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha16, ha, m, hb, k, &beta16, hc, m));
            reference(false, false, m, n, k, two, a.data(), m, b.data(), k, one, want16.data(), m);
            half_ok &= same("hgemm", floats_of(download(hc, c16.size())), want16);
            if (half_ok) printf("gemmex, sgemmex and hgemm on f16 exact\n");
            else ok = false;
            CHECK(cudaFree(ha));
            CHECK(cudaFree(hb));
            CHECK(cudaFree(hc));
        }
        // Integer matrices (CUDA_R_8I) are not served.
        cublasStatus_t int8 = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da, 3, m, db, 3, k, &beta, dc,
                                           CUDA_R_32F_, m, CUBLAS_COMPUTE_32F, -1);
        printf("gemmex i8: %d %s\n", (int)int8, cublasGetStatusName(int8));
        // What cuBLAS refuses: a leading dimension below the rows; and (the shim's own check) a
        // matrix that is not this program's device memory, or runs past its allocation.
        cublasStatus_t lda = cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da, m - 1, db, k, &beta, dc, m);
        printf("lda below m: %d %s\n", (int)lda, cublasGetStatusName(lda));
        if (!native) {
            cublasStatus_t host = cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a.data(), m, db, k, &beta,
                                                 dc, m);
            printf("host matrix: %d %s\n", (int)host, cublasGetStatusName(host));
            cublasStatus_t past = cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n + 1, k, &alpha, da, m, db, k, &beta,
                                                 dc, m);
            printf("past the allocation: %d %s\n", (int)past, cublasGetStatusName(past));
        }
        CHECK(cudaFree(da));
        CHECK(cudaFree(db));
        CHECK(cudaFree(dc));
    }

    // cuBLAS's copies: a padded matrix both ways (only its rows travel), a vector strided on the
    // host; a function the shim does not serve answers 15 and the program goes on.
    {
        const int rows = 5, cols = 4, lda = 7, ldb = 6;
        auto a = small_integers<float>(lda * cols, 7);
        std::vector<float> back(lda * cols, 100.0f);
        float* d;
        CHECK(cudaMalloc(&d, ldb * cols * sizeof(float)));
        CUBLAS(cublasSetMatrix(rows, cols, sizeof(float), a.data(), lda, d, ldb));
        CUBLAS(cublasGetMatrix(rows, cols, sizeof(float), d, ldb, back.data(), lda));
        bool copied = true;
        for (int j = 0; j < cols; j++)
            for (int i = 0; i < lda; i++) copied &= back[i + j * lda] == (i < rows ? a[i + j * lda] : 100.0f);
        float x[12], y[12] = {0};
        for (int i = 0; i < 12; i++) x[i] = (float)i;
        CUBLAS(cublasSetVector(4, sizeof(float), x, 3, d, 1));
        CUBLAS(cublasGetVector(4, sizeof(float), d, 1, y, 2));
        for (int i = 0; i < 4; i++) copied &= y[2 * i] == x[3 * i] && y[2 * i + 1] == 0.0f;
        printf(copied ? "set and get matrix and vector exact\n" : "copies FAILED\n");
        ok &= copied;
        cublasStatus_t strided = cublasSetVector(4, sizeof(float), x, 1, d, 2);
        printf("strided on the device: %d %s\n", (int)strided, cublasGetStatusName(strided));
        if (!native) {
            // Not served (answered before its pointers are read, which cuBLAS would read).
            cublasStatus_t unserved =
                cublasUint8gemmBias(h, CUBLAS_OP_N, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, nullptr, 0, 2, nullptr, 0, 2, nullptr, 0, 2, 1, 0);
            printf("uint8 gemm with biases: %d %s\n", (int)unserved, cublasGetStatusName(unserved));
        }
        CHECK(cudaFree(d));
    }

    // Four threads at once: two with a handle and stream of their own, two sharing the main
    // thread's handle (cuBLAS calls may share one handle that no thread reconfigures).
    int failures = 0;
    {
        std::vector<std::thread> threads;
        for (int t = 0; t < 4; t++)
            threads.emplace_back([&failures, h, t] {
                bool own = t < 2;
                cublasHandle_t mine = h;
                cudaStream_t s = 0;
                if (own) {
                    CUBLAS(cublasCreate_v2(&mine));
                    CHECK(cudaStreamCreate(&s));
                    CUBLAS(cublasSetStream_v2(mine, s));
                }
                char what[32];
                snprintf(what, sizeof what, "thread %d", t);
                if (!one<float>(mine, what, t % 2 == 1, false, 25 + t, 19, 11, 1.0f, 1.0f, 1, 1.0f))
                    __atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);
                if (own) {
                    CHECK(cudaStreamDestroy(s));
                    CUBLAS(cublasDestroy_v2(mine));
                }
            });
        for (auto& t : threads) t.join();
    }
    ok &= failures == 0;
    // Still served after the refusals.
    ok &= one<float>(h, "sgemm after refusals", false, true, 8, 8, 8, 1.0f, 0.0f, 0, 0.0f);
    CUBLAS(cublasDestroy_v2(h));
    if (!native) {
        cublasStatus_t stale = cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, nullptr, nullptr, 1, nullptr, 1, nullptr,
                                              nullptr, 1);
        printf("destroyed handle: %d %s\n", (int)stale, cublasGetStatusName(stale));
    }
    printf(ok ? "cublas_gemm: all exact\n" : "cublas_gemm: FAILED\n");
    // A last gemm left running: no synchronize, no free, no destroy, as a program that exits
    // early; what it held goes back with the process.
    {
        cublasHandle_t last;
        CUBLAS(cublasCreate_v2(&last));
        auto big = small_integers<float>(128 * 128, 9);
        float *da = upload(big), *dc = upload(big), alpha = 1.0f, beta = 1.0f;
        CUBLAS(cublasSgemm_v2(last, CUBLAS_OP_N, CUBLAS_OP_N, 128, 128, 128, &alpha, da, 128, da, 128, &beta, dc, 128));
    }
    return ok ? 0 : 1;
}
