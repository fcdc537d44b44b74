/*
 * net.c - the decoder's forward and backward over a loaded model for training (see net.h).
 * The layer math follows train_tiny in ops.c op for op (the same ops, the same order), with
 * three differences: frozen matrices come from the model file in its own type, LoRA deltas are
 * added to the seven target linears, and activations may be recomputed per layer.
 */
#include "train/net.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errf.h"
#include "core/xalloc.h"
#include "engine/quant.h"
#include "train/gemm.h"
#include "train/ops.h"

/* A linear layer: frozen (base) or trainable (w, gw). Bias b (gb in full mode) or NULL. */
struct net_lin {
    const struct weight *base;
    float *w, *gw;
    const float *b;
    float *gb;
    int64_t n_in, n_out;
};

struct net_layer {
    struct net_lin lin[LORA_N_TARGETS];
    const float *attn_norm, *ffn_norm;
    float *g_attn_norm, *g_ffn_norm; /* full mode */
};

/* Saved activations; per-layer arrays hold one layer when checkpointing. */
struct net_acts {
    int64_t T, slots;
    float *x; /* [L+1][T][d] */
    float *xmid, *xn1, *xn2;
    float *rstd1, *rstd2; /* [slots][T] */
    float *q, *att;       /* [slots][T][qd] */
    float *k, *v;         /* [slots][T][kvd] */
    float *lse;           /* [slots][n_head][T] */
    float *gate, *up, *hff;
    float *lora_h; /* [slots][LORA_N_TARGETS][T][rank] */
    float *xnf, *rstdf;
    float *cos_t, *sin_t;
    float *tmp, *tmp2; /* [T][wide] */
    float *block;
    size_t floats;
    float *bwd; /* the backward's scratch (struct bwd), kept: fresh pages fault */
    size_t bwd_floats;
};

struct train_net {
    const struct model *m;
    struct model_hparams hp;
    int full, checkpoint;
    struct lora_adapter *lora, *glora;
    int64_t head_chunk;
    uint64_t dropout_seed;
    struct net_layer *layers;
    const float *tok_embd_f32; /* full mode */
    float *g_tok_embd;
    const float *output_f32, *output_norm;
    float *g_output, *g_output_norm;
    float *params, *grads; /* full mode: all trainable floats */
    size_t n_params;
    struct train_param *plist;
    size_t n_plist;
    char **pnames;
    void **owned;
    size_t n_owned;
    float *scratch_w; /* one dequantised matrix */
    struct net_acts acts;
    struct train_rope rope;
    struct train_attn attn;
};

struct train_net_params train_net_default_params(void)
{
    struct train_net_params p = {0};
    p.head_chunk = 0;
    return p;
}

static void *own(struct train_net *n, void *p)
{
    n->owned = af_xrealloc(n->owned, (n->n_owned + 1) * sizeof *n->owned);
    n->owned[n->n_owned++] = p;
    return p;
}

/* ---- weights -------------------------------------------------------------------------- */

/* A frozen 1-D or 2-D weight as F32: its own data when already F32, else an owned copy. */
static const float *as_f32(struct train_net *n, const struct weight *w)
{
    if (!w->data)
        return NULL;
    if (w->type == GGML_TYPE_F32)
        return w->data;
    float *p = own(n, af_xmalloc((size_t)(w->n_in * w->n_out) * sizeof *p));
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < w->n_out; r++)
        quant_dequantize_row(w->type, (const char *)w->data + (size_t)r * w->row_bytes,
                             p + r * w->n_in, w->n_in);
    return p;
}

/* W of a linear as F32 [n_out][n_in]: trainable copy, file data, or dequantised to scratch. */
static const float *lin_w(struct train_net *n, const struct net_lin *l)
{
    if (l->w)
        return l->w;
    const struct weight *w = l->base;
    if (w->type == GGML_TYPE_F32)
        return w->data;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < w->n_out; r++)
        quant_dequantize_row(w->type, (const char *)w->data + (size_t)r * w->row_bytes,
                             n->scratch_w + r * w->n_in, w->n_in);
    return n->scratch_w;
}

static struct train_rope net_rope(const struct train_net *n)
{
    const struct model_hparams *hp = &n->hp;
    struct train_rope r = {hp->n_rot,
                           hp->head_dim,
                           hp->rope_base,
                           hp->rope_freq_scale > 0 ? hp->rope_freq_scale : 1.0f,
                           n->m ? n->m->rope_freq_factors : NULL,
                           hp->rope_style == ROPE_NEOX};
    return r;
}

static const char *const lin_suffix[LORA_N_TARGETS] = {
    "attn_q.weight",   "attn_k.weight", "attn_v.weight",  "attn_output.weight",
    "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"};
static const char *const bias_suffix[LORA_N_TARGETS] = {"attn_q.bias", "attn_k.bias", "attn_v.bias",
                                                        "attn_output.bias"};

/* ---- the trainable list (full mode) ---------------------------------------------------- */

struct layout {
    struct train_net *n;
    int pass; /* 0 counts, 1 binds */
    size_t off;
};

/* Reserves n floats of trainable parameter `name`, filled from src (may be NULL) on the bind
 * pass; returns the value pointer (NULL on the count pass) and sets *g to the gradient. */
