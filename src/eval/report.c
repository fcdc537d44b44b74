/*
 * report.c - `agentflow eval report`: aggregates RUNDIR/results.jsonl per benchmark (accuracy
 * mean ± std over trials for the rule scorer and the judge, steps, tool usage, tokens per
 * module, latency), writes report.md, and has report_html.c render report.html and the item
 * pages. Every file is written atomically. Malformed result lines are skipped and counted.
 */
#include "eval/report.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/errf.h"
#include "core/fileio.h"
#include "core/jsonx.h"
#include "core/xalloc.h"

#define REPORT_RESULTS_LIMIT (1ull << 32)

/* --- loading ------------------------------------------------------------------------------ */

/* Returns 1 when obj is a usable result line: bench string, index and trial integers >= 0. */
static int line_ok(const json_t *obj)
{
    const json_t *ix = json_object_get(obj, "index"), *tr = json_object_get(obj, "trial");
    const char *bench = af_json_get_str(obj, "bench");
    return json_is_object(obj) && bench && *bench && json_is_integer(ix) &&
           json_integer_value(ix) >= 0 && json_is_integer(tr) && json_integer_value(tr) >= 0;
}

static json_int_t jint(const json_t *obj, const char *key)
{
    return json_integer_value(json_object_get(obj, key));
}

static void skip_line(struct report_model *m, size_t lineno)
{
    m->n_skipped++;
    if (!m->first_bad)
        m->first_bad = lineno;
}

/* Adds one parsed line (reference stolen) to groups[bench] unless its key was seen. */
static void add_line(struct report_model *m, json_t *groups, json_t *seen, json_t *obj,
                     size_t lineno)
{
    if (!line_ok(obj)) {
        json_decref(obj);
        skip_line(m, lineno);
        return;
    }
    const char *bench = af_json_get_str(obj, "bench");
    struct af_buf key;
    af_buf_init(&key, AF_BUF_NOLIMIT);
    (void)af_buf_printf(&key, "%s\n%lld\n%lld", bench, (long long)jint(obj, "index"),
                        (long long)jint(obj, "trial"));
    if (json_object_get(seen, af_buf_str(&key))) {
        json_decref(obj);
        skip_line(m, lineno);
    } else {
        json_object_set_new(seen, af_buf_str(&key), json_true());
        json_t *arr = json_object_get(groups, bench);
        if (!arr)
            json_object_set_new(groups, bench, arr = json_array());
        json_array_append_new(arr, obj);
    }
    af_buf_deinit(&key);
}

/* Splits text into lines and groups the good ones by bench into groups. */
static void parse_lines(struct report_model *m, char *text, size_t len, json_t *groups)
{
    json_t *seen = json_object();
    size_t lineno = 0;
    for (size_t start = 0; start < len;) {
        char *nl = memchr(text + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - text) : len;
        lineno++;
        size_t n = end - start;
        const char *line = text + start;
        start = end + 1;
        if (strspn(line, " \t\r") >= n)
            continue; /* blank */
        json_t *obj = json_loadb(line, n, 0, NULL);
        if (!obj) {
            skip_line(m, lineno);
            continue;
        }
        add_line(m, groups, seen, obj, lineno);
    }
    json_decref(seen);
}

static int cmp_int(json_int_t x, json_int_t y)
{
    return x < y ? -1 : x > y;
}

static int cmp_line(const void *a, const void *b)
{
    const json_t *x = *(const json_t *const *)a, *y = *(const json_t *const *)b;
    int d = cmp_int(jint(x, "index"), jint(y, "index"));
    return d ? d : cmp_int(jint(x, "trial"), jint(y, "trial"));
}

