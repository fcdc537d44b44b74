/*
 * test_lora_io.c - PEFT adapter folders (engine/lora_io.c) and the safetensors writer: save ->
 * load round-trips bit-exactly on tiny qwen2 and llama models made by make-random; the files
 * hold what PEFT writes (names, F32 shapes, {"format":"pt"} metadata, adapter_config.json
 * keys); llama GGUF q/k rows of B are stored in Hugging Face order (one row mapping checked by
 * hand); and every malformed folder fails with a message naming the file and tensor or key.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agentflow/engine.h"
#include "core/fileio.h"
#include "engine/lora.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "engine/safetensors.h"
#include "engine/safetensors_write.h"

static char tmp_dir[256];
static struct model *qwen, *llama;

/* ---- helpers ------------------------------------------------------------------------------ */

static uint64_t rng_state = 1;

static float frand(void) /* [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 11) / (double)(1ull << 52) - 1.0);
}

static struct model *make_model(const char *arch)
{
    char path[512], err[1024];
    snprintf(path, sizeof path, "%s/%s.gguf", tmp_dir, arch);
    struct af_engine_random_params rp = {arch, "tiny", "F32", 11, NULL};
    struct model *m = NULL;
    if (af_engine_make_random(&rp, path, err, sizeof err) || model_load(path, &m, err, sizeof err))
        fprintf(stderr, "%s: %s\n", arch, err);
    return m;
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/af_test_lora_io_XXXXXX");
    if (!mkdtemp(tmp_dir))
        return -1;
    qwen = make_model("qwen2");
    llama = make_model("llama");
    return qwen && llama ? 0 : -1;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static int teardown(void **state)
{
    (void)state;
    model_free(qwen);
    model_free(llama);
    return nftw(tmp_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A folder path under the test's temporary folder. */
static const char *sub(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", tmp_dir, name);
    return buf;
}

/* An adapter for m with every A and B random. Owned (lora_free). */
static struct lora_adapter *random_adapter(const struct model *m, int rank, float alpha,
                                           float dropout, unsigned targets)
{
    char err[256];
    struct lora_adapter *l = NULL;
    if (lora_new(&m->hp, rank, alpha, dropout, targets, &l, err, sizeof err))
        fail_msg("%s", err);
    for (size_t i = 0; i < l->n_floats; i++)
        l->data[i] = frand();
    return l;
}

static void assert_adapters_equal(const struct lora_adapter *a, const struct lora_adapter *b)
{
    assert_int_equal(a->n_layer, b->n_layer);
    assert_int_equal(a->rank, b->rank);
    assert_int_equal(a->targets, b->targets);
    assert_true(a->alpha == b->alpha);
    assert_true(a->dropout == b->dropout);
    assert_true(a->scale == b->scale);
    for (int64_t il = 0; il < a->n_layer; il++)
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            const struct lora_pair *p = lora_pair_at(a, il, (enum lora_target)t),
                                   *q = lora_pair_at(b, il, (enum lora_target)t);
            assert_true(!p == !q);
            if (!p)
                continue;
            assert_int_equal(p->n_in, q->n_in);
            assert_int_equal(p->n_out, q->n_out);
            assert_memory_equal(p->a, q->a, (size_t)(a->rank * p->n_in) * sizeof(float));
            assert_memory_equal(p->b, q->b, (size_t)(a->rank * p->n_out) * sizeof(float));
        }
}

static void save_ok(const struct lora_adapter *l, const struct model *m, const char *dir,
                    const char *base)
{
    char err[1024];
    if (lora_save_peft(l, m, dir, base, err, sizeof err))
        fail_msg("save %s: %s", dir, err);
}

static struct lora_adapter *load_ok(const char *dir, const struct model *m)
{
    char err[1024];
    struct lora_adapter *l = NULL;
    if (lora_load_peft(dir, m, &l, err, sizeof err))
        fail_msg("load %s: %s", dir, err);
    return l;
}

/* Loads dir expecting rc, with every `want` string in the message. */
static void load_fails(const char *dir, const struct model *m, int rc, const char *want1,
                       const char *want2)
{
    char err[1024] = "";
    struct lora_adapter *l = NULL;
    int got = lora_load_peft(dir, m, &l, err, sizeof err);
    if (got != rc)
        fail_msg("%s: rc %d (want %d): %s", dir, got, rc, err);
    assert_null(l);
    if (want1 && !strstr(err, want1))
        fail_msg("%s: message '%s' lacks '%s'", dir, err, want1);
    if (want2 && !strstr(err, want2))
        fail_msg("%s: message '%s' lacks '%s'", dir, err, want2);
}

