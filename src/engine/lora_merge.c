/*
 * lora_merge.c - folding a LoRA adapter into a GGUF model's weights (see lora_merge.h).
 *
 * One adapted tensor at a time: each row o of W (n_out rows of n_in) is dequantised, gets
 * d[i] = Σ_r (scale · B[o][r]) · A[r][i] added, and is requantised with the reference
 * quantiser, so the merged file holds what llama.cpp's own tools would write for those values.
 * Rows are independent, so the OpenMP split does not change the bytes.
 */
#include "engine/lora_merge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errf.h"
#include "core/xalloc.h"
#include "engine/gguf.h"
#include "engine/quant.h"
#include "engine/quantize.h"

/* GGUF tensor names of the targets, in enum lora_target order. */
static const char *const target_tensor[LORA_N_TARGETS] = {
    "attn_q.weight",   "attn_k.weight", "attn_v.weight",  "attn_output.weight",
    "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"};

int lora_merge_parse_type(const char *name)
{
    int t = name ? quant_type_from_name(name) : -1;
    if (t < 0 || !quant_type_supported((uint32_t)t) || t == GGML_TYPE_Q8_K)
        return -1;
    return t;
}

/* The (layer, target) a tensor name is, or 0 when it is no target ("blk.N.SUFFIX"). */
static int parse_target(const char *name, int64_t n_layer, int64_t *il, enum lora_target *t)
{
    if (strncmp(name, "blk.", 4) != 0)
        return 0;
    char *end = NULL;
    long long v = strtoll(name + 4, &end, 10);
    if (end == name + 4 || *end != '.' || v < 0 || v >= n_layer)
        return 0;
    for (int k = 0; k < LORA_N_TARGETS; k++)
        if (!strcmp(end + 1, target_tensor[k])) {
            *il = (int64_t)v;
            *t = (enum lora_target)k;
            return 1;
        }
    return 0;
}

/* W' = W + scale · B·A for one tensor, written as `type` into *out (owned: free()). */
static void merge_tensor(const struct gguf_tensor *t, const struct lora_adapter *l,
                         const struct lora_pair *p, uint32_t type, void **out, uint64_t *nbytes)
{
    const int64_t n_in = t->ne[0], rows = t->ne[1];
    const size_t in_row = quant_row_bytes(t->type, n_in), out_row = quant_row_bytes(type, n_in);
    *nbytes = (uint64_t)rows * out_row;
    char *dst = af_xmalloc(*nbytes ? *nbytes : 1);
#pragma omp parallel
    {
        float *w = af_xmalloc((size_t)n_in * sizeof(float)); /* (n_in) */
        float *d = af_xmalloc((size_t)n_in * sizeof(float)); /* (n_in) */
#pragma omp for schedule(static)
        for (int64_t o = 0; o < rows; o++) {
            quant_dequantize_row(t->type, (const char *)t->data + (size_t)o * in_row, w, n_in);
            lora_delta_row(l, p, o, d);
            for (int64_t i = 0; i < n_in; i++)
                w[i] += d[i];
            quant_quantize_row(type, w, dst + (size_t)o * out_row, n_in);
        }
        free(w);
        free(d);
    }
    *out = dst;
}

/* The merged tensor's type: the requested one (or the base's), with quantize.c's fallbacks
 * for rows that are not a whole number of blocks. */
static uint32_t merged_type(uint32_t want, const struct gguf_tensor *t, const char *name,
                            int64_t n_layer)
{
    if (want == LORA_MERGE_OWN_TYPE)
        return t->type; /* the base's rows fit its own blocks */
    struct quantize_plan plan = {want, 0, 0, NULL};
    return quantize_pick_type(&plan, name, t->ne[0], n_layer, 1);
}

static int check_pair(const struct gguf_tensor *t, const char *name, const struct lora_pair *p,
                      const char *path, char *err, size_t errlen)
{
    if (t->n_dims != 2 || p->n_in != t->ne[0] || p->n_out != t->ne[1]) {
        af_errf(err, errlen,
                "%s: tensor '%s' is [%lld, %lld] (n_in, n_out) but the adapter's pair is "
                "[%lld, %lld]",
                path, name, (long long)t->ne[0], (long long)(t->n_dims > 1 ? t->ne[1] : 1),
                (long long)p->n_in, (long long)p->n_out);
        return AF_EINVAL;
    }
    return AF_OK;
}

