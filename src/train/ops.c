/*
 * ops.c - forward and backward of the elementwise and per-row training ops (see ops.h):
 * embedding, RMSNorm, linear (via train/gemm.h), RoPE, SwiGLU, residual, log-softmax with
 * cross-entropy and the chunked output head; then the tiny model composed from them, whose
 * forward saves every activation the backward reads. Attention is in ops_attn.c.
 */
#include "train/ops.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/errf.h"
#include "core/xalloc.h"
#include "train/gemm.h"
#include "train/scratch.h"
#include "train/vecmath.h"

/* Elementwise and per-row passes split rows (or elements) between the OpenMP threads when
 * there is enough work to pay for the fork; no pass reduces across threads, so the bits do not
 * depend on the thread count. */
#define PAR_MIN 16384

/* ---- Embedding -------------------------------------------------------------------------- */

void train_embed_fwd(const float *table, int64_t d, const int32_t *ids, int64_t T, float *out)
{
#pragma omp parallel for schedule(static) if (T * d >= PAR_MIN)
    for (int64_t t = 0; t < T; t++)
        memcpy(out + t * d, table + (int64_t)ids[t] * d, (size_t)d * sizeof *out);
}

void train_embed_bwd(const float *dout, const int32_t *ids, int64_t T, int64_t d, float *dtable)
{
    for (int64_t t = 0; t < T; t++) {
        float *row = dtable + (int64_t)ids[t] * d;
        for (int64_t i = 0; i < d; i++)
            row[i] += dout[t * d + i];
    }
}

/* ---- RMSNorm ---------------------------------------------------------------------------- */

void train_rmsnorm_fwd(const float *x, const float *g, int64_t T, int64_t n, float eps, float *y,
                       float *rstd)
{
#pragma omp parallel for schedule(static) if (T * n >= PAR_MIN)
    for (int64_t t = 0; t < T; t++) {
        const float *xr = x + t * n;
        float *yr = y + t * n;
        double sum = 0;
        for (int64_t i = 0; i < n; i++)
            sum += (double)(xr[i] * xr[i]);
        const float r = 1.0f / sqrtf((float)(sum / (double)n) + eps);
        rstd[t] = r;
        for (int64_t i = 0; i < n; i++)
            yr[i] = (xr[i] * r) * g[i];
    }
}

/* y_i = x_i r g_i with r = (mean(x²)+eps)^-1/2, ∂r/∂x_j = -r³ x_j / n, so
 * dx_j = r g_j dy_j - (r³/n) x_j Σ_i dy_i g_i x_i. */
void train_rmsnorm_bwd(const float *dy, const float *x, const float *g, const float *rstd,
                       int64_t T, int64_t n, float *dx, float *dg)
{
    if (dx) {
#pragma omp parallel for schedule(static) if (T * n >= PAR_MIN)
        for (int64_t t = 0; t < T; t++) {
            const float *xr = x + t * n, *dyr = dy + t * n;
            const float r = rstd[t];
            double dot = 0;
            for (int64_t i = 0; i < n; i++)
                dot += (double)(dyr[i] * g[i] * xr[i]);
            const float c = (float)(dot * (double)r * (double)r * (double)r / (double)n);
            for (int64_t i = 0; i < n; i++)
                dx[t * n + i] += r * g[i] * dyr[i] - c * xr[i];
        }
    }
    if (!dg)
        return;
#pragma omp parallel if (T * n >= PAR_MIN)
    { /* by columns, each summed over t in order as a single thread would */
        const int nt = omp_get_num_threads(), id = omp_get_thread_num();
        const int64_t per = (n + nt - 1) / nt, i0 = per * id, i1 = i0 + per < n ? i0 + per : n;
        for (int64_t t = 0; t < T; t++) {
            const float *xr = x + t * n, *dyr = dy + t * n;
            const float r = rstd[t];
            for (int64_t i = i0; i < i1; i++)
                dg[i] += dyr[i] * xr[i] * r;
        }
    }
}

/* ---- Linear ----------------------------------------------------------------------------- */