static void write_text(const char *dir, const char *file, const char *text)
{
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (af_file_write_atomic(path, text, strlen(text), err, sizeof err))
        fail_msg("%s", err);
}

static json_t *read_config(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    json_error_t je;
    json_t *c = json_load_file(path, 0, &je);
    if (!c)
        fail_msg("%s: %s", path, je.text);
    return c;
}

/* The tensors of l as a qwen2 (unpermuted) file would hold them, in `dtype` (F16 / BF16 data is
 * converted into conv). Each entry's name lives in names. */
struct tset {
    struct st_write_tensor t[64];
    char names[64][128];
    uint16_t *conv;
    size_t n;
};

static void tset_build(struct tset *s, const struct lora_adapter *l, const char *dtype)
{
    memset(s, 0, sizeof *s);
    int half = strcmp(dtype, "F32") != 0, bf = !strcmp(dtype, "BF16");
    s->conv = half ? calloc(l->n_floats, sizeof(uint16_t)) : NULL;
    size_t co = 0;
    for (int64_t il = 0; il < l->n_layer; il++)
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            const struct lora_pair *p = lora_pair_at(l, il, (enum lora_target)t);
            if (!p)
                continue;
            for (int ab = 0; ab < 2; ab++) {
                assert_true(s->n < 64);
                struct st_write_tensor *e = &s->t[s->n];
                snprintf(s->names[s->n], sizeof s->names[0],
                         "base_model.model.model.layers.%lld.%s.%s.lora_%c.weight", (long long)il,
                         t <= LORA_O ? "self_attn" : "mlp",
                         lora_target_peft_name((enum lora_target)t), ab ? 'B' : 'A');
                int64_t rows = ab ? p->n_out : l->rank, cols = ab ? l->rank : p->n_in;
                const float *src = ab ? p->b : p->a;
                size_t n = (size_t)(rows * cols);
                *e = (struct st_write_tensor){s->names[s->n],   dtype, {rows, cols}, 2, src,
                                              n * sizeof(float)};
                if (half) {
                    for (size_t i = 0; i < n; i++)
                        s->conv[co + i] = bf ? quant_f32_to_bf16(src[i]) : quant_f32_to_f16(src[i]);
                    e->data = s->conv + co;
                    e->nbytes = n * 2;
                    co += n;
                }
                s->n++;
            }
        }
}

static void tset_write(const struct tset *s, const char *dir)
{
    char path[600], err[1024];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    if (st_write(path, s->t, s->n, "{\"format\":\"pt\"}", err, sizeof err))
        fail_msg("%s", err);
}

/* ---- round trips -------------------------------------------------------------------------- */

static void test_roundtrip(void **state)
{
    (void)state;
    char dir[512];
    const struct model *ms[2] = {qwen, llama};
    static const unsigned subsets[] = {
        LORA_ALL_TARGETS, (1u << LORA_Q) | (1u << LORA_V) | (1u << LORA_DOWN), 1u << LORA_K};
    for (int mi = 0; mi < 2; mi++)
        for (size_t si = 0; si < sizeof subsets / sizeof subsets[0]; si++) {
            char name[64];
            snprintf(name, sizeof name, "rt_%d_%zu", mi, si);
            struct lora_adapter *l = random_adapter(ms[mi], (int)si + 2, 6.5f, 0.05f, subsets[si]);
            save_ok(l, ms[mi], sub(dir, sizeof dir, name), "tiny");
            /* Saving again over the folder replaces both files. */
            save_ok(l, ms[mi], dir, "tiny");
            struct lora_adapter *r = load_ok(dir, ms[mi]);
            assert_adapters_equal(l, r);
            assert_true(r->scale == 6.5f / (float)(si + 2));
            lora_free(r);
            lora_free(l);
        }
}

