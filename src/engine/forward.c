/*
 * forward.c - the inference forward pass (see forward.h), written to follow llama.cpp's
 * arithmetic closely: RMSNorm sums in double, RoPE angles advanced in float as ggml does,
 * activations rounded to each weight's vec-dot type (quant.h) before the matmul, an F32 KV
 * cache in blocks (kv_pool.h), and softmax with the running max subtracted.
 *
 * Shapes (per micro-batch of nb tokens): x, xn [nb][n_embd]; q [nb][n_head*hd];
 * k, v [nb][n_head_kv*hd]; att [nb][n_head*hd]; gate, up [nb][n_ff]; logits [rows][n_vocab].
 */
#include "engine/forward.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/errf.h"
#include "core/xalloc.h"
#include "engine/lora.h"
#include "engine/quant.h"
#include "engine/tpool.h"

#define UBATCH 256
#define MM_MAX 3           /* weights that one matmul_n call runs together (q, k, v) */
#define MM_PARTS 16        /* threads with a share of their own in a matmul (the rest help) */
#define MM_MIN_BYTES 65536 /* weight bytes x rows of input, at the least, per chunk */
/* Positions attention scores per kernel call (a multiple of KV_BLOCK). */
#define ATT_KEY_BLOCK 512
#define ATT_V_SPAN 64 /* value rows summed per axpy_rows call (a stack array of pointers) */
#define ATT_Q_ROWS 16 /* query heads of a kv head scored per call */

struct fwd_ctx {
    const struct model *m;
    int64_t max_ctx;
    int n_threads;
    struct tpool *pool; /* shared (tpool_shared); NULL for one thread */
    float *x, *xn, *q, *k, *v, *att, *gate, *up, *rope_cos, *rope_sin;
    float *scores; /* [n_threads][group][max_ctx] */
    void *qbuf;    /* prepared activations: UBATCH rows of the widest input */
    size_t qbuf_row;
    const struct lora_adapter *lora; /* borrowed; NULL = none */
    float *lora_tmp;                 /* [UBATCH][rank] */
    int invariant;                   /* one-row products take the multi-row arithmetic */
    struct kv_seq **row_seq;         /* [UBATCH]: the sequence and position of each row */
    int64_t *row_pos;
    float *pad_out; /* [MM_MAX][2][widest output] for those */
    int64_t pad_widest;
};

/* ---- Context -------------------------------------------------------------------------- */

static size_t widest_act_row(const struct model *m)
{
    const struct model_hparams *hp = &m->hp;
    int64_t widest = hp->n_embd > hp->n_ff ? hp->n_embd : hp->n_ff;
    if (hp->n_head * hp->head_dim > widest)
        widest = hp->n_head * hp->head_dim;
    /* F32 is the widest vec-dot type: 4 bytes per element bounds every prepared row. */
    return (size_t)widest * sizeof(float) + 64;
}

struct fwd_ctx *fwd_ctx_new(const struct model *m, int64_t max_ctx, int n_threads)
{
    const struct model_hparams *hp = &m->hp;
    struct fwd_ctx *c = af_xcalloc(1, sizeof *c);
    c->m = m;
    c->max_ctx = max_ctx > 0 ? max_ctx : hp->n_ctx_train;
    fwd_ctx_set_threads(c, n_threads);
    int64_t qd = hp->n_head * hp->head_dim, kvd = hp->n_head_kv * hp->head_dim;
    size_t nb = UBATCH;
    c->x = af_xmalloc(nb * (size_t)hp->n_embd * sizeof(float));
    c->xn = af_xmalloc(nb * (size_t)(hp->n_embd > qd ? hp->n_embd : qd) * sizeof(float));
    c->q = af_xmalloc(nb * (size_t)qd * sizeof(float));
    c->k = af_xmalloc(nb * (size_t)kvd * sizeof(float));
    c->v = af_xmalloc(nb * (size_t)kvd * sizeof(float));
    c->att = af_xmalloc(nb * (size_t)qd * sizeof(float));
    c->gate = af_xmalloc(nb * (size_t)hp->n_ff * sizeof(float));
    c->up = af_xmalloc(nb * (size_t)hp->n_ff * sizeof(float));
    c->rope_cos = af_xmalloc(nb * (size_t)hp->n_rot / 2 * sizeof(float));
    c->rope_sin = af_xmalloc(nb * (size_t)hp->n_rot / 2 * sizeof(float));
    c->qbuf_row = widest_act_row(m);
    c->qbuf = af_xmalloc(nb * c->qbuf_row);
    c->row_seq = af_xcalloc(nb, sizeof *c->row_seq);
    c->row_pos = af_xcalloc(nb, sizeof *c->row_pos);
    return c;
}

int fwd_ctx_threads(const struct fwd_ctx *c)
{
    return c->n_threads;
}

void fwd_ctx_run(struct fwd_ctx *c, int nth, void (*fn)(void *arg, int tid, int nth), void *arg)
{
    tpool_run(c->pool, nth, fn, arg);
}

