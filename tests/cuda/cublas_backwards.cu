// cuBLAS's level-1 and level-2 routines on vectors BLAS reads backwards, from a plain CUDA
// program linked against libcublas.so.13. A negative increment puts element i of a vector of n
// at (n - 1 - i) |inc| from its pointer (the pointer is still its lowest address). So each call
// here, with some increments negative, must give exactly what it gives with those increments
// made positive on the same vectors reversed in memory (element i where element n - 1 - i was,
// the gaps untouched), the vectors it writes reversed back; and, unless the routine pairs two
// vectors that are both backwards (which pair as both forwards), something else than the same
// call read forwards on the vectors as they are (so that each case's data tells the directions
// apart: a vector that is its own reverse, or its reverse negated under syr's x x^T, would not). Every element of every buffer, the gaps
// included, is compared. Covered: dot, dotc, axpy, copy, swap, rot, rotm, AxpyEx (binary16),
// gemv (N, T, C; strided batched and by arrays of pointers), ger, gerc, symv, hemv, syr, her, syr2, her2, trmv, trsv, gbmv, hbmv, tbmv,
// tbsv, spmv, spr, tpsv, dgmm; and nrm2, asum, amax and scal, which BLAS does not run on a
// negative increment (0, 0, index 0, x unchanged).
// Usage: cublas_backwards [--native] (--native: leaves out what only the shim refuses: such a
// call on a capturing stream)
#include <array>
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "cublas_helpers.h"
#include "cublas_typed.h"

// The routines not declared in cublas_min.h, their matrices, vectors and scalars untyped.
extern "C" {
cublasStatus_t cublasCdotc_v2(cublasHandle_t, int, const void*, int, const void*, int, void*);
cublasStatus_t cublasZaxpy_v2(cublasHandle_t, int, const void*, const void*, int, void*, int);
cublasStatus_t cublasDrot_v2(cublasHandle_t, int, void*, int, void*, int, const void*, const void*);
cublasStatus_t cublasSrotm_v2(cublasHandle_t, int, void*, int, void*, int, const void*);
cublasStatus_t cublasAxpyEx(cublasHandle_t, int, const void*, int, const void*, int, int, void*, int, int, int);
cublasStatus_t cublasCgemv_v2(cublasHandle_t, int, int, int, const void*, const void*, int, const void*, int,
                              const void*, void*, int);
cublasStatus_t cublasCgerc_v2(cublasHandle_t, int, int, const void*, const void*, int, const void*, int, void*,
                              int);
cublasStatus_t cublasSsymv_v2(cublasHandle_t, int, int, const void*, const void*, int, const void*, int,
                              const void*, void*, int);
cublasStatus_t cublasZhemv_v2(cublasHandle_t, int, int, const void*, const void*, int, const void*, int,
                              const void*, void*, int);
cublasStatus_t cublasDsyr_v2(cublasHandle_t, int, int, const void*, const void*, int, void*, int);
cublasStatus_t cublasCher_v2(cublasHandle_t, int, int, const void*, const void*, int, void*, int);
cublasStatus_t cublasSsyr2_v2(cublasHandle_t, int, int, const void*, const void*, int, const void*, int, void*,
                              int);
cublasStatus_t cublasZher2_v2(cublasHandle_t, int, int, const void*, const void*, int, const void*, int, void*,
                              int);
cublasStatus_t cublasStrmv_v2(cublasHandle_t, int, int, int, int, const void*, int, void*, int);
cublasStatus_t cublasCtrmv_v2(cublasHandle_t, int, int, int, int, const void*, int, void*, int);
cublasStatus_t cublasDtrsv_v2(cublasHandle_t, int, int, int, int, const void*, int, void*, int);
cublasStatus_t cublasZtrsv_v2(cublasHandle_t, int, int, int, int, const void*, int, void*, int);
cublasStatus_t cublasSgbmv_v2(cublasHandle_t, int, int, int, int, int, const void*, const void*, int, const void*,
                              int, const void*, void*, int);
cublasStatus_t cublasChbmv_v2(cublasHandle_t, int, int, int, const void*, const void*, int, const void*, int,
                              const void*, void*, int);
cublasStatus_t cublasStbmv_v2(cublasHandle_t, int, int, int, int, int, const void*, int, void*, int);
cublasStatus_t cublasDtbsv_v2(cublasHandle_t, int, int, int, int, int, const void*, int, void*, int);
cublasStatus_t cublasSspmv_v2(cublasHandle_t, int, int, const void*, const void*, const void*, int, const void*,
                              void*, int);
cublasStatus_t cublasDspr_v2(cublasHandle_t, int, int, const void*, const void*, int, void*);
cublasStatus_t cublasStpsv_v2(cublasHandle_t, int, int, int, int, const void*, void*, int);
cublasStatus_t cublasSdgmm(cublasHandle_t, int, int, int, const void*, int, const void*, int, void*, int);
cublasStatus_t cublasZdgmm(cublasHandle_t, int, int, int, const void*, int, const void*, int, void*, int);
cublasStatus_t cublasSgemvStridedBatched(cublasHandle_t, int, int, int, const void*, const void*, int, long long,
                                         const void*, int, long long, const void*, void*, int, long long, int);
cublasStatus_t cublasZgemvBatched(cublasHandle_t, int, int, int, const void*, const void* const*, int,
                                  const void* const*, int, const void*, void* const*, int, int);
}