/* The safetensors file as st_open sees it, and its raw header. */
static void test_safetensors_layout(void **state)
{
    (void)state;
    char dir[512], path[600], err[1024];
    struct lora_adapter *l = random_adapter(qwen, 4, 16, 0, LORA_ALL_TARGETS);
    save_ok(l, qwen, sub(dir, sizeof dir, "layout"), NULL);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    struct st_file *f = NULL;
    if (st_open(path, &f, err, sizeof err))
        fail_msg("%s", err);
    assert_int_equal(st_n_tensors(f), (size_t)(2 * LORA_N_TARGETS * qwen->hp.n_layer));
    for (int64_t il = 0; il < qwen->hp.n_layer; il++)
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            const struct lora_pair *p = lora_pair_at(l, il, (enum lora_target)t);
            for (int ab = 0; ab < 2; ab++) {
                char name[160];
                snprintf(name, sizeof name,
                         "base_model.model.model.layers.%lld.%s.%s.lora_%c.weight", (long long)il,
                         t <= LORA_O ? "self_attn" : "mlp",
                         lora_target_peft_name((enum lora_target)t), ab ? 'B' : 'A');
                const struct st_tensor *st = st_find(f, name);
                if (!st)
                    fail_msg("%s: no tensor %s", path, name);
                assert_int_equal(st->type, GGML_TYPE_F32);
                assert_int_equal(st->n_dims, 2);
                /* File shape [r, n_in] for A and [n_out, r] for B; ne[0] is the last. */
                assert_int_equal(st->ne[1], ab ? p->n_out : 4);
                assert_int_equal(st->ne[0], ab ? 4 : p->n_in);
                /* qwen2 is never permuted: the bytes are the memory's. */
                assert_memory_equal(st->data, ab ? p->b : p->a, st->nbytes);
            }
        }
    st_close(f);
    /* Header: 8-byte length, a multiple of 8, JSON with PEFT's metadata. */
    char *raw = NULL;
    size_t len = 0;
    assert_int_equal(af_file_read(path, (size_t)1 << 26, &raw, &len, err, sizeof err), 0);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | (uint8_t)raw[i];
    assert_true(hlen % 8 == 0 && hlen + 8 <= len);
    json_error_t je;
    json_t *h = json_loadb(raw + 8, (size_t)hlen, 0, &je);
    if (!h)
        fail_msg("header: %s", je.text);
    json_t *md = json_object_get(h, "__metadata__");
    assert_true(json_is_object(md));
    assert_int_equal(json_object_size(md), 1);
    assert_string_equal(json_string_value(json_object_get(md, "format")), "pt");
    json_t *e = json_object_get(h, "base_model.model.model.layers.1.mlp.down_proj.lora_A.weight");
    assert_string_equal(json_string_value(json_object_get(e, "dtype")), "F32");
    assert_int_equal(json_integer_value(json_array_get(json_object_get(e, "shape"), 0)), 4);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(e, "shape"), 1)),
                     qwen->hp.n_ff);
    json_decref(h);
    free(raw);
    lora_free(l);
}

static void test_config_fields(void **state)
{
    (void)state;
    char dir[512];
    struct lora_adapter *l =
        random_adapter(qwen, 8, 16, 0.05f, (1u << LORA_Q) | (1u << LORA_V) | (1u << LORA_UP));
    save_ok(l, qwen, sub(dir, sizeof dir, "cfg"), "Qwen/Qwen2.5-0.5B-Instruct");
    json_t *c = read_config(dir);
    assert_string_equal(json_string_value(json_object_get(c, "peft_type")), "LORA");
    assert_string_equal(json_string_value(json_object_get(c, "task_type")), "CAUSAL_LM");
    assert_string_equal(json_string_value(json_object_get(c, "base_model_name_or_path")),
                        "Qwen/Qwen2.5-0.5B-Instruct");
    assert_true(json_is_integer(json_object_get(c, "r")));
    assert_int_equal(json_integer_value(json_object_get(c, "r")), 8);
    assert_true(json_is_integer(json_object_get(c, "lora_alpha"))); /* 16, as PEFT writes it */
    assert_int_equal(json_integer_value(json_object_get(c, "lora_alpha")), 16);
    assert_true(json_real_value(json_object_get(c, "lora_dropout")) == 0.05);
    json_t *tm = json_object_get(c, "target_modules");
    assert_int_equal(json_array_size(tm), 3);
    assert_string_equal(json_string_value(json_array_get(tm, 0)), "q_proj");
    assert_string_equal(json_string_value(json_array_get(tm, 1)), "v_proj");
    assert_string_equal(json_string_value(json_array_get(tm, 2)), "up_proj");
    assert_string_equal(json_string_value(json_object_get(c, "bias")), "none");
    assert_true(json_is_false(json_object_get(c, "fan_in_fan_out")));
    assert_true(json_is_true(json_object_get(c, "inference_mode")));
    assert_true(json_is_false(json_object_get(c, "use_rslora")));
    assert_true(json_is_true(json_object_get(c, "init_lora_weights")));
    assert_true(json_is_null(json_object_get(c, "modules_to_save")));
    json_decref(c);
    /* The text is short decimals (0.05, not 0.05000000074505806). */
    char path[600], err[512], *text = NULL;
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    assert_int_equal(af_file_read(path, 1 << 20, &text, NULL, err, sizeof err), 0);
    assert_non_null(strstr(text, "\"lora_dropout\": 0.05,"));
    free(text);
    /* A non-integral alpha is a real; no base name is null. */
    lora_free(l);
    l = random_adapter(qwen, 2, 2.5f, 0, 1u << LORA_O);
    save_ok(l, qwen, dir, NULL);
    c = read_config(dir);
    assert_true(json_real_value(json_object_get(c, "lora_alpha")) == 2.5);
    assert_true(json_is_null(json_object_get(c, "base_model_name_or_path")));
    json_decref(c);
    lora_free(l);
}

