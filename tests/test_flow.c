/*
 * test_flow.c - whole solves against the scripted back-end: a three-step solve, retries of
 * unparsable replies, unknown tools, bad commands, back-end failures, fresh memory, traces,
 * prompt overrides and the time budget.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agentflow/engine.h"
#include "agentflow/flow.h"
#include "core/fileio.h"

#define M_ANALYSIS "Before any tool is used"
#define M_PLANNER "You decide the single next action"
#define M_EXECUTOR "Write the Python call"
#define M_VERIFIER "Judge whether the work"
#define M_DIRECT "Give the final answer"
#define M_RETRY_PLAN "Your reply could not be used"

static const char *PLAN = "Justification: need it\nContext: the query is about 6*7\n"
                          "Sub-Goal: compute 6*7\nTool Name: generalist solution generator tool";
static const char *CMD = "Analysis: x\nCommand Explanation: y\nGenerated Command:\n```python\n"
                         "q = \"What is 6*7?\"\nexecution = tool.execute(query=q)\n```";

struct script {
    json_t *rules;
};

static void rule(struct script *s, const char *match, const char *reply, int times)
{
    json_t *r = json_pack("{s:s,s:s}", "match", match, "reply", reply);
    if (times > 0)
        json_object_set_new(r, "times", json_integer(times));
    json_array_append_new(s->rules, r);
}

static void rule_error(struct script *s, const char *match, const char *msg)
{
    json_array_append_new(s->rules, json_pack("{s:s,s:s}", "match", match, "error", msg));
}

static struct af_llm *make_llm(struct script *s)
{
    json_t *doc = json_pack("{s:o}", "rules", s->rules);
    char *text = json_dumps(doc, 0);
    json_decref(doc);
    char err[256];
    struct af_llm *llm = af_llm_scripted_new(text, err, sizeof err);
    free(text);
    assert_non_null(llm);
    return llm;
}

struct fixture {
    struct af_llm *llm;
    struct af_tool_registry *reg;
    struct af_flow_params p;
};

static void setup_fixture(struct fixture *f, struct script *s)
{
    f->llm = make_llm(s);
    f->reg = af_tool_registry_new();
    char err[256];
    assert_int_equal(af_tool_registry_add_builtins(f->reg, "generalist solution generator tool",
                                                   NULL, err, sizeof err),
                     AF_OK);
    f->p = af_flow_default_params();
    for (int i = 0; i < AF_N_SLOTS; i++)
        f->p.slots[i].llm = f->llm;
    f->p.tools = f->reg;
}

static void teardown_fixture(struct fixture *f)
{
    af_llm_free(f->llm);
    af_tool_registry_free(f->reg);
}

static void base_script(struct script *s)
{
    s->rules = json_array();
    rule(s, M_ANALYSIS, "Concise Summary: multiply", 0);
}

static void test_three_step_solve(void **state)
{
    (void)state;
    struct script s;
    base_script(&s);
    rule(&s, M_PLANNER, PLAN, 0);
    rule(&s, M_EXECUTOR, CMD, 0);
    rule(&s, M_VERIFIER, "Not yet.\nConclusion: CONTINUE", 2);
    rule(&s, M_VERIFIER, "Enough.\n**Conclusion:** STOP", 1);
    rule(&s, M_DIRECT, "**Process Summary:** asked the tool.\n**Answer:** 42", 0);
    rule(&s, "What is 6*7?", "6*7 = 42", 0);
    struct fixture f;
    setup_fixture(&f, &s);
    struct af_flow_result r;
    assert_int_equal(af_flow_solve(&f.p, "q1", "What is 6 times 7?", &r), AF_OK);
    assert_int_equal(r.steps, 3);
    assert_string_equal(r.answer, "42");
    assert_int_equal(json_array_size(r.memory), 3);
    json_t *m0 = json_array_get(r.memory, 0);
    assert_string_equal(json_string_value(json_object_get(m0, "tool")),
                        "generalist solution generator tool");
    assert_string_equal(json_string_value(json_object_get(m0, "sub_goal")), "compute 6*7");
    json_t *res = json_object_get(m0, "result");
    assert_true(json_is_array(res));
    assert_string_equal(json_string_value(json_array_get(res, 0)), "6*7 = 42");
    assert_null(json_object_get(m0, "failed"));
    json_t *u = json_object_get(r.usage, "planner");
    assert_int_equal(json_integer_value(json_object_get(u, "calls")), 3);
    u = json_object_get(r.usage, "tool:Generalist_Solution_Generator_Tool");
    assert_int_equal(json_integer_value(json_object_get(u, "calls")), 3);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(r.usage, "verifier"), "calls")), 3);
    assert_true(json_object_get(r.timings, "total_ms") != NULL);
    af_flow_result_deinit(&r);
    teardown_fixture(&f);
}

static void test_planner_retry_then_ok(void **state)
{
    (void)state;
    struct script s;
    base_script(&s);
    rule(&s, M_RETRY_PLAN, PLAN, 0);
    rule(&s, M_PLANNER, "I would search the web.", 0);
    rule(&s, M_EXECUTOR, CMD, 0);
    rule(&s, M_VERIFIER, "Conclusion: STOP", 0);
    rule(&s, M_DIRECT, "Answer: 42", 0);
    rule(&s, "What is 6*7?", "42", 0);
    struct fixture f;
    setup_fixture(&f, &s);
    struct af_flow_result r;
    assert_int_equal(af_flow_solve(&f.p, NULL, "q", &r), AF_OK);
    assert_int_equal(r.steps, 1);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(r.usage, "planner"), "calls")), 2);
    assert_null(json_object_get(json_array_get(r.memory, 0), "failed"));
    af_flow_result_deinit(&r);
    teardown_fixture(&f);
}

/* What the progress callbacks were told. */
struct seen {
    char reasons[4][1024]; /* of failed steps, by step - 1 */
    int n_steps;
    char calls[32][40]; /* "+module@step" at the start of a call, "-module@step" at its end */
    int n_calls;
};

