/*
 * test_tokenizer.c - engine/tokenizer.h against llama.cpp: the ggml-vocab-{qwen2,llama-bpe,
 * llama-spm} test vectors (add_special = 0, parse_special = 0), the prompt_ids of the reference
 * models (add_special = 1, parse_special = 1), llama2.c's tokenizer.bin expectations, round
 * trips, special tokens, invalid UTF-8, empty and 1 MB inputs, pieces and EOG.
 * The data comes from $AGENTFLOW_SHARED (see shared_dir); tests skip when it is absent.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "engine/gguf.h"
#include "engine/tokenizer.h"

static const char *shared_dir(char *buf, size_t cap)
{
    const char *s = getenv("AGENTFLOW_SHARED");
    if (s && *s) {
        snprintf(buf, cap, "%s", s);
        return buf;
    }
    const char *src = getenv("AGENTFLOW_SRC");
    if (src && *src)
        snprintf(buf, cap, "%s/../shared", src);
    else
        snprintf(buf, cap, "../shared");
    return buf;
}

/* Reads $shared/rel into a malloc'd buffer; NULL when absent. */
static char *read_shared(const char *rel, size_t *len)
{
    char dir[512], path[1024];
    snprintf(path, sizeof path, "%s/%s", shared_dir(dir, sizeof dir), rel);
    char *data = NULL;
    char err[256];
    if (af_file_read(path, (size_t)1 << 28, &data, len, err, sizeof err) != AF_OK)
        return NULL;
    return data;
}

struct loaded {
    struct gguf_file *g;
    struct tokenizer *t;
};

/* Loads the tokenizer of $shared/rel; skips the test when the file is absent. */
static void load(const char *rel, struct loaded *l)
{
    char dir[512], path[1024], err[256];
    snprintf(path, sizeof path, "%s/%s", shared_dir(dir, sizeof dir), rel);
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("skip: %s absent\n", path);
        skip();
    }
    fclose(f);
    int rc = gguf_open(path, &l->g, err, sizeof err);
    if (rc != AF_OK)
        fail_msg("gguf_open %s: %s", path, err);
    rc = tok_from_gguf(l->g, &l->t, err, sizeof err);
    if (rc != AF_OK)
        fail_msg("tok_from_gguf %s: %s", path, err);
}

static void unload(struct loaded *l)
{
    tok_free(l->t);
    gguf_close(l->g);
}

/* Parses space-separated ids; returns the count. */
static size_t parse_ids(const char *s, const char *end, int32_t *out, size_t cap)
{
    size_t n = 0;
    while (s < end) {
        while (s < end && (*s == ' ' || *s == '\t'))
            s++;
        if (s >= end || *s == '\n')
            break;
        char *e;
        long v = strtol(s, &e, 10);
        if (e == s)
            break;
        if (n < cap)
            out[n] = (int32_t)v;
        n++;
        s = e;
    }
    return n;
}

static int encode_eq(const struct tokenizer *t, const char *text, size_t len, int add_special,
                     int parse_special, const int32_t *want, size_t n_want)
{
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(tok_encode(t, text, len, add_special, parse_special, &ids, &n), AF_OK);
    int ok = n == n_want && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
    if (!ok) {
        printf("  text '%.*s'\n  got :", (int)(len > 200 ? 200 : len), text);
        for (size_t i = 0; i < n && i < 60; i++)
            printf(" %d", ids[i]);
        printf("\n  want:");
        for (size_t i = 0; i < n_want && i < 60; i++)
            printf(" %d", want[i]);
        printf("\n");
    }
    free(ids);
    return ok;
}

static int roundtrip(const struct tokenizer *t, const char *text, size_t len)
{
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(tok_encode(t, text, len, 0, 0, &ids, &n), AF_OK);
    char *back = tok_decode(t, ids, n, 0);
    int ok = strlen(back) == len && memcmp(back, text, len) == 0;
    if (!ok)
        printf("  round trip: '%.*s' -> '%s'\n", (int)len, text, back);
    free(back);
    free(ids);
    return ok;
}

