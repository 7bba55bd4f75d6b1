// cuBLAS's plane rotations from a plain CUDA program linked against libcublas.so.13: rot in
// each of its six forms (s, d, c and z with a scalar s of their type, cs and zd with a real
// one), rotm for each flag (the elements a flag implies hold NaN, so that reading them shows),
// strided vectors whose gaps must stay as they were, scalars on the host or in device memory;
// and rotg and rotmg, which construct a rotation from scalars. rot and rotm on small integers
// are checked exactly; rotg and rotmg, which divide and take roots, within a few units of
// rounding of values worked out by hand (in the comments).
// Usage: cublas_rotations [--native] (--native: leaves out what the shim refuses that cuBLAS
// may serve, so that a native run does not depend on it)
#include <cmath>
#include <complex>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "cublas_helpers.h"
#include "cublas_typed.h"

// Vectors and scalars as untyped pointers: the same symbols, whatever the type.
extern "C" {
#define ROT(name) cublasStatus_t name(cublasHandle_t, int, void*, int, void*, int, const void*, const void*);
#define ROTM(name) cublasStatus_t name(cublasHandle_t, int, void*, int, void*, int, const void*);
#define ROTG(name) cublasStatus_t name(cublasHandle_t, void*, void*, void*, void*);
#define ROTMG(name) cublasStatus_t name(cublasHandle_t, void*, void*, void*, const void*, void*);
ROT(cublasSrot_v2) ROT(cublasDrot_v2) ROT(cublasCrot_v2) ROT(cublasCsrot_v2) ROT(cublasZrot_v2) ROT(cublasZdrot_v2)
ROTM(cublasSrotm_v2) ROTM(cublasDrotm_v2) ROTG(cublasSrotg_v2) ROTG(cublasDrotg_v2) ROTG(cublasCrotg_v2)
ROTG(cublasZrotg_v2) ROTMG(cublasSrotmg_v2) ROTMG(cublasDrotmg_v2)
}

typedef cublasStatus_t (*Rot)(cublasHandle_t, int, void*, int, void*, int, const void*, const void*);
typedef cublasStatus_t (*Rotm)(cublasHandle_t, int, void*, int, void*, int, const void*);
typedef cublasStatus_t (*Rotg)(cublasHandle_t, void*, void*, void*, void*);
typedef cublasStatus_t (*Rotmg)(cublasHandle_t, void*, void*, void*, const void*, void*);

// The real type of an element type.
template <typename E>
using Real = decltype(std::real(E()));

static float nan_f() { return std::numeric_limits<float>::quiet_NaN(); }

// The pointer mode for `on_device`, until this goes out of scope.
struct Mode {
    cublasHandle_t h;
    bool on_device;
    Mode(cublasHandle_t h, bool on_device) : h(h), on_device(on_device) {
        if (on_device) CUBLAS(cublasSetPointerMode_v2(h, CUBLAS_POINTER_MODE_DEVICE));
    }
    ~Mode() {
        if (on_device) CUBLAS(cublasSetPointerMode_v2(h, CUBLAS_POINTER_MODE_HOST));
    }
};

// Scalars for a call: the host's own, or copies in device memory, read back by `back()`.
template <typename T>
struct Held {
    std::vector<T> host;
    T* device = nullptr;
    Held(std::vector<T> values, bool on_device) : host(values) {
        if (on_device) device = upload(host);
    }
    T* at(size_t i) { return device ? device + i : &host[i]; }
    std::vector<T> back() { return device ? download(device, host.size()) : host; }
    ~Held() {
        if (device) CHECK(cudaFree(device));
    }
};

// Whether the device's x and y are want_x and want_y, every element, the gaps included; prints
// "<name> exact" if so. Frees both.
template <typename E>
static bool pair_exact(const char* name, E* dx, const std::vector<E>& want_x, E* dy, const std::vector<E>& want_y) {
    char x_name[96], y_name[96];
    snprintf(x_name, sizeof x_name, "%s x", name);
    snprintf(y_name, sizeof y_name, "%s y", name);
    bool ok = exact(x_name, download(dx, want_x.size()), want_x) && exact(y_name, download(dy, want_y.size()), want_y);
    if (ok) printf("%s exact\n", name);
    for (E* p : {dx, dy}) CHECK(cudaFree(p));
    return ok;
}

