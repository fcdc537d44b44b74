/*
 * cmd_serve.c - `agentflow serve`: the flow behind an OpenAI-compatible HTTP API, with a live
 * page at / (src/serve/). Takes every engine, flow, tool, prompt and cache option of `run`
 * (batch.c parses them), opens the back-ends once (a gguf: engine is loaded once and shared
 * by every request), and serves until SIGTERM or SIGINT.
 */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/batch.h"
#include "cli/cli.h"
#include "cli/config.h"
#include "serve/serve.h"

#define CMD "agentflow serve"

static void serve_usage(FILE *f)
{
    fprintf(f, "usage: agentflow serve [options]\n"
               "\n"
               "Serves the agent flow as an OpenAI-compatible API (POST /v1/chat/completions,\n"
               "GET /v1/models), runs kept in SQLite (/v1/runs), Prometheus metrics (/metrics),\n"
               "/healthz, and a live page at / (docs/SERVE.md).\n"
               "\n");
    run_common_usage(f);
    fprintf(f, "\n"
               "server:\n"
               "  --host ADDR          address to bind (default 127.0.0.1)\n"
               "  --port N             TCP port (default 8080; 0 = any free port)\n"
               "  --api-key KEY        require 'Authorization: Bearer KEY' on every route but\n"
               "                       /healthz and the page (default: $AGENTFLOW_API_KEY)\n"
               "  --served-name NAME   the model name clients ask for (default agentflow)\n"
               "  --max-concurrent N   flows running at once (default 4)\n"
               "  --queue N            flows waiting beyond those; then 429 (default 16)\n"
               "  --max-body BYTES     largest request body (default 1048576)\n"
               "  --db FILE            SQLite file of the runs (default agentflow-runs.db)\n"
               "  --grace-s S          on SIGTERM, how long running flows may finish (default 30)\n"
               "  --trace FILE         append JSONL trace records of every flow (docs/TRACE.md)\n"
               "  --quiet              no log line per request on stderr\n"
               "\n"
               "SIGTERM or SIGINT: stop accepting, let running flows finish for --grace-s, cancel\n"
               "the rest, exit 0. Exit codes: 2 usage (a bad option, or an address and port that\n"
               "cannot be listened on), 3 back-end, 4 a bad input file or a --db that cannot be\n"
               "opened.\n");
}

enum {
    OPT_HOST = RUN_OPT_END,
    OPT_PORT,
    OPT_API_KEY,
    OPT_SERVED_NAME,
    OPT_MAX_CONCURRENT,
    OPT_QUEUE,
    OPT_MAX_BODY,
    OPT_DB,
    OPT_GRACE,
    OPT_TRACE,
    OPT_QUIET,
};

