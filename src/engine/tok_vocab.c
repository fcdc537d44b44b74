/*
 * tok_vocab.c - the tokenizer's vocabulary: loading from GGUF (tokenizer.* keys), the lookups,
 * the special-token bookkeeping llama.cpp does at load time (EOT / EOG detection, control-type
 * overrides, the special-token cache), token pieces and decoding.
 *
 * The loaders (tok_from_gguf, tok_from_hf, tok_from_llama2c) fill the arrays with
 * vocab_set_token / vocab_add_merge and then call vocab_finish, which builds the hash tables
 * and everything derived. The special-token partitioning of the text and tok_encode are at
 * the end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/buf.h"
#include "core/errf.h"
#include "core/fileio.h"
#include "core/xalloc.h"
#include "engine/tok_int.h"

/* --- small helpers ---------------------------------------------------------------------- */

uint64_t tok_hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ull;
    }
    return h;
}

void tok_ids_push(struct tok_ids *a, int32_t id)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 64;
        a->v = af_xrealloc(a->v, a->cap * sizeof *a->v);
    }
    a->v[a->n++] = id;
}

int32_t tok_lookup(const struct tokenizer *t, const char *s, size_t n)
{
    if (n > t->max_token_len)
        return -1;
    uint64_t h = tok_hash_final(tok_hash_bytes(TOK_HASH_SEED, s, n));
    for (size_t i = (size_t)h & t->tok_ht.mask;; i = (i + 1) & t->tok_ht.mask) {
        uint64_t v = t->tok_ht.slots[i];
        if (!v)
            return -1;
        if (!TOK_SLOT_TAG_EQ(v, h))
            continue;
        int32_t id = (int32_t)TOK_SLOT_ID(v);
        if (t->text_len[id] == n && memcmp(tok_text_at(t, id), s, n) == 0)
            return id;
    }
}

static size_t ht_size(size_t n)
{
    size_t s = 16;
    while (s < n * 2)
        s <<= 1;
    return s;
}

static size_t arena_put(struct tokenizer *t, const char *s, size_t n)
{
    if (t->arena_len + n + 1 > t->arena_cap) {
        size_t c = t->arena_cap ? t->arena_cap : 4096;
        while (c < t->arena_len + n + 1)
            c *= 2;
        t->arena = af_xrealloc(t->arena, c);
        t->arena_cap = c;
    }
    size_t off = t->arena_len;
    if (n)
        memcpy(t->arena + off, s, n);
    t->arena[off + n] = 0;
    t->arena_len += n + 1;
    return off;
}

static void vocab_alloc(struct tokenizer *t, size_t n_vocab, size_t n_merges)
{
    t->n_vocab = n_vocab;
    t->text_off = af_xcalloc(n_vocab ? n_vocab : 1, sizeof *t->text_off);
    t->text_len = af_xcalloc(n_vocab ? n_vocab : 1, sizeof *t->text_len);
    t->scores = af_xcalloc(n_vocab ? n_vocab : 1, sizeof *t->scores);
    t->types = af_xcalloc(n_vocab ? n_vocab : 1, 1);
    t->flags = af_xcalloc(n_vocab ? n_vocab : 1, 1);
    t->merge_off = af_xcalloc(n_merges ? n_merges : 1, sizeof *t->merge_off);
    t->merge_len = af_xcalloc(n_merges ? n_merges : 1, sizeof *t->merge_len);
    t->bos = t->eos = t->eot = t->eom = t->unk = t->pad = -1;
}

static void vocab_set_token(struct tokenizer *t, size_t id, const char *s, size_t n, float score,
                            enum tok_type type)
{
    char empty[32];
    if (n == 0) { /* llama.cpp renames empty tokens */
        n = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%zu]", id);
        s = empty;
    }
    t->text_off[id] = arena_put(t, s, n);
    t->text_len[id] = (uint32_t)n;
    t->scores[id] = score;
    t->types[id] = (uint8_t)type;
    if (n > t->max_token_len)
        t->max_token_len = n;
}

static void vocab_add_merge(struct tokenizer *t, const char *s, size_t n)
{
    size_t m = t->n_merges++;
    t->merge_off[m] = arena_put(t, s, n);
    t->merge_len[m] = (uint32_t)n;
}

/* --- derived tables --------------------------------------------------------------------- */

static int build_token_hash(struct tokenizer *t, char *err, size_t errlen)
{
    size_t sz = ht_size(t->n_vocab);
    t->tok_ht.slots = af_xcalloc(sz, sizeof *t->tok_ht.slots);
    t->tok_ht.mask = sz - 1;
    for (size_t id = 0; id < t->n_vocab; id++) {
        const char *s = tok_text_at(t, (int32_t)id);
        size_t n = t->text_len[id];
        uint64_t h = tok_hash_final(tok_hash_bytes(TOK_HASH_SEED, s, n));
        size_t i = (size_t)h & t->tok_ht.mask;
        for (; t->tok_ht.slots[i]; i = (i + 1) & t->tok_ht.mask) {
            uint32_t o = TOK_SLOT_ID(t->tok_ht.slots[i]);
            if (t->text_len[o] == n && memcmp(tok_text_at(t, (int32_t)o), s, n) == 0) {
                af_errf(err, errlen,
                        "tokenizer.ggml.tokens: duplicate token '%.40s' at ids %u and %zu", s, o,
                        id);
                return AF_EPARSE;
            }
        }
        t->tok_ht.slots[i] = TOK_SLOT(h, id);
    }
    return AF_OK;
}

