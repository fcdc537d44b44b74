/*
 * test_score.c - answer extraction and every benchmark scorer against tricky answers, plus
 * item 0 of each real benchmark file (skipped when the shared data is absent).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentflow/score.h"

/* Scores `answer` against the item given as JSON text; returns correct, checks rc == 0. */
static int score_as(const char *bench, const char *item_json, const char *answer,
                    struct af_score *keep)
{
    json_error_t jerr;
    json_t *item = json_loads(item_json, 0, &jerr);
    assert_non_null(item);
    struct af_score s;
    char err[256] = "";
    int rc = af_score_item(bench, item, answer, &s, err, sizeof err);
    if (rc != AF_OK)
        fail_msg("%s: %s", bench, err);
    int correct = s.correct;
    if (keep)
        *keep = s;
    else
        af_score_deinit(&s);
    json_decref(item);
    return correct;
}

static const char *reason_of(const struct af_score *s)
{
    const char *r = json_string_value(json_object_get(s->details, "reason"));
    return r ? r : "";
}

#define G24 "{\"question\": [4, 7, 8, 8], \"answer\": [\"(7-8/8)×4\"]}"

static void test_game24(void **state)
{
    (void)state;
    struct af_score s;
    assert_true(score_as("gameof24", G24, "(7 - 8/8) * 4", NULL));
    assert_true(score_as("gameof24", G24, "<answer>(7-8÷8)×4</answer>", NULL));
    assert_true(score_as("gameof24", G24, "(7-8/8)x4 = 24", NULL));
    assert_false(score_as("gameof24", G24, "8*(7-4)*8/8", &s));
    assert_string_equal(reason_of(&s), "uses 8 3 times, given 2");
    af_score_deinit(&s);
    assert_false(score_as("gameof24", G24, "(8+4)*(8/4)", &s));
    assert_string_equal(reason_of(&s), "uses 4 twice");
    af_score_deinit(&s);
    assert_false(score_as("gameof24", G24, "8*(7-4)", &s));
    assert_string_equal(reason_of(&s), "omits 8");
    af_score_deinit(&s);
    assert_false(score_as("gameof24", G24, "(7+4)/(8-8)", &s));
    assert_string_equal(reason_of(&s), "division by zero");
    af_score_deinit(&s);
    assert_false(score_as("gameof24", G24, "7+8+8+4", &s));
    assert_string_equal(reason_of(&s), "evaluates to 27, not 24");
    af_score_deinit(&s);
    assert_false(score_as("gameof24", G24, "there is no solution", &s));
    assert_string_equal(reason_of(&s), "not an arithmetic expression");
    af_score_deinit(&s);
    assert_false(score_as("gameof24", G24, "(7-8/8)*4)", NULL));
    assert_false(score_as("gameof24", G24, "(7-8/8*4", NULL));
    /* Exact rationals: 8/(3-8/3) = 24 only without rounding. */
    assert_true(score_as("gameof24", "{\"question\": [3, 3, 8, 8]}", "8/(3-8/3)", NULL));
    /* Numbers read from the query when "question" is absent. */
    assert_true(score_as("gameof24", "{\"query\": \"Using the numbers [1, 1, 1, 8], make 24\"}",
                         "(1+1+1)×8", NULL));
}

static void test_extract(void **state)
{
    (void)state;
    char *e = af_score_extract("\\boxed{5} so <answer> 7 </answer> and \\boxed{9}");
    assert_string_equal(e, "7");
    free(e);
    e = af_score_extract("so \\boxed{\\frac{1}{2}} then \\boxed{x^{2}}");
    assert_string_equal(e, "x^{2}");
    free(e);
    e = af_score_extract("Reasoning...\n**Final Answer:** Paris\n");
    assert_string_equal(e, "Paris");
    free(e);
    e = af_score_extract("  just text  ");
    assert_string_equal(e, "just text");
    free(e);
    e = af_score_extract(NULL);
    assert_string_equal(e, "");
    free(e);
}

static void test_numbers(void **state)
{
    (void)state;
    assert_true(score_as("aime24", "{\"answer\": 1000}", "1,000", NULL));
    assert_true(score_as("aime24", "{\"answer\": 7}", "\\boxed{7}", NULL));
    assert_true(score_as("amc23", "{\"answer\": 7.0}", "So \\boxed{7}.", NULL));
    assert_true(score_as("amc23", "{\"answer\": \"27\"}", "$27", NULL));
    assert_true(score_as("amc23", "{\"answer\": 27}", "27.0", NULL));
    assert_false(score_as("amc23", "{\"answer\": 27}", "27.5", NULL));
    assert_false(score_as("amc23", "{\"answer\": 27}", "28", NULL));
    assert_false(score_as("amc23", "{\"answer\": 27}", "0x1b", NULL));
    assert_true(score_as("aime24", "{\"answer\": [12, 13]}", "13", NULL));
    assert_false(score_as("aime24", "{\"answer\": [12, 13]}", "14", NULL));
    assert_true(score_as("aime24", "{\"answer\": 7}", "\\boxed{3} no, <answer>7</answer>", NULL));
    assert_false(score_as("aime24", "{\"answer\": 3}", "\\boxed{3} no, <answer>7</answer>", NULL));
}