void train_linear_fwd(const float *x, const float *w, const float *b, int64_t T, int64_t n_in,
                      int64_t n_out, float *out)
{
    train_gemm_nt(T, n_out, n_in, x, w, out, 0);
    if (b)
        for (int64_t t = 0; t < T; t++)
            for (int64_t o = 0; o < n_out; o++)
                out[t * n_out + o] += b[o];
}

void train_linear_bwd(const float *dout, const float *x, const float *w, int64_t T, int64_t n_in,
                      int64_t n_out, float *dx, float *dw, float *db)
{
    if (dx)
        train_gemm_nn(T, n_in, n_out, dout, w, dx, 1);
    if (dw)
        train_gemm_tn(n_out, n_in, T, dout, x, dw, 1);
    if (db)
        for (int64_t t = 0; t < T; t++)
            for (int64_t o = 0; o < n_out; o++)
                db[o] += dout[t * n_out + o];
}

/* ---- RoPE ------------------------------------------------------------------------------- */

void train_rope_tables(const struct train_rope *r, int64_t pos0, int64_t T, float *cos_t,
                       float *sin_t)
{
    const int64_t half = r->n_rot / 2;
    const float theta_scale = powf(r->base, -2.0f / (float)r->n_rot);
    for (int64_t j = 0; j < T; j++) {
        float theta = (float)(pos0 + j);
        for (int64_t i = 0; i < half; i++) {
            const float ff = r->freq_factors ? r->freq_factors[i] : 1.0f;
            const float th = r->freq_scale * (theta / ff);
            cos_t[j * half + i] = cosf(th);
            sin_t[j * half + i] = sinf(th);
            theta *= theta_scale;
        }
    }
}

/* sign +1 rotates forward, -1 by the opposite angle (the transpose, i.e. the backward). */
static void rope_rotate(const struct train_rope *r, float *x, int64_t T, int64_t n_heads,
                        const float *cos_t, const float *sin_t, float sign)
{
    const int64_t half = r->n_rot / 2, hd = r->head_dim;
#pragma omp parallel for schedule(static) if (T * n_heads * hd >= PAR_MIN)
    for (int64_t j = 0; j < T; j++)
        for (int64_t h = 0; h < n_heads; h++) {
            float *v = x + (j * n_heads + h) * hd;
            const float *cs = cos_t + j * half, *sn = sin_t + j * half;
            for (int64_t i = 0; i < half; i++) {
                const int64_t a = r->neox ? i : 2 * i, b = r->neox ? i + half : 2 * i + 1;
                const float x0 = v[a], x1 = v[b], s = sign * sn[i];
                v[a] = x0 * cs[i] - x1 * s;
                v[b] = x0 * s + x1 * cs[i];
            }
        }
}

void train_rope_fwd(const struct train_rope *r, float *x, int64_t T, int64_t n_heads,
                    const float *cos_t, const float *sin_t)
{
    rope_rotate(r, x, T, n_heads, cos_t, sin_t, 1.0f);
}

void train_rope_bwd(const struct train_rope *r, float *dx, int64_t T, int64_t n_heads,
                    const float *cos_t, const float *sin_t)
{
    rope_rotate(r, dx, T, n_heads, cos_t, sin_t, -1.0f);
}

/* ---- SwiGLU, residual ------------------------------------------------------------------- */

/* In blocks of 4096 elements, so each thread's run stays vector-wide. */
#define SWIGLU_BLOCK 4096

void train_swiglu_fwd(const float *gate, const float *up, int64_t n, float *out)
{
    const int64_t nb = (n + SWIGLU_BLOCK - 1) / SWIGLU_BLOCK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t b = 0; b < nb; b++) {
        const int64_t i = b * SWIGLU_BLOCK, len = n - i < SWIGLU_BLOCK ? n - i : SWIGLU_BLOCK;
        train_vec_swiglu_fwd(gate + i, up + i, len, out + i);
    }
}

