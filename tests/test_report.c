/*
 * test_report.c - `agentflow eval report`: a hand-written RUNDIR (two benchmarks, two trials,
 * some judge verdicts, malformed and torn lines in results.jsonl, a missing and a torn trace,
 * <script> and URLs in the data, a field over the 20 KB cap) reported through the library and
 * through the CLI: exact numbers in report.md, SVG charts and escaped text in report.html, no
 * URL outside escaped data, the item pages; bad input (exit 4 naming the file); and an end-to-
 * end run of `eval run` against the scripted back-end followed by `eval report`.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fileio.h"
#include "eval/report.h"
#include "support/proc.h"

#define RUN_TIMEOUT_S 300.0

static char g_dir[64];

static const char *tmp_path(const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", g_dir, name);
    return buf;
}

static void write_file(const char *path, const char *text)
{
    char err[256];
    assert_int_equal(af_file_write_atomic(path, text, strlen(text), err, sizeof err), 0);
}

static char *read_file(const char *dir, const char *rel)
{
    char path[1024], *text = NULL, err[256];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    if (af_file_read(path, 1 << 28, &text, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        fail();
    }
    return text;
}

static void rm_rf(const char *path)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
}

static int contains(const char *hay, const char *needle)
{
    if (!strstr(hay, needle))
        fprintf(stderr, "expected to find: %s\n", needle);
    return strstr(hay, needle) != NULL;
}

static size_t count_of(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

/* --- the fixture ------------------------------------------------------------------------ */

struct fx_line {
    const char *bench;
    int index, trial;
    int rule;  /* 0/1 */
    int judge; /* 1, 0, -1 null, -2 absent */
    int steps;
    double latency_ms;
    const char *tools; /* a JSON array */
    int planner_calls, planner_prompt, planner_completion;
    double f1; /* < 0: none */
};

/* aime24: items 0..2, trials 0..1; hotpotqa: items 0..1, trials 0..1 (see the expected
 * numbers in test_report_numbers). */
static const struct fx_line fx_lines[] = {
    {"aime24", 0, 0, 1, 1, 1, 1000, "[\"Python_Coder_Tool\"]", 2, 100, 10, -1},
    {"aime24", 1, 0, 1, 0, 2, 2000, "[\"Python_Coder_Tool\",\"Python_Coder_Tool\"]", 2, 100, 10,
     -1},
    {"aime24", 2, 0, 0, -2, 3, 3000, "[\"Web_Search_Tool\"]", 2, 100, 10, -1},
    {"aime24", 0, 1, 1, 1, 1, 1000, "[]", 2, 100, 10, -1},
    {"aime24", 1, 1, 0, 1, 1, 1000, "[\"Python_Coder_Tool\"]", 2, 100, 10, -1},
    {"aime24", 2, 1, 0, -1, 4, 4000, "[\"Web_Search_Tool\",\"Python_Coder_Tool\"]", 4, 400, 40, -1},
    {"hotpotqa", 0, 0, 1, -2, 3, 500, "[]", 1, 10, 2, 1.0},
    {"hotpotqa", 1, 0, 0, -2, 3, 500, "[]", 1, 10, 2, 0.5},
    {"hotpotqa", 0, 1, 1, -2, 3, 500, "[]", 1, 10, 2, 1.0},
    {"hotpotqa", 1, 1, 0, -2, 3, 500, "[]", 1, 10, 2, 0.0},
};
#define N_FX (sizeof fx_lines / sizeof fx_lines[0])

