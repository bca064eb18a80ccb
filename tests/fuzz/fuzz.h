/* fuzz.h: what the libFuzzer harnesses share.
 *
 * Each harness is one file defining LLVMFuzzerTestOneInput over one
 * decoder of outside bytes. A harness whose seeds are easier to make with
 * the project's own encoders than to commit (GGUF files, bus frames)
 * writes them when CORRAL_FUZZ_SEED_DIR names a folder, then exits
 * (tests/fuzz/run.sh does that before fuzzing). */
#ifndef CORRAL_FUZZ_H
#define CORRAL_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Writes len bytes to <dir>/<name>; exits non-zero on failure (a seed
 * that cannot be written is a broken test setup). */
static inline void fuzz_write_seed(const char *dir, const char *name, const void *data,
                                   size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "fuzz: cannot write seed %s\n", path);
        exit(1);
    }
}

/* The seed folder, or NULL when the harness is fuzzing. */
static inline const char *fuzz_seed_dir(void)
{
    const char *d = getenv("CORRAL_FUZZ_SEED_DIR");
    return d && *d ? d : NULL;
}

#endif
