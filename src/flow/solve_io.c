/*
 * solve_io.c - the solver's LLM calls, usage accounting and trace records (docs/TRACE.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/jsonx.h"
#include "core/xalloc.h"
#include "flow/prompts.h"
#include "flow/pycall.h"
#include "flow/solve_int.h"

int solve_fail(struct solve_ctx *c, int rc, const char *module, const char *msg)
{
    if (c->out->err == AF_OK) {
        c->out->err = rc;
        struct af_buf b;
        af_buf_init(&b, 4096);
        (void)af_buf_printf(&b, "%s: %s", module, msg ? msg : af_strerror(rc));
        c->out->errmsg = af_buf_detach(&b);
    }
    return rc;
}

static json_t *base_record(struct solve_ctx *c, const char *type)
{
    char ts[40];
    af_clock_iso8601(ts, sizeof ts);
    json_t *r = json_object();
    json_object_set_new(r, "type", json_string(type));
    json_object_set_new(r, "query_id", af_json_text(c->qid));
    json_object_set_new(r, "step", json_integer(c->step));
    json_object_set_new(r, "time", json_string(ts));
    return r;
}

static json_t *sampling_json(const struct af_sampling *s)
{
    json_t *j = json_pack("{s:f,s:f,s:i,s:f}", "temperature", s->temperature, "top_p", s->top_p,
                          "max_tokens", s->max_tokens, "frequency_penalty", s->frequency_penalty);
    if (s->has_seed)
        json_object_set_new(j, "seed", json_integer(s->seed));
    if (s->ignore_eos)
        json_object_set_new(j, "ignore_eos", json_true());
    if (s->n_stop) {
        json_t *st = json_array();
        for (size_t i = 0; i < s->n_stop; i++)
            json_array_append_new(st, af_json_text(s->stop[i]));
        json_object_set_new(j, "stop", st);
    }
    return j;
}

static json_t *ids_json(const int32_t *ids, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer(ids[i]));
    return a;
}

static void record_llm(struct solve_ctx *c, const char *module, const char *slot,
                       const struct af_llm_request *req, const struct af_llm_reply *rep)
{
    json_t *u = json_object_get(c->out->usage, module);
    if (!u) {
        u = json_pack("{s:i,s:i,s:i}", "calls", 0, "prompt_tokens", 0, "completion_tokens", 0);
        json_object_set_new(c->out->usage, module, u);
    }
    af_json_add_int(u, "calls", 1);
    af_json_add_int(u, "prompt_tokens", rep->prompt_tokens > 0 ? rep->prompt_tokens : 0);
    af_json_add_int(u, "completion_tokens",
                    rep->completion_tokens > 0 ? rep->completion_tokens : 0);
    if (rep->cached_tokens >= 0) /* only back-ends that say */
        af_json_add_int(u, "cached_tokens", rep->cached_tokens);
    if (rep->draft_tokens >= 0) {
        af_json_add_int(u, "draft_tokens", rep->draft_tokens);
        af_json_add_int(u, "draft_accepted", rep->draft_accepted);
    }
    if (!c->p->trace)
        return;
    json_t *r = base_record(c, "llm");
    json_object_set_new(r, "module", json_string(module));
    json_object_set_new(r, "slot", json_string(slot));
    json_object_set_new(r, "model", af_json_text(rep->model ? rep->model : req->model));
    json_t *msgs = json_array();
    for (size_t i = 0; i < req->n_msgs; i++)
        json_array_append_new(msgs, json_pack("{s:o,s:o}", "role", af_json_text(req->msgs[i].role),
                                              "content", af_json_text(req->msgs[i].content)));
    json_object_set_new(r, "messages", msgs);
    json_object_set_new(r, "sampling", sampling_json(&req->sampling));
    json_object_set_new(r, "response", rep->text ? af_json_text(rep->text) : json_null());
    json_object_set_new(r, "finish_reason",
                        rep->finish_reason ? af_json_text(rep->finish_reason) : json_null());
    json_t *ru = json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)rep->prompt_tokens,
                           "completion_tokens", (json_int_t)rep->completion_tokens, "cached_tokens",
                           (json_int_t)rep->cached_tokens);
    if (rep->draft_tokens >= 0) {
        json_object_set_new(ru, "draft_tokens", json_integer((json_int_t)rep->draft_tokens));
        json_object_set_new(ru, "draft_accepted", json_integer((json_int_t)rep->draft_accepted));
    }
    json_object_set_new(r, "usage", ru);
    json_object_set_new(r, "latency_ms", json_real(rep->latency_ms));
    json_object_set_new(r, "attempts", json_integer(rep->n_attempts));
    json_object_set_new(r, "error", rep->err ? af_json_text(rep->errmsg) : json_null());
    if (rep->response_ids) {
        json_object_set_new(r, "prompt_ids", ids_json(rep->prompt_ids, rep->n_prompt_ids));
        json_object_set_new(r, "response_ids", ids_json(rep->response_ids, rep->n_response_ids));
        json_t *lp = json_array();
        for (size_t i = 0; rep->response_logprobs && i < rep->n_response_ids; i++)
            json_array_append_new(lp, json_real((double)rep->response_logprobs[i]));
        json_object_set_new(r, "logprobs", lp);
    }
    (void)af_trace_write(c->p->trace, r);
    json_decref(r);
}

