// The `builtin` module on CUDA: the same kernels, names and signatures as the CPU device's
// (see builtin.rs). Compiled by NVRTC when the backend starts, and for the tests by g++ into
// the driver stand-in (cuda-standin/host/), which runs this source on the CPU: with
// `AC_KERNELS_ON_HOST` defined, the PTX below is replaced by the host's own conversions.
//
// Every kernel is a grid-stride loop over the whole launch (x, y and z flattened), so any launch
// shape computes the whole result, as on the CPU device.

typedef unsigned long long u64;

__device__ __forceinline__ u64 thread_index() {
    u64 block = blockIdx.x + (u64)gridDim.x * (blockIdx.y + (u64)gridDim.y * blockIdx.z);
    u64 threads = (u64)blockDim.x * blockDim.y * blockDim.z;
    u64 local = threadIdx.x + (u64)blockDim.x * (threadIdx.y + (u64)blockDim.y * threadIdx.z);
    return block * threads + local;
}

__device__ __forceinline__ u64 thread_count() {
    return (u64)gridDim.x * gridDim.y * gridDim.z * blockDim.x * blockDim.y * blockDim.z;
}

extern "C" __global__ void fill(float* out, float value, u64 n) {
    for (u64 i = thread_index(); i < n; i += thread_count()) out[i] = value;
}

extern "C" __global__ void vector_add(const float* a, const float* b, float* c, u64 n) {
    for (u64 i = thread_index(); i < n; i += thread_count()) c[i] = a[i] + b[i];
}

extern "C" __global__ void saxpy(float a, const float* x, float* y, u64 n) {
    for (u64 i = thread_index(); i < n; i += thread_count()) y[i] = a * x[i] + y[i];
}

// C = alpha A B + beta C, row-major; A is m x k, B is k x n. One element of C per iteration,
// accumulated in the same order as the CPU reference.
extern "C" __global__ void sgemm(unsigned m, unsigned n, unsigned k, float alpha, const float* A, const float* B,
                                 float beta, float* C) {
    u64 total = (u64)m * n;
    for (u64 e = thread_index(); e < total; e += thread_count()) {
        u64 row = e / n, col = e % n;
        float acc = 0.0f;
        for (unsigned p = 0; p < k; ++p) acc += A[row * k + p] * B[(u64)p * n + col];
        C[e] = alpha * acc + beta * C[e];
    }
}

// out[0] += sum(in[0..n]): each thread sums in double, the block combines its threads' sums in
// shared memory (double atomics need sm_60), and one atomic add per block goes to out.
extern "C" __global__ void reduce_sum(const float* in, float* out, u64 n) {
    __shared__ double block_sum;
    unsigned local = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    if (local == 0) block_sum = 0.0;
    __syncthreads();
    double sum = 0.0;
    for (u64 i = thread_index(); i < n; i += thread_count()) sum += (double)in[i];
    atomicAdd(&block_sum, sum);
    __syncthreads();
    if (local == 0) atomicAdd(out, (float)block_sum);
}

// A matrix of one element type, read and written as it is stored.
template <typename T>
struct Typed {
    T* p;
    __device__ T get(u64 i) const { return p[i]; }
    __device__ void set(u64 i, T v) const { p[i] = v; }
};

// A matrix of `blas_gemm_ex`, its element type coded: 0 f32, 1 f16 (binary16), 2 bf16; read as
// f32 (exact) and written rounded to nearest, ties to even. The conversions are spelled out (PTX
// `cvt` for f16; bf16 by its bits, since `cvt.rn.bf16.f32` needs sm_80) so that NVRTC needs no
// header and every architecture rounds as ac-proto's `GemmElement` does. (The sums are not
// bit for bit the CPU device's: NVRTC fuses multiply-adds.)
#ifndef AC_KERNELS_ON_HOST
__device__ __forceinline__ float f16_to_f32(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ unsigned short f32_to_f16(float v) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
}
#endif

struct Coded {
    void* p;
    unsigned code;
    __device__ float get(u64 i) const {
        if (code == 0) return ((const float*)p)[i];
        unsigned short h = ((const unsigned short*)p)[i];
        if (code == 2) return __uint_as_float((unsigned)h << 16);
        return f16_to_f32(h);
    }
    __device__ void set(u64 i, float v) const {
        if (code == 0) {
            ((float*)p)[i] = v;
            return;
        }
        unsigned short h;
        if (code == 2) {
            unsigned u = __float_as_uint(v);
            h = (u & 0x7fffffffu) > 0x7f800000u ? (unsigned short)((u >> 16) | 0x40u)
                                                 : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        } else {
            h = f32_to_f16(v);
        }
        ((unsigned short*)p)[i] = h;
    }
};

// A complex number (cuComplex, cuDoubleComplex): real part first.
template <typename R>
struct Complex {
    R re, im;
    __device__ Complex(R re = 0, R im = 0) : re(re), im(im) {}
    __device__ Complex operator+(Complex o) const { return Complex(re + o.re, im + o.im); }
    __device__ Complex operator-(Complex o) const { return Complex(re - o.re, im - o.im); }
    __device__ Complex operator*(Complex o) const { return Complex(re * o.re - im * o.im, re * o.im + im * o.re); }
    __device__ Complex& operator+=(Complex o) { return *this = *this + o; }
    __device__ bool operator==(Complex o) const { return re == o.re && im == o.im; }
};

// op(X) = X^H reads X's elements conjugated: nothing to do for a real X.
__device__ __forceinline__ float conjugate(float v) { return v; }
__device__ __forceinline__ double conjugate(double v) { return v; }
template <typename R>
__device__ __forceinline__ Complex<R> conjugate(Complex<R> v) { return Complex<R>(v.re, -v.im); }

// How a gemm reads element (r, c) of a matrix X as stored (before op), X_b from `base`: as it is
// (`form` GEMM_PLAIN), or as the structured operand of blas_<t>gemm_tri (backend
// device/structured.rs): `form` bit 0 the triangle stored (0 lower, 1 upper), bits 1-2 what the
// matrix is (0 symmetric, 1 Hermitian, 2 triangular, 3 triangular with a unit diagonal). Only the
// stored triangle is read (BLAS: the other may hold anything): a symmetric matrix's other
// elements are their mirrors, a Hermitian one's their mirrors' conjugates (its diagonal's
// imaginary parts taken as 0), a triangular one's zeros (its diagonal ones where unit).
#define GEMM_PLAIN 0xffffffffu
__device__ __forceinline__ float real_element(float v) { return v; }
__device__ __forceinline__ double real_element(double v) { return v; }
template <typename R>
__device__ __forceinline__ Complex<R> real_element(Complex<R> v) { return Complex<R>(v.re, 0); }

