/*
 * test_lora_infer.c - LoRA adapters at inference (engine/lora_apply.c, the forward hook,
 * af_engine_params.lora_dir, `gguf:PATH+lora:DIR`) and `agentflow model merge`
 * (engine/lora_merge.c), on tiny random qwen2 and llama models written by make-random:
 *   - a zero-B adapter leaves every logit bit-identical;
 *   - a random adapter gives the logits of a model whose F32 weights were merged by hand;
 *   - merged files load, match base + adapter (F32: 1e-4; Q8_0: MERGE_Q8_TOL), copy every
 *     key-value and untouched tensor byte for byte, and honour --type with its fallbacks;
 *   - PEFT folders through the engine, the `gguf:` back-end and the CLI, with their errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "agentflow/engine.h"
#include "agentflow/llm.h"
#include "engine/forward.h"
#include "engine/gguf.h"
#include "engine/lora.h"
#include "engine/lora_merge.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "support/proc.h"

/* Merging into a Q8_0 base requantises W + ΔW, moving each weight by up to half a Q8_0 step
 * (|w|max / 254 per 32-block). On these models that costs the logits about what quantising
 * the F32 base to Q8_0 does: 9e-3 measured for both (adapter rank 8, scale 2, B in ±0.1,
 * which moves the logits by ~1); the bound leaves 3x. */
#define MERGE_Q8_TOL 3e-2
#define N_PROMPT 40 /* prefill: more than one 8-row chunk, so the threaded path runs */
#define N_DECODE 3  /* then single-token steps */
#define N_ROWS (N_PROMPT + N_DECODE)

static char g_dir[64];
static char qwen_f32[128], llama_f32[128], qwen_q8[128], llama_q8[128];

/* ---- helpers ------------------------------------------------------------------------------ */

static void tpath(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", g_dir, name);
}

static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float urand(uint64_t *s) /* [-1, 1) */
{
    return (float)((double)(next_u64(s) >> 11) / (double)(1ull << 52) - 1.0);
}

static void make_model(const char *arch, const char *type, uint64_t seed, char *path, size_t cap,
                       const char *name)
{
    char err[1024];
    tpath(path, cap, name);
    struct af_engine_random_params rp = {arch, "tiny", type, seed, NULL};
    if (af_engine_make_random(&rp, path, err, sizeof err))
        fail_msg("make-random %s: %s", name, err);
}

static struct model *load(const char *path)
{
    char err[1024];
    struct model *m = NULL;
    if (model_load(path, &m, err, sizeof err))
        fail_msg("%s", err);
    return m;
}

/* A rank-`rank` adapter over `targets` with PEFT's A and, when b_scale > 0, B uniform in
 * ±b_scale (B = 0 otherwise). Owned: lora_free. */
static struct lora_adapter *new_adapter(const struct model_hparams *hp, int rank, float alpha,
                                        unsigned targets, uint64_t seed, float b_scale)
{
    char err[1024];
    struct lora_adapter *l = NULL;
    if (lora_new(hp, rank, alpha, 0.0f, targets, &l, err, sizeof err))
        fail_msg("%s", err);
    lora_init(l, seed);
    uint64_t s = seed ^ 0x5eedull;
    for (int64_t i = 0; b_scale > 0 && i < l->n_layer * LORA_N_TARGETS; i++) {
        struct lora_pair *p = &l->pairs[i];
        for (int64_t j = 0; p->b && j < l->rank * p->n_out; j++)
            p->b[j] = b_scale * urand(&s);
    }
    return l;
}

/* Logits of N_ROWS positions (N_PROMPT by prefill, then N_DECODE single steps) with adapter l
 * (may be NULL). malloc'd [N_ROWS][n_vocab]. */