static void run_vectors(const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "data/reference/tokenizer/%s", name);
    struct loaded l = {0};
    load(rel, &l);
    size_t inp_len = 0, out_len = 0;
    snprintf(rel, sizeof rel, "data/reference/tokenizer/%s.inp", name);
    char *inp = read_shared(rel, &inp_len);
    snprintf(rel, sizeof rel, "data/reference/tokenizer/%s.out", name);
    char *outp = read_shared(rel, &out_len);
    assert_non_null(inp);
    assert_non_null(outp);
    static const char sep[] = "\n__ggml_vocab_test__\n";
    const char *p = inp, *end = inp + inp_len, *o = outp, *oend = outp + out_len;
    size_t n_cases = 0, n_bad = 0, n_rt_bad = 0;
    int32_t *want = malloc(65536 * sizeof *want);
    while (p < end) {
        const char *q = memmem(p, (size_t)(end - p), sep, sizeof sep - 1);
        if (!q)
            break; /* the file ends with a separator */
        const char *ol = memchr(o, '\n', (size_t)(oend - o));
        if (!ol)
            ol = oend;
        size_t nw = parse_ids(o, ol, want, 65536);
        if (!encode_eq(l.t, p, (size_t)(q - p), 0, 0, want, nw))
            n_bad++;
        if (!roundtrip(l.t, p, (size_t)(q - p)))
            n_rt_bad++;
        n_cases++;
        p = q + sizeof sep - 1;
        o = ol < oend ? ol + 1 : oend;
    }
    printf("%s: %zu cases, %zu mismatches, %zu round-trip failures\n", name, n_cases, n_bad,
           n_rt_bad);
    assert_true(n_cases >= 30);
    assert_int_equal(n_bad, 0);
    assert_int_equal(n_rt_bad, 0);
    free(want);
    free(inp);
    free(outp);
    unload(&l);
}

static void test_vectors_qwen2(void **state)
{
    (void)state;
    run_vectors("ggml-vocab-qwen2.gguf");
}

static void test_vectors_llama_bpe(void **state)
{
    (void)state;
    run_vectors("ggml-vocab-llama-bpe.gguf");
}

static void test_vectors_llama_spm(void **state)
{
    (void)state;
    run_vectors("ggml-vocab-llama-spm.gguf");
}

/* The prompt_ids line of an expected file versus encoding the prompt text. */
static void check_prompt(const struct tokenizer *t, const char *expected, const char *prompt)
{
    char rel[256];
    size_t elen = 0, plen = 0;
    snprintf(rel, sizeof rel, "data/reference/models/expected/%s", expected);
    char *e = read_shared(rel, &elen);
    snprintf(rel, sizeof rel, "data/reference/models/expected/%s", prompt);
    char *p = read_shared(rel, &plen);
    assert_non_null(e);
    assert_non_null(p);
    const char *line = strstr(e, "prompt_ids:");
    assert_non_null(line);
    line += strlen("prompt_ids:");
    const char *le = strchr(line, '\n');
    int32_t want[512];
    size_t nw = parse_ids(line, le ? le : e + elen, want, 512);
    assert_true(nw > 0 && nw <= 512);
    assert_true(encode_eq(t, p, plen, 1, 1, want, nw));
    free(e);
    free(p);
}

static void test_prompts_qwen(void **state)
{
    (void)state;
    struct loaded l = {0};
    load("data/reference/models/tiny-qwen2-f32.gguf", &l);
    assert_int_equal(tok_n_vocab(l.t), 151936);
    assert_string_equal(tok_pre_name(l.t), "qwen2");
    assert_string_equal(tok_model_name(l.t), "gpt2");
    check_prompt(l.t, "tiny-qwen2-f32.p1.txt", "prompt1.txt");
    check_prompt(l.t, "tiny-qwen2-f32.p2.txt", "prompt2_chatml.txt");
    check_prompt(l.t, "tiny-qwen2-f32.p3.txt", "prompt3_long.txt");
    assert_non_null(tok_chat_template(l.t));
    unload(&l);
}