template <typename T, typename M>
__device__ T stored(M X, u64 base, unsigned ld, u64 r, u64 c, unsigned form) {
    if (form == GEMM_PLAIN) return X.get(base + r + c * ld);
    const unsigned kind = (form >> 1) & 3;
    const bool held = (form & 1) ? r <= c : r >= c;
    if (kind >= 2) {
        if (!held) return T(0);
        if (kind == 3 && r == c) return T(1);
        return X.get(base + r + c * ld);
    }
    if (!held) {
        T mirror = X.get(base + c + r * ld);
        return kind == 1 ? conjugate(mirror) : mirror;
    }
    T v = X.get(base + r + c * ld);
    return kind == 1 && r == c ? real_element(v) : v;
}

// BLAS's gemm, column-major as cuBLAS is (the CUDA shim's `cublas<S|D|C|Z>gemm*`,
// `cublasGemmEx` and cuBLASLt's matmul launch these): C_b = alpha op(A_b) op(B_b) + beta C_b
// for each b < batch, op(X) = X, its transpose (trans 1) or its conjugate transpose (trans 2),
// X_b from X's element b * stride_x, element (i, j) of X at X[i + j * ldx]; computed in T. C is
// not read when beta is 0 (BLAS: it may hold anything then). One thread an element of C, no
// tiling: correct on any launch shape, not cuBLAS's speed. `fill` 0 or 1 (the gemmt kernels):
// only C's lower or upper triangle, the diagonal included, is computed, read or written.
// `form` (the blas_<t>gemm_tri kernels): A (bit 3 clear) or B (set) is read from one triangle, as
// `stored` says.
template <typename T, typename M>
__device__ void gemm(unsigned ta, unsigned tb, unsigned m, unsigned n, unsigned k, T alpha, M A, unsigned lda,
                     u64 sa, M B, unsigned ldb, u64 sb, T beta, M C, unsigned ldc, u64 sc, unsigned batch,
                     unsigned fill = 2, unsigned form = GEMM_PLAIN) {
    const unsigned form_a = form != GEMM_PLAIN && !(form & 8) ? form : GEMM_PLAIN;
    const unsigned form_b = form != GEMM_PLAIN && (form & 8) ? form & 7 : GEMM_PLAIN;
    u64 total = (u64)m * n * batch;
    for (u64 e = thread_index(); e < total; e += thread_count()) {
        u64 i = e % m, j = (e / m) % n, b = e / ((u64)m * n);
        if ((fill == 0 && i < j) || (fill == 1 && i > j)) continue;
        T acc = 0;
        for (unsigned p = 0; p < k; ++p) {
            T x = stored<T>(A, b * sa, lda, ta ? p : i, ta ? i : p, form_a);
            T y = stored<T>(B, b * sb, ldb, tb ? j : p, tb ? p : j, form_b);
            acc += (ta == 2 ? conjugate(x) : x) * (tb == 2 ? conjugate(y) : y);
        }
        u64 c = b * sc + i + j * ldc;
        C.set(c, beta == (T)0 ? alpha * acc : alpha * acc + beta * (T)C.get(c));
    }
}

extern "C" __global__ void blas_sgemm(unsigned ta, unsigned tb, unsigned m, unsigned n, unsigned k, float alpha,
                                      float* A, unsigned lda, u64 sa, float* B, unsigned ldb, u64 sb, float beta,
                                      float* C, unsigned ldc, u64 sc, unsigned batch) {
    gemm<float>(ta, tb, m, n, k, alpha, Typed<float>{A}, lda, sa, Typed<float>{B}, ldb, sb, beta, Typed<float>{C}, ldc,
                sc, batch);
}

extern "C" __global__ void blas_dgemm(unsigned ta, unsigned tb, unsigned m, unsigned n, unsigned k, double alpha,
                                      double* A, unsigned lda, u64 sa, double* B, unsigned ldb, u64 sb, double beta,
                                      double* C, unsigned ldc, u64 sc, unsigned batch) {
    gemm<double>(ta, tb, m, n, k, alpha, Typed<double>{A}, lda, sa, Typed<double>{B}, ldb, sb, beta,
                 Typed<double>{C}, ldc, sc, batch);
}

// blas_sgemm's product on matrices of the types `types` codes (4 bits a matrix: A, B, C; see
// Coded), computed in f32: cublasGemmEx on half-precision matrices.
extern "C" __global__ void blas_gemm_ex(unsigned ta, unsigned tb, unsigned m, unsigned n, unsigned k, float alpha,
                                        void* A, unsigned lda, u64 sa, void* B, unsigned ldb, u64 sb, float beta,
                                        void* C, unsigned ldc, u64 sc, unsigned batch, unsigned types) {
    gemm<float>(ta, tb, m, n, k, alpha, Coded{A, types & 15}, lda, sa, Coded{B, (types >> 4) & 15}, ldb, sb, beta,
                Coded{C, (types >> 8) & 15}, ldc, sc, batch);
}

// blas_sgemm and blas_dgemm on complex matrices (cuComplex, cuDoubleComplex), each scalar's
// imaginary part a parameter after `batch`: cublasCgemm, cublasZgemm.
extern "C" __global__ void blas_cgemm(unsigned ta, unsigned tb, unsigned m, unsigned n, unsigned k, float alpha,
                                      Complex<float>* A, unsigned lda, u64 sa, Complex<float>* B, unsigned ldb, u64 sb,
                                      float beta, Complex<float>* C, unsigned ldc, u64 sc, unsigned batch,
                                      float alpha_im, float beta_im) {
    typedef Complex<float> T;
    gemm<T>(ta, tb, m, n, k, T(alpha, alpha_im), Typed<T>{A}, lda, sa, Typed<T>{B}, ldb, sb, T(beta, beta_im),
            Typed<T>{C}, ldc, sc, batch);
}

extern "C" __global__ void blas_zgemm(unsigned ta, unsigned tb, unsigned m, unsigned n, unsigned k, double alpha,
                                      Complex<double>* A, unsigned lda, u64 sa, Complex<double>* B, unsigned ldb,
                                      u64 sb, double beta, Complex<double>* C, unsigned ldc, u64 sc, unsigned batch,
                                      double alpha_im, double beta_im) {
    typedef Complex<double> T;
    gemm<T>(ta, tb, m, n, k, T(alpha, alpha_im), Typed<T>{A}, lda, sa, Typed<T>{B}, ldb, sb, T(beta, beta_im),
            Typed<T>{C}, ldc, sc, batch);
}

