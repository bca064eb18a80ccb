/* test_cli_images.c: image files named in a `corral run` prompt (cli/images.c):
 * existing JPEG/PNG/WebP files become base64 images and leave the text,
 * escaped spaces work, paths to no file and other extensions stay text, a
 * file that is not an image is an error, and the capability check. */
#include "lib/prelude.h"
#include "tests/unit/check.h"

#include <unistd.h>

#include "cli/images.h"
#include "lib/base64.h"

static char dir_g[] = "/tmp/corral-test-cli-images-XXXXXX";

static void put(const char *name, const void *data, size_t n)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir_g, name);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, n, f) == n);
    if (f)
        fclose(f);
}

/* fmt's "%s" (up to two) are the test's directory. */
static cr_status_t run(const char *fmt, char **text, json_t **imgs, cr_err_t *err)
{
    char prompt[1024];
    size_t o = 0;
    for (const char *p = fmt; *p && o + 200 < sizeof prompt; p++) {
        if (p[0] == '%' && p[1] == 's') {
            o += (size_t)snprintf(prompt + o, sizeof prompt - o, "%s", dir_g);
            p++;
        } else {
            prompt[o++] = *p;
        }
    }
    prompt[o] = '\0';
    *imgs = json_array();
    return cli_images_extract(prompt, text, *imgs, NULL, err);
}

int main(void)
{
    if (!mkdtemp(dir_g))
        return 1;
    static const uint8_t png[] = "\x89PNG\r\n\x1a\n0123456789";
    static const uint8_t jpg[] = "\xff\xd8\xff\xe0 jpeg bytes";
    put("cat.png", png, sizeof png - 1);
    put("my cat.JPG", jpg, sizeof jpg - 1);
    put("fake.png", "not an image", 12);
    char *text = NULL;
    json_t *imgs = NULL;
    cr_err_t err = {0};

    CHECK(run("what is in %s/cat.png ?", &text, &imgs, &err) == CR_OK);
    CHECK_EQ_STR(text, "what is in  ?");
    CHECK_EQ_INT(json_array_size(imgs), 1);
    uint8_t *dec = NULL;
    size_t dn = 0;
    CHECK(cr_base64_decode(json_string_value(json_array_get(imgs, 0)),
                           strlen(json_string_value(json_array_get(imgs, 0))), &dec, &dn,
                           NULL) == CR_OK);
    CHECK(dn == sizeof png - 1 && !memcmp(dec, png, dn));
    free(dec);
    free(text);
    json_decref(imgs);

    /* an escaped space, upper-case extension, two images */
    CHECK(run("compare %s/my\\ cat.JPG with %s/cat.png", &text, &imgs, &err) == CR_OK);
    CHECK_EQ_STR(text, "compare  with");
    CHECK_EQ_INT(json_array_size(imgs), 2);
    free(text);
    json_decref(imgs);

    /* relative to the working directory */
    char cwd[1024];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK(chdir(dir_g) == 0);
    CHECK(run("describe ./cat.png", &text, &imgs, &err) == CR_OK);
    CHECK_EQ_STR(text, "describe");
    CHECK_EQ_INT(json_array_size(imgs), 1);
    free(text);
    json_decref(imgs);
    CHECK(chdir(cwd) == 0);

    /* no such file, another extension, no word boundary: text */
    CHECK(run("see /nonexistent/x.png and %s/notes.txt and %s/cat.pngs", &text, &imgs,
              &err) == CR_OK);
    CHECK(strstr(text, "/nonexistent/x.png") && strstr(text, "notes.txt") &&
          strstr(text, "cat.pngs"));
    CHECK_EQ_INT(json_array_size(imgs), 0);
    free(text);
    json_decref(imgs);

    /* a file that is not an image */
    CHECK(run("what about %s/fake.png", &text, &imgs, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "invalid image type") != NULL, "%s", err.msg);
    CHECK(text == NULL);
    json_decref(imgs);

    json_t *show = json_pack("{s:[s,s]}", "capabilities", "completion", "vision");
    CHECK(cli_images_model_sees(show));
    json_decref(show);
    show = json_pack("{s:[s]}", "capabilities", "completion");
    CHECK(!cli_images_model_sees(show));
    json_decref(show);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_g);
    CHECK(system(cmd) == 0);
    return check_finish("cli_images");
}
