/*
 * optim.c - AdamW, gradient utilities and learning-rate schedules (see optim.h).
 *
 * Every loop over elements is elementwise (no cross-element dependence), so OpenMP's split of
 * the index range cannot change any bit of the result. The one reduction, the gradient norm,
 * sums fixed chunks of NORM_CHUNK elements each on its own and then adds the chunk sums in
 * index order, so its bits do not depend on the thread count either.
 */
#include "train/optim.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/errf.h"

/* Below this many elements a parameter is updated on the calling thread: starting a parallel
 * region costs more than the work (norm gains and biases). */
#define OMP_MIN_N 32768
#define NORM_CHUNK 16384 /* elements per partial sum of the norm */
#define NORM_GROUP 64    /* chunks summed by one parallel region */

struct train_adamw train_adamw_defaults(void)
{
    struct train_adamw hp = {0.9f, 0.999f, 1e-8f, 0.0f};
    return hp;
}

static const char *pname(const struct train_param *p)
{
    return p->name ? p->name : "(unnamed)";
}

int train_adamw_init(struct train_adamw_state *st, const struct train_param *p, size_t np,
                     char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    if (!p || np == 0) {
        af_errf(err, errlen, "adamw: no parameters");
        return AF_EINVAL;
    }
    const int64_t max_n =
        (int64_t)(SIZE_MAX / sizeof(float) < (size_t)INT64_MAX ? SIZE_MAX / sizeof(float)
                                                               : (size_t)INT64_MAX);
    int64_t total = 0;
    for (size_t i = 0; i < np; i++) {
        if (p[i].n < 0 || (p[i].n > 0 && (!p[i].w || !p[i].g))) {
            af_errf(err, errlen, "adamw: param %zu (%s): bad size %lld or NULL data", i,
                    pname(&p[i]), (long long)p[i].n);
            return AF_EINVAL;
        }
        if (p[i].n > max_n - total) {
            af_errf(err, errlen, "adamw: param %zu (%s): total size overflows", i, pname(&p[i]));
            return AF_EINVAL;
        }
        total += p[i].n;
    }
    if (total == 0) {
        af_errf(err, errlen, "adamw: parameters hold no elements");
        return AF_EINVAL;
    }
    float *m = calloc((size_t)total, sizeof *m);
    float *v = calloc((size_t)total, sizeof *v);
    if (!m || !v) {
        free(m);
        free(v);
        af_errf(err, errlen, "adamw: cannot allocate moments for %lld parameters",
                (long long)total);
        return AF_ENOMEM;
    }
    st->n = total;
    st->m = m;
    st->v = v;
    return AF_OK;
}

void train_adamw_deinit(struct train_adamw_state *st)
{
    if (!st)
        return;
    free(st->m);
    free(st->v);
    memset(st, 0, sizeof *st);
}

size_t train_adamw_state_bytes(const struct train_adamw_state *st)
{
    return 2 * (size_t)st->n * sizeof(float);
}

/* The per-element update of one tensor; the scalars are already rounded to float, as PyTorch
 * rounds its Python-float scalars when it applies them to a float tensor. decay = lr·wd (0 for
 * no decay): w - decay·w keeps the decay exact to float precision, where PyTorch's
 * w·(1 - lr·wd) rounds the factor first and can be off by 6e-8 absolute (6% of lr·wd = 1e-6). */
static void adamw_tensor(float *restrict w, const float *restrict g, float *restrict m,
                         float *restrict v, int64_t n, float b1, float b2, float decay,
                         float step_size, float bc2_sqrt, float eps)
{
    const float c1 = 1.0f - b1, c2 = 1.0f - b2;
#pragma omp parallel for schedule(static) if (n >= OMP_MIN_N)
    for (int64_t i = 0; i < n; i++) {
        const float gi = g[i];
        const float mi = b1 * m[i] + c1 * gi;
        const float vi = b2 * v[i] + c2 * gi * gi;
        const float denom = sqrtf(vi) / bc2_sqrt + eps;
        m[i] = mi;
        v[i] = vi;
        const float wi = w[i] - decay * w[i];
        w[i] = wi - step_size * (mi / denom);
    }
}

void train_adamw_step(struct train_adamw_state *st, const struct train_param *p, size_t np,
                      const struct train_adamw *hp, float lr)
{
    st->step++;
    const double t = (double)st->step;
    const double bc1 = 1.0 - pow((double)hp->beta1, t);
    const double bc2 = 1.0 - pow((double)hp->beta2, t);
    const float step_size = (float)((double)lr / bc1);
    const float bc2_sqrt = (float)sqrt(bc2);
    const float wd = (float)((double)lr * (double)hp->weight_decay);
    int64_t off = 0;
    for (size_t i = 0; i < np && off < st->n; i++) {
        const int64_t n = p[i].n <= st->n - off ? p[i].n : st->n - off; /* never past m, v */
        adamw_tensor(p[i].w, p[i].g, st->m + off, st->v + off, n, hp->beta1, hp->beta2,
                     p[i].decay ? wd : 0.0f, step_size, bc2_sqrt, hp->eps);
        off += n;
    }
}

