/*
 * scratch.h - per-thread scratch buffers of the training hot paths (src/train/). The products,
 * attention and the output head need megabytes of temporaries on every call; a fresh malloc of
 * that size is a fresh mmap whose pages fault again on every call (5-10% of a training step).
 * Each thread keeps one grow-only buffer per slot instead, freed when the thread ends.
 */
#ifndef AF_TRAIN_SCRATCH_H
#define AF_TRAIN_SCRATCH_H

#include <stddef.h>

enum train_scratch_slot {
    TRAIN_SCRATCH_GEMM,      /* train_gemm_avx512's packed B */
    TRAIN_SCRATCH_ATTN_KV,   /* attention: the contiguous K and V of every kv head */
    TRAIN_SCRATCH_ATTN_ROWS, /* attention: one block of query rows (per worker thread) */
    TRAIN_SCRATCH_ATTN_GRAD, /* attention backward: per-head dQ, dK, dV */
    TRAIN_SCRATCH_HEAD,      /* output head: a chunk of logits and their gradient */
    TRAIN_SCRATCH_XENT,      /* cross-entropy: each row's loss */
    TRAIN_SCRATCH_N
};

/* At least `floats` floats (4-byte units; a caller may keep doubles there), 64-byte aligned,
 * contents undefined. Owned by the calling thread's slot: valid until the next call for the same
 * slot on the same thread, or the thread's end. Aborts when memory runs out, as af_xmalloc does. */
void *train_scratch(enum train_scratch_slot slot, size_t floats);

#endif
