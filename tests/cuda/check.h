// CHECK(call): a CUDA runtime call that must succeed; otherwise the test programs print the
// call, its error number and string, and exit 1 (the tests read these lines).
// report(), all_equal(), nodes_of() and fill() are the programs' shared helpers.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#define CHECK(call)                                                                      \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) {                                                         \
            printf("FAILED %s: %d %s\n", #call, (int)e_, cudaGetErrorString(e_));        \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

// The checks a program failed (report), for its exit status.
[[maybe_unused]] static int failures = 0;

// Prints "<what> exact", or "FAILED: <what>" and counts it (the tests read these lines).
[[maybe_unused]] static void report(bool ok, const char* what) {
    if (ok) {
        printf("%s exact\n", what);
    } else {
        printf("FAILED: %s\n", what);
        failures++;
    }
}

// Whether every element i of `got` is want(i); the first that is not is printed.
[[maybe_unused]] static bool all_equal(const std::vector<float>& got, float (*want)(int)) {
    for (size_t i = 0; i < got.size(); i++) {
        if (got[i] != want((int)i)) {
            printf("element %zu: %f, not %f\n", i, got[i], want((int)i));
            return false;
        }
    }
    return true;
}

// How many of `graph`'s nodes are of `type`.
[[maybe_unused]] static int nodes_of(cudaGraph_t graph, cudaGraphNodeType type) {
    size_t count = 0;
    CHECK(cudaGraphGetNodes(graph, nullptr, &count));
    std::vector<cudaGraphNode_t> nodes(count);
    CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
    int found = 0;
    for (auto node : nodes) {
        cudaGraphNodeType t;
        CHECK(cudaGraphNodeGetType(node, &t));
        found += t == type;
    }
    return found;
}

// A memset node's parameters: n floats of d set to `value`.
[[maybe_unused]] static cudaMemsetParams fill(float* d, int n, float value) {
    cudaMemsetParams set = {};
    set.dst = d;
    memcpy(&set.value, &value, sizeof value);
    set.elementSize = 4;
    set.width = n;
    set.height = 1;
    return set;
}
