/*
 * python_coder.c - Python_Code_Generator_Tool: asks its LLM for a Python block that solves the
 * query, extracts the first ```python block, and runs it in the sandbox (sandbox.h). With a
 * `code` argument it runs that code directly, with no LLM.
 *
 * Every call tries bubblewrap afresh (SANDBOX_AUTO): the rlimits fallback runs only where
 * bubblewrap is proven unusable, never because the host was busy, and is announced once per
 * tool on stderr (the one place a tool prints: an issue asked for it) and in every result's
 * `sandbox` field. AGENTFLOW_SANDBOX=rlimits forces the fallback; AGENTFLOW_SANDBOX=bubblewrap
 * forbids it.
 */
#include "agentflow/tools.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/jsonx.h"
#include "core/xalloc.h"
#include "tools/sandbox.h"

static const struct af_tool_card card = {
    .name = "Python_Code_Generator_Tool",
    .description = "Writes a short Python program for a precise computational question and runs "
                   "it in an isolated sandbox, returning what the program printed. Suited to "
                   "arithmetic, counting, algebra (sympy) and numeric work (numpy).",
    .version = "1.0.0",
    .n_params = 2,
    .params = {{.name = "query",
                .type = AF_PARAM_STR,
                .required = 0,
                .default_json = "null",
                .description = "The computation to perform, with every number it needs."},
               {.name = "code",
                .type = AF_PARAM_STR,
                .required = 0,
                .default_json = "null",
                .description = "Python code to run as is, instead of generating it."}},
    .output_type = "dict - printed_output, error, exit_status, timed_out, code, sandbox "
                   "(duration_ms too, in the trace only)",
    .limitations = "No network, no files outside a private scratch folder, 10 seconds and "
                   "limited memory per run. Only the standard library, numpy and sympy.",
    .best_practices = "Ask for one well-defined computation and have the program print the "
                      "result with a label.",
    .n_demos = 2,
    .demo_commands = {"execution = tool.execute(query=\"Sum of all primes below 1000\")",
                      "execution = tool.execute(code=\"print(sum(range(1, 101)))\")"},
    .demo_descriptions = {"Generate and run code for a computation.", "Run given code."},
    .requires_llm = 1,
};

static const char *CODER_PROMPT =
    "Write a self-contained Python 3 program that answers the query below. Work step by step "
    "in the code, and print the final result with a short descriptive label. You may use the "
    "standard library, numpy and sympy; there is no network and no input. Reply with the "
    "program in a single ```python code block.\n\nQuery:\n";

struct coder {
    pthread_mutex_t mu; /* guards announced */
    int announced;      /* the fallback notice was printed */
    enum sandbox_mode mode;
    struct sandbox_params params;
};

/* Prints the fallback notice the first time this tool runs code without namespaces. */
static void announce_fallback(struct coder *c, const struct sandbox_result *r)
{
    if (strncmp(r->mode, "rlimits", 7) != 0)
        return;
    pthread_mutex_lock(&c->mu);
    if (!c->announced)
        fprintf(stderr,
                "agentflow: %s%s; Python runs with rlimits, its own uid and process group only "
                "(network and host files are not isolated)\n",
                r->fallback[0] ? "bubblewrap cannot be used here: "
                               : "AGENTFLOW_SANDBOX=rlimits is set",
                r->fallback);
    c->announced = 1;
    pthread_mutex_unlock(&c->mu);
}

/* The first ```python block (the reference takes the first one), else the first ``` block. */
static char *first_block(const char *text)
{
    const char *s = strstr(text, "```python");
    size_t skip = 9;
    if (!s) {
        s = strstr(text, "```");
        skip = 3;
    }
    if (!s)
        return NULL;
    s += skip;
    s += strcspn(s, "\n");
    const char *e = strstr(s, "```");
    return e ? af_xstrndup(s, (size_t)(e - s)) : NULL;
}

static char *generate(const struct af_tool_ctx *ctx, const char *query, char *err, size_t errlen)
{
    if (!ctx || !ctx->llm) {
        snprintf(err, errlen, "no LLM engine to write code (pass code=... to run code directly)");
        return NULL;
    }
    size_t n = strlen(CODER_PROMPT) + strlen(query) + 1;
    char *prompt = af_xmalloc(n);
    snprintf(prompt, n, "%s%s", CODER_PROMPT, query);
    struct af_msg msg = {"user", prompt};
    struct af_llm_request req = {.msgs = &msg, .n_msgs = 1, .model = ctx->model};
    req.sampling = ctx->sampling ? *ctx->sampling : af_llm_default_sampling();
    struct af_llm_reply rep;
    af_llm_reply_init(&rep);
    char *code = NULL;
    if (af_tool_ctx_chat(ctx, &req, &rep) != AF_OK)
        snprintf(err, errlen, "LLM call failed: %s", rep.errmsg ? rep.errmsg : "?");
    else if (!(code = first_block(rep.text ? rep.text : "")))
        snprintf(err, errlen, "the LLM reply has no ```python code block");
    af_llm_reply_deinit(&rep);
    free(prompt);
    return code;
}

