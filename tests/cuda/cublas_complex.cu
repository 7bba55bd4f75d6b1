// cuBLAS's complex level-1 and level-2 functions and its typed dot products, from a plain CUDA
// program linked against libcublas.so.13: dotu and dotc, nrm2, axpy, copy, scal by a complex
// and by a real scalar, gemv (N, T and the conjugate transpose), geru and gerc, in single and
// double precision, on strided vectors and padded matrices (what lies between the elements must
// stay as it was); cublasDotEx on binary16, bfloat16 and complex vectors, its result in host and
// in device memory. Every result is checked exactly against a reference computed here (small
// integers: every product and sum is exact; a half-precision result is the exact sum rounded
// once, to nearest even). Usage: cublas_complex (an argument, as scripts/gpu-check's --native,
// changes nothing: the shim refuses nothing here that cuBLAS serves)
#include <complex>
#include <string>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cublas_helpers.h"

typedef float2 cuComplex;
typedef double2 cuDoubleComplex;

extern "C" {
cublasStatus_t cublasCdotu_v2(cublasHandle_t, int, const cuComplex*, int, const cuComplex*, int, cuComplex*);
cublasStatus_t cublasCdotc_v2(cublasHandle_t, int, const cuComplex*, int, const cuComplex*, int, cuComplex*);
cublasStatus_t cublasZdotu_v2(cublasHandle_t, int, const cuDoubleComplex*, int, const cuDoubleComplex*, int,
                              cuDoubleComplex*);
cublasStatus_t cublasZdotc_v2(cublasHandle_t, int, const cuDoubleComplex*, int, const cuDoubleComplex*, int,
                              cuDoubleComplex*);
cublasStatus_t cublasScnrm2_v2(cublasHandle_t, int, const cuComplex*, int, float*);
cublasStatus_t cublasDznrm2_v2(cublasHandle_t, int, const cuDoubleComplex*, int, double*);
cublasStatus_t cublasCaxpy_v2(cublasHandle_t, int, const cuComplex*, const cuComplex*, int, cuComplex*, int);
cublasStatus_t cublasZaxpy_v2(cublasHandle_t, int, const cuDoubleComplex*, const cuDoubleComplex*, int,
                              cuDoubleComplex*, int);
cublasStatus_t cublasCcopy_v2(cublasHandle_t, int, const cuComplex*, int, cuComplex*, int);
cublasStatus_t cublasZcopy_v2(cublasHandle_t, int, const cuDoubleComplex*, int, cuDoubleComplex*, int);
cublasStatus_t cublasCscal_v2(cublasHandle_t, int, const cuComplex*, cuComplex*, int);
cublasStatus_t cublasZscal_v2(cublasHandle_t, int, const cuDoubleComplex*, cuDoubleComplex*, int);
cublasStatus_t cublasCsscal_v2(cublasHandle_t, int, const float*, cuComplex*, int);
cublasStatus_t cublasZdscal_v2(cublasHandle_t, int, const double*, cuDoubleComplex*, int);
cublasStatus_t cublasCgemv_v2(cublasHandle_t, cublasOperation_t, int, int, const cuComplex*, const cuComplex*, int,
                              const cuComplex*, int, const cuComplex*, cuComplex*, int);
cublasStatus_t cublasZgemv_v2(cublasHandle_t, cublasOperation_t, int, int, const cuDoubleComplex*,
                              const cuDoubleComplex*, int, const cuDoubleComplex*, int, const cuDoubleComplex*,
                              cuDoubleComplex*, int);
cublasStatus_t cublasCgeru_v2(cublasHandle_t, int, int, const cuComplex*, const cuComplex*, int, const cuComplex*,
                              int, cuComplex*, int);
cublasStatus_t cublasCgerc_v2(cublasHandle_t, int, int, const cuComplex*, const cuComplex*, int, const cuComplex*,
                              int, cuComplex*, int);
cublasStatus_t cublasZgeru_v2(cublasHandle_t, int, int, const cuDoubleComplex*, const cuDoubleComplex*, int,
                              const cuDoubleComplex*, int, cuDoubleComplex*, int);
cublasStatus_t cublasZgerc_v2(cublasHandle_t, int, int, const cuDoubleComplex*, const cuDoubleComplex*, int,
                              const cuDoubleComplex*, int, cuDoubleComplex*, int);
cublasStatus_t cublasDotEx(cublasHandle_t, int, const void*, int, int, const void*, int, int, void*, int, int);
cublasStatus_t cublasDotcEx(cublasHandle_t, int, const void*, int, int, const void*, int, int, void*, int, int);
}

