/*
 * rng.h - the trainer's random numbers (src/train/): xoshiro256** (Blackman & Vigna), seeded
 * through splitmix64. The state is four plain words so a checkpoint can store and restore it and
 * a resumed run draws the same stream (data order, dropout, rollouts) as an uninterrupted one.
 *
 * Every function works on a caller-owned struct and allocates nothing. Thread-safety: one
 * struct train_rng per thread; distinct structs are safe from any thread.
 */
#ifndef AF_TRAIN_RNG_H
#define AF_TRAIN_RNG_H

#include <stdint.h>

struct train_rng {
    uint64_t s[4]; /* xoshiro256** state; never all zero once seeded */
};

/* Seeds r from one 64-bit seed: the four words are successive splitmix64 outputs, as the
 * xoshiro authors recommend (splitmix64 is a bijection, so they are never all zero). */
void train_rng_seed(struct train_rng *r, uint64_t seed);

/* The next 64-bit output of xoshiro256**; advances r. */
uint64_t train_rng_next(struct train_rng *r);

/* A double uniform in [0, 1): the top 53 bits of one output times 2^-53. */
double train_rng_uniform(struct train_rng *r);

/* Shuffles idx[0..n) in place with Fisher-Yates (from the end down), each draw unbiased by
 * rejection. Same state and n give the same permutation. n <= 1 draws nothing. */
void train_rng_shuffle(struct train_rng *r, int64_t *idx, int64_t n);

#endif
