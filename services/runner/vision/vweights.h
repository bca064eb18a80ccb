/* vweights.h: binding a vision tower's tensors to backend weights.
 *
 * A tower file's tensor, found by name, checked for its shape (and, for
 * vectors the ops read in place, to be F32) and prepared on the backend;
 * the binder remembers every weight it prepared so one call releases them
 * all. Used by the SigLIP tower (siglip.c), gemma3's projector
 * (proj_gemma3.c), the Pixtral tower (pixtral.c) and qwen2.5-vl's
 * (qwen2vl.c); the llava tower (clip.c) still keeps its own.
 *
 * Borrows the GGUF (its tensors' data must outlive the weights) and the
 * backend; the be_weight_t structs live in the caller's objects and must
 * stay put until rn_vweights_release. Not thread-safe. */
#ifndef RN_VWEIGHTS_H
#define RN_VWEIGHTS_H

#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/status.h"
#include "services/runner/backend/backend.h"

#define RN_VWEIGHTS_MAX 8192 /* weights one binder prepares, at most */

typedef struct rn_vweights {
    const cr_gguf_t *g;      /* borrowed */
    be_backend_t *be;        /* borrowed */
    const char *what;        /* for messages: "projector", "vision tower" */
    be_weight_t **prepared;  /* [n] weights to release */
    int n, cap;
    uint64_t bytes;          /* file bytes of the bound tensors */
} rn_vweights_t;

/* A binder over g and be; nothing to free until something is bound. */
void rn_vweights_init(rn_vweights_t *w, const cr_gguf_t *g, be_backend_t *be,
                      const char *what);

/* Binds tensor `name` into *out as [rows][cols] (more dims folded into
 * cols: ne[0..n-2] x ne[n-1]) and prepares it. An absent tensor leaves
 * *out zeroed (data NULL) unless required (CR_E_INVALID naming it). vec:
 * must be F32. CR_E_INVALID for a shape mismatch (message gives both),
 * CR_E_UNSUPPORTED for a type the backend does not take or misaligned
 * data, CR_E_NOMEM. */
cr_status_t rn_vweights_bind(rn_vweights_t *w, const char *name, int64_t cols, int64_t rows,
                             bool required, bool vec, be_weight_t *out, cr_err_t *err);

/* Prepares a weight whose data the caller built (host memory it owns and
 * keeps until release): same bookkeeping as a bound tensor. */
cr_status_t rn_vweights_add(rn_vweights_t *w, be_weight_t *out, cr_err_t *err);

/* Releases every prepared weight; the binder is empty afterwards. */
void rn_vweights_release(rn_vweights_t *w);

#endif
