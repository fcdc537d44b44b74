/*
 * cmd_run.c - `agentflow run`: answer one query, or a batch of them (batch.c).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/batch.h"
#include "cli/cli.h"
#include "cli/config.h"
#include "core/fileio.h"
#include "core/xalloc.h"

#define CONFIG_MAX_BYTES (4u << 20)

static void run_usage(FILE *f)
{
    fprintf(f, "usage: agentflow run [options] QUERY\n"
               "       agentflow run [options] --batch IN.jsonl --out OUT.jsonl [--concurrency N]\n"
               "\n"
               "Answers QUERY with the agent flow and prints the final answer on stdout; one\n"
               "progress line per step goes to stderr.\n"
               "\n"
               "engines (URL: http(s)://HOST/v1, scripted:FILE.json):\n"
               "  --url URL, --model NAME          set every slot\n"
               "  --planner-url URL, --planner-model NAME\n"
               "  --fixed-url URL, --fixed-model NAME        query analysis, verifier, generator\n"
               "  --executor-url URL, --executor-model NAME\n"
               "  --tool-url URL, --tool-model NAME          LLM calls made by tools\n"
               "\n"
               "flow:\n"
               "  --max-steps N      turns (default 10)\n"
               "  --max-time S       seconds, checked before each turn (default 300)\n"
               "  --tools LIST       comma-separated tool names (default: all built-ins)\n"
               "  --prompts DIR      override prompt templates with DIR/NAME.txt\n"
               "  --tool-opt K=V     a tool option (repeatable; see docs/CONFIG.md)\n"
               "  --wiki-db DB       Wikipedia index (= --tool-opt wiki_db=DB)\n"
               "  --detailed         also write a detailed final answer\n"
               "  --config FILE      JSON configuration (same keys; see docs/CONFIG.md)\n"
               "\n"
               "output:\n"
               "  --json             print one JSON object: answer, steps, memory, usage, timings\n"
               "  --trace FILE       append JSONL trace records (docs/TRACE.md)\n"
               "  --quiet            no progress lines\n"
               "\n"
               "batch:\n"
               "  --batch IN.jsonl   lines {\"id\",\"query\"}\n"
               "  --out OUT.jsonl    results, appended and fsync'd; ids already there are skipped\n"
               "  --concurrency N    flows at once (default 4)\n"
               "\n"
               "Precedence: flags, then environment (OPENAI_API_KEY, AGENTFLOW_*), then --config,\n"
               "then defaults. Exit codes: 0 ok, 2 usage, 3 back-end error, 4 bad input file.\n");
}

enum {
    OPT_URL = 256,
    OPT_MODEL,
    OPT_SLOT_URL, /* + slot */
    OPT_SLOT_MODEL = OPT_SLOT_URL + AF_N_SLOTS,
    OPT_MAX_STEPS = OPT_SLOT_MODEL + AF_N_SLOTS,
    OPT_MAX_TIME,
    OPT_TOOLS,
    OPT_CONFIG,
    OPT_PROMPTS,
    OPT_JSON,
    OPT_TRACE,
    OPT_BATCH,
    OPT_OUT,
    OPT_CONCURRENCY,
    OPT_DETAILED,
    OPT_QUIET,
    OPT_TOOL_OPT,
    OPT_WIKI_DB,
};

static const struct option run_opts[] = {
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
    {"json", no_argument, 0, OPT_JSON},
    {"trace", required_argument, 0, OPT_TRACE},
    {"batch", required_argument, 0, OPT_BATCH},
    {"out", required_argument, 0, OPT_OUT},
    {"concurrency", required_argument, 0, OPT_CONCURRENCY},
    {"detailed", no_argument, 0, OPT_DETAILED},
    {"quiet", no_argument, 0, OPT_QUIET},
    {"tool-opt", required_argument, 0, OPT_TOOL_OPT},
    {"wiki-db", required_argument, 0, OPT_WIKI_DB},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

struct run_args {
    const char *config_file;
    json_t *flags; /* flag values as config keys, applied last */
    const char *slot_url[AF_N_SLOTS], *slot_model[AF_N_SLOTS];
    int json_out, quiet, concurrency;
    const char *batch_in, *batch_out;
};

static int parse_number(const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end;
    double d = strtod(s, &end);
    if (!*s || *end || d < lo || d > hi) {
        fprintf(stderr, "agentflow run: --%s '%s' must be a number from %g to %g\n", opt, s, lo,
                hi);
        return -1;
    }
    *out = d;
    return 0;
}

static int parse_args(int argc, char **argv, struct run_args *a)
{
    double d;
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "h", run_opts, NULL)) != -1) {
        if (o >= OPT_SLOT_URL && o < OPT_SLOT_URL + AF_N_SLOTS) {
            a->slot_url[o - OPT_SLOT_URL] = optarg;
            continue;
        }
        if (o >= OPT_SLOT_MODEL && o < OPT_SLOT_MODEL + AF_N_SLOTS) {
            a->slot_model[o - OPT_SLOT_MODEL] = optarg;
            continue;
        }
        switch (o) {
        case OPT_URL:
            json_object_set_new(a->flags, "url", json_string(optarg));
            break;
        case OPT_MODEL:
            json_object_set_new(a->flags, "model", json_string(optarg));
            break;
        case OPT_MAX_STEPS:
            if (parse_number("max-steps", optarg, 1, 1000, &d))
                return -1;
            json_object_set_new(a->flags, "max_steps", json_integer((json_int_t)d));
            break;
        case OPT_MAX_TIME:
            if (parse_number("max-time", optarg, 0.001, 1e9, &d))
                return -1;
            json_object_set_new(a->flags, "max_time", json_real(d));
            break;
        case OPT_TOOLS:
        case OPT_PROMPTS:
        case OPT_TRACE:
            json_object_set_new(a->flags,
                                o == OPT_TOOLS     ? "tools"
                                : o == OPT_PROMPTS ? "prompts"
                                                   : "trace",
                                json_string(optarg));
            break;
        case OPT_DETAILED:
            json_object_set_new(a->flags, "detailed", json_true());
            break;
        case OPT_CONFIG:
            a->config_file = optarg;
            break;
        case OPT_JSON:
            a->json_out = 1;
            break;
        case OPT_QUIET:
            a->quiet = 1;
            break;
        case OPT_BATCH:
            a->batch_in = optarg;
            break;
        case OPT_OUT:
            a->batch_out = optarg;
            break;
        case OPT_CONCURRENCY:
            if (parse_number("concurrency", optarg, 1, 1024, &d))
                return -1;
            a->concurrency = (int)d;
            break;
        case OPT_TOOL_OPT:
        case OPT_WIKI_DB: {
            char kv[4096], err[512];
            snprintf(kv, sizeof kv, "%s%s", o == OPT_WIKI_DB ? "wiki_db=" : "", optarg);
            if (config_tool_opt_flag(a->flags, kv, err, sizeof err)) {
                fprintf(stderr, "agentflow run: %s\n", err);
                return -1;
            }
            break;
        }
        case 'h':
            run_usage(stdout);
            return 1;
        default:
            run_usage(stderr);
            return -1;
        }
    }
    return 0;
}