static float *run_logits(const struct model *m, const struct lora_adapter *l, int n_threads)
{
    char err[1024];
    const int64_t nv = m->hp.n_vocab;
    int32_t ids[N_ROWS];
    for (int i = 0; i < N_ROWS; i++)
        ids[i] = (int32_t)((i * 37 + 11) % 200);
    float *out = malloc((size_t)N_ROWS * (size_t)nv * sizeof *out);
    assert_non_null(out);
    struct fwd_ctx *c = fwd_ctx_new(m, 128, n_threads);
    fwd_ctx_set_lora(c, l);
    struct kv_seq s;
    kv_seq_init(&s, m);
    if (fwd_eval(c, &s, ids, N_PROMPT, FWD_LOGITS_ALL, out, err, sizeof err))
        fail_msg("%s", err);
    for (int i = N_PROMPT; i < N_ROWS; i++)
        if (fwd_eval(c, &s, ids + i, 1, FWD_LOGITS_ALL, out + (size_t)i * (size_t)nv, err,
                     sizeof err))
            fail_msg("%s", err);
    kv_seq_deinit(&s);
    fwd_ctx_free(c);
    return out;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        w = d > w ? d : w;
    }
    return w;
}

static const char *const target_suffix[LORA_N_TARGETS] = {
    "attn_q.weight",   "attn_k.weight", "attn_v.weight",  "attn_output.weight",
    "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"};

/* The adapter's pair for a GGUF tensor name, or NULL. */
static const struct lora_pair *pair_of(const struct lora_adapter *l, const char *name)
{
    for (int64_t il = 0; il < l->n_layer; il++)
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            char want[96];
            snprintf(want, sizeof want, "blk.%lld.%s", (long long)il, target_suffix[t]);
            if (!strcmp(name, want))
                return lora_pair_at(l, il, (enum lora_target)t);
        }
    return NULL;
}

/* An independent merge of an F32 model: W += scale · B·A in double, written to dst. */
static void write_hand_merged(const struct model *m, const struct lora_adapter *l, const char *dst)
{
    char err[1024];
    const struct gguf_file *g = m->gguf;
    struct gguf_writer *w = gguf_writer_new();
    gguf_writer_copy_kvs(w, g);
    const uint64_t nt = gguf_n_tensors(g);
    float **bufs = calloc(nt, sizeof *bufs);
    for (uint64_t i = 0; i < nt; i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.n, t->name.s);
        const struct lora_pair *p = pair_of(l, name);
        const void *data = t->data;
        if (p) {
            assert_int_equal(t->type, GGML_TYPE_F32);
            assert_int_equal(t->ne[0], p->n_in);
            assert_int_equal(t->ne[1], p->n_out);
            const float *w0 = t->data;
            bufs[i] = malloc(t->nbytes);
            for (int64_t o = 0; o < p->n_out; o++)
                for (int64_t k = 0; k < p->n_in; k++) {
                    double d = 0;
                    for (int r = 0; r < l->rank; r++)
                        d += (double)p->b[o * l->rank + r] * (double)p->a[r * p->n_in + k];
                    bufs[i][o * p->n_in + k] =
                        (float)((double)w0[o * p->n_in + k] + (double)l->scale * d);
                }
            data = bufs[i];
        }
        assert_int_equal(gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, data, t->nbytes,
                                                err, sizeof err),
                         0);
    }
    if (gguf_writer_write(w, dst, err, sizeof err))
        fail_msg("%s", err);
    gguf_writer_free(w);
    for (uint64_t i = 0; i < nt; i++)
        free(bufs[i]);
    free(bufs);
}

/* Every KV of base and merged byte-identical; every tensor either adapted by l (then of
 * merged_type, or its base type for LORA_MERGE_OWN_TYPE) or byte-identical. Returns the
 * adapted count. */
