// Device code linked at run time, as Numba links every kernel and CuPy its -rdc=true modules
// (cuLinkCreate, cuLinkAddData, cuLinkAddFile, cuLinkComplete): a kernel calling a function of
// another PTX input (relocatable device code: nvcc -rdc=true -ptx), one input from memory and
// one from a file, linked with the logs, verbosity and wall time asked for; the image loads and
// its kernel runs, before and after the link state is destroyed; two threads link at once, an
// input verbose by its own options; a link missing the function is refused with it named in
// the error log, and malformed inputs are refused (an object that is PTX, a library whose
// member claims bytes past its end, each at cuLinkAddData with its reason in the error log); a
// link with the device runtime library, as CuPy links every -rdc=true module, runs exact; and
// modules loaded with the JIT's log options write them (cuModuleLoadDataEx).
// Usage: link <libcudadevrt.a>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
#include <unistd.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include "check.h"
#include "driver_entry.h"

// scale(x, f, n): x[i] = times(x[i], f), times external (nvcc -rdc=true -ptx -arch=compute_80,
// its version lowered to 8.0 for drivers since CUDA 12.0).
static const char* caller_ptx = R"(
.version 8.0
.target sm_80
.address_size 64

.extern .func  (.param .b32 func_retval0) _Z5timesff
(
	.param .b32 _Z5timesff_param_0,
	.param .b32 _Z5timesff_param_1
)
;

.visible .entry _Z5scalePffi(
	.param .u64 _Z5scalePffi_param_0,
	.param .f32 _Z5scalePffi_param_1,
	.param .u32 _Z5scalePffi_param_2
)
{
	.reg .pred 	%p<2>;
	.reg .f32 	%f<4>;
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<5>;

	ld.param.u64 	%rd1, [_Z5scalePffi_param_0];
	ld.param.f32 	%f1, [_Z5scalePffi_param_1];
	ld.param.u32 	%r2, [_Z5scalePffi_param_2];
	mov.u32 	%r3, %ctaid.x;
	mov.u32 	%r4, %ntid.x;
	mov.u32 	%r5, %tid.x;
	mad.lo.s32 	%r1, %r3, %r4, %r5;
	setp.ge.s32 	%p1, %r1, %r2;
	@%p1 bra 	$L__BB0_2;

	cvta.to.global.u64 	%rd2, %rd1;
	mul.wide.s32 	%rd3, %r1, 4;
	add.s64 	%rd4, %rd2, %rd3;
	ld.global.f32 	%f2, [%rd4];
	{ // callseq 0, 0
	.param .b32 param0;
	st.param.f32 	[param0+0], %f2;
	.param .b32 param1;
	st.param.f32 	[param1+0], %f1;
	.param .b32 retval0;
	call.uni (retval0),
	_Z5timesff,
	(
	param0,
	param1
	);
	ld.param.f32 	%f3, [retval0+0];
	} // callseq 0
	st.global.f32 	[%rd4], %f3;

$L__BB0_2:
	ret;
}
)";

// times(a, b) = a * b, defined for the caller.
static const char* times_ptx = R"(
.version 8.0
.target sm_80
.address_size 64

.visible .func  (.param .b32 func_retval0) _Z5timesff(
	.param .b32 _Z5timesff_param_0,
	.param .b32 _Z5timesff_param_1
)
{
	.reg .f32 	%f<4>;

	ld.param.f32 	%f1, [_Z5timesff_param_0];
	ld.param.f32 	%f2, [_Z5timesff_param_1];
	mul.f32 	%f3, %f1, %f2;
	st.param.f32 	[func_retval0+0], %f3;
	ret;
}
)";

using Create = CUresult (*)(unsigned, CUjit_option*, void**, CUlinkState*);
using AddData = CUresult (*)(CUlinkState, CUjitInputType, void*, size_t, const char*, unsigned, CUjit_option*, void**);
using AddFile = CUresult (*)(CUlinkState, CUjitInputType, const char*, unsigned, CUjit_option*, void**);
using Complete = CUresult (*)(CUlinkState, void**, size_t*);
using Destroy = CUresult (*)(CUlinkState);
using Load = CUresult (*)(CUmodule*, const void*);
using Lookup = CUresult (*)(CUfunction*, CUmodule, const char*);
using Launch = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                            void**, void**);
using Unload = CUresult (*)(CUmodule);

static Create create;
static AddData add_data;
static AddFile add_file;
static Complete complete;
static Destroy destroy;

