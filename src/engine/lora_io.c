/*
 * lora_io.c - LoRA adapters as PEFT folders (see lora.h): adapter_model.safetensors and
 * adapter_config.json, the layout `peft.PeftModel.from_pretrained` reads and `save_pretrained`
 * writes.
 *
 * Orientation: our adapters follow the engine's weights. llama.cpp's converter permutes the rows
 * of q_proj and k_proj of llama-arch models (HF row h·hd + j·hd/2 + i becomes GGUF row
 * h·hd + 2i + j, i < hd/2, j in {0, 1}) so that RoPE rotates adjacent pairs. For a GGUF llama
 * model, B of q and k is converted GGUF -> HF rows on save and back on load; A (input side) is
 * never permuted, and qwen2 GGUF files and HF checkpoints (rope_neox_hf) keep HF order.
 *
 * Which (layer, module) pairs an adapter covers follows PEFT's matching of target_modules
 * against module keys "model.layers.L.self_attn.q_proj": a list matches a key equal to an entry
 * or ending in "." + entry (restricted by layers_to_transform), a string is a regular
 * expression that must match the whole key ("all-linear": every projection). A layer that a
 * target skips keeps zero matrices, which adds nothing.
 */
#include "engine/lora.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/errf.h"
#include "core/fileio.h"
#include "core/jsonx.h"
#include "core/xalloc.h"
#include "engine/quant.h"
#include "engine/safetensors_write.h"

#define LORA_ST_FILE "adapter_model.safetensors"
#define LORA_CFG_FILE "adapter_config.json"
#define LORA_CFG_MAX (1u << 20)
#define LORA_NAME_PREFIX "base_model.model.model.layers."

static const char *section_of(int t)
{
    return t <= LORA_O ? "self_attn" : "mlp";
}

/* 1 when m's q/k rows are in llama.cpp's permuted order. */
static int qk_permuted(const struct model *m)
{
    return m->hp.arch == MODEL_ARCH_LLAMA && !m->rope_neox_hf;
}

/* The HF row of GGUF row g of a q/k weight whose heads have hd rows (hd even). */
static int64_t hf_row(int64_t g, int64_t hd)
{
    int64_t h = g / hd, r = g % hd;
    return h * hd + (r % 2) * (hd / 2) + r / 2;
}

/* The head width for B's rows of target t: hd when the rows are permuted, else 0. */
static int64_t perm_hd(const struct model *m, int t)
{
    return qk_permuted(m) && (t == LORA_Q || t == LORA_K) ? m->hp.head_dim : 0;
}

static void join(char *buf, size_t len, const char *dir, const char *file)
{
    snprintf(buf, len, "%s/%s", dir, file);
}

/* Makes renames in dir durable; errors are ignored (some file systems refuse). */
static void sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* ---- save ---------------------------------------------------------------------------------- */

/* The checks a file we write must pass when read back: m's shape, finite values. */
static int check_adapter(const struct lora_adapter *l, const struct model *m, char *err,
                         size_t errlen)
{
    if (l->n_layer != m->hp.n_layer || l->rank < 1 || !l->targets ||
        (l->targets & ~LORA_ALL_TARGETS)) {
        af_errf(err, errlen,
                "LoRA save: the adapter (%lld layers, rank %d, targets 0x%x) does not fit the "
                "model (%lld layers)",
                (long long)l->n_layer, l->rank, l->targets, (long long)m->hp.n_layer);
        return AF_EINVAL;
    }
    for (int64_t il = 0; il < l->n_layer; il++)
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            const struct lora_pair *p = lora_pair_at(l, il, (enum lora_target)t);
            if (!p != !(l->targets & (1u << t))) {
                af_errf(err, errlen, "LoRA save: layer %lld %s: pair does not match the targets",
                        (long long)il, lora_target_peft_name((enum lora_target)t));
                return AF_EINVAL;
            }
            if (!p)
                continue;
            int64_t n_in, n_out;
            lora_target_dims(&m->hp, (enum lora_target)t, &n_in, &n_out);
            if (p->n_in != n_in || p->n_out != n_out) {
                af_errf(err, errlen,
                        "LoRA save: layer %lld %s is %lld -> %lld, the model has %lld -> %lld",
                        (long long)il, lora_target_peft_name((enum lora_target)t),
                        (long long)p->n_in, (long long)p->n_out, (long long)n_in, (long long)n_out);
                return AF_EINVAL;
            }
            for (int ab = 0; ab < 2; ab++) {
                const float *v = ab ? p->b : p->a;
                size_t n = (size_t)(l->rank * (ab ? n_out : n_in));
                for (size_t i = 0; i < n; i++)
                    if (!isfinite(v[i])) {
                        af_errf(err, errlen, "LoRA save: layer %lld %s: lora_%c[%zu] is %g",
                                (long long)il, lora_target_peft_name((enum lora_target)t),
                                ab ? 'B' : 'A', i, (double)v[i]);
                        return AF_EINVAL;
                    }
            }
        }
    return AF_OK;
}

