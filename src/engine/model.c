/*
 * model.c - loads qwen2 / llama GGUF models: hyperparameters from the metadata, every tensor
 * checked for presence, type and shape before the model is handed out.
 */
#include "engine/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/errf.h"
#include "core/xalloc.h"
#include "engine/quant.h"

const char *model_arch_name(enum model_arch a)
{
    return a == MODEL_ARCH_QWEN2 ? "qwen2" : "llama";
}

struct loader {
    struct model *m;
    const char *arch;
    char *err;
    size_t errlen;
};

static int get_hp_u(struct loader *L, const char *suffix, int64_t *out, int required)
{
    char key[128];
    uint64_t v;
    snprintf(key, sizeof key, "%s.%s", L->arch, suffix);
    int rc = gguf_get_u64(L->m->gguf, key, &v, L->err, L->errlen);
    if (rc == AF_ENOTFOUND && !required)
        return AF_OK;
    if (rc == AF_ENOTFOUND) {
        af_errf(L->err, L->errlen, "%s: missing key '%s'", L->m->path, key);
        return AF_EPARSE;
    }
    if (rc)
        return rc;
    if (v == 0 || v > (1ull << 40)) {
        af_errf(L->err, L->errlen, "%s: key '%s' = %llu is out of range", L->m->path, key,
                (unsigned long long)v);
        return AF_EPARSE;
    }
    *out = (int64_t)v;
    return AF_OK;
}

static int get_hp_f(struct loader *L, const char *suffix, float *out, int required)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", L->arch, suffix);
    int rc = gguf_get_f32(L->m->gguf, key, out, L->err, L->errlen);
    if (rc == AF_ENOTFOUND && !required)
        return AF_OK;
    if (rc == AF_ENOTFOUND) {
        af_errf(L->err, L->errlen, "%s: missing key '%s'", L->m->path, key);
        return AF_EPARSE;
    }
    if (rc == AF_OK && !isfinite(*out)) {
        af_errf(L->err, L->errlen, "%s: key '%s' is not a finite number", L->m->path, key);
        return AF_EPARSE;
    }
    return rc;
}

static int load_rope_scaling(struct loader *L)
{
    struct model_hparams *hp = &L->m->hp;
    char key[128];
    hp->rope_freq_scale = 1.0f;
    snprintf(key, sizeof key, "%s.rope.scaling.type", L->arch);
    char *type = gguf_get_strdup(L->m->gguf, key);
    int rc = AF_OK;
    if (type && strcmp(type, "none") != 0) {
        float factor = 0;
        if (strcmp(type, "linear") != 0) {
            af_errf(L->err, L->errlen, "%s: key '%s' = '%s' is not supported (none, linear)",
                    L->m->path, key, type);
            rc = AF_EPARSE;
        } else if ((rc = get_hp_f(L, "rope.scaling.factor", &factor, 1)) == AF_OK) {
            if (factor <= 0) {
                af_errf(L->err, L->errlen, "%s: %s.rope.scaling.factor must be positive",
                        L->m->path, L->arch);
                rc = AF_EPARSE;
            } else {
                hp->rope_freq_scale = 1.0f / factor;
            }
        }
    }
    free(type);
    return rc;
}

