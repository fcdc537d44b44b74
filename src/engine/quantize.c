/*
 * quantize.c - `agentflow model quantize`: re-encodes a GGUF model's 2-D weights in another
 * type, choosing per tensor as llama-quantize does (output head in Q6_K for the small types,
 * the "_M" mixes giving attn_v / ffn_down of some layers more bits, and the fallbacks for rows
 * that are not a whole number of 256-blocks). 1-D tensors (norms, biases) stay F32.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentflow/engine.h"
#include "core/errf.h"
#include "core/xalloc.h"
#include "engine/gguf.h"
#include "engine/quant.h"
#include "engine/quantize.h"

/* llama_ftype values written to general.file_type. */
static const struct {
    const char *name;
    uint32_t base;
    int mix; /* 1 = the _M mix */
    uint32_t ftype;
} ftypes[] = {
    {"F32", GGML_TYPE_F32, 0, 0},      {"F16", GGML_TYPE_F16, 0, 1},
    {"BF16", GGML_TYPE_BF16, 0, 32},   {"Q4_0", GGML_TYPE_Q4_0, 0, 2},
    {"Q4_1", GGML_TYPE_Q4_1, 0, 3},    {"Q8_0", GGML_TYPE_Q8_0, 0, 7},
    {"Q5_0", GGML_TYPE_Q5_0, 0, 8},    {"Q5_1", GGML_TYPE_Q5_1, 0, 9},
    {"Q4_K", GGML_TYPE_Q4_K, 0, 14},   {"Q4_K_S", GGML_TYPE_Q4_K, 0, 14},
    {"Q4_K_M", GGML_TYPE_Q4_K, 1, 15}, {"Q5_K", GGML_TYPE_Q5_K, 0, 16},
    {"Q5_K_S", GGML_TYPE_Q5_K, 0, 16}, {"Q5_K_M", GGML_TYPE_Q5_K, 1, 17},
    {"Q6_K", GGML_TYPE_Q6_K, 0, 18},
};

int quantize_parse_ftype(const char *name, struct quantize_plan *plan)
{
    for (size_t i = 0; i < sizeof ftypes / sizeof ftypes[0]; i++) {
        const char *a = name, *b = ftypes[i].name;
        while (*a && *b && (*a == *b || *a - 'a' + 'A' == *b))
            a++, b++;
        if (!*a && !*b) {
            plan->base = ftypes[i].base;
            plan->mix = ftypes[i].mix;
            plan->ftype = ftypes[i].ftype;
            plan->name = NULL;
            return 0;
        }
    }
    return -1;
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers, and every third between. */
static int more_bits(int64_t il, int64_t n_layer)
{
    return il < n_layer / 8 || il >= 7 * n_layer / 8 || (il - n_layer / 8) % 3 == 2;
}

static uint32_t fallback(uint32_t t, int64_t n_in)
{
    if (n_in % quant_block_elems(t) == 0)
        return t;
    switch (t) {
    case GGML_TYPE_Q4_K:
        t = GGML_TYPE_Q5_0;
        break;
    case GGML_TYPE_Q5_K:
        t = GGML_TYPE_Q5_1;
        break;
    case GGML_TYPE_Q6_K:
        t = GGML_TYPE_Q8_0;
        break;
    default:
        break;
    }
    return n_in % quant_block_elems(t) == 0 ? t : GGML_TYPE_F16;
}

uint32_t quantize_pick_type(const struct quantize_plan *plan, const char *name, int64_t n_in,
                            int64_t n_layer, int has_output)
{
    uint32_t base = plan->base;
    int small = base != GGML_TYPE_F32 && base != GGML_TYPE_F16 && base != GGML_TYPE_BF16 &&
                base != GGML_TYPE_Q8_0;
    uint32_t t = base;
    long long il = -1;
    if (!strcmp(name, "output.weight") || (!has_output && !strcmp(name, "token_embd.weight"))) {
        if (small)
            t = GGML_TYPE_Q6_K;
    } else if (plan->mix && sscanf(name, "blk.%lld.", &il) == 1 &&
               (strstr(name, ".attn_v.weight") || strstr(name, ".ffn_down.weight"))) {
        if (more_bits(il, n_layer))
            t = GGML_TYPE_Q6_K;
    }
    return fallback(t, n_in);
}

struct qtensor {
    void *data;
    uint64_t nbytes;
};

static int convert_tensor(const struct gguf_tensor *t, uint32_t type, struct qtensor *q, char *err,
                          size_t errlen)
{
    const int64_t n_in = t->ne[0];
    const int64_t rows = (int64_t)(t->nbytes / quant_row_bytes(t->type, n_in));
    const size_t in_row = quant_row_bytes(t->type, n_in), out_row = quant_row_bytes(type, n_in);
    if (!out_row) {
        af_errf(err, errlen, "tensor '%.*s': cannot write %lld columns as %s", (int)t->name.n,
                t->name.s, (long long)n_in, quant_type_name(type));
        return AF_EINVAL;
    }
    q->nbytes = (uint64_t)rows * out_row;
    q->data = af_xmalloc(q->nbytes ? q->nbytes : 1);
#pragma omp parallel
    {
        float *tmp = af_xmalloc((size_t)n_in * sizeof(float));
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            quant_dequantize_row(t->type, (const char *)t->data + (size_t)r * in_row, tmp, n_in);
            quant_quantize_row(type, tmp, (char *)q->data + (size_t)r * out_row, n_in);
        }
        free(tmp);
    }
    return AF_OK;
}

