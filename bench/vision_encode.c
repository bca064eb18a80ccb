/* vision_encode.c: bench-vision_encode, the time of one image encode
 * through a projector's tower (rn_clip: llava, gemma3, qwen2-vl types),
 * nothing else: the file is loaded and the image decoded and preprocessed
 * before the clock starts. bench/vs_mtmd_speed.sh runs it beside llama.cpp's
 * bench/mtmd/time_mtmd.c.
 *
 *   bench-vision_encode --mmproj PROJ.gguf --image FILE [--threads N]
 *                       [--rounds R]
 *
 * Prints "encode N ms" for each of R rounds (default 2; the first also
 * faults in the mapped weights: callers treat it as the warm-up) and
 * "N x D" (output rows x width). */
#include "lib/prelude.h"
#include "lib/buf.h"
#include "services/runner/backend/backend.h"
#include "services/runner/vision/clip.h"
#include "services/runner/vision/image.h"

#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static const char *flag(int argc, char **argv, const char *name)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name))
            return argv[i + 1];
    return NULL;
}

static cr_status_t read_file(const char *path, cr_buf_t *b, cr_err_t *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return cr_err_set(err, CR_E_IO, "%s: cannot open", path);
    char chunk[65536];
    size_t n;
    cr_status_t st = CR_OK;
    while (!st && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if ((st = cr_buf_append(b, chunk, n)))
            cr_err_set(err, st, "%s: larger than 64 MiB", path);
    fclose(f);
    return st;
}

int main(int argc, char **argv)
{
    const char *proj = flag(argc, argv, "--mmproj"), *image = flag(argc, argv, "--image");
    const char *threads = flag(argc, argv, "--threads"), *rounds = flag(argc, argv, "--rounds");
    if (!proj || !image) {
        fprintf(stderr, "usage: bench-vision_encode --mmproj PROJ.gguf --image FILE "
                        "[--threads N] [--rounds R]\n");
        return 2;
    }
    int n_rounds = rounds ? atoi(rounds) : 2;
    cr_err_t err = {0};
    cr_buf_t file;
    cr_buf_init(&file, (size_t)64 << 20);
    be_backend_t *be = NULL;
    rn_image_t *im = NULL;
    rn_clip_t *clip = NULL;
    float *pixels = NULL, *emb = NULL;
    rn_clip_layout_t L;
    int rc = 1;
    cr_status_t st;
    if ((st = read_file(image, &file, &err)) ||
        (st = rn_image_decode(file.data, file.len, rn_image_max_pixels(), &im, &err)) ||
        (st = be_cpu_new(threads ? atoi(threads) : 0, &be, &err)) ||
        (st = rn_clip_load(proj, be, &clip, &err)) ||
        (st = rn_clip_layout(clip, im->width, im->height, &L, &err)))
        goto out;
    const rn_clip_hparams_t *hp = rn_clip_hparams(clip);
    pixels = malloc(3 * (size_t)L.width * L.height * sizeof *pixels);
    emb = malloc((size_t)L.nx * L.ny * hp->n_embd * sizeof *emb);
    if (!pixels || !emb) {
        cr_err_set(&err, CR_E_NOMEM, "out of memory");
        goto out;
    }
    if ((st = rn_clip_preprocess(clip, im, pixels, &err)))
        goto out;
    printf("threads %d, simd %s\n", be_cpu_threads(be), be_cpu_simd(be));
    for (int r = 0; r < n_rounds; r++) {
        double t0 = now_ms();
        if ((st = rn_clip_encode_at(clip, &L, pixels, emb, &err)))
            goto out;
        printf("encode %.1f ms\n", now_ms() - t0);
        fflush(stdout);
    }
    printf("%d x %d\n", L.nx * L.ny, hp->n_embd);
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "bench-vision_encode: %s\n", err.msg);
    free(pixels);
    free(emb);
    rn_clip_destroy(&clip);
    rn_image_destroy(&im);
    be_destroy(&be);
    cr_buf_free(&file);
    return rc;
}