static float *reserve(struct layout *L, const char *name, int64_t cnt, int decay,
                      const struct weight *src, float **g)
{
    struct train_net *n = L->n;
    float *w = NULL;
    if (L->pass) {
        w = n->params + L->off;
        *g = n->grads + L->off;
        struct train_param *p = &n->plist[n->n_plist];
        n->pnames[n->n_plist] = af_xstrdup(name);
        p->name = n->pnames[n->n_plist];
        p->w = w;
        p->g = *g;
        p->n = cnt;
        p->decay = decay;
        n->n_plist++;
        if (src && src->data) {
            for (int64_t r = 0; r < src->n_out; r++)
                quant_dequantize_row(src->type,
                                     (const char *)src->data + (size_t)r * src->row_bytes,
                                     w + r * src->n_in, src->n_in);
        }
    } else {
        n->n_plist++;
    }
    L->off += (size_t)cnt;
    return w;
}

static void full_layout(struct layout *L)
{
    struct train_net *n = L->n;
    const struct model *m = n->m;
    const struct model_hparams *hp = &n->hp;
    const int64_t d = hp->n_embd;
    char name[96];
    float *g = NULL;
    n->n_plist = 0;
    float *te = reserve(L, "token_embd.weight", hp->n_vocab * d, 1, m ? &m->tok_embd : NULL, &g);
    n->tok_embd_f32 = te;
    n->g_tok_embd = g;
    float *on = reserve(L, "output_norm.weight", d, 0, m ? &m->output_norm : NULL, &g);
    n->output_norm = on;
    n->g_output_norm = g;
    if (hp->tied_output) {
        n->output_f32 = te;
        n->g_output = n->g_tok_embd;
    } else {
        n->output_f32 = reserve(L, "output.weight", hp->n_vocab * d, 1, m ? &m->output : NULL, &g);
        n->g_output = g;
    }
    for (int64_t il = 0; il < hp->n_layer; il++) {
        struct net_layer *ly = &n->layers[il];
        const struct model_layer *ml = m ? &m->layers[il] : NULL;
        snprintf(name, sizeof name, "blk.%lld.attn_norm.weight", (long long)il);
        ly->attn_norm = reserve(L, name, d, 0, ml ? &ml->attn_norm : NULL, &ly->g_attn_norm);
        snprintf(name, sizeof name, "blk.%lld.ffn_norm.weight", (long long)il);
        ly->ffn_norm = reserve(L, name, d, 0, ml ? &ml->ffn_norm : NULL, &ly->g_ffn_norm);
        const struct weight *bw[LORA_N_TARGETS] = {0};
        const struct weight *ww[LORA_N_TARGETS] = {0};
        if (ml) {
            const struct weight *wl[LORA_N_TARGETS] = {&ml->wq,     &ml->wk,   &ml->wv,    &ml->wo,
                                                       &ml->w_gate, &ml->w_up, &ml->w_down};
            const struct weight *bl[4] = {&ml->bq, &ml->bk, &ml->bv, &ml->bo};
            for (int t = 0; t < LORA_N_TARGETS; t++)
                ww[t] = wl[t];
            for (int t = 0; t < 4; t++)
                bw[t] = bl[t]->data ? bl[t] : NULL;
        }
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            struct net_lin *l = &ly->lin[t];
            lora_target_dims(hp, (enum lora_target)t, &l->n_in, &l->n_out);
            snprintf(name, sizeof name, "blk.%lld.%s", (long long)il, lin_suffix[t]);
            l->w = reserve(L, name, l->n_in * l->n_out, 1, ww[t], &l->gw);
            const int has_bias =
                t < 4 && (m ? bw[t] != NULL : (t < 3 && hp->arch == MODEL_ARCH_QWEN2));
            if (has_bias) {
                snprintf(name, sizeof name, "blk.%lld.%s", (long long)il, bias_suffix[t]);
                l->b = reserve(L, name, l->n_out, 0, bw[t], &l->gb);
            }
        }
    }
}

static void full_alloc(struct train_net *n)
{
    struct layout L = {n, 0, 0};
    full_layout(&L);
    n->n_params = L.off;
    n->params = af_xcalloc(n->n_params, sizeof(float));
    n->grads = af_xcalloc(n->n_params, sizeof(float));
    n->plist = af_xcalloc(n->n_plist, sizeof *n->plist);
    n->pnames = af_xcalloc(n->n_plist, sizeof *n->pnames);
    L.pass = 1;
    L.off = 0;
    full_layout(&L);
}

static void lora_plist(struct train_net *n)
{
    const struct lora_adapter *a = n->lora;
    size_t cnt = 0;
    for (int64_t i = 0; i < a->n_layer * LORA_N_TARGETS; i++)
        cnt += a->pairs[i].a ? 2 : 0;
    n->plist = af_xcalloc(cnt ? cnt : 1, sizeof *n->plist);
    n->pnames = af_xcalloc(cnt ? cnt : 1, sizeof *n->pnames);
    for (int64_t i = 0; i < a->n_layer * LORA_N_TARGETS; i++) {
        const struct lora_pair *p = &a->pairs[i], *g = &n->glora->pairs[i];
        if (!p->a)
            continue;
        for (int side = 0; side < 2; side++) {
            char name[96];
            snprintf(name, sizeof name, "blk.%lld.%s.lora_%c", (long long)(i / LORA_N_TARGETS),
                     lora_target_peft_name((enum lora_target)(i % LORA_N_TARGETS)),
                     side ? 'B' : 'A');
            struct train_param *tp = &n->plist[n->n_plist];
            n->pnames[n->n_plist] = af_xstrdup(name);
            tp->name = n->pnames[n->n_plist];
            tp->w = side ? p->b : p->a;
            tp->g = side ? g->b : g->a;
            tp->n = a->rank * (side ? p->n_out : p->n_in);
            tp->decay = 1;
            n->n_plist++;
        }
    }
}