static json_t *result_json(const struct sandbox_result *r, const char *code)
{
    json_t *j = json_object();
    json_object_set_new(j, "printed_output", af_json_text(r->out));
    char why[96] = "";
    if (r->timed_out)
        snprintf(why, sizeof why, "timed out; the process tree was killed");
    else if (r->term_signal)
        snprintf(why, sizeof why, "killed by signal %d (%s)", r->term_signal,
                 r->term_signal == SIGXCPU ? "CPU time limit" : strsignal(r->term_signal));
    int has_err = r->err && r->err[0];
    if (has_err && why[0]) {
        size_t n = strlen(r->err) + strlen(why) + 2;
        char *both = af_xmalloc(n);
        snprintf(both, n, "%s\n%s", r->err, why);
        json_object_set_new(j, "error", af_json_text(both));
        free(both);
    } else {
        json_object_set_new(j, "error",
                            has_err || why[0] ? af_json_text(has_err ? r->err : why) : json_null());
    }
    json_object_set_new(j, "exit_status", json_integer(r->exit_status));
    json_object_set_new(j, "timed_out", json_boolean(r->timed_out));
    json_object_set_new(j, "duration_ms", json_real(r->duration_ms));
    json_object_set_new(j, "code", af_json_text(code));
    json_object_set_new(j, "sandbox", json_string(r->mode));
    json_object_set_new(j, "limits", json_string(r->limits));
    return j;
}

static int coder_call(void *self, const json_t *args, const struct af_tool_ctx *ctx,
                      json_t **result)
{
    struct coder *c = self;
    const char *code = json_string_value(json_object_get(args, "code"));
    const char *query = json_string_value(json_object_get(args, "query"));
    char err[1024];
    char *owned = NULL;
    if (!code && !query) {
        *result = json_pack("{s:s}", "error", "give either query=... or code=...");
        return AF_EINVAL;
    }
    /* The sandbox takes C strings: a NUL byte would silently cut what follows it. */
    const char *arg_name = code ? "code" : "query";
    const json_t *arg_json = json_object_get(args, arg_name);
    size_t arg_len = json_string_length(arg_json);
    if (strlen(json_string_value(arg_json)) != arg_len) {
        snprintf(err, sizeof err,
                 "%s holds a NUL byte at offset %zu (of %zu bytes); it cannot be passed to "
                 "Python, and nothing was run",
                 arg_name, strlen(json_string_value(arg_json)), arg_len);
        *result = json_pack("{s:o}", "error", af_json_text(err));
        return AF_EINVAL;
    }
    if (!code && !(code = owned = generate(ctx, query, err, sizeof err))) {
        *result = json_pack("{s:o}", "error", af_json_text(err));
        return AF_ETOOL;
    }
    struct sandbox_result r;
    int rc = sandbox_run_python(code, &c->params, c->mode, &r, err, sizeof err);
    if (rc == AF_OK) {
        announce_fallback(c, &r);
        *result = result_json(&r, code);
    } else
        *result = json_pack("{s:o,s:o}", "error", af_json_text(err), "code", af_json_text(code));
    sandbox_result_deinit(&r);
    free(owned);
    return rc == AF_OK ? AF_OK : AF_ETOOL;
}

static void coder_free(void *p)
{
    struct coder *c = p;
    pthread_mutex_destroy(&c->mu);
    free(c);
}

struct af_tool *af_tool_python_coder_new(const json_t *opts)
{
    struct coder *c = af_xcalloc(1, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    c->params = sandbox_default_params();
    /* A loaded machine may need longer than the default 10 s; a malformed value keeps it. */
    const char *t = af_tool_option(opts, "python_timeout_s", "AGENTFLOW_PYTHON_TIMEOUT_S");
    char *end = NULL;
    double secs = t ? strtod(t, &end) : 0;
    if (t && end != t && !*end && secs > 0 && secs <= 3600)
        c->params.timeout_s = secs;
    else if (t)
        fprintf(stderr,
                "agentflow: python_timeout_s '%s' is not a number of seconds in (0, 3600]; "
                "keeping %g\n",
                t, c->params.timeout_s);
    const char *v = getenv("AGENTFLOW_SANDBOX");
    c->mode = !v                             ? SANDBOX_AUTO
              : strcmp(v, "rlimits") == 0    ? SANDBOX_RLIMITS
              : strcmp(v, "bubblewrap") == 0 ? SANDBOX_BWRAP
                                             : SANDBOX_AUTO;
    return af_tool_new(&card, coder_call, c, coder_free);
}
