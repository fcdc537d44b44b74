/*
 * kv_pool.h - the paged KV cache's storage (vLLM's PagedAttention): keys and values live in
 * fixed-size blocks of KV_BLOCK positions taken from one pool with a byte budget, and a
 * sequence is a table of block ids plus a length. Blocks are reference-counted: a block full
 * of a shared prefix is held by the radix tree (radix.h) and by every sequence that reuses it.
 *
 * Block layout, per layer l: keys transposed [kv_dim][KV_BLOCK] (the score loop reads one
 * dimension of many positions), then values per kv head [n_head_kv][KV_BLOCK][head_dim] (a
 * head's 16 rows contiguous, one stream for the value sums); F32, or F16 in a pool made
 * with f16 set (half the bytes a block, and half what attention reads; the values are rounded
 * once, when stored).
 *
 * Invariants: a block with ref > 1 is full and never written (a sequence writes only into
 * blocks it holds alone; kv_seq_reserve copies a shared one first). Storage of freed blocks is
 * kept for reuse up to the budget and returned to the system beyond it. Not thread-safe: the
 * engine's busy thread alone touches a pool and its sequences.
 */
#ifndef AF_ENGINE_KV_POOL_H
#define AF_ENGINE_KV_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "agentflow/err.h"

/* Positions per block. 16 is a multiple of every axpy kernel's vector width (8 and 16 lanes),
 * so a block's scores round exactly as they would in one long array. */
#define KV_BLOCK 16

struct model;
struct radix_node;

struct kv_block {
    void *data;      /* n_layer * 2 * kv_dim * KV_BLOCK elements; NULL = no storage */
    int32_t ref;     /* holders: sequences' tables and the radix tree; 0 = free */
    int32_t in_tree; /* one of the holders is a radix tree node */
    int32_t slab;    /* the storage is carved from a slab (kept until the pool goes) */
};

/* Called when the pool has no free block under its budget: frees one unreferenced block
 * (the radix tree's least recently used leaf) and returns 1, or returns 0 when none is left. */
typedef int (*kv_evict_fn)(void *user);

struct kv_pool {
    int64_t n_layer, kv_dim;
    int f16;            /* elements are F16 (uint16_t), else F32 */
    size_t block_elems; /* elements a block */
    int64_t max_blocks; /* the budget in blocks; allocations past it need `force` */
    struct kv_block *blk;
    int32_t n_blk, cap_blk;
    int32_t *free_ids; /* ids with ref 0 (with or without storage) */
    int32_t n_free;
    int64_t n_live;   /* blocks with storage */
    int64_t n_used;   /* blocks with ref > 0 */
    int64_t n_cached; /* of them, held by the radix tree alone (evictable) */
    kv_evict_fn evict;
    void *evict_user;
    /* Storage under the budget is carved from slabs on huge pages: attention reads a layer's
     * slice of hundreds of blocks a step, and with a 4 KiB page each its own TLB miss. */
    void **slabs;
    size_t n_slabs, slab_bytes;
    char *carve;       /* the next free byte of the newest slab */
    size_t carve_left; /* blocks left in it */
};

/* A pool for m's shapes holding at most max_bytes of blocks (at least one block; 0 = no
 * limit), of F16 elements when f16 is set, else F32. Owned by the caller (kv_pool_free). */
struct kv_pool *kv_pool_new(const struct model *m, size_t max_bytes, int f16);
void kv_pool_free(struct kv_pool *p);
size_t kv_pool_block_bytes(const struct kv_pool *p);

/* A block with ref 1 in *id. Takes a free one, else grows under the budget, else asks the
 * evict callback, else (with force) grows past the budget. AF_ENOMEM when none can be had;
 * nothing changes then. */
AF_NODISCARD int kv_pool_alloc(struct kv_pool *p, int force, int32_t *id);
void kv_pool_ref(struct kv_pool *p, int32_t id);
/* Drops one reference; at 0 the block is free (its storage kept while under the budget). */
void kv_pool_unref(struct kv_pool *p, int32_t id);
/* The radix tree's own reference to a block: taken when a node is made, dropped when it
 * goes (so the pool can count the blocks the tree alone holds). */
void kv_pool_tree_add(struct kv_pool *p, int32_t id);
void kv_pool_tree_drop(struct kv_pool *p, int32_t id);
/* Blocks that could be had without force and without eviction. */
int64_t kv_pool_n_free(const struct kv_pool *p);

/* Keys (kv 0) or values (kv 1) of layer l in block id: keys [kv_dim][KV_BLOCK], values
 * [n_head_kv][KV_BLOCK][head_dim], of the pool's element type. */
static inline void *kv_block_kv(const struct kv_pool *p, int32_t id, int64_t l, int kv)
{
    return (char *)p->blk[id].data +
           (size_t)((l * 2 + kv) * p->kv_dim * KV_BLOCK) * (p->f16 ? 2 : 4);
}
/* The same, typed: F32 pools only. */
static inline float *kv_block_k(const struct kv_pool *p, int32_t id, int64_t l)
{
    return (float *)kv_block_kv(p, id, l, 0);
}
static inline float *kv_block_v(const struct kv_pool *p, int32_t id, int64_t l)
{
    return (float *)kv_block_kv(p, id, l, 1);
}

/* One token sequence: its tokens and a block table covering at least its n positions. */
struct kv_seq {
    struct kv_pool *pool; /* borrowed, or owned (own_pool) when made by kv_seq_init */
    int own_pool;
    int64_t n_layer, kv_dim;
    int64_t n; /* tokens cached */
    int32_t *tokens;
    int64_t cap_tok;
    int32_t *blocks; /* block ids: position t lives in blocks[t / KV_BLOCK] */
    int64_t n_blocks, cap_blocks;
    /* The radix tree's bookkeeping (radix.c): the first n_tree blocks are on the tree path
     * that ends at `node` (locked while the sequence holds it; NULL = the root). */
    struct radix_node *node;
    int64_t n_tree;
};

/* A sequence with a pool of its own and no budget, for callers outside the engine (tests, the
 * trainer's checks). kv_seq_deinit frees both. */
void kv_seq_init(struct kv_seq *s, const struct model *m);
/* An empty sequence in pool p (borrowed; must outlive it). */
void kv_seq_init_pool(struct kv_seq *s, struct kv_pool *p);
/* Drops the sequence's blocks (and its own pool). A sequence on the radix tree is given back
 * with radix_release instead. */
void kv_seq_deinit(struct kv_seq *s);
/* Keeps the first n tokens (n <= s->n); the blocks stay in the table for reuse. */
void kv_seq_truncate(struct kv_seq *s, int64_t n);
/* Makes the table cover positions [0, need) and the block holding position s->n writable
 * (copied first when shared). AF_ENOMEM when the pool cannot give the blocks without force;
 * the blocks already added stay in the table then. */
AF_NODISCARD int kv_seq_reserve(struct kv_seq *s, int64_t need, int force);
/* Room for `need` tokens in s->tokens only (no blocks). */
void kv_seq_reserve_tokens(struct kv_seq *s, int64_t need);
/* Blocks kv_seq_reserve(s, need) would still take from the pool. */
int64_t kv_seq_blocks_needed(const struct kv_seq *s, int64_t need);

#endif
