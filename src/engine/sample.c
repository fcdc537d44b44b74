/*
 * sample.c - token sampling (see sample.h). Top-p and top-k avoid sorting the whole
 * vocabulary: the best candidates are selected first (quickselect) and only they are sorted;
 * the full sort is the fallback when they do not reach the top-p mass. Without a filter (the
 * trainer's rollouts) the draw scans the sums of blocks of exps, then one block, not the whole
 * vocabulary.
 */
#include "engine/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "engine/quant.h"

#define SELECT_FIRST 1024
#define SUM_BLOCK 1024 /* exps whose sum the draw scans as one */

struct cand {
    int32_t id;
    float p;
};

struct sampler {
    struct sampler_params p;
    int64_t n_vocab;
    int32_t *counts; /* occurrences of each token so far */
    int32_t *seen;   /* the tokens with a count, in order of their first */
    int64_t n_seen;
    struct cand *cands;
    struct cand *cands_id; /* a large gather's candidates in id order, for sort_all */
    int sorted;            /* cands sorted this draw */
    float *e;              /* exp((logit - best) / t) of every token */
    double *bsum;          /* the sums of e by blocks of SUM_BLOCK */
    float *bmax;           /* the largest logit of each block */
    float *bexp;           /* in a filtered draw, the largest exp of each block */
    struct rng rng;
};