// cudaDataType values.
enum { R_32F = 0, R_16F = 2, C_32F = 4, R_16BF = 14 };

// The cuBLAS functions of one precision, so that each check is written once for both.
template <typename T>
struct Blas;

#define BLAS_OF(T, C, P, dotu, dotc, nrm2, axpy, copy, scal, rscal, gemv, geru, gerc)                          \
    template <>                                                                                              \
    struct Blas<T> {                                                                                         \
        typedef C Complex;                                                                                   \
        static constexpr const char* name = P;                                                               \
        static constexpr auto dotu_ = dotu, dotc_ = dotc;                                                    \
        static constexpr auto nrm2_ = nrm2;                                                                  \
        static constexpr auto axpy_ = axpy;                                                                  \
        static constexpr auto copy_ = copy;                                                                  \
        static constexpr auto scal_ = scal;                                                                  \
        static constexpr auto rscal_ = rscal;                                                                \
        static constexpr auto gemv_ = gemv;                                                                  \
        static constexpr auto geru_ = geru, gerc_ = gerc;                                                    \
    };
BLAS_OF(float, cuComplex, "c", cublasCdotu_v2, cublasCdotc_v2, cublasScnrm2_v2, cublasCaxpy_v2, cublasCcopy_v2,
        cublasCscal_v2, cublasCsscal_v2, cublasCgemv_v2, cublasCgeru_v2, cublasCgerc_v2)
BLAS_OF(double, cuDoubleComplex, "z", cublasZdotu_v2, cublasZdotc_v2, cublasDznrm2_v2, cublasZaxpy_v2,
        cublasZcopy_v2, cublasZscal_v2, cublasZdscal_v2, cublasZgemv_v2, cublasZgeru_v2, cublasZgerc_v2)

// Complex vectors of small integers, and their device copies as cuBLAS's types.
template <typename T>
static std::vector<std::complex<T>> complex_integers(size_t n, int seed) {
    auto re = small_integers<T>(n, seed), im = small_integers<T>(n, seed + 5);
    std::vector<std::complex<T>> v(n);
    for (size_t i = 0; i < n; i++) v[i] = {re[i], im[i]};
    return v;
}

template <typename T>
static typename Blas<T>::Complex* on_device(const std::vector<std::complex<T>>& v) {
    return reinterpret_cast<typename Blas<T>::Complex*>(upload(v));
}

template <typename T>
static std::vector<std::complex<T>> back(const typename Blas<T>::Complex* d, size_t n) {
    return download(reinterpret_cast<const std::complex<T>*>(d), n);
}

template <typename T>
static const typename Blas<T>::Complex* as_blas(const std::complex<T>* z) {
    return reinterpret_cast<const typename Blas<T>::Complex*>(z);
}

// Compares every element, the gaps between strided ones included.
template <typename T>
static bool same_complex(const std::string& what, const std::vector<std::complex<T>>& got,
                         const std::vector<std::complex<T>>& want) {
    for (size_t i = 0; i < want.size(); i++)
        if (got[i] != want[i]) {
            printf("%s: element %zu is (%g, %g), expected (%g, %g)\n", what.c_str(), i, (double)got[i].real(),
                   (double)got[i].imag(), (double)want[i].real(), (double)want[i].imag());
            return false;
        }
    printf("%s exact\n", what.c_str());
    return true;
}

template <typename T>
static std::complex<T> dot_reference(int n, const std::vector<std::complex<T>>& x, int incx,
                                     const std::vector<std::complex<T>>& y, int incy, bool conjugate) {
    std::complex<T> acc = 0;
    for (int i = 0; i < n; i++) acc += (conjugate ? std::conj(x[(size_t)i * incx]) : x[(size_t)i * incx]) * y[(size_t)i * incy];
    return acc;
}