static void seen_step(void *user, const struct af_flow_step_info *info)
{
    struct seen *w = user;
    if (info->step >= 1 && info->step <= 4)
        snprintf(w->reasons[info->step - 1], sizeof w->reasons[0], "%s",
                 info->failed && info->reason ? info->reason : "");
    w->n_steps++;
}

static void seen_call(void *user, const struct af_flow_call_info *ci)
{
    struct seen *w = user;
    if (w->n_calls < 32)
        snprintf(w->calls[w->n_calls++], sizeof w->calls[0], "%c%s@%d", ci->done ? '-' : '+',
                 ci->module, ci->step);
}

static void watch(struct fixture *f, struct seen *w)
{
    memset(w, 0, sizeof *w);
    f->p.on_step = seen_step;
    f->p.on_call = seen_call;
    f->p.user = w;
}

static void test_planner_garbage_is_failed_step(void **state)
{
    (void)state;
    struct script s;
    base_script(&s);
    rule(&s, M_PLANNER, "no fields at all", 0);
    rule(&s, M_RETRY_PLAN, "still nothing", 0);
    rule(&s, M_VERIFIER, "Conclusion: CONTINUE", 0);
    rule(&s, M_DIRECT, "Answer: unknown", 0);
    struct fixture f;
    setup_fixture(&f, &s);
    f.p.max_steps = 2;
    struct seen w;
    watch(&f, &w);
    struct af_flow_result r;
    assert_int_equal(af_flow_solve(&f.p, NULL, "q", &r), AF_OK);
    assert_int_equal(r.steps, 2);
    json_t *m0 = json_array_get(r.memory, 0);
    assert_true(json_is_true(json_object_get(m0, "failed")));
    assert_non_null(
        strstr(json_string_value(json_object_get(m0, "result")), "could not be parsed"));
    assert_string_equal(r.answer, "unknown");
    /* The step line's reason names the failure and quotes the reply that did not parse. */
    assert_int_equal(w.n_steps, 2);
    assert_non_null(strstr(w.reasons[0], "the planner's reply could not be parsed"));
    assert_non_null(strstr(w.reasons[0], "reply: \"still nothing\""));
    /* Progress: the query analysis is announced before it runs, then each call in order. */
    assert_true(w.n_calls >= 4);
    assert_string_equal(w.calls[0], "+query_analysis@0");
    assert_string_equal(w.calls[1], "-query_analysis@0");
    assert_string_equal(w.calls[2], "+planner@1");
    assert_string_equal(w.calls[w.n_calls - 1], "-direct_output@2");
    af_flow_result_deinit(&r);
    teardown_fixture(&f);
}

