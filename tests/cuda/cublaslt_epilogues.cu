// cuBLASLt's training epilogues from a plain CUDA program linked against libcublasLt.so.13, as a
// fused MLP trains (OneFlow's fused_matmul_bias_add_relu, Paddle's fused_gemm_epilogue): forward
// passes that keep ReLU's mask (RELU_AUX_BIAS) or GELU's input (GELU_AUX_BIAS), backward passes
// that read them back with the bias gradient (DRELU_BGRAD, DGELU_BGRAD) or without (DRELU,
// DGELU), and the bias gradients of an input (BGRADA, BGRADB); batched, transposed, in f32 and
// f64 (ReLU's pair in binary16 too), with activations on f64 matrices (RELU_BIAS, GELU). Each result is checked against the host's,
// the padding included: ReLU's and the bias gradients of small integers exactly, GELU's within
// 1e-3 (f32) or 1e-9 (f64) of a reference in double, relative to the largest value (NVIDIA's may
// take a faster tanh). Then (not --native) what cuBLASLt refuses: an auxiliary matrix missing or
// not laid out as its documentation asks, and one of another type than D's, which the shim
// does not run.
// Usage: cublaslt_epilogues [--native]
#include <cmath>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cublas_helpers.h"
#include "cublaslt_min.h"

// A matmul's shape: op(A) m x k, op(B) k x n, `batch` of them; leading dimensions and batch
// strides padded, none a multiple of 9 (small_integers' period: the values along it repeat).
struct Shape {
    int m, n, k, batch;
    bool ta, tb;
    int lda() const { return (ta ? k : m) + 1; }
    int ldb() const { return (tb ? n : k) + 2; }
    int ldd() const { return m + 3; }
    long long sa() const { return (long long)lda() * (ta ? m : k) + 2; }
    long long sb() const { return (long long)ldb() * (tb ? k : n) + 2; }
    long long sd() const { return (long long)ldd() * n + 3; }
};

// The auxiliary matrix of an epilogue: its device memory, leading dimension and batch stride.
struct Aux {
    void* p;
    long long ld, stride;
};

// The matrices' type: f32, f64, or binary16 (held as unsigned short).
template <typename T>
static int type_of() {
    return sizeof(T) == 2 ? CUDA_R_16F_ : sizeof(T) == 4 ? CUDA_R_32F_ : CUDA_R_64F_;
}

template <typename T>
static cublasLtMatrixLayout_t layout(int rows, int cols, int ld, int batch, long long offset) {
    cublasLtMatrixLayout_t l;
    CUBLAS(cublasLtMatrixLayoutCreate(&l, type_of<T>(), rows, cols, ld));
    CUBLAS(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
    CUBLAS(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &offset, sizeof offset));
    return l;
}

