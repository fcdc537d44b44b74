/*
 * test_train_net.c - training through loaded models (src/train/net.h): its log-probs against
 * the inference engine's logits (F32 and Q8_0 files), full-mode gradients against the
 * finite-difference-checked train_tiny (tests/test_train_ops.c), LoRA gradients against the
 * chain rule applied to full gradients at the merged weights (dA = s·Bᵀ·G, dB = s·G·Aᵀ),
 * dropout against finite differences, and activation checkpointing bit for bit.
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
#include "engine/forward.h"
#include "engine/lora.h"
#include "engine/model.h"
#include "train/net.h"
#include "train/ops.h"
#include "train/vecmath.h"
#include <omp.h>

static char path_qwen[256], path_llama[256], path_q8[256];
static struct model *m_qwen, *m_llama, *m_q8;

static int make(const char *arch, const char *type, char *path, size_t len, struct model **m)
{
    char err[1024];
    snprintf(path, len, "/tmp/af_test_train_net_%s_%s_%d.gguf", arch, type, (int)getpid());
    struct af_engine_random_params rp = {arch, "tiny", type, 11, NULL};
    if (af_engine_make_random(&rp, path, err, sizeof err) || model_load(path, m, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", path, err);
        return -1;
    }
    return 0;
}

static int setup(void **state)
{
    (void)state;
    if (make("qwen2", "F32", path_qwen, sizeof path_qwen, &m_qwen) ||
        make("llama", "F32", path_llama, sizeof path_llama, &m_llama) ||
        make("qwen2", "Q8_0", path_q8, sizeof path_q8, &m_q8))
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    model_free(m_qwen);
    model_free(m_llama);
    model_free(m_q8);
    unlink(path_qwen);
    unlink(path_llama);
    unlink(path_q8);
    return 0;
}

static uint64_t rs = 99;
static double urand(void) /* [-1, 1) */
{
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rs >> 11) / (double)(1ull << 52) - 1.0;
}

static int32_t *rand_tokens(int64_t T, int64_t V)
{
    int32_t *t = malloc((size_t)T * sizeof *t);
    assert_non_null(t);
    for (int64_t i = 0; i < T; i++)
        t[i] = (int32_t)((urand() + 1) * 0.5 * (double)V) % (int32_t)V;
    return t;
}

static struct lora_adapter *rand_lora(const struct model *m, int rank, float alpha, float dropout,
                                      unsigned targets, double bscale)
{
    char err[256];
    struct lora_adapter *l = NULL;
    assert_int_equal(lora_new(&m->hp, rank, alpha, dropout, targets, &l, err, sizeof err), AF_OK);
    lora_init(l, 5);
    for (int64_t i = 0; i < l->n_layer * LORA_N_TARGETS; i++)
        if (l->pairs[i].b)
            for (int64_t j = 0; j < rank * l->pairs[i].n_out; j++)
                l->pairs[i].b[j] = (float)(bscale * urand());
    return l;
}

static struct train_net *lora_net(const struct model *m, struct lora_adapter *l, int checkpoint)
{
    char err[256];
    struct train_net_params p = train_net_default_params();
    p.lora = l;
    p.checkpoint = checkpoint;
    struct train_net *n = NULL;
    assert_int_equal(train_net_new(m, &p, &n, err, sizeof err), AF_OK);
    return n;
}

static struct train_net *full_net(const struct model *m, int checkpoint)
{
    char err[256];
    struct train_net_params p = train_net_default_params();
    p.full = 1;
    p.checkpoint = checkpoint;
    struct train_net *n = NULL;
    assert_int_equal(train_net_new(m, &p, &n, err, sizeof err), AF_OK);
    return n;
}

static const struct train_param *param_named(const struct train_net *n, const char *name)
{
    size_t np;
    const struct train_param *p = train_net_params_list(n, &np);
    for (size_t i = 0; i < np; i++)
        if (strcmp(p[i].name, name) == 0)
            return &p[i];
    fail_msg("no parameter %s", name);
    return NULL;
}

static void zero_grads(const struct train_net *n)
{
    size_t np;
    const struct train_param *p = train_net_params_list(n, &np);
    for (size_t i = 0; i < np; i++)
        memset(p[i].g, 0, (size_t)p[i].n * sizeof(float));
}