struct sampler_params sampler_default_params(void)
{
    struct sampler_params p = {0};
    p.top_p = 1.0f;
    return p;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void rng_seed(struct rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t rng_next(struct rng *r)
{
    uint64_t *s = r->s;
    const uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double rng_uniform(struct rng *r)
{
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

struct sampler *sampler_new(const struct sampler_params *p, int64_t n_vocab)
{
    struct sampler *s = af_xcalloc(1, sizeof *s);
    s->p = *p;
    s->n_vocab = n_vocab;
    s->counts = af_xcalloc((size_t)n_vocab, sizeof *s->counts);
    s->seen = af_xmalloc((size_t)n_vocab * sizeof *s->seen);
    s->cands = af_xmalloc((size_t)n_vocab * sizeof *s->cands);
    s->cands_id = af_xmalloc((size_t)n_vocab * sizeof *s->cands_id);
    s->e = af_xmalloc((size_t)n_vocab * sizeof *s->e);
    const size_t nblk = (size_t)((n_vocab + SUM_BLOCK - 1) / SUM_BLOCK + 1);
    s->bsum = af_xmalloc(nblk * sizeof *s->bsum);
    s->bmax = af_xmalloc(nblk * sizeof *s->bmax);
    s->bexp = af_xmalloc(nblk * sizeof *s->bexp);
    rng_seed(&s->rng, p->seed);
    return s;
}

void sampler_free(struct sampler *s)
{
    if (!s)
        return;
    free(s->counts);
    free(s->seen);
    free(s->cands);
    free(s->cands_id);
    free(s->e);
    free(s->bsum);
    free(s->bmax);
    free(s->bexp);
    free(s);
}

void sampler_accept(struct sampler *s, int32_t id)
{
    if (id >= 0 && id < s->n_vocab)
        if (s->counts[id]++ == 0)
            s->seen[s->n_seen++] = id;
}

static int cand_desc(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->p != y->p)
        return x->p > y->p ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Moves the k most probable candidates to the front (unordered), expected O(n). */
static void select_top(struct cand *c, int64_t n, int64_t k)
{
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        float pivot = c[lo + (hi - lo) / 2].p;
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (c[i].p > pivot)
                i++;
            while (c[j].p < pivot)
                j--;
            if (i <= j) {
                struct cand t = c[i];
                c[i++] = c[j];
                c[j--] = t;
            }
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            break;
    }
}

#define SORT_RADIX_MIN 4096 /* candidates from which sort_all sorts by radix */

/* s->cands[0..n) sorted as cand_desc sorts: by p down, ties by id up. Many of them (a flat
 * softmax, where top-p keeps most of the vocabulary: 15 ms with qsort over 150k) by a stable
 * radix sort of p's bits, 10 at a time, from their copy in id order (gather): an e is in [0, 1],
 * so 0x3F800000 less its bits is a 30-bit key that grows as p falls. Three passes: id copy to
 * cands, cands to the copy, the copy to cands. Once a draw: the sorted set stays sorted. */
static void sort_all(struct sampler *s, int64_t n)
{
    if (s->sorted)
        return;
    s->sorted = 1;
    if (n < SORT_RADIX_MIN) {
        qsort(s->cands, (size_t)n, sizeof *s->cands, cand_desc);
        return;
    }
    for (int pass = 0; pass < 3; pass++) {
        const int shift = 10 * pass;
        const struct cand *from = pass == 1 ? s->cands : s->cands_id;
        struct cand *to = pass == 1 ? s->cands_id : s->cands;
        int64_t at[1024] = {0};
        for (int64_t i = 0; i < n; i++) {
            uint32_t b;
            memcpy(&b, &from[i].p, sizeof b);
            at[((0x3F800000u - b) >> shift) & 1023]++;
        }
        for (int64_t d = 0, pos = 0; d < 1024; d++) {
            const int64_t k = at[d];
            at[d] = pos;
            pos += k;
        }
        for (int64_t i = 0; i < n; i++) {
            uint32_t b;
            memcpy(&b, &from[i].p, sizeof b);
            to[at[((0x3F800000u - b) >> shift) & 1023]++] = from[i];
        }
    }
}

/* Sorts the best candidates so that a prefix holds the top-k / top-p set; returns its size. */
static int64_t truncate_set(struct sampler *s, int64_t n, double sum)
{
    const struct sampler_params *p = &s->p;
    struct cand *c = s->cands;
    int64_t keep = n;
    if (p->top_k > 0 && p->top_k < keep)
        keep = p->top_k;
    int64_t first = keep < SELECT_FIRST ? keep : SELECT_FIRST;
    if (p->top_p >= 1.0f && keep == n)
        return n;
    const double want = (double)p->top_p * sum; /* the weights are not normalised */
    /* Every weight is at most 1 (the best's), so a head of `first` under the top-p mass is
     * certain from the sum: then straight to the whole sort (a flat softmax). */
    if (p->top_p < 1.0f && want > (double)first && first < keep)
        first = 0;
    if (first > 0) {
        select_top(c, n, first);
        qsort(c, (size_t)first, sizeof *c, cand_desc);
    }
    if (p->top_p < 1.0f) {
        double cum = 0;
        for (int64_t i = 0; i < first; i++) {
            cum += (double)c[i].p;
            if (cum >= want)
                return i + 1 < keep ? i + 1 : keep;
        }
        if (first < keep) { /* the selected head was not enough: sort everything */
            sort_all(s, n);
            cum = 0;
            for (int64_t i = 0; i < keep; i++) {
                cum += (double)c[i].p;
                if (cum >= want)
                    return i + 1;
            }
        }
    }
    if (keep > first)
        sort_all(s, n);
    return keep;
}

/* The first index of v in x[0..n) (n - 1 if none): chunks of 256 tested without an early exit,
 * which -O2 vectorises; a byte-by-byte scan of 150k logits was a third of a greedy draw. */
static int64_t first_equal(const float *x, int64_t n, float v)
{
    int64_t c0 = 0;
    for (; c0 + 256 <= n; c0 += 256) {
        int hit = 0;
        for (int k = 0; k < 256; k++)
            hit |= x[c0 + k] == v;
        if (hit)
            break;
    }
    for (int64_t i = c0; i < n; i++)
        if (x[i] == v)
            return i;
    return n - 1;
}

/* The exps of the logits less the best, over t, into s->e, with their block sums; returns the
 * total, the blocks' sums added in order. One pass: a separate chain of adds over 150k exps
 * was a fifth of a greedy draw. */
static double exps(struct sampler *s, const float *logits, float best, float t)
{
    const quant_exp_sum_fn exp_sum = quant_exp_sum_kernel();
    double total = 0;
    for (int64_t o = 0, j = 0; o < s->n_vocab; o += SUM_BLOCK, j++) {
        const int64_t len = s->n_vocab - o < SUM_BLOCK ? s->n_vocab - o : SUM_BLOCK;
        s->bsum[j] = exp_sum(len, logits + o, best, t, s->e + o);
        total += s->bsum[j];
    }
    return total;
}

/* The first token whose running sum of exps passes u = uniform x total, without a filter: the
 * blocks' running sum finds the block (the same adds as the total, so u, below the total, is
 * passed by the last block at the latest), then that block's exps one by one. Where rounding
 * leaves u past the block's own running sum, its last token of nonzero weight. */
static int32_t draw_unfiltered(struct sampler *s, double total, int64_t best)
{
    const double u = rng_uniform(&s->rng) * total;
    const int64_t nblk = (s->n_vocab + SUM_BLOCK - 1) / SUM_BLOCK;
    double run = 0;
    int64_t j = 0;
    for (; j < nblk - 1 && !(u < run + s->bsum[j]); j++)
        run += s->bsum[j];
    const int64_t o = j * SUM_BLOCK, end = o + SUM_BLOCK < s->n_vocab ? o + SUM_BLOCK : s->n_vocab;
    int64_t last = best;
    for (int64_t i = o; i < end; i++) {
        if (s->e[i] > 0)
            last = i;
        run += (double)s->e[i];
        if (u < run)
            return (int32_t)i;
    }
    return (int32_t)last;
}

/* The k (<= SELECT_FIRST) best of cand_desc's order into s->cands, sorted: a min-heap of them
 * over the exps in id order (a later token with an equal weight ranks below, so only a larger
 * weight enters), skipping the blocks whose largest exp is below the heap's least. */
static int64_t top_k_heap(struct sampler *s, int64_t k)
{
    struct cand *h = s->cands;
    int64_t m = 0;
    const int64_t n = s->n_vocab;
    for (int64_t o = 0, j = 0; o < n; o += SUM_BLOCK, j++) {
        if (m == k && s->bexp[j] <= h[0].p)
            continue;
        const int64_t end = o + SUM_BLOCK < n ? o + SUM_BLOCK : n;
        for (int64_t i = o; i < end; i++) {
            const float e = s->e[i];
            if (m == k && e <= h[0].p)
                continue;
            int64_t at;
            if (m < k) { /* sift up from the end */
                at = m++;
                while (at > 0 && cand_desc(&h[(at - 1) / 2], &(struct cand){(int32_t)i, e}) < 0) {
                    h[at] = h[(at - 1) / 2];
                    at = (at - 1) / 2;
                }
            } else { /* replace the least, sift down */
                at = 0;
                for (;;) {
                    int64_t c = 2 * at + 1;
                    if (c >= m)
                        break;
                    if (c + 1 < m && cand_desc(&h[c + 1], &h[c]) > 0)
                        c++;
                    if (cand_desc(&h[c], &(struct cand){(int32_t)i, e}) <= 0)
                        break;
                    h[at] = h[c];
                    at = c;
                }
            }
            h[at] = (struct cand){(int32_t)i, e};
        }
    }
    qsort(h, (size_t)m, sizeof *h, cand_desc);
    s->sorted = 1;
    return m;
}

/* Into s->cands, the tokens that the filters can keep: those with e >= tau, for the largest tau
 * of a few whose set holds the top-k or more than the top-p mass (with min-p alone: its floor,
 * as the best's e is 1). Every token left out ranks below every token taken, so the filters'
 * sorted prefix is the same over these as over the whole vocabulary, and the select and sort
 * see a few hundred tokens, not 150k (1 ms a top-p draw). Returns how many. */
static int64_t gather(struct sampler *s, double sum)
{
    const struct sampler_params *p = &s->p;
    const int64_t n = s->n_vocab;
    const int64_t k = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    if (k <= SELECT_FIRST)
        return top_k_heap(s, k);
    const int min_p_alone = k == n && p->top_p >= 1.0f;
    /* a margin over the rounding of the sums' different orders */
    const double want = p->top_p < 1.0f ? (double)p->top_p * sum * (1 + 1e-9) : (double)INFINITY;
    static const float taus[] = {0x1p-8f, 0x1p-16f, 0x1p-32f, 0.0f};
    for (size_t ti = 0;; ti++) {
        /* min-p over 1 keeps the best alone: the tokens at 1, of which it is the first */
        const float tau = min_p_alone ? (p->min_p < 1.0f ? p->min_p : 1.0f) : taus[ti];
        int64_t m = 0;
        double mass = 0;
        for (int64_t o = 0, j = 0; o < n; o += SUM_BLOCK, j++) {
            /* a block whose largest exp is below tau has none (exp is monotonic): most
             * blocks, where a few tokens hold the mass */
            if (s->bexp[j] < tau)
                continue;
            const int64_t end = o + SUM_BLOCK < n ? o + SUM_BLOCK : n;
            for (int64_t i = o; i < end; i++)
                if (s->e[i] >= tau) {
                    s->cands[m].id = (int32_t)i;
                    s->cands[m++].p = s->e[i];
                    mass += (double)s->e[i];
                }
        }
        if (min_p_alone || tau == 0.0f || m >= k || mass >= want) {
            if (m >= SORT_RADIX_MIN)
                memcpy(s->cands_id, s->cands, (size_t)m * sizeof *s->cands);
            return m;
        }
    }
}

int32_t sampler_sample(struct sampler *s, float *logits, float *logprob)
{
    const struct sampler_params *p = &s->p;
    const int64_t n = s->n_vocab;
    if (p->frequency_penalty != 0 || p->presence_penalty != 0)
        for (int64_t k = 0; k < s->n_seen; k++) { /* not a pass over the vocabulary */
            const int32_t i = s->seen[k];
            logits[i] -= (float)s->counts[i] * p->frequency_penalty + p->presence_penalty;
        }
    const float t = p->temperature > 0 ? p->temperature : 1.0f;
    /* The first index of the largest logit (the logits are finite: the engine checks them),
     * from the blocks' largest: the first block that holds it is searched. */
    const quant_scale_max_fn scale_max = quant_scale_max_kernel();
    float top = -INFINITY;
    int64_t top_o = 0;
    for (int64_t o = 0, j = 0; o < n; o += SUM_BLOCK, j++) {
        s->bmax[j] = scale_max(n - o < SUM_BLOCK ? n - o : SUM_BLOCK, logits + o, 1.0f);
        if (s->bmax[j] > top) {
            top = s->bmax[j];
            top_o = o;
        }
    }
    const int64_t best =
        top_o + first_equal(logits + top_o, n - top_o < SUM_BLOCK ? n - top_o : SUM_BLOCK, top);
    const double sum = exps(s, logits, logits[best], t);
    int32_t pick = (int32_t)best;
    const int filtered = (p->top_k > 0 && p->top_k < n) || p->top_p < 1.0f || p->min_p > 0;
    if (p->temperature > 0 && !filtered) {
        pick = draw_unfiltered(s, sum, best);
    } else if (p->temperature > 0) {
        s->sorted = 0;
        /* each block's largest exp: the exp of its largest logit, as the kernel computes it
         * (exp is monotonic), which lets the candidates' passes skip the block */
        for (int64_t o = 0, j = 0; o < n; o += SUM_BLOCK, j++)
            s->bexp[j] = quant_expf((s->bmax[j] - logits[best]) / t);
        const int64_t g = gather(s, sum);
        int64_t m = truncate_set(s, g, sum);
        struct cand *c = s->cands;
        if (p->min_p > 0) {
            float floor_p = p->min_p * c[0].p; /* c[0] is the best after truncate_set sorts */
            if (m == g) {
                sort_all(s, g);
                floor_p = p->min_p * c[0].p;
            }
            int64_t k = 1;
            while (k < m && c[k].p >= floor_p)
                k++;
            m = k;
        }
        double mass = 0;
        for (int64_t i = 0; i < m; i++)
            mass += (double)c[i].p;
        double u = rng_uniform(&s->rng) * mass, acc = 0;
        pick = c[m - 1].id;
        for (int64_t i = 0; i < m; i++) {
            acc += (double)c[i].p;
            if (u < acc) {
                pick = c[i].id;
                break;
            }
        }
    }
    if (logprob)
        *logprob = (float)((double)((logits[pick] - logits[best]) / t) - log(sum));
    return pick;
}
