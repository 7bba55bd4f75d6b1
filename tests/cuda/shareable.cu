// Virtual memory management shared between processes by shareable handles: physical memory
// made with `requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR` is exported as a
// file descriptor (cuMemExportToShareableHandle), handed to another process, imported there
// (cuMemImportFromShareableHandle) and mapped into that process's own reserved range. PyTorch's
// expandable segments (torch.multiprocessing of their tensors) and NCCL's cuMem buffers share
// memory between the processes of a node so, where cudaIpc* handles (ipc.cu) cannot reach it.
// The other processes are this program run again (/proc/self/exe, the environment inherited:
// the same job), the descriptor inherited, its number on the command line.
//
// The parent (no arguments) maps one piece of the minimum granularity (a[i] = 3i) and checks:
// - physical memory made without a requested handle type has no descriptor to export;
// - the descriptor imports in the exporter's own process: a second mapping, the same bytes;
// - `reader`: a child imports the descriptor, reads its properties (pinned, device 0, POSIX
//   descriptors requested), maps it, reads 3i, writes 3i + 1 and says `ready`; the parent reads
//   the child's writes through its own mapping, then gives the go-ahead (the child unmaps,
//   releases and frees its range);
// - `kept`: the parent exports a second descriptor and releases its handle (its mapping holds
//   the memory); a child imports the descriptor and says `ready`; the parent unmaps and frees
//   everything of its own; after the go-ahead the child maps the memory and still reads 3i + 1
//   (the memory lives while a handle or mapping of any process does, natively too);
// - a descriptor that is no shareable handle (/dev/null) is refused;
// - every descriptor closed, the parent holds none it did not hold before it began (but for
//   sockets: the connections a driver opens, as the shim's bulk-copy lanes).
// Each child exits 0 when all it checked held; the parent exits 0 when all did.
// `shareable --native` (NVIDIA's own driver) shows what it leaves unchecked there: the handle
// types an import reports, and the descriptors open since the start (the driver's own, which it
// may open when first asked for memory).
// The driver's calls are taken as vmm.cu takes them (cudaGetDriverEntryPointByVersion): no
// -lcuda. The handshake and the spawning are children.h's (ipc.cu's too).
// Usage: shareable [--native] | shareable reader <fd> | shareable kept <fd>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>

#include "check.h"
#include "driver_entry.h"
#include "children.h"

static const CUmemAllocationHandleType FD = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;

// The driver's calls, from the runtime's entry points (set by init).
#define DRIVER_CALLS(X)                                                                        \
    X(cuGetErrorName) X(cuDeviceGetAttribute) X(cuMemGetAllocationGranularity) X(cuMemCreate)  \
    X(cuMemRelease) X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemMap) X(cuMemUnmap)       \
    X(cuMemSetAccess) X(cuMemExportToShareableHandle) X(cuMemImportFromShareableHandle)        \
    X(cuMemGetAllocationPropertiesFromHandle) X(cuMemcpyHtoD) X(cuMemcpyDtoH)
#define DECLARE(name) static decltype(&name) p_##name = nullptr;
DRIVER_CALLS(DECLARE)

static const char* error_name(CUresult r) {
    const char* name = nullptr;
    return p_cuGetErrorName(r, &name) == CUDA_SUCCESS && name ? name : "?";
}

