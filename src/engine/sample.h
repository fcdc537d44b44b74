/*
 * sample.h - next-token sampling: repetition penalties, greedy, temperature, top-k, top-p and
 * min-p, from a seeded generator so the same seed gives the same tokens.
 *
 * Order: frequency / presence penalties on the logits; then greedy argmax when temperature
 * <= 0; else softmax(logits / T), then top-k, top-p and min-p filters, renormalise, draw.
 * The reported log-probability of the chosen token is under softmax(logits / T) over the whole
 * vocabulary after penalties (T = 1 for greedy), which is what the trainer recomputes.
 */
#ifndef AF_ENGINE_SAMPLE_H
#define AF_ENGINE_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

struct sampler_params {
    float temperature;       /* <= 0: greedy */
    int top_k;               /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float frequency_penalty; /* subtracted once per earlier occurrence */
    float presence_penalty;  /* subtracted once if the token occurred */
    uint64_t seed;
};

struct sampler_params sampler_default_params(void);

struct sampler;

/* Owned by the caller (sampler_free). Not thread-safe. */
struct sampler *sampler_new(const struct sampler_params *p, int64_t n_vocab);
void sampler_free(struct sampler *s);
/* Records a generated token (for the penalties). */
void sampler_accept(struct sampler *s, int32_t id);
/* Picks the next token from n_vocab logits (modified in place by the penalties). *logprob (may
 * be NULL) receives its log-probability as described above. */
int32_t sampler_sample(struct sampler *s, float *logits, float *logprob);

/* The RNG, exposed for tests: a xoshiro256** stream seeded through splitmix64. */
struct rng {
    uint64_t s[4];
};
void rng_seed(struct rng *r, uint64_t seed);
uint64_t rng_next(struct rng *r);
/* Uniform in [0, 1). */
double rng_uniform(struct rng *r);

#endif