// rot: x = c x + s y, y = c y - conj(s) x over n elements of x (increment incx) and y (incy);
// the gaps untouched.
template <typename E, typename S>
static bool rot(cublasHandle_t h, Rot call, const char* name, int n, int incx, int incy, Real<E> c, S s,
                bool on_device) {
    std::vector<E> x = values<E>((size_t)n * incx, 2), y = values<E>((size_t)n * incy, 5);
    std::vector<E> want_x = x, want_y = y;
    for (int i = 0; i < n; i++) {
        E xi = x[(size_t)i * incx], yi = y[(size_t)i * incy];
        want_x[(size_t)i * incx] = c * xi + E(s) * yi;
        want_y[(size_t)i * incy] = c * yi - E(conj_of(s)) * xi;
    }
    E *dx = upload(x), *dy = upload(y);
    {
        Mode mode(h, on_device);
        Held<Real<E>> held_c({c}, on_device);
        Held<S> held_s({s}, on_device);
        CUBLAS(call(h, n, dx, incx, dy, incy, held_c.at(0), held_s.at(0)));
    }
    return pair_exact(name, dx, want_x, dy, want_y);
}

// rotm with param (flag, h11, h21, h12, h22): [x; y] = H [x; y], H as the flag says (the
// elements it implies are NaN in param, so that reading them shows).
template <typename T>
static bool rotm(cublasHandle_t h, Rotm call, const char* name, int n, int incx, int incy, std::vector<T> param,
                 bool on_device) {
    T flag = param[0], h11 = param[1], h21 = param[2], h12 = param[3], h22 = param[4];
    // By its sign, as reference BLAS reads it.
    if (flag == 0) h11 = h22 = 1;
    if (flag > 0) h21 = -1, h12 = 1;
    if (flag == -2) h11 = h22 = 1, h21 = h12 = 0;
    std::vector<T> x = values<T>((size_t)n * incx, 3), y = values<T>((size_t)n * incy, 4);
    std::vector<T> want_x = x, want_y = y;
    for (int i = 0; i < n; i++) {
        T xi = x[(size_t)i * incx], yi = y[(size_t)i * incy];
        want_x[(size_t)i * incx] = h11 * xi + h12 * yi;
        want_y[(size_t)i * incy] = h21 * xi + h22 * yi;
    }
    T *dx = upload(x), *dy = upload(y);
    {
        Mode mode(h, on_device);
        Held<T> held(param, on_device);
        CUBLAS(call(h, n, dx, incx, dy, incy, held.at(0)));
    }
    return pair_exact(name, dx, want_x, dy, want_y);
}

// Whether each of got is want within `ulps` units of rounding of T (relative to |want|; a want
// of 0 within `ulps` epsilons of it); prints "<name> within rounding", else the first that is
// not.
template <typename T>
static bool near(const char* name, const std::vector<T>& got, const std::vector<T>& want, double ulps = 4) {
    double epsilon = std::numeric_limits<Real<T>>::epsilon();
    for (size_t i = 0; i < want.size(); i++) {
        double scale = want[i] == T(0) ? 1.0 : (double)std::abs(want[i]);
        if (!(std::abs(got[i] - want[i]) <= ulps * epsilon * scale)) {
            printf("%s: value %zu is %.9g%+.9gi, expected %.9g%+.9gi\n", name, i, (double)std::real(got[i]),
                   (double)std::imag(got[i]), (double)std::real(want[i]), (double)std::imag(want[i]));
            return false;
        }
    }
    printf("%s within rounding\n", name);
    return true;
}

// rotg of real a, b: (a, b, c, s) become (r, z, c, s).
template <typename T>
static bool real_rotg(cublasHandle_t h, Rotg call, const char* name, T a, T b, std::vector<T> want, bool on_device) {
    Mode mode(h, on_device);
    Held<T> held({a, b, nan_f(), nan_f()}, on_device);
    CUBLAS(call(h, held.at(0), held.at(1), held.at(2), held.at(3)));
    return near(name, held.back(), want);
}

// rotg of complex a, b: a becomes r; b stays; c (real) and s are written.
template <typename E>
static bool complex_rotg(cublasHandle_t h, Rotg call, const char* name, E a, E b, E r, Real<E> c, E s,
                         bool on_device) {
    Mode mode(h, on_device);
    Held<E> held({a, b, E(nan_f(), nan_f()), E(nan_f())}, on_device);
    // c is a real: the third element's first half; the second must stay as it was.
    CUBLAS(call(h, held.at(0), held.at(1), (Real<E>*)held.at(2), held.at(3)));
    std::vector<E> got = held.back();
    if (!std::isnan(std::imag(got[2]))) {
        printf("%s: c written past its real, %g\n", name, (double)std::imag(got[2]));
        return false;
    }
    got[2] = E(std::real(got[2]));
    return near(name, got, {r, b, E(c), s});
}

