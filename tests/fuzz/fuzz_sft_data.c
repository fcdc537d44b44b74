/*
 * fuzz_sft_data.c - libFuzzer target for the SFT data loader (train/sft_data.h).
 *
 * Each input is written to a temporary file and loaded as chat JSONL (plain or gzip'd: gzread
 * detects the magic) with the ChatML template and max_seq 256, against a tiny random qwen2
 * model that carries the real Qwen2 vocabulary. The model is made and loaded once per process,
 * from $AGENTFLOW_SHARED/data/reference/tokenizer/ggml-vocab-qwen2.gguf (default
 * $AGENTFLOW_SRC/../shared, then ../shared); without that file the target does nothing.
 *
 * Invariants: a failure leaves *out NULL, is never AF_EINTERNAL (a mask that does not line up
 * with the tokens) and names the file first; a success has consistent counts, ids in the
 * vocabulary, 0/1 targets, at least one target per example, n <= max_seq and increasing line
 * numbers. An empty corpus directory is seeded with a few valid conversations.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agentflow/engine.h"
#include "engine/model.h"
#include "engine/tokenizer.h"
#include "train/sft_data.h"

#define FUZZ_MAX_SEQ 256
#define FUZZ_MAX_INPUT 8192 /* BPE over long lines is slow; the parser paths fit well below */

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct model *model;
static char tmp_dir[1024], data_path[1100];

static const char *const seeds[] = {
    "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},"
    "{\"role\":\"assistant\",\"content\":\"Hello!\"}]}\n",
    "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
    "{\"role\":\"user\",\"content\":\"2+2?\"},{\"role\":\"assistant\",\"content\":\" 4\\n\"},"
    "{\"role\":\"user\",\"content\":\"and 3+3?\"},"
    "{\"role\":\"assistant\",\"content\":\"6 <|im_end|> \\u00e9\\u4e2d\"}]}\n\n"
    "{\"messages\":[{\"role\":\"user\",\"content\":\"\"},{\"role\":\"assistant\","
    "\"content\":\"\"}]}\n",
    "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}\n",
};

/* The shared data folder's file rel, as tests/support/shared.c finds it; NULL when absent. */
static const char *shared_path(const char *rel, char *buf, size_t len)
{
    const char *shared = getenv("AGENTFLOW_SHARED"), *src = getenv("AGENTFLOW_SRC");
    if (shared && *shared)
        snprintf(buf, len, "%s/%s", shared, rel);
    else if (src && *src)
        snprintf(buf, len, "%s/../shared/%s", src, rel);
    else
        snprintf(buf, len, "../shared/%s", rel);
    return access(buf, R_OK) == 0 ? buf : NULL;
}

static void write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        fprintf(stderr, "fuzz_sft_data: cannot write %s\n", path);
        abort();
    }
}

static void cleanup(void)
{
    unlink(data_path);
    rmdir(tmp_dir);
}

/* Makes the temporary folder and the model; the model file is removed once loaded (it stays
 * mapped). */
static void setup(void)
{
    char vocab[1024], mpath[1100], err[1024];
    if (!shared_path("data/reference/tokenizer/ggml-vocab-qwen2.gguf", vocab, sizeof vocab)) {
        fprintf(stderr, "fuzz_sft_data: no Qwen2 vocabulary under the shared folder; idle\n");
        return;
    }
    const char *t = getenv("TMPDIR");
    snprintf(tmp_dir, sizeof tmp_dir, "%s/fuzz_sft_data.XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmp_dir))
        abort();
    atexit(cleanup);
    snprintf(data_path, sizeof data_path, "%s/data.jsonl", tmp_dir);
    snprintf(mpath, sizeof mpath, "%s/model.gguf", tmp_dir);
    struct af_engine_random_params rp = {"qwen2", "tiny", NULL, 1, vocab};
    if (af_engine_make_random(&rp, mpath, err, sizeof err) != AF_OK ||
        model_load(mpath, &model, err, sizeof err) != AF_OK) {
        fprintf(stderr, "fuzz_sft_data: %s\n", err);
        abort();
    }
    unlink(mpath);
}

/* Seeds each corpus folder named on the command line that is still empty. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    for (int i = 1; i < *argc; i++) {
        const char *a = (*argv)[i];
        struct stat sb;
        if (a[0] == '-' || stat(a, &sb) != 0 || !S_ISDIR(sb.st_mode))
            continue;
        DIR *d = opendir(a);
        int empty = 1;
        for (struct dirent *e; d && (e = readdir(d));)
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                empty = 0;
        if (d)
            closedir(d);
        for (size_t k = 0; empty && k < sizeof seeds / sizeof seeds[0]; k++) {
            char p[4096];
            snprintf(p, sizeof p, "%s/seed-%zu", a, k);
            write_file(p, seeds[k], strlen(seeds[k]));
        }
    }
    return 0;
}

static void check(const struct sft_data *d)
{
    int64_t n_tokens = 0, n_target = 0, line = 0;
    size_t n_vocab = tok_n_vocab(model->tok);
    for (size_t i = 0; i < d->n; i++) {
        const struct sft_example *e = &d->ex[i];
        int64_t nt = 0;
        if (e->n < 1 || e->n > FUZZ_MAX_SEQ || e->line <= line || !e->tokens || !e->target)
            abort();
        for (int64_t t = 0; t < e->n; t++) {
            if (e->tokens[t] < 0 || (size_t)e->tokens[t] >= n_vocab || e->target[t] > 1)
                abort();
            nt += e->target[t];
        }
        if (nt != e->n_target || nt < 1)
            abort();
        line = e->line;
        n_tokens += e->n;
        n_target += nt;
    }
    if (n_tokens != d->n_tokens || n_target != d->n_target || d->n_skipped > d->n_truncated)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        setup();
        ready = 1;
    }
    if (!model || size > FUZZ_MAX_INPUT)
        return 0;
    write_file(data_path, data, size);
    struct sft_data *d = NULL;
    char err[1024];
    int rc = sft_data_load(data_path, model, "chatml", FUZZ_MAX_SEQ, &d, err, sizeof err);
    if (rc != AF_OK) {
        if (d || rc == AF_EINTERNAL || strncmp(err, data_path, strlen(data_path)) != 0) {
            fprintf(stderr, "fuzz_sft_data: rc %d: %s\n", rc, err);
            abort();
        }
        return 0;
    }
    if (!d)
        abort();
    check(d);
    sft_data_free(d);
    return 0;
}
