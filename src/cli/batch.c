/*
 * batch.c - the options shared by `run` and `eval run`, run context setup (with the optional
 * response cache) and the resumable, concurrent batch runner.
 *
 * Resume rule: an id is done when OUT holds a complete line for it. A kill can leave at most
 * a partial last line (each line is one write); it is cut off before appending again.
 */
#include "cli/batch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/fileio.h"
#include "core/jsonx.h"
#include "core/xalloc.h"
#include "eval/resume.h"

#define BATCH_MAX_BYTES (1ull << 32)
#define CONFIG_MAX_BYTES (4u << 20)

enum {
    OPT_URL = RUN_OPT_BASE,
    OPT_MODEL,
    OPT_SLOT_URL, /* + slot */
    OPT_SLOT_MODEL = OPT_SLOT_URL + AF_N_SLOTS,
    OPT_MAX_STEPS = OPT_SLOT_MODEL + AF_N_SLOTS,
    OPT_MAX_TIME,
    OPT_TOOLS,
    OPT_CONFIG,
    OPT_PROMPTS,
    OPT_RENDER,
    OPT_DETAILED,
    OPT_TOOL_OPT,
    OPT_WIKI_DB,
    OPT_CACHE,
    OPT_NO_CACHE,
    OPT_CACHE_ALL,
    OPT_MCP,
    OPT_THREADS,
    OPT_CTX,
    OPT_PREFILL_CHUNK,
    OPT_MAX_BATCH,
    OPT_DRAFT,
    OPT_KV_BUDGET,
    OPT_KV_TYPE,
    OPT_CHAT_TEMPLATE,
    OPT_LAST_SHARED
};

/* --mcp SPEC: one more line of flags["tool_options"]["mcp"]. */
static void mcp_flag(json_t *flags, const char *spec)
{
    json_t *o = json_object_get(flags, "tool_options");
    if (!o) {
        o = json_object();
        json_object_set_new(flags, "tool_options", o);
    }
    af_tool_mcp_option_append(o, spec);
}

static const struct option common_opts[] = {
    {"url", required_argument, 0, OPT_URL},
    {"model", required_argument, 0, OPT_MODEL},
    {"planner-url", required_argument, 0, OPT_SLOT_URL + AF_SLOT_PLANNER},
    {"fixed-url", required_argument, 0, OPT_SLOT_URL + AF_SLOT_FIXED},
    {"executor-url", required_argument, 0, OPT_SLOT_URL + AF_SLOT_EXECUTOR},
    {"tool-url", required_argument, 0, OPT_SLOT_URL + AF_SLOT_TOOL},
    {"planner-model", required_argument, 0, OPT_SLOT_MODEL + AF_SLOT_PLANNER},
    {"fixed-model", required_argument, 0, OPT_SLOT_MODEL + AF_SLOT_FIXED},
    {"executor-model", required_argument, 0, OPT_SLOT_MODEL + AF_SLOT_EXECUTOR},
    {"tool-model", required_argument, 0, OPT_SLOT_MODEL + AF_SLOT_TOOL},
    {"max-steps", required_argument, 0, OPT_MAX_STEPS},
    {"max-time", required_argument, 0, OPT_MAX_TIME},
    {"tools", required_argument, 0, OPT_TOOLS},
    {"config", required_argument, 0, OPT_CONFIG},
    {"prompts", required_argument, 0, OPT_PROMPTS},
    {"render", required_argument, 0, OPT_RENDER},
    {"detailed", no_argument, 0, OPT_DETAILED},
    {"tool-opt", required_argument, 0, OPT_TOOL_OPT},
    {"wiki-db", required_argument, 0, OPT_WIKI_DB},
    {"cache", required_argument, 0, OPT_CACHE},
    {"no-cache", no_argument, 0, OPT_NO_CACHE},
    {"cache-all", no_argument, 0, OPT_CACHE_ALL},
    {"mcp", required_argument, 0, OPT_MCP},
    {"threads", required_argument, 0, OPT_THREADS},
    {"ctx", required_argument, 0, OPT_CTX},
    {"prefill-chunk", required_argument, 0, OPT_PREFILL_CHUNK},
    {"draft", required_argument, 0, OPT_DRAFT},
    {"kv-mib", required_argument, 0, OPT_KV_BUDGET},
    {"kv-type", required_argument, 0, OPT_KV_TYPE},
    {"kv-budget", required_argument, 0, OPT_KV_BUDGET}, /* the older name of --kv-mib */
    {"max-batch", required_argument, 0, OPT_MAX_BATCH},
    {"chat-template", required_argument, 0, OPT_CHAT_TEMPLATE},
};