// blas_<t>gemm on one triangle of a square C (`fill` 0 lower, 1 upper, the diagonal included):
// BLAS's gemmt, what the CUDA shim's syrk, syrkx and syr2k launch.
extern "C" __global__ void blas_sgemmt(unsigned ta, unsigned tb, unsigned m, unsigned n, unsigned k, float alpha,
                                       float* A, unsigned lda, u64 sa, float* B, unsigned ldb, u64 sb, float beta,
                                       float* C, unsigned ldc, u64 sc, unsigned batch, unsigned fill) {
    gemm<float>(ta, tb, m, n, k, alpha, Typed<float>{A}, lda, sa, Typed<float>{B}, ldb, sb, beta, Typed<float>{C}, ldc,
                sc, batch, fill);
}

extern "C" __global__ void blas_dgemmt(unsigned ta, unsigned tb, unsigned m, unsigned n, unsigned k, double alpha,
                                       double* A, unsigned lda, u64 sa, double* B, unsigned ldb, u64 sb, double beta,
                                       double* C, unsigned ldc, u64 sc, unsigned batch, unsigned fill) {
    gemm<double>(ta, tb, m, n, k, alpha, Typed<double>{A}, lda, sa, Typed<double>{B}, ldb, sb, beta,
                 Typed<double>{C}, ldc, sc, batch, fill);
}

extern "C" __global__ void blas_cgemmt(unsigned ta, unsigned tb, unsigned m, unsigned n, unsigned k, float alpha,
                                       Complex<float>* A, unsigned lda, u64 sa, Complex<float>* B, unsigned ldb,
                                       u64 sb, float beta, Complex<float>* C, unsigned ldc, u64 sc, unsigned batch,
                                       float alpha_im, float beta_im, unsigned fill) {
    typedef Complex<float> T;
    gemm<T>(ta, tb, m, n, k, T(alpha, alpha_im), Typed<T>{A}, lda, sa, Typed<T>{B}, ldb, sb, T(beta, beta_im),
            Typed<T>{C}, ldc, sc, batch, fill);
}

extern "C" __global__ void blas_zgemmt(unsigned ta, unsigned tb, unsigned m, unsigned n, unsigned k, double alpha,
                                       Complex<double>* A, unsigned lda, u64 sa, Complex<double>* B, unsigned ldb,
                                       u64 sb, double beta, Complex<double>* C, unsigned ldc, u64 sc, unsigned batch,
                                       double alpha_im, double beta_im, unsigned fill) {
    typedef Complex<double> T;
    gemm<T>(ta, tb, m, n, k, T(alpha, alpha_im), Typed<T>{A}, lda, sa, Typed<T>{B}, ldb, sb, T(beta, beta_im),
            Typed<T>{C}, ldc, sc, batch, fill);
}

// blas_<t>gemm on all of C, A or B read from one triangle as `form` says (see `stored`): BLAS's
// symm, hemm and trmm, what the CUDA shim's launch (backend device/structured.rs).
extern "C" __global__ void blas_sgemm_tri(unsigned ta, unsigned tb, unsigned m, unsigned n, unsigned k, float alpha,
                                          float* A, unsigned lda, u64 sa, float* B, unsigned ldb, u64 sb, float beta,
                                          float* C, unsigned ldc, u64 sc, unsigned batch, unsigned form) {
    gemm<float>(ta, tb, m, n, k, alpha, Typed<float>{A}, lda, sa, Typed<float>{B}, ldb, sb, beta, Typed<float>{C}, ldc,
                sc, batch, 2, form);
}

extern "C" __global__ void blas_dgemm_tri(unsigned ta, unsigned tb, unsigned m, unsigned n, unsigned k, double alpha,
                                          double* A, unsigned lda, u64 sa, double* B, unsigned ldb, u64 sb, double beta,
                                          double* C, unsigned ldc, u64 sc, unsigned batch, unsigned form) {
    gemm<double>(ta, tb, m, n, k, alpha, Typed<double>{A}, lda, sa, Typed<double>{B}, ldb, sb, beta,
                 Typed<double>{C}, ldc, sc, batch, 2, form);
}

extern "C" __global__ void blas_cgemm_tri(unsigned ta, unsigned tb, unsigned m, unsigned n, unsigned k, float alpha,
                                          Complex<float>* A, unsigned lda, u64 sa, Complex<float>* B, unsigned ldb,
                                          u64 sb, float beta, Complex<float>* C, unsigned ldc, u64 sc, unsigned batch,
                                          float alpha_im, float beta_im, unsigned form) {
    typedef Complex<float> T;
    gemm<T>(ta, tb, m, n, k, T(alpha, alpha_im), Typed<T>{A}, lda, sa, Typed<T>{B}, ldb, sb, T(beta, beta_im),
            Typed<T>{C}, ldc, sc, batch, 2, form);
}

extern "C" __global__ void blas_zgemm_tri(unsigned ta, unsigned tb, unsigned m, unsigned n, unsigned k, double alpha,
                                          Complex<double>* A, unsigned lda, u64 sa, Complex<double>* B, unsigned ldb,
                                          u64 sb, double beta, Complex<double>* C, unsigned ldc, u64 sc,
                                          unsigned batch, double alpha_im, double beta_im, unsigned form) {
    typedef Complex<double> T;
    gemm<T>(ta, tb, m, n, k, T(alpha, alpha_im), Typed<T>{A}, lda, sa, Typed<T>{B}, ldb, sb, T(beta, beta_im),
            Typed<T>{C}, ldc, sc, batch, 2, form);
}

// BLAS's packed triangles (ac-backend/src/device/packed.rs): dir 0 unpacks AP into triangle
// uplo (0 lower, 1 upper) of the n x n A, 1 packs it; AP holds the triangle column by column.
// One thread an element of A, those outside the triangle idle; elements moved, never computed.
template <typename T>
__device__ void tpttr(unsigned dir, unsigned uplo, unsigned n, T* AP, T* A, unsigned lda) {
    u64 total = (u64)n * n;
    for (u64 e = thread_index(); e < total; e += thread_count()) {
        u64 i = e % n, j = e / n;
        if (uplo == 0 ? i < j : i > j) continue;
        u64 p = uplo == 0 ? i - j + j * (2 * (u64)n - j + 1) / 2 : i + j * (j + 1) / 2;
        if (dir == 0) A[i + j * lda] = AP[p];
        else AP[p] = A[i + j * lda];
    }
}