static const struct option serve_own_opts[] = {
    {"host", required_argument, 0, OPT_HOST},
    {"port", required_argument, 0, OPT_PORT},
    {"api-key", required_argument, 0, OPT_API_KEY},
    {"served-name", required_argument, 0, OPT_SERVED_NAME},
    {"max-concurrent", required_argument, 0, OPT_MAX_CONCURRENT},
    {"queue", required_argument, 0, OPT_QUEUE},
    {"max-body", required_argument, 0, OPT_MAX_BODY},
    {"db", required_argument, 0, OPT_DB},
    {"grace-s", required_argument, 0, OPT_GRACE},
    {"trace", required_argument, 0, OPT_TRACE},
    {"quiet", no_argument, 0, OPT_QUIET},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

struct cmd_serve_args {
    struct run_args common;
    struct af_serve_params sp;
    double grace_s;
    int quiet;
};

static int handle_number(int o, const char *arg, struct cmd_serve_args *a)
{
    double d;
    switch (o) {
    case OPT_PORT:
        if (run_parse_number(CMD, "port", arg, 0, 65535, &d))
            return -1;
        a->sp.port = (int)d;
        return 0;
    case OPT_MAX_CONCURRENT:
        if (run_parse_number(CMD, "max-concurrent", arg, 1, 4096, &d))
            return -1;
        a->sp.max_concurrent = (int)d;
        return 0;
    case OPT_QUEUE:
        if (run_parse_number(CMD, "queue", arg, 0, 1e6, &d))
            return -1;
        a->sp.queue = (int)d;
        return 0;
    case OPT_MAX_BODY:
        if (run_parse_number(CMD, "max-body", arg, 1, 1 << 30, &d))
            return -1;
        a->sp.max_body = (size_t)d;
        return 0;
    default: /* OPT_GRACE */
        if (run_parse_number(CMD, "grace-s", arg, 0, 86400, &d))
            return -1;
        a->grace_s = d;
        return 0;
    }
}

static int handle_own(struct cmd_serve_args *a, int o, const char *arg)
{
    switch (o) {
    case OPT_HOST:
        a->sp.host = arg;
        return 0;
    case OPT_API_KEY:
        a->sp.api_key = arg;
        return 0;
    case OPT_SERVED_NAME:
        a->sp.served_name = arg;
        return 0;
    case OPT_DB:
        a->sp.db_path = arg;
        return 0;
    case OPT_TRACE:
        json_object_set_new(a->common.flags, "trace", json_string(arg));
        return 0;
    case OPT_QUIET:
        a->quiet = 1;
        return 0;
    case OPT_PORT:
    case OPT_MAX_CONCURRENT:
    case OPT_QUEUE:
    case OPT_MAX_BODY:
    case OPT_GRACE:
        return handle_number(o, arg, a);
    case 'h':
        serve_usage(stdout);
        return 1;
    default:
        serve_usage(stderr);
        return -1;
    }
}

static int parse_args(int argc, char **argv, struct cmd_serve_args *a)
{
    struct option *opts = run_opts_merge(serve_own_opts);
    int o, rc = 0;
    optind = 1;
    while (rc == 0 && (o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int h = run_args_handle(&a->common, CMD, o, optarg);
        rc = h < 0 ? -1 : h > 0 ? 0 : handle_own(a, o, optarg);
    }
    free(opts);
    if (rc == 0 && optind != argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", CMD, argv[optind]);
        rc = -1;
    }
    if (rc == 0 && !a->sp.api_key)
        a->sp.api_key = getenv("AGENTFLOW_API_KEY");
    return rc;
}

/* One line per request; stderr is unbuffered and each line one call, so lines from many
 * connection threads do not mix. */
static void log_request(void *user, const char *method, const char *path, unsigned status,
                        double ms)
{
    (void)user;
    fprintf(stderr, "%s: %s %.200s %u %.3f s\n", CMD, method, path, status, ms / 1000.0);
}

/* Serves until SIGTERM or SIGINT, which every thread leaves to this one (the mask is set
 * before any thread starts, and threads inherit it). */
static int serve_until_signal(struct cmd_serve_args *a, const struct af_flow_params *flow)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    a->sp.flow = flow;
    if (!a->quiet)
        a->sp.on_request = log_request;
    struct af_serve *s = NULL;
    char err[1024];
    int rc = af_serve_start(&a->sp, &s, err, sizeof err);
    if (rc != AF_OK) {
        fprintf(stderr, "%s: %s\n", CMD, err);
        return rc == AF_EINVAL ? CLI_EUSAGE : CLI_EINPUT;
    }
    fprintf(stderr,
            "%s: listening on http://%s:%d (model '%s', %d at once, queue %d, runs in %s)\n", CMD,
            a->sp.host, af_serve_port(s), a->sp.served_name, a->sp.max_concurrent, a->sp.queue,
            a->sp.db_path);
    int sig = 0;
    while (sigwait(&set, &sig) != 0)
        ;
    fprintf(stderr, "%s: %s: stopping (up to %g s for running flows)\n", CMD,
            sig == SIGTERM ? "SIGTERM" : "SIGINT", a->grace_s);
    af_serve_shutdown(s, a->grace_s);
    struct af_serve_stats st;
    af_serve_stats(s, &st);
    fprintf(stderr, "%s: stopped: %llu answered, %llu failed, %llu cancelled, %llu refused\n", CMD,
            (unsigned long long)st.completed, (unsigned long long)st.failed,
            (unsigned long long)st.cancelled, (unsigned long long)st.rejected);
    af_serve_free(s);
    return CLI_OK;
}

int cmd_serve(int argc, char **argv)
{
    struct cmd_serve_args a;
    memset(&a, 0, sizeof a);
    run_args_init(&a.common);
    a.sp = af_serve_default_params();
    a.sp.db_path = "agentflow-runs.db";
    a.grace_s = 30;
    struct run_config cfg;
    config_init(&cfg);
    struct run_ctx rc;
    memset(&rc, 0, sizeof rc);
    char err[1024];
    int code = parse_args(argc, argv, &a);
    if (code != 0) {
        code = code > 0 ? CLI_OK : CLI_EUSAGE;
        goto out;
    }
    if ((code = run_build_config(&a.common, CMD, &cfg)) != CLI_OK)
        goto out;
    if ((code = run_ctx_open(&rc, &cfg)) != CLI_OK)
        goto out;
    if (a.common.cache_path && !a.common.no_cache &&
        run_ctx_enable_cache(&rc, a.common.cache_path, a.common.cache_all ? AF_LLM_CACHE_ALL : 0,
                             err, sizeof err) != AF_OK) {
        fprintf(stderr, "%s: --cache: %s\n", CMD, err);
        code = CLI_EINPUT;
        goto out;
    }
    code = serve_until_signal(&a, &rc.params);
out:
    run_ctx_close(&rc);
    config_deinit(&cfg);
    run_args_deinit(&a.common);
    return code;
}
