// Thread block clusters as CUDA programs launch them (compute capability 9.0): the device says
// it can; cudaLaunchKernelEx with a cluster dimension runs the grid in clusters of 2 blocks and
// of 2 x 2 blocks, each block seeing its rank in its cluster and the cluster's size; the
// clusters the device holds at once (cudaOccupancyMaxActiveClusters, the remote driver's
// answer) and the largest portable cluster; a cluster that does not divide the grid and one of
// more than 8 blocks refused at the launch, the device usable after; clusters of 16 blocks once
// the kernel allows non-portable sizes, 32 refused, and 16 again once it disallows them; four threads launching in
// clusters on their own streams; a launch in clusters captured into a graph, its node's
// parameters changed; a cluster width required of the kernel at run time, which its plain
// launches then take.
// Usage: clusters [blocks]
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"

// out[linear block index] = the block's rank in its cluster + 1000 * the cluster's blocks, as
// cooperative groups' this_cluster().block_rank() and num_blocks() read them (the special
// registers themselves: the nvcc wheels carry no <nv/target>, which cooperative_groups.h needs).
__global__ void ranks(int* out) {
    unsigned rank, size;
    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(size));
    if (threadIdx.x == 0) {
        int b = blockIdx.x + blockIdx.y * gridDim.x + blockIdx.z * gridDim.x * gridDim.y;
        out[b] = (int)rank + 1000 * (int)size;
    }
}

// A launch of `ranks` over `grid` blocks of 64 threads in clusters of `cluster`, on `stream`.
static cudaError_t launch_ranks(int* out, dim3 grid, dim3 cluster, cudaStream_t stream) {
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = dim3(64);
    config.stream = stream;
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = cluster.x;
    attribute.val.clusterDim.y = cluster.y;
    attribute.val.clusterDim.z = cluster.z;
    config.attrs = &attribute;
    config.numAttrs = 1;
    return cudaLaunchKernelEx(&config, ranks, out);
}

// Whether out holds what `ranks` writes for `grid` in clusters of `cluster`.
static bool ranked(const std::vector<int>& out, dim3 grid, dim3 cluster) {
    int size = cluster.x * cluster.y * cluster.z;
    for (unsigned z = 0; z < grid.z; z++) {
        for (unsigned y = 0; y < grid.y; y++) {
            for (unsigned x = 0; x < grid.x; x++) {
                int b = x + y * grid.x + z * grid.x * grid.y;
                int rank = x % cluster.x + (y % cluster.y) * cluster.x + (z % cluster.z) * cluster.x * cluster.y;
                if (out[b] != rank + 1000 * size) {
                    printf("  block %d: %d, expected %d\n", b, out[b], rank + 1000 * size);
                    return false;
                }
            }
        }
    }
    return true;
}