static const int N = 1000;

// Runs the linked image's scale on x (x[i] = i to start) `times` times by `f`; whether x[i] is
// then i * f^times.
static bool scales(CUmodule module, float f, int times) {
    CUfunction scale;
    if (((Lookup)entry("cuModuleGetFunction"))(&scale, module, "_Z5scalePffi") != CUDA_SUCCESS) return false;
    std::vector<float> x(N);
    for (int i = 0; i < N; i++) x[i] = (float)i;
    float* d;
    CHECK(cudaMalloc(&d, N * sizeof(float)));
    CHECK(cudaMemcpy(d, x.data(), N * sizeof(float), cudaMemcpyHostToDevice));
    int n = N;
    void* args[] = {&d, &f, &n};
    bool launched = true;
    for (int t = 0; t < times; t++) {
        launched &= ((Launch)entry("cuLaunchKernel"))(scale, (N + 255) / 256, 1, 1, 256, 1, 1, 0, nullptr, args,
                                                      nullptr) == CUDA_SUCCESS;
    }
    CHECK(cudaMemcpy(x.data(), d, N * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(cudaFree(d));
    float by = 1;
    for (int t = 0; t < times; t++) by *= f;
    for (int i = 0; i < N; i++) {
        if (x[i] != (float)i * by) {
            printf("element %d: %f, not %f\n", i, x[i], (float)i * by);
            return false;
        }
    }
    return launched;
}

// Completes link `state`, loads its image and destroys it; the module, or null.
static CUmodule complete_and_load(CUlinkState state) {
    void* image = nullptr;
    CUmodule module = nullptr;
    if (complete(state, &image, nullptr) == CUDA_SUCCESS) ((Load)entry("cuModuleLoadData"))(&module, image);
    destroy(state);
    return module;
}

// Links the caller, times and `library` (from a file, as CuPy adds libcudadevrt.a); the loaded
// module, or null; whether the library was taken.
static CUmodule link_with_library(const char* library, bool* taken) {
    CUlinkState state;
    if (create(0, nullptr, nullptr, &state) != CUDA_SUCCESS) return nullptr;
    add_data(state, CU_JIT_INPUT_PTX, (void*)caller_ptx, strlen(caller_ptx) + 1, "caller.ptx", 0, nullptr, nullptr);
    add_data(state, CU_JIT_INPUT_PTX, (void*)times_ptx, strlen(times_ptx) + 1, "times.ptx", 0, nullptr, nullptr);
    *taken = add_file(state, CU_JIT_INPUT_LIBRARY, library, 0, nullptr, nullptr) == CUDA_SUCCESS;
    return complete_and_load(state);
}

// Modules loaded with the JIT's log options, as Numba and XLA load theirs: one calling a function
// it does not define is refused, its error log naming it; one that loads leaves its error log
// empty; the wall time is written back.
static void load_with_logs() {
    using LoadEx = CUresult (*)(CUmodule*, const void*, unsigned, CUjit_option*, void**);
    LoadEx load_ex = (LoadEx)entry("cuModuleLoadDataEx");
    static const char* empty_ptx = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry _Z5emptyv()\n{\n\tret;\n}\n";
    char log[4096] = "x";
    float wall = -1;
    CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_WALL_TIME};
    void* values[] = {log, (void*)(uintptr_t)sizeof(log), nullptr};
    memcpy(&values[2], &wall, sizeof(wall));  // -1 until a load writes its time
    CUmodule module = nullptr;
    CUresult unresolved = load_ex(&module, caller_ptx, 3, options, values);
    report(unresolved != CUDA_SUCCESS && strstr(log, "_Z5timesff") != nullptr,
           "a module calling a function it does not define refused, its error log naming it");
    strcpy(log, "x");
    values[1] = (void*)(uintptr_t)sizeof(log);
    memcpy(&values[2], &wall, sizeof(wall));
    CUresult loaded = load_ex(&module, empty_ptx, 3, options, values);
    memcpy(&wall, &values[2], sizeof(wall));
    // Emptied, or left alone with its size's value 0: the driver may do either.
    report(loaded == CUDA_SUCCESS && (log[0] == 0 || (log[0] == 'x' && (uintptr_t)values[1] == 0)),
           "a module that loads, its error log empty");
    report(wall >= 0, "the wall time of a load written back");
    if (loaded == CUDA_SUCCESS) ((Unload)entry("cuModuleUnload"))(module);
}

// Links the caller and times from memory, the caller verbose by its own options (the link's
// say nothing of verbosity); the loaded module, or null; whether the info log was written.
static CUmodule link_both(bool* logged) {
    char info[4096] = "";
    CUjit_option options[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
    void* values[] = {info, (void*)(uintptr_t)sizeof(info)};
    CUjit_option verbose = CU_JIT_LOG_VERBOSE;
    void* on = (void*)1;
    CUlinkState state;
    if (create(2, options, values, &state) != CUDA_SUCCESS) return nullptr;
    add_data(state, CU_JIT_INPUT_PTX, (void*)caller_ptx, strlen(caller_ptx) + 1, "caller.ptx", 1, &verbose, &on);
    add_data(state, CU_JIT_INPUT_PTX, (void*)times_ptx, strlen(times_ptx) + 1, "times.ptx", 0, nullptr, nullptr);
    CUmodule module = complete_and_load(state);
    *logged = info[0] != 0;
    return module;
}

int main(int argc, char** argv) {
    if (argc < 2) {
        printf("FAILED: usage: link <libcudadevrt.a>\n");
        return 1;
    }
    CHECK(cudaFree(nullptr));  // the primary context, current
    create = (Create)entry("cuLinkCreate");
    add_data = (AddData)entry("cuLinkAddData");
    add_file = (AddFile)entry("cuLinkAddFile");
    complete = (Complete)entry("cuLinkComplete");
    destroy = (Destroy)entry("cuLinkDestroy");

    std::string path = "/tmp/link_times_" + std::to_string(getpid()) + ".ptx";
    FILE* f = fopen(path.c_str(), "w");
    if (f == nullptr || fputs(times_ptx, f) < 0 || fclose(f) != 0) {
        printf("FAILED: cannot write %s\n", path.c_str());
        return 1;
    }

    // One input from memory (its size without the NUL), one from a file; the logs, verbosity,
    // an optimization level and the wall time asked for.
    char info[4096] = "x", errors[4096] = "x";
    float wall = -1;
    CUjit_option options[] = {CU_JIT_INFO_LOG_BUFFER,        CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                              CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_LOG_VERBOSE,             CU_JIT_OPTIMIZATION_LEVEL,
                              CU_JIT_WALL_TIME};
    void* values[] = {info, (void*)(uintptr_t)sizeof(info), errors, (void*)(uintptr_t)sizeof(errors), (void*)1,
                      (void*)3, nullptr};
    CUlinkState state;
    CHECK((cudaError_t)create(7, options, values, &state));
    CUresult added = add_data(state, CU_JIT_INPUT_PTX, (void*)caller_ptx, strlen(caller_ptx), "caller.ptx", 0,
                              nullptr, nullptr);
    CUresult filed = add_file(state, CU_JIT_INPUT_PTX, path.c_str(), 0, nullptr, nullptr);
    remove(path.c_str());
    void* image = nullptr;
    size_t size = 0;
    CUresult linked = complete(state, &image, &size);
    report(added == CUDA_SUCCESS && filed == CUDA_SUCCESS && linked == CUDA_SUCCESS && image != nullptr && size > 0,
           "two inputs linked");
    memcpy(&wall, &values[6], sizeof(wall));
    report(wall > 0, "the wall time written back");
    // The size's value now says how much of the buffer the log filled.
    report(info[0] != 0 && info[0] != 'x' && (uintptr_t)values[1] > 0 && (uintptr_t)values[1] < sizeof(info),
           "the verbose info log written back");
    // Emptied, or left alone with its size's value 0: the driver may do either.
    report(errors[0] == 0 || (errors[0] == 'x' && (uintptr_t)values[3] == 0), "an empty error log");
    CUmodule module = nullptr;
    CUresult loaded = linked == CUDA_SUCCESS ? ((Load)entry("cuModuleLoadData"))(&module, image) : linked;
    report(loaded == CUDA_SUCCESS && scales(module, 3, 1), "the linked kernel calling the other input's function");
    CHECK((cudaError_t)destroy(state));
    report(loaded == CUDA_SUCCESS && scales(module, 2, 2), "the module after its link state is destroyed");
    ((Unload)entry("cuModuleUnload"))(module);

    // Two threads, each linking and running its own.
    bool ok[2] = {false, false}, logged[2] = {false, false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; t++) {
        threads.emplace_back([t, &ok, &logged] {
            CHECK(cudaSetDevice(0));
            CUmodule m = link_both(&logged[t]);
            ok[t] = m != nullptr && scales(m, (float)(t + 2), 1);
            if (m) ((Unload)entry("cuModuleUnload"))(m);
        });
    }
    for (auto& t : threads) t.join();
    report(ok[0] && ok[1], "two threads linking at once");
    printf("an input's own verbosity: info log %s\n", logged[0] && logged[1] ? "written" : "empty");

    bool taken = false;
    CUmodule with_library = link_with_library(argv[1], &taken);
    report(taken && with_library != nullptr && scales(with_library, 5, 1), "a link with the device runtime library");
    if (with_library) ((Unload)entry("cuModuleUnload"))(with_library);
    load_with_logs();

    // The caller alone: its function is undefined, and the error log names it.
    char missing_log[4096] = "", missing_info[4096] = "x";
    CUjit_option log_options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_INFO_LOG_BUFFER,
                                  CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
    void* log_values[] = {missing_log, (void*)(uintptr_t)sizeof(missing_log), missing_info,
                          (void*)(uintptr_t)sizeof(missing_info)};
    CHECK((cudaError_t)create(4, log_options, log_values, &state));
    add_data(state, CU_JIT_INPUT_PTX, (void*)caller_ptx, strlen(caller_ptx) + 1, "caller.ptx", 0, nullptr, nullptr);
    CUresult undefined = complete(state, &image, &size);
    report(undefined != CUDA_SUCCESS && strstr(missing_log, "_Z5timesff") != nullptr,
           "a link missing a function refused, the error log naming it");
    printf("the info log of a refused link: %s\n", missing_info[0] == 'x' ? "left as it was" : "written");
    CUjit_option target = CU_JIT_TARGET;
    void* target_value = (void*)(uintptr_t)CU_TARGET_COMPUTE_80;
    printf("an input's own target: %d\n", (int)add_data(state, CU_JIT_INPUT_PTX, (void*)times_ptx,
                                                         strlen(times_ptx) + 1, "t", 1, &target, &target_value));
    printf("an input type cuda.h does not define: %d\n",
           (int)add_data(state, (CUjitInputType)99, (void*)times_ptx, strlen(times_ptx) + 1, "t", 0, nullptr, nullptr));
    printf("an input of no bytes: %d\n",
           (int)add_data(state, CU_JIT_INPUT_PTX, nullptr, 0, "t", 0, nullptr, nullptr));
    printf("a file that is not there: %d\n",
           (int)add_file(state, CU_JIT_INPUT_PTX, "/nonexistent/times.ptx", 0, nullptr, nullptr));
    CHECK((cudaError_t)destroy(state));

    // Inputs that are not what they are declared as, each refused where it is added, the reason
    // in the error log: an object that is PTX; a library whose one member claims a megabyte
    // where 64 bytes follow (the megabyte inside this program's memory, for a driver that reads on).
    char refused_log[4096] = "";
    CUjit_option refused_options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void* refused_values[] = {refused_log, (void*)(uintptr_t)sizeof(refused_log)};
    CHECK((cudaError_t)create(2, refused_options, refused_values, &state));
    printf("an object that is PTX: %d\n", (int)add_data(state, CU_JIT_INPUT_OBJECT, (void*)times_ptx,
                                                          strlen(times_ptx) + 1, "times.o", 0, nullptr, nullptr));
    printf("its reason in the error log: %s\n", strstr(refused_log, "times.o") ? "written" : "not written");
    std::vector<char> library((1 << 20) + 4096, 0);
    int header = snprintf(library.data(), 70, "!<arch>\n%-16s%-12d%-6d%-6d%-8d%-10d`\n", "k.o/", 0, 0, 0, 644, 1 << 20);
    printf("a library member past its end: %d\n", (int)add_data(state, CU_JIT_INPUT_LIBRARY, library.data(),
                                                                  header + 64, "cut.a", 0, nullptr, nullptr));
    CHECK((cudaError_t)destroy(state));
    CUjit_option fallback = CU_JIT_FALLBACK_STRATEGY;
    void* prefer_ptx = (void*)(uintptr_t)CU_PREFER_PTX;
    CUlinkState never = nullptr;
    printf("a fallback strategy for a link: %d\n", (int)create(1, &fallback, &prefer_ptx, &never));
    if (never != nullptr) destroy(never);

    printf("link: %s\n", failures == 0 ? "all exact" : "FAILED");
    return failures == 0 ? 0 : 1;
}