int lora_merge_model(const struct model *m, const struct lora_adapter *l, const char *out_path,
                     uint32_t type, struct lora_merge_stats *stats, char *err, size_t errlen)
{
    const struct gguf_file *g = m->gguf;
    if (!g) {
        af_errf(err, errlen, "%s: model merge needs a GGUF base model", m->path);
        return AF_EINVAL;
    }
    if (type != LORA_MERGE_OWN_TYPE && lora_merge_parse_type(quant_type_name(type)) < 0) {
        af_errf(err, errlen, "model merge: cannot write tensors as type %u", type);
        return AF_EINVAL;
    }
    if (l->n_layer != m->hp.n_layer) {
        af_errf(err, errlen, "%s: the model has %lld layers, the adapter %lld", m->path,
                (long long)m->hp.n_layer, (long long)l->n_layer);
        return AF_EINVAL;
    }
    const uint64_t nt = gguf_n_tensors(g);
    void **bufs = af_xcalloc(nt ? nt : 1, sizeof *bufs);
    struct gguf_writer *w = gguf_writer_new();
    gguf_writer_copy_kvs(w, g);
    struct lora_merge_stats st = {0, 0};
    int rc = AF_OK;
    for (uint64_t i = 0; i < nt && rc == AF_OK; i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(t->name.n > 255 ? 255 : t->name.n), t->name.s);
        int64_t il = 0;
        enum lora_target tg = LORA_Q;
        const struct lora_pair *p =
            parse_target(name, l->n_layer, &il, &tg) ? lora_pair_at(l, il, tg) : NULL;
        const void *data = t->data;
        uint64_t nbytes = t->nbytes;
        uint32_t ttype = t->type;
        if (p) {
            rc = check_pair(t, name, p, m->path, err, errlen);
            if (rc)
                break;
            ttype = merged_type(type, t, name, m->hp.n_layer);
            merge_tensor(t, l, p, ttype, &bufs[i], &nbytes);
            data = bufs[i];
            st.n_merged++;
        } else {
            st.n_copied++;
        }
        rc = gguf_writer_add_tensor(w, name, ttype, t->n_dims, t->ne, data, nbytes, err, errlen);
    }
    if (rc == AF_OK)
        rc = gguf_writer_write(w, out_path, err, errlen);
    gguf_writer_free(w);
    for (uint64_t i = 0; i < nt; i++)
        free(bufs[i]);
    free(bufs);
    if (rc == AF_OK && stats)
        *stats = st;
    return rc;
}

int lora_merge_files(const char *base_path, const char *adapter_dir, const char *out_path,
                     const char *type_name, struct lora_merge_stats *stats, char *err,
                     size_t errlen)
{
    uint32_t type = LORA_MERGE_OWN_TYPE;
    if (type_name) {
        int t = lora_merge_parse_type(type_name);
        if (t < 0) {
            af_errf(err, errlen,
                    "unknown --type '%s' (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, "
                    "Q5_K, Q6_K)",
                    type_name);
            return AF_EINVAL;
        }
        type = (uint32_t)t;
    }
    struct model *m = NULL;
    struct lora_adapter *l = NULL;
    char msg[1024] = "";
    int rc = model_load(base_path, &m, err, errlen);
    if (rc)
        goto out;
    rc = lora_load_peft(adapter_dir, m, &l, msg, sizeof msg);
    if (rc) {
        /* Most of lora_io's messages already start with the folder or a file in it. */
        int named = !strncmp(msg, adapter_dir, strlen(adapter_dir));
        af_errf(err, errlen, "%s%s%s", named ? "" : adapter_dir, named ? "" : ": ", msg);
        goto out;
    }
    rc = lora_merge_model(m, l, out_path, type, stats, err, errlen);
out:
    lora_free(l);
    model_free(m);
    return rc;
}
