/*
 * report_html.c - the HTML of `agentflow eval report`: report.html (the tables of report.md,
 * inline-SVG charts of accuracy, steps and tool usage, a table of every run linking to its
 * page) and one page per run with its whole trace (prompts, responses, tool calls and
 * results, the final record).
 *
 * Pages are self-contained and offline: inline CSS, no script, no external reference. Every
 * piece of data is HTML-escaped; long fields show their first REPORT_FIELD_CAP bytes with a
 * note. A missing, unreadable or torn trace is said so on the page.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/jsonx.h"
#include "core/xalloc.h"
#include "eval/report.h"
#include "eval/svg.h"

#define REPORT_FIELD_CAP 20480          /* bytes of a long field shown */
#define REPORT_CELL_CAP 120             /* bytes of a field in the runs table */
#define REPORT_TRACE_LIMIT (1ull << 30) /* a larger trace is not shown */
#define REPORT_OPEN_ROWS 200            /* runs tables longer than this start folded */
#define DASH "\xE2\x80\x93"
#define PM "\xC2\xB1"

static const char report_css[] =
    "body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:78em;padding:0 1em;"
    "color:#222}table{border-collapse:collapse;margin:.6em 0 1.2em}th,td{border:1px solid #ccc;"
    "padding:.25em .6em;text-align:right;vertical-align:top}th{background:#f2f2f2}"
    "td.l,th.l{text-align:left}pre{white-space:pre-wrap;word-break:break-word;background:#f7f7f7;"
    "border:1px solid #e3e3e3;padding:.5em;margin:.3em 0;max-height:40em;overflow:auto}"
    ".ok{color:#17702a;font-weight:bold}.bad{color:#b00020;font-weight:bold}.note{color:#8a5a00}"
    ".rec{border-left:4px solid #4e79a7;padding:.2em .8em;margin:1em 0}.rec.tool{border-color:"
    "#f28e2b}.rec.final{border-color:#59a14f}.rec.bad{border-color:#b00020}h3{margin:.3em 0}"
    "svg.chart{margin:.5em 1em .5em 0;border:1px solid #eee}summary{cursor:pointer}"
    "table.inner{margin:0}";

static void page_head(struct af_buf *b, const char *title)
{
    (void)af_buf_puts(b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                         "<title>");
    svg_escape(b, title);
    (void)af_buf_printf(b, "</title>\n<style>%s</style></head>\n<body>\n", report_css);
}

/* Appends s[0..len) escaped, cut to `cap` bytes at a UTF-8 boundary; returns 1 when cut. */
static int text_capped(struct af_buf *b, const char *s, size_t len, size_t cap)
{
    if (len <= cap) {
        svg_escape_n(b, s, len);
        return 0;
    }
    size_t cut = cap;
    while (cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80)
        cut--;
    svg_escape_n(b, s, cut);
    return 1;
}

/* A <pre> of s (NULL: nothing), capped at REPORT_FIELD_CAP with a note. */
static void pre_text(struct af_buf *b, const char *s)
{
    if (!s)
        return;
    size_t len = strlen(s);
    (void)af_buf_puts(b, "<pre>");
    int cut = text_capped(b, s, len, REPORT_FIELD_CAP);
    (void)af_buf_puts(b, "</pre>\n");
    if (cut)
        (void)af_buf_printf(b,
                            "<p class=\"note\">Truncated: the first %d KB of %zu bytes are "
                            "shown.</p>\n",
                            REPORT_FIELD_CAP / 1024, len);
}

/* A <pre> of a JSON value: a string as its text, anything else as indented JSON. */
static void pre_json(struct af_buf *b, const json_t *v)
{
    if (json_is_string(v)) {
        pre_text(b, json_string_value(v));
        return;
    }
    char *s = v ? json_dumps(v, JSON_INDENT(1) | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER) : NULL;
    pre_text(b, s ? s : "null");
    free(s);
}

/* A short cell text of a JSON value (strings as text, others as compact JSON). */
static void cell_json(struct af_buf *b, const json_t *v)
{
    if (!v || json_is_null(v)) {
        (void)af_buf_puts(b, DASH);
        return;
    }
    char *s = json_is_string(v) ? NULL : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    const char *t = s ? s : json_string_value(v);
    if (!t)
        t = "";
    if (text_capped(b, t, strlen(t), REPORT_CELL_CAP))
        (void)af_buf_puts(b, "\xE2\x80\xA6");
    free(s);
}