static int make_dir(const char *dir, char *err, size_t errlen)
{
    struct stat sb;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        af_errf(err, errlen, "%s: cannot create the adapter folder: %s", dir, strerror(errno));
        return AF_EIO;
    }
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        af_errf(err, errlen, "%s: exists and is not a folder", dir);
        return AF_EIO;
    }
    return AF_OK;
}

/* The shortest decimal that reads back as f, so 0.05f is written 0.05. */
static double short_decimal(float f)
{
    char buf[32];
    for (int prec = 1; prec < 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        double d = strtod(buf, NULL);
        if ((float)d == f)
            return d;
    }
    return (double)f;
}

static int write_config(const struct lora_adapter *l, const char *dir, const char *base_name,
                        char *err, size_t errlen)
{
    json_t *c = json_object(), *tm = json_array();
    for (int t = 0; t < LORA_N_TARGETS; t++)
        if (l->targets & (1u << t))
            json_array_append_new(tm, json_string(lora_target_peft_name((enum lora_target)t)));
    double alpha = short_decimal(l->alpha);
    json_object_set_new(c, "peft_type", json_string("LORA"));
    json_object_set_new(c, "task_type", json_string("CAUSAL_LM"));
    json_object_set_new(c, "base_model_name_or_path",
                        base_name ? json_string(base_name) : json_null());
    json_object_set_new(c, "r", json_integer(l->rank));
    json_object_set_new(c, "lora_alpha",
                        alpha == floor(alpha) && fabs(alpha) < 1e15
                            ? json_integer((json_int_t)alpha)
                            : json_real(alpha));
    json_object_set_new(c, "lora_dropout", json_real(short_decimal(l->dropout)));
    json_object_set_new(c, "target_modules", tm);
    json_object_set_new(c, "bias", json_string("none"));
    json_object_set_new(c, "fan_in_fan_out", json_false());
    json_object_set_new(c, "inference_mode", json_true());
    json_object_set_new(c, "use_rslora", json_false());
    json_object_set_new(c, "init_lora_weights", json_true());
    json_object_set_new(c, "layers_to_transform", json_null());
    json_object_set_new(c, "layers_pattern", json_null());
    json_object_set_new(c, "rank_pattern", json_object());
    json_object_set_new(c, "alpha_pattern", json_object());
    json_object_set_new(c, "modules_to_save", json_null());
    /* 15 digits print every short_decimal value exactly (0.05, not 0.050000000000000003). */
    char *s = json_dumps(c, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
    json_decref(c);
    char path[4096];
    join(path, sizeof path, dir, LORA_CFG_FILE);
    int rc = AF_EINVAL;
    if (!s)
        af_errf(err, errlen, "%s: cannot encode the JSON", path);
    else
        rc = af_file_write_atomic(path, s, strlen(s), err, errlen);
    if (rc == AF_OK)
        sync_dir(dir);
    free(s);
    return rc;
}

static void tensor_name(char *buf, size_t len, int64_t il, int t, char ab)
{
    snprintf(buf, len, LORA_NAME_PREFIX "%lld.%s.%s.lora_%c.weight", (long long)il, section_of(t),
             lora_target_peft_name((enum lora_target)t), ab);
}

int lora_save_peft(const struct lora_adapter *l, const struct model *m, const char *dir,
                   const char *base_name, char *err, size_t errlen)
{
    if (!l || !m || !dir || !*dir) {
        af_errf(err, errlen, "LoRA save: adapter, model and folder are required");
        return AF_EINVAL;
    }
    json_t *bn = base_name ? json_string(base_name) : NULL;
    if (base_name && !bn) {
        af_errf(err, errlen, "LoRA save: the base model name is not valid UTF-8");
        return AF_EINVAL;
    }
    json_decref(bn);
    int rc = check_adapter(l, m, err, errlen);
    if (rc || (rc = make_dir(dir, err, errlen)))
        return rc;
    size_t n_pairs = 0, n_perm = 0;
    for (int64_t i = 0; i < l->n_layer * LORA_N_TARGETS; i++)
        if (l->pairs[i].a) {
            n_pairs++;
            if (perm_hd(m, (int)(i % LORA_N_TARGETS)))
                n_perm += (size_t)(l->rank * l->pairs[i].n_out);
        }
    struct st_write_tensor *ts = af_xcalloc(2 * n_pairs, sizeof *ts);
    char(*names)[128] = af_xcalloc(2 * n_pairs, sizeof *names);
    float *perm = af_xmalloc((n_perm ? n_perm : 1) * sizeof(float)); /* B of q/k, HF rows */
    size_t k = 0, po = 0;
    for (int64_t il = 0; il < l->n_layer; il++)
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            const struct lora_pair *p = lora_pair_at(l, il, (enum lora_target)t);
            if (!p)
                continue;
            const float *b = p->b;
            int64_t hd = perm_hd(m, t), r = l->rank;
            if (hd) {
                float *dst = perm + po;
                for (int64_t g = 0; g < p->n_out; g++)
                    memcpy(dst + hf_row(g, hd) * r, p->b + g * r, (size_t)r * sizeof(float));
                po += (size_t)(r * p->n_out);
                b = dst;
            }
            tensor_name(names[k], sizeof names[k], il, t, 'A');
            ts[k] = (struct st_write_tensor){
                names[k], "F32", {r, p->n_in}, 2, p->a, (size_t)(r * p->n_in) * sizeof(float)};
            k++;
            tensor_name(names[k], sizeof names[k], il, t, 'B');
            ts[k] = (struct st_write_tensor){
                names[k], "F32", {p->n_out, r}, 2, b, (size_t)(r * p->n_out) * sizeof(float)};
            k++;
        }
    char path[4096];
    join(path, sizeof path, dir, LORA_ST_FILE);
    rc = st_write(path, ts, k, "{\"format\":\"pt\"}", err, errlen);
    if (rc == AF_OK)
        rc = write_config(l, dir, base_name, err, errlen);
    free(perm);
    free(names);
    free(ts);
    return rc;
}