_Static_assert((int)OPT_LAST_SHARED <= (int)RUN_OPT_END, "shared option codes overflow");

void run_args_init(struct run_args *a)
{
    memset(a, 0, sizeof *a);
    a->flags = json_object();
}

void run_args_deinit(struct run_args *a)
{
    json_decref(a->flags);
    memset(a, 0, sizeof *a);
}

struct option *run_opts_merge(const struct option *extra)
{
    size_t nc = sizeof common_opts / sizeof common_opts[0], ne = 0;
    while (extra && extra[ne].name)
        ne++;
    struct option *o = af_xcalloc(nc + ne + 1, sizeof *o);
    memcpy(o, common_opts, sizeof common_opts);
    if (ne)
        memcpy(o + nc, extra, ne * sizeof *o);
    return o;
}

int run_parse_number(const char *cmd, const char *opt, const char *s, double lo, double hi,
                     double *out)
{
    char *end;
    double d = strtod(s, &end);
    if (!*s || *end || d < lo || d > hi) {
        fprintf(stderr, "%s: --%s '%s' must be a number from %g to %g\n", cmd, opt, s, lo, hi);
        return -1;
    }
    *out = d;
    return 0;
}

static int handle_string_opt(struct run_args *a, int o, const char *arg)
{
    const char *key = o == OPT_URL       ? "url"
                      : o == OPT_MODEL   ? "model"
                      : o == OPT_TOOLS   ? "tools"
                      : o == OPT_PROMPTS ? "prompts"
                      : o == OPT_RENDER  ? "render"
                                         : NULL;
    if (!key)
        return 0;
    json_object_set_new(a->flags, key, json_string(arg));
    return 1;
}