/* ---- activations ----------------------------------------------------------------------- */

static float *carve(float *base, size_t *off, int64_t cnt)
{
    float *p = base ? base + *off : NULL;
    *off += (size_t)cnt;
    return p;
}

static void acts_reserve(struct train_net *n, int64_t T)
{
    struct net_acts *a = &n->acts;
    if (a->block && a->T >= T)
        return;
    free(a->block);
    const struct model_hparams *hp = &n->hp;
    const int64_t L = hp->n_layer, d = hp->n_embd, ff = hp->n_ff;
    const int64_t qd = hp->n_head * hp->head_dim, kvd = hp->n_head_kv * hp->head_dim;
    const int64_t S = n->checkpoint ? 1 : L;
    const int64_t rank = n->lora ? n->lora->rank : 0;
    const int64_t wide = d > ff ? (d > qd ? d : qd) : (ff > qd ? ff : qd);
    a->T = T;
    a->slots = S;
    for (int pass = 0; pass < 2; pass++) {
        size_t off = 0;
        float *b = pass ? a->block : NULL;
        a->x = carve(b, &off, (L + 1) * T * d);
        a->xmid = carve(b, &off, S * T * d);
        a->xn1 = carve(b, &off, S * T * d);
        a->xn2 = carve(b, &off, S * T * d);
        a->rstd1 = carve(b, &off, S * T);
        a->rstd2 = carve(b, &off, S * T);
        a->q = carve(b, &off, S * T * qd);
        a->att = carve(b, &off, S * T * qd);
        a->k = carve(b, &off, S * T * kvd);
        a->v = carve(b, &off, S * T * kvd);
        a->lse = carve(b, &off, S * hp->n_head * T);
        a->gate = carve(b, &off, S * T * ff);
        a->up = carve(b, &off, S * T * ff);
        a->hff = carve(b, &off, S * T * ff);
        a->lora_h = carve(b, &off, S * LORA_N_TARGETS * T * rank);
        a->xnf = carve(b, &off, T * d);
        a->rstdf = carve(b, &off, T);
        a->cos_t = carve(b, &off, T * hp->n_rot / 2);
        a->sin_t = carve(b, &off, T * hp->n_rot / 2);
        a->tmp = carve(b, &off, T * wide);
        a->tmp2 = carve(b, &off, T * (wide + 2 * rank));
        if (!pass) {
            a->block = af_xmalloc(off * sizeof(float));
            a->floats = off;
        }
    }
}

/* ---- LoRA dropout ---------------------------------------------------------------------- */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* LoRA dropout: element i of (layer, target)'s input is kept, scaled by 1/(1-p), when its
 * hash is at least p. A counter-based draw, so the backward regenerates the mask unstored. */
static uint64_t dropout_key(const struct train_net *n, int64_t il, int t)
{
    return mix64(n->dropout_seed ^ ((uint64_t)(il * LORA_N_TARGETS + t) << 40));
}

static int dropout_keep(uint64_t key, int64_t i, float p)
{
    const double u = (double)(mix64(key + 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1)) >> 11) /
                     (double)(1ull << 53);
    return u >= (double)p;
}

/* out = mask ⊙ src / (1-p); with accumulate, out += that instead. */
static void dropout_apply(const struct train_net *n, int64_t il, int t, const float *src,
                          int64_t cnt, float *out, int accumulate)
{
    const float p = n->lora->dropout, keep = 1.0f / (1.0f - p);
    const uint64_t key = dropout_key(n, il, t);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < cnt; i++) {
        const float v = dropout_keep(key, i, p) ? src[i] * keep : 0.0f;
        if (accumulate)
            out[i] += v;
        else
            out[i] = v;
    }
}

/* ---- layer forward / backward ---------------------------------------------------------- */

/* out [T][n_out] = x·Wᵀ + b (+ the LoRA delta, whose hidden h [T][rank] is saved). */
static void lin_fwd(struct train_net *n, int64_t il, int t, const float *x, int64_t T, float *out,
                    float *h, int use_adapter)
{
    const struct net_lin *l = &n->layers[il].lin[t];
    train_gemm_nt(T, l->n_out, l->n_in, x, lin_w(n, l), out, 0);
    if (l->b)
        for (int64_t j = 0; j < T; j++)
            for (int64_t i = 0; i < l->n_out; i++)
                out[j * l->n_out + i] += l->b[i];
    const struct lora_pair *p = n->lora && use_adapter ? lora_pair_at(n->lora, il, t) : NULL;
    if (!p)
        return;
    const int64_t r = n->lora->rank;
    const float *xd = x;
    if (n->lora->dropout > 0) {
        dropout_apply(n, il, t, x, T * l->n_in, n->acts.tmp2, 0);
        xd = n->acts.tmp2;
    }
    train_gemm_nt(T, r, l->n_in, xd, p->a, h, 0);
    float *hs = n->acts.tmp2; /* xd is consumed */
    for (int64_t i = 0; i < T * r; i++)
        hs[i] = h[i] * n->lora->scale;
    train_gemm_nt(T, l->n_out, r, hs, p->b, out, 1);
}

