/*
 * fuzz_tokenizer.c - libFuzzer target for engine/tokenizer.h.
 *
 * Loads the Qwen2 (byte-level BPE) and Llama-2 (SPM) vocabularies once, from
 * $AGENTFLOW_SHARED/data/reference (default ../shared), and encodes every input with both
 * flag settings, then decodes. Invariants: encoding succeeds; every id is in range; for BPE
 * with parse_special off, decoding a valid UTF-8 input gives it back byte for byte; pieces
 * never exceed the buffer they report. Without the data files the target does nothing.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct fuzz_vocab {
    struct gguf_file *g;
    struct tokenizer *t;
};

static struct fuzz_vocab vocabs[2];
static int loaded;

static void load_one(struct fuzz_vocab *v, const char *rel)
{
    const char *sh = getenv("AGENTFLOW_SHARED");
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/data/reference/%s", sh && *sh ? sh : "../shared", rel);
    if (gguf_open(path, &v->g, err, sizeof err) != AF_OK)
        return;
    if (tok_from_gguf(v->g, &v->t, err, sizeof err) != AF_OK) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err);
        abort();
    }
}

static int utf8_ok(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned b = s[i];
        size_t k;
        uint32_t c, min;
        if (b < 0x80) {
            i++;
            continue;
        } else if (b >= 0xC2 && b <= 0xDF) {
            k = 1, c = b & 0x1F, min = 0x80;
        } else if (b >= 0xE0 && b <= 0xEF) {
            k = 2, c = b & 0x0F, min = 0x800;
        } else if (b >= 0xF0 && b <= 0xF4) {
            k = 3, c = b & 0x07, min = 0x10000;
        } else {
            return 0;
        }
        if (i + k >= n)
            return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80)
                return 0;
            c = (c << 6) | (s[i + j] & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
            return 0;
        i += k + 1;
    }
    return 1;
}

static void check(const struct tokenizer *t, const uint8_t *data, size_t size, int spm)
{
    for (int flags = 0; flags < 4; flags++) {
        int add_special = flags & 1, parse_special = flags >> 1;
        int32_t *ids = NULL;
        size_t n = 0;
        if (tok_encode(t, (const char *)data, size, add_special, parse_special, &ids, &n) != AF_OK)
            abort();
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || (size_t)ids[i] >= tok_n_vocab(t))
                abort();
        char *back = tok_decode(t, ids, n, parse_special);
        if (!back)
            abort();
        if (!spm && !add_special && !parse_special && utf8_ok(data, size) &&
            (strlen(back) != size || memcmp(back, data, size) != 0) && !memchr(data, 0, size))
            abort();
        free(back);
        char buf[8];
        for (size_t i = 0; i < n && i < 64; i++) {
            int k = tok_piece(t, ids[i], 1, buf, sizeof buf);
            if (k > (int)sizeof buf)
                abort();
        }
        free(ids);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!loaded) {
        load_one(&vocabs[0], "models/tiny-qwen2-f32.gguf");
        load_one(&vocabs[1], "models/tiny-llama-f32.gguf");
        loaded = 1;
    }
    if (size > 4096)
        return 0;
    for (int i = 0; i < 2; i++)
        if (vocabs[i].t)
            check(vocabs[i].t, data, size, i == 1);
    return 0;
}
