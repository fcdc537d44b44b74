/*
 * fuzz_safetensors.c - libFuzzer target for the safetensors reader (engine/safetensors.h) and
 * the PEFT adapter loader (engine/lora.h) on top of it.
 *
 * Each input is written as ADAPTER/adapter_model.safetensors in a temporary folder that also
 * holds a fixed, valid adapter_config.json (r 2, q_proj and v_proj), then opened with st_open
 * and loaded with lora_load_peft for a tiny random qwen2 model (byte vocabulary) made once per
 * process.
 *
 * Invariants: a failure leaves the handle NULL and the message starts with the file (or the
 * adapter folder); an opened file's tensors have a supported type, 1..4 dims, nbytes equal to
 * dtype x shape, no overlap, lookups by name finding them, and bytes equal to the input at the
 * header's data_offsets (read here with jansson independently); every byte is touched. A loaded
 * adapter has the config's rank and targets and finite values. An empty corpus folder is seeded
 * with a valid adapter file and a small F32/F16/BF16 file.
 */
#include <dirent.h>
#include <jansson.h>
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
#include "engine/quant.h"
#include "engine/safetensors.h"
#include "engine/safetensors_write.h"

#define FUZZ_MAX_INPUT (1u << 20)

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char adapter_config[] =
    "{\"peft_type\": \"LORA\", \"task_type\": \"CAUSAL_LM\", \"r\": 2, \"lora_alpha\": 4, "
    "\"lora_dropout\": 0.0, \"target_modules\": [\"q_proj\", \"v_proj\"], \"bias\": \"none\"}\n";

static struct model *model;
static char tmp_dir[1024], adapter_dir[1100], st_path[1200], cfg_path[1200], seed_path[1200];
static char *seed_adapter; /* the valid adapter file's bytes (owned) */
static size_t seed_adapter_len;

static void write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        fprintf(stderr, "fuzz_safetensors: cannot write %s\n", path);
        abort();
    }
}

static void cleanup(void)
{
    unlink(st_path);
    unlink(cfg_path);
    unlink(seed_path);
    rmdir(adapter_dir);
    rmdir(tmp_dir);
}

static void die(const char *what, const char *err)
{
    fprintf(stderr, "fuzz_safetensors: %s: %s\n", what, err);
    abort();
}

/* The tiny model, the adapter folder with its config, and a valid adapter file for the seeds
 * (written by lora_save_peft to a side folder, read back, then removed). */