// A vector of a call: n elements |inc| apart, read backwards when inc is negative; or, for a
// batched call, `batch` such vectors `stride` elements apart.
struct Shape {
    int n, inc, batch = 1;
    size_t stride = 0;
};

// v with the n elements of each vector |inc| apart in reverse order, the gaps as they were.
template <typename E>
static std::vector<E> reversed(std::vector<E> v, Shape s) {
    const size_t step = s.inc < 0 ? -s.inc : s.inc;
    for (int b = 0; b < s.batch; b++)
        for (int i = 0; i < s.n / 2; i++) std::swap(v[b * s.stride + i * step], v[b * s.stride + (s.n - 1 - i) * step]);
    return v;
}

// Whether every element of every buffer is the same (equal values: +0 is -0).
template <typename E>
static bool same_buffers(const std::vector<std::vector<E>>& a, const std::vector<std::vector<E>>& b,
                         const char* what, bool say) {
    for (size_t k = 0; k < a.size(); k++)
        for (size_t i = 0; i < a[k].size(); i++)
            if (!(a[k][i] == b[k][i])) {
                if (say)
                    printf("%s: buffer %zu element %zu is %g%+gi, expected %g%+gi\n", what, k, i,
                           (double)std::real(a[k][i]), (double)std::imag(a[k][i]), (double)std::real(b[k][i]),
                           (double)std::imag(b[k][i]));
                return false;
            }
    return true;
}

// A call on device buffers (the vectors first, in the order of their shapes) with the
// vectors' increments; it gives its scalar result (E() for none).
template <typename E>
using Call = std::function<E(const std::vector<E*>&, const std::vector<int>&)>;

// Runs `call` on the buffers: as they are with the increments given (`backwards`), or with
// the increments made positive on the vectors reversed (`reversed_first`), or as they are
// (neither). Gives every buffer as it was left, the reversed vectors reversed back, and the
// scalar result last.
template <typename E>
static std::vector<std::vector<E>> run(const std::vector<Shape>& shapes, const std::vector<std::vector<E>>& buffers,
                                       const Call<E>& call, bool backwards, bool reversed_first) {
    std::vector<E*> d;
    std::vector<int> incs;
    for (size_t k = 0; k < buffers.size(); k++) {
        bool vector = k < shapes.size();
        bool flip = vector && reversed_first && shapes[k].inc < 0;
        if (vector) incs.push_back(backwards ? shapes[k].inc : std::abs(shapes[k].inc));
        d.push_back(upload(flip ? reversed(buffers[k], shapes[k]) : buffers[k]));
    }
    E result = call(d, incs);
    std::vector<std::vector<E>> out;
    for (size_t k = 0; k < buffers.size(); k++) {
        auto host = download(d[k], buffers[k].size());
        bool flip = k < shapes.size() && reversed_first && shapes[k].inc < 0;
        out.push_back(flip ? reversed(host, shapes[k]) : host);
        CHECK(cudaFree(d[k]));
    }
    out.push_back({result});
    return out;
}

