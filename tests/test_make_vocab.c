/*
 * test_make_vocab.c - af_engine_make_vocab: a byte-level BPE vocabulary trained on a corpus
 * loads as a tokenizer, round-trips any text exactly, turns frequent words into single tokens,
 * keeps digits single, and the same corpus gives the same file.
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

#include "agentflow/engine.h"
#include "core/fileio.h"
#include "engine/gguf.h"
#include "engine/tokenizer.h"

static const char *const corpus[] = {
    "Thaugard Press is a press founded in 1806 by Droa Wysen.",
    "Droa Wysen was a glassmaker born in Gryvale in 1779.",
    "Thaugard Press has 559 members. Notable members include Droa Wysen.",
    "The founder of Thaugard Press was born in Gryvale.",
    "Query: In what year was the founder of Thaugard Press born?",
    "Gryvale is a city in Dryora, founded in 869.",
};

static struct tokenizer *load(const char *path)
{
    struct gguf_file *g = NULL;
    struct tokenizer *t = NULL;
    char err[512];
    if (gguf_open(path, &g, err, sizeof err) != AF_OK)
        fail_msg("%s", err);
    if (tok_from_gguf(g, &t, err, sizeof err) != AF_OK)
        fail_msg("%s", err);
    gguf_close(g);
    return t;
}

static size_t encode(const struct tokenizer *t, const char *s, int32_t **ids)
{
    size_t n = 0;
    assert_int_equal(tok_encode(t, s, strlen(s), 0, 1, ids, &n), AF_OK);
    return n;
}

static void test_vocab_roundtrip_and_merges(void **state)
{
    (void)state;
    char dir[] = "/tmp/af_test_vocab_XXXXXX", a[64], b[64], err[512];
    assert_non_null(mkdtemp(dir));
    snprintf(a, sizeof a, "%s/a.gguf", dir);
    snprintf(b, sizeof b, "%s/b.gguf", dir);
    size_t n_corpus = sizeof corpus / sizeof corpus[0], n_merges = 0;
    assert_int_equal(af_engine_make_vocab(corpus, n_corpus, 320, a, &n_merges, err, sizeof err),
                     AF_OK);
    assert_true(n_merges > 20 && n_merges <= 320 - 259);
    assert_int_equal(af_engine_make_vocab(corpus, n_corpus, 320, b, NULL, err, sizeof err), AF_OK);
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    assert_int_equal(af_file_read(a, 1u << 24, &x, &nx, err, sizeof err), AF_OK);
    assert_int_equal(af_file_read(b, 1u << 24, &y, &ny, err, sizeof err), AF_OK);
    assert_int_equal(nx, ny);
    assert_memory_equal(x, y, nx);
    free(x);
    free(y);

    struct tokenizer *t = load(a);
    assert_int_equal(tok_n_vocab(t), 259 + n_merges);
    int32_t *ids = NULL;
    /* A frequent word is one token; an unseen one falls back to pieces and bytes. */
    size_t n = encode(t, " Thaugard", &ids);
    assert_int_equal(n, 1);
    free(ids);
    n = encode(t, " Zyxwq", &ids);
    assert_true(n >= 3);
    free(ids);
    /* Digits stay single tokens (the qwen2 pre-tokeniser). */
    n = encode(t, "1806", &ids);
    assert_int_equal(n, 4);
    free(ids);
    /* Exact round trips, including text the corpus never had and control tokens. */
    const char *texts[] = {"Droa Wysen was born in 1779.", "Ünïcödé \t\n tabs  and   spaces!",
                           "<|im_start|>user\nhi<|im_end|>"};
    for (size_t i = 0; i < 3; i++) {
        n = encode(t, texts[i], &ids);
        char *back = tok_decode(t, ids, n, 1);
        assert_string_equal(back, texts[i]);
        free(back);
        free(ids);
    }
    assert_int_equal(tok_find(t, "<|im_end|>"), tok_eos(t));
    tok_free(t);

    /* Too small a vocabulary is refused. */
    assert_int_equal(af_engine_make_vocab(corpus, n_corpus, 100, a, NULL, err, sizeof err),
                     AF_EINVAL);
    assert_non_null(strstr(err, "100"));
    unlink(a);
    unlink(b);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vocab_roundtrip_and_merges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