void train_swiglu_bwd(const float *dout, const float *gate, const float *up, int64_t n,
                      float *dgate, float *dup)
{
    const int64_t nb = (n + SWIGLU_BLOCK - 1) / SWIGLU_BLOCK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t b = 0; b < nb; b++) {
        const int64_t i = b * SWIGLU_BLOCK, len = n - i < SWIGLU_BLOCK ? n - i : SWIGLU_BLOCK;
        train_vec_swiglu_bwd(dout + i, gate + i, up + i, len, dgate ? dgate + i : NULL,
                             dup ? dup + i : NULL);
    }
}

void train_add(float *y, const float *x, int64_t n)
{
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
}

/* ---- Log-softmax, cross-entropy --------------------------------------------------------- */

/* max and log Σ exp(row - max), in double. */
static double row_lse(const float *row, int64_t V, float *mx_out)
{
    float mx = -INFINITY;
    for (int64_t i = 0; i < V; i++)
        mx = row[i] > mx ? row[i] : mx;
    double sum = 0;
    for (int64_t i = 0; i < V; i++)
        sum += exp((double)(row[i] - mx));
    *mx_out = mx;
    return sum > 0 ? log(sum) : -(double)INFINITY; /* sum >= 1 unless V == 0 */
}

void train_token_logprobs(const float *logits, int64_t T, int64_t V, const int32_t *targets,
                          float *logp)
{
    for (int64_t t = 0; t < T; t++) {
        float mx;
        const double lse = row_lse(logits + t * V, V, &mx);
        logp[t] = (float)((double)(logits[t * V + targets[t]] - mx) - lse);
    }
}

/* The frequency penalty of global row tg: gt is the whole sequence's targets, the reply's
 * rows start at `from`. Counts are formed the sampler's way, (float)count x penalty in one
 * subtraction per token id. Quadratic in the reply's length, which is at most a few hundred. */
static void penalise(float *row, const int32_t *gt, int64_t from, int64_t tg, float fp)
{
    for (int64_t k = from; k < tg; k++) {
        const int32_t id = gt[k];
        int seen = 0;
        for (int64_t j = from; j < k && !seen; j++)
            seen = gt[j] == id;
        if (seen)
            continue;
        int32_t c = 1;
        for (int64_t j = k + 1; j < tg; j++)
            c += gt[j] == id;
        row[id] -= (float)c * fp;
    }
}

/* The rows [0, T) of one chunk; row t is row t0 + t of the caller's arrays (targets are the
 * chunk's own). Logits are scaled by inv_temp in place first, so at inv_temp 1 the bits are
 * those of the plain log-softmax. */
static double xent_rows(float *logits, int64_t T, int64_t V, const int32_t *targets,
                        const struct train_xent_opts *o, int64_t t0, float *dlogits)
{
    const float it = o->inv_temp;
    double *row_loss = train_scratch(TRAIN_SCRATCH_XENT, (size_t)(2 * T));
#pragma omp parallel for schedule(static) if (T * V >= PAR_MIN)
    for (int64_t t = 0; t < T; t++) {
        float *row = logits + t * V;
        const int64_t tg = t0 + t;
        row_loss[t] = 0;
        float w = o->wfn ? 0.0f : o->weights ? o->weights[tg] : 1.0f;
        if (!o->wfn && w == 0.0f && !o->logp && !o->entropy) {
            if (dlogits)
                memset(dlogits + t * V, 0, (size_t)V * sizeof *dlogits);
            continue;
        }
        if (o->freq_penalty != 0.0f)
            penalise(row, targets - t0, o->t_begin > 0 ? o->t_begin : 0, tg, o->freq_penalty);
        if (it != 1.0f)
            for (int64_t i = 0; i < V; i++)
                row[i] *= it;
        float mx;
        const double lse = row_lse(row, V, &mx);
        const double lp = (double)(row[targets[t]] - mx) - lse;
        if (o->logp)
            o->logp[tg] = (float)lp;
        if (o->wfn)
            w = o->wfn(o->wuser, tg, (float)lp);
        row_loss[t] = (double)w * lp;
        if (o->entropy) { /* H = lse - Σ p (z - mx) */
            double pz = 0;
            for (int64_t i = 0; i < V; i++) {
                const double zi = (double)(row[i] - mx);
                pz += exp(zi - lse) * zi;
            }
            o->entropy[tg] = (float)(lse - pz);
        }
        if (!dlogits)
            continue;
        /* ∂/∂logits = inv_temp · ∂/∂z */
        const float wd = w * it;
        float *dr = dlogits + t * V;
        if (w == 0.0f) {
            memset(dr, 0, (size_t)V * sizeof *dr);
            continue;
        }
        for (int64_t i = 0; i < V; i++)
            dr[i] = wd * (float)exp((double)(row[i] - mx) - lse);
        dr[targets[t]] -= wd;
    }
    double loss = 0;
    for (int64_t t = 0; t < T; t++)
        loss -= row_loss[t];
    return loss;
}