#define PACKED_KERNEL(t, T)                                                                                          \
    extern "C" __global__ void blas_##t##tpttr(unsigned dir, unsigned uplo, unsigned n, T* AP, T* A, unsigned lda) { \
        tpttr<T>(dir, uplo, n, AP, A, lda);                                                                          \
    }
PACKED_KERNEL(s, float)
PACKED_KERNEL(d, double)
PACKED_KERNEL(c, Complex<float>)
PACKED_KERNEL(z, Complex<double>)

// The arithmetic of a triangular solve, in ac_proto's order (backend/builtin/trsm.rs): acc - m x
// rounded after the product, and a complex quotient p conj(q) / |q|^2 part by part.
template <typename T>
__device__ __forceinline__ T less_product(T acc, T m, T x) {
    T p = m * x;
    return acc - p;
}
__device__ __forceinline__ float quotient(float p, float q) { return p / q; }
__device__ __forceinline__ double quotient(double p, double q) { return p / q; }
template <typename R>
__device__ __forceinline__ Complex<R> quotient(Complex<R> p, Complex<R> q) {
    Complex<R> n = p * conjugate(q);
    R d = q.re * q.re + q.im * q.im;
    return Complex<R>(n.re / d, n.im / d);
}

// BLAS's trsm, column-major as cuBLAS is (the CUDA shim's `cublas<S|D|C|Z>trsm`): for each
// b < batch, op(A_b) X = alpha B_b (side 0) or X op(A_b) = alpha B_b (side 1), A_b lower (uplo
// 0) or upper triangular, its diagonal read (diag 0) or taken as ones, X written over B_b. One
// thread a system (a column of B on the left, a row on the right), solved by substitution in
// the order ac_proto's Trsm gives: M = op(A) on the left, op(A)^T on the right, lower (forward)
// or upper (backward).
template <typename T>
__device__ void trsm(unsigned side, unsigned uplo, unsigned trans, unsigned diag, unsigned m, unsigned n, T alpha,
                     const T* A, unsigned lda, u64 sa, T* B, unsigned ldb, u64 sb, unsigned batch) {
    const bool left = side == 0;
    const u64 k = left ? m : n, per_batch = left ? n : m;
    const bool forward = (uplo == 0) != (left ? trans != 0 : trans == 0);
    const bool same = left ? trans == 0 : trans != 0;
    const u64 systems = per_batch * batch;
    for (u64 s = thread_index(); s < systems; s += thread_count()) {
        const u64 b = s / per_batch, v = s % per_batch;
        const T* a = A + b * sa;
        T* x = B + b * sb + (left ? v * (u64)ldb : v);
        const u64 step = left ? 1 : ldb;
        for (u64 t = 0; t < k; ++t) {
            const u64 r = forward ? t : k - 1 - t;
            T acc = alpha * x[r * step];
            for (u64 u = 0; u < t; ++u) {
                const u64 c = forward ? u : k - 1 - u;
                T mrc = same ? a[r + c * lda] : a[c + r * lda];
                acc = less_product(acc, trans == 2 ? conjugate(mrc) : mrc, x[c * step]);
            }
            if (diag == 0) {
                T mrr = a[r + r * lda];
                acc = quotient(acc, trans == 2 ? conjugate(mrr) : mrr);
            }
            x[r * step] = acc;
        }
    }
}

extern "C" __global__ void blas_strsm(unsigned side, unsigned uplo, unsigned trans, unsigned diag, unsigned m,
                                      unsigned n, float alpha, const float* A, unsigned lda, u64 sa, float* B,
                                      unsigned ldb, u64 sb, unsigned batch) {
    trsm<float>(side, uplo, trans, diag, m, n, alpha, A, lda, sa, B, ldb, sb, batch);
}

extern "C" __global__ void blas_dtrsm(unsigned side, unsigned uplo, unsigned trans, unsigned diag, unsigned m,
                                      unsigned n, double alpha, const double* A, unsigned lda, u64 sa, double* B,
                                      unsigned ldb, u64 sb, unsigned batch) {
    trsm<double>(side, uplo, trans, diag, m, n, alpha, A, lda, sa, B, ldb, sb, batch);
}

extern "C" __global__ void blas_ctrsm(unsigned side, unsigned uplo, unsigned trans, unsigned diag, unsigned m,
                                      unsigned n, float alpha, const Complex<float>* A, unsigned lda, u64 sa,
                                      Complex<float>* B, unsigned ldb, u64 sb, unsigned batch, float alpha_im) {
    trsm<Complex<float> >(side, uplo, trans, diag, m, n, Complex<float>(alpha, alpha_im), A, lda, sa, B, ldb, sb,
                          batch);
}

extern "C" __global__ void blas_ztrsm(unsigned side, unsigned uplo, unsigned trans, unsigned diag, unsigned m,
                                      unsigned n, double alpha, const Complex<double>* A, unsigned lda, u64 sa,
                                      Complex<double>* B, unsigned ldb, u64 sb, unsigned batch, double alpha_im) {
    trsm<Complex<double> >(side, uplo, trans, diag, m, n, Complex<double>(alpha, alpha_im), A, lda, sa, B, ldb,
                           sb, batch);
}

// A pivot's magnitude in the element's own precision: |x|, or |re| + |im| as BLAS's icamax.
__device__ __forceinline__ float magnitude(float v) { return fabsf(v); }
__device__ __forceinline__ double magnitude(double v) { return fabs(v); }
template <typename R>
__device__ __forceinline__ R magnitude(Complex<R> v) { return magnitude(v.re) + magnitude(v.im); }

