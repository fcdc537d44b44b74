/*
 * make_random.c - `agentflow model make-random`: a GGUF model of a real architecture and
 * shape with random weights (fixed seed) and a real vocabulary copied from another GGUF, or a
 * byte-level one. No pretrained weights can be downloaded where tests and benchmarks run, so
 * these stand in for them. Each row is drawn from its own seeded stream, so the file does not
 * depend on the thread count.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentflow/engine.h"
#include "core/errf.h"
#include "core/xalloc.h"
#include "engine/gguf.h"
#include "engine/quant.h"
#include "engine/quantize.h"
#include "engine/sample.h"

struct shape {
    const char *name;
    int64_t n_layer, n_embd, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
    float rope_base, rms_eps;
    int tied;
};

static const struct shape shapes[] = {
    {"tiny", 2, 64, 4, 2, 192, 0, 32768, 10000.0f, 1e-6f, 1},
    {"small", 4, 256, 8, 4, 768, 0, 32768, 10000.0f, 1e-6f, 1},
    {"qwen2.5-0.5b", 24, 896, 14, 2, 4864, 151936, 32768, 1e6f, 1e-6f, 1},
    {"qwen2.5-1.5b", 28, 1536, 12, 2, 8960, 151936, 32768, 1e6f, 1e-6f, 1},
    {"qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064, 32768, 1e6f, 1e-6f, 0},
    {"llama3.2-1b", 16, 2048, 32, 8, 8192, 128256, 131072, 500000.0f, 1e-5f, 1},
    {"llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192, 500000.0f, 1e-5f, 0},
};

/* The shape names, comma-separated, for messages. */
static void shape_names(char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0] && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "", shapes[i].name);
}

/* GPT-2's byte-to-unicode map: printable bytes stand for themselves, the rest are shifted up
 * from U+0100, so every byte has a visible one-character token. */
static int byte_token(int b, char *out)
{
    int cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
        cp = b;
    } else {
        int n = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255)))
                n++;
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static const char byte_vocab_template[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

/* A byte-level vocabulary: 256 byte tokens, three ChatML control tokens, padding to n. */
static int64_t byte_vocab(struct gguf_writer *w, int64_t n_vocab, int llama)
{
    const char *specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    int64_t n = n_vocab > 259 ? n_vocab : 259;
    struct gguf_str *toks = af_xcalloc((size_t)n, sizeof *toks);
    int32_t *types = af_xcalloc((size_t)n, sizeof *types);
    char *store = af_xcalloc((size_t)n, 24);
    for (int64_t i = 0; i < n; i++) {
        char *s = store + i * 24;
        if (i < 256) {
            toks[i].n = (uint64_t)byte_token((int)i, s);
            types[i] = 1;
        } else if (i < 259) {
            toks[i].n = (uint64_t)snprintf(s, 24, "%s", specials[i - 256]);
            types[i] = 3;
        } else {
            toks[i].n = (uint64_t)snprintf(s, 24, "[PAD%lld]", (long long)i);
            types[i] = 5;
        }
        toks[i].s = s;
    }
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", llama ? "llama-bpe" : "qwen2");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, (uint64_t)n);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", NULL, 0);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 256);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 258);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 0);
    gguf_writer_set_str(w, "tokenizer.chat_template", byte_vocab_template);
    free(toks);
    free(types);
    free(store);
    return n;
}

/* Copies the tokenizer.* keys of `path`; returns the vocabulary size or -1. */
static int64_t copy_vocab(struct gguf_writer *w, const char *path, char *err, size_t errlen)
{
    struct gguf_file *g = NULL;
    if (gguf_open(path, &g, err, errlen))
        return -1;
    const struct gguf_kv *tk = gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (!tk || tk->type != GGUF_ARRAY || tk->arr_type != GGUF_STRING) {
        af_errf(err, errlen, "%s: no tokenizer.ggml.tokens string array", path);
        gguf_close(g);
        return -1;
    }
    int64_t n = (int64_t)tk->arr_n;
    for (uint64_t i = 0; i < gguf_n_kv(g); i++) {
        const struct gguf_kv *kv = gguf_kv_at(g, i);
        if (kv->key.n > 10 && !memcmp(kv->key.s, "tokenizer.", 10))
            gguf_writer_copy_kv(w, kv);
    }
    gguf_close(g);
    return n;
}

struct rand_tensor {
    char name[96];
    int64_t n_in, n_out; /* n_out 0 = 1-D */
    float mean, std;
};