static void test_qa(void **state)
{
    (void)state;
    struct af_score s;
    assert_true(score_as("hotpotqa", "{\"answer\": [\"The Beatles\"]}", "beatles!", NULL));
    assert_true(score_as("2wiki", "{\"answer\": \"Let'S Make Money\"}", "lets make money", NULL));
    assert_false(score_as("musique", "{\"answer\": \"March 29, 2018\"}", "March 2018", &s));
    assert_true(s.f1 > 0.79 && s.f1 < 0.81); /* p = 1, r = 2/3 */
    af_score_deinit(&s);
    assert_true(score_as("bamboogle", "{\"answer\": [\"JFK\", \"John F. Kennedy\"]}",
                         "<answer>John F Kennedy</answer>", &s));
    assert_string_equal(json_string_value(json_object_get(s.details, "gold")), "John F. Kennedy");
    assert_true(s.f1 > 0.999);
    af_score_deinit(&s);
    assert_false(score_as("bamboogle", "{\"answer\": [\"james madison\"]}", "an apple", &s));
    assert_true(s.f1 < 1e-9);
    af_score_deinit(&s);
}

static void test_gaia(void **state)
{
    (void)state;
    assert_true(score_as("gaia", "{\"answer\": \"1000\"}", "$1,000", NULL));
    assert_true(score_as("gaia", "{\"answer\": \"0.1777\"}", "0.1777", NULL));
    assert_true(score_as("gaia", "{\"answer\": \"17\"}", "17 km", NULL)); /* a unit, as a judge */
    assert_false(score_as("gaia", "{\"answer\": \"17\"}", "17 km and 3 m", NULL));
    assert_true(
        score_as("gaia", "{\"answer\": \"Indonesia, Myanmar\"}", "indonesia,myanmar", NULL));
    assert_false(score_as("gaia", "{\"answer\": \"Indonesia, Myanmar\"}", "Indonesia", NULL));
    assert_true(score_as("gaia", "{\"answer\": \"101.376, 84.348\"}", "101.376; 84.348", NULL));
    assert_true(score_as("gaia", "{\"answer\": \"THE CASTLE\"}", "The Castle.", NULL));
    assert_false(score_as("gaia", "{\"answer\": \"THE CASTLE\"}", "Castle", NULL));
}

/* The forms a judge accepts and the published rules did not: degrees and LaTeX, `x =`, dates
 * in another order, units and thousands separators (docs/SCORING.md). */
static void test_normalised_forms(void **state)
{
    (void)state;
    assert_true(score_as("aime24", "{\"answer\": 45}", "\\boxed{45^\\circ}", NULL));
    assert_true(score_as("aime24", "{\"answer\": 45}", "45^{\\circ}", NULL));
    assert_true(score_as("aime24", "{\"answer\": 45}", "45°", NULL));
    assert_true(score_as("aime24", "{\"answer\": 45}", "45 degrees", NULL));
    assert_true(score_as("aime24", "{\"answer\": 33}", "x = 33", NULL));
    assert_true(score_as("aime24", "{\"answer\": 33}", "Answer: $n=33$", NULL));
    assert_true(score_as("amc23", "{\"answer\": 1200}", "\\text{1{,}200 cm}", NULL));
    assert_true(score_as("amc23", "{\"answer\": 12000}", "12 000", NULL));
    assert_true(score_as("amc23", "{\"answer\": 25}", "25 m^2", NULL));
    assert_true(score_as("amc23", "{\"answer\": 60}", "60 km/h", NULL));
    assert_false(score_as("amc23", "{\"answer\": 5}", "5 x 3", NULL));
    assert_false(score_as("amc23", "{\"answer\": 3}", "3/4", NULL));
    assert_false(score_as("amc23", "{\"answer\": 12}", "12 and 13", NULL));
    assert_false(score_as("amc23", "{\"answer\": 33}", "x == 33", NULL));
    assert_false(score_as("amc23", "{\"answer\": 45}", "46^\\circ", NULL));

    const char *aug30 = "{\"answer\": \"August 30, 2007\"}";
    assert_true(score_as("musique", aug30, "30 August 2007", NULL));
    assert_true(score_as("musique", aug30, "30th of Aug. 2007", NULL));
    assert_true(score_as("2wiki", aug30, "2007-08-30", NULL));
    assert_true(score_as("gaia", aug30, "30 August 2007", NULL));
    assert_false(score_as("musique", aug30, "31 August 2007", NULL));
    assert_false(score_as("musique", aug30, "30 August 2008", NULL));
    struct af_score s;
    assert_true(score_as("2wiki", "{\"answer\": \"30 August 2007\"}", "August 30 2007", &s));
    assert_true(s.f1 > 0.999);
    af_score_deinit(&s);

    assert_true(score_as("hotpotqa", "{\"answer\": [\"1,000\"]}", "1000 people", NULL));
    assert_true(score_as("bamboogle", "{\"answer\": [\"3\"]}", "3 times", NULL));
    assert_true(score_as("gaia", "{\"answer\": \"1500\"}", "1,500 m", NULL));
    assert_true(score_as("gaia", "{\"answer\": \"12, 7\"}", "12 kg; 7 kg", NULL));
    assert_false(score_as("hotpotqa", "{\"answer\": [\"3\"]}", "4 times", NULL));
}

