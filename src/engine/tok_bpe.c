/*
 * tok_bpe.c - byte-level BPE (tokenizer.ggml.model "gpt2"), exact to llama.cpp's
 * llm_tokenizer_bpe_session.
 *
 * A text fragment goes through: (1) UTF-8 sanitising as llama.cpp's unicode_cpts_from_utf8
 * does it (each invalid byte becomes U+FFFD, overlong forms are re-encoded short);
 * (2) the pre-tokeniser regexes (tok_pretok.c); (3) per word, the GPT-2 byte-to-unicode map;
 * (4) merges, lowest rank first (ties: leftmost), with a binary heap over a linked list of
 * symbols, so a word of n bytes costs O(n log n); (5) each final symbol's token, or, when the
 * vocabulary lacks it, the tokens of its single bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"
#include "core/xalloc.h"
#include "engine/tok_int.h"

/* GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68 bytes to
 * U+0100 + their rank among those. */
static uint32_t byte_cpt(uint8_t b)
{
    if (b <= 0x20)
        return 256u + b;
    if (b >= 0x7F && b <= 0xA0)
        return (uint32_t)b + 162u;
    if (b == 0xAD)
        return 323u;
    return b;
}

size_t tok_byte_to_utf8(uint8_t b, char out[2])
{
    uint32_t c = byte_cpt(b);
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    out[0] = (char)(0xC0 | (c >> 6));
    out[1] = (char)(0x80 | (c & 0x3F));
    return 2;
}

int tok_cpt_to_byte(uint32_t cpt)
{
    if ((cpt >= 0x21 && cpt <= 0x7E) || (cpt >= 0xA1 && cpt <= 0xAC) ||
        (cpt >= 0xAE && cpt <= 0xFF))
        return (int)cpt;
    if (cpt >= 256 && cpt <= 288)
        return (int)(cpt - 256);
    if (cpt >= 289 && cpt <= 322)
        return (int)(cpt - 162);
    if (cpt == 323)
        return 0xAD;
    return -1;
}

int32_t tok_merge_rank(const struct tokenizer *t, const char *l, size_t nl, const char *r,
                       size_t nr)
{
    size_t n = nl + 1 + nr;
    if (!t->merge_ht.slots || n > t->max_merge_len)
        return -1;
    uint64_t h = tok_hash_bytes(TOK_HASH_SEED, l, nl);
    h = tok_hash_bytes(h, " ", 1);
    h = tok_hash_final(tok_hash_bytes(h, r, nr));
    for (size_t i = (size_t)h & t->merge_ht.mask;; i = (i + 1) & t->merge_ht.mask) {
        uint64_t s = t->merge_ht.slots[i];
        if (!s)
            return -1;
        if (!TOK_SLOT_TAG_EQ(s, h))
            continue;
        uint32_t m = TOK_SLOT_ID(s);
        const char *mt = t->arena + t->merge_off[m];
        if (t->merge_len[m] == n && memcmp(mt, l, nl) == 0 && mt[nl] == ' ' &&
            memcmp(mt + nl + 1, r, nr) == 0)
            return (int32_t)m;
    }
}

/* --- UTF-8 as llama.cpp reads it ---------------------------------------------------------- */

/* llama.cpp's unicode_cpt_from_utf8 (lenient: overlong forms and surrogates pass); returns
 * the code point, or 0xFFFD after consuming one byte of an invalid sequence. */
static uint32_t lax_decode(const unsigned char *s, size_t n, size_t *i)
{
    size_t p = *i;
    unsigned b = s[p];
    size_t need;
    uint32_t c;
    if (b < 0x80) {
        *i = p + 1;
        return b;
    }
    if (!(b & 0x40))
        goto bad;
    if (!(b & 0x20)) {
        need = 1;
        c = b & 0x1F;
    } else if (!(b & 0x10)) {
        need = 2;
        c = b & 0x0F;
    } else if (!(b & 0x08)) {
        need = 3;
        c = b & 0x07;
    } else {
        goto bad;
    }
    if (p + need >= n)
        goto bad;
    for (size_t k = 1; k <= need; k++) {
        if ((s[p + k] & 0xC0) != 0x80)
            goto bad;
        c = (c << 6) | (s[p + k] & 0x3F);
    }
    *i = p + need + 1;
    return c > 0x10FFFF ? 0xFFFD : c; /* llama.cpp throws there; we substitute */
bad:
    *i = p + 1;
    return 0xFFFD;
}