static void build_merge_hash(struct tokenizer *t)
{
    if (t->n_merges == 0)
        return;
    size_t sz = ht_size(t->n_merges);
    t->merge_ht.slots = af_xcalloc(sz, sizeof *t->merge_ht.slots);
    t->merge_ht.mask = sz - 1;
    for (size_t m = 0; m < t->n_merges; m++) {
        const char *s = t->arena + t->merge_off[m];
        size_t n = t->merge_len[m];
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
        if (!sp)
            continue; /* llama.cpp ranks it as ("", ""): never looked up */
        uint64_t h = tok_hash_final(tok_hash_bytes(TOK_HASH_SEED, s, n));
        size_t i = (size_t)h & t->merge_ht.mask;
        int dup = 0;
        for (; t->merge_ht.slots[i]; i = (i + 1) & t->merge_ht.mask) {
            uint32_t o = TOK_SLOT_ID(t->merge_ht.slots[i]);
            if (t->merge_len[o] == n && memcmp(t->arena + t->merge_off[o], s, n) == 0) {
                dup = 1; /* the first rank wins, as std::map::emplace */
                break;
            }
        }
        if (!dup)
            t->merge_ht.slots[i] = TOK_SLOT(h, m);
        if (n > t->max_merge_len)
            t->max_merge_len = n;
    }
}

static int text_in(const char *s, const char *const *list)
{
    for (size_t i = 0; list[i]; i++)
        if (strcmp(s, list[i]) == 0)
            return 1;
    return 0;
}

static void force_control(struct tokenizer *t, int32_t id)
{
    if (t->types[id] != TOK_TYPE_CONTROL)
        t->types[id] = TOK_TYPE_CONTROL;
}

/* llama.cpp's text-based detection of EOT / EOM / FIM tokens and the EOG set. llama.cpp takes
 * the first EOT candidate its hash map yields; we take the first of the list that exists
 * (<|eot_id|> for Llama 3, <|im_end|> for Qwen), which is what llama.cpp reports for them.
 * All candidates are EOG either way. */
static void detect_specials(struct tokenizer *t)
{
    static const char *const eot_names[] = {
        "<|eot_id|>",      "<|im_end|>", "<|end|>", "<end_of_turn>",         "<|endoftext|>",
        "<|end_of_text|>", "<EOT>",      "_<EOT>",  "<｜end▁of▁sentence｜>", NULL};
    static const char *const fim_eog[] = {
        "<|fim_pad|>", "<fim-pad>", "<fim_pad>",  "<|fim_repo|>", "<|repo_name|>",
        "<fim-repo>",  "<REPO>",    "<reponame>", "<|file_sep|>", NULL};
    static const char *const eog_names[] = {
        "<|eot_id|>",      "<|im_end|>",         "<|end|>", "<end_of_turn>",
        "<|endoftext|>",   "<|eom_id|>",         "<EOT>",   "_<EOT>",
        "<|end_of_text|>", "<end_of_utterance>", NULL};
    for (size_t i = 0; t->eot < 0 && eot_names[i]; i++) {
        int32_t id = tok_find(t, eot_names[i]);
        if (id >= 0) {
            t->eot = id;
            force_control(t, id);
        }
    }
    if (t->eom < 0 && (t->eom = tok_find(t, "<|eom_id|>")) >= 0)
        force_control(t, t->eom);
    for (size_t id = 0; id < t->n_vocab; id++) {
        const char *s = tok_text_at(t, (int32_t)id);
        if (s[0] == '<' || s[0] == '_') {
            if (text_in(s, fim_eog) || text_in(s, eog_names)) {
                t->flags[id] |= TOK_FLAG_EOG;
                force_control(t, (int32_t)id);
            }
            if (strcmp(s, "<|channel|>") == 0 || strcmp(s, "<|message|>") == 0 ||
                strcmp(s, "<|start|>") == 0 || strcmp(s, "<|constrain|>") == 0)
                t->types[id] = TOK_TYPE_USER_DEFINED;
        }
    }
    int32_t always[3] = {t->eos, t->eot, t->eom};
    for (size_t i = 0; i < 3; i++)
        if (always[i] >= 0)
            t->flags[always[i]] |= TOK_FLAG_EOG;
}

struct special_key {
    uint32_t len;
    int32_t id;
};