/* max |a - b| <= tol · max(|b|) */
static void expect_rel(const char *what, const float *a, const float *b, int64_t n, double tol)
{
    double mx = 0, worst = 0;
    int64_t wi = 0;
    for (int64_t i = 0; i < n; i++)
        mx = fabs((double)b[i]) > mx ? fabs((double)b[i]) : mx;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - (double)b[i]);
        if (d > worst)
            worst = d, wi = i;
    }
    if (worst > tol * mx + 1e-12)
        fail_msg("%s: element %lld differs by %g (%g vs %g; scale %g)", what, (long long)wi, worst,
                 (double)a[wi], (double)b[wi], mx);
}

/* ---- log-probs against the engine --------------------------------------------------------- */

static double engine_gap(const struct model *m, struct lora_adapter *l)
{
    char err[256];
    const int64_t T = 40, V = m->hp.n_vocab;
    int32_t *tok = rand_tokens(T, V);
    struct fwd_ctx *c = fwd_ctx_new(m, 256, 2);
    struct kv_seq s;
    kv_seq_init(&s, m);
    float *logits = malloc((size_t)(T * V) * sizeof *logits);
    assert_int_equal(fwd_eval(c, &s, tok, T, FWD_LOGITS_ALL, logits, err, sizeof err), AF_OK);
    struct lora_adapter *zero = l ? NULL : rand_lora(m, 2, 4, 0, LORA_ALL_TARGETS, 0.0);
    struct train_net *n = lora_net(m, l ? l : zero, 0);
    float *lp = malloc((size_t)(T - 1) * sizeof *lp);
    assert_int_equal(train_net_logprobs(n, tok, T, 0, lp, err, sizeof err), AF_OK);
    double gap = 0;
    for (int64_t t = 0; t < T - 1; t++) {
        const float *row = logits + t * V;
        double mx = (double)row[0], sum = 0;
        for (int64_t i = 1; i < V; i++)
            mx = (double)row[i] > mx ? (double)row[i] : mx;
        for (int64_t i = 0; i < V; i++)
            sum += exp((double)row[i] - mx);
        assert_true(sum >= 1.0); /* the max's own term is 1 */
        const double ref = (double)row[tok[t + 1]] - mx - log(sum > 1.0 ? sum : 1.0);
        gap = fabs(ref - (double)lp[t]) > gap ? fabs(ref - (double)lp[t]) : gap;
    }
    train_net_free(n);
    lora_free(zero);
    free(lp);
    free(logits);
    kv_seq_deinit(&s);
    fwd_ctx_free(c);
    free(tok);
    return gap;
}

static void test_logprobs_match_engine(void **state)
{
    (void)state;
    const double g_qwen = engine_gap(m_qwen, NULL), g_llama = engine_gap(m_llama, NULL);
    const double g_q8 = engine_gap(m_q8, NULL);
    printf("  max |Δ logp| vs engine: qwen2 F32 %.2e, llama F32 %.2e, qwen2 Q8_0 %.2e\n", g_qwen,
           g_llama, g_q8);
    assert_true(g_qwen < 1e-4);
    assert_true(g_llama < 1e-4);
    /* the engine rounds activations to 8 bits for Q8_0 dot products; training does not */
    assert_true(g_q8 < 5e-2);
}

/* ---- full mode against train_tiny --------------------------------------------------------- */

static float *tiny_slot(struct train_tiny *t, const char *name)
{
    long long il;
    char rest[64];
    if (strcmp(name, "token_embd.weight") == 0)
        return t->tok_embd;
    if (strcmp(name, "output_norm.weight") == 0)
        return t->output_norm;
    if (strcmp(name, "output.weight") == 0)
        return t->output;
    assert_int_equal(sscanf(name, "blk.%lld.%63s", &il, rest), 2);
    struct train_tiny_layer *ly = &t->layers[il];
    const struct {
        const char *s;
        float *p;
    } map[] = {{"attn_norm.weight", ly->attn_norm},
               {"ffn_norm.weight", ly->ffn_norm},
               {"attn_q.weight", ly->wq},
               {"attn_k.weight", ly->wk},
               {"attn_v.weight", ly->wv},
               {"attn_output.weight", ly->wo},
               {"attn_q.bias", ly->bq},
               {"attn_k.bias", ly->bk},
               {"attn_v.bias", ly->bv},
               {"ffn_gate.weight", ly->w_gate},
               {"ffn_up.weight", ly->w_up},
               {"ffn_down.weight", ly->w_down}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(rest, map[i].s) == 0)
            return map[i].p;
    fail_msg("unmapped %s", name);
    return NULL;
}

