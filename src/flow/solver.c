/*
 * solver.c - one solve: query analysis, up to max_steps planner/executor/verifier turns within
 * max_time, then the solution generator. Memory, usage and timings are local to the call.
 *
 * Module replies that do not parse get max_parse_retries more tries with a short correction;
 * after that the step is recorded as failed and the loop goes on. A back-end error (after the
 * back-end's own retries) ends the solve with out->err set; nothing else does.
 */
#include "agentflow/flow.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/jsonx.h"
#include "core/utf8.h"
#include "core/xalloc.h"
#include "flow/brief.h"
#include "flow/executor.h"
#include "flow/memory.h"
#include "flow/parse.h"
#include "flow/pycall.h"
#include "flow/pyrepr.h"
#include "flow/prompts.h"
#include "flow/solve_int.h"

/* Longest time the final answer may take once max_time is up, in seconds. */
#define SOLVE_ANSWER_GRACE_S 60.0

const char *af_slot_name(enum af_slot s)
{
    static const char *names[AF_N_SLOTS] = {"planner", "fixed", "executor", "tool"};
    return (unsigned)s < AF_N_SLOTS ? names[s] : "?";
}

struct af_flow_params af_flow_default_params(void)
{
    struct af_flow_params p;
    memset(&p, 0, sizeof p);
    p.max_steps = 10;
    p.max_time_s = 300;
    p.max_parse_retries = 1;
    p.max_result_chars = 100000;
    p.tool_timeout_s = 120;
    for (int i = 0; i < AF_N_SLOTS; i++)
        p.slots[i].sampling = af_llm_default_sampling();
    p.slots[AF_SLOT_PLANNER].sampling.temperature = 0.7;
    p.slots[AF_SLOT_PLANNER].sampling.top_p = 0.99;
    p.slots[AF_SLOT_PLANNER].sampling.frequency_penalty = 1.2;
    return p;
}

void af_flow_result_deinit(struct af_flow_result *r)
{
    if (!r)
        return;
    free(r->answer);
    free(r->direct_output);
    free(r->final_output);
    free(r->query_analysis);
    free(r->errmsg);
    json_decref(r->memory);
    json_decref(r->usage);
    json_decref(r->timings);
    memset(r, 0, sizeof *r);
}

