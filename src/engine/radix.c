/*
 * radix.c - the radix tree of cached KV blocks (see radix.h).
 *
 * Children are a singly linked list (a node has few: the prompts that diverge there). Every
 * node is also on one LRU list, least recent first. A path is touched from its leaf up to the
 * root, so a parent always ranks as more recent than its children and the scan for a victim
 * meets leaves first. A sequence locks the last node of its path: a locked node is never
 * evicted, and neither are its ancestors (they are not leaves).
 */
#include "engine/radix.h"

#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

struct radix_node {
    struct radix_node *parent, *child, *sibling;
    struct radix_node *lru_prev, *lru_next;
    int32_t tokens[KV_BLOCK];
    int32_t n_tok; /* KV_BLOCK, or fewer for a partial block (a leaf) */
    int32_t block;
    int32_t lock; /* sequences whose path ends here */
    uint64_t gen;
};

struct radix {
    struct kv_pool *pool;
    struct radix_node root;
    struct radix_node *lru_head, *lru_tail;
    uint64_t gen;
    int64_t n_nodes;
    long long hits, evicted;
};

static int evict_cb(void *u)
{
    return radix_evict_one(u);
}

struct radix *radix_new(struct kv_pool *p)
{
    struct radix *t = af_xcalloc(1, sizeof *t);
    t->pool = p;
    t->root.block = -1;
    p->evict = evict_cb;
    p->evict_user = t;
    return t;
}

static void lru_unlink(struct radix *t, struct radix_node *x)
{
    if (x->lru_prev)
        x->lru_prev->lru_next = x->lru_next;
    else
        t->lru_head = x->lru_next;
    if (x->lru_next)
        x->lru_next->lru_prev = x->lru_prev;
    else
        t->lru_tail = x->lru_prev;
    x->lru_prev = x->lru_next = NULL;
}

static void lru_push(struct radix *t, struct radix_node *x)
{
    x->lru_prev = t->lru_tail;
    x->lru_next = NULL;
    if (t->lru_tail)
        t->lru_tail->lru_next = x;
    else
        t->lru_head = x;
    t->lru_tail = x;
}

/* Marks the path from x up to the root as just used. */
static void touch(struct radix *t, struct radix_node *x)
{
    for (; x && x != &t->root; x = x->parent) {
        lru_unlink(t, x);
        lru_push(t, x);
    }
}

/* Removes leaf x from the tree and gives its block back. */
static void remove_leaf(struct radix *t, struct radix_node *x)
{
    struct radix_node **pp = &x->parent->child;
    while (*pp != x)
        pp = &(*pp)->sibling;
    *pp = x->sibling;
    lru_unlink(t, x);
    kv_pool_tree_drop(t->pool, x->block);
    t->n_nodes--;
    free(x);
}

static void free_subtree(struct radix *t, struct radix_node *x)
{
    while (x->child) {
        struct radix_node *c = x->child;
        free_subtree(t, c);
        remove_leaf(t, c);
    }
}

void radix_free(struct radix *t)
{
    if (!t)
        return;
    free_subtree(t, &t->root);
    if (t->pool->evict_user == t) {
        t->pool->evict = NULL;
        t->pool->evict_user = NULL;
    }
    free(t);
}

static int evictable(const struct radix *t, const struct radix_node *x)
{
    return !x->child && !x->lock && t->pool->blk[x->block].ref == 1;
}

int radix_evict_one(struct radix *t)
{
    for (struct radix_node *x = t->lru_head; x; x = x->lru_next)
        if (evictable(t, x)) {
            remove_leaf(t, x);
            t->evicted++;
            return 1;
        }
    return 0;
}

/* Removes the unlocked nodes of older generations whose subtrees empty out. */
static void prune(struct radix *t, struct radix_node *x)
{
    for (struct radix_node *c = x->child, *next; c; c = next) {
        next = c->sibling;
        prune(t, c);
        if (c->gen != t->gen && !c->child && !c->lock)
            remove_leaf(t, c);
    }
}

void radix_invalidate(struct radix *t)
{
    t->gen++;
    prune(t, &t->root);
}

static int64_t common(const int32_t *a, int64_t na, const int32_t *b, int64_t nb)
{
    const int64_t lim = na < nb ? na : nb;
    int64_t i = 0;
    while (i < lim && a[i] == b[i])
        i++;
    return i;
}

static void push_block(struct kv_seq *s, int32_t id)
{
    if (s->n_blocks == s->cap_blocks) {
        s->cap_blocks = s->cap_blocks ? s->cap_blocks * 2 : 8;
        s->blocks = af_xrealloc(s->blocks, (size_t)s->cap_blocks * sizeof *s->blocks);
    }
    s->blocks[s->n_blocks++] = id;
}

static void set_node(struct kv_seq *s, struct radix_node *x)
{
    if (s->node)
        s->node->lock--;
    s->node = x;
    if (x)
        x->lock++;
}