#define GPQA "{\"choices\": [\"A. 0.9\", \"B. 0.7\", \"C. 0.1\"], \"answer\": \"B. 0.7\"}"
#define MEDQA                                                                                      \
    "{\"options\": [\"A. Hemolytic uremic syndrome\", \"B. Oral ulcers\", \"C. Colorectal "        \
    "cancer\"], \"answer\": \"Colorectal cancer\"}"

static void test_mcq(void **state)
{
    (void)state;
    assert_true(score_as("gpqa", GPQA, "B", NULL));
    assert_true(score_as("gpqa", GPQA, "(B)", NULL));
    assert_true(score_as("gpqa", GPQA, "The answer is B.", NULL));
    assert_true(score_as("gpqa", GPQA, "Answer: B", NULL));
    assert_true(score_as("gpqa", GPQA, "0.70", NULL));
    assert_true(score_as("gpqa", GPQA, "B. 0.7", NULL));
    assert_false(score_as("gpqa", GPQA, "A", NULL));
    assert_false(score_as("gpqa", GPQA, "0.9", NULL));
    assert_false(score_as("gpqa", GPQA, "B. 0.9", NULL));
    assert_true(score_as("medqa", MEDQA, "colorectal cancer", NULL));
    assert_true(score_as("medqa", MEDQA, "<answer>C. Colorectal cancer</answer>", NULL));
    assert_true(score_as("medqa", MEDQA, "c", NULL));
    assert_false(score_as("medqa", MEDQA, "Oral ulcers", NULL));
    assert_false(score_as("medqa", MEDQA, "(A)", NULL));
    assert_false(score_as("medqa", MEDQA, "Cancer of some sort", NULL));
    /* MedQA item 255: the gold option's text is the letter-like "X". */
    const char *roman = "{\"options\": [\"A. VII\", \"B. VIIa\", \"C. X\", \"D. XII\"], "
                        "\"answer\": \"X\"}";
    assert_true(score_as("medqa", roman, "X", NULL));
    assert_true(score_as("medqa", roman, "C", NULL));
    assert_false(score_as("medqa", roman, "XII", NULL));
    assert_false(score_as("medqa", roman, "E", NULL));
}

static void test_errors(void **state)
{
    (void)state;
    json_t *item = json_loads("{\"answer\": \"x\"}", 0, NULL);
    struct af_score s;
    char err[128];
    assert_int_equal(af_score_item("nope", item, "x", &s, err, sizeof err), AF_ENOTFOUND);
    assert_null(s.extracted);
    assert_int_equal(af_score_item("gpqa", item, "x", &s, err, sizeof err), AF_EPARSE);
    assert_int_equal(af_score_item("gameof24", item, "x", &s, err, sizeof err), AF_EPARSE);
    af_score_deinit(&s);
    af_score_deinit(NULL);
    json_decref(item);
    const char *const *names = af_score_benchmarks();
    size_t n = 0;
    for (; names[n]; n++) {
        const char *b = names[n];
        int qa = strcmp(b, "2wiki") == 0 || strcmp(b, "bamboogle") == 0 ||
                 strcmp(b, "hotpotqa") == 0 || strcmp(b, "musique") == 0;
        assert_int_equal(af_score_reports_f1(b), qa);
    }
    assert_int_equal(n, 10);
}