/* ---- Gradients ------------------------------------------------------------------------------ */

/* Σ x² in double with four interleaved accumulators, combined in a fixed order. */
static double sumsq(const float *x, int64_t n)
{
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        a0 += (double)x[i] * (double)x[i];
        a1 += (double)x[i + 1] * (double)x[i + 1];
        a2 += (double)x[i + 2] * (double)x[i + 2];
        a3 += (double)x[i + 3] * (double)x[i + 3];
    }
    for (; i < n; i++)
        a0 += (double)x[i] * (double)x[i];
    return (a0 + a1) + (a2 + a3);
}

double train_grad_norm(const struct train_param *p, size_t np)
{
    double total = 0;
    for (size_t i = 0; i < np; i++) {
        const float *g = p[i].g;
        const int64_t n = p[i].n;
        const int64_t nch = (n + NORM_CHUNK - 1) / NORM_CHUNK;
        for (int64_t c0 = 0; c0 < nch; c0 += NORM_GROUP) {
            double part[NORM_GROUP];
            const int64_t k = nch - c0 < NORM_GROUP ? nch - c0 : NORM_GROUP;
#pragma omp parallel for schedule(static) if (k > 1)
            for (int64_t j = 0; j < k; j++) {
                const int64_t start = (c0 + j) * NORM_CHUNK;
                const int64_t len = n - start < NORM_CHUNK ? n - start : NORM_CHUNK;
                part[j] = sumsq(g + start, len);
            }
            for (int64_t j = 0; j < k; j++)
                total += part[j];
        }
    }
    return sqrt(total);
}

double train_clip_grad_norm(const struct train_param *p, size_t np, double max_norm)
{
    const double norm = train_grad_norm(p, np);
    if (max_norm > 0 && isfinite(norm) && norm > max_norm)
        train_grads_scale(p, np, (float)(max_norm / norm));
    return norm;
}

void train_grads_scale(const struct train_param *p, size_t np, float s)
{
    for (size_t i = 0; i < np; i++) {
        float *g = p[i].g;
        const int64_t n = p[i].n;
#pragma omp parallel for schedule(static) if (n >= OMP_MIN_N)
        for (int64_t j = 0; j < n; j++)
            g[j] *= s;
    }
}

void train_grads_zero(const struct train_param *p, size_t np)
{
    for (size_t i = 0; i < np; i++)
        if (p[i].n > 0)
            memset(p[i].g, 0, (size_t)p[i].n * sizeof(float));
}

int train_grads_nonfinite(const struct train_param *p, size_t np)
{
    int bad = 0;
    for (size_t i = 0; i < np && !bad; i++) {
        const float *g = p[i].g;
        const int64_t n = p[i].n;
#pragma omp parallel for schedule(static) if (n >= OMP_MIN_N) reduction(| : bad)
        for (int64_t j = 0; j < n; j++) {
            uint32_t bits;
            memcpy(&bits, &g[j], sizeof bits);
            bad |= (bits & 0x7f800000u) == 0x7f800000u; /* exponent all ones: Inf or NaN */
        }
    }
    return bad;
}

/* ---- Schedules ------------------------------------------------------------------------------ */

static const char *const sched_names[] = {"constant", "linear", "cosine"};

int train_sched_from_name(const char *name)
{
    if (!name)
        return -1;
    for (int k = 0; k < (int)(sizeof sched_names / sizeof sched_names[0]); k++)
        if (strcmp(name, sched_names[k]) == 0)
            return k;
    return -1;
}

const char *train_sched_name(enum train_sched_kind k)
{
    const unsigned u = (unsigned)k;
    return u < sizeof sched_names / sizeof sched_names[0] ? sched_names[u] : "unknown";
}

float train_sched_lr(const struct train_sched *s, int64_t step)
{
    const double lr = (double)s->lr;
    if (step < 0)
        step = 0;
    if (step < s->warmup)
        return (float)(lr * (double)step / (double)(s->warmup > 1 ? s->warmup : 1));
    const int64_t span = s->total - s->warmup > 1 ? s->total - s->warmup : 1;
    switch (s->kind) {
    case TRAIN_SCHED_LINEAR: {
        const double f = (double)(s->total - step) / (double)span;
        return (float)(lr * (f > 0 ? f : 0));
    }
    case TRAIN_SCHED_COSINE: {
        double prog = (double)(step - s->warmup) / (double)span;
        prog = prog < 0 ? 0 : prog > 1 ? 1 : prog;
        const double r = (double)s->min_lr_ratio;
        return (float)(lr * (r + (1 - r) * 0.5 * (1 + cos(M_PI * prog))));
    }
    case TRAIN_SCHED_CONSTANT:
    default:
        return s->lr;
    }
}