int run_args_handle(struct run_args *a, const char *cmd, int o, const char *arg)
{
    double d;
    if (o >= OPT_SLOT_URL && o < OPT_SLOT_URL + AF_N_SLOTS) {
        a->slot_url[o - OPT_SLOT_URL] = arg;
        return 1;
    }
    if (o >= OPT_SLOT_MODEL && o < OPT_SLOT_MODEL + AF_N_SLOTS) {
        a->slot_model[o - OPT_SLOT_MODEL] = arg;
        return 1;
    }
    if (handle_string_opt(a, o, arg))
        return 1;
    switch (o) {
    case OPT_MAX_STEPS:
        if (run_parse_number(cmd, "max-steps", arg, 1, 1000, &d))
            return -1;
        json_object_set_new(a->flags, "max_steps", json_integer((json_int_t)d));
        return 1;
    case OPT_MAX_TIME:
        if (run_parse_number(cmd, "max-time", arg, 0.001, 1e9, &d))
            return -1;
        json_object_set_new(a->flags, "max_time", json_real(d));
        return 1;
    case OPT_DETAILED:
        json_object_set_new(a->flags, "detailed", json_true());
        return 1;
    case OPT_CONFIG:
        a->config_file = arg;
        return 1;
    case OPT_CACHE:
        a->cache_path = arg;
        return 1;
    case OPT_NO_CACHE:
        a->no_cache = 1;
        return 1;
    case OPT_CACHE_ALL:
        a->cache_all = 1;
        return 1;
    case OPT_THREADS:
    case OPT_CTX:
        if (run_parse_number(cmd, o == OPT_THREADS ? "threads" : "ctx", arg, 0,
                             o == OPT_THREADS ? 1024 : (1 << 24), &d))
            return -1;
        json_object_set_new(a->flags, o == OPT_THREADS ? "threads" : "ctx",
                            json_integer((json_int_t)d));
        return 1;
    case OPT_CHAT_TEMPLATE:
        json_object_set_new(a->flags, "chat_template", json_string(arg));
        return 1;
    case OPT_PREFILL_CHUNK:
    case OPT_MAX_BATCH:
        if (run_parse_number(cmd, o == OPT_MAX_BATCH ? "max-batch" : "prefill-chunk", arg, 1,
                             o == OPT_MAX_BATCH ? 256 : (1 << 20), &d))
            return -1;
        json_object_set_new(a->flags, o == OPT_MAX_BATCH ? "max_batch" : "prefill_chunk",
                            json_integer((json_int_t)d));
        return 1;
    case OPT_KV_BUDGET:
        if (run_parse_number(cmd, "kv-mib", arg, 0, 1 << 24, &d))
            return -1;
        json_object_set_new(a->flags, "kv_mib", json_integer((json_int_t)d));
        return 1;
    case OPT_KV_TYPE:
        if (strcmp(arg, "f32") && strcmp(arg, "f16")) {
            fprintf(stderr, "agentflow %s: --kv-type: expected f32 or f16, got '%s'\n", cmd, arg);
            return -1;
        }
        json_object_set_new(a->flags, "kv_type", json_string(arg));
        return 1;
    case OPT_DRAFT:
        if (run_parse_number(cmd, "draft", arg, 0, 32, &d))
            return -1;
        json_object_set_new(a->flags, "draft", json_integer((json_int_t)d));
        return 1;
    case OPT_MCP:
        mcp_flag(a->flags, arg);
        return 1;
    case OPT_TOOL_OPT:
    case OPT_WIKI_DB: {
        char kv[4096], err[512];
        snprintf(kv, sizeof kv, "%s%s", o == OPT_WIKI_DB ? "wiki_db=" : "", arg);
        if (config_tool_opt_flag(a->flags, kv, err, sizeof err)) {
            fprintf(stderr, "%s: %s\n", cmd, err);
            return -1;
        }
        return 1;
    }
    default:
        return 0;
    }
}

void run_common_usage(FILE *f)
{
    fprintf(f, "engines (URL: http(s)://HOST/v1, gguf:MODEL.gguf, scripted:FILE.json):\n"
               "  --url URL, --model NAME          set every slot\n"
               "  --planner-url URL, --planner-model NAME\n"
               "  --fixed-url URL, --fixed-model NAME        query analysis, verifier, generator\n"
               "  --executor-url URL, --executor-model NAME\n"
               "  --tool-url URL, --tool-model NAME          LLM calls made by tools\n"
               "  --threads N, --ctx N, --chat-template chatml|llama3   the gguf: engine\n"
               "  --prefill-chunk N  prompt tokens per step between the batched decodes (256)\n"
               "  --max-batch N      generations decoded together (64)\n"
               "  --draft N          prompt-lookup decoding: guess up to N tokens per step from\n"
               "                     the prompt and check them in the same step (0 = off)\n"
               "  --kv-mib N         the paged KV cache's size in MiB: running generations and\n"
               "                     cached prefixes together (0 = 1024); when it is full the\n"
               "                     newest generation is paused and resumed later, same text\n"
               "                     (--kv-budget MB: the same)\n"
               "  --kv-type f32|f16  the KV cache's element type: f16 holds twice the tokens and\n"
               "                     halves what attention reads; logits move by ~1e-3 (f32)\n"
               "\n"
               "flow:\n"
               "  --max-steps N      turns (default 10)\n"
               "  --max-time S       seconds for the turns, a call in flight included; the\n"
               "                     answer then gets at most min(S, 60) more (default 300)\n"
               "  --tools LIST       comma-separated tool names (default: all built-ins)\n"
               "  --prompts DIR      override prompt templates with DIR/NAME.txt\n"
               "  --render STYLE     json (default) or python: the tool list, cards and memory\n"
               "                     in prompts as Python literals, as the released AgentFlow\n"
               "                     writes them (for its planner checkpoint)\n"
               "  --tool-opt K=V     a tool option (repeatable; see docs/CONFIG.md)\n"
               "  --wiki-db DB       Wikipedia index (= --tool-opt wiki_db=DB)\n"
               "  --mcp \"CMD ARGS\"   start an MCP server over stdio and offer its tools\n"
               "                     (repeatable; = a line of --tool-opt mcp=...)\n"
               "  --detailed         also write a detailed final answer\n"
               "  --config FILE      JSON configuration (same keys; see docs/CONFIG.md)\n"
               "\n"
               "response cache (SQLite; greedy calls, temperature 0, only):\n"
               "  --cache FILE       answer repeated LLM requests from FILE\n"
               "  --no-cache         no cache\n"
               "  --cache-all        cache sampled calls (temperature > 0) too: a repeat then\n"
               "                     replays the first sample\n");
}

