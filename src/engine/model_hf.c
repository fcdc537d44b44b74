/*
 * model_hf.c - Hugging Face checkpoints (Qwen2ForCausalLM, LlamaForCausalLM): hyperparameters
 * from config.json, weights from the *.safetensors shards under their HF names, and the chat
 * template from tokenizer_config.json.
 *
 * HF keeps q_proj / k_proj rows in the order rotate_half expects, so RoPE is the NEOX form for
 * both architectures here (GGUF files of llama permute those rows and use the adjacent-pair
 * form instead). 2-D weights stay in the file's type (F32, F16, BF16); norms and biases are
 * converted to F32.
 */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/errf.h"
#include "core/fileio.h"
#include "core/jsonx.h"
#include "core/xalloc.h"
#include "engine/model.h"
#include "engine/quant.h"

#define HF_CONFIG_MAX (16u << 20)

static int cfg_int(json_t *cfg, const char *path, const char *key, int64_t *out, int required,
                   char *err, size_t errlen)
{
    json_t *v = json_object_get(cfg, key);
    if (!v && !required)
        return AF_OK;
    if (!json_is_integer(v) || json_integer_value(v) <= 0) {
        af_errf(err, errlen, "%s: \"%s\" must be a positive integer", path, key);
        return AF_EPARSE;
    }
    *out = (int64_t)json_integer_value(v);
    return AF_OK;
}

static int cfg_num(json_t *cfg, const char *path, const char *key, float *out, char *err,
                   size_t errlen)
{
    json_t *v = json_object_get(cfg, key);
    if (!v)
        return AF_OK;
    if (!json_is_number(v) || !(json_number_value(v) > 0)) {
        af_errf(err, errlen, "%s: \"%s\" must be a positive number", path, key);
        return AF_EPARSE;
    }
    *out = (float)json_number_value(v);
    return AF_OK;
}

/* Llama 3.1's rope_scaling: long wavelengths are slowed by `factor`, short ones kept, and the
 * band between interpolated (the same factors the GGUF converter stores in rope_freqs). */
