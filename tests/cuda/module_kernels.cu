// A module's and a library's kernels listed, as frameworks list what an image they loaded holds
// (PyTorch's cudaLibraryGetKernelCount): a PTX image of two kernels loaded from a file as a
// library (cudaLibraryLoadFromFile) and from memory as one (cudaLibraryLoadData) and as a
// module (cuModuleLoadData); each lists both kernels by name, and a listed kernel is the one a
// lookup by its name gives. A file that is not there is refused.
// Usage: module_kernels
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>
#include <unistd.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include "check.h"
#include "driver_entry.h"

// Two kernels that do nothing, as PTX any GPU since Ampere compiles.
static const char* ptx = R"(
.version 8.0
.target sm_80
.address_size 64

.visible .entry first()
{
    ret;
}

.visible .entry second(
    .param .u64 second_param_0
)
{
    ret;
}
)";

using KernelName = CUresult (*)(const char**, CUkernel);
using FunctionName = CUresult (*)(const char**, CUfunction);

// Whether `library`'s kernels, listed, are `first` and `second`.
static bool lists_both(cudaLibrary_t library, KernelName name_of) {
    unsigned count = 0;
    CHECK(cudaLibraryGetKernelCount(&count, library));
    std::vector<cudaKernel_t> kernels(count);
    CHECK(cudaLibraryEnumerateKernels(kernels.data(), count, library));
    std::set<std::string> names;
    for (auto k : kernels) {
        const char* name = nullptr;
        if (name_of((const char**)&name, (CUkernel)k) != CUDA_SUCCESS || name == nullptr) return false;
        names.insert(name);
    }
    return count == 2 && names == std::set<std::string>{"first", "second"};
}

int main() {
    CHECK(cudaFree(nullptr));  // the primary context, current
    auto kernel_name = (KernelName)entry_at("cuKernelGetName", 12030);
    auto function_name = (FunctionName)entry_at("cuFuncGetName", 12030);

    std::string path = "/tmp/module_kernels_" + std::to_string(getpid()) + ".ptx";
    FILE* f = fopen(path.c_str(), "w");
    fputs(ptx, f);
    fclose(f);
    cudaLibrary_t from_file, from_memory;
    CHECK(cudaLibraryLoadFromFile(&from_file, path.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0));
    remove(path.c_str());
    report(lists_both(from_file, kernel_name), "a library loaded from a file lists its two kernels");
    CHECK(cudaLibraryLoadData(&from_memory, ptx, nullptr, nullptr, 0, nullptr, nullptr, 0));
    report(lists_both(from_memory, kernel_name), "a library loaded from memory lists its two kernels");
    cudaKernel_t sentinel = (cudaKernel_t)0x5a5a, room_of_one[2] = {sentinel, sentinel};
    CHECK(cudaLibraryEnumerateKernels(room_of_one, 1, from_memory));
    report(room_of_one[0] != sentinel && room_of_one[1] == sentinel, "one kernel in a room of one");
    cudaLibrary_t missing;
    printf("a library file that is not there: %d\n",
           (int)cudaLibraryLoadFromFile(&missing, "/nonexistent/kernels.ptx", nullptr, nullptr, 0, nullptr, nullptr, 0));

    using Load = CUresult (*)(CUmodule*, const void*);
    using Count = CUresult (*)(unsigned*, CUmodule);
    using Enumerate = CUresult (*)(CUfunction*, unsigned, CUmodule);
    using Lookup = CUresult (*)(CUfunction*, CUmodule, const char*);
    using Unload = CUresult (*)(CUmodule);
    CUmodule module;
    if (((Load)entry("cuModuleLoadData"))(&module, ptx) != CUDA_SUCCESS) {
        printf("FAILED: cuModuleLoadData\n");
        return 1;
    }
    unsigned count = 0;
    CUresult counted = ((Count)entry_at("cuModuleGetFunctionCount", 12040))(&count, module);
    std::vector<CUfunction> functions(count);
    CUresult listed = ((Enumerate)entry_at("cuModuleEnumerateFunctions", 12040))(functions.data(), count, module);
    std::set<std::string> names;
    CUfunction second = nullptr, looked_up = nullptr;
    for (auto fn : functions) {
        const char* name = nullptr;
        if (function_name(&name, fn) == CUDA_SUCCESS && name) names.insert(name);
        if (name && strcmp(name, "second") == 0) second = fn;
    }
    report(counted == CUDA_SUCCESS && listed == CUDA_SUCCESS && count == 2 &&
               names == std::set<std::string>{"first", "second"},
           "a module lists its two kernels");
    ((Lookup)entry("cuModuleGetFunction"))(&looked_up, module, "second");
    report(second != nullptr && second == looked_up, "a listed kernel is the one looked up by its name");
    ((Unload)entry("cuModuleUnload"))(module);
    CHECK(cudaLibraryUnload(from_file));
    CHECK(cudaLibraryUnload(from_memory));
    printf("module_kernels: %s\n", failures == 0 ? "all exact" : "FAILED");
    return failures == 0 ? 0 : 1;
}
