/*
 * test_grpo.c - Flow-GRPO's arithmetic and update (src/train/grpo_loss.h, grpo_int.h):
 * advantages, the clipped surrogate, k3 KL and both aggregations against hand-computed values;
 * the temperature-scaled log-probs against the engine's logits; a finite-difference check of
 * the whole per-token loss through a tiny model with LoRA; rho == 1 exactly at the start of an
 * on-policy update; lr 0 leaves the adapter untouched.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agentflow/engine.h"
#include "engine/lora.h"
#include "engine/model.h"
#include "train/grpo_int.h"
#include "train/grpo_loss.h"
#include "train/net.h"

/* Doubles compared as doubles (cmocka's assert_float_equal takes floats). */
#define assert_near(a, b, tol)                                                                     \
    do {                                                                                           \
        const double a_ = (double)(a), b_ = (double)(b);                                           \
        if (!(fabs(a_ - b_) <= (double)(tol)))                                                     \
            fail_msg("%s = %.9g, expected %.9g (tolerance %g)", #a, a_, b_, (double)(tol));        \
    } while (0)

/* ---- advantages ---------------------------------------------------------------------------- */

static void test_advantages(void **state)
{
    (void)state;
    /* mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = 0.5773503 */
    const double r[4] = {1, 0, 0, 1};
    float a[4];
    assert_int_equal(grpo_group_advantages(r, 4, a), 0);
    const double want = 0.5 / (sqrt(1.0 / 3.0) + 1e-6);
    assert_near(a[0], want, 1e-6);
    assert_near(a[1], -want, 1e-6);
    assert_near(a[3], want, 1e-6);
    /* 1 of 3 right: mean 1/3, std sqrt((4/9 + 1/9 + 1/9) / 2) = 0.5773503 */
    const double r3[3] = {0, 1, 0};
    assert_int_equal(grpo_group_advantages(r3, 3, a), 0);
    assert_near(a[1], (2.0 / 3.0) / (sqrt(1.0 / 3.0) + 1e-6), 1e-6);
    assert_near(a[0], (-1.0 / 3.0) / (sqrt(1.0 / 3.0) + 1e-6), 1e-6);
    /* F1 rewards */
    const double rf[2] = {0.5, 0.0};
    assert_int_equal(grpo_group_advantages(rf, 2, a), 0);
    assert_near(a[0], 0.25 / (sqrt(0.125) + 1e-6), 1e-6);
    /* degenerate groups: every reward equal, and a group of one */
    const double same[3] = {1, 1, 1}, none[2] = {0, 0};
    a[0] = a[1] = a[2] = 9;
    assert_int_equal(grpo_group_advantages(same, 3, a), 1);
    assert_true(a[0] == 0.0f && a[1] == 0.0f && a[2] == 0.0f);
    assert_int_equal(grpo_group_advantages(none, 2, a), 1);
    assert_true(a[0] == 0.0f && a[1] == 0.0f);
    assert_int_equal(grpo_group_advantages(r, 1, a), 1);
    assert_true(a[0] == 0.0f);
}

/* ---- the per-token objective ---------------------------------------------------------------- */

static void tok(float logp, float old, float ref, float adv, struct grpo_tok *t)
{
    const struct grpo_hp hp = grpo_default_hp(); /* 0.2, 0.3, 0.001 */
    grpo_token(&hp, logp, old, ref, adv, t);
}

static void test_token_objective(void **state)
{
    (void)state;
    struct grpo_tok t;
    /* on-policy, at the reference: rho 1, loss -A, gradient -A */
    tok(-1.0f, -1.0f, -1.0f, 2.0f, &t);
    assert_near(t.ratio, 1.0, 0);
    assert_near(t.loss, -2.0, 1e-12);
    assert_near(t.kl, 0.0, 1e-12);
    assert_near(t.dlogp, -2.0, 1e-12);
    assert_int_equal(t.clipped_low + t.clipped_high, 0);
    /* A > 0, rho 1.5 > 1.3: the clipped term 1.3 is the minimum, no surrogate gradient */
    const float l15 = (float)log(1.5);
    tok(l15 - 2.0f, -2.0f, l15 - 2.0f, 1.0f, &t);
    assert_near(t.ratio, 1.5, 1e-6);
    assert_near(t.loss, -1.3, 1e-6);
    assert_near(t.dlogp, 0.0, 1e-12);
    assert_int_equal(t.clipped_high, 1);
    assert_int_equal(t.clipped_low, 0);
    /* A < 0, rho 0.5 < 0.8: min(-0.5, -0.8) = -0.8, clipped low */
    const float l05 = (float)log(0.5);
    tok(l05 - 1.0f, -1.0f, l05 - 1.0f, -1.0f, &t);
    assert_near(t.loss, 0.8, 1e-6);
    assert_near(t.dlogp, 0.0, 1e-12);
    assert_int_equal(t.clipped_low, 1);
    /* A < 0, rho 1.5: min(-1.5, -1.3) = -1.5 is the unclipped term: gradient -rho*A = 1.5 */
    tok(l15 - 1.0f, -1.0f, l15 - 1.0f, -1.0f, &t);
    assert_near(t.loss, 1.5, 1e-6);
    assert_near(t.dlogp, 1.5, 1e-6);
    assert_int_equal(t.clipped_low + t.clipped_high, 0);
    /* A > 0, rho 0.5: min(0.5, 0.8) = 0.5 unclipped: gradient -0.5 */
    tok(l05 - 1.0f, -1.0f, l05 - 1.0f, 1.0f, &t);
    assert_near(t.loss, -0.5, 1e-6);
    assert_near(t.dlogp, -0.5, 1e-6);
    /* k3 with ref - logp = 1: e - 1 - 1; its gradient beta * (1 - e) */
    tok(-2.0f, -2.0f, -1.0f, 0.0f, &t);
    assert_near(t.kl, exp(1.0) - 2.0, 1e-9);
    assert_near(t.loss, 0.001 * (exp(1.0) - 2.0), 1e-9);
    assert_near(t.dlogp, 0.001 * (1.0 - exp(1.0)), 1e-9);
    /* ref - logp = -0.5 */
    tok(-1.0f, -1.0f, -1.5f, 0.0f, &t);
    assert_near(t.kl, exp(-0.5) + 0.5 - 1.0, 1e-9);
    /* no KL coefficient, no clip: a plain policy gradient */
    struct grpo_hp hp = {0.0f, 0.0f, 0.0f};
    grpo_token(&hp, -1.0f, -1.0f, -3.0f, 0.5f, &t);
    assert_near(t.loss, -0.5, 1e-9);
    assert_near(t.dlogp, -0.5, 1e-9);
}

static void test_aggregation(void **state)
{
    (void)state;
    const int64_t ntok[4] = {2, 3, 5, 0}, traj[4] = {0, 0, 1, 1};
    double c[4];
    grpo_agg_coefs(GRPO_AGG_TOKEN_MEAN, 4, ntok, traj, c);
    assert_near(c[0], 0.1, 1e-15);
    assert_near(c[1], 0.1, 1e-15);
    assert_near(c[2], 0.1, 1e-15);
    assert_near(c[3], 0.0, 0);
    /* tokens of a turn, turns of a trajectory (2 and 1), then 2 trajectories */
    grpo_agg_coefs(GRPO_AGG_SEQ_MEAN_TOKEN_MEAN, 4, ntok, traj, c);
    assert_near(c[0], 1.0 / 8.0, 1e-15);
    assert_near(c[1], 1.0 / 12.0, 1e-15);
    assert_near(c[2], 1.0 / 10.0, 1e-15);
    assert_near(c[3], 0.0, 0);
    /* each trajectory weighs 1/2 in all */
    assert_near(c[0] * 2 + c[1] * 3, 0.5, 1e-15);
    /* turns of a trajectory need not be adjacent */
    const int64_t nt2[3] = {4, 4, 2}, tr2[3] = {7, 3, 7};
    grpo_agg_coefs(GRPO_AGG_SEQ_MEAN_TOKEN_MEAN, 3, nt2, tr2, c);
    assert_near(c[0], 1.0 / 16.0, 1e-15);
    assert_near(c[1], 1.0 / 8.0, 1e-15);
    assert_near(c[2], 1.0 / 8.0, 1e-15);
    assert_int_equal(grpo_agg_from_name("token-mean"), GRPO_AGG_TOKEN_MEAN);
    assert_int_equal(grpo_agg_from_name("seq-mean-token-mean"), GRPO_AGG_SEQ_MEAN_TOKEN_MEAN);
    assert_int_equal(grpo_agg_from_name("seq-mean"), -1);
}

/* ---- through a tiny model ------------------------------------------------------------------- */

static char path_model[256];
static struct model *model;

static int setup(void **state)
{
    (void)state;
    char err[1024];
    snprintf(path_model, sizeof path_model, "/tmp/af_test_grpo_%d.gguf", (int)getpid());
    struct af_engine_random_params rp = {"qwen2", "tiny", "F32", 5, NULL};
    if (af_engine_make_random(&rp, path_model, err, sizeof err) ||
        model_load(path_model, &model, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", path_model, err);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    model_free(model);
    unlink(path_model);
    return 0;
}

static uint64_t rs = 12345;
static double urand(void) /* [0, 1) */
{
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rs >> 11) / (double)(1ull << 53);
}

/* An adapter with every matrix random (B too, so it changes the model). Owned. */
static struct lora_adapter *random_lora(float amp)
{
    struct lora_adapter *l = NULL;
    char err[256];
    assert_int_equal(lora_new(&model->hp, 4, 8.0f, 0, LORA_ALL_TARGETS, &l, err, sizeof err), 0);
    for (size_t i = 0; i < l->n_floats; i++)
        l->data[i] = (float)((urand() * 2 - 1) * (double)amp);
    return l;
}

static int32_t *rand_tokens(int64_t T)
{
    int32_t *t = malloc((size_t)T * sizeof *t);
    for (int64_t i = 0; i < T; i++)
        t[i] = (int32_t)(urand() * (double)model->hp.n_vocab);
    return t;
}

/* log softmax(logits / T) of the engine equals the net's log-probs at temperature T. */
static void test_temperature_logprobs(void **state)
{
    (void)state;
    char err[1024];
    struct af_engine *e = NULL;
    assert_int_equal(af_engine_load(path_model, NULL, &e, err, sizeof err), 0);
    const int64_t T = 12, V = model->hp.n_vocab;
    int32_t *ids = rand_tokens(T);
    float *logits = malloc((size_t)(T * V) * sizeof *logits);
    assert_int_equal(af_engine_logits(e, ids, (size_t)T, 1, logits, err, sizeof err), 0);
    struct train_net *net = NULL;
    struct lora_adapter *l = random_lora(0.0f); /* zero: the base model */
    struct train_net_params np = train_net_default_params();
    np.lora = l;
    assert_int_equal(train_net_new(model, &np, &net, err, sizeof err), 0);
    const double temp = 0.7;
    float lp[12], ent[12];
    struct train_net_seq_opts so = train_net_seq_default_opts();
    so.temperature = (float)temp;
    so.logp = lp;
    so.entropy = ent;
    so.t_begin = 3;
    lp[0] = lp[1] = lp[2] = 42.0f;
    assert_int_equal(train_net_seq(net, ids, T, &so, NULL, err, sizeof err), 0);
    assert_true(lp[0] == 42.0f && lp[2] == 42.0f); /* before t_begin: untouched */
    for (int64_t t = 3; t < T - 1; t++) {
        const float *row = logits + t * V;
        double mx = -INFINITY, s = 0, pz = 0;
        for (int64_t i = 0; i < V; i++)
            mx = fmax(mx, (double)row[i] / temp);
        for (int64_t i = 0; i < V; i++)
            s += exp((double)row[i] / temp - mx);
        const double ls = log(fmax(s, 1.0)); /* s >= 1: the max term is exp(0) */
        for (int64_t i = 0; i < V; i++) {
            const double z = (double)row[i] / temp - mx;
            pz += exp(z) / s * (z - ls);
        }
        const double want = (double)row[ids[t + 1]] / temp - mx - ls;
        assert_near(lp[t], want, 2e-4);
        assert_near(ent[t], -pz, 2e-4);
    }
    /* a bad temperature is refused by name */
    so.temperature = 0.0f;
    assert_int_equal(train_net_seq(net, ids, T, &so, NULL, err, sizeof err), AF_EINVAL);
    assert_non_null(strstr(err, "temperature"));
    train_net_free(net);
    lora_free(l);
    free(logits);
    free(ids);
    af_engine_free(e);
}

/* The engine samples a reply at temperature 0.7 with frequency penalty 1.2 (every earlier
 * occurrence of a token in the reply lowers its logit by 1.2); the net scores the same ids with
 * freq_penalty set and agrees with the engine's log-probs, token by token. Without the
 * penalty the repeated tokens disagree: the test sees the penalty. */
static void test_penalised_logprobs(void **state)
{
    (void)state;
    char err[1024];
    struct af_engine *e = NULL;
    assert_int_equal(af_engine_load(path_model, NULL, &e, err, sizeof err), 0);
    const int64_t P = 6;
    int32_t *prompt = rand_tokens(P);
    struct af_engine_gen_params gp = af_engine_default_gen_params();
    gp.temperature = 0.7f;
    gp.frequency_penalty = 1.2f;
    gp.seed = 11;
    gp.max_tokens = 64;
    gp.ignore_eos = 1;
    struct train_net *net = NULL;
    struct lora_adapter *l = random_lora(0.0f);
    struct train_net_params np = train_net_default_params();
    np.lora = l;
    assert_int_equal(train_net_new(model, &np, &net, err, sizeof err), 0);
    int repeats = 0, differ = 0;
    for (int round = 0; round < 8 && repeats < 3; round++) {
        struct af_engine_result r;
        gp.seed = 11 + (uint64_t)round;
        assert_int_equal(af_engine_generate(e, prompt, (size_t)P, &gp, &r, err, sizeof err), 0);
        const int64_t n = (int64_t)r.n_ids, T = P + n;
        assert_true(n >= 2);
        int32_t *ids = malloc((size_t)T * sizeof *ids);
        memcpy(ids, prompt, (size_t)P * sizeof *ids);
        memcpy(ids + P, r.ids, (size_t)n * sizeof *ids);
        float *lp = malloc((size_t)T * sizeof *lp), *lp0 = malloc((size_t)T * sizeof *lp0);
        struct train_net_seq_opts so = train_net_seq_default_opts();
        so.temperature = 0.7f;
        so.t_begin = P - 1;
        so.logp = lp;
        so.freq_penalty = 1.2f;
        assert_int_equal(train_net_seq(net, ids, T, &so, NULL, err, sizeof err), 0);
        so.logp = lp0;
        so.freq_penalty = 0.0f;
        assert_int_equal(train_net_seq(net, ids, T, &so, NULL, err, sizeof err), 0);
        for (int64_t j = 0; j < n; j++) {
            assert_near(lp[P - 1 + j], r.logprobs[j], 2e-4);
            int seen = 0;
            for (int64_t k = 0; k < j; k++)
                seen |= r.ids[k] == r.ids[j];
            repeats += seen;
            differ += seen && fabsf(lp0[P - 1 + j] - r.logprobs[j]) > 1e-2f;
        }
        free(lp);
        free(lp0);
        free(ids);
        af_engine_result_deinit(&r);
    }
    fprintf(stderr, "penalised log-probs: %d repeated tokens\n", repeats);
    assert_true(repeats >= 3); /* the replies repeat tokens, so the penalty is exercised */
    assert_int_equal(differ, repeats);
    struct train_net_seq_opts so = train_net_seq_default_opts();
    so.freq_penalty = NAN; /* refused by name */
    assert_int_equal(train_net_seq(net, prompt, P, &so, NULL, err, sizeof err), AF_EINVAL);
    assert_non_null(strstr(err, "penalty"));
    train_net_free(net);
    lora_free(l);
    free(prompt);
    af_engine_free(e);
}

/* The whole per-token objective of one turn, Σ_j coef·ℓ_j, and its gradient through the net. */
struct fdctx {
    struct grpo_hp hp;
    const float *old, *ref;
    float adv, temp, pen;
    double coef;
    int64_t off, n;
    double loss;
    struct grpo_tok tok[64];
};

static float fd_weight(void *user, int64_t t, float logp)
{
    struct fdctx *c = user;
    const int64_t j = t - c->off;
    if (j < 0 || j >= c->n)
        return 0.0f;
    grpo_token(&c->hp, logp, c->old[j], c->ref[j], c->adv, &c->tok[j]);
    return (float)(-c->coef * c->tok[j].dlogp);
}

static double objective(struct train_net *net, const int32_t *ids, int64_t T, struct fdctx *c,
                        int backward)
{
    char err[512];
    struct train_net_seq_opts so = train_net_seq_default_opts();
    so.backward = backward;
    so.temperature = c->temp;
    so.freq_penalty = c->pen;
    so.wfn = fd_weight;
    so.wuser = c;
    so.t_begin = c->off;
    assert_int_equal(train_net_seq(net, ids, T, &so, NULL, err, sizeof err), 0);
    double l = 0;
    for (int64_t j = 0; j < c->n; j++)
        l += c->coef * c->tok[j].loss;
    return l;
}

static void fd_check(float adv, float beta, float pen)
{
    char err[1024];
    const int64_t T = 20, np_ = 8, nr = T - np_;
    int32_t *ids = rand_tokens(T);
    if (pen != 0.0f) /* repeats in the reply, so that the penalty shifts some rows */
        for (int64_t t = np_ + 3; t < T; t += 2)
            ids[t] = ids[np_ + (t % 3)];
    struct lora_adapter *l = random_lora(0.05f);
    struct train_net *net = NULL;
    struct train_net_params p = train_net_default_params();
    p.lora = l;
    assert_int_equal(train_net_new(model, &p, &net, err, sizeof err), 0);
    struct fdctx c;
    memset(&c, 0, sizeof c);
    c.hp = grpo_default_hp();
    c.hp.kl_coef = beta;
    c.temp = 0.7f;
    c.pen = pen;
    c.adv = adv;
    c.coef = 1.0 / (double)nr;
    c.off = np_ - 1;
    c.n = nr;
    /* old log-probs: the current ones shifted so that rho lies inside the clip range for some
     * tokens and far outside (no gradient) for others; the reference elsewhere */
    float cur[64], old[64], ref[64];
    struct train_net_seq_opts so = train_net_seq_default_opts();
    float lp[64];
    so.temperature = c.temp;
    so.freq_penalty = c.pen;
    so.logp = lp;
    assert_int_equal(train_net_seq(net, ids, T, &so, NULL, err, sizeof err), 0);
    for (int64_t j = 0; j < nr; j++) {
        cur[j] = lp[c.off + j];
        const double shift = j % 3 == 2 ? 0.8 : (urand() - 0.5) * 0.2; /* rho e^-0.8 or ~1 */
        old[j] = (float)((double)cur[j] + shift);
        ref[j] = (float)((double)cur[j] + (urand() - 0.5) * 0.6);
    }
    c.old = old;
    c.ref = ref;
    size_t n_par = 0;
    const struct train_param *par = train_net_params_list(net, &n_par);
    train_grads_zero(par, n_par);
    (void)objective(net, ids, T, &c, 1);
    int clipped = 0;
    for (int64_t j = 0; j < nr; j++)
        clipped += c.tok[j].clipped_low + c.tok[j].clipped_high;
    if (adv != 0.0f) /* some tokens sit in the clipped branch, whose gradient is 0 */
        assert_true(clipped > 0);
    int checked = 0;
    for (size_t k = 0; k < n_par; k++) {
        for (int s = 0; s < 3; s++) {
            const int64_t i = (int64_t)(urand() * (double)par[k].n);
            const float w0 = par[k].w[i];
            const float h = 2e-3f;
            par[k].w[i] = w0 + h;
            const double lpl = objective(net, ids, T, &c, 0);
            par[k].w[i] = w0 - h;
            const double lmi = objective(net, ids, T, &c, 0);
            par[k].w[i] = w0;
            const double fd = (lpl - lmi) / (2.0 * (double)h), g = (double)par[k].g[i];
            const double tol = 3e-3 * fmax(1.0, fabs(fd)) + 0.03 * fabs(fd);
            if (fabs(fd - g) > tol)
                fail_msg("%s[%lld]: finite difference %.6g, gradient %.6g", par[k].name,
                         (long long)i, fd, g);
            checked += fabs(g) > 1e-6;
        }
    }
    assert_true(checked > 10); /* the check must see real gradients */
    train_net_free(net);
    lora_free(l);
    free(ids);
}

static void test_fd_gradient(void **state)
{
    (void)state;
    fd_check(-0.8f, 0.05f, 0.0f); /* the surrogate, clipped and not, with a little KL */
    fd_check(0.0f, 0.5f, 0.0f);   /* the KL term alone */
    fd_check(0.6f, 0.05f, 1.2f);  /* under the sampler's frequency penalty */
}

/* Turns of random tokens for the update tests. Owned by the caller (free each). */
static struct grpo_turn *make_turns(size_t n)
{
    struct grpo_turn *t = calloc(n, sizeof *t);
    for (size_t k = 0; k < n; k++) {
        t[k].n_prompt = 6 + (int64_t)k;
        t[k].n_resp = 5;
        t[k].ids = rand_tokens(t[k].n_prompt + t[k].n_resp);
        t[k].logp_engine = calloc((size_t)t[k].n_resp, sizeof(float));
        t[k].adv = k % 2 ? 0.9f : -0.9f;
        t[k].traj = (int64_t)(k / 2);
        t[k].turn = (int)(k % 2);
    }
    return t;
}

static void free_turns(struct grpo_turn *t, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        free(t[k].ids);
        free(t[k].logp_engine);
        free(t[k].logp_old);
        free(t[k].logp_ref);
        t[k].ids = NULL;
        t[k].logp_engine = t[k].logp_old = t[k].logp_ref = NULL;
    }
    free(t);
}

static void run_update(struct lora_adapter *l, float lr, float kl, int64_t mini_batch,
                       struct grpo_update_stats *st)
{
    char err[1024];
    struct train_net *net = NULL;
    struct train_net_params p = train_net_default_params();
    p.lora = l;
    assert_int_equal(train_net_new(model, &p, &net, err, sizeof err), 0);
    size_t n_par = 0;
    const struct train_param *par = train_net_params_list(net, &n_par);
    struct train_adamw_state opt;
    assert_int_equal(train_adamw_init(&opt, par, n_par, err, sizeof err), 0);
    const struct train_adamw aw = train_adamw_defaults();
    struct grpo_update_req q = {
        net, par,        n_par, &opt, &aw,  lr, 1.0f, 0.7f, grpo_default_hp(), GRPO_AGG_TOKEN_MEAN,
        1,   mini_batch, 77,    NULL, NULL, 0,  NULL, 0.0f};
    q.hp.kl_coef = kl;
    rs = 4242; /* the same turns every call */
    struct grpo_turn *t = make_turns(6);
    assert_int_equal(grpo_update(&q, t, 6, st, err, sizeof err), 0);
    free_turns(t, 6);
    train_adamw_deinit(&opt);
    train_net_free(net);
}

static void test_on_policy_ratio(void **state)
{
    (void)state;
    struct lora_adapter *l = random_lora(0.05f);
    struct grpo_update_stats st;
    /* E = 1, one mini-batch: rho is 1 exactly for every token */
    run_update(l, 1e-2f, 0.001f, 0, &st);
    assert_true(st.first_ratio_maxdev == 0.0);
    assert_true(st.ratio == 1.0);
    assert_int_equal(st.opt_steps, 1);
    assert_int_equal(st.evaluated, 30);
    assert_true(st.grad_norm > 0);
    /* three mini-batches: the first still exactly on-policy, the later ones not */
    struct lora_adapter *l2 = random_lora(0.05f);
    memcpy(l2->data, l->data, l->n_floats * sizeof *l->data);
    run_update(l2, 1e-2f, 0.001f, 2, &st);
    assert_true(st.first_ratio_maxdev == 0.0);
    assert_int_equal(st.opt_steps, 3);
    assert_true(st.ratio != 1.0);
    lora_free(l);
    lora_free(l2);
}

static void test_lr_zero_changes_nothing(void **state)
{
    (void)state;
    struct lora_adapter *l = random_lora(0.05f);
    float *before = malloc(l->n_floats * sizeof *before);
    memcpy(before, l->data, l->n_floats * sizeof *before);
    struct grpo_update_stats st;
    run_update(l, 0.0f, 100.0f, 0, &st); /* a huge KL coefficient, but no step size */
    assert_true(st.grad_norm > 0);
    assert_memory_equal(before, l->data, l->n_floats * sizeof *before);
    /* and a real step does move it */
    run_update(l, 1e-2f, 0.001f, 0, &st);
    assert_true(memcmp(before, l->data, l->n_floats * sizeof *before) != 0);
    free(before);
    lora_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_advantages),         cmocka_unit_test(test_token_objective),
        cmocka_unit_test(test_aggregation),        cmocka_unit_test(test_temperature_logprobs),
        cmocka_unit_test(test_penalised_logprobs), cmocka_unit_test(test_fd_gradient),
        cmocka_unit_test(test_on_policy_ratio),    cmocka_unit_test(test_lr_zero_changes_nothing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