static int cmp_special(const void *a, const void *b)
{
    const struct special_key *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* llama.cpp's cache_special_tokens: control, user-defined and unknown tokens, longest first
 * (ties by id, where llama.cpp's std::sort leaves the order unspecified). */
static void build_specials(struct tokenizer *t)
{
    struct special_key *k = af_xmalloc((t->n_vocab ? t->n_vocab : 1) * sizeof *k);
    size_t n = 0;
    for (size_t id = 0; id < t->n_vocab; id++) {
        uint8_t ty = t->types[id];
        if (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_USER_DEFINED || ty == TOK_TYPE_UNKNOWN) {
            k[n].len = t->text_len[id];
            k[n].id = (int32_t)id;
            n++;
        }
    }
    qsort(k, n, sizeof *k, cmp_special);
    t->specials = af_xmalloc((n ? n : 1) * sizeof *t->specials);
    for (size_t i = 0; i < n; i++)
        t->specials[i] = k[i].id;
    t->n_specials = n;
    free(k);
}

/* --- pieces ------------------------------------------------------------------------------ */

static size_t utf8_dec(const unsigned char *s, size_t n, uint32_t *c)
{
    static const uint8_t lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    size_t k = lens[s[0] >> 4];
    if (k > n)
        k = n;
    static const uint8_t masks[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
    uint32_t v = s[0] & masks[k];
    for (size_t i = 1; i < k; i++)
        v = (v << 6) | (s[i] & 0x3F);
    *c = v;
    return k;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* llama.cpp's token_to_piece(special = true) for one token, appended to b. */
static void piece_of(const struct tokenizer *t, int32_t id, struct af_buf *b)
{
    const char *s = tok_text_at(t, id);
    size_t n = t->text_len[id];
    switch (t->types[id]) {
    case TOK_TYPE_CONTROL:
    case TOK_TYPE_UNKNOWN:
    case TOK_TYPE_USER_DEFINED:
        (void)af_buf_append(b, s, n);
        return;
    case TOK_TYPE_BYTE:
        if (n >= 5 && hexval(s[3]) >= 0 && hexval(s[4]) >= 0)
            (void)af_buf_putc(b, (char)(hexval(s[3]) * 16 + hexval(s[4])));
        return;
    case TOK_TYPE_NORMAL:
        break;
    default:
        return; /* unused / undefined: nothing, as llama.cpp */
    }
    if (t->kind == TOK_KIND_SPM) {
        for (size_t i = 0; i < n; i++) {
            if (i + 2 < n && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
                (void)af_buf_putc(b, ' ');
                i += 2;
            } else {
                (void)af_buf_putc(b, s[i]);
            }
        }
        return;
    }
    for (size_t i = 0; i < n;) {
        uint32_t c;
        size_t k = utf8_dec((const unsigned char *)s + i, n - i, &c);
        int byte = tok_cpt_to_byte(c);
        if (byte >= 0) {
            (void)af_buf_putc(b, (char)byte);
        } else {
            (void)af_buf_puts(b, "[UNK_BYTE_0x");
            for (size_t j = 0; j < k; j++)
                (void)af_buf_printf(b, "%02x", (unsigned char)s[i + j]);
            (void)af_buf_append(b, s, n);
            (void)af_buf_putc(b, ']');
        }
        i += k;
    }
}

static void build_pieces(struct tokenizer *t)
{
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    t->piece_off = af_xmalloc((t->n_vocab ? t->n_vocab : 1) * sizeof *t->piece_off);
    t->piece_len = af_xmalloc((t->n_vocab ? t->n_vocab : 1) * sizeof *t->piece_len);
    for (size_t id = 0; id < t->n_vocab; id++) {
        size_t start = b.len;
        piece_of(t, (int32_t)id, &b);
        t->piece_off[id] = start;
        t->piece_len[id] = (uint32_t)(b.len - start);
    }
    t->pieces = af_buf_detach(&b);
}

static void build_byte_tokens(struct tokenizer *t)
{
    for (int c = 0; c < 256; c++) {
        char s[8];
        size_t n;
        if (t->kind == TOK_KIND_SPM) {
            n = (size_t)snprintf(s, sizeof s, "<0x%02X>", (unsigned)c);
        } else {
            n = tok_byte_to_utf8((uint8_t)c, s);
        }
        t->byte_tok[c] = tok_lookup(t, s, n);
    }
}

static int spm_chunkable(const struct tokenizer *t)
{
    for (size_t id = 0; id < t->n_vocab; id++) {
        const char *s = tok_text_at(t, (int32_t)id);
        size_t n = t->text_len[id];
        for (size_t p = 1; p + 3 <= n; p++)
            if (memcmp(s + p, "\xe2\x96\x81", 3) == 0 &&
                (p < 3 || memcmp(s + p - 3, "\xe2\x96\x81", 3) != 0))
                return 0;
    }
    return 1;
}

/* Builds everything derived from the arrays; the pre-tokeniser for BPE. */
static int vocab_finish(struct tokenizer *t, const char *pre, char *err, size_t errlen)
{
    int rc = build_token_hash(t, err, errlen);
    if (rc != AF_OK)
        return rc;
    build_merge_hash(t);
    if (t->kind == TOK_KIND_BPE) {
        rc = tok_pretok_new(pre, &t->pretok, &t->pre_name, err, errlen);
        if (rc != AF_OK)
            return rc;
    } else {
        t->pre_name = "default";
        t->spm_chunkable = spm_chunkable(t);
    }
    detect_specials(t);
    build_specials(t);
    build_byte_tokens(t);
    build_pieces(t);
    if (t->add_bos && t->bos < 0) {
        af_errf(err, errlen, "tokenizer.ggml.add_bos_token is true, but there is no BOS id");
        return AF_EPARSE;
    }
    if (t->add_eos && t->eos < 0) {
        af_errf(err, errlen, "tokenizer.ggml.add_eos_token is true, but there is no EOS id");
        return AF_EPARSE;
    }
    return AF_OK;
}

void tok_free(struct tokenizer *t)
{
    if (!t)
        return;
    free(t->arena);
    free(t->text_off);
    free(t->text_len);
    free(t->scores);
    free(t->types);
    free(t->flags);
    free(t->tok_ht.slots);
    free(t->merge_off);
    free(t->merge_len);
    free(t->merge_ht.slots);
    free(t->pieces);
    free(t->piece_off);
    free(t->piece_len);
    tok_pretok_free(t->pretok);
    free(t->specials);
    free(t->chat_template);
    free(t);
}

/* --- GGUF ------------------------------------------------------------------------------- */

static const struct gguf_kv *find_arr(const struct gguf_file *g, const char *key, int want_str)
{
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv || kv->type != GGUF_ARRAY)
        return NULL;
    if (want_str != (kv->arr_type == GGUF_STRING))
        return NULL;
    return kv;
}

/* The default ids llama.cpp starts from, then the GGUF keys (ignored when out of range). */
static void gguf_special_ids(struct tokenizer *t, const struct gguf_file *g)
{
    static const char *const keys[6] = {
        "tokenizer.ggml.bos_token_id",     "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.eot_token_id",     "tokenizer.ggml.eom_token_id",
        "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"};
    int32_t *ids[6] = {&t->bos, &t->eos, &t->eot, &t->eom, &t->unk, &t->pad};
    if (t->kind == TOK_KIND_SPM) {
        t->bos = 1, t->eos = 2, t->unk = 0;
    } else {
        t->bos = 11, t->eos = 11;
    }
    for (size_t i = 0; i < 6; i++) {
        if (*ids[i] >= 0 && (size_t)*ids[i] >= t->n_vocab)
            *ids[i] = -1;
        uint32_t v;
        if (gguf_get_u32(g, keys[i], &v, NULL, 0) == AF_OK && v < t->n_vocab)
            *ids[i] = (int32_t)v;
    }
}

static void gguf_flags(struct tokenizer *t, const struct gguf_file *g, const char *pre)
{
    int v;
    if (t->kind == TOK_KIND_SPM) {
        t->add_bos = 1;
        t->add_space_prefix = 1;
    } else {
        static const char *const llama3[] = {"llama3",  "llama-v3", "llama-bpe",
                                             "falcon3", "pixtral",  NULL};
        if (text_in(pre, llama3)) {
            t->add_bos = 1;
            t->ignore_merges = 1;
        }
    }
    if (gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &v, NULL, 0) == AF_OK)
        t->add_space_prefix = v;
    if (gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &v, NULL, 0) == AF_OK)
        t->add_bos = v;
    if (gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &v, NULL, 0) == AF_OK)
        t->add_eos = v;
}

