/*
 * make_vocab.c - trains a small byte-level BPE vocabulary on a corpus and writes it as a
 * tokenizer-only GGUF (the tokenizer.* keys of a qwen2 model, no tensors), for
 * `model make-random --vocab-from`: the vocabulary of a model trained from scratch.
 *
 * The corpus is split with the qwen2 pre-tokeniser (so digits stay single tokens, which
 * helps a small model copy numbers), each distinct word counted once with its frequency, and
 * the most frequent adjacent pair merged until the vocabulary is full. Ties go to the
 * smallest pair of ids, so the same corpus gives the same file.
 */
#include "agentflow/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errf.h"
#include "core/xalloc.h"
#include "engine/gguf.h"
#include "engine/tok_int.h"

#define N_SPECIAL 3

struct word {
    int32_t *sym;
    size_t n;
    uint64_t count;
};

struct words {
    struct word *v;
    size_t n, cap;
    /* open addressing over v by the word's bytes: index + 1, 0 = empty */
    uint32_t *slot;
    size_t mask;
    char **text; /* the word's bytes, for the table */
    size_t *len;
};

static uint64_t hash_bytes(const char *s, size_t n)
{
    return tok_hash_final(tok_hash_bytes(TOK_HASH_SEED, s, n));
}

static void words_grow(struct words *w)
{
    size_t cap = w->mask ? (w->mask + 1) * 2 : 1 << 16;
    uint32_t *slot = af_xcalloc(cap, sizeof *slot);
    for (size_t i = 0; i < w->n; i++) {
        size_t h = (size_t)hash_bytes(w->text[i], w->len[i]) & (cap - 1);
        while (slot[h])
            h = (h + 1) & (cap - 1);
        slot[h] = (uint32_t)i + 1;
    }
    free(w->slot);
    w->slot = slot;
    w->mask = cap - 1;
}

static void words_add(struct words *w, const char *s, size_t n)
{
    if (!w->mask || (w->n + 1) * 2 > w->mask + 1)
        words_grow(w);
    size_t h = (size_t)hash_bytes(s, n) & w->mask;
    for (; w->slot[h]; h = (h + 1) & w->mask) {
        size_t i = w->slot[h] - 1;
        if (w->len[i] == n && memcmp(w->text[i], s, n) == 0) {
            w->v[i].count++;
            return;
        }
    }
    if (w->n == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 4096;
        w->v = af_xrealloc(w->v, w->cap * sizeof *w->v);
        w->text = af_xrealloc(w->text, w->cap * sizeof *w->text);
        w->len = af_xrealloc(w->len, w->cap * sizeof *w->len);
    }
    struct word *x = &w->v[w->n];
    x->sym = af_xmalloc(n * sizeof *x->sym);
    for (size_t k = 0; k < n; k++)
        x->sym[k] = (unsigned char)s[k];
    x->n = n;
    x->count = 1;
    w->text[w->n] = af_xstrndup(s, n);
    w->len[w->n] = n;
    w->slot[h] = (uint32_t)++w->n;
}

static void words_free(struct words *w)
{
    for (size_t i = 0; i < w->n; i++) {
        free(w->v[i].sym);
        free(w->text[i]);
    }
    free(w->v);
    free(w->text);
    free(w->len);
    free(w->slot);
}

/* Pair counts for one round: an open-addressing table keyed by (left << 32 | right). */
struct pairs {
    uint64_t *key; /* key + 1; 0 = empty */
    uint64_t *count;
    size_t mask;
};

static void pairs_add(struct pairs *p, uint64_t key, uint64_t c)
{
    size_t h = (size_t)tok_hash_final(key * 0x9E3779B97F4A7C15ull) & p->mask;
    while (p->key[h] && p->key[h] != key + 1)
        h = (h + 1) & p->mask;
    p->key[h] = key + 1;
    p->count[h] += c;
}

/* The GPT-2 character string of a token's bytes. */
static char *mapped(const char *bytes, size_t n)
{
    char *s = af_xmalloc(2 * n + 1), *o = s;
    for (size_t i = 0; i < n; i++)
        o += tok_byte_to_utf8((uint8_t)bytes[i], o);
    *o = '\0';
    return s;
}