/* Given dout [T][n_out]: dx [T][n_in] += ∂/∂x (NULL skips), and the trainable gradients. */
static void lin_bwd(struct train_net *n, int64_t il, int t, const float *dout, const float *x,
                    int64_t T, const float *h, float *dx)
{
    const struct net_lin *l = &n->layers[il].lin[t];
    if (l->w) {
        train_linear_bwd(dout, x, l->w, T, l->n_in, l->n_out, dx, l->gw, l->gb);
    } else if (dx) {
        train_gemm_nn(T, l->n_in, l->n_out, dout, lin_w(n, l), dx, 1);
    }
    const struct lora_pair *p = n->lora ? lora_pair_at(n->lora, il, t) : NULL;
    if (!p)
        return;
    const struct lora_pair *g = &n->glora->pairs[il * LORA_N_TARGETS + t];
    const int64_t r = n->lora->rank;
    const float s = n->lora->scale;
    float *dh = n->acts.tmp2, *hs = n->acts.tmp2 + T * r, *xd = n->acts.tmp2 + 2 * T * r;
    train_gemm_nn(T, r, l->n_out, dout, p->b, dh, 0);
    for (int64_t i = 0; i < T * r; i++) {
        dh[i] *= s;
        hs[i] = h[i] * s;
    }
    train_gemm_tn(l->n_out, r, T, dout, hs, g->b, 1);
    const float *xin = x;
    if (n->lora->dropout > 0) {
        dropout_apply(n, il, t, x, T * l->n_in, xd, 0);
        xin = xd;
    }
    train_gemm_tn(r, l->n_in, T, dh, xin, g->a, 1);
    if (!dx)
        return;
    if (n->lora->dropout > 0) {
        float *dxd = n->acts.tmp; /* free during the backward */
        train_gemm_nn(T, l->n_in, r, dh, p->a, dxd, 0);
        dropout_apply(n, il, t, dxd, T * l->n_in, dx, 1);
    } else {
        train_gemm_nn(T, l->n_in, r, dh, p->a, dx, 1);
    }
}

/* Pointers of one layer's activations (slot = layer, or 0 when checkpointing). */
struct slot {
    float *x0, *x1, *xmid, *xn1, *xn2, *rstd1, *rstd2, *q, *att, *k, *v, *lse, *gate, *up, *hff;
    float *h[LORA_N_TARGETS];
};

static struct slot slot_of(struct train_net *n, int64_t il)
{
    struct net_acts *a = &n->acts;
    const struct model_hparams *hp = &n->hp;
    const int64_t T = a->T, d = hp->n_embd, ff = hp->n_ff;
    const int64_t qd = hp->n_head * hp->head_dim, kvd = hp->n_head_kv * hp->head_dim;
    const int64_t s = n->checkpoint ? 0 : il, r = n->lora ? n->lora->rank : 0;
    struct slot o;
    o.x0 = a->x + il * T * d;
    o.x1 = a->x + (il + 1) * T * d;
    o.xmid = a->xmid + s * T * d;
    o.xn1 = a->xn1 + s * T * d;
    o.xn2 = a->xn2 + s * T * d;
    o.rstd1 = a->rstd1 + s * T;
    o.rstd2 = a->rstd2 + s * T;
    o.q = a->q + s * T * qd;
    o.att = a->att + s * T * qd;
    o.k = a->k + s * T * kvd;
    o.v = a->v + s * T * kvd;
    o.lse = a->lse + s * hp->n_head * T;
    o.gate = a->gate + s * T * ff;
    o.up = a->up + s * T * ff;
    o.hff = a->hff + s * T * ff;
    for (int t = 0; t < LORA_N_TARGETS; t++)
        o.h[t] = a->lora_h + ((s * LORA_N_TARGETS + t) * T) * r;
    return o;
}

