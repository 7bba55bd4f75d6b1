#!/usr/bin/env python3
"""Writes trace_export_tables.c (next to this file): an LD_PRELOAD tracer, for research on a GPU
machine and never shipped, of the private driver tables CUDA's math libraries ask
cuGetExportTable for and ac-cuda does not serve. Each table is copied with every slot that
points into libcuda wrapped by a function that logs the call (arguments, the memory they point
to before and after, the status) and calls the driver's own. scripts/gpu-shim/trace-run.sh runs
it under PyTorch and CuPy; the traces of 2026-11-30 are in docs/gpu-runs/2026-11-30/traces/."""

import os

# name, UUID, slots to copy (the 580.159 driver's size slots).
TABLES = [
    ("t69", "69a28e9f24498b47b030c5da330ea4e9", 34),   # cuBLAS (CUDA 13)
    ("t6e", "6e163fbeb958444d835ce182aff1991e", 99),   # cuFFT (CUDA 13)
    ("tda", "da9151d33ae6cc41a5c04f26d533e328", 7),    # CuPy's cuBLAS (CUDA 12)
]

HEAD = '/* A tracer for research on a GPU machine (not shipped): LD_PRELOADed into a program running\n * on the machine\'s own libcuda.so.1, it wraps the slots of the private tables CUDA\'s math\n * libraries ask cuGetExportTable for and the shim does not serve, and logs each call: its\n * arguments, the memory they point to before and after, strings they point to, the status.\n * Written by scripts/gpu-shim/gen-trace.py; build: cc -shared -fPIC -o trace.so trace.c -ldl */\n#define _GNU_SOURCE\n#include <ctype.h>\n#include <dlfcn.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n#include <sys/uio.h>\n#include <unistd.h>\n\ntypedef uintptr_t U;\ntypedef U (*slot_fn)(U, U, U, U, U, U, U, U);\nstatic void *(*real_dlsym)(void *, const char *);\nstatic int (*real_get)(const void **, const unsigned char *);\nstatic int (*real_gpa)(const char *, void **, int, uint64_t);\nstatic int (*real_gpa2)(const char *, void **, int, uint64_t, int *);\nstatic int calls[3][128];\n\nstatic int readable(U p, void *buf, size_t n) {\n    struct iovec l = {buf, n}, r = {(void *)p, n};\n    return p > 4096 && process_vm_readv(getpid(), &l, 1, &r, 1, 0) == (ssize_t)n;\n}\n\nstatic void dump(const char *when, int i, U a) {\n    unsigned char b[64];\n    if (!readable(a, b, sizeof b)) return;\n    fprintf(stderr, "    %s a%d %#lx:", when, i, (unsigned long)a);\n    for (int k = 0; k < 8; k++) fprintf(stderr, " %016lx", ((unsigned long *)b)[k]);\n    int printable = 0;\n    while (printable < 63 && b[printable] && isprint(b[printable])) printable++;\n    if (printable >= 3 && b[printable] == 0) fprintf(stderr, " \\"%s\\"", (char *)b);\n    fprintf(stderr, "\\n");\n}\n\nstatic int in_libcuda(U p) {\n    Dl_info info;\n    return p && dladdr((void *)p, &info) && info.dli_fname && strstr(info.dli_fname, "libcuda");\n}\n\nstatic U traced(int t, const char *name, int slot, slot_fn f, U a[8]) {\n    int n = calls[t][slot]++;\n    if (n < 12) {\n        fprintf(stderr, "TRACE %s[%d] call %d: %#lx %#lx %#lx %#lx %#lx %#lx\\n", name, slot, n,\n                a[0], a[1], a[2], a[3], a[4], a[5]);\n        for (int i = 0; i < 6; i++) dump("before", i, a[i]);\n    }\n    U rc = f(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);\n    if (n < 12) {\n        fprintf(stderr, "  -> %#lx\\n", rc);\n        for (int i = 0; i < 6; i++) dump("after ", i, a[i]);\n    }\n    return rc;\n}\n'

TAIL = 'static int my_get(const void **table, const unsigned char *uuid) {\n    int rc = real_get(table, uuid);\n    char id[33];\n    for (int i = 0; i < 16; i++) sprintf(id + 2 * i, "%02x", uuid[i]);\n    fprintf(stderr, "TRACE cuGetExportTable %s -> %d\\n", id, rc);\n    if (rc == 0 && table && *table) *table = wrap(*table, id);\n    return rc;\n}\n\nstatic int my_gpa2(const char *sym, void **pfn, int version, uint64_t flags, int *status) {\n    int rc = real_gpa2(sym, pfn, version, flags, status);\n    if (rc == 0 && pfn && *pfn && !strcmp(sym, "cuGetExportTable")) { real_get = *pfn; *pfn = (void *)my_get; }\n    return rc;\n}\n\nstatic int my_gpa(const char *sym, void **pfn, int version, uint64_t flags) {\n    int rc = real_gpa(sym, pfn, version, flags);\n    if (rc == 0 && pfn && *pfn && !strcmp(sym, "cuGetExportTable")) { real_get = *pfn; *pfn = (void *)my_get; }\n    return rc;\n}\n\nvoid *dlsym(void *handle, const char *name) {\n    if (!real_dlsym) real_dlsym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");\n    if (!real_dlsym) real_dlsym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");\n    void *p = real_dlsym(handle, name);\n    if (!p) return p;\n    if (!strcmp(name, "cuGetExportTable")) { real_get = p; return (void *)my_get; }\n    if (!strcmp(name, "cuGetProcAddress_v2")) { real_gpa2 = p; return (void *)my_gpa2; }\n    if (!strcmp(name, "cuGetProcAddress")) { real_gpa = p; return (void *)my_gpa; }\n    return p;\n}\n'


def table(index, name, uuid, n):
    out = [f"static U orig_{name}[{n}], copy_{name}[{n}];\n"]
    for s in range(1, n):
        out.append(
            f"static U tr_{name}_{s}(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) "
            f"{{ U a[8] = {{a0, a1, a2, a3, a4, a5, a6, a7}}; "
            f"return traced({index}, \"{uuid[:8]}\", {s}, (slot_fn)orig_{name}[{s}], a); }}\n"
        )
    out.append(f"static const slot_fn tr_{name}[{n}] = {{0, " + ", ".join(f"tr_{name}_{s}" for s in range(1, n)) + "};\n")
    return "".join(out)


def wrap():
    out = ["\nstatic const void *wrap(const void *table, const char *id) {\n"]
    for name, uuid, n in TABLES:
        out.append(f"""    if (!strcmp(id, "{uuid}")) {{
        if (!copy_{name}[0]) {{
            memcpy(orig_{name}, table, sizeof orig_{name});
            for (int i = 0; i < {n}; i++) copy_{name}[i] = i && in_libcuda(orig_{name}[i]) ? (U)tr_{name}[i] : orig_{name}[i];
        }}
        return copy_{name};
    }}
""")
    out.append("    return table;\n}\n\n")
    return "".join(out)


def main():
    body = HEAD + "".join(table(i, *t) for i, t in enumerate(TABLES)) + wrap() + TAIL
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "trace_export_tables.c")
    with open(path, "w") as f:
        f.write(body)


if __name__ == "__main__":
    main()
