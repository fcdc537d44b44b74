/*
 * test_flow_parse.c - the planner, verifier and answer parsers against tricky model output.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentflow/tools.h"
#include "core/fileio.h"
#include "flow/parse.h"
#include "flow/pycall.h"
#include "flow/pyrepr.h"

static void parse_ok(const char *reply, const char *ctx, const char *goal, const char *tool)
{
    struct next_step ns;
    char err[256];
    assert_int_equal(parse_next_step(reply, &ns, err, sizeof err), AF_OK);
    assert_string_equal(ns.context, ctx);
    assert_string_equal(ns.sub_goal, goal);
    assert_string_equal(ns.tool_name, tool);
    next_step_deinit(&ns);
}

static void test_plain_fields(void **state)
{
    (void)state;
    parse_ok("Justification: need facts\nContext: Paris is a city\nSub-Goal: Find its "
             "population\nTool Name: Wikipedia_RAG_Search_Tool",
             "Paris is a city", "Find its population", "Wikipedia_RAG_Search_Tool");
}

static void test_bold_markup(void **state)
{
    (void)state;
    parse_ok("**Justification:** x\n**Context:** the query asks for 2+2\n**Sub-Goal:** compute "
             "it\n**Tool Name:** Python_Code_Generator_Tool\n",
             "the query asks for 2+2", "compute it", "Python_Code_Generator_Tool");
}

static void test_last_match_wins(void **state)
{
    (void)state;
    parse_ok("Context: first\nSub-Goal: g1\nTool Name: A_Tool\n\nOn second thought:\n\n"
             "Context: second\nSub-Goal: g2\nTool Name: B_Tool\n\n",
             "second", "g2", "B_Tool");
}

static void test_code_fence_and_odd_case(void **state)
{
    (void)state;
    parse_ok("```\ncontext: data here\nsub-goal: do it\ntool name: generalist solution generator "
             "tool\n```",
             "data here", "do it", "generalist solution generator tool");
    char canon[128];
    af_tool_canonical_name("generalist solution_generator   TOOL", canon, sizeof canon);
    assert_string_equal(canon, "generalist_solution_generator_tool");
}

static void test_multiline_context_non_ascii(void **state)
{
    (void)state;
    parse_ok("Context: Zürich and 東京 are cities.\nBoth are large.\nSub-Goal: Compare "
             "them 🙂\nTool Name: `Web_Search_Tool`.",
             "Zürich and 東京 are cities.\nBoth are large.", "Compare them 🙂",
             "Web_Search_Tool");
}

static void test_json_reply(void **state)
{
    (void)state;
    parse_ok("{\"justification\":\"j\",\"context\":\" c \",\"sub_goal\":\"g\","
             "\"tool_name\":\"T_Tool\"}",
             "c", "g", "T_Tool");
}

static void test_missing_fields(void **state)
{
    (void)state;
    struct next_step ns;
    char err[256];
    assert_int_equal(parse_next_step("I think we should search.", &ns, err, sizeof err), AF_EPARSE);
    assert_non_null(strstr(err, "Tool Name"));
    assert_int_equal(parse_next_step("Sub-Goal: x\nTool Name: T", &ns, err, sizeof err), AF_EPARSE);
    assert_non_null(strstr(err, "Context"));
    assert_int_equal(
        parse_next_step("Context: a\nSub-Goal: b\nTool Name:   \n", &ns, err, sizeof err),
        AF_EPARSE);
    assert_int_equal(parse_next_step(NULL, &ns, err, sizeof err), AF_EPARSE);
}

static void test_verdict(void **state)
{
    (void)state;
    int expl;
    assert_int_equal(parse_verdict("All good.\nConclusion: STOP", &expl), 1);
    assert_int_equal(expl, 1);
    assert_int_equal(parse_verdict("**Conclusion:** CONTINUE", &expl), 0);
    assert_int_equal(expl, 1);
    /* Bold around the word defeats the reference's pattern; the fallback still decides. */
    assert_int_equal(parse_verdict("**Conclusion:** **STOP**", &expl), 1);
    assert_int_equal(expl, 0);
    /* The last conclusion counts. */
    assert_int_equal(
        parse_verdict("Conclusion: STOP\nWait, more is needed.\nConclusion: continue", &expl), 0);
    /* Fallbacks: "stop" anywhere, then "continue", then CONTINUE. */
    assert_int_equal(parse_verdict("We can stop here.", &expl), 1);
    assert_int_equal(expl, 0);
    assert_int_equal(parse_verdict("Let us continue.", &expl), 0);
    assert_int_equal(parse_verdict("hmm", &expl), 0);
    assert_int_equal(parse_verdict("In conclusion, stop.", &expl), 1);
}