int quantize_model(const char *in_path, const char *out_path, const struct quantize_plan *plan,
                   char *err, size_t errlen)
{
    struct gguf_file *g = NULL;
    int rc = gguf_open(in_path, &g, err, errlen);
    if (rc)
        return rc;
    struct gguf_str arch;
    char key[96];
    uint64_t n_layer = 0;
    if (gguf_get_str(g, "general.architecture", &arch, err, errlen) == AF_OK) {
        snprintf(key, sizeof key, "%.*s.block_count", (int)(arch.n > 40 ? 40 : arch.n), arch.s);
        if (gguf_get_u64(g, key, &n_layer, err, errlen) != AF_OK)
            n_layer = 0;
    }
    int has_output = gguf_find_tensor(g, "output.weight") != NULL;
    struct gguf_writer *w = gguf_writer_new();
    gguf_writer_copy_kvs(w, g);
    gguf_writer_set_u32(w, "general.file_type", plan->ftype);
    if (plan->name)
        gguf_writer_set_str(w, "general.name", plan->name);
    uint64_t nt = gguf_n_tensors(g);
    struct qtensor *qs = af_xcalloc(nt ? nt : 1, sizeof *qs);
    for (uint64_t i = 0; i < nt && rc == AF_OK; i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(t->name.n > 255 ? 255 : t->name.n), t->name.s);
        size_t nl = strlen(name);
        int is_weight = t->n_dims == 2 && nl > 7 && !strcmp(name + nl - 7, ".weight");
        uint32_t type = is_weight
                            ? quantize_pick_type(plan, name, t->ne[0], (int64_t)n_layer, has_output)
                            : GGML_TYPE_F32;
        const void *data = t->data;
        uint64_t nbytes = t->nbytes;
        if (type != t->type) {
            rc = convert_tensor(t, type, &qs[i], err, errlen);
            data = qs[i].data;
            nbytes = qs[i].nbytes;
        }
        if (rc == AF_OK)
            rc = gguf_writer_add_tensor(w, name, type, t->n_dims, t->ne, data, nbytes, err, errlen);
    }
    if (rc == AF_OK)
        rc = gguf_writer_write(w, out_path, err, errlen);
    for (uint64_t i = 0; i < nt; i++)
        free(qs[i].data);
    free(qs);
    gguf_writer_free(w);
    gguf_close(g);
    return rc;
}

int af_engine_quantize(const char *in_path, const char *out_path, const char *type, char *err,
                       size_t errlen)
{
    return af_engine_quantize_named(in_path, out_path, type, NULL, err, errlen);
}

int af_engine_quantize_named(const char *in_path, const char *out_path, const char *type,
                             const char *name, char *err, size_t errlen)
{
    if (name && !*name) {
        af_errf(err, errlen, "the model name must not be empty");
        return AF_EINVAL;
    }
    struct quantize_plan plan;
    if (quantize_parse_ftype(type, &plan)) {
        af_errf(err, errlen,
                "unknown type '%s' (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q4_K_M, "
                "Q5_K, Q5_K_M, Q6_K)",
                type);
        return AF_EINVAL;
    }
    plan.name = name;
    return quantize_model(in_path, out_path, &plan, err, errlen);
}