/* Cuts text (owned, returned) to max_chars bytes at a UTF-8 boundary, marking the cut, so one
 * huge reply cannot grow every later prompt; 0 = no cap. */
static char *cap_text(char *text, size_t max_chars)
{
    size_t n = strlen(text);
    if (max_chars == 0 || n <= max_chars)
        return text;
    size_t cut = max_chars;
    while (cut > 0 && ((unsigned char)text[cut] & 0xC0) == 0x80)
        cut--;
    char note[96];
    int k = snprintf(note, sizeof note, "... [cut: %zu more bytes]", n - cut);
    text = af_xrealloc(text, cut + (size_t)k + 1);
    memcpy(text + cut, note, (size_t)k + 1);
    return text;
}

int solve_chat(struct solve_ctx *c, enum af_slot slot, const char *module, const char *prompt,
               const char *prev, const char *retry, char **text)
{
    *text = NULL;
    const struct af_flow_slot *s = &c->p->slots[slot];
    if (!s->llm)
        return solve_fail(c, AF_EINVAL, module, "no back-end is configured for this slot");
    const char *sys = af_prompts_get(c->p->prompts, "system");
    struct af_msg msgs[4] = {{"system", sys ? sys : ""},
                             {"user", prompt ? prompt : ""},
                             {"assistant", prev},
                             {"user", retry}};
    struct af_llm_request req = {.msgs = msgs,
                                 .n_msgs = prev && retry ? 4 : 2,
                                 .sampling = s->sampling,
                                 .model = s->model,
                                 .module = module,
                                 .deadline_ms = c->deadline_ms};
    struct af_llm_reply rep;
    af_llm_reply_init(&rep);
    struct af_flow_call_info ci = {.query_id = c->qid ? c->qid : "",
                                   .module = module,
                                   .step = c->step,
                                   .max_tokens = s->sampling.max_tokens,
                                   .completion_tokens = -1};
    const double t0 = af_clock_ms();
    if (c->p->on_call)
        c->p->on_call(c->p->user, &ci);
    int rc = af_llm_chat(s->llm, &req, &rep);
    if (c->p->on_call) {
        ci.done = 1;
        ci.completion_tokens = rep.completion_tokens;
        ci.call_ms = af_clock_ms() - t0;
        ci.err = rc;
        c->p->on_call(c->p->user, &ci);
    }
    record_llm(c, module, af_slot_name(slot), &req, &rep);
    if (rc == AF_OK) {
        *text = rep.text ? rep.text : af_xstrdup("");
        if (!c->in_generator) /* what later prompts carry; the answer is kept whole */
            *text = cap_text(*text, c->p->max_result_chars);
        rep.text = NULL;
    } else if (c->deadline_ms > 0 && af_clock_ms() >= c->deadline_ms && !c->in_generator) {
        c->time_up = 1; /* max_time cut the turns short: the generator still runs */
    } else if (c->in_generator && c->deadline_ms > 0 && af_clock_ms() >= c->deadline_ms) {
        char why[4096];
        snprintf(why, sizeof why, "max_time (%g s) and the answer's allowance ran out: %s",
                 c->p->max_time_s, rep.errmsg ? rep.errmsg : af_strerror(rc));
        solve_fail(c, AF_ETIMEOUT, module, why);
    } else {
        solve_fail(c, rc, module, rep.errmsg);
    }
    af_llm_reply_deinit(&rep);
    return rc;
}