/* A new array of arr's elements sorted by (index, trial). */
static json_t *sorted_lines(const json_t *arr)
{
    size_t n = json_array_size(arr);
    json_t **v = af_xcalloc(n ? n : 1, sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = json_array_get(arr, i);
    qsort(v, n, sizeof *v, cmp_line);
    json_t *out = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append(out, v[i]);
    free(v);
    return out;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Moves the groups into m->benches, sorted by name. */
static void make_benches(struct report_model *m, json_t *groups)
{
    size_t n = json_object_size(groups), k = 0;
    const char **names = af_xcalloc(n ? n : 1, sizeof *names);
    const char *key;
    json_t *v;
    json_object_foreach(groups, key, v)
    {
        names[k++] = key;
    }
    qsort(names, n, sizeof *names, cmp_str);
    m->benches = af_xcalloc(n ? n : 1, sizeof *m->benches);
    m->n_benches = n;
    for (size_t i = 0; i < n; i++) {
        m->benches[i].st.name = af_xstrdup(names[i]);
        m->benches[i].lines = sorted_lines(json_object_get(groups, names[i]));
    }
    free(names);
}

static int report_load(const char *rundir, struct report_model *m, char *err, size_t errlen)
{
    struct stat sb;
    if (stat(rundir, &sb) != 0) {
        af_errf(err, errlen, "RUNDIR '%s': %s", rundir, strerror(errno));
        return AF_ENOTFOUND;
    }
    if (!S_ISDIR(sb.st_mode)) {
        af_errf(err, errlen, "RUNDIR '%s' is not a folder", rundir);
        return AF_ENOTFOUND;
    }
    struct af_buf path;
    af_buf_init(&path, AF_BUF_NOLIMIT);
    (void)af_buf_printf(&path, "%s/results.jsonl", rundir);
    char *text = NULL;
    size_t len = 0;
    int rc = af_file_read(af_buf_str(&path), REPORT_RESULTS_LIMIT, &text, &len, err, errlen);
    if (rc == AF_ENOTFOUND)
        af_errf(err, errlen, "'%s' not found (run `agentflow eval run --out %s` first)",
                af_buf_str(&path), rundir);
    af_buf_deinit(&path);
    if (rc != AF_OK)
        return rc;
    json_t *groups = json_object();
    parse_lines(m, text, len, groups);
    free(text);
    make_benches(m, groups);
    json_decref(groups);
    return AF_OK;
}

/* --- statistics --------------------------------------------------------------------------- */

struct trial_tally {
    json_int_t trial;
    size_t n, ok, judged, judge_ok;
};

static void mean_std(const double *v, size_t n, double *mean, double *std)
{
    double s = 0, ss = 0;
    for (size_t i = 0; i < n; i++)
        s += v[i];
    *mean = n ? s / (double)n : 0.0;
    for (size_t i = 0; i < n; i++)
        ss += (v[i] - *mean) * (v[i] - *mean);
    *std = n > 1 ? sqrt(ss / (double)n) : 0.0;
}

static int cmp_tally(const void *a, const void *b)
{
    json_int_t x = ((const struct trial_tally *)a)->trial,
               y = ((const struct trial_tally *)b)->trial;
    return x < y ? -1 : x > y;
}

/* Per-trial accuracies (rule and judge) of lines into st. */
static void stats_accuracy(struct report_stats *st, const json_t *lines)
{
    size_t cap = 4, nt = 0, i;
    struct trial_tally *t = af_xcalloc(cap, sizeof *t);
    json_t *l;
    json_array_foreach(lines, i, l)
    {
        json_int_t tr = jint(l, "trial");
        size_t k = 0;
        while (k < nt && t[k].trial != tr)
            k++;
        if (k == nt) {
            if (nt == cap)
                t = af_xrealloc(t, (cap *= 2) * sizeof *t);
            memset(&t[nt], 0, sizeof t[nt]);
            t[nt++].trial = tr;
        }
        const json_t *c = json_object_get(l, "correct");
        const json_t *judge = json_object_get(c, "judge");
        t[k].n++;
        t[k].ok += json_is_true(json_object_get(c, "rule")) ? 1 : 0;
        t[k].judged += json_is_boolean(judge) ? 1 : 0;
        t[k].judge_ok += json_is_true(judge) ? 1 : 0;
    }
    qsort(t, nt, sizeof *t, cmp_tally);
    st->n_trials = nt;
    st->rule_acc = af_xcalloc(nt ? nt : 1, sizeof *st->rule_acc);
    double *jacc = af_xcalloc(nt ? nt : 1, sizeof *jacc);
    for (size_t k = 0; k < nt; k++) {
        st->rule_acc[k] = 100.0 * (double)t[k].ok / (double)t[k].n;
        st->n_judged += t[k].judged;
        if (t[k].judged)
            jacc[st->judge_trials++] = 100.0 * (double)t[k].judge_ok / (double)t[k].judged;
    }
    mean_std(st->rule_acc, nt, &st->rule_mean, &st->rule_std);
    mean_std(jacc, st->judge_trials, &st->judge_mean, &st->judge_std);
    free(jacc);
    free(t);
}

static struct report_tool *find_tool(struct report_stats *st, const char *name, size_t *cap)
{
    for (size_t i = 0; i < st->n_tools; i++)
        if (strcmp(st->tools[i].name, name) == 0)
            return &st->tools[i];
    if (st->n_tools == *cap)
        st->tools = af_xrealloc(st->tools, (*cap = *cap ? *cap * 2 : 8) * sizeof *st->tools);
    struct report_tool *t = &st->tools[st->n_tools++];
    memset(t, 0, sizeof *t);
    t->name = af_xstrdup(name);
    return t;
}

/* One line's tools list: calls per tool, and each tool used counted once per line. */
static void stats_tools_line(struct report_stats *st, const json_t *tools, size_t *cap)
{
    size_t i, j;
    json_t *v, *w;
    json_array_foreach(tools, i, v)
    {
        if (!json_is_string(v))
            continue;
        struct report_tool *t = find_tool(st, json_string_value(v), cap);
        t->calls++;
        int first = 1;
        json_array_foreach(tools, j, w)
        {
            if (j >= i)
                break;
            if (json_is_string(w) && strcmp(json_string_value(w), json_string_value(v)) == 0)
                first = 0;
        }
        t->runs += first ? 1 : 0;
    }
}

static double nonneg(const json_t *v)
{
    double d = json_number_value(v);
    return d > 0 ? d : 0.0;
}

/* One line's tokens object {module: {calls, prompt_tokens, completion_tokens}}. */
static void stats_tokens_line(struct report_stats *st, json_t *tokens, size_t *cap)
{
    const char *mod;
    json_t *u;
    json_object_foreach(tokens, mod, u)
    {
        size_t k = 0;
        while (k < st->n_modules && strcmp(st->modules[k].name, mod) != 0)
            k++;
        if (k == st->n_modules) {
            if (k == *cap)
                st->modules =
                    af_xrealloc(st->modules, (*cap = *cap ? *cap * 2 : 8) * sizeof *st->modules);
            memset(&st->modules[k], 0, sizeof st->modules[k]);
            st->modules[k].name = af_xstrdup(mod);
            st->n_modules++;
        }
        struct report_module *rm = &st->modules[k];
        double p = nonneg(json_object_get(u, "prompt_tokens"));
        double c = nonneg(json_object_get(u, "completion_tokens"));
        rm->calls += nonneg(json_object_get(u, "calls"));
        rm->prompt_tokens += p;
        rm->completion_tokens += c;
        st->tokens_total += p + c;
    }
}

static int cmp_tool(const void *a, const void *b)
{
    return strcmp(((const struct report_tool *)a)->name, ((const struct report_tool *)b)->name);
}

static int cmp_module(const void *a, const void *b)
{
    return strcmp(((const struct report_module *)a)->name, ((const struct report_module *)b)->name);
}

/* Fills st (name already set) from lines. */
static void stats_compute(struct report_stats *st, const json_t *lines)
{
    size_t i, tcap = 0, mcap = 0;
    json_t *l, *items = json_object();
    double f1 = 0, steps = 0;
    st->n_runs = json_array_size(lines);
    json_array_foreach(lines, i, l)
    {
        char key[64];
        snprintf(key, sizeof key, "%lld", (long long)jint(l, "index"));
        struct af_buf k;
        af_buf_init(&k, AF_BUF_NOLIMIT);
        (void)af_buf_printf(&k, "%s\n%s", af_json_get_str(l, "bench"), key);
        json_object_set_new(items, af_buf_str(&k), json_true());
        af_buf_deinit(&k);
        const json_t *f = json_object_get(l, "f1");
        if (json_is_number(f)) {
            st->n_f1++;
            f1 += json_number_value(f);
        }
        steps += json_number_value(json_object_get(l, "steps"));
        st->latency_total_ms += nonneg(json_object_get(l, "latency_ms"));
        stats_tools_line(st, json_object_get(l, "tools"), &tcap);
        if (json_is_object(json_object_get(l, "tokens")))
            stats_tokens_line(st, json_object_get(l, "tokens"), &mcap);
    }
    st->n_items = json_object_size(items);
    json_decref(items);
    double n = st->n_runs ? (double)st->n_runs : 1.0;
    st->f1_mean = st->n_f1 ? 100.0 * f1 / (double)st->n_f1 : 0.0;
    st->steps_mean = steps / n;
    st->latency_mean_ms = st->latency_total_ms / n;
    if (st->n_tools)
        qsort(st->tools, st->n_tools, sizeof *st->tools, cmp_tool);
    if (st->n_modules)
        qsort(st->modules, st->n_modules, sizeof *st->modules, cmp_module);
    stats_accuracy(st, lines);
}

static void stats_deinit(struct report_stats *st)
{
    free(st->name);
    free(st->rule_acc);
    for (size_t i = 0; i < st->n_tools; i++)
        free(st->tools[i].name);
    free(st->tools);
    for (size_t i = 0; i < st->n_modules; i++)
        free(st->modules[i].name);
    free(st->modules);
    memset(st, 0, sizeof *st);
}

static void model_compute(struct report_model *m)
{
    json_t *all = json_array();
    m->steps = json_array();
    for (size_t b = 0; b < m->n_benches; b++) {
        stats_compute(&m->benches[b].st, m->benches[b].lines);
        json_array_extend(all, m->benches[b].lines);
    }
    size_t i;
    json_t *l;
    json_array_foreach(all, i, l)
    {
        json_int_t s = jint(l, "steps"); /* clamped: the histogram's range stays small */
        json_array_append_new(m->steps, json_integer(s < 0 ? 0 : s > 100000 ? 100000 : s));
    }
    m->all.name = af_xstrdup("all");
    stats_compute(&m->all, all);
    json_decref(all);
}

static void model_deinit(struct report_model *m)
{
    for (size_t b = 0; b < m->n_benches; b++) {
        stats_deinit(&m->benches[b].st);
        json_decref(m->benches[b].lines);
    }
    free(m->benches);
    stats_deinit(&m->all);
    json_decref(m->steps);
    memset(m, 0, sizeof *m);
}

/* --- report.md ---------------------------------------------------------------------------- */

/* Appends s as one Markdown table cell's text: '|' escaped, newlines as spaces, HTML
 * specials as entities. */
static void md_text(struct af_buf *b, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '|':
            (void)af_buf_puts(b, "\\|");
            break;
        case '\n':
        case '\r':
            (void)af_buf_putc(b, ' ');
            break;
        case '<':
            (void)af_buf_puts(b, "&lt;");
            break;
        case '>':
            (void)af_buf_puts(b, "&gt;");
            break;
        case '&':
            (void)af_buf_puts(b, "&amp;");
            break;
        default:
            (void)af_buf_putc(b, *s);
        }
    }
}

