/* testhooks.h: the runner's test hooks, the only ones compiled into the
 * product. Both are enabled by the runner's process environment alone (no
 * request field, option or bus message reaches them) and log a warning
 * when active.
 *
 * The scripted sampler forces a model's output. When the runner's environment has CORRAL_TEST_SCRIPT naming a file, the
 * engine emits that file's text instead of sampling: the text is split into
 * answers by lines holding only `---`, each answer is tokenized once at load
 * by the model's real tokenizer (control-token texts such as `<|eot_id|>`
 * become their ids), and request k emits answer k mod n token by token,
 * then the end-of-sequence token. The parsers downstream (stop strings,
 * thinking, tool calls) see a real token stream with whatever splits the
 * tokenizer makes. Only the process environment enables it: no request
 * field, option or bus message can, so an API client cannot trigger it.
 * Knows nothing of the engine's loop; the engine asks for the next token. */
#ifndef RN_TESTHOOKS_H
#define RN_TESTHOOKS_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/runner/text/tokenizer.h"

/* Most answers and bytes a script file may hold. */
#define RN_SCRIPT_MAX_ANSWERS 64
#define RN_SCRIPT_MAX_BYTES (1u << 20)

typedef struct rn_script rn_script_t;

/* Reads the script named by CORRAL_TEST_SCRIPT and tokenizes it with tok.
 * *out = NULL (and CR_OK) when the variable is unset or empty. Caller owns
 * *out; free with rn_script_destroy. CR_E_IO for an unreadable file,
 * CR_E_INVALID for an answer that does not round-trip through the tokenizer
 * (err names the answer), CR_E_TOO_LARGE past the limits, CR_E_NOMEM. */
cr_status_t rn_script_from_env(const rn_tokenizer_t *tok, rn_script_t **out,
                               cr_err_t *err);

/* Same, from a file path (what the env var names). */
cr_status_t rn_script_load(const char *path, const rn_tokenizer_t *tok,
                           rn_script_t **out, cr_err_t *err);

void rn_script_destroy(rn_script_t **self_p);

/* Where one request is in its answer: each slot of a runner that serves
 * several requests at once keeps its own. */
typedef struct rn_script_cursor {
    int answer;
    size_t pos;
} rn_script_cursor_t;

/* Starts the next request at *c: its answer is the next one in turn. */
void rn_script_begin(rn_script_t *s, rn_script_cursor_t *c);

/* The next token of the current answer; once it is spent, the vocabulary's
 * end-of-sequence token (end-of-turn when it has no EOS; a vocabulary with
 * neither is refused at load). */
int32_t rn_script_next(const rn_script_t *s, rn_script_cursor_t *c);

/* Number of answers in the script. */
int rn_script_answers(const rn_script_t *s);

/* CORRAL_TEST_SLOW_LOAD="<text>:<ms>": sleeps <ms> (at most 600000) when
 * name contains <text>, so tests can watch a load in progress; returns at
 * once otherwise. The engine calls it while loading a model. */
void rn_testhook_slow_load(const char *name);

#endif
