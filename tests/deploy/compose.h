/* compose.h: checking a docker compose file without Docker.
 *
 * Two layers. The schema: every key is one the Compose specification
 * defines for where it stands (a typo such as `restart_policy` under a
 * service is reported, not ignored), and each value has the right shape
 * (durations, booleans, port and volume strings, healthcheck tests,
 * device reservations, ${VAR:-default} interpolation). Then corral's
 * policy: exactly the services of deploy/services.txt, each started with
 * its argv from there and from an image whose Dockerfile provides that
 * program; healthchecks and restart policies everywhere; the store and
 * the bus sockets on volumes that every service that needs them shares at
 * the same path; ports published on loopback only; the scheduler with an
 * NVIDIA GPU reservation. An override file (-f) gets the schema and the
 * argv check only. */
#ifndef DC_COMPOSE_H
#define DC_COMPOSE_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "tests/deploy/dockerfile.h"
#include "tests/deploy/report.h"
#include "tests/deploy/unitfile.h"

typedef struct dc_compose_opts {
    const dc_services_t *services;
    const dc_stage_map_t *maps; /* for the Dockerfiles the file builds */
    size_t n_maps;
    bool override; /* a partial file merged over the main one */
} dc_compose_opts_t;

/* Checks the compose file at path; problems go to rep. Errors only when
 * the file cannot be read (a YAML error is a problem, reported). */
cr_status_t dc_compose_check(const char *path, const dc_compose_opts_t *o,
                             dc_report_t *rep, cr_err_t *err);

#endif
