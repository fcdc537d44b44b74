/*
 * kv_pool.c - the block pool and block-table sequences of the paged KV cache (see kv_pool.h).
 */
#include "engine/kv_pool.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/xalloc.h"
#include "engine/model.h"

struct kv_pool *kv_pool_new(const struct model *m, size_t max_bytes, int f16)
{
    struct kv_pool *p = af_xcalloc(1, sizeof *p);
    p->n_layer = m->hp.n_layer;
    p->kv_dim = m->hp.n_head_kv * m->hp.head_dim;
    p->f16 = f16 != 0;
    p->block_elems = (size_t)(p->n_layer * 2 * p->kv_dim * KV_BLOCK);
    const size_t bb = kv_pool_block_bytes(p);
    p->max_blocks = max_bytes ? (int64_t)(max_bytes / bb) : INT32_MAX;
    if (p->max_blocks < 1)
        p->max_blocks = 1;
    if (p->max_blocks > INT32_MAX)
        p->max_blocks = INT32_MAX;
    return p;
}

void kv_pool_free(struct kv_pool *p)
{
    if (!p)
        return;
    for (int32_t i = 0; i < p->n_blk; i++)
        if (!p->blk[i].slab)
            free(p->blk[i].data);
    for (size_t i = 0; i < p->n_slabs; i++)
        munmap(p->slabs[i], p->slab_bytes);
    free(p->slabs);
    free(p->blk);
    free(p->free_ids);
    free(p);
}

size_t kv_pool_block_bytes(const struct kv_pool *p)
{
    return p->block_elems * (p->f16 ? sizeof(uint16_t) : sizeof(float));
}

int64_t kv_pool_n_free(const struct kv_pool *p)
{
    int64_t f = p->max_blocks - p->n_used;
    return f > 0 ? f : 0;
}

/* Storage for one block from the newest slab, a new slab (2 MiB aligned, on huge pages where
 * the kernel has them) when it is used up; NULL when none can be mapped. */
static void *carve(struct kv_pool *p)
{
    const size_t bb = kv_pool_block_bytes(p), huge = (size_t)2 << 20;
    if (!p->carve_left) {
        if (!p->slab_bytes) { /* 32 MiB, or 4 blocks when they are larger */
            const size_t want = bb * 4 > ((size_t)32 << 20) ? bb * 4 : (size_t)32 << 20;
            p->slab_bytes = (want + huge - 1) / huge * huge;
        }
        /* over-map by 2 MiB to align the slab; the ends are unmapped */
        char *m = mmap(NULL, p->slab_bytes + huge, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED)
            return NULL;
        char *a = (char *)(((uintptr_t)m + huge - 1) / huge * huge);
        if (a > m)
            munmap(m, (size_t)(a - m));
        if (a + p->slab_bytes < m + p->slab_bytes + huge)
            munmap(a + p->slab_bytes, (size_t)(m + p->slab_bytes + huge - (a + p->slab_bytes)));
#ifdef MADV_HUGEPAGE
        (void)madvise(a, p->slab_bytes, MADV_HUGEPAGE);
#endif
        p->slabs = af_xrealloc(p->slabs, (p->n_slabs + 1) * sizeof *p->slabs);
        p->slabs[p->n_slabs++] = a;
        p->carve = a;
        p->carve_left = p->slab_bytes / bb;
    }
    void *r = p->carve;
    p->carve += bb;
    p->carve_left--;
    return r;
}

/* A new descriptor (no storage, ref 0). */
static int32_t new_desc(struct kv_pool *p)
{
    if (p->n_blk == p->cap_blk) {
        p->cap_blk = p->cap_blk ? p->cap_blk * 2 : 64;
        p->blk = af_xrealloc(p->blk, (size_t)p->cap_blk * sizeof *p->blk);
        p->free_ids = af_xrealloc(p->free_ids, (size_t)p->cap_blk * sizeof *p->free_ids);
    }
    p->blk[p->n_blk] = (struct kv_block){NULL, 0, 0, 0};
    return p->n_blk++;
}

/* Takes a free id, preferring one that still has storage (the free list is searched from its
 * end, where released blocks go). */
static int32_t take_free(struct kv_pool *p)
{
    int32_t at = p->n_free - 1;
    for (int32_t i = p->n_free - 1; i >= 0 && i >= p->n_free - 8; i--)
        if (p->blk[p->free_ids[i]].data) {
            at = i;
            break;
        }
    const int32_t id = p->free_ids[at];
    p->free_ids[at] = p->free_ids[--p->n_free];
    return id;
}