struct train_xent_opts train_xent_default_opts(void)
{
    struct train_xent_opts o = {0};
    o.inv_temp = 1.0f;
    return o;
}

double train_xent_fwd_bwd(const float *logits, int64_t T, int64_t V, const int32_t *targets,
                          const float *weights, float *dlogits, float *logp)
{
    struct train_xent_opts o = train_xent_default_opts();
    o.weights = weights;
    o.logp = logp;
    /* inv_temp 1 leaves the logits untouched */
    return xent_rows((float *)(uintptr_t)logits, T, V, targets, &o, 0, dlogits);
}

double train_head_xent_ex(const float *xn, const float *w, int64_t T, int64_t d, int64_t V,
                          const int32_t *targets, const struct train_xent_opts *o, int64_t chunk,
                          float *dxn, float *dw)
{
    const int64_t tb = o->t_begin > 0 ? (o->t_begin < T ? o->t_begin : T) : 0;
    if (chunk <= 0 || chunk > T - tb)
        chunk = T - tb > 0 ? T - tb : 1;
    float *logits = train_scratch(TRAIN_SCRATCH_HEAD, (size_t)(2 * chunk * V));
    float *dlog = (dxn || dw) ? logits + chunk * V : NULL;
    double loss = 0;
    for (int64_t t0 = tb; t0 < T; t0 += chunk) {
        const int64_t n = T - t0 < chunk ? T - t0 : chunk;
        train_gemm_nt(n, V, d, xn + t0 * d, w, logits, 0);
        loss += xent_rows(logits, n, V, targets + t0, o, t0, dlog);
        if (dxn)
            train_gemm_nn(n, d, V, dlog, w, dxn + t0 * d, 1);
        if (dw)
            train_gemm_tn(V, d, n, dlog, xn + t0 * d, dw, 1);
    }
    return loss;
}

double train_head_xent(const float *xn, const float *w, int64_t T, int64_t d, int64_t V,
                       const int32_t *targets, const float *weights, int64_t chunk, float *dxn,
                       float *dw, float *logp)
{
    struct train_xent_opts o = train_xent_default_opts();
    o.weights = weights;
    o.logp = logp;
    return train_head_xent_ex(xn, w, T, d, V, targets, &o, chunk, dxn, dw);
}

/* ---- The tiny model --------------------------------------------------------------------- */

/* Hands out n floats of the block at *off (a NULL base only counts). */
static float *carve(float *base, size_t *off, int64_t n)
{
    float *p = base ? base + *off : NULL;
    *off += (size_t)n;
    return p;
}

static size_t tiny_layout(struct train_tiny *m, float *base)
{
    const struct train_tiny_cfg *c = &m->cfg;
    const int64_t d = c->d_model, qd = c->n_head * c->head_dim, kvd = c->n_head_kv * c->head_dim;
    size_t off = 0;
    m->tok_embd = carve(base, &off, c->n_vocab * d);
    m->output_norm = carve(base, &off, d);
    m->output = c->tied_output ? m->tok_embd : carve(base, &off, c->n_vocab * d);
    for (int64_t l = 0; l < c->n_layer; l++) {
        struct train_tiny_layer *ly = &m->layers[l];
        ly->attn_norm = carve(base, &off, d);
        ly->wq = carve(base, &off, qd * d);
        ly->wk = carve(base, &off, kvd * d);
        ly->wv = carve(base, &off, kvd * d);
        ly->bq = c->qkv_bias ? carve(base, &off, qd) : NULL;
        ly->bk = c->qkv_bias ? carve(base, &off, kvd) : NULL;
        ly->bv = c->qkv_bias ? carve(base, &off, kvd) : NULL;
        ly->wo = carve(base, &off, d * qd);
        ly->ffn_norm = carve(base, &off, d);
        ly->w_gate = carve(base, &off, c->n_ff * d);
        ly->w_up = carve(base, &off, c->n_ff * d);
        ly->w_down = carve(base, &off, d * c->n_ff);
    }
    return off;
}