static int load_config_file(const char *path, const char *cmd, struct run_config *cfg)
{
    char err[1024], *text = NULL;
    if (af_file_read(path, CONFIG_MAX_BYTES, &text, NULL, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", cmd, err);
        return CLI_EINPUT;
    }
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    free(text);
    if (!j) {
        fprintf(stderr, "%s: %s: line %d column %d: %s\n", cmd, path, je.line, je.column, je.text);
        return CLI_EINPUT;
    }
    int rc = config_apply_json(cfg, j, path, err, sizeof err);
    json_decref(j);
    if (rc) {
        fprintf(stderr, "%s: %s\n", cmd, err);
        return CLI_EINPUT;
    }
    return CLI_OK;
}

int run_build_config(const struct run_args *a, const char *cmd, struct run_config *cfg)
{
    char err[1024];
    int code;
    if (a->config_file && (code = load_config_file(a->config_file, cmd, cfg)) != CLI_OK)
        return code;
    if (config_apply_env(cfg, err, sizeof err) ||
        config_apply_json(cfg, a->flags, "flags", err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", cmd, err);
        return CLI_EUSAGE;
    }
    for (int i = 0; i < AF_N_SLOTS; i++) {
        if (a->slot_url[i])
            config_set_url(cfg, i, a->slot_url[i]);
        if (a->slot_model[i])
            config_set_model(cfg, i, a->slot_model[i]);
        if (a->default_url && (!cfg->slots[i].url || !cfg->slots[i].url[0]))
            config_set_url(cfg, i, a->default_url);
    }
    return run_apply_embedded(cfg, cmd, 0);
}

int run_ctx_open(struct run_ctx *rc, const struct run_config *cfg)
{
    char err[1024];
    memset(rc, 0, sizeof *rc);
    rc->tools = af_tool_registry_new();
    if (af_tool_registry_add_builtins(rc->tools, cfg->tools, cfg->tool_options, err, sizeof err)) {
        fprintf(stderr, "agentflow run: --tools: %s\n", err);
        return CLI_EUSAGE;
    }
    if (af_tool_registry_add_mcp(rc->tools, cfg->tool_options, err, sizeof err)) {
        fprintf(stderr, "agentflow run: --mcp: %s\n", err);
        return CLI_EBACKEND; /* a server that does not start or answer is a back-end failure */
    }
    if (af_prompts_load(cfg->prompts, &rc->prompts, err, sizeof err)) {
        fprintf(stderr, "agentflow run: --prompts: %s\n", err);
        return CLI_EINPUT;
    }
    const int brc = backends_open(cfg, &rc->be, err, sizeof err);
    if (brc) { /* a bad setting is usage; a model or script file that fails is bad input */
        fprintf(stderr, "agentflow run: %s\n", err);
        return brc == AF_EINVAL ? CLI_EUSAGE : CLI_EINPUT;
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

int run_ctx_enable_cache(struct run_ctx *rc, const char *path, int flags, char *err, size_t errlen)
{
    if (af_llm_cache_open(path, &rc->cache, err, errlen) != AF_OK)
        return AF_EIO;
    for (int i = 0; i < AF_N_SLOTS; i++) {
        struct af_llm *inner = rc->params.slots[i].llm, *wrap = NULL;
        if (!inner)
            continue;
        for (int k = 0; k < i && !wrap; k++)
            if (rc->be.llm[k] == inner)
                wrap = rc->params.slots[k].llm;
        if (!wrap) {
            wrap = af_llm_cache_wrap(rc->cache, inner, flags);
            rc->cached[rc->n_cached++] = wrap;
        }
        rc->params.slots[i].llm = wrap;
    }
    return AF_OK;
}

int run_trace_check(struct run_ctx *rc)
{
    char err[600];
    size_t n_lost = 0;
    if (af_trace_status(rc->trace, &n_lost, err, sizeof err) == AF_OK)
        return CLI_OK;
    fprintf(stderr, "agentflow run: --trace %s (%zu record%s lost)\n", err, n_lost,
            n_lost == 1 ? "" : "s");
    return CLI_EINPUT;
}

void run_ctx_close(struct run_ctx *rc)
{
    for (size_t i = 0; i < rc->n_cached; i++)
        af_llm_free(rc->cached[i]);
    af_llm_cache_close(rc->cache);
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
    size_t n_items, n_done, n_failed;
    struct af_linelog *out;
    pthread_mutex_t mu;
    int quiet;
};

static void on_done_line(void *user, json_t *obj, size_t lineno)
{
    (void)lineno;
    const char *id = af_json_get_str(obj, "id");
    if (id)
        json_object_set_new(user, id, json_true());
}

/* Reads the ids already in OUT and cuts a partial last line. */
static int load_done(const char *path, json_t *done)
{
    char err[512];
    int rc = eval_log_scan(path, on_done_line, done, err, sizeof err);
    if (rc)
        fprintf(stderr, "agentflow run: %s\n", err);
    return rc;
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

static void batch_job(void *arg, size_t i)
{
    struct batch *b = arg;
    struct item *it = &b->items[i];
    struct af_flow_result res;
    int err = af_flow_solve(&b->rc->params, it->id, it->query, &res);
    json_t *j = af_flow_result_json(&res);
    json_object_set_new(j, "id", af_json_text(it->id));
    json_object_set_new(j, "query", af_json_text(it->query));
    char *line = err == AF_OK ? json_dumps(j, JSON_COMPACT | AF_JSON_REAL_OUT) : NULL;
    int wrc = line ? af_linelog_append(b->out, line, strlen(line)) : AF_OK;
    pthread_mutex_lock(&b->mu);
    if (err != AF_OK || wrc != AF_OK)
        b->n_failed++;
    else
        b->n_done++;
    if (!b->quiet || err != AF_OK || wrc != AF_OK) {
        char *id = cli_term_text(stderr, it->id, 1);
        char *why = cli_term_text(stderr, err != AF_OK && res.errmsg ? res.errmsg : "", 1);
        fprintf(stderr, "[batch %zu/%zu] id=%s %s%s\n", b->n_done + b->n_failed, b->n_items, id,
                err != AF_OK ? "failed: "
                : wrc        ? "write failed"
                             : "done",
                why);
        free(id);
        free(why);
    }
    pthread_mutex_unlock(&b->mu);
    free(line);
    json_decref(j);
    af_flow_result_deinit(&res);
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
    eval_pool_run(concurrency > 0 ? (size_t)concurrency : 1, b.n_items, batch_job, &b);
    if (!quiet)
        fprintf(stderr, "[batch] %zu done, %zu failed, %zu already in %s\n", b.n_done, b.n_failed,
                json_object_size(done), out_path);
    if (b.n_failed)
        code = CLI_EBACKEND;
    if (run_trace_check(rc) != CLI_OK && code == CLI_OK)
        code = CLI_EINPUT;
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
