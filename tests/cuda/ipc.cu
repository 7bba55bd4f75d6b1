// CUDA IPC between processes of one job: device memory and an event handed from one process to
// others by their 64-byte handles (cudaIpcMemHandle_t, cudaIpcEventHandle_t), as multi-process
// programs (PyTorch's multiprocessing, MPI ranks on one node) share them. The processes are
// this program run again (/proc/self/exe, the environment inherited: the same job), the
// handles on their command line as 128 lowercase hex digits.
//
// The parent (no arguments) copies 4096 floats (a[i] = i) to device 0, exports the memory and
// an interprocess event, and checks:
// - its own handle is refused it (CUDA opens handles of other processes only), and a plain
//   event (no cudaEventInterprocess) has no handle;
// - `child`: a child opens the memory (twice: the same address) and the event and says
//   `ready`; only then does the parent queue a kernel scaling the memory by 3 on a stream of its
//   own and record the event after it, synchronizing nothing else, and give the go-ahead. The
//   child waits on the event, adds one by a kernel of its own (3i + 1; i + 1 had it not waited)
//   and reads it back; cudaFree of the opened memory is refused, each open is closed once and
//   a third close refused. The parent then reads the child's writes;
// - `hold`: a child holds the memory open while the parent frees it: the memory stays until
//   the last process that opened it closes it, and the child still reads it whole;
// - `late`: once freed and closed everywhere, the handle opens nothing.
// A handshake: the child writes `ready` on its fd 3 and waits for a byte on its stdin.
// Each child exits 0 when all it checked held; the parent waits for each and exits 0 when all
// did. `ipc --native` (scripts/gpu-check's run on NVIDIA's own driver) leaves `hold` and `late`
// out: CUDA leaves a free before the importers' close undefined, where the pool keeps the memory.
// Usage: ipc [--native] | ipc child <memory> <event> | ipc hold <memory> | ipc late <memory>
// tests/tests/e2e/cuda_ipc.rs runs it through ac-cuda's libcuda.so.1.
#include <cstdio>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"
#include "children.h"

static const int n = 4096;

static_assert(sizeof(cudaIpcMemHandle_t) == 64, "a memory handle is 64 bytes");
static_assert(sizeof(cudaIpcEventHandle_t) == 64, "an event handle is 64 bytes");

// The stand-in's fixtures (cuda-standin runs kernels by their mangled names): streams.cu's and
// vector_add.cu's.
__global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

