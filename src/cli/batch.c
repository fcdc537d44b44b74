/*
 * batch.c - run context setup and the resumable, concurrent batch runner.
 *
 * Resume rule: an id is done when OUT holds a complete line for it. A kill can leave at most
 * a partial last line (each line is one write); it is cut off before appending again.
 */
#include "cli/batch.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/fileio.h"
#include "core/jsonx.h"
#include "core/xalloc.h"

#define BATCH_MAX_BYTES (1ull << 32)

int run_ctx_open(struct run_ctx *rc, const struct run_config *cfg)
{
    char err[1024];
    memset(rc, 0, sizeof *rc);
    rc->tools = af_tool_registry_new();
    if (af_tool_registry_add_builtins(rc->tools, cfg->tools, cfg->tool_options, err, sizeof err)) {
        fprintf(stderr, "agentflow run: --tools: %s\n", err);
        return CLI_EUSAGE;
    }
    if (af_prompts_load(cfg->prompts, &rc->prompts, err, sizeof err)) {
        fprintf(stderr, "agentflow run: --prompts: %s\n", err);
        return CLI_EINPUT;
    }
    if (backends_open(cfg, &rc->be, err, sizeof err)) {
        fprintf(stderr, "agentflow run: %s\n", err);
        return CLI_EUSAGE;
    }
    if (cfg->trace && af_trace_open(cfg->trace, &rc->trace, err, sizeof err)) {
        fprintf(stderr, "agentflow run: --trace: %s\n", err);
        return CLI_EINPUT;
    }
    config_flow_params(cfg, &rc->be, &rc->params);
    rc->params.tools = rc->tools;
    rc->params.prompts = rc->prompts;
    rc->params.trace = rc->trace;
    return CLI_OK;
}

void run_ctx_close(struct run_ctx *rc)
{
    backends_close(&rc->be);
    af_tool_registry_free(rc->tools);
    af_prompts_free(rc->prompts);
    af_trace_close(rc->trace);
    memset(rc, 0, sizeof *rc);
}

struct item {
    char *id;
    char *query;
};

struct batch {
    struct run_ctx *rc;
    struct item *items;
    size_t n_items, next, n_done, n_failed;
    struct af_linelog *out;
    pthread_mutex_t mu;
    int quiet;
};

/* Reads the ids already in OUT and cuts a partial last line. */
static int load_done(const char *path, json_t *done)
{
    char *data = NULL, err[512];
    size_t len = 0;
    int rc = af_file_read(path, BATCH_MAX_BYTES, &data, &len, err, sizeof err);
    if (rc == AF_ENOTFOUND)
        return AF_OK;
    if (rc) {
        fprintf(stderr, "agentflow run: %s\n", err);
        return rc;
    }
    size_t keep = 0;
    for (size_t start = 0; start < len;) {
        char *nl = memchr(data + start, '\n', len - start);
        if (!nl)
            break;
        *nl = '\0';
        json_t *j = json_loads(data + start, 0, NULL);
        const char *id = af_json_get_str(j, "id");
        if (id)
            json_object_set_new(done, id, json_true());
        json_decref(j);
        start = (size_t)(nl - data) + 1;
        keep = start;
    }
    free(data);
    if (keep < len && truncate(path, (off_t)keep) != 0) {
        fprintf(stderr, "agentflow run: cannot cut the partial last line of '%s': %s\n", path,
                strerror(errno));
        return AF_EIO;
    }
    return AF_OK;
}