static void full_vs_tiny(const struct model *m)
{
    char err[256];
    const struct model_hparams *hp = &m->hp;
    struct train_tiny_cfg cfg = {hp->n_vocab,
                                 hp->n_embd,
                                 hp->n_layer,
                                 hp->n_head,
                                 hp->n_head_kv,
                                 hp->head_dim,
                                 hp->n_ff,
                                 hp->rms_eps,
                                 hp->rope_base,
                                 hp->rope_style == ROPE_NEOX,
                                 hp->arch == MODEL_ARCH_QWEN2,
                                 hp->tied_output};
    struct train_tiny *t = NULL, *tg = NULL;
    assert_int_equal(train_tiny_new(&cfg, &t, err, sizeof err), AF_OK);
    assert_int_equal(train_tiny_new(&cfg, &tg, err, sizeof err), AF_OK);
    struct train_net *n = full_net(m, 0);
    size_t np;
    const struct train_param *p = train_net_params_list(n, &np);
    size_t total = 0;
    for (size_t i = 0; i < np; i++) {
        memcpy(tiny_slot(t, p[i].name), p[i].w, (size_t)p[i].n * sizeof(float));
        total += (size_t)p[i].n;
    }
    assert_int_equal(total, t->n_params);
    const int64_t T = 33;
    int32_t *tok = rand_tokens(T, hp->n_vocab);
    double l_net, l_tiny;
    assert_int_equal(train_net_loss(n, tok, T, NULL, 1, &l_net, NULL, err, sizeof err), AF_OK);
    assert_int_equal(train_tiny_loss(t, tok, T, NULL, tg, NULL, &l_tiny, err, sizeof err), AF_OK);
    assert_true(fabs(l_net - l_tiny) <= 1e-5 * fabs(l_tiny));
    for (size_t i = 0; i < np; i++)
        expect_rel(p[i].name, p[i].g, tiny_slot(tg, p[i].name), p[i].n, 1e-4);
    /* checkpointing recomputes the same activations: the same bits */
    struct train_net *nc = full_net(m, 1);
    double l_c;
    assert_int_equal(train_net_loss(nc, tok, T, NULL, 1, &l_c, NULL, err, sizeof err), AF_OK);
    assert_true(l_c == l_net);
    size_t npc;
    const struct train_param *pc = train_net_params_list(nc, &npc);
    for (size_t i = 0; i < np; i++)
        assert_memory_equal(pc[i].g, p[i].g, (size_t)p[i].n * sizeof(float));
    train_net_free(nc);
    train_net_free(n);
    train_tiny_free(t);
    train_tiny_free(tg);
    free(tok);
}

static void test_full_grads_match_tiny(void **state)
{
    (void)state;
    full_vs_tiny(m_qwen);
    full_vs_tiny(m_llama);
}

/* ---- LoRA gradients by the chain rule ----------------------------------------------------- */

static const char *const gguf_lin[LORA_N_TARGETS] = {
    "attn_q.weight",   "attn_k.weight", "attn_v.weight",  "attn_output.weight",
    "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"};