static int llama3_factors(struct model *m, json_t *rs, const char *path, char *err, size_t errlen)
{
    double factor = json_number_value(json_object_get(rs, "factor"));
    double lo = json_number_value(json_object_get(rs, "low_freq_factor"));
    double hi = json_number_value(json_object_get(rs, "high_freq_factor"));
    double old_ctx = json_number_value(json_object_get(rs, "original_max_position_embeddings"));
    if (!(factor > 0) || !(lo > 0) || !(hi > lo) || !(old_ctx > 0)) {
        af_errf(err, errlen,
                "%s: rope_scaling (llama3) needs factor, low_freq_factor < "
                "high_freq_factor and original_max_position_embeddings",
                path);
        return AF_EPARSE;
    }
    const int64_t half = m->hp.n_rot / 2;
    float *ff = model_own(m, af_xmalloc((size_t)half * sizeof *ff));
    for (int64_t i = 0; i < half; i++) {
        double freq = pow((double)m->hp.rope_base, -2.0 * (double)i / (double)m->hp.n_rot);
        double wavelen = 2 * M_PI / freq;
        if (wavelen < old_ctx / hi) {
            ff[i] = 1.0f;
        } else if (wavelen > old_ctx / lo) {
            ff[i] = (float)factor;
        } else {
            double smooth = (old_ctx / wavelen - lo) / (hi - lo);
            ff[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
        }
    }
    m->rope_freq_factors = ff;
    return AF_OK;
}

static int rope_scaling(struct model *m, json_t *cfg, const char *path, char *err, size_t errlen)
{
    json_t *rs = json_object_get(cfg, "rope_scaling");
    m->hp.rope_freq_scale = 1.0f;
    if (!rs || json_is_null(rs))
        return AF_OK;
    const char *type = json_string_value(json_object_get(rs, "rope_type"));
    if (!type)
        type = json_string_value(json_object_get(rs, "type"));
    if (type && !strcmp(type, "llama3"))
        return llama3_factors(m, rs, path, err, errlen);
    if (type && !strcmp(type, "linear")) {
        double f = json_number_value(json_object_get(rs, "factor"));
        if (f > 0) {
            m->hp.rope_freq_scale = (float)(1.0 / f);
            return AF_OK;
        }
    }
    if (type && !strcmp(type, "default"))
        return AF_OK;
    af_errf(err, errlen, "%s: rope_scaling type '%s' is not supported (linear, llama3)", path,
            type ? type : "?");
    return AF_EPARSE;
}

static int hparams(struct model *m, json_t *cfg, const char *path, char *err, size_t errlen)
{
    struct model_hparams *hp = &m->hp;
    const char *type = json_string_value(json_object_get(cfg, "model_type"));
    if (type && !strcmp(type, "qwen2")) {
        hp->arch = MODEL_ARCH_QWEN2;
    } else if (type && !strcmp(type, "llama")) {
        hp->arch = MODEL_ARCH_LLAMA;
    } else {
        af_errf(err, errlen, "%s: model_type '%s' is not supported (qwen2, llama)", path,
                type ? type : "(missing)");
        return AF_EPARSE;
    }
    int rc;
    hp->n_ctx_train = 4096;
    if ((rc = cfg_int(cfg, path, "hidden_size", &hp->n_embd, 1, err, errlen)) ||
        (rc = cfg_int(cfg, path, "num_hidden_layers", &hp->n_layer, 1, err, errlen)) ||
        (rc = cfg_int(cfg, path, "intermediate_size", &hp->n_ff, 1, err, errlen)) ||
        (rc = cfg_int(cfg, path, "num_attention_heads", &hp->n_head, 1, err, errlen)) ||
        (rc = cfg_int(cfg, path, "max_position_embeddings", &hp->n_ctx_train, 0, err, errlen)))
        return rc;
    hp->n_head_kv = hp->n_head;
    if ((rc = cfg_int(cfg, path, "num_key_value_heads", &hp->n_head_kv, 0, err, errlen)))
        return rc;
    if (hp->n_embd % hp->n_head || hp->n_head % hp->n_head_kv) {
        af_errf(err, errlen,
                "%s: hidden_size, num_attention_heads and num_key_value_heads do "
                "not divide evenly",
                path);
        return AF_EPARSE;
    }
    hp->head_dim = hp->n_embd / hp->n_head;
    if ((rc = cfg_int(cfg, path, "head_dim", &hp->head_dim, 0, err, errlen)))
        return rc;
    hp->n_rot = hp->head_dim;
    hp->rms_eps = 1e-6f;
    hp->rope_base = 10000.0f;
    if ((rc = cfg_num(cfg, path, "rms_norm_eps", &hp->rms_eps, err, errlen)) ||
        (rc = cfg_num(cfg, path, "rope_theta", &hp->rope_base, err, errlen)))
        return rc;
    hp->rope_style = ROPE_NEOX;
    m->rope_neox_hf = 1;
    return rope_scaling(m, cfg, path, err, errlen);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int open_shards(struct model *m, const char *dir, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d) {
        af_errf(err, errlen, "%s: cannot open the folder: %s", dir, strerror(errno));
        return AF_ENOTFOUND;
    }
    char **names = NULL;
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l > 12 && !strcmp(de->d_name + l - 12, ".safetensors")) {
            names = af_xrealloc(names, (n + 1) * sizeof *names);
            names[n++] = af_xstrdup(de->d_name);
        }
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof *names, by_name);
    int rc = n ? AF_OK : AF_ENOTFOUND;
    if (!n)
        af_errf(err, errlen, "%s: no *.safetensors files", dir);
    m->st = af_xcalloc(n ? n : 1, sizeof *m->st);
    for (size_t i = 0; i < n && rc == AF_OK; i++) {
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        rc = st_open(path, &m->st[m->n_st], err, errlen);
        if (rc == AF_OK)
            m->n_st++;
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

int hf_load_config(struct model *m, const char *dir, char *err, size_t errlen)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *cfg = af_json_load_object(path, HF_CONFIG_MAX, err, errlen);
    if (!cfg)
        return AF_EPARSE;
    int rc = hparams(m, cfg, path, err, errlen);
    json_decref(cfg);
    if (rc == AF_OK)
        rc = open_shards(m, dir, err, errlen);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    json_t *tc = rc == AF_OK ? af_json_load_object(path, HF_CONFIG_MAX, NULL, 0) : NULL;
    const char *tmpl = json_string_value(json_object_get(tc, "chat_template"));
    if (tmpl)
        m->chat_template = af_xstrdup(tmpl);
    json_decref(tc);
    const char *slash = strrchr(dir, '/');
    m->name = af_xstrdup(slash && slash[1] ? slash + 1 : dir);
    return rc;
}