static void test_unknown_tool_and_bad_args(void **state)
{
    (void)state;
    struct script s;
    base_script(&s);
    rule(&s, M_PLANNER, "Context: c\nSub-Goal: g\nTool Name: Ground_Google_Search_Tool", 1);
    rule(&s, M_PLANNER, PLAN, 0);
    rule(&s, M_EXECUTOR, "```python\nexecution = tool.execute(query=\"x\", k=3)\n```", 0);
    rule(&s, M_VERIFIER, "Conclusion: CONTINUE", 0);
    rule(&s, M_DIRECT, "Answer: none", 0);
    struct fixture f;
    setup_fixture(&f, &s);
    f.p.max_steps = 2;
    struct seen w;
    watch(&f, &w);
    struct af_flow_result r;
    assert_int_equal(af_flow_solve(&f.p, NULL, "q", &r), AF_OK);
    assert_non_null(strstr(w.reasons[0], "'Ground_Google_Search_Tool', which is not available"));
    assert_non_null(strstr(w.reasons[1], "'k'"));
    json_t *m0 = json_array_get(r.memory, 0), *m1 = json_array_get(r.memory, 1);
    assert_true(json_is_true(json_object_get(m0, "failed")));
    assert_non_null(strstr(json_string_value(json_object_get(m0, "result")), "not found"));
    assert_true(json_is_true(json_object_get(m1, "failed")));
    const char *err1 = json_string_value(json_array_get(json_object_get(m1, "result"), 0));
    assert_non_null(err1);
    assert_non_null(strstr(err1, "'k'"));
    af_flow_result_deinit(&r);
    teardown_fixture(&f);
}

static void test_executor_unparsable_twice(void **state)
{
    (void)state;
    struct script s;
    base_script(&s);
    rule(&s, M_PLANNER, PLAN, 0);
    rule(&s, M_EXECUTOR, "I will call the tool now.", 0);
    rule(&s, "Your command could not be used", "```python\nimport os; os.system('rm -rf /')\n```",
         0);
    rule(&s, M_VERIFIER, "Conclusion: STOP", 0);
    rule(&s, M_DIRECT, "Answer: ?", 0);
    struct fixture f;
    setup_fixture(&f, &s);
    struct af_flow_result r;
    assert_int_equal(af_flow_solve(&f.p, NULL, "q", &r), AF_OK);
    json_t *m0 = json_array_get(r.memory, 0);
    assert_true(json_is_true(json_object_get(m0, "failed")));
    assert_non_null(strstr(json_string_value(json_object_get(m0, "result")), "no usable command"));
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(r.usage, "executor"), "calls")), 2);
    af_flow_result_deinit(&r);
    teardown_fixture(&f);
}

static void test_backend_error_stops_solve(void **state)
{
    (void)state;
    struct script s;
    base_script(&s);
    rule_error(&s, M_PLANNER, "HTTP 500 from http://x/v1: overloaded");
    struct fixture f;
    setup_fixture(&f, &s);
    struct af_flow_result r;
    assert_int_equal(af_flow_solve(&f.p, NULL, "q", &r), AF_EBACKEND);
    assert_non_null(strstr(r.errmsg, "planner"));
    assert_non_null(strstr(r.errmsg, "overloaded"));
    assert_null(r.answer);
    af_flow_result_deinit(&r);
    teardown_fixture(&f);
}

static void test_memory_fresh_per_query(void **state)
{
    (void)state;
    struct script s;
    base_script(&s);
    rule(&s, M_PLANNER, PLAN, 0);
    rule(&s, M_EXECUTOR, CMD, 0);
    rule(&s, M_VERIFIER, "Conclusion: STOP", 0);
    rule(&s, M_DIRECT, "Answer: 42", 0);
    rule(&s, "What is 6*7?", "42", 0);
    struct fixture f;
    setup_fixture(&f, &s);
    for (int i = 0; i < 3; i++) {
        struct af_flow_result r;
        assert_int_equal(af_flow_solve(&f.p, NULL, "q", &r), AF_OK);
        assert_int_equal(json_array_size(r.memory), 1);
        assert_int_equal(json_integer_value(json_object_get(json_array_get(r.memory, 0), "step")),
                         1);
        af_flow_result_deinit(&r);
    }
    teardown_fixture(&f);
}