static void test_prompts_llama(void **state)
{
    (void)state;
    struct loaded l = {0};
    load("data/reference/models/tiny-llama-f32.gguf", &l);
    assert_int_equal(tok_n_vocab(l.t), 32000);
    assert_string_equal(tok_model_name(l.t), "llama");
    assert_int_equal(tok_bos(l.t), 1);
    assert_int_equal(tok_eos(l.t), 2);
    check_prompt(l.t, "tiny-llama-f32.p1.txt", "prompt1.txt");
    check_prompt(l.t, "tiny-llama-f32.p3.txt", "prompt3_long.txt");
    unload(&l);
}

/* Unescapes a C string literal body (\n, \t, \", \\) into out; returns the length. */
static size_t c_unescape(const char *s, const char *end, char *out)
{
    size_t n = 0;
    for (; s < end; s++) {
        if (*s == '\\' && s + 1 < end) {
            s++;
            out[n++] = *s == 'n' ? '\n' : *s == 't' ? '\t' : *s;
        } else {
            out[n++] = *s;
        }
    }
    return n;
}

/* llama2.c's expectations on the same Llama-2 vocabulary (llama.cpp's SPM vocab). */
static void test_llama2c_expected(void **state)
{
    (void)state;
    struct loaded l = {0};
    load("data/reference/tokenizer/ggml-vocab-llama-spm.gguf", &l);
    size_t len = 0;
    char *data = read_shared("data/reference/llama2c/tokenizer_bin_expected.txt", &len);
    assert_non_null(data);
    size_t n_checked = 0;
    struct tokenizer *l2 = NULL;
    char dir[512], path[1024], err[256];
    snprintf(path, sizeof path, "%s/data/reference/llama2c/tokenizer.bin",
             shared_dir(dir, sizeof dir));
    int l2rc = tok_from_llama2c(path, &l2, err, sizeof err);
    if (l2rc != AF_OK)
        printf("tok_from_llama2c: %s\n", err);
    for (char *line = data; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        if (line[0] == '"') {
            char *q = strrchr(line, '"');
            char *tab = strchr(q, '\t');
            assert_non_null(tab);
            char text[1024];
            size_t tl = c_unescape(line + 1, q, text);
            int32_t want[512];
            size_t nw = parse_ids(tab + 1, tab + strlen(tab), want, 512);
            assert_true(encode_eq(l.t, text, tl, 1, 0, want, nw));
            if (l2)
                assert_true(encode_eq(l2, text, tl, 1, 0, want, nw));
            n_checked++;
        }
        line = nl ? nl + 1 : NULL;
    }
    assert_int_equal(n_checked, 5);
    tok_free(l2);
    free(data);
    unload(&l);
}