/* ---- load ---------------------------------------------------------------------------------- */

/* What adapter_config.json asks for. want[il * LORA_N_TARGETS + t]: the pair is in the file. */
struct peft_cfg {
    int rank;
    float alpha, dropout;
    unsigned targets;
    uint8_t *want; /* owned */
};

/* Options PEFT has that change the maths in ways this engine does not implement. */
static int check_unsupported(json_t *c, const char *path, char *err, size_t errlen)
{
    static const char *const no_true[] = {"use_rslora", "fan_in_fan_out", "use_dora", "lora_bias"};
    for (size_t i = 0; i < sizeof no_true / sizeof no_true[0]; i++)
        if (json_is_true(json_object_get(c, no_true[i]))) {
            af_errf(err, errlen, "%s: \"%s\": true is not supported", path, no_true[i]);
            return AF_EINVAL;
        }
    const char *pt = af_json_get_str(c, "peft_type");
    if (json_object_get(c, "peft_type") && (!pt || strcmp(pt, "LORA"))) {
        af_errf(err, errlen, "%s: \"peft_type\" must be \"LORA\"", path);
        return AF_EINVAL;
    }
    json_t *bias = json_object_get(c, "bias");
    if (bias && (!json_is_string(bias) || strcmp(json_string_value(bias), "none"))) {
        af_errf(err, errlen, "%s: \"bias\" must be \"none\" (bias training is not supported)",
                path);
        return AF_EINVAL;
    }
    static const char *const no_entries[] = {"rank_pattern", "alpha_pattern", "modules_to_save"};
    for (size_t i = 0; i < sizeof no_entries / sizeof no_entries[0]; i++) {
        json_t *v = json_object_get(c, no_entries[i]);
        if (v && !json_is_null(v) && !(json_is_object(v) && !json_object_size(v)) &&
            !(json_is_array(v) && !json_array_size(v))) {
            af_errf(err, errlen, "%s: \"%s\" must be empty or null (not supported)", path,
                    no_entries[i]);
            return AF_EINVAL;
        }
    }
    return AF_OK;
}

