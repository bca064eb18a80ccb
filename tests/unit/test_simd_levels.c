/* test_simd_levels.c: which SIMD levels this machine runs, and so which CPU
 * kernels the suite exercised and which it did not. tests/run.sh runs it
 * before the suite so a CI log says, near its start, when a path was never
 * executed; a level the CPU lacks is printed as NOT TESTED.
 *
 * It also checks what makes that report true:
 * - be_simd_detect() matches the CPU's own feature bits (read here
 *   independently), lowered only by CORRAL_CPU_SIMD;
 * - asking for a level the CPU lacks never yields a kernel written for it
 *   (that would be an illegal instruction), for every op family;
 * - each level the CPU has gets its own kernels where they exist. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/repack.h"
#include "services/runner/backend/cpu/vec.h"
#include "tests/unit/check.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

enum { N_LEVELS = BE_SIMD_AVX512_VNNI + 1 };

/* The CPU's level from its feature bits, as the kernels need them. */
static be_simd_t cpu_level(char *features, size_t cap)
{
    features[0] = 0;
    be_simd_t lv = BE_SIMD_SCALAR;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
    bool bf16 = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));
    __builtin_cpu_init();
    struct {
        const char *name;
        bool on;
    } f[] = {
        {"avx2", __builtin_cpu_supports("avx2")},
        {"fma", __builtin_cpu_supports("fma")},
        {"f16c", f16c},
        {"avx512f", __builtin_cpu_supports("avx512f")},
        {"avx512bw", __builtin_cpu_supports("avx512bw")},
        {"avx512vl", __builtin_cpu_supports("avx512vl")},
        {"avx512vnni", __builtin_cpu_supports("avx512vnni")},
        {"avx512_bf16", bf16},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(f); i++)
        if (f[i].on)
            snprintf(features + strlen(features), cap - strlen(features), "%s%s",
                     features[0] ? " " : "", f[i].name);
    if (f[0].on && f[1].on && f[2].on) {
        lv = BE_SIMD_AVX2;
        if (f[3].on && f[4].on && f[5].on && f[6].on)
            lv = BE_SIMD_AVX512_VNNI;
    }
#endif
    if (!features[0])
        snprintf(features, cap, "(none of the x86 vector extensions)");
    return lv;
}

static const size_t trait_offs[] = {
    offsetof(be_type_traits_t, to_float),  offsetof(be_type_traits_t, from_float),
    offsetof(be_type_traits_t, vec_dot),   offsetof(be_type_traits_t, vec_dot4),
    offsetof(be_type_traits_t, vec_dot_r4), offsetof(be_type_traits_t, vec_dot44),
};

static void *trait_fn(const be_type_traits_t *tt, size_t off)
{
    void *fn;
    memcpy(&fn, (const char *)tt + off, sizeof fn);
    return fn;
}

/* The highest level among the kernels in a type's traits at `lv`, each
 * kernel's level being the lowest table that holds it. */
static int traits_level(cr_type_t t, be_simd_t lv)
{
    int best = BE_SIMD_SCALAR;
    for (size_t k = 0; k < CR_ARRAY_LEN(trait_offs); k++) {
        void *fn = trait_fn(be_type_traits_at(t, lv), trait_offs[k]);
        for (int l = BE_SIMD_SCALAR; fn && l < N_LEVELS; l++)
            if (fn == trait_fn(be_type_traits_compiled(t, (be_simd_t)l), trait_offs[k])) {
                best = l > best ? l : best;
                break;
            }
    }
    return best;
}

static int gemm_level(be_pack_gemm_fn fn, cr_type_t t)
{
    for (int lv = BE_SIMD_SCALAR; lv < N_LEVELS; lv++)
        if (fn && fn == be_pack_gemm_compiled(t, (be_simd_t)lv))
            return lv;
    return -1;
}

static const cr_type_t packed_types[] = {CR_TYPE_Q4_0, CR_TYPE_Q8_0, CR_TYPE_Q4_K,
                                         CR_TYPE_Q6_K};

/* Appends " s" to buf. */
static void append(char *buf, size_t cap, const char *s)
{
    size_t l = strlen(buf);
    snprintf(buf + l, cap - l, " %s", s);
}