__global__ void vadd(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

// A call that must fail: prints "<what> refused: <code> (<name>)" and clears the error; one
// that succeeded prints FAILED and exits 1.
static void refused(const char* what, cudaError_t e) {
    if (e == cudaSuccess) {
        printf("FAILED: %s succeeded\n", what);
        exit(1);
    }
    printf("%s refused: %d (%s)\n", what, (int)e, cudaGetErrorName(e));
    cudaGetLastError();
}

// The 64 bytes of a handle as 128 lowercase hex digits (and back: false unless exactly that).
static void to_hex(const void* handle, char out[129]) {
    const unsigned char* bytes = (const unsigned char*)handle;
    for (int i = 0; i < 64; i++) snprintf(out + 2 * i, 3, "%02x", bytes[i]);
    out[128] = '\0';
}

static bool from_hex(const char* hex, void* handle) {
    if (strlen(hex) != 128) return false;
    unsigned char* bytes = (unsigned char*)handle;
    for (int i = 0; i < 128; i++) {
        char c = hex[i];
        int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (digit < 0) return false;
        if (i % 2 == 0) bytes[i / 2] = (unsigned char)(digit << 4);
        else bytes[i / 2] |= (unsigned char)digit;
    }
    return true;
}

// True when all n elements are 3i + 1 (the parent's scale by 3, then the child's one added: in
// the other order they would be 3i + 3); else prints the first that is not, after `who`.
static bool finished(const std::vector<float>& a, const char* who) {
    for (int i = 0; i < n; i++) {
        if (a[i] != 3.0f * i + 1) {
            printf("FAILED: %s: a[%d] = %g, expected %g\n", who, i, a[i], 3.0f * i + 1);
            return false;
        }
    }
    return true;
}

// The memory handle `hex` spells, or exit 2.
static cudaIpcMemHandle_t memory_handle(const char* hex) {
    cudaIpcMemHandle_t handle;
    if (!from_hex(hex, &handle)) {
        printf("FAILED: not a memory handle: %s\n", hex);
        exit(2);
    }
    return handle;
}

// `child <memory> <event>`: opens the parent's memory twice and its event, says `ready`, waits
// on the event after the go-ahead, adds one to the memory and checks it; a free of it is refused, two closes are not, a third is.
static int child(const char* memory_hex, const char* event_hex) {
    cudaIpcMemHandle_t mh = memory_handle(memory_hex);
    cudaIpcEventHandle_t eh;
    if (!from_hex(event_hex, &eh)) {
        printf("FAILED: not an event handle: %s\n", event_hex);
        return 2;
    }
    CHECK(cudaSetDevice(0));
    void *p = nullptr, *again = nullptr;
    CHECK(cudaIpcOpenMemHandle(&p, mh, cudaIpcMemLazyEnablePeerAccess));
    CHECK(cudaIpcOpenMemHandle(&again, mh, cudaIpcMemLazyEnablePeerAccess));
    if (again != p) {
        printf("FAILED: opened again at %p, first at %p\n", again, p);
        return 1;
    }
    printf("reopened at the same address\n");
    std::vector<float> host_ones(n, 1.0f);
    float* ones;
    CHECK(cudaMalloc(&ones, n * sizeof(float)));
    CHECK(cudaMemcpy(ones, host_ones.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    cudaEvent_t e;
    CHECK(cudaIpcOpenEventHandle(&e, eh));
    // Only now does the parent queue its scale and record the event: the child's kernel waits
    // for the scale through the event alone.
    if (!ready_and_go()) return 1;
    CHECK(cudaStreamWaitEvent(0, e, 0));
    vadd<<<(n + 255) / 256, 256>>>((const float*)p, ones, (float*)p, n);
    CHECK(cudaGetLastError());
    std::vector<float> back(n, -1);
    CHECK(cudaMemcpy(back.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost));
    if (!finished(back, "child")) return 1;
    printf("child: one added exact\n");
    CHECK(cudaFree(ones));
    // Opened memory is the exporter's: only cudaIpcCloseMemHandle lets it go.
    refused("free of opened memory", cudaFree(p));
    refused("stream-ordered free of opened memory", cudaFreeAsync(p, 0));
    // One close for each open; a third finds nothing open.
    CHECK(cudaIpcCloseMemHandle(p));
    CHECK(cudaIpcCloseMemHandle(p));
    refused("third close", cudaIpcCloseMemHandle(p));
    CHECK(cudaEventDestroy(e));
    return 0;
}

// `hold <memory>`: opens the memory, says `ready`, waits for the go-ahead (the parent
// freed the memory meanwhile), then reads the memory whole and closes it.
static int hold(const char* memory_hex) {
    cudaIpcMemHandle_t mh = memory_handle(memory_hex);
    CHECK(cudaSetDevice(0));
    void* p = nullptr;
    CHECK(cudaIpcOpenMemHandle(&p, mh, cudaIpcMemLazyEnablePeerAccess));
    if (!ready_and_go()) return 1;
    std::vector<float> back(n, -1);
    CHECK(cudaMemcpy(back.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost));
    if (!finished(back, "held child")) return 1;
    printf("child: memory kept after the parent freed it exact\n");
    CHECK(cudaIpcCloseMemHandle(p));
    return 0;
}

// `late <memory>`: the memory is freed and closed everywhere: opening it is refused.
static int late(const char* memory_hex) {
    cudaIpcMemHandle_t mh = memory_handle(memory_hex);
    CHECK(cudaSetDevice(0));
    void* p = nullptr;
    cudaError_t e = cudaIpcOpenMemHandle(&p, mh, cudaIpcMemLazyEnablePeerAccess);
    if (e == cudaSuccess) {
        printf("FAILED: the freed memory's handle opened at %p\n", p);
        return 1;
    }
    printf("late open refused: %d (%s)\n", (int)e, cudaGetErrorName(e));
    return 0;
}

static int parent(const char* self, bool native) {
    printf("ipc: %d elements\n", n);
    CHECK(cudaSetDevice(0));
    std::vector<float> host(n);
    for (int i = 0; i < n; i++) host[i] = (float)i;
    float* d_a;
    CHECK(cudaMalloc(&d_a, n * sizeof(float)));
    CHECK(cudaMemcpy(d_a, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));

    // The memory's handle; the exporter itself cannot open it.
    cudaIpcMemHandle_t mh;
    CHECK(cudaIpcGetMemHandle(&mh, d_a));
    void* own = nullptr;
    refused("own handle", cudaIpcOpenMemHandle(&own, mh, cudaIpcMemLazyEnablePeerAccess));

    // Only an interprocess event (which takes no timing) has a handle.
    cudaEvent_t plain;
    CHECK(cudaEventCreate(&plain));
    cudaIpcEventHandle_t plain_handle;
    refused("plain event", cudaIpcGetEventHandle(&plain_handle, plain));
    CHECK(cudaEventDestroy(plain));
    cudaEvent_t ev;
    CHECK(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming));
    cudaIpcEventHandle_t eh;
    CHECK(cudaIpcGetEventHandle(&eh, ev));
    char memory_hex[129], event_hex[129];
    to_hex(&mh, memory_hex);
    to_hex(&eh, event_hex);

    // A child opens both, then this process queues its scale and records the event after it
    // (synchronizing nothing else), then the child adds one to the memory after the event.
    Handshake adder = spawn_with_handshake(self, {"child", memory_hex, event_hex});
    if (!await_ready(adder, "child")) return 1;
    scale<<<(n + 255) / 256, 256, 0, s>>>(d_a, 3.0f, n);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(ev, s));
    go_and_wait(adder, "child");
    std::vector<float> back(n, -1);
    CHECK(cudaMemcpy(back.data(), d_a, n * sizeof(float), cudaMemcpyDeviceToHost));
    if (!finished(back, "parent")) return 1;
    printf("ipc: the child's writes seen exact\n");
    if (native) {
        printf("ipc: hold and late left out natively (a free before the importers' close is undefined in CUDA)\n");
        CHECK(cudaFree(d_a));
        CHECK(cudaEventDestroy(ev));
        CHECK(cudaStreamDestroy(s));
        printf("ipc: done\n");
        return 0;
    }

    // A child holds the memory open while this process frees it.
    Handshake holder = spawn_with_handshake(self, {"hold", memory_hex});
    if (!await_ready(holder, "hold")) return 1;
    CHECK(cudaFree(d_a));
    go_and_wait(holder, "hold");

    // Freed and closed everywhere: the handle opens nothing now.
    wait_for(spawn(self, {"late", memory_hex}, nullptr), "late");

    CHECK(cudaEventDestroy(ev));
    CHECK(cudaStreamDestroy(s));
    printf("ipc: done\n");
    return 0;
}

int main(int argc, char** argv) {
    // Line by line, so that the processes' lines interleave whole and none is lost to a crash.
    setvbuf(stdout, nullptr, _IOLBF, 0);
    if (argc == 1) return parent(argv[0], false);
    if (argc == 2 && strcmp(argv[1], "--native") == 0) return parent(argv[0], true);
    if (argc == 4 && strcmp(argv[1], "child") == 0) return child(argv[2], argv[3]);
    if (argc == 3 && strcmp(argv[1], "hold") == 0) return hold(argv[2]);
    if (argc == 3 && strcmp(argv[1], "late") == 0) return late(argv[2]);
    fprintf(stderr, "usage: ipc [--native] | ipc child <memory> <event> | ipc hold <memory> | ipc late <memory>\n");
    return 2;
}