static void layer_fwd(struct train_net *n, int64_t il, int64_t T, int use_adapter)
{
    const struct model_hparams *hp = &n->hp;
    const struct net_layer *ly = &n->layers[il];
    const int64_t d = hp->n_embd;
    struct slot s = slot_of(n, il);
    float *tmp = n->acts.tmp;
    train_rmsnorm_fwd(s.x0, ly->attn_norm, T, d, hp->rms_eps, s.xn1, s.rstd1);
    lin_fwd(n, il, LORA_Q, s.xn1, T, s.q, s.h[LORA_Q], use_adapter);
    lin_fwd(n, il, LORA_K, s.xn1, T, s.k, s.h[LORA_K], use_adapter);
    lin_fwd(n, il, LORA_V, s.xn1, T, s.v, s.h[LORA_V], use_adapter);
    train_rope_fwd(&n->rope, s.q, T, hp->n_head, n->acts.cos_t, n->acts.sin_t);
    train_rope_fwd(&n->rope, s.k, T, hp->n_head_kv, n->acts.cos_t, n->acts.sin_t);
    train_attn_fwd(&n->attn, s.q, s.k, s.v, T, s.att, s.lse);
    lin_fwd(n, il, LORA_O, s.att, T, tmp, s.h[LORA_O], use_adapter);
    memcpy(s.xmid, s.x0, (size_t)(T * d) * sizeof(float));
    train_add(s.xmid, tmp, T * d);
    train_rmsnorm_fwd(s.xmid, ly->ffn_norm, T, d, hp->rms_eps, s.xn2, s.rstd2);
    lin_fwd(n, il, LORA_GATE, s.xn2, T, s.gate, s.h[LORA_GATE], use_adapter);
    lin_fwd(n, il, LORA_UP, s.xn2, T, s.up, s.h[LORA_UP], use_adapter);
    train_swiglu_fwd(s.gate, s.up, T * hp->n_ff, s.hff);
    lin_fwd(n, il, LORA_DOWN, s.hff, T, tmp, s.h[LORA_DOWN], use_adapter);
    memcpy(s.x1, s.xmid, (size_t)(T * d) * sizeof(float));
    train_add(s.x1, tmp, T * d);
}

/* Backward scratch: the stream's gradient and one layer's intermediates. */
struct bwd {
    float *dx, *dxmid, *dxn, *dh, *dgate, *dup, *datt, *dq, *dk, *dv;
    float *block;
};

/* dx holds ∂loss/∂x[l+1] on entry and ∂loss/∂x[l] on return. need_dx0 = 0 skips the products
 * that only feed the input of layer 0 (frozen embeddings). */
static void layer_bwd(struct train_net *n, int64_t il, int64_t T, struct bwd *b, int need_dx0)
{
    const struct model_hparams *hp = &n->hp;
    const struct net_layer *ly = &n->layers[il];
    const int64_t d = hp->n_embd, ff = hp->n_ff;
    const int64_t qd = hp->n_head * hp->head_dim, kvd = hp->n_head_kv * hp->head_dim;
    const size_t bd = (size_t)(T * d) * sizeof(float), bf = (size_t)(T * ff) * sizeof(float);
    struct slot s = slot_of(n, il);
    memset(b->dh, 0, bf);
    lin_bwd(n, il, LORA_DOWN, b->dx, s.hff, T, s.h[LORA_DOWN], b->dh);
    memset(b->dgate, 0, bf);
    memset(b->dup, 0, bf);
    train_swiglu_bwd(b->dh, s.gate, s.up, T * ff, b->dgate, b->dup);
    memset(b->dxn, 0, bd);
    lin_bwd(n, il, LORA_GATE, b->dgate, s.xn2, T, s.h[LORA_GATE], b->dxn);
    lin_bwd(n, il, LORA_UP, b->dup, s.xn2, T, s.h[LORA_UP], b->dxn);
    memcpy(b->dxmid, b->dx, bd);
    train_rmsnorm_bwd(b->dxn, s.xmid, ly->ffn_norm, s.rstd2, T, d, b->dxmid, ly->g_ffn_norm);
    memset(b->datt, 0, (size_t)(T * qd) * sizeof(float));
    lin_bwd(n, il, LORA_O, b->dxmid, s.att, T, s.h[LORA_O], b->datt);
    memset(b->dq, 0, (size_t)(T * qd) * sizeof(float));
    memset(b->dk, 0, (size_t)(T * kvd) * sizeof(float));
    memset(b->dv, 0, (size_t)(T * kvd) * sizeof(float));
    train_attn_bwd(&n->attn, b->datt, s.q, s.k, s.v, s.att, s.lse, T, b->dq, b->dk, b->dv);
    train_rope_bwd(&n->rope, b->dq, T, hp->n_head, n->acts.cos_t, n->acts.sin_t);
    train_rope_bwd(&n->rope, b->dk, T, hp->n_head_kv, n->acts.cos_t, n->acts.sin_t);
    const int want_dxn = need_dx0 || il > 0 || ly->g_attn_norm;
    memset(b->dxn, 0, bd);
    float *dxn = want_dxn ? b->dxn : NULL;
    lin_bwd(n, il, LORA_Q, b->dq, s.xn1, T, s.h[LORA_Q], dxn);
    lin_bwd(n, il, LORA_K, b->dk, s.xn1, T, s.h[LORA_K], dxn);
    lin_bwd(n, il, LORA_V, b->dv, s.xn1, T, s.h[LORA_V], dxn);
    memcpy(b->dx, b->dxmid, bd);
    if (want_dxn)
        train_rmsnorm_bwd(b->dxn, s.x0, ly->attn_norm, s.rstd1, T, d, b->dx, ly->g_attn_norm);
}

/* ---- the whole model ------------------------------------------------------------------- */

static void embed(struct train_net *n, const int32_t *tokens, int64_t T, float *x)
{
    const int64_t d = n->hp.n_embd;
    if (n->tok_embd_f32) {
        train_embed_fwd(n->tok_embd_f32, d, tokens, T, x);
        return;
    }
    const struct weight *e = &n->m->tok_embd;
    for (int64_t j = 0; j < T; j++)
        quant_dequantize_row(e->type, (const char *)e->data + (size_t)tokens[j] * e->row_bytes,
                             x + j * d, d);
}

