"""A sum: on a GPU, a block reduction compiled from CUDA C++ by NVRTC on the backend; on the
CPU-emulated device (which compiles no CUDA), the builtin reduce_sum."""

import numpy as np

import ac

BLOCK_SUM = r"""
extern "C" __global__ void block_sum(const float* x, float* partial, unsigned long long n) {
    extern __shared__ float s[];
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned int step = blockDim.x / 2; step > 0; step >>= 1) {
        if (threadIdx.x < step) s[threadIdx.x] += s[threadIdx.x + step];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}
"""

N = 1_000_000
BLOCK = 256

with ac.init() as session:
    acc = session.accelerators[0]
    host = (np.arange(N) % 7).astype(np.float32)
    x = acc.to_device(host)
    if acc.kind == "cuda":
        blocks = (N + BLOCK - 1) // BLOCK
        partial = acc.empty(blocks, np.float32)
        block_sum = acc.compile(BLOCK_SUM).get_function("block_sum")
        print(f"NVRTC kernel block_sum{tuple(block_sum.params or ())} on {acc.id}")
        # A cubin's parameter types are unknown: n's width is said (unsigned long long).
        block_sum(blocks, BLOCK, (x, partial, np.uint64(N)), shared_mem=BLOCK * 4)  # CuPy's form
        total = float(partial.get().astype(np.float64).sum())
    else:
        out = acc.zeros(1, np.float32)
        acc.builtin().get_function("reduce_sum")(1, 1, (x, out, N))
        print(f"builtin reduce_sum on {acc.id} (a CPU device compiles no CUDA)")
        total = float(out.get()[0])
    expect = float(host.astype(np.float64).sum())
    assert abs(total - expect) <= 1e-6 * expect, (total, expect)
    print(f"sum OK: {total:.0f}")