void fwd_ctx_set_threads(struct fwd_ctx *c, int n_threads)
{
    c->n_threads = n_threads > 0 ? n_threads : omp_get_num_procs();
    c->pool = c->n_threads > 1 ? tpool_shared(c->n_threads) : NULL;
    free(c->scores);
    const int64_t group = c->m->hp.n_head / c->m->hp.n_head_kv;
    c->scores =
        af_xmalloc((size_t)c->n_threads * (size_t)group * (size_t)c->max_ctx * sizeof(float));
}

void fwd_ctx_free(struct fwd_ctx *c)
{
    if (!c)
        return;
    float *bufs[] = {c->x,    c->xn, c->q,      c->k,        c->v,       c->att,
                     c->gate, c->up, c->scores, c->rope_cos, c->rope_sin};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(c->qbuf);
    free(c->lora_tmp);
    free(c->pad_out);
    free(c->row_seq);
    free(c->row_pos);
    free(c);
}

void fwd_ctx_set_lora(struct fwd_ctx *c, const struct lora_adapter *l)
{
    assert(!l || l->n_layer == c->m->hp.n_layer);
    free(c->lora_tmp);
    c->lora_tmp = l ? af_xmalloc((size_t)UBATCH * (size_t)l->rank * sizeof(float)) : NULL;
    c->lora = l;
}

void fwd_ctx_set_invariant(struct fwd_ctx *c, int on)
{
    const struct model_hparams *hp = &c->m->hp;
    int64_t widest = hp->n_vocab > hp->n_ff ? hp->n_vocab : hp->n_ff;
    if (hp->n_embd > widest)
        widest = hp->n_embd;
    if (hp->n_head * hp->head_dim > widest)
        widest = hp->n_head * hp->head_dim;
    free(c->pad_out);
    c->pad_widest = widest;
    c->pad_out = on ? af_xmalloc((size_t)(MM_MAX * 2 * widest) * sizeof(float)) : NULL;
    c->invariant = on;
}

int64_t fwd_ctx_max_ctx(const struct fwd_ctx *c)
{
    return c->max_ctx;
}

/* ---- Ops -------------------------------------------------------------------------------- */

/* In fixed chunks without an early exit, which -O2 vectorises (the residual rows after each
 * layer; the head's logits, a chunk of rows at a time as each thread writes them). */
static int all_finite(const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 1024 <= n; i += 1024) {
        uint32_t bad = 0;
        for (int k = 0; k < 1024; k++) {
            uint32_t b;
            memcpy(&b, &x[i + k], sizeof b);
            bad |= (b & 0x7f800000u) == 0x7f800000u;
        }
        if (bad)
            return 0;
    }
    for (; i < n; i++)
        if (!isfinite(x[i]))
            return 0;
    return 1;
}

struct mm_job {
    const struct weight *w[MM_MAX]; /* weights with the same n_in and activation type */
    float *out[MM_MAX];
    int n;
    const float *x;
    int64_t nb, nb_in;
    char *qb;
    size_t rb;
    int64_t first[MM_MAX + 1], per[MM_MAX]; /* weight i's chunks: [first[i], first[i + 1]) */
    _Atomic int64_t next;                   /* the next row to prepare */
    int n_parts;
    int check;       /* look for NaN or Inf in each chunk's outputs, while they are in cache */
    _Atomic int bad; /* one was found */
    /* Thread t's own share of the chunks, a contiguous run that it takes in order (so that it
     * streams one range of the weights, on a counter no other thread touches), before it helps
     * with the others' rest. On one shared counter finer chunks decoded slower (the threads
     * interleave their reads): 0.5B Q8_0, 4 ranges a thread 65-77 tok/s, 32 ranges 47-50. */
    struct {
        _Alignas(64) _Atomic int64_t next;
        int64_t end;
    } part[MM_PARTS];
};

static void mm_prepare(void *arg, int tid, int nth)
{
    (void)tid;
    (void)nth;
    struct mm_job *jb = arg;
    const struct weight *w = jb->w[0];
    for (int64_t j; (j = atomic_fetch_add(&jb->next, 1)) < jb->nb;)
        quant_prepare_act(w->type, jb->x + (j < jb->nb_in ? j : 0) * w->n_in,
                          jb->qb + (size_t)j * jb->rb, w->n_in);
}

static void mm_chunks(void *arg, int tid, int nth)
{
    (void)nth;
    struct mm_job *jb = arg;
    const int np = jb->n_parts, own = tid < np ? tid : 0;
    for (int k = 0; k < np; k++) {
        const int q = (own + k) % np;
        for (int64_t ci; (ci = atomic_fetch_add(&jb->part[q].next, 1)) < jb->part[q].end;) {
            int i = 0;
            while (ci >= jb->first[i + 1])
                i++;
            const struct weight *w = jb->w[i];
            const int64_t r0 = (ci - jb->first[i]) * jb->per[i];
            const int64_t r1 = r0 + jb->per[i] > w->n_out ? w->n_out : r0 + jb->per[i];
            /* the packed form when the kernels read it (r0 is 16-row aligned), else the rows */
            if (r0 < r1 && !(w->packed && quant_matmul_packed(w->type, w->packed_form, w->packed,
                                                              w->n_out, w->n_in, jb->qb, jb->nb,
                                                              jb->out[i], w->n_out, r0, r1) == 0))
                quant_matmul(w->type, w->data, w->n_in, jb->qb, jb->nb, jb->out[i], w->n_out, r0,
                             r1);
            for (int64_t j = 0; jb->check && j < jb->nb_in; j++)
                if (!all_finite(jb->out[i] + j * w->n_out + r0, r1 - r0))
                    atomic_store(&jb->bad, 1);
        }
    }
}