static void lora_chain(const struct model *m, int checkpoint)
{
    char err[256], name[96];
    struct lora_adapter *l = rand_lora(m, 4, 8.0f, 0, LORA_ALL_TARGETS, 0.05);
    struct train_net *nl = lora_net(m, l, checkpoint);
    struct train_net *nf = full_net(m, 0);
    const float s = l->scale;
    const int64_t r = l->rank;
    /* the full net at the merged weights W + s·B·A */
    for (int64_t il = 0; il < l->n_layer; il++)
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            const struct lora_pair *pr = lora_pair_at(l, il, (enum lora_target)t);
            snprintf(name, sizeof name, "blk.%lld.%s", (long long)il, gguf_lin[t]);
            const struct train_param *w = param_named(nf, name);
            for (int64_t o = 0; o < pr->n_out; o++)
                for (int64_t i = 0; i < pr->n_in; i++) {
                    double acc = 0;
                    for (int64_t k = 0; k < r; k++)
                        acc += (double)pr->b[o * r + k] * (double)pr->a[k * pr->n_in + i];
                    w->w[o * pr->n_in + i] += (float)((double)s * acc);
                }
        }
    const int64_t T = 29;
    int32_t *tok = rand_tokens(T, m->hp.n_vocab);
    float *wts = malloc((size_t)(T - 1) * sizeof *wts);
    for (int64_t t = 0; t < T - 1; t++)
        wts[t] = t % 3 ? (float)(0.5 * urand()) : 0.0f; /* signed, some masked: as RL passes */
    double ll, lf;
    assert_int_equal(train_net_loss(nl, tok, T, wts, 1, &ll, NULL, err, sizeof err), AF_OK);
    assert_int_equal(train_net_loss(nf, tok, T, wts, 1, &lf, NULL, err, sizeof err), AF_OK);
    assert_true(fabs(ll - lf) <= 1e-5 * fabs(lf) + 1e-7);
    for (int64_t il = 0; il < l->n_layer; il++)
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            const struct lora_pair *pr = lora_pair_at(l, il, (enum lora_target)t);
            snprintf(name, sizeof name, "blk.%lld.%s", (long long)il, gguf_lin[t]);
            const float *G = param_named(nf, name)->g;
            const int64_t ni = pr->n_in, no = pr->n_out;
            float *ea = calloc((size_t)(r * ni), sizeof *ea), *eb = calloc((size_t)(no * r), 4);
            for (int64_t k = 0; k < r; k++)
                for (int64_t i = 0; i < ni; i++) {
                    double acc = 0;
                    for (int64_t o = 0; o < no; o++)
                        acc += (double)pr->b[o * r + k] * (double)G[o * ni + i];
                    ea[k * ni + i] = (float)((double)s * acc);
                }
            for (int64_t o = 0; o < no; o++)
                for (int64_t k = 0; k < r; k++) {
                    double acc = 0;
                    for (int64_t i = 0; i < ni; i++)
                        acc += (double)G[o * ni + i] * (double)pr->a[k * ni + i];
                    eb[o * r + k] = (float)((double)s * acc);
                }
            char pa[128], pb[128];
            snprintf(pa, sizeof pa, "blk.%lld.%s.lora_A", (long long)il,
                     lora_target_peft_name((enum lora_target)t));
            snprintf(pb, sizeof pb, "blk.%lld.%s.lora_B", (long long)il,
                     lora_target_peft_name((enum lora_target)t));
            expect_rel(pa, param_named(nl, pa)->g, ea, r * ni, 2e-4);
            expect_rel(pb, param_named(nl, pb)->g, eb, no * r, 2e-4);
            free(ea);
            free(eb);
        }
    free(wts);
    free(tok);
    train_net_free(nl);
    train_net_free(nf);
    lora_free(l);
}

static void test_lora_grads_chain_rule(void **state)
{
    (void)state;
    lora_chain(m_qwen, 0);
    lora_chain(m_llama, 0);
    lora_chain(m_qwen, 1);
}