template <typename T>
static bool dots(cublasHandle_t h) {
    typedef Blas<T> B;
    const int n = 40;
    auto x = complex_integers<T>(n * 2, 1), y = complex_integers<T>(n * 3, 2);
    auto *dx = on_device(x), *dy = on_device(y);
    alignas(16) std::complex<T> got[4];
    CUBLAS(B::dotu_(h, n, dx, 1, dy, 1, (typename B::Complex*)&got[0]));
    CUBLAS(B::dotu_(h, n, dx, 2, dy, 3, (typename B::Complex*)&got[1]));
    CUBLAS(B::dotc_(h, n, dx, 1, dy, 1, (typename B::Complex*)&got[2]));
    CUBLAS(B::dotc_(h, n, dx, 2, dy, 3, (typename B::Complex*)&got[3]));
    std::string p = B::name;
    bool ok = same_complex<T>(p + "dotu", {got[0]}, {dot_reference(n, x, 1, y, 1, false)});
    ok &= same_complex<T>(p + "dotu strided", {got[1]}, {dot_reference(n, x, 2, y, 3, false)});
    ok &= same_complex<T>(p + "dotc", {got[2]}, {dot_reference(n, x, 1, y, 1, true)});
    ok &= same_complex<T>(p + "dotc strided", {got[3]}, {dot_reference(n, x, 2, y, 3, true)});
    // |1+2i|^2 + |2+4i|^2 = 25, every other element: the norm is 5.
    std::vector<std::complex<T>> v = {{1, 2}, {-7, 9}, {2, 4}, {-7, 9}};
    auto* dv = on_device(v);
    T norm = 0;
    CUBLAS(B::nrm2_(h, 2, dv, 2, &norm));
    ok &= equal((p + "nrm2 strided").c_str(), norm, (T)5);
    for (auto* d : {dx, dy, dv}) CHECK(cudaFree(d));
    return ok;
}

// y = alpha x + y, a copy, x = alpha x by a complex and by a real alpha, strided: the gaps keep
// their values.
template <typename T>
static bool updates(cublasHandle_t h) {
    typedef Blas<T> B;
    const int n = 30, incx = 2, incy = 3;
    auto x = complex_integers<T>(n * incx, 3), y = complex_integers<T>(n * incy, 4);
    auto *dx = on_device(x), *dy = on_device(y);
    // Aligned as cuComplex and cuDoubleComplex are (NVIDIA's cuBLAS may load them whole).
    alignas(16) const std::complex<T> alpha = {2, -1};
    alignas(16) const std::complex<T> scale = {-1, 3};
    const T real_scale = -2;
    std::string p = B::name;
    auto want = y;
    for (int i = 0; i < n; i++) want[i * incy] += alpha * x[i * incx];
    CUBLAS(B::axpy_(h, n, as_blas(&alpha), dx, incx, dy, incy));
    bool ok = same_complex<T>(p + "axpy strided", back<T>(dy, want.size()), want);
    for (int i = 0; i < n; i++) want[i * incy] = x[i * incx];
    CUBLAS(B::copy_(h, n, dx, incx, dy, incy));
    ok &= same_complex<T>(p + "copy strided", back<T>(dy, want.size()), want);
    auto scaled = x;
    for (int i = 0; i < n; i++) scaled[i * incx] *= scale;
    CUBLAS(B::scal_(h, n, as_blas(&scale), dx, incx));
    ok &= same_complex<T>(p + "scal strided", back<T>(dx, scaled.size()), scaled);
    for (int i = 0; i < n; i++) scaled[i * incx] *= real_scale;
    CUBLAS(B::rscal_(h, n, &real_scale, dx, incx));
    ok &= same_complex<T>(p + "scal by a real strided", back<T>(dx, scaled.size()), scaled);
    for (auto* d : {dx, dy}) CHECK(cudaFree(d));
    return ok;
}

