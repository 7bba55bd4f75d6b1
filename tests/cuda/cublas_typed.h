// What the typed cuBLAS test programs share (cublas_extensions.cu, cublas_rank_k.cu,
// cublas_structured.cu, cublas_triangle_vectors.cu, cublas_rotations.cu,
// cublas_packed_vectors.cu, cublas_band.cu): element types real and complex, small integers of each (complex:
// in both parts; every product and sum of a few is exact), NaN of each, op(X)'s elements, a
// triangular matrix times a vector, a comparison of every element, and a call's alpha and beta
// on the host or in device memory, and a call on a capturing stream.
#pragma once
#include <complex>
#include <cstdio>
#include <limits>
#include <vector>

#include "cublas_helpers.h"

typedef std::complex<float> c32;
typedef std::complex<double> c64;

template <typename E>
static E make(int re, int im);
template <>
float make(int re, int) { return (float)re; }
template <>
double make(int re, int) { return (double)re; }
template <>
c32 make(int re, int im) { return c32((float)re, (float)im); }
template <>
c64 make(int re, int im) { return c64(re, im); }

static float conj_of(float v) { return v; }
static double conj_of(double v) { return v; }
template <typename R>
static std::complex<R> conj_of(std::complex<R> v) { return std::conj(v); }

// v with its imaginary part 0 (a real v as it is).
static float real_only(float v) { return v; }
static double real_only(double v) { return v; }
template <typename R>
static std::complex<R> real_only(std::complex<R> v) {
    return {v.real(), 0};
}

// NaN (a complex one's real part).
template <typename E>
static E poison() {
    return E(std::numeric_limits<decltype(std::real(E()))>::quiet_NaN());
}

// n small integers (complex: small integers in both parts).
template <typename E>
static std::vector<E> values(size_t n, int seed) {
    std::vector<E> v(n);
    for (size_t i = 0; i < n; i++) v[i] = make<E>((int)((i * 7 + seed * 13) % 9) - 4, (int)((i * 5 + seed) % 7) - 3);
    return v;
}

// op(X)[i, j] of X stored with leading dimension ld.
template <typename E>
static E op_at(const std::vector<E>& x, int ld, int trans, int i, int j) {
    if (trans == 0) return x[i + j * ld];
    E v = x[j + i * ld];
    return trans == 2 ? conj_of(v) : v;
}

// Whether got is want, every element, the padding included. Equal values: a zero product
// may come out +0 where the reference's is -0 (the shim's dgmm is a gemm, whose sum starts
// at +0, as reference BLAS's does).
template <typename E>
static bool exact(const char* what, const std::vector<E>& got, const std::vector<E>& want) {
    for (size_t i = 0; i < want.size(); i++)
        if (!(got[i] == want[i])) {
            printf("%s: element %zu is %g%+gi, expected %g%+gi\n", what, i, (double)std::real(got[i]),
                   (double)std::imag(got[i]), (double)std::real(want[i]), (double)std::imag(want[i]));
            return false;
        }
    printf("%s exact\n", what);
    return true;
}

// A call's alpha and beta: the host's, or (`on_device`) copies in device memory, the handle in
// device pointer mode until this goes out of scope.
template <typename E>
struct Scalars {
    cublasHandle_t h;
    E host[2];
    E* device;
    bool on_device;
    Scalars(cublasHandle_t h, E alpha, E beta, bool on_device)
        : h(h), host{alpha, beta}, device(upload(std::vector<E>{alpha, beta})), on_device(on_device) {
        if (on_device) CUBLAS(cublasSetPointerMode_v2(h, CUBLAS_POINTER_MODE_DEVICE));
    }
    const E* alpha() const { return on_device ? device : &host[0]; }
    const E* beta() const { return on_device ? device + 1 : &host[1]; }
    ~Scalars() {
        if (on_device) CUBLAS(cublasSetPointerMode_v2(h, CUBLAS_POINTER_MODE_HOST));
        CHECK(cudaFree(device));
    }
};

// op(A) x for a triangular A of order a.n whose element (i, j) is a.at(i, j, false, true,
// unit) (cublas_triangle_vectors.cu's Triangle, cublas_packed_vectors.cu's Packed), x strided
// by incx: x with its elements replaced.
template <typename M, typename E>
static std::vector<E> times_op(const M& a, int trans, bool unit, std::vector<E> x, int incx) {
    std::vector<E> out = x;
    for (int i = 0; i < a.n; i++) {
        E acc = 0;
        for (int q = 0; q < a.n; q++) {
            E v = trans == 0 ? a.at(i, q, false, true, unit) : a.at(q, i, false, true, unit);
            acc += (trans == 2 ? conj_of(v) : v) * x[(size_t)q * incx];
        }
        out[(size_t)i * incx] = acc;
    }
    return out;
}

// `call` (named `what`) on a capturing stream, given 16 floats of device memory: a call whose
// buffer of the shim's would be gone when the graph ran is refused and the capture invalidated.
template <typename Call>
static void while_capturing(cublasHandle_t h, const char* what, Call call) {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    std::vector<float> v(16, 1.0f);
    float* d = upload(v);
    CUBLAS(cublasSetStream_v2(h, s));
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cublasStatus_t st = call(d);
    printf("%s while capturing: %d %s\n", what, (int)st, cublasGetStatusName(st));
    cudaGraph_t g = nullptr;
    cudaError_t e = cudaStreamEndCapture(s, &g);
    printf("%s's capture: %s\n", what, e == cudaErrorStreamCaptureInvalidated ? "invalidated" : cudaGetErrorName(e));
    if (g) CHECK(cudaGraphDestroy(g));
    cudaGetLastError();
    CUBLAS(cublasSetStream_v2(h, 0));
    CHECK(cudaFree(d));
    CHECK(cudaStreamDestroy(s));
}