static int gguf_tokens(struct tokenizer *t, const struct gguf_file *g, char *err, size_t errlen)
{
    const struct gguf_kv *tk = find_arr(g, "tokenizer.ggml.tokens", 1);
    if (!tk) {
        af_errf(err, errlen, "%s: tokenizer.ggml.tokens: missing or not a string array",
                gguf_path(g));
        return AF_EPARSE;
    }
    if (tk->arr_n == 0 || tk->arr_n > (uint64_t)INT32_MAX) {
        af_errf(err, errlen, "%s: tokenizer.ggml.tokens: bad count %llu", gguf_path(g),
                (unsigned long long)tk->arr_n);
        return AF_EPARSE;
    }
    size_t n = (size_t)tk->arr_n;
    const struct gguf_kv *sc = find_arr(g, "tokenizer.ggml.scores", 0);
    const struct gguf_kv *ty = find_arr(g, "tokenizer.ggml.token_type", 0);
    if ((sc && sc->arr_n < n) || (ty && ty->arr_n < n)) {
        af_errf(err, errlen, "%s: tokenizer.ggml.%s: fewer entries than the %zu tokens",
                gguf_path(g), sc && sc->arr_n < n ? "scores" : "token_type", n);
        return AF_EPARSE;
    }
    const struct gguf_kv *mg = find_arr(g, "tokenizer.ggml.merges", 1);
    if (t->kind == TOK_KIND_BPE && !mg) {
        af_errf(err, errlen, "%s: tokenizer.ggml.merges: missing or not a string array",
                gguf_path(g));
        return AF_EPARSE;
    }
    size_t n_merges = mg ? (size_t)mg->arr_n : 0;
    vocab_alloc(t, n, n_merges);
    for (size_t i = 0; i < n; i++) {
        struct gguf_str s = gguf_arr_str(tk, i);
        float score = sc ? (float)gguf_arr_f64(sc, i) : 0.0f;
        int64_t type = ty ? gguf_arr_i64(ty, i) : TOK_TYPE_NORMAL;
        if (type < 0 || type > TOK_TYPE_BYTE)
            type = TOK_TYPE_UNDEFINED;
        vocab_set_token(t, i, s.s, (size_t)s.n, score, (enum tok_type)type);
    }
    if (t->kind == TOK_KIND_BPE)
        for (size_t i = 0; i < n_merges; i++) {
            struct gguf_str s = gguf_arr_str(mg, i);
            vocab_add_merge(t, s.s, (size_t)s.n);
        }
    return AF_OK;
}

