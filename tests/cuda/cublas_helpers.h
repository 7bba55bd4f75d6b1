// What the cuBLAS test programs share: CUBLAS(call), a call that must succeed; the reference
// gemm; small integer
// data (every product and sum of a few is exact in float); uploads, downloads and an exact
// comparison that reads every element, the padding included.
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"
#include "cublas_min.h"
#include "half.h"
#include "transfers.h"

#define CUBLAS(call)                                                                          \
    do {                                                                                      \
        cublasStatus_t s_ = (call);                                                           \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                    \
            printf("FAILED %s: %d %s\n", #call, (int)s_, cublasGetStatusName(s_));            \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

// C = alpha op(A) op(B) + beta C, column-major; C is not read when beta is 0.
template <typename T>
static void reference(bool ta, bool tb, int m, int n, int k, T alpha, const T* A, int lda, const T* B, int ldb,
                      T beta, T* C, int ldc) {
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            T acc = 0;
            for (int p = 0; p < k; p++) acc += (ta ? A[p + i * lda] : A[i + p * lda]) * (tb ? B[j + p * ldb] : B[p + j * ldb]);
            T* c = &C[i + j * ldc];
            *c = beta == 0 ? alpha * acc : alpha * acc + beta * *c;
        }
}

template <typename T>
static std::vector<T> small_integers(size_t n, int seed) {
    std::vector<T> v(n);
    for (size_t i = 0; i < n; i++) v[i] = (T)((int)((i * 7 + seed * 13) % 9) - 4);
    return v;
}

// Compares every element, the padding rows included (a gemm must leave them as they were).
template <typename T>
static bool same(const char* what, const std::vector<T>& got, const std::vector<T>& want) {
    for (size_t i = 0; i < want.size(); i++)
        if (!(got[i] == want[i]) && !(std::isnan(got[i]) && std::isnan(want[i]))) {
            printf("%s: element %zu is %g, expected %g\n", what, i, (double)got[i], (double)want[i]);
            return false;
        }
    return true;
}

// Prints "<what> exact" when `got` is `want`, else what it got.
template <typename T>
static bool equal(const char* what, T got, T want) {
    if (got == want) {
        printf("%s exact\n", what);
        return true;
    }
    printf("%s: got %g, expected %g\n", what, (double)got, (double)want);
    return false;
}

static std::vector<unsigned short> halves_of(const std::vector<float>& v) {
    std::vector<unsigned short> out(v.size());
    for (size_t i = 0; i < v.size(); i++) out[i] = half_of(v[i]);
    return out;
}

static std::vector<float> floats_of(const std::vector<unsigned short>& h) {
    std::vector<float> out(h.size());
    for (size_t i = 0; i < h.size(); i++) out[i] = float_of_half(h[i]);
    return out;
}