enum {
    MM_CHECK = 1,   /* look for NaN or Inf in the outputs: 1 if one is found */
    MM_PREPARED = 2 /* c->qbuf already holds x prepared for ws[0] (silu_rows) */
};

/* outs[i][j][r] = ws[i] row r . x[j] for nb rows of x (n_in floats each), out rows of each
 * weight's n_out floats, for n (<= MM_MAX) weights that read the same x (q, k and v; gate
 * and up): the activations are prepared once and every weight's row ranges are taken from one
 * pool run, so a small weight (k and v are 128 rows in Qwen2.5-0.5B) costs no hand-off of its
 * own. Each output's bits are those of a matmul of its weight alone (no kernel's bits depend
 * on the row split). Weights whose inputs are prepared differently run one after another. */
static int matmul_run(struct fwd_ctx *c, int n, const struct weight *const *ws, const float *x,
                      int64_t nb, float *const *outs, int flags)
{
    assert(n >= 1 && n <= MM_MAX);
    const uint32_t vt = quant_vec_dot_type(ws[0]->type);
    for (int i = 1; i < n; i++)
        if (quant_vec_dot_type(ws[i]->type) != vt || ws[i]->n_in != ws[0]->n_in) {
            int bad = 0;
            for (int k = 0; k < n; k++)
                bad |= matmul_run(c, 1, &ws[k], x, nb, &outs[k], flags & MM_CHECK);
            return bad;
        }
    const size_t rb = quant_row_bytes(vt, ws[0]->n_in);
    const int nt = c->n_threads;
    /* In invariant mode a lone row is computed as a pair (itself twice), so it gets the same
     * bits as in any batch of 2 or more, unless the kernels' one-row path already has them. */
    int m1_same = 1;
    for (int i = 0; i < n; i++)
        m1_same = m1_same && quant_matmul_m1_invariant(ws[i]->type);
    const int pad = c->invariant && nb == 1 && !m1_same;
    struct mm_job job = {.n = n,
                         .x = x,
                         .nb = pad ? 2 : nb,
                         .nb_in = nb,
                         .qb = c->qbuf,
                         .rb = rb,
                         .check = flags & MM_CHECK};
    /* Contiguous row ranges, 16-row aligned, in one share per thread; a thread that the VM's
     * host pauses does not hold the others up: they take the rest of its share. */
    const int used = nt < tpool_threads(c->pool) ? nt : tpool_threads(c->pool);
    for (int i = 0; i < n; i++) {
        job.w[i] = ws[i];
        job.out[i] = pad ? c->pad_out + (size_t)i * 2 * (size_t)c->pad_widest : outs[i];
        const int64_t chunks = (int64_t)used * quant_matmul_ranges_per_thread(ws[i]->type, job.nb);
        /* No range under MM_MIN_BYTES of weight x rows, so that a small matrix is not cut
         * finer than is worth a hand-out (the 0.5B shape's k and v, 122 KB each, take 2). */
        const int64_t min_rows = (MM_MIN_BYTES + (int64_t)ws[i]->row_bytes * job.nb - 1) /
                                 ((int64_t)ws[i]->row_bytes * job.nb);
        int64_t per = (ws[i]->n_out + chunks - 1) / chunks;
        per = per < min_rows ? min_rows : per;
        job.per[i] = (per + 15) / 16 * 16;
        job.first[i + 1] = job.first[i] + (ws[i]->n_out + job.per[i] - 1) / job.per[i];
    }
    /* A decode step's rows (up to 64K activations) are prepared on this thread, faster with the
     * AVX-512 conversions than a hand-off to the workers and the wait for them. */
    if (flags & MM_PREPARED) {
        if (pad) /* the lone row again, as mm_prepare makes it */
            memcpy(job.qb + rb, job.qb, rb);
    } else if (job.nb * ws[0]->n_in <= 65536) {
        mm_prepare(&job, 0, 1);
    } else {
        tpool_run(c->pool, nt, mm_prepare, &job);
    }
    job.n_parts = used < MM_PARTS ? used : MM_PARTS;
    const int64_t total = job.first[n];
    for (int q = 0; q < job.n_parts; q++) {
        atomic_init(&job.part[q].next, total * q / job.n_parts);
        job.part[q].end = total * (q + 1) / job.n_parts;
    }
    tpool_run(c->pool, nt, mm_chunks, &job);
    if (pad)
        for (int i = 0; i < n; i++)
            memcpy(outs[i], job.out[i], (size_t)ws[i]->n_out * sizeof *outs[i]);
    return atomic_load(&job.bad);
}

static void matmul_n(struct fwd_ctx *c, int n, const struct weight *const *ws, const float *x,
                     int64_t nb, float *const *outs)
{
    matmul_run(c, n, ws, x, nb, outs, 0);
}