int tok_from_gguf(const struct gguf_file *g, struct tokenizer **out, char *err, size_t errlen)
{
    *out = NULL;
    struct tokenizer *t = af_xcalloc(1, sizeof *t);
    char *model = gguf_get_strdup(g, "tokenizer.ggml.model");
    char *pre = gguf_get_strdup(g, "tokenizer.ggml.pre");
    int rc = AF_EPARSE;
    if (!model) {
        af_errf(err, errlen, "%s: tokenizer.ggml.model: missing", gguf_path(g));
        goto out;
    }
    if (strcmp(model, "gpt2") == 0) {
        t->kind = TOK_KIND_BPE;
        t->model_name = "gpt2";
    } else if (strcmp(model, "llama") == 0) {
        t->kind = TOK_KIND_SPM;
        t->model_name = "llama";
    } else {
        af_errf(err, errlen, "%s: tokenizer.ggml.model: unsupported '%s'", gguf_path(g), model);
        goto out;
    }
    rc = gguf_tokens(t, g, err, errlen);
    if (rc != AF_OK)
        goto out;
    gguf_special_ids(t, g);
    gguf_flags(t, g, pre ? pre : "");
    t->chat_template = gguf_get_strdup(g, "tokenizer.chat_template");
    rc = vocab_finish(t, pre ? pre : "default", err, errlen);
out:
    free(model);
    free(pre);
    if (rc != AF_OK)
        tok_free(t);
    else
        *out = t;
    return rc;
}

/* --- getters ------------------------------------------------------------------------------ */

size_t tok_n_vocab(const struct tokenizer *t)
{
    return t->n_vocab;
}

const char *tok_text(const struct tokenizer *t, int32_t id)
{
    if (id < 0 || (size_t)id >= t->n_vocab)
        return NULL;
    return tok_text_at(t, id);
}

enum tok_type tok_get_type(const struct tokenizer *t, int32_t id)
{
    if (id < 0 || (size_t)id >= t->n_vocab)
        return TOK_TYPE_UNDEFINED;
    return (enum tok_type)t->types[id];
}

int32_t tok_bos(const struct tokenizer *t)
{
    return t->bos;
}
int32_t tok_eos(const struct tokenizer *t)
{
    return t->eos;
}
int32_t tok_eot(const struct tokenizer *t)
{
    return t->eot;
}

int tok_is_eog(const struct tokenizer *t, int32_t id)
{
    return id >= 0 && (size_t)id < t->n_vocab && (t->flags[id] & TOK_FLAG_EOG) != 0;
}

int32_t tok_find(const struct tokenizer *t, const char *text)
{
    return text ? tok_lookup(t, text, strlen(text)) : -1;
}

const char *tok_model_name(const struct tokenizer *t)
{
    return t->model_name;
}
const char *tok_pre_name(const struct tokenizer *t)
{
    return t->pre_name;
}
const char *tok_chat_template(const struct tokenizer *t)
{
    return t->chat_template;
}
int tok_add_bos(const struct tokenizer *t)
{
    return t->add_bos;
}

/* --- pieces and decoding -------------------------------------------------------------------- */

int tok_piece(const struct tokenizer *t, int32_t id, int special, char *buf, size_t cap)
{
    if (id < 0 || (size_t)id >= t->n_vocab)
        return 0;
    uint8_t ty = t->types[id];
    if (!special && (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN))
        return 0;
    size_t n = t->piece_len[id];
    if (n > cap)
        return -(int)n;
    if (n)
        memcpy(buf, t->pieces + t->piece_off[id], n);
    return (int)n;
}

char *tok_decode(const struct tokenizer *t, const int32_t *ids, size_t n, int special)
{
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || (size_t)id >= t->n_vocab)
            continue;
        uint8_t ty = t->types[id];
        if (!special && (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN))
            continue;
        const char *p = t->pieces + t->piece_off[id];
        size_t len = t->piece_len[id];
        if (i == 0 && t->add_space_prefix && len > 0 && p[0] == ' ') {
            p++; /* llama_detokenize's lstrip of the first token */
            len--;
        }
        (void)af_buf_append(&b, p, len);
    }
    return af_buf_detach(&b);
}

/* --- special-token partitioning and encoding ---------------------------------------------- */

struct frag {
    size_t off, len;
    int32_t id;   /* >= 0: a special token; -1: raw text */
    int32_t next; /* index of the next fragment, -1 at the end */
};

struct frags {
    struct frag *v;
    size_t n, cap;
};

static int32_t frag_insert_after(struct frags *f, int32_t at, size_t off, size_t len, int32_t id)
{
    if (f->n == f->cap) {
        f->cap = f->cap ? f->cap * 2 : 16;
        f->v = af_xrealloc(f->v, f->cap * sizeof *f->v);
    }
    int32_t k = (int32_t)f->n++;
    f->v[k].off = off;
    f->v[k].len = len;
    f->v[k].id = id;
    f->v[k].next = f->v[at].next;
    f->v[at].next = k;
    return k;
}

/* Splits the raw fragment k at every occurrence of special token sid; returns the last
 * fragment made from it. */
static int32_t split_fragment(const struct tokenizer *t, const char *text, struct frags *f,
                              int32_t k, int32_t sid)
{
    const char *st = tok_text_at(t, sid);
    size_t sl = t->text_len[sid];
    for (;;) {
        struct frag cur = f->v[k];
        const char *m = cur.len >= sl ? memmem(text + cur.off, cur.len, st, sl) : NULL;
        if (!m)
            return k;
        size_t mo = (size_t)(m - text), end = cur.off + cur.len;
        int32_t tk;
        if (mo > cur.off) {
            f->v[k].len = mo - cur.off;
            tk = frag_insert_after(f, k, mo, sl, sid);
        } else {
            f->v[k].id = sid;
            f->v[k].off = mo;
            f->v[k].len = sl;
            tk = k;
        }
        if (mo + sl >= end)
            return tk;
        k = frag_insert_after(f, tk, mo + sl, end - (mo + sl), -1);
    }
}

