/*
 * score.c - the scorer dispatcher: maps a benchmark name to its scorer, extracts the answer
 * and hands both to the scorer; owns the af_score lifecycle.
 *
 * The table is constant; nothing here is mutable, so every call is safe from any thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errf.h"
#include "core/xalloc.h"
#include "score/score_int.h"

static const struct {
    const char *name;
    score_fn fn;
    int qa;
} benches[] = {
    {"2wiki", score_qa, 1},
    {"aime24", score_math, 0},
    {"amc23", score_math, 0},
    {"bamboogle", score_qa, 1},
    {"gaia", score_gaia, 0},
    {"gameof24", score_game24, 0},
    {"gpqa", score_mcq, 0},
    {"hotpotqa", score_qa, 1},
    {"medqa", score_mcq, 0},
    {"musique", score_qa, 1},
    /* The practice world (src/world): the same checkers on generated questions. */
    {"world-24", score_game24, 0},
    {"world-calc", score_math, 0},
    {"world-lookup", score_qa, 1},
    {"world-multihop", score_qa, 1},
};

#define N_BENCHES (sizeof benches / sizeof benches[0])

static const char *const bench_names[] = {"2wiki", "aime24",   "amc23", "bamboogle",
                                          "gaia",  "gameof24", "gpqa",  "hotpotqa",
                                          "medqa", "musique",  NULL};

const char *const *af_score_benchmarks(void)
{
    return bench_names;
}

static int find_bench(const char *bench)
{
    for (size_t i = 0; bench && i < N_BENCHES; i++)
        if (strcmp(benches[i].name, bench) == 0)
            return (int)i;
    return -1;
}

int af_score_known(const char *bench)
{
    return find_bench(bench) >= 0;
}

int af_score_reports_f1(const char *bench)
{
    int i = find_bench(bench);
    return i >= 0 && benches[i].qa;
}

char *score_gold_text(const json_t *v)
{
    char tmp[64];
    if (json_is_string(v))
        return af_xstrdup(json_string_value(v));
    if (json_is_integer(v)) {
        snprintf(tmp, sizeof tmp, "%lld", (long long)json_integer_value(v));
        return af_xstrdup(tmp);
    }
    if (json_is_real(v)) {
        snprintf(tmp, sizeof tmp, "%.17g", json_real_value(v));
        return af_xstrdup(tmp);
    }
    return NULL;
}

void af_score_deinit(struct af_score *s)
{
    if (!s)
        return;
    free(s->extracted);
    json_decref(s->details);
    memset(s, 0, sizeof *s);
}

int af_score_item(const char *bench, const json_t *item, const char *answer, struct af_score *out,
                  char *err, size_t errlen)
{
    if (!out)
        return AF_EINVAL;
    memset(out, 0, sizeof *out);
    if (!bench || !json_is_object(item)) {
        af_errf(err, errlen, "af_score_item: bench and an item object are required");
        return AF_EINVAL;
    }
    int i = find_bench(bench);
    if (i < 0) {
        af_errf(err, errlen, "unknown benchmark \"%s\"", bench);
        return AF_ENOTFOUND;
    }
    out->extracted = af_score_extract(answer);
    out->details = json_object();
    int rc = benches[i].fn(item, out->extracted, out, err, errlen);
    if (rc != AF_OK)
        af_score_deinit(out);
    return rc;
}