static void verdict(struct af_buf *b, const json_t *v)
{
    if (json_is_boolean(v))
        (void)af_buf_puts(b, json_is_true(v) ? "<span class=\"ok\">yes</span>"
                                             : "<span class=\"bad\">no</span>");
    else
        (void)af_buf_puts(b, DASH);
}

/* --- report.html: tables ------------------------------------------------------------------ */

static void td_acc(struct af_buf *b, double mean, double std, int have)
{
    if (have)
        (void)af_buf_printf(b, "<td>%.1f " PM " %.1f</td>", mean, std);
    else
        (void)af_buf_puts(b, "<td>" DASH "</td>");
}

static void html_tools(struct af_buf *b, const struct report_stats *st)
{
    if (!st->n_tools) {
        (void)af_buf_puts(b, "<p>No tool calls.</p>\n");
        return;
    }
    double n = st->n_runs ? (double)st->n_runs : 1.0;
    (void)af_buf_puts(b, "<table><tr><th class=\"l\">Tool</th><th>Runs using it (%)</th>"
                         "<th>Calls per run</th></tr>\n");
    for (size_t i = 0; i < st->n_tools; i++) {
        (void)af_buf_puts(b, "<tr><td class=\"l\">");
        svg_escape(b, st->tools[i].name);
        (void)af_buf_printf(b, "</td><td>%.1f</td><td>%.2f</td></tr>\n",
                            100.0 * (double)st->tools[i].runs / n, (double)st->tools[i].calls / n);
    }
    (void)af_buf_puts(b, "</table>\n");
}

static void html_tokens(struct af_buf *b, const struct report_stats *st)
{
    if (!st->n_modules) {
        (void)af_buf_puts(b, "<p>No token counts.</p>\n");
        return;
    }
    double n = st->n_runs ? (double)st->n_runs : 1.0, calls = 0, p = 0, c = 0;
    (void)af_buf_puts(b, "<table><tr><th class=\"l\">Module</th><th>Calls per run</th><th>Prompt "
                         "tokens per run</th><th>Completion tokens per run</th><th>Total tokens "
                         "per run</th></tr>\n");
    for (size_t i = 0; i < st->n_modules; i++) {
        const struct report_module *rm = &st->modules[i];
        (void)af_buf_puts(b, "<tr><td class=\"l\">");
        svg_escape(b, rm->name);
        (void)af_buf_printf(b, "</td><td>%.2f</td><td>%.1f</td><td>%.1f</td><td>%.1f</td></tr>\n",
                            rm->calls / n, rm->prompt_tokens / n, rm->completion_tokens / n,
                            (rm->prompt_tokens + rm->completion_tokens) / n);
        calls += rm->calls;
        p += rm->prompt_tokens;
        c += rm->completion_tokens;
    }
    (void)af_buf_printf(b,
                        "<tr><th class=\"l\">all modules</th><th>%.2f</th><th>%.1f</th>"
                        "<th>%.1f</th><th>%.1f</th></tr>\n</table>\n",
                        calls / n, p / n, c / n, (p + c) / n);
}

static void html_bench_summary(struct af_buf *b, const struct report_stats *st)
{
    (void)af_buf_puts(b, "<table><tr><th>Items</th><th>Trials</th><th>Runs</th><th>Rule acc. "
                         "(%)</th><th>Judge acc. (%)</th><th>Judged runs</th><th>F1 (%)</th>"
                         "<th>Avg steps</th><th>Avg latency (s)</th><th>Total time (s)</th></tr>"
                         "\n<tr>");
    (void)af_buf_printf(b, "<td>%zu</td><td>%zu</td><td>%zu</td>", st->n_items, st->n_trials,
                        st->n_runs);
    td_acc(b, st->rule_mean, st->rule_std, 1);
    td_acc(b, st->judge_mean, st->judge_std, st->judge_trials > 0);
    (void)af_buf_printf(b, "<td>%zu</td>", st->n_judged);
    if (st->n_f1)
        (void)af_buf_printf(b, "<td>%.1f</td>", st->f1_mean);
    else
        (void)af_buf_puts(b, "<td>" DASH "</td>");
    (void)af_buf_printf(b, "<td>%.2f</td><td>%.2f</td><td>%.2f</td></tr>\n</table>\n",
                        st->steps_mean, st->latency_mean_ms / 1000.0,
                        st->latency_total_ms / 1000.0);
    (void)af_buf_puts(b, "<p>Rule accuracy per trial (%):");
    for (size_t t = 0; t < st->n_trials; t++)
        (void)af_buf_printf(b, "%s %.1f", t ? "," : "", st->rule_acc[t]);
    (void)af_buf_puts(b, "</p>\n");
}