// A driver call that must succeed, as CHECK for the runtime's.
#define CU(call)                                                                    \
    do {                                                                            \
        CUresult r_ = (call);                                                       \
        if (r_ != CUDA_SUCCESS) {                                                   \
            printf("FAILED %s: %d %s\n", #call, (int)r_, error_name(r_));           \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

// A call that must fail: prints "<what> refused: <code> (<name>)"; one that succeeded prints
// FAILED and exits 1.
static void refused(const char* what, CUresult r) {
    if (r == CUDA_SUCCESS) {
        printf("FAILED: %s succeeded\n", what);
        exit(1);
    }
    printf("%s refused: %d (%s)\n", what, (int)r, error_name(r));
}

static size_t gran = 0;  // one piece: the minimum granularity of shareable memory
static int n = 0;        // its ints

// Pinned memory on device 0, exportable as a POSIX descriptor when `shareable`.
static CUmemAllocationProp pinned(bool shareable) {
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    if (shareable) prop.requestedHandleTypes = FD;
    return prop;
}

// Device 0's primary context current (the runtime's), the driver's calls found, the piece's
// size known.
static void init() {
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(0));
#define LOAD(name) p_##name = (decltype(&name))entry(#name);
    DRIVER_CALLS(LOAD)
    CUmemAllocationProp prop = pinned(true);
    CU(p_cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    n = (int)(gran / sizeof(int));
}

// A range of one piece reserved, `h` mapped there, readable and writable on device 0.
static CUdeviceptr map_range(CUmemGenericAllocationHandle h) {
    CUdeviceptr at = 0;
    CU(p_cuMemAddressReserve(&at, gran, 0, 0, 0));
    CU(p_cuMemMap(at, gran, 0, h, 0));
    CUmemAccessDesc access = {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU(p_cuMemSetAccess(at, gran, &access, 1));
    return at;
}

static void unmap_range(CUdeviceptr at) {
    CHECK(cudaDeviceSynchronize());
    CU(p_cuMemUnmap(at, gran));
    CU(p_cuMemAddressFree(at, gran));
}

// a[i] = 3i + plus over the piece at `at`, and whether it holds that (the first element that
// does not is printed after `who`).
static void write_pattern(CUdeviceptr at, int plus) {
    std::vector<int> host(n);
    for (int i = 0; i < n; i++) host[i] = 3 * i + plus;
    CU(p_cuMemcpyHtoD(at, host.data(), gran));
    CHECK(cudaDeviceSynchronize());
}

static bool holds_pattern(CUdeviceptr at, int plus, const char* who) {
    std::vector<int> host(n, -1);
    CU(p_cuMemcpyDtoH(host.data(), at, gran));
    for (int i = 0; i < n; i++) {
        if (host[i] != 3 * i + plus) {
            printf("%s: a[%d] = %d, expected %d\n", who, i, host[i], 3 * i + plus);
            return false;
        }
    }
    return true;
}

static CUmemGenericAllocationHandle import_fd(int fd) {
    CUmemGenericAllocationHandle h = 0;
    CU(p_cuMemImportFromShareableHandle(&h, (void*)(uintptr_t)fd, FD));
    return h;
}

// A fresh descriptor of `h`, close-on-exec (a child inherits only the copy made for it).
static int export_fd(CUmemGenericAllocationHandle h) {
    int fd = -1;
    CU(p_cuMemExportToShareableHandle(&fd, h, FD, 0));
    if (fd < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
        printf("FAILED: exported descriptor %d: %s\n", fd, strerror(errno));
        exit(1);
    }
    return fd;
}

// The process's open descriptors (/proc/self/fd, less the directory's own).
static std::vector<int> open_fds() {
    std::vector<int> fds;
    DIR* d = opendir("/proc/self/fd");
    if (!d) return fds;
    while (dirent* e = readdir(d))
        if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d)) fds.push_back(atoi(e->d_name));
    closedir(d);
    return fds;
}

// This program again as the `what` child of descriptor `fd`: a copy of it above 9 without
// close-on-exec (so that the child inherits it, and a dup2 onto 0 or 3 never replaces it), its
// number on the command line; the copy is closed here once the child has it.
static Handshake spawn_child(const char* self, const char* what, int fd) {
    int passed = fcntl(fd, F_DUPFD, 10);
    if (passed < 0) { perror("fcntl"); exit(1); }
    char number[16];
    snprintf(number, sizeof number, "%d", passed);
    Handshake h = spawn_with_handshake(self, {what, number});
    close(passed);
    return h;
}

// ---- The children. ----

// In a child: the memory of the descriptor `arg` names, imported (and the descriptor closed).
static CUmemGenericAllocationHandle child_import(const char* arg) {
    char* end = nullptr;
    long fd = strtol(arg, &end, 10);
    if (*arg == '\0' || *end != '\0' || fd < 0 || fd > INT_MAX) {
        printf("FAILED: not a descriptor: %s\n", arg);
        exit(2);
    }
    init();
    CUmemGenericAllocationHandle h = import_fd((int)fd);
    close((int)fd);  // the imported handle holds the memory now
    return h;
}

// `reader <fd>`: reads the parent's bytes, writes 3i + 1, says `ready` (written); after the
// go-ahead lets go of everything.
static int reader(const char* arg) {
    CUmemGenericAllocationHandle h = child_import(arg);
    CUmemAllocationProp got = {};
    CU(p_cuMemGetAllocationPropertiesFromHandle(&got, h));
    // Natively the handle types an import reports are the driver's to say (not known yet): shown,
    // not checked.
    bool native = getenv("SHAREABLE_NATIVE") != nullptr;
    bool same = got.type == CU_MEM_ALLOCATION_TYPE_PINNED && got.location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
                got.location.id == 0 && (native || (got.requestedHandleTypes & FD) != 0);
    if (!same || native)
        printf("child: properties: type %d, location %d %d, handle types %d\n", (int)got.type,
               (int)got.location.type, got.location.id, (int)got.requestedHandleTypes);
    report(same, "child: properties");
    CUdeviceptr at = map_range(h);
    report(holds_pattern(at, 0, "child"), "child: the parent's bytes");
    write_pattern(at, 1);
    if (!ready_and_go()) return 1;
    unmap_range(at);
    CU(p_cuMemRelease(h));
    return failures ? 1 : 0;
}

// `kept <fd>`: imports, says `ready`; after the go-ahead (the parent let go of everything of
// its own) maps the memory and reads it whole.
static int kept(const char* arg) {
    CUmemGenericAllocationHandle h = child_import(arg);
    if (!ready_and_go()) return 1;
    CUdeviceptr at = map_range(h);
    report(holds_pattern(at, 1, "kept child"), "child: memory kept after the parent released it");
    unmap_range(at);
    CU(p_cuMemRelease(h));
    return failures ? 1 : 0;
}

// ---- The parent. ----

static int parent(const char* self, bool native) {
    // The children learn it from their environment (theirs is this process's).
    if (native) setenv("SHAREABLE_NATIVE", "1", 1);
    init();
    printf("shareable: %d elements\n", n);
    int posix = 0;
    CU(p_cuDeviceGetAttribute(&posix, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0));
    printf("POSIX descriptor handles: %d\n", posix);
    std::vector<int> before = open_fds();

    CUmemAllocationProp prop = pinned(true);
    CUmemGenericAllocationHandle h = 0;
    CU(p_cuMemCreate(&h, gran, &prop, 0));
    CUdeviceptr at = map_range(h);
    write_pattern(at, 0);
    report(holds_pattern(at, 0, "parent"), "shareable: exportable memory mapped and written");

    // Memory made without a requested handle type has no descriptor.
    CUmemAllocationProp plain_prop = pinned(false);
    CUmemGenericAllocationHandle plain = 0;
    CU(p_cuMemCreate(&plain, gran, &plain_prop, 0));
    int none = -1;
    refused("export without a handle type", p_cuMemExportToShareableHandle(&none, plain, FD, 0));
    CU(p_cuMemRelease(plain));

    // The descriptor imports in this process too: a handle of its own, mapped a second time.
    int fd = export_fd(h);
    CUmemGenericAllocationHandle again = import_fd(fd);
    CUdeviceptr at2 = map_range(again);
    report(holds_pattern(at2, 0, "parent's import"), "imported in its own process: same bytes");
    unmap_range(at2);
    CU(p_cuMemRelease(again));

    // A child reads the bytes and writes 3i + 1, seen here through this process's mapping.
    Handshake r = spawn_child(self, "reader", fd);
    if (!await_ready(r, "reader")) return 1;
    report(holds_pattern(at, 1, "parent"), "shareable: the child's writes seen");
    go_and_wait(r, "reader");

    // A child holds an imported handle while this process lets go of everything of its own. The
    // handle is released before the child imports: the mapping holds the memory meanwhile.
    int fd2 = export_fd(h);
    CU(p_cuMemRelease(h));
    Handshake k = spawn_child(self, "kept", fd2);
    close(fd2);
    if (!await_ready(k, "kept")) return 1;
    unmap_range(at);
    go_and_wait(k, "kept");

    // A descriptor that is no shareable handle.
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CUmemGenericAllocationHandle foreign = 0;
    refused("a foreign descriptor", p_cuMemImportFromShareableHandle(&foreign, (void*)(uintptr_t)null, FD));
    close(null);

    // Every descriptor closed: none open that was not before the memory was made.
    close(fd);
    int left = 0;
    for (int d : open_fds()) {
        bool known = false;
        for (int b : before) known = known || b == d;
        if (known) continue;
        char link[64], target[256] = {0};
        snprintf(link, sizeof link, "/proc/self/fd/%d", d);
        if (readlink(link, target, sizeof target - 1) < 0) continue;  // closed meanwhile
        // A connection the driver opened (the shim's bulk-copy lanes, opened at a first large
        // copy): not a handle.
        if (strncmp(target, "socket:", 7) == 0) continue;
        // NVIDIA's driver opens descriptors of its own as it likes: shown, not checked.
        if (native) {
            printf("native: descriptor %d open since: %s\n", d, target);
            continue;
        }
        printf("descriptor %d left open: %s\n", d, target);
        left++;
    }
    if (!native) report(left == 0, "shareable: no descriptor left open");
    if (failures) return 1;
    printf("shareable: done\n");
    return 0;
}

int main(int argc, char** argv) {
    // Line by line, so that the processes' lines interleave whole and none is lost to a crash.
    setvbuf(stdout, nullptr, _IOLBF, 0);
    if (argc == 1) return parent(argv[0], false);
    if (argc == 2 && strcmp(argv[1], "--native") == 0) return parent(argv[0], true);
    if (argc == 3 && strcmp(argv[1], "reader") == 0) return reader(argv[2]);
    if (argc == 3 && strcmp(argv[1], "kept") == 0) return kept(argv[2]);
    fprintf(stderr, "usage: shareable [--native] | shareable reader <fd> | shareable kept <fd>\n");
    return 2;
}
