// cuBLASLt's matmul from a plain CUDA program linked against libcublasLt.so.13, as PyTorch's
// linear layers call it: a heuristic, then D = alpha op(A) op(B) + beta C with a bias added to
// every column (CUBLASLT_EPILOGUE_BIAS), and ReLU or GELU after it (_RELU, _RELU_BIAS, _GELU_BIAS,
// as PyTorch's _addmm_activation asks); strided batches on a stream, double precision with
// padded matrices, alpha and beta in device memory, layouts initialized on the stack, a cuBLAS
// handle used as a cuBLASLt one; an algorithm picked by hand (ids, init, capabilities,
// configuration, check) as a tuner picks one; and what the shim cannot run, which the heuristic
// answers with no algorithm and the check and the matmul refuse; matrix transforms (C = alpha
// op(A) + beta op(B), batched, a term left out) and an emulation descriptor. Every result is
// checked exactly (small integers), but GELU's, within 1e-3 of a reference in double (the
// largest value's; NVIDIA's may take a fast tanh).
// Usage: cublaslt_matmul [--native] (--native: leaves out what only the shim refuses)
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cublas_helpers.h"
#include "cublaslt_min.h"

// One matmul's shape and settings.
struct Case {
    const char* what;
    bool ta, tb;
    int m, n, k, pad, batch;
    int epilogue;  // cublasLtEpilogue_t
    bool device_scalars;
    double alpha, beta;
};

template <typename T>
static cublasLtMatrixLayout_t layout(int rows, int cols, int ld, int batch, long long offset) {
    cublasLtMatrixLayout_t l;
    CUBLAS(cublasLtMatrixLayoutCreate(&l, sizeof(T) == 4 ? CUDA_R_32F_ : CUDA_R_64F_, rows, cols, ld));
    if (batch > 1) {
        CUBLAS(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
        int64_t off = offset;
        CUBLAS(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &off, sizeof off));
    }
    return l;
}