// The check this program makes of one call (see the top): prints "<what> exact".
template <typename E>
static bool backwards_is_reversed(const char* what, std::vector<Shape> shapes, std::vector<std::vector<E>> buffers,
                                  Call<E> call, bool pairs_both_backwards = false) {
    auto got = run(shapes, buffers, call, true, false);
    auto want = run(shapes, buffers, call, false, true);
    if (!same_buffers(got, want, what, true)) return false;
    if (!pairs_both_backwards && same_buffers(got, run(shapes, buffers, call, false, false), what, false)) {
        printf("%s: the same as read forwards\n", what);
        return false;
    }
    printf("%s exact\n", what);
    return true;
}

// `len` small integers (complex: in both parts), `seed` choosing which.
template <typename E>
static std::vector<E> data(size_t len, int seed) {
    return values<E>(len, seed);
}

// Elements from a vector's pointer to its last (its batch's last), plus one.
static size_t span(Shape s) {
    return (s.batch - 1) * s.stride + (size_t)(s.n - 1) * std::abs(s.inc) + 1;
}

static bool level_1(cublasHandle_t h) {
    bool ok = true;
    Shape x{37, -2}, y{37, 3};
    ok &= backwards_is_reversed<float>("sdot incx -2 incy 3", {x, y}, {data<float>(span(x), 1), data<float>(span(y), 2)},
        [h](auto& d, auto& inc) { float r; CUBLAS(cublasSdot_v2(h, 37, d[0], inc[0], d[1], inc[1], &r)); return r; });
    Shape bx{29, -3}, by{29, -1};
    ok &= backwards_is_reversed<double>("ddot incx -3 incy -1", {bx, by}, {data<double>(span(bx), 3), data<double>(span(by), 4)},
        [h](auto& d, auto& inc) { double r; CUBLAS(cublasDdot_v2(h, 29, d[0], inc[0], d[1], inc[1], &r)); return r; }, true);
    Shape cx{21, 2}, cy{21, -1};
    ok &= backwards_is_reversed<c32>("cdotc incx 2 incy -1", {cx, cy}, {data<c32>(span(cx), 5), data<c32>(span(cy), 6)},
        [h](auto& d, auto& inc) { c32 r; CUBLAS(cublasCdotc_v2(h, 21, d[0], inc[0], d[1], inc[1], &r)); return r; });
    Shape zx{19, 1}, zy{19, -2};
    ok &= backwards_is_reversed<c64>("zaxpy incx 1 incy -2", {zx, zy}, {data<c64>(span(zx), 7), data<c64>(span(zy), 8)},
        [h](auto& d, auto& inc) { c64 a(2, -1); CUBLAS(cublasZaxpy_v2(h, 19, &a, d[0], inc[0], d[1], inc[1])); return c64(); });
    Shape dx{23, -1}, dy{23, 2};
    ok &= backwards_is_reversed<double>("dcopy incx -1 incy 2", {dx, dy}, {data<double>(span(dx), 9), data<double>(span(dy), 10)},
        [h](auto& d, auto& inc) { CUBLAS(cublasDcopy_v2(h, 23, d[0], inc[0], d[1], inc[1])); return 0.0; });
    Shape sx{17, -2}, sy{17, 1};
    ok &= backwards_is_reversed<float>("sswap incx -2 incy 1", {sx, sy}, {data<float>(span(sx), 11), data<float>(span(sy), 12)},
        [h](auto& d, auto& inc) { CUBLAS(cublasSswap_v2(h, 17, d[0], inc[0], d[1], inc[1])); return 0.0f; });
    Shape rx{15, 3}, ry{15, -2};
    ok &= backwards_is_reversed<double>("drot incx 3 incy -2", {rx, ry}, {data<double>(span(rx), 13), data<double>(span(ry), 14)},
        [h](auto& d, auto& inc) { double c = 2, s = -1; CUBLAS(cublasDrot_v2(h, 15, d[0], inc[0], d[1], inc[1], &c, &s)); return 0.0; });
    Shape mx{13, -1}, my{13, 2};
    ok &= backwards_is_reversed<float>("srotm flag -1 incx -1 incy 2", {mx, my}, {data<float>(span(mx), 15), data<float>(span(my), 16)},
        [h](auto& d, auto& inc) {
            float param[5] = {-1, 2, -1, 3, 1};
            CUBLAS(cublasSrotm_v2(h, 13, d[0], inc[0], d[1], inc[1], param));
            return 0.0f;
        });
    // binary16 vectors (two bytes an element), f32 alpha.
    Shape hx{25, -2}, hy{25, 1};
    auto halves = [](size_t n, int seed) { return halves_of(small_integers<float>(n, seed)); };
    ok &= backwards_is_reversed<unsigned short>("f16 AxpyEx incx -2 incy 1", {hx, hy}, {halves(49, 17), halves(25, 18)},
        [h](auto& d, auto& inc) {
            float a = 3;
            CUBLAS(cublasAxpyEx(h, 25, &a, CUDA_R_32F_, d[0], CUDA_R_16F_, inc[0], d[1], CUDA_R_16F_, inc[1], CUDA_R_32F_));
            return (unsigned short)0;
        });
    return ok;
}