/* llama.cpp's tokenizer_st_partition: each special token in turn (longest first) is cut out
 * of every raw fragment. Without parse_special, control and unknown tokens stay text;
 * user-defined ones are still matched. */
static void partition(const struct tokenizer *t, const char *text, size_t len, int parse_special,
                      struct frags *f)
{
    f->n = 0;
    f->v = af_xmalloc(16 * sizeof *f->v);
    f->cap = 16;
    f->v[0] = (struct frag){0, len, -1, -1};
    f->n = 1;
    for (size_t s = 0; s < t->n_specials; s++) {
        int32_t sid = t->specials[s];
        uint8_t ty = t->types[sid];
        if (!parse_special && (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN))
            continue;
        if (t->text_len[sid] > len || !memmem(text, len, tok_text_at(t, sid), t->text_len[sid]))
            continue;
        for (int32_t k = 0; k >= 0; k = f->v[k].next)
            if (f->v[k].id < 0)
                k = split_fragment(t, text, f, k, sid);
    }
}

/* SPM: a leading space when the previous fragment was special (or at the start), then every
 * space as U+2581. */
static void spm_fragment(const struct tokenizer *t, const char *s, size_t n, int prefix,
                         struct tok_ids *out)
{
    char *e = af_xmalloc(n * 3 + 4);
    size_t o = 0;
    if (prefix) {
        memcpy(e, "\xe2\x96\x81", 3);
        o = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(e + o, "\xe2\x96\x81", 3);
            o += 3;
        } else {
            e[o++] = s[i];
        }
    }
    tok_spm_encode(t, e, o, out);
    free(e);
}

int tok_encode(const struct tokenizer *t, const char *text, size_t len, int add_special,
               int parse_special, int32_t **ids, size_t *n_ids)
{
    *ids = NULL;
    *n_ids = 0;
    if (!t || (!text && len))
        return AF_EINVAL;
    if (len > TOK_MAX_INPUT)
        return AF_ETOOBIG;
    struct tok_ids out = {0};
    struct frags f = {0};
    int rc = AF_OK;
    if (len > 0)
        partition(t, text, len, parse_special, &f);
    if (add_special && t->add_bos)
        tok_ids_push(&out, t->bos);
    int prev_special = 1;
    for (int32_t k = f.n ? 0 : -1; k >= 0 && rc == AF_OK; k = f.v[k].next) {
        const struct frag *fr = &f.v[k];
        if (fr->id >= 0) {
            tok_ids_push(&out, fr->id);
            prev_special = 1;
        } else if (t->kind == TOK_KIND_SPM) {
            spm_fragment(t, text + fr->off, fr->len, t->add_space_prefix && prev_special, &out);
            prev_special = 0;
        } else {
            rc = tok_bpe_encode(t, text + fr->off, fr->len, &out);
        }
    }
    if (add_special && t->add_eos)
        tok_ids_push(&out, t->eos);
    free(f.v);
    if (rc != AF_OK) {
        free(out.v);
        return rc;
    }
    if (!out.v)
        out.v = af_xmalloc(sizeof *out.v);
    *ids = out.v;
    *n_ids = out.n;
    return AF_OK;
}

/* --- Hugging Face tokenizer.json ------------------------------------------------------------ */

/* The pre-tokeniser of a tokenizer.json, from its Split regex (llama.cpp's convert script
 * decides by hashing a test encoding; for the vocabularies we support the regex says it). */
static const char *hf_pre_name(json_t *pre)
{
    static const char qwen2[] =
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
        "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    static const char llama3[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                                 "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
                                 "\\s+(?!\\S)|\\s+";
    const char *type = json_string_value(json_object_get(pre, "type"));
    if (!type)
        return NULL;
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(pre, "pretokenizers");
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v)
        {
            const char *r = hf_pre_name(v);
            if (r)
                return r;
        }
        return NULL;
    }
    if (strcmp(type, "Split") == 0) {
        const char *re =
            json_string_value(json_object_get(json_object_get(pre, "pattern"), "Regex"));
        if (re && strcmp(re, qwen2) == 0)
            return "qwen2";
        if (re && strcmp(re, llama3) == 0)
            return "llama-bpe";
        return NULL;
    }
    if (strcmp(type, "ByteLevel") == 0 && json_is_true(json_object_get(pre, "use_regex")))
        return "gpt2";
    return NULL;
}

static json_t *hf_load_json(const char *path, size_t limit, char *err, size_t errlen)
{
    char *d = NULL;
    size_t len = 0;
    if (af_file_read(path, limit, &d, &len, err, errlen) != AF_OK)
        return NULL;
    json_error_t je;
    json_t *j = json_loadb(d, len, 0, &je);
    free(d);
    if (!j)
        af_errf(err, errlen, "%s:%d:%d: %s", path, je.line, je.column, je.text);
    return j;
}