int train_tiny_new(const struct train_tiny_cfg *cfg, struct train_tiny **out, char *err,
                   size_t errlen)
{
    *out = NULL;
    if (cfg->n_vocab <= 0 || cfg->d_model <= 0 || cfg->n_layer <= 0 || cfg->n_ff <= 0) {
        af_errf(err, errlen, "train_tiny_cfg: n_vocab, d_model, n_layer and n_ff must be > 0");
        return AF_EINVAL;
    }
    if (cfg->n_head <= 0 || cfg->n_head_kv <= 0 || cfg->n_head % cfg->n_head_kv) {
        af_errf(err, errlen, "train_tiny_cfg: n_head %lld is not a multiple of n_head_kv %lld",
                (long long)cfg->n_head, (long long)cfg->n_head_kv);
        return AF_EINVAL;
    }
    if (cfg->head_dim <= 0 || cfg->head_dim % 2) {
        af_errf(err, errlen, "train_tiny_cfg: head_dim %lld must be even and > 0",
                (long long)cfg->head_dim);
        return AF_EINVAL;
    }
    struct train_tiny *m = af_xcalloc(1, sizeof *m);
    m->cfg = *cfg;
    m->layers = af_xcalloc((size_t)cfg->n_layer, sizeof *m->layers);
    m->n_params = tiny_layout(m, NULL);
    m->params = af_xcalloc(m->n_params, sizeof *m->params);
    tiny_layout(m, m->params);
    *out = m;
    return AF_OK;
}

void train_tiny_free(struct train_tiny *m)
{
    if (!m)
        return;
    free(m->params);
    free(m->layers);
    free(m);
}

static void fill_uniform(float *p, int64_t n, uint64_t *st, float scale, float bias)
{
    for (int64_t i = 0; i < n; i++) {
        *st = *st * 6364136223846793005ull + 1442695040888963407ull;
        const float u = (float)((double)(*st >> 40) / (double)(1ull << 24)); /* [0, 1) */
        p[i] = bias + scale * (2.0f * u - 1.0f);
    }
}

void train_tiny_init_random(struct train_tiny *m, uint64_t seed, float scale)
{
    const struct train_tiny_cfg *c = &m->cfg;
    uint64_t st = seed * 2654435761u + 1;
    fill_uniform(m->params, (int64_t)m->n_params, &st, scale, 0.0f);
    fill_uniform(m->output_norm, c->d_model, &st, scale, 1.0f);
    for (int64_t l = 0; l < c->n_layer; l++) {
        fill_uniform(m->layers[l].attn_norm, c->d_model, &st, scale, 1.0f);
        fill_uniform(m->layers[l].ffn_norm, c->d_model, &st, scale, 1.0f);
    }
}

/* Saved activations of one forward, all in one block; [L] = per layer. */
struct tiny_acts {
    float *x;               /* [L+1][T][d] residual stream entering each layer; x[L] the last */
    float *xmid;            /* [L][T][d] after the attention residual */
    float *xn1, *xn2;       /* [L][T][d] */
    float *rstd1, *rstd2;   /* [L][T] */
    float *q, *att;         /* [L][T][qd] (q after RoPE) */
    float *k, *v;           /* [L][T][kvd] (k after RoPE) */
    float *lse;             /* [L][n_head][T] */
    float *gate, *up, *hff; /* [L][T][ff] */
    float *xnf, *rstdf;     /* [T][d], [T] */
    float *cos_t, *sin_t;   /* [T][hd/2] */
    float *tmp;             /* [T][max(d, ff, qd)] */
    float *block;
};

