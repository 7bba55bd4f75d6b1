// CUDA C++ on the host, for the stand-in: just enough of the language and its built-ins that
// `kernels.cu` (the backend's builtin module) compiles with g++ and runs as a GPU would run it,
// one thread of the launch after another (`builtins.cpp` drives them). Not a GPU: the point is
// that the tests execute the kernels' own source, not a transcription of it.
#pragma once

#include <atomic>
#include <cmath>
#include <cstring>

#define AC_KERNELS_ON_HOST 1
#define __global__
#define __device__
#define __forceinline__ inline __attribute__((always_inline))
// One launch runs on one host thread, one block after another, and a block's threads as
// fibers of that thread: a block's `__shared__` variable is the thread's own.
#define __shared__ static thread_local

struct uint3 {
    unsigned x, y, z;
};
typedef uint3 dim3;

// The running thread's coordinates, set by the launcher before it runs (or resumes) a thread.
extern thread_local uint3 threadIdx, blockIdx, blockDim, gridDim;

// Waits until every thread of the block has reached it (`builtins.cpp`: the block's fibers).
void __syncthreads();

template <typename T>
__forceinline__ T atomicAdd(T* address, T value) {
    return std::atomic_ref<T>(*address).fetch_add(value);
}

__forceinline__ float __uint_as_float(unsigned u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

__forceinline__ unsigned __float_as_uint(float f) {
    unsigned u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

// sin(pi x) and cos(pi x), reduced to an eighth of a turn before the library's sin and cos
// (CUDA's sincospi is exact at multiples of 1/2, and so is this).
inline void sincospi(double x, double* s, double* c) {
    double r = std::remainder(x, 2.0);  // in [-1, 1]
    bool negate_sin = r < 0;
    r = std::fabs(r);                   // sin(pi r) for r in [0, 1]; cos is even
    bool negate_cos = r > 0.5;
    if (negate_cos) r = 1.0 - r;        // sin(pi (1 - r)) = sin(pi r), cos(pi (1 - r)) = -cos(pi r)
    double sv, cv;
    if (r > 0.25) {
        sv = std::cos(M_PI * (0.5 - r));
        cv = std::sin(M_PI * (0.5 - r));
    } else {
        sv = std::sin(M_PI * r);
        cv = std::cos(M_PI * r);
    }
    *s = negate_sin ? -sv : sv;
    *c = negate_cos ? -cv : cv;
}

// binary16 to f32 and back, rounded to nearest, ties to even, as PTX's `cvt` and `cvt.rn`.
__forceinline__ float f16_to_f32(unsigned short h) {
    _Float16 v;
    std::memcpy(&v, &h, sizeof v);
    return (float)v;
}

__forceinline__ unsigned short f32_to_f16(float f) {
    _Float16 v = (_Float16)f;
    unsigned short h;
    std::memcpy(&h, &v, sizeof h);
    return h;
}