// LU factorization with partial pivoting (cuBLAS's getrfBatched), LAPACK's getf2 in ac_proto's
// order (backend/builtin/lu.rs), one thread a matrix: for each column j, the first row p >= j of
// largest magnitude (j without pivoting; pivots[j] = p + 1); if A(p, j) is not zero, rows j and
// p swapped and the column below divided by it, else info = j + 1 (the first such j); then the
// trailing matrix less the column times row j. A_b ends holding U and L's multipliers.
template <typename T>
__device__ void getrf(unsigned n, T* A, unsigned lda, u64 sa, unsigned pivoting, int* pivots, u64 sp, int* info,
                      unsigned batch) {
    for (u64 b = thread_index(); b < batch; b += thread_count()) {
        T* a = A + b * sa;
        int status = 0;
        for (u64 j = 0; j < n; ++j) {
            u64 p = j;
            if (pivoting) {
                for (u64 i = j + 1; i < n; ++i)
                    if (magnitude(a[i + j * lda]) > magnitude(a[p + j * lda])) p = i;
                pivots[b * sp + j] = (int)(p + 1);
            }
            const T pivot = a[p + j * lda];
            if (!(pivot == T(0))) {
                if (p != j)
                    for (u64 k = 0; k < n; ++k) {
                        T t = a[p + k * lda];
                        a[p + k * lda] = a[j + k * lda];
                        a[j + k * lda] = t;
                    }
                for (u64 i = j + 1; i < n; ++i) a[i + j * lda] = quotient(a[i + j * lda], pivot);
            } else if (status == 0) {
                status = (int)(j + 1);
            }
            for (u64 k = j + 1; k < n; ++k)
                for (u64 i = j + 1; i < n; ++i)
                    a[i + k * lda] = less_product(a[i + k * lda], a[i + j * lda], a[j + k * lda]);
        }
        info[b] = status;
    }
}

// x solved in place for M x = x, M(r, c) = A(r, c) (A(c, r) if `transposed`; conjugated if
// `conj`) lower and solved from the first row if `forward`, trsm's order; M's diagonal read
// unless `unit`.
template <typename T>
__device__ void substitute(T* x, u64 n, const T* a, unsigned lda, bool transposed, bool conj, bool forward,
                           bool unit) {
    for (u64 t = 0; t < n; ++t) {
        const u64 r = forward ? t : n - 1 - t;
        T acc = x[r];
        for (u64 u = 0; u < t; ++u) {
            const u64 c = forward ? u : n - 1 - u;
            const T m = transposed ? a[c + r * lda] : a[r + c * lda];
            acc = less_product(acc, conj ? conjugate(m) : m, x[c]);
        }
        if (!unit) acc = quotient(acc, conj ? conjugate(a[r + r * lda]) : a[r + r * lda]);
        x[r] = acc;
    }
}

// x[j] <-> x[pivots[j] - 1]; a pivot outside 1..n interchanges nothing.
template <typename T>
__device__ __forceinline__ void interchange(T* x, u64 n, u64 j, const int* pivots) {
    const long long p = (long long)pivots[j] - 1;
    if (p < 0 || (u64)p >= n) return;
    T t = x[j];
    x[j] = x[p];
    x[p] = t;
}

// Solves op(A_b) X = B_b with getrf's factors (cuBLAS's getrsBatched), one thread a column of B:
// op N: the interchanges ascending, L (unit) forward, U backward; T or C: U^T forward, L^T
// (unit) backward, the interchanges descending. flags bit 0: apply the pivots; bit 1: invert
// (getriBatched: B_b starts as the identity and info[b] is U's first zero diagonal + 1, or 0).
template <typename T>
__device__ void getrs(unsigned trans, unsigned n, unsigned nrhs, const T* A, unsigned lda, u64 sa, unsigned flags,
                      const int* pivots, u64 sp, T* B, unsigned ldb, u64 sb, int* info, unsigned batch) {
    const bool pivoting = (flags & 1) != 0, inverse = (flags & 2) != 0, conj = trans == 2;
    const u64 systems = (u64)nrhs * batch;
    for (u64 s = thread_index(); s < systems; s += thread_count()) {
        const u64 b = s / nrhs, v = s % nrhs;
        const T* a = A + b * sa;
        T* x = B + b * sb + v * ldb;
        if (inverse) {
            for (u64 i = 0; i < n; ++i) x[i] = i == v ? T(1) : T(0);
            if (v == 0) {
                int status = 0;
                for (u64 j = 0; j < n && status == 0; ++j)
                    if (a[j + j * lda] == T(0)) status = (int)(j + 1);
                info[b] = status;
            }
        }
        if (trans == 0) {
            if (pivoting)
                for (u64 j = 0; j < n; ++j) interchange(x, n, j, pivots + b * sp);
            substitute(x, n, a, lda, false, conj, true, true);
            substitute(x, n, a, lda, false, conj, false, false);
        } else {
            substitute(x, n, a, lda, true, conj, true, false);
            substitute(x, n, a, lda, true, conj, false, true);
            if (pivoting)
                for (u64 j = n; j-- > 0;) interchange(x, n, j, pivots + b * sp);
        }
    }
}

#define LU_KERNELS(t, T)                                                                                             \
    extern "C" __global__ void blas_##t##getrf(unsigned n, T* A, unsigned lda, u64 sa, unsigned pivoting,          \
                                               int* pivots, u64 sp, int* info, unsigned batch) {                   \
        getrf<T>(n, A, lda, sa, pivoting, pivots, sp, info, batch);                                                 \
    }                                                                                                               \
    extern "C" __global__ void blas_##t##getrs(unsigned trans, unsigned n, unsigned nrhs, const T* A, unsigned lda, \
                                               u64 sa, unsigned flags, const int* pivots, u64 sp, T* B,             \
                                               unsigned ldb, u64 sb, int* info, unsigned batch) {                  \
        getrs<T>(trans, n, nrhs, A, lda, sa, flags, pivots, sp, B, ldb, sb, info, batch);                          \
    }

LU_KERNELS(s, float)
LU_KERNELS(d, double)
LU_KERNELS(c, Complex<float>)
LU_KERNELS(z, Complex<double>)

// An element's parts and the element of two parts (a real element's imaginary part is zero).
__device__ __forceinline__ float real_part(float v) { return v; }
__device__ __forceinline__ double real_part(double v) { return v; }
template <typename R>
__device__ __forceinline__ R real_part(Complex<R> v) { return v.re; }
__device__ __forceinline__ float imag_part(float) { return 0; }
__device__ __forceinline__ double imag_part(double) { return 0; }
template <typename R>
__device__ __forceinline__ R imag_part(Complex<R> v) { return v.im; }
template <typename T, typename R>
struct Parts {
    __device__ static T of(R re, R) { return re; }
};
template <typename R>
struct Parts<Complex<R>, R> {
    __device__ static Complex<R> of(R re, R im) { return Complex<R>(re, im); }
};

