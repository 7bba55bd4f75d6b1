/* A tracer for research on a GPU machine (not shipped): LD_PRELOADed into a program running
 * on the machine's own libcuda.so.1, it wraps the slots of the private tables CUDA's math
 * libraries ask cuGetExportTable for and the shim does not serve, and logs each call: its
 * arguments, the memory they point to before and after, strings they point to, the status.
 * Written by scripts/gpu-shim/gen-trace.py; build: cc -shared -fPIC -o trace.so trace.c -ldl */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

typedef uintptr_t U;
typedef U (*slot_fn)(U, U, U, U, U, U, U, U);
static void *(*real_dlsym)(void *, const char *);
static int (*real_get)(const void **, const unsigned char *);
static int (*real_gpa)(const char *, void **, int, uint64_t);
static int (*real_gpa2)(const char *, void **, int, uint64_t, int *);
static int calls[3][128];

static int readable(U p, void *buf, size_t n) {
    struct iovec l = {buf, n}, r = {(void *)p, n};
    return p > 4096 && process_vm_readv(getpid(), &l, 1, &r, 1, 0) == (ssize_t)n;
}

static void dump(const char *when, int i, U a) {
    unsigned char b[64];
    if (!readable(a, b, sizeof b)) return;
    fprintf(stderr, "    %s a%d %#lx:", when, i, (unsigned long)a);
    for (int k = 0; k < 8; k++) fprintf(stderr, " %016lx", ((unsigned long *)b)[k]);
    int printable = 0;
    while (printable < 63 && b[printable] && isprint(b[printable])) printable++;
    if (printable >= 3 && b[printable] == 0) fprintf(stderr, " \"%s\"", (char *)b);
    fprintf(stderr, "\n");
}

static int in_libcuda(U p) {
    Dl_info info;
    return p && dladdr((void *)p, &info) && info.dli_fname && strstr(info.dli_fname, "libcuda");
}

