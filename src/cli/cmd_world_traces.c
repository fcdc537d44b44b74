/*
 * cmd_world_traces.c - `agentflow world traces`: runs the real flow, with the real tools, on
 * a split of the world's questions with the scripted expert in every slot, and writes each
 * module call as a chat example for `train sft`.
 *
 * The examples go to FILE (every module, each line tagged with "module") and to one file per
 * module beside it (FILE without .jsonl, then .planner.jsonl, ...). Each file is written under
 * a temporary name and renamed when the run is complete, so a killed run leaves no partial
 * data set behind.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agentflow/flow.h"
#include "agentflow/score.h"
#include "agentflow/world.h"
#include "cli/batch.h"
#include "cli/cli.h"
#include "core/buf.h"
#include "core/fileio.h"
#include "core/xalloc.h"

#define CMD "agentflow world traces"

static const char *const modules[] = {"query_analysis", "planner",       "executor",
                                      "verifier",       "direct_output", NULL};
#define N_OUT 6 /* the five modules and the file with all of them */
_Static_assert(sizeof modules / sizeof modules[0] == N_OUT, "one output per module, plus all");

struct tr_args {
    const char *world, *split, *out, *bench, *prompts, *fact;
    double noise;
    unsigned long long seed;
    long limit;
    int concurrency, max_steps;
};

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: " CMD " --world DIR --out FILE [--split train|val|test] [--noise P]\n"
        "       [--seed S] [--bench LIST] [--fact NAME] [--limit N] [--concurrency N]\n"
        "       [--prompts DIR|compact] [--max-steps N]\n"
        "\n"
        "Runs the flow on the split's questions (default train) of the world that `agentflow\n"
        "world build` wrote in DIR, with a scripted expert answering every module and the\n"
        "real tools (Wikipedia_RAG_Search_Tool on DIR/wiki.db, the sandboxed Python tool, and\n"
        "the generalist). Every module call becomes a chat example\n"
        "{\"messages\": [system, user, assistant], \"module\", \"pid\", \"bench\", \"correct\"}\n"
        "in FILE, and in FILE's per-module siblings (traces.planner.jsonl, ...), for\n"
        "`agentflow train sft`. A summary line (solved share per family) goes to stderr.\n"
        "\n"
        "  --noise P        share of imperfect traces: a wrong tool, a redundant step, an early\n"
        "                   STOP or a repeated sub-goal (default 0: every trace follows the\n"
        "                   solution and must reach the gold answer)\n"
        "  --seed S         which traces are imperfect (default 0)\n"
        "  --bench LIST     world-lookup,world-multihop,world-calc,world-24 (default all)\n"
        "  --fact NAME      only the questions whose solution reads the fact NAME (occupation,\n"
        "                   founder, capital, ...: the \"fact\" of a solution step)\n"
        "  --limit N        the first N questions of each benchmark (after --fact)\n"
        "  --concurrency N  solves at once (default 2)\n"
        "  --prompts DIR    the prompt templates the model will be trained with\n"
        "A solve in which a tool call timed out or could not run (a loaded machine) is run\n"
        "again, up to 3 times; a trace without noise that keeps such a fault has failed.\n"
        "Exit codes: 0 ok, 2 usage, 3 a trace without noise missed its gold answer or a\n"
        "solve failed, 4 a missing or malformed world.\n");
}

struct job {
    const struct tr_args *a;
    struct run_ctx *rc;
    json_t *items; /* every question to run */
    size_t next;
    pthread_mutex_t mu;
    /* Per question, then per module with index n_modules = all: the examples are joined in
     * question order at the end, so the files do not depend on which solve finished first
     * (`make model` must rebuild the same bytes). */
    struct af_buf (*out)[N_OUT];
    size_t n_solved, n_correct, n_failed;
    json_t *per_family; /* family -> [n, correct] */
    char first_miss[512];
};

struct collect {
    json_t *records;
    char tool_fault[200]; /* the first tool call that failed for want of time or a sandbox */
};