// rotmg of d1, d2, x1, y1: (d1, d2, x1) and param as reference BLAS leaves them, param's
// elements the flag implies still 7 (`native`: not checked, cuBLAS says only that it does not
// store them).
template <typename T>
static bool rotmg(cublasHandle_t h, Rotmg call, const char* name, std::vector<T> in, std::vector<T> want,
                  bool on_device, bool native) {
    Mode mode(h, on_device);
    // d1, d2, x1, y1, then param.
    in.insert(in.end(), 5, 7);
    Held<T> held(in, on_device);
    CUBLAS(call(h, held.at(0), held.at(1), held.at(2), held.at(3), held.at(4)));
    std::vector<T> got = held.back();
    for (size_t i = 4; native && i < want.size(); i++)
        if (want[i] == 7) want[i] = got[i];
    return near(name, got, want);
}

// rotg with its scalars in device memory on a capturing stream: the shim reads and writes them
// at once, which a graph would not redo, so it is refused and the capture invalidated.
static void rotg_while_capturing(cublasHandle_t h) {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CUBLAS(cublasSetStream_v2(h, s));
    Held<double> held({3, 4, 0, 0}, true);
    {
        Mode mode(h, true);
        CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        cublasStatus_t st = cublasDrotg_v2(h, held.at(0), held.at(1), held.at(2), held.at(3));
        printf("drotg device while capturing: %d %s\n", (int)st, cublasGetStatusName(st));
        cudaGraph_t g = nullptr;
        cudaError_t e = cudaStreamEndCapture(s, &g);
        printf("its capture: %s\n", e == cudaErrorStreamCaptureInvalidated ? "invalidated" : cudaGetErrorName(e));
        if (g) CHECK(cudaGraphDestroy(g));
        cudaGetLastError();
    }
    CUBLAS(cublasSetStream_v2(h, 0));
    CHECK(cudaStreamDestroy(s));
}