/* Parses IN into items not yet done; a bad line fails naming its number. */
static int load_items(const char *path, json_t *done, struct batch *b)
{
    char *data = NULL, err[512];
    size_t len = 0;
    if (af_file_read(path, BATCH_MAX_BYTES, &data, &len, err, sizeof err)) {
        fprintf(stderr, "agentflow run: --batch: %s\n", err);
        return -1;
    }
    size_t cap = 64, lineno = 0;
    b->items = af_xcalloc(cap, sizeof *b->items);
    json_t *seen = json_object();
    int rc = 0;
    for (char *line = data; line && *line && rc == 0;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        lineno++;
        if (line[strspn(line, " \t\r")] != '\0') {
            json_error_t je;
            json_t *j = json_loads(line, 0, &je);
            const char *id = af_json_get_str(j, "id"), *q = af_json_get_str(j, "query");
            json_t *idv = json_object_get(j, "id");
            char idbuf[32];
            if (!id && json_is_integer(idv)) {
                snprintf(idbuf, sizeof idbuf, "%lld", (long long)json_integer_value(idv));
                id = idbuf;
            }
            if (!j || !id || !q) {
                fprintf(stderr, "agentflow run: %s:%zu: %s\n", path, lineno,
                        !j ? je.text : "each line needs \"id\" and \"query\" strings");
                rc = -1;
            } else if (json_object_get(seen, id)) {
                fprintf(stderr, "agentflow run: %s:%zu: duplicate id '%s' skipped\n", path, lineno,
                        id);
            } else {
                json_object_set_new(seen, id, json_true());
                if (!json_object_get(done, id)) {
                    if (b->n_items == cap)
                        b->items = af_xrealloc(b->items, (cap *= 2) * sizeof *b->items);
                    b->items[b->n_items].id = af_xstrdup(id);
                    b->items[b->n_items].query = af_xstrdup(q);
                    b->n_items++;
                }
            }
            json_decref(j);
        }
        line = nl ? nl + 1 : NULL;
    }
    json_decref(seen);
    free(data);
    return rc;
}

static void *worker(void *arg)
{
    struct batch *b = arg;
    for (;;) {
        pthread_mutex_lock(&b->mu);
        size_t i = b->next < b->n_items ? b->next++ : (size_t)-1;
        pthread_mutex_unlock(&b->mu);
        if (i == (size_t)-1)
            return NULL;
        struct item *it = &b->items[i];
        struct af_flow_result res;
        int err = af_flow_solve(&b->rc->params, it->id, it->query, &res);
        json_t *j = af_flow_result_json(&res);
        json_object_set_new(j, "id", af_json_text(it->id));
        json_object_set_new(j, "query", af_json_text(it->query));
        char *line = err == AF_OK ? json_dumps(j, JSON_COMPACT) : NULL;
        int wrc = line ? af_linelog_append(b->out, line, strlen(line)) : AF_OK;
        pthread_mutex_lock(&b->mu);
        if (err != AF_OK || wrc != AF_OK)
            b->n_failed++;
        else
            b->n_done++;
        if (!b->quiet || err != AF_OK || wrc != AF_OK)
            fprintf(stderr, "[batch %zu/%zu] id=%s %s%s\n", b->n_done + b->n_failed, b->n_items,
                    it->id,
                    err != AF_OK ? "failed: "
                    : wrc        ? "write failed"
                                 : "done",
                    err != AF_OK && res.errmsg ? res.errmsg : "");
        pthread_mutex_unlock(&b->mu);
        free(line);
        json_decref(j);
        af_flow_result_deinit(&res);
    }
}

int batch_run(struct run_ctx *rc, const char *in_path, const char *out_path, int concurrency,
              int quiet)
{
    struct batch b;
    memset(&b, 0, sizeof b);
    b.rc = rc;
    b.quiet = quiet;
    pthread_mutex_init(&b.mu, NULL);
    json_t *done = json_object();
    int code = CLI_OK;
    char err[512];
    if (load_done(out_path, done) != AF_OK || load_items(in_path, done, &b) != 0) {
        code = CLI_EINPUT;
        goto out;
    }
    if (af_linelog_open(out_path, &b.out, err, sizeof err)) {
        fprintf(stderr, "agentflow run: --out: %s\n", err);
        code = CLI_EINPUT;
        goto out;
    }
    size_t nt = (size_t)concurrency < b.n_items ? (size_t)concurrency : b.n_items;
    pthread_t *th = af_xcalloc(nt ? nt : 1, sizeof *th);
    size_t started = 0;
    for (; started < nt; started++)
        if (pthread_create(&th[started], NULL, worker, &b) != 0)
            break;
    if (started == 0 && nt > 0)
        worker(&b);
    for (size_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    free(th);
    if (!quiet)
        fprintf(stderr, "[batch] %zu done, %zu failed, %zu already in %s\n", b.n_done, b.n_failed,
                json_object_size(done), out_path);
    if (b.n_failed)
        code = CLI_EBACKEND;
out:
    af_linelog_close(b.out);
    for (size_t i = 0; i < b.n_items; i++) {
        free(b.items[i].id);
        free(b.items[i].query);
    }
    free(b.items);
    json_decref(done);
    pthread_mutex_destroy(&b.mu);
    return code;
}