static int read_numbers(json_t *c, const char *path, struct peft_cfg *cfg, char *err, size_t errlen)
{
    json_t *r = json_object_get(c, "r");
    if (!json_is_integer(r) || json_integer_value(r) < 1 || json_integer_value(r) > 4096) {
        af_errf(err, errlen, "%s: \"r\" must be an integer in 1..4096", path);
        return AF_EPARSE;
    }
    cfg->rank = (int)json_integer_value(r);
    json_t *a = json_object_get(c, "lora_alpha"), *d = json_object_get(c, "lora_dropout");
    cfg->alpha = 8; /* PEFT's default */
    if (a && (!json_is_number(a) || !(json_number_value(a) > 0) ||
              !isfinite((float)json_number_value(a)))) {
        af_errf(err, errlen, "%s: \"lora_alpha\" must be a positive number", path);
        return AF_EPARSE;
    }
    if (a)
        cfg->alpha = (float)json_number_value(a);
    cfg->dropout = 0;
    if (d && !json_is_null(d) &&
        (!json_is_number(d) || !(json_number_value(d) >= 0 && json_number_value(d) < 1))) {
        af_errf(err, errlen, "%s: \"lora_dropout\" must be a number in [0, 1)", path);
        return AF_EPARSE;
    }
    if (d && json_is_number(d))
        cfg->dropout = (float)json_number_value(d);
    return AF_OK;
}

/* want[il] = 1 for the layers layers_to_transform keeps (all when absent or null). */
static int read_layers(json_t *c, const char *path, int64_t n_layer, uint8_t *keep, char *err,
                       size_t errlen)
{
    json_t *v = json_object_get(c, "layers_to_transform");
    memset(keep, v && !json_is_null(v) ? 0 : 1, (size_t)n_layer);
    if (!v || json_is_null(v))
        return AF_OK;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_is_array(v) ? json_array_get(v, i) : v;
        json_int_t il = json_integer_value(e);
        if (!json_is_integer(e) || il < 0 || il >= n_layer) {
            af_errf(err, errlen,
                    "%s: \"layers_to_transform\" entry %zu is not a layer index below %lld", path,
                    i, (long long)n_layer);
            return AF_EPARSE;
        }
        keep[il] = 1;
    }
    return AF_OK;
}

/* PEFT's list matching: the key is the entry or ends with "." + entry. */
static int key_matches(const char *key, const char *entry)
{
    size_t k = strlen(key), e = strlen(entry);
    if (k == e)
        return !strcmp(key, entry);
    return k > e && key[k - e - 1] == '.' && !strcmp(key + k - e, entry);
}