static bool general(cublasHandle_t h) {
    bool ok = true;
    const int m = 11, n = 7, lda = 13;
    auto a = [&](int seed) { return data<float>((size_t)lda * n, seed); };
    ok &= backwards_is_reversed<float>("sgemv N incx -2 incy 3", {{n, -2}, {m, 3}}, {data<float>(13, 1), data<float>(31, 2), a(3)},
        [h](auto& d, auto& inc) {
            float alpha = 2, beta = -1;
            CUBLAS(cublasSgemv_v2(h, CUBLAS_OP_N, m, n, &alpha, d[2], lda, d[0], inc[0], &beta, d[1], inc[1]));
            return 0.0f;
        });
    ok &= backwards_is_reversed<double>("dgemv T incx 1 incy -3", {{m, 1}, {n, -3}}, {data<double>(m, 4), data<double>(19, 5), data<double>((size_t)lda * n, 6)},
        [h](auto& d, auto& inc) {
            double alpha = -1, beta = 2;
            CUBLAS(cublasDgemv_v2(h, CUBLAS_OP_T, m, n, &alpha, d[2], lda, d[0], inc[0], &beta, d[1], inc[1]));
            return 0.0;
        });
    // C: the reference run's strided y is a batch of products, one an element of y; the run
    // backwards reads y from a contiguous copy (a column).
    ok &= backwards_is_reversed<c32>("cgemv C incx -2 incy -3", {{m, -2}, {n, -3}}, {data<c32>(21, 7), data<c32>(19, 8), data<c32>((size_t)lda * n, 9)},
        [h](auto& d, auto& inc) {
            c32 alpha(1, 2), beta(0, -1);
            CUBLAS(cublasCgemv_v2(h, CUBLAS_OP_C, m, n, &alpha, d[2], lda, d[0], inc[0], &beta, d[1], inc[1]));
            return c32();
        });
    ok &= backwards_is_reversed<float>("sger incx -3 incy 2", {{m, -3}, {n, 2}}, {data<float>(31, 10), data<float>(13, 11), a(12)},
        [h](auto& d, auto& inc) {
            float alpha = -2;
            CUBLAS(cublasSger_v2(h, m, n, &alpha, d[0], inc[0], d[1], inc[1], d[2], lda));
            return 0.0f;
        });
    // y conjugated: a column for increment 1, here a forward copy.
    ok &= backwards_is_reversed<c32>("cgerc incx 1 incy -1", {{m, 1}, {n, -1}}, {data<c32>(m, 13), data<c32>(n, 14), data<c32>((size_t)lda * n, 15)},
        [h](auto& d, auto& inc) {
            c32 alpha(2, -1);
            CUBLAS(cublasCgerc_v2(h, m, n, &alpha, d[0], inc[0], d[1], inc[1], d[2], lda));
            return c32();
        });
    // Batches of 3 products: strided, and by arrays of pointers (a product at a time).
    const int count = 3;
    Shape bx{n, -1, count, 9}, by{m, 2, count, 23};
    ok &= backwards_is_reversed<float>("sgemvStridedBatched N incx -1 incy 2", {bx, by},
        {data<float>(span(bx), 22), data<float>(span(by), 23), data<float>((size_t)lda * n * count, 24)},
        [h](auto& d, auto& inc) {
            float alpha = 3, beta = -2;
            CUBLAS(cublasSgemvStridedBatched(h, CUBLAS_OP_N, m, n, &alpha, d[2], lda, (long long)lda * n, d[0], inc[0], 9, &beta,
                                             d[1], inc[1], 23, count));
            return 0.0f;
        });
    Shape cx{m, 2, count, 25}, cy{n, -2, count, 17};
    ok &= backwards_is_reversed<c64>("zgemvBatched T incx 2 incy -2", {cx, cy},
        {data<c64>(span(cx), 25), data<c64>(span(cy), 26), data<c64>((size_t)lda * n * count, 27)},
        [h](auto& d, auto& inc) {
            std::vector<c64*> pointers;
            for (int b = 0; b < count; b++) pointers.push_back(d[2] + (size_t)b * lda * n);
            for (int b = 0; b < count; b++) pointers.push_back(d[0] + (size_t)b * 25);
            for (int b = 0; b < count; b++) pointers.push_back(d[1] + (size_t)b * 17);
            c64** arrays = upload(pointers);
            c64 alpha(1, -1), beta(2, 1);
            auto at = [&](int k) { return (void* const*)(arrays + k * count); };
            CUBLAS(cublasZgemvBatched(h, CUBLAS_OP_T, m, n, &alpha, at(0), lda, at(1), inc[0], &beta, at(2), inc[1], count));
            CHECK(cudaFree(arrays));
            return c64();
        });
    ok &= backwards_is_reversed<float>("sdgmm left incx -2", {{m, -2}}, {data<float>(21, 16), a(17), a(18)},
        [h](auto& d, auto& inc) { CUBLAS(cublasSdgmm(h, 0, m, n, d[1], lda, d[0], inc[0], d[2], lda)); return 0.0f; });
    ok &= backwards_is_reversed<c64>("zdgmm right incx -3", {{n, -3}}, {data<c64>(19, 19), data<c64>((size_t)lda * n, 20), data<c64>((size_t)lda * n, 21)},
        [h](auto& d, auto& inc) { CUBLAS(cublasZdgmm(h, 1, m, n, d[1], lda, d[0], inc[0], d[2], lda)); return c64(); });
    return ok;
}