static int check_tokens(const struct train_net *n, const int32_t *tokens, int64_t T, char *err,
                        size_t errlen)
{
    if (T < 2) {
        af_errf(err, errlen, "training sequence of %lld tokens: at least 2 needed", (long long)T);
        return AF_EINVAL;
    }
    for (int64_t t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= n->hp.n_vocab) {
            af_errf(err, errlen, "token %lld (id %d) is outside the vocabulary of %lld",
                    (long long)t, tokens[t], (long long)n->hp.n_vocab);
            return AF_EINVAL;
        }
    return AF_OK;
}

static double run(struct train_net *n, const int32_t *tokens, int64_t T,
                  const struct train_xent_opts *xo, int backward, int use_adapter)
{
    const struct model_hparams *hp = &n->hp;
    const int64_t d = hp->n_embd, L = hp->n_layer;
    acts_reserve(n, T);
    struct net_acts *a = &n->acts;
    a->T = T; /* buffers may be larger; strides follow T */
    train_rope_tables(&n->rope, 0, T, a->cos_t, a->sin_t);
    embed(n, tokens, T, a->x);
    for (int64_t il = 0; il < L; il++)
        layer_fwd(n, il, T, use_adapter);
    train_rmsnorm_fwd(a->x + L * T * d, n->output_norm, T, d, hp->rms_eps, a->xnf, a->rstdf);
    if (!backward)
        return train_head_xent_ex(a->xnf, n->output_f32, T - 1, d, hp->n_vocab, tokens + 1, xo,
                                  n->head_chunk, NULL, NULL);
    const int64_t ff = hp->n_ff, qd = hp->n_head * hp->head_dim, kvd = hp->n_head_kv * hp->head_dim;
    struct bwd b = {0};
    const size_t need = (size_t)(T * (3 * d + 3 * ff + 2 * qd + 2 * kvd));
    if (a->bwd_floats < need) {
        free(a->bwd);
        a->bwd = af_xmalloc(need * sizeof(float));
        a->bwd_floats = need;
    }
    b.block = a->bwd;
    float *p = b.block;
    float **slots[] = {&b.dx,  &b.dxmid, &b.dxn, &b.dh, &b.dgate,
                       &b.dup, &b.datt,  &b.dq,  &b.dk, &b.dv};
    const int64_t widths[] = {d, d, d, ff, ff, ff, qd, qd, kvd, kvd};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
        *slots[i] = p;
        p += T * widths[i];
    }
    /* the head and the final norm add into these; every other slot is set before it is read */
    memset(b.dx, 0, (size_t)(T * d) * sizeof(float));
    memset(b.dxn, 0, (size_t)(T * d) * sizeof(float));
    const double loss = train_head_xent_ex(a->xnf, n->output_f32, T - 1, d, hp->n_vocab, tokens + 1,
                                           xo, n->head_chunk, b.dxn, n->g_output);
    train_rmsnorm_bwd(b.dxn, a->x + L * T * d, n->output_norm, a->rstdf, T, d, b.dx,
                      n->g_output_norm);
    for (int64_t il = L - 1; il >= 0; il--) {
        if (n->checkpoint)
            layer_fwd(n, il, T, use_adapter);
        layer_bwd(n, il, T, &b, n->g_tok_embd != NULL);
    }
    if (n->g_tok_embd)
        train_embed_bwd(b.dx, tokens, T, d, n->g_tok_embd);
    return loss;
}

struct train_net_seq_opts train_net_seq_default_opts(void)
{
    struct train_net_seq_opts o = {0};
    o.use_adapter = 1;
    o.temperature = 1.0f;
    return o;
}

int train_net_seq(struct train_net *n, const int32_t *tokens, int64_t T,
                  const struct train_net_seq_opts *o, double *loss, char *err, size_t errlen)
{
    int rc = check_tokens(n, tokens, T, err, errlen);
    if (rc)
        return rc;
    if (!o->use_adapter && n->full) {
        af_errf(err, errlen, "a fully trained net has no base model to score without it");
        return AF_EINVAL;
    }
    if (!(o->temperature > 0.0f) || !isfinite(o->temperature)) {
        af_errf(err, errlen, "temperature %g: must be a finite number > 0", (double)o->temperature);
        return AF_EINVAL;
    }
    if (!isfinite(o->freq_penalty)) {
        af_errf(err, errlen, "frequency penalty %g: must be a finite number",
                (double)o->freq_penalty);
        return AF_EINVAL;
    }
    if (o->backward && !o->use_adapter) {
        af_errf(err, errlen, "no gradients without the adapter: the base model is frozen");
        return AF_EINVAL;
    }
    struct train_xent_opts xo = train_xent_default_opts();
    xo.weights = o->weights;
    xo.wfn = o->wfn;
    xo.wuser = o->wuser;
    xo.inv_temp = o->temperature == 1.0f ? 1.0f : 1.0f / o->temperature;
    xo.t_begin = o->t_begin;
    xo.logp = o->logp;
    xo.entropy = o->entropy;
    xo.freq_penalty = o->freq_penalty;
    float *zero = NULL;
    if (!o->weights && !o->wfn) { /* no weights: score only */
        zero = af_xcalloc((size_t)(T - 1), sizeof *zero);
        xo.weights = zero;
    }
    const double l = run(n, tokens, T, &xo, o->backward, o->use_adapter);
    if (loss)
        *loss = l;
    free(zero);
    return AF_OK;
}