static void tiny_acts_alloc(struct tiny_acts *a, const struct train_tiny_cfg *c, int64_t T)
{
    const int64_t L = c->n_layer, d = c->d_model, ff = c->n_ff;
    const int64_t qd = c->n_head * c->head_dim, kvd = c->n_head_kv * c->head_dim;
    const int64_t wide = d > ff ? (d > qd ? d : qd) : (ff > qd ? ff : qd);
    for (int pass = 0; pass < 2; pass++) {
        size_t off = 0;
        float *b = pass ? a->block : NULL;
        a->x = carve(b, &off, (L + 1) * T * d);
        a->xmid = carve(b, &off, L * T * d);
        a->xn1 = carve(b, &off, L * T * d);
        a->xn2 = carve(b, &off, L * T * d);
        a->rstd1 = carve(b, &off, L * T);
        a->rstd2 = carve(b, &off, L * T);
        a->q = carve(b, &off, L * T * qd);
        a->att = carve(b, &off, L * T * qd);
        a->k = carve(b, &off, L * T * kvd);
        a->v = carve(b, &off, L * T * kvd);
        a->lse = carve(b, &off, L * c->n_head * T);
        a->gate = carve(b, &off, L * T * ff);
        a->up = carve(b, &off, L * T * ff);
        a->hff = carve(b, &off, L * T * ff);
        a->xnf = carve(b, &off, T * d);
        a->rstdf = carve(b, &off, T);
        a->cos_t = carve(b, &off, T * c->head_dim / 2);
        a->sin_t = carve(b, &off, T * c->head_dim / 2);
        a->tmp = carve(b, &off, T * wide);
        if (!pass)
            a->block = af_xmalloc(off * sizeof(float));
    }
}

static struct train_rope tiny_rope(const struct train_tiny_cfg *c)
{
    const struct train_rope r = {c->head_dim, c->head_dim, c->rope_base, 1.0f, NULL, c->rope_neox};
    return r;
}

static void tiny_layer_fwd(const struct train_tiny *m, struct tiny_acts *a, int64_t l, int64_t T)
{
    const struct train_tiny_cfg *c = &m->cfg;
    const struct train_tiny_layer *ly = &m->layers[l];
    const int64_t d = c->d_model, ff = c->n_ff;
    const int64_t qd = c->n_head * c->head_dim, kvd = c->n_head_kv * c->head_dim;
    const struct train_rope rope = tiny_rope(c);
    const struct train_attn at = {c->n_head, c->n_head_kv, c->head_dim};
    const float *x0 = a->x + l * T * d;
    float *xn1 = a->xn1 + l * T * d, *q = a->q + l * T * qd, *k = a->k + l * T * kvd;
    float *v = a->v + l * T * kvd, *att = a->att + l * T * qd, *xmid = a->xmid + l * T * d;
    float *xn2 = a->xn2 + l * T * d, *gate = a->gate + l * T * ff, *up = a->up + l * T * ff;
    float *hff = a->hff + l * T * ff, *x1 = a->x + (l + 1) * T * d;
    train_rmsnorm_fwd(x0, ly->attn_norm, T, d, c->rms_eps, xn1, a->rstd1 + l * T);
    train_linear_fwd(xn1, ly->wq, ly->bq, T, d, qd, q);
    train_linear_fwd(xn1, ly->wk, ly->bk, T, d, kvd, k);
    train_linear_fwd(xn1, ly->wv, ly->bv, T, d, kvd, v);
    train_rope_fwd(&rope, q, T, c->n_head, a->cos_t, a->sin_t);
    train_rope_fwd(&rope, k, T, c->n_head_kv, a->cos_t, a->sin_t);
    train_attn_fwd(&at, q, k, v, T, att, a->lse + l * c->n_head * T);
    train_linear_fwd(att, ly->wo, NULL, T, qd, d, a->tmp);
    memcpy(xmid, x0, (size_t)(T * d) * sizeof *xmid);
    train_add(xmid, a->tmp, T * d);
    train_rmsnorm_fwd(xmid, ly->ffn_norm, T, d, c->rms_eps, xn2, a->rstd2 + l * T);
    train_linear_fwd(xn2, ly->w_gate, NULL, T, d, ff, gate);
    train_linear_fwd(xn2, ly->w_up, NULL, T, d, ff, up);
    train_swiglu_fwd(gate, up, T * ff, hff);
    train_linear_fwd(hff, ly->w_down, NULL, T, ff, d, a->tmp);
    memcpy(x1, xmid, (size_t)(T * d) * sizeof *x1);
    train_add(x1, a->tmp, T * d);
}