static void html_overall_row(struct af_buf *b, const struct report_stats *st, const char *cell)
{
    (void)af_buf_printf(b, "<tr><%s class=\"l\">", cell);
    svg_escape(b, st->name);
    (void)af_buf_printf(b, "</%s><td>%zu</td><td>%zu</td><td>%zu</td>", cell, st->n_items,
                        st->n_trials, st->n_runs);
    td_acc(b, st->rule_mean, st->rule_std, 1);
    td_acc(b, st->judge_mean, st->judge_std, st->judge_trials > 0);
    double n = st->n_runs ? (double)st->n_runs : 1.0;
    (void)af_buf_printf(b, "<td>%.2f</td><td>%.1f</td><td>%.2f</td><td>%.2f</td></tr>\n",
                        st->steps_mean, st->tokens_total / n, st->latency_mean_ms / 1000.0,
                        st->latency_total_ms / 1000.0);
}

static void html_overall(struct af_buf *b, const struct report_model *m)
{
    (void)af_buf_puts(b, "<h2 id=\"all\">All benchmarks</h2>\n<table><tr><th class=\"l\">"
                         "Benchmark</th><th>Items</th><th>Trials</th><th>Runs</th><th>Rule acc. "
                         "(%)</th><th>Judge acc. (%)</th><th>Avg steps</th><th>Avg tokens</th>"
                         "<th>Avg latency (s)</th><th>Total time (s)</th></tr>\n");
    for (size_t i = 0; i < m->n_benches; i++)
        html_overall_row(b, &m->benches[i].st, "td");
    html_overall_row(b, &m->all, "th");
    (void)af_buf_puts(b, "</table>\n");
}

/* --- report.html: charts ------------------------------------------------------------------ */

static void chart_accuracy(struct af_buf *b, const struct report_model *m)
{
    size_t n = m->n_benches;
    const char **labels = af_xcalloc(n ? n : 1, sizeof *labels);
    double *rule = af_xcalloc(n ? n : 1, sizeof *rule);
    double *judge = af_xcalloc(n ? n : 1, sizeof *judge);
    int any_judge = 0;
    for (size_t i = 0; i < n; i++) {
        const struct report_stats *st = &m->benches[i].st;
        labels[i] = st->name;
        rule[i] = st->rule_mean;
        judge[i] = st->judge_trials ? st->judge_mean : -1.0;
        any_judge |= st->judge_trials > 0;
    }
    struct svg_bars c = {
        .title = "Accuracy per benchmark (mean over trials)",
        .y_label = "accuracy (%)",
        .labels = labels,
        .n_groups = n,
        .series_names = {"rule", any_judge ? "judge" : NULL},
        .values = {rule, judge},
        .n_series = any_judge ? 2 : 1,
        .y_max = 100,
        .decimals = 1,
    };
    svg_bar_chart(b, &c);
    free(labels);
    free(rule);
    free(judge);
}