static void tool_llm_cb(void *user, const struct af_llm_request *req,
                        const struct af_llm_reply *reply)
{
    struct solve_ctx *c = user;
    record_llm(c, c->tool_module ? c->tool_module : "tool", "tool", req, reply);
}

/* tool_timeout_s from now, but never past the solve's own deadline. */
static double tool_deadline(const struct solve_ctx *c)
{
    double d = af_clock_ms() + c->p->tool_timeout_s * 1000.0;
    return c->deadline_ms > 0 && c->deadline_ms < d ? c->deadline_ms : d;
}

struct af_tool_ctx solve_tool_ctx(struct solve_ctx *c, char *module_buf, size_t buflen,
                                  const char *tool_name)
{
    const struct af_flow_slot *s = &c->p->slots[AF_SLOT_TOOL];
    if (!s->llm)
        s = &c->p->slots[AF_SLOT_FIXED];
    snprintf(module_buf, buflen, "tool:%s", tool_name);
    c->tool_module = module_buf;
    struct af_tool_ctx t = {.llm = s->llm,
                            .sampling = &s->sampling,
                            .model = s->model,
                            .deadline_ms = tool_deadline(c),
                            .on_llm_call = tool_llm_cb,
                            .user = c};
    return t;
}

void solve_trace_tool(struct solve_ctx *c, const char *tool, const char *command,
                      const json_t *calls)
{
    if (!c->p->trace)
        return;
    size_t i;
    const json_t *call;
    json_array_foreach(calls, i, call)
    {
        json_t *r = base_record(c, "tool");
        json_object_set_new(r, "tool", af_json_text(tool));
        json_object_set_new(r, "call_index", json_integer((json_int_t)i));
        json_object_set_new(r, "command", af_json_text(command));
        json_object_set(r, "args", json_object_get(call, "args"));
        json_object_set(r, "result", json_object_get(call, "result"));
        json_object_set(r, "duration_ms", json_object_get(call, "duration_ms"));
        json_t *e = json_object_get(call, "error");
        json_object_set(r, "error", e ? e : json_null());
        (void)af_trace_write(c->p->trace, r);
        json_decref(r);
    }
}

void solve_trace_final(struct solve_ctx *c)
{
    if (!c->p->trace)
        return;
    json_t *r = base_record(c, "final");
    json_t *res = af_flow_result_json(c->out);
    json_object_update(r, res);
    json_decref(res);
    json_object_set_new(r, "query", af_json_text(c->query));
    (void)af_trace_write(c->p->trace, r);
    json_decref(r);
}

int check_command(const char *command, char *why, size_t whylen)
{
    if (!command) {
        snprintf(why, whylen, "no ```python block with a tool.execute(...) call was found");
        return AF_EPARSE;
    }
    struct af_pycall_list list;
    char err[512];
    if (af_pycall_parse(command, strlen(command), &list, err, sizeof err) != AF_OK) {
        snprintf(why, whylen, "%s", err);
        return AF_EPARSE;
    }
    size_t n = list.n;
    af_pycall_list_deinit(&list);
    if (n == 0) {
        snprintf(why, whylen, "the code contains no tool.execute(...) call");
        return AF_EPARSE;
    }
    return AF_OK;
}