int64_t radix_acquire(struct radix *t, struct kv_seq *s, const int32_t *prompt, int64_t n)
{
    const int64_t limit = n - 1 > 0 ? n - 1 : 0;
    struct radix_node *x = &t->root, *best = NULL;
    int64_t i = 0, best_c = 0;
    for (;;) {
        best = NULL;
        best_c = 0;
        const int64_t want = limit - i < KV_BLOCK ? limit - i : KV_BLOCK;
        for (struct radix_node *c = x->child; c && want > 0; c = c->sibling) {
            if (c->gen != t->gen)
                continue;
            const int64_t k = common(c->tokens, c->n_tok, prompt + i, want);
            if (k > best_c) {
                best = c;
                best_c = k;
            }
        }
        if (!best || best_c < KV_BLOCK)
            break;
        kv_pool_ref(t->pool, best->block); /* a whole block: shared */
        push_block(s, best->block);
        x = best;
        i += KV_BLOCK;
    }
    set_node(s, x == &t->root ? NULL : x);
    s->n_tree = s->n_blocks;
    touch(t, x);
    int32_t id;
    if (best && best_c > 0 && kv_pool_alloc(t->pool, 0, &id) == AF_OK) {
        /* The part of a block that still matches: copied, so the sequence may write the rest.
         * (The allocation may have evicted `best`: then nothing is copied.) */
        int alive = 0;
        for (struct radix_node *c = x->child; c; c = c->sibling)
            alive |= c == best;
        if (alive) {
            memcpy(t->pool->blk[id].data, t->pool->blk[best->block].data,
                   kv_pool_block_bytes(t->pool));
            push_block(s, id);
            touch(t, best);
            i += best_c;
        } else {
            kv_pool_unref(t->pool, id);
        }
    }
    s->n = i;
    kv_seq_reserve_tokens(s, i);
    if (i)
        memcpy(s->tokens, prompt, (size_t)i * sizeof *prompt);
    t->hits += i;
    return i;
}

void radix_peek(const struct radix *t, const int32_t *prompt, int64_t n, int64_t *n_blocks,
                int64_t *n_idle)
{
    const int64_t limit = n - 1 > 0 ? n - 1 : 0;
    const struct radix_node *x = &t->root;
    *n_blocks = *n_idle = 0;
    for (int64_t i = 0; limit - i >= KV_BLOCK; i += KV_BLOCK) {
        const struct radix_node *c = x->child;
        while (c && (c->gen != t->gen || c->n_tok != KV_BLOCK ||
                     memcmp(c->tokens, prompt + i, sizeof c->tokens) != 0))
            c = c->sibling;
        if (!c)
            return;
        ++*n_blocks;
        *n_idle += t->pool->blk[c->block].ref == 1;
        x = c;
    }
}

static struct radix_node *new_child(struct radix *t, struct radix_node *parent,
                                    const int32_t *tokens, int32_t n_tok, int32_t block)
{
    struct radix_node *c = af_xcalloc(1, sizeof *c);
    memcpy(c->tokens, tokens, (size_t)n_tok * sizeof *tokens);
    c->n_tok = n_tok;
    c->block = block;
    c->gen = t->gen;
    c->parent = parent;
    c->sibling = parent->child;
    parent->child = c;
    kv_pool_tree_add(t->pool, block);
    lru_push(t, c);
    t->n_nodes++;
    return c;
}

/* Drops the unheld partial leaves under x whose tokens start `tokens[0..n)` covers. */
static void drop_covered_partials(struct radix *t, struct radix_node *x, const int32_t *tokens,
                                  int64_t n)
{
    for (struct radix_node *c = x->child, *next; c; c = next) {
        next = c->sibling;
        if (c->n_tok < KV_BLOCK && c->n_tok <= n && evictable(t, c) &&
            common(c->tokens, c->n_tok, tokens, n) == c->n_tok)
            remove_leaf(t, c);
    }
}

void radix_commit(struct radix *t, struct kv_seq *s)
{
    const int64_t full = s->n / KV_BLOCK;
    if (s->n_tree >= full)
        return;
    struct radix_node *x = s->node ? s->node : &t->root;
    for (int64_t b = s->n_tree; b < full; b++) {
        const int32_t *tok = s->tokens + b * KV_BLOCK;
        struct radix_node *c = x->child;
        while (c && (c->gen != t->gen || c->n_tok != KV_BLOCK ||
                     memcmp(c->tokens, tok, sizeof c->tokens) != 0))
            c = c->sibling;
        if (!c) { /* (when another sequence put the same tokens first, its block stays) */
            drop_covered_partials(t, x, tok, KV_BLOCK);
            c = new_child(t, x, tok, KV_BLOCK, s->blocks[b]);
        }
        x = c;
    }
    s->n_tree = full;
    set_node(s, x);
    touch(t, x);
}

/* Keeps s's partial last block as a leaf, unless a node there already covers its tokens. */
static void cache_tail(struct radix *t, struct kv_seq *s)
{
    const int64_t r = s->n % KV_BLOCK, b = s->n / KV_BLOCK;
    if (!r || s->n_tree != b || b >= s->n_blocks)
        return;
    struct radix_node *x = s->node ? s->node : &t->root;
    const int32_t *tok = s->tokens + b * KV_BLOCK;
    for (struct radix_node *c = x->child; c; c = c->sibling)
        if (c->gen == t->gen && common(c->tokens, c->n_tok, tok, r) == r)
            return;
    drop_covered_partials(t, x, tok, r);
    touch(t, new_child(t, x, tok, (int32_t)r, s->blocks[b]));
}

void radix_release(struct radix *t, struct kv_seq *s, int cache)
{
    if (cache) {
        radix_commit(t, s);
        cache_tail(t, s);
    }
    set_node(s, NULL);
    struct kv_pool *p = s->pool;
    kv_seq_deinit(s);
    kv_seq_init_pool(s, p);
}

struct radix_stats radix_stats(const struct radix *t)
{
    return (struct radix_stats){t->n_nodes, t->pool->n_cached, t->hits, t->evicted};
}
