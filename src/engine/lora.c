/*
 * lora.c - LoRA adapter shapes, allocation and initialisation (see lora.h).
 */
#include "engine/lora.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/errf.h"
#include "core/xalloc.h"

static const char *const peft_names[LORA_N_TARGETS] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                       "gate_proj", "up_proj", "down_proj"};
static const char *const short_names[LORA_N_TARGETS] = {"q", "k", "v", "o", "gate", "up", "down"};

int lora_target_from_name(const char *name)
{
    for (int t = 0; t < LORA_N_TARGETS; t++)
        if (strcmp(name, peft_names[t]) == 0 || strcmp(name, short_names[t]) == 0)
            return t;
    return -1;
}

const char *lora_target_peft_name(enum lora_target t)
{
    return (unsigned)t < LORA_N_TARGETS ? peft_names[t] : "?";
}

int lora_targets_parse(const char *list, unsigned *mask, char *err, size_t errlen)
{
    unsigned m = 0;
    const char *p = list ? list : "";
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char name[32];
        if (len == 0 || len >= sizeof name) {
            af_errf(err, errlen, "LoRA targets '%s': bad entry at offset %zu", list,
                    (size_t)(p - list));
            return AF_EINVAL;
        }
        memcpy(name, p, len);
        name[len] = 0;
        if (strcmp(name, "all") == 0) {
            m |= LORA_ALL_TARGETS;
        } else {
            int t = lora_target_from_name(name);
            if (t < 0) {
                af_errf(err, errlen,
                        "LoRA targets: unknown target '%s' (q, k, v, o, gate, up, down, all)",
                        name);
                return AF_EINVAL;
            }
            m |= 1u << t;
        }
        p += len + (e ? 1 : 0);
    }
    if (!m) {
        af_errf(err, errlen, "LoRA targets: the list is empty");
        return AF_EINVAL;
    }
    *mask = m;
    return AF_OK;
}

void lora_target_dims(const struct model_hparams *hp, enum lora_target t, int64_t *n_in,
                      int64_t *n_out)
{
    const int64_t d = hp->n_embd, qd = hp->n_head * hp->head_dim,
                  kvd = hp->n_head_kv * hp->head_dim;
    switch (t) {
    case LORA_Q:
        *n_in = d, *n_out = qd;
        break;
    case LORA_K:
        *n_in = d, *n_out = kvd;
        break;
    case LORA_V:
        *n_in = d, *n_out = kvd;
        break;
    case LORA_O:
        *n_in = qd, *n_out = d;
        break;
    case LORA_GATE:
        *n_in = d, *n_out = hp->n_ff;
        break;
    case LORA_UP:
        *n_in = d, *n_out = hp->n_ff;
        break;
    default:
        *n_in = hp->n_ff, *n_out = d;
        break;
    }
}

/* dims[t] = {n_in, n_out} of target t (the same in every layer). */
static struct lora_adapter *alloc_like(int64_t n_layer, int rank, unsigned targets,
                                       int64_t dims[LORA_N_TARGETS][2])
{
    struct lora_adapter *l = af_xcalloc(1, sizeof *l);
    l->n_layer = n_layer;
    l->rank = rank;
    l->targets = targets;
    l->pairs = af_xcalloc((size_t)(n_layer * LORA_N_TARGETS), sizeof *l->pairs);
    size_t total = 0;
    for (int64_t il = 0; il < n_layer; il++)
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            if (!(targets & (1u << t)))
                continue;
            struct lora_pair *p = &l->pairs[il * LORA_N_TARGETS + t];
            p->n_in = dims[t][0];
            p->n_out = dims[t][1];
            total += (size_t)(rank * (p->n_in + p->n_out));
        }
    l->data = af_xcalloc(total ? total : 1, sizeof(float));
    l->n_floats = total;
    float *cur = l->data;
    for (int64_t i = 0; i < n_layer * LORA_N_TARGETS; i++) {
        struct lora_pair *p = &l->pairs[i];
        if (!(targets & (1u << (i % LORA_N_TARGETS))))
            continue;
        p->a = cur;
        cur += rank * p->n_in;
        p->b = cur;
        cur += rank * p->n_out;
    }
    return l;
}

int lora_new(const struct model_hparams *hp, int rank, float alpha, float dropout, unsigned targets,
             struct lora_adapter **out, char *err, size_t errlen)
{
    *out = NULL;
    if (rank < 1 || rank > 4096) {
        af_errf(err, errlen, "LoRA rank %d is outside 1..4096", rank);
        return AF_EINVAL;
    }
    if (!(targets & LORA_ALL_TARGETS) || (targets & ~LORA_ALL_TARGETS)) {
        af_errf(err, errlen, "LoRA targets mask 0x%x is empty or has unknown bits", targets);
        return AF_EINVAL;
    }
    if (!(alpha > 0) || !isfinite(alpha)) {
        af_errf(err, errlen, "LoRA alpha %g must be a positive number", (double)alpha);
        return AF_EINVAL;
    }
    if (!(dropout >= 0 && dropout < 1)) {
        af_errf(err, errlen, "LoRA dropout %g must be in [0, 1)", (double)dropout);
        return AF_EINVAL;
    }
    int64_t dims[LORA_N_TARGETS][2];
    for (int t = 0; t < LORA_N_TARGETS; t++)
        lora_target_dims(hp, (enum lora_target)t, &dims[t][0], &dims[t][1]);
    struct lora_adapter *l = alloc_like(hp->n_layer, rank, targets, dims);
    l->alpha = alpha;
    l->dropout = dropout;
    l->scale = alpha / (float)rank;
    *out = l;
    return AF_OK;
}

struct lora_adapter *lora_new_like(const struct lora_adapter *src)
{
    int64_t dims[LORA_N_TARGETS][2] = {{0}};
    for (int t = 0; t < LORA_N_TARGETS; t++) {
        dims[t][0] = src->pairs[t].n_in; /* layer 0: every layer has the same shapes */
        dims[t][1] = src->pairs[t].n_out;
    }
    struct lora_adapter *l = alloc_like(src->n_layer, src->rank, src->targets, dims);
    l->alpha = src->alpha;
    l->dropout = src->dropout;
    l->scale = src->scale;
    return l;
}

void lora_free(struct lora_adapter *l)
{
    if (!l)
        return;
    free(l->data);
    free(l->pairs);
    free(l);
}

/* splitmix64: a tiny generator whose stream only depends on the seed. */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void lora_init(struct lora_adapter *l, uint64_t seed)
{
    uint64_t s = seed;
    for (int64_t i = 0; i < l->n_layer * LORA_N_TARGETS; i++) {
        struct lora_pair *p = &l->pairs[i];
        if (!p->a)
            continue;
        const float bound = 1.0f / sqrtf((float)p->n_in);
        for (int64_t j = 0; j < l->rank * p->n_in; j++) {
            double u = (double)(next_u64(&s) >> 11) / (double)(1ull << 53); /* [0, 1) */
            p->a[j] = (float)((2 * u - 1) * (double)bound);
        }
        memset(p->b, 0, (size_t)(l->rank * p->n_out) * sizeof(float));
    }
}
