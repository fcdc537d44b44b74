/*
 * tok_int.h - private to the tokenizer (tok_vocab.c, tok_bpe.c, tok_spm.c, tok_pretok.c).
 *
 * The vocabulary lives in one arena: token i's text is arena[text_off[i] .. + text_len[i]],
 * NUL-terminated. Lookups by text and by merge pair go through open-addressing hash tables
 * (tok_hash) that store id + 1 (0 = empty). Everything here is immutable after loading.
 */
#ifndef AF_ENGINE_TOK_INT_H
#define AF_ENGINE_TOK_INT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/tokenizer.h"

enum tok_kind { TOK_KIND_BPE = 1, TOK_KIND_SPM = 2 };

/* Per-token flags beside the type. */
#define TOK_FLAG_EOG 0x01u

/* Largest input tok_encode accepts (bytes). */
#define TOK_MAX_INPUT ((size_t)1 << 30)

/* An open-addressing table of ids keyed by strings held elsewhere. A slot holds the key's
 * upper 32 hash bits << 32 | (id + 1); 0 = empty. */
struct tok_hash {
    uint64_t *slots;
    size_t mask; /* n_slots - 1 (a power of two) */
};

struct tok_pretok;

struct tokenizer {
    enum tok_kind kind;
    size_t n_vocab;
    char *arena; /* token texts, then merge texts, each NUL-terminated */
    size_t arena_len, arena_cap;
    uint64_t *text_off;
    uint32_t *text_len;
    float *scores;
    uint8_t *types; /* enum tok_type, after llama.cpp's overrides */
    uint8_t *flags; /* TOK_FLAG_* */
    struct tok_hash tok_ht;
    size_t max_token_len;

    size_t n_merges;
    uint64_t *merge_off; /* "left right" in the arena */
    uint32_t *merge_len;
    struct tok_hash merge_ht;
    size_t max_merge_len;

    /* token to piece (special = 1) */
    char *pieces;
    uint64_t *piece_off;
    uint32_t *piece_len;

    int32_t bos, eos, eot, eom, unk, pad;
    int add_bos, add_eos, add_space_prefix, ignore_merges;
    /* SPM: no token has U+2581 after another character, so merges never cross the start of a
     * "▁" run and the text may be merged run by run (tok_spm.c) */
    int spm_chunkable;
    const char *model_name; /* static */
    const char *pre_name;   /* static */
    struct tok_pretok *pretok;

    int32_t *specials; /* control / user-defined / unknown ids, longest text first */
    size_t n_specials;
    int32_t byte_tok[256]; /* SPM: <0xNN>; BPE: the token of the byte's GPT-2 character */
    char *chat_template;   /* owned, or NULL */
};

/* A growable array of ids. */
struct tok_ids {
    int32_t *v;
    size_t n, cap;
};
void tok_ids_push(struct tok_ids *a, int32_t id);

/* --- tok_vocab.c -------------------------------------------------------------------------- */
uint64_t tok_hash_bytes(uint64_t h, const void *p, size_t n);
/* The final mix applied to tok_hash_bytes' result before indexing. */
static inline uint64_t tok_hash_final(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}
#define TOK_SLOT(h, id) (((h)&0xffffffff00000000ull) | ((uint64_t)(id) + 1))
#define TOK_SLOT_ID(s) ((uint32_t)((s)&0xffffffffu) - 1)
#define TOK_SLOT_TAG_EQ(s, h) ((((s) ^ (h)) >> 32) == 0)
#define TOK_HASH_SEED 1469598103934665603ull
/* The id of the token with exactly these bytes, or -1. */
int32_t tok_lookup(const struct tokenizer *t, const char *s, size_t n);
static inline const char *tok_text_at(const struct tokenizer *t, int32_t id)
{
    return t->arena + t->text_off[id];
}

/* --- tok_bpe.c ------------------------------------------------------------------------------ */
/* The UTF-8 of the GPT-2 character for byte b (1 or 2 bytes) into out; returns its length. */
size_t tok_byte_to_utf8(uint8_t b, char out[2]);
/* The byte for GPT-2 character cpt, or -1. */
int tok_cpt_to_byte(uint32_t cpt);
/* The rank of merge (left, right), or -1. */
int32_t tok_merge_rank(const struct tokenizer *t, const char *l, size_t nl, const char *r,
                       size_t nr);
/* Byte-level BPE of one text fragment (no special tokens in it): pre-tokenise, byte-encode,
 * merge, append ids. Returns AF_OK or AF_EINTERNAL (regex failure). */
int tok_bpe_encode(const struct tokenizer *t, const char *text, size_t len, struct tok_ids *out);

/* --- tok_spm.c ------------------------------------------------------------------------------ */
/* SentencePiece merges of one fragment; text is already space-escaped ("▁"). */
void tok_spm_encode(const struct tokenizer *t, const char *text, size_t len, struct tok_ids *out);

/* --- tok_pretok.c ----------------------------------------------------------------------------- */
/* Compiles the regexes of pre-tokeniser `pre` ("qwen2", "llama-bpe", "default", ...). *name gets
 * the canonical static name. AF_ENOTFOUND for an unknown name. */
int tok_pretok_new(const char *pre, struct tok_pretok **out, const char **name, char *err,
                   size_t errlen);
void tok_pretok_free(struct tok_pretok *p);
/* One byte span [off, off + len) of the text. */
struct tok_span {
    size_t off, len;
};
struct tok_spans {
    struct tok_span *v;
    size_t n, cap;
};
/* Splits valid UTF-8 text (match: the same bytes with surrogates replaced, used for matching)
 * into words, replacing *out's content. Returns AF_OK or AF_EINTERNAL. */
int tok_pretok_split(const struct tok_pretok *p, const char *match, size_t len,
                     struct tok_spans *out);

#endif