/* A Python run that timed out, or a tool call that did not run (the sandbox could not be set
 * up): on a loaded machine these come and go, and a trace holding one would differ from a
 * rerun's. A program's own error (a traceback) is not one: it is the same every time. */
static void note_tool_fault(struct collect *c, const json_t *r)
{
    const json_t *res = json_object_get(r, "result");
    const char *e = json_string_value(json_object_get(r, "error"));
    int timed_out = json_is_true(json_object_get(res, "timed_out"));
    if (c->tool_fault[0] || (!e && !timed_out))
        return;
    const char *detail = json_string_value(json_object_get(res, "error"));
    snprintf(c->tool_fault, sizeof c->tool_fault, "%s: %s",
             json_string_value(json_object_get(r, "tool"))
                 ? json_string_value(json_object_get(r, "tool"))
                 : "a tool",
             detail ? detail
             : e    ? e
                    : "timed out");
}

static void on_record(void *user, const json_t *r)
{
    struct collect *c = user;
    const char *type = json_string_value(json_object_get(r, "type"));
    if (type && !strcmp(type, "llm") && json_is_string(json_object_get(r, "response")))
        json_array_append_new(c->records, json_deep_copy(r));
    else if (type && !strcmp(type, "tool"))
        note_tool_fault(c, r);
}

/* Solves one question, again (up to TOOL_TRIES in all) while a tool call fails for a passing
 * reason: the expert's replies depend only on the question, so a clean retry writes the same
 * bytes as an undisturbed first run would (`make model` rebuilds the same data set). */
#define TOOL_TRIES 3
static int solve_item(struct job *j, const json_t *item, struct collect *c,
                      struct af_flow_result *res)
{
    const char *pid = json_string_value(json_object_get(item, "pid"));
    for (int attempt = 1;; attempt++) {
        c->records = json_array();
        c->tool_fault[0] = '\0';
        struct af_flow_params fp = j->rc->params;
        fp.trace = af_trace_new_fn(on_record, c);
        fp.on_step = NULL;
        int rc = af_flow_solve(&fp, pid, json_string_value(json_object_get(item, "query")), res);
        af_trace_close(fp.trace);
        if (!c->tool_fault[0] || attempt == TOOL_TRIES) {
            if (c->tool_fault[0])
                fprintf(stderr, CMD ": %s: a tool call failed in all %d tries (%s)%s\n", pid,
                        TOOL_TRIES, c->tool_fault,
                        j->a->noise == 0 ? "" : "; the noisy trace keeps it");
            return rc;
        }
        fprintf(stderr, CMD ": %s: %s; solving it again\n", pid, c->tool_fault);
        json_decref(c->records);
        af_flow_result_deinit(res);
    }
}

static int module_index(const char *m)
{
    for (int i = 0; modules[i]; i++)
        if (!strcmp(modules[i], m))
            return i;
    return -1;
}

static void emit(struct af_buf *out, const json_t *item, const json_t *records, int correct)
{
    size_t n_mod = sizeof modules / sizeof modules[0] - 1, i;
    const json_t *r;
    json_array_foreach(records, i, r)
    {
        const char *m = json_string_value(json_object_get(r, "module"));
        int mi = m ? module_index(m) : -1;
        if (mi < 0)
            continue;
        json_t *msgs = json_deep_copy(json_object_get(r, "messages"));
        /* A retry conversation keeps its turns; the last assistant turn is the reply. */
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "assistant", "content",
                                              json_object_get(r, "response")));
        json_t *ex = json_pack("{s:o,s:s,s:O,s:O,s:b}", "messages", msgs, "module", m, "pid",
                               json_object_get(item, "pid"), "bench",
                               json_object_get(item, "bench"), "correct", correct);
        char *line = json_dumps(ex, JSON_COMPACT);
        json_decref(ex);
        (void)af_buf_printf(&out[mi], "%s\n", line);
        (void)af_buf_printf(&out[n_mod], "%s\n", line);
        free(line);
    }
}

