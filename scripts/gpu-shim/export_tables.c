/* What the machine's own libcuda.so.1 answers to cuGetExportTable for the tables CUDA's math
 * libraries ask for and the shim does not serve (ac-cuda/src/export_tables.rs, UNSERVED):
 * each table's status, its first word (the size slot of most tables) and the words after it,
 * each marked by whether it points into libcuda (a function). Read-only; run on a GPU machine:
 *   cc -o export_tables export_tables.c -ldl && ./export_tables */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const char *ids[] = {
    "69a28e9f24498b47b030c5da330ea4e9",
    "6e163fbeb958444d835ce182aff1991e",
    "da9151d33ae6cc41a5c04f26d533e328",
};

static void parse(const char *hex, unsigned char out[16]) {
    for (int i = 0; i < 16; i++) sscanf(hex + 2 * i, "%2hhx", &out[i]);
}

int main(void) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(cuda, "cuInit");
    int (*get)(const void **, const unsigned char *) =
        (int (*)(const void **, const unsigned char *))dlsym(cuda, "cuGetExportTable");
    if (!init || !get) { fprintf(stderr, "no cuInit or cuGetExportTable\n"); return 1; }
    printf("cuInit: %d\n", init(0));
    for (size_t t = 0; t < sizeof ids / sizeof ids[0]; t++) {
        unsigned char id[16];
        const void *table = NULL;
        parse(ids[t], id);
        int rc = get(&table, id);
        printf("table %s: status %d\n", ids[t], rc);
        if (rc != 0 || !table) continue;
        const uintptr_t *w = table;
        /* The size slot, where it looks like one, bounds the read: a table may end at a page. */
        int words = w[0] % sizeof(void *) == 0 && w[0] / sizeof(void *) - 1 < 96 ? (int)(w[0] / sizeof(void *)) : 96;
        for (int i = 0; i < words; i++) {
            Dl_info info;
            int in_cuda = dladdr((void *)w[i], &info) && info.dli_fname && strstr(info.dli_fname, "libcuda");
            printf("  [%2d] %#18lx%s\n", i, (unsigned long)w[i], in_cuda ? " (libcuda)" : "");
        }
    }
    return 0;
}
