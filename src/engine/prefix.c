/*
 * prefix.c - the prefix cache of KV sequences (see prefix.h).
 */
#include "engine/prefix.h"

#include <stdlib.h>

#include "core/xalloc.h"

struct slot {
    struct kv_seq seq; /* first member: a sequence's address is its slot's */
    uint64_t last_use;
    int used; /* holds tokens worth matching */
    int busy; /* handed out and not yet released: never reused or dropped */
};

struct prefix_cache {
    const struct model *m;
    struct slot **slots; /* pointers, so a handed-out sequence stays put when the array grows */
    int n_slots, max_idle;
    size_t max_bytes;
    uint64_t clock;
};

static struct slot *new_slot(struct prefix_cache *pc)
{
    struct slot *s = af_xcalloc(1, sizeof *s);
    kv_seq_init(&s->seq, pc->m);
    pc->slots = af_xrealloc(pc->slots, (size_t)(pc->n_slots + 1) * sizeof *pc->slots);
    pc->slots[pc->n_slots++] = s;
    return s;
}

struct prefix_cache *prefix_cache_new(const struct model *m, int max_seqs, size_t max_bytes)
{
    struct prefix_cache *pc = af_xcalloc(1, sizeof *pc);
    pc->m = m;
    pc->max_idle = max_seqs < 1 ? 1 : max_seqs;
    pc->max_bytes = max_bytes;
    for (int i = 0; i < pc->max_idle; i++)
        new_slot(pc);
    return pc;
}

void prefix_cache_free(struct prefix_cache *pc)
{
    if (!pc)
        return;
    for (int i = 0; i < pc->n_slots; i++) {
        kv_seq_deinit(&pc->slots[i]->seq);
        free(pc->slots[i]);
    }
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

/* A free slot, else the least recently used idle one other than `avoid`, else a new one (every
 * slot is busy). */
static struct slot *victim(struct prefix_cache *pc, const struct slot *avoid)
{
    struct slot *best = NULL;
    for (int i = 0; i < pc->n_slots; i++) {
        struct slot *s = pc->slots[i];
        if (s == avoid || s->busy)
            continue;
        if (!s->used)
            return s;
        if (!best || s->last_use < best->last_use)
            best = s;
    }
    return best ? best : new_slot(pc);
}

struct kv_seq *prefix_acquire(struct prefix_cache *pc, const int32_t *prompt, int64_t n,
                              int64_t *n_reused)
{
    struct slot *best = NULL;
    int64_t best_len = 0;
    for (int i = 0; i < pc->n_slots; i++) {
        struct slot *s = pc->slots[i];
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
    if (best && best_len > 0 && best_len == best->seq.n && !best->busy) {
        use = best; /* the whole cached sequence is a prefix: extend it in place */
    } else if (best && best_len > 0) {
        use = victim(pc, best); /* copy the shared part; the other stays for its prompts */
        kv_seq_copy_prefix(&use->seq, &best->seq, best_len);
    } else {
        use = victim(pc, NULL);
        kv_seq_truncate(&use->seq, 0);
        best_len = 0;
    }
    use->used = 1;
    use->busy = 1;
    use->last_use = ++pc->clock;
    *n_reused = best_len;
    return &use->seq;
}

void prefix_release(struct prefix_cache *pc, struct kv_seq *seq)
{
    struct slot *s = (struct slot *)(void *)seq;
    s->busy = 0;
    s->last_use = ++pc->clock;
    prefix_trim(pc, NULL);
}

size_t prefix_cache_bytes(const struct prefix_cache *pc)
{
    size_t b = 0;
    for (int i = 0; i < pc->n_slots; i++)
        b += kv_seq_bytes(&pc->slots[i]->seq);
    return b;
}

/* Drops idle slots, least recently used first, until the bytes fit the budget and no more
 * than max_idle slots remain (slots beyond it, made while many sequences were busy, are freed). */
void prefix_trim(struct prefix_cache *pc, const struct kv_seq *keep)
{
    for (;;) {
        int idle = 0;
        struct slot *lru = NULL;
        int lru_i = -1;
        for (int i = 0; i < pc->n_slots; i++) {
            struct slot *s = pc->slots[i];
            if (s->busy || &s->seq == keep)
                continue;
            idle++;
            if (!lru || s->last_use < lru->last_use) {
                lru = s;
                lru_i = i;
            }
        }
        const int too_many = pc->n_slots > pc->max_idle && lru;
        if (!lru || (!too_many && prefix_cache_bytes(pc) <= pc->max_bytes))
            return;
        if (!too_many && kv_seq_bytes(&lru->seq) == 0)
            return;
        kv_seq_deinit(&lru->seq);
        if (too_many) { /* remove the slot itself */
            free(lru);
            pc->slots[lru_i] = pc->slots[--pc->n_slots];
        } else {
            kv_seq_init(&lru->seq, pc->m);
            lru->used = 0;
        }
        (void)idle;
    }
}