int main(void)
{
    char features[256];
    be_simd_t hw = cpu_level(features, sizeof features);
    be_simd_t have = be_simd_detect();
    const char *force = getenv("CORRAL_CPU_SIMD");
    printf("== CPU SIMD levels ==\ncpu features: %s; CORRAL_CPU_SIMD %s%s\n", features,
           force ? "=" : "unset", force ? force : "");
    if (force)
        CHECK_MSG(have <= hw, "detected %s above the CPU's %s", be_simd_name(have),
                  be_simd_name(hw));
    else
        CHECK_MSG(have == hw, "be_simd_detect says %s, the feature bits %s", be_simd_name(have),
                  be_simd_name(hw));

    char untested[2048] = "";
    for (int lv = BE_SIMD_SCALAR; lv < N_LEVELS; lv++) {
        be_simd_t l = (be_simd_t)lv;
        bool runs = lv <= (int)have;
        char line[2048] = "", own[256] = "", other[256] = "";
        /* vector loops */
        const be_vec_ops_t *v = be_vec_ops_at(l);
        if (runs)
            snprintf(line, sizeof line, "vec ops %s", v->name);
        else
            CHECK_MSG(!strcmp(v->name, be_vec_ops_at(have)->name),
                      "vec ops for %s on a CPU at %s: %s", be_simd_name(l), be_simd_name(have),
                      v->name);
        /* dot products and conversions per weight type, listed under the
         * level of their kernels; `dots_own`: types with a dot product
         * written for this level (for the report of what never ran) */
        char by_level[N_LEVELS][256] = {{0}}, dots_own[256] = "";
        for (int t = 0; t < CR_TYPE__COUNT; t++) {
            const be_type_traits_t *tt = be_type_traits_at((cr_type_t)t, l);
            if (!tt || !tt->vec_dot)
                continue;
            int tl = traits_level((cr_type_t)t, l);
            CHECK_MSG(tl <= (int)have, "%s traits at %s use a %s kernel on a %s CPU", tt->name,
                      be_simd_name(l), be_simd_name((be_simd_t)tl), be_simd_name(have));
            append(by_level[tl], sizeof by_level[tl], tt->name);
            if (lv > BE_SIMD_SCALAR &&
                be_type_traits_compiled((cr_type_t)t, l)->vec_dot !=
                    be_type_traits_compiled((cr_type_t)t, (be_simd_t)(lv - 1))->vec_dot)
                append(dots_own, sizeof dots_own, tt->name);
        }
        for (int k = lv; runs && k >= BE_SIMD_SCALAR; k--) {
            size_t n = strlen(line);
            snprintf(line + n, sizeof line - n, "%s %s (%s)", k == lv ? "; dot products" : ",",
                     be_simd_name((be_simd_t)k), by_level[k][0] ? by_level[k] + 1 : "none");
        }
        /* packed (8-row) matrix products */
        own[0] = other[0] = 0;
        for (size_t k = 0; k < CR_ARRAY_LEN(packed_types); k++) {
            cr_type_t t = packed_types[k];
            be_pack_gemm_fn fn = be_pack_gemm_at(t, l);
            int gl = gemm_level(fn, t);
            CHECK_MSG(gl >= 0 && gl <= (int)have && gl <= lv,
                      "packed %s at %s: a %d-level kernel on a %s CPU", be_type_traits_at(t, l)->name,
                      be_simd_name(l), gl, be_simd_name(have));
            if (runs && gl >= 0) {
                size_t n = strlen(line);
                snprintf(line + n, sizeof line - n, "%s %s %s",
                         k ? "," : "; packed GEMM", be_type_traits_at(t, l)->name,
                         be_simd_name((be_simd_t)gl));
            }
            /* a kernel written for this level that the CPU cannot run */
            if (!runs && be_pack_gemm_compiled(t, l))
                append(own, sizeof own, be_type_traits_at(t, BE_SIMD_SCALAR)->name);
        }
        if (runs) {
            printf("level %-11s runs: %s\n", be_simd_name(l), line);
        } else {
            printf("level %-11s NOT TESTED (this CPU%s stops at %s)\n", be_simd_name(l),
                   force ? " with CORRAL_CPU_SIMD" : "", be_simd_name(have));
            size_t n = strlen(untested);
            if (lv == BE_SIMD_AVX2)
                snprintf(untested + n, sizeof untested - n,
                         "\n  avx2: vec ops, dot products, packed GEMM (every avx2 kernel)");
            else
                snprintf(untested + n, sizeof untested - n, "\n  %s: packed GEMM%s; dot products%s",
                         be_simd_name(l), own[0] ? own : " (none)",
                         dots_own[0] ? dots_own : " (none)");
        }
    }
    printf("kernels never executed on this machine:%s\n", untested[0] ? untested : " none");
    if (strstr(features, "avx512_bf16"))
        printf("note: the CPU has avx512_bf16; corral has no kernel using it (BF16 weights use "
               "the %s dot product)\n",
               be_simd_name(have > BE_SIMD_AVX2 ? BE_SIMD_AVX2 : have));
    return check_finish("test_simd_levels");
}