static int load_hparams(struct loader *L)
{
    struct model_hparams *hp = &L->m->hp;
    int rc;
    if ((rc = get_hp_u(L, "context_length", &hp->n_ctx_train, 1)) ||
        (rc = get_hp_u(L, "embedding_length", &hp->n_embd, 1)) ||
        (rc = get_hp_u(L, "block_count", &hp->n_layer, 1)) ||
        (rc = get_hp_u(L, "feed_forward_length", &hp->n_ff, 1)) ||
        (rc = get_hp_u(L, "attention.head_count", &hp->n_head, 1)))
        return rc;
    hp->n_head_kv = hp->n_head;
    if ((rc = get_hp_u(L, "attention.head_count_kv", &hp->n_head_kv, 0)))
        return rc;
    if (hp->n_embd % hp->n_head || hp->n_head % hp->n_head_kv) {
        af_errf(L->err, L->errlen,
                "%s: embedding_length %lld, head_count %lld and head_count_kv %lld do not "
                "divide evenly",
                L->m->path, (long long)hp->n_embd, (long long)hp->n_head, (long long)hp->n_head_kv);
        return AF_EPARSE;
    }
    hp->head_dim = hp->n_embd / hp->n_head;
    if ((rc = get_hp_u(L, "attention.key_length", &hp->head_dim, 0)))
        return rc;
    hp->n_rot = hp->head_dim;
    if ((rc = get_hp_u(L, "rope.dimension_count", &hp->n_rot, 0)))
        return rc;
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2) {
        af_errf(L->err, L->errlen, "%s: rope.dimension_count %lld must be even and at most %lld",
                L->m->path, (long long)hp->n_rot, (long long)hp->head_dim);
        return AF_EPARSE;
    }
    hp->rms_eps = 1e-5f;
    hp->rope_base = 10000.0f;
    if ((rc = get_hp_f(L, "attention.layer_norm_rms_epsilon", &hp->rms_eps, 1)) ||
        (rc = get_hp_f(L, "rope.freq_base", &hp->rope_base, 0)))
        return rc;
    if (hp->rms_eps <= 0 || hp->rope_base <= 0) {
        af_errf(L->err, L->errlen, "%s: rms epsilon and rope.freq_base must be positive",
                L->m->path);
        return AF_EPARSE;
    }
    hp->rope_style = hp->arch == MODEL_ARCH_QWEN2 ? ROPE_NEOX : ROPE_NORM;
    return load_rope_scaling(L);
}

static int inside(const void *p, size_t n, const void *base, size_t size)
{
    const uintptr_t a = (uintptr_t)p, b = (uintptr_t)base;
    return base && a >= b && a - b <= size && n <= size - (a - b);
}

int model_in_file(const struct model *m, const void *p, size_t n)
{
    const void *base;
    size_t size;
    if (m->gguf && gguf_file_mapping(m->gguf, &base, &size) && inside(p, n, base, size))
        return 1;
    for (size_t i = 0; i < m->n_st; i++) {
        st_file_mapping(m->st[i], &base, &size);
        if (inside(p, n, base, size))
            return 1;
    }
    return 0;
}

void *model_own(struct model *m, void *p)
{
    m->owned = af_xrealloc(m->owned, (m->n_owned + 1) * sizeof *m->owned);
    m->owned[m->n_owned++] = p;
    return p;
}

/* Looks a tensor up by its GGUF name in whichever file the model came from. */
static int find_view(struct model *m, const char *name, struct tensor_view *v)
{
    if (!m->gguf)
        return hf_find(m, name, v);
    const struct gguf_tensor *t = gguf_find_tensor(m->gguf, name);
    if (!t)
        return 0;
    v->data = t->data;
    v->type = t->type;
    v->n_dims = t->n_dims;
    memcpy(v->ne, t->ne, sizeof v->ne);
    v->nbytes = t->nbytes;
    return 1;
}

/* Byte offsets of the FP16 scales in one block of each quantized type (-1 ends the list). */
static const int *scale_offsets(uint32_t t)
{
    static const int q_d[] = {0, -1}, q_dm[] = {0, 2, -1}, q6k[] = {208, -1};
    switch (t) {
    case GGML_TYPE_Q4_0:
    case GGML_TYPE_Q5_0:
    case GGML_TYPE_Q8_0:
        return q_d;
    case GGML_TYPE_Q4_1:
    case GGML_TYPE_Q5_1:
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K:
        return q_dm;
    case GGML_TYPE_Q6_K:
        return q6k;
    default:
        return NULL;
    }
}

static int half_bad(const uint8_t *p, int bf16)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return bf16 ? (h & 0x7f80) == 0x7f80 : (h & 0x7c00) == 0x7c00;
}

/* Whether unit i of a weight (an element, or a quantized block's scales) is NaN or Inf. */
static int unit_bad(const struct weight *w, int64_t i, const int *offs)
{
    const uint8_t *p = w->data;
    if (w->type == GGML_TYPE_F32) {
        float f;
        memcpy(&f, p + (size_t)i * 4, 4);
        return !isfinite(f);
    }
    if (w->type == GGML_TYPE_F16 || w->type == GGML_TYPE_BF16)
        return half_bad(p + (size_t)i * 2, w->type == GGML_TYPE_BF16);
    const uint8_t *blk = p + (size_t)i * quant_block_bytes(w->type);
    for (int k = 0; offs && offs[k] >= 0; k++)
        if (half_bad(blk + offs[k], 0))
            return 1;
    return 0;
}

