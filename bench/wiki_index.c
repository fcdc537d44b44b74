/*
 * bench/wiki_index.c - build and query speed of the FTS5 passage index (tools/wiki_index.h).
 *
 * Generates N deterministic passages (fixed-seed xorshift PRNG; a vocabulary of synthetic
 * words drawn with Zipf-like frequencies, s = 1; ~100 words each) as JSONL in a temporary
 * directory, builds the index (passages/s, optimize included), then runs Q random 2-4-word
 * queries with k = 5 and reports p50 / p99 latency. Query words are drawn uniformly from
 * the vocabulary minus its STOP_RANKS most frequent words (the stand-in for stopwords, which
 * under Zipf s = 1 occur in nearly every passage: an OR query on them scores most of the
 * index). --zipf-queries draws query words from the text's own distribution instead.
 *
 *   build/release/bench/wiki_index [--n 1000000] [--queries 1000] [--zipf-queries]
 *       [--input JSONL] (index this file instead of generating one)
 *       [--db INDEX] (skip the build: query this index) [--keep] (keep the files)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/xalloc.h"
#include "tools/wiki_index.h"

#define VOCAB 50000
#define WORD_MAX 16
#define STOP_RANKS 100

struct rng {
    uint64_t s;
};

static uint64_t rng_next(struct rng *r)
{
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}

static double rng_unit(struct rng *r)
{
    return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

struct vocab {
    char words[VOCAB][WORD_MAX];
    double cdf[VOCAB];
};

static void vocab_init(struct vocab *v, struct rng *r)
{
    static const char *syl[] = {"ka", "lo", "mi", "ne", "ru", "sa", "ti",  "vo", "ze", "ba",
                                "do", "fi", "gu", "he", "jo", "pa", "qui", "xe", "yo", "wu"};
    size_t n_syl = sizeof syl / sizeof syl[0];
    double sum = 0;
    for (size_t i = 0; i < VOCAB; i++) {
        /* A unique base-20 spelling of i, then 0-2 random syllables for variety. */
        char *w = v->words[i];
        size_t len = 0, x = i;
        do {
            const char *s = syl[x % n_syl];
            size_t sl = strlen(s);
            memcpy(w + len, s, sl);
            len += sl;
            x /= n_syl;
        } while (x > 0);
        w[len] = '\0';
        (void)r;
        sum += 1.0 / (double)(i + 1);
        v->cdf[i] = sum;
    }
    for (size_t i = 0; i < VOCAB; i++)
        v->cdf[i] /= sum;
}