static void test_final_answer(void **state)
{
    (void)state;
    char *a = parse_final_answer("**Process Summary:** searched.\n**Answer:** Paris");
    assert_string_equal(a, "Paris");
    free(a);
    a = parse_final_answer("x <answer>1</answer> then <answer> 42 </answer> done");
    assert_string_equal(a, "42");
    free(a);
    a = parse_final_answer("  just text  ");
    assert_string_equal(a, "just text");
    free(a);
    a = parse_final_answer("Answer:");
    assert_string_equal(a, "Answer:");
    free(a);
}

/* Whether every keyword of the call is a parameter of the card and every required parameter
 * is given: the cards an example is meant for. */
static int call_fits_card(const struct af_pycall *call, const struct af_tool_card *card)
{
    const char *key;
    const json_t *v;
    json_object_foreach(call->kwargs, key, v)
    {
        int found = 0;
        for (size_t i = 0; i < card->n_params; i++)
            found |= !strcmp(card->params[i].name, key);
        if (!found)
            return 0;
    }
    for (size_t i = 0; i < card->n_params; i++)
        if (card->params[i].required && !json_object_get(call->kwargs, card->params[i].name))
            return 0;
    return 1;
}

/* Parses one example command and binds each call to every built-in card it is meant for;
 * at least one card must take it. */
static void check_example(const struct af_tool_registry *reg, const char *where, const char *code,
                          size_t len)
{
    struct af_pycall_list list;
    char err[512];
    if (af_pycall_parse(code, len, &list, err, sizeof err) != AF_OK)
        fail_msg("%s: the example does not parse: %s", where, err);
    if (list.n == 0)
        fail_msg("%s: the example has no tool.execute(...) call", where);
    for (size_t c = 0; c < list.n; c++) {
        int n_fit = 0;
        for (size_t t = 0; t < af_tool_registry_count(reg); t++) {
            const struct af_tool_card *card = af_tool_card(af_tool_registry_at(reg, t));
            if (!call_fits_card(&list.calls[c], card))
                continue;
            n_fit++;
            json_t *kw = NULL;
            if (af_pycall_bind(&list.calls[c], card, &kw, err, sizeof err) != AF_OK)
                fail_msg("%s: the example is not valid for %s: %s", where, card->name, err);
            json_decref(kw);
        }
        if (n_fit == 0)
            fail_msg("%s: no built-in card takes the example's arguments", where);
    }
    af_pycall_list_deinit(&list);
}

/* Every ```python example in the prompt templates, and every card's demo command, parses and
 * validates against the built-in cards: a model that copies one must get a working call. */