/* A string target_modules: a regular expression over the whole key, or "all-linear". */
static int match_regex(const char *rx, const char *path, int64_t n_layer, uint8_t *want, char *err,
                       size_t errlen)
{
    if (!strcmp(rx, "all-linear")) {
        memset(want, 1, (size_t)(n_layer * LORA_N_TARGETS));
        return AF_OK;
    }
    int ec = 0;
    PCRE2_SIZE eo = 0;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)rx, PCRE2_ZERO_TERMINATED,
                                   PCRE2_ANCHORED | PCRE2_ENDANCHORED, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        af_errf(err, errlen, "%s: \"target_modules\" regex at offset %zu: %s", path, (size_t)eo,
                (const char *)msg);
        return AF_EPARSE;
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    for (int64_t il = 0; il < n_layer; il++)
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            char key[128];
            snprintf(key, sizeof key, "model.layers.%lld.%s.%s", (long long)il, section_of(t),
                     lora_target_peft_name((enum lora_target)t));
            want[il * LORA_N_TARGETS + t] =
                pcre2_match(re, (PCRE2_SPTR)key, strlen(key), 0, 0, md, NULL) >= 0;
        }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return AF_OK;
}

/* A list target_modules, restricted to the layers in keep. Every entry must name a module. */
static int match_list(json_t *tm, const char *path, int64_t n_layer, const uint8_t *keep,
                      uint8_t *want, char *err, size_t errlen)
{
    for (size_t i = 0; i < json_array_size(tm); i++) {
        const char *e = json_string_value(json_array_get(tm, i));
        if (!e) {
            af_errf(err, errlen, "%s: \"target_modules\" entry %zu is not a string", path, i);
            return AF_EPARSE;
        }
        int hit = 0;
        for (int64_t il = 0; il < n_layer; il++)
            for (int t = 0; t < LORA_N_TARGETS; t++) {
                char key[128];
                snprintf(key, sizeof key, "model.layers.%lld.%s.%s", (long long)il, section_of(t),
                         lora_target_peft_name((enum lora_target)t));
                if (key_matches(key, e)) {
                    hit = 1;
                    want[il * LORA_N_TARGETS + t] |= keep[il];
                }
            }
        if (!hit) {
            af_errf(err, errlen,
                    "%s: \"target_modules\" entry '%s' names no supported module (q_proj, "
                    "k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)",
                    path, e);
            return AF_EINVAL;
        }
    }
    return AF_OK;
}

static int read_targets(json_t *c, const char *path, int64_t n_layer, struct peft_cfg *cfg,
                        char *err, size_t errlen)
{
    cfg->want = af_xcalloc((size_t)(n_layer * LORA_N_TARGETS), 1);
    json_t *tm = json_object_get(c, "target_modules");
    int rc;
    if (json_is_string(tm)) {
        rc = match_regex(json_string_value(tm), path, n_layer, cfg->want, err, errlen);
    } else if (!tm || json_is_null(tm) || json_is_array(tm)) {
        uint8_t *keep = af_xmalloc((size_t)n_layer);
        json_t *dflt = NULL;
        if (!tm || json_is_null(tm)) /* PEFT's default for llama and qwen2 */
            tm = dflt = json_pack("[ss]", "q_proj", "v_proj");
        rc = read_layers(c, path, n_layer, keep, err, errlen);
        if (rc == AF_OK)
            rc = match_list(tm, path, n_layer, keep, cfg->want, err, errlen);
        json_decref(dflt);
        free(keep);
    } else {
        af_errf(err, errlen, "%s: \"target_modules\" must be a list of names or a string", path);
        rc = AF_EPARSE;
    }
    if (rc)
        return rc;
    cfg->targets = 0;
    for (int64_t i = 0; i < n_layer * LORA_N_TARGETS; i++)
        if (cfg->want[i])
            cfg->targets |= 1u << (i % LORA_N_TARGETS);
    if (!cfg->targets) {
        af_errf(err, errlen, "%s: \"target_modules\" matches no module of the model", path);
        return AF_EINVAL;
    }
    return AF_OK;
}