static void *worker(void *p)
{
    struct job *j = p;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        size_t k = j->next++;
        pthread_mutex_unlock(&j->mu);
        if (k >= json_array_size(j->items))
            return NULL;
        const json_t *item = json_array_get(j->items, k);
        struct collect c;
        struct af_flow_result res;
        const char *pid = json_string_value(json_object_get(item, "pid"));
        int rc = solve_item(j, item, &c, &res);
        /* A clean trace is one whose tools all ran: a kept fault would teach a reply to it. */
        if (rc == AF_OK && c.tool_fault[0] && j->a->noise == 0) {
            rc = AF_ETOOL;
            free(res.errmsg);
            res.errmsg = af_xstrdup(c.tool_fault);
        }
        int correct = 0;
        char err[256];
        struct af_score sc;
        const char *bench = json_string_value(json_object_get(item, "bench"));
        if (rc == AF_OK && af_score_item(bench, item, res.answer, &sc, err, sizeof err) == AF_OK) {
            correct = sc.correct;
            af_score_deinit(&sc);
        }
        pthread_mutex_lock(&j->mu);
        j->n_solved++;
        j->n_correct += (size_t)correct;
        j->n_failed += rc != AF_OK;
        if (!correct && !j->first_miss[0])
            snprintf(j->first_miss, sizeof j->first_miss, "%s: answered '%.80s'%s%.200s", pid,
                     res.answer ? res.answer : "", rc != AF_OK ? ", failed: " : "",
                     rc != AF_OK && res.errmsg ? res.errmsg : "");
        const char *fam = json_string_value(json_object_get(item, "family"));
        json_t *fc = json_object_get(j->per_family, fam ? fam : "?");
        if (!fc) {
            fc = json_pack("[i,i]", 0, 0);
            json_object_set_new(j->per_family, fam ? fam : "?", fc);
        }
        json_array_set_new(fc, 0, json_integer(json_integer_value(json_array_get(fc, 0)) + 1));
        json_array_set_new(fc, 1,
                           json_integer(json_integer_value(json_array_get(fc, 1)) + correct));
        pthread_mutex_unlock(&j->mu);
        if (rc == AF_OK)
            emit(j->out[k], item, c.records, correct);
        json_decref(c.records);
        af_flow_result_deinit(&res);
    }
}

/* Whether a step of the question's solution reads the fact `fact`. */
static int reads_fact(json_t *item, const char *fact)
{
    size_t i;
    json_t *step;
    json_array_foreach(json_object_get(item, "solution"), i, step)
    {
        const char *f = json_string_value(json_object_get(step, "fact"));
        if (f && !strcmp(f, fact))
            return 1;
    }
    return 0;
}

static int load_split(const struct tr_args *a, json_t *items)
{
    const char *const *benches = af_world_benchmarks();
    for (const char *const *b = benches; *b; b++) {
        if (a->bench) {
            /* A comma list: match whole names only. */
            const char *p = strstr(a->bench, *b);
            size_t n = strlen(*b);
            if (!p || (p > a->bench && p[-1] != ',') || (p[n] && p[n] != ','))
                continue;
        }
        char path[4096], err[512];
        snprintf(path, sizeof path, "%s/benchmarks/%s/%s.jsonl", a->world, *b, a->split);
        char *data = NULL;
        if (af_file_read(path, 256u << 20, &data, NULL, err, sizeof err) != AF_OK) {
            fprintf(stderr, CMD ": %s\n", err);
            return CLI_EINPUT;
        }
        long n = 0, line = 0;
        for (char *p = data, *nl; p && *p && (a->limit <= 0 || n < a->limit);
             p = nl ? nl + 1 : NULL) {
            nl = strchr(p, '\n');
            if (nl)
                *nl = '\0';
            line++;
            if (!*p)
                continue;
            json_t *it = json_loads(p, 0, NULL);
            if (!json_is_string(json_object_get(it, "query")) ||
                !json_is_string(json_object_get(it, "bench"))) {
                fprintf(stderr, CMD ": %s:%ld: not a world question\n", path, line);
                json_decref(it);
                free(data);
                return CLI_EINPUT;
            }
            if (a->fact && !reads_fact(it, a->fact)) {
                json_decref(it);
                continue;
            }
            json_array_append_new(items, it);
            n++;
        }
        free(data);
    }
    if (json_array_size(items) == 0) {
        fprintf(stderr, CMD ": no questions selected (--bench %s, --fact %s)\n",
                a->bench ? a->bench : "all", a->fact ? a->fact : "any");
        return CLI_EUSAGE;
    }
    return CLI_OK;
}

