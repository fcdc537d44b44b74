/*
 * ckpt.c - checkpoint folders written whole or not at all (see ckpt.h).
 */
#include "train/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agentflow/engine.h"
#include "engine/gguf.h"
#include "core/errf.h"
#include "core/fileio.h"
#include "core/jsonx.h"
#include "core/xalloc.h"
#include "engine/quant.h"
#include "engine/safetensors.h"
#include "engine/safetensors_write.h"

#define STATE_FILE "trainer_state.json"
#define OPT_FILE "optimizer.safetensors"
#define FULL_FILE "model.safetensors"

static int mkdir_p1(const char *dir, char *err, size_t errlen)
{
    if (mkdir(dir, 0755) == 0 || errno == EEXIST)
        return AF_OK;
    af_errf(err, errlen, "%s: cannot create the folder: %s", dir, strerror(errno));
    return AF_EIO;
}

static void fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

static int rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
            rm_tree(p);
        else
            unlink(p);
    }
    closedir(d);
    return rmdir(dir);
}

/* The steps of complete checkpoints in dir, ascending; *n of them (malloc'd, caller frees). */
static int64_t *list_steps(const char *dir, size_t *n)
{
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    int64_t *v = NULL;
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        if (strncmp(e->d_name, "checkpoint-", 11) != 0)
            continue;
        long long s = strtoll(e->d_name + 11, &end, 10);
        if (*end || end == e->d_name + 11 || s <= 0)
            continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 8;
            v = af_xrealloc(v, cap * sizeof *v);
        }
        v[(*n)++] = s;
    }
    closedir(d);
    for (size_t i = 1; i < *n; i++) /* insertion sort: a handful of entries */
        for (size_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
            int64_t t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return v;
}

int64_t ckpt_latest(const char *out_dir)
{
    size_t n;
    int64_t *v = list_steps(out_dir, &n);
    int64_t s = n ? v[n - 1] : 0;
    free(v);
    return s;
}

/* ---- the pieces ------------------------------------------------------------------------ */

static int write_tensors(const char *path, const struct train_param *p, size_t np,
                         const float *const *data, const char *prefix, size_t nsets, char *err,
                         size_t errlen)
{
    struct st_write_tensor *t = af_xcalloc(np * nsets, sizeof *t);
    char **names = af_xcalloc(np * nsets, sizeof *names);
    for (size_t s = 0; s < nsets; s++) {
        int64_t off = 0;
        for (size_t i = 0; i < np; i++) {
            const char *pre = prefix ? (s ? "exp_avg_sq." : "exp_avg.") : "";
            size_t len = strlen(pre) + strlen(p[i].name) + 1;
            names[s * np + i] = af_xmalloc(len);
            snprintf(names[s * np + i], len, "%s%s", pre, p[i].name);
            struct st_write_tensor *w = &t[s * np + i];
            w->name = names[s * np + i];
            w->dtype = "F32";
            w->n_dims = 1;
            w->shape[0] = p[i].n;
            w->data = prefix ? (const void *)(data[s] + off) : (const void *)p[i].w;
            w->nbytes = (size_t)p[i].n * sizeof(float);
            off += p[i].n;
        }
    }
    int rc = st_write(path, t, np * nsets, "{\"format\":\"pt\"}", err, errlen);
    for (size_t i = 0; i < np * nsets; i++)
        free(names[i]);
    free(names);
    free(t);
    return rc;
}

/* Copies tensors NAME (prefix "") or exp_avg.NAME / exp_avg_sq.NAME into dst arrays. */
static int read_tensors(const char *path, const struct train_param *p, size_t np, float *const *dst,
                        int moments, char *err, size_t errlen)
{
    struct st_file *f = NULL;
    int rc = st_open(path, &f, err, errlen);
    if (rc)
        return rc;
    for (size_t s = 0; s < (moments ? 2u : 1u) && !rc; s++) {
        int64_t off = 0;
        for (size_t i = 0; i < np; i++) {
            char name[256];
            snprintf(name, sizeof name, "%s%s", moments ? (s ? "exp_avg_sq." : "exp_avg.") : "",
                     p[i].name);
            const struct st_tensor *t = st_find(f, name);
            if (!t || t->type != GGML_TYPE_F32 || t->nbytes != (uint64_t)p[i].n * sizeof(float)) {
                af_errf(err, errlen, "%s: tensor %s is %s", path, name,
                        !t ? "missing" : "not F32 of the expected size");
                rc = AF_EINVAL;
                break;
            }
            memcpy(moments ? dst[s] + off : p[i].w, t->data, (size_t)t->nbytes);
            off += p[i].n;
        }
    }
    st_close(f);
    return rc;
}