int main(int argc, char** argv) {
    bool native = argc > 1 && strcmp(argv[1], "--native") == 0;
    cublasHandle_t h;
    CUBLAS(cublasCreate_v2(&h));
    bool ok = true;
    ok &= rot<float>(h, cublasSrot_v2, "srot incx 2 incy 3", 5, 2, 3, 2.0f, -1.0f, false);
    ok &= rot<double>(h, cublasDrot_v2, "drot device scalars", 6, 1, 1, 1.0, 2.0, true);
    ok &= rot<c32>(h, cublasCrot_v2, "crot incy 2", 4, 1, 2, 2.0f, c32(1, -2), false);
    ok &= rot<c32>(h, cublasCsrot_v2, "csrot", 5, 1, 1, -1.0f, 3.0f, false);
    ok &= rot<c64>(h, cublasZrot_v2, "zrot incx 3 device scalars", 3, 3, 1, 1.0, c64(0, 1), true);
    ok &= rot<c64>(h, cublasZdrot_v2, "zdrot", 4, 1, 1, 2.0, -2.0, false);
    float nf = nan_f();
    double nd = nan_f();
    ok &= rotm<float>(h, cublasSrotm_v2, "srotm flag -1 incx 2", 5, 2, 1, {-1, 2, -1, 3, 1}, false);
    ok &= rotm<double>(h, cublasDrotm_v2, "drotm flag 0", 6, 1, 1, {0, nd, 2, -1, nd}, false);
    ok &= rotm<float>(h, cublasSrotm_v2, "srotm flag 1 incy 3", 4, 1, 3, {1, -1, nf, nf, 2}, false);
    ok &= rotm<double>(h, cublasDrotm_v2, "drotm flag -2", 4, 1, 1, {-2, nd, nd, nd, nd}, false);
    ok &= rotm<double>(h, cublasDrotm_v2, "drotm flag -1 device param", 5, 1, 2, {-1, 1, 2, -3, 1}, true);
    // 3, 4: r 5, c 3/5, s 4/5, z = 1/c (|b| >= |a|).
    ok &= real_rotg<float>(h, cublasSrotg_v2, "srotg 3 4", 3, 4, {5, 1 / 0.6f, 0.6f, 0.8f}, false);
    // -4, 3: r takes the sign of the larger (-5), c 4/5, s -3/5, z = s (|a| > |b|).
    ok &= real_rotg<double>(h, cublasDrotg_v2, "drotg -4 3 device", -4, 3, {-5, -0.6, 0.8, -0.6}, true);
    // a 0: r = b, z 1, c 0, s 1; b 0: r = a, z 0, c 1, s 0.
    ok &= real_rotg<float>(h, cublasSrotg_v2, "srotg 0 -2", 0, -2, {-2, 1, 0, 1}, false);
    ok &= real_rotg<double>(h, cublasDrotg_v2, "drotg 5 0", 5, 0, {5, 0, 1, 0}, false);
    // (3+4i, 5i): norm sqrt(50), r = (3+4i)/5 norm, c = 5/norm, s = (3+4i)/5 (-5i)/norm = (4-3i)/norm.
    double norm = std::sqrt(50.0);
    ok &= complex_rotg<c32>(h, cublasCrotg_v2, "crotg 3+4i 5i", c32(3, 4), c32(0, 5),
                            c32((float)(0.6 * norm), (float)(0.8 * norm)), (float)(5 / norm),
                            c32((float)(4 / norm), (float)(-3 / norm)), false);
    ok &= complex_rotg<c64>(h, cublasZrotg_v2, "zrotg 3+4i 5i device", c64(3, 4), c64(0, 5),
                            c64(0.6 * norm, 0.8 * norm), 5 / norm, c64(4 / norm, -3 / norm), true);
    // a 0: r = b, c 0, s 1.
    ok &= complex_rotg<c64>(h, cublasZrotg_v2, "zrotg 0 1-2i", c64(0, 0), c64(1, -2), c64(1, -2), 0, c64(1, 0),
                            false);
    // d1 x1^2 = 4 > d2 y1^2 = 1: flag 0, h21 = -y1/x1 = -1, h12 = d2 y1 / (d1 x1) = 1/4,
    // u = 1 - h12 h21 = 5/4; d1 4/u, d2 1/u, x1 u. param: 0, 7, -1, 1/4, 7.
    ok &= rotmg<float>(h, cublasSrotmg_v2, "srotmg flag 0", {4, 1, 1, 1}, {3.2f, 0.8f, 1.25f, 1, 0, 7, -1, 0.25f, 7},
                       false, native);
    // The other way: flag 1, h11 = d1 x1 / (d2 y1) = 1/4, h22 = x1/y1 = 1, u = 1 + h11 h22 = 5/4;
    // d1 = d2/u, d2 = d1/u, x1 = y1 u. param: 1, 1/4, 7, 7, 1.
    ok &= rotmg<double>(h, cublasDrotmg_v2, "drotmg flag 1 device", {1, 4, 1, 1}, {3.2, 0.8, 1.25, 1, 1, 0.25, 7, 7, 1},
                        true, native);
    // y1 0: nothing to zero, flag -2 and nothing else written.
    ok &= rotmg<double>(h, cublasDrotmg_v2, "drotmg y1 0", {2, 3, 4, 0}, {2, 3, 4, 0, -2, 7, 7, 7, 7}, false, native);
    // A negative d1: all zero, flag -1.
    ok &= rotmg<double>(h, cublasDrotmg_v2, "drotmg d1 negative", {-1, 3, 4, 1}, {0, 0, 0, 1, -1, 0, 0, 0, 0}, false, native);
    // d1 1e-10: flag 1 with u = 1 (in float), so d2 = 1e-10, below 2^-24: scaled by 4096^2, and
    // H's second row (h21 -1, h22 1) by 1/4096, flag -1 with h12 1 stored.
    float d2 = 1e-10f * 4096 * 4096;
    ok &= rotmg<float>(h, cublasSrotmg_v2, "srotmg rescaled", {1e-10f, 1, 1, 1},
                       {1, d2, 1, 1, -1, 1e-10f, -1.0f / 4096, 1, 1.0f / 4096}, false, native);
    if (!native) {
        // A flag reference BLAS reads by its sign (2: as 1); no elements, nothing read (null
        // scalars); an increment of 0 (one element taken n times), not served.
        ok &= rotm<float>(h, cublasSrotm_v2, "srotm flag 2 as 1", 4, 1, 1, {2, -1, nf, nf, 2}, false);
        std::vector<float> v(16, 1.0f);
        float* d = upload(v);
        float c = 1, s = 0;
        cublasStatus_t st = cublasSrot_v2(h, 0, d, 1, d + 8, 1, nullptr, nullptr);
        printf("srot of no elements: %d %s\n", (int)st, cublasGetStatusName(st));
        st = cublasSrot_v2(h, 4, d, 0, d + 8, 1, &c, &s);
        printf("srot incx 0: %d %s\n", (int)st, cublasGetStatusName(st));
        CHECK(cudaFree(d));
        rotg_while_capturing(h);
    }
    CUBLAS(cublasDestroy_v2(h));
    printf(ok ? "cublas_rotations: all within\n" : "cublas_rotations: FAILED\n");
    return ok ? 0 : 1;
}