/* NaN or Inf in a 2-D weight (every element of float types, every scale of quantized ones):
 * -1 when clean, else the first bad row. One pass over the data, on all cores. */
static int64_t first_bad_row(const struct weight *w)
{
    const int64_t per_row = w->n_in / quant_block_elems(w->type);
    const int64_t units = per_row * w->n_out;
    const int *offs = scale_offsets(w->type);
    int64_t bad = INT64_MAX;
#pragma omp parallel for schedule(static) reduction(min : bad)
    for (int64_t i = 0; i < units; i++)
        if (i < bad && unit_bad(w, i, offs))
            bad = i;
    return bad == INT64_MAX ? -1 : bad / per_row;
}

/* Binds a tensor, checking type and shape. n_out 0 means a 1-D tensor of n_in. */
static int bind(struct loader *L, struct weight *w, const char *name, int64_t n_in, int64_t n_out,
                int required)
{
    struct tensor_view view;
    const struct tensor_view *t = find_view(L->m, name, &view) ? &view : NULL;
    memset(w, 0, sizeof *w);
    if (!t) {
        if (!required)
            return AF_OK;
        af_errf(L->err, L->errlen, "%s: missing tensor '%s'", L->m->path, name);
        return AF_EPARSE;
    }
    int64_t want_dims = n_out ? 2 : 1;
    int64_t got_out = t->n_dims >= 2 ? t->ne[1] : 1;
    if ((int64_t)t->n_dims != want_dims || t->ne[0] != n_in || got_out != (n_out ? n_out : 1)) {
        af_errf(L->err, L->errlen,
                "%s: tensor '%s' has shape [%lld, %lld] (%u dims), expected [%lld, %lld]",
                L->m->path, name, (long long)t->ne[0], (long long)got_out, t->n_dims,
                (long long)n_in, (long long)(n_out ? n_out : 1));
        return AF_EPARSE;
    }
    if (!quant_type_supported(t->type) || t->type == GGML_TYPE_Q8_K) {
        af_errf(L->err, L->errlen, "%s: tensor '%s' has unsupported type %s (%u)", L->m->path, name,
                quant_type_name(t->type), t->type);
        return AF_EPARSE;
    }
    if (!n_out && t->type != GGML_TYPE_F32) {
        af_errf(L->err, L->errlen, "%s: tensor '%s' must be F32, not %s", L->m->path, name,
                quant_type_name(t->type));
        return AF_EPARSE;
    }
    w->data = t->data;
    w->type = t->type;
    w->n_in = n_in;
    w->n_out = n_out ? n_out : 1;
    w->row_bytes = quant_row_bytes(t->type, n_in);
    int64_t bad_row = n_out ? first_bad_row(w) : -1;
    if (bad_row >= 0) {
        af_errf(L->err, L->errlen, "%s: tensor '%s' holds a NaN or Inf in row %lld", L->m->path,
                name, (long long)bad_row);
        return AF_EPARSE;
    }
    if (!n_out) {
        const float *f = t->data;
        for (int64_t i = 0; i < n_in; i++)
            if (!isfinite(f[i])) {
                af_errf(L->err, L->errlen, "%s: tensor '%s' holds a NaN or Inf at element %lld",
                        L->m->path, name, (long long)i);
                return AF_EPARSE;
            }
    }
    return AF_OK;
}