static int read_config(const char *path, int64_t n_layer, struct peft_cfg *cfg, char *err,
                       size_t errlen)
{
    json_t *c = af_json_load_object(path, LORA_CFG_MAX, err, errlen);
    if (!c)
        return access(path, F_OK) == 0 ? AF_EPARSE : AF_ENOTFOUND;
    int rc = check_unsupported(c, path, err, errlen);
    if (rc == AF_OK)
        rc = read_numbers(c, path, cfg, err, errlen);
    if (rc == AF_OK)
        rc = read_targets(c, path, n_layer, cfg, err, errlen);
    json_decref(c);
    return rc;
}

/* Parses "base_model.model.model.layers.L.SECTION.MODULE.lora_X[.default].weight". */
static int parse_name(const char *name, int64_t *il, int *t, int *is_b)
{
    size_t np = strlen(LORA_NAME_PREFIX);
    if (strncmp(name, LORA_NAME_PREFIX, np) != 0)
        return -1;
    const char *p = name + np;
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9'))
        return -1;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (errno || *end != '.')
        return -1;
    p = end + 1;
    for (int k = 0; k < LORA_N_TARGETS; k++) {
        char rest[96];
        const char *mod = lora_target_peft_name((enum lora_target)k);
        for (int ab = 0; ab < 2; ab++) {
            for (int dflt = 0; dflt < 2; dflt++) {
                snprintf(rest, sizeof rest, "%s.%s.lora_%c%s.weight", section_of(k), mod,
                         ab ? 'B' : 'A', dflt ? ".default" : "");
                if (!strcmp(p, rest)) {
                    *il = (int64_t)v;
                    *t = k;
                    *is_b = ab;
                    return 0;
                }
            }
        }
    }
    return -1;
}

/* Copies rows x cols values of st into dst as F32; row g of dst is row hf_row(g) of the file
 * when hd is set. Fails on a non-finite value (*bad is its index). */
static int copy_rows(const struct st_tensor *st, float *dst, int64_t rows, int64_t cols, int64_t hd,
                     size_t *bad)
{
    const uint8_t *src = st->data;
    size_t es = st->type == GGML_TYPE_F32 ? 4 : 2;
    for (int64_t g = 0; g < rows; g++) {
        int64_t s = hd ? hf_row(g, hd) : g;
        const uint8_t *row = src + (size_t)(s * cols) * es;
        for (int64_t c = 0; c < cols; c++) {
            float f;
            uint16_t h;
            if (es == 4) {
                memcpy(&f, row + (size_t)c * 4, 4); /* the data may be unaligned */
            } else {
                memcpy(&h, row + (size_t)c * 2, 2);
                f = st->type == GGML_TYPE_F16 ? quant_f16_to_f32(h) : quant_bf16_to_f32(h);
            }
            if (!isfinite(f)) {
                *bad = (size_t)(s * cols + c);
                return -1;
            }
            dst[g * cols + c] = f;
        }
    }
    return 0;
}

