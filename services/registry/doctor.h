/* doctor.h: `corral doctor` — checks the model store and, when asked,
 * removes what cannot be used.
 *
 * Checked: every manifest parses; every blob a manifest names exists, has
 * the size the manifest says and hashes to its name; no blob is left that
 * no manifest names; no partial download (`sha256-<hex>-partial*`) or
 * temp file (`.corral-tmp-*` in blobs/, `.<tag>.tmp-*` beside a manifest)
 * is left behind. With fix, corrupt blobs, unused blobs, partial and temp
 * files go, then every manifest that is corrupt or names a blob that is
 * missing or corrupt (a dangling manifest: the model cannot load). Meant
 * to run while no server writes to the store (a pull in progress has
 * partial files; a create in progress has blobs no manifest names yet). */
#ifndef REG_DOCTOR_H
#define REG_DOCTOR_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/registry/store.h"

#include <stdio.h>

typedef struct reg_doctor_report {
    size_t manifests;     /* manifests checked */
    size_t blobs;         /* blobs hashed */
    size_t problems;      /* findings (each printed as one line) */
    size_t unused;        /* blobs no manifest names (printed, not problems:
                             the registry prunes them when it starts) */
    size_t removed;       /* files removed (with fix) */
} reg_doctor_report_t;

/* Checks the store, printing one line per finding to out ("corrupt blob
 * sha256-<hex>: ...", "dangling manifest <name>: ...", "partial file
 * blobs/<file>", ...) and, with fix, one "removed <path>" per file it
 * removes. CR_E_IO when the store cannot be read at all. */
cr_status_t reg_doctor_run(reg_store_t *s, bool fix, FILE *out, reg_doctor_report_t *rep,
                           cr_err_t *err);

/* `corral-registry doctor [--fix] [--models DIR]` (what `corral doctor`
 * runs): prints the findings and a summary line; exits 0 when the store is
 * sound (or --fix removed what was wrong), 1 when problems remain or the
 * store cannot be read, 2 for bad arguments. Unused blobs alone are not
 * problems (exit 0): a create that converted its uploads leaves them,
 * and the registry's start prunes them unless OLLAMA_NOPRUNE is set. */
int reg_doctor_main(int argc, char **argv);

#endif