/* out[j][r] = W row r . x[j] for nb rows of x (n_in floats each); out rows of n_out floats. */
static void matmul(struct fwd_ctx *c, const struct weight *w, const float *x, int64_t nb,
                   float *out)
{
    matmul_n(c, 1, &w, x, nb, &out);
}

#define LORA_CHUNK 8 /* rows per lora_apply call */

struct lora_job {
    const struct lora_adapter *l;
    const struct lora_pair *p;
    const float *x;
    float *y, *tmp;
    int64_t nb;
    _Atomic int64_t next; /* the next chunk of LORA_CHUNK rows */
};

static void lora_rows(void *arg, int tid, int nth)
{
    (void)tid;
    (void)nth;
    struct lora_job *jb = arg;
    const int64_t n_chunks = (jb->nb + LORA_CHUNK - 1) / LORA_CHUNK;
    for (int64_t ci; (ci = atomic_fetch_add(&jb->next, 1)) < n_chunks;) {
        const int64_t j0 = ci * LORA_CHUNK, n = jb->nb - j0 < LORA_CHUNK ? jb->nb - j0 : LORA_CHUNK;
        lora_apply(jb->l, jb->p, jb->x + j0 * jb->p->n_in, n, jb->y + j0 * jb->p->n_out,
                   jb->tmp + j0 * jb->l->rank);
    }
}

/* y += the adapter's delta for (layer il, target t), when that pair is adapted. Rows are split
 * between threads only for prefill; each row's sums are the same either way (lora_apply.c). */
static void lora_add(struct fwd_ctx *c, int64_t il, enum lora_target t, const float *x, int64_t nb,
                     float *y)
{
    const struct lora_pair *p = c->lora ? lora_pair_at(c->lora, il, t) : NULL;
    if (!p)
        return;
    const struct lora_adapter *l = c->lora;
    struct lora_job jb = {.l = l, .p = p, .x = x, .y = y, .tmp = c->lora_tmp, .nb = nb};
    tpool_run(c->pool, nb >= 2 * LORA_CHUNK ? c->n_threads : 1, lora_rows, &jb);
}

/* y[i] += a[i], y and a apart. `omp simd`: -O2's cost model leaves a loop of unknown length
 * scalar (it would need a scalar tail), and these ran a scalar add a float. Element-wise, so
 * the same bits. */
static void add_rows(float *restrict y, const float *restrict a, int64_t n)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        y[i] += a[i];
}

static void add_bias(const struct weight *b, float *y, int64_t nb)
{
    if (!b->data)
        return;
    for (int64_t j = 0; j < nb; j++)
        add_rows(y + j * b->n_in, b->data, b->n_in);
}

#define NORM_ROWS 8 /* rows whose sums of squares run side by side */

/* sums[r] = the sum of squares of row r (r < R, rows n floats apart), each one chain in double
 * in element order, the R chains interleaved: a decode step's 8 rows in one chain each after
 * the other waited on the latency of every add (2% of an eight-sequence step). */
static inline __attribute__((always_inline)) void sums_sq(const float *x, int64_t n, int R,
                                                          double *sums)
{
    double s[NORM_ROWS] = {0};
    for (int64_t i = 0; i < n; i++)
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            s[r] += (double)(x[r * n + i] * x[r * n + i]);
    for (int r = 0; r < R; r++)
        sums[r] = s[r];
}

static void rms_norm(const float *x, const struct weight *w, float eps, int64_t n, int64_t nb,
                     float *y)
{
    const float *g = w->data;
    for (int64_t j0 = 0; j0 < nb; j0 += NORM_ROWS) {
        const int R = nb - j0 < NORM_ROWS ? (int)(nb - j0) : NORM_ROWS;
        double sums[NORM_ROWS];
        switch (R) { /* R a constant in each, so that the sums stay in registers */
        case 8:
            sums_sq(x + j0 * n, n, 8, sums);
            break;
        case 7:
            sums_sq(x + j0 * n, n, 7, sums);
            break;
        case 6:
            sums_sq(x + j0 * n, n, 6, sums);
            break;
        case 5:
            sums_sq(x + j0 * n, n, 5, sums);
            break;
        case 4:
            sums_sq(x + j0 * n, n, 4, sums);
            break;
        case 3:
            sums_sq(x + j0 * n, n, 3, sums);
            break;
        case 2:
            sums_sq(x + j0 * n, n, 2, sums);
            break;
        default:
            sums_sq(x + j0 * n, n, 1, sums);
            break;
        }
        for (int r = 0; r < R; r++) {
            const float *xr = x + (j0 + r) * n;
            float *yr = y + (j0 + r) * n;
            const float scale = 1.0f / sqrtf((float)(sums[r] / (double)n) + eps);
#pragma omp simd /* y is not x (as add_rows) */
            for (int64_t i = 0; i < n; i++)
                yr[i] = (xr[i] * scale) * g[i];
        }
    }
}