static void chart_steps(struct af_buf *b, const struct report_model *m)
{
    size_t n = json_array_size(m->steps);
    json_int_t lo = 0, hi = 0;
    for (size_t i = 0; i < n; i++) {
        json_int_t s = json_integer_value(json_array_get(m->steps, i));
        lo = i == 0 || s < lo ? s : lo;
        hi = i == 0 || s > hi ? s : hi;
    }
    json_int_t span = hi - lo + 1, width = span <= 30 ? 1 : (span + 19) / 20;
    size_t n_bins = n ? (size_t)((span + width - 1) / width) : 0;
    double *count = af_xcalloc(n_bins ? n_bins : 1, sizeof *count);
    char **names = af_xcalloc(n_bins ? n_bins : 1, sizeof *names);
    for (size_t i = 0; i < n; i++)
        count[(json_integer_value(json_array_get(m->steps, i)) - lo) / width] += 1.0;
    for (size_t k = 0; k < n_bins; k++) {
        struct af_buf l;
        af_buf_init(&l, AF_BUF_NOLIMIT);
        long long a = (long long)(lo + (json_int_t)k * width), z = a + (long long)width - 1;
        if (width == 1)
            (void)af_buf_printf(&l, "%lld", a);
        else
            (void)af_buf_printf(&l, "%lld-%lld", a, z);
        names[k] = af_buf_detach(&l);
    }
    struct svg_bars c = {
        .title = "Steps per run (histogram, all benchmarks)",
        .y_label = "runs",
        .labels = (const char *const *)names,
        .n_groups = n_bins,
        .values = {count},
        .n_series = 1,
        .decimals = 0,
    };
    svg_bar_chart(b, &c);
    for (size_t k = 0; k < n_bins; k++)
        free(names[k]);
    free(names);
    free(count);
}

static void chart_tools(struct af_buf *b, const struct report_stats *st)
{
    size_t n = st->n_tools;
    const char **labels = af_xcalloc(n ? n : 1, sizeof *labels);
    double *share = af_xcalloc(n ? n : 1, sizeof *share);
    for (size_t i = 0; i < n; i++) {
        labels[i] = st->tools[i].name;
        share[i] = st->n_runs ? 100.0 * (double)st->tools[i].runs / (double)st->n_runs : 0.0;
    }
    struct svg_bars c = {
        .title = "Tool usage (% of runs using each tool, all benchmarks)",
        .y_label = "runs (%)",
        .labels = labels,
        .n_groups = n,
        .values = {share},
        .n_series = 1,
        .y_max = 100,
        .decimals = 1,
    };
    svg_bar_chart(b, &c);
    free(labels);
    free(share);
}

/* --- report.html: the page ---------------------------------------------------------------- */

static void html_runs(struct af_buf *b, const json_t *lines)
{
    size_t n = json_array_size(lines), i;
    json_t *l;
    (void)af_buf_printf(b,
                        "<details%s><summary>Runs (%zu): one page each with the whole "
                        "trace</summary>\n<table><tr><th>Index</th><th>Trial</th><th>Rule</th>"
                        "<th>Judge</th><th class=\"l\">Extracted</th><th class=\"l\">Gold</th>"
                        "<th>Steps</th><th>Latency (s)</th></tr>\n",
                        n > REPORT_OPEN_ROWS ? "" : " open", n);
    struct af_buf href;
    af_buf_init(&href, AF_BUF_NOLIMIT);
    json_array_foreach(lines, i, l)
    {
        const json_t *c = json_object_get(l, "correct");
        af_buf_reset(&href);
        report_item_page_path(&href, l);
        (void)af_buf_puts(b, "<tr><td><a href=\"");
        svg_escape(b, af_buf_str(&href));
        (void)af_buf_printf(b, "\">%lld</a></td><td>%lld</td><td>",
                            (long long)json_integer_value(json_object_get(l, "index")),
                            (long long)json_integer_value(json_object_get(l, "trial")));
        verdict(b, json_object_get(c, "rule"));
        (void)af_buf_puts(b, "</td><td>");
        verdict(b, json_object_get(c, "judge"));
        (void)af_buf_puts(b, "</td><td class=\"l\">");
        cell_json(b, json_object_get(l, "extracted"));
        (void)af_buf_puts(b, "</td><td class=\"l\">");
        cell_json(b, json_object_get(l, "gold"));
        (void)af_buf_printf(b, "</td><td>%lld</td><td>%.2f</td></tr>\n",
                            (long long)json_integer_value(json_object_get(l, "steps")),
                            json_number_value(json_object_get(l, "latency_ms")) / 1000.0);
    }
    af_buf_deinit(&href);
    (void)af_buf_puts(b, "</table></details>\n");
}