// Column j's Householder reflector (LAPACK's larfg) in ac_proto's order (backend/builtin/qr.rs)
// from rows j..m of the column at `a`: tau 0 if the rest is zero and a[j] real; else beta =
// -+|column| (scaled by its largest part, summed by ascending row), tau = ((beta - re) / beta,
// -im / beta), the rest times 1 / (a[j] - beta), a[j] = beta. Returns tau.
template <typename T, typename R>
__device__ T reflector(T* a, u64 j, u64 m) {
    const T alpha = a[j];
    bool rest_zero = true;
    for (u64 i = j + 1; i < m && rest_zero; ++i) rest_zero = a[i] == T(0);
    if (rest_zero && imag_part(alpha) == R(0)) return T(0);
    R scale = 0;
    for (u64 i = j; i < m; ++i) {
        const R re = magnitude(real_part(a[i])), im = magnitude(imag_part(a[i]));
        if (re > scale) scale = re;
        if (im > scale) scale = im;
    }
    R sum = 0;
    for (u64 i = j; i < m; ++i) {
        const R re = real_part(a[i]) / scale, im = imag_part(a[i]) / scale;
        const R re2 = re * re, im2 = im * im;
        sum = sum + re2;
        sum = sum + im2;
    }
    // The root rounded to R first: a host compiler's sqrt may be double's (the stand-in).
    const R root = (R)sqrt(sum), norm = scale * root;
    const R beta = real_part(alpha) >= R(0) ? -norm : norm;
    const T tau = Parts<T, R>::of((beta - real_part(alpha)) / beta, -imag_part(alpha) / beta);
    const T scaling = quotient(T(1), alpha - Parts<T, R>::of(beta, 0));
    for (u64 i = j + 1; i < m; ++i) a[i] = a[i] * scaling;
    a[j] = Parts<T, R>::of(beta, 0);
    return tau;
}

// y = H^H y for H = I - tau v v^H, v = (1, x[j+1..m]) (LAPACK's larf with conj(tau)), on rows
// j..m of the column at `y`: w = y_j + sum conj(v_i) y_i by ascending i, t = conj(tau) w, y_j - t,
// y_i - v_i t. Nothing if tau is zero.
template <typename T>
__device__ void reflect(T tau, const T* x, T* y, u64 j, u64 m) {
    if (tau == T(0)) return;
    T w = y[j];
    for (u64 i = j + 1; i < m; ++i) {
        const T p = conjugate(x[i]) * y[i];
        w = w + p;
    }
    const T t = conjugate(tau) * w;
    y[j] = y[j] - t;
    for (u64 i = j + 1; i < m; ++i) y[i] = less_product(y[i], x[i], t);
}

// A_b = Q R by Householder reflections (LAPACK's geqr2; cuBLAS's geqrfBatched), one thread a
// matrix; each reflector applied to A's later columns and then to the nrhs columns of C_b (a
// least-squares solve's Q^H C_b). tau_b[j] written if `tau` is not null.
template <typename T, typename R>
__device__ void householder(u64 m, u64 n, T* a, unsigned lda, T* tau, u64 nrhs, T* c, unsigned ldc) {
    const u64 k = m < n ? m : n;
    for (u64 j = 0; j < k; ++j) {
        T* column = a + j * lda;
        const T t = reflector<T, R>(column, j, m);
        for (u64 q = j + 1; q < n; ++q) reflect(t, column, a + q * lda, j, m);
        for (u64 v = 0; v < nrhs; ++v) reflect(t, column, c + v * ldc, j, m);
        if (tau != nullptr) tau[j] = t;
    }
}

template <typename T, typename R>
__device__ void geqrf(unsigned m, unsigned n, T* A, unsigned lda, u64 sa, T* tau, u64 st, unsigned batch) {
    for (u64 b = thread_index(); b < batch; b += thread_count())
        householder<T, R>(m, n, A + b * sa, lda, tau + b * st, 0, nullptr, 0);
}

// min |A_b X - C_b| for m >= n (LAPACK's gels, op N; cuBLAS's gelsBatched), one thread a
// problem: A_b factored with Q^H applied to C_b, then info = R's first zero diagonal + 1 (0 if
// none; written if flags bit 0) and, only if 0, R X = C_b's first n rows by back substitution.
template <typename T, typename R>
__device__ void gels(unsigned m, unsigned n, unsigned nrhs, T* A, unsigned lda, u64 sa, T* C, unsigned ldc, u64 sc,
                     unsigned flags, int* info, unsigned batch) {
    for (u64 b = thread_index(); b < batch; b += thread_count()) {
        T* a = A + b * sa;
        T* c = C + b * sc;
        householder<T, R>(m, n, a, lda, nullptr, nrhs, c, ldc);
        int status = 0;
        for (u64 j = 0; j < n && status == 0; ++j)
            if (a[j + j * lda] == T(0)) status = (int)(j + 1);
        if (flags & 1) info[b] = status;
        if (status != 0) continue;
        for (u64 v = 0; v < nrhs; ++v) substitute(c + v * ldc, n, a, lda, false, false, false, false);
    }
}

#define QR_KERNELS(t, T, R)                                                                                          \
    extern "C" __global__ void blas_##t##geqrf(unsigned m, unsigned n, T* A, unsigned lda, u64 sa, T* tau, u64 st,  \
                                               unsigned batch) {                                                    \
        geqrf<T, R>(m, n, A, lda, sa, tau, st, batch);                                                              \
    }                                                                                                               \
    extern "C" __global__ void blas_##t##gels(unsigned m, unsigned n, unsigned nrhs, T* A, unsigned lda, u64 sa,    \
                                              T* C, unsigned ldc, u64 sc, unsigned flags, int* info,              \
                                              unsigned batch) {                                                     \
        gels<T, R>(m, n, nrhs, A, lda, sa, C, ldc, sc, flags, info, batch);                                         \
    }

QR_KERNELS(s, float, float)
QR_KERNELS(d, double, double)
QR_KERNELS(c, Complex<float>, float)
QR_KERNELS(z, Complex<double>, double)

// BLAS's asum (op 0: the sum of |re| + |im| into a real R), iamax (op 1) and iamin (op 2: the
// 1-based index of the first element of largest or smallest |re| + |im|, an int; 0 for no
// elements) over x[i * incx], i < n: one thread, in order (cuBLAS's `<t>asum`, `i<t>amax`,
// `i<t>amin`; the CPU device sums in the same order).
template <typename T, typename R>
__device__ void abs_reduce(unsigned op, unsigned n, const T* x, u64 incx, void* out) {
    if (thread_index() != 0) return;
    if (op == 0) {
        R sum = 0;
        for (u64 i = 0; i < n; ++i) sum += magnitude(x[i * incx]);
        *(R*)out = sum;
        return;
    }
    int best = n > 0 ? 1 : 0;
    R extreme = n > 0 ? magnitude(x[0]) : R(0);
    for (u64 i = 1; i < n; ++i) {
        const R v = magnitude(x[i * incx]);
        if (op == 1 ? v > extreme : v < extreme) {
            extreme = v;
            best = (int)(i + 1);
        }
    }
    *(int*)out = best;
}