static size_t check_merged_file(const char *base, const char *merged, const struct lora_adapter *l,
                                uint32_t merged_type)
{
    char err[1024];
    struct gguf_file *a = NULL, *b = NULL;
    assert_int_equal(gguf_open(base, &a, err, sizeof err), 0);
    assert_int_equal(gguf_open(merged, &b, err, sizeof err), 0);
    assert_int_equal(gguf_n_kv(a), gguf_n_kv(b));
    for (uint64_t i = 0; i < gguf_n_kv(a); i++) {
        const struct gguf_kv *ka = gguf_kv_at(a, i), *kb = gguf_kv_at(b, i);
        assert_int_equal(ka->key.n, kb->key.n);
        assert_memory_equal(ka->key.s, kb->key.s, ka->key.n);
        assert_int_equal(ka->type, kb->type);
        assert_int_equal(ka->nbytes, kb->nbytes);
        assert_memory_equal(ka->data, kb->data, ka->nbytes);
    }
    assert_int_equal(gguf_n_tensors(a), gguf_n_tensors(b));
    size_t n_adapted = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(a); i++) {
        const struct gguf_tensor *ta = gguf_tensor_at(a, i), *tb = gguf_tensor_at(b, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)ta->name.n, ta->name.s);
        assert_true(gguf_str_eq(tb->name, name));
        assert_memory_equal(ta->ne, tb->ne, sizeof ta->ne);
        if (pair_of(l, name)) {
            uint32_t want = merged_type == LORA_MERGE_OWN_TYPE ? ta->type : merged_type;
            if (tb->type != want)
                fail_msg("%s: merged as %s, want %s", name, quant_type_name(tb->type),
                         quant_type_name(want));
            n_adapted++;
        } else {
            assert_int_equal(ta->type, tb->type);
            assert_int_equal(ta->nbytes, tb->nbytes);
            if (memcmp(ta->data, tb->data, ta->nbytes))
                fail_msg("%s: not adapted, but its bytes changed", name);
        }
    }
    gguf_close(a);
    gguf_close(b);
    return n_adapted;
}

static size_t n_pairs(const struct lora_adapter *l)
{
    size_t n = 0;
    for (int64_t i = 0; i < l->n_layer * LORA_N_TARGETS; i++)
        n += l->pairs[i].a != NULL;
    return n;
}

/* ---- in-memory adapters ------------------------------------------------------------------- */

/* A fresh adapter (B = 0) leaves every logit bit-identical, prefill and decode alike. */
static void test_zero_b_is_identity(void **state)
{
    (void)state;
    const char *paths[] = {qwen_f32, llama_f32, qwen_q8};
    for (size_t k = 0; k < sizeof paths / sizeof paths[0]; k++) {
        struct model *m = load(paths[k]);
        struct lora_adapter *l = new_adapter(&m->hp, 4, 8.0f, LORA_ALL_TARGETS, 11 + k, 0.0f);
        float *base = run_logits(m, NULL, 2), *with = run_logits(m, l, 2);
        const size_t n = (size_t)N_ROWS * (size_t)m->hp.n_vocab;
        if (memcmp(base, with, n * sizeof *base))
            fail_msg("%s: a zero-B adapter changed the logits (max %g)", paths[k],
                     max_diff(base, with, n));
        free(base);
        free(with);
        lora_free(l);
        model_free(m);
    }
}

/* A random adapter's forward equals the forward of the hand-merged F32 weights, is
 * deterministic, and does not depend on the thread count. */
static void test_random_matches_hand_merge(void **state)
{
    (void)state;
    static const struct {
        int rank;
        float alpha;
        unsigned targets;
    } cases[] = {
        {4, 8.0f, LORA_ALL_TARGETS},
        {3, 5.0f, (1u << LORA_Q) | (1u << LORA_V) | (1u << LORA_DOWN)},
        {2, 2.0f, (1u << LORA_K) | (1u << LORA_O) | (1u << LORA_GATE) | (1u << LORA_UP)},
    };
    const char *paths[] = {qwen_f32, llama_f32};
    char merged[160];
    tpath(merged, sizeof merged, "hand.gguf");
    for (size_t k = 0; k < 2; k++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            struct model *m = load(paths[k]);
            struct lora_adapter *l =
                new_adapter(&m->hp, cases[c].rank, cases[c].alpha, cases[c].targets, 100 + c, 0.5f);
            write_hand_merged(m, l, merged);
            struct model *mm = load(merged);
            const size_t n = (size_t)N_ROWS * (size_t)m->hp.n_vocab;
            float *base = run_logits(m, NULL, 2), *with = run_logits(m, l, 2);
            float *again = run_logits(m, l, 1), *hand = run_logits(mm, NULL, 2);
            double d = max_diff(with, hand, n), moved = max_diff(base, with, n);
            printf("  %s case %zu: max |dlogit| vs hand merge %.3g (adapter moved them %.3g)\n",
                   k ? "llama" : "qwen2", c, d, moved);
            if (d >= 1e-4)
                fail_msg("%s case %zu: adapter vs hand-merged logits differ by %g", paths[k], c, d);
            assert_true(moved > 1e-2);
            assert_memory_equal(with, again, n * sizeof *with);
            free(base);
            free(with);
            free(again);
            free(hand);
            lora_free(l);
            model_free(mm);
            model_free(m);
        }
    unlink(merged);
}