/* Reads row `row` of 2-D F32 tensor `name` (cols wide) from the file. */
static void file_row(const struct st_file *f, const char *name, int64_t row, int64_t cols,
                     float *out)
{
    const struct st_tensor *st = st_find(f, name);
    if (!st)
        fail_msg("no tensor %s", name);
    memcpy(out, (const char *)st->data + (size_t)(row * cols) * 4, (size_t)cols * 4);
}

static void test_llama_permutation(void **state)
{
    (void)state;
    char dir[512], path[600], err[1024];
    const int64_t hd = llama->hp.head_dim, r = 3;
    assert_int_equal(llama->hp.arch, MODEL_ARCH_LLAMA);
    assert_int_equal(llama->rope_neox_hf, 0);
    assert_int_equal(hd, 16);
    struct lora_adapter *l = random_adapter(llama, (int)r, 8, 0, LORA_ALL_TARGETS);
    save_ok(l, llama, sub(dir, sizeof dir, "perm"), NULL);
    struct lora_adapter *back = load_ok(dir, llama);
    assert_adapters_equal(l, back);
    lora_free(back);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    struct st_file *f = NULL;
    if (st_open(path, &f, err, sizeof err))
        fail_msg("%s", err);
    const struct lora_pair *q = lora_pair_at(l, 0, LORA_Q), *k = lora_pair_at(l, 1, LORA_K),
                           *v = lora_pair_at(l, 0, LORA_V);
    const char *qb = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight";
    const char *kb = "base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight";
    float row[8];
    /* By hand, hd = 16: GGUF row h·16 + 2i + j is HF row h·16 + 8j + i.
     * GGUF 3 (h 0, i 1, j 1) -> HF 9; GGUF 2 (i 1, j 0) -> HF 1; GGUF 20 (h 1, i 2, j 0) -> HF 18;
     * GGUF 0 stays 0. */
    static const int64_t map[][2] = {{3, 9}, {2, 1}, {20, 18}, {0, 0}, {31, 31}, {17, 24}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        file_row(f, qb, map[i][1], r, row);
        assert_memory_equal(row, q->b + map[i][0] * r, (size_t)r * 4);
        file_row(f, kb, map[i][1], r, row);
        assert_memory_equal(row, k->b + map[i][0] * r, (size_t)r * 4);
    }
    /* Row 1 of the file is not GGUF row 1, so the file really differs from memory. */
    file_row(f, qb, 1, r, row);
    assert_true(memcmp(row, q->b + 1 * r, (size_t)r * 4) != 0);
    /* A and the other targets keep their order. */
    const struct st_tensor *st =
        st_find(f, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
    assert_memory_equal(st->data, q->a, st->nbytes);
    st = st_find(f, "base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight");
    assert_memory_equal(st->data, v->b, st->nbytes);
    st_close(f);
    /* The same adapter over an HF-layout llama (rope_neox_hf) is saved unpermuted. */
    struct model hf = *llama;
    hf.rope_neox_hf = 1;
    save_ok(l, &hf, sub(dir, sizeof dir, "perm_hf"), NULL);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    if (st_open(path, &f, err, sizeof err))
        fail_msg("%s", err);
    st = st_find(f, qb);
    assert_memory_equal(st->data, q->b, st->nbytes);
    st_close(f);
    /* A PEFT file written in HF order (the qwen2 writer's) loads permuted into GGUF order. */
    struct tset *s = malloc(sizeof *s);
    tset_build(s, l, "F32");
    char dir2[512];
    save_ok(l, llama, sub(dir2, sizeof dir2, "perm_hf_order"), NULL);
    tset_write(s, dir2); /* B of q/k now in memory (GGUF) order, read as HF order */
    back = load_ok(dir2, llama);
    const struct lora_pair *q2 = lora_pair_at(back, 0, LORA_Q);
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        assert_memory_equal(q2->b + map[i][0] * r, q->b + map[i][1] * r, (size_t)r * 4);
    lora_free(back);
    free(s->conv);
    free(s);
    lora_free(l);
}

/* ---- half precision and config forms ------------------------------------------------------ */

static void test_half_types(void **state)
{
    (void)state;
    char dir[512];
    static const char *types[] = {"F16", "BF16"};
    for (int ti = 0; ti < 2; ti++) {
        struct lora_adapter *l =
            random_adapter(qwen, 2, 4, 0, (1u << LORA_Q) | (1u << LORA_V) | (1u << LORA_GATE));
        save_ok(l, qwen, sub(dir, sizeof dir, types[ti]), NULL);
        struct tset *s = malloc(sizeof *s);
        tset_build(s, l, types[ti]);
        tset_write(s, dir);
        struct lora_adapter *r = load_ok(dir, qwen);
        size_t co = 0;
        for (size_t i = 0; i < s->n; i++) {
            size_t n = s->t[i].nbytes / 2;
            /* Walk the loaded adapter in the same order as tset_build. */
            int64_t il = (int64_t)(i / 2) / 3;
            static const int ts[3] = {LORA_Q, LORA_V, LORA_GATE};
            const struct lora_pair *p = lora_pair_at(r, il, (enum lora_target)ts[(i / 2) % 3]);
            const float *got = (i % 2) ? p->b : p->a;
            for (size_t j = 0; j < n; j++) {
                float want =
                    ti ? quant_bf16_to_f32(s->conv[co + j]) : quant_f16_to_f32(s->conv[co + j]);
                if (got[j] != want)
                    fail_msg("%s %s[%zu]: %g, want %g", types[ti], s->t[i].name, j, (double)got[j],
                             (double)want);
            }
            co += n;
        }
        lora_free(r);
        free(s->conv);
        free(s);
        lora_free(l);
    }
}

static void test_config_forms(void **state)
{
    (void)state;
    char dir[512];
    struct lora_adapter *l = random_adapter(qwen, 2, 4, 0, (1u << LORA_Q) | (1u << LORA_V));
    save_ok(l, qwen, sub(dir, sizeof dir, "forms"), NULL);
    /* A regex string over the whole key, PEFT's str form; alpha a real; no dropout. */
    write_text(dir, "adapter_config.json",
               "{\"peft_type\":\"LORA\",\"r\":2,\"lora_alpha\":4.0,"
               "\"target_modules\":\".*\\\\.(q_proj|v_proj)\"}");
    struct lora_adapter *r = load_ok(dir, qwen);
    assert_adapters_equal(l, r);
    lora_free(r);
    /* Suffix entries, as PEFT matches them. */
    write_text(dir, "adapter_config.json",
               "{\"r\":2,\"lora_alpha\":4,\"lora_dropout\":0.0,"
               "\"target_modules\":[\"self_attn.v_proj\",\"q_proj\"]}");
    r = load_ok(dir, qwen);
    assert_adapters_equal(l, r);
    lora_free(r);
    /* layers_to_transform: layer 1 only; its tensors alone are expected. */
    write_text(dir, "adapter_config.json",
               "{\"r\":2,\"lora_alpha\":4,\"target_modules\":[\"q_proj\",\"v_proj\"],"
               "\"layers_to_transform\":[0]}");
    load_fails(dir, qwen, AF_EINVAL, "layers.1.self_attn.", "not in target_modules");
    /* A regex that matches nothing and an entry that names no module. */
    write_text(dir, "adapter_config.json", "{\"r\":2,\"lora_alpha\":4,\"target_modules\":\"q\"}");
    load_fails(dir, qwen, AF_EINVAL, "adapter_config.json", "matches no module");
    write_text(dir, "adapter_config.json",
               "{\"r\":2,\"lora_alpha\":4,\"target_modules\":[\"q_proj\",\"v_proj\",\"lm_head\"]}");
    load_fails(dir, qwen, AF_EINVAL, "adapter_config.json", "lm_head");
    lora_free(l);
}

/* ---- errors ------------------------------------------------------------------------------- */

static void test_errors(void **state)
{
    (void)state;
    char dir[512], path[600], err[1024];
    const char *good_cfg = "{\"peft_type\":\"LORA\",\"r\":2,\"lora_alpha\":4,\"target_modules\":["
                           "\"q_proj\",\"v_proj\"]";
    char cfg[512];
    struct lora_adapter *l = random_adapter(qwen, 2, 4, 0, (1u << LORA_Q) | (1u << LORA_V));
    struct tset *s = malloc(sizeof *s);

    load_fails(sub(dir, sizeof dir, "does_not_exist"), qwen, AF_ENOTFOUND, "does_not_exist", NULL);

    save_ok(l, qwen, sub(dir, sizeof dir, "err"), NULL);
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    assert_int_equal(unlink(path), 0);
    load_fails(dir, qwen, AF_ENOTFOUND, "adapter_config.json", NULL);

    write_text(dir, "adapter_config.json", "{\"r\": 2,");
    load_fails(dir, qwen, AF_EPARSE, "adapter_config.json", "line");

    static const struct {
        const char *extra, *key;
    } rejects[] = {
        {",\"use_rslora\":true", "use_rslora"},
        {",\"fan_in_fan_out\":true", "fan_in_fan_out"},
        {",\"bias\":\"all\"", "bias"},
        {",\"use_dora\":true", "use_dora"},
        {",\"peft_type\":\"IA3\"", "peft_type"},
        {",\"rank_pattern\":{\"q_proj\":4}", "rank_pattern"},
        {",\"modules_to_save\":[\"lm_head\"]", "modules_to_save"},
    };
    for (size_t i = 0; i < sizeof rejects / sizeof rejects[0]; i++) {
        snprintf(cfg, sizeof cfg, "%s%s}", good_cfg, rejects[i].extra);
        write_text(dir, "adapter_config.json", cfg);
        load_fails(dir, qwen, AF_EINVAL, "adapter_config.json", rejects[i].key);
    }
    write_text(dir, "adapter_config.json", "{\"r\":0,\"target_modules\":[\"q_proj\"]}");
    load_fails(dir, qwen, AF_EPARSE, "adapter_config.json", "\"r\"");
    write_text(dir, "adapter_config.json",
               "{\"r\":2,\"lora_alpha\":\"x\",\"target_modules\":[\"q_proj\"]}");
    load_fails(dir, qwen, AF_EPARSE, "adapter_config.json", "lora_alpha");

    /* r in the config disagrees with the tensors. */
    write_text(dir, "adapter_config.json",
               "{\"r\":4,\"lora_alpha\":4,\"target_modules\":[\"q_proj\",\"v_proj\"]}");
    load_fails(dir, qwen, AF_EINVAL, "adapter_model.safetensors", "(r = 4)");
    snprintf(cfg, sizeof cfg, "%s}", good_cfg);
    write_text(dir, "adapter_config.json", cfg);
    struct lora_adapter *ok = load_ok(dir, qwen);
    lora_free(ok);

    /* A missing tensor: drop the last one (layer 1's v B). */
    tset_build(s, l, "F32");
    s->n--;
    tset_write(s, dir);
    load_fails(dir, qwen, AF_EINVAL, "layers.1.self_attn.v_proj.lora_B.weight", "missing");

    /* An unknown tensor name. */
    tset_build(s, l, "F32");
    s->t[s->n] = s->t[0];
    s->t[s->n].name = "base_model.model.lm_head.lora_A.weight";
    s->n++;
    tset_write(s, dir);
    load_fails(dir, qwen, AF_EINVAL, "adapter_model.safetensors", "lm_head.lora_A.weight");

    /* A layer past the model's. */
    tset_build(s, l, "F32");
    s->t[s->n] = s->t[0];
    s->t[s->n].name = "base_model.model.model.layers.2.self_attn.q_proj.lora_A.weight";
    s->n++;
    tset_write(s, dir);
    load_fails(dir, qwen, AF_EINVAL, "layers.2.self_attn.q_proj", "layer 2");

    /* A wrong shape: A given as [n_in, r]. */
    tset_build(s, l, "F32");
    s->t[0].shape[0] = s->t[0].shape[1];
    s->t[0].shape[1] = 2;
    tset_write(s, dir);
    load_fails(dir, qwen, AF_EINVAL, "layers.0.self_attn.q_proj.lora_A.weight", "shape");

    /* A NaN and an Inf. */
    for (int i = 0; i < 2; i++) {
        struct lora_adapter *bad = random_adapter(qwen, 2, 4, 0, (1u << LORA_Q) | (1u << LORA_V));
        lora_pair_at(bad, 1, LORA_V)->b[5] = i ? INFINITY : NAN;
        tset_build(s, bad, "F32");
        tset_write(s, dir);
        load_fails(dir, qwen, AF_EINVAL, "layers.1.self_attn.v_proj.lora_B.weight", "not finite");
        /* Saving such an adapter fails before writing. */
        assert_int_equal(lora_save_peft(bad, qwen, dir, NULL, err, sizeof err), AF_EINVAL);
        assert_non_null(strstr(err, "lora_B[5]"));
        lora_free(bad);
    }

    /* No safetensors file. */
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    assert_int_equal(unlink(path), 0);
    load_fails(dir, qwen, AF_ENOTFOUND, "adapter_model.safetensors", NULL);

    /* An adapter for a model with fewer layers. */
    save_ok(l, qwen, dir, NULL);
    struct model one = *qwen;
    one.hp.n_layer = 1;
    load_fails(dir, &one, AF_EINVAL, "adapter_model.safetensors", "layer 1, the model has 1");
    assert_int_equal(lora_save_peft(l, &one, dir, NULL, err, sizeof err), AF_EINVAL);
    free(s);
    lora_free(l);
}

static void test_st_write_errors(void **state)
{
    (void)state;
    char path[600], err[1024];
    float data[6] = {1, 2, 3, 4, 5, 6};
    snprintf(path, sizeof path, "%s/w.safetensors", tmp_dir);
    struct st_write_tensor t[2] = {{"a", "F32", {2, 3}, 2, data, sizeof data},
                                   {"b", "F32", {0}, 0, data, 4}};
    assert_int_equal(st_write(path, t, 2, NULL, err, sizeof err), 0);
    struct st_file *f = NULL;
    assert_int_equal(st_open(path, &f, err, sizeof err), 0);
    assert_int_equal(st_n_tensors(f), 2);
    assert_memory_equal(st_find(f, "a")->data, data, sizeof data);
    assert_int_equal(st_find(f, "b")->nbytes, 4);
    st_close(f);
    t[1].name = "a";
    assert_int_equal(st_write(path, t, 2, NULL, err, sizeof err), AF_EINVAL);
    assert_non_null(strstr(err, "repeated"));
    t[1].name = "b";
    t[1].nbytes = 8;
    assert_int_equal(st_write(path, t, 2, NULL, err, sizeof err), AF_EINVAL);
    assert_non_null(strstr(err, "'b'"));
    t[1].nbytes = 4;
    t[1].dtype = "I8";
    assert_int_equal(st_write(path, t, 2, NULL, err, sizeof err), AF_EINVAL);
    t[1].dtype = "F32";
    assert_int_equal(st_write(path, t, 2, "{\"x\":1}", err, sizeof err), AF_EINVAL);
    assert_int_equal(st_write(path, t, 2, "[", err, sizeof err), AF_EINVAL);
    snprintf(path, sizeof path, "%s/no/such/dir/w.safetensors", tmp_dir);
    assert_int_equal(st_write(path, t, 2, NULL, err, sizeof err), AF_EIO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),     cmocka_unit_test(test_safetensors_layout),
        cmocka_unit_test(test_config_fields), cmocka_unit_test(test_llama_permutation),
        cmocka_unit_test(test_half_types),    cmocka_unit_test(test_config_forms),
        cmocka_unit_test(test_errors),        cmocka_unit_test(test_st_write_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