/* Backward scratch: gradients of the stream and of one layer's intermediates. */
struct tiny_grads {
    float *dx, *dxmid, *dxn; /* [T][d] */
    float *dh, *dgate, *dup; /* [T][ff] */
    float *datt, *dq;        /* [T][qd] */
    float *dk, *dv;          /* [T][kvd] */
    float *block;
};

/* dx holds ∂loss/∂x[l+1] on entry and ∂loss/∂x[l] on return. */
static void tiny_layer_bwd(const struct train_tiny *m, const struct tiny_acts *a, int64_t l,
                           int64_t T, struct tiny_grads *s, struct train_tiny_layer *gl)
{
    const struct train_tiny_cfg *c = &m->cfg;
    const struct train_tiny_layer *ly = &m->layers[l];
    const int64_t d = c->d_model, ff = c->n_ff;
    const int64_t qd = c->n_head * c->head_dim, kvd = c->n_head_kv * c->head_dim;
    const struct train_rope rope = tiny_rope(c);
    const struct train_attn at = {c->n_head, c->n_head_kv, c->head_dim};
    const size_t bd = (size_t)(T * d) * sizeof(float), bf = (size_t)(T * ff) * sizeof(float);
    const float *xn2 = a->xn2 + l * T * d, *xn1 = a->xn1 + l * T * d;
    memset(s->dh, 0, bf);
    train_linear_bwd(s->dx, a->hff + l * T * ff, ly->w_down, T, ff, d, s->dh, gl->w_down, NULL);
    memset(s->dgate, 0, bf);
    memset(s->dup, 0, bf);
    train_swiglu_bwd(s->dh, a->gate + l * T * ff, a->up + l * T * ff, T * ff, s->dgate, s->dup);
    memset(s->dxn, 0, bd);
    train_linear_bwd(s->dgate, xn2, ly->w_gate, T, d, ff, s->dxn, gl->w_gate, NULL);
    train_linear_bwd(s->dup, xn2, ly->w_up, T, d, ff, s->dxn, gl->w_up, NULL);
    memcpy(s->dxmid, s->dx, bd);
    train_rmsnorm_bwd(s->dxn, a->xmid + l * T * d, ly->ffn_norm, a->rstd2 + l * T, T, d, s->dxmid,
                      gl->ffn_norm);
    memset(s->datt, 0, (size_t)(T * qd) * sizeof(float));
    train_linear_bwd(s->dxmid, a->att + l * T * qd, ly->wo, T, qd, d, s->datt, gl->wo, NULL);
    memset(s->dq, 0, (size_t)(T * qd) * sizeof(float));
    memset(s->dk, 0, (size_t)(T * kvd) * sizeof(float));
    memset(s->dv, 0, (size_t)(T * kvd) * sizeof(float));
    train_attn_bwd(&at, s->datt, a->q + l * T * qd, a->k + l * T * kvd, a->v + l * T * kvd,
                   a->att + l * T * qd, a->lse + l * c->n_head * T, T, s->dq, s->dk, s->dv);
    train_rope_bwd(&rope, s->dq, T, c->n_head, a->cos_t, a->sin_t);
    train_rope_bwd(&rope, s->dk, T, c->n_head_kv, a->cos_t, a->sin_t);
    memset(s->dxn, 0, bd);
    train_linear_bwd(s->dq, xn1, ly->wq, T, d, qd, s->dxn, gl->wq, gl->bq);
    train_linear_bwd(s->dk, xn1, ly->wk, T, d, kvd, s->dxn, gl->wk, gl->bk);
    train_linear_bwd(s->dv, xn1, ly->wv, T, d, kvd, s->dxn, gl->wv, gl->bv);
    memcpy(s->dx, s->dxmid, bd);
    train_rmsnorm_bwd(s->dxn, a->x + l * T * d, ly->attn_norm, a->rstd1 + l * T, T, d, s->dx,
                      gl->attn_norm);
}