/* Loads item 0 of <data>/<bench>/data.json, or NULL when the shared data is absent. */
static json_t *load_item0(const char *bench, json_t **all)
{
    char path[1024];
    const char *data = getenv("AGENTFLOW_DATA"), *src = getenv("AGENTFLOW_SRC");
    if (data && *data)
        snprintf(path, sizeof path, "%s/%s/data.json", data, bench);
    else if (src && *src)
        snprintf(path, sizeof path, "%s/../shared/data/benchmarks/%s/data.json", src, bench);
    else
        snprintf(path, sizeof path, "../shared/data/benchmarks/%s/data.json", bench);
    *all = json_load_file(path, 0, NULL);
    return json_is_array(*all) ? json_array_get(*all, 0) : NULL;
}

/* Scores the gold rendered as a model would, and a wrong answer, for item 0 of `bench`. */
static void check_real(const char *bench)
{
    json_t *all = NULL, *item = load_item0(bench, &all);
    if (!item) {
        json_decref(all);
        print_message("shared data for %s not found; skipping\n", bench);
        skip();
    }
    const json_t *ans = json_object_get(item, "answer");
    char good[1024], bad[1024];
    if (af_score_reports_f1(bench) || strcmp(bench, "gaia") == 0 ||
        strcmp(bench, "gameof24") == 0) {
        const json_t *g = json_is_array(ans) ? json_array_get(ans, 0) : ans;
        snprintf(good, sizeof good, "<answer>%s</answer>", json_string_value(g));
        snprintf(bad, sizeof bad, "%s", strcmp(bench, "gameof24") == 0 ? "1+1+1+8" : "zq wrong");
    } else if (strcmp(bench, "aime24") == 0 || strcmp(bench, "amc23") == 0) {
        snprintf(good, sizeof good, "So the answer is \\boxed{%lld}.",
                 (long long)json_integer_value(ans));
        snprintf(bad, sizeof bad, "\\boxed{%lld}", (long long)json_integer_value(ans) + 1);
    } else if (strcmp(bench, "gpqa") == 0) {
        json_int_t idx = json_integer_value(json_object_get(item, "answer_idx"));
        snprintf(good, sizeof good, "Answer: %c", (char)('A' + idx));
        snprintf(bad, sizeof bad, "Answer: %c", (char)('A' + (idx + 1) % 4));
    } else { /* medqa: the gold text; the wrong one is another option's text */
        const json_t *opts = json_object_get(item, "options");
        snprintf(good, sizeof good, "%s", json_string_value(ans));
        const char *o0 = json_string_value(json_array_get(opts, 0));
        const char *o1 = json_string_value(json_array_get(opts, 1));
        snprintf(bad, sizeof bad, "%s", strstr(o0, json_string_value(ans)) ? o1 + 3 : o0 + 3);
    }
    struct af_score s;
    char err[256] = "";
    assert_int_equal(af_score_item(bench, item, good, &s, err, sizeof err), AF_OK);
    if (!s.correct)
        fail_msg("%s item 0: gold rendering \"%s\" scored wrong", bench, good);
    af_score_deinit(&s);
    assert_int_equal(af_score_item(bench, item, bad, &s, err, sizeof err), AF_OK);
    if (s.correct)
        fail_msg("%s item 0: wrong answer \"%s\" scored right", bench, bad);
    af_score_deinit(&s);
    json_decref(all);
}

#define REAL(name, bench)                                                                          \
    static void name(void **state)                                                                 \
    {                                                                                              \
        (void)state;                                                                               \
        check_real(bench);                                                                         \
    }
REAL(test_real_2wiki, "2wiki")
REAL(test_real_aime24, "aime24")
REAL(test_real_amc23, "amc23")
REAL(test_real_bamboogle, "bamboogle")
REAL(test_real_gaia, "gaia")
REAL(test_real_gameof24, "gameof24")
REAL(test_real_gpqa, "gpqa")
REAL(test_real_hotpotqa, "hotpotqa")
REAL(test_real_medqa, "medqa")
REAL(test_real_musique, "musique")

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_extract),    cmocka_unit_test(test_game24),
        cmocka_unit_test(test_numbers),    cmocka_unit_test(test_qa),
        cmocka_unit_test(test_gaia),       cmocka_unit_test(test_normalised_forms),
        cmocka_unit_test(test_mcq),        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_real_2wiki), cmocka_unit_test(test_real_aime24),
        cmocka_unit_test(test_real_amc23), cmocka_unit_test(test_real_bamboogle),
        cmocka_unit_test(test_real_gaia),  cmocka_unit_test(test_real_gameof24),
        cmocka_unit_test(test_real_gpqa),  cmocka_unit_test(test_real_hotpotqa),
        cmocka_unit_test(test_real_medqa), cmocka_unit_test(test_real_musique),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
