/*
 * cmd_model_vocab.c - `agentflow model make-vocab`: a byte-level BPE vocabulary trained on
 * the text of JSONL files (every string in every record: chat messages, passages), written
 * as a tokenizer-only GGUF for `model make-random --vocab-from`.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentflow/engine.h"
#include "cli/cli.h"
#include "core/fileio.h"
#include "core/xalloc.h"

#define CMD "agentflow model make-vocab"
#define MAX_INPUTS 16

struct texts {
    char **v;
    size_t n, cap;
};

/* Every string value under j, depth first. */
static void collect(const json_t *j, struct texts *t)
{
    if (json_is_string(j)) {
        if (t->n == t->cap) {
            t->cap = t->cap ? t->cap * 2 : 4096;
            t->v = af_xrealloc(t->v, t->cap * sizeof *t->v);
        }
        t->v[t->n++] = af_xstrdup(json_string_value(j));
    } else if (json_is_array(j)) {
        size_t i;
        const json_t *x;
        json_array_foreach(j, i, x)
        {
            collect(x, t);
        }
    } else if (json_is_object(j)) {
        const char *k;
        const json_t *x;
        json_object_foreach((json_t *)(uintptr_t)j, k, x)
        {
            collect(x, t);
        }
    }
}

static int read_input(const char *path, struct texts *t)
{
    char *data = NULL, err[512];
    if (af_file_read(path, 1u << 30, &data, NULL, err, sizeof err) != AF_OK) {
        fprintf(stderr, CMD ": %s\n", err);
        return CLI_EINPUT;
    }
    size_t line = 0;
    for (char *p = data, *nl; p && *p; p = nl ? nl + 1 : NULL) {
        nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        line++;
        if (!*p)
            continue;
        json_error_t je;
        json_t *j = json_loads(p, 0, &je);
        if (!j) {
            fprintf(stderr, CMD ": %s:%zu: not JSON: %s\n", path, line, je.text);
            free(data);
            return CLI_EINPUT;
        }
        collect(j, t);
        json_decref(j);
    }
    free(data);
    return CLI_OK;
}

int cmd_model_make_vocab(int argc, char **argv)
{
    const char *inputs[MAX_INPUTS], *out = NULL;
    size_t n_in = 0;
    long size = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: " CMD " --input FILE [--input FILE ...] --size N OUT.gguf\n"
                   "\n"
                   "Trains a byte-level BPE vocabulary of N tokens (259 to 65536: the 256 bytes,\n"
                   "the learned merges, <|endoftext|> <|im_start|> <|im_end|>) on every string\n"
                   "of the JSONL inputs, split by the qwen2 pre-tokeniser (digits stay single\n"
                   "tokens), and writes it as a GGUF with only tokenizer keys and a ChatML\n"
                   "template. Use it with `model make-random --vocab-from OUT.gguf`.\n"
                   "The same inputs give the same file.\n"
                   "Exit codes: 0 ok, 2 usage, 4 a missing or malformed input or output file.\n");
            return CLI_OK;
        }
        if (!strcmp(argv[i], "--input") && i + 1 < argc && n_in < MAX_INPUTS) {
            inputs[n_in++] = argv[++i];
        } else if (!strcmp(argv[i], "--size") && i + 1 < argc) {
            char *end = NULL;
            size = strtol(argv[++i], &end, 10);
            if (*end || size < 259 || size > 65536) {
                fprintf(stderr, CMD ": --size takes 259 to 65536 (got '%s')\n", argv[i]);
                return CLI_EUSAGE;
            }
        } else if (argv[i][0] != '-' && !out) {
            out = argv[i];
        } else {
            fprintf(stderr, CMD ": unexpected argument '%s' (--help for usage)\n", argv[i]);
            return CLI_EUSAGE;
        }
    }
    if (!n_in || !size || !out) {
        fprintf(stderr, CMD ": --input, --size and OUT.gguf are required\n");
        return CLI_EUSAGE;
    }
    struct texts t = {0};
    int code = CLI_OK;
    for (size_t i = 0; i < n_in && code == CLI_OK; i++)
        code = read_input(inputs[i], &t);
    if (code == CLI_OK) {
        char err[512];
        size_t n_merges = 0;
        int rc = af_engine_make_vocab((const char *const *)t.v, t.n, (size_t)size, out, &n_merges,
                                      err, sizeof err);
        if (rc != AF_OK) {
            fprintf(stderr, CMD ": %s\n", err);
            code = rc == AF_EINVAL ? CLI_EUSAGE : CLI_EINPUT;
        } else {
            fprintf(stderr, "%s: %zu tokens (%zu merges) from %zu texts\n", out, 259 + n_merges,
                    n_merges, t.n);
        }
    }
    for (size_t i = 0; i < t.n; i++)
        free(t.v[i]);
    free(t.v);
    return code;
}