static int write_outputs(const struct tr_args *a, struct job *j)
{
    size_t n_mod = sizeof modules / sizeof modules[0] - 1;
    char stem[4096], path[4200], err[512];
    size_t len = strlen(a->out);
    size_t cut = len > 6 && !strcmp(a->out + len - 6, ".jsonl") ? len - 6 : len;
    snprintf(stem, sizeof stem, "%.*s", (int)cut, a->out);
    for (size_t m = 0; m <= n_mod; m++) {
        if (m < n_mod)
            snprintf(path, sizeof path, "%s.%s.jsonl", stem, modules[m]);
        else
            snprintf(path, sizeof path, "%s", a->out);
        struct af_buf b;
        af_buf_init(&b, AF_BUF_NOLIMIT);
        for (size_t k = 0; k < json_array_size(j->items); k++)
            (void)af_buf_append(&b, j->out[k][m].data ? j->out[k][m].data : "", j->out[k][m].len);
        int wr = af_file_write_atomic(path, b.data ? b.data : "", b.len, err, sizeof err);
        af_buf_deinit(&b);
        if (wr != AF_OK) {
            fprintf(stderr, CMD ": %s\n", err);
            return CLI_EINPUT;
        }
    }
    return CLI_OK;
}

static int parse_args(int argc, char **argv, struct tr_args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            usage(stdout);
            return -1;
        }
        if (!v) {
            fprintf(stderr, CMD ": %s needs a value (or is unknown)\n", o);
            return CLI_EUSAGE;
        }
        i++;
        if (!strcmp(o, "--world"))
            a->world = v;
        else if (!strcmp(o, "--split"))
            a->split = v;
        else if (!strcmp(o, "--out"))
            a->out = v;
        else if (!strcmp(o, "--bench"))
            a->bench = v;
        else if (!strcmp(o, "--prompts"))
            a->prompts = v;
        else if (!strcmp(o, "--fact"))
            a->fact = v;
        else if (!strcmp(o, "--noise"))
            a->noise = strtod(v, &end);
        else if (!strcmp(o, "--seed"))
            a->seed = strtoull(v, &end, 10);
        else if (!strcmp(o, "--limit"))
            a->limit = strtol(v, &end, 10);
        else if (!strcmp(o, "--concurrency"))
            a->concurrency = (int)strtol(v, &end, 10);
        else if (!strcmp(o, "--max-steps"))
            a->max_steps = (int)strtol(v, &end, 10);
        else {
            fprintf(stderr, CMD ": unknown option '%s'\n", o);
            usage(stderr);
            return CLI_EUSAGE;
        }
        if (end && (*end || end == v)) {
            fprintf(stderr, CMD ": %s: '%s' is not a number\n", o, v);
            return CLI_EUSAGE;
        }
    }
    if (!a->world || !a->out) {
        fprintf(stderr, CMD ": --world and --out are required\n");
        usage(stderr);
        return CLI_EUSAGE;
    }
    /* Before the work: the outputs are written only at the end. */
    char dir[4096];
    const char *slash = strrchr(a->out, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - a->out) + 1 : 1, slash ? a->out : ".");
    if (access(dir, W_OK) != 0) {
        fprintf(stderr, CMD ": --out %s: the folder %s is missing or not writable\n", a->out, dir);
        return CLI_EINPUT;
    }
    if (strcmp(a->split, "train") && strcmp(a->split, "val") && strcmp(a->split, "test")) {
        fprintf(stderr, CMD ": --split is train, val or test (got '%s')\n", a->split);
        return CLI_EUSAGE;
    }
    if (a->noise < 0 || a->noise > 1 || a->concurrency < 1 || a->concurrency > 64 ||
        a->max_steps < 1 || a->max_steps > 30) {
        fprintf(stderr, CMD ": --noise takes 0 to 1, --concurrency 1 to 64, --max-steps 1 to "
                            "30\n");
        return CLI_EUSAGE;
    }
    return CLI_OK;
}

