/*
 * radix.h - the radix tree over token ids that indexes the paged KV cache's blocks (SGLang's
 * RadixAttention). Each node below the root is one block: the KV_BLOCK tokens it holds (fewer
 * for a partial block, which is always a leaf) and the block's id. A path from the root spells
 * a token prefix whose keys and values are the blocks along it.
 *
 * A new sequence takes the blocks of the longest cached prefix of its prompt by reference
 * (full blocks are shared, never written) and a copy of the part of the next block that still
 * matches (copy-on-write of a partial block), so reuse is exact to the token. Running
 * sequences add each block as it fills, so a prompt can reuse the prefix of any earlier or
 * running request. Leaves no sequence holds are evicted least recently used first when the
 * pool needs room (the pool's evict callback). Each node records the weights generation it
 * was computed with; radix_invalidate drops the nodes of older generations.
 *
 * Not thread-safe: the engine's busy thread alone uses the tree, like the pool.
 */
#ifndef AF_ENGINE_RADIX_H
#define AF_ENGINE_RADIX_H

#include <stddef.h>
#include <stdint.h>

#include "engine/kv_pool.h"

struct radix;

/* A tree over pool p (borrowed; must outlive it), which it registers as p's evictor. Owned by
 * the caller (radix_free, which gives every block the tree holds back to the pool). */
struct radix *radix_new(struct kv_pool *p);
void radix_free(struct radix *t);

/* Fills s (empty, in the tree's pool) with the longest cached prefix of prompt[0..n), at most
 * n - 1 tokens so the last prompt token is always evaluated (its logits are needed). Returns
 * the number of tokens reused. The partial block's copy is skipped when the pool has no block
 * to spare without force. s must later go back through radix_release. */
int64_t radix_acquire(struct radix *t, struct kv_seq *s, const int32_t *prompt, int64_t n);
/* What radix_acquire would reuse of prompt[0..n) as whole blocks, without taking them: the
 * number of blocks, and of those how many no sequence holds now (taking them uses up room
 * in the pool that is free today). */
void radix_peek(const struct radix *t, const int32_t *prompt, int64_t n, int64_t *n_blocks,
                int64_t *n_idle);
/* Adds s's blocks that have filled since the last call to the tree, so later prompts reuse
 * them. Call after each evaluation. */
void radix_commit(struct radix *t, struct kv_seq *s);
/* Gives s's blocks back: with `cache`, its full blocks and its partial last block stay in the
 * tree for later prompts; without, only the blocks already committed do. s is left empty, in
 * the same pool. */
void radix_release(struct radix *t, struct kv_seq *s, int cache);
/* Makes the tree's current generation new: every node computed before is dropped (or, while a
 * sequence still holds it, never matched again and dropped once free). */
void radix_invalidate(struct radix *t);
/* Evicts one unreferenced leaf, least recently used first; 1 if one was, else 0. */
int radix_evict_one(struct radix *t);

struct radix_stats {
    int64_t n_nodes;       /* blocks on the tree */
    int64_t cached_blocks; /* of them, held by no sequence (evictable) */
    long long hits;        /* prompt tokens reused, over every radix_acquire */
    long long evicted;     /* blocks evicted */
};
struct radix_stats radix_stats(const struct radix *t);

#endif