template <typename T>
static cublasLtMatmulDesc_t descriptor(bool ta, bool tb, int epilogue) {
    cublasLtMatmulDesc_t d;
    CUBLAS(cublasLtMatmulDescCreate(&d, sizeof(T) == 4 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_64F,
                                    sizeof(T) == 4 ? CUDA_R_32F_ : CUDA_R_64F_));
    int32_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CUBLAS(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    uint32_t e = epilogue;
    CUBLAS(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
    return d;
}

// Runs one case through the heuristic and cublasLtMatmul, against a reference.
template <typename T>
static bool run(cublasLtHandle_t lt, const Case& c) {
    const int lda = (c.ta ? c.k : c.m) + c.pad, ldb = (c.tb ? c.n : c.k) + c.pad, ldd = c.m + c.pad;
    const long long sa = (long long)lda * (c.ta ? c.m : c.k) + 3, sb = (long long)ldb * (c.tb ? c.k : c.n),
                    sd = (long long)ldd * c.n + 1;
    auto a = small_integers<T>(sa * c.batch, 1), b = small_integers<T>(sb * c.batch, 2);
    auto d = small_integers<T>(sd * c.batch, 3), bias = small_integers<T>(c.m, 4), want = d;
    T alpha = (T)c.alpha, beta = (T)c.beta;
    const bool with_bias = c.epilogue & CUBLASLT_EPILOGUE_BIAS, relu = c.epilogue & CUBLASLT_EPILOGUE_RELU,
               gelu = c.epilogue & CUBLASLT_EPILOGUE_GELU;
    for (int i = 0; i < c.batch; i++) {
        reference(c.ta, c.tb, c.m, c.n, c.k, alpha, &a[i * sa], lda, &b[i * sb], ldb, beta, &want[i * sd], ldd);
        for (int col = 0; col < c.n; col++)
            for (int row = 0; row < c.m; row++) {
                T& v = want[i * sd + row + col * ldd];
                if (with_bias) v += bias[row];
                if (relu) v = v > 0 ? v : 0;
                if (gelu) v = (T)(0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))));
            }
    }
    T *da = upload(a), *db = upload(b), *dd = upload(d), *dbias = upload(bias);
    std::vector<T> scalars = {alpha, beta};
    T* dscalars = upload(scalars);
    auto desc = descriptor<T>(c.ta, c.tb, c.epilogue);
    if (with_bias) CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias));
    if (c.device_scalars) {
        int32_t mode = CUBLAS_POINTER_MODE_DEVICE;
        CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof mode));
    }
    auto la = layout<T>(c.ta ? c.k : c.m, c.ta ? c.m : c.k, lda, c.batch, sa);
    auto lb = layout<T>(c.tb ? c.n : c.k, c.tb ? c.k : c.n, ldb, c.batch, sb);
    auto ld = layout<T>(c.m, c.n, ldd, c.batch, sd);
    cublasLtMatmulPreference_t pref;
    CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t workspace = 1 << 20;
    CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                sizeof workspace));
    cublasLtMatmulHeuristicResult_t found = {};
    int count = 0;
    CUBLAS(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, &found, &count));
    if (count != 1 || found.state != CUBLAS_STATUS_SUCCESS) {
        printf("%s: %d algorithms\n", c.what, count);
        return false;
    }
    void* space = nullptr;
    if (found.workspaceSize) CHECK(cudaMalloc(&space, found.workspaceSize));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    const void* pa = c.device_scalars ? (const void*)dscalars : (const void*)&alpha;
    const void* pb = c.device_scalars ? (const void*)(dscalars + 1) : (const void*)&beta;
    CUBLAS(cublasLtMatmul(lt, desc, pa, da, la, db, lb, pb, dd, ld, dd, ld, &found.algo, space, found.workspaceSize,
                          s));
    CHECK(cudaStreamSynchronize(s));
    bool ok;
    if (gelu) {
        auto got = download(dd, d.size());
        double worst = 0, largest = 0;
        for (size_t i = 0; i < got.size(); i++) {
            worst = std::fmax(worst, std::fabs((double)got[i] - (double)want[i]));
            largest = std::fmax(largest, std::fabs((double)want[i]));
        }
        // NVIDIA's epilogue may take a faster tanh than the shim's (within 1e-5 of it).
        ok = worst <= 1e-3 * largest;
        printf(ok ? "%s within\n" : "%s: off by %g\n", c.what, worst);
    } else {
        ok = same(c.what, download(dd, d.size()), want);
        if (ok) printf("%s exact\n", c.what);
    }
    CHECK(cudaStreamDestroy(s));
    for (T* p : {da, db, dd, dbias, dscalars}) CHECK(cudaFree(p));
    if (space) CHECK(cudaFree(space));
    for (auto l : {la, lb, ld}) CUBLAS(cublasLtMatrixLayoutDestroy(l));
    CUBLAS(cublasLtMatmulPreferenceDestroy(pref));
    CUBLAS(cublasLtMatmulDescDestroy(desc));
    return ok;
}

// C (m x n) = alpha op(A) + beta op(B) through cublasLtMatrixTransform, against the host's:
// `at(X, i, j)` is element (i, j) of op(X), X stored with leading dimension ld.
template <typename T>
static T op_of(const std::vector<T>& x, int ld, int trans, int i, int j, long long base) {
    return trans ? x[base + j + i * ld] : x[base + i + j * ld];
}