// Runs D = op(A) op(B) (alpha 1, beta 0) with `epilogue` through the heuristic and
// cublasLtMatmul: `d` holds D before (its padding must stay) and after; `bias` the bias (m a
// batch, m apart; n for BGRADB) before and after; `aux` the auxiliary matrix, if any. Returns
// the matmul's status (the heuristic's, if it failed), or -1 when the heuristic found no
// algorithm.
// (`bias` is of `a`'s type, not deduced: a null one names none.)
template <typename T>
struct Given {
    using type = T;
};
template <typename T>
static int matmul(cublasLtHandle_t lt, const Shape& s, int epilogue, const std::vector<T>& a, const std::vector<T>& b,
                  std::vector<T>& d, typename Given<std::vector<T>>::type* bias, const Aux* aux, int aux_type = -1) {
    // Computed in f64 for f64 matrices, else in f32 with f32 scalars (binary16 as PyTorch's).
    using Scale = typename std::conditional<sizeof(T) == 8, double, float>::type;
    cublasLtMatmulDesc_t desc;
    CUBLAS(cublasLtMatmulDescCreate(&desc, sizeof(T) == 8 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F,
                                    sizeof(T) == 8 ? CUDA_R_64F_ : CUDA_R_32F_));
    int32_t opa = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint32_t e = epilogue;
    CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
    T *da = upload(a), *db = upload(b), *dd = upload(d), *dbias = bias ? upload(*bias) : nullptr;
    if (bias) {
        int64_t stride = (long long)bias->size() / s.batch;
        CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias));
        CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &stride, sizeof stride));
    }
    if (aux) {
        int64_t ld = aux->ld, stride = aux->stride;
        CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux->p, sizeof aux->p));
        CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
        CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &stride,
                                              sizeof stride));
    }
    if (aux_type != -1)
        CUBLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &aux_type,
                                              sizeof aux_type));
    auto la = layout<T>(s.ta ? s.k : s.m, s.ta ? s.m : s.k, s.lda(), s.batch, s.sa());
    auto lb = layout<T>(s.tb ? s.n : s.k, s.tb ? s.k : s.n, s.ldb(), s.batch, s.sb());
    auto ld = layout<T>(s.m, s.n, s.ldd(), s.batch, s.sd());
    cublasLtMatmulPreference_t pref;
    CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    cublasLtMatmulHeuristicResult_t found = {};
    int count = 0, status;
    cublasStatus_t h = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, &found, &count);
    if (h != CUBLAS_STATUS_SUCCESS) status = h;
    else if (count < 1) status = -1;
    else {
        void* space = nullptr;
        if (found.workspaceSize) CHECK(cudaMalloc(&space, found.workspaceSize));
        Scale one = 1, zero = 0;
        status = cublasLtMatmul(lt, desc, &one, da, la, db, lb, &zero, dd, ld, dd, ld, &found.algo, space,
                                found.workspaceSize, 0);
        CHECK(cudaDeviceSynchronize());
        d = download(dd, d.size());
        if (bias) *bias = download(dbias, bias->size());
        if (space) CHECK(cudaFree(space));
    }
    for (T* p : {da, db, dd, dbias})
        if (p) CHECK(cudaFree(p));
    for (auto l : {la, lb, ld}) CUBLAS(cublasLtMatrixLayoutDestroy(l));
    CUBLAS(cublasLtMatmulPreferenceDestroy(pref));
    CUBLAS(cublasLtMatmulDescDestroy(desc));
    return status;
}

// Element (i, j) of op(X), X stored with leading dimension ld from `base`.
template <typename T>
static T op_at(const std::vector<T>& x, long long base, int ld, bool trans, int i, int j) {
    return trans ? x[base + j + (long long)i * ld] : x[base + i + (long long)j * ld];
}

// The host's product op(A) op(B) into D's layout, each batch; the padding as `d` holds it.
template <typename T>
static std::vector<T> product(const Shape& s, const std::vector<T>& a, const std::vector<T>& b, std::vector<T> d) {
    for (int q = 0; q < s.batch; q++)
        for (int j = 0; j < s.n; j++)
            for (int i = 0; i < s.m; i++) {
                T acc = 0;
                for (int p = 0; p < s.k; p++)
                    acc += op_at(a, q * s.sa(), s.lda(), s.ta, i, p) * op_at(b, q * s.sb(), s.ldb(), s.tb, p, j);
                d[q * s.sd() + i + (long long)j * s.ldd()] = acc;
            }
    return d;
}

// Calls f(q, i, j, at) for each element of D: batch, row, column, index.
template <typename F>
static void each(const Shape& s, F f) {
    for (int q = 0; q < s.batch; q++)
        for (int j = 0; j < s.n; j++)
            for (int i = 0; i < s.m; i++) f(q, i, j, q * s.sd() + i + (long long)j * s.ldd());
}