#define MD_DASH "\xE2\x80\x93" /* – */

static void md_acc(struct af_buf *b, double mean, double std, int have)
{
    if (have)
        (void)af_buf_printf(b, " %.1f \xC2\xB1 %.1f |", mean, std);
    else
        (void)af_buf_puts(b, " " MD_DASH " |");
}

static void md_tools(struct af_buf *b, const struct report_stats *st)
{
    if (!st->n_tools) {
        (void)af_buf_puts(b, "No tool calls.\n\n");
        return;
    }
    double n = st->n_runs ? (double)st->n_runs : 1.0;
    (void)af_buf_puts(b, "| Tool | Runs using it (%) | Calls per run |\n|---|---:|---:|\n");
    for (size_t i = 0; i < st->n_tools; i++) {
        (void)af_buf_puts(b, "| ");
        md_text(b, st->tools[i].name);
        (void)af_buf_printf(b, " | %.1f | %.2f |\n", 100.0 * (double)st->tools[i].runs / n,
                            (double)st->tools[i].calls / n);
    }
    (void)af_buf_puts(b, "\n");
}

static void md_tokens(struct af_buf *b, const struct report_stats *st)
{
    if (!st->n_modules) {
        (void)af_buf_puts(b, "No token counts.\n\n");
        return;
    }
    double n = st->n_runs ? (double)st->n_runs : 1.0, calls = 0, p = 0, c = 0;
    (void)af_buf_puts(b, "| Module | Calls per run | Prompt tokens per run | Completion tokens per "
                         "run | Total tokens per run |\n|---|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < st->n_modules; i++) {
        const struct report_module *rm = &st->modules[i];
        (void)af_buf_puts(b, "| ");
        md_text(b, rm->name);
        (void)af_buf_printf(b, " | %.2f | %.1f | %.1f | %.1f |\n", rm->calls / n,
                            rm->prompt_tokens / n, rm->completion_tokens / n,
                            (rm->prompt_tokens + rm->completion_tokens) / n);
        calls += rm->calls;
        p += rm->prompt_tokens;
        c += rm->completion_tokens;
    }
    (void)af_buf_printf(b, "| **all modules** | %.2f | %.1f | %.1f | %.1f |\n\n", calls / n, p / n,
                        c / n, (p + c) / n);
}