// Matrix transforms: f32 C (3 x 4, ld 5, two batches 20 apart) = 2 A (ld 4, batches 16 apart)
// - B^T (B stored 4 x 3, one shared by both batches); f64 with A null and transposed (C = 3 B),
// alpha and beta in device memory; and an emulation descriptor set and read back, given to a
// matmul descriptor. What the shim does not serve (`native` false): binary16 layouts.
static bool transforms(cublasLtHandle_t lt, bool native) {
    bool ok = true;
    {
        const int m = 3, n = 4, lda = 4, ldb = 4, ldc = 5, batches = 2;
        auto a = small_integers<float>(16 * batches, 7), b = small_integers<float>(ldb * m, 8);
        std::vector<float> c(20 * batches, 99.0f), want = c;
        for (int q = 0; q < batches; q++)
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++)
                    want[q * 20 + i + j * ldc] = 2 * op_of(a, lda, 0, i, j, q * 16) - op_of(b, ldb, 1, i, j, 0);
        float *da = upload(a), *db = upload(b), *dc = upload(c);
        cublasLtMatrixTransformDesc_t desc;
        CUBLAS(cublasLtMatrixTransformDescCreate(&desc, CUDA_R_32F_));
        int32_t t = CUBLAS_OP_T;
        CUBLAS(cublasLtMatrixTransformDescSetAttribute(desc, CUBLASLT_MATRIX_TRANSFORM_DESC_TRANSB, &t, sizeof t));
        auto la = layout<float>(m, n, lda, batches, 16), lb = layout<float>(n, m, ldb, 1, 0);
        auto lc = layout<float>(m, n, ldc, batches, 20);
        float alpha = 2, beta = -1;
        CUBLAS(cublasLtMatrixTransform(lt, desc, &alpha, da, la, &beta, db, lb, dc, lc, 0));
        ok &= same("transform 2 A - B^T, two batches", download(dc, c.size()), want);
        if (ok) printf("transform 2 A - B^T, two batches exact\n");
        if (!native) {
            // What the shim does not serve: binary16 matrices (layout changes for tensor cores).
            cublasLtMatrixLayout_t half;
            CUBLAS(cublasLtMatrixLayoutCreate(&half, CUDA_R_16F_, m, n, lda));
            cublasStatus_t s = cublasLtMatrixTransform(lt, desc, &alpha, da, half, &beta, db, lb, dc, lc, 0);
            printf("transform of f16 A: %d %s\n", (int)s, cublasGetStatusName(s));
            CUBLAS(cublasLtMatrixLayoutDestroy(half));
        }
        // What cuBLASLt refuses: B's shape not op(B)'s.
        cublasStatus_t s = cublasLtMatrixTransform(lt, desc, &alpha, da, la, &beta, db, lc, dc, lc, 0);
        printf("transform with B of the wrong shape: %d %s\n", (int)s, cublasGetStatusName(s));
        CUBLAS(cublasLtMatrixTransformDescDestroy(desc));
        for (auto l : {la, lb, lc}) CUBLAS(cublasLtMatrixLayoutDestroy(l));
        for (float* p : {da, db, dc}) CHECK(cudaFree(p));
    }
    {
        // A null and transposed (op(A) would be n x m stored: no rows of C's to stand in).
        const int m = 5, n = 6;
        auto b = small_integers<double>(m * n, 9);
        std::vector<double> c(m * n, -7.0), want(m * n);
        for (int i = 0; i < m * n; i++) want[i] = 3 * b[i];
        double *db = upload(b), *dc = upload(c), *scalars = upload(std::vector<double>{0.0, 3.0});
        cublasLtMatrixTransformDesc_t desc;
        CUBLAS(cublasLtMatrixTransformDescCreate(&desc, CUDA_R_64F_));
        int32_t device = 1, t = CUBLAS_OP_T;
        CUBLAS(cublasLtMatrixTransformDescSetAttribute(desc, CUBLASLT_MATRIX_TRANSFORM_DESC_POINTER_MODE, &device,
                                                       sizeof device));
        CUBLAS(cublasLtMatrixTransformDescSetAttribute(desc, CUBLASLT_MATRIX_TRANSFORM_DESC_TRANSA, &t, sizeof t));
        auto l = layout<double>(m, n, m, 1, 0);
        CUBLAS(cublasLtMatrixTransform(lt, desc, scalars, nullptr, nullptr, scalars + 1, db, l, dc, l, 0));
        bool scaled = same("transform 3 B, A null and transposed, device scalars", download(dc, want.size()), want);
        if (scaled) printf("transform 3 B, A null and transposed, device scalars exact\n");
        ok &= scaled;
        CUBLAS(cublasLtMatrixTransformDescDestroy(desc));
        CUBLAS(cublasLtMatrixLayoutDestroy(l));
        for (double* p : {db, dc, scalars}) CHECK(cudaFree(p));
    }
    {
        cublasLtEmulationDesc_t emulation;
        CUBLAS(cublasLtEmulationDescCreate(&emulation));
        int32_t eager = 2, got = -1, special = 0;
        size_t written = 0;
        CUBLAS(cublasLtEmulationDescSetAttribute(emulation, CUBLASLT_EMULATION_DESC_STRATEGY, &eager, sizeof eager));
        CUBLAS(cublasLtEmulationDescGetAttribute(emulation, CUBLASLT_EMULATION_DESC_STRATEGY, &got, sizeof got, &written));
        CUBLAS(cublasLtEmulationDescGetAttribute(emulation, CUBLASLT_EMULATION_DESC_SPECIAL_VALUES_SUPPORT, &special,
                                                 sizeof special, &written));
        auto matmul = descriptor<double>(false, false, CUBLASLT_EPILOGUE_DEFAULT);
        CUBLAS(cublasLtMatmulDescSetAttribute(matmul, CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR, &emulation,
                                              sizeof emulation));
        bool kept = got == 2 && special == 0xFFFF && written == 4;
        printf(kept ? "emulation descriptor kept\n" : "emulation descriptor FAILED\n");
        ok &= kept;
        CUBLAS(cublasLtMatmulDescDestroy(matmul));
        CUBLAS(cublasLtEmulationDescDestroy(emulation));
    }
    return ok;
}