static char *fx_result_line(const struct fx_line *f)
{
    char trace[128];
    snprintf(trace, sizeof trace, "traces/%s-%d-%d.jsonl", f->bench, f->index, f->trial);
    json_t *tools = json_loads(f->tools, 0, NULL);
    json_t *correct = json_pack("{s:b}", "rule", f->rule);
    if (f->judge >= 0)
        json_object_set_new(correct, "judge", json_boolean(f->judge));
    else if (f->judge == -1)
        json_object_set_new(correct, "judge", json_null());
    json_t *j = json_pack(
        "{s:s,s:i,s:i,s:s,s:s,s:s,s:s,s:o,s:i,s:o,s:{s:{s:i,s:i,s:i},s:{s:i,s:i,s:i}},s:f,s:s}",
        "bench", f->bench, "index", f->index, "trial", f->trial, "query",
        "What is <script>alert('x')</script>? See https://example.org/q", "gold", "42 & <b>",
        "answer", "Answer: 42", "extracted", "42", "correct", correct, "steps", f->steps, "tools",
        tools, "tokens", "planner", "calls", f->planner_calls, "prompt_tokens", f->planner_prompt,
        "completion_tokens", f->planner_completion, "executor", "calls", 1, "prompt_tokens", 50,
        "completion_tokens", 5, "latency_ms", f->latency_ms, "trace", trace);
    assert_non_null(j);
    if (f->f1 >= 0)
        json_object_set_new(j, "f1", json_real(f->f1));
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}

/* A trace: an llm record with <script> and a URL in the response, a tool record, a final
 * record; `big` adds a 30 KB response; `torn` ends with half a record. */
static void fx_trace(const char *rundir, const struct fx_line *f, int big, int torn)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/traces/%s-%d-%d.jsonl", rundir, f->bench, f->index, f->trial);
    char *resp = malloc(30001);
    memset(resp, 'z', 30000);
    resp[30000] = '\0';
    json_t *llm = json_pack(
        "{s:s,s:s,s:i,s:s,s:s,s:s,s:[{s:s,s:s}],s:s,s:{s:i,s:i},s:f}", "type", "llm", "query_id",
        "x", "step", 1, "module", "planner", "slot", "planner", "model", "m-1", "messages", "role",
        "user", "content", "PROMPT-TEXT <img src=x onerror=alert(1)>", "response",
        big ? resp : "RESPONSE <script>steal()</script> from http://evil.example/a.js", "usage",
        "prompt_tokens", 7, "completion_tokens", 3, "latency_ms", 12.0);
    json_t *tool = json_pack("{s:s,s:i,s:s,s:i,s:s,s:{s:s},s:s,s:f}", "type", "tool", "step", 1,
                             "tool", "Python_Coder_Tool", "call_index", 0, "command",
                             "execution = tool.execute(query=\"x\")", "args", "query", "x",
                             "result", "TOOL-RESULT \"quoted\" 'single'", "duration_ms", 3.0);
    json_t *fin = json_pack("{s:s,s:i,s:s,s:i}", "type", "final", "step", 2, "answer",
                            "FINAL-ANSWER 42", "steps", 1);
    char *a = json_dumps(llm, JSON_COMPACT), *b = json_dumps(tool, JSON_COMPACT),
         *c = json_dumps(fin, JSON_COMPACT);
    size_t n = strlen(a) + strlen(b) + strlen(c) + 64;
    char *text = malloc(n);
    snprintf(text, n, "%s\n%s\n%s\n%s", a, b, c, torn ? "{\"type\":\"tool\",\"ste" : "");
    write_file(path, text);
    free(text);
    free(a);
    free(b);
    free(c);
    free(resp);
    json_decref(llm);
    json_decref(tool);
    json_decref(fin);
}

/* Writes the RUNDIR fixture; the trace of aime24-2-1 is missing. */
static void write_fixture(const char *rundir)
{
    char path[1024];
    rm_rf(rundir);
    assert_int_equal(mkdir(rundir, 0777), 0);
    snprintf(path, sizeof path, "%s/traces", rundir);
    assert_int_equal(mkdir(path, 0777), 0);
    size_t cap = 1 << 16, len = 0;
    char *text = calloc(1, cap);
    for (size_t i = 0; i < N_FX; i++) {
        char *l = fx_result_line(&fx_lines[i]);
        len += (size_t)snprintf(text + len, cap - len, "%s\n", l);
        free(l);
        if (i == 3) /* line 5: not JSON; line 6: no bench */
            len += (size_t)snprintf(text + len, cap - len, "not json at all\n{\"index\":1}\n");
        if (!(fx_lines[i].index == 2 && fx_lines[i].trial == 1))
            fx_trace(rundir, &fx_lines[i], i == 0, i == 1);
    }
    /* a torn last line, as a kill in mid-write leaves */
    snprintf(text + len, cap - len, "{\"bench\":\"aime24\",\"index\":9,\"tri");
    snprintf(path, sizeof path, "%s/results.jsonl", rundir);
    write_file(path, text);
    free(text);
}

