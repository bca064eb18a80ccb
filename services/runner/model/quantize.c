/* quantize.c: GGUF requantization with llama.cpp's type mixes (see
 * quantize.h). */
#include "lib/prelude.h"
#include "services/runner/model/quantize.h"

#include "lib/gguf_write.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/threadpool.h"

#include <strings.h>

#define ROW_MAX_ELEMS (1u << 24) /* longest row converted (64 MiB of f32) */
#define CHUNK_BYTES (16u << 20)  /* converted rows written at a time */

/* ---- file types ------------------------------------------------------- */

typedef struct ftype_row {
    const char *name;
    uint32_t ftype;
    cr_type_t base; /* type of most matrices */
} ftype_row_t;

static const ftype_row_t ftypes[] = {
    {"Q4_0", RN_FTYPE_Q4_0, CR_TYPE_Q4_0},
    {"Q4_1", RN_FTYPE_Q4_1, CR_TYPE_Q4_1},
    {"Q5_0", RN_FTYPE_Q5_0, CR_TYPE_Q5_0},
    {"Q5_1", RN_FTYPE_Q5_1, CR_TYPE_Q5_1},
    {"Q8_0", RN_FTYPE_Q8_0, CR_TYPE_Q8_0},
    {"Q2_K", RN_FTYPE_Q2_K, CR_TYPE_Q2_K},
    {"Q3_K_S", RN_FTYPE_Q3_K_S, CR_TYPE_Q3_K},
    {"Q3_K_M", RN_FTYPE_Q3_K_M, CR_TYPE_Q3_K},
    {"Q3_K_L", RN_FTYPE_Q3_K_L, CR_TYPE_Q3_K},
    {"Q4_K_S", RN_FTYPE_Q4_K_S, CR_TYPE_Q4_K},
    {"Q4_K_M", RN_FTYPE_Q4_K_M, CR_TYPE_Q4_K},
    {"Q5_K_S", RN_FTYPE_Q5_K_S, CR_TYPE_Q5_K},
    {"Q5_K_M", RN_FTYPE_Q5_K_M, CR_TYPE_Q5_K},
    {"Q6_K", RN_FTYPE_Q6_K, CR_TYPE_Q6_K},
};

static const ftype_row_t *ftype_find(uint32_t ftype)
{
    for (size_t i = 0; i < CR_ARRAY_LEN(ftypes); i++)
        if (ftypes[i].ftype == ftype)
            return &ftypes[i];
    return NULL;
}

bool rn_quant_ftype_parse(const char *name, uint32_t *ftype)
{
    if (!name)
        return false;
    for (size_t i = 0; i < CR_ARRAY_LEN(ftypes); i++)
        if (!strcasecmp(name, ftypes[i].name)) {
            *ftype = ftypes[i].ftype;
            return true;
        }
    return false;
}

const char *rn_quant_ftype_name(uint32_t ftype)
{
    const ftype_row_t *r = ftype_find(ftype);
    return r ? r->name : NULL;
}

/* ---- the mix rules ---------------------------------------------------- */

/* llama.cpp's use_more_bits: the first and last eighth of the layers and
 * every third one between. */
static bool use_more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static bool has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static bool is_float_type(cr_type_t t)
{
    return t == CR_TYPE_F32 || t == CR_TYPE_F16 || t == CR_TYPE_BF16;
}