static void md_bench(struct af_buf *b, const struct report_stats *st)
{
    (void)af_buf_puts(b, "## ");
    md_text(b, st->name);
    (void)af_buf_puts(b, "\n\n| Items | Trials | Runs | Rule acc. (%) | Judge acc. (%) | Judged "
                         "runs | F1 (%) | Avg steps | Avg latency (s) | Total time (s) |\n"
                         "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    (void)af_buf_printf(b, "| %zu | %zu | %zu |", st->n_items, st->n_trials, st->n_runs);
    md_acc(b, st->rule_mean, st->rule_std, 1);
    md_acc(b, st->judge_mean, st->judge_std, st->judge_trials > 0);
    (void)af_buf_printf(b, " %zu |", st->n_judged);
    if (st->n_f1)
        (void)af_buf_printf(b, " %.1f |", st->f1_mean);
    else
        (void)af_buf_puts(b, " " MD_DASH " |");
    (void)af_buf_printf(b, " %.2f | %.2f | %.2f |\n\n", st->steps_mean,
                        st->latency_mean_ms / 1000.0, st->latency_total_ms / 1000.0);
    (void)af_buf_puts(b, "Rule accuracy per trial (%):");
    for (size_t t = 0; t < st->n_trials; t++)
        (void)af_buf_printf(b, "%s %.1f", t ? "," : "", st->rule_acc[t]);
    (void)af_buf_puts(b, "\n\n### Tool usage\n\n");
    md_tools(b, st);
    (void)af_buf_puts(b, "### Tokens (average per run)\n\n");
    md_tokens(b, st);
}

static void md_overall_row(struct af_buf *b, const struct report_stats *st, int bold)
{
    (void)af_buf_puts(b, bold ? "| **" : "| ");
    md_text(b, st->name);
    (void)af_buf_printf(b, "%s | %zu | %zu | %zu |", bold ? "**" : "", st->n_items, st->n_trials,
                        st->n_runs);
    md_acc(b, st->rule_mean, st->rule_std, 1);
    md_acc(b, st->judge_mean, st->judge_std, st->judge_trials > 0);
    double n = st->n_runs ? (double)st->n_runs : 1.0;
    (void)af_buf_printf(b, " %.2f | %.1f | %.2f | %.2f |\n", st->steps_mean, st->tokens_total / n,
                        st->latency_mean_ms / 1000.0, st->latency_total_ms / 1000.0);
}

static void md_report(struct af_buf *b, const struct report_model *m)
{
    (void)af_buf_puts(b, "# Evaluation report: ");
    md_text(b, m->rundir);
    (void)af_buf_printf(b, "\n\n%zu result line(s) in %zu benchmark(s).", m->all.n_runs,
                        m->n_benches);
    if (m->n_skipped)
        (void)af_buf_printf(b,
                            " Skipped %zu malformed or duplicate line(s) of results.jsonl "
                            "(first: line %zu).",
                            m->n_skipped, m->first_bad);
    (void)af_buf_puts(b, "\n\nAccuracy: mean \xC2\xB1 standard deviation (population) of the "
                         "per-trial accuracies, in %; the judge's over the runs with a judge "
                         "verdict, " MD_DASH " when there is none. A run is one item in one "
                         "trial. \"all\" pools every benchmark's runs of a trial.\n\n");
    for (size_t i = 0; i < m->n_benches; i++)
        md_bench(b, &m->benches[i].st);
    (void)af_buf_puts(b, "## All benchmarks\n\n| Benchmark | Items | Trials | Runs | Rule acc. (%) "
                         "| Judge acc. (%) | Avg steps | Avg tokens | Avg latency (s) | Total "
                         "time (s) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < m->n_benches; i++)
        md_overall_row(b, &m->benches[i].st, 0);
    md_overall_row(b, &m->all, 1);
    (void)af_buf_puts(b, "\n### Tool usage (all benchmarks)\n\n");
    md_tools(b, &m->all);
    (void)af_buf_puts(b, "### Tokens (all benchmarks, average per run)\n\n");
    md_tokens(b, &m->all);
}

/* --- writing ------------------------------------------------------------------------------ */

void report_item_page_path(struct af_buf *b, const json_t *line)
{
    (void)af_buf_puts(b, "report/items/");
    for (const char *s = af_json_get_str(line, "bench"); s && *s; s++) {
        char c = *s;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        (void)af_buf_putc(b, ok ? c : '_');
    }
    (void)af_buf_printf(b, "-%lld-%lld.html", (long long)jint(line, "index"),
                        (long long)jint(line, "trial"));
}

static int write_file(const char *rundir, const char *rel, const struct af_buf *content, char *err,
                      size_t errlen)
{
    struct af_buf p;
    af_buf_init(&p, AF_BUF_NOLIMIT);
    (void)af_buf_printf(&p, "%s/%s", rundir, rel);
    int rc = af_file_write_atomic(af_buf_str(&p), content->data ? content->data : "", content->len,
                                  err, errlen);
    af_buf_deinit(&p);
    return rc;
}

static int make_dirs(const char *rundir, char *err, size_t errlen)
{
    static const char *const rel[] = {"report", "report/items"};
    struct af_buf p;
    af_buf_init(&p, AF_BUF_NOLIMIT);
    int rc = AF_OK;
    for (size_t i = 0; i < 2 && rc == AF_OK; i++) {
        af_buf_reset(&p);
        (void)af_buf_printf(&p, "%s/%s", rundir, rel[i]);
        if (mkdir(af_buf_str(&p), 0777) != 0 && errno != EEXIST) {
            af_errf(err, errlen, "cannot create the folder '%s': %s", af_buf_str(&p),
                    strerror(errno));
            rc = AF_EIO;
        }
    }
    af_buf_deinit(&p);
    return rc;
}

static int write_items(const struct report_model *m, struct eval_report_info *info, char *err,
                       size_t errlen)
{
    int rc = make_dirs(m->rundir, err, errlen);
    struct af_buf page, rel;
    af_buf_init(&page, AF_BUF_NOLIMIT);
    af_buf_init(&rel, AF_BUF_NOLIMIT);
    for (size_t b = 0; b < m->n_benches && rc == AF_OK; b++) {
        size_t i;
        json_t *l;
        json_array_foreach(m->benches[b].lines, i, l)
        {
            int no_trace = 0;
            af_buf_reset(&page);
            af_buf_reset(&rel);
            report_html_item(&page, m, l, &no_trace);
            report_item_page_path(&rel, l);
            if ((rc = write_file(m->rundir, af_buf_str(&rel), &page, err, errlen)) != AF_OK)
                break;
            info->n_pages++;
            info->n_no_trace += no_trace ? 1 : 0;
        }
    }
    af_buf_deinit(&page);
    af_buf_deinit(&rel);
    return rc;
}

int eval_report_write(const char *rundir, struct eval_report_info *info, char *err, size_t errlen)
{
    struct eval_report_info local;
    memset(&local, 0, sizeof local);
    struct report_model m;
    memset(&m, 0, sizeof m);
    m.rundir = rundir;
    int rc = report_load(rundir, &m, err, errlen);
    if (rc != AF_OK) {
        model_deinit(&m);
        return rc;
    }
    model_compute(&m);
    struct af_buf out;
    af_buf_init(&out, AF_BUF_NOLIMIT);
    md_report(&out, &m);
    rc = write_file(rundir, "report.md", &out, err, errlen);
    if (rc == AF_OK)
        rc = write_items(&m, &local, err, errlen);
    if (rc == AF_OK) {
        af_buf_reset(&out);
        report_html_main(&out, &m);
        rc = write_file(rundir, "report.html", &out, err, errlen);
    }
    af_buf_deinit(&out);
    local.n_lines = m.all.n_runs;
    local.n_skipped = m.n_skipped;
    local.first_bad = m.first_bad;
    local.n_benches = m.n_benches;
    if (info && rc == AF_OK)
        *info = local;
    model_deinit(&m);
    return rc == AF_OK ? AF_OK : rc == AF_ETOOBIG ? AF_ETOOBIG : AF_EIO;
}