/* --- checks ----------------------------------------------------------------------------- */

static void check_markdown(const char *md)
{
    assert_true(contains(md, "Skipped 3 malformed or duplicate line(s) of results.jsonl "
                             "(first: line 5)."));
    assert_true(contains(md, "10 result line(s) in 2 benchmark(s)."));
    /* aime24: rule per trial 66.67, 33.33 -> 50.0 ± 16.7; judge 1/2, 2/2 -> 75.0 ± 25.0 */
    assert_true(contains(md, "## aime24\n\n"));
    assert_true(contains(md, "| 3 | 2 | 6 | 50.0 \xC2\xB1 16.7 | 75.0 \xC2\xB1 25.0 | 4 | "
                             "\xE2\x80\x93 | 2.00 | 2.00 | 12.00 |\n"));
    assert_true(contains(md, "Rule accuracy per trial (%): 66.7, 33.3\n"));
    assert_true(contains(md, "| Python_Coder_Tool | 66.7 | 0.83 |\n"));
    assert_true(contains(md, "| Web_Search_Tool | 33.3 | 0.33 |\n"));
    assert_true(contains(md, "| executor | 1.00 | 50.0 | 5.0 | 55.0 |\n"));
    assert_true(contains(md, "| planner | 2.33 | 150.0 | 15.0 | 165.0 |\n"));
    assert_true(contains(md, "| **all modules** | 3.33 | 200.0 | 20.0 | 220.0 |\n"));
    /* hotpotqa: rule 50, 50 -> 50.0 ± 0.0; no judge; F1 (1 + .5 + 1 + 0) / 4 */
    assert_true(contains(md, "| 2 | 2 | 4 | 50.0 \xC2\xB1 0.0 | \xE2\x80\x93 | 0 | 62.5 | 3.00 "
                             "| 0.50 | 2.00 |\n"));
    /* the overall table: all pools per trial: 3/5, 2/5 -> 50.0 ± 10.0; tokens per run: aime24
     * (5 * 165 + 495 + 6 * 55) / 6 = 220, hotpotqa 12 + 55 = 67, all (1320 + 268) / 10 */
    assert_true(contains(md, "| aime24 | 3 | 2 | 6 | 50.0 \xC2\xB1 16.7 | 75.0 \xC2\xB1 25.0 | "
                             "2.00 | 220.0 | 2.00 | 12.00 |\n"));
    assert_true(contains(md, "| hotpotqa | 2 | 2 | 4 | 50.0 \xC2\xB1 0.0 | \xE2\x80\x93 | 3.00 | "
                             "67.0 | 0.50 | 2.00 |\n"));
    assert_true(contains(md, "| **all** | 5 | 2 | 10 | 50.0 \xC2\xB1 10.0 | 75.0 \xC2\xB1 25.0 | "
                             "2.40 | 158.8 | 1.40 | 14.00 |\n"));
    /* the order: per bench, then all */
    assert_true(strstr(md, "## aime24") < strstr(md, "## hotpotqa"));
    assert_true(strstr(md, "## hotpotqa") < strstr(md, "## All benchmarks"));
    assert_null(strstr(md, "<script"));
}

/* Every http:// or https:// in html must be in text content (outside any tag), i.e. data. */
static void check_urls_in_text_only(const char *html)
{
    static const char *const schemes[] = {"http://", "https://"};
    for (size_t s = 0; s < 2; s++)
        for (const char *p = html; (p = strstr(p, schemes[s])) != NULL; p++) {
            const char *lt = NULL, *gt = NULL;
            for (const char *q = html; q < p; q++) {
                if (*q == '<')
                    lt = q;
                else if (*q == '>')
                    gt = q;
            }
            if (lt && (!gt || gt < lt))
                fprintf(stderr, "URL inside a tag at offset %zu\n", (size_t)(p - html));
            assert_true(!lt || (gt && gt > lt));
        }
}