static void test_special_tokens(void **state)
{
    (void)state;
    struct loaded l = {0};
    load("data/reference/models/tiny-qwen2-f32.gguf", &l);
    const struct tokenizer *t = l.t;
    int32_t im_start = tok_find(t, "<|im_start|>"), im_end = tok_find(t, "<|im_end|>");
    int32_t eot = tok_find(t, "<|endoftext|>");
    assert_int_equal(im_start, 151644);
    assert_int_equal(im_end, 151645);
    assert_int_equal(eot, 151643);
    assert_int_equal(tok_get_type(t, im_start), TOK_TYPE_CONTROL);
    assert_true(tok_is_eog(t, im_end));
    assert_true(tok_is_eog(t, eot));
    assert_false(tok_is_eog(t, im_start));
    assert_false(tok_is_eog(t, 9707));
    assert_false(tok_is_eog(t, -1));
    assert_int_equal(tok_eot(t), im_end);
    assert_int_equal(tok_eos(t), im_end);
    /* user-defined tokens are matched even without parse_special (llama.cpp, HF) */
    int32_t tc = tok_find(t, "<tool_call>");
    if (tc >= 0 && tok_get_type(t, tc) == TOK_TYPE_USER_DEFINED) {
        int32_t *u = NULL;
        size_t nu = 0;
        assert_int_equal(tok_encode(t, "a<tool_call>b", 13, 0, 0, &u, &nu), AF_OK);
        assert_int_equal(nu, 3);
        assert_int_equal(u[1], tc);
        free(u);
    } else {
        printf("note: <tool_call> is %d, type %d\n", tc, tc >= 0 ? (int)tok_get_type(t, tc) : -1);
    }
    assert_int_equal(tok_bos(t) >= -1, 1);

    const char *s = "<|im_start|>user";
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(tok_encode(t, s, strlen(s), 0, 1, &ids, &n), AF_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], im_start);
    free(ids);
    assert_int_equal(tok_encode(t, s, strlen(s), 0, 0, &ids, &n), AF_OK);
    assert_true(n > 2);
    for (size_t i = 0; i < n; i++)
        assert_int_not_equal(ids[i], im_start);
    char *back = tok_decode(t, ids, n, 0);
    assert_string_equal(back, s); /* as text it round-trips */
    free(back);
    free(ids);

    /* pieces: control tokens only with special */
    char buf[64];
    assert_int_equal(tok_piece(t, im_end, 0, buf, sizeof buf), 0);
    assert_int_equal(tok_piece(t, im_end, 1, buf, sizeof buf), 10);
    assert_memory_equal(buf, "<|im_end|>", 10);
    assert_int_equal(tok_piece(t, im_end, 1, buf, 3), -10);
    int32_t hello[2] = {9707, im_end}; /* "Hello" */
    back = tok_decode(t, hello, 2, 1);
    assert_string_equal(back, "Hello<|im_end|>");
    free(back);
    back = tok_decode(t, hello, 2, 0);
    assert_string_equal(back, "Hello");
    free(back);
    int32_t sp = tok_find(t, "\xc4\xa0the"); /* "Ġthe" */
    assert_true(sp >= 0);
    assert_int_equal(tok_piece(t, sp, 0, buf, sizeof buf), 4);
    assert_memory_equal(buf, " the", 4);
    assert_null(tok_text(t, -1));
    assert_null(tok_text(t, (int32_t)tok_n_vocab(t)));
    unload(&l);
}

static void test_llama_bpe_specials(void **state)
{
    (void)state;
    struct loaded l = {0};
    load("data/reference/tokenizer/ggml-vocab-llama-bpe.gguf", &l);
    const struct tokenizer *t = l.t;
    assert_string_equal(tok_pre_name(t), "llama-bpe");
    int32_t eot = tok_find(t, "<|eot_id|>");
    assert_true(eot >= 0);
    assert_true(tok_is_eog(t, eot));
    assert_int_equal(tok_eot(t), eot);
    assert_true(tok_is_eog(t, tok_find(t, "<|eom_id|>")));
    assert_true(tok_is_eog(t, tok_eos(t)));
    assert_int_equal(tok_bos(t), 128000);
    const char *s = "This is a test sentence.";
    int32_t want[] = {128000, 2028, 374, 264, 1296, 11914, 13};
    assert_true(encode_eq(t, s, strlen(s), 1, 0, want, 7));
    s = "<|begin_of_text|>Hi<|eot_id|>";
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(tok_encode(t, s, strlen(s), 1, 1, &ids, &n), AF_OK);
    assert_int_equal(n, 4); /* BOS twice (as llama.cpp: a warning only), Hi, eot */
    assert_int_equal(ids[0], 128000);
    assert_int_equal(ids[1], 128000);
    assert_int_equal(ids[3], eot);
    free(ids);
    unload(&l);
}