/* The type before the row-length check. */
static cr_type_t mix_type(uint32_t ft, cr_type_t base, const char *name,
                          const rn_quant_pos_t *p)
{
    bool km = ft == RN_FTYPE_Q4_K_M || ft == RN_FTYPE_Q5_K_M;
    if (!strcmp(name, "output.weight") ||
        (!p->has_output && !strcmp(name, "token_embd.weight")))
        return base == CR_TYPE_Q8_0 ? CR_TYPE_Q8_0 : CR_TYPE_Q6_K;
    if (strstr(name, "attn_v.weight")) {
        if (ft == RN_FTYPE_Q2_K)
            return p->n_gqa >= 4 ? CR_TYPE_Q4_K : CR_TYPE_Q3_K;
        if (ft == RN_FTYPE_Q3_K_M)
            return p->i_attn_v < 2 ? CR_TYPE_Q5_K : CR_TYPE_Q4_K;
        if (ft == RN_FTYPE_Q3_K_L)
            return CR_TYPE_Q5_K;
        if (km && use_more_bits(p->i_attn_v, p->n_attn_v))
            return CR_TYPE_Q6_K;
        if (ft == RN_FTYPE_Q4_K_S && p->i_attn_v < 4)
            return CR_TYPE_Q5_K;
        return base;
    }
    if (strstr(name, "ffn_down")) {
        int i = p->i_ffn_down, n = p->n_ffn_down;
        if (ft == RN_FTYPE_Q2_K)
            return CR_TYPE_Q3_K;
        if (ft == RN_FTYPE_Q3_K_M)
            return i < n / 16 ? CR_TYPE_Q5_K
                   : use_more_bits(i, n) ? CR_TYPE_Q4_K : CR_TYPE_Q3_K;
        if (ft == RN_FTYPE_Q3_K_L)
            return CR_TYPE_Q5_K;
        if (km && use_more_bits(i, n))
            return CR_TYPE_Q6_K;
        if (ft == RN_FTYPE_Q4_K_S && i < n / 8)
            return CR_TYPE_Q5_K;
        return base;
    }
    if (strstr(name, "attn_output.weight")) {
        if (ft == RN_FTYPE_Q2_K)
            return CR_TYPE_Q3_K;
        if (ft == RN_FTYPE_Q3_K_M)
            return CR_TYPE_Q4_K;
        if (ft == RN_FTYPE_Q3_K_L)
            return CR_TYPE_Q5_K;
        return base;
    }
    if (strstr(name, "attn_qkv.weight")) {
        if (ft == RN_FTYPE_Q3_K_M || ft == RN_FTYPE_Q3_K_L)
            return CR_TYPE_Q4_K;
        if (ft == RN_FTYPE_Q4_K_M)
            return CR_TYPE_Q5_K;
        if (ft == RN_FTYPE_Q5_K_M)
            return CR_TYPE_Q6_K;
    }
    return base;
}

/* llama.cpp's fallback for rows that are not whole super-blocks (it uses
 * IQ4_NL for Q2_K/Q3_K, which corral has no kernels for: Q4_0 as older
 * llama.cpp did), then F16 if even 32 does not divide the row. */
static cr_type_t row_fallback(cr_type_t t, uint64_t ne0)
{
    if (ne0 % cr_type_info(t)->block_elems == 0)
        return t;
    switch (t) {
    case CR_TYPE_Q2_K:
    case CR_TYPE_Q3_K: t = CR_TYPE_Q4_0; break;
    case CR_TYPE_Q4_K: t = CR_TYPE_Q5_0; break;
    case CR_TYPE_Q5_K: t = CR_TYPE_Q5_1; break;
    case CR_TYPE_Q6_K: t = CR_TYPE_Q8_0; break;
    default: break;
    }
    if (ne0 % cr_type_info(t)->block_elems == 0)
        return t;
    return CR_TYPE_F16;
}

cr_type_t rn_quant_tensor_type(uint32_t ftype, const char *name,
                               uint32_t n_dims, uint64_t ne0, cr_type_t src,
                               const rn_quant_pos_t *pos)
{
    const ftype_row_t *r = ftype_find(ftype);
    if (!is_float_type(src))
        return src; /* already quantized (or integer): kept */
    if (n_dims < 2)
        return CR_TYPE_F32; /* norms, biases, rope factors */
    if (!r || !has_suffix(name, "weight") ||
        strstr(name, "ffn_gate_inp.weight") || strstr(name, "pos_embd") ||
        strstr(name, "token_types") || strstr(name, "_norm"))
        return src;
    return row_fallback(mix_type(ftype, r->base, name, pos), ne0);
}

/* ---- source check ----------------------------------------------------- */

bool rn_quant_source_ok(const cr_gguf_t *g)
{
    uint32_t ft;
    if (cr_gguf_get_u32(g, "general.file_type", &ft))
        return ft == RN_FTYPE_F32 || ft == RN_FTYPE_F16 || ft == RN_FTYPE_BF16;
    size_t n = cr_gguf_tensor_count(g), n2 = 0;
    for (size_t i = 0; i < n; i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        if (t->n_dims < 2)
            continue;
        n2++;
        if (!is_float_type(t->type))
            return false;
    }
    return n2 > 0;
}