/* Every tag in html is one the report writes itself (data never adds a tag). */
static void check_tags(const char *html)
{
    static const char *const ok[] = {"!DOCTYPE", "html",    "head", "meta", "title", "style",
                                     "body",     "h1",      "h2",   "h3",   "p",     "a",
                                     "table",    "tr",      "th",   "td",   "pre",   "details",
                                     "summary",  "section", "code", "span", "div",   "hr",
                                     "svg",      "rect",    "line", "text"};
    for (const char *p = strchr(html, '<'); p; p = strchr(p + 1, '<')) {
        const char *name = p[1] == '/' ? p + 2 : p + 1;
        size_t n = strcspn(name, " >\n/");
        int found = 0;
        for (size_t i = 0; i < sizeof ok / sizeof ok[0] && !found; i++)
            found = strlen(ok[i]) == n && strncmp(ok[i], name, n) == 0;
        if (!found)
            fprintf(stderr, "unexpected tag <%.*s\n", (int)n, name);
        assert_true(found);
    }
}

static void check_no_active_content(const char *html)
{
    assert_null(strstr(html, "<script"));
    assert_null(strstr(html, "<img"));
    assert_null(strstr(html, "<link"));
    assert_null(strstr(html, "@import"));
    check_tags(html);
    check_urls_in_text_only(html);
}

static void check_main_html(const char *html)
{
    assert_true(contains(html, "<!DOCTYPE html>"));
    assert_true(count_of(html, "<svg") >= 3);
    assert_true(count_of(html, "</svg>") == count_of(html, "<svg"));
    assert_true(contains(html, "Accuracy per benchmark"));
    assert_true(contains(html, "Steps per run"));
    assert_true(contains(html, "Tool usage (% of runs"));
    assert_true(contains(html, "<td>50.0 \xC2\xB1 16.7</td><td>75.0 \xC2\xB1 25.0</td>"));
    assert_true(contains(html, "<td>50.0 \xC2\xB1 10.0</td><td>75.0 \xC2\xB1 25.0</td><td>2.40"));
    assert_true(contains(html, "Skipped 3 malformed"));
    assert_true(contains(html, "href=\"report/items/aime24-0-0.html\""));
    assert_true(contains(html, "href=\"report/items/hotpotqa-1-1.html\""));
    assert_true(contains(html, "42 &amp; &lt;b&gt;")); /* the gold, escaped */
    check_no_active_content(html);
}

static void check_item_pages(const char *rundir)
{
    size_t n = 0;
    for (size_t i = 0; i < N_FX; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "report/items/%s-%d-%d.html", fx_lines[i].bench,
                 fx_lines[i].index, fx_lines[i].trial);
        char *page = read_file(rundir, rel);
        check_no_active_content(page);
        assert_true(contains(page, "What is &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;?"));
        if (fx_lines[i].index == 2 && fx_lines[i].trial == 1 && fx_lines[i].bench[0] == 'a') {
            assert_true(contains(page, "The trace is missing"));
        } else {
            assert_true(contains(page, "PROMPT-TEXT &lt;img src=x onerror=alert(1)&gt;"));
            assert_true(contains(page, "Python_Coder_Tool"));
            assert_true(contains(page, "TOOL-RESULT &quot;quoted&quot; &#39;single&#39;"));
            assert_true(contains(page, "FINAL-ANSWER 42"));
        }
        if (i == 0) {
            assert_true(contains(page, "Truncated: the first 20 KB of 30000 bytes"));
            char *zs = malloc(20482);
            memset(zs, 'z', 20481);
            zs[20481] = '\0';
            assert_null(strstr(page, zs)); /* not more than the cap */
            zs[20480] = '\0';
            assert_non_null(strstr(page, zs)); /* the whole cap */
            free(zs);
        } else if (strstr(page, "PROMPT-TEXT")) {
            assert_true(contains(page, "RESPONSE &lt;script&gt;steal()&lt;/script&gt; from "
                                       "http://evil.example/a.js"));
        }
        if (i == 1)
            assert_true(contains(page, "torn last line"));
        /* tokens per module and the tools as tables, not JSON dumps */
        assert_true(contains(page, "<th>prompt_tokens</th>"));
        assert_true(contains(page, "<tr><th class=\"l\">planner</th>"));
        assert_null(strstr(page, "&quot;prompt_tokens&quot;"));
        free(page);
        n++;
    }
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/report/items", rundir);
    DIR *d = opendir(dir);
    assert_non_null(d);
    size_t entries = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        entries += e->d_name[0] != '.';
    closedir(d);
    assert_int_equal(entries, n); /* no temp file left, no page for a skipped line */
}

