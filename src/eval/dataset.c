/*
 * dataset.c - loading the benchmark data files and parsing --bench lists.
 */
#include "eval/dataset.h"

#include <stdlib.h>
#include <string.h>

#include "agentflow/score.h"
#include "core/buf.h"
#include "core/errf.h"
#include "core/fileio.h"
#include "core/xalloc.h"

#define DATASET_MAX_BYTES ((size_t)256 << 20)

const char *eval_data_dir(const char *flag)
{
    if (flag && *flag)
        return flag;
    const char *env = getenv("AGENTFLOW_DATA");
    return env && *env ? env : "../shared/data/benchmarks";
}

static int known_bench(const char *name)
{
    return af_score_known(name);
}

static void unknown_bench(const char *name, char *err, size_t errlen)
{
    struct af_buf b;
    af_buf_init(&b, 4096);
    (void)af_buf_printf(&b, "unknown benchmark \"%s\"; known:", name);
    for (const char *const *n = af_score_benchmarks(); *n; n++)
        (void)af_buf_printf(&b, " %s", *n);
    (void)af_buf_puts(&b, " (or all), and world-lookup world-multihop world-calc world-24");
    af_errf(err, errlen, "%s", af_buf_str(&b));
    af_buf_deinit(&b);
}

static void push_name(char ***names, size_t *n, const char *name, size_t len)
{
    for (size_t i = 0; i < *n; i++)
        if (strlen((*names)[i]) == len && strncmp((*names)[i], name, len) == 0)
            return;
    *names = af_xrealloc(*names, (*n + 2) * sizeof **names);
    (*names)[(*n)++] = af_xstrndup(name, len);
    (*names)[*n] = NULL;
}

int eval_bench_list_parse(const char *spec, char ***out, char *err, size_t errlen)
{
    char **names = af_xcalloc(1, sizeof *names);
    size_t n = 0;
    for (const char *p = spec ? spec : "";;) {
        size_t len = strcspn(p, ",");
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(len < 63 ? len : 63), p);
        if (strcmp(name, "all") == 0) {
            for (const char *const *b = af_score_benchmarks(); *b; b++)
                push_name(&names, &n, *b, strlen(*b));
        } else if (len >= sizeof name || !known_bench(name)) {
            unknown_bench(name, err, errlen);
            eval_bench_list_free(names);
            *out = NULL;
            return AF_EINVAL;
        } else {
            push_name(&names, &n, p, len);
        }
        if (!p[len])
            break;
        p += len + 1;
    }
    *out = names;
    return AF_OK;
}

void eval_bench_list_free(char **names)
{
    if (!names)
        return;
    for (char **p = names; *p; p++)
        free(*p);
    free(names);
}

int eval_dataset_load(const char *dir, const char *bench, struct eval_dataset *out, char *err,
                      size_t errlen)
{
    memset(out, 0, sizeof *out);
    struct af_buf path;
    af_buf_init(&path, 8192);
    (void)af_buf_printf(&path, "%s/%s/data.json", dir, bench);
    char *text = NULL;
    size_t len = 0;
    int rc = af_file_read(af_buf_str(&path), DATASET_MAX_BYTES, &text, &len, err, errlen);
    if (rc != AF_OK) {
        af_buf_deinit(&path);
        return rc;
    }
    json_error_t je;
    json_t *items = json_loadb(text, len, 0, &je);
    free(text);
    rc = AF_OK;
    if (!json_is_array(items)) {
        af_errf(err, errlen, "%s:%d: %s", af_buf_str(&path), items ? 1 : je.line,
                items ? "expected a JSON array" : je.text);
        rc = AF_EPARSE;
    }
    for (size_t i = 0; rc == AF_OK && i < json_array_size(items); i++)
        if (!json_is_object(json_array_get(items, i))) {
            af_errf(err, errlen, "%s: item %zu is not an object", af_buf_str(&path), i);
            rc = AF_EPARSE;
        }
    if (rc != AF_OK) {
        json_decref(items);
        af_buf_deinit(&path);
        return rc;
    }
    out->bench = af_xstrdup(bench);
    out->path = af_buf_detach(&path);
    out->items = items;
    return AF_OK;
}

void eval_dataset_deinit(struct eval_dataset *d)
{
    if (!d)
        return;
    free(d->bench);
    free(d->path);
    json_decref(d->items);
    memset(d, 0, sizeof *d);
}

size_t eval_dataset_size(const struct eval_dataset *d)
{
    return json_array_size(d->items);
}

const json_t *eval_dataset_item(const struct eval_dataset *d, size_t i)
{
    return json_array_get(d->items, i);
}

const char *eval_item_query(const json_t *item)
{
    const char *q = json_string_value(json_object_get(item, "query"));
    if (!q)
        q = json_string_value(json_object_get(item, "question"));
    return q ? q : "";
}

const json_t *eval_item_gold(const json_t *item)
{
    const json_t *g = json_object_get(item, "answer");
    return g ? g : json_null(); /* jansson's null is a static singleton */
}
