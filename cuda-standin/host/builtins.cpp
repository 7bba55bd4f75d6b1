// The backend's builtin kernels (`kernels.cu`, compiled here for the host) and their launcher,
// called by the stand-in's `cuLaunchKernel` path (src/host.rs). A launch runs its blocks one
// after another on the calling thread, and a block's threads one after another, each to its
// end; a kernel that waits at `__syncthreads` runs its block's threads as fibers instead, each
// one suspended at the barrier until all have reached it.

#include <ucontext.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <tuple>
#include <vector>

#include "cuda_host.h"

#include "../../ac-backend/src/device/cuda/kernels.cu"

thread_local uint3 threadIdx, blockIdx, blockDim, gridDim;

namespace {

// The block's threads as fibers, while a kernel that synchronizes runs (else null).
struct Fibers {
    static constexpr size_t STACK = 64 * 1024;
    ucontext_t scheduler;
    std::vector<ucontext_t> threads;
    std::vector<bool> ended;
    std::unique_ptr<char[]> stacks;
    unsigned current = 0;
    void (*call)(void*) = nullptr;  // runs the kernel's body, `body`
    void* body = nullptr;
};
thread_local Fibers* fibers = nullptr;

// A fiber's start: the kernel's body; returning resumes the scheduler (`uc_link`).
void fiber_entry() {
    fibers->call(fibers->body);
    fibers->ended[fibers->current] = true;
}

// A device address resolved to the host memory behind it; null: outside every allocation of
// the launching context (the launch faults, as a GPU would on the first access).
typedef void* (*Resolve)(void* memory, uint64_t address);

struct Args {
    const void* const* values;  // kernelParams: one pointer to each parameter's bytes
    Resolve resolve;
    void* memory;
    bool faulted = false;
};

template <typename T>
struct Param {
    static T read(Args& args, unsigned i) {
        T value;
        std::memcpy(&value, args.values[i], sizeof value);
        return value;
    }
};

template <typename T>
struct Param<T*> {
    static T* read(Args& args, unsigned i) {
        uint64_t address;
        std::memcpy(&address, args.values[i], sizeof address);
        void* host = args.resolve(args.memory, address);
        // A null pointer stays null (a kernel that never reads it runs, as on a GPU).
        if (host == nullptr && address != 0) args.faulted = true;
        return static_cast<T*>(host);
    }
};

template <typename... P, size_t... I>
std::tuple<P...> read_params(Args& args, std::index_sequence<I...>) {
    return std::tuple<P...>{Param<P>::read(args, I)...};
}

uint3 coordinates(uint64_t i, const uint3& extent) {
    return uint3{unsigned(i % extent.x), unsigned(i / extent.x % extent.y),
                 unsigned(i / ((uint64_t)extent.x * extent.y))};
}

template <typename F>
void run_block_in_order(F& body, uint64_t threads) {
    for (uint64_t t = 0; t < threads; ++t) {
        threadIdx = coordinates(t, blockDim);
        body();
    }
}

// Runs the block's threads as fibers: each to its next barrier (or its end) in turn, until all
// have ended. A thread that has ended counts as arrived at every later barrier.
template <typename F>
void run_block_as_fibers(F& body, uint64_t threads, Fibers& f) {
    f.call = [](void* b) { (*static_cast<F*>(b))(); };
    f.body = &body;
    f.ended.assign(threads, false);
    for (uint64_t t = 0; t < threads; ++t) {
        getcontext(&f.threads[t]);
        f.threads[t].uc_stack.ss_sp = &f.stacks[t * Fibers::STACK];
        f.threads[t].uc_stack.ss_size = Fibers::STACK;
        f.threads[t].uc_link = &f.scheduler;
        makecontext(&f.threads[t], fiber_entry, 0);
    }
    for (uint64_t left = threads; left > 0;) {
        for (uint64_t t = 0; t < threads; ++t) {
            if (f.ended[t]) continue;
            f.current = t;
            threadIdx = coordinates(t, blockDim);
            swapcontext(&f.scheduler, &f.threads[t]);
            if (f.ended[t]) --left;
        }
    }
}

template <bool Synchronizes, typename... P>
int launch(void (*kernel)(P...), const unsigned grid[3], const unsigned block[3], Args& args) {
    std::tuple<P...> params = read_params<P...>(args, std::index_sequence_for<P...>{});
    if (args.faulted) return 2;
    gridDim = uint3{grid[0], grid[1], grid[2]};
    blockDim = uint3{block[0], block[1], block[2]};
    const uint64_t blocks = (uint64_t)grid[0] * grid[1] * grid[2];
    const uint64_t threads = (uint64_t)block[0] * block[1] * block[2];
    auto body = [&] { std::apply(kernel, params); };
    Fibers f;
    if (Synchronizes) {
        f.threads.resize(threads);
        f.stacks.reset(new char[Fibers::STACK * threads]);
        fibers = &f;
    }
    for (uint64_t b = 0; b < blocks; ++b) {
        blockIdx = coordinates(b, gridDim);
        if (Synchronizes) {
            run_block_as_fibers(body, threads, f);
        } else {
            run_block_in_order(body, threads);
        }
    }
    fibers = nullptr;
    return 0;
}

template <typename... P>
constexpr unsigned count(void (*)(P...)) {
    return sizeof...(P);
}

template <typename... P>
void sizes(void (*)(P...), unsigned* out) {
    unsigned i = 0;
    ((out[i++] = sizeof(P)), ...);
}

struct Builtin {
    const char* name;
    int (*launch)(const unsigned*, const unsigned*, Args&);
    unsigned (*signature)(unsigned*, unsigned);
};

#define BUILTIN(kernel, synchronizes)                                                               \
    Builtin {                                                                                        \
        #kernel, [](const unsigned* g, const unsigned* b, Args& a) { return launch<synchronizes>(kernel, g, b, a); }, \
            [](unsigned* out, unsigned max) {                                                        \
                if (count(kernel) <= max) sizes(kernel, out);                                        \
                return count(kernel);                                                                \
            }                                                                                        \
    }

// Every kernel of `kernels.cu`; `true` where it waits at `__syncthreads`.
const Builtin BUILTINS[] = {
    BUILTIN(fill, false),       BUILTIN(vector_add, false), BUILTIN(saxpy, false),
    BUILTIN(sgemm, false),      BUILTIN(reduce_sum, true),  BUILTIN(blas_sgemm, false),
    BUILTIN(blas_dgemm, false), BUILTIN(blas_gemm_ex, false), BUILTIN(blas_cgemm, false),
    BUILTIN(blas_zgemm, false), BUILTIN(blas_sgemmt, false), BUILTIN(blas_dgemmt, false),
    BUILTIN(blas_cgemmt, false), BUILTIN(blas_zgemmt, false), BUILTIN(blas_sgemm_tri, false), BUILTIN(blas_dgemm_tri, false),
    BUILTIN(blas_cgemm_tri, false), BUILTIN(blas_zgemm_tri, false), BUILTIN(blas_strsm, false), BUILTIN(blas_dtrsm, false),
    BUILTIN(blas_ctrsm, false), BUILTIN(blas_ztrsm, false), BUILTIN(blas_sgetrf, false),
    BUILTIN(blas_dgetrf, false), BUILTIN(blas_cgetrf, false), BUILTIN(blas_zgetrf, false),
    BUILTIN(blas_sgetrs, false), BUILTIN(blas_dgetrs, false), BUILTIN(blas_cgetrs, false),
    BUILTIN(blas_zgetrs, false), BUILTIN(blas_sabs_reduce, false), BUILTIN(blas_dabs_reduce, false),
    BUILTIN(blas_cabs_reduce, false), BUILTIN(blas_zabs_reduce, false), BUILTIN(blas_stpttr, false),
    BUILTIN(blas_dtpttr, false), BUILTIN(blas_ctpttr, false), BUILTIN(blas_ztpttr, false),
    BUILTIN(blas_sgeqrf, false), BUILTIN(blas_dgeqrf, false), BUILTIN(blas_cgeqrf, false),
    BUILTIN(blas_zgeqrf, false), BUILTIN(blas_sgels, false), BUILTIN(blas_dgels, false),
    BUILTIN(blas_cgels, false), BUILTIN(blas_zgels, false), BUILTIN(blas_activation, false), BUILTIN(blas_copy, false), BUILTIN(dft_f32, false), BUILTIN(dft_f64, false),
    BUILTIN(dft_ex, false), BUILTIN(blas_epilogue, false),
};

const Builtin* find(const char* name) {
    for (const Builtin& b : BUILTINS) {
        if (std::strcmp(b.name, name) == 0) return &b;
    }
    return nullptr;
}

}  // namespace

void __syncthreads() {
    if (fibers == nullptr) {
        std::fprintf(stderr, "cuda-standin: __syncthreads in a kernel not marked as synchronizing\n");
        std::abort();
    }
    swapcontext(&fibers->threads[fibers->current], &fibers->scheduler);
}

// The parameter sizes of builtin kernel `name`, as g++ laid out `kernels.cu`'s signature: the
// count (written to `out` when at most `max`), or -1 for a name that is not a builtin.
extern "C" int standin_builtin_signature(const char* name, unsigned* out, unsigned max) {
    const Builtin* b = find(name);
    return b == nullptr ? -1 : (int)b->signature(out, max);
}

// Runs builtin kernel `name` on the grid and block given, its parameters read from `values`
// as `cuLaunchKernel` reads kernelParams, device pointers resolved through `resolve`.
// 0: it ran; 1: no such builtin; 2: a pointer parameter outside the context's allocations.
extern "C" int standin_builtin_launch(const char* name, const unsigned* grid, const unsigned* block,
                                      const void* const* values, Resolve resolve, void* memory) {
    const Builtin* b = find(name);
    if (b == nullptr) return 1;
    Args args{values, resolve, memory};
    return b->launch(grid, block, args);
}
