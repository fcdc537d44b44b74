/*
 * fuzz_lora_config.c - libFuzzer target for the PEFT adapter_config.json reader (engine/lora.h).
 *
 * Each input is written as ADAPTER/adapter_config.json in a temporary folder whose
 * adapter_model.safetensors is fixed: a valid r 2 adapter over q_proj and v_proj of a tiny
 * random qwen2 model (byte vocabulary), made once per process with lora_save_peft. The adapter
 * is loaded with lora_load_peft.
 *
 * Invariants: a failure leaves *out NULL and the message starts with the adapter folder; a
 * success can only be a config that matches the fixed file: rank 2, alpha > 0, scale = alpha /
 * rank, dropout in [0, 1), targets q and v, finite values. An empty corpus folder is seeded with
 * the config lora_save_peft wrote and a few variants (regex targets, layers_to_transform).
 */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agentflow/engine.h"
#include "core/fileio.h"
#include "engine/lora.h"
#include "engine/model.h"

#define FUZZ_MAX_INPUT (64u << 10)

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const seeds[] = {
    "{\"peft_type\":\"LORA\",\"r\":2,\"lora_alpha\":4,\"lora_dropout\":0.05,"
    "\"target_modules\":[\"q_proj\",\"v_proj\"],\"bias\":\"none\"}",
    "{\"r\":2,\"lora_alpha\":16.5,\"target_modules\":\"model\\\\.layers\\\\.\\\\d+\\\\.self_attn"
    "\\\\.(q|v)_proj\"}",
    "{\"r\":2,\"target_modules\":[\"self_attn.q_proj\",\"v_proj\"],\"layers_to_transform\":[0,1],"
    "\"rank_pattern\":{},\"alpha_pattern\":{},\"use_rslora\":false,\"use_dora\":false}",
    "{\"r\":2,\"target_modules\":null,\"lora_dropout\":null,\"modules_to_save\":[]}",
    "{\"r\":2,\"target_modules\":\"all-linear\"}",
};

static struct model *model;
static char tmp_dir[1024], adapter_dir[1100], st_path[1200], cfg_path[1200];
static char *saved_config; /* lora_save_peft's adapter_config.json (owned) */
static size_t saved_config_len;

static void write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        fprintf(stderr, "fuzz_lora_config: cannot write %s\n", path);
        abort();
    }
}

static void cleanup(void)
{
    unlink(st_path);
    unlink(cfg_path);
    rmdir(adapter_dir);
    rmdir(tmp_dir);
}

static void die(const char *what, const char *err)
{
    fprintf(stderr, "fuzz_lora_config: %s: %s\n", what, err);
    abort();
}

/* The tiny model and the adapter folder, whose safetensors file stays fixed. */
static void setup(void)
{
    char mpath[1200], err[1024];
    const char *t = getenv("TMPDIR");
    snprintf(tmp_dir, sizeof tmp_dir, "%s/fuzz_lora_config.XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmp_dir))
        abort();
    atexit(cleanup);
    snprintf(adapter_dir, sizeof adapter_dir, "%s/adapter", tmp_dir);
    snprintf(st_path, sizeof st_path, "%s/adapter_model.safetensors", adapter_dir);
    snprintf(cfg_path, sizeof cfg_path, "%s/adapter_config.json", adapter_dir);
    snprintf(mpath, sizeof mpath, "%s/model.gguf", tmp_dir);
    if (mkdir(adapter_dir, 0700) != 0)
        abort();
    struct af_engine_random_params rp = {"qwen2", "tiny", NULL, 1, NULL};
    if (af_engine_make_random(&rp, mpath, err, sizeof err) != AF_OK ||
        model_load(mpath, &model, err, sizeof err) != AF_OK)
        die("model", err);
    unlink(mpath);
    struct lora_adapter *l = NULL;
    if (lora_new(&model->hp, 2, 4.0f, 0.0f, (1u << LORA_Q) | (1u << LORA_V), &l, err, sizeof err) !=
        AF_OK)
        die("lora_new", err);
    lora_init(l, 7);
    if (lora_save_peft(l, model, adapter_dir, NULL, err, sizeof err) != AF_OK)
        die("lora_save_peft", err);
    lora_free(l);
    if (af_file_read(cfg_path, FUZZ_MAX_INPUT, &saved_config, &saved_config_len, err, sizeof err) !=
        AF_OK)
        die("read", err);
}

static int dir_empty(const char *path)
{
    DIR *d = opendir(path);
    int empty = 1;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            empty = 0;
    if (d)
        closedir(d);
    return empty;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    setup();
    for (int i = 1; i < *argc; i++) {
        const char *a = (*argv)[i];
        struct stat sb;
        char p[4096];
        if (a[0] == '-' || stat(a, &sb) != 0 || !S_ISDIR(sb.st_mode) || !dir_empty(a))
            continue;
        snprintf(p, sizeof p, "%s/seed-saved", a);
        write_file(p, saved_config, saved_config_len);
        for (size_t k = 0; k < sizeof seeds / sizeof seeds[0]; k++) {
            snprintf(p, sizeof p, "%s/seed-%zu", a, k);
            write_file(p, seeds[k], strlen(seeds[k]));
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > FUZZ_MAX_INPUT)
        return 0;
    write_file(cfg_path, data, size);
    char err[1024];
    struct lora_adapter *l = NULL;
    int rc = lora_load_peft(adapter_dir, model, &l, err, sizeof err);
    if (rc != AF_OK) {
        if (l || rc == AF_EINTERNAL || strncmp(err, adapter_dir, strlen(adapter_dir)) != 0)
            die("lora_load_peft", err);
        return 0;
    }
    if (l->rank != 2 || l->targets != ((1u << LORA_Q) | (1u << LORA_V)) ||
        l->n_layer != model->hp.n_layer || !(l->alpha > 0) || !isfinite(l->alpha) ||
        fabsf(l->scale - l->alpha / 2.0f) > 1e-6f * l->alpha || !(l->dropout >= 0) ||
        !(l->dropout < 1))
        abort();
    for (size_t i = 0; i < l->n_floats; i++)
        if (!isfinite(l->data[i]))
            abort();
    lora_free(l);
    return 0;
}