/* Checks one tensor of the file against the config and m, and copies it into l. */
static int load_tensor(const struct st_tensor *st, const char *path, const struct model *m,
                       const struct peft_cfg *cfg, struct lora_adapter *l, uint8_t *seen, char *err,
                       size_t errlen)
{
    int64_t il;
    int t, is_b;
    if (parse_name(st->name, &il, &t, &is_b)) {
        af_errf(err, errlen, "%s: tensor '%s': not a LoRA tensor of a supported module", path,
                st->name);
        return AF_EINVAL;
    }
    if (il >= m->hp.n_layer) {
        af_errf(err, errlen, "%s: tensor '%s': layer %lld, the model has %lld", path, st->name,
                (long long)il, (long long)m->hp.n_layer);
        return AF_EINVAL;
    }
    size_t slot = (size_t)(il * LORA_N_TARGETS + t);
    if (!cfg->want[slot]) {
        af_errf(err, errlen, "%s: tensor '%s': the module is not in target_modules", path,
                st->name);
        return AF_EINVAL;
    }
    if (seen[2 * slot + (size_t)is_b]) {
        af_errf(err, errlen, "%s: tensor '%s': given twice", path, st->name);
        return AF_EINVAL;
    }
    seen[2 * slot + (size_t)is_b] = 1;
    struct lora_pair *p = &l->pairs[slot];
    int64_t rows = is_b ? p->n_out : l->rank, cols = is_b ? l->rank : p->n_in;
    if (st->n_dims != 2 || st->ne[1] != rows || st->ne[0] != cols) {
        af_errf(err, errlen,
                "%s: tensor '%s': shape [%lld, %lld] (%u dims), expected [%lld, %lld] "
                "(r = %d)",
                path, st->name, (long long)st->ne[1], (long long)st->ne[0], st->n_dims,
                (long long)rows, (long long)cols, l->rank);
        return AF_EINVAL;
    }
    if (st->type != GGML_TYPE_F32 && st->type != GGML_TYPE_F16 && st->type != GGML_TYPE_BF16) {
        af_errf(err, errlen, "%s: tensor '%s': type %s (F32, F16 or BF16)", path, st->name,
                quant_type_name(st->type));
        return AF_EINVAL;
    }
    size_t bad = 0;
    if (copy_rows(st, is_b ? p->b : p->a, rows, cols, is_b ? perm_hd(m, t) : 0, &bad)) {
        af_errf(err, errlen, "%s: tensor '%s': element %zu is not finite", path, st->name, bad);
        return AF_EINVAL;
    }
    return AF_OK;
}

static int check_complete(const char *path, const struct model *m, const struct peft_cfg *cfg,
                          const uint8_t *seen, char *err, size_t errlen)
{
    for (int64_t il = 0; il < m->hp.n_layer; il++)
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            size_t slot = (size_t)(il * LORA_N_TARGETS + t);
            for (int ab = 0; ab < 2 && cfg->want[slot]; ab++)
                if (!seen[2 * slot + (size_t)ab]) {
                    char name[128];
                    tensor_name(name, sizeof name, il, t, ab ? 'B' : 'A');
                    af_errf(err, errlen, "%s: tensor '%s' is missing", path, name);
                    return AF_EINVAL;
                }
        }
    return AF_OK;
}

int lora_load_peft(const char *dir, const struct model *m, struct lora_adapter **out, char *err,
                   size_t errlen)
{
    *out = NULL;
    struct stat sb;
    if (!dir || !m || stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        af_errf(err, errlen, "%s: no such adapter folder", dir ? dir : "(null)");
        return AF_ENOTFOUND;
    }
    char cpath[4096], spath[4096], lerr[512];
    join(cpath, sizeof cpath, dir, LORA_CFG_FILE);
    join(spath, sizeof spath, dir, LORA_ST_FILE);
    struct peft_cfg cfg = {0};
    struct st_file *f = NULL;
    struct lora_adapter *l = NULL;
    uint8_t *seen = NULL;
    int rc = read_config(cpath, m->hp.n_layer, &cfg, err, errlen);
    if (rc)
        goto out;
    if ((rc = lora_new(&m->hp, cfg.rank, cfg.alpha, cfg.dropout, cfg.targets, &l, lerr,
                       sizeof lerr))) {
        af_errf(err, errlen, "%s: %s", cpath, lerr);
        goto out;
    }
    if ((rc = st_open(spath, &f, err, errlen)))
        goto out;
    seen = af_xcalloc((size_t)(m->hp.n_layer * LORA_N_TARGETS * 2), 1);
    for (size_t i = 0; i < st_n_tensors(f) && rc == AF_OK; i++)
        rc = load_tensor(st_tensor_at(f, i), spath, m, &cfg, l, seen, err, errlen);
    if (rc == AF_OK)
        rc = check_complete(spath, m, &cfg, seen, err, errlen);
out:
    st_close(f);
    free(seen);
    free(cfg.want);
    if (rc)
        lora_free(l);
    else
        *out = l;
    return rc;
}