static int bind_layer(struct loader *L, int64_t il)
{
    const struct model_hparams *hp = &L->m->hp;
    struct model_layer *ly = &L->m->layers[il];
    int64_t q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
    int bias = hp->arch == MODEL_ARCH_QWEN2;
    struct {
        struct weight *w;
        const char *suffix;
        int64_t n_in, n_out;
        int required;
    } spec[] = {
        {&ly->attn_norm, "attn_norm.weight", hp->n_embd, 0, 1},
        {&ly->wq, "attn_q.weight", hp->n_embd, q_dim, 1},
        {&ly->wk, "attn_k.weight", hp->n_embd, kv_dim, 1},
        {&ly->wv, "attn_v.weight", hp->n_embd, kv_dim, 1},
        {&ly->wo, "attn_output.weight", q_dim, hp->n_embd, 1},
        {&ly->bq, "attn_q.bias", q_dim, 0, bias},
        {&ly->bk, "attn_k.bias", kv_dim, 0, bias},
        {&ly->bv, "attn_v.bias", kv_dim, 0, bias},
        {&ly->bo, "attn_output.bias", hp->n_embd, 0, 0},
        {&ly->ffn_norm, "ffn_norm.weight", hp->n_embd, 0, 1},
        {&ly->w_gate, "ffn_gate.weight", hp->n_embd, hp->n_ff, 1},
        {&ly->w_up, "ffn_up.weight", hp->n_embd, hp->n_ff, 1},
        {&ly->w_down, "ffn_down.weight", hp->n_ff, hp->n_embd, 1},
    };
    for (size_t i = 0; i < sizeof spec / sizeof spec[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "blk.%lld.%s", (long long)il, spec[i].suffix);
        int rc = bind(L, spec[i].w, name, spec[i].n_in, spec[i].n_out, spec[i].required);
        if (rc)
            return rc;
    }
    return AF_OK;
}

static int load_arch(struct loader *L)
{
    struct gguf_str s;
    int rc = gguf_get_str(L->m->gguf, "general.architecture", &s, L->err, L->errlen);
    if (rc == AF_ENOTFOUND) {
        af_errf(L->err, L->errlen, "%s: missing key 'general.architecture'", L->m->path);
        return AF_EPARSE;
    }
    if (rc)
        return rc;
    if (gguf_str_eq(s, "qwen2")) {
        L->m->hp.arch = MODEL_ARCH_QWEN2;
        L->arch = "qwen2";
    } else if (gguf_str_eq(s, "llama")) {
        L->m->hp.arch = MODEL_ARCH_LLAMA;
        L->arch = "llama";
    } else {
        af_errf(L->err, L->errlen,
                "%s: general.architecture '%.*s' is not supported (qwen2, llama)", L->m->path,
                (int)(s.n > 64 ? 64 : s.n), s.s);
        return AF_EPARSE;
    }
    return AF_OK;
}

static int load_weights(struct loader *L)
{
    struct model *m = L->m;
    struct model_hparams *hp = &m->hp;
    struct tensor_view emb;
    if (!find_view(m, "token_embd.weight", &emb) || emb.n_dims != 2) {
        af_errf(L->err, L->errlen, "%s: missing or malformed tensor 'token_embd.weight'", m->path);
        return AF_EPARSE;
    }
    hp->n_vocab = emb.ne[1];
    int rc;
    if ((rc = bind(L, &m->tok_embd, "token_embd.weight", hp->n_embd, hp->n_vocab, 1)) ||
        (rc = bind(L, &m->output_norm, "output_norm.weight", hp->n_embd, 0, 1)) ||
        (rc = bind(L, &m->output, "output.weight", hp->n_embd, hp->n_vocab, 0)))
        return rc;
    hp->tied_output = m->output.data == NULL;
    if (hp->tied_output)
        m->output = m->tok_embd;
    struct weight ff;
    if ((rc = bind(L, &ff, "rope_freqs.weight", hp->n_rot / 2, 0, 0)))
        return rc;
    m->rope_freq_factors = ff.data;
    m->layers = af_xcalloc((size_t)hp->n_layer, sizeof *m->layers);
    for (int64_t il = 0; il < hp->n_layer; il++)
        if ((rc = bind_layer(L, il)))
            return rc;
    return AF_OK;
}

/* A folder, or a path ending in config.json, is a Hugging Face checkpoint. */
static int is_hf(const char *path, char *dir, size_t dirlen)
{
    struct stat sb;
    size_t n = strlen(path);
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(dir, dirlen, "%s", path);
        return 1;
    }
    if (n >= 11 && !strcmp(path + n - 11, "config.json")) {
        snprintf(dir, dirlen, "%.*s", (int)(n - 11), path);
        if (!dir[0])
            snprintf(dir, dirlen, ".");
        return 1;
    }
    return 0;
}

