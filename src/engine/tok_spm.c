/*
 * tok_spm.c - SentencePiece-style BPE (tokenizer.ggml.model "llama"), exact to llama.cpp's
 * llm_tokenizer_spm_session.
 *
 * The fragment (spaces already turned into U+2581 by the caller, a leading one added when the
 * vocabulary says add_space_prefix) is cut into UTF-8 characters; adjacent pairs whose
 * concatenation is a vocabulary token are merged, highest score first (ties: leftmost), through
 * a binary heap over a linked list, so n bytes cost O(n log n). A final symbol that is no token
 * falls back to its bytes' <0xNN> tokens.
 */
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "engine/tok_int.h"

struct spm_sym {
    uint32_t off, n;
    int32_t prev, next;
};

struct spm_bigram {
    float score;
    int32_t left, right;
    uint32_t size;
};

struct spm_work {
    const struct tokenizer *t;
    const char *text;
    struct spm_sym *sym;
    struct spm_bigram *heap;
    size_t heap_n, heap_cap;
};

static int spm_before(const struct spm_bigram *a, const struct spm_bigram *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void spm_push(struct spm_work *w, struct spm_bigram g)
{
    if (w->heap_n == w->heap_cap) {
        w->heap_cap = w->heap_cap ? w->heap_cap * 2 : 64;
        w->heap = af_xrealloc(w->heap, w->heap_cap * sizeof *w->heap);
    }
    size_t i = w->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!spm_before(&g, &w->heap[p]))
            break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = g;
}

static struct spm_bigram spm_pop(struct spm_work *w)
{
    struct spm_bigram top = w->heap[0], last = w->heap[--w->heap_n];
    size_t i = 0, n = w->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && spm_before(&w->heap[c + 1], &w->heap[c]))
            c++;
        if (!spm_before(&w->heap[c], &last))
            break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n > 0)
        w->heap[i] = last;
    return top;
}

static void spm_try(struct spm_work *w, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return;
    size_t n = (size_t)w->sym[l].n + w->sym[r].n;
    if (n > w->t->max_token_len)
        return;
    int32_t id = tok_lookup(w->t, w->text + w->sym[l].off, n);
    if (id < 0)
        return;
    struct spm_bigram g = {w->t->scores[id], l, r, (uint32_t)n};
    spm_push(w, g);
}

/* llama.cpp's byte_to_token: <0xNN>, else the byte as a one-character token. */
static void spm_bytes(const struct tokenizer *t, const char *s, size_t n, struct tok_ids *out)
{
    for (size_t j = 0; j < n; j++) {
        int32_t id = t->byte_tok[(unsigned char)s[j]];
        if (id < 0)
            id = tok_lookup(t, s + j, 1);
        if (id < 0)
            id = t->unk; /* llama.cpp throws here */
        if (id >= 0)
            tok_ids_push(out, id);
    }
}

static size_t utf8_len(unsigned char c)
{
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}

static int is_space_sym(const char *text, const struct spm_sym *y)
{
    return y->n == 3 && memcmp(text + y->off, "\xe2\x96\x81", 3) == 0;
}

/* Merges symbols [a, b) as one independent list and appends their ids. */
static void spm_run(struct spm_work *w, size_t a, size_t b, struct tok_ids *out)
{
    for (size_t i = a; i < b; i++) {
        w->sym[i].prev = i == a ? -1 : (int32_t)i - 1;
        w->sym[i].next = i + 1 == b ? -1 : (int32_t)i + 1;
    }
    w->heap_n = 0;
    for (size_t i = a + 1; i < b; i++)
        spm_try(w, (int32_t)i - 1, (int32_t)i);
    while (w->heap_n > 0) {
        struct spm_bigram g = spm_pop(w);
        struct spm_sym *l = &w->sym[g.left], *r = &w->sym[g.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != g.size)
            continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            w->sym[r->next].prev = g.left;
        spm_try(w, l->prev, g.left);
        spm_try(w, g.left, l->next);
    }
    /* Every merged symbol is a token; llama.cpp's rev_merge resegmenting never fires. */
    for (int32_t i = (int32_t)a; i >= 0; i = w->sym[i].next) {
        const char *s = w->text + w->sym[i].off;
        int32_t id = tok_lookup(w->t, s, w->sym[i].n);
        if (id >= 0)
            tok_ids_push(out, id);
        else
            spm_bytes(w->t, s, w->sym[i].n, out);
    }
}

void tok_spm_encode(const struct tokenizer *t, const char *text, size_t len, struct tok_ids *out)
{
    if (len == 0)
        return;
    struct spm_work w = {.t = t, .text = text};
    w.sym = af_xmalloc(len * sizeof *w.sym);
    size_t n_sym = 0;
    for (size_t off = 0; off < len; n_sym++) {
        size_t k = utf8_len((unsigned char)text[off]);
        if (k > len - off)
            k = len - off;
        w.sym[n_sym].off = (uint32_t)off;
        w.sym[n_sym].n = (uint32_t)k;
        off += k;
    }
    /* Independent runs start at a "▁" that follows another character (see spm_chunkable);
     * each run is merged exactly as the whole text would be. */
    size_t a = 0;
    for (size_t i = 1; t->spm_chunkable && i < n_sym; i++)
        if (is_space_sym(text, &w.sym[i]) && !is_space_sym(text, &w.sym[i - 1])) {
            spm_run(&w, a, i, out);
            a = i;
        }
    spm_run(&w, a, n_sym, out);
    free(w.sym);
    free(w.heap);
}