/* lora_merge_model on F32 bases: loads, matches base + adapter within 1e-4, copies every KV
 * and untouched tensor byte for byte; --type and its fallbacks for the merged tensors. */
static void test_merge_f32(void **state)
{
    (void)state;
    char err[1024], out[160];
    tpath(out, sizeof out, "merged.gguf");
    const char *paths[] = {qwen_f32, llama_f32};
    const unsigned targets = (1u << LORA_Q) | (1u << LORA_V) | (1u << LORA_O) | (1u << LORA_DOWN);
    for (size_t k = 0; k < 2; k++) {
        struct model *m = load(paths[k]);
        struct lora_adapter *l = new_adapter(&m->hp, 4, 8.0f, targets, 7 + k, 0.5f);
        struct lora_merge_stats st = {0, 0};
        if (lora_merge_model(m, l, out, LORA_MERGE_OWN_TYPE, &st, err, sizeof err))
            fail_msg("%s", err);
        assert_int_equal(st.n_merged, n_pairs(l));
        assert_int_equal(st.n_merged + st.n_copied, gguf_n_tensors(m->gguf));
        assert_int_equal(check_merged_file(paths[k], out, l, LORA_MERGE_OWN_TYPE), n_pairs(l));
        struct model *mm = load(out);
        const size_t n = (size_t)N_ROWS * (size_t)m->hp.n_vocab;
        float *with = run_logits(m, l, 2), *merged = run_logits(mm, NULL, 2);
        double d = max_diff(with, merged, n);
        printf("  %s F32 merge: max |dlogit| %.3g\n", k ? "llama" : "qwen2", d);
        if (d >= 1e-4)
            fail_msg("%s: merged logits differ by %g", paths[k], d);
        model_free(mm);
        /* --type Q4_K: rows of 64 (n_embd) and 192 (n_ff) are no whole 256-blocks, so the
         * merged tensors fall back to Q5_0 as `model quantize` does. */
        assert_int_equal(lora_merge_model(m, l, out, GGML_TYPE_Q4_K, NULL, err, sizeof err), 0);
        check_merged_file(paths[k], out, l, GGML_TYPE_Q5_0);
        assert_int_equal(lora_merge_model(m, l, out, GGML_TYPE_BF16, NULL, err, sizeof err), 0);
        check_merged_file(paths[k], out, l, GGML_TYPE_BF16);
        mm = load(out);
        float *bf = run_logits(mm, NULL, 2);
        assert_true(max_diff(with, bf, n) < 0.1); /* BF16 rounding, activations too */
        free(bf);
        model_free(mm);
        free(with);
        free(merged);
        lora_free(l);
        model_free(m);
    }
    unlink(out);
}

/* A Q8_0 base: merged tensors stay Q8_0 (requantised), untouched ones keep their bytes, and
 * the logits follow the runtime adapter within MERGE_Q8_TOL; --type F32 writes F32. */
static void test_merge_q8_0(void **state)
{
    (void)state;
    char err[1024], out[160];
    tpath(out, sizeof out, "merged_q8.gguf");
    const char *paths[] = {qwen_q8, llama_q8};
    for (size_t k = 0; k < 2; k++) {
        struct model *m = load(paths[k]);
        struct lora_adapter *l = new_adapter(&m->hp, 8, 16.0f, LORA_ALL_TARGETS, 21 + k, 0.1f);
        if (lora_merge_model(m, l, out, LORA_MERGE_OWN_TYPE, NULL, err, sizeof err))
            fail_msg("%s", err);
        check_merged_file(paths[k], out, l, GGML_TYPE_Q8_0);
        struct model *mm = load(out);
        const size_t n = (size_t)N_ROWS * (size_t)m->hp.n_vocab;
        float *base = run_logits(m, NULL, 2), *with = run_logits(m, l, 2);
        float *merged = run_logits(mm, NULL, 2);
        double d = max_diff(with, merged, n), moved = max_diff(base, with, n);
        printf("  %s Q8_0 merge: max |dlogit| %.3g (bound %.0e; the adapter moved them %.3g)\n",
               k ? "llama" : "qwen2", d, MERGE_Q8_TOL, moved);
        if (d >= MERGE_Q8_TOL)
            fail_msg("%s: merged Q8_0 logits differ by %g", paths[k], d);
        assert_true(moved > 10 * d);
        model_free(mm);
        assert_int_equal(lora_merge_model(m, l, out, GGML_TYPE_F32, NULL, err, sizeof err), 0);
        check_merged_file(paths[k], out, l, GGML_TYPE_F32);
        free(base);
        free(with);
        free(merged);
        lora_free(l);
        model_free(m);
    }
    unlink(out);
}

