// cuFFT's plans and executions from a plain CUDA program linked against libcufft.so.12: 1-D
// complex transforms batched (forward and inverse), 2-D real to complex and back, a 3-D double
// transform, cufftPlanMany with an advanced layout, cufftXtMakePlanMany/cufftXtExec on a stream
// (as PyTorch plans), in place (complex, and real rows padded as cuFFT's basic layout pads
// them), binary16 and bfloat16 transforms (cufftXtMakePlanMany); each compared with a direct DFT
// computed here in double: relative error within 1e-5 (f32), 1e-12 (f64), 2e-3 (binary16) or
// 1.6e-2 (bfloat16). Then what cuFFT refuses.
// Usage: cufft_transforms [--native] (--native: leaves out what only the shim refuses)
#include <cmath>
#include <complex>
#include <cstdio>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"
#include "cufft_min.h"
#include "half.h"
#include "transfers.h"

#define CUFFT(call)                                                       \
    do {                                                                  \
        cufftResult r_ = (call);                                          \
        if (r_ != CUFFT_SUCCESS) {                                        \
            printf("FAILED %s: %d\n", #call, (int)r_);                    \
            exit(1);                                                      \
        }                                                                 \
    } while (0)

typedef std::complex<double> cd;

// Values in [-1, 1) from a fixed sequence.
static std::vector<double> values(size_t n, unsigned seed) {
    std::vector<double> v(n);
    unsigned x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        v[i] = (double)(x >> 8) / (double)(1u << 23) - 1.0;
    }
    return v;
}

// A direct DFT of `data` (batches of the row-major `dims`) along every dimension, sign -1 or +1.
static std::vector<cd> dft(std::vector<cd> data, const std::vector<int>& dims, int sign) {
    size_t total = 1;
    for (int d : dims) total *= d;
    const size_t batches = data.size() / total;
    for (size_t axis = 0; axis < dims.size(); axis++) {
        size_t inner = 1;
        for (size_t j = axis + 1; j < dims.size(); j++) inner *= dims[j];
        const size_t n = dims[axis], outer = total / (inner * n);
        std::vector<cd> out(data.size());
        for (size_t b = 0; b < batches * outer; b++)
            for (size_t i = 0; i < inner; i++)
                for (size_t k = 0; k < n; k++) {
                    cd acc = 0;
                    for (size_t j = 0; j < n; j++)
                        acc += data[b * n * inner + j * inner + i] * std::polar(1.0, sign * 2 * M_PI * (double)((j * k) % n) / n);
                    out[b * n * inner + k * inner + i] = acc;
                }
        data = out;
    }
    return data;
}

// Prints "<what> within" when `got` is `want` within `tolerance` relative to its norm.
static bool within(const char* what, const std::vector<cd>& got, const std::vector<cd>& want, double tolerance) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < want.size(); i++) {
        diff += std::norm(got[i] - want[i]);
        norm += std::norm(want[i]);
    }
    double rel = std::sqrt(diff / norm);
    if (rel <= tolerance) {
        printf("%s within\n", what);
        return true;
    }
    printf("%s: relative error %g\n", what, rel);
    return false;
}

static std::vector<cufftComplex> to_complex(const std::vector<cd>& v) {
    std::vector<cufftComplex> out(v.size());
    for (size_t i = 0; i < v.size(); i++) out[i] = {(float)v[i].real(), (float)v[i].imag()};
    return out;
}

static std::vector<cd> from_complex(const std::vector<cufftComplex>& v) {
    std::vector<cd> out(v.size());
    for (size_t i = 0; i < v.size(); i++) out[i] = cd(v[i].x, v[i].y);
    return out;
}

static std::vector<cd> complex_values(size_t n, unsigned seed) {
    auto re = values(n, seed), im = values(n, seed + 100);
    std::vector<cd> v(n);
    for (size_t i = 0; i < n; i++) v[i] = cd(re[i], im[i]);
    return v;
}

// The first n/2 + 1 of each row of a full spectrum of rows of n.
static std::vector<cd> half_rows(const std::vector<cd>& full, int n) {
    std::vector<cd> out;
    for (size_t row = 0; row < full.size() / n; row++)
        for (int k = 0; k <= n / 2; k++) out.push_back(full[row * n + k]);
    return out;
}

// Values of `values` rounded to multiples of 2^-`bits` (bits <= 10), which binary16 (bits <= 10)
// and bfloat16 (bits <= 8) hold exactly.
static std::vector<double> coarse(size_t n, unsigned seed, int bits) {
    auto v = values(n, seed);
    for (auto& x : v) x = std::round(std::ldexp(x, bits)) / std::ldexp(1.0, bits);
    return v;
}

