/*
 * quant_types.c - the ggml type table (names, block sizes, bytes) and half-precision
 * conversions. Layouts follow ggml-common.h; the sizes here are what the GGUF reader checks
 * each tensor against.
 */
#include <ctype.h>
#include <string.h>

#include "engine/quant.h"

struct type_info {
    const char *name;
    int64_t block_elems;
    size_t block_bytes;
    int supported;
};

/* QK = 32 blocks: Q4_0 = f16 d + 16 nibble bytes; Q4_1 = d, m + 16; Q5_0 = d + 4 high bits +
 * 16; Q5_1 = d, m + 4 + 16; Q8_0 = d + 32; Q8_1 = d, s + 32. QK_K = 256 blocks: Q2_K 84,
 * Q3_K 110, Q4_K 144, Q5_K 176, Q6_K 210, Q8_K = f32 d + 256 + 16 int16 sums = 292. */
static const struct type_info types[GGML_TYPE_COUNT] = {
    [GGML_TYPE_F32] = {"F32", 1, 4, 1},
    [GGML_TYPE_F16] = {"F16", 1, 2, 1},
    [GGML_TYPE_Q4_0] = {"Q4_0", 32, 18, 1},
    [GGML_TYPE_Q4_1] = {"Q4_1", 32, 20, 1},
    [GGML_TYPE_Q5_0] = {"Q5_0", 32, 22, 1},
    [GGML_TYPE_Q5_1] = {"Q5_1", 32, 24, 1},
    [GGML_TYPE_Q8_0] = {"Q8_0", 32, 34, 1},
    [GGML_TYPE_Q8_1] = {"Q8_1", 32, 36, 0},
    [GGML_TYPE_Q2_K] = {"Q2_K", 256, 84, 0},
    [GGML_TYPE_Q3_K] = {"Q3_K", 256, 110, 0},
    [GGML_TYPE_Q4_K] = {"Q4_K", 256, 144, 1},
    [GGML_TYPE_Q5_K] = {"Q5_K", 256, 176, 1},
    [GGML_TYPE_Q6_K] = {"Q6_K", 256, 210, 1},
    [GGML_TYPE_Q8_K] = {"Q8_K", 256, 292, 1},
    [GGML_TYPE_BF16] = {"BF16", 1, 2, 1},
    /* ggml's other types, named so that a file holding one gets an error that says which */
    [16] = {"IQ2_XXS", 256, 66, 0},
    [17] = {"IQ2_XS", 256, 74, 0},
    [18] = {"IQ3_XXS", 256, 98, 0},
    [19] = {"IQ1_S", 256, 50, 0},
    [20] = {"IQ4_NL", 32, 18, 0},
    [21] = {"IQ3_S", 256, 110, 0},
    [22] = {"IQ2_S", 256, 82, 0},
    [23] = {"IQ4_XS", 256, 136, 0},
    [24] = {"I8", 1, 1, 0},
    [25] = {"I16", 1, 2, 0},
    [26] = {"I32", 1, 4, 0},
    [27] = {"I64", 1, 8, 0},
    [28] = {"F64", 1, 8, 0},
    [29] = {"IQ1_M", 256, 56, 0},
    [34] = {"TQ1_0", 256, 54, 0},
    [35] = {"TQ2_0", 256, 66, 0},
    [39] = {"MXFP4", 32, 17, 0},
};

static const struct type_info *info(uint32_t t)
{
    return t < GGML_TYPE_COUNT && types[t].name ? &types[t] : NULL;
}

int quant_type_supported(uint32_t t)
{
    const struct type_info *i = info(t);
    return i && i->supported;
}

const char *quant_supported_names(void)
{
    return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K";
}

const char *quant_type_name(uint32_t t)
{
    const struct type_info *i = info(t);
    return i ? i->name : "?";
}

int quant_type_from_name(const char *name)
{
    for (uint32_t t = 0; t < GGML_TYPE_COUNT; t++) {
        if (!types[t].name || strlen(types[t].name) != strlen(name))
            continue;
        size_t k = 0;
        while (name[k] && toupper((unsigned char)name[k]) == types[t].name[k])
            k++;
        if (!name[k])
            return (int)t;
    }
    return -1;
}

int64_t quant_block_elems(uint32_t t)
{
    return quant_type_supported(t) ? info(t)->block_elems : 0;
}

size_t quant_block_bytes(uint32_t t)
{
    return quant_type_supported(t) ? info(t)->block_bytes : 0;
}

size_t quant_row_bytes(uint32_t t, int64_t n)
{
    const struct type_info *i = info(t);
    if (!i || !i->supported || n < 0)
        return 0;
    return (size_t)(n / i->block_elems) * i->block_bytes;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The branch-free conversions of FP16 (Maratea / ggml), exact for every input. */
float quant_f16_to_f32(uint16_t h)
{
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    const uint32_t exp_offset = 0xE0u << 23;
    const float exp_scale = 0x1.0p-112f;
    const float normalized = bits_f32((two_w >> 4) + exp_offset) * exp_scale;
    const uint32_t magic_mask = 126u << 23;
    const float magic_bias = 0.5f;
    const float denormalized = bits_f32((two_w >> 17) | magic_mask) - magic_bias;
    const uint32_t denormalized_cutoff = 1u << 27;
    const uint32_t result =
        sign | (two_w < denormalized_cutoff ? f32_bits(denormalized) : f32_bits(normalized));
    return bits_f32(result);
}

uint16_t quant_f32_to_f16(float f)
{
    const float scale_to_inf = 0x1.0p+112f;
    const float scale_to_zero = 0x1.0p-110f;
    float base = (f < 0 ? -f : f) * scale_to_inf * scale_to_zero;
    const uint32_t w = f32_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u)
        bias = 0x71000000u;
    base = bits_f32((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = f32_bits(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

float quant_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

/* Round to nearest even; NaNs stay quiet NaNs (as ggml_compute_fp32_to_bf16). */
uint16_t quant_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}