// A square matrix of order n, leading dimension n + 1.
template <typename E>
static std::vector<E> square(int n, int seed) {
    return data<E>((size_t)(n + 1) * n, seed);
}

static bool triangles(cublasHandle_t h) {
    bool ok = true;
    const int n = 9, lda = n + 1;
    ok &= backwards_is_reversed<float>("ssymv lower incx -2 incy 1", {{n, -2}, {n, 1}}, {data<float>(17, 1), data<float>(n, 2), square<float>(n, 3)},
        [h](auto& d, auto& inc) {
            float alpha = 2, beta = 1;
            CUBLAS(cublasSsymv_v2(h, 0, n, &alpha, d[2], lda, d[0], inc[0], &beta, d[1], inc[1]));
            return 0.0f;
        });
    ok &= backwards_is_reversed<c64>("zhemv upper incx 1 incy -2", {{n, 1}, {n, -2}}, {data<c64>(n, 4), data<c64>(17, 5), square<c64>(n, 6)},
        [h](auto& d, auto& inc) {
            c64 alpha(1, -1), beta(2, 0);
            CUBLAS(cublasZhemv_v2(h, 1, n, &alpha, d[2], lda, d[0], inc[0], &beta, d[1], inc[1]));
            return c64();
        });
    ok &= backwards_is_reversed<double>("dsyr upper incx -3", {{n, -3}}, {data<double>(25, 8), square<double>(n, 7)},
        [h](auto& d, auto& inc) { double alpha = -1; CUBLAS(cublasDsyr_v2(h, 1, n, &alpha, d[0], inc[0], d[1], lda)); return 0.0; });
    ok &= backwards_is_reversed<c32>("cher lower incx -1", {{n, -1}}, {data<c32>(n, 9), square<c32>(n, 10)},
        [h](auto& d, auto& inc) { float alpha = 2; CUBLAS(cublasCher_v2(h, 0, n, &alpha, d[0], inc[0], d[1], lda)); return c32(); });
    ok &= backwards_is_reversed<float>("ssyr2 lower incx 2 incy -1", {{n, 2}, {n, -1}}, {data<float>(17, 11), data<float>(n, 12), square<float>(n, 13)},
        [h](auto& d, auto& inc) {
            float alpha = 3;
            CUBLAS(cublasSsyr2_v2(h, 0, n, &alpha, d[0], inc[0], d[1], inc[1], d[2], lda));
            return 0.0f;
        });
    ok &= backwards_is_reversed<c64>("zher2 upper incx -2 incy -3", {{n, -2}, {n, -3}}, {data<c64>(17, 14), data<c64>(25, 15), square<c64>(n, 16)},
        [h](auto& d, auto& inc) {
            c64 alpha(1, 2);
            CUBLAS(cublasZher2_v2(h, 1, n, &alpha, d[0], inc[0], d[1], inc[1], d[2], lda));
            return c64();
        });
    ok &= backwards_is_reversed<float>("strmv upper N incx -2", {{n, -2}}, {data<float>(17, 17), square<float>(n, 18)},
        [h](auto& d, auto& inc) { CUBLAS(cublasStrmv_v2(h, 1, 0, 0, n, d[1], lda, d[0], inc[0])); return 0.0f; });
    ok &= backwards_is_reversed<c32>("ctrmv lower C incx -1", {{n, -1}}, {data<c32>(n, 19), square<c32>(n, 20)},
        [h](auto& d, auto& inc) { CUBLAS(cublasCtrmv_v2(h, 0, 2, 0, n, d[1], lda, d[0], inc[0])); return c32(); });
    // Unit diagonals: the solves of small integers stay exact.
    ok &= backwards_is_reversed<double>("dtrsv lower T unit incx -3", {{n, -3}}, {data<double>(25, 21), square<double>(n, 22)},
        [h](auto& d, auto& inc) { CUBLAS(cublasDtrsv_v2(h, 0, 1, 1, n, d[1], lda, d[0], inc[0])); return 0.0; });
    ok &= backwards_is_reversed<c64>("ztrsv upper C unit incx -2", {{n, -2}}, {data<c64>(17, 23), square<c64>(n, 24)},
        [h](auto& d, auto& inc) { CUBLAS(cublasZtrsv_v2(h, 1, 2, 1, n, d[1], lda, d[0], inc[0])); return c64(); });
    return ok;
}