static json_t *rng_json(const struct train_rng *r)
{
    json_t *a = json_array();
    for (int i = 0; i < 4; i++) {
        char hex[24];
        snprintf(hex, sizeof hex, "%016" PRIx64, r->s[i]);
        json_array_append_new(a, json_string(hex));
    }
    return a;
}

static int write_state(const char *path, const struct ckpt_state *st, int64_t adam_step, char *err,
                       size_t errlen)
{
    json_t *settings = st->settings_json ? json_loads(st->settings_json, 0, NULL) : json_object();
    if (!settings)
        settings = json_object();
    json_t *o = json_pack("{s:i,s:I,s:I,s:I,s:I,s:o,s:o}", "format", 1, "step",
                          (json_int_t)st->step, "epoch", (json_int_t)st->epoch, "pos",
                          (json_int_t)st->pos, "adam_step", (json_int_t)adam_step, "epoch_rng",
                          rng_json(&st->epoch_rng), "settings", settings);
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(o);
    int rc = af_file_write_atomic(path, text, strlen(text), err, errlen);
    free(text);
    return rc;
}

static int read_state(const char *path, struct ckpt_state *st, int64_t *adam_step, char *err,
                      size_t errlen)
{
    json_t *o = af_json_load_object(path, (size_t)1 << 24, err, errlen);
    if (!o)
        return AF_EPARSE;
    json_error_t je;
    json_int_t step, epoch, pos, as;
    json_t *rng = NULL, *settings = NULL;
    int rc = AF_OK;
    if (json_unpack_ex(o, &je, 0, "{s:I,s:I,s:I,s:I,s:o,s:o}", "step", &step, "epoch", &epoch,
                       "pos", &pos, "adam_step", &as, "epoch_rng", &rng, "settings",
                       &settings) != 0 ||
        !json_is_array(rng) || json_array_size(rng) != 4) {
        af_errf(err, errlen, "%s: %s", path, rng ? "epoch_rng must hold 4 values" : je.text);
        rc = AF_EPARSE;
    }
    for (size_t i = 0; !rc && i < 4; i++) {
        const char *h = json_string_value(json_array_get(rng, i));
        char *end;
        st->epoch_rng.s[i] = h ? strtoull(h, &end, 16) : 0;
        if (!h || *end) {
            af_errf(err, errlen, "%s: epoch_rng[%zu] is not a hex number", path, i);
            rc = AF_EPARSE;
        }
    }
    if (!rc) {
        st->step = step;
        st->epoch = epoch;
        st->pos = pos;
        *adam_step = as;
        st->settings_json = json_dumps(settings, JSON_COMPACT | JSON_SORT_KEYS);
    }
    json_decref(o);
    return rc;
}

/* ---- save / load ----------------------------------------------------------------------- */

int ckpt_save(const char *out_dir, const struct ckpt_state *st, const struct lora_adapter *lora,
              const struct model *m, const struct train_param *params, size_t np,
              const struct train_adamw_state *opt, int keep, char *err, size_t errlen)
{
    int rc = mkdir_p1(out_dir, err, errlen);
    if (rc)
        return rc;
    char tmp[4096], final[4096], path[4200];
    snprintf(tmp, sizeof tmp, "%s/.checkpoint-%lld.tmp-%d", out_dir, (long long)st->step,
             (int)getpid());
    snprintf(final, sizeof final, "%s/checkpoint-%lld", out_dir, (long long)st->step);
    rm_tree(tmp);
    if ((rc = mkdir_p1(tmp, err, errlen)))
        return rc;
    if (lora) {
        rc = lora_save_peft(lora, m, tmp, m ? m->path : NULL, err, errlen);
    } else {
        snprintf(path, sizeof path, "%s/%s", tmp, FULL_FILE);
        rc = write_tensors(path, params, np, NULL, NULL, 1, err, errlen);
    }
    if (!rc) {
        const float *mom[2] = {opt->m, opt->v};
        snprintf(path, sizeof path, "%s/%s", tmp, OPT_FILE);
        rc = write_tensors(path, params, np, mom, "m", 2, err, errlen);
    }
    if (!rc) {
        snprintf(path, sizeof path, "%s/%s", tmp, STATE_FILE);
        rc = write_state(path, st, opt->step, err, errlen);
    }
    if (!rc) {
        fsync_dir(tmp);
        rm_tree(final); /* a re-save of the same step replaces it */
        if (rename(tmp, final) != 0) {
            af_errf(err, errlen, "%s: cannot rename into place: %s", final, strerror(errno));
            rc = AF_EIO;
        }
        fsync_dir(out_dir);
    }
    if (rc) {
        rm_tree(tmp);
        return rc;
    }
    size_t n;
    int64_t *steps = list_steps(out_dir, &n);
    for (size_t i = 0; i + (size_t)(keep > 0 ? keep : 1) < n; i++) {
        snprintf(path, sizeof path, "%s/checkpoint-%lld", out_dir, (long long)steps[i]);
        rm_tree(path);
    }
    free(steps);
    return AF_OK;
}