/* Adapters of another shape, bad types and unwritable outputs fail and say why. */
static void test_merge_errors(void **state)
{
    (void)state;
    char err[1024], out[160];
    tpath(out, sizeof out, "bad.gguf");
    struct model *m = load(qwen_f32);
    struct model_hparams hp = m->hp;
    hp.n_ff = 128;
    struct lora_adapter *l = new_adapter(&hp, 2, 2.0f, LORA_ALL_TARGETS, 3, 0.1f);
    err[0] = '\0';
    assert_int_equal(lora_merge_model(m, l, out, LORA_MERGE_OWN_TYPE, NULL, err, sizeof err),
                     AF_EINVAL);
    assert_non_null(strstr(err, "blk.0.ffn_gate.weight"));
    assert_int_equal(access(out, F_OK), -1);
    lora_free(l);
    hp = m->hp;
    hp.n_layer = 3;
    l = new_adapter(&hp, 2, 2.0f, LORA_ALL_TARGETS, 3, 0.1f);
    assert_int_equal(lora_merge_model(m, l, out, LORA_MERGE_OWN_TYPE, NULL, err, sizeof err),
                     AF_EINVAL);
    assert_non_null(strstr(err, "layers"));
    lora_free(l);
    l = new_adapter(&m->hp, 2, 2.0f, LORA_ALL_TARGETS, 3, 0.1f);
    assert_int_equal(lora_merge_model(m, l, out, GGML_TYPE_Q8_K, NULL, err, sizeof err), AF_EINVAL);
    assert_int_equal(lora_merge_model(m, l, "/nonexistent-dir/x.gguf", LORA_MERGE_OWN_TYPE, NULL,
                                      err, sizeof err),
                     AF_EIO);
    assert_non_null(strstr(err, "/nonexistent-dir/x.gguf"));
    lora_free(l);
    model_free(m);
    assert_int_equal(lora_merge_parse_type("q8_0"), GGML_TYPE_Q8_0);
    assert_int_equal(lora_merge_parse_type("Q4_K_M"), -1);
    assert_int_equal(lora_merge_parse_type("Q8_K"), -1);
    assert_int_equal(lora_merge_files(qwen_f32, g_dir, out, "Q3_XX", NULL, err, sizeof err),
                     AF_EINVAL);
    assert_non_null(strstr(err, "Q3_XX"));
    assert_int_not_equal(
        lora_merge_files("/nonexistent.gguf", g_dir, out, NULL, NULL, err, sizeof err), AF_OK);
    assert_non_null(strstr(err, "/nonexistent.gguf"));
}

/* ---- PEFT folders: engine, `gguf:PATH+lora:DIR`, CLI ------------------------------------- */

/* Saves a random adapter for `path` as a PEFT folder `name` under g_dir; returns it (owned). */
static struct lora_adapter *save_adapter(const struct model *m, const char *name, char *dir,
                                         size_t cap, float b_scale)
{
    char err[1024];
    tpath(dir, cap, name);
    struct lora_adapter *l = new_adapter(&m->hp, 4, 8.0f, LORA_ALL_TARGETS, 77, b_scale);
    if (lora_save_peft(l, m, dir, "tiny", err, sizeof err))
        fail_msg("%s", err);
    return l;
}

static struct af_engine_params engine_params(const char *lora_dir)
{
    struct af_engine_params ep = af_engine_default_params();
    ep.n_threads = 2;
    ep.n_ctx = 256;
    ep.chat_template = "chatml"; /* the byte-vocabulary file has no template */
    ep.lora_dir = lora_dir;
    return ep;
}