static void rope_tables(struct fwd_ctx *c, int64_t nb)
{
    const struct model_hparams *hp = &c->m->hp;
    const int64_t half = hp->n_rot / 2;
    const float theta_scale = powf(hp->rope_base, -2.0f / (float)hp->n_rot);
    for (int64_t j = 0; j < nb; j++) {
        float theta = (float)c->row_pos[j];
        for (int64_t i = 0; i < half; i++) {
            float ff = c->m->rope_freq_factors ? c->m->rope_freq_factors[i] : 1.0f;
            float th = hp->rope_freq_scale * (theta / ff);
            c->rope_cos[j * half + i] = cosf(th);
            c->rope_sin[j * half + i] = sinf(th);
            theta *= theta_scale;
        }
    }
}

/* Rotates the first n_rot dims of each of n_heads heads of nb rows. */
static void rope_apply(const struct fwd_ctx *c, float *x, int64_t n_heads, int64_t nb)
{
    const struct model_hparams *hp = &c->m->hp;
    const int64_t half = hp->n_rot / 2, hd = hp->head_dim;
    const int neox = hp->rope_style == ROPE_NEOX;
    for (int64_t j = 0; j < nb; j++)
        for (int64_t h = 0; h < n_heads; h++) {
            float *v = x + (j * n_heads + h) * hd;
            const float *cs = c->rope_cos + j * half, *sn = c->rope_sin + j * half;
            for (int64_t i = 0; i < half; i++) {
                int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
                float x0 = v[a], x1 = v[b];
                v[a] = x0 * cs[i] - x1 * sn[i];
                v[b] = x0 * sn[i] + x1 * cs[i];
            }
        }
}

/* Causal attention of nb new tokens (positions pos0..) over the sequence's cached keys. One work
 * item is a (token, kv head) pair: its `group` query heads share each key the scores kernel
 * loads straight from the KV blocks (a block is [dim][16 positions]: one vector per dimension),
 * ATT_KEY_BLOCK positions per call. Each score still sums q[i] * k[i] in order of i, as a
 * scalar loop would; the vector lanes run over positions (and since every lane rounds alike,
 * where a span or block starts does not change a bit). */
struct att_job {
    struct fwd_ctx *c;
    int64_t il, nb;
    _Atomic int64_t next; /* the next (row, kv head) unit to take */
};

/* One (row j, kv head kvh) unit: the group's scores, softmax and value sums. tid picks the
 * scores scratch. */
static void attention_unit(struct fwd_ctx *c, int64_t il, int64_t j, int64_t kvh, int tid)
{
    const struct model_hparams *hp = &c->m->hp;
    const int64_t hd = hp->head_dim, nh = hp->n_head, nkv = hp->n_head_kv, group = nh / nkv;
    const float scale = 1.0f / sqrtf((float)hd);
    const quant_scores_fn scores = quant_scores_kernel();
    const quant_axpy_rows_fn axpy_rows = quant_axpy_rows_kernel();
    const quant_scores_f16_fn scores16 = quant_scores_f16_kernel();
    const quant_axpy_rows_f16_fn axpy_rows16 = quant_axpy_rows_f16_kernel();
    const quant_exp_fn exp_sub = quant_exp_kernel();
    const quant_scale_max_fn scale_max = quant_scale_max_kernel();
    const quant_scale_fn scale_by = quant_scale_kernel();
    const struct kv_seq *s = c->row_seq[j];
    const int f16 = s->pool->f16;
    float *sc0 = c->scores + (size_t)tid * (size_t)(group * c->max_ctx);
    const int64_t n_keys = c->row_pos[j] + 1;
    /* The keys straight from their blocks, ATT_KEY_BLOCK positions per call. */
    const float *kb[ATT_KEY_BLOCK / KV_BLOCK];
    const uint16_t *kb16[ATT_KEY_BLOCK / KV_BLOCK];
    for (int64_t t0 = 0; t0 < n_keys; t0 += ATT_KEY_BLOCK) {
        const int64_t len = n_keys - t0 < ATT_KEY_BLOCK ? n_keys - t0 : ATT_KEY_BLOCK;
        for (int64_t b = 0; b * KV_BLOCK < len; b++) {
            const int32_t id = s->blocks[t0 / KV_BLOCK + b];
            if (f16)
                kb16[b] = (const uint16_t *)kv_block_kv(s->pool, id, il, 0) + kvh * hd * KV_BLOCK;
            else
                kb[b] = kv_block_k(s->pool, id, il) + kvh * hd * KV_BLOCK;
        }
        for (int64_t g0 = 0; g0 < group; g0 += ATT_Q_ROWS) {
            const int64_t ng = group - g0 < ATT_Q_ROWS ? group - g0 : ATT_Q_ROWS;
            const float *qs[ATT_Q_ROWS];
            float *ss[ATT_Q_ROWS];
            for (int64_t g = 0; g < ng; g++) {
                qs[g] = c->q + (j * nh + kvh * group + g0 + g) * hd;
                ss[g] = sc0 + (g0 + g) * c->max_ctx + t0;
            }
            if (f16)
                scores16(len, hd, ng, qs, kb16, ss);
            else
                scores(len, hd, ng, qs, kb, ss);
        }
    }
    for (int64_t g0 = 0; g0 < group; g0 += ATT_Q_ROWS) {
        const int64_t ng = group - g0 < ATT_Q_ROWS ? group - g0 : ATT_Q_ROWS;
        float inv[ATT_Q_ROWS] = {0}, *o[ATT_Q_ROWS] = {0};
        const float *a[ATT_Q_ROWS];
        double sum[ATT_Q_ROWS] = {0};
        for (int64_t g = 0; g < ng; g++) {
            float *sc = sc0 + (g0 + g) * c->max_ctx;
            const float mx = scale_max(n_keys, sc, scale);
            exp_sub(n_keys, sc, mx, 1.0f, sc);
            o[g] = c->att + (j * nh + kvh * group + g0 + g) * hd;
            memset(o[g], 0, (size_t)hd * sizeof(float));
        }
        /* Each head's sum in double, in order of position, the heads' chains side by side so
         * that the adds' latency overlaps (the bits of one head at a time). */
        const float *sg = sc0 + g0 * c->max_ctx;
        for (int64_t t = 0; t < n_keys; t++)
            for (int64_t g = 0; g < ng; g++)
                sum[g] += (double)sg[g * c->max_ctx + t];
        for (int64_t g = 0; g < ng; g++)
            inv[g] = (float)(1.0 / sum[g]);
        /* The value rows in spans, each loaded once for the ng heads, whose outputs
         * stay in registers across a span's terms. */
        const float *vrows[ATT_V_SPAN];
        const uint16_t *vrows16[ATT_V_SPAN];
        for (int64_t t0 = 0; t0 < n_keys; t0 += ATT_V_SPAN) {
            const int64_t len = n_keys - t0 < ATT_V_SPAN ? n_keys - t0 : ATT_V_SPAN;
            for (int64_t t = t0; t < t0 + len; t++) {
                const int32_t id = s->blocks[t / KV_BLOCK];
                const int64_t vo = (kvh * KV_BLOCK + t % KV_BLOCK) * hd;
                if (f16)
                    vrows16[t - t0] = (const uint16_t *)kv_block_kv(s->pool, id, il, 1) + vo;
                else
                    vrows[t - t0] = kv_block_v(s->pool, id, il) + vo;
            }
            for (int64_t g = 0; g < ng; g++) {
                float *sc = sc0 + (g0 + g) * c->max_ctx;
                scale_by(len, sc + t0, inv[g]);
                a[g] = sc + t0;
            }
            if (f16)
                axpy_rows16(hd, len, ng, a, vrows16, o);
            else
                axpy_rows(hd, len, ng, a, vrows, o);
        }
    }
}

