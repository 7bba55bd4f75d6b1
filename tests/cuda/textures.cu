// CUDA arrays, texture objects and surface objects, as image-processing and older simulation
// codes use them: a 37 x 23 float array written from the host (cudaMemcpy2DToArray) and read
// back, a block of it replaced; kernels reading it through a texture object (tex2D, point
// sampling at the texels' centres, clamped off the edges, a border colour, linear filtering);
// a surface object doubling it in place (surf2Dread/surf2Dwrite); copies between the array and
// device memory and between two arrays; a 3-D array (cudaMemcpy3D, tex3D); a texture over
// linear device memory (tex1Dfetch); copies and kernels queued on a stream; the array's
// descriptor; what CUDA refuses (a region past the array, a texture past its allocation) and
// the device usable after; a copy into a 1-D array captured into a graph and launched; an array
// freed before its texture. What the pool adds to CUDA's promises (a new array reads zeros) is
// gpu_cases::arrays', so that this program's lines hold natively too.
// Usage: textures
#include <cmath>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"

#define W 37
#define H 23

__global__ void sample2d(cudaTextureObject_t tex, float* out, int w, int h, float dx, float dy) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) out[y * w + x] = tex2D<float>(tex, x + 0.5f + dx, y + 0.5f + dy);
}

__global__ void sample3d(cudaTextureObject_t tex, float* out, int w, int h, int d) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z * blockDim.z + threadIdx.z;
    if (x < w && y < h && z < d) out[(z * h + y) * w + x] = tex3D<float>(tex, x + 0.5f, y + 0.5f, z + 0.5f);
}

__global__ void fetch1d(cudaTextureObject_t tex, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * tex1Dfetch<float>(tex, i);
}

__global__ void double_surface(cudaSurfaceObject_t surf, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) surf2Dwrite(2.0f * surf2Dread<float>(surf, x * 4, y), surf, x * 4, y);
}

// The texel at (x, y), clamped to the image.
static float texel(const std::vector<float>& img, int x, int y) {
    x = x < 0 ? 0 : (x >= W ? W - 1 : x);
    y = y < 0 ? 0 : (y >= H ? H - 1 : y);
    return img[y * W + x];
}

static cudaTextureObject_t texture_of(cudaArray_t array, cudaTextureAddressMode mode, cudaTextureFilterMode filter) {
    cudaResourceDesc res = {};
    res.resType = cudaResourceTypeArray;
    res.res.array.array = array;
    cudaTextureDesc desc = {};
    desc.addressMode[0] = desc.addressMode[1] = desc.addressMode[2] = mode;
    desc.filterMode = filter;
    desc.readMode = cudaReadModeElementType;
    desc.borderColor[0] = -1.0f;
    cudaTextureObject_t tex = 0;
    CHECK(cudaCreateTextureObject(&tex, &res, &desc, nullptr));
    return tex;
}