/* Layers: defaults < config file < environment < flags. */
static int build_config(const struct run_args *a, struct run_config *cfg)
{
    char err[1024];
    if (a->config_file) {
        char *text = NULL;
        if (af_file_read(a->config_file, CONFIG_MAX_BYTES, &text, NULL, err, sizeof err)) {
            fprintf(stderr, "agentflow run: %s\n", err);
            return CLI_EINPUT;
        }
        json_error_t je;
        json_t *j = json_loads(text, 0, &je);
        free(text);
        if (!j) {
            fprintf(stderr, "agentflow run: %s: line %d column %d: %s\n", a->config_file, je.line,
                    je.column, je.text);
            return CLI_EINPUT;
        }
        int rc = config_apply_json(cfg, j, a->config_file, err, sizeof err);
        json_decref(j);
        if (rc) {
            fprintf(stderr, "agentflow run: %s\n", err);
            return CLI_EINPUT;
        }
    }
    if (config_apply_env(cfg, err, sizeof err) ||
        config_apply_json(cfg, a->flags, "flags", err, sizeof err)) {
        fprintf(stderr, "agentflow run: %s\n", err);
        return CLI_EUSAGE;
    }
    for (int i = 0; i < AF_N_SLOTS; i++) {
        if (a->slot_url[i])
            config_set_url(cfg, i, a->slot_url[i]);
        if (a->slot_model[i])
            config_set_model(cfg, i, a->slot_model[i]);
    }
    return CLI_OK;
}

static void on_step(void *user, const struct af_flow_step_info *s)
{
    (void)user;
    fprintf(stderr, "[%s%sstep %d] tool=%s verdict=%s%s time=%.2fs sub-goal: %.200s\n",
            s->query_id[0] ? s->query_id : "", s->query_id[0] ? " " : "", s->step,
            s->tool[0] ? s->tool : "(none)", s->verdict, s->failed ? " (failed)" : "",
            s->step_ms / 1000.0, s->sub_goal ? s->sub_goal : "");
}

static int solve_one(struct run_ctx *rc, const struct run_config *cfg, const char *query,
                     int json_out)
{
    struct af_flow_result res;
    int err = af_flow_solve(&rc->params, NULL, query, &res);
    int code = CLI_OK;
    if (json_out) {
        json_t *j = af_flow_result_json(&res);
        json_object_set_new(j, "config", config_to_json(cfg));
        char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        printf("%s\n", s ? s : "{}");
        free(s);
        json_decref(j);
    } else if (err == AF_OK) {
        printf("%s\n", res.answer ? res.answer : "");
    }
    if (err != AF_OK) {
        fprintf(stderr, "agentflow run: %s\n", res.errmsg ? res.errmsg : af_strerror(err));
        code = cli_exit_for(err);
    }
    af_flow_result_deinit(&res);
    return code;
}

int cmd_run(int argc, char **argv)
{
    struct run_args a;
    memset(&a, 0, sizeof a);
    a.flags = json_object();
    a.concurrency = 4;
    struct run_config cfg;
    config_init(&cfg);
    struct run_ctx rc;
    memset(&rc, 0, sizeof rc);
    int code = parse_args(argc, argv, &a);
    if (code != 0) {
        code = code > 0 ? CLI_OK : CLI_EUSAGE;
        goto out;
    }
    if (!a.batch_in && optind != argc - 1) {
        fprintf(stderr, "agentflow run: expected one QUERY argument (or --batch FILE)\n");
        code = CLI_EUSAGE;
        goto out;
    }
    if (a.batch_in && (!a.batch_out || optind != argc)) {
        fprintf(stderr, "agentflow run: --batch needs --out OUT.jsonl and no QUERY argument\n");
        code = CLI_EUSAGE;
        goto out;
    }
    if ((code = build_config(&a, &cfg)) != CLI_OK)
        goto out;
    if ((code = run_ctx_open(&rc, &cfg)) != CLI_OK)
        goto out;
    if (!a.quiet)
        rc.params.on_step = on_step;
    if (a.batch_in)
        code = batch_run(&rc, a.batch_in, a.batch_out, a.concurrency, a.quiet);
    else
        code = solve_one(&rc, &cfg, argv[optind], a.json_out);
out:
    run_ctx_close(&rc);
    config_deinit(&cfg);
    json_decref(a.flags);
    return code;
}