static void test_lora_checkpoint_bits(void **state)
{
    (void)state;
    char err[256];
    struct lora_adapter *l = rand_lora(m_q8, 3, 6.0f, 0.1f, LORA_ALL_TARGETS, 0.05);
    struct train_net *a = lora_net(m_q8, l, 0), *b = lora_net(m_q8, l, 1);
    const int64_t T = 31;
    int32_t *tok = rand_tokens(T, m_q8->hp.n_vocab);
    double la, lb;
    train_net_set_dropout_seed(a, 3);
    train_net_set_dropout_seed(b, 3);
    assert_int_equal(train_net_loss(a, tok, T, NULL, 1, &la, NULL, err, sizeof err), AF_OK);
    assert_int_equal(train_net_loss(b, tok, T, NULL, 1, &lb, NULL, err, sizeof err), AF_OK);
    assert_true(la == lb);
    size_t na, nb;
    const struct train_param *pa = train_net_params_list(a, &na),
                             *pb = train_net_params_list(b, &nb);
    assert_int_equal(na, nb);
    for (size_t i = 0; i < na; i++)
        assert_memory_equal(pa[i].g, pb[i].g, (size_t)pa[i].n * sizeof(float));
    /* and a second run of the same net gives the same bits again */
    zero_grads(a);
    double la2;
    assert_int_equal(train_net_loss(a, tok, T, NULL, 1, &la2, NULL, err, sizeof err), AF_OK);
    assert_true(la2 == la);
    for (size_t i = 0; i < na; i++)
        assert_memory_equal(pa[i].g, pb[i].g, (size_t)pa[i].n * sizeof(float));
    train_net_free(a);
    train_net_free(b);
    lora_free(l);
    free(tok);
}

/* ---- dropout by finite differences -------------------------------------------------------- */

static void test_lora_dropout_fd(void **state)
{
    (void)state;
    char err[256];
    struct lora_adapter *l =
        rand_lora(m_qwen, 2, 4.0f, 0.25f, (1u << LORA_Q) | (1u << LORA_DOWN), 0.3);
    struct train_net *n = lora_net(m_qwen, l, 0);
    train_net_set_dropout_seed(n, 17);
    const int64_t T = 17;
    int32_t *tok = rand_tokens(T, m_qwen->hp.n_vocab);
    double loss;
    assert_int_equal(train_net_loss(n, tok, T, NULL, 1, &loss, NULL, err, sizeof err), AF_OK);
    size_t np;
    const struct train_param *p = train_net_params_list(n, &np);
    assert_int_equal(np, 2 * 2 * (size_t)m_qwen->hp.n_layer);
    const float h = 1e-2f;
    int checked = 0;
    for (size_t i = 0; i < np; i++)
        for (int64_t j = 0; j < p[i].n; j += p[i].n / 5 + 1) {
            const float keep = p[i].w[j];
            double lp, lm;
            p[i].w[j] = keep + h;
            assert_int_equal(train_net_loss(n, tok, T, NULL, 0, &lp, NULL, err, sizeof err), 0);
            p[i].w[j] = keep - h;
            assert_int_equal(train_net_loss(n, tok, T, NULL, 0, &lm, NULL, err, sizeof err), 0);
            p[i].w[j] = keep;
            const double num = (lp - lm) / (2.0 * (double)h);
            const double ana = (double)p[i].g[j];
            if (fabs(num - ana) > 2e-2 * fabs(num) + 2e-4)
                fail_msg("%s[%lld]: analytic %g, numeric %g", p[i].name, (long long)j, ana, num);
            checked++;
        }
    assert_true(checked > 20);
    /* another seed draws another mask */
    double other;
    train_net_set_dropout_seed(n, 18);
    assert_int_equal(train_net_loss(n, tok, T, NULL, 0, &other, NULL, err, sizeof err), AF_OK);
    assert_true(other != loss);
    train_net_free(n);
    lora_free(l);
    free(tok);
}

/* ---- log-probs with and without the adapter, errors --------------------------------------- */