static void fill_rows(float *dst, const struct rand_tensor *t, uint64_t seed, uint64_t tid)
{
    int64_t rows = t->n_out ? t->n_out : 1;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        struct rng g;
        rng_seed(&g, seed ^ (tid * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)r << 20));
        float *row = dst + r * t->n_in;
        for (int64_t i = 0; i < t->n_in; i += 2) {
            double u1 = rng_uniform(&g), u2 = rng_uniform(&g);
            double rad = sqrt(-2.0 * log(1.0 - u1)), th = 6.283185307179586 * u2;
            row[i] = t->mean + t->std * (float)(rad * cos(th));
            if (i + 1 < t->n_in)
                row[i + 1] = t->mean + t->std * (float)(rad * sin(th));
        }
    }
}

static size_t tensor_list(const struct shape *sh, int qwen, int64_t n_vocab,
                          struct rand_tensor **out)
{
    const int64_t d = sh->n_embd, hd = d / sh->n_head, qd = sh->n_head * hd,
                  kvd = sh->n_head_kv * hd;
    size_t cap = 3 + (size_t)sh->n_layer * 13, n = 0;
    struct rand_tensor *t = af_xcalloc(cap, sizeof *t);
#define ADD(nm, in, outd, mu, sd)                                                                  \
    do {                                                                                           \
        snprintf(t[n].name, sizeof t[n].name, "%s", nm);                                           \
        t[n].n_in = (in);                                                                          \
        t[n].n_out = (outd);                                                                       \
        t[n].mean = (mu);                                                                          \
        t[n].std = (sd);                                                                           \
        n++;                                                                                       \
    } while (0)
    ADD("token_embd.weight", d, n_vocab, 0.0f, 0.02f);
    ADD("output_norm.weight", d, 0, 1.0f, 0.05f);
    if (!sh->tied)
        ADD("output.weight", d, n_vocab, 0.0f, 0.02f);
    for (int64_t il = 0; il < sh->n_layer; il++) {
        char nm[96];
        const struct {
            const char *suffix;
            int64_t in, outd;
            float mu, sd;
            int bias;
        } spec[] = {
            {"attn_norm.weight", d, 0, 1.0f, 0.05f, 0},
            {"attn_q.weight", d, qd, 0, 0.02f, 0},
            {"attn_k.weight", d, kvd, 0, 0.02f, 0},
            {"attn_v.weight", d, kvd, 0, 0.02f, 0},
            {"attn_q.bias", qd, 0, 0, 0.02f, 1},
            {"attn_k.bias", kvd, 0, 0, 0.02f, 1},
            {"attn_v.bias", kvd, 0, 0, 0.02f, 1},
            {"attn_output.weight", qd, d, 0, 0.02f, 0},
            {"ffn_norm.weight", d, 0, 1.0f, 0.05f, 0},
            {"ffn_gate.weight", d, sh->n_ff, 0, 0.02f, 0},
            {"ffn_up.weight", d, sh->n_ff, 0, 0.02f, 0},
            {"ffn_down.weight", sh->n_ff, d, 0, 0.02f, 0},
        };
        for (size_t k = 0; k < sizeof spec / sizeof spec[0]; k++) {
            if (spec[k].bias && !qwen)
                continue;
            snprintf(nm, sizeof nm, "blk.%lld.%s", (long long)il, spec[k].suffix);
            ADD(nm, spec[k].in, spec[k].outd, spec[k].mu, spec[k].sd);
        }
    }
#undef ADD
    *out = t;
    return n;
}

static void set_hparams(struct gguf_writer *w, const struct shape *sh, const char *arch,
                        uint32_t ftype)
{
    char key[96];
    gguf_writer_set_str(w, "general.architecture", arch);
    snprintf(key, sizeof key, "random-%s-%s", arch, sh->name);
    gguf_writer_set_str(w, "general.name", key);
    gguf_writer_set_u32(w, "general.file_type", ftype);
    gguf_writer_set_u32(w, "general.quantization_version", 2);
#define HP(suffix, v)                                                                              \
    do {                                                                                           \
        snprintf(key, sizeof key, "%s.%s", arch, suffix);                                          \
        gguf_writer_set_u32(w, key, (uint32_t)(v));                                                \
    } while (0)
    HP("context_length", sh->n_ctx);
    HP("embedding_length", sh->n_embd);
    HP("block_count", sh->n_layer);
    HP("feed_forward_length", sh->n_ff);
    HP("attention.head_count", sh->n_head);
    HP("attention.head_count_kv", sh->n_head_kv);
#undef HP
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    gguf_writer_set_f32(w, key, sh->rope_base);
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    gguf_writer_set_f32(w, key, sh->rms_eps);
}

static const struct shape *find_shape(const char *name)
{
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (!strcmp(shapes[i].name, name))
            return &shapes[i];
    return NULL;
}