static void init_ctx(struct solve_ctx *c, const struct af_flow_params *p, const char *qid,
                     const char *query, struct af_flow_result *out)
{
    memset(c, 0, sizeof *c);
    c->p = p;
    c->qid = qid ? qid : "";
    c->query = query;
    c->out = out;
    c->t0 = af_clock_ms();
    memory_init(&c->mem);
    c->out->usage = json_object();
    c->out->timings = json_object();
    c->step_timings = json_array();
    json_t *names = json_array(), *cards = json_object();
    size_t n = p->tools ? af_tool_registry_count(p->tools) : 0;
    for (size_t i = 0; i < n; i++) {
        const struct af_tool_card *card = af_tool_card(af_tool_registry_at(p->tools, i));
        json_array_append_new(names, json_string(card->name));
        json_object_set_new(cards, card->name, af_tool_card_json(card));
    }
    if (p->render_python) { /* the released AgentFlow's str() of a list and a dict */
        c->available_tools = pyrepr(names);
        c->toolbox_metadata = pyrepr(cards);
    } else {
        c->available_tools = json_dumps(names, JSON_COMPACT);
        c->toolbox_metadata = json_dumps(cards, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    }
    c->tools_brief = brief_tools(p->tools);
    json_decref(names);
    json_decref(cards);
}

static void finish_ctx(struct solve_ctx *c)
{
    struct af_flow_result *out = c->out;
    out->memory = c->mem.actions;
    c->mem.actions = NULL;
    memory_deinit(&c->mem);
    out->steps = c->step;
    json_object_set_new(out->timings, "total_ms", json_real(af_clock_ms() - c->t0));
    json_object_set_new(out->timings, "steps", c->step_timings);
    free(c->available_tools);
    free(c->toolbox_metadata);
    free(c->tools_brief);
}

/* Every module's template may use the solve's shared parts; the compiled-in templates begin
 * with them in this order, identical byte for byte, so that the engine's prefix cache serves
 * each call's longest part from the calls before it (docs/ARCHITECTURE.md). mem and mem_brief
 * may be NULL (no memory yet). The brief forms serve the compact templates (flow/brief.h).
 * Fills v[0..SHARED_VARS) and returns SHARED_VARS. */
#define SHARED_VARS 7
static size_t shared_vars(const struct solve_ctx *c, const char *mem, const char *mem_brief,
                          struct prompt_var *v)
{
    v[0] = (struct prompt_var){"query", c->query};
    v[1] = (struct prompt_var){"available_tools", c->available_tools};
    v[2] = (struct prompt_var){"toolbox_metadata", c->toolbox_metadata};
    v[3] = (struct prompt_var){"query_analysis", c->out->query_analysis};
    v[4] = (struct prompt_var){"memory", mem};
    v[5] = (struct prompt_var){"tools_brief", c->tools_brief};
    v[6] = (struct prompt_var){"memory_brief", mem_brief ? mem_brief : "none yet"};
    return SHARED_VARS;
}

/* Query analysis: the reference's "Step 0". */
static int analyze_query(struct solve_ctx *c)
{
    struct prompt_var v[SHARED_VARS];
    const size_t n = shared_vars(c, NULL, NULL, v);
    char *prompt = prompt_render(c->p->prompts, "query_analysis", v, n);
    double t0 = af_clock_ms();
    char *text = NULL;
    int rc = solve_chat(c, AF_SLOT_FIXED, "query_analysis", prompt, NULL, NULL, &text);
    free(prompt);
    json_object_set_new(c->out->timings, "query_analysis_ms", json_real(af_clock_ms() - t0));
    if (rc)
        return rc;
    c->out->query_analysis = text;
    return AF_OK;
}

/* Appends `; LABEL: "TEXT"` to why, with TEXT's first 120 bytes on one line, control bytes as
 * spaces and invalid UTF-8 as '?': the reply that could not be used, for the step's reason. */
static void append_excerpt(char *why, size_t whylen, const char *label, const char *text)
{
    char ex[128];
    size_t n = 0, i = 0, len = strlen(text);
    while (i < len && n < 120) {
        const unsigned char *u = (const unsigned char *)text + i;
        size_t k = *u < 0x80 ? 1 : af_utf8_seq(u, len - i);
        if (k == 0) {
            ex[n++] = '?';
            i++;
        } else if (k == 1) {
            ex[n++] = *u < 0x20 || *u == 0x7f ? ' ' : (char)*u;
            i++;
        } else if (n + k <= 120) {
            memcpy(ex + n, u, k);
            n += k;
            i += k;
        } else {
            break;
        }
    }
    ex[n] = '\0';
    size_t used = strlen(why);
    if (used + 1 < whylen)
        snprintf(why + used, whylen - used, "; %s: \"%s%s\"", label, ex, i < len ? "..." : "");
}

/* Planner call with one correction round per allowed retry. */
static int plan_step(struct solve_ctx *c, struct next_step *ns, char *why, size_t whylen)
{
    char *mem = memory_render(&c->mem, c->p->render_python), *memb = brief_memory(c->mem.actions);
    char step[16], maxs[16], left[16];
    snprintf(step, sizeof step, "%d", c->step);
    snprintf(maxs, sizeof maxs, "%d", c->p->max_steps);
    snprintf(left, sizeof left, "%d", c->p->max_steps - c->step + 1);
    struct prompt_var v[SHARED_VARS + 3];
    size_t n = shared_vars(c, mem, memb, v);
    v[n++] = (struct prompt_var){"step", step};
    v[n++] = (struct prompt_var){"max_steps", maxs};
    v[n++] = (struct prompt_var){"remaining_steps", left};
    char *prompt = prompt_render(c->p->prompts, "next_step", v, n);
    free(mem);
    free(memb);
    char *text = NULL, *prev = NULL, *retry = NULL;
    int rc = AF_EPARSE;
    for (int attempt = 0; attempt <= c->p->max_parse_retries; attempt++) {
        rc = solve_chat(c, AF_SLOT_PLANNER, "planner", prompt, prev, retry, &text);
        if (rc)
            break;
        rc = parse_next_step(text, ns, why, whylen);
        free(prev);
        prev = text;
        text = NULL;
        if (rc == AF_OK)
            break;
        free(retry);
        struct prompt_var rv[] = {{"error", why}, {"available_tools", c->available_tools}};
        retry = prompt_render(c->p->prompts, "retry_planner", rv, 2);
    }
    if (rc == AF_EPARSE && prev)
        append_excerpt(why, whylen, "reply", prev);
    free(prompt);
    free(prev);
    free(retry);
    return rc;
}

/* Executor call: writes the command for the chosen tool, with a correction round when no
 * command can be parsed. On success *command is set (owned). */
static int write_command(struct solve_ctx *c, const struct next_step *ns, struct af_tool *tool,
                         char **command, char *why, size_t whylen)
{
    const struct af_tool_card *card = af_tool_card(tool);
    json_t *cj = af_tool_card_json(card);
    char *card_text =
        c->p->render_python ? pyrepr(cj) : json_dumps(cj, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(cj);
    char *mem = memory_render(&c->mem, c->p->render_python), *memb = brief_memory(c->mem.actions);
    char *card_brief = brief_card(card);
    struct prompt_var v[SHARED_VARS + 5];
    size_t n = shared_vars(c, mem, memb, v);
    v[n++] = (struct prompt_var){"tool_brief", card_brief};
    v[n++] = (struct prompt_var){"sub_goal", ns->sub_goal};
    v[n++] = (struct prompt_var){"tool_name", card->name};
    v[n++] = (struct prompt_var){"tool_card", card_text};
    v[n++] = (struct prompt_var){"context", ns->context};
    char *prompt = prompt_render(c->p->prompts, "tool_command", v, n);
    free(card_text);
    free(card_brief);
    free(mem);
    free(memb);
    char *text = NULL, *prev = NULL, *retry = NULL;
    int rc = AF_EPARSE;
    *command = NULL;
    for (int attempt = 0; attempt <= c->p->max_parse_retries; attempt++) {
        rc = solve_chat(c, AF_SLOT_EXECUTOR, "executor", prompt, prev, retry, &text);
        if (rc)
            break;
        free(prev);
        prev = text;
        text = NULL;
        *command = af_pycall_extract_command(prev);
        rc = check_command(*command, why, whylen);
        if (rc == AF_OK)
            break;
        free(*command);
        *command = NULL;
        free(retry);
        struct prompt_var rv[] = {{"error", why}};
        retry = prompt_render(c->p->prompts, "retry_executor", rv, 1);
    }
    free(prompt);
    free(prev);
    free(retry);
    return rc;
}

static int verify(struct solve_ctx *c, int *stop)
{
    char *mem = memory_render(&c->mem, c->p->render_python), *memb = brief_memory(c->mem.actions);
    struct prompt_var v[SHARED_VARS];
    const size_t n = shared_vars(c, mem, memb, v);
    char *prompt = prompt_render(c->p->prompts, "verifier", v, n);
    free(mem);
    free(memb);
    char *text = NULL;
    int rc = solve_chat(c, AF_SLOT_FIXED, "verifier", prompt, NULL, NULL, &text);
    free(prompt);
    if (rc)
        return rc;
    int explicit_label;
    *stop = parse_verdict(text, &explicit_label);
    free(text);
    return AF_OK;
}

static int generate(struct solve_ctx *c)
{
    double t0 = af_clock_ms();
    char *mem = memory_render(&c->mem, c->p->render_python), *memb = brief_memory(c->mem.actions);
    struct prompt_var v[SHARED_VARS];
    const size_t nv = shared_vars(c, mem, memb, v);
    int rc = AF_OK;
    if (c->p->detailed_answer) {
        char *prompt = prompt_render(c->p->prompts, "final_output", v, nv);
        rc =
            solve_chat(c, AF_SLOT_FIXED, "final_output", prompt, NULL, NULL, &c->out->final_output);
        free(prompt);
    }
    if (rc == AF_OK) {
        char *prompt = prompt_render(c->p->prompts, "direct_output", v, nv);
        rc = solve_chat(c, AF_SLOT_FIXED, "direct_output", prompt, NULL, NULL,
                        &c->out->direct_output);
        free(prompt);
    }
    free(mem);
    free(memb);
    json_object_set_new(c->out->timings, "generator_ms", json_real(af_clock_ms() - t0));
    if (rc == AF_OK)
        c->out->answer = parse_final_answer(c->out->direct_output);
    return rc;
}

static json_t *text_result(const char *fmt, ...) AF_PRINTF(1, 2);
static json_t *text_result(const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return af_json_text(buf);
}

/* The first error among a step's tool calls ({args, result, error, ...} records), into
 * reason; the result's own "error" text when it has one (a tool's message). */
static void calls_reason(const json_t *calls, char *reason, size_t len)
{
    size_t i;
    const json_t *call;
    json_array_foreach(calls, i, call)
    {
        const json_t *e = json_object_get(call, "error");
        if (!json_is_string(e))
            continue;
        const char *detail =
            json_string_value(json_object_get(json_object_get(call, "result"), "error"));
        const char *res = json_string_value(json_object_get(call, "result"));
        snprintf(reason, len, "call %zu: %s", i + 1,
                 detail ? detail
                 : res  ? res
                        : json_string_value(e));
        return;
    }
}

/* Executor and tool for a parsed plan. Sets *command (owned) and returns the memory result;
 * when the step fails, says why in reason. */
static json_t *act(struct solve_ctx *c, const struct next_step *ns, char **command, int *failed,
                   int *rc, double *tool_ms, char *reason, size_t reasonlen)
{
    struct af_tool *tool = c->p->tools ? af_tool_registry_find(c->p->tools, ns->tool_name) : NULL;
    char why[1024];
    *command = NULL;
    if (!tool) {
        *failed = 1;
        *command = af_xstrdup("No command was generated: the tool is not available.");
        snprintf(reason, reasonlen, "the planner chose tool '%s', which is not available",
                 ns->tool_name);
        return text_result("Tool '%s' was not found. Available tools: %s", ns->tool_name,
                           c->available_tools);
    }
    *rc = write_command(c, ns, tool, command, why, sizeof why);
    if (*rc == AF_EPARSE) {
        *rc = AF_OK;
        *failed = 1;
        *command = af_xstrdup("");
        snprintf(reason, reasonlen, "the executor wrote no usable command: %s", why);
        return text_result("Error: the executor wrote no usable command for %s: %s",
                           af_tool_card(tool)->name, why);
    }
    if (*rc)
        return NULL;
    char module[160];
    struct af_tool_ctx tctx = solve_tool_ctx(c, module, sizeof module, af_tool_card(tool)->name);
    double t0 = af_clock_ms();
    struct exec_outcome o;
    exec_run(tool, *command, &tctx, c->p->max_result_chars, &o);
    c->tool_module = NULL;
    *tool_ms = af_clock_ms() - t0;
    solve_trace_tool(c, af_tool_card(tool)->name, *command, o.calls);
    *failed = o.n_failed > 0 || o.parse_failed;
    if (o.parse_failed)
        snprintf(reason, reasonlen, "%s", json_string_value(o.result));
    else if (o.n_failed > 0)
        calls_reason(o.calls, reason, reasonlen);
    json_t *res = o.result;
    o.result = NULL;
    exec_outcome_deinit(&o);
    return res;
}

static void report_step(struct solve_ctx *c, const struct next_step *ns, const char *command,
                        int stop, int failed, const char *reason, double t0, double tool_ms)
{
    double now = af_clock_ms();
    json_array_append_new(c->step_timings, json_pack("{s:i,s:f,s:f}", "step", c->step, "step_ms",
                                                     now - t0, "tool_ms", tool_ms));
    if (!c->p->on_step)
        return;
    struct af_flow_step_info info = {
        .query_id = c->qid,
        .step = c->step,
        .tool = ns->tool_name,
        .sub_goal = ns->sub_goal,
        .verdict = stop ? "STOP" : "CONTINUE",
        .elapsed_ms = now - c->t0,
        .step_ms = now - t0,
        .failed = failed,
        .reason = failed ? reason : NULL,
        .command = command ? command : "",
        .result = json_object_get(
            json_array_get(c->mem.actions, json_array_size(c->mem.actions) - 1), "result")};
    c->p->on_step(c->p->user, &info);
}

/* One turn: plan, act, remember, verify. Returns a back-end error code or 0. */
static int run_step(struct solve_ctx *c, int *stop)
{
    double t0 = af_clock_ms(), tool_ms = 0;
    struct next_step ns;
    char why[512], reason[1280] = "";
    char *command = NULL;
    json_t *result = NULL;
    int failed = 0;
    memset(&ns, 0, sizeof ns);
    int rc = plan_step(c, &ns, why, sizeof why);
    if (rc == AF_EPARSE) {
        rc = AF_OK;
        failed = 1;
        memset(&ns, 0, sizeof ns);
        ns.tool_name = af_xstrdup("");
        ns.sub_goal = af_xstrdup("");
        command = af_xstrdup("");
        snprintf(reason, sizeof reason, "the planner's reply could not be parsed: %s", why);
        result = text_result("Error: %s", reason);
    } else if (rc == AF_OK) {
        result = act(c, &ns, &command, &failed, &rc, &tool_ms, reason, sizeof reason);
    }
    if (rc == AF_OK) {
        memory_add(&c->mem, c->step, ns.tool_name, ns.sub_goal, command, result, failed);
        result = NULL;
        rc = verify(c, stop);
        if (rc == AF_OK)
            report_step(c, &ns, command, *stop, failed, reason, t0, tool_ms);
    }
    json_decref(result);
    free(command);
    next_step_deinit(&ns);
    return rc;
}

/* Sums usage[*][part] and usage[*][whole] over a solve's modules that report `part` (the
 * back-ends that say), as {whole, part, ratio: part / whole}, or null when none does. */
static json_t *usage_ratio_json(const json_t *usage, const char *whole, const char *part,
                                const char *ratio)
{
    json_int_t n_whole = 0, n_part = 0;
    int any = 0;
    const char *mod;
    json_t *u;
    json_object_foreach((json_t *)(uintptr_t)usage, mod, u)
    {
        const json_t *p = json_object_get(u, part);
        if (!json_is_integer(p))
            continue;
        any = 1;
        n_part += json_integer_value(p);
        n_whole += json_integer_value(json_object_get(u, whole));
    }
    if (!any)
        return json_null();
    return json_pack("{s:I,s:I,s:f}", whole, n_whole, part, n_part, ratio,
                     n_whole > 0 ? (double)n_part / (double)n_whole : 0.0);
}

json_t *af_flow_result_json(const struct af_flow_result *r)
{
    json_t *j = json_object();
    json_object_set_new(j, "answer", r->answer ? af_json_text(r->answer) : json_null());
    json_object_set_new(j, "direct_output",
                        r->direct_output ? af_json_text(r->direct_output) : json_null());
    if (r->final_output)
        json_object_set_new(j, "final_output", af_json_text(r->final_output));
    json_object_set_new(j, "query_analysis",
                        r->query_analysis ? af_json_text(r->query_analysis) : json_null());
    json_object_set_new(j, "steps", json_integer(r->steps));
    json_object_set(j, "memory", r->memory ? r->memory : json_null());
    json_object_set(j, "usage", r->usage ? r->usage : json_null());
    json_object_set_new(j, "prefix_reuse",
                        usage_ratio_json(r->usage, "prompt_tokens", "cached_tokens", "fraction"));
    json_object_set_new(j, "drafts",
                        usage_ratio_json(r->usage, "draft_tokens", "draft_accepted", "acceptance"));
    json_object_set(j, "timings", r->timings ? r->timings : json_null());
    json_object_set_new(j, "error", r->err ? af_json_text(r->errmsg) : json_null());
    return j;
}

int af_flow_solve(const struct af_flow_params *p, const char *query_id, const char *query,
                  struct af_flow_result *out)
{
    memset(out, 0, sizeof *out);
    struct solve_ctx c;
    init_ctx(&c, p, query_id, query ? query : "", out);
    /* max_time bounds the turns, calls in flight included; the final answer then gets at most
     * min(max_time, SOLVE_ANSWER_GRACE_S) more, so the whole solve ends by the sum. */
    const double max_ms = p->max_time_s * 1000.0;
    c.deadline_ms = c.t0 + max_ms;
    int rc = analyze_query(&c);
    while (rc == AF_OK && !c.time_up && c.step < p->max_steps && af_clock_ms() < c.deadline_ms) {
        c.step++;
        int stop = 0;
        rc = run_step(&c, &stop);
        if (stop)
            break;
    }
    if (c.time_up || af_clock_ms() >= c.deadline_ms) {
        json_object_set_new(out->timings, "max_time_reached", json_true());
        rc = out->err; /* a call cut off by the deadline is not a failure of the solve */
    }
    if (rc == AF_OK) {
        c.in_generator = 1;
        c.deadline_ms +=
            max_ms < SOLVE_ANSWER_GRACE_S * 1000.0 ? max_ms : SOLVE_ANSWER_GRACE_S * 1000.0;
        rc = generate(&c);
    }
    finish_ctx(&c);
    solve_trace_final(&c);
    return out->err;
}