static void check_rundir(const char *rundir)
{
    char *md = read_file(rundir, "report.md");
    check_markdown(md);
    free(md);
    char *html = read_file(rundir, "report.html");
    check_main_html(html);
    free(html);
    check_item_pages(rundir);
}

/* --- tests ------------------------------------------------------------------------------ */

static void test_report_library(void **state)
{
    (void)state;
    char rundir[512], err[1024];
    tmp_path("run_lib", rundir, sizeof rundir);
    write_fixture(rundir);
    struct eval_report_info info;
    assert_int_equal(eval_report_write(rundir, &info, err, sizeof err), AF_OK);
    assert_int_equal(info.n_lines, N_FX);
    assert_int_equal(info.n_skipped, 3);
    assert_int_equal(info.first_bad, 5);
    assert_int_equal(info.n_benches, 2);
    assert_int_equal(info.n_pages, N_FX);
    assert_int_equal(info.n_no_trace, 1);
    check_rundir(rundir);
    /* a second report over the same folder replaces the files */
    assert_int_equal(eval_report_write(rundir, NULL, err, sizeof err), AF_OK);
    check_rundir(rundir);
    rm_rf(rundir);
}

static void test_report_bad_input(void **state)
{
    (void)state;
    char rundir[512], path[600], err[1024];
    tmp_path("run_missing", rundir, sizeof rundir);
    rm_rf(rundir);
    assert_int_equal(eval_report_write(rundir, NULL, err, sizeof err), AF_ENOTFOUND);
    assert_true(contains(err, rundir));
    assert_int_equal(mkdir(rundir, 0777), 0);
    assert_int_equal(eval_report_write(rundir, NULL, err, sizeof err), AF_ENOTFOUND);
    assert_true(contains(err, "results.jsonl"));
    /* only garbage: every line skipped, an empty report, no crash */
    snprintf(path, sizeof path, "%s/results.jsonl", rundir);
    write_file(path, "\x01\x02garbage\n[1,2]\n{\"bench\":\"x\",\"index\":-1,\"trial\":0}\n"
                     "{\"bench\":\"x\",\"index\":0,\"trial\":0,\"steps\":\"many\",\"tools\":"
                     "{\"a\":1},\"tokens\":[1],\"correct\":7,\"trace\":\"../../etc/passwd\"}\n"
                     "{\"bench\":\"x\",\"index\":0,\"trial\":0}\n\n   \n{");
    struct eval_report_info info;
    assert_int_equal(eval_report_write(rundir, &info, err, sizeof err), AF_OK);
    assert_int_equal(info.n_lines, 1);
    assert_int_equal(info.n_skipped, 5); /* 3 bad, 1 duplicate, 1 torn */
    assert_int_equal(info.first_bad, 1);
    assert_int_equal(info.n_no_trace, 1);
    char *md = read_file(rundir, "report.md");
    assert_true(contains(md, "| 1 | 1 | 1 | 0.0 \xC2\xB1 0.0 |"));
    free(md);
    char *page = read_file(rundir, "report/items/x-0-0.html");
    assert_true(contains(page, "The trace is missing"));
    free(page);
    /* an empty results file */
    write_file(path, "");
    assert_int_equal(eval_report_write(rundir, &info, err, sizeof err), AF_OK);
    assert_int_equal(info.n_lines, 0);
    char *html = read_file(rundir, "report.html");
    assert_true(contains(html, "no data"));
    free(html);
    rm_rf(rundir);
}

