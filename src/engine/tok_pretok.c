/*
 * tok_pretok.c - the pre-tokenisers of byte-level BPE vocabularies, as PCRE2 regexes.
 *
 * llama.cpp (llama-vocab.cpp, llm_tokenizer_bpe) gives each tokenizer.ggml.pre a list of
 * regexes applied in turn: each one splits every piece left by the previous one into its
 * matches and the gaps between them. We compile the same regexes with PCRE2_UTF | PCRE2_UCP,
 * once per tokenizer; matching allocates its match data per call, so a tokenizer can be used
 * from many threads at once.
 *
 * \s is spelt out as llama.cpp's whitespace set (Unicode White_Space), because PCRE2's UCP \s
 * also takes U+180E. The subject is always valid UTF-8 (tok_bpe.c sanitises it first).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdlib.h>
#include <string.h>

#include "core/errf.h"
#include "core/xalloc.h"
#include "engine/tok_int.h"

#define TOK_MAX_REGEX 4

/* llama.cpp's unicode_set_whitespace, for use inside a character class. */
#define WS                                                                                         \
    "\\t\\n\\x0b\\f\\r "                                                                           \
    "\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"
#define NOT_WS_L_N "[^" WS "\\p{L}\\p{N}]"
#define CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define WS_TAIL "|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+"

/* LLAMA_VOCAB_PRE_TYPE_QWEN2 */
static const char RE_QWEN2[] = CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
                                            "| ?" NOT_WS_L_N "+[\\r\\n]*" WS_TAIL;
/* LLAMA_VOCAB_PRE_TYPE_LLAMA3 */
static const char RE_LLAMA3[] = CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
                                             "| ?" NOT_WS_L_N "+[\\r\\n]*" WS_TAIL;
/* GPT-2 */
static const char RE_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?" NOT_WS_L_N "+|[" WS "]+(?![^" WS "])";

struct pretok_def {
    const char *canon;
    const char *names[8];
    const char *regex[TOK_MAX_REGEX];
};

static const struct pretok_def PRETOK_DEFS[] = {
    {"qwen2", {"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez", NULL}, {RE_QWEN2}},
    {"llama-bpe",
     {"llama-bpe", "llama3", "llama-v3", "falcon3", "pixtral", "dbrx", "smaug-bpe", NULL},
     {RE_LLAMA3}},
    {"gpt2", {"gpt2", "gpt-2", "phi-2", "mpt", "olmo", "jina-es", "jina-de", NULL}, {RE_GPT2}},
    {"starcoder",
     {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", NULL},
     {"\\p{N}", RE_GPT2}},
    {"default",
     {"default", "", NULL},
     {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}},
};

struct tok_pretok {
    pcre2_code *re[TOK_MAX_REGEX];
    size_t n_re;
};

static const struct pretok_def *pretok_find(const char *pre)
{
    for (size_t i = 0; i < sizeof PRETOK_DEFS / sizeof PRETOK_DEFS[0]; i++)
        for (size_t j = 0; PRETOK_DEFS[i].names[j]; j++)
            if (strcmp(PRETOK_DEFS[i].names[j], pre) == 0)
                return &PRETOK_DEFS[i];
    return NULL;
}

void tok_pretok_free(struct tok_pretok *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n_re; i++)
        pcre2_code_free(p->re[i]);
    free(p);
}

int tok_pretok_new(const char *pre, struct tok_pretok **out, const char **name, char *err,
                   size_t errlen)
{
    *out = NULL;
    const struct pretok_def *d = pretok_find(pre ? pre : "");
    if (!d) {
        af_errf(err, errlen, "tokenizer.ggml.pre: unknown pre-tokenizer '%s'", pre);
        return AF_ENOTFOUND;
    }
    struct tok_pretok *p = af_xcalloc(1, sizeof *p);
    for (size_t i = 0; i < TOK_MAX_REGEX && d->regex[i]; i++) {
        int ec = 0;
        PCRE2_SIZE eo = 0;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)d->regex[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
        if (!re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(ec, msg, sizeof msg);
            af_errf(err, errlen, "pre-tokenizer '%s': regex %zu at %zu: %s", d->canon, i,
                    (size_t)eo, (const char *)msg);
            tok_pretok_free(p);
            return AF_EINTERNAL;
        }
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* the interpreter is the fallback */
        p->re[p->n_re++] = re;
    }
    *name = d->canon;
    *out = p;
    return AF_OK;
}

static void spans_push(struct tok_spans *s, size_t off, size_t len)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->v = af_xrealloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n].off = off;
    s->v[s->n].len = len;
    s->n++;
}

static size_t utf8_next(const char *s, size_t pos, size_t len)
{
    pos++;
    while (pos < len && ((unsigned char)s[pos] & 0xC0) == 0x80)
        pos++;
    return pos;
}

/* Splits one span by one regex, appending the matches and the gaps to out. */
static int split_span(const pcre2_code *re, pcre2_match_data *md, const char *match,
                      struct tok_span sp, struct tok_spans *out)
{
    PCRE2_SPTR subj = (PCRE2_SPTR)(match + sp.off);
    size_t pos = 0, last = 0;
    while (pos < sp.len) {
        int rc = pcre2_match(re, subj, sp.len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(re, subj, sp.len, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0)
            return AF_EINTERNAL;
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) { /* empty match: none of our regexes makes one, but stay safe */
            pos = utf8_next(match + sp.off, ms, sp.len);
            continue;
        }
        if (ms > last)
            spans_push(out, sp.off + last, ms - last);
        spans_push(out, sp.off + ms, me - ms);
        last = pos = me;
    }
    if (last < sp.len)
        spans_push(out, sp.off + last, sp.len - last);
    return AF_OK;
}

int tok_pretok_split(const struct tok_pretok *p, const char *match, size_t len,
                     struct tok_spans *out)
{
    out->n = 0;
    if (len == 0)
        return AF_OK;
    spans_push(out, 0, len);
    struct tok_spans tmp = {0};
    int rc = AF_OK;
    for (size_t r = 0; r < p->n_re && rc == AF_OK; r++) {
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(p->re[r], NULL);
        if (!md)
            return AF_ENOMEM;
        tmp.n = 0;
        for (size_t i = 0; i < out->n && rc == AF_OK; i++)
            rc = split_span(p->re[r], md, match, out->v[i], &tmp);
        pcre2_match_data_free(md);
        struct tok_spans sw = *out;
        *out = tmp;
        tmp = sw;
    }
    free(tmp.v);
    return rc;
}