static void html_bench(struct af_buf *b, const struct report_bench *rb, size_t k)
{
    (void)af_buf_printf(b, "<h2 id=\"bench-%zu\">", k);
    svg_escape(b, rb->st.name);
    (void)af_buf_puts(b, "</h2>\n");
    html_bench_summary(b, &rb->st);
    (void)af_buf_puts(b, "<h3>Tool usage</h3>\n");
    html_tools(b, &rb->st);
    (void)af_buf_puts(b, "<h3>Tokens (average per run)</h3>\n");
    html_tokens(b, &rb->st);
    html_runs(b, rb->lines);
}

void report_html_main(struct af_buf *b, const struct report_model *m)
{
    page_head(b, "agentflow eval report");
    (void)af_buf_puts(b, "<h1>Evaluation report</h1>\n<p>Run folder: <code>");
    svg_escape(b, m->rundir);
    (void)af_buf_printf(b, "</code>. %zu result line(s) in %zu benchmark(s).</p>\n", m->all.n_runs,
                        m->n_benches);
    if (m->n_skipped)
        (void)af_buf_printf(b,
                            "<p class=\"note\">Skipped %zu malformed or duplicate line(s) of "
                            "results.jsonl (first: line %zu).</p>\n",
                            m->n_skipped, m->first_bad);
    (void)af_buf_puts(b, "<p>Accuracy: mean " PM " standard deviation (population) of the "
                         "per-trial accuracies, in %; the judge's over the runs with a judge "
                         "verdict, " DASH " when there is none. A run is one item in one trial. "
                         "\"all\" pools every benchmark's runs of a trial.</p>\n<p>");
    for (size_t i = 0; i < m->n_benches; i++) {
        (void)af_buf_printf(b, "%s<a href=\"#bench-%zu\">", i ? " \xC2\xB7 " : "Benchmarks: ", i);
        svg_escape(b, m->benches[i].st.name);
        (void)af_buf_puts(b, "</a>");
    }
    (void)af_buf_puts(b, "</p>\n");
    html_overall(b, m);
    (void)af_buf_puts(b, "<div>\n");
    chart_accuracy(b, m);
    chart_steps(b, m);
    chart_tools(b, &m->all);
    (void)af_buf_puts(b, "</div>\n<h3>Tool usage (all benchmarks)</h3>\n");
    html_tools(b, &m->all);
    (void)af_buf_puts(b, "<h3>Tokens (all benchmarks, average per run)</h3>\n");
    html_tokens(b, &m->all);
    for (size_t i = 0; i < m->n_benches; i++)
        html_bench(b, &m->benches[i], i);
    (void)af_buf_puts(b, "<hr><p>Written by <code>agentflow eval report</code>.</p>\n"
                         "</body></html>\n");
}

/* --- item pages --------------------------------------------------------------------------- */

/* A scalar as table-cell text: strings as they are, numbers plainly, others as JSON. */
static void scalar_cell(struct af_buf *b, const json_t *v)
{
    if (json_is_integer(v))
        (void)af_buf_printf(b, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        (void)af_buf_printf(b, "%g", json_real_value(v));
    else if (json_is_boolean(v))
        verdict(b, v);
    else
        cell_json(b, v);
}

/* 1 when no member or element of v (an array or object) is itself an array or object. */
static int all_scalars(const json_t *v)
{
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            if (json_is_object(json_array_get(v, i)) || json_is_array(json_array_get(v, i)))
                return 0;
        return 1;
    }
    for (void *it = json_object_iter((json_t *)(uintptr_t)v); it;
         it = json_object_iter_next((json_t *)(uintptr_t)v, it)) {
        const json_t *e = json_object_iter_value(it);
        if (json_is_object(e) || json_is_array(e))
            return 0;
    }
    return 1;
}

/* {row: {column: scalar}} (the tokens per module) as one table, columns in order of first
 * appearance. Returns 0 when v has another shape. */
