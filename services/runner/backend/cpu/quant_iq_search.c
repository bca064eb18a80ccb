/* quant_iq_search.c: nearest-grid-point search for the I-quant quantizers
 * (quant_iq.c, quant_iq1.c), tests and synthetic models only.
 *
 * Trying every point of a 1024- or 2048-point grid for every group of 8
 * made a small model's quantization take seconds, and minutes under the
 * sanitizers. Instead each target is first rounded per coordinate to the
 * format's value set; that rounding (one of n_set^dim keys) has a list,
 * built once, of the NEAR grid points closest to it, and only those are
 * scored against the target. The result is a grid point near the target,
 * not always the nearest (far targets may miss it); the quantizers only
 * need valid blocks of reasonable error (test_quant_iq bounds it). */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/quant_iq.h"

#include <math.h>
#include <pthread.h>

enum { NEAR = 16, MAX_KEYS = 6561, N_DEFS = 6 };

struct be_iq_search {
    const be_iq_grid_def_t *def;
    float set[8];                  /* the value set as floats */
    float *pts;                    /* n_points x dim */
    float *norm2;                  /* n_points */
    int16_t near[MAX_KEYS][NEAR];  /* per key, the closest points */
};

static be_iq_search_t searches[N_DEFS];
static float pts_all[(256 + 512 + 1024 + 2048) * 8 + (256 + 512) * 4];
static float norm2_all[256 + 512 + 1024 + 256 + 512 + 2048];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void build_one(be_iq_search_t *s, const be_iq_grid_def_t *d, float *pts, float *norm2)
{
    s->def = d;
    s->pts = pts;
    s->norm2 = norm2;
    for (int k = 0; k < d->n_set; k++)
        s->set[k] = (float)d->set[k];
    unsigned mask = (1u << d->bits) - 1;
    for (int p = 0; p < d->n_points; p++) {
        float n2 = 0;
        for (int c = 0; c < d->dim; c++) {
            float f = s->set[(d->code[p] >> (d->bits * c)) & mask];
            pts[p * d->dim + c] = f;
            n2 += f * f;
        }
        norm2[p] = n2;
    }
    int n_keys = 1;
    for (int c = 0; c < d->dim; c++)
        n_keys *= d->n_set;
    for (int key = 0; key < n_keys; key++) {
        float v[8];
        for (int c = 0, k = key; c < d->dim; c++, k /= d->n_set)
            v[c] = s->set[k % d->n_set];
        float best[NEAR];
        for (int j = 0; j < NEAR; j++) {
            best[j] = INFINITY;
            s->near[key][j] = 0;
        }
        for (int p = 0; p < d->n_points; p++) {
            float e = 0;
            for (int c = 0; c < d->dim; c++) {
                float r = v[c] - pts[p * d->dim + c];
                e += r * r;
            }
            if (e >= best[NEAR - 1])
                continue;
            int j = NEAR - 1;
            for (; j > 0 && best[j - 1] > e; j--) {
                best[j] = best[j - 1];
                s->near[key][j] = s->near[key][j - 1];
            }
            best[j] = e;
            s->near[key][j] = (int16_t)p;
        }
    }
}

static void build(void)
{
    int n = 0;
    const be_iq_grid_def_t *defs = be_iq_grid_defs(&n);
    float *pts = pts_all, *norm2 = norm2_all;
    for (int i = 0; i < n && i < N_DEFS; i++) {
        build_one(&searches[i], &defs[i], pts, norm2);
        pts += defs[i].n_points * defs[i].dim;
        norm2 += defs[i].n_points;
    }
}

const be_iq_search_t *be_iq_search(int def)
{
    pthread_once(&once, build);
    return def >= 0 && def < N_DEFS ? &searches[def] : NULL;
}

const float *be_iq_search_point(const be_iq_search_t *s, int p)
{
    return s->pts + p * s->def->dim;
}

int be_iq_search_nearest(const be_iq_search_t *s, const float *t)
{
    const be_iq_grid_def_t *d = s->def;
    int key = 0;
    for (int c = d->dim - 1; c >= 0; c--) {
        int k = 0; /* NaN: index 0 */
        while (k + 1 < d->n_set && t[c] > 0.5f * (s->set[k] + s->set[k + 1]))
            k++;
        key = key * d->n_set + k;
    }
    int best = s->near[key][0];
    float best_v = -INFINITY;
    for (int j = 0; j < NEAR; j++) {
        int p = s->near[key][j];
        const float *g = s->pts + p * d->dim;
        float dot = 0;
        for (int c = 0; c < d->dim; c++)
            dot += t[c] * g[c];
        float v = 2 * dot - s->norm2[p];
        if (v > best_v) {
            best_v = v;
            best = p;
        }
    }
    return best;
}
