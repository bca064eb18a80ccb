/* dockerfile.h: checking a Dockerfile against the tree it is built from,
 * without a Docker engine.
 *
 * Every COPY source must exist: in the build context (and not be excluded
 * by the Dockerfile's .dockerignore) or, for COPY --from=<stage>, in a
 * local directory standing for that stage's output (a stage map: the
 * build stage's DESTDIR install is this test's `cmake --install` tree).
 * The final stage's files are modelled from its COPY lines, so its CMD,
 * ENTRYPOINT and HEALTHCHECK programs can be looked up: each must be in
 * exec (JSON) form and name an executable file the image gets. The final
 * stage must also drop root with USER. */
#ifndef DC_DOCKERFILE_H
#define DC_DOCKERFILE_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "tests/deploy/report.h"
#include "tests/deploy/unitfile.h"

/* "COPY --from=<stage> <prefix>/x" reads <dir>/x. */
typedef struct dc_stage_map {
    char stage[64];
    char prefix[512];
    char dir[1024];
} dc_stage_map_t;

/* Parses "stage:/prefix=DIR". */
cr_status_t dc_stage_map_parse(const char *arg, dc_stage_map_t *out,
                               cr_err_t *err);

typedef struct dc_image_file {
    char *path; /* absolute path in the image */
    bool exec;  /* executable regular file */
} dc_image_file_t;

/* What the final stage is known to hold and run. */
typedef struct dc_image {
    dc_image_file_t *files;
    size_t n_files;
    dc_env_t env;          /* ENV of the final stage */
    char user[64];         /* USER, "" if none */
    dc_words_t cmd, entrypoint, health; /* exec-form argv; n = 0 if none */
    int cmd_line, health_line;
} dc_image_t;

/* Checks the Dockerfile at path, built with context dir `context`, and
 * fills img with its final stage (caller frees with dc_image_free).
 * Problems go to rep; the return is an error only when the file cannot be
 * read. */
cr_status_t dc_dockerfile_check(const char *path, const char *context,
                                const dc_stage_map_t *maps, size_t n_maps,
                                dc_image_t *img, dc_report_t *rep,
                                cr_err_t *err);
void dc_image_free(dc_image_t *img);

/* Looks prog up in the image: an absolute path as is, a bare name in each
 * directory of the image's PATH (its ENV, else Docker's default). Returns
 * the file or NULL. */
const dc_image_file_t *dc_image_which(const dc_image_t *img,
                                      const char *prog);

#endif