static U traced(int t, const char *name, int slot, slot_fn f, U a[8]) {
    int n = calls[t][slot]++;
    if (n < 12) {
        fprintf(stderr, "TRACE %s[%d] call %d: %#lx %#lx %#lx %#lx %#lx %#lx\n", name, slot, n,
                a[0], a[1], a[2], a[3], a[4], a[5]);
        for (int i = 0; i < 6; i++) dump("before", i, a[i]);
    }
    U rc = f(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
    if (n < 12) {
        fprintf(stderr, "  -> %#lx\n", rc);
        for (int i = 0; i < 6; i++) dump("after ", i, a[i]);
    }
    return rc;
}
static U orig_t69[34], copy_t69[34];
static U tr_t69_1(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 1, (slot_fn)orig_t69[1], a); }
static U tr_t69_2(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 2, (slot_fn)orig_t69[2], a); }
static U tr_t69_3(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 3, (slot_fn)orig_t69[3], a); }
static U tr_t69_4(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 4, (slot_fn)orig_t69[4], a); }
static U tr_t69_5(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 5, (slot_fn)orig_t69[5], a); }
static U tr_t69_6(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 6, (slot_fn)orig_t69[6], a); }
static U tr_t69_7(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 7, (slot_fn)orig_t69[7], a); }
static U tr_t69_8(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 8, (slot_fn)orig_t69[8], a); }
static U tr_t69_9(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 9, (slot_fn)orig_t69[9], a); }
static U tr_t69_10(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 10, (slot_fn)orig_t69[10], a); }
static U tr_t69_11(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 11, (slot_fn)orig_t69[11], a); }
static U tr_t69_12(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 12, (slot_fn)orig_t69[12], a); }
static U tr_t69_13(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 13, (slot_fn)orig_t69[13], a); }
static U tr_t69_14(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 14, (slot_fn)orig_t69[14], a); }
static U tr_t69_15(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 15, (slot_fn)orig_t69[15], a); }
static U tr_t69_16(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 16, (slot_fn)orig_t69[16], a); }
static U tr_t69_17(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 17, (slot_fn)orig_t69[17], a); }
static U tr_t69_18(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 18, (slot_fn)orig_t69[18], a); }
static U tr_t69_19(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 19, (slot_fn)orig_t69[19], a); }
static U tr_t69_20(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 20, (slot_fn)orig_t69[20], a); }
static U tr_t69_21(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 21, (slot_fn)orig_t69[21], a); }
static U tr_t69_22(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 22, (slot_fn)orig_t69[22], a); }
static U tr_t69_23(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 23, (slot_fn)orig_t69[23], a); }
static U tr_t69_24(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 24, (slot_fn)orig_t69[24], a); }
static U tr_t69_25(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 25, (slot_fn)orig_t69[25], a); }
static U tr_t69_26(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 26, (slot_fn)orig_t69[26], a); }
static U tr_t69_27(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 27, (slot_fn)orig_t69[27], a); }
static U tr_t69_28(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 28, (slot_fn)orig_t69[28], a); }
static U tr_t69_29(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 29, (slot_fn)orig_t69[29], a); }
static U tr_t69_30(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 30, (slot_fn)orig_t69[30], a); }
static U tr_t69_31(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 31, (slot_fn)orig_t69[31], a); }
static U tr_t69_32(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 32, (slot_fn)orig_t69[32], a); }
static U tr_t69_33(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(0, "69a28e9f", 33, (slot_fn)orig_t69[33], a); }
static const slot_fn tr_t69[34] = {0, tr_t69_1, tr_t69_2, tr_t69_3, tr_t69_4, tr_t69_5, tr_t69_6, tr_t69_7, tr_t69_8, tr_t69_9, tr_t69_10, tr_t69_11, tr_t69_12, tr_t69_13, tr_t69_14, tr_t69_15, tr_t69_16, tr_t69_17, tr_t69_18, tr_t69_19, tr_t69_20, tr_t69_21, tr_t69_22, tr_t69_23, tr_t69_24, tr_t69_25, tr_t69_26, tr_t69_27, tr_t69_28, tr_t69_29, tr_t69_30, tr_t69_31, tr_t69_32, tr_t69_33};
static U orig_t6e[99], copy_t6e[99];
static U tr_t6e_1(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 1, (slot_fn)orig_t6e[1], a); }
static U tr_t6e_2(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 2, (slot_fn)orig_t6e[2], a); }
static U tr_t6e_3(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 3, (slot_fn)orig_t6e[3], a); }
static U tr_t6e_4(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 4, (slot_fn)orig_t6e[4], a); }
static U tr_t6e_5(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 5, (slot_fn)orig_t6e[5], a); }
static U tr_t6e_6(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 6, (slot_fn)orig_t6e[6], a); }
static U tr_t6e_7(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 7, (slot_fn)orig_t6e[7], a); }
static U tr_t6e_8(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 8, (slot_fn)orig_t6e[8], a); }
static U tr_t6e_9(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 9, (slot_fn)orig_t6e[9], a); }
static U tr_t6e_10(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 10, (slot_fn)orig_t6e[10], a); }
static U tr_t6e_11(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 11, (slot_fn)orig_t6e[11], a); }
static U tr_t6e_12(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 12, (slot_fn)orig_t6e[12], a); }
static U tr_t6e_13(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 13, (slot_fn)orig_t6e[13], a); }
static U tr_t6e_14(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 14, (slot_fn)orig_t6e[14], a); }
static U tr_t6e_15(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 15, (slot_fn)orig_t6e[15], a); }
static U tr_t6e_16(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 16, (slot_fn)orig_t6e[16], a); }
static U tr_t6e_17(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 17, (slot_fn)orig_t6e[17], a); }
static U tr_t6e_18(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 18, (slot_fn)orig_t6e[18], a); }
static U tr_t6e_19(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 19, (slot_fn)orig_t6e[19], a); }
static U tr_t6e_20(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 20, (slot_fn)orig_t6e[20], a); }
static U tr_t6e_21(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 21, (slot_fn)orig_t6e[21], a); }
static U tr_t6e_22(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 22, (slot_fn)orig_t6e[22], a); }
static U tr_t6e_23(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 23, (slot_fn)orig_t6e[23], a); }
static U tr_t6e_24(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 24, (slot_fn)orig_t6e[24], a); }
static U tr_t6e_25(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 25, (slot_fn)orig_t6e[25], a); }
static U tr_t6e_26(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 26, (slot_fn)orig_t6e[26], a); }
static U tr_t6e_27(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 27, (slot_fn)orig_t6e[27], a); }
static U tr_t6e_28(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 28, (slot_fn)orig_t6e[28], a); }
static U tr_t6e_29(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 29, (slot_fn)orig_t6e[29], a); }
static U tr_t6e_30(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 30, (slot_fn)orig_t6e[30], a); }
static U tr_t6e_31(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 31, (slot_fn)orig_t6e[31], a); }
static U tr_t6e_32(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 32, (slot_fn)orig_t6e[32], a); }
static U tr_t6e_33(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 33, (slot_fn)orig_t6e[33], a); }
static U tr_t6e_34(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 34, (slot_fn)orig_t6e[34], a); }
static U tr_t6e_35(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 35, (slot_fn)orig_t6e[35], a); }
static U tr_t6e_36(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 36, (slot_fn)orig_t6e[36], a); }
static U tr_t6e_37(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 37, (slot_fn)orig_t6e[37], a); }
static U tr_t6e_38(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 38, (slot_fn)orig_t6e[38], a); }
static U tr_t6e_39(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 39, (slot_fn)orig_t6e[39], a); }
static U tr_t6e_40(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 40, (slot_fn)orig_t6e[40], a); }
static U tr_t6e_41(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 41, (slot_fn)orig_t6e[41], a); }
static U tr_t6e_42(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 42, (slot_fn)orig_t6e[42], a); }
static U tr_t6e_43(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 43, (slot_fn)orig_t6e[43], a); }
static U tr_t6e_44(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 44, (slot_fn)orig_t6e[44], a); }
static U tr_t6e_45(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 45, (slot_fn)orig_t6e[45], a); }
static U tr_t6e_46(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 46, (slot_fn)orig_t6e[46], a); }
static U tr_t6e_47(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 47, (slot_fn)orig_t6e[47], a); }
static U tr_t6e_48(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 48, (slot_fn)orig_t6e[48], a); }
static U tr_t6e_49(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 49, (slot_fn)orig_t6e[49], a); }
static U tr_t6e_50(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 50, (slot_fn)orig_t6e[50], a); }
static U tr_t6e_51(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 51, (slot_fn)orig_t6e[51], a); }
static U tr_t6e_52(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 52, (slot_fn)orig_t6e[52], a); }
static U tr_t6e_53(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 53, (slot_fn)orig_t6e[53], a); }
static U tr_t6e_54(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 54, (slot_fn)orig_t6e[54], a); }
static U tr_t6e_55(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 55, (slot_fn)orig_t6e[55], a); }
static U tr_t6e_56(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 56, (slot_fn)orig_t6e[56], a); }
static U tr_t6e_57(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 57, (slot_fn)orig_t6e[57], a); }
static U tr_t6e_58(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 58, (slot_fn)orig_t6e[58], a); }
static U tr_t6e_59(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 59, (slot_fn)orig_t6e[59], a); }
static U tr_t6e_60(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 60, (slot_fn)orig_t6e[60], a); }
static U tr_t6e_61(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 61, (slot_fn)orig_t6e[61], a); }
static U tr_t6e_62(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 62, (slot_fn)orig_t6e[62], a); }
static U tr_t6e_63(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 63, (slot_fn)orig_t6e[63], a); }
static U tr_t6e_64(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 64, (slot_fn)orig_t6e[64], a); }
static U tr_t6e_65(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 65, (slot_fn)orig_t6e[65], a); }
static U tr_t6e_66(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 66, (slot_fn)orig_t6e[66], a); }
static U tr_t6e_67(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 67, (slot_fn)orig_t6e[67], a); }
static U tr_t6e_68(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 68, (slot_fn)orig_t6e[68], a); }
static U tr_t6e_69(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 69, (slot_fn)orig_t6e[69], a); }
static U tr_t6e_70(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 70, (slot_fn)orig_t6e[70], a); }
static U tr_t6e_71(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 71, (slot_fn)orig_t6e[71], a); }
static U tr_t6e_72(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 72, (slot_fn)orig_t6e[72], a); }
static U tr_t6e_73(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 73, (slot_fn)orig_t6e[73], a); }
static U tr_t6e_74(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 74, (slot_fn)orig_t6e[74], a); }
static U tr_t6e_75(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 75, (slot_fn)orig_t6e[75], a); }
static U tr_t6e_76(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 76, (slot_fn)orig_t6e[76], a); }
static U tr_t6e_77(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 77, (slot_fn)orig_t6e[77], a); }
static U tr_t6e_78(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 78, (slot_fn)orig_t6e[78], a); }
static U tr_t6e_79(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 79, (slot_fn)orig_t6e[79], a); }
static U tr_t6e_80(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 80, (slot_fn)orig_t6e[80], a); }
static U tr_t6e_81(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 81, (slot_fn)orig_t6e[81], a); }
static U tr_t6e_82(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 82, (slot_fn)orig_t6e[82], a); }
static U tr_t6e_83(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 83, (slot_fn)orig_t6e[83], a); }
static U tr_t6e_84(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 84, (slot_fn)orig_t6e[84], a); }
static U tr_t6e_85(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 85, (slot_fn)orig_t6e[85], a); }
static U tr_t6e_86(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 86, (slot_fn)orig_t6e[86], a); }
static U tr_t6e_87(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 87, (slot_fn)orig_t6e[87], a); }
static U tr_t6e_88(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 88, (slot_fn)orig_t6e[88], a); }
static U tr_t6e_89(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 89, (slot_fn)orig_t6e[89], a); }
static U tr_t6e_90(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 90, (slot_fn)orig_t6e[90], a); }
static U tr_t6e_91(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 91, (slot_fn)orig_t6e[91], a); }
static U tr_t6e_92(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 92, (slot_fn)orig_t6e[92], a); }
static U tr_t6e_93(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 93, (slot_fn)orig_t6e[93], a); }
static U tr_t6e_94(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 94, (slot_fn)orig_t6e[94], a); }
static U tr_t6e_95(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 95, (slot_fn)orig_t6e[95], a); }
static U tr_t6e_96(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 96, (slot_fn)orig_t6e[96], a); }
static U tr_t6e_97(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 97, (slot_fn)orig_t6e[97], a); }
static U tr_t6e_98(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(1, "6e163fbe", 98, (slot_fn)orig_t6e[98], a); }
static const slot_fn tr_t6e[99] = {0, tr_t6e_1, tr_t6e_2, tr_t6e_3, tr_t6e_4, tr_t6e_5, tr_t6e_6, tr_t6e_7, tr_t6e_8, tr_t6e_9, tr_t6e_10, tr_t6e_11, tr_t6e_12, tr_t6e_13, tr_t6e_14, tr_t6e_15, tr_t6e_16, tr_t6e_17, tr_t6e_18, tr_t6e_19, tr_t6e_20, tr_t6e_21, tr_t6e_22, tr_t6e_23, tr_t6e_24, tr_t6e_25, tr_t6e_26, tr_t6e_27, tr_t6e_28, tr_t6e_29, tr_t6e_30, tr_t6e_31, tr_t6e_32, tr_t6e_33, tr_t6e_34, tr_t6e_35, tr_t6e_36, tr_t6e_37, tr_t6e_38, tr_t6e_39, tr_t6e_40, tr_t6e_41, tr_t6e_42, tr_t6e_43, tr_t6e_44, tr_t6e_45, tr_t6e_46, tr_t6e_47, tr_t6e_48, tr_t6e_49, tr_t6e_50, tr_t6e_51, tr_t6e_52, tr_t6e_53, tr_t6e_54, tr_t6e_55, tr_t6e_56, tr_t6e_57, tr_t6e_58, tr_t6e_59, tr_t6e_60, tr_t6e_61, tr_t6e_62, tr_t6e_63, tr_t6e_64, tr_t6e_65, tr_t6e_66, tr_t6e_67, tr_t6e_68, tr_t6e_69, tr_t6e_70, tr_t6e_71, tr_t6e_72, tr_t6e_73, tr_t6e_74, tr_t6e_75, tr_t6e_76, tr_t6e_77, tr_t6e_78, tr_t6e_79, tr_t6e_80, tr_t6e_81, tr_t6e_82, tr_t6e_83, tr_t6e_84, tr_t6e_85, tr_t6e_86, tr_t6e_87, tr_t6e_88, tr_t6e_89, tr_t6e_90, tr_t6e_91, tr_t6e_92, tr_t6e_93, tr_t6e_94, tr_t6e_95, tr_t6e_96, tr_t6e_97, tr_t6e_98};
static U orig_tda[7], copy_tda[7];
static U tr_tda_1(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(2, "da9151d3", 1, (slot_fn)orig_tda[1], a); }
static U tr_tda_2(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(2, "da9151d3", 2, (slot_fn)orig_tda[2], a); }
static U tr_tda_3(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(2, "da9151d3", 3, (slot_fn)orig_tda[3], a); }
static U tr_tda_4(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(2, "da9151d3", 4, (slot_fn)orig_tda[4], a); }
static U tr_tda_5(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(2, "da9151d3", 5, (slot_fn)orig_tda[5], a); }
static U tr_tda_6(U a0, U a1, U a2, U a3, U a4, U a5, U a6, U a7) { U a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}; return traced(2, "da9151d3", 6, (slot_fn)orig_tda[6], a); }
static const slot_fn tr_tda[7] = {0, tr_tda_1, tr_tda_2, tr_tda_3, tr_tda_4, tr_tda_5, tr_tda_6};