static void test_empty_and_invalid(void **state)
{
    (void)state;
    struct loaded q = {0}, s = {0};
    load("data/reference/models/tiny-qwen2-f32.gguf", &q);
    load("data/reference/models/tiny-llama-f32.gguf", &s);
    int32_t *ids = NULL;
    size_t n = 7;
    assert_int_equal(tok_encode(q.t, "", 0, 1, 1, &ids, &n), AF_OK);
    assert_int_equal(n, 0); /* Qwen: no BOS */
    assert_non_null(ids);
    free(ids);
    assert_int_equal(tok_encode(s.t, "", 0, 1, 1, &ids, &n), AF_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 1);
    free(ids);
    assert_int_equal(tok_encode(q.t, NULL, 3, 0, 0, &ids, &n), AF_EINVAL);

    /* invalid UTF-8: llama.cpp reads each bad byte as U+FFFD (BPE) */
    const char bad[] = "ab\xff\xc3 \xe2\x82 z\xed\xa0\x80y\xf4\x90\x80\x80";
    const char fixed[] =
        "ab\xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd z\xed\xa0\x80y\xef\xbf\xbd";
    int32_t *want = NULL;
    size_t nw = 0;
    assert_int_equal(tok_encode(q.t, fixed, sizeof fixed - 1, 0, 0, &want, &nw), AF_OK);
    assert_true(encode_eq(q.t, bad, sizeof bad - 1, 0, 0, want, nw));
    free(want);
    /* SPM keeps the bytes (byte fallback): lossless, as long as no bad lead byte swallows the
     * first byte of an escaped space (llama.cpp cuts by the lead byte's length) */
    const char bad_spm[] = "ab\xff\xfez\xed\xa0\x80y\xe2\x82";
    assert_true(roundtrip(s.t, bad_spm, sizeof bad_spm - 1));
    assert_int_equal(tok_encode(s.t, bad, sizeof bad - 1, 1, 1, &ids, &n), AF_OK);
    assert_true(n > 5);
    free(ids);
    /* overlong NUL */
    assert_int_equal(tok_encode(q.t, "\xc0\x80", 2, 0, 0, &ids, &n), AF_OK);
    free(ids);
    unload(&q);
    unload(&s);
}

static char *make_big(size_t len, int words)
{
    static const char *const w[] = {"the ",  "quick ", "brown ", "fox, ", "jumps\n", "über ",
                                    "東京 ", "12345 ", "don't ", "🦙 ", "  ",      "\t"};
    char *s = malloc(len + 1);
    size_t o = 0;
    uint32_t r = 12345;
    while (o < len) {
        if (!words) {
            s[o++] = 'a';
            continue;
        }
        r = r * 1103515245u + 12345u;
        const char *x = w[(r >> 16) % (sizeof w / sizeof w[0])];
        size_t k = strlen(x);
        if (o + k > len)
            k = len - o;
        memcpy(s + o, x, k);
        o += k;
    }
    s[len] = 0;
    return s;
}

static void test_big_inputs(void **state)
{
    (void)state;
    struct loaded q = {0}, s = {0};
    load("data/reference/models/tiny-qwen2-f32.gguf", &q);
    load("data/reference/models/tiny-llama-f32.gguf", &s);
    size_t len = (size_t)1 << 20;
    for (int words = 0; words <= 1; words++) {
        char *big = make_big(len, words);
        /* a cut multi-byte character at the end makes it invalid for BPE; trim to valid */
        size_t l = len;
        while (l > 0 && ((unsigned char)big[l - 1] & 0x80))
            l--;
        assert_true(roundtrip(q.t, big, l));
        assert_true(roundtrip(s.t, big, l));
        free(big);
    }
    unload(&q);
    unload(&s);
}