extern "C" __global__ void blas_sabs_reduce(unsigned op, unsigned n, const float* x, u64 incx, void* out) {
    abs_reduce<float, float>(op, n, x, incx, out);
}
extern "C" __global__ void blas_dabs_reduce(unsigned op, unsigned n, const double* x, u64 incx, void* out) {
    abs_reduce<double, double>(op, n, x, incx, out);
}
extern "C" __global__ void blas_cabs_reduce(unsigned op, unsigned n, const Complex<float>* x, u64 incx, void* out) {
    abs_reduce<Complex<float>, float>(op, n, x, incx, out);
}
extern "C" __global__ void blas_zabs_reduce(unsigned op, unsigned n, const Complex<double>* x, u64 incx, void* out) {
    abs_reduce<Complex<double>, double>(op, n, x, incx, out);
}

// GELU's tanh approximation in R: its constants as each type writes them (as the backend's Rust,
// ac_proto's epilogue::Real, computes them), its inner tanh, the function and its slope.
template <typename R>
struct Gelu;
template <>
struct Gelu<float> {
    static constexpr float scale = 0.7978846f, cubic = 0.044715f;
    static __device__ float inner(float x) { return tanhf(scale * (x + cubic * x * x * x)); }
};
template <>
struct Gelu<double> {
    static constexpr double scale = 0.7978845608028654, cubic = 0.044715;
    static __device__ double inner(double x) { return tanh(scale * (x + cubic * x * x * x)); }
};
template <typename R>
__device__ R gelu(R x) {
    return (R)0.5 * x * ((R)1 + Gelu<R>::inner(x));
}
// d/dx 0.5 x (1 + t), t = tanh(u), u = c (x + a x^3): 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2).
// Where tanh has saturated (1 - t^2 is 0) the second term is 0, not 0 times an x^2 that
// overflowed (a bfloat16 input past 1.8e19 would make it NaN).
template <typename R>
__device__ R gelu_slope(R x) {
    const R t = Gelu<R>::inner(x), three_a = Gelu<R>::cubic + Gelu<R>::cubic + Gelu<R>::cubic;
    const R sech2 = (R)1 - t * t;
    if (sech2 == (R)0) return (R)0.5 * ((R)1 + t);
    return (R)0.5 * ((R)1 + t) + (R)0.5 * x * sech2 * (Gelu<R>::scale * ((R)1 + three_a * x * x));
}

// cuBLASLt's epilogues in place on `batch` column-major m x n matrices D (leading dimension ld,
// `stride` apart), computed in R, elements read and written through M (Coded's types, or
// Typed<double>): op 0 ReLU, max(x, 0); 1 GELU; 2 ReLU keeping its mask in `mask` (a bit an element,
// set where x > 0: element (i, j) of batch b the bit b aux_stride + j aux_ld + i from the least
// significant bit of its first byte); 3 GELU keeping its input in `aux` (elements of D's type);
// 4 D zeroed where the mask's bit is clear; 5 D times GELU's slope at aux's input. A mask's
// columns start on a byte (aux_ld and aux_stride multiples of 8, as the backend checks), so a
// thread owns each byte: eight rows of one column.
template <typename R, typename M>
__device__ void epilogue_in(unsigned op, unsigned m, unsigned n, M d, unsigned ld, u64 stride, unsigned batch, M aux,
                            unsigned char* mask, u64 aux_ld, u64 aux_stride) {
    if (op == 2 || op == 4) {
        const u64 groups = ((u64)m + 7) / 8, total = groups * n * batch;
        for (u64 e = thread_index(); e < total; e += thread_count()) {
            const u64 g = e % groups, j = (e / groups) % n, b = e / (groups * n);
            const u64 byte = (b * aux_stride + j * aux_ld) / 8 + g;
            unsigned bits = mask[byte];
            for (unsigned r = 0; r < 8 && g * 8 + r < m; r++) {
                const u64 at = b * stride + j * ld + g * 8 + r;
                const R x = d.get(at);
                if (op == 2) {
                    d.set(at, x > (R)0 ? x : (R)0);
                    bits = (bits & ~(1u << r)) | (unsigned)(x > (R)0) << r;
                } else {
                    d.set(at, (bits >> r & 1u) ? x : (R)0);
                }
            }
            if (op == 2) mask[byte] = (unsigned char)bits;
        }
        return;
    }
    const u64 total = (u64)m * n * batch;
    for (u64 e = thread_index(); e < total; e += thread_count()) {
        const u64 i = e % m, j = (e / m) % n, b = e / ((u64)m * n);
        const u64 at = b * stride + j * ld + i, kept = b * aux_stride + j * aux_ld + i;
        const R x = d.get(at);
        if (op == 0) d.set(at, x > (R)0 ? x : (R)0);
        else if (op == 5) d.set(at, x * gelu_slope<R>(aux.get(kept)));
        else {
            if (op == 3) aux.set(kept, x);
            d.set(at, gelu<R>(x));
        }
    }
}

// An activation in place, computed in f32 on D of the type `type` codes (Coded's): op 0 ReLU, 1
// GELU's tanh approximation, as cuBLASLt's epilogues.
extern "C" __global__ void blas_activation(unsigned op, unsigned m, unsigned n, void* D, unsigned ld, u64 stride,
                                           unsigned batch, unsigned type) {
    const Coded d{D, type};
    epilogue_in<float>(op, m, n, d, ld, stride, batch, d, nullptr, 0, 0);
}

// cuBLASLt's epilogues (epilogue_in's ops) on D of the type `type` codes: Coded's, computed in
// f32, or 3, f64 computed in f64. The CUDA shim's cuBLASLt launches it after a matmul.
extern "C" __global__ void blas_epilogue(unsigned op, unsigned m, unsigned n, void* D, unsigned ld, u64 stride,
                                         unsigned batch, unsigned type, void* aux, u64 aux_ld, u64 aux_stride) {
    if (type == 3)
        epilogue_in<double>(op, m, n, Typed<double>{(double*)D}, ld, stride, batch, Typed<double>{(double*)aux},
                            (unsigned char*)aux, aux_ld, aux_stride);
    else
        epilogue_in<float>(op, m, n, Coded{D, type}, ld, stride, batch, Coded{aux, type}, (unsigned char*)aux, aux_ld,
                           aux_stride);
}