static const char *vocab_draw(const struct vocab *v, struct rng *r)
{
    double u = rng_unit(r);
    size_t lo = 0, hi = VOCAB - 1;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (v->cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return v->words[lo];
}

static int write_jsonl(const char *path, size_t n, const struct vocab *v, struct rng *r)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "{\"id\":%zu,\"title\":\"%s %s\",\"text\":\"", i, vocab_draw(v, r),
                vocab_draw(v, r));
        size_t n_words = 80 + (size_t)(rng_next(r) % 41);
        for (size_t j = 0; j < n_words; j++)
            fprintf(f, "%s%s", j ? " " : "", vocab_draw(v, r));
        fputs("\"}\n", f);
    }
    return fclose(f) == 0 ? 0 : -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    size_t n = 1000000, n_queries = 1000;
    int zipf_queries = 0, keep = 0;
    const char *input = NULL, *db_in = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--n") == 0 && i + 1 < argc)
            n = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--queries") == 0 && i + 1 < argc)
            n_queries = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--zipf-queries") == 0)
            zipf_queries = 1;
        else if (strcmp(argv[i], "--input") == 0 && i + 1 < argc)
            input = argv[++i];
        else if (strcmp(argv[i], "--db") == 0 && i + 1 < argc)
            db_in = argv[++i];
        else if (strcmp(argv[i], "--keep") == 0)
            keep = 1;
        else {
            fprintf(stderr,
                    "usage: %s [--n N] [--queries Q] [--zipf-queries] [--input JSONL] [--db INDEX] "
                    "[--keep]\n",
                    argv[0]);
            return 2;
        }
    }
    if (n == 0 || n_queries == 0)
        return 2;
    char dir[] = "/tmp/af_bench_wiki_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char in_path[4096], db_path[4096];
    snprintf(in_path, sizeof in_path, "%s", input ? input : "");
    if (!input)
        snprintf(in_path, sizeof in_path, "%s/passages.jsonl", dir);
    snprintf(db_path, sizeof db_path, "%s/index.db", dir);
    if (db_in)
        snprintf(db_path, sizeof db_path, "%s", db_in);
    struct rng r = {0x9E3779B97F4A7C15ull};
    struct vocab *v = af_xmalloc(sizeof *v);
    vocab_init(v, &r);
    double t0 = af_clock_ms();
    if (!input && !db_in) {
        if (write_jsonl(in_path, n, v, &r) != 0) {
            perror(in_path);
            return 1;
        }
        printf("generated %zu passages in %.1f s\n", n, (af_clock_ms() - t0) / 1000.0);
    }
    /* Queries draw from their own stream, so --input gives the same queries as a fresh run. */
    r.s = 0x2545F4914F6CDD1Dull;

    char err[1024];
    if (!db_in) {
        struct wiki_build_stats st;
        if (wiki_index_build(in_path, db_path, NULL, &st, err, sizeof err) != 0) {
            fprintf(stderr, "build: %s\n", err);
            return 1;
        }
        struct stat sb;
        double db_mb = stat(db_path, &sb) == 0 ? (double)sb.st_size / 1e6 : -1.0;
        printf("build: %zu passages, %.1f MB input, %.1f MB index, %.1f s, %.0f passages/s\n",
               st.n_passages, (double)st.bytes_total / 1e6, db_mb, st.build_ms / 1000.0,
               (double)st.n_passages / (st.build_ms / 1000.0));
        printf("build phases: load %.1f s, commit+optimize+terms %.1f s, common %.1f s, "
               "gather %.1f s\n",
               st.load_ms / 1000.0, st.finish_ms / 1000.0, st.common_ms / 1000.0,
               st.gather_ms / 1000.0);
    }

    struct wiki_index *ix = NULL;
    if (wiki_index_open(db_path, 0, &ix, err, sizeof err) != 0) {
        fprintf(stderr, "open: %s\n", err);
        return 1;
    }
    double *lat = af_xmalloc(n_queries * sizeof *lat);
    size_t n_hits = 0;
    for (size_t i = 0; i < n_queries; i++) {
        char q[4 * WORD_MAX + 8];
        size_t nw = 2 + (size_t)(rng_next(&r) % 3), len = 0;
        q[0] = '\0';
        for (size_t j = 0; j < nw; j++)
            len += (size_t)snprintf(
                q + len, sizeof q - len, "%s%s", j ? " " : "",
                zipf_queries ? vocab_draw(v, &r)
                             : v->words[STOP_RANKS + rng_next(&r) % (VOCAB - STOP_RANKS)]);
        json_t *hits = NULL;
        double q0 = af_clock_ms();
        if (wiki_index_query(ix, q, 5, &hits, err, sizeof err) != 0) {
            fprintf(stderr, "query: %s\n", err);
            return 1;
        }
        lat[i] = af_clock_ms() - q0;
        n_hits += json_array_size(hits);
        json_decref(hits);
    }
    qsort(lat, n_queries, sizeof *lat, cmp_double);
    printf("query: %zu queries, k=5, %.2f hits/query, p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
           n_queries, (double)n_hits / (double)n_queries, lat[n_queries / 2],
           lat[(size_t)((double)n_queries * 0.99)], lat[n_queries - 1]);
    wiki_index_close(ix);
    if (keep) {
        printf("kept %s and %s\n", in_path, db_path);
    } else {
        if (!input && !db_in)
            unlink(in_path);
        if (!db_in)
            unlink(db_path);
        rmdir(dir);
    }
    free(lat);
    free(v);
    return 0;
}