static void test_logprobs_with_without(void **state)
{
    (void)state;
    char err[256];
    struct lora_adapter *l = rand_lora(m_qwen, 4, 8.0f, 0, LORA_ALL_TARGETS, 0.2);
    struct lora_adapter *z = rand_lora(m_qwen, 4, 8.0f, 0, LORA_ALL_TARGETS, 0.0);
    struct train_net *n = lora_net(m_qwen, l, 0), *nz = lora_net(m_qwen, z, 0);
    const int64_t T = 20;
    int32_t *tok = rand_tokens(T, m_qwen->hp.n_vocab);
    float with[19], without[19], zero[19], via_loss[19];
    assert_int_equal(train_net_logprobs(n, tok, T, 1, with, err, sizeof err), AF_OK);
    assert_int_equal(train_net_logprobs(n, tok, T, 0, without, err, sizeof err), AF_OK);
    assert_int_equal(train_net_logprobs(nz, tok, T, 1, zero, err, sizeof err), AF_OK);
    double loss;
    assert_int_equal(train_net_loss(n, tok, T, NULL, 0, &loss, via_loss, err, sizeof err), AF_OK);
    assert_memory_equal(without, zero, sizeof zero);
    assert_memory_equal(with, via_loss, sizeof with);
    double diff = 0, sum = 0;
    for (int t = 0; t < 19; t++) {
        diff += fabs((double)with[t] - (double)without[t]);
        sum -= (double)with[t] / 19.0;
    }
    assert_true(diff > 1e-3);
    assert_true(fabs(sum - loss) < 1e-5 * fabs(loss));
    /* bad input */
    tok[5] = (int32_t)m_qwen->hp.n_vocab;
    assert_int_equal(train_net_logprobs(n, tok, T, 1, with, err, sizeof err), AF_EINVAL);
    assert_non_null(strstr(err, "token 5"));
    assert_int_equal(train_net_loss(n, tok, 1, NULL, 1, &loss, NULL, err, sizeof err), AF_EINVAL);
    train_net_free(n);
    train_net_free(nz);
    lora_free(l);
    lora_free(z);
    free(tok);
}

/* lora_merge_f32 into a full net's weights gives the LoRA net's loss; unmerging restores them. */
static void merge_all(const struct lora_adapter *l, const struct train_net *nf, float sign)
{
    char name[96];
    for (int64_t il = 0; il < l->n_layer; il++)
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            snprintf(name, sizeof name, "blk.%lld.%s", (long long)il, gguf_lin[t]);
            lora_merge_f32(l, lora_pair_at(l, il, (enum lora_target)t), param_named(nf, name)->w,
                           sign);
        }
}

static void test_merge_unmerge(void **state)
{
    (void)state;
    char err[256];
    struct lora_adapter *l = rand_lora(m_llama, 4, 8.0f, 0, LORA_ALL_TARGETS, 0.05);
    struct train_net *nl = lora_net(m_llama, l, 0), *nf = full_net(m_llama, 0);
    size_t np;
    const struct train_param *p = train_net_params_list(nf, &np);
    size_t total = 0;
    for (size_t i = 0; i < np; i++)
        total += (size_t)p[i].n;
    float *orig = malloc(total * sizeof *orig);
    for (size_t i = 0, off = 0; i < np; off += (size_t)p[i].n, i++)
        memcpy(orig + off, p[i].w, (size_t)p[i].n * sizeof(float));
    merge_all(l, nf, 1.0f);
    const float *wq = param_named(nf, "blk.0.attn_q.weight")->w;
    const size_t wq_off = (size_t)(param_named(nf, "blk.0.attn_q.weight") - p);
    size_t off0 = 0;
    for (size_t i = 0; i < wq_off; i++)
        off0 += (size_t)p[i].n;
    double moved = 0;
    for (int64_t i = 0; i < param_named(nf, "blk.0.attn_q.weight")->n; i++)
        moved = fmax(moved, fabs((double)wq[i] - (double)orig[off0 + (size_t)i]));
    assert_true(moved > 1e-4); /* the merge changed the weight */
    const int64_t T = 21;
    int32_t *tok = rand_tokens(T, m_llama->hp.n_vocab);
    double ll, lf;
    assert_int_equal(train_net_loss(nl, tok, T, NULL, 0, &ll, NULL, err, sizeof err), 0);
    assert_int_equal(train_net_loss(nf, tok, T, NULL, 0, &lf, NULL, err, sizeof err), 0);
    assert_true(fabs(ll - lf) <= 1e-5 * fabs(ll));
    merge_all(l, nf, -1.0f);
    for (size_t i = 0, off = 0; i < np; off += (size_t)p[i].n, i++)
        expect_rel(p[i].name, p[i].w, orig + off, p[i].n, 1e-6);
    free(tok);
    free(orig);
    train_net_free(nl);
    train_net_free(nf);
    lora_free(l);
}