/* "custom:LAYERS,EMBD,HEADS,KV_HEADS,FF": a qwen2-style shape of one's own (a model trained
 * from scratch). Head size EMBD/HEADS must be even (RoPE) and HEADS a multiple of KV_HEADS. */
static int parse_custom(const char *spec, struct shape *out)
{
    long long v[5];
    char tail;
    if (strncmp(spec, "custom:", 7) != 0 || sscanf(spec + 7, "%lld,%lld,%lld,%lld,%lld%c", &v[0],
                                                   &v[1], &v[2], &v[3], &v[4], &tail) != 5)
        return 0;
    for (int i = 0; i < 5; i++)
        if (v[i] < 1 || v[i] > 65536)
            return 0;
    if (v[1] % v[2] != 0 || (v[1] / v[2]) % 2 != 0 || v[2] % v[3] != 0)
        return 0;
    *out = (struct shape){"custom", v[0], v[1], v[2], v[3], v[4], 0, 32768, 10000.0f, 1e-6f, 1};
    return 1;
}

int af_engine_make_random(const struct af_engine_random_params *p, const char *out_path, char *err,
                          size_t errlen)
{
    struct shape custom;
    const struct shape *sh = find_shape(p->shape ? p->shape : "tiny");
    if (!sh && p->shape && parse_custom(p->shape, &custom))
        sh = &custom;
    struct quantize_plan plan;
    int qwen = p->arch && !strcmp(p->arch, "qwen2");
    if (!sh) {
        char names[256];
        shape_names(names, sizeof names);
        af_errf(err, errlen,
                "unknown shape '%s' (%s, or custom:LAYERS,EMBD,HEADS,KV_HEADS,FF with "
                "EMBD/HEADS even and HEADS a multiple of KV_HEADS)",
                p->shape, names);
        return AF_EINVAL;
    }
    if (!qwen && (!p->arch || strcmp(p->arch, "llama"))) {
        af_errf(err, errlen, "unknown architecture '%s' (qwen2, llama)", p->arch ? p->arch : "");
        return AF_EINVAL;
    }
    if (quantize_parse_ftype(p->type ? p->type : "F32", &plan)) {
        af_errf(err, errlen, "unknown type '%s'", p->type);
        return AF_EINVAL;
    }
    struct gguf_writer *w = gguf_writer_new();
    set_hparams(w, sh, qwen ? "qwen2" : "llama", plan.ftype);
    int64_t n_vocab = p->vocab_from ? copy_vocab(w, p->vocab_from, err, errlen)
                                    : byte_vocab(w, sh->n_vocab, !qwen);
    if (n_vocab < 0) {
        gguf_writer_free(w);
        return AF_EINVAL;
    }
    if (sh->n_vocab > n_vocab)
        n_vocab = sh->n_vocab; /* embedding rows past the vocabulary, as real models pad */
    struct rand_tensor *ts = NULL;
    size_t nt = tensor_list(sh, qwen, n_vocab, &ts);
    void **bufs = af_xcalloc(nt, sizeof *bufs);
    int rc = AF_OK;
    for (size_t i = 0; i < nt && rc == AF_OK; i++) {
        const struct rand_tensor *t = &ts[i];
        int64_t rows = t->n_out ? t->n_out : 1;
        float *f = af_xmalloc((size_t)(rows * t->n_in) * sizeof(float));
        fill_rows(f, t, p->seed, (uint64_t)i + 1);
        uint32_t type = t->n_out
                            ? quantize_pick_type(&plan, t->name, t->n_in, sh->n_layer, !sh->tied)
                            : GGML_TYPE_F32;
        size_t rb = quant_row_bytes(type, t->n_in);
        if (type != GGML_TYPE_F32) {
            char *q = af_xmalloc((size_t)rows * rb);
#pragma omp parallel for schedule(static)
            for (int64_t r = 0; r < rows; r++)
                quant_quantize_row(type, f + r * t->n_in, q + (size_t)r * rb, t->n_in);
            free(f);
            bufs[i] = q;
        } else {
            bufs[i] = f;
        }
        int64_t ne[2] = {t->n_in, rows};
        rc = gguf_writer_add_tensor(w, t->name, type, t->n_out ? 2 : 1, ne, bufs[i],
                                    (uint64_t)rows * rb, err, errlen);
    }
    if (rc == AF_OK)
        rc = gguf_writer_write(w, out_path, err, errlen);
    for (size_t i = 0; i < nt; i++)
        free(bufs[i]);
    free(bufs);
    free(ts);
    gguf_writer_free(w);
    return rc;
}