static void attention_units(void *arg, int tid, int nth)
{
    (void)nth;
    struct att_job *jb = arg;
    const int64_t nkv = jb->c->m->hp.n_head_kv, n = jb->nb * nkv;
    for (int64_t u; (u = atomic_fetch_add(&jb->next, 1)) < n;)
        attention_unit(jb->c, jb->il, u / nkv, u % nkv, tid);
}

static void attention(struct fwd_ctx *c, int64_t il, int64_t nb)
{
    struct att_job jb = {.c = c, .il = il, .nb = nb};
    tpool_run(c->pool, c->n_threads, attention_units, &jb);
}

static void store_kv(struct fwd_ctx *fc, int64_t il, int64_t nb, const float *k, const float *v)
{
    for (int64_t j = 0; j < nb; j++) {
        struct kv_seq *s = fc->row_seq[j];
        const int64_t pos = fc->row_pos[j], o = pos % KV_BLOCK, kvd = s->kv_dim;
        const int64_t hd = fc->m->hp.head_dim;
        const int32_t blk = s->blocks[pos / KV_BLOCK];
        /* values per kv head: [head][KV_BLOCK][hd], so one head's rows are contiguous */
        if (s->pool->f16) { /* rounded to nearest even once, here, as ggml's F16 cache */
            uint16_t *vt = kv_block_kv(s->pool, blk, il, 1);
            uint16_t *kt = kv_block_kv(s->pool, blk, il, 0);
            for (int64_t h = 0; h < kvd / hd; h++)
                quant_f32_to_f16_row(v + j * kvd + h * hd, vt + (h * KV_BLOCK + o) * hd, hd);
            uint16_t kh[256];
            for (int64_t d0 = 0; d0 < kvd; d0 += 256) {
                const int64_t n = kvd - d0 < 256 ? kvd - d0 : 256;
                quant_f32_to_f16_row(k + j * kvd + d0, kh, n);
                for (int64_t d = 0; d < n; d++)
                    kt[(d0 + d) * KV_BLOCK + o] = kh[d];
            }
            continue;
        }
        float *vt = kv_block_v(s->pool, blk, il);
        for (int64_t h = 0; h < kvd / hd; h++)
            memcpy(vt + (h * KV_BLOCK + o) * hd, v + j * kvd + h * hd, (size_t)hd * sizeof(float));
        float *kt = kv_block_k(s->pool, blk, il);
        for (int64_t d = 0; d < kvd; d++)
            kt[d * KV_BLOCK + o] = k[j * kvd + d];
    }
}

struct silu_job {
    quant_silu_mul_fn fn;
    int64_t ff;
    float *gate;
    const float *up;
    int64_t nb;
    uint32_t down_type; /* each row is then prepared for ffn_down, still in cache, into qb */
    char *qb;
    size_t rb;
    _Atomic int64_t next;
};