/* A token given in tokenizer_config.json as "text" or {"content": "text"}. */
static int32_t hf_config_token(const struct tokenizer *t, json_t *cfg, const char *key)
{
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v))
        v = json_object_get(v, "content");
    const char *s = json_string_value(v);
    return s ? tok_find(t, s) : -1;
}

static int hf_vocab(struct tokenizer *t, json_t *j, size_t n_min, const char *path, char *err,
                    size_t errlen)
{
    json_t *model = json_object_get(j, "model"), *vocab = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges"), *added = json_object_get(j, "added_tokens");
    const char *type = json_string_value(json_object_get(model, "type"));
    if (!type || strcmp(type, "BPE") != 0 || !json_is_object(vocab) || !json_is_array(merges)) {
        af_errf(err, errlen, "%s: model: not a BPE model with vocab and merges", path);
        return AF_EPARSE;
    }
    size_t n = n_min, i;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v)
    {
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= INT32_MAX) {
            af_errf(err, errlen, "%s: model.vocab[\"%.40s\"]: bad id", path, key);
            return AF_EPARSE;
        }
        if ((size_t)id + 1 > n)
            n = (size_t)id + 1;
    }
    json_array_foreach(added, i, v)
    {
        json_int_t id = json_integer_value(json_object_get(v, "id"));
        if (id < 0 || id >= INT32_MAX || !json_string_value(json_object_get(v, "content"))) {
            af_errf(err, errlen, "%s: added_tokens[%zu]: bad id or content", path, i);
            return AF_EPARSE;
        }
        if ((size_t)id + 1 > n)
            n = (size_t)id + 1;
    }
    vocab_alloc(t, n, json_array_size(merges));
    uint8_t *set = af_xcalloc(n, 1);
    json_object_foreach(vocab, key, v)
    {
        size_t id = (size_t)json_integer_value(v);
        vocab_set_token(t, id, key, strlen(key), 0.0f, TOK_TYPE_NORMAL);
        set[id] = 1;
    }
    json_array_foreach(added, i, v)
    {
        size_t id = (size_t)json_integer_value(json_object_get(v, "id"));
        const char *c = json_string_value(json_object_get(v, "content"));
        size_t cl = strlen(c);
        int special = json_is_true(json_object_get(v, "special")) ||
                      (cl >= 4 && memcmp(c, "<|", 2) == 0 && memcmp(c + cl - 2, "|>", 2) == 0);
        vocab_set_token(t, id, c, cl, 0.0f, special ? TOK_TYPE_CONTROL : TOK_TYPE_USER_DEFINED);
        set[id] = 1;
    }
    for (size_t id = 0; id < n; id++) /* as convert_hf_to_gguf.py pads the vocabulary */
        if (!set[id]) {
            char pad[32];
            int k = snprintf(pad, sizeof pad, "[PAD%zu]", id);
            vocab_set_token(t, id, pad, (size_t)k, 0.0f, TOK_TYPE_UNUSED);
        }
    free(set);
    json_array_foreach(merges, i, v)
    {
        if (json_is_string(v)) {
            vocab_add_merge(t, json_string_value(v), json_string_length(v));
        } else if (json_is_array(v) && json_array_size(v) == 2) {
            struct af_buf b;
            af_buf_init(&b, AF_BUF_NOLIMIT);
            (void)af_buf_printf(&b, "%s %s", json_string_value(json_array_get(v, 0)),
                                json_string_value(json_array_get(v, 1)));
            vocab_add_merge(t, b.data, b.len);
            af_buf_deinit(&b);
        } else {
            af_errf(err, errlen, "%s: model.merges[%zu]: neither \"a b\" nor [a, b]", path, i);
            return AF_EPARSE;
        }
    }
    return AF_OK;
}

/* config.json's vocab_size and bos/eos ids, next to tokenizer.json, when present. */
static json_t *hf_sibling(const char *path, const char *name)
{
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path + 1) : 0;
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    (void)af_buf_append(&b, path, dl);
    (void)af_buf_puts(&b, name);
    json_t *j = hf_load_json(b.data, (size_t)16 << 20, NULL, 0);
    af_buf_deinit(&b);
    return j;
}

static void hf_specials(struct tokenizer *t, json_t *cfg, json_t *conf)
{
    json_int_t v;
    t->bos = hf_config_token(t, cfg, "bos_token");
    t->eos = hf_config_token(t, cfg, "eos_token");
    t->pad = hf_config_token(t, cfg, "pad_token");
    t->unk = hf_config_token(t, cfg, "unk_token");
    v = json_integer_value(json_object_get(conf, "bos_token_id"));
    if (t->bos < 0 && json_is_integer(json_object_get(conf, "bos_token_id")) && v >= 0 &&
        (size_t)v < t->n_vocab)
        t->bos = (int32_t)v;
    v = json_integer_value(json_object_get(conf, "eos_token_id"));
    if (t->eos < 0 && json_is_integer(json_object_get(conf, "eos_token_id")) && v >= 0 &&
        (size_t)v < t->n_vocab)
        t->eos = (int32_t)v;
    if (json_is_boolean(json_object_get(cfg, "add_bos_token")))
        t->add_bos = json_is_true(json_object_get(cfg, "add_bos_token"));
    if (json_is_boolean(json_object_get(cfg, "add_eos_token")))
        t->add_eos = json_is_true(json_object_get(cfg, "add_eos_token"));
    const char *tmpl = json_string_value(json_object_get(cfg, "chat_template"));
    if (tmpl)
        t->chat_template = af_xstrdup(tmpl);
}