/* Strict UTF-8 check: no overlong forms, no surrogates, nothing past U+10FFFF. */
static int utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned b = s[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        size_t need;
        uint32_t c, min;
        if (b >= 0xC2 && b <= 0xDF) {
            need = 1, c = b & 0x1F, min = 0x80;
        } else if (b >= 0xE0 && b <= 0xEF) {
            need = 2, c = b & 0x0F, min = 0x800;
        } else if (b >= 0xF0 && b <= 0xF4) {
            need = 3, c = b & 0x07, min = 0x10000;
        } else {
            return 0;
        }
        if (i + need >= n)
            return 0;
        for (size_t k = 1; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            c = (c << 6) | (s[i + k] & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
            return 0;
        i += need + 1;
    }
    return 1;
}

/* Builds llama.cpp's view of the text (*lt) and the same with surrogates replaced by U+FFFD
 * for PCRE2 (*mt); both malloc'd, same length *n. */
static void sanitize(const char *in, size_t len, char **lt, char **mt, size_t *n)
{
    const unsigned char *s = (const unsigned char *)in;
    char *a = af_xmalloc(len * 3 + 1), *b = af_xmalloc(len * 3 + 1);
    size_t i = 0, o = 0;
    while (i < len) {
        uint32_t c = lax_decode(s, len, &i);
        size_t k = af_utf8_put(c, a + o);
        if (c >= 0xD800 && c <= 0xDFFF)
            af_utf8_put(0xFFFD, b + o);
        else
            memcpy(b + o, a + o, k);
        o += k;
    }
    *lt = a;
    *mt = b;
    *n = o;
}

/* --- merges ------------------------------------------------------------------------------- */

struct bpe_sym {
    uint32_t off, n; /* into the encoded word */
    int32_t prev, next;
};

struct bpe_bigram {
    int32_t rank, left, right;
    uint32_t size;
};

struct bpe_work {
    char *enc;
    size_t enc_cap;
    struct bpe_sym *sym;
    size_t sym_cap;
    struct bpe_bigram *heap;
    size_t heap_n, heap_cap;
};

static int bigram_before(const struct bpe_bigram *a, const struct bpe_bigram *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(struct bpe_work *w, struct bpe_bigram g)
{
    if (w->heap_n == w->heap_cap) {
        w->heap_cap = w->heap_cap ? w->heap_cap * 2 : 64;
        w->heap = af_xrealloc(w->heap, w->heap_cap * sizeof *w->heap);
    }
    size_t i = w->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(&g, &w->heap[p]))
            break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = g;
}

static struct bpe_bigram heap_pop(struct bpe_work *w)
{
    struct bpe_bigram top = w->heap[0], last = w->heap[--w->heap_n];
    size_t i = 0, n = w->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && bigram_before(&w->heap[c + 1], &w->heap[c]))
            c++;
        if (!bigram_before(&w->heap[c], &last))
            break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n > 0)
        w->heap[i] = last;
    return top;
}

static void add_bigram(const struct tokenizer *t, struct bpe_work *w, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return;
    const struct bpe_sym *a = &w->sym[l], *b = &w->sym[r];
    int32_t rank = tok_merge_rank(t, w->enc + a->off, a->n, w->enc + b->off, b->n);
    if (rank < 0)
        return;
    struct bpe_bigram g = {rank, l, r, a->n + b->n};
    heap_push(w, g);
}

static void emit_symbol(const struct tokenizer *t, const char *s, size_t n, struct tok_ids *out)
{
    int32_t id = tok_lookup(t, s, n);
    if (id >= 0) {
        tok_ids_push(out, id);
        return;
    }
    for (size_t j = 0; j < n; j++) { /* llama.cpp: the tokens of single bytes, where they exist */
        id = tok_lookup(t, s + j, 1);
        if (id >= 0)
            tok_ids_push(out, id);
    }
}