static void test_trace_and_prompt_override(void **state)
{
    (void)state;
    char dir[] = "/tmp/af_flow_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256], tpath[256], err[256];
    snprintf(path, sizeof path, "%s/next_step.txt", dir);
    const char *tmpl = "CUSTOM PLANNER for {{query}} with {{ available_tools }}";
    assert_int_equal(af_file_write_atomic(path, tmpl, strlen(tmpl), err, sizeof err), AF_OK);
    struct af_prompts *pr = NULL;
    assert_int_equal(af_prompts_load(dir, &pr, err, sizeof err), AF_OK);
    struct script s;
    base_script(&s);
    rule(&s, "CUSTOM PLANNER for my query with [\"Generalist_Solution_Generator_Tool\"]", PLAN, 0);
    rule(&s, M_EXECUTOR, CMD, 0);
    rule(&s, M_VERIFIER, "Conclusion: STOP", 0);
    rule(&s, M_DIRECT, "Answer: 42", 0);
    rule(&s, "What is 6*7?", "42", 0);
    struct fixture f;
    setup_fixture(&f, &s);
    snprintf(tpath, sizeof tpath, "%s/trace.jsonl", dir);
    struct af_trace *tr = NULL;
    assert_int_equal(af_trace_open(tpath, &tr, err, sizeof err), AF_OK);
    f.p.prompts = pr;
    f.p.trace = tr;
    struct af_flow_result r;
    assert_int_equal(af_flow_solve(&f.p, "id-7", "my query", &r), AF_OK);
    assert_string_equal(r.answer, "42");
    af_flow_result_deinit(&r);
    af_trace_close(tr);
    char *data = NULL;
    assert_int_equal(af_file_read(tpath, 1 << 24, &data, NULL, err, sizeof err), AF_OK);
    int n_llm = 0, n_tool = 0, n_final = 0;
    for (char *line = data, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        json_t *j = json_loads(line, 0, NULL);
        assert_non_null(j);
        const char *type = json_string_value(json_object_get(j, "type"));
        assert_string_equal(json_string_value(json_object_get(j, "query_id")), "id-7");
        if (!strcmp(type, "llm")) {
            n_llm++;
            assert_true(json_is_array(json_object_get(j, "messages")));
            assert_non_null(json_object_get(j, "latency_ms"));
        } else if (!strcmp(type, "tool")) {
            n_tool++;
            assert_string_equal(
                json_string_value(json_object_get(json_object_get(j, "args"), "query")),
                "What is 6*7?");
        } else if (!strcmp(type, "final")) {
            n_final++;
            assert_string_equal(json_string_value(json_object_get(j, "answer")), "42");
        }
        json_decref(j);
    }
    free(data);
    /* analysis, planner, executor, tool's own call, verifier, generator */
    assert_int_equal(n_llm, 6);
    assert_int_equal(n_tool, 1);
    assert_int_equal(n_final, 1);
    teardown_fixture(&f);
    af_prompts_free(pr);
    unlink(path);
    unlink(tpath);
    rmdir(dir);
}

/* With render_python the prompts show the tool list, the cards and the memory as Python
 * literals, as the released AgentFlow writes them; the rules match only that form. */
static void test_render_python(void **state)
{
    (void)state;
    struct script s;
    s.rules = json_array();
    rule(&s,
         "Tools that can be used: ['Generalist_Solution_Generator_Tool']\n\nWhat each tool "
         "does:\n{'Generalist_Solution_Generator_Tool': {'tool_name': "
         "'Generalist_Solution_Generator_Tool', ",
         "Concise Summary: multiply", 1);
    rule(&s, M_PLANNER, PLAN, 0);
    rule(&s, M_EXECUTOR, CMD, 0);
    rule(&s,
         "{'Action Step 1': {'tool_name': 'generalist solution generator tool', 'sub_goal': "
         "'compute 6*7', ",
         "Conclusion: STOP", 1);
    rule(&s, M_DIRECT, "Answer: 42", 0);
    rule(&s, "What is 6*7?", "42", 0);
    struct fixture f;
    setup_fixture(&f, &s);
    f.p.render_python = 1;
    struct af_flow_result r;
    assert_int_equal(af_flow_solve(&f.p, NULL, "What is 6 times 7?", &r), AF_OK);
    assert_int_equal(r.err, AF_OK);
    assert_int_equal(r.steps, 1);
    assert_string_equal(r.answer, "42");
    af_flow_result_deinit(&r);
    teardown_fixture(&f);
}