/* ---- the conversion --------------------------------------------------- */

/* What every tensor's conversion shares. */
typedef struct shared {
    rn_threadpool_t *pool;
    uint64_t done;         /* progress: source bytes */
    uint64_t total;
    rn_quant_progress_fn fn;
    void *ctx;
    float *rowf;           /* [threads][max_row] floats */
    uint64_t max_row;
    uint8_t *chunk;        /* CHUNK_BYTES + one converted row */
} shared_t;

typedef struct job {
    const cr_gguf_tensor_t *src;
    cr_type_t dst;
    shared_t *sh;
} job_t;

/* Rows r0..r0+nrows of one tensor, converted by the pool's threads into
 * chunk (row r at r * out_row). */
typedef struct chunk_task {
    const be_type_traits_t *in, *out;
    const uint8_t *src;
    uint64_t in_row, out_row, ne0, r0, nrows;
    shared_t *sh;
} chunk_task_t;

static void convert_rows(void *ctx, int ith, int nth)
{
    chunk_task_t *c = ctx;
    float *f = c->sh->rowf + (size_t)ith * c->sh->max_row;
    for (uint64_t r = (uint64_t)ith; r < c->nrows; r += (uint64_t)nth) {
        c->in->to_float(c->src + (c->r0 + r) * c->in_row, f, (int64_t)c->ne0);
        c->out->from_float(f, c->sh->chunk + r * c->out_row, (int64_t)c->ne0);
    }
}

/* Writes one tensor's rows converted from src->type to dst. */
static cr_status_t convert_tensor(void *ctx, const char *name,
                                  uint64_t size_bytes, cr_gguf_sink_t *sink,
                                  cr_err_t *err)
{
    job_t *j = ctx;
    shared_t *sh = j->sh;
    const cr_gguf_tensor_t *t = j->src;
    const be_type_traits_t *in = be_type_traits(t->type);
    const be_type_traits_t *out = be_type_traits(j->dst);
    if (!in || !in->to_float || !out || !out->from_float)
        return cr_err_set(err, CR_E_UNSUPPORTED,
                          "tensor '%s': no conversion from %s to %s", name,
                          cr_type_info(t->type)->name,
                          cr_type_info(j->dst)->name);
    uint64_t ne0 = t->ne[0], rows = t->n_elems / ne0;
    uint64_t in_row = 0, out_row = 0;
    cr_type_row_bytes(t->type, ne0, &in_row);
    cr_type_row_bytes(j->dst, ne0, &out_row);
    if (out_row * rows != size_bytes)
        return cr_err_set(err, CR_E_INVALID, "tensor '%s': size mismatch",
                          name);
    uint64_t per_chunk = CHUNK_BYTES / out_row ? CHUNK_BYTES / out_row : 1;
    chunk_task_t c = {.in = in, .out = out, .src = t->data, .in_row = in_row,
                      .out_row = out_row, .ne0 = ne0, .sh = sh};
    for (c.r0 = 0; c.r0 < rows; c.r0 += c.nrows) {
        c.nrows = rows - c.r0 < per_chunk ? rows - c.r0 : per_chunk;
        rn_threadpool_run(sh->pool, convert_rows, &c,
                          c.nrows > INT_MAX ? INT_MAX : (int)c.nrows);
        cr_status_t st = cr_gguf_sink_write(sink, sh->chunk,
                                            c.nrows * out_row, err);
        if (st)
            return st;
    }
    sh->done += t->size_bytes;
    if (sh->fn)
        sh->fn(sh->ctx, sh->done, sh->total);
    return CR_OK;
}

/* Counts and the GQA factor the mix rules need. */
static void scan_file(const cr_gguf_t *g, rn_quant_pos_t *pos)
{
    memset(pos, 0, sizeof *pos);
    pos->n_gqa = 1;
    size_t n = cr_gguf_tensor_count(g);
    for (size_t i = 0; i < n; i++) {
        const char *name = cr_gguf_tensor_at(g, i)->name;
        if (strstr(name, "attn_v.weight") || strstr(name, "attn_qkv.weight"))
            pos->n_attn_v++;
        if (strstr(name, "ffn_down"))
            pos->n_ffn_down++;
        if (!strcmp(name, "output.weight"))
            pos->has_output = true;
    }
    char key[96];
    const char *arch = cr_gguf_arch(g);
    uint32_t heads = 0, kv = 0;
    snprintf(key, sizeof key, "%s.attention.head_count", arch);
    cr_gguf_get_u32(g, key, &heads);
    snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
    if (heads && cr_gguf_get_u32(g, key, &kv) && kv && heads % kv == 0)
        pos->n_gqa = (int)(heads / kv);
}

