// The driver's error log (CUDA 12.9's Error Log Management), read as a program reads it through
// the driver (cuLogs*) and the runtime (cudaLogs*): a failed call's reason is logged in NVIDIA's
// form ([time][thread][CUDA][E][entry point] message), handed to the callback registered, and
// dumped from an iterator, which then has nothing new; a buffer too small for any message is
// refused with a size of 0; a dump to a file holds the messages; the runtime's dump holds the
// driver's; an unregistered callback hears no more. The failed call is the one NVIDIA's
// documentation shows logged: a dump into a NULL buffer.
// Usage: logs <file to dump the log into>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <cuda.h>
#include <cuda_runtime.h>

#include "check.h"
#include "driver_entry.h"

// What the callback heard: how many messages, and the last.
struct Heard {
    int count;
    char last[512];
};

static void CUDA_CB heard(void* data, CUlogLevel level, char* message, size_t length) {
    Heard* h = (Heard*)data;
    h->count++;
    snprintf(h->last, sizeof h->last, "%s%.*s", level == CU_LOG_LEVEL_ERROR ? "" : "(warning) ", (int)length, message);
}

using Dump = CUresult (*)(CUlogIterator*, char*, size_t*, unsigned);

int main(int argc, char** argv) {
    const char* path = argc > 1 ? argv[1] : "logs.txt";
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(nullptr));
    Dump dump = (Dump)entry_at("cuLogsDumpToMemory", 12090);

    Heard h = {};
    CUlogsCallbackHandle handle = nullptr;
    using Register = CUresult (*)(CUlogsCallback, void*, CUlogsCallbackHandle*);
    DRIVER_AT(Register, cuLogsRegisterCallback, 12090, heard, &h, &handle);
    CUlogIterator start = 0;
    DRIVER_AT(CUresult(*)(CUlogIterator*, unsigned), cuLogsCurrent, 12090, &start, 0);

    size_t size = 64;
    report(dump(nullptr, nullptr, &size, 0) == CUDA_ERROR_INVALID_VALUE, "a dump into NULL refused");
    printf("heard %d: %s\n", h.count, h.last);
    report(h.count == 1 && strstr(h.last, "[CUDA][E][cuLogsDumpToMemory] ") != nullptr,
           "the callback heard the refusal in NVIDIA's form");

    char buffer[8192];
    CUlogIterator it = start;
    size = sizeof buffer;
    DRIVER_AT(Dump, cuLogsDumpToMemory, 12090, &it, buffer, &size, 0);
    report(size == strlen(buffer) && strstr(buffer, "[cuLogsDumpToMemory] ") != nullptr,
           "the dump from the iterator holds the refusal");
    size = sizeof buffer;
    DRIVER_AT(Dump, cuLogsDumpToMemory, 12090, &it, buffer, &size, 0);
    report(size == 0, "the advanced iterator has nothing new");

    CUlogIterator again = start;
    size = 8;
    CUresult small = dump(&again, buffer, &size, 0);
    report(small == CUDA_ERROR_INVALID_VALUE && size == 0, "a buffer too small for any message refused");

    again = start;
    DRIVER_AT(CUresult(*)(CUlogIterator*, const char*, unsigned), cuLogsDumpToFile, 12090, &again, path, 0);
    std::stringstream file;
    file << std::ifstream(path).rdbuf();
    report(file.str().find("[cuLogsDumpToMemory] ") != std::string::npos, "the dump to a file holds the refusal");

    cudaLogIterator from = start;
    size = sizeof buffer;
    CHECK(cudaLogsDumpToMemory(&from, buffer, &size, 0));
    report(strstr(buffer, "[cuLogsDumpToMemory] ") != nullptr, "the runtime's dump holds the driver's messages");

    DRIVER_AT(CUresult(*)(CUlogsCallbackHandle), cuLogsUnregisterCallback, 12090, handle);
    int before = h.count;
    dump(nullptr, nullptr, &size, 0);
    report(h.count == before, "an unregistered callback hears no more");

    printf(failures ? "logs: FAILED\n" : "logs: all exact\n");
    return failures ? 1 : 0;
}