/* A saved and reloaded adapter gives the in-memory adapter's logits, through fwd_ctx and
 * through af_engine (whose info reports it); af_engine errors name the folder. */
static void test_peft_folder_engine(void **state)
{
    (void)state;
    char err[1024], dir[160];
    const char *paths[] = {qwen_f32, llama_f32};
    for (size_t k = 0; k < 2; k++) {
        struct model *m = load(paths[k]);
        struct lora_adapter *l = save_adapter(m, k ? "ad_llama" : "ad_qwen", dir, sizeof dir, 0.5f);
        struct lora_adapter *back = NULL;
        if (lora_load_peft(dir, m, &back, err, sizeof err))
            fail_msg("%s", err);
        const size_t n = (size_t)N_ROWS * (size_t)m->hp.n_vocab;
        float *mem = run_logits(m, l, 2), *file = run_logits(m, back, 2);
        assert_memory_equal(mem, file, n * sizeof *mem);
        struct af_engine_params ep = engine_params(dir);
        struct af_engine *e = NULL;
        if (af_engine_load(paths[k], &ep, &e, err, sizeof err))
            fail_msg("%s", err);
        int32_t ids[N_ROWS];
        for (int i = 0; i < N_ROWS; i++)
            ids[i] = (int32_t)((i * 37 + 11) % 200);
        float *eng = malloc(n * sizeof *eng);
        assert_int_equal(af_engine_logits(e, ids, N_ROWS, 1, eng, err, sizeof err), 0);
        assert_true(max_diff(mem, eng, n) < 1e-5);
        char *info = af_engine_info_json(e);
        json_error_t je;
        json_t *j = json_loads(info, 0, &je), *lj = json_object_get(j, "lora");
        assert_non_null(lj);
        assert_string_equal(json_string_value(json_object_get(lj, "dir")), dir);
        assert_int_equal(json_integer_value(json_object_get(lj, "rank")), 4);
        assert_true(fabs(json_number_value(json_object_get(lj, "alpha")) - 8.0) < 1e-6);
        assert_int_equal(json_array_size(json_object_get(lj, "targets")), LORA_N_TARGETS);
        assert_string_equal(json_string_value(json_array_get(json_object_get(lj, "targets"), 0)),
                            "q_proj");
        json_decref(j);
        free(info);
        af_engine_free(e);
        free(eng);
        free(mem);
        free(file);
        lora_free(back);
        lora_free(l);
        model_free(m);
    }
    /* No adapter: "lora" is null. A missing folder fails, naming it (once). */
    struct af_engine_params ep = engine_params(NULL);
    struct af_engine *e = NULL;
    assert_int_equal(af_engine_load(qwen_f32, &ep, &e, err, sizeof err), 0);
    char *info = af_engine_info_json(e);
    assert_non_null(strstr(info, "\"lora\": null"));
    free(info);
    af_engine_free(e);
    tpath(dir, sizeof dir, "no_such_adapter");
    ep.lora_dir = dir;
    e = NULL;
    assert_int_not_equal(af_engine_load(qwen_f32, &ep, &e, err, sizeof err), AF_OK);
    assert_null(e);
    const char *hit = strstr(err, dir);
    assert_non_null(hit);
    assert_null(strstr(hit + strlen(dir), dir));
}

static int chat_ids(struct af_llm *llm, int32_t **ids, size_t *n)
{
    struct af_msg msgs[] = {{"system", "You plan."}, {"user", "Pick a tool for 6 times 7."}};
    struct af_llm_request req = {msgs, 2, af_llm_default_sampling(), NULL, 0};
    req.sampling.max_tokens = 12;
    struct af_llm_reply rep;
    af_llm_reply_init(&rep);
    int rc = af_llm_chat(llm, &req, &rep);
    if (rc == AF_OK) {
        *ids = rep.response_ids;
        *n = rep.n_response_ids;
        rep.response_ids = NULL;
    } else {
        fprintf(stderr, "chat: %s\n", rep.errmsg ? rep.errmsg : "?");
    }
    af_llm_reply_deinit(&rep);
    return rc;
}

/* `gguf:PATH+lora:DIR`: its own engine next to the plain one (greedy replies differ), equal
 * to af_engine with lora_dir; malformed specs fail. */