static int object_grid(struct af_buf *b, const json_t *v)
{
    const char *row, *col;
    const json_t *r, *cell;
    json_t *cols = json_array();
    json_object_foreach((json_t *)(uintptr_t)v, row, r)
    {
        if (!json_is_object(r) || !all_scalars(r)) {
            json_decref(cols);
            return 0;
        }
        json_object_foreach((json_t *)(uintptr_t)r, col, cell)
        {
            size_t i, have = 0;
            const json_t *c;
            json_array_foreach(cols, i, c) have |= !strcmp(json_string_value(c), col);
            if (!have)
                json_array_append_new(cols, json_string(col));
        }
    }
    size_t i;
    const json_t *c;
    (void)af_buf_puts(b, "<table class=\"inner\">\n<tr><th></th>");
    json_array_foreach(cols, i, c)
    {
        (void)af_buf_puts(b, "<th>");
        svg_escape(b, json_string_value(c));
        (void)af_buf_puts(b, "</th>");
    }
    (void)af_buf_puts(b, "</tr>\n");
    json_object_foreach((json_t *)(uintptr_t)v, row, r)
    {
        (void)af_buf_puts(b, "<tr><th class=\"l\">");
        svg_escape(b, row);
        (void)af_buf_puts(b, "</th>");
        json_array_foreach(cols, i, c)
        {
            (void)af_buf_puts(b, "<td>");
            cell = json_object_get(r, json_string_value(c));
            if (cell)
                scalar_cell(b, cell);
            (void)af_buf_puts(b, "</td>");
        }
        (void)af_buf_puts(b, "</tr>\n");
    }
    (void)af_buf_puts(b, "</table>\n");
    json_decref(cols);
    return 1;
}

/* A structured value as a table instead of a JSON dump: a list of scalars one per row, an
 * object of scalars as key / value rows, an object of objects as a grid. Other shapes (and
 * strings) go in a <pre>. */
static void value_table(struct af_buf *b, const json_t *v)
{
    size_t i;
    const char *k;
    const json_t *e;
    if (json_is_array(v) && json_array_size(v) > 0 && all_scalars(v)) {
        (void)af_buf_puts(b, "<table class=\"inner\">\n");
        json_array_foreach(v, i, e)
        {
            (void)af_buf_printf(b, "<tr><th>%zu</th><td class=\"l\">", i + 1);
            scalar_cell(b, e);
            (void)af_buf_puts(b, "</td></tr>\n");
        }
        (void)af_buf_puts(b, "</table>\n");
    } else if (json_is_object(v) && json_object_size(v) > 0 && all_scalars(v)) {
        (void)af_buf_puts(b, "<table class=\"inner\">\n");
        json_object_foreach((json_t *)(uintptr_t)v, k, e)
        {
            (void)af_buf_puts(b, "<tr><th class=\"l\">");
            svg_escape(b, k);
            (void)af_buf_puts(b, "</th><td class=\"l\">");
            scalar_cell(b, e);
            (void)af_buf_puts(b, "</td></tr>\n");
        }
        (void)af_buf_puts(b, "</table>\n");
    } else if (!(json_is_object(v) && json_object_size(v) > 0 && object_grid(b, v))) {
        pre_json(b, v);
    }
}

/* One row of the item's field table: the value as text, a table, or a <pre>. */
static void field_row(struct af_buf *b, const char *name, const json_t *v)
{
    if (!v)
        return;
    (void)af_buf_printf(b, "<tr><th class=\"l\">%s</th><td class=\"l\">", name);
    if (json_is_boolean(v) || json_is_number(v))
        scalar_cell(b, v);
    else if (json_is_array(v) || json_is_object(v))
        value_table(b, v);
    else
        pre_json(b, v);
    (void)af_buf_puts(b, "</td></tr>\n");
}

static void item_fields(struct af_buf *b, const json_t *l)
{
    static const char *const keys[] = {
        "query",         "gold",  "answer", "extracted", "f1",         "score_error", "judge_reply",
        "score_details", "steps", "tools",  "tokens",    "latency_ms", "trace"};
    const json_t *c = json_object_get(l, "correct");
    (void)af_buf_puts(b, "<table>\n<tr><th class=\"l\">correct (rule)</th><td class=\"l\">");
    verdict(b, json_object_get(c, "rule"));
    (void)af_buf_puts(b, "</td></tr>\n<tr><th class=\"l\">correct (judge)</th><td class=\"l\">");
    verdict(b, json_object_get(c, "judge"));
    (void)af_buf_puts(b, "</td></tr>\n");
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        field_row(b, keys[i], json_object_get(l, keys[i]));
    (void)af_buf_puts(b, "</table>\n");
}