static void test_time_budget(void **state)
{
    (void)state;
    struct script s;
    base_script(&s);
    rule(&s, M_DIRECT, "Answer: quick", 0);
    struct fixture f;
    setup_fixture(&f, &s);
    f.p.max_time_s = 1e-9;
    struct af_flow_result r;
    assert_int_equal(af_flow_solve(&f.p, NULL, "q", &r), AF_OK);
    assert_int_equal(r.steps, 0);
    assert_string_equal(r.answer, "quick");
    af_flow_result_deinit(&r);
    teardown_fixture(&f);
}

/* A Python tool result's wall-clock figure stays in the trace but out of memory: memory goes
 * into every later prompt, so two solves of one query must leave equal memories (otherwise a
 * response cache cannot replay the second). */
static void test_wall_clock_out_of_memory(void **state)
{
    (void)state;
    char dir[] = "/tmp/af_flow_XXXXXX", tpath[256], err[256];
    assert_non_null(mkdtemp(dir));
    snprintf(tpath, sizeof tpath, "%s/trace.jsonl", dir);
    struct script s;
    base_script(&s);
    rule(&s, M_PLANNER,
         "Justification: j\nContext: c\nSub-Goal: print 6*7\nTool Name: Python_Code_Generator_Tool",
         0);
    rule(&s, M_EXECUTOR,
         "Generated Command:\n```python\nexecution = tool.execute(code=\"print(6*7)\")\n```", 0);
    rule(&s, M_VERIFIER, "Conclusion: STOP", 0);
    rule(&s, M_DIRECT, "Answer: 42", 0);
    struct fixture f;
    setup_fixture(&f, &s);
    assert_int_equal(
        af_tool_registry_add_builtins(f.reg, "Python_Code_Generator_Tool", NULL, err, sizeof err),
        AF_OK);
    struct af_trace *tr = NULL;
    assert_int_equal(af_trace_open(tpath, &tr, err, sizeof err), AF_OK);
    f.p.trace = tr;
    struct af_flow_result r1, r2;
    assert_int_equal(af_flow_solve(&f.p, "a", "What is 6 times 7?", &r1), AF_OK);
    f.p.trace = NULL;
    assert_int_equal(af_flow_solve(&f.p, "b", "What is 6 times 7?", &r2), AF_OK);
    af_trace_close(tr);
    json_t *res = json_array_get(json_object_get(json_array_get(r1.memory, 0), "result"), 0);
    assert_non_null(json_object_get(res, "printed_output"));
    assert_null(json_object_get(res, "duration_ms"));
    assert_true(json_equal(r1.memory, r2.memory));
    af_flow_result_deinit(&r1);
    af_flow_result_deinit(&r2);
    char *data = NULL;
    assert_int_equal(af_file_read(tpath, 1 << 24, &data, NULL, err, sizeof err), AF_OK);
    int n_tool = 0;
    for (char *line = data, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        json_t *j = json_loads(line, 0, NULL);
        assert_non_null(j);
        if (!strcmp(json_string_value(json_object_get(j, "type")), "tool")) {
            n_tool++;
            assert_true(
                json_is_number(json_object_get(json_object_get(j, "result"), "duration_ms")));
        }
        json_decref(j);
    }
    assert_int_equal(n_tool, 1);
    free(data);
    teardown_fixture(&f);
    unlink(tpath);
    rmdir(dir);
}

/* One solve of "What is 6 times 7?" on a tiny random in-process model (seed 3) in every slot,
 * with the Generalist tool, `draft_max` prompt-lookup drafts, `max_steps` turns and replies
 * of at most `max_tokens`; returns the result's JSON (owned by the caller). */
