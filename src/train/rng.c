/*
 * rng.c - xoshiro256** and splitmix64, transcribed from the reference code at
 * https://prng.di.unimi.it/ (public domain), plus a [0,1) double and a Fisher-Yates shuffle.
 * See rng.h for the contracts.
 */
#include "train/rng.h"

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void train_rng_seed(struct train_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

uint64_t train_rng_next(struct train_rng *r)
{
    uint64_t *s = r->s;
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double train_rng_uniform(struct train_rng *r)
{
    return (double)(train_rng_next(r) >> 11) * 0x1.0p-53;
}

/* Uniform in [0, bound), bound >= 1. Rejects the low 2^64 mod bound outputs so every residue is
 * equally likely (a plain modulo would favour small values for large bounds). */
static uint64_t below(struct train_rng *r, uint64_t bound)
{
    const uint64_t threshold = (0 - bound) % bound; /* = 2^64 mod bound */
    for (;;) {
        const uint64_t x = train_rng_next(r);
        if (x >= threshold)
            return x % bound;
    }
}

void train_rng_shuffle(struct train_rng *r, int64_t *idx, int64_t n)
{
    for (int64_t i = n - 1; i > 0; i--) {
        const int64_t j = (int64_t)below(r, (uint64_t)i + 1);
        const int64_t tmp = idx[i];
        idx[i] = idx[j];
        idx[j] = tmp;
    }
}
