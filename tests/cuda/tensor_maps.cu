// Tensor maps as CUTLASS 3, Triton and FlashAttention 3 use them (compute capability 9.0): the
// program takes cuTensorMapEncodeTiled from the driver (cudaGetDriverEntryPointByVersion), has
// it describe a 40 x 24 float tensor in 16 x 16 boxes, and a kernel copies each box into
// shared memory with the tensor memory accelerator (cp.async.bulk.tensor) and writes it out:
// the tensor, its edges filled with zeros (or NaN when asked); the map's address replaced
// (cuTensorMapReplaceAddress) reads a second tensor, and a map of a null address, replaced, the
// first; an im2col map of a 4-D tensor encodes;
// what the driver refuses is refused (a stride not a multiple of 16, a tensor past its
// allocation, host memory, a map not 64-byte aligned, a map no encoding made), the device
// usable after; four threads encoding and launching on their own streams.
// Usage: tensor_maps
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>

#include "check.h"
#include "driver_entry.h"

#define BOX 16
#define WIDTH 40
#define HEIGHT 24
// The output: the tensor's boxes, 3 x 2 of them.
#define OUT_WIDTH 48
#define OUT_HEIGHT 32

// out[y][x] over the block's box = the map's box at (x0, y0), which the tensor memory
// accelerator copies into shared memory, signalling the barrier when its bytes are there (the
// instructions themselves, as CUTLASS's SM90_TMA_LOAD_2D issues them: the nvcc wheels carry no
// <cuda/barrier>).
__global__ void tiles(const __grid_constant__ CUtensorMap map, float* out, int width) {
#if __CUDA_ARCH__ >= 900
    __shared__ alignas(128) float tile[BOX][BOX];
    __shared__ alignas(8) unsigned long long barrier;
    unsigned bar = (unsigned)__cvta_generic_to_shared(&barrier);
    unsigned dst = (unsigned)__cvta_generic_to_shared(&tile[0][0]);
    int x0 = blockIdx.x * BOX, y0 = blockIdx.y * BOX;
    bool leader = threadIdx.x == 0 && threadIdx.y == 0;
    if (leader) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    if (leader) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(BOX * BOX * 4) : "memory");
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
            "l"((unsigned long long)&map), "r"(x0), "r"(y0), "r"(bar)
            : "memory");
    }
    // Waits for the copy; a copy that never completes ends the kernel with an error, not a hang.
    unsigned done = 0;
    for (long spins = 0; !done; spins++) {
        if (spins == (1L << 28)) __trap();
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n selp.u32 %0, 1, 0, p;\n}"
            : "=r"(done)
            : "r"(bar)
            : "memory");
    }
    out[(y0 + threadIdx.y) * width + x0 + threadIdx.x] = tile[threadIdx.y][threadIdx.x];
#endif
}

typedef decltype(&cuTensorMapEncodeTiled) EncodeTiled;
typedef decltype(&cuTensorMapEncodeIm2col) EncodeIm2col;
typedef decltype(&cuTensorMapReplaceAddress) ReplaceAddress;

static EncodeTiled encode_tiled;
static EncodeIm2col encode_im2col;
static ReplaceAddress replace_address;

// A tiled map of the WIDTH x HEIGHT floats at `tensor`, rows `stride` bytes apart, in BOX x BOX
// boxes; `rows` rows of it.
static CUresult encode(CUtensorMap* map, void* tensor, cuuint64_t stride, cuuint64_t rows, CUtensorMapFloatOOBfill fill) {
    cuuint64_t dims[2] = {WIDTH, rows};
    cuuint64_t strides[1] = {stride};
    cuuint32_t box[2] = {BOX, BOX};
    cuuint32_t element_strides[2] = {1, 1};
    return encode_tiled(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, tensor, dims, strides, box, element_strides,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE, fill);
}

// The tensor `seed` names: element i is seed + i / 4.
static std::vector<float> tensor_of(float seed) {
    std::vector<float> t(WIDTH * HEIGHT);
    for (int i = 0; i < WIDTH * HEIGHT; i++) t[i] = seed + i / 4.0f;
    return t;
}

// Whether `out` holds `tensor` in its place and the edge value (0, or NaN) around it.
static bool boxed(const std::vector<float>& out, const std::vector<float>& tensor, bool nan_edges) {
    for (int y = 0; y < OUT_HEIGHT; y++) {
        for (int x = 0; x < OUT_WIDTH; x++) {
            float got = out[y * OUT_WIDTH + x];
            bool inside = x < WIDTH && y < HEIGHT;
            bool ok = inside ? got == tensor[y * WIDTH + x] : (nan_edges ? std::isnan(got) : got == 0.0f);
            if (!ok) {
                printf("  (%d, %d): %g\n", x, y, got);
                return false;
            }
        }
    }
    return true;
}

