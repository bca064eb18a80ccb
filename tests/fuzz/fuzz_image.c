/* fuzz_image: client image bytes (JPEG, PNG, WebP, and whatever else is
 * sent as one) through rn_image_decode, as the runner decodes every image
 * of a request. The pixel limit is small so a header that claims a huge
 * image is refused before decoding, as the real limit does for bombs.
 * Seeds: a small image in each format, written with the same libraries. */
#include "tests/fuzz/fuzz.h"

#include <jpeglib.h>
#include <png.h>
#include <string.h>
#include <webp/encode.h>

#include "services/runner/vision/image.h"

enum { W = 13, H = 7, MAX_PIXELS = 1 << 20 };

static void seed_images(const char *dir)
{
    static uint8_t rgb[W * H * 3];
    for (size_t i = 0; i < sizeof rgb; i++)
        rgb[i] = (uint8_t)(i * 37 + 11);
    png_image pi = {.version = PNG_IMAGE_VERSION, .width = W, .height = H,
                    .format = PNG_FORMAT_RGB};
    static uint8_t png[8192];
    png_alloc_size_t n = sizeof png;
    if (!png_image_write_to_memory(&pi, png, &n, 0, rgb, 0, NULL))
        exit(1);
    fuzz_write_seed(dir, "small.png", png, (size_t)n);

    uint8_t *webp = NULL;
    size_t wn = WebPEncodeLosslessRGB(rgb, W, H, W * 3, &webp);
    if (!wn)
        exit(1);
    fuzz_write_seed(dir, "small.webp", webp, wn);
    WebPFree(webp);

    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr jerr;
    ci.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&ci);
    unsigned char *jpg = NULL;
    unsigned long jn = 0;
    jpeg_mem_dest(&ci, &jpg, &jn);
    ci.image_width = W;
    ci.image_height = H;
    ci.input_components = 3;
    ci.in_color_space = JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < H) {
        JSAMPROW row = rgb + ci.next_scanline * W * 3;
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    fuzz_write_seed(dir, "small.jpg", jpg, jn);
    free(jpg);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = fuzz_seed_dir();
    if (dir) {
        seed_images(dir);
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rn_image_t *im = NULL;
    cr_err_t err = {0};
    if (rn_image_decode(data, size, MAX_PIXELS, &im, &err) != CR_OK) {
        if (!err.msg[0]) /* every refusal says why */
            abort();
        return 0;
    }
    /* a decoded image is within the limit and every pixel is readable */
    if (im->width < 1 || im->height < 1 ||
        (uint64_t)im->width * (uint64_t)im->height > MAX_PIXELS)
        abort();
    unsigned sum = 0;
    for (size_t i = 0; i < (size_t)im->width * (size_t)im->height * 3; i++)
        sum += im->rgb[i];
    volatile unsigned sink = sum;
    (void)sink;
    rn_image_destroy(&im);
    return 0;
}