// Complex values of one of the half-precision types, read back (pairs of scalars).
static std::vector<cd> complex_of(const std::vector<unsigned short>& scalars, float (*of)(unsigned short)) {
    std::vector<cd> out(scalars.size() / 2);
    for (size_t i = 0; i < out.size(); i++) out[i] = cd(of(scalars[2 * i]), of(scalars[2 * i + 1]));
    return out;
}

// Binary16 and bfloat16 transforms (cufftXtMakePlanMany, cufftXtExec): a batched complex one,
// a real one and back, a 2-D real one in bfloat16 (whose passes meet in the plan's scratch).
static bool half_precision(bool native) {
    bool ok = true;
    cufftHandle plan;
    size_t work = 0;
    {
        // 2 complex transforms of 64, forward.
        long long n[] = {64};
        auto re = coarse(128, 8, 10), im = coarse(128, 9, 10);
        std::vector<unsigned short> host(256);
        std::vector<cd> x(128);
        for (int i = 0; i < 128; i++) {
            host[2 * i] = half_of((float)re[i]), host[2 * i + 1] = half_of((float)im[i]);
            x[i] = cd(re[i], im[i]);
        }
        unsigned short *in = upload(host), *out;
        CHECK(cudaMalloc(&out, 256 * sizeof(unsigned short)));
        CUFFT(cufftCreate(&plan));
        CUFFT(cufftXtMakePlanMany(plan, 1, n, nullptr, 1, 64, CUFFT_TEST_C_16F, nullptr, 1, 64, CUFFT_TEST_C_16F, 2,
                                  &work, CUFFT_TEST_C_16F));
        CUFFT(cufftXtExec(plan, in, out, CUFFT_FORWARD));
        ok &= within("c2c f16", complex_of(download(out, 256), float_of_half), dft(x, {64}, -1), 2e-3);
        CUFFT(cufftDestroy(plan));
        CHECK(cudaFree(in));
        CHECK(cudaFree(out));
    }
    {
        // 2 real transforms of 32 to 17 complex each, and back to 32 times the input.
        long long n[] = {32};
        auto real = coarse(64, 10, 10);
        std::vector<unsigned short> host(64);
        for (int i = 0; i < 64; i++) host[i] = half_of((float)real[i]);
        unsigned short *in = upload(host), *spectrum, *back;
        CHECK(cudaMalloc(&spectrum, 2 * 17 * 2 * sizeof(unsigned short)));
        CHECK(cudaMalloc(&back, 64 * sizeof(unsigned short)));
        cufftHandle inverse;
        CUFFT(cufftCreate(&plan));
        CUFFT(cufftXtMakePlanMany(plan, 1, n, nullptr, 1, 32, CUFFT_TEST_R_16F, nullptr, 1, 17, CUFFT_TEST_C_16F, 2,
                                  &work, CUFFT_TEST_C_16F));
        CUFFT(cufftCreate(&inverse));
        CUFFT(cufftXtMakePlanMany(inverse, 1, n, nullptr, 1, 17, CUFFT_TEST_C_16F, nullptr, 1, 32, CUFFT_TEST_R_16F, 2,
                                  &work, CUFFT_TEST_C_16F));
        CUFFT(cufftXtExec(plan, in, spectrum, CUFFT_FORWARD));
        CUFFT(cufftXtExec(inverse, spectrum, back, CUFFT_INVERSE));
        std::vector<cd> as_complex(real.begin(), real.end()), scaled, got;
        ok &= within("r2c f16", complex_of(download(spectrum, 68), float_of_half), half_rows(dft(as_complex, {32}, -1), 32),
                     2e-3);
        for (auto v : as_complex) scaled.push_back(v * 32.0);
        for (unsigned short h : download(back, 64)) got.push_back(float_of_half(h));
        ok &= within("c2r f16 round trip", got, scaled, 2e-3);
        CUFFT(cufftDestroy(plan));
        CUFFT(cufftDestroy(inverse));
        for (void* p : {(void*)in, (void*)spectrum, (void*)back}) CHECK(cudaFree(p));
    }
    if (!native) {
        // 2-D real 8 x 16 in bfloat16 to 8 x 9 complex (NVIDIA's cuFFT may not take bfloat16).
        long long n[] = {8, 16};
        auto real = coarse(128, 11, 8);
        std::vector<unsigned short> host(128);
        for (int i = 0; i < 128; i++) host[i] = bfloat16_of((float)real[i]);
        unsigned short *in = upload(host), *out;
        CHECK(cudaMalloc(&out, 8 * 9 * 2 * sizeof(unsigned short)));
        CUFFT(cufftCreate(&plan));
        CUFFT(cufftXtMakePlanMany(plan, 2, n, nullptr, 1, 128, CUFFT_TEST_R_16BF, nullptr, 1, 72, CUFFT_TEST_C_16BF, 1,
                                  &work, CUFFT_TEST_C_16BF));
        CUFFT(cufftXtExec(plan, in, out, CUFFT_FORWARD));
        std::vector<cd> as_complex(real.begin(), real.end());
        ok &= within("r2c bf16 2d", complex_of(download(out, 144), float_of_bfloat16),
                     half_rows(dft(as_complex, {8, 16}, -1), 16), 1.6e-2);
        CUFFT(cufftDestroy(plan));
        CHECK(cudaFree(in));
        CHECK(cudaFree(out));
    }
    return ok;
}

