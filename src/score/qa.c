/*
 * qa.c - the open-domain QA scorer (bamboogle, 2wiki, hotpotqa, musique): SQuAD-style
 * normalisation, exact match and token F1, the maximum over a string or list of golds. A
 * date or a number written another way (norm.c) is an exact match.
 *
 * correct is the exact match; f1 is the best token F1. No state; safe from any thread.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/errf.h"
#include "core/xalloc.h"
#include "score/score_int.h"

static int is_article(const char *w, size_t n)
{
    return (n == 1 && w[0] == 'a') || (n == 2 && memcmp(w, "an", 2) == 0) ||
           (n == 3 && memcmp(w, "the", 3) == 0);
}

char *score_norm_squad(const char *s)
{
    struct af_buf low, out;
    af_buf_init(&low, AF_BUF_NOLIMIT);
    af_buf_init(&out, AF_BUF_NOLIMIT);
    for (const char *p = s ? s : ""; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c < 0x80 && ispunct(c))
            continue;
        (void)af_buf_putc(&low, (char)(c < 0x80 ? tolower(c) : c));
    }
    const char *p = af_buf_str(&low);
    while (*p) {
        while (*p && isspace((unsigned char)*p))
            p++;
        const char *w = p;
        while (*p && !isspace((unsigned char)*p))
            p++;
        size_t n = (size_t)(p - w);
        if (n == 0 || is_article(w, n))
            continue;
        if (out.len > 0)
            (void)af_buf_putc(&out, ' ');
        (void)af_buf_append(&out, w, n);
    }
    af_buf_deinit(&low);
    return af_buf_detach(&out);
}

/* Splits a normalised string (single spaces) in place; returns the token count. The caller
 * frees *toks (the tokens point into s). */
static size_t split_tokens(char *s, char ***toks)
{
    size_t n = 0, cap = 8;
    char **t = af_xmalloc(cap * sizeof *t);
    char *p = s;
    while (*p) {
        if (n == cap) {
            cap *= 2;
            t = af_xrealloc(t, cap * sizeof *t);
        }
        t[n++] = p;
        char *sp = strchr(p, ' ');
        if (!sp)
            break;
        *sp = '\0';
        p = sp + 1;
    }
    *toks = t;
    return n;
}

/* Token F1 between two normalised strings, with multiset overlap as in SQuAD. */
static double token_f1(const char *pred, const char *gold)
{
    char *ps = af_xstrdup(pred), *gs = af_xstrdup(gold);
    char **pt, **gt;
    size_t np = split_tokens(ps, &pt), ng = split_tokens(gs, &gt);
    unsigned char *used = af_xcalloc(np ? np : 1, 1);
    size_t same = 0;
    for (size_t i = 0; i < ng; i++)
        for (size_t j = 0; j < np; j++)
            if (!used[j] && strcmp(gt[i], pt[j]) == 0) {
                used[j] = 1;
                same++;
                break;
            }
    double f1 = 0.0;
    if (same > 0) {
        double prec = (double)same / (double)np, rec = (double)same / (double)ng;
        f1 = 2.0 * prec * rec / (prec + rec);
    }
    free(used);
    free(pt);
    free(gt);
    free(ps);
    free(gs);
    return f1;
}

/* Scores pred (raw, and normalised as npred) against one gold, keeping the best EM, then F1,
 * in *out. The same date or number in another form counts as an exact match. */
static void score_one(const char *pred, const char *npred, const char *gold, struct af_score *out,
                      json_t **best)
{
    char *ngold = score_norm_squad(gold);
    int em = strcmp(npred, ngold) == 0;
    double f1 = token_f1(npred, ngold);
    if (!em && (score_same_date(pred, gold) || score_same_quantity(pred, gold))) {
        em = 1;
        f1 = 1.0;
    }
    if (!*best || em > out->correct || (em == out->correct && f1 > out->f1)) {
        json_decref(*best);
        *best = json_string(gold);
    }
    out->correct = em > out->correct ? em : out->correct;
    out->f1 = f1 > out->f1 ? f1 : out->f1;
    free(ngold);
}

int score_qa(const json_t *item, const char *pred, struct af_score *out, char *err, size_t errlen)
{
    const json_t *ans = json_object_get(item, "answer");
    size_t n = json_is_array(ans) ? json_array_size(ans) : 1;
    char *npred = score_norm_squad(pred);
    json_t *best = NULL;
    size_t n_gold = 0;
    for (size_t i = 0; i < n; i++) {
        char *g = score_gold_text(json_is_array(ans) ? json_array_get(ans, i) : ans);
        if (!g)
            continue;
        score_one(pred, npred, g, out, &best);
        n_gold++;
        free(g);
    }
    free(npred);
    if (n_gold == 0) {
        json_decref(best);
        af_errf(err, errlen, "item field \"answer\": expected a string or a list of strings");
        return AF_EPARSE;
    }
    json_object_set_new(out->details, "gold", best);
    json_object_set_new(out->details, "f1", json_real(out->f1));
    return AF_OK;
}