static const void *wrap(const void *table, const char *id) {
    if (!strcmp(id, "69a28e9f24498b47b030c5da330ea4e9")) {
        if (!copy_t69[0]) {
            memcpy(orig_t69, table, sizeof orig_t69);
            for (int i = 0; i < 34; i++) copy_t69[i] = i && in_libcuda(orig_t69[i]) ? (U)tr_t69[i] : orig_t69[i];
        }
        return copy_t69;
    }
    if (!strcmp(id, "6e163fbeb958444d835ce182aff1991e")) {
        if (!copy_t6e[0]) {
            memcpy(orig_t6e, table, sizeof orig_t6e);
            for (int i = 0; i < 99; i++) copy_t6e[i] = i && in_libcuda(orig_t6e[i]) ? (U)tr_t6e[i] : orig_t6e[i];
        }
        return copy_t6e;
    }
    if (!strcmp(id, "da9151d33ae6cc41a5c04f26d533e328")) {
        if (!copy_tda[0]) {
            memcpy(orig_tda, table, sizeof orig_tda);
            for (int i = 0; i < 7; i++) copy_tda[i] = i && in_libcuda(orig_tda[i]) ? (U)tr_tda[i] : orig_tda[i];
        }
        return copy_tda;
    }
    return table;
}

static int my_get(const void **table, const unsigned char *uuid) {
    int rc = real_get(table, uuid);
    char id[33];
    for (int i = 0; i < 16; i++) sprintf(id + 2 * i, "%02x", uuid[i]);
    fprintf(stderr, "TRACE cuGetExportTable %s -> %d\n", id, rc);
    if (rc == 0 && table && *table) *table = wrap(*table, id);
    return rc;
}

static int my_gpa2(const char *sym, void **pfn, int version, uint64_t flags, int *status) {
    int rc = real_gpa2(sym, pfn, version, flags, status);
    if (rc == 0 && pfn && *pfn && !strcmp(sym, "cuGetExportTable")) { real_get = *pfn; *pfn = (void *)my_get; }
    return rc;
}

static int my_gpa(const char *sym, void **pfn, int version, uint64_t flags) {
    int rc = real_gpa(sym, pfn, version, flags);
    if (rc == 0 && pfn && *pfn && !strcmp(sym, "cuGetExportTable")) { real_get = *pfn; *pfn = (void *)my_get; }
    return rc;
}

void *dlsym(void *handle, const char *name) {
    if (!real_dlsym) real_dlsym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!real_dlsym) real_dlsym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    void *p = real_dlsym(handle, name);
    if (!p) return p;
    if (!strcmp(name, "cuGetExportTable")) { real_get = p; return (void *)my_get; }
    if (!strcmp(name, "cuGetProcAddress_v2")) { real_gpa2 = p; return (void *)my_gpa2; }
    if (!strcmp(name, "cuGetProcAddress")) { real_gpa = p; return (void *)my_gpa; }
    return p;
}
