/*
 * scratch.c - per-thread grow-only scratch buffers (see scratch.h). A pthread key's destructor
 * frees a thread's buffers when it ends; OpenMP's pool threads keep theirs between regions,
 * which is the point.
 */
#include "train/scratch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct slots {
    float *buf[TRAIN_SCRATCH_N];
    size_t cap[TRAIN_SCRATCH_N];
};

static pthread_key_t key;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void slots_free(void *p)
{
    struct slots *s = p;
    for (int i = 0; i < TRAIN_SCRATCH_N; i++)
        free(s->buf[i]);
    free(s);
}

static void key_init(void)
{
    if (pthread_key_create(&key, slots_free))
        abort();
}

static void out_of_memory(size_t bytes)
{
    fprintf(stderr, "agentflow: out of memory (training scratch of %zu bytes)\n", bytes);
    abort();
}

void *train_scratch(enum train_scratch_slot slot, size_t floats)
{
    pthread_once(&once, key_init);
    struct slots *s = pthread_getspecific(key);
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s || pthread_setspecific(key, s))
            out_of_memory(sizeof *s);
    }
    if (floats > s->cap[slot] || !s->buf[slot]) {
        const size_t bytes = ((floats ? floats : 1) * sizeof(float) + 63) / 64 * 64;
        free(s->buf[slot]);
        s->buf[slot] = aligned_alloc(64, bytes);
        if (!s->buf[slot])
            out_of_memory(bytes);
        s->cap[slot] = floats;
    }
    return s->buf[slot];
}