int cmd_world_traces(int argc, char **argv)
{
    struct tr_args a = {.split = "train", .concurrency = 2, .max_steps = 10};
    int code = parse_args(argc, argv, &a);
    if (code != CLI_OK)
        return code < 0 ? CLI_OK : code;
    char url[4200], db[4200];
    snprintf(url, sizeof url, "expert:%s?noise=%.17g&seed=%llu", a.world, a.noise, a.seed);
    snprintf(db, sizeof db, "%s/wiki.db", a.world);
    struct run_config cfg;
    config_init(&cfg);
    config_set_url(&cfg, -1, url);
    cfg.max_steps = a.max_steps;
    cfg.tools = af_xstrdup("Wikipedia_RAG_Search_Tool,Python_Code_Generator_Tool,"
                           "Generalist_Solution_Generator_Tool");
    if (a.prompts)
        cfg.prompts = af_xstrdup(a.prompts);
    json_object_set_new(cfg.tool_options, "wiki_db", json_string(db));
    struct job j = {.a = &a, .items = json_array(), .per_family = json_object()};
    pthread_mutex_init(&j.mu, NULL);
    struct run_ctx rc;
    memset(&rc, 0, sizeof rc);
    code = load_split(&a, j.items);
    size_t n_items = json_array_size(j.items);
    j.out = af_xcalloc(n_items ? n_items : 1, sizeof *j.out);
    for (size_t k = 0; k < n_items; k++)
        for (size_t m = 0; m < N_OUT; m++)
            af_buf_init(&j.out[k][m], AF_BUF_NOLIMIT);
    if (code == CLI_OK)
        code = run_ctx_open(&rc, &cfg);
    int opened = code == CLI_OK;
    if (code == CLI_OK) {
        j.rc = &rc;
        pthread_t th[64];
        for (int t = 0; t < a.concurrency; t++)
            pthread_create(&th[t], NULL, worker, &j);
        for (int t = 0; t < a.concurrency; t++)
            pthread_join(th[t], NULL);
        code = write_outputs(&a, &j);
    }
    if (code == CLI_OK) {
        char *fam = json_dumps(j.per_family, JSON_COMPACT);
        fprintf(stderr,
                "%zu traces (%s split), %zu reached the gold answer, %zu failed; per family "
                "[n, correct]: %s; written to %s\n",
                j.n_solved, a.split, j.n_correct, j.n_failed, fam, a.out);
        free(fam);
        if (j.n_failed > 0 || (a.noise == 0 && j.n_correct < j.n_solved)) {
            fprintf(stderr, CMD ": a trace missed its gold answer: %s\n", j.first_miss);
            code = CLI_EBACKEND;
        }
    }
    if (opened)
        run_ctx_close(&rc);
    for (size_t k = 0; k < n_items; k++)
        for (size_t m = 0; m < N_OUT; m++)
            af_buf_deinit(&j.out[k][m]);
    free(j.out);
    json_decref(j.items);
    json_decref(j.per_family);
    pthread_mutex_destroy(&j.mu);
    config_deinit(&cfg);
    return code;
}