// Element i of a BLAS vector of n elements `inc` apart: backwards from the last for a negative inc.
__device__ __forceinline__ u64 blas_index(u64 n, long long inc, u64 i) {
    // 0 - inc in unsigned arithmetic: |inc| even for the most negative one.
    return inc < 0 ? (n - 1 - i) * (0ull - (u64)inc) : i * (u64)inc;
}

// One element of `width` bytes from x's element `from` to y's element `to`, as words of its size
// (an element is aligned to its width; 16 bytes as two 8-byte words).
template <typename W>
__device__ __forceinline__ void copy_words(const void* x, u64 from, void* y, u64 to, unsigned words) {
    for (unsigned w = 0; w < words; w++) ((W*)y)[to * words + w] = ((const W*)x)[from * words + w];
}

// BLAS's copy on elements of `width` bytes (1, 2, 4, 8 or 16), y_i = x_i for i < n, each vector
// read backwards where its increment is negative: what the CUDA shim's cuBLAS launches to gather
// a vector passed backwards into a forward copy, and to scatter it back.
extern "C" __global__ void blas_copy(unsigned n, unsigned width, const void* x, long long incx, void* y,
                                     long long incy) {
    for (u64 i = thread_index(); i < n; i += thread_count()) {
        const u64 from = blas_index(n, incx, i), to = blas_index(n, incy, i);
        switch (width) {
            case 1: copy_words<unsigned char>(x, from, y, to, 1); break;
            case 2: copy_words<unsigned short>(x, from, y, to, 1); break;
            case 4: copy_words<unsigned>(x, from, y, to, 1); break;
            case 8: copy_words<u64>(x, from, y, to, 1); break;
            default: copy_words<u64>(x, from, y, to, 2); break;
        }
    }
}

// A discrete Fourier transform of length n along lines0 * lines1 * lines2 strided lines (the
// CUDA shim's cuFFT launches these, one launch per dimension): kind 0 complex to complex, 1
// real to complex (n/2 + 1 out), 2 complex to real (n/2 + 1 in, the rest their conjugates), 3 a
// copy; unnormalized, exp(-2 pi i j k / n) forward, + inverse. Strides count each buffer's
// elements (complex: two T, real part first). One thread an output element, one direct sum
// accumulated in double, each twiddle's angle reduced to (j k mod n) / n first: correct on any
// launch shape, not cuFFT's speed. `In` and `Out` read and write the buffers' scalars: Typed
// (dft_f32, dft_f64) or Coded (dft_ex: each f32, f16 or bf16).
template <typename In, typename Out>
__device__ void dft(unsigned kind, unsigned inverse, unsigned n, unsigned lines0, unsigned lines1, unsigned lines2,
                    In in, u64 in_step, u64 in0, u64 in1, u64 in2, Out out, u64 out_step, u64 out0, u64 out1,
                    u64 out2) {
    const u64 half = n / 2 + 1;
    const u64 n_in = kind == 2 ? half : n, n_out = kind == 1 ? half : n;
    const u64 total = (u64)lines0 * lines1 * lines2 * n_out;
    const double sign = inverse ? 1.0 : -1.0;
    for (u64 e = thread_index(); e < total; e += thread_count()) {
        u64 k = e % n_out, line = e / n_out;
        u64 l2 = line % lines2, l1 = (line / lines2) % lines1, l0 = line / ((u64)lines2 * lines1);
        const u64 in_base = l0 * in0 + l1 * in1 + l2 * in2;
        double re = 0.0, im = 0.0;
        if (kind == 3) {
            re = in.get(2 * in_base + 2 * k * in_step);
            im = in.get(2 * in_base + 2 * k * in_step + 1);
        } else {
            const u64 terms = kind == 2 ? n : n_in;
            for (u64 j = 0; j < terms; ++j) {
                double x, y = 0.0;
                if (kind == 1) {
                    x = in.get(in_base + j * in_step);
                } else {
                    const bool mirrored = kind == 2 && j >= n_in;
                    const u64 at = in_base + (mirrored ? n - j : j) * in_step;
                    x = in.get(2 * at);
                    y = mirrored ? -(double)in.get(2 * at + 1) : (double)in.get(2 * at + 1);
                }
                double s, c;
                sincospi(sign * 2.0 * (double)((j * k) % n) / (double)n, &s, &c);
                re += x * c - y * s;
                im += x * s + y * c;
            }
        }
        const u64 at = l0 * out0 + l1 * out1 + l2 * out2 + k * out_step;
        if (kind == 2) {
            out.set(at, re);
        } else {
            out.set(2 * at, re);
            out.set(2 * at + 1, im);
        }
    }
}

extern "C" __global__ void dft_f32(unsigned kind, unsigned inverse, unsigned n, unsigned lines0, unsigned lines1,
                                   unsigned lines2, const float* in, u64 in_step, u64 in0, u64 in1, u64 in2,
                                   float* out, u64 out_step, u64 out0, u64 out1, u64 out2) {
    dft(kind, inverse, n, lines0, lines1, lines2, Typed<const float>{in}, in_step, in0, in1, in2, Typed<float>{out},
        out_step, out0, out1, out2);
}

extern "C" __global__ void dft_f64(unsigned kind, unsigned inverse, unsigned n, unsigned lines0, unsigned lines1,
                                   unsigned lines2, const double* in, u64 in_step, u64 in0, u64 in1, u64 in2,
                                   double* out, u64 out_step, u64 out0, u64 out1, u64 out2) {
    dft(kind, inverse, n, lines0, lines1, lines2, Typed<const double>{in}, in_step, in0, in1, in2, Typed<double>{out},
        out_step, out0, out1, out2);
}

// dft_f32's, the input's and the output's element types coded in `types` (input bits 0-3, output
// 4-7: 0 f32, 1 f16, 2 bf16): cuFFT's half-precision transforms, computed as dft_f32's.
extern "C" __global__ void dft_ex(unsigned kind, unsigned inverse, unsigned n, unsigned lines0, unsigned lines1,
                                  unsigned lines2, const void* in, u64 in_step, u64 in0, u64 in1, u64 in2, void* out,
                                  u64 out_step, u64 out0, u64 out1, u64 out2, unsigned types) {
    dft(kind, inverse, n, lines0, lines1, lines2, Coded{(void*)in, types & 15u}, in_step, in0, in1, in2,
        Coded{out, types >> 4 & 15u}, out_step, out0, out1, out2);
}