static bool bands_and_packed(cublasHandle_t h) {
    bool ok = true;
    // gbmv: 10 x 8, kl 2, ku 1, lda 5 (one spare row).
    const int m = 10, n = 8, kl = 2, ku = 1, lda = 5;
    ok &= backwards_is_reversed<float>("sgbmv N incx -2 incy -1", {{n, -2}, {m, -1}}, {data<float>(15, 1), data<float>(m, 2), data<float>((size_t)lda * n, 3)},
        [h](auto& d, auto& inc) {
            float alpha = 2, beta = -1;
            CUBLAS(cublasSgbmv_v2(h, CUBLAS_OP_N, m, n, kl, ku, &alpha, d[2], lda, d[0], inc[0], &beta, d[1], inc[1]));
            return 0.0f;
        });
    // hbmv, tbmv, tbsv: order 9, 2 diagonals besides the main one, lda 4.
    const int o = 9, k = 2, ldb = 4;
    ok &= backwards_is_reversed<c32>("chbmv upper incx 1 incy -2", {{o, 1}, {o, -2}}, {data<c32>(o, 4), data<c32>(17, 5), data<c32>((size_t)ldb * o, 6)},
        [h](auto& d, auto& inc) {
            c32 alpha(1, 1), beta(0, 2);
            CUBLAS(cublasChbmv_v2(h, 1, o, k, &alpha, d[2], ldb, d[0], inc[0], &beta, d[1], inc[1]));
            return c32();
        });
    ok &= backwards_is_reversed<float>("stbmv lower T incx -3", {{o, -3}}, {data<float>(25, 7), data<float>((size_t)ldb * o, 8)},
        [h](auto& d, auto& inc) { CUBLAS(cublasStbmv_v2(h, 0, 1, 0, o, k, d[1], ldb, d[0], inc[0])); return 0.0f; });
    ok &= backwards_is_reversed<double>("dtbsv upper N unit incx -2", {{o, -2}}, {data<double>(17, 9), data<double>((size_t)ldb * o, 10)},
        [h](auto& d, auto& inc) { CUBLAS(cublasDtbsv_v2(h, 1, 0, 1, o, k, d[1], ldb, d[0], inc[0])); return 0.0; });
    // Packed: order 9, 45 elements.
    const size_t packed = (size_t)o * (o + 1) / 2;
    ok &= backwards_is_reversed<float>("sspmv upper incx -1 incy 2", {{o, -1}, {o, 2}}, {data<float>(o, 11), data<float>(17, 12), data<float>(packed, 13)},
        [h](auto& d, auto& inc) {
            float alpha = -2, beta = 1;
            CUBLAS(cublasSspmv_v2(h, 1, o, &alpha, d[2], d[0], inc[0], &beta, d[1], inc[1]));
            return 0.0f;
        });
    ok &= backwards_is_reversed<double>("dspr lower incx -2", {{o, -2}}, {data<double>(17, 15), data<double>(packed, 14)},
        [h](auto& d, auto& inc) { double alpha = 2; CUBLAS(cublasDspr_v2(h, 0, o, &alpha, d[0], inc[0], d[1])); return 0.0; });
    ok &= backwards_is_reversed<float>("stpsv lower N unit incx -3", {{o, -3}}, {data<float>(25, 16), data<float>(packed, 17)},
        [h](auto& d, auto& inc) { CUBLAS(cublasStpsv_v2(h, 0, 0, 1, o, d[1], d[0], inc[0])); return 0.0f; });
    return ok;
}