cr_status_t rn_quantize_file(const char *in_path, const char *out_path,
                             uint32_t ftype, rn_quant_progress_fn fn,
                             void *ctx, cr_err_t *err)
{
    if (!ftype_find(ftype))
        return cr_err_set(err, CR_E_INVALID,
                          "unsupported quantization type %u", ftype);
    cr_gguf_t *g = NULL;
    cr_gguf_writer_t *w = NULL;
    job_t *jobs = NULL;
    shared_t sh = {.fn = fn, .ctx = ctx};
    cr_status_t st = cr_gguf_open(in_path, &g, err);
    if (st)
        return st;
    if (!rn_quant_source_ok(g)) {
        st = cr_err_set(err, CR_E_INVALID,
                        "quantization is only supported for F16, BF16 and "
                        "F32 models");
        goto out;
    }
    size_t n = cr_gguf_tensor_count(g);
    uint64_t max_row = 1;
    for (size_t i = 0; i < n; i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        if (t->ne[0] > max_row)
            max_row = t->ne[0];
        sh.total += t->size_bytes;
    }
    if (max_row > ROW_MAX_ELEMS) {
        st = cr_err_set(err, CR_E_TOO_LARGE, "a row of %" PRIu64
                        " elements is over the limit of %u", max_row,
                        ROW_MAX_ELEMS);
        goto out;
    }
    st = rn_threadpool_new(0, &sh.pool, err);
    if (st)
        goto out;
    sh.max_row = max_row;
    w = cr_gguf_writer_new();
    jobs = calloc(n ? n : 1, sizeof *jobs);
    sh.rowf = malloc((size_t)rn_threadpool_size(sh.pool) * max_row * sizeof(float));
    /* One converted row is at most a row of f32 (any type fits). */
    sh.chunk = malloc(CHUNK_BYTES + max_row * sizeof(float));
    if (!w || !jobs || !sh.rowf || !sh.chunk) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        goto out;
    }
    st = cr_gguf_writer_copy_prefix(w, g, "", err);
    if (!st)
        st = cr_gguf_writer_add_u32(w, "general.file_type", ftype, err);
    if (!st)
        st = cr_gguf_writer_add_u32(w, "general.quantization_version", 2, err);
    if (st)
        goto out;
    rn_quant_pos_t pos;
    scan_file(g, &pos);
    for (size_t i = 0; i < n; i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        cr_type_t dst = rn_quant_tensor_type(ftype, t->name, t->n_dims,
                                             t->ne[0], t->type, &pos);
        if (strstr(t->name, "attn_v.weight") || strstr(t->name, "attn_qkv.weight"))
            pos.i_attn_v++;
        if (strstr(t->name, "ffn_down"))
            pos.i_ffn_down++;
        job_t *j = &jobs[i];
        *j = (job_t){.src = t, .dst = dst, .sh = &sh};
        if (dst == t->type) {
            /* Kept: borrowed from the mapping, which outlives the write. */
            st = cr_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne,
                                           t->type, t->data, NULL, err);
            sh.done += t->size_bytes;
        } else {
            st = cr_gguf_writer_add_tensor_fn(w, t->name, t->n_dims, t->ne,
                                              dst, convert_tensor, j, NULL,
                                              err);
        }
        if (st)
            goto out;
    }
    /* Kept tensors count from the start; converted ones as they finish. */
    if (fn)
        fn(ctx, sh.done, sh.total);
    st = cr_gguf_writer_write(w, out_path, err);
    if (!st && fn)
        fn(ctx, sh.total, sh.total);
out:
    free(sh.chunk);
    free(sh.rowf);
    rn_threadpool_destroy(&sh.pool);
    free(jobs);
    cr_gguf_writer_destroy(&w);
    cr_gguf_close(&g);
    return st;
}