static void test_llm_spec(void **state)
{
    (void)state;
    char err[1024], dir[160], spec[400];
    struct model *m = load(qwen_f32);
    struct lora_adapter *l = save_adapter(m, "ad_spec", dir, sizeof dir, 0.5f);
    lora_free(l);
    model_free(m);
    struct af_engine_params ep = engine_params(NULL);
    snprintf(spec, sizeof spec, "%s+lora:%s", qwen_f32, dir);
    struct af_llm *plain = af_llm_gguf_new(qwen_f32, &ep, err, sizeof err);
    struct af_llm *lora = af_llm_gguf_new(spec, &ep, err, sizeof err);
    struct af_llm *lora2 = af_llm_gguf_new(spec, &ep, err, sizeof err);
    assert_non_null(plain);
    assert_non_null(lora);
    assert_non_null(lora2);
    assert_non_null(strstr(af_llm_describe(lora), "+lora:"));
    int32_t *a = NULL, *b = NULL, *c = NULL;
    size_t na = 0, nb = 0, nc = 0;
    assert_int_equal(chat_ids(plain, &a, &na), AF_OK);
    assert_int_equal(chat_ids(lora, &b, &nb), AF_OK);
    assert_int_equal(chat_ids(lora2, &c, &nc), AF_OK);
    assert_true(na != nb || memcmp(a, b, na * sizeof *a));
    assert_int_equal(nb, nc);
    assert_memory_equal(b, c, nb * sizeof *b);
    /* The same generation straight from an engine with lora_dir. */
    ep.lora_dir = dir;
    struct af_engine *e = NULL;
    assert_int_equal(af_engine_load(qwen_f32, &ep, &e, err, sizeof err), 0);
    struct af_engine_msg msgs[] = {{"system", "You plan."}, {"user", "Pick a tool for 6 times 7."}};
    char *prompt = NULL;
    assert_int_equal(af_engine_chat_prompt(e, msgs, 2, &prompt, err, sizeof err), 0);
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(af_engine_tokenize(e, prompt, 0, 1, &ids, &n, err, sizeof err), 0);
    struct af_engine_gen_params gp = af_engine_default_gen_params();
    gp.max_tokens = 12;
    struct af_engine_result res;
    assert_int_equal(af_engine_generate(e, ids, n, &gp, &res, err, sizeof err), 0);
    assert_int_equal(res.n_ids, nb);
    assert_memory_equal(res.ids, b, nb * sizeof *b);
    af_engine_result_deinit(&res);
    free(ids);
    free(prompt);
    af_engine_free(e);
    free(a);
    free(b);
    free(c);
    af_llm_free(plain);
    af_llm_free(lora);
    af_llm_free(lora2);
    /* Malformed specs; a '+' that starts no suffix stays part of the path. */
    ep.lora_dir = NULL;
    snprintf(spec, sizeof spec, "%s+lora:", qwen_f32);
    assert_null(af_llm_gguf_new(spec, &ep, err, sizeof err));
    assert_non_null(strstr(err, "+lora:"));
    snprintf(spec, sizeof spec, "%s+mmproj:x", qwen_f32);
    assert_null(af_llm_gguf_new(spec, &ep, err, sizeof err));
    assert_non_null(strstr(err, "'+mmproj:'"));
    snprintf(spec, sizeof spec, "%s+lora:%s/missing", qwen_f32, g_dir);
    assert_null(af_llm_gguf_new(spec, &ep, err, sizeof err));
    assert_non_null(strstr(err, "missing"));
    char plus[160];
    tpath(plus, sizeof plus, "a+b.gguf");
    assert_int_equal(link(qwen_f32, plus), 0);
    struct af_llm *p2 = af_llm_gguf_new(plus, &ep, err, sizeof err);
    if (!p2)
        fail_msg("%s", err);
    af_llm_free(p2);
    unlink(plus);
}

static struct proc_result cli(const char *const *args)
{
    const char *argv[16] = {proc_agentflow_bin()};
    size_t n = 1;
    while (args[n - 1] && n < 15) {
        argv[n] = args[n - 1];
        n++;
    }
    argv[n] = NULL;
    struct proc_result r;
    assert_int_equal(proc_run(argv, NULL, 600, &r), 0);
    return r;
}