int main(int argc, char** argv) {
    int blocks = argc > 1 ? atoi(argv[1]) : 64;
    int can = 0;
    CHECK(cudaDeviceGetAttribute(&can, cudaDevAttrClusterLaunch, 0));
    printf("cluster launch: %d\n", can);

    int* out;
    CHECK(cudaMalloc(&out, blocks * 4 * sizeof(int)));
    std::vector<int> host(blocks * 4);

    CHECK(launch_ranks(out, dim3(blocks), dim3(2), 0));
    CHECK(cudaMemcpy(host.data(), out, blocks * sizeof(int), cudaMemcpyDeviceToHost));
    report(ranked(host, dim3(blocks), dim3(2)), "clusters of 2 blocks");

    dim3 grid2(blocks / 2, 4);
    CHECK(launch_ranks(out, grid2, dim3(2, 2), 0));
    CHECK(cudaMemcpy(host.data(), out, blocks * 2 * sizeof(int), cudaMemcpyDeviceToHost));
    report(ranked(host, grid2, dim3(2, 2)), "clusters of 2 x 2 blocks");

    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(blocks);
    config.blockDim = dim3(64);
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = 4;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    int active = 0, largest = 0;
    CHECK(cudaOccupancyMaxActiveClusters(&active, ranks, &config));
    CHECK(cudaOccupancyMaxPotentialClusterSize(&largest, ranks, &config));
    printf("active clusters of 4: %d; largest portable cluster: %d\n", active, largest);

    // Refused at the launch, as CUDA refuses them; the device goes on.
    cudaError_t e = launch_ranks(out, dim3(6), dim3(4), 0);
    printf("a cluster not dividing the grid: %d (%s)\n", (int)e, cudaGetErrorName(e));
    cudaGetLastError();
    e = launch_ranks(out, dim3(16), dim3(16), 0);
    printf("a cluster of 16 blocks: %d (%s)\n", (int)e, cudaGetErrorName(e));
    cudaGetLastError();
    CHECK(cudaDeviceSynchronize());

    // Non-portable sizes once the kernel allows them: 16 blocks on an H100 or H200.
    CHECK(cudaFuncSetAttribute(ranks, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CHECK(launch_ranks(out, dim3(blocks), dim3(16), 0));
    CHECK(cudaMemcpy(host.data(), out, blocks * sizeof(int), cudaMemcpyDeviceToHost));
    report(ranked(host, dim3(blocks), dim3(16)), "clusters of 16 blocks, non-portable sizes allowed,");
    attribute.val.clusterDim.x = 16;
    CHECK(cudaOccupancyMaxActiveClusters(&active, ranks, &config));
    CHECK(cudaOccupancyMaxPotentialClusterSize(&largest, ranks, &config));
    printf("active clusters of 16: %d; largest cluster: %d\n", active, largest);
    e = launch_ranks(out, dim3(32), dim3(32), 0);
    printf("a cluster of 32 blocks: %d (%s)\n", (int)e, cudaGetErrorName(e));
    cudaGetLastError();
    // Disallowed right after a launch that needed it: the launch was made while allowed.
    CHECK(launch_ranks(out, dim3(blocks), dim3(16), 0));
    CHECK(cudaFuncSetAttribute(ranks, cudaFuncAttributeNonPortableClusterSizeAllowed, 0));
    CHECK(cudaMemcpy(host.data(), out, blocks * sizeof(int), cudaMemcpyDeviceToHost));
    report(ranked(host, dim3(blocks), dim3(16)), "clusters of 16 blocks launched just before they were disallowed,");
    e = launch_ranks(out, dim3(16), dim3(16), 0);
    printf("16 blocks once non-portable sizes are disallowed again: %d (%s)\n", (int)e, cudaGetErrorName(e));
    cudaGetLastError();
    CHECK(cudaDeviceSynchronize());

    // Threads launching in clusters of their own sizes on their own streams.
    std::vector<int*> outs(4);
    std::vector<bool> ok(4, false);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; t++) {
        threads.emplace_back([&, t] {
            cudaStream_t s;
            CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
            CHECK(cudaMalloc(&outs[t], blocks * sizeof(int)));
            dim3 cluster(1 << (t % 3 + 1));  // 2, 4, 8, 2 blocks
            std::vector<int> mine(blocks);
            bool all = true;
            for (int round = 0; round < 3; round++) {
                CHECK(launch_ranks(outs[t], dim3(blocks), cluster, s));
                CHECK(cudaMemcpyAsync(mine.data(), outs[t], blocks * sizeof(int), cudaMemcpyDeviceToHost, s));
                CHECK(cudaStreamSynchronize(s));
                all = all && ranked(mine, dim3(blocks), cluster);
            }
            ok[t] = all;
            CHECK(cudaFree(outs[t]));
            CHECK(cudaStreamDestroy(s));
        });
    }
    for (auto& t : threads) {
        t.join();
    }
    report(ok[0] && ok[1] && ok[2] && ok[3], "4 threads launching in clusters on their own streams");

    CHECK(launch_ranks(out, dim3(blocks), dim3(8), 0));
    CHECK(cudaMemcpy(host.data(), out, blocks * sizeof(int), cudaMemcpyDeviceToHost));
    report(ranked(host, dim3(blocks), dim3(8)), "clusters of 8 blocks after the refusals");

    // A launch in clusters captured into a graph keeps its clusters, also once its node's
    // parameters are changed in the executable graph.
    cudaStream_t cs;
    CHECK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    CHECK(launch_ranks(out, dim3(blocks), dim3(2), cs));
    CHECK(cudaStreamEndCapture(cs, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaGraphNode_t node;
    size_t nodes = 1;
    CHECK(cudaGraphGetNodes(graph, &node, &nodes));
    int* other;
    CHECK(cudaMalloc(&other, blocks * sizeof(int)));
    cudaKernelNodeParams p;
    CHECK(cudaGraphKernelNodeGetParams(node, &p));
    void* moved[] = {&other};
    p.kernelParams = moved;
    CHECK(cudaGraphExecKernelNodeSetParams(exec, node, &p));
    CHECK(cudaGraphLaunch(exec, cs));
    CHECK(cudaStreamSynchronize(cs));
    CHECK(cudaMemcpy(host.data(), other, blocks * sizeof(int), cudaMemcpyDeviceToHost));
    report(ranked(host, dim3(blocks), dim3(2)), "a captured launch in clusters, its node's parameters changed");
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaStreamDestroy(cs));
    CHECK(cudaFree(other));

    // A cluster size required of the kernel at run time: its plain launches run in clusters of
    // it (checked only where the driver lets a kernel compiled without one take it).
    e = cudaFuncSetAttribute(ranks, cudaFuncAttributeRequiredClusterWidth, 4);
    if (e == cudaSuccess) {
        CHECK(cudaFuncSetAttribute(ranks, cudaFuncAttributeRequiredClusterHeight, 1));
        CHECK(cudaFuncSetAttribute(ranks, cudaFuncAttributeRequiredClusterDepth, 1));
        ranks<<<blocks, 64>>>(out);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(host.data(), out, blocks * sizeof(int), cudaMemcpyDeviceToHost));
        report(ranked(host, dim3(blocks), dim3(4)), "a required cluster width of 4, launched with <<<>>>");
    } else {
        printf("a required cluster width: %d (%s)\n", (int)e, cudaGetErrorName(e));
        cudaGetLastError();
    }
    CHECK(cudaFree(out));
    printf("clusters: %s\n", failures ? "FAILED" : "all exact");
    return failures ? 1 : 0;
}