// y = alpha op(A) x + beta y, A m x n padded, x strided, y with increment incy.
template <typename T>
static bool gemv(cublasHandle_t h, cublasOperation_t op, int incy) {
    typedef Blas<T> B;
    const int m = 13, n = 9, lda = m + 3, incx = 2;
    const int rows = op == CUBLAS_OP_N ? m : n, cols = op == CUBLAS_OP_N ? n : m;
    auto a = complex_integers<T>((size_t)lda * n, 5), x = complex_integers<T>(cols * incx, 6);
    auto y = complex_integers<T>(rows * incy, 7), want = y;
    alignas(16) const std::complex<T> alpha = {1, 2};
    alignas(16) const std::complex<T> beta = {-1, 1};
    for (int i = 0; i < rows; i++) {
        std::complex<T> acc = 0;
        for (int j = 0; j < cols; j++) {
            std::complex<T> aij = op == CUBLAS_OP_N ? a[i + j * lda] : a[j + i * lda];
            acc += (op == CUBLAS_OP_C ? std::conj(aij) : aij) * x[j * incx];
        }
        want[i * incy] = alpha * acc + beta * y[i * incy];
    }
    auto *da = on_device(a), *dx = on_device(x), *dy = on_device(y);
    CUBLAS(B::gemv_(h, op, m, n, as_blas(&alpha), da, lda, dx, incx, as_blas(&beta), dy, incy));
    const char* ops[] = {"N", "T", "C"};
    std::string what = std::string(B::name) + "gemv " + ops[op] + " incy " + std::to_string(incy);
    bool ok = same_complex(what, back<T>(dy, want.size()), want);
    for (auto* d : {da, dx, dy}) CHECK(cudaFree(d));
    return ok;
}

// A = alpha x y^T + A (geru) or alpha x y^H + A (gerc), A m x n padded: the padding keeps its
// values; y with increment incy.
template <typename T>
static bool ger(cublasHandle_t h, bool conjugate, int incy) {
    typedef Blas<T> B;
    const int m = 11, n = 7, lda = m + 2, incx = 3;
    auto a = complex_integers<T>((size_t)lda * n, 8), x = complex_integers<T>(m * incx, 9);
    auto y = complex_integers<T>(n * incy, 10), want = a;
    alignas(16) const std::complex<T> alpha = {-2, 1};
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++)
            want[i + j * lda] += alpha * x[i * incx] * (conjugate ? std::conj(y[j * incy]) : y[j * incy]);
    auto *da = on_device(a), *dx = on_device(x), *dy = on_device(y);
    auto f = conjugate ? B::gerc_ : B::geru_;
    CUBLAS(f(h, m, n, as_blas(&alpha), dx, incx, dy, incy, da, lda));
    std::string what = std::string(B::name) + (conjugate ? "gerc" : "geru") + " incy " + std::to_string(incy);
    bool ok = same_complex(what, back<T>(da, want.size()), want);
    for (auto* d : {da, dx, dy}) CHECK(cudaFree(d));
    return ok;
}

