/* logprob_json.h: one `logprobs` entry as Ollama's JSON, written straight
 * into a reused buffer (the token path allocates nothing).
 *
 *   {"token":"<text>","logprob":<f>,"bytes":[<b>...],
 *    "top_logprobs":[{"token":..,"logprob":..,"bytes":[..]}...]}
 *
 * The same bytes jansson's compact dump gives for that object: strings
 * escaped as jansson does, a piece that is not valid UTF-8 on its own (a
 * byte token) written as "" with `bytes` holding the truth, numbers with
 * 17 significant digits. */
#ifndef RN_LOGPROB_JSON_H
#define RN_LOGPROB_JSON_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "services/runner/text/tokenizer.h"

/* One (token, log-probability) pair. */
typedef struct rn_logprob {
    int32_t token;
    float logprob; /* natural log; -INFINITY for an impossible token */
} rn_logprob_t;

/* Appends the entry for token (log-prob lp) and its n_top alternatives to
 * out. CR_E_NOMEM (or the buffer's limit) on failure. */
cr_status_t rn_logprob_json(cr_buf_t *out, const rn_tokenizer_t *tok,
                            int32_t token, float lp, const rn_logprob_t *top,
                            size_t n_top);

#endif