static void setup(void)
{
    char mpath[1200], side[1200], err[1024];
    const char *t = getenv("TMPDIR");
    snprintf(tmp_dir, sizeof tmp_dir, "%s/fuzz_safetensors.XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmp_dir))
        abort();
    atexit(cleanup);
    snprintf(adapter_dir, sizeof adapter_dir, "%s/adapter", tmp_dir);
    snprintf(st_path, sizeof st_path, "%s/adapter_model.safetensors", adapter_dir);
    snprintf(cfg_path, sizeof cfg_path, "%s/adapter_config.json", adapter_dir);
    snprintf(mpath, sizeof mpath, "%s/model.gguf", tmp_dir);
    snprintf(side, sizeof side, "%s/side", tmp_dir);
    if (mkdir(adapter_dir, 0700) != 0 || mkdir(side, 0700) != 0)
        abort();
    write_file(cfg_path, adapter_config, strlen(adapter_config));
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
    if (lora_save_peft(l, model, side, NULL, err, sizeof err) != AF_OK)
        die("lora_save_peft", err);
    lora_free(l);
    char p[1300];
    snprintf(p, sizeof p, "%s/adapter_model.safetensors", side);
    if (af_file_read(p, FUZZ_MAX_INPUT, &seed_adapter, &seed_adapter_len, err, sizeof err))
        die("read", err);
    unlink(p);
    snprintf(p, sizeof p, "%s/adapter_config.json", side);
    unlink(p);
    rmdir(side);
    snprintf(seed_path, sizeof seed_path, "%s/seed.safetensors", tmp_dir);
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

/* Writes the seeds into dir: the valid adapter and a small file of every dtype. */
static void seed(const char *dir)
{
    char p[4096], err[512];
    snprintf(p, sizeof p, "%s/seed-adapter", dir);
    write_file(p, seed_adapter, seed_adapter_len);
    static const float f32[6] = {1, -2, 3.5f, 0, 1e-3f, -0.25f};
    static const uint16_t f16[4] = {0x3c00, 0xc000, 0x7bff, 0x0001};
    static const uint16_t bf16[2] = {0x3f80, 0xbf00};
    const struct st_write_tensor ts[] = {
        {"a", "F32", {2, 3}, 2, f32, sizeof f32},
        {"b.weight", "F16", {4}, 1, f16, sizeof f16},
        {"c", "BF16", {1, 1, 2}, 3, bf16, sizeof bf16},
        {"s", "F32", {0}, 0, f32, 4},
    };
    if (st_write(seed_path, ts, sizeof ts / sizeof ts[0], "{\"format\":\"pt\"}", err, sizeof err) !=
        AF_OK)
        die("st_write", err);
    char *buf = NULL;
    size_t len = 0;
    if (af_file_read(seed_path, FUZZ_MAX_INPUT, &buf, &len, err, sizeof err) != AF_OK)
        die("read", err);
    snprintf(p, sizeof p, "%s/seed-dtypes", dir);
    write_file(p, buf, len);
    free(buf);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    setup();
    for (int i = 1; i < *argc; i++) {
        const char *a = (*argv)[i];
        struct stat sb;
        if (a[0] != '-' && stat(a, &sb) == 0 && S_ISDIR(sb.st_mode) && dir_empty(a))
            seed(a);
    }
    return 0;
}

static size_t elem_size(uint32_t type)
{
    if (type == GGML_TYPE_F32)
        return 4;
    if (type == GGML_TYPE_F16 || type == GGML_TYPE_BF16)
        return 2;
    abort();
}

/* Checks and touches every tensor of an opened file against the input bytes. */
static void walk(const struct st_file *f, const uint8_t *data, size_t size)
{
    uint64_t hlen;
    memcpy(&hlen, data, 8);
    json_t *h = json_loadb((const char *)data + 8, (size_t)hlen, 0, NULL);
    if (!json_is_object(h))
        abort();
    size_t n = st_n_tensors(f);
    if (n != json_object_size(h) - (json_object_get(h, "__metadata__") != NULL))
        abort();
    const uint8_t *base = data + 8 + hlen;
    volatile uint8_t acc = 0;
    for (size_t i = 0; i < n; i++) {
        const struct st_tensor *t = st_tensor_at(f, i);
        if (!t || !t->name || t->n_dims < 1 || t->n_dims > 4 || st_find(f, t->name) != t)
            abort();
        uint64_t count = 1;
        for (int k = 0; k < 4; k++) {
            if (t->ne[k] < 0 || (k >= (int)t->n_dims && t->ne[k] != 1))
                abort();
            count *= (uint64_t)t->ne[k];
        }
        if (t->nbytes != count * elem_size(t->type))
            abort();
        json_t *offs = json_object_get(json_object_get(h, t->name), "data_offsets");
        json_int_t b = json_integer_value(json_array_get(offs, 0));
        json_int_t e = json_integer_value(json_array_get(offs, 1));
        if (b < 0 || e - b != (json_int_t)t->nbytes || (uint64_t)e > size - 8 - hlen ||
            memcmp(t->data, base + b, (size_t)t->nbytes) != 0)
            abort();
        for (uint64_t k = 0; k < t->nbytes; k++)
            acc ^= ((const uint8_t *)t->data)[k];
        for (size_t j = 0; j < i; j++) {
            const struct st_tensor *u = st_tensor_at(f, j);
            const uint8_t *x = t->data, *y = u->data;
            if (t->nbytes && u->nbytes && x < y + u->nbytes && y < x + t->nbytes)
                abort();
        }
    }
    (void)acc;
    json_decref(h);
}

static void check_adapter(const struct lora_adapter *l)
{
    if (l->rank != 2 || l->targets != ((1u << LORA_Q) | (1u << LORA_V)) ||
        l->n_layer != model->hp.n_layer || !(l->scale == 2.0f))
        abort();
    for (size_t i = 0; i < l->n_floats; i++)
        if (!isfinite(l->data[i]))
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > FUZZ_MAX_INPUT)
        return 0;
    write_file(st_path, data, size);
    char err[1024];
    struct st_file *f = NULL;
    int rc = st_open(st_path, &f, err, sizeof err);
    if (rc != AF_OK) {
        if (f || strncmp(err, st_path, strlen(st_path)) != 0)
            die("st_open", err);
    } else {
        walk(f, data, size);
        st_close(f);
    }
    struct lora_adapter *l = NULL;
    rc = lora_load_peft(adapter_dir, model, &l, err, sizeof err);
    if (rc != AF_OK) {
        if (l || strncmp(err, adapter_dir, strlen(adapter_dir)) != 0)
            die("lora_load_peft", err);
        return 0;
    }
    check_adapter(l);
    lora_free(l);
    return 0;
}