int tok_from_hf(const char *tokenizer_json_path, struct tokenizer **out, char *err, size_t errlen)
{
    *out = NULL;
    json_t *j = hf_load_json(tokenizer_json_path, (size_t)512 << 20, err, errlen);
    if (!j)
        return AF_EPARSE;
    json_t *cfg = hf_sibling(tokenizer_json_path, "tokenizer_config.json");
    json_t *conf = hf_sibling(tokenizer_json_path, "config.json");
    struct tokenizer *t = af_xcalloc(1, sizeof *t);
    t->kind = TOK_KIND_BPE;
    t->model_name = "gpt2";
    int rc = AF_EPARSE;
    const char *pre = hf_pre_name(json_object_get(j, "pre_tokenizer"));
    if (!pre) {
        af_errf(err, errlen,
                "%s: pre_tokenizer: unsupported (need a Qwen2 / Llama-3 Split regex "
                "or a GPT-2 ByteLevel)",
                tokenizer_json_path);
        goto out;
    }
    json_int_t vs = json_integer_value(json_object_get(conf, "vocab_size"));
    rc =
        hf_vocab(t, j, vs > 0 && vs < INT32_MAX ? (size_t)vs : 0, tokenizer_json_path, err, errlen);
    if (rc != AF_OK)
        goto out;
    if (strcmp(pre, "llama-bpe") == 0) {
        t->add_bos = 1;
        t->ignore_merges = 1;
    }
    rc = build_token_hash(t, err, errlen); /* hf_specials looks tokens up */
    if (rc != AF_OK)
        goto out;
    hf_specials(t, cfg, conf);
    free(t->tok_ht.slots);
    t->tok_ht.slots = NULL;
    rc = vocab_finish(t, pre, err, errlen);
out:
    json_decref(j);
    json_decref(cfg);
    json_decref(conf);
    if (rc != AF_OK)
        tok_free(t);
    else
        *out = t;
    return rc;
}

/* --- llama2.c tokenizer.bin ------------------------------------------------------------------ */

/* llama2.c's export wrote "\n<s>\n" / "\n</s>\n" for ids 1 / 2 and turned U+2581 into spaces;
 * both are undone so that the SPM merges see SentencePiece's pieces. */
static int llama2c_parse(struct tokenizer *t, const char *d, size_t len, const char *path,
                         char *err, size_t errlen)
{
    size_t n = 0;
    for (size_t o = 4; o + 8 <= len; n++) {
        int32_t l;
        memcpy(&l, d + o + 4, 4);
        if (l < 0 || (size_t)l > len - o - 8) {
            af_errf(err, errlen, "%s: token %zu at offset %zu: bad length %d", path, n, o, l);
            return AF_EPARSE;
        }
        o += 8 + (size_t)l;
    }
    if (n < 3) {
        af_errf(err, errlen, "%s: only %zu tokens", path, n);
        return AF_EPARSE;
    }
    vocab_alloc(t, n, 0);
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    size_t o = 4;
    for (size_t id = 0; id < n; id++) {
        float score;
        int32_t l;
        memcpy(&score, d + o, 4);
        memcpy(&l, d + o + 4, 4);
        const char *s = d + o + 8;
        o += 8 + (size_t)l;
        af_buf_reset(&b);
        if (id == 1 || id == 2) {
            (void)af_buf_puts(&b, id == 1 ? "<s>" : "</s>");
        } else {
            for (int32_t i = 0; i < l; i++)
                (void)(s[i] == ' ' ? af_buf_append(&b, "\xe2\x96\x81", 3) : af_buf_putc(&b, s[i]));
        }
        enum tok_type ty = TOK_TYPE_NORMAL;
        if (id == 0)
            ty = TOK_TYPE_UNKNOWN;
        else if (id <= 2)
            ty = TOK_TYPE_CONTROL;
        else if (b.len == 6 && memcmp(b.data, "<0x", 3) == 0 && b.data[5] == '>' &&
                 hexval(b.data[3]) >= 0 && hexval(b.data[4]) >= 0)
            ty = TOK_TYPE_BYTE;
        vocab_set_token(t, id, b.len ? b.data : "", b.len, score, ty);
    }
    af_buf_deinit(&b);
    return AF_OK;
}

int tok_from_llama2c(const char *path, struct tokenizer **out, char *err, size_t errlen)
{
    *out = NULL;
    char *d = NULL;
    size_t len = 0;
    int rc = af_file_read(path, (size_t)64 << 20, &d, &len, err, errlen);
    if (rc != AF_OK)
        return rc;
    struct tokenizer *t = af_xcalloc(1, sizeof *t);
    t->kind = TOK_KIND_SPM;
    t->model_name = "llama";
    rc = llama2c_parse(t, d, len, path, err, errlen);
    free(d);
    if (rc == AF_OK) {
        t->bos = 1, t->eos = 2, t->unk = 0;
        t->add_bos = 1;
        t->add_space_prefix = 1;
        rc = vocab_finish(t, "default", err, errlen);
    }
    if (rc != AF_OK) {
        tok_free(t);
        return rc;
    }
    *out = t;
    return AF_OK;
}