/* `agentflow model merge` end to end, and its errors. */
static void test_cli_merge(void **state)
{
    (void)state;
    char dir[160], out[160], small[160], sdir[160], missing[160];
    struct model *m = load(llama_f32);
    struct lora_adapter *l = save_adapter(m, "ad_cli", dir, sizeof dir, 0.5f);
    tpath(out, sizeof out, "cli_merged.gguf");
    struct proc_result r = cli((const char *[]){"model", "merge", llama_f32, dir, out, NULL});
    if (r.exit_code)
        fail_msg("merge: exit %d: %s", r.exit_code, r.err);
    assert_non_null(strstr(r.out, "14 tensors merged"));
    proc_result_deinit(&r);
    assert_int_equal(check_merged_file(llama_f32, out, l, LORA_MERGE_OWN_TYPE), 14);
    struct model *mm = load(out);
    const size_t n = (size_t)N_ROWS * (size_t)m->hp.n_vocab;
    float *with = run_logits(m, l, 2), *merged = run_logits(mm, NULL, 2);
    assert_true(max_diff(with, merged, n) < 1e-4);
    free(with);
    free(merged);
    model_free(mm);
    r = cli((const char *[]){"model", "merge", llama_f32, dir, out, "--type", "q8_0", NULL});
    assert_int_equal(r.exit_code, 0);
    proc_result_deinit(&r);
    check_merged_file(llama_f32, out, l, GGML_TYPE_Q8_0);
    lora_free(l);
    model_free(m);
    unlink(out);
    /* A missing folder, an adapter for another shape, a bad type, bad usage. */
    tpath(missing, sizeof missing, "no_adapter_here");
    r = cli((const char *[]){"model", "merge", llama_f32, missing, out, NULL});
    assert_int_equal(r.exit_code, 4);
    assert_non_null(strstr(r.err, missing));
    proc_result_deinit(&r);
    tpath(small, sizeof small, "small.gguf");
    char err[1024];
    struct af_engine_random_params rp = {"llama", "small", "F32", 5, NULL};
    assert_int_equal(af_engine_make_random(&rp, small, err, sizeof err), 0);
    struct model *ms = load(small);
    l = save_adapter(ms, "ad_small", sdir, sizeof sdir, 0.1f);
    lora_free(l);
    model_free(ms);
    r = cli((const char *[]){"model", "merge", llama_f32, sdir, out, NULL});
    assert_int_equal(r.exit_code, 4);
    assert_non_null(strstr(r.err, sdir));
    assert_non_null(strstr(r.err, "tensor '"));
    assert_non_null(strstr(r.err, ".lora_"));
    proc_result_deinit(&r);
    assert_int_equal(access(out, F_OK), -1);
    r = cli((const char *[]){"model", "merge", llama_f32, dir, out, "--type", "Q3_XX", NULL});
    assert_int_equal(r.exit_code, 2);
    assert_non_null(strstr(r.err, "Q3_XX"));
    proc_result_deinit(&r);
    r = cli((const char *[]){"model", "merge", llama_f32, dir, NULL});
    assert_int_equal(r.exit_code, 2);
    proc_result_deinit(&r);
    unlink(small);
}

/* ---- setup -------------------------------------------------------------------------------- */

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/af_lora_XXXXXX");
    if (!mkdtemp(g_dir))
        return -1;
    make_model("qwen2", "F32", 7, qwen_f32, sizeof qwen_f32, "qwen2.gguf");
    make_model("llama", "F32", 8, llama_f32, sizeof llama_f32, "llama.gguf");
    make_model("qwen2", "Q8_0", 9, qwen_q8, sizeof qwen_q8, "qwen2_q8.gguf");
    make_model("llama", "Q8_0", 10, llama_q8, sizeof llama_q8, "llama_q8.gguf");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return nftw(g_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zero_b_is_identity), cmocka_unit_test(test_random_matches_hand_merge),
        cmocka_unit_test(test_merge_f32),          cmocka_unit_test(test_merge_q8_0),
        cmocka_unit_test(test_merge_errors),       cmocka_unit_test(test_peft_folder_engine),
        cmocka_unit_test(test_llm_spec),           cmocka_unit_test(test_cli_merge),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