/* One pre-tokenised word (raw bytes) to ids. */
static void bpe_word(const struct tokenizer *t, struct bpe_work *w, const char *word, size_t n,
                     struct tok_ids *out)
{
    if (n * 2 > w->enc_cap) {
        w->enc_cap = n * 2 + 16;
        w->enc = af_xrealloc(w->enc, w->enc_cap);
    }
    if (n > w->sym_cap) {
        w->sym_cap = n + 16;
        w->sym = af_xrealloc(w->sym, w->sym_cap * sizeof *w->sym);
    }
    size_t e = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = tok_byte_to_utf8((uint8_t)word[i], w->enc + e);
        w->sym[i].off = (uint32_t)e;
        w->sym[i].n = (uint32_t)k;
        w->sym[i].prev = (int32_t)i - 1;
        w->sym[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
        e += k;
    }
    if (t->ignore_merges) {
        int32_t id = tok_lookup(t, w->enc, e);
        if (id >= 0) {
            tok_ids_push(out, id);
            return;
        }
    }
    w->heap_n = 0;
    for (size_t i = 1; i < n; i++)
        add_bigram(t, w, (int32_t)i - 1, (int32_t)i);
    while (w->heap_n > 0) {
        struct bpe_bigram g = heap_pop(w);
        struct bpe_sym *l = &w->sym[g.left], *r = &w->sym[g.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != g.size)
            continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            w->sym[r->next].prev = g.left;
        add_bigram(t, w, l->prev, g.left);
        add_bigram(t, w, g.left, l->next);
    }
    for (int32_t i = 0; i >= 0; i = w->sym[i].next)
        if (w->sym[i].n > 0)
            emit_symbol(t, w->enc + w->sym[i].off, w->sym[i].n, out);
}

/* A per-call cache of short words' ids: text repeats its words, and a word's ids depend on
 * nothing else. Local to one tok_encode call, so the tokenizer stays immutable. */
#define WC_MAX_WORD 48

struct wc_slot {
    uint64_t h;
    const char *w;
    uint32_t wl, start, count;
};

struct word_cache {
    struct wc_slot *slots;
    size_t mask, n;
    struct tok_ids ids;
};

static struct wc_slot *wc_find(struct word_cache *c, const char *w, size_t n, uint64_t h)
{
    for (size_t i = (size_t)h & c->mask;; i = (i + 1) & c->mask) {
        struct wc_slot *s = &c->slots[i];
        if (!s->w || (s->h == h && s->wl == n && memcmp(s->w, w, n) == 0))
            return s;
    }
}

static void wc_grow(struct word_cache *c)
{
    size_t cap = c->slots ? (c->mask + 1) * 2 : 1024;
    struct wc_slot *old = c->slots;
    size_t old_cap = c->slots ? c->mask + 1 : 0;
    c->slots = af_xcalloc(cap, sizeof *c->slots);
    c->mask = cap - 1;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].w)
            *wc_find(c, old[i].w, old[i].wl, old[i].h) = old[i];
    free(old);
}

static void word_cached(const struct tokenizer *t, struct bpe_work *w, struct word_cache *c,
                        const char *word, size_t n, struct tok_ids *out)
{
    if (n > WC_MAX_WORD) {
        bpe_word(t, w, word, n, out);
        return;
    }
    if ((c->n + 1) * 2 > (c->slots ? c->mask + 1 : 0))
        wc_grow(c);
    uint64_t h = tok_hash_final(tok_hash_bytes(TOK_HASH_SEED, word, n));
    struct wc_slot *s = wc_find(c, word, n, h);
    if (s->w) {
        for (uint32_t k = 0; k < s->count; k++)
            tok_ids_push(out, c->ids.v[s->start + k]);
        return;
    }
    size_t before = out->n;
    bpe_word(t, w, word, n, out);
    s->h = h;
    s->w = word;
    s->wl = (uint32_t)n;
    s->start = (uint32_t)c->ids.n;
    s->count = (uint32_t)(out->n - before);
    for (size_t k = before; k < out->n; k++)
        tok_ids_push(&c->ids, out->v[k]);
    c->n++;
}

int tok_bpe_encode(const struct tokenizer *t, const char *text, size_t len, struct tok_ids *out)
{
    char *lt = NULL, *mt = NULL;
    const char *ltext = text, *mtext = text;
    size_t n = len;
    if (!utf8_valid((const unsigned char *)text, len)) {
        sanitize(text, len, &lt, &mt, &n);
        ltext = lt;
        mtext = mt;
    }
    struct tok_spans words = {0};
    int rc = tok_pretok_split(t->pretok, mtext, n, &words);
    if (rc == AF_OK) {
        struct bpe_work w = {0};
        struct word_cache c = {0};
        for (size_t i = 0; i < words.n; i++) {
            const char *wd = ltext + words.v[i].off;
            if (words.n > 64)
                word_cached(t, &w, &c, wd, words.v[i].len, out);
            else
                bpe_word(t, &w, wd, words.v[i].len, out);
        }
        free(c.slots);
        free(c.ids.v);
        free(w.enc);
        free(w.sym);
        free(w.heap);
    }
    free(words.v);
    free(lt);
    free(mt);
    return rc;
}