static double gelu(double x) { return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double gelu_slope(double x) {
    double t = std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}

// Whether `got` is `want` within `tolerance` of the largest value; says which.
template <typename T>
static bool close(const char* what, const std::vector<T>& got, const std::vector<T>& want, double tolerance) {
    double worst = 0, largest = 0;
    for (size_t i = 0; i < want.size(); i++) {
        worst = std::fmax(worst, std::fabs((double)got[i] - (double)want[i]));
        largest = std::fmax(largest, std::fabs((double)want[i]));
    }
    bool ok = worst <= tolerance * largest;
    printf(ok ? "%s within\n" : "%s: off by %g of %g\n", what, worst, largest);
    return ok;
}

static bool exact(const char* what, bool ok) {
    if (ok) printf("%s exact\n", what);
    return ok;
}

// The sums of D's rows (each batch's bias gradient, m apart).
template <typename T>
static std::vector<T> row_sums(const Shape& s, const std::vector<T>& d) {
    std::vector<T> sums(s.m * s.batch, 0);
    each(s, [&](int q, int i, int, long long at) { sums[q * s.m + i] += d[at]; });
    return sums;
}

// op(A) op(B) plus the bias (a column a batch) in D's layout, `d`'s padding kept: what ReLU
// is applied to.
static std::vector<float> biased_product(const Shape& s, const std::vector<float>& a, const std::vector<float>& b,
                                         const std::vector<float>& d, const std::vector<float>& bias) {
    auto z = product(s, a, b, d);
    each(s, [&](int q, int i, int, long long at) { z[at] += bias[q * s.m + i]; });
    return z;
}

// ReLU of each element of D in `z`.
static std::vector<float> relu_of(const Shape& s, std::vector<float> z) {
    each(s, [&](int, int, int, long long at) { z[at] = z[at] > 0 ? z[at] : 0; });
    return z;
}

// ReLU's gradient: op(A) op(B) in D's layout (`d`'s padding kept), zeroed where the forward
// pass's input `z` was not positive, element (i, j) of batch q read at `from(q, i, j, at)`.
template <typename F>
static std::vector<float> relu_gradient(const Shape& s, const std::vector<float>& a, const std::vector<float>& b,
                                        const std::vector<float>& d, const std::vector<float>& z, F from) {
    auto g = product(s, a, b, d);
    each(s, [&](int q, int i, int j, long long at) { g[at] = z[from(q, i, j, at)] > 0 ? g[at] : 0; });
    return g;
}

// Each element's own place.
static long long same_place(int, int, int, long long at) { return at; }

// ReLU keeping its mask, its gradient reading it back with the bias gradient, and ReLU's
// gradient alone: f32, two batches, A transposed.
static bool relu_training(cublasLtHandle_t lt) {
    const Shape s{20, 6, 9, 2, true, false};
    auto a = small_integers<float>(s.sa() * s.batch, 1), b = small_integers<float>(s.sb() * s.batch, 2);
    std::vector<float> d(s.sd() * s.batch, 7.0f), bias = small_integers<float>(s.m * s.batch, 3);
    // The mask: 128-bit columns (as cuBLASLt asks), batches 768 bits apart.
    Aux mask{nullptr, 128, 768};
    CHECK(cudaMalloc(&mask.p, 768 * 2 / 8));
    auto z = biased_product(s, a, b, d, bias), want = relu_of(s, z);
    auto forward_bias = bias;
    bool ok = matmul(lt, s, CUBLASLT_EPILOGUE_RELU_AUX_BIAS, a, b, d, &forward_bias, &mask) == 0;
    ok &= exact("relu aux bias forward", ok && same("relu aux bias forward", d, want));

    // Backward: D = op(A') op(B'), zeroed where the forward pass's result was not positive; the
    // bias gradient the sums of its rows.
    auto a2 = small_integers<float>(s.sa() * s.batch, 4), b2 = small_integers<float>(s.sb() * s.batch, 5);
    std::vector<float> d2(s.sd() * s.batch, -5.0f), grad(s.m * s.batch, 99.0f);
    auto want2 = relu_gradient(s, a2, b2, d2, z, same_place);
    bool back = matmul(lt, s, CUBLASLT_EPILOGUE_DRELU_BGRAD, a2, b2, d2, &grad, &mask) == 0;
    back = back && same("drelu bgrad", d2, want2) && same("drelu bgrad's bias gradient", grad, row_sums(s, want2));
    ok &= exact("drelu bgrad backward and bias gradient", back);

    std::vector<float> d3(s.sd() * s.batch, 3.0f);
    auto want3 = relu_gradient(s, a2, b2, d3, z, same_place);
    bool alone = matmul(lt, s, CUBLASLT_EPILOGUE_DRELU, a2, b2, d3, nullptr, &mask) == 0;
    ok &= exact("drelu alone", alone && same("drelu alone", d3, want3));

    // Every batch reading one mask (batch stride 0, cuBLASLt's default): batch 0's.
    Aux shared{mask.p, 128, 0};
    std::vector<float> d4(s.sd() * s.batch, 3.0f);
    auto batch_0 = [&](int, int i, int j, long long) { return i + (long long)j * s.ldd(); };
    auto want4 = relu_gradient(s, a2, b2, d4, z, batch_0);
    bool one = matmul(lt, s, CUBLASLT_EPILOGUE_DRELU, a2, b2, d4, nullptr, &shared) == 0;
    ok &= exact("drelu with batch 0's mask for both", one && same("drelu with batch 0's mask for both", d4, want4));
    CHECK(cudaFree(mask.p));
    return ok;
}

// ReLU's training pair on binary16 matrices computed in f32 (as half-precision layers train):
// the forward pass keeping its mask, the backward pass with the bias gradient; exact, every value
// a small integer (exact in binary16), B transposed, two batches.
static bool half_relu_training(cublasLtHandle_t lt) {
    const Shape s{16, 5, 8, 2, false, true};
    auto a = small_integers<float>(s.sa() * s.batch, 21), b = small_integers<float>(s.sb() * s.batch, 22);
    std::vector<float> d(s.sd() * s.batch, 6.0f), bias = small_integers<float>(s.m * s.batch, 23);
    Aux mask{nullptr, 128, 768};
    CHECK(cudaMalloc(&mask.p, 768 * 2 / 8));
    auto z = biased_product(s, a, b, d, bias), want = relu_of(s, z);
    auto hd = halves_of(d), hbias = halves_of(bias);
    bool ok = matmul(lt, s, CUBLASLT_EPILOGUE_RELU_AUX_BIAS, halves_of(a), halves_of(b), hd, &hbias, &mask) == 0;
    ok = exact("relu aux bias f16", ok && same("relu aux bias f16", floats_of(hd), want));
    auto a2 = small_integers<float>(s.sa() * s.batch, 24), b2 = small_integers<float>(s.sb() * s.batch, 25);
    std::vector<float> d2(s.sd() * s.batch, -5.0f), grad(s.m * s.batch, 99.0f);
    auto want2 = relu_gradient(s, a2, b2, d2, z, same_place);
    auto hd2 = halves_of(d2), hgrad = halves_of(grad);
    bool back = matmul(lt, s, CUBLASLT_EPILOGUE_DRELU_BGRAD, halves_of(a2), halves_of(b2), hd2, &hgrad, &mask) == 0;
    back = back && same("drelu bgrad f16", floats_of(hd2), want2) &&
           same("drelu bgrad's bias gradient f16", floats_of(hgrad), row_sums(s, want2));
    ok &= exact("drelu bgrad f16 and its bias gradient", back);
    CHECK(cudaFree(mask.p));
    return ok;
}

// GELU keeping its input (checked exactly: the product plus the bias), then its gradient at that
// input with and without the bias gradient: `T` (f32 or f64), B transposed, three batches.
template <typename T>
static bool gelu_training(cublasLtHandle_t lt, const char* type, double tolerance) {
    const Shape s{13, 5, 7, 3, false, true};
    auto a = small_integers<T>(s.sa() * s.batch, 6), b = small_integers<T>(s.sb() * s.batch, 7);
    std::vector<T> d(s.sd() * s.batch, 2), bias = small_integers<T>(s.m * s.batch, 8);
    for (T& v : a) v /= 4;  // GELU's interesting range: inputs within a few units of 0
    // The input: 16-element columns (a multiple of 8, as cuBLASLt asks), batches 96 apart, over
    // markers.
    const long long aux_ld = 16, aux_stride = 96, aux_len = aux_stride * s.batch;
    std::vector<T> markers(aux_len, (T)-77);
    Aux input{upload(markers), aux_ld, aux_stride};
    auto z = product(s, a, b, d);
    each(s, [&](int q, int i, int, long long at) { z[at] += bias[q * s.m + i]; });
    auto want = z, want_aux = markers;
    each(s, [&](int q, int i, int j, long long at) {
        want[at] = (T)gelu((double)z[at]);
        want_aux[q * aux_stride + i + j * aux_ld] = z[at];
    });
    char what[96];
    snprintf(what, sizeof what, "gelu aux bias forward %s", type);
    bool ok = matmul(lt, s, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, a, b, d, &bias, &input) == 0 && close(what, d, want, tolerance);
    snprintf(what, sizeof what, "gelu aux bias's input %s", type);
    ok &= exact(what, same(what, download((T*)input.p, aux_len), want_aux));

    auto a2 = small_integers<T>(s.sa() * s.batch, 9), b2 = small_integers<T>(s.sb() * s.batch, 10);
    std::vector<T> d2(s.sd() * s.batch, 4), grad(s.m * s.batch, 99);
    auto want2 = product(s, a2, b2, d2);
    each(s, [&](int, int, int, long long at) { want2[at] = (T)(want2[at] * gelu_slope((double)z[at])); });
    snprintf(what, sizeof what, "dgelu bgrad %s", type);
    ok &= matmul(lt, s, CUBLASLT_EPILOGUE_DGELU_BGRAD, a2, b2, d2, &grad, &input) == 0 && close(what, d2, want2, tolerance);
    snprintf(what, sizeof what, "dgelu bgrad's bias gradient %s", type);
    ok &= close(what, grad, row_sums(s, want2), tolerance);
    std::vector<T> d3(s.sd() * s.batch, 4);
    snprintf(what, sizeof what, "dgelu alone %s", type);
    ok &= matmul(lt, s, CUBLASLT_EPILOGUE_DGELU, a2, b2, d3, nullptr, &input) == 0 && close(what, d3, want2, tolerance);
    CHECK(cudaFree(input.p));
    return ok;
}

// The bias gradients of an input: the sums over k of op(A)'s rows (BGRADA) or of op(B)'s
// columns (BGRADB), each batch, D the plain product; `T` and each transpose.
template <typename T>
static bool input_gradients(cublasLtHandle_t lt, const char* type, bool ta, bool tb) {
    // (n 8: no leading dimension a multiple of small_integers's period, 9, which would make
    // a row of a matrix read across its columns one value repeated.)
    const Shape s{11, 8, 6, 2, ta, tb};
    auto a = small_integers<T>(s.sa() * s.batch, 11), b = small_integers<T>(s.sb() * s.batch, 12);
    bool ok = true;
    for (int epilogue : {CUBLASLT_EPILOGUE_BGRADA, CUBLASLT_EPILOGUE_BGRADB}) {
        bool of_a = epilogue == CUBLASLT_EPILOGUE_BGRADA;
        int len = of_a ? s.m : s.n;
        std::vector<T> d(s.sd() * s.batch, 5), grad(len * s.batch, 99), want_grad(len * s.batch, 0);
        auto want = product(s, a, b, d);
        for (int q = 0; q < s.batch; q++)
            for (int r = 0; r < len; r++)
                for (int p = 0; p < s.k; p++)
                    want_grad[q * len + r] += of_a ? op_at(a, q * s.sa(), s.lda(), s.ta, r, p)
                                                   : op_at(b, q * s.sb(), s.ldb(), s.tb, p, r);
        char what[80];
        snprintf(what, sizeof what, "%s %s %s%s", of_a ? "bgrada" : "bgradb", type, ta ? "T" : "N", tb ? "T" : "N");
        bool run = matmul(lt, s, epilogue, a, b, d, &grad, nullptr) == 0;
        ok &= exact(what, run && same(what, d, want) && same(what, grad, want_grad));
    }
    return ok;
}

// Activations on f64 matrices: ReLU after a bias (exact), GELU (within 1e-9).
static bool double_activations(cublasLtHandle_t lt) {
    const Shape s{9, 8, 5, 1, false, false};
    auto a = small_integers<double>(s.sa(), 13), b = small_integers<double>(s.sb(), 14);
    std::vector<double> d(s.sd(), 1), bias = small_integers<double>(s.m, 15);
    auto want = product(s, a, b, d);
    each(s, [&](int, int i, int, long long at) { want[at] = std::fmax(want[at] + bias[i], 0.0); });
    bool ok = exact("relu bias f64", matmul(lt, s, CUBLASLT_EPILOGUE_RELU_BIAS, a, b, d, &bias, nullptr) == 0 &&
                                         same("relu bias f64", d, want));
    std::vector<double> d2(s.sd(), 1);
    for (double& v : a) v /= 8;  // GELU's interesting range
    auto want2 = product(s, a, b, d2);
    each(s, [&](int, int, int, long long at) { want2[at] = gelu(want2[at]); });
    ok &= matmul(lt, s, CUBLASLT_EPILOGUE_GELU, a, b, d2, nullptr, nullptr) == 0 && close("gelu f64", d2, want2, 1e-9);
    return ok;
}

// What cuBLASLt refuses (an auxiliary matrix missing, a mask's leading dimension not a multiple
// of 128, an input's below D's rows) and what the shim does not run (an auxiliary matrix of
// another type than D's: no algorithm).
static void refusals(cublasLtHandle_t lt) {
    const Shape s{20, 6, 9, 1, false, false};
    auto a = small_integers<float>(s.sa(), 1), b = small_integers<float>(s.sb(), 2);
    std::vector<float> d(s.sd(), 0);
    void* p;
    CHECK(cudaMalloc(&p, 4096));
    Aux none{nullptr, 128, 0}, narrow_mask{p, 64, 0}, short_input{p, 8, 0}, input{p, 24, 0};
    int st = matmul(lt, s, CUBLASLT_EPILOGUE_RELU_AUX, a, b, d, nullptr, &none);
    printf("relu aux without its matrix: %d %s\n", st, cublasGetStatusName((cublasStatus_t)st));
    st = matmul(lt, s, CUBLASLT_EPILOGUE_DRELU, a, b, d, nullptr, &narrow_mask);
    printf("a mask of 64-bit columns: %d %s\n", st, cublasGetStatusName((cublasStatus_t)st));
    st = matmul(lt, s, CUBLASLT_EPILOGUE_GELU_AUX, a, b, d, nullptr, &short_input);
    printf("an input of 8 rows for 20: %d %s\n", st, cublasGetStatusName((cublasStatus_t)st));
    st = matmul(lt, s, CUBLASLT_EPILOGUE_GELU_AUX, a, b, d, nullptr, &input, CUDA_R_16F_);
    printf("an f16 input for f32 D: %s\n", st == -1 ? "no algorithm" : "an algorithm");
    CHECK(cudaFree(p));
}

int main(int argc, char** argv) {
    bool native = argc > 1 && strcmp(argv[1], "--native") == 0;
    cublasLtHandle_t lt;
    CUBLAS(cublasLtCreate(&lt));
    bool ok = relu_training(lt);
    ok &= half_relu_training(lt);
    ok &= gelu_training<float>(lt, "f32", 1e-3);
    ok &= gelu_training<double>(lt, "f64", 1e-9);
    ok &= input_gradients<float>(lt, "f32", false, false);
    ok &= input_gradients<float>(lt, "f32", true, true);
    ok &= input_gradients<double>(lt, "f64", true, false);
    ok &= double_activations(lt);
    if (!native) refusals(lt);
    CUBLAS(cublasLtDestroy(lt));
    printf(ok ? "cublaslt_epilogues: all exact\n" : "cublaslt_epilogues: FAILED\n");
    return ok ? 0 : 1;
}
