/*
 * fuzz_wiki_row.c - libFuzzer target for the index build's JSONL row parser (tools/wiki_row.h):
 * the direct scanner and jansson must agree on every input, in verdict, message and fields.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tools/wiki_row.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same(const char *a, size_t an, const char *b, size_t bn)
{
    return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *line = malloc(size ? size : 1); /* exactly sized: ASan sees a read past the end */
    if (!line)
        return 0;
    memcpy(line, data, size);
    struct wiki_row_scratch s1 = {0}, s2 = {0};
    struct wiki_row r1, r2;
    char w1[256] = "", w2[256] = "";
    int a = wiki_row_jsonl(line, size, &r1, &s1, w1, sizeof w1);
    int b = wiki_row_jsonl_jansson(line, size, &r2, &s2, w2, sizeof w2);
    if (a != b)
        abort();
    if (a == 0 && (!same(r1.id, r1.id_len, r2.id, r2.id_len) ||
                   !same(r1.title, r1.title_len, r2.title, r2.title_len) ||
                   !same(r1.text, r1.text_len, r2.text, r2.text_len)))
        abort();
    if (a != 0 && strcmp(w1, w2) != 0)
        abort();
    wiki_row_scratch_free(&s1);
    wiki_row_scratch_free(&s2);
    free(line);
    return 0;
}