static void silu_rows(void *arg, int tid, int nth)
{
    (void)tid;
    (void)nth;
    struct silu_job *jb = arg;
    for (int64_t j; (j = atomic_fetch_add(&jb->next, 1)) < jb->nb;) {
        jb->fn(jb->ff, jb->gate + j * jb->ff, jb->up + j * jb->ff);
        quant_prepare_act(jb->down_type, jb->gate + j * jb->ff, jb->qb + (size_t)j * jb->rb,
                          jb->ff);
    }
}

static void layer(struct fwd_ctx *c, int64_t il, int64_t nb)
{
    const struct model_hparams *hp = &c->m->hp;
    const struct model_layer *ly = &c->m->layers[il];
    const int64_t d = hp->n_embd, ff = hp->n_ff;
    rms_norm(c->x, &ly->attn_norm, hp->rms_eps, d, nb, c->xn);
    const struct weight *qkv[3] = {&ly->wq, &ly->wk, &ly->wv};
    float *const qkv_out[3] = {c->q, c->k, c->v};
    matmul_n(c, 3, qkv, c->xn, nb, qkv_out);
    lora_add(c, il, LORA_Q, c->xn, nb, c->q);
    lora_add(c, il, LORA_K, c->xn, nb, c->k);
    lora_add(c, il, LORA_V, c->xn, nb, c->v);
    add_bias(&ly->bq, c->q, nb);
    add_bias(&ly->bk, c->k, nb);
    add_bias(&ly->bv, c->v, nb);
    rope_apply(c, c->q, hp->n_head, nb);
    rope_apply(c, c->k, hp->n_head_kv, nb);
    store_kv(c, il, nb, c->k, c->v);
    attention(c, il, nb);
    matmul(c, &ly->wo, c->att, nb, c->xn);
    lora_add(c, il, LORA_O, c->att, nb, c->xn);
    add_bias(&ly->bo, c->xn, nb);
    add_rows(c->x, c->xn, nb * d);
    rms_norm(c->x, &ly->ffn_norm, hp->rms_eps, d, nb, c->xn);
    const struct weight *gu[2] = {&ly->w_gate, &ly->w_up};
    float *const gu_out[2] = {c->gate, c->up};
    matmul_n(c, 2, gu, c->xn, nb, gu_out);
    lora_add(c, il, LORA_GATE, c->xn, nb, c->gate);
    lora_add(c, il, LORA_UP, c->xn, nb, c->up);
    const quant_silu_mul_fn silu_mul = quant_silu_mul_kernel();
    /* ffn_down's activations are prepared here, on all threads (a decode step prepared them
     * on one, 1.3% of its time with the other thread idle) */
    const struct weight *down = &ly->w_down;
    const uint32_t vt = quant_vec_dot_type(down->type);
    struct silu_job sj = {.fn = silu_mul,
                          .ff = ff,
                          .gate = c->gate,
                          .up = c->up,
                          .nb = nb,
                          .down_type = down->type,
                          .qb = c->qbuf,
                          .rb = quant_row_bytes(vt, ff)};
    tpool_run(c->pool, nb >= 2 ? c->n_threads : 1, silu_rows, &sj);
    matmul_run(c, 1, &down, c->gate, nb, &c->xn, MM_PREPARED);
    lora_add(c, il, LORA_DOWN, c->gate, nb, c->xn);
    add_rows(c->x, c->xn, nb * d);
}

static void embed(struct fwd_ctx *c, const int32_t *tokens, int64_t nb)
{
    const struct weight *e = &c->m->tok_embd;
    for (int64_t j = 0; j < nb; j++)
        quant_dequantize_row(e->type, (const char *)e->data + (size_t)tokens[j] * e->row_bytes,
                             c->x + j * e->n_in, e->n_in);
}

/* Final norm and output head for rows [first, nb) of the micro-batch, the logits checked the
 * way the layers are (weights that overflow give NaN or Inf): an error naming the head, never
 * logits printed as -nan or sampled into garbage. The threads check their own chunks as they
 * write them: eight rows of logits are 4.9 MB, a pass that one thread took alone (2% of the
 * scheduler thread's time in a decode of eight, with the other thread idle). */
static int head(struct fwd_ctx *c, int64_t first, int64_t nb, float *logits, char *err,
                size_t errlen)
{
    const struct model *m = c->m;
    const int64_t d = m->hp.n_embd;
    rms_norm(c->x + first * d, &m->output_norm, m->hp.rms_eps, d, nb - first, c->xn);
    const struct weight *w = &m->output;
    if (!matmul_run(c, 1, &w, c->xn, nb - first, &logits, MM_CHECK))
        return AF_OK;
    af_errf(err, errlen,
            "%s: the output head (output_norm, output.weight) produced NaN or Inf logits: its "
            "weights overflow float arithmetic",
            m->path);
    return AF_EPARSE;
}

/* Runs every layer on the micro-batch, checking the residual stream after each: weights that
 * are finite but huge (3e38) overflow to Inf and then NaN, which must be an error naming the
 * layer, never logits printed as -nan or sampled into garbage. The check reads nb * n_embd
 * floats per layer, next to the layer's nb * n_embd^2 multiply-adds. */