static const char chatml_template[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

int af_engine_make_vocab(const char *const *texts, size_t n_texts, size_t n_vocab,
                         const char *out_path, size_t *n_merges_out, char *err, size_t errlen)
{
    if (n_vocab < 256 + N_SPECIAL || n_vocab > 65536) {
        af_errf(err, errlen, "vocabulary size %zu: must be %d to 65536", n_vocab, 256 + N_SPECIAL);
        return AF_EINVAL;
    }
    struct tok_pretok *pre = NULL;
    const char *pre_name = NULL;
    int rc = tok_pretok_new("qwen2", &pre, &pre_name, err, errlen);
    if (rc != AF_OK)
        return rc;
    struct words w = {0};
    struct tok_spans spans = {0};
    for (size_t t = 0; t < n_texts; t++) {
        size_t len = strlen(texts[t]);
        if (tok_pretok_split(pre, texts[t], len, &spans) != AF_OK) {
            af_errf(err, errlen, "text %zu: the pre-tokeniser failed on it", t);
            rc = AF_EINTERNAL;
            break;
        }
        for (size_t k = 0; k < spans.n; k++)
            words_add(&w, texts[t] + spans.v[k].off, spans.v[k].len);
    }
    free(spans.v);
    tok_pretok_free(pre);
    if (rc != AF_OK) {
        words_free(&w);
        return rc;
    }
    size_t n_target = n_vocab - N_SPECIAL, n_tok = 256;
    /* Token bytes: ids < 256 are the bytes themselves. */
    char **tok_bytes = af_xcalloc(n_target, sizeof *tok_bytes);
    size_t *tok_len = af_xcalloc(n_target, sizeof *tok_len);
    int32_t(*merge)[2] = af_xcalloc(n_target, sizeof *merge);
    for (int b = 0; b < 256; b++) {
        tok_bytes[b] = af_xmalloc(1);
        tok_bytes[b][0] = (char)b;
        tok_len[b] = 1;
    }
    size_t total = 0;
    for (size_t i = 0; i < w.n; i++)
        total += w.v[i].n;
    size_t cap = 1;
    while (cap < 2 * total + 16)
        cap <<= 1;
    struct pairs p = {af_xcalloc(cap, sizeof(uint64_t)), af_xcalloc(cap, sizeof(uint64_t)),
                      cap - 1};
    while (n_tok < n_target) {
        memset(p.key, 0, cap * sizeof *p.key);
        memset(p.count, 0, cap * sizeof *p.count);
        for (size_t i = 0; i < w.n; i++)
            for (size_t k = 0; k + 1 < w.v[i].n; k++)
                pairs_add(&p, (uint64_t)w.v[i].sym[k] << 32 | (uint32_t)w.v[i].sym[k + 1],
                          w.v[i].count);
        uint64_t best = 0, best_c = 0;
        for (size_t h = 0; h <= p.mask; h++)
            if (p.key[h] && (p.count[h] > best_c || (p.count[h] == best_c && p.key[h] < best)))
                best = p.key[h], best_c = p.count[h];
        if (best_c < 2)
            break; /* nothing repeats: more merges would only memorise */
        int32_t l = (int32_t)((best - 1) >> 32), r = (int32_t)((best - 1) & 0xffffffffu);
        int32_t id = (int32_t)n_tok++;
        merge[id][0] = l;
        merge[id][1] = r;
        tok_len[id] = tok_len[l] + tok_len[r];
        tok_bytes[id] = af_xmalloc(tok_len[id]);
        memcpy(tok_bytes[id], tok_bytes[l], tok_len[l]);
        memcpy(tok_bytes[id] + tok_len[l], tok_bytes[r], tok_len[r]);
        for (size_t i = 0; i < w.n; i++) {
            struct word *x = &w.v[i];
            size_t o = 0;
            for (size_t k = 0; k < x->n; k++) {
                if (k + 1 < x->n && x->sym[k] == l && x->sym[k + 1] == r) {
                    x->sym[o++] = id;
                    k++;
                } else {
                    x->sym[o++] = x->sym[k];
                }
            }
            x->n = o;
        }
    }
    free(p.key);
    free(p.count);
    words_free(&w);

    /* Tokens: the bytes, the merges in order, then the ChatML control tokens. */
    size_t n_all = n_tok + N_SPECIAL, n_merges = n_tok - 256;
    struct gguf_str *toks = af_xcalloc(n_all, sizeof *toks);
    struct gguf_str *merges = af_xcalloc(n_merges ? n_merges : 1, sizeof *merges);
    int32_t *types = af_xcalloc(n_all, sizeof *types);
    char **owned = af_xcalloc(n_all + n_merges, sizeof *owned);
    static const char *const specials[N_SPECIAL] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    for (size_t i = 0; i < n_tok; i++) {
        owned[i] = mapped(tok_bytes[i], tok_len[i]);
        toks[i] = (struct gguf_str){owned[i], strlen(owned[i])};
        types[i] = 1;
    }
    for (size_t i = 0; i < N_SPECIAL; i++) {
        toks[n_tok + i] = (struct gguf_str){specials[i], strlen(specials[i])};
        types[n_tok + i] = 3;
    }
    for (size_t m = 0; m < n_merges; m++) {
        size_t id = 256 + m;
        const char *a = toks[merge[id][0]].s, *b = toks[merge[id][1]].s;
        size_t la = strlen(a), lb = strlen(b);
        char *s = af_xmalloc(la + lb + 2);
        memcpy(s, a, la);
        s[la] = ' ';
        memcpy(s + la + 1, b, lb + 1);
        owned[n_all + m] = s;
        merges[m] = (struct gguf_str){s, la + lb + 1};
    }
    struct gguf_writer *gw = gguf_writer_new();
    gguf_writer_set_str(gw, "general.name", "agentflow-bpe");
    gguf_writer_set_str(gw, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(gw, "tokenizer.ggml.pre", "qwen2");
    gguf_writer_set_arr_str(gw, "tokenizer.ggml.tokens", toks, n_all);
    gguf_writer_set_arr(gw, "tokenizer.ggml.token_type", GGUF_INT32, types, n_all);
    gguf_writer_set_arr_str(gw, "tokenizer.ggml.merges", merges, n_merges);
    gguf_writer_set_u32(gw, "tokenizer.ggml.bos_token_id", (uint32_t)n_tok);
    gguf_writer_set_u32(gw, "tokenizer.ggml.eos_token_id", (uint32_t)n_tok + 2);
    gguf_writer_set_u32(gw, "tokenizer.ggml.padding_token_id", (uint32_t)n_tok);
    gguf_writer_set_bool(gw, "tokenizer.ggml.add_bos_token", 0);
    gguf_writer_set_str(gw, "tokenizer.chat_template", chatml_template);
    rc = gguf_writer_write(gw, out_path, err, errlen);
    gguf_writer_free(gw);
    for (size_t i = 0; i < n_all + n_merges; i++)
        free(owned[i]);
    free(owned);
    free(toks);
    free(merges);
    free(types);
    for (size_t i = 0; i < n_tok; i++)
        free(tok_bytes[i]);
    free(tok_bytes);
    free(tok_len);
    free(merge);
    if (n_merges_out)
        *n_merges_out = n_merges;
    return rc;
}
