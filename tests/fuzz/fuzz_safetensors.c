/* fuzz_safetensors: safetensors files and their index JSON
 * (lib/safetensors.c), as `corral create` imports a Hugging Face folder.
 * cr_st_open reads a path, so each input is put in a memory file. */
#define _GNU_SOURCE
#include "tests/fuzz/fuzz.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lib/safetensors.h"

static int g_fd = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    g_fd = memfd_create("fuzz_safetensors", 0);
    if (g_fd < 0) {
        perror("fuzz_safetensors: memfd_create");
        exit(1);
    }
    return 0;
}

static void index_json(const uint8_t *data, size_t size)
{
    char **names = NULL;
    size_t n = 0;
    cr_err_t err = {0};
    if (cr_st_index_files((const char *)data, size, "index", &names, &n, &err) != CR_OK)
        return;
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    index_json(data, size);
    if (ftruncate(g_fd, 0) != 0 || pwrite(g_fd, data, size, 0) != (ssize_t)size)
        abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", g_fd);
    cr_st_file_t *f = NULL;
    cr_err_t err = {0};
    if (cr_st_open(path, "model.safetensors", &f, &err) != CR_OK)
        return 0;
    (void)cr_st_metadata(f, "format");
    float buf[64];
    for (size_t i = 0; i < cr_st_tensor_count(f); i++) {
        const cr_st_tensor_t *t = cr_st_tensor_at(f, i);
        if (cr_st_tensor_find(f, t->name) == NULL)
            abort();
        if (t->n_elems <= sizeof buf / sizeof buf[0])
            (void)cr_st_read_f32(f, t, buf, (size_t)t->n_elems, &err);
        else
            (void)cr_st_read_range(f, t, t->size_bytes - 16, buf, 16, &err);
    }
    cr_st_close(&f);
    return 0;
}