static double tiny_backward(const struct train_tiny *m, const struct tiny_acts *a,
                            const int32_t *tokens, int64_t T, const float *w, struct train_tiny *g)
{
    const struct train_tiny_cfg *c = &m->cfg;
    const int64_t d = c->d_model, ff = c->n_ff;
    const int64_t qd = c->n_head * c->head_dim, kvd = c->n_head_kv * c->head_dim;
    struct tiny_grads s = {0};
    s.block = af_xcalloc((size_t)(T * (3 * d + 3 * ff + 2 * qd + 2 * kvd)), sizeof(float));
    float *p = s.block;
    float **slots[] = {&s.dx,  &s.dxmid, &s.dxn, &s.dh, &s.dgate,
                       &s.dup, &s.datt,  &s.dq,  &s.dk, &s.dv};
    const int64_t widths[] = {d, d, d, ff, ff, ff, qd, qd, kvd, kvd};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
        *slots[i] = p;
        p += T * widths[i];
    }
    /* the head: dxn (the final norm's output) and the output matrix */
    const double loss = train_head_xent(a->xnf, m->output, T - 1, d, c->n_vocab, tokens + 1, w, 0,
                                        s.dxn, g->output, NULL);
    train_rmsnorm_bwd(s.dxn, a->x + c->n_layer * T * d, m->output_norm, a->rstdf, T, d, s.dx,
                      g->output_norm);
    for (int64_t l = c->n_layer - 1; l >= 0; l--)
        tiny_layer_bwd(m, a, l, T, &s, &g->layers[l]);
    train_embed_bwd(s.dx, tokens, T, d, g->tok_embd);
    free(s.block);
    return loss;
}

int train_tiny_loss(const struct train_tiny *m, const int32_t *tokens, int64_t T,
                    const float *weights, struct train_tiny *grads, float *logits_out, double *loss,
                    char *err, size_t errlen)
{
    const struct train_tiny_cfg *c = &m->cfg;
    const int64_t d = c->d_model;
    if (T < 2) {
        af_errf(err, errlen, "train_tiny_loss: %lld tokens, at least 2 needed", (long long)T);
        return AF_EINVAL;
    }
    for (int64_t t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= c->n_vocab) {
            af_errf(err, errlen,
                    "train_tiny_loss: token %lld (id %d) is outside the vocabulary"
                    " of %lld",
                    (long long)t, tokens[t], (long long)c->n_vocab);
            return AF_EINVAL;
        }
    float *w = af_xmalloc((size_t)(T - 1) * sizeof *w);
    for (int64_t t = 0; t < T - 1; t++)
        w[t] = weights ? weights[t] : 1.0f / (float)(T - 1);
    struct tiny_acts a = {0};
    tiny_acts_alloc(&a, c, T);
    const struct train_rope rope = tiny_rope(c);
    train_rope_tables(&rope, 0, T, a.cos_t, a.sin_t);
    train_embed_fwd(m->tok_embd, d, tokens, T, a.x);
    for (int64_t l = 0; l < c->n_layer; l++)
        tiny_layer_fwd(m, &a, l, T);
    train_rmsnorm_fwd(a.x + c->n_layer * T * d, m->output_norm, T, d, c->rms_eps, a.xnf, a.rstdf);
    if (logits_out)
        train_gemm_nt(T, c->n_vocab, d, a.xnf, m->output, logits_out, 0);
    if (grads)
        *loss = tiny_backward(m, &a, tokens, T, w, grads);
    else
        *loss = train_head_xent(a.xnf, m->output, T - 1, d, c->n_vocab, tokens + 1, w, 0, NULL,
                                NULL, NULL);
    free(a.block);
    free(w);
    return AF_OK;
}