// nrm2, asum, amax and scal of one vector with a negative increment: BLAS does nothing (a norm
// and a sum 0, the index 0, x unchanged).
static bool one_vector(cublasHandle_t h) {
    std::vector<float> x = small_integers<float>(9, 3);
    float* dx = upload(x);
    float norm = -1, sum = -1, scale = 5;
    int index = -1;
    CUBLAS(cublasSnrm2_v2(h, 5, dx, -2, &norm));
    CUBLAS(cublasSasum_v2(h, 5, dx, -2, &sum));
    CUBLAS(cublasIsamax_v2(h, 5, dx, -2, &index));
    CUBLAS(cublasSscal_v2(h, 5, &scale, dx, -2));
    bool ok = norm == 0 && sum == 0 && index == 0 && same("sscal incx -2", download(dx, x.size()), x);
    if (ok) printf("snrm2, sasum, isamax, sscal incx -2: nothing done exact\n");
    else printf("snrm2, sasum, isamax, sscal incx -2: %g %g %d\n", norm, sum, index);
    CHECK(cudaFree(dx));
    return ok;
}

int main(int argc, char** argv) {
    bool native = argc > 1 && strcmp(argv[1], "--native") == 0;
    cublasHandle_t h;
    CUBLAS(cublasCreate_v2(&h));
    bool ok = level_1(h);
    ok &= general(h);
    ok &= triangles(h);
    ok &= bands_and_packed(h);
    ok &= one_vector(h);
    // cuBLAS's checks come first: a call it refuses, or one with nothing to compute, reads no
    // vector (gathers none, so it leaves a capture alone).
    {
        std::vector<float> v(16, 1.0f);
        float* d = upload(v);
        cublasStatus_t st = cublasDtrsv_v2(h, 0, 0, 0, 0, d, 1, d + 8, -1);
        printf("dtrsv n 0 incx -1: %d %s\n", (int)st, cublasGetStatusName(st));
        CHECK(cudaFree(d));
    }
    while_capturing(h, "sgbmv lda 0 incx -1", [h](float* d) {
        float a = 1, b = 0;
        return cublasSgbmv_v2(h, CUBLAS_OP_N, 2, 2, 0, 0, &a, d, 0, d + 8, -1, &b, d + 12, 1);
    });
    if (!native) {
        // A forward copy is gone before a captured graph would run: refused while capturing;
        // two vectors both backwards need none.
        while_capturing(h, "saxpy incx -1", [h](float* d) {
            float a = 2;
            return cublasSaxpy_v2(h, 4, &a, d, -1, d + 8, 1);
        });
        cudaStream_t s;
        CHECK(cudaStreamCreate(&s));
        CUBLAS(cublasSetStream_v2(h, s));
        std::vector<float> x = {1, 2, 3, 4}, y = {10, 20, 30, 40};
        float *dx = upload(x), *dy = upload(y), a = 2;
        cudaGraph_t g;
        cudaGraphExec_t e;
        CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        CUBLAS(cublasSaxpy_v2(h, 4, &a, dx, -1, dy, -1));
        CHECK(cudaStreamEndCapture(s, &g));
        CHECK(cudaGraphInstantiate(&e, g, 0));
        CHECK(cudaGraphLaunch(e, s));
        CHECK(cudaStreamSynchronize(s));
        bool captured = same("captured saxpy incx -1 incy -1", download(dy, 4), std::vector<float>{12, 24, 36, 48});
        if (captured) printf("captured saxpy incx -1 incy -1 exact\n");
        ok &= captured;
        CHECK(cudaGraphExecDestroy(e));
        CHECK(cudaGraphDestroy(g));
        CUBLAS(cublasSetStream_v2(h, 0));
        for (float* p : {dx, dy}) CHECK(cudaFree(p));
        CHECK(cudaStreamDestroy(s));
    }
    CUBLAS(cublasDestroy_v2(h));
    printf("cublas_backwards: %s\n", ok ? "all exact" : "FAILED");
    return ok ? 0 : 1;
}