static void rec_head(struct af_buf *b, const json_t *r, const char *cls, const char *what)
{
    (void)af_buf_printf(b, "<section class=\"rec %s\"><h3>step %lld \xC2\xB7 ", cls,
                        (long long)json_integer_value(json_object_get(r, "step")));
    svg_escape(b, what);
}

static void rec_error(struct af_buf *b, const json_t *r)
{
    const char *e = af_json_get_str(r, "error");
    if (!e)
        return;
    (void)af_buf_puts(b, "<p class=\"bad\">Error:</p>");
    pre_text(b, e);
}

static void rec_llm(struct af_buf *b, const json_t *r)
{
    const json_t *u = json_object_get(r, "usage");
    rec_head(b, r, af_json_get_str(r, "error") ? "llm bad" : "llm", "LLM call: ");
    svg_escape(b, af_json_get_str(r, "module"));
    (void)af_buf_puts(b, " (");
    svg_escape(b, af_json_get_str(r, "model"));
    (void)af_buf_printf(b,
                        ") \xC2\xB7 %.0f ms \xC2\xB7 %lld prompt + %lld completion tokens</h3>\n",
                        json_number_value(json_object_get(r, "latency_ms")),
                        (long long)json_integer_value(json_object_get(u, "prompt_tokens")),
                        (long long)json_integer_value(json_object_get(u, "completion_tokens")));
    size_t i;
    json_t *msg;
    json_array_foreach(json_object_get(r, "messages"), i, msg)
    {
        const char *content = af_json_get_str(msg, "content");
        (void)af_buf_puts(b, "<details><summary>Prompt message: ");
        svg_escape(b, af_json_get_str(msg, "role"));
        (void)af_buf_printf(b, " (%zu bytes)</summary>\n", content ? strlen(content) : 0);
        pre_json(b, content ? json_object_get(msg, "content") : msg);
        (void)af_buf_puts(b, "</details>\n");
    }
    (void)af_buf_puts(b, "<p>Response:</p>\n");
    pre_json(b, json_object_get(r, "response"));
    rec_error(b, r);
    (void)af_buf_puts(b, "</section>\n");
}

static void rec_tool(struct af_buf *b, const json_t *r)
{
    rec_head(b, r, af_json_get_str(r, "error") ? "tool bad" : "tool", "tool call: ");
    svg_escape(b, af_json_get_str(r, "tool"));
    (void)af_buf_printf(b, " #%lld \xC2\xB7 %.0f ms</h3>\n<p>Command:</p>\n",
                        (long long)json_integer_value(json_object_get(r, "call_index")),
                        json_number_value(json_object_get(r, "duration_ms")));
    pre_json(b, json_object_get(r, "command"));
    (void)af_buf_puts(b, "<p>Arguments:</p>\n");
    pre_json(b, json_object_get(r, "args"));
    (void)af_buf_puts(b, "<p>Result:</p>\n");
    pre_json(b, json_object_get(r, "result"));
    rec_error(b, r);
    (void)af_buf_puts(b, "</section>\n");
}

static void rec_final(struct af_buf *b, const json_t *r)
{
    static const char *const keys[] = {"answer", "direct_output", "final_output"};
    rec_head(b, r, "final", "final record");
    (void)af_buf_puts(b, "</h3>\n");
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const json_t *v = json_object_get(r, keys[i]);
        if (!v || json_is_null(v))
            continue;
        (void)af_buf_printf(b, "<p>%s:</p>\n", keys[i]);
        pre_json(b, v);
    }
    rec_error(b, r);
    (void)af_buf_puts(b, "<details><summary>The whole record (memory, usage, timings)</summary>\n");
    pre_json(b, r);
    (void)af_buf_puts(b, "</details></section>\n");
}

static void rec_other(struct af_buf *b, const json_t *r)
{
    rec_head(b, r, "other", "record of type ");
    svg_escape(b, af_json_get_str(r, "type"));
    (void)af_buf_puts(b, "</h3>\n");
    pre_json(b, r);
    (void)af_buf_puts(b, "</section>\n");
}