int main(int argc, char** argv) {
    bool native = argc > 1 && strcmp(argv[1], "--native") == 0;
    cublasLtHandle_t lt;
    CUBLAS(cublasLtCreate(&lt));
    bool ok = true;
    // PyTorch's linear layer: out (col-major out x batch) = W^T-stored weight times input, bias added, beta 0.
    const int none = CUBLASLT_EPILOGUE_DEFAULT, bias = CUBLASLT_EPILOGUE_BIAS;
    ok &= run<float>(lt, {"linear with bias", true, false, 48, 16, 32, 0, 1, bias, false, 1.0, 0.0});
    ok &= run<float>(lt, {"batched NN beta 2", false, false, 20, 12, 9, 2, 3, none, false, 3.0, 2.0});
    ok &= run<float>(lt, {"NT bias batched", false, true, 17, 5, 6, 1, 2, bias, false, -1.0, 1.0});
    ok &= run<double>(lt, {"double TT padded with bias", true, true, 13, 11, 7, 3, 1, bias, false, 2.0, 0.5});
    ok &= run<float>(lt, {"device scalars", false, false, 9, 9, 9, 0, 1, none, true, 2.0, -1.0});
    ok &= run<float>(lt, {"relu with bias, batched and padded", false, false, 20, 12, 9, 2, 3, CUBLASLT_EPILOGUE_RELU_BIAS,
                          false, 1.0, 0.0});
    ok &= run<float>(lt, {"relu TN beta 1", true, false, 11, 7, 5, 1, 1, CUBLASLT_EPILOGUE_RELU, false, 1.0, 1.0});
    ok &= run<float>(lt, {"gelu with bias", false, false, 16, 8, 4, 0, 1, CUBLASLT_EPILOGUE_GELU_BIAS, false, 0.25, 0.0});

    // A layout initialized in the program's own memory, and a cuBLAS handle used as cuBLASLt's.
    {
        cublasHandle_t h;
        CUBLAS(cublasCreate_v2(&h));
        cublasLtMatrixLayoutOpaque_t la, lb, lc;
        CUBLAS(cublasLtMatrixLayoutInit_internal(&la, sizeof la, CUDA_R_32F_, 8, 4, 8));
        CUBLAS(cublasLtMatrixLayoutInit_internal(&lb, sizeof lb, CUDA_R_32F_, 4, 6, 4));
        CUBLAS(cublasLtMatrixLayoutInit_internal(&lc, sizeof lc, CUDA_R_32F_, 8, 6, 8));
        auto a = small_integers<float>(32, 5), b = small_integers<float>(24, 6);
        std::vector<float> c(48, 0.0f), want = c;
        reference(false, false, 8, 6, 4, 1.0f, a.data(), 8, b.data(), 4, 0.0f, want.data(), 8);
        float *da = upload(a), *db = upload(b), *dc = upload(c), one = 1.0f, zero = 0.0f;
        auto desc = descriptor<float>(false, false, CUBLASLT_EPILOGUE_DEFAULT);
        CUBLAS(cublasLtMatmul((cublasLtHandle_t)h, desc, &one, da, &la, db, &lb, &zero, dc, &lc, dc, &lc, nullptr,
                              nullptr, 0, 0));
        if (same("stack layouts", download(dc, c.size()), want)) printf("stack layouts and a cuBLAS handle exact\n");
        else ok = false;

        // An algorithm picked by hand, as a tuner picks one: the ids for these types, each
        // initialized and checked against the matmul until one fits, its capabilities and
        // configuration read, then run with it.
        int ids[16], found_ids = 0;
        CUBLAS(cublasLtMatmulAlgoGetIds((cublasLtHandle_t)h, CUBLAS_COMPUTE_32F, CUDA_R_32F_, CUDA_R_32F_, CUDA_R_32F_,
                                        CUDA_R_32F_, CUDA_R_32F_, 16, ids, &found_ids));
        cublasLtMatmulAlgo_t algo;
        cublasLtMatmulHeuristicResult_t checked = {};
        bool fits = false;
        for (int i = 0; i < found_ids && !fits; i++) {
            if (cublasLtMatmulAlgoInit((cublasLtHandle_t)h, CUBLAS_COMPUTE_32F, CUDA_R_32F_, CUDA_R_32F_, CUDA_R_32F_,
                                       CUDA_R_32F_, CUDA_R_32F_, ids[i], &algo) != CUBLAS_STATUS_SUCCESS)
                continue;
            fits = cublasLtMatmulAlgoCheck((cublasLtHandle_t)h, desc, &la, &lb, &lc, &lc, &algo, &checked) ==
                       CUBLAS_STATUS_SUCCESS &&
                   checked.state == CUBLAS_STATUS_SUCCESS;
        }
        size_t tiles = 0, written = 0;
        int32_t id = -1, splits = 0;
        if (fits) {
            CUBLAS(cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, nullptr, 0, &tiles));
            CUBLAS(cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &written));
            CUBLAS(cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof splits,
                                                        nullptr));
            void* space = nullptr;
            if (checked.workspaceSize) CHECK(cudaMalloc(&space, checked.workspaceSize));
            CHECK(cudaMemcpy(dc, c.data(), c.size() * sizeof(float), cudaMemcpyHostToDevice));
            CUBLAS(cublasLtMatmul((cublasLtHandle_t)h, desc, &one, da, &la, db, &lb, &zero, dc, &lc, dc, &lc, &algo,
                                  space, checked.workspaceSize, 0));
            fits = same("picked by hand", download(dc, c.size()), want);
            if (space) CHECK(cudaFree(space));
        }
        if (fits && tiles >= sizeof(uint32_t) && written == sizeof id && splits >= 1)
            printf("an algorithm picked by hand exact (%d ids)\n", found_ids);
        else {
            printf("an algorithm picked by hand: FAILED (%d ids, tiles %zu bytes, id %d, splits %d)\n", found_ids,
                   tiles, id, splits);
            ok = false;
        }
        // A hint of how many multiprocessors to use, as PyTorch sets it.
        int sms = -1;
        CUBLAS(cublasSetSmCountTarget(h, 4));
        CUBLAS(cublasGetSmCountTarget(h, &sms));
        printf("sm count target %d\n", sms);

        // What the shim cannot run: the heuristic finds no algorithm (callers fall back to
        // cuBLAS), the matmul says so. What cuBLASLt refuses: shapes that do not match.
        cublasLtMatmulHeuristicResult_t found = {};
        int count = -1;
        cublasLtMatmulPreference_t pref;
        CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
        if (!native) {
            // GELU keeping its input in binary16 for f32 D.
            auto aux = descriptor<float>(false, false, CUBLASLT_EPILOGUE_GELU_AUX);
            int64_t aux_ld = 8;
            int32_t half = CUDA_R_16F_;
            CUBLAS(cublasLtMatmulDescSetAttribute(aux, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &dc, sizeof dc));
            CUBLAS(cublasLtMatmulDescSetAttribute(aux, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
            CUBLAS(cublasLtMatmulDescSetAttribute(aux, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &half, sizeof half));
            CUBLAS(cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)h, aux, &la, &lb, &lc, &lc, pref, 1, &found, &count));
            printf("an f16 gelu input: %d algorithms\n", count);
            cublasStatus_t s = cublasLtMatmul((cublasLtHandle_t)h, aux, &one, da, &la, db, &lb, &zero, dc, &lc, dc, &lc,
                                              nullptr, nullptr, 0, 0);
            printf("an f16 gelu input's matmul: %d %s\n", (int)s, cublasGetStatusName(s));
            int32_t row = CUBLASLT_ORDER_ROW;
            CUBLAS(cublasLtMatrixLayoutSetAttribute(&lb, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof row));
            count = -1;
            CUBLAS(cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)h, desc, &la, &lb, &lc, &lc, pref, 1, &found, &count));
            printf("row-major B: %d algorithms\n", count);
            CUBLAS(cublasLtMatmulDescDestroy(aux));
            row = CUBLASLT_ORDER_COL;
            CUBLAS(cublasLtMatrixLayoutSetAttribute(&lb, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof row));
            // A configuration the builtin gemm does not run, an algorithm of other types, and
            // the read-only id: refused, by the check and by the matmul.
            int32_t four = 4;
            CUBLAS(cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &four, sizeof four));
            s = cublasLtMatmulAlgoCheck((cublasLtHandle_t)h, desc, &la, &lb, &lc, &lc, &algo, &checked);
            printf("split-K 4: %d %s\n", (int)s, cublasGetStatusName(s));
            s = cublasLtMatmul((cublasLtHandle_t)h, desc, &one, da, &la, db, &lb, &zero, dc, &lc, dc, &lc, &algo, nullptr,
                               0, 0);
            printf("split-K 4 matmul: %d %s\n", (int)s, cublasGetStatusName(s));
            s = cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &four, sizeof four);
            printf("setting the id: %d %s\n", (int)s, cublasGetStatusName(s));
            cublasLtMatmulAlgo_t doubles;
            CUBLAS(cublasLtMatmulAlgoInit((cublasLtHandle_t)h, CUBLAS_COMPUTE_64F, CUDA_R_64F_, CUDA_R_64F_, CUDA_R_64F_,
                                          CUDA_R_64F_, CUDA_R_64F_, ids[0], &doubles));
            s = cublasLtMatmulAlgoCheck((cublasLtHandle_t)h, desc, &la, &lb, &lc, &lc, &doubles, &checked);
            printf("an f64 algorithm for f32 matrices: %d %s\n", (int)s, cublasGetStatusName(s));
            s = cublasLtMatmulAlgoInit((cublasLtHandle_t)h, CUBLAS_COMPUTE_32F, CUDA_R_32F_, CUDA_R_32F_, CUDA_R_32F_,
                                       CUDA_R_32F_, CUDA_R_32F_, 99, &doubles);
            printf("algorithm 99: %d %s\n", (int)s, cublasGetStatusName(s));
        }
        cublasLtMatrixLayoutOpaque_t wrong;
        CUBLAS(cublasLtMatrixLayoutInit_internal(&wrong, sizeof wrong, CUDA_R_32F_, 5, 6, 5));
        cublasStatus_t shape = cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)h, desc, &la, &wrong, &lc, &lc, pref, 1,
                                                              &found, &count);
        printf("shapes that do not match: %d %s\n", (int)shape, cublasGetStatusName(shape));
        CUBLAS(cublasLtMatmulPreferenceDestroy(pref));
        CUBLAS(cublasLtMatmulDescDestroy(desc));
        for (float* p : {da, db, dc}) CHECK(cudaFree(p));
        CUBLAS(cublasDestroy_v2(h));
    }
    ok &= transforms(lt, native);
    CUBLAS(cublasLtDestroy(lt));
    printf(ok ? "cublaslt_matmul: all exact\n" : "cublaslt_matmul: FAILED\n");
    return ok ? 0 : 1;
}