/* GGUF tensor names to HF ones. */
static int hf_name(const char *g, char *out, size_t len)
{
    static const struct {
        const char *gguf, *hf;
    } top[] = {{"token_embd.weight", "model.embed_tokens.weight"},
               {"output_norm.weight", "model.norm.weight"},
               {"output.weight", "lm_head.weight"}};
    static const struct {
        const char *gguf, *hf;
    } blk[] = {{"attn_norm.weight", "input_layernorm.weight"},
               {"attn_q.weight", "self_attn.q_proj.weight"},
               {"attn_k.weight", "self_attn.k_proj.weight"},
               {"attn_v.weight", "self_attn.v_proj.weight"},
               {"attn_q.bias", "self_attn.q_proj.bias"},
               {"attn_k.bias", "self_attn.k_proj.bias"},
               {"attn_v.bias", "self_attn.v_proj.bias"},
               {"attn_output.weight", "self_attn.o_proj.weight"},
               {"attn_output.bias", "self_attn.o_proj.bias"},
               {"ffn_norm.weight", "post_attention_layernorm.weight"},
               {"ffn_gate.weight", "mlp.gate_proj.weight"},
               {"ffn_up.weight", "mlp.up_proj.weight"},
               {"ffn_down.weight", "mlp.down_proj.weight"}};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (!strcmp(g, top[i].gguf))
            return snprintf(out, len, "%s", top[i].hf) > 0;
    long long il;
    int used = 0;
    if (sscanf(g, "blk.%lld.%n", &il, &used) != 1 || !used)
        return 0;
    for (size_t i = 0; i < sizeof blk / sizeof blk[0]; i++)
        if (!strcmp(g + used, blk[i].gguf))
            return snprintf(out, len, "model.layers.%lld.%s", il, blk[i].hf) > 0;
    return 0;
}

int hf_find(struct model *m, const char *gguf_name, struct tensor_view *v)
{
    char name[256];
    if (!hf_name(gguf_name, name, sizeof name))
        return 0;
    const struct st_tensor *t = NULL;
    for (size_t i = 0; i < m->n_st && !t; i++)
        t = st_find(m->st[i], name);
    if (!t)
        return 0;
    v->data = t->data;
    v->type = t->type;
    v->n_dims = t->n_dims;
    memcpy(v->ne, t->ne, sizeof v->ne);
    v->nbytes = t->nbytes;
    if (t->n_dims == 1 && t->type != GGML_TYPE_F32) {
        float *f = model_own(m, af_xmalloc((size_t)t->ne[0] * sizeof *f + 1));
        quant_dequantize_row(t->type, t->data, f, t->ne[0]);
        v->data = f;
        v->type = GGML_TYPE_F32;
        v->nbytes = (uint64_t)t->ne[0] * sizeof *f;
    }
    return 1;
}