static json_t *solve_in_process(int draft_max, int max_steps, int max_tokens)
{
    char err[1024], path[256];
    snprintf(path, sizeof path, "/tmp/af_test_flow_inproc_%d.gguf", (int)getpid());
    struct af_engine_random_params rp = {"qwen2", "tiny", "F32", 3, NULL};
    assert_int_equal(af_engine_make_random(&rp, path, err, sizeof err), 0);
    struct af_engine_params ep = af_engine_default_params();
    ep.n_threads = 2;
    ep.draft_max = draft_max;
    struct af_llm *llm = af_llm_gguf_new(path, &ep, err, sizeof err);
    assert_non_null(llm);
    struct af_tool_registry *reg = af_tool_registry_new();
    assert_int_equal(af_tool_registry_add_builtins(reg, "Generalist_Solution_Generator_Tool", NULL,
                                                   err, sizeof err),
                     AF_OK);
    struct af_flow_params p = af_flow_default_params();
    p.max_steps = max_steps;
    p.tools = reg;
    for (int i = 0; i < AF_N_SLOTS; i++) {
        p.slots[i].llm = llm;
        p.slots[i].sampling.max_tokens = max_tokens;
    }
    struct af_flow_result res;
    assert_int_equal(af_flow_solve(&p, NULL, "What is 6 times 7?", &res), AF_OK);
    json_t *j = af_flow_result_json(&res);
    af_flow_result_deinit(&res);
    af_tool_registry_free(reg);
    af_llm_free(llm);
    unlink(path);
    return j;
}

/* The compiled-in templates share their long head (query, tools, cards, analysis, memory), so
 * on the in-process engine most of a solve's prompt tokens come from the prefix cache: at least
 * half on a 3-step solve, reported per module and in the result's prefix_reuse. A tiny random
 * model (its replies do not parse, which still runs analysis, planner with its retry,
 * verifier and generator every step). */
static void test_prefix_reuse_in_process(void **state)
{
    (void)state;
    json_t *j = solve_in_process(0, 3, 12);
    const json_t *pr = json_object_get(j, "prefix_reuse");
    const double frac = json_number_value(json_object_get(pr, "fraction"));
    fprintf(stderr, "prefix reuse on a 3-step solve: %.3f of %lld prompt tokens\n", frac,
            (long long)json_integer_value(json_object_get(pr, "prompt_tokens")));
    assert_true(frac >= 0.5);
    const char *mods[] = {"planner", "verifier", "direct_output"};
    for (size_t i = 0; i < 3; i++) {
        const json_t *u = json_object_get(json_object_get(j, "usage"), mods[i]);
        assert_true(json_integer_value(json_object_get(u, "cached_tokens")) > 0);
        assert_null(json_object_get(u, "draft_tokens")); /* not drafting */
    }
    assert_true(json_is_null(json_object_get(j, "drafts")));
    json_decref(j);
}

/* With prompt-lookup drafts on, every in-process call reports what it guessed and kept, per
 * module and summed in the result's drafts; kept never exceeds guessed. */
static void test_drafts_reported(void **state)
{
    (void)state;
    json_t *j = solve_in_process(8, 2, 24);
    json_int_t tried = 0, kept = 0;
    const char *mod;
    json_t *u;
    json_object_foreach(json_object_get(j, "usage"), mod, u)
    {
        const json_t *d = json_object_get(u, "draft_tokens");
        if (!json_is_integer(d))
            fail_msg("usage.%s has no draft_tokens", mod);
        tried += json_integer_value(d);
        kept += json_integer_value(json_object_get(u, "draft_accepted"));
    }
    const json_t *dr = json_object_get(j, "drafts");
    assert_true(json_is_object(dr));
    assert_int_equal(json_integer_value(json_object_get(dr, "draft_tokens")), tried);
    assert_int_equal(json_integer_value(json_object_get(dr, "draft_accepted")), kept);
    assert_true(kept <= tried);
    const double acc = json_number_value(json_object_get(dr, "acceptance"));
    assert_true(acc >= 0 && acc <= 1);
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_three_step_solve),
        cmocka_unit_test(test_planner_retry_then_ok),
        cmocka_unit_test(test_planner_garbage_is_failed_step),
        cmocka_unit_test(test_unknown_tool_and_bad_args),
        cmocka_unit_test(test_executor_unparsable_twice),
        cmocka_unit_test(test_backend_error_stops_solve),
        cmocka_unit_test(test_memory_fresh_per_query),
        cmocka_unit_test(test_trace_and_prompt_override),
        cmocka_unit_test(test_time_budget),
        cmocka_unit_test(test_render_python),
        cmocka_unit_test(test_wall_clock_out_of_memory),
        cmocka_unit_test(test_prefix_reuse_in_process),
        cmocka_unit_test(test_drafts_reported),
    };
    return cmocka_run_group_tests_name("flow", tests, NULL, NULL);
}
