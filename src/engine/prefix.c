/*
 * prefix.c - the prefix cache of KV sequences (see prefix.h).
 */
#include "engine/prefix.h"

#include <stdlib.h>

#include "core/xalloc.h"

struct slot {
    struct kv_seq seq;
    uint64_t last_use;
    int used;
};

struct prefix_cache {
    const struct model *m;
    struct slot *slots;
    int n_slots;
    size_t max_bytes;
    uint64_t clock;
};

struct prefix_cache *prefix_cache_new(const struct model *m, int max_seqs, size_t max_bytes)
{
    struct prefix_cache *pc = af_xcalloc(1, sizeof *pc);
    pc->m = m;
    pc->n_slots = max_seqs < 1 ? 1 : max_seqs;
    pc->max_bytes = max_bytes;
    pc->slots = af_xcalloc((size_t)pc->n_slots, sizeof *pc->slots);
    for (int i = 0; i < pc->n_slots; i++)
        kv_seq_init(&pc->slots[i].seq, m);
    return pc;
}

void prefix_cache_free(struct prefix_cache *pc)
{
    if (!pc)
        return;
    for (int i = 0; i < pc->n_slots; i++)
        kv_seq_deinit(&pc->slots[i].seq);
    free(pc->slots);
    free(pc);
}

static int64_t common_prefix(const struct kv_seq *s, const int32_t *p, int64_t n)
{
    int64_t lim = s->n < n ? s->n : n, i = 0;
    while (i < lim && s->tokens[i] == p[i])
        i++;
    return i;
}

/* A free slot, else the least recently used one other than `avoid`. */
static struct slot *victim(struct prefix_cache *pc, const struct slot *avoid)
{
    struct slot *best = NULL;
    for (int i = 0; i < pc->n_slots; i++) {
        struct slot *s = &pc->slots[i];
        if (s == avoid)
            continue;
        if (!s->used)
            return s;
        if (!best || s->last_use < best->last_use)
            best = s;
    }
    return best;
}

struct kv_seq *prefix_acquire(struct prefix_cache *pc, const int32_t *prompt, int64_t n,
                              int64_t *n_reused)
{
    struct slot *best = NULL;
    int64_t best_len = 0;
    for (int i = 0; i < pc->n_slots; i++) {
        struct slot *s = &pc->slots[i];
        if (!s->used)
            continue;
        int64_t l = common_prefix(&s->seq, prompt, n);
        if (l > best_len) {
            best_len = l;
            best = s;
        }
    }
    if (best_len > n - 1)
        best_len = n - 1 > 0 ? n - 1 : 0;
    struct slot *use;
    if (best && best_len > 0 && best_len == best->seq.n) {
        use = best; /* the whole cached sequence is a prefix: extend it in place */
    } else if (best && best_len > 0) {
        use = victim(pc, best);
        if (use) {
            kv_seq_copy_prefix(&use->seq, &best->seq, best_len);
        } else { /* a single slot: give up the tail */
            use = best;
            kv_seq_truncate(&use->seq, best_len);
        }
    } else {
        use = victim(pc, NULL);
        kv_seq_truncate(&use->seq, 0);
        best_len = 0;
    }
    use->used = 1;
    use->last_use = ++pc->clock;
    *n_reused = best_len;
    return &use->seq;
}

size_t prefix_cache_bytes(const struct prefix_cache *pc)
{
    size_t b = 0;
    for (int i = 0; i < pc->n_slots; i++)
        b += kv_seq_bytes(&pc->slots[i].seq);
    return b;
}

void prefix_trim(struct prefix_cache *pc, const struct kv_seq *keep)
{
    while (prefix_cache_bytes(pc) > pc->max_bytes) {
        struct slot *lru = NULL;
        for (int i = 0; i < pc->n_slots; i++) {
            struct slot *s = &pc->slots[i];
            if (&s->seq == keep || kv_seq_bytes(&s->seq) == 0)
                continue;
            if (!lru || s->last_use < lru->last_use)
                lru = s;
        }
        if (!lru)
            return;
        kv_seq_deinit(&lru->seq);
        kv_seq_init(&lru->seq, pc->m);
        lru->used = 0;
    }
}