int kv_pool_alloc(struct kv_pool *p, int force, int32_t *id)
{
    /* Evict before growing, even with force: a forced block past the budget is the last
     * resort of the one sequence that must run. */
    while (p->n_used >= p->max_blocks) {
        if (p->evict && p->evict(p->evict_user))
            continue;
        if (!force)
            return AF_ENOMEM;
        break;
    }
    const int32_t i = p->n_free ? take_free(p) : new_desc(p);
    struct kv_block *b = &p->blk[i];
    if (!b->data) {
        b->data = p->n_live < p->max_blocks ? carve(p) : NULL;
        b->slab = b->data != NULL;
        if (!b->data) /* past the budget (forced), or no slab to be had: given back when freed */
            b->data = af_xmalloc(kv_pool_block_bytes(p));
        p->n_live++;
    }
    b->ref = 1;
    p->n_used++;
    *id = i;
    return AF_OK;
}

void kv_pool_ref(struct kv_pool *p, int32_t id)
{
    struct kv_block *b = &p->blk[id];
    if (b->in_tree && b->ref == 1)
        p->n_cached--;
    b->ref++;
}

void kv_pool_unref(struct kv_pool *p, int32_t id)
{
    struct kv_block *b = &p->blk[id];
    if (--b->ref > 0) {
        if (b->in_tree && b->ref == 1)
            p->n_cached++;
        return;
    }
    p->n_used--;
    if (p->n_live > p->max_blocks && !b->slab) { /* past the budget (forced): give it back */
        free(b->data);
        b->data = NULL;
        p->n_live--;
    }
    p->free_ids[p->n_free++] = id;
}

void kv_pool_tree_add(struct kv_pool *p, int32_t id)
{
    struct kv_block *b = &p->blk[id];
    kv_pool_ref(p, id);
    b->in_tree = 1;
    if (b->ref == 1)
        p->n_cached++;
}

void kv_pool_tree_drop(struct kv_pool *p, int32_t id)
{
    struct kv_block *b = &p->blk[id];
    if (b->ref == 1)
        p->n_cached--;
    b->in_tree = 0;
    kv_pool_unref(p, id);
}

/* ---- sequences ------------------------------------------------------------------------ */

void kv_seq_init_pool(struct kv_seq *s, struct kv_pool *p)
{
    memset(s, 0, sizeof *s);
    s->pool = p;
    s->n_layer = p->n_layer;
    s->kv_dim = p->kv_dim;
}

void kv_seq_init(struct kv_seq *s, const struct model *m)
{
    kv_seq_init_pool(s, kv_pool_new(m, 0, 0));
    s->own_pool = 1;
}

void kv_seq_deinit(struct kv_seq *s)
{
    if (!s || !s->pool)
        return;
    for (int64_t b = 0; b < s->n_blocks; b++)
        kv_pool_unref(s->pool, s->blocks[b]);
    free(s->blocks);
    free(s->tokens);
    if (s->own_pool)
        kv_pool_free(s->pool);
    memset(s, 0, sizeof *s);
}

void kv_seq_truncate(struct kv_seq *s, int64_t n)
{
    if (n < s->n)
        s->n = n < 0 ? 0 : n;
}

int64_t kv_seq_blocks_needed(const struct kv_seq *s, int64_t need)
{
    const int64_t nb = (need + KV_BLOCK - 1) / KV_BLOCK;
    int64_t k = nb > s->n_blocks ? nb - s->n_blocks : 0;
    for (int64_t b = s->n / KV_BLOCK; b < s->n_blocks && b < nb; b++)
        if (s->pool->blk[s->blocks[b]].ref > 1)
            k++;
    return k;
}

int kv_seq_reserve(struct kv_seq *s, int64_t need, int force)
{
    struct kv_pool *p = s->pool;
    const int64_t nb = (need + KV_BLOCK - 1) / KV_BLOCK;
    /* Copy-on-write: a block the sequence will write into must be its own. */
    for (int64_t b = s->n / KV_BLOCK; b < s->n_blocks && b < nb; b++) {
        const int32_t old = s->blocks[b];
        if (p->blk[old].ref <= 1)
            continue;
        int32_t id;
        if (kv_pool_alloc(p, force, &id))
            return AF_ENOMEM;
        memcpy(p->blk[id].data, p->blk[old].data, kv_pool_block_bytes(p));
        kv_pool_unref(p, old);
        s->blocks[b] = id;
    }
    if (nb > s->cap_blocks) {
        s->cap_blocks = s->cap_blocks ? s->cap_blocks : 8;
        while (s->cap_blocks < nb)
            s->cap_blocks *= 2;
        s->blocks = af_xrealloc(s->blocks, (size_t)s->cap_blocks * sizeof *s->blocks);
    }
    while (s->n_blocks < nb) {
        int32_t id;
        if (kv_pool_alloc(p, force, &id))
            return AF_ENOMEM;
        s->blocks[s->n_blocks++] = id;
    }
    kv_seq_reserve_tokens(s, need);
    return AF_OK;
}

void kv_seq_reserve_tokens(struct kv_seq *s, int64_t need)
{
    if (need <= s->cap_tok)
        return;
    s->cap_tok = (need + KV_BLOCK - 1) / KV_BLOCK * KV_BLOCK;
    s->tokens = af_xrealloc(s->tokens, (size_t)s->cap_tok * sizeof *s->tokens);
}
