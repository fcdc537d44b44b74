/*
 * test_sft_data.c - the SFT data loader (src/train/sft_data.h) on the real Qwen2.5 vocabulary
 * and ChatML template (shared/data/reference/models/tiny-qwen2-f32.gguf) and the real Llama 3
 * vocabulary (shared/data/reference/tokenizer/ggml-vocab-llama-bpe.gguf, no template: chosen
 * by name): ids equal to a one-go tokenization of independently spelled prompt text, the
 * detokenized targets equal to the replies plus their end-of-turn tokens, the default system
 * message, truncation and skips, every malformed-line error naming its line, gzip input and
 * a 1 MB line. Skips when shared/ is absent.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "core/buf.h"
#include "core/fileio.h"
#include "engine/chat.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/tokenizer.h"
#include "support/shared.h"
#include "train/sft_data.h"

#define QWEN_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

static struct model *qwen;       /* tiny-qwen2-f32.gguf: its own ChatML template */
static struct model llama3_stub; /* the Llama 3 vocabulary, no template */
static struct model qwen_stub;   /* the Qwen2 vocabulary, no template */
static char tmp_dir[64];

static int load_vocab(struct model *m, const char *rel)
{
    char path[1024], err[512];
    if (!test_shared_path(rel, path, sizeof path))
        return 0;
    struct gguf_file *g = NULL;
    if (gguf_open(path, &g, err, sizeof err) || tok_from_gguf(g, &m->tok, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", path, err);
        gguf_close(g);
        return -1;
    }
    gguf_close(g);
    m->path = strdup(path);
    return 0;
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/af_test_sft_XXXXXX");
    if (!mkdtemp(tmp_dir))
        return -1;
    char path[1024], err[512];
    if (test_shared_path("data/reference/models/tiny-qwen2-f32.gguf", path, sizeof path) &&
        model_load(path, &qwen, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", path, err);
        return -1;
    }
    if (load_vocab(&llama3_stub, "data/reference/tokenizer/ggml-vocab-llama-bpe.gguf") ||
        load_vocab(&qwen_stub, "data/reference/tokenizer/ggml-vocab-qwen2.gguf"))
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    model_free(qwen);
    tok_free(llama3_stub.tok);
    tok_free(qwen_stub.tok);
    free(llama3_stub.path);
    free(qwen_stub.path);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- helpers ------------------------------------------------------------------------------ */

static const char *write_tmp(const char *name, const char *text)
{
    static char path[256];
    char err[256];
    snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
    assert_int_equal(af_file_write_atomic(path, text, strlen(text), err, sizeof err), 0);
    return path;
}

static struct sft_data *load_ok(const char *path, const struct model *m, const char *tmpl,
                                int64_t max_seq)
{
    struct sft_data *d = NULL;
    char err[1024] = "";
    int rc = sft_data_load(path, m, tmpl, max_seq, &d, err, sizeof err);
    if (rc)
        fail_msg("sft_data_load: %s", err);
    assert_non_null(d);
    return d;
}

/* The example's ids equal the one-go tokenization of text, and its counts add up. */
static void check_ids(const struct tokenizer *tok, const struct sft_example *ex, const char *text)
{
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(tok_encode(tok, text, strlen(text), 0, 1, &ids, &n), 0);
    assert_int_equal(ex->n, (int64_t)n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ex->tokens[i], ids[i]);
    free(ids);
    int64_t nt = 0;
    for (int64_t i = 0; i < ex->n; i++) {
        assert_true(ex->target[i] <= 1);
        nt += ex->target[i];
    }
    assert_int_equal(nt, ex->n_target);
}

/* Checks that the runs of target tokens decode (specials spelled) to want[0..n_want). */
static void check_runs(const struct tokenizer *tok, const struct sft_example *ex,
                       const char *const *want, size_t n_want)
{
    size_t k = 0;
    for (int64_t i = 0; i < ex->n;) {
        if (!ex->target[i]) {
            i++;
            continue;
        }
        int64_t j = i;
        while (j < ex->n && ex->target[j])
            j++;
        assert_true(k < n_want);
        char *s = tok_decode(tok, ex->tokens + i, (size_t)(j - i), 1);
        assert_string_equal(s, want[k]);
        free(s);
        k++;
        i = j;
    }
    assert_int_equal(k, n_want);
}

static char *piece(const struct tokenizer *tok, int32_t id)
{
    return tok_decode(tok, &id, 1, 1);
}

/* The token before every run is the header's last token and the one after (when any) is not
 * a target either: the header and the template's newline are not trained on. */
static void check_run_edges(const struct tokenizer *tok, const struct sft_example *ex,
                            const char *header_last, const char *after)
{
    for (int64_t i = 0; i < ex->n; i++) {
        if (ex->target[i] && (i == 0 || !ex->target[i - 1])) {
            assert_true(i > 0);
            char *p = piece(tok, ex->tokens[i - 1]);
            assert_string_equal(p, header_last);
            free(p);
        }
        if (ex->target[i] && i + 1 < ex->n && !ex->target[i + 1] && after) {
            char *p = piece(tok, ex->tokens[i + 1]);
            assert_string_equal(p, after);
            free(p);
        }
    }
}

#define SKIP_IF(cond)                                                                              \
    do {                                                                                           \
        if (cond) {                                                                                \
            fprintf(stderr, "  (skipped: shared/data/reference absent)\n");                        \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

static const char *TWO_TURNS =
    "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi there\"},"
    "{\"role\":\"assistant\",\"content\":\"Hello! How can I help?\"},"
    "{\"role\":\"user\",\"content\":\"What is 2+2?\"},"
    "{\"role\":\"assistant\",\"content\":\"It is 4.\\nDone.\",\"extra\":1}]}\n";

static const char *TWO_TURNS_CHATML = "<|im_start|>system\n" QWEN_SYSTEM "<|im_end|>\n"
                                      "<|im_start|>user\nHi there<|im_end|>\n"
                                      "<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"
                                      "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                                      "<|im_start|>assistant\nIt is 4.\nDone.<|im_end|>\n";

static void check_two_turns(const struct sft_data *d)
{
    assert_int_equal(d->n, 1);
    const struct sft_example *ex = &d->ex[0];
    assert_int_equal(ex->line, 1);
    check_ids(qwen->tok, ex, TWO_TURNS_CHATML);
    const char *want[] = {"Hello! How can I help?<|im_end|>", "It is 4.\nDone.<|im_end|>"};
    check_runs(qwen->tok, ex, want, 2);
    check_run_edges(qwen->tok, ex, "\n", "\n");
    assert_int_equal(ex->target[ex->n - 1], 0); /* the final "\n" */
    assert_int_equal(d->n_tokens, ex->n);
    assert_int_equal(d->n_target, ex->n_target);
    assert_int_equal(d->n_truncated, 0);
    assert_int_equal(d->n_skipped, 0);
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_chatml_two_turns(void **state)
{
    (void)state;
    SKIP_IF(!qwen);
    char *ds = chat_template_default_system(qwen->chat_template);
    assert_non_null(ds);
    assert_string_equal(ds, QWEN_SYSTEM); /* the expected text below spells it */
    free(ds);
    struct sft_data *d = load_ok(write_tmp("two.jsonl", TWO_TURNS), qwen, NULL, 0);
    check_two_turns(d);
    /* The header is "<|im_start|>" "assistant" "\n", none a target. */
    const struct sft_example *ex = &d->ex[0];
    int64_t f = 0;
    while (!ex->target[f])
        f++;
    assert_true(f >= 3);
    char *a = piece(qwen->tok, ex->tokens[f - 2]);
    assert_string_equal(a, "assistant");
    free(a);
    assert_int_equal(ex->tokens[f - 3], tok_find(qwen->tok, "<|im_start|>"));
    sft_data_free(d);
    /* Naming the template gives the same, and the default system message still comes from
     * the model's template as at inference. */
    d = load_ok(write_tmp("two.jsonl", TWO_TURNS), qwen, "chatml", 0);
    check_two_turns(d);
    sft_data_free(d);
}

/* --loss-on all: every token but the first becomes a target, the ids stay, and the counts
 * follow. */
static void test_target_all(void **state)
{
    (void)state;
    SKIP_IF(!qwen);
    struct sft_data *d = load_ok(write_tmp("two.jsonl", TWO_TURNS), qwen, NULL, 0);
    const int64_t n_tokens = d->n_tokens, assistant = d->n_target;
    const int32_t first = d->ex[0].tokens[0];
    sft_data_target_all(d);
    assert_int_equal(d->n_tokens, n_tokens);
    assert_int_equal(d->ex[0].tokens[0], first);
    int64_t sum = 0;
    for (size_t i = 0; i < d->n; i++) {
        const struct sft_example *ex = &d->ex[i];
        assert_int_equal(ex->target[0], 0);
        for (int64_t t = 1; t < ex->n; t++)
            assert_int_equal(ex->target[t], 1);
        assert_int_equal(ex->n_target, ex->n - 1);
        sum += ex->n_target;
    }
    assert_int_equal(d->n_target, sum);
    assert_true(d->n_target > assistant);
    sft_data_free(d);
}

/* --loss-on text: every token but the first and the prompts' tokens with a digit; the replies
 * keep every target, digits included. */
static void test_target_text(void **state)
{
    (void)state;
    SKIP_IF(!qwen);
    const char *line = "{\"messages\":[{\"role\":\"user\",\"content\":\"Kriaia was founded in "
                       "1303 and has 752161 people. When was it founded?\"},"
                       "{\"role\":\"assistant\",\"content\":\"In 1303.\"}]}\n";
    struct sft_data *d = load_ok(write_tmp("num.jsonl", line), qwen, NULL, 0);
    const struct sft_example *ex = &d->ex[0];
    uint8_t *reply = malloc((size_t)ex->n);
    assert_non_null(reply);
    memcpy(reply, ex->target, (size_t)ex->n);
    sft_data_target_text(d, qwen->tok);
    int64_t prompt_digits = 0, reply_digits = 0, n_target = 0;
    for (int64_t t = 0; t < ex->n; t++) {
        char piece[64];
        int np = tok_piece(qwen->tok, ex->tokens[t], 1, piece, sizeof piece);
        assert_true(np >= 0);
        int digit = 0;
        for (int i = 0; i < np; i++)
            digit |= piece[i] >= '0' && piece[i] <= '9';
        if (reply[t]) {
            assert_int_equal(ex->target[t], 1);
            reply_digits += digit;
        } else if (t == 0 || digit) {
            assert_int_equal(ex->target[t], 0);
            prompt_digits += digit;
        } else {
            assert_int_equal(ex->target[t], 1);
        }
        n_target += ex->target[t];
    }
    assert_true(prompt_digits >= 4); /* 1303 and 752161, however the vocabulary splits them */
    assert_true(reply_digits >= 1);
    assert_int_equal(ex->n_target, n_target);
    assert_int_equal(d->n_target, n_target);
    free(reply);
    sft_data_free(d);
}

static void test_chatml_given_system(void **state)
{
    (void)state;
    SKIP_IF(!qwen);
    const char *line = "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                       "{\"role\":\"user\",\"content\":\"Hi\"},"
                       "{\"role\":\"assistant\",\"content\":\"Hello.\"}]}";
    struct sft_data *d = load_ok(write_tmp("sys.jsonl", line), qwen, NULL, 0);
    assert_int_equal(d->n, 1);
    check_ids(qwen->tok, &d->ex[0],
              "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
              "<|im_start|>assistant\nHello.<|im_end|>\n");
    const char *want[] = {"Hello.<|im_end|>"};
    check_runs(qwen->tok, &d->ex[0], want, 1);
    sft_data_free(d);
    /* A vocabulary without a template: no default system message to insert. */
    SKIP_IF(!qwen_stub.tok);
    line = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},"
           "{\"role\":\"assistant\",\"content\":\"Hello.\"}]}";
    d = load_ok(write_tmp("nosys.jsonl", line), &qwen_stub, "chatml", 0);
    check_ids(qwen_stub.tok, &d->ex[0],
              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n");
    check_runs(qwen_stub.tok, &d->ex[0], want, 1);
    sft_data_free(d);
}

/* A reply that starts with newlines: Qwen's pre-tokeniser merges them with the header's "\n"
 * into one token, which holds reply bytes and so is a target; the ids stay the one-go ones. */
static void test_chatml_leading_newlines(void **state)
{
    (void)state;
    SKIP_IF(!qwen);
    const char *line = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},"
                       "{\"role\":\"assistant\",\"content\":\"\\n\\nIndented reply\"}]}";
    struct sft_data *d = load_ok(write_tmp("nl.jsonl", line), qwen, NULL, 0);
    check_ids(qwen->tok, &d->ex[0],
              "<|im_start|>system\n" QWEN_SYSTEM "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
              "<|im_start|>assistant\n\n\nIndented reply<|im_end|>\n");
    const char *want[] = {"\n\n\nIndented reply<|im_end|>"};
    check_runs(qwen->tok, &d->ex[0], want, 1);
    check_run_edges(qwen->tok, &d->ex[0], "assistant", "\n");
    sft_data_free(d);
}

/* A template whose end-of-turn token the vocabulary lacks is refused. */
static void test_template_mismatch(void **state)
{
    (void)state;
    SKIP_IF(!llama3_stub.tok || !qwen_stub.tok);
    const char *path = write_tmp("mm.jsonl", "{\"messages\":[{\"role\":\"assistant\","
                                             "\"content\":\"b\"}]}\n");
    char err[1024] = "";
    struct sft_data *d = NULL;
    assert_int_equal(sft_data_load(path, &llama3_stub, "chatml", 0, &d, err, sizeof err),
                     AF_EINVAL);
    assert_non_null(strstr(err, "no <|im_end|> token"));
    assert_int_equal(sft_data_load(path, &qwen_stub, "llama3", 0, &d, err, sizeof err), AF_EINVAL);
    assert_non_null(strstr(err, "no <|eot_id|> token"));
    assert_null(d);
    /* A conversation may open with the reply. */
    d = load_ok(path, &llama3_stub, "llama3", 0);
    const char *want[] = {"b<|eot_id|>"};
    check_runs(llama3_stub.tok, &d->ex[0], want, 1);
    sft_data_free(d);
}

static void test_llama3_two_turns(void **state)
{
    (void)state;
    SKIP_IF(!llama3_stub.tok);
    const char *line = "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                       "{\"role\":\"user\",\"content\":\"  Hi  \"},"
                       "{\"role\":\"assistant\",\"content\":\" Hello there. \"},"
                       "{\"role\":\"user\",\"content\":\"Bye\"},"
                       "{\"role\":\"assistant\",\"content\":\"Goodbye!\\n\"}]}\n";
    struct sft_data *d = load_ok(write_tmp("l3.jsonl", line), &llama3_stub, "llama3", 0);
    assert_int_equal(d->n, 1);
    const struct sft_example *ex = &d->ex[0];
    /* Llama 3's template trims each content. */
    check_ids(llama3_stub.tok, ex,
              "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\nHello there.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\nGoodbye!<|eot_id|>");
    const char *want[] = {"Hello there.<|eot_id|>", "Goodbye!<|eot_id|>"};
    check_runs(llama3_stub.tok, ex, want, 2);
    check_run_edges(llama3_stub.tok, ex, "\n\n", "<|start_header_id|>");
    int32_t bot = tok_find(llama3_stub.tok, "<|begin_of_text|>");
    assert_true(bot >= 0);
    int n_bot = 0;
    for (int64_t i = 0; i < ex->n; i++)
        n_bot += ex->tokens[i] == bot;
    assert_int_equal(n_bot, 1);
    assert_int_equal(ex->tokens[0], bot);
    assert_int_equal(ex->target[ex->n - 1], 1); /* the closing <|eot_id|> */
    sft_data_free(d);
}

static void test_truncate_and_skip(void **state)
{
    (void)state;
    SKIP_IF(!qwen);
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    (void)af_buf_puts(&b, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},"
                          "{\"role\":\"assistant\",\"content\":\"Hello.\"}]}\r\n\n  \t\n");
    (void)af_buf_puts(&b, "{\"messages\":[{\"role\":\"user\",\"content\":\"");
    for (int i = 0; i < 100; i++)
        (void)af_buf_printf(&b, "word%d ", i);
    (void)af_buf_puts(&b, "\"},{\"role\":\"assistant\",\"content\":\"ok\"}]}\n");
    (void)af_buf_puts(&b, "{\"messages\":[{\"role\":\"user\",\"content\":\"Count.\"},"
                          "{\"role\":\"assistant\",\"content\":\"");
    struct af_buf reply;
    af_buf_init(&reply, AF_BUF_NOLIMIT);
    for (int i = 0; i < 100; i++)
        (void)af_buf_printf(&reply, "%d, ", i);
    (void)af_buf_puts(&b, af_buf_str(&reply));
    (void)af_buf_puts(&b, "\"}]}\n");
    const int64_t max_seq = 64;
    struct sft_data *d = load_ok(write_tmp("trunc.jsonl", af_buf_str(&b)), qwen, NULL, max_seq);
    assert_int_equal(d->n, 2);
    assert_int_equal(d->n_truncated, 2);
    assert_int_equal(d->n_skipped, 1);
    assert_int_equal(d->ex[0].line, 1);
    assert_int_equal(d->ex[1].line, 5);
    check_ids(qwen->tok, &d->ex[0],
              "<|im_start|>system\n" QWEN_SYSTEM "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
              "<|im_start|>assistant\nHello.<|im_end|>\n");
    assert_true(d->ex[0].n < max_seq);
    /* The cut one is the prefix of the whole tokenization, its targets a prefix of the reply. */
    const struct sft_example *ex = &d->ex[1];
    assert_int_equal(ex->n, max_seq);
    struct af_buf full;
    af_buf_init(&full, AF_BUF_NOLIMIT);
    (void)af_buf_printf(&full,
                        "<|im_start|>system\n" QWEN_SYSTEM "<|im_end|>\n<|im_start|>user\nCount."
                        "<|im_end|>\n<|im_start|>assistant\n%s<|im_end|>\n",
                        af_buf_str(&reply));
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(tok_encode(qwen->tok, full.data, full.len, 0, 1, &ids, &n), 0);
    assert_true((int64_t)n > max_seq);
    int64_t nt = 0, first = -1;
    for (int64_t i = 0; i < max_seq; i++) {
        assert_int_equal(ex->tokens[i], ids[i]);
        nt += ex->target[i];
        if (ex->target[i] && first < 0)
            first = i;
    }
    assert_int_equal(nt, ex->n_target);
    assert_true(first > 0);
    for (int64_t i = first; i < max_seq; i++)
        assert_int_equal(ex->target[i], 1);
    char *s = tok_decode(qwen->tok, ex->tokens + first, (size_t)(max_seq - first), 1);
    assert_memory_equal(s, reply.data, strlen(s));
    free(s);
    assert_int_equal(d->n_tokens, d->ex[0].n + d->ex[1].n);
    assert_int_equal(d->n_target, d->ex[0].n_target + d->ex[1].n_target);
    free(ids);
    af_buf_deinit(&full);
    af_buf_deinit(&reply);
    af_buf_deinit(&b);
    sft_data_free(d);
}

static void test_errors(void **state)
{
    (void)state;
    SKIP_IF(!qwen);
    static const struct {
        const char *line, *want;
    } cases[] = {
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\","
         "\"content\":\"b\"},{\"role\":\"bot\",\"content\":\"c\"}]}",
         "line 3: messages[2].role: unknown role 'bot'"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\"}]}",
         "line 3: messages[1].content: missing"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\","
         "\"content\":5}]}",
         "line 3: messages[1].content: not a string"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":null},{\"role\":\"assistant\","
         "\"content\":\"b\"}]}",
         "line 3: messages[0].content: not a string"},
        {"{\"messages\":[{\"content\":\"a\"}]}", "line 3: messages[0].role: missing"},
        {"{\"messages\":[{\"role\":7,\"content\":\"a\"}]}",
         "line 3: messages[0].role: not a string"},
        {"{\"messages\":[\"hi\"]}", "line 3: messages[0]: not an object"},
        {"[1, 2]", "line 3: not a JSON object"},
        {"{\"msgs\":[]}", "line 3: messages: missing"},
        {"{\"messages\":{}}", "line 3: messages: not an array"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}", "line 3: invalid JSON at column"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}", "line 3: no assistant message"},
        {"{\"messages\":[]}", "line 3: no assistant message"},
        {"{\"messages\":[]} x", "line 3: invalid JSON at column"},
    };
    const char *good = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
                       "{\"role\":\"assistant\",\"content\":\"b\"}]}";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024], err[1024] = "";
        snprintf(text, sizeof text, "%s\n\n%s\n%s\n", good, cases[i].line, good);
        const char *path = write_tmp("bad.jsonl", text);
        struct sft_data *d = (struct sft_data *)1;
        assert_int_equal(sft_data_load(path, qwen, NULL, 0, &d, err, sizeof err), AF_EPARSE);
        assert_null(d);
        if (!strstr(err, cases[i].want) || strncmp(err, path, strlen(path)))
            fail_msg("case %zu: got '%s', want '%s: ...%s'", i, err, path, cases[i].want);
    }
    /* A column past the start for broken JSON. */
    char err[1024] = "";
    struct sft_data *d = NULL;
    const char *path = write_tmp("col.jsonl", "{\"messages\": [1,]}\n");
    assert_int_equal(sft_data_load(path, qwen, NULL, 0, &d, err, sizeof err), AF_EPARSE);
    assert_non_null(strstr(err, "line 1: invalid JSON at column 17"));
    /* No template: say so and point at --chat-template. */
    SKIP_IF(!qwen_stub.tok);
    path = write_tmp("good.jsonl", good);
    assert_int_equal(sft_data_load(path, &qwen_stub, NULL, 0, &d, err, sizeof err), AF_EINVAL);
    assert_non_null(strstr(err, "no chat template"));
    assert_non_null(strstr(err, "--chat-template"));
    assert_int_equal(sft_data_load(path, &qwen_stub, "vicuna", 0, &d, err, sizeof err), AF_EINVAL);
    assert_non_null(strstr(err, "vicuna"));
    /* A missing file. */
    char missing[300];
    snprintf(missing, sizeof missing, "%s/none.jsonl", tmp_dir);
    assert_int_equal(sft_data_load(missing, qwen, NULL, 0, &d, err, sizeof err), AF_EIO);
    assert_non_null(strstr(err, missing));
    assert_null(d);
    /* An empty file is not an error: no examples. */
    d = load_ok(write_tmp("empty.jsonl", "\n\n"), qwen, NULL, 0);
    assert_int_equal(d->n, 0);
    sft_data_free(d);
}

static void test_gzip(void **state)
{
    (void)state;
    SKIP_IF(!qwen);
    char path[300];
    snprintf(path, sizeof path, "%s/two.jsonl.gz", tmp_dir);
    gzFile gz = gzopen(path, "wb");
    assert_non_null(gz);
    assert_int_equal(gzwrite(gz, TWO_TURNS, (unsigned)strlen(TWO_TURNS)), (int)strlen(TWO_TURNS));
    assert_int_equal(gzclose(gz), Z_OK);
    struct sft_data *d = load_ok(path, qwen, NULL, 0);
    check_two_turns(d);
    sft_data_free(d);
    /* A truncated gzip stream is an I/O error, not a silent short read. */
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    char cut[300], err[1024] = "";
    snprintf(cut, sizeof cut, "%s/cut.jsonl.gz", tmp_dir);
    assert_int_equal(af_file_write_atomic(cut, buf, n - 12, err, sizeof err), 0);
    d = NULL;
    int rc = sft_data_load(cut, qwen, NULL, 0, &d, err, sizeof err);
    assert_true(rc == AF_EIO || rc == AF_EPARSE);
    assert_null(d);
    assert_non_null(strstr(err, cut));
}

static void test_long_line(void **state)
{
    (void)state;
    SKIP_IF(!qwen);
    struct af_buf content, line, text;
    af_buf_init(&content, AF_BUF_NOLIMIT);
    af_buf_init(&line, AF_BUF_NOLIMIT);
    af_buf_init(&text, AF_BUF_NOLIMIT);
    for (int i = 0; content.len < (1u << 20); i++)
        (void)af_buf_printf(&content, "Item %d costs %d coins; ", i, (i * 37) % 1000);
    (void)af_buf_printf(&line,
                        "{\"messages\":[{\"role\":\"user\",\"content\":\"List.\"},"
                        "{\"role\":\"assistant\",\"content\":\"%s\"}]}",
                        content.data); /* no final newline */
    assert_true(line.len > (1u << 20));
    (void)af_buf_printf(&text,
                        "<|im_start|>system\n" QWEN_SYSTEM "<|im_end|>\n<|im_start|>user\nList."
                        "<|im_end|>\n<|im_start|>assistant\n%s<|im_end|>\n",
                        content.data);
    struct sft_data *d = load_ok(write_tmp("long.jsonl", line.data), qwen, NULL, 0);
    assert_int_equal(d->n, 1);
    check_ids(qwen->tok, &d->ex[0], text.data);
    (void)af_buf_puts(&content, "<|im_end|>");
    const char *want[] = {content.data};
    check_runs(qwen->tok, &d->ex[0], want, 1);
    sft_data_free(d);
    af_buf_deinit(&content);
    af_buf_deinit(&line);
    af_buf_deinit(&text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chatml_two_turns),
        cmocka_unit_test(test_chatml_given_system),
        cmocka_unit_test(test_target_all),
        cmocka_unit_test(test_target_text),
        cmocka_unit_test(test_chatml_leading_newlines),
        cmocka_unit_test(test_template_mismatch),
        cmocka_unit_test(test_llama3_two_turns),
        cmocka_unit_test(test_truncate_and_skip),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_gzip),
        cmocka_unit_test(test_long_line),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
