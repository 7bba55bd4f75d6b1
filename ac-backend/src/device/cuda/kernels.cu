// The `builtin` module on CUDA: the same kernels, names and signatures as the CPU device's
// (see builtin.rs). Compiled by NVRTC when the backend starts.
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

// BLAS's gemm, column-major as cuBLAS is (the CUDA shim's `cublas<S|D>gemm*` launch these):
// C_b = alpha op(A_b) op(B_b) + beta C_b for each b < batch, op(X) = X or its transpose
// (trans != 0), X_b = X + b * stride_x, element (i, j) of X at X[i + j * ldx]. C is not read
// when beta is 0 (BLAS: it may hold anything then). One thread an element of C, no tiling:
// correct on any launch shape, not cuBLAS's speed.
template <typename T>
__device__ void gemm(unsigned ta, unsigned tb, unsigned m, unsigned n, unsigned k, T alpha, const T* A,
                     unsigned lda, u64 sa, const T* B, unsigned ldb, u64 sb, T beta, T* C, unsigned ldc, u64 sc,
                     unsigned batch) {
    u64 total = (u64)m * n * batch;
    for (u64 e = thread_index(); e < total; e += thread_count()) {
        u64 i = e % m, j = (e / m) % n, b = e / ((u64)m * n);
        const T* a = A + b * sa;
        const T* bm = B + b * sb;
        T acc = 0;
        for (unsigned p = 0; p < k; ++p) {
            T x = ta ? a[p + i * lda] : a[i + (u64)p * lda];
            T y = tb ? bm[j + (u64)p * ldb] : bm[p + j * ldb];
            acc += x * y;
        }
        T* c = C + b * sc + i + j * ldc;
        *c = beta == (T)0 ? alpha * acc : alpha * acc + beta * *c;
    }
}

extern "C" __global__ void blas_sgemm(unsigned ta, unsigned tb, unsigned m, unsigned n, unsigned k, float alpha,
                                      const float* A, unsigned lda, u64 sa, const float* B, unsigned ldb, u64 sb,
                                      float beta, float* C, unsigned ldc, u64 sc, unsigned batch) {
    gemm<float>(ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

extern "C" __global__ void blas_dgemm(unsigned ta, unsigned tb, unsigned m, unsigned n, unsigned k, double alpha,
                                      const double* A, unsigned lda, u64 sa, const double* B, unsigned ldb, u64 sb,
                                      double beta, double* C, unsigned ldc, u64 sc, unsigned batch) {
    gemm<double>(ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

// A discrete Fourier transform of length n along lines0 * lines1 * lines2 strided lines (the
// CUDA shim's cuFFT launches these, one launch per dimension): kind 0 complex to complex, 1
// real to complex (n/2 + 1 out), 2 complex to real (n/2 + 1 in, the rest their conjugates), 3 a
// copy; unnormalized, exp(-2 pi i j k / n) forward, + inverse. Strides count each buffer's
// elements (complex: two T, real part first). One thread an output element, one direct sum
// accumulated in double, each twiddle's angle reduced to (j k mod n) / n first: correct on any
// launch shape, not cuFFT's speed.
template <typename T>
__device__ void dft(unsigned kind, unsigned inverse, unsigned n, unsigned lines0, unsigned lines1, unsigned lines2,
                    const T* in, u64 in_step, u64 in0, u64 in1, u64 in2, T* out, u64 out_step, u64 out0, u64 out1,
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
            re = in[2 * in_base + 2 * k * in_step];
            im = in[2 * in_base + 2 * k * in_step + 1];
        } else {
            const u64 terms = kind == 2 ? n : n_in;
            for (u64 j = 0; j < terms; ++j) {
                double x, y = 0.0;
                if (kind == 1) {
                    x = in[in_base + j * in_step];
                } else {
                    const bool mirrored = kind == 2 && j >= n_in;
                    const u64 at = in_base + (mirrored ? n - j : j) * in_step;
                    x = in[2 * at];
                    y = mirrored ? -(double)in[2 * at + 1] : (double)in[2 * at + 1];
                }
                double s, c;
                sincospi(sign * 2.0 * (double)((j * k) % n) / (double)n, &s, &c);
                re += x * c - y * s;
                im += x * s + y * c;
            }
        }
        const u64 at = l0 * out0 + l1 * out1 + l2 * out2 + k * out_step;
        if (kind == 2) {
            out[at] = (T)re;
        } else {
            out[2 * at] = (T)re;
            out[2 * at + 1] = (T)im;
        }
    }
}

extern "C" __global__ void dft_f32(unsigned kind, unsigned inverse, unsigned n, unsigned lines0, unsigned lines1,
                                   unsigned lines2, const float* in, u64 in_step, u64 in0, u64 in1, u64 in2,
                                   float* out, u64 out_step, u64 out0, u64 out1, u64 out2) {
    dft<float>(kind, inverse, n, lines0, lines1, lines2, in, in_step, in0, in1, in2, out, out_step, out0, out1, out2);
}

extern "C" __global__ void dft_f64(unsigned kind, unsigned inverse, unsigned n, unsigned lines0, unsigned lines1,
                                   unsigned lines2, const double* in, u64 in_step, u64 in0, u64 in1, u64 in2,
                                   double* out, u64 out_step, u64 out0, u64 out1, u64 out2) {
    dft<double>(kind, inverse, n, lines0, lines1, lines2, in, in_step, in0, in1, in2, out, out_step, out0, out1, out2);
}