int train_net_loss(struct train_net *n, const int32_t *tokens, int64_t T, const float *weights,
                   int backward, double *loss, float *logp, char *err, size_t errlen)
{
    int rc = check_tokens(n, tokens, T, err, errlen);
    if (rc)
        return rc;
    float *w = NULL;
    if (!weights) {
        w = af_xmalloc((size_t)(T - 1) * sizeof *w);
        for (int64_t t = 0; t < T - 1; t++)
            w[t] = 1.0f / (float)(T - 1);
    }
    struct train_xent_opts xo = train_xent_default_opts();
    xo.weights = weights ? weights : w;
    xo.logp = logp;
    *loss = run(n, tokens, T, &xo, backward, 1);
    free(w);
    return AF_OK;
}

int train_net_logprobs(struct train_net *n, const int32_t *tokens, int64_t T, int use_adapter,
                       float *logp, char *err, size_t errlen)
{
    int rc = check_tokens(n, tokens, T, err, errlen);
    if (rc)
        return rc;
    if (!use_adapter && n->full) {
        af_errf(err, errlen, "a fully trained net has no base model to score without it");
        return AF_EINVAL;
    }
    float *w = af_xcalloc((size_t)(T - 1), sizeof *w);
    struct train_xent_opts xo = train_xent_default_opts();
    xo.weights = w;
    xo.logp = logp;
    (void)run(n, tokens, T, &xo, 0, use_adapter);
    free(w);
    return AF_OK;
}

/* ---- construction ---------------------------------------------------------------------- */

static int64_t widest_matrix(const struct model_hparams *hp)
{
    int64_t best = 0;
    for (int t = 0; t < LORA_N_TARGETS; t++) {
        int64_t a, b;
        lora_target_dims(hp, (enum lora_target)t, &a, &b);
        best = a * b > best ? a * b : best;
    }
    return best;
}

static void finish(struct train_net *n, int checkpoint, int64_t head_chunk)
{
    n->checkpoint = checkpoint;
    /* auto: as many rows as fit 4M logits (16 MiB, twice with the gradient), at least 64;
     * a byte vocabulary takes a whole sequence in one product, Qwen's 151,936 takes 64 rows */
    const int64_t fit = ((int64_t)4 << 20) / (n->hp.n_vocab > 0 ? n->hp.n_vocab : 1);
    n->head_chunk = head_chunk > 0 ? head_chunk : fit > 64 ? fit : 64;
    n->rope = net_rope(n);
    n->attn.n_head = n->hp.n_head;
    n->attn.n_head_kv = n->hp.n_head_kv;
    n->attn.head_dim = n->hp.head_dim;
}

int train_net_new(const struct model *m, const struct train_net_params *p, struct train_net **out,
                  char *err, size_t errlen)
{
    *out = NULL;
    const struct model_hparams *hp = &m->hp;
    if (!p->full && !p->lora) {
        af_errf(err, errlen, "train net: neither full training nor a LoRA adapter was given");
        return AF_EINVAL;
    }
    if (!p->full) {
        const struct lora_adapter *a = p->lora;
        if (a->n_layer != hp->n_layer) {
            af_errf(err, errlen, "LoRA adapter has %lld layers, the model %lld",
                    (long long)a->n_layer, (long long)hp->n_layer);
            return AF_EINVAL;
        }
        for (int64_t il = 0; il < a->n_layer; il++)
            for (int t = 0; t < LORA_N_TARGETS; t++) {
                const struct lora_pair *pr = lora_pair_at(a, il, (enum lora_target)t);
                int64_t ni, no;
                lora_target_dims(hp, (enum lora_target)t, &ni, &no);
                if (pr && (pr->n_in != ni || pr->n_out != no)) {
                    af_errf(err, errlen,
                            "LoRA adapter layer %lld %s is %lldx%lld, the model's %lldx%lld",
                            (long long)il, lora_target_peft_name((enum lora_target)t),
                            (long long)pr->n_out, (long long)pr->n_in, (long long)no,
                            (long long)ni);
                    return AF_EINVAL;
                }
            }
    }
    struct train_net *n = af_xcalloc(1, sizeof *n);
    n->m = m;
    n->hp = *hp;
    n->full = p->full;
    n->layers = af_xcalloc((size_t)hp->n_layer, sizeof *n->layers);
    if (p->full) {
        full_alloc(n);
    } else {
        n->lora = p->lora;
        n->glora = lora_new_like(p->lora);
        n->output_norm = as_f32(n, &m->output_norm);
        n->output_f32 = as_f32(n, &m->output);
        for (int64_t il = 0; il < hp->n_layer; il++) {
            const struct model_layer *ml = &m->layers[il];
            struct net_layer *ly = &n->layers[il];
            const struct weight *wl[LORA_N_TARGETS] = {&ml->wq,     &ml->wk,   &ml->wv,    &ml->wo,
                                                       &ml->w_gate, &ml->w_up, &ml->w_down};
            const struct weight *bl[4] = {&ml->bq, &ml->bk, &ml->bv, &ml->bo};
            ly->attn_norm = as_f32(n, &ml->attn_norm);
            ly->ffn_norm = as_f32(n, &ml->ffn_norm);
            for (int t = 0; t < LORA_N_TARGETS; t++) {
                ly->lin[t].base = wl[t];
                lora_target_dims(hp, (enum lora_target)t, &ly->lin[t].n_in, &ly->lin[t].n_out);
                if (t < 4)
                    ly->lin[t].b = as_f32(n, bl[t]);
            }
        }
        n->scratch_w = af_xmalloc((size_t)widest_matrix(hp) * sizeof(float));
        lora_plist(n);
    }
    finish(n, p->checkpoint, p->head_chunk);
    *out = n;
    return AF_OK;
}