static void test_adapter_mismatch(void **state)
{
    (void)state;
    char err[256];
    struct model_hparams hp = m_qwen->hp;
    hp.n_layer = 3;
    struct lora_adapter *l = NULL;
    assert_int_equal(lora_new(&hp, 2, 4, 0, LORA_ALL_TARGETS, &l, err, sizeof err), AF_OK);
    struct train_net_params p = train_net_default_params();
    p.lora = l;
    struct train_net *n = NULL;
    assert_int_equal(train_net_new(m_qwen, &p, &n, err, sizeof err), AF_EINVAL);
    assert_non_null(strstr(err, "3 layers"));
    assert_null(n);
    lora_free(l);
    p.lora = NULL;
    assert_int_equal(train_net_new(m_qwen, &p, &n, err, sizeof err), AF_EINVAL);
    unsigned mask;
    assert_int_equal(lora_targets_parse("q,bogus", &mask, err, sizeof err), AF_EINVAL);
    assert_non_null(strstr(err, "bogus"));
    assert_int_equal(lora_targets_parse("q_proj,v", &mask, err, sizeof err), AF_OK);
    assert_int_equal(mask, (1u << LORA_Q) | (1u << LORA_V));
}

/* Loss and every gradient of a full-training step of a model wide enough that the products,
 * attention and elementwise passes all split between threads. */
static void full_step(int threads, double *loss, float **grads, size_t *ngrad)
{
    struct model_hparams hp = {0};
    hp.arch = MODEL_ARCH_LLAMA;
    hp.n_vocab = 256;
    hp.n_ctx_train = 512;
    hp.n_embd = 128;
    hp.n_layer = 2;
    hp.n_head = 2;
    hp.n_head_kv = 2;
    hp.head_dim = 64;
    hp.n_rot = 64;
    hp.n_ff = 352;
    hp.rms_eps = 1e-5f;
    hp.rope_base = 10000.0f;
    hp.rope_freq_scale = 1.0f;
    hp.rope_style = ROPE_NORM;
    char err[256];
    struct train_net *n = NULL;
    assert_int_equal(train_net_new_random(&hp, 7, 0.05f, 0, &n, err, sizeof err), 0);
    enum { T = 300 };
    int32_t tok[T];
    for (int t = 0; t < T; t++)
        tok[t] = (t * 37 + 11) % 256;
    omp_set_num_threads(threads);
    assert_int_equal(train_net_loss(n, tok, T, NULL, 1, loss, NULL, err, sizeof err), 0);
    size_t np, total = 0;
    const struct train_param *p = train_net_params_list(n, &np);
    for (size_t i = 0; i < np; i++)
        total += (size_t)p[i].n;
    float *g = malloc(total * sizeof *g);
    size_t off = 0;
    for (size_t i = 0; i < np; i++) {
        memcpy(g + off, p[i].g, (size_t)p[i].n * sizeof *g);
        off += (size_t)p[i].n;
    }
    train_net_free(n);
    *grads = g;
    *ngrad = total;
}

/* With the AVX-512 kernels no sum depends on how work is split: one thread and two give the
 * same bits, so a run resumes exactly on another thread count. */
static void test_threads_same_bits(void **state)
{
    (void)state;
    if (!train_avx512_enabled()) {
        printf("skip: the plain kernels' OpenBLAS products depend on the thread count\n");
        return;
    }
    const int saved = omp_get_max_threads();
    double l1, l2;
    float *g1, *g2;
    size_t n1, n2;
    full_step(1, &l1, &g1, &n1);
    full_step(2, &l2, &g2, &n2);
    omp_set_num_threads(saved);
    assert_int_equal(n1, n2);
    assert_memory_equal(&l1, &l2, sizeof l1);
    assert_memory_equal(g1, g2, n1 * sizeof *g1);
    free(g1);
    free(g2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logprobs_match_engine), cmocka_unit_test(test_full_grads_match_tiny),
        cmocka_unit_test(test_lora_grads_chain_rule), cmocka_unit_test(test_lora_checkpoint_bits),
        cmocka_unit_test(test_lora_dropout_fd),       cmocka_unit_test(test_logprobs_with_without),
        cmocka_unit_test(test_merge_unmerge),         cmocka_unit_test(test_adapter_mismatch),
        cmocka_unit_test(test_threads_same_bits),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