// Launches `tiles` over `map` on `stream` and reads the output back.
static std::vector<float> run_tiles(const CUtensorMap& map, float* out, cudaStream_t stream) {
    std::vector<float> host(OUT_WIDTH * OUT_HEIGHT, -7.0f);
    CHECK(cudaMemcpyAsync(out, host.data(), host.size() * 4, cudaMemcpyHostToDevice, stream));
    tiles<<<dim3(OUT_WIDTH / BOX, OUT_HEIGHT / BOX), dim3(BOX, BOX), 0, stream>>>(map, out, OUT_WIDTH);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyAsync(host.data(), out, host.size() * 4, cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    return host;
}

// A device copy of `values`.
static float* device_copy(const std::vector<float>& values) {
    float* p;
    CHECK(cudaMalloc(&p, values.size() * 4));
    CHECK(cudaMemcpy(p, values.data(), values.size() * 4, cudaMemcpyHostToDevice));
    return p;
}

int main() {
    int cc_major = 0;
    CHECK(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, 0));
    encode_tiled = (EncodeTiled)entry("cuTensorMapEncodeTiled");
    encode_im2col = (EncodeIm2col)entry("cuTensorMapEncodeIm2col");
    replace_address = (ReplaceAddress)entry("cuTensorMapReplaceAddress");
    printf("compute capability %d\n", cc_major);

    std::vector<float> a = tensor_of(1.0f), b = tensor_of(-500.0f);
    float* da = device_copy(a);
    float* db = device_copy(b);
    float* out;
    CHECK(cudaMalloc(&out, OUT_WIDTH * OUT_HEIGHT * 4));

    alignas(64) CUtensorMap map;
    printf("encode: %d\n", (int)encode(&map, da, WIDTH * 4, HEIGHT, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    report(boxed(run_tiles(map, out, 0), a, false), "a 40 x 24 tensor copied in 16 x 16 boxes, its edges zero-filled");
    printf("replace address: %d\n", (int)replace_address(&map, db));
    report(boxed(run_tiles(map, out, 0), b, false), "the map's address replaced");

    // A map of a null address, as CUTLASS encodes one for an operand it does not read, then
    // pointed at the tensor.
    alignas(64) CUtensorMap late;
    printf("a map of a null address: %d\n", (int)encode(&late, nullptr, WIDTH * 4, HEIGHT, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    printf("its address replaced: %d\n", (int)replace_address(&late, da));
    report(boxed(run_tiles(late, out, 0), a, false), "a map encoded at a null address, then at the tensor's");

    alignas(64) CUtensorMap nan_map;
    printf("encode with NaN fill: %d\n",
           (int)encode(&nan_map, da, WIDTH * 4, HEIGHT, CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA));
    report(boxed(run_tiles(nan_map, out, 0), a, true), "edges filled with NaN");

    // An NHWC tensor of 2 x 10 x 10 pixels of 8 channels, in columns of 16 pixels.
    float* nhwc;
    CHECK(cudaMalloc(&nhwc, 2 * 10 * 10 * 8 * 4));
    cuuint64_t dims[4] = {8, 10, 10, 2};
    cuuint64_t strides[3] = {8 * 4, 10 * 8 * 4, 10 * 10 * 8 * 4};
    int lower[2] = {-1, -1}, upper[2] = {-1, -1};
    cuuint32_t element_strides[4] = {1, 1, 1, 1};
    alignas(64) CUtensorMap im2col;
    printf("an im2col map: %d\n",
           (int)encode_im2col(&im2col, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, nhwc, dims, strides, lower, upper, 8, 16,
                              element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                              CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));

    alignas(64) CUtensorMap refused;
    printf("a stride not a multiple of 16: %d\n", (int)encode(&refused, da, 100, HEIGHT, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    printf("a tensor past its allocation: %d\n",
           (int)encode(&refused, da, WIDTH * 4, HEIGHT + 1, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    std::vector<float> host(WIDTH * HEIGHT);
    printf("a tensor in host memory: %d\n",
           (int)encode(&refused, host.data(), WIDTH * 4, HEIGHT, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    alignas(64) unsigned char unaligned[sizeof(CUtensorMap) + 64];
    printf("a map not 64-byte aligned: %d\n",
           (int)encode((CUtensorMap*)(unaligned + 8), da, WIDTH * 4, HEIGHT, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    alignas(64) CUtensorMap blank = {};
    printf("an address replaced in a map no encoding made: %d\n", (int)replace_address(&blank, db));
    report(boxed(run_tiles(map, out, 0), b, false), "the device after the refusals");

    std::vector<std::thread> threads;
    std::vector<int> exact(4, 0);
    for (int t = 0; t < 4; t++) {
        threads.emplace_back([t, &exact] {
            std::vector<float> mine = tensor_of(100.0f * (t + 1));
            float* dm = device_copy(mine);
            float* dout;
            CHECK(cudaMalloc(&dout, OUT_WIDTH * OUT_HEIGHT * 4));
            cudaStream_t stream;
            CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
            alignas(64) CUtensorMap own;
            bool ok = encode(&own, dm, WIDTH * 4, HEIGHT, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
            for (int round = 0; ok && round < 3; round++) ok = boxed(run_tiles(own, dout, stream), mine, false);
            exact[t] = ok;
            CHECK(cudaStreamDestroy(stream));
            CHECK(cudaFree(dm));
            CHECK(cudaFree(dout));
        });
    }
    for (auto& thread : threads) thread.join();
    report(exact[0] && exact[1] && exact[2] && exact[3], "4 threads encoding and launching on their own streams");

    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(out));
    CHECK(cudaFree(nhwc));
    if (failures == 0) printf("tensor_maps: all exact\n");
    return failures == 0 ? 0 : 1;
}