int ckpt_read_settings(const char *out_dir, int64_t step, char **settings_json, char *err,
                       size_t errlen)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/checkpoint-%lld/%s", out_dir, (long long)step, STATE_FILE);
    struct ckpt_state st = {0};
    int64_t adam_step;
    int rc = read_state(path, &st, &adam_step, err, errlen);
    *settings_json = rc ? NULL : st.settings_json;
    return rc;
}

int ckpt_load(const char *out_dir, int64_t step, struct lora_adapter *lora, const struct model *m,
              const struct train_param *params, size_t np, struct train_adamw_state *opt,
              struct ckpt_state *st, char *err, size_t errlen)
{
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/checkpoint-%lld", out_dir, (long long)step);
    int rc;
    if (lora) {
        struct lora_adapter *l = NULL;
        if ((rc = lora_load_peft(dir, m, &l, err, errlen)))
            return rc;
        if (l->rank != lora->rank || l->targets != lora->targets || l->n_floats != lora->n_floats) {
            af_errf(err, errlen,
                    "%s: the adapter (rank %d, targets 0x%x) is not this run's "
                    "(rank %d, targets 0x%x)",
                    dir, l->rank, l->targets, lora->rank, lora->targets);
            lora_free(l);
            return AF_EINVAL;
        }
        memcpy(lora->data, l->data, l->n_floats * sizeof(float));
        lora_free(l);
    } else {
        snprintf(path, sizeof path, "%s/%s", dir, FULL_FILE);
        if ((rc = read_tensors(path, params, np, NULL, 0, err, errlen)))
            return rc;
    }
    float *mom[2] = {opt->m, opt->v};
    snprintf(path, sizeof path, "%s/%s", dir, OPT_FILE);
    if ((rc = read_tensors(path, params, np, mom, 1, err, errlen)))
        return rc;
    snprintf(path, sizeof path, "%s/%s", dir, STATE_FILE);
    int64_t adam_step = 0;
    if ((rc = read_state(path, st, &adam_step, err, errlen)))
        return rc;
    if (st->step != step) {
        af_errf(err, errlen, "%s: step %lld, but the folder is named for step %lld", path,
                (long long)st->step, (long long)step);
        free(st->settings_json);
        st->settings_json = NULL;
        return AF_EPARSE;
    }
    opt->step = adam_step;
    return AF_OK;
}

int ckpt_write_gguf(const struct model *m, const char *model_path, const struct train_param *params,
                    size_t np, const char *path, char *err, size_t errlen)
{
    const struct gguf_file *g = m->gguf;
    if (!g) {
        af_errf(err, errlen, "%s: full training writes GGUF output only for a GGUF base model",
                model_path);
        return AF_EINVAL;
    }
    struct gguf_writer *w = gguf_writer_new();
    gguf_writer_copy_kvs(w, g);
    /* Trained weights are no longer make-random's noise: loading them must not say so. */
    if (gguf_find_kv(g, AF_GGUF_KEY_RANDOM_WEIGHTS))
        gguf_writer_set_bool(w, AF_GGUF_KEY_RANDOM_WEIGHTS, 0);
    /* Nor is it named for them: make-random's "random-qwen2-custom" becomes "qwen2-custom". */
    char *gname = gguf_get_strdup(g, "general.name");
    if (gname && strncmp(gname, "random-", 7) == 0 && gname[7])
        gguf_writer_set_str(w, "general.name", gname + 7);
    free(gname);
    int rc = AF_OK;
    for (uint64_t i = 0; i < gguf_n_tensors(g) && !rc; i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)t->name.n, t->name.s);
        const struct train_param *p = NULL;
        for (size_t k = 0; k < np && !p; k++)
            if (strcmp(params[k].name, name) == 0)
                p = &params[k];
        if (p)
            rc = gguf_writer_add_tensor(w, name, GGML_TYPE_F32, t->n_dims, t->ne, p->w,
                                        (uint64_t)p->n * sizeof(float), err, errlen);
        else
            rc = gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data, t->nbytes, err,
                                        errlen);
    }
    if (!rc)
        rc = gguf_writer_write(w, path, err, errlen);
    gguf_writer_free(w);
    return rc;
}