/* tokenizer.json of the tiny Qwen2 model gives the same ids as its GGUF. */
static void test_hf_json(void **state)
{
    (void)state;
    struct loaded q = {0};
    load("data/reference/models/tiny-qwen2-f32.gguf", &q);
    char dir[512], path[1024], err[256];
    snprintf(path, sizeof path, "%s/data/reference/models/tiny-qwen2-hf/tokenizer.json",
             shared_dir(dir, sizeof dir));
    struct tokenizer *h = NULL;
    int rc = tok_from_hf(path, &h, err, sizeof err);
    if (rc != AF_OK)
        fail_msg("tok_from_hf: %s", err);
    assert_int_equal(tok_n_vocab(h), tok_n_vocab(q.t));
    assert_string_equal(tok_pre_name(h), "qwen2");
    assert_int_equal(tok_add_bos(h), 0);
    assert_non_null(tok_chat_template(h));
    check_prompt(h, "tiny-qwen2-f32.p2.txt", "prompt2_chatml.txt");
    check_prompt(h, "tiny-qwen2-f32.p3.txt", "prompt3_long.txt");
    size_t len = 0;
    char *inp = read_shared("data/reference/tokenizer/ggml-vocab-qwen2.gguf.inp", &len);
    assert_non_null(inp);
    int32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    assert_int_equal(tok_encode(q.t, inp, len, 1, 1, &a, &na), AF_OK);
    assert_int_equal(tok_encode(h, inp, len, 1, 1, &b, &nb), AF_OK);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof *a);
    for (size_t i = 0; i < tok_n_vocab(h); i++) {
        assert_string_equal(tok_text(h, (int32_t)i), tok_text(q.t, (int32_t)i));
        assert_int_equal(tok_is_eog(h, (int32_t)i), tok_is_eog(q.t, (int32_t)i));
    }
    free(a);
    free(b);
    free(inp);
    tok_free(h);
    /* a broken file names itself */
    assert_int_not_equal(tok_from_hf("/nonexistent/tokenizer.json", &h, err, sizeof err), AF_OK);
    assert_null(h);
    unload(&q);
}

struct thread_arg {
    const struct tokenizer *t;
    const char *text;
    size_t len;
    int32_t *ids;
    size_t n;
    int rc;
};

static void *encode_thread(void *p)
{
    struct thread_arg *a = p;
    for (int i = 0; i < 20 && a->rc == AF_OK; i++) {
        free(a->ids);
        a->rc = tok_encode(a->t, a->text, a->len, 1, 1, &a->ids, &a->n);
    }
    return NULL;
}

/* One tokenizer, four threads at once: the same ids as a single-threaded encode. */
static void test_threads(void **state)
{
    (void)state;
    struct loaded q = {0};
    load("data/reference/models/tiny-qwen2-f32.gguf", &q);
    char *text = make_big(1 << 16, 1);
    int32_t *want = NULL;
    size_t nw = 0;
    assert_int_equal(tok_encode(q.t, text, 1 << 16, 1, 1, &want, &nw), AF_OK);
    pthread_t th[4];
    struct thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct thread_arg){q.t, text, 1 << 16, NULL, 0, AF_OK};
        assert_int_equal(pthread_create(&th[i], NULL, encode_thread, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].rc, AF_OK);
        assert_int_equal(args[i].n, nw);
        assert_memory_equal(args[i].ids, want, nw * sizeof *want);
        free(args[i].ids);
    }
    free(want);
    free(text);
    unload(&q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors_qwen2),     cmocka_unit_test(test_vectors_llama_bpe),
        cmocka_unit_test(test_vectors_llama_spm), cmocka_unit_test(test_prompts_qwen),
        cmocka_unit_test(test_prompts_llama),     cmocka_unit_test(test_llama2c_expected),
        cmocka_unit_test(test_special_tokens),    cmocka_unit_test(test_llama_bpe_specials),
        cmocka_unit_test(test_empty_and_invalid), cmocka_unit_test(test_big_inputs),
        cmocka_unit_test(test_hf_json),           cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