static void test_report_cli(void **state)
{
    (void)state;
    char rundir[512], missing[512];
    tmp_path("run_cli", rundir, sizeof rundir);
    write_fixture(rundir);
    struct proc_result r;
    const char *argv[] = {proc_agentflow_bin(), "eval", "report", rundir, NULL};
    assert_int_equal(proc_run(argv, NULL, RUN_TIMEOUT_S, &r), 0);
    if (r.exit_code != 0)
        fprintf(stderr, "stderr: %s\n", r.err);
    assert_int_equal(r.exit_code, 0);
    assert_true(contains(r.err, "skipped 3 malformed or duplicate line(s) (first: line 5)"));
    assert_true(contains(r.out, "10 item page(s)"));
    proc_result_deinit(&r);
    check_rundir(rundir);
    /* a missing RUNDIR, a RUNDIR without results.jsonl: exit 4 naming it */
    tmp_path("run_cli_missing", missing, sizeof missing);
    rm_rf(missing);
    const char *bad[] = {proc_agentflow_bin(), "eval", "report", missing, NULL};
    assert_int_equal(proc_run(bad, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 4);
    assert_true(contains(r.err, missing));
    proc_result_deinit(&r);
    assert_int_equal(mkdir(missing, 0777), 0);
    assert_int_equal(proc_run(bad, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 4);
    assert_true(contains(r.err, "results.jsonl"));
    proc_result_deinit(&r);
    /* usage */
    const char *none[] = {proc_agentflow_bin(), "eval", "report", NULL};
    assert_int_equal(proc_run(none, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 2);
    proc_result_deinit(&r);
    const char *help[] = {proc_agentflow_bin(), "eval", "report", "--help", NULL};
    assert_int_equal(proc_run(help, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 0);
    assert_true(contains(r.out, "report.html"));
    proc_result_deinit(&r);
    const char *top[] = {proc_agentflow_bin(), "eval", "--help", NULL};
    assert_int_equal(proc_run(top, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_true(contains(r.out, "eval report RUNDIR"));
    proc_result_deinit(&r);
    rm_rf(missing);
    rm_rf(rundir);
}

/* --- end to end: eval run (scripted back-end), then eval report ------------------------- */

/* The scripted back-end's rules for one step with the generalist tool, then STOP (as in
 * test_eval.c), and a generator answer per item: k, or k + 100 (wrong) when k % 3 == 0. */
static json_t *e2e_rules(int n)
{
    static const char *const fixed[][2] = {
        {"Judge whether the work", "Enough.\nConclusion: STOP"},
        {"Before any tool is used", "Concise Summary: answer it.\nRequired Skills: reading\n"
                                    "Relevant Tools: Generalist_Solution_Generator_Tool\n"
                                    "Additional Considerations: none"},
        {"You decide the single next action",
         "Justification: one look.\nContext: none.\nSub-Goal: Answer the query.\n"
         "Tool Name: Generalist_Solution_Generator_Tool"},
        {"Write the Python call",
         "Analysis: one call.\nCommand Explanation: ask.\nGenerated Command:\n```python\n"
         "execution = tool.execute(query=\"What is 6 * 7?\")\n```"},
        {"What is 6 * 7?", "6 * 7 = 42."},
    };
    json_t *rules = json_array();
    for (int k = 0; k < n; k++) {
        char match[160], reply[160];
        snprintf(match, sizeof match,
                 "The query once more:\nProblem number %d. What is %d plus zero?\n\nReply in two",
                 k, k);
        snprintf(reply, sizeof reply, "**Process Summary:** looked.\n**Answer:** %d",
                 k % 3 ? k : k + 100);
        json_array_append_new(rules, json_pack("{s:s,s:s}", "match", match, "reply", reply));
    }
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        json_array_append_new(rules,
                              json_pack("{s:s,s:s}", "match", fixed[i][0], "reply", fixed[i][1]));
    return rules;
}

static void e2e_fixture(const char *datadir, const char *script, int n)
{
    char path[600];
    mkdir(datadir, 0777);
    snprintf(path, sizeof path, "%s/aime24", datadir);
    mkdir(path, 0777);
    json_t *items = json_array();
    for (int k = 0; k < n; k++) {
        char q[128];
        snprintf(q, sizeof q, "Problem number %d. What is %d plus zero?", k, k);
        json_array_append_new(items,
                              json_pack("{s:s,s:i,s:s}", "query", q, "answer", k, "pid", "p"));
    }
    char *text = json_dumps(items, 0);
    snprintf(path, sizeof path, "%s/aime24/data.json", datadir);
    write_file(path, text);
    free(text);
    json_decref(items);
    json_t *doc = json_pack("{s:o}", "rules", e2e_rules(n));
    text = json_dumps(doc, 0);
    write_file(script, text);
    free(text);
    json_decref(doc);
}

static void test_report_end_to_end(void **state)
{
    (void)state;
    char datadir[512], script[512], url[600], rundir[512];
    tmp_path("data_e2e", datadir, sizeof datadir);
    tmp_path("e2e.json", script, sizeof script);
    tmp_path("run_e2e", rundir, sizeof rundir);
    e2e_fixture(datadir, script, 3);
    snprintf(url, sizeof url, "scripted:%s", script);
    const char *run[] = {proc_agentflow_bin(),
                         "eval",
                         "run",
                         "--bench",
                         "aime24",
                         "--data-dir",
                         datadir,
                         "--out",
                         rundir,
                         "--url",
                         url,
                         "--max-steps",
                         "1",
                         "--tools",
                         "Generalist_Solution_Generator_Tool",
                         "--trials",
                         "2",
                         "--no-cache",
                         "--quiet",
                         NULL};
    struct proc_result r;
    assert_int_equal(proc_run(run, NULL, RUN_TIMEOUT_S, &r), 0);
    if (r.exit_code != 0)
        fprintf(stderr, "eval run: exit %d, stderr: %s\n", r.exit_code, r.err);
    assert_int_equal(r.exit_code, 0);
    proc_result_deinit(&r);
    const char *rep[] = {proc_agentflow_bin(), "eval", "report", rundir, NULL};
    assert_int_equal(proc_run(rep, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 0);
    assert_true(contains(r.out, "6 item page(s)"));
    assert_true(contains(r.out, "0 run(s) without a trace"));
    proc_result_deinit(&r);
    /* item 0 is wrong in both trials, 1 and 2 right: 66.7 % each trial */
    char *md = read_file(rundir, "report.md");
    assert_true(contains(md, "| 3 | 2 | 6 | 66.7 \xC2\xB1 0.0 | \xE2\x80\x93 | 0 | "));
    assert_true(contains(md, "| Generalist_Solution_Generator_Tool | 100.0 | 1.00 |\n"));
    assert_true(contains(md, "| planner |"));
    free(md);
    char *html = read_file(rundir, "report.html");
    check_no_active_content(html);
    assert_true(count_of(html, "<svg") >= 3);
    free(html);
    char *page = read_file(rundir, "report/items/aime24-1-1.html");
    check_no_active_content(page);
    assert_true(contains(page, "LLM call: planner"));
    assert_true(contains(page, "tool call: Generalist_Solution_Generator_Tool"));
    assert_true(contains(page, "final record"));
    assert_true(contains(page, "Problem number 1. What is 1 plus zero?"));
    assert_null(strstr(page, "The trace is"));
    free(page);
    rm_rf(rundir);
    rm_rf(datadir);
    unlink(script);
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/af_report_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    rm_rf(g_dir);
    return 0;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest lib_tests[] = {
        cmocka_unit_test(test_report_library),
        cmocka_unit_test(test_report_bad_input),
    };
    int rc = cmocka_run_group_tests_name("report", lib_tests, setup, teardown);
    if (access(proc_agentflow_bin(), X_OK) != 0) {
        fprintf(stderr, "test_report: %s not built; the CLI tests need it (run 'make')\n",
                proc_agentflow_bin());
        return rc ? rc : 1;
    }
    const struct CMUnitTest cli_tests[] = {
        cmocka_unit_test(test_report_cli),
        cmocka_unit_test(test_report_end_to_end),
    };
    return rc | cmocka_run_group_tests_name("report_cli", cli_tests, setup, teardown);
}