int main(int argc, char** argv) {
    bool native = argc > 1 && strcmp(argv[1], "--native") == 0;
    bool ok = true;

    // 1-D complex, 3 transforms of 48, forward then inverse with the same plan.
    {
        const int n = 48, batch = 3;
        auto x = complex_values(n * batch, 1);
        auto want = dft(x, {n}, -1);
        cufftComplex *in = upload(to_complex(x)), *out;
        CHECK(cudaMalloc(&out, n * batch * sizeof(cufftComplex)));
        cufftHandle plan;
        CUFFT(cufftPlan1d(&plan, n, CUFFT_C2C, batch));
        CUFFT(cufftExecC2C(plan, in, out, CUFFT_FORWARD));
        ok &= within("c2c 1d batched", from_complex(download(out, n * batch)), want, 1e-5);
        CUFFT(cufftExecC2C(plan, out, in, CUFFT_INVERSE));
        std::vector<cd> scaled(x);
        for (auto& v : scaled) v *= n;
        ok &= within("c2c 1d inverse", from_complex(download(in, n * batch)), scaled, 1e-5);
        CUFFT(cufftDestroy(plan));
        CHECK(cudaFree(in));
        CHECK(cudaFree(out));
    }

    // 2-D real 12 x 10 to complex 12 x 6, and back to 120 times the input.
    {
        const int rows = 12, cols = 10, half = cols / 2 + 1;
        auto real = values(rows * cols, 2);
        std::vector<float> real_f(real.begin(), real.end());
        std::vector<cd> as_complex(real.begin(), real.end());
        auto want = half_rows(dft(as_complex, {rows, cols}, -1), cols);
        float* in = upload(real_f);
        cufftComplex* out;
        CHECK(cudaMalloc(&out, rows * half * sizeof(cufftComplex)));
        cufftHandle forward, back;
        CUFFT(cufftPlan2d(&forward, rows, cols, CUFFT_R2C));
        CUFFT(cufftExecR2C(forward, in, out));
        ok &= within("r2c 2d", from_complex(download(out, rows * half)), want, 1e-5);
        float* again;
        CHECK(cudaMalloc(&again, rows * cols * sizeof(float)));
        CUFFT(cufftPlan2d(&back, rows, cols, CUFFT_C2R));
        CUFFT(cufftExecC2R(back, out, again));
        auto got = download(again, rows * cols);
        std::vector<cd> got_c(got.begin(), got.end()), scaled(as_complex);
        for (auto& v : scaled) v *= rows * cols;
        ok &= within("c2r 2d round trip", got_c, scaled, 1e-5);
        CUFFT(cufftDestroy(forward));
        CUFFT(cufftDestroy(back));
        for (void* p : {(void*)in, (void*)out, (void*)again}) CHECK(cudaFree(p));
    }

    // 3-D double complex 4 x 5 x 6.
    {
        auto x = complex_values(4 * 5 * 6, 3);
        auto want = dft(x, {4, 5, 6}, -1);
        std::vector<cufftDoubleComplex> host(x.size());
        for (size_t i = 0; i < x.size(); i++) host[i] = {x[i].real(), x[i].imag()};
        cufftDoubleComplex *in = upload(host), *out;
        CHECK(cudaMalloc(&out, x.size() * sizeof(cufftDoubleComplex)));
        cufftHandle plan;
        CUFFT(cufftPlan3d(&plan, 4, 5, 6, CUFFT_Z2Z));
        CUFFT(cufftExecZ2Z(plan, in, out, CUFFT_FORWARD));
        auto got = download(out, x.size());
        std::vector<cd> got_c(got.size());
        for (size_t i = 0; i < got.size(); i++) got_c[i] = cd(got[i].x, got[i].y);
        ok &= within("z2z 3d", got_c, want, 1e-12);
        CUFFT(cufftDestroy(plan));
        CHECK(cudaFree(in));
        CHECK(cudaFree(out));
    }

    // cufftPlanMany: 2 transforms of 16, input every other element of rows 40 apart, output packed.
    {
        int n[] = {16}, inembed[] = {32}, onembed[] = {16};
        auto stored = complex_values(80, 4);
        std::vector<cd> x;
        for (int b = 0; b < 2; b++)
            for (int j = 0; j < 16; j++) x.push_back(stored[b * 40 + 2 * j]);
        auto want = dft(x, {16}, -1);
        cufftComplex *in = upload(to_complex(stored)), *out;
        CHECK(cudaMalloc(&out, 32 * sizeof(cufftComplex)));
        cufftHandle plan;
        CUFFT(cufftPlanMany(&plan, 1, n, inembed, 2, 40, onembed, 1, 16, CUFFT_C2C, 2));
        CUFFT(cufftExecC2C(plan, in, out, CUFFT_FORWARD));
        ok &= within("many advanced layout", from_complex(download(out, 32)), want, 1e-5);
        CUFFT(cufftDestroy(plan));
        CHECK(cudaFree(in));
        CHECK(cudaFree(out));
    }

    // cufftXtMakePlanMany and cufftXtExec, real to complex, on a stream, as PyTorch plans.
    {
        long long n[] = {64};
        size_t work = 0;
        auto real = values(128, 5);
        std::vector<float> real_f(real.begin(), real.end());
        std::vector<cd> as_complex(real.begin(), real.end());
        auto want = half_rows(dft(as_complex, {64}, -1), 64);
        float* in = upload(real_f);
        cufftComplex* out;
        CHECK(cudaMalloc(&out, 2 * 33 * sizeof(cufftComplex)));
        cudaStream_t s;
        CHECK(cudaStreamCreate(&s));
        cufftHandle plan;
        CUFFT(cufftCreate(&plan));
        CUFFT(cufftXtMakePlanMany(plan, 1, n, nullptr, 1, 64, CUFFT_TEST_R_32F, nullptr, 1, 33, CUFFT_TEST_C_32F, 2,
                                  &work, CUFFT_TEST_C_32F));
        CUFFT(cufftSetStream(plan, s));
        CUFFT(cufftXtExec(plan, in, out, CUFFT_FORWARD));
        CHECK(cudaStreamSynchronize(s));
        ok &= within("xt r2c", from_complex(download(out, 66)), want, 1e-5);
        CUFFT(cufftDestroy(plan));
        CHECK(cudaStreamDestroy(s));
        CHECK(cudaFree(in));
        CHECK(cudaFree(out));
    }

    // In place: complex, 2 transforms of 40; real rows of 30 padded to 32 floats (16 complex out).
    {
        auto x = complex_values(80, 6);
        auto want = dft(x, {40}, -1);
        cufftComplex* data = upload(to_complex(x));
        cufftHandle plan;
        CUFFT(cufftPlan1d(&plan, 40, CUFFT_C2C, 2));
        CUFFT(cufftExecC2C(plan, data, data, CUFFT_FORWARD));
        ok &= within("c2c in place", from_complex(download(data, 80)), want, 1e-5);
        CUFFT(cufftDestroy(plan));
        CHECK(cudaFree(data));

        auto real = values(60, 7);
        std::vector<float> padded(64, 0.0f);
        std::vector<cd> as_complex(real.begin(), real.end());
        for (int b = 0; b < 2; b++)
            for (int j = 0; j < 30; j++) padded[b * 32 + j] = (float)real[b * 30 + j];
        auto spectrum = half_rows(dft(as_complex, {30}, -1), 30);
        float* rows = upload(padded);
        CUFFT(cufftPlan1d(&plan, 30, CUFFT_R2C, 2));
        CUFFT(cufftExecR2C(plan, rows, (cufftComplex*)rows));
        ok &= within("r2c in place", from_complex(download((cufftComplex*)rows, 32)), spectrum, 1e-5);
        CUFFT(cufftDestroy(plan));
        CHECK(cudaFree(rows));
    }
    ok &= half_precision(native);
    // Work sizes before a plan is made (the shim's plans need no work area of the program's:
    // 0; NVIDIA's may need one), and a plan's properties set, read and reset.
    {
        size_t sizes[6];
        int n[] = {48}, embed[] = {64};
        long long wide[] = {48}, wide_embed[] = {64};
        cufftHandle plan;
        CUFFT(cufftCreate(&plan));
        CUFFT(cufftEstimate1d(48, CUFFT_C2C, 3, &sizes[0]));
        CUFFT(cufftEstimateMany(1, n, embed, 1, 64, embed, 1, 64, CUFFT_R2C, 2, &sizes[1]));
        CUFFT(cufftGetSize1d(plan, 48, CUFFT_C2C, 3, &sizes[2]));
        CUFFT(cufftGetSize2d(plan, 12, 10, CUFFT_D2Z, &sizes[3]));
        CUFFT(cufftGetSizeMany64(plan, 1, wide, wide_embed, 1, 64, wide_embed, 1, 64, CUFFT_Z2Z, 2, &sizes[4]));
        CUFFT(cufftXtGetSizeMany(plan, 1, wide, nullptr, 1, 48, CUFFT_TEST_R_32F, nullptr, 1, 25, CUFFT_TEST_C_32F, 1,
                                 &sizes[5], CUFFT_TEST_C_32F));
        bool none = true;
        for (size_t w : sizes) none &= w == 0;
        if (!native) printf(none ? "work sizes before a plan: all 0\n" : "work sizes: FAILED\n");
        cufftResult zero = cufftEstimate1d(0, CUFFT_C2C, 1, &sizes[0]);
        printf("estimate of a 0-point transform: %d\n", (int)zero);
        long long jit = -1, threads = -1, reset = -1;
        CUFFT(cufftSetPlanPropertyInt64(plan, NVFFT_PLAN_PROPERTY_INT64_PATIENT_JIT, 1));
        CUFFT(cufftGetPlanPropertyInt64(plan, NVFFT_PLAN_PROPERTY_INT64_PATIENT_JIT, &jit));
        CUFFT(cufftSetPlanPropertyInt64(plan, NVFFT_PLAN_PROPERTY_INT64_MAX_NUM_HOST_THREADS, 3));
        CUFFT(cufftGetPlanPropertyInt64(plan, NVFFT_PLAN_PROPERTY_INT64_MAX_NUM_HOST_THREADS, &threads));
        CUFFT(cufftResetPlanProperty(plan, NVFFT_PLAN_PROPERTY_INT64_PATIENT_JIT));
        CUFFT(cufftGetPlanPropertyInt64(plan, NVFFT_PLAN_PROPERTY_INT64_PATIENT_JIT, &reset));
        size_t limit = 1 << 20;
        CUFFT(cufftXtSetWorkAreaPolicy(plan, CUFFT_WORKAREA_USER, &limit));
        bool kept = jit == 1 && threads == 3 && reset == 0;
        printf(kept ? "plan properties set, read and reset; a work area policy taken\n" : "plan properties FAILED\n");
        ok &= (none || native) && kept;
        CUFFT(cufftDestroy(plan));
    }
    printf(ok ? "cufft_transforms: all within\n" : "cufft_transforms: FAILED\n");

    // What cuFFT refuses; the program goes on.
    if (!native) {
        long long n[] = {64};
        size_t work = 0;
        cufftHandle plan;
        CUFFT(cufftCreate(&plan));
        cufftResult mixed = cufftXtMakePlanMany(plan, 1, n, nullptr, 1, 64, CUFFT_TEST_C_16F, nullptr, 1, 64,
                                                CUFFT_TEST_C_32F, 1, &work, CUFFT_TEST_C_32F);
        printf("mixed precisions: %d\n", (int)mixed);
        cufftResult policy = cufftXtSetWorkAreaPolicy(plan, (cufftXtWorkAreaPolicy)5, &work);
        printf("work area policy 5: %d\n", (int)policy);
        CUFFT(cufftDestroy(plan));
        cufftComplex* small;
        CHECK(cudaMalloc(&small, 32 * sizeof(cufftComplex)));
        CUFFT(cufftPlan1d(&plan, 64, CUFFT_C2C, 1));
        cufftResult past = cufftExecC2C(plan, small, small, CUFFT_FORWARD);
        printf("an input past its allocation: %d\n", (int)past);
        CUFFT(cufftDestroy(plan));
        cufftResult destroyed = cufftExecC2C(plan, small, small, CUFFT_FORWARD);
        printf("a destroyed plan: %d\n", (int)destroyed);
        CHECK(cudaFree(small));
    }
    return ok ? 0 : 1;
}
