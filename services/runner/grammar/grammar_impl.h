/* grammar_impl.h: what grammar.c (matching, tokens) and grammar_schema.c
 * (compiling a format) share: the compiled schema nodes and the matcher's
 * state. Internal to the runner's grammar module; nothing else includes it. */
#ifndef RN_GRAMMAR_IMPL_H
#define RN_GRAMMAR_IMPL_H

#include "lib/prelude.h"
#include "services/runner/grammar/grammar.h"

/* ---- schema nodes ------------------------------------------------------ */

enum {
    T_NULL = 1u << 0,
    T_BOOL = 1u << 1,
    T_INT = 1u << 2,
    T_NUM = 1u << 3, /* any number (integers included) */
    T_STR = 1u << 4,
    T_ARR = 1u << 5,
    T_OBJ = 1u << 6,
    T_ALL = (1u << 7) - 1,
};

#define INF_NEED 0x3fffffffu
#define NO_NODE (-1)

typedef struct node {
    uint32_t types;              /* T_* the value may take */
    uint32_t alt_lo, alt_n;      /* anyOf: alts[alt_lo .. alt_lo+alt_n) */
    bool has_lits;               /* enum/const: lits[lit_lo .. lit_hi) */
    uint32_t lit_lo, lit_hi;     /* sorted by bytes */
    uint32_t prop_lo, n_props;   /* props[prop_lo ..): required first */
    uint32_t n_req;              /* the first n_req props are required */
    int32_t additional;          /* node of extra keys, NO_NODE: none */
    int32_t items;               /* node of array items, NO_NODE: none */
    uint32_t min_items, max_items;
    uint32_t max_members;        /* extra keys at most */
    uint32_t min_len, max_len;   /* string length in characters */
    bool bounded;                /* minimum/maximum: numbers are written
                                    with at most `scale` fraction digits and
                                    no exponent, and must lie in lo..hi */
    uint8_t scale;               /* 0 for integers, NUM_SCALE for numbers */
    int64_t lo, hi;              /* bounds in units of 10^-scale */
    uint32_t need, need_obj, need_arr; /* container levels needed to finish
                                          a value (as an object, an array) */
} node_t;

typedef struct prop {
    char *enc;    /* the key as written: JSON-escaped, no quotes */
    uint32_t len; /* bytes of enc */
    int32_t node;
} prop_t;

typedef struct lit {
    char *s; /* compact JSON text of an enum/const value */
    uint32_t len;
} lit_t;

/* ---- matcher state ----------------------------------------------------- */

enum { K_VALUE = 1, K_OBJ, K_ARR, K_STR, K_NUM, K_LIT };
enum { O_OPEN = 1, O_COMMA, O_KEY, O_FREEKEY, O_COLON, O_VALUE, O_AFTER };
enum { A_OPEN = 1, A_ITEM, A_AFTER };
enum { S_NORMAL = 0, S_ESC, S_U1, S_U2, S_U3, S_U4 };
enum { N_START = 0, N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };
enum { STR_VALUE = 0, STR_KEY = 1 };

#define FREE_KEY 0xffffffffu
#define MAX_FRAMES (2 * RN_GRAMMAR_MAX_DEPTH + 4)
#define MAX_THREADS 8
#define MAX_INT_DIGITS 16
#define MAX_FRAC_DIGITS 16
#define MAX_EXP_DIGITS 2
#define NUM_SCALE 6             /* fraction digits of a bounded number */
#define MAX_BOUNDED_NUM_DIGITS 12 /* integer digits of a bounded number */

/* One stack entry; 32 bytes and no padding, so threads compare with memcmp.
 *   K_VALUE: ws = whitespace state.
 *   K_OBJ:   a = next declared property allowed, b = members written,
 *            c = key bytes matched (O_KEY) / chosen property (O_COLON),
 *            m = candidate properties (O_KEY).
 *   K_ARR:   b = items started.
 *   K_STR:   a = bytes, c = characters, x = STR_VALUE/STR_KEY,
 *            ws = UTF-8 continuation state, m = \u value so far.
 *   K_NUM:   x bit 0 = integers only, bit 1 = negative; a = integer digits,
 *            c = fraction or exponent digits; for bounded numbers m = the
 *            integer part and pad = the fraction digits' value.
 *   K_LIT:   a..m = candidate range in lits, c = bytes matched. */
typedef struct frame {
    uint8_t kind, st, ws, x;
    uint32_t node;
    uint32_t a, b, c;
    uint32_t pad;
    uint64_t m;
} frame_t;
_Static_assert(sizeof(frame_t) == 32, "frame_t has padding");

typedef struct thread {
    uint16_t depth; /* frames in use */
    uint16_t level; /* open containers */
    frame_t f[MAX_FRAMES];
} thread_t;

typedef struct mstate {
    uint32_t n;
    thread_t t[MAX_THREADS];
} mstate_t;

struct rn_grammar {
    rn_grammar_opts_t o;
    node_t *nodes;
    uint32_t n_nodes, cap_nodes;
    prop_t *props;
    uint32_t n_props, cap_props;
    lit_t *lits;
    uint32_t n_lits, cap_lits;
    int32_t *alts;
    uint32_t n_alts, cap_alts;
    int32_t root, any;
    uint32_t bool_lo, null_lo; /* "false","true" and "null" in lits */
    mstate_t cur;
    mstate_t scratch[2];
    mstate_t *dfs; /* [dfs_cap]: masking's state per trie depth */
    size_t dfs_cap;
};

#endif