// Samples `tex` at every texel's centre moved by (dx, dy) into `out` and back to the host.
static std::vector<float> sampled(cudaTextureObject_t tex, float* out, float dx, float dy, cudaStream_t stream = 0) {
    dim3 block(8, 8), grid((W + 7) / 8, (H + 7) / 8);
    sample2d<<<grid, block, 0, stream>>>(tex, out, W, H, dx, dy);
    CHECK(cudaGetLastError());
    std::vector<float> got(W * H);
    CHECK(cudaMemcpyAsync(got.data(), out, W * H * 4, cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    return got;
}

int main() {
    std::vector<float> img(W * H);
    for (int i = 0; i < W * H; i++) img[i] = (float)(i / W * 100 + i % W);
    float* out;
    CHECK(cudaMalloc(&out, W * H * 4));

    cudaChannelFormatDesc channel = cudaCreateChannelDesc<float>();
    cudaArray_t array;
    CHECK(cudaMallocArray(&array, &channel, W, H, cudaArraySurfaceLoadStore));
    cudaChannelFormatDesc got_channel;
    cudaExtent extent;
    unsigned flags = 0;
    CHECK(cudaArrayGetInfo(&got_channel, &extent, &flags, array));
    report(got_channel.x == 32 && got_channel.f == cudaChannelFormatKindFloat && extent.width == W &&
               extent.height == H && extent.depth == 0,
           "the array's descriptor");

    // Rows 160 bytes apart on the host: the pitch is the host's, not the array's.
    std::vector<float> pitched(40 * H, -5.0f);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) pitched[y * 40 + x] = img[y * W + x];
    CHECK(cudaMemcpy2DToArray(array, 0, 0, pitched.data(), 40 * 4, W * 4, H, cudaMemcpyHostToDevice));
    std::vector<float> back(W * H);
    CHECK(cudaMemcpy2DFromArray(back.data(), W * 4, array, 0, 0, W * 4, H, cudaMemcpyDeviceToHost));
    report(back == img, "a 37 x 23 float array written from pitched host rows and read back");

    // A 5 x 4 block at (3, 2) replaced, then put back from device memory.
    std::vector<float> block(5 * 4, 7.5f);
    CHECK(cudaMemcpy2DToArray(array, 3 * 4, 2, block.data(), 5 * 4, 5 * 4, 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy2DFromArray(back.data(), W * 4, array, 0, 0, W * 4, H, cudaMemcpyDeviceToHost));
    std::vector<float> expected = img;
    for (int y = 2; y < 6; y++)
        for (int x = 3; x < 8; x++) expected[y * W + x] = 7.5f;
    report(back == expected, "a 5 x 4 block at (3, 2) replaced");
    float* linear;
    CHECK(cudaMalloc(&linear, W * H * 4));
    CHECK(cudaMemcpy(linear, img.data(), W * H * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy2DToArray(array, 0, 0, linear, W * 4, W * 4, H, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpy2DFromArray(back.data(), W * 4, array, 0, 0, W * 4, H, cudaMemcpyDeviceToHost));
    report(back == img, "the array written from device memory");

    // Point sampling at the centres; moved off the edges, clamped; past them, the border.
    cudaTextureObject_t tex = texture_of(array, cudaAddressModeClamp, cudaFilterModePoint);
    report(sampled(tex, out, 0, 0) == img, "tex2D at the texels' centres");
    std::vector<float> shifted = sampled(tex, out, -3.0f, 2.0f);
    bool clamped = true;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) clamped &= shifted[y * W + x] == texel(img, x - 3, y + 2);
    report(clamped, "tex2D moved by (-3, 2), clamped at the edges");
    cudaResourceDesc res_back;
    CHECK(cudaGetTextureObjectResourceDesc(&res_back, tex));
    report(res_back.resType == cudaResourceTypeArray && res_back.res.array.array == array, "the texture's resource");
    cudaTextureObject_t border = texture_of(array, cudaAddressModeBorder, cudaFilterModePoint);
    std::vector<float> bordered = sampled(border, out, 2.0f, 0);
    bool border_ok = true;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) border_ok &= bordered[y * W + x] == (x + 2 < W ? img[y * W + x + 2] : -1.0f);
    report(border_ok, "tex2D past the edge reads the border colour");
    // Linear filtering a quarter texel right: 3/4 of a texel and 1/4 of the next (9-bit weights).
    cudaTextureObject_t smooth = texture_of(array, cudaAddressModeClamp, cudaFilterModeLinear);
    std::vector<float> blended = sampled(smooth, out, 0.25f, 0);
    double worst = 0;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            float want = 0.75f * texel(img, x, y) + 0.25f * texel(img, x + 1, y);
            worst = fmax(worst, fabs(blended[y * W + x] - want) / fmax(1.0, fabs(want)));
        }
    printf("linear filtering: worst relative error %.2e\n", worst);
    report(worst <= 1e-2, "tex2D with linear filtering");

    // A surface doubles the array in place; a second array takes a copy of it.
    cudaResourceDesc surf_res = {};
    surf_res.resType = cudaResourceTypeArray;
    surf_res.res.array.array = array;
    cudaSurfaceObject_t surf;
    CHECK(cudaCreateSurfaceObject(&surf, &surf_res));
    double_surface<<<dim3((W + 7) / 8, (H + 7) / 8), dim3(8, 8)>>>(surf, W, H);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    cudaArray_t copy;
    CHECK(cudaMallocArray(&copy, &channel, W, H));
    CHECK(cudaMemcpy2DArrayToArray(copy, 0, 0, array, 0, 0, W * 4, H, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpy2DFromArray(back.data(), W * 4, copy, 0, 0, W * 4, H, cudaMemcpyDeviceToHost));
    bool doubled = true;
    for (int i = 0; i < W * H; i++) doubled &= back[i] == 2.0f * img[i];
    report(doubled, "a surface doubling the array, copied to a second array");
    CHECK(cudaMemcpy2DFromArray(linear, W * 4, copy, 0, 0, W * 4, H, cudaMemcpyDeviceToDevice));
    std::vector<float> from_device(W * H);
    CHECK(cudaMemcpy(from_device.data(), linear, W * H * 4, cudaMemcpyDeviceToHost));
    report(from_device == back, "the second array copied to device memory");

    // Queued on a stream: the array rewritten, sampled and read, in order.
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    CHECK(cudaMemcpy2DToArrayAsync(array, 0, 0, img.data(), W * 4, W * 4, H, cudaMemcpyHostToDevice, stream));
    std::vector<float> on_stream = sampled(tex, out, 0, 0, stream);
    CHECK(cudaMemcpy2DFromArrayAsync(back.data(), W * 4, array, 0, 0, W * 4, H, cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    report(on_stream == img && back == img, "copies and a kernel queued on a stream");

    // A 3-D array: 9 x 6 x 5 floats through cudaMemcpy3D and tex3D.
    const int X = 9, Y = 6, Z = 5;
    std::vector<float> volume(X * Y * Z);
    for (int i = 0; i < X * Y * Z; i++) volume[i] = (float)(i * 3 + 1);
    cudaArray_t cube;
    CHECK(cudaMalloc3DArray(&cube, &channel, make_cudaExtent(X, Y, Z)));
    cudaMemcpy3DParms params = {};
    params.srcPtr = make_cudaPitchedPtr(volume.data(), X * 4, X, Y);
    params.dstArray = cube;
    params.extent = make_cudaExtent(X, Y, Z);
    params.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&params));
    cudaTextureObject_t tex3 = texture_of(cube, cudaAddressModeClamp, cudaFilterModePoint);
    float* out3;
    CHECK(cudaMalloc(&out3, X * Y * Z * 4));
    sample3d<<<dim3(2, 2, 2), dim3(8, 4, 4)>>>(tex3, out3, X, Y, Z);
    CHECK(cudaGetLastError());
    std::vector<float> got3(X * Y * Z);
    CHECK(cudaMemcpy(got3.data(), out3, X * Y * Z * 4, cudaMemcpyDeviceToHost));
    report(got3 == volume, "a 9 x 6 x 5 array through cudaMemcpy3D and tex3D");

    // A texture over linear device memory.
    const int N = 1000;
    std::vector<float> ramp(N);
    for (int i = 0; i < N; i++) ramp[i] = i * 0.5f;
    float *ramp_dev, *ramp_out;
    CHECK(cudaMalloc(&ramp_dev, N * 4));
    CHECK(cudaMalloc(&ramp_out, N * 4));
    CHECK(cudaMemcpy(ramp_dev, ramp.data(), N * 4, cudaMemcpyHostToDevice));
    cudaResourceDesc lin = {};
    lin.resType = cudaResourceTypeLinear;
    lin.res.linear.devPtr = ramp_dev;
    lin.res.linear.desc = channel;
    lin.res.linear.sizeInBytes = N * 4;
    cudaTextureDesc point = {};
    point.readMode = cudaReadModeElementType;
    cudaTextureObject_t tex1;
    CHECK(cudaCreateTextureObject(&tex1, &lin, &point, nullptr));
    fetch1d<<<(N + 127) / 128, 128>>>(tex1, ramp_out, N);
    CHECK(cudaGetLastError());
    std::vector<float> twice(N);
    CHECK(cudaMemcpy(twice.data(), ramp_out, N * 4, cudaMemcpyDeviceToHost));
    bool ramp_ok = true;
    for (int i = 0; i < N; i++) ramp_ok &= twice[i] == i * 1.0f;
    report(ramp_ok, "tex1Dfetch over linear device memory");

    // A copy into a 1-D array, captured into a graph and launched (from page-locked memory).
    cudaArray_t line;
    CHECK(cudaMallocArray(&line, &channel, 64));
    float* quarters;
    CHECK(cudaMallocHost(&quarters, 64 * 4));
    for (int i = 0; i < 64; i++) quarters[i] = i + 0.25f;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    CHECK(cudaMemcpy2DToArrayAsync(line, 0, 0, quarters, 64 * 4, 64 * 4, 1, cudaMemcpyHostToDevice, stream));
    CHECK(cudaStreamEndCapture(stream, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaStreamSynchronize(stream));
    std::vector<float> line_back(64);
    CHECK(cudaMemcpy2DFromArray(line_back.data(), 64 * 4, line, 0, 0, 64 * 4, 1, cudaMemcpyDeviceToHost));
    report(std::vector<float>(quarters, quarters + 64) == line_back, "a copy into a 1-D array captured into a graph");
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaFreeHost(quarters));
    CHECK(cudaFreeArray(line));

    // Refused, and the device goes on.
    cudaError_t past = cudaMemcpy2DToArray(array, 4 * 4, 0, img.data(), W * 4, W * 4, 1, cudaMemcpyHostToDevice);
    printf("a region past the array's row: %d\n", (int)past);
    cudaGetLastError();
    lin.res.linear.sizeInBytes = N * 8;
    cudaTextureObject_t too_long = 0;
    cudaError_t beyond = cudaCreateTextureObject(&too_long, &lin, &point, nullptr);
    printf("a texture past its allocation: %d\n", (int)beyond);
    cudaGetLastError();
    report(sampled(tex, out, 0, 0) == img, "the device after the refusals");

    // The 3-D array freed before its texture (reading through the texture after that is
    // undefined; through the pool the array stays until the texture goes, and the stand-in
    // records a violation should the backend destroy it first).
    CHECK(cudaFreeArray(cube));
    CHECK(cudaDestroyTextureObject(tex3));
    for (auto t : {tex, border, smooth, tex1}) CHECK(cudaDestroyTextureObject(t));
    CHECK(cudaDestroySurfaceObject(surf));
    CHECK(cudaFreeArray(array));
    CHECK(cudaFreeArray(copy));
    CHECK(cudaStreamDestroy(stream));
    for (auto p : {out, linear, out3, ramp_dev, ramp_out}) CHECK(cudaFree(p));
    if (failures == 0) printf("textures: all exact\n");
    return failures == 0 ? 0 : 1;
}