static void test_prompt_examples_valid(void **state)
{
    (void)state;
    char err[512], dirpath[1024], path[1300];
    struct af_tool_registry *reg = af_tool_registry_new();
    assert_int_equal(af_tool_registry_add_builtins(reg, NULL, NULL, err, sizeof err), AF_OK);
    for (size_t t = 0; t < af_tool_registry_count(reg); t++) {
        const struct af_tool_card *card = af_tool_card(af_tool_registry_at(reg, t));
        for (size_t d = 0; d < card->n_demos; d++) {
            snprintf(path, sizeof path, "%s demo %zu", card->name, d);
            check_example(reg, path, card->demo_commands[d], strlen(card->demo_commands[d]));
        }
    }
    const char *src = getenv("AGENTFLOW_SRC");
    snprintf(dirpath, sizeof dirpath, "%s/prompts", src && src[0] ? src : ".");
    DIR *dir = opendir(dirpath);
    assert_non_null(dir);
    int n_examples = 0;
    for (struct dirent *e; (e = readdir(dir));) {
        size_t nl = strlen(e->d_name);
        if (nl < 5 || strcmp(e->d_name + nl - 4, ".txt") != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dirpath, e->d_name);
        char *text = NULL;
        assert_int_equal(af_file_read(path, 1 << 20, &text, NULL, err, sizeof err), AF_OK);
        for (char *p = text; (p = strstr(p, "```python\n"));) {
            p += strlen("```python\n");
            char *end = strstr(p, "```");
            assert_non_null(end);
            check_example(reg, path, p, (size_t)(end - p));
            n_examples++;
            p = end + 3;
        }
        free(text);
    }
    closedir(dir);
    assert_true(n_examples >= 3);
    af_tool_registry_free(reg);
}

/* JSON as Python's repr() writes the same value (the expected text is CPython 3's output). */
static void test_pyrepr(void **state)
{
    (void)state;
    json_t *v =
        json_loads("{\"a\": \"it's\", \"b\": [1, 2.5, true, null], \"c\": \"say \\\"hi\\\"\\n\", "
                   "\"d\": 0.1, \"e\": 1e-05, \"f\": 1e16, \"g\": 3.0, "
                   "\"h\": \"both ' and \\\"\", \"i\": \"\\u0001\\\\\", "
                   "\"j\": 123456789.125, \"k\": 0.30000000000000004, "
                   "\"l\": \"\u00e9\"}",
                   JSON_PRESERVE_ORDER, NULL);
    assert_non_null(v);
    char *s = pyrepr(v);
    assert_string_equal(s, "{'a': \"it's\", 'b': [1, 2.5, True, None], 'c': 'say \"hi\"\\n', "
                           "'d': 0.1, 'e': 1e-05, 'f': 1e+16, 'g': 3.0, 'h': 'both \\' and \"', "
                           "'i': '\\x01\\\\', 'j': 123456789.125, 'k': 0.30000000000000004, "
                           "'l': '\u00e9'}");
    free(s);
    json_decref(v);
}

/* The released AgentFlow's tool names resolve to ours, in lookups and in --tools lists. */
static void test_original_tool_names(void **state)
{
    (void)state;
    char err[512];
    struct af_tool_registry *reg = af_tool_registry_new();
    assert_int_equal(af_tool_registry_add_builtins(reg,
                                                   "Ground_Google_Search_Tool,"
                                                   "Web_RAG_Search_Tool",
                                                   NULL, err, sizeof err),
                     AF_OK);
    assert_int_equal(af_tool_registry_count(reg), 2);
    struct af_tool *t = af_tool_registry_find(reg, "Ground_Google_Search_Tool");
    assert_non_null(t);
    assert_string_equal(af_tool_card(t)->name, "Web_Search_Tool");
    assert_ptr_equal(af_tool_registry_find(reg, "ground google search tool"), t);
    t = af_tool_registry_find(reg, "Web_RAG_Search_Tool");
    assert_non_null(t);
    assert_string_equal(af_tool_card(t)->name, "Web_RAG_Search_Tool");
    assert_null(af_tool_registry_find(reg, "Google_Search_Tool")); /* class names never did */
    assert_null(af_tool_alias_target("Web_Search_Tool"));
    af_tool_registry_free(reg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_fields),
        cmocka_unit_test(test_bold_markup),
        cmocka_unit_test(test_last_match_wins),
        cmocka_unit_test(test_code_fence_and_odd_case),
        cmocka_unit_test(test_multiline_context_non_ascii),
        cmocka_unit_test(test_json_reply),
        cmocka_unit_test(test_missing_fields),
        cmocka_unit_test(test_verdict),
        cmocka_unit_test(test_final_answer),
        cmocka_unit_test(test_prompt_examples_valid),
        cmocka_unit_test(test_original_tool_names),
        cmocka_unit_test(test_pyrepr),
    };
    return cmocka_run_group_tests_name("flow_parse", tests, NULL, NULL);
}