static void fill_uniform(float *p, int64_t cnt, uint64_t *st, float scale, float bias)
{
    for (int64_t i = 0; i < cnt; i++) {
        const double u = (double)(mix64(*st += 0x9e3779b97f4a7c15ull) >> 11) / (double)(1ull << 53);
        p[i] = bias + scale * (float)(2.0 * u - 1.0);
    }
}

int train_net_new_random(const struct model_hparams *hp, uint64_t seed, float scale, int checkpoint,
                         struct train_net **out, char *err, size_t errlen)
{
    *out = NULL;
    if (hp->n_head <= 0 || hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv || hp->head_dim % 2 ||
        hp->n_rot > hp->head_dim || hp->n_rot % 2 || hp->n_vocab <= 0 || hp->n_layer <= 0) {
        af_errf(err, errlen,
                "train net: bad hyperparameters (heads %lld/%lld, head_dim %lld, "
                "n_rot %lld, vocab %lld, layers %lld)",
                (long long)hp->n_head, (long long)hp->n_head_kv, (long long)hp->head_dim,
                (long long)hp->n_rot, (long long)hp->n_vocab, (long long)hp->n_layer);
        return AF_EINVAL;
    }
    struct train_net *n = af_xcalloc(1, sizeof *n);
    n->hp = *hp;
    n->full = 1;
    n->layers = af_xcalloc((size_t)hp->n_layer, sizeof *n->layers);
    full_alloc(n);
    uint64_t st = seed;
    for (size_t i = 0; i < n->n_plist; i++) {
        const struct train_param *tp = &n->plist[i];
        const int norm = strstr(tp->name, "norm") != NULL;
        fill_uniform(tp->w, tp->n, &st, scale, norm ? 1.0f : 0.0f);
    }
    finish(n, checkpoint, 0);
    *out = n;
    return AF_OK;
}

void train_net_free(struct train_net *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->n_owned; i++)
        free(n->owned[i]);
    free(n->owned);
    for (size_t i = 0; i < n->n_plist; i++)
        free(n->pnames[i]);
    free(n->pnames);
    free(n->plist);
    free(n->params);
    free(n->grads);
    free(n->layers);
    free(n->scratch_w);
    free(n->acts.block);
    free(n->acts.bwd);
    lora_free(n->glora);
    free(n);
}

const struct train_param *train_net_params_list(const struct train_net *n, size_t *count)
{
    *count = n->n_plist;
    return n->plist;
}

const struct model_hparams *train_net_hparams(const struct train_net *n)
{
    return &n->hp;
}

void train_net_set_dropout_seed(struct train_net *n, uint64_t seed)
{
    n->dropout_seed = seed;
}

double train_net_flops(const struct train_net *n, int64_t T, int backward)
{
    const struct model_hparams *hp = &n->hp;
    double lin = 0;
    for (int t = 0; t < LORA_N_TARGETS; t++) {
        int64_t a, b;
        lora_target_dims(hp, (enum lora_target)t, &a, &b);
        lin += (double)a * (double)b;
    }
    /* 2 flops per multiply-add; attention over the causal half of the T x T scores */
    const double lin_f = 2.0 * (double)T * lin * (double)hp->n_layer;
    const double head_f = 2.0 * (double)T * (double)hp->n_vocab * (double)hp->n_embd;
    const double attn_f = 2.0 * 2.0 * (double)T * ((double)T / 2) *
                          (double)(hp->n_head * hp->head_dim) * (double)hp->n_layer;
    double lora_f = 0;
    if (n->lora)
        for (int64_t i = 0; i < n->lora->n_layer * LORA_N_TARGETS; i++)
            if (n->lora->pairs[i].a)
                lora_f += 2.0 * (double)T * (double)n->lora->rank *
                          (double)(n->lora->pairs[i].n_in + n->lora->pairs[i].n_out);
    const double fwd = lin_f + head_f + attn_f + lora_f;
    if (!backward)
        return fwd;
    /* backward: dX for every product, dW for trained weights (full mode), and the LoRA side
     * (3 products of its 2); attention recomputes P and runs 4 more products (5 of its 2) */
    const double wmul = n->full ? 2.0 : 1.0;
    const double bwd = (lin_f + head_f) * wmul + attn_f * 2.5 + lora_f * 1.5;
    return fwd + bwd + (n->checkpoint ? lin_f + attn_f + lora_f : 0);
}
