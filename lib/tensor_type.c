/* tensor_type.c: block sizes of every GGML type id corral knows. */
#include "lib/prelude.h"
#include "lib/tensor_type.h"

/* Block layouts (elements, bytes) from the GGUF/GGML definitions:
 * Q4_0 = f16 scale + 16 bytes of nibbles for 32 values, Q8_0 = f16 + 32 int8,
 * K-quants are super-blocks of 256 values; IQ4_NL = f16 scale + 16 bytes of
 * table indices for 32, IQ4_XS = 256 values in f16 + 2 + 4 bytes of scales +
 * 128 bytes of indices, MXFP4 = one E8M0 exponent byte + 16 bytes of E2M1
 * codes for 32; the 2- and 3-bit I-quants are 256 values in f16 + grid
 * indices, signs and 4-bit scales: IQ2_XXS 2 + 64, IQ2_XS 2 + 64 + 8,
 * IQ2_S 2 + 64 + 8 + 8, IQ3_XXS 2 + 96, IQ3_S 2 + 64 + 8 + 32 + 4,
 * IQ1_S 2 + 32 + 16. */
static const cr_type_info_t type_table[CR_TYPE__COUNT] = {
    [CR_TYPE_F32] = {"F32", 1, 4},
    [CR_TYPE_F16] = {"F16", 1, 2},
    [CR_TYPE_Q4_0] = {"Q4_0", 32, 18},
    [CR_TYPE_Q4_1] = {"Q4_1", 32, 20},
    [CR_TYPE_Q5_0] = {"Q5_0", 32, 22},
    [CR_TYPE_Q5_1] = {"Q5_1", 32, 24},
    [CR_TYPE_Q8_0] = {"Q8_0", 32, 34},
    [CR_TYPE_Q8_1] = {"Q8_1", 32, 36},
    [CR_TYPE_Q2_K] = {"Q2_K", 256, 84},
    [CR_TYPE_Q3_K] = {"Q3_K", 256, 110},
    [CR_TYPE_Q4_K] = {"Q4_K", 256, 144},
    [CR_TYPE_Q5_K] = {"Q5_K", 256, 176},
    [CR_TYPE_Q6_K] = {"Q6_K", 256, 210},
    [CR_TYPE_Q8_K] = {"Q8_K", 256, 292},
    [CR_TYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66},
    [CR_TYPE_IQ2_XS] = {"IQ2_XS", 256, 74},
    [CR_TYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98},
    [CR_TYPE_IQ1_S] = {"IQ1_S", 256, 50},
    [CR_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18},
    [CR_TYPE_IQ3_S] = {"IQ3_S", 256, 110},
    [CR_TYPE_IQ2_S] = {"IQ2_S", 256, 82},
    [CR_TYPE_IQ4_XS] = {"IQ4_XS", 256, 136},
    [CR_TYPE_I8] = {"I8", 1, 1},
    [CR_TYPE_I16] = {"I16", 1, 2},
    [CR_TYPE_I32] = {"I32", 1, 4},
    [CR_TYPE_I64] = {"I64", 1, 8},
    [CR_TYPE_F64] = {"F64", 1, 8},
    [CR_TYPE_BF16] = {"BF16", 1, 2},
    [CR_TYPE_MXFP4] = {"MXFP4", 32, 17},
};

const cr_type_info_t *cr_type_info(uint32_t t)
{
    if (t >= CR_TYPE__COUNT || !type_table[t].name)
        return NULL;
    return &type_table[t];
}

bool cr_type_row_bytes(uint32_t t, uint64_t n, uint64_t *out)
{
    const cr_type_info_t *ti = cr_type_info(t);
    if (!ti || n % ti->block_elems)
        return false;
    uint64_t blocks = n / ti->block_elems;
    if (blocks > UINT64_MAX / ti->block_bytes)
        return false;
    *out = blocks * ti->block_bytes;
    return true;
}

static const struct {
    const char *name;
    cr_type_t type;
} kv_types[] = {{"f16", CR_TYPE_F16}, {"q8_0", CR_TYPE_Q8_0}, {"q4_0", CR_TYPE_Q4_0}};

bool cr_kv_cache_type_parse(const char *name, cr_type_t *out)
{
    if (!name || !*name) {
        *out = CR_TYPE_F16;
        return true;
    }
    for (size_t i = 0; i < sizeof kv_types / sizeof kv_types[0]; i++) {
        if (!strcmp(name, kv_types[i].name)) {
            *out = kv_types[i].type;
            return true;
        }
    }
    return false;
}

const char *cr_kv_cache_type_name(cr_type_t t)
{
    for (size_t i = 0; i < sizeof kv_types / sizeof kv_types[0]; i++)
        if (kv_types[i].type == t)
            return kv_types[i].name;
    return NULL;
}

const char *cr_file_type_name(uint32_t ft)
{
    /* llama_ftype values as written to general.file_type. */
    static const char *const names[] = {
        [0] = "F32",     [1] = "F16",     [2] = "Q4_0",    [3] = "Q4_1",
        [7] = "Q8_0",    [8] = "Q5_0",    [9] = "Q5_1",    [10] = "Q2_K",
        [11] = "Q3_K_S", [12] = "Q3_K_M", [13] = "Q3_K_L", [14] = "Q4_K_S",
        [15] = "Q4_K_M", [16] = "Q5_K_S", [17] = "Q5_K_M", [18] = "Q6_K",
        [19] = "IQ2_XXS", [20] = "IQ2_XS", [21] = "Q2_K_S", [22] = "IQ3_XS",
        [23] = "IQ3_XXS", [24] = "IQ1_S",  [25] = "IQ4_NL", [26] = "IQ3_S",  [27] = "IQ3_M",
        [28] = "IQ2_S",   [29] = "IQ2_M",  [30] = "IQ4_XS", [32] = "BF16",
        [38] = "MXFP4_MOE",
    };
    if (ft < CR_ARRAY_LEN(names) && names[ft])
        return names[ft];
    return "unknown";
}