static int load_tokenizer(struct model *m, const char *hf_dir, char *err, size_t errlen)
{
    if (!hf_dir)
        return tok_from_gguf(m->gguf, &m->tok, err, errlen);
    char tj[4200];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", hf_dir);
    if (access(tj, R_OK) != 0)
        return AF_OK; /* ids in, logits out still work; text needs a tokenizer */
    return tok_from_hf(tj, &m->tok, err, errlen);
}

int model_load(const char *path, struct model **out, char *err, size_t errlen)
{
    *out = NULL;
    struct model *m = af_xcalloc(1, sizeof *m);
    m->path = af_xstrdup(path);
    struct loader L = {m, NULL, err, errlen};
    char dir[4096];
    int hf = is_hf(path, dir, sizeof dir);
    int rc;
    if (hf) {
        rc = hf_load_config(m, dir, err, errlen);
    } else {
        rc = gguf_open(path, &m->gguf, err, errlen);
        if (rc == AF_OK)
            rc = load_arch(&L);
        if (rc == AF_OK)
            rc = load_hparams(&L);
    }
    if (rc == AF_OK)
        rc = load_weights(&L);
    if (rc == AF_OK)
        rc = load_tokenizer(m, hf ? dir : NULL, err, errlen);
    /* A GGUF lists one token per embedding row, as llama.cpp requires (converters pad the
     * list, e.g. Qwen2.5's 151665 tokens to 151936 with [PAD] entries); a Hugging Face
     * tokenizer.json may list fewer than the padded rows, never more. */
    if (rc == AF_OK && m->tok &&
        ((int64_t)tok_n_vocab(m->tok) > m->hp.n_vocab ||
         (!hf && (int64_t)tok_n_vocab(m->tok) != m->hp.n_vocab))) {
        af_errf(err, errlen,
                "%s: %s has %zu tokens but token_embd.weight has %lld rows; they must be %s", path,
                hf ? "tokenizer.json" : "tokenizer.ggml.tokens", tok_n_vocab(m->tok),
                (long long)m->hp.n_vocab, hf ? "at most as many" : "equal");
        rc = AF_EPARSE;
    }
    if (rc) {
        model_free(m);
        return rc;
    }
    if (m->gguf) {
        m->chat_template = gguf_get_strdup(m->gguf, "tokenizer.chat_template");
        m->name = gguf_get_strdup(m->gguf, "general.name");
    }
    if (!m->name) {
        const char *slash = strrchr(path, '/');
        m->name = af_xstrdup(slash ? slash + 1 : path);
    }
    *out = m;
    return AF_OK;
}

void model_free(struct model *m)
{
    if (!m)
        return;
    model_unpack(m);
    tok_free(m->tok);
    gguf_close(m->gguf);
    for (size_t i = 0; i < m->n_st; i++)
        st_close(m->st[i]);
    free(m->st);
    for (size_t i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->layers);
    free(m->chat_template);
    free(m->name);
    free(m->path);
    free(m->owned);
    free(m);
}

static uint64_t weight_elems(const struct weight *w)
{
    return w->data ? (uint64_t)w->n_in * (uint64_t)w->n_out : 0;
}

uint64_t model_n_params(const struct model *m)
{
    uint64_t n = weight_elems(&m->tok_embd) + weight_elems(&m->output_norm);
    if (!m->hp.tied_output)
        n += weight_elems(&m->output);
    for (int64_t il = 0; il < m->hp.n_layer; il++) {
        const struct model_layer *ly = &m->layers[il];
        const struct weight *ws[] = {&ly->attn_norm, &ly->wq,   &ly->wk,    &ly->wv, &ly->wo,
                                     &ly->bq,        &ly->bk,   &ly->bv,    &ly->bo, &ly->ffn_norm,
                                     &ly->w_gate,    &ly->w_up, &ly->w_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            n += weight_elems(ws[i]);
    }
    return n;
}

uint64_t model_weight_bytes(const struct model *m)
{
    uint64_t n = 0;
    for (uint64_t i = 0; m->gguf && i < gguf_n_tensors(m->gguf); i++)
        n += gguf_tensor_at(m->gguf, i)->nbytes;
    for (size_t f = 0; f < m->n_st; f++)
        for (size_t i = 0; i < st_n_tensors(m->st[f]); i++)
            n += st_tensor_at(m->st[f], i)->nbytes;
    return n;
}