// cublasDotEx as PyTorch's torch.dot calls it on binary16 and bfloat16 (executed in f32, the
// result rounded once), into host memory and, on a stream, into device memory; and on complex
// vectors (cublasDotcEx conjugates x).
static bool typed_dots(cublasHandle_t h) {
    // 89 elements of these seeds add up to 2079, which binary16 (11 significant bits) rounds to
    // 2080 to nearest even (2078 truncated).
    const int nh = 89;
    auto xs = small_integers<float>(nh * 2, 16), ys = small_integers<float>(nh, 17);
    for (auto& v : xs) v *= 7.0f;
    float sum = 0;
    for (int i = 0; i < nh; i++) sum += xs[i * 2] * ys[i];
    auto *dxh = upload(halves_of(xs)), *dyh = upload(halves_of(ys));
    unsigned short half_result = 0;
    CUBLAS(cublasDotEx(h, nh, dxh, R_16F, 2, dyh, R_16F, 1, &half_result, R_16F, R_32F));
    bool ok = equal("the binary16 data's sum", sum, 2079.0f);
    ok &= equal("dotex f16 rounded to nearest even", float_of_half(half_result), 2080.0f);
    // 52 elements of these seeds add up to -371: bfloat16 (8 significant bits) rounds it to
    // -372 to nearest even (-370 truncated).
    const int n = 52;
    auto xf = small_integers<float>(n * 2, 14), yf = small_integers<float>(n, 15);
    for (auto& v : xf) v *= 7.0f;  // both types hold these (3 significant bits)
    float exact = 0;
    for (int i = 0; i < n; i++) exact += xf[i * 2] * yf[i];
    std::vector<unsigned short> xb(xf.size()), yb(yf.size());
    for (size_t i = 0; i < xf.size(); i++) xb[i] = bfloat16_of(xf[i]);
    for (size_t i = 0; i < yf.size(); i++) yb[i] = bfloat16_of(yf[i]);
    auto *dxb = upload(xb), *dyb = upload(yb);
    unsigned short* d_result = upload(std::vector<unsigned short>{0});
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CUBLAS(cublasSetStream_v2(h, s));
    CUBLAS(cublasSetPointerMode_v2(h, CUBLAS_POINTER_MODE_DEVICE));
    CUBLAS(cublasDotEx(h, n, dxb, R_16BF, 2, dyb, R_16BF, 1, d_result, R_16BF, R_32F));
    CUBLAS(cublasSetPointerMode_v2(h, CUBLAS_POINTER_MODE_HOST));
    CHECK(cudaStreamSynchronize(s));
    CUBLAS(cublasSetStream_v2(h, 0));
    CHECK(cudaStreamDestroy(s));
    float want_bf16 = float_of_bfloat16(bfloat16_of(exact));
    ok &= equal("dotex bf16 into device memory", float_of_bfloat16(download(d_result, 1)[0]), want_bf16);
    ok &= equal("the data's sum", exact, -371.0f) && equal("its bfloat16", want_bf16, -372.0f);
    auto x = complex_integers<float>(n, 16), y = complex_integers<float>(n, 17);
    auto *dx = on_device(x), *dy = on_device(y);
    alignas(16) std::complex<float> got[2];
    CUBLAS(cublasDotEx(h, n, dx, C_32F, 1, dy, C_32F, 1, &got[0], C_32F, C_32F));
    CUBLAS(cublasDotcEx(h, n, dx, C_32F, 1, dy, C_32F, 1, &got[1], C_32F, C_32F));
    ok &= same_complex<float>("dotex c32", {got[0]}, {dot_reference(n, x, 1, y, 1, false)});
    ok &= same_complex<float>("dotcex c32", {got[1]}, {dot_reference(n, x, 1, y, 1, true)});
    for (void* d : {(void*)dxh, (void*)dyh, (void*)dxb, (void*)dyb, (void*)d_result, (void*)dx, (void*)dy})
        CHECK(cudaFree(d));
    return ok;
}

int main() {
    cublasHandle_t h;
    CUBLAS(cublasCreate_v2(&h));
    bool ok = dots<float>(h) && dots<double>(h);
    ok &= updates<float>(h) && updates<double>(h);
    // A conjugated y (gemv C, gerc) contiguous and strided.
    for (cublasOperation_t op : {CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_C})
        for (int incy : {1, 3}) ok &= gemv<float>(h, op, incy) && gemv<double>(h, op, incy);
    for (bool conjugate : {false, true})
        for (int incy : {1, 2}) ok &= ger<float>(h, conjugate, incy) && ger<double>(h, conjugate, incy);
    ok &= typed_dots(h);

    // What cuBLAS refuses: a dot product's result of another type than its vectors'.
    {
        cuComplex* d;
        CHECK(cudaMalloc(&d, 256 * sizeof(cuComplex)));
        float float_result = 0;
        cublasStatus_t mixed = cublasDotEx(h, 4, d, R_16F, 1, d + 16, R_16F, 1, &float_result, R_32F, R_32F);
        printf("dotex of f16 into f32: %d %s\n", (int)mixed, cublasGetStatusName(mixed));
        CHECK(cudaFree(d));
    }
    CUBLAS(cublasDestroy_v2(h));
    printf(ok ? "cublas_complex: all exact\n" : "cublas_complex: FAILED\n");
    return ok ? 0 : 1;
}