static int layers_checked(struct fwd_ctx *c, int64_t nb, char *err, size_t errlen)
{
    const struct model_hparams *hp = &c->m->hp;
    for (int64_t il = 0; il < hp->n_layer; il++) {
        layer(c, il, nb);
        if (!all_finite(c->x, nb * hp->n_embd)) {
            af_errf(err, errlen,
                    "%s: layer %lld (blk.%lld.*) produced NaN or Inf activations: its weights "
                    "overflow float arithmetic",
                    c->m->path, (long long)il, (long long)il);
            return AF_EPARSE;
        }
    }
    return AF_OK;
}

int fwd_eval(struct fwd_ctx *c, struct kv_seq *s, const int32_t *tokens, int64_t n,
             enum fwd_logits want, float *logits, char *err, size_t errlen)
{
    const struct model_hparams *hp = &c->m->hp;
    if (n <= 0)
        return AF_OK;
    if (s->n + n > c->max_ctx) {
        af_errf(err, errlen, "the sequence would be %lld tokens, over the context size %lld",
                (long long)(s->n + n), (long long)c->max_ctx);
        return AF_EINVAL;
    }
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab) {
            af_errf(err, errlen, "token %lld (id %d) is outside the vocabulary of %lld",
                    (long long)i, tokens[i], (long long)hp->n_vocab);
            return AF_EINVAL;
        }
    if (kv_seq_reserve(s, s->n + n, 1)) {
        af_errf(err, errlen, "no KV block for %lld more tokens", (long long)n);
        return AF_ENOMEM;
    }
    for (int64_t done = 0; done < n; done += UBATCH) {
        const int64_t nb = n - done < UBATCH ? n - done : UBATCH, pos0 = s->n;
        for (int64_t j = 0; j < nb; j++) {
            c->row_seq[j] = s;
            c->row_pos[j] = pos0 + j;
        }
        embed(c, tokens + done, nb);
        rope_tables(c, nb);
        int rc = layers_checked(c, nb, err, errlen);
        if (rc)
            return rc;
        memcpy(s->tokens + pos0, tokens + done, (size_t)nb * sizeof *tokens);
        s->n += nb;
        if (want == FWD_LOGITS_ALL) {
            float *rows = logits + (size_t)done * (size_t)hp->n_vocab;
            rc = head(c, 0, nb, rows, err, errlen);
        } else if (want == FWD_LOGITS_LAST && done + nb == n) {
            rc = head(c, nb - 1, nb, logits, err, errlen);
        }
        if (rc)
            return rc;
    }
    return AF_OK;
}

int fwd_eval_rows(struct fwd_ctx *c, struct kv_seq *const *seqs, const int32_t *tokens, int64_t n,
                  int64_t logits_from, float *logits, char *err, size_t errlen)
{
    const struct model_hparams *hp = &c->m->hp;
    if (n <= 0)
        return AF_OK;
    if (n > UBATCH) {
        af_errf(err, errlen, "%lld sequences in one step, over the %d a step takes", (long long)n,
                UBATCH);
        return AF_EINVAL;
    }
    if (logits_from < 0 || logits_from > n) {
        af_errf(err, errlen, "logits from row %lld of a step of %lld rows", (long long)logits_from,
                (long long)n);
        return AF_EINVAL;
    }
    for (int64_t j = 0; j < n; j++) {
        /* A sequence may fill several rows, next to each other: its tokens at successive
         * positions (a verified draft). Each row attends to the keys up to its own. */
        int64_t before = 0;
        for (int64_t i = 0; i < j; i++)
            if (seqs[i] == seqs[j])
                before++;
        if (before > 0 && seqs[j - 1] != seqs[j]) {
            af_errf(err, errlen, "sequence %lld appears twice in one step, not in adjacent rows",
                    (long long)j);
            return AF_EINVAL;
        }
        if (seqs[j]->n + before + 1 > c->max_ctx) {
            af_errf(err, errlen, "sequence %lld would be %lld tokens, over the context size %lld",
                    (long long)j, (long long)(seqs[j]->n + before + 1), (long long)c->max_ctx);
            return AF_EINVAL;
        }
        if (tokens[j] < 0 || tokens[j] >= hp->n_vocab) {
            af_errf(err, errlen, "token %lld (id %d) is outside the vocabulary of %lld",
                    (long long)j, tokens[j], (long long)hp->n_vocab);
            return AF_EINVAL;
        }
        c->row_pos[j] = seqs[j]->n + before;
    }
    for (int64_t j = 0; j < n; j++) {
        if (kv_seq_reserve(seqs[j], c->row_pos[j] + 1, 1)) {
            af_errf(err, errlen, "no KV block for sequence %lld", (long long)j);
            return AF_ENOMEM;
        }
        c->row_seq[j] = seqs[j];
    }
    embed(c, tokens, n);
    rope_tables(c, n);
    int rc = layers_checked(c, n, err, errlen);
    if (rc)
        return rc;
    for (int64_t j = 0; j < n; j++) {
        seqs[j]->tokens[c->row_pos[j]] = tokens[j];
        seqs[j]->n = c->row_pos[j] + 1;
    }
    if (logits_from == n)
        return AF_OK;
    return head(c, logits_from, n, logits, err, errlen);
}