/* A trace line that is not a JSON object: shown raw (repaired to UTF-8) with a note. */
static void rec_bad(struct af_buf *b, const char *line, size_t len, size_t lineno, int last)
{
    (void)af_buf_printf(b,
                        "<section class=\"rec bad\"><p class=\"note\">Trace line %zu is not a "
                        "JSON object%s; shown as is:</p>\n",
                        lineno,
                        last ? " (a torn last line: the run was cut off while writing)" : "");
    char *s = af_utf8_repair(line, len);
    pre_text(b, s);
    free(s);
    (void)af_buf_puts(b, "</section>\n");
}

static void trace_records(struct af_buf *b, char *text, size_t len)
{
    size_t lineno = 0, n_rec = 0;
    for (size_t start = 0; start < len;) {
        char *nl = memchr(text + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - text) : len;
        const char *line = text + start;
        size_t n = end - start;
        start = end + 1;
        lineno++;
        if (strspn(line, " \t\r") >= n)
            continue;
        json_t *r = json_loadb(line, n, 0, NULL);
        const char *type = af_json_get_str(r, "type");
        if (!json_is_object(r))
            rec_bad(b, line, n, lineno, !nl);
        else if (type && strcmp(type, "llm") == 0)
            rec_llm(b, r);
        else if (type && strcmp(type, "tool") == 0)
            rec_tool(b, r);
        else if (type && strcmp(type, "final") == 0)
            rec_final(b, r);
        else
            rec_other(b, r);
        n_rec++;
        json_decref(r);
    }
    if (!n_rec)
        (void)af_buf_puts(b, "<p class=\"note\">The trace file is empty.</p>\n");
}

/* Returns 1 when rel is a safe path inside RUNDIR: relative, no ".." component. */
static int trace_path_ok(const char *rel)
{
    if (!rel || !*rel || rel[0] == '/')
        return 0;
    for (const char *p = rel; *p;) {
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return 0;
        p += n + (p[n] == '/');
    }
    return 1;
}

/* The trace section; returns 0 when the trace could not be read. */
static int item_trace(struct af_buf *b, const char *rundir, const char *rel)
{
    (void)af_buf_puts(b, "<h2>Trace</h2>\n");
    if (!trace_path_ok(rel)) {
        (void)af_buf_puts(b, "<p class=\"note\">The trace is missing: this result line names no "
                             "trace file inside the run folder.</p>\n");
        return 0;
    }
    struct af_buf path;
    af_buf_init(&path, AF_BUF_NOLIMIT);
    (void)af_buf_printf(&path, "%s/%s", rundir, rel);
    char *text = NULL, err[1024];
    size_t len = 0;
    int rc = af_file_read(af_buf_str(&path), REPORT_TRACE_LIMIT, &text, &len, err, sizeof err);
    af_buf_deinit(&path);
    if (rc != AF_OK) {
        (void)af_buf_printf(b, "<p class=\"note\">The trace is %s: ",
                            rc == AF_ENOTFOUND ? "missing" : "unreadable");
        svg_escape(b, rc == AF_ENOTFOUND ? rel : err);
        (void)af_buf_puts(b, rc == AF_ENOTFOUND ? " does not exist.</p>\n" : "</p>\n");
        return 0;
    }
    trace_records(b, text, len);
    free(text);
    return 1;
}

void report_html_item(struct af_buf *b, const struct report_model *m, const json_t *line,
                      int *no_trace)
{
    struct af_buf title;
    af_buf_init(&title, AF_BUF_NOLIMIT);
    (void)af_buf_printf(&title, "%s \xC2\xB7 item %lld \xC2\xB7 trial %lld",
                        af_json_get_str(line, "bench"),
                        (long long)json_integer_value(json_object_get(line, "index")),
                        (long long)json_integer_value(json_object_get(line, "trial")));
    page_head(b, af_buf_str(&title));
    (void)af_buf_puts(b, "<p><a href=\"../../report.html\">\xE2\x86\x90 report</a></p>\n<h1>");
    svg_escape(b, af_buf_str(&title));
    (void)af_buf_puts(b, "</h1>\n");
    af_buf_deinit(&title);
    item_fields(b, line);
    *no_trace = !item_trace(b, m->rundir, af_json_get_str(line, "trace"));
    (void)af_buf_puts(b, "</body></html>\n");
}
