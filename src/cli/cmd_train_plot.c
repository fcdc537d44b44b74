/*
 * cmd_train_plot.c - `agentflow train plot RUN`: the training curves of a `train grpo` run, or
 * of a `train sft` run (loss, learning rate, gradient norm: a log without rewards).
 *
 * Reads RUN/metrics.jsonl (one JSON object per step, appended and fsync'd by src/train/grpo.c)
 * and writes one RUN/<chart>.svg per chart, then RUN/curves.html with every chart inline, each
 * file atomically (a reader sees the old file or the whole new one). The page is self-contained:
 * inline SVG from eval/svg_line.c, one <style>, no script, no external reference.
 *
 * Input rules: the last line may be torn by a crash or a write in progress (no final newline
 * and not JSON), so it is dropped with a note; any other bad line is an error naming the file
 * and line, since plotting around it would hide a corrupt log. A step logged twice (a resume
 * without trim) keeps its later line. Fields a line lacks (val_accuracy on most steps) are
 * gaps, not zeros.
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/buf.h"
#include "core/fileio.h"
#include "core/xalloc.h"
#include "eval/svg.h"

#define PLOT "agentflow train plot"
#define PLOT_FILE_LIMIT ((size_t)1 << 30)
#define PLOT_PATH_MAX 4096

enum plot_metric {
    PM_REWARD,
    PM_ACCURACY,
    PM_VAL,
    PM_KL,
    PM_ENTROPY,
    PM_TURNS_MEAN,
    PM_TURNS_MAX,
    PM_TOOL_ERR,
    PM_RESP_LEN,
    PM_LOSS,
    PM_LR,
    PM_GRAD,
    PM_READ,               /* the metrics above are read from the log */
    PM_LOSS_AVG = PM_READ, /* derived: the loss's mean over the last PLOT_AVG steps */
    PM_COUNT
};
#define PLOT_AVG 100

static const char *const plot_keys[PM_COUNT] = {
    "reward_mean",  "accuracy",        "val_accuracy",    "kl",   "entropy", "turns_mean",
    "turns_max",    "tool_error_rate", "tokens_per_turn", "loss", "lr",      "grad_norm",
    "loss_mean_100"};

struct plot_row {
    int64_t step;
    size_t line;        /* 1-based line of metrics.jsonl */
    double v[PM_COUNT]; /* NaN where the line has no value */
    json_t *tool_use;   /* owned reference, or NULL */
};

/* Everything read from metrics.jsonl, rows sorted by step. */
struct plot_data {
    struct plot_row *rows;
    size_t n, cap;
    size_t torn_line; /* the dropped torn last line, or 0 */
    size_t n_dup;     /* lines superseded by a later line for the same step */
};

/* The tool mix: the most used tools (and "other" past SVG_LINE_MAX_SERIES - 1 of them) with
 * their share of a step's calls, share[t][row] (NaN on a step without calls). */
struct plot_mix {
    char *names[SVG_LINE_MAX_SERIES];   /* owned */
    double *share[SVG_LINE_MAX_SERIES]; /* owned, n rows each */
    size_t n_tools;
};

static void plot_usage(FILE *f)
{
    fprintf(f, "usage: agentflow train plot RUN\n"
               "\n"
               "Reads RUN/metrics.jsonl (written by agentflow train grpo) and writes, each\n"
               "atomically, one chart over steps per file:\n"
               "  RUN/reward.svg           reward_mean and accuracy\n"
               "  RUN/val_accuracy.svg     val_accuracy (the steps that ran validation)\n"
               "  RUN/kl.svg, RUN/entropy.svg\n"
               "  RUN/turns.svg            turns_mean and turns_max per trajectory\n"
               "  RUN/tool_error_rate.svg  failed tool calls / tool calls\n"
               "  RUN/response_length.svg  the planner's tokens per turn (tokens_per_turn)\n"
               "  RUN/tool_mix.svg         each tool's share of the tool calls\n"
               "or, for a train sft run (a log with a loss and no reward):\n"
               "  RUN/loss.svg             loss per step and its mean over the last 100 steps\n"
               "  RUN/lr.svg, RUN/grad_norm.svg\n"
               "and RUN/curves.html with all of them inline (self-contained, works offline).\n"
               "A torn last line (a crash mid-write) is skipped with a note; any other malformed\n"
               "line is an error naming it.\n"
               "Exit codes: 0 ok, 2 usage, 4 missing or malformed metrics.jsonl, or a file that\n"
               "cannot be written.\n");
}

static void plot_data_deinit(struct plot_data *d)
{
    for (size_t i = 0; i < d->n; i++)
        json_decref(d->rows[i].tool_use);
    free(d->rows);
    memset(d, 0, sizeof *d);
}

/* Fills row from one parsed line. Returns 0, or -1 with the reason in why. */
static int plot_row_from(json_t *obj, struct plot_row *row, char *why, size_t whylen)
{
    json_t *step = json_object_get(obj, "step");
    if (!json_is_integer(step)) {
        snprintf(why, whylen, "no integer \"step\"");
        return -1;
    }
    row->step = (int64_t)json_integer_value(step);
    row->v[PM_LOSS_AVG] = (double)NAN;
    for (int m = 0; m < PM_READ; m++) {
        json_t *v = json_object_get(obj, plot_keys[m]);
        row->v[m] = (double)NAN;
        if (v && !json_is_null(v) && !json_is_number(v)) {
            snprintf(why, whylen, "\"%s\" is not a number", plot_keys[m]);
            return -1;
        }
        if (v && !json_is_null(v))
            row->v[m] = json_number_value(v);
    }
    json_t *tu = json_object_get(obj, "tool_use");
    if (!tu || json_is_null(tu))
        return 0;
    const char *name;
    json_t *calls;
    if (!json_is_object(tu)) {
        snprintf(why, whylen, "\"tool_use\" is not an object");
        return -1;
    }
    json_object_foreach(tu, name, calls)
    {
        if (!json_is_number(calls) || json_number_value(calls) < 0) {
            snprintf(why, whylen, "tool_use \"%.200s\" is not a call count", name);
            return -1;
        }
    }
    row->tool_use = json_incref(tu);
    return 0;
}

/* Parses line `lineno` (s[0..len), no newline) into a new row of d. A blank line is skipped.
 * Returns 0, or -1 with the reason in why. */
static int plot_add_line(struct plot_data *d, const char *s, size_t len, size_t lineno, char *why,
                         size_t whylen)
{
    size_t i = 0;
    while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r'))
        i++;
    if (i == len)
        return 0;
    json_error_t jerr;
    json_t *obj = json_loadb(s, len, 0, &jerr);
    if (!obj || !json_is_object(obj)) {
        if (obj)
            snprintf(why, whylen, "not a JSON object");
        else
            snprintf(why, whylen, "not JSON: %s", jerr.text);
        json_decref(obj);
        return -1;
    }
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 64;
        d->rows = af_xrealloc(d->rows, d->cap * sizeof *d->rows);
    }
    struct plot_row *row = &d->rows[d->n];
    memset(row, 0, sizeof *row);
    row->line = lineno;
    int rc = plot_row_from(obj, row, why, whylen);
    json_decref(obj);
    if (rc == 0)
        d->n++;
    return rc;
}

static int row_cmp(const void *a, const void *b)
{
    const struct plot_row *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return x->line < y->line ? -1 : x->line > y->line;
}

/* Sorts by step and keeps the last line of each step. */
static void plot_sort_dedup(struct plot_data *d)
{
    if (d->n)
        qsort(d->rows, d->n, sizeof *d->rows, row_cmp);
    size_t out = 0;
    for (size_t i = 0; i < d->n; i++) {
        if (out > 0 && d->rows[out - 1].step == d->rows[i].step) {
            json_decref(d->rows[out - 1].tool_use);
            d->rows[out - 1] = d->rows[i];
            d->n_dup++;
            continue;
        }
        d->rows[out++] = d->rows[i];
    }
    d->n = out;
}

/* Reads path into d. Returns 0, or CLI_EINPUT with the message in err. */
static int plot_load(const char *path, struct plot_data *d, char *err, size_t errlen)
{
    char *text = NULL, why[512];
    size_t len = 0;
    if (af_file_read(path, PLOT_FILE_LIMIT, &text, &len, err, errlen) != AF_OK)
        return CLI_EINPUT;
    int rc = CLI_OK;
    size_t lineno = 0;
    for (size_t pos = 0; pos < len;) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len;
        lineno++;
        if (plot_add_line(d, text + pos, end - pos, lineno, why, sizeof why) != 0) {
            if (!nl) { /* the last line, never finished: a crash or a write in progress */
                d->torn_line = lineno;
                break;
            }
            snprintf(err, errlen, "%s: line %zu: %s", path, lineno, why);
            rc = CLI_EINPUT;
            break;
        }
        pos = end + 1;
    }
    free(text);
    if (rc == CLI_OK)
        plot_sort_dedup(d);
    return rc;
}

/* --- the tool mix ----------------------------------------------------------------------- */

struct tool_total {
    char *name;
    double calls;
};

static int tool_total_cmp(const void *a, const void *b)
{
    const struct tool_total *x = a, *y = b;
    if (x->calls != y->calls)
        return x->calls > y->calls ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Every tool's calls over the run, most used first. Returns an owned array (free() it and
 * each name). */
static struct tool_total *tool_totals(const struct plot_data *d, size_t *n_out)
{
    json_t *sum = json_object();
    const char *name;
    json_t *v;
    for (size_t i = 0; i < d->n; i++)
        json_object_foreach(d->rows[i].tool_use, name, v)
        {
            json_t *t = json_object_get(sum, name);
            json_object_set_new(sum, name, json_real(json_number_value(t) + json_number_value(v)));
        }
    size_t n = 0;
    struct tool_total *tt = af_xcalloc(json_object_size(sum) + 1, sizeof *tt);
    json_object_foreach(sum, name, v)
    {
        tt[n].name = af_xstrdup(name);
        tt[n++].calls = json_number_value(v);
    }
    json_decref(sum);
    if (n)
        qsort(tt, n, sizeof *tt, tool_total_cmp);
    *n_out = n;
    return tt;
}

/* Which series tool `name` goes to: its own among the first ones, else the last ("other"). */
static size_t mix_slot(const struct plot_mix *m, size_t n_all, const char *name)
{
    size_t own = n_all > SVG_LINE_MAX_SERIES ? SVG_LINE_MAX_SERIES - 1 : n_all;
    for (size_t t = 0; t < own; t++)
        if (!strcmp(m->names[t], name))
            return t;
    return m->n_tools - 1;
}

static void plot_mix_build(const struct plot_data *d, struct plot_mix *m)
{
    size_t n_all = 0;
    struct tool_total *tt = tool_totals(d, &n_all);
    memset(m, 0, sizeof *m);
    m->n_tools = n_all > SVG_LINE_MAX_SERIES ? SVG_LINE_MAX_SERIES : n_all;
    for (size_t t = 0; t < m->n_tools; t++) {
        m->names[t] = tt[t].name;
        m->share[t] = af_xcalloc(d->n ? d->n : 1, sizeof(double));
    }
    for (size_t t = m->n_tools; t < n_all; t++)
        free(tt[t].name);
    if (n_all > SVG_LINE_MAX_SERIES) { /* the rest share the last series */
        free(m->names[SVG_LINE_MAX_SERIES - 1]);
        m->names[SVG_LINE_MAX_SERIES - 1] = af_xstrdup("other");
    }
    for (size_t i = 0; i < d->n; i++) {
        double total = 0;
        const char *name;
        json_t *v;
        json_object_foreach(d->rows[i].tool_use, name, v)
        {
            m->share[mix_slot(m, n_all, name)][i] += json_number_value(v);
            total += json_number_value(v);
        }
        for (size_t t = 0; t < m->n_tools; t++)
            m->share[t][i] = total > 0 ? m->share[t][i] / total : (double)NAN;
    }
    free(tt);
}

static void plot_mix_deinit(struct plot_mix *m)
{
    for (size_t t = 0; t < m->n_tools; t++) {
        free(m->names[t]);
        free(m->share[t]);
    }
    memset(m, 0, sizeof *m);
}

/* --- charts and files ------------------------------------------------------------------- */

struct plot_chart {
    const char *file;  /* RUN/<file>.svg */
    const char *title; /* also the <h2> of the page */
    const char *y_label;
    int metrics[2]; /* plot_metric, -1: none; both -1: the tool mix */
    double y_min, y_max;
};

static const struct plot_chart plot_charts[] = {
    {"reward", "Reward", "reward / accuracy", {PM_REWARD, PM_ACCURACY}, 0, 1},
    {"val_accuracy", "Validation accuracy", "accuracy", {PM_VAL, -1}, 0, 1},
    {"kl", "KL to the reference", "kl", {PM_KL, -1}, 0, 0},
    {"entropy", "Entropy", "nats per token", {PM_ENTROPY, -1}, 0, 0},
    {"turns", "Turns per trajectory", "turns", {PM_TURNS_MEAN, PM_TURNS_MAX}, 0, 0},
    {"tool_error_rate", "Tool-call error rate", "failed / calls", {PM_TOOL_ERR, -1}, 0, 1},
    {"response_length", "Response length", "tokens per planner turn", {PM_RESP_LEN, -1}, 0, 0},
    {"tool_mix", "Tool mix", "share of calls", {-1, -1}, 0, 1},
};
#define PLOT_N_CHARTS (sizeof plot_charts / sizeof plot_charts[0])

static const struct plot_chart plot_sft_charts[] = {
    {"loss", "Training loss", "nats per token", {PM_LOSS, PM_LOSS_AVG}, 0, 0},
    {"lr", "Learning rate", "lr", {PM_LR, -1}, 0, 0},
    {"grad_norm", "Gradient norm", "norm", {PM_GRAD, -1}, 0, 0},
};
#define PLOT_N_SFT_CHARTS (sizeof plot_sft_charts / sizeof plot_sft_charts[0])

static int plot_has(const struct plot_data *d, int m)
{
    for (size_t i = 0; i < d->n; i++)
        if (isfinite(d->rows[i].v[m]))
            return 1;
    return 0;
}

/* A log with a loss and no reward is a train sft run: its own charts. */
static int plot_is_sft(const struct plot_data *d)
{
    return !plot_has(d, PM_REWARD) && plot_has(d, PM_LOSS);
}

/* The loss's trailing mean over the last PLOT_AVG steps (fewer at the start; steps without a
 * loss left out), for a curve that a batch's noise does not hide. */
static void plot_derive(struct plot_data *d)
{
    double sum = 0;
    size_t have = 0, first = 0;
    for (size_t i = 0; i < d->n; i++) {
        const double v = d->rows[i].v[PM_LOSS];
        if (isfinite(v))
            sum += v, have++;
        while (first < i && d->rows[first].step <= d->rows[i].step - PLOT_AVG) {
            const double o = d->rows[first++].v[PM_LOSS];
            if (isfinite(o))
                sum -= o, have--;
        }
        d->rows[i].v[PM_LOSS_AVG] = have && isfinite(v) ? sum / (double)have : (double)NAN;
    }
}

/* The columns of d as arrays for the charts: x = steps, y[m] = metric m (owned, free()). */
struct plot_cols {
    double *x;
    double *y[PM_COUNT];
};

static void plot_cols_init(struct plot_cols *c, const struct plot_data *d)
{
    size_t n = d->n ? d->n : 1;
    c->x = af_xmalloc(n * sizeof(double));
    for (int m = 0; m < PM_COUNT; m++)
        c->y[m] = af_xmalloc(n * sizeof(double));
    for (size_t i = 0; i < d->n; i++) {
        c->x[i] = (double)d->rows[i].step;
        for (int m = 0; m < PM_COUNT; m++)
            c->y[m][i] = d->rows[i].v[m];
    }
}

static void plot_cols_deinit(struct plot_cols *c)
{
    free(c->x);
    for (int m = 0; m < PM_COUNT; m++)
        free(c->y[m]);
}

static void plot_chart_svg(struct af_buf *b, const struct plot_chart *ch,
                           const struct plot_cols *cols, const struct plot_mix *mix, size_t n,
                           int standalone)
{
    struct svg_lines c = {.title = ch->title,
                          .x_label = "step",
                          .y_label = ch->y_label,
                          .y_min = ch->y_min,
                          .y_max = ch->y_max,
                          .standalone = standalone};
    if (n >= 2) /* every chart over all the run's steps, validation's too */
        c.x_min = cols->x[0], c.x_max = cols->x[n - 1];
    if (ch->metrics[0] < 0) {
        for (size_t t = 0; t < mix->n_tools; t++)
            c.series[c.n_series++] =
                (struct svg_line_series){mix->names[t], cols->x, mix->share[t], n};
    }
    for (int k = 0; k < 2 && ch->metrics[k] >= 0; k++) {
        int m = ch->metrics[k];
        /* a lone series needs no legend: the title names it */
        const char *name = ch->metrics[1] >= 0 ? plot_keys[m] : NULL;
        c.series[c.n_series++] = (struct svg_line_series){name, cols->x, cols->y[m], n};
    }
    svg_line_chart(b, &c);
}

static int plot_write(const char *run, const char *file, const struct af_buf *b, char *err,
                      size_t errlen)
{
    char path[PLOT_PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", run, file) >= sizeof path) {
        snprintf(err, errlen, "path too long: %s/%s", run, file);
        return CLI_EINPUT;
    }
    if (af_file_write_atomic(path, af_buf_str(b), b->len, err, errlen) != AF_OK)
        return CLI_EINPUT;
    return CLI_OK;
}

/* The page's head, the notes and a table of each metric's last value, min and max. */
static void plot_html_head(struct af_buf *h, const char *run, const struct plot_data *d)
{
    (void)af_buf_puts(h, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                         "<title>Training curves: ");
    svg_escape(h, run);
    (void)af_buf_puts(h, "</title>\n<style>body{font-family:sans-serif;margin:24px;color:#222}"
                         ".chart{display:block;margin:8px 0 24px}.note{color:#a40}"
                         "table{border-collapse:collapse}td,th{padding:2px 10px;"
                         "border-bottom:1px solid #ddd;text-align:right}</style>\n</head>\n<body>\n"
                         "<h1>Training curves</h1>\n<p>");
    svg_escape(h, run);
    if (d->n)
        (void)af_buf_printf(h, "/metrics.jsonl: %zu step(s), %lld to %lld.</p>\n", d->n,
                            (long long)d->rows[0].step, (long long)d->rows[d->n - 1].step);
    else
        (void)af_buf_puts(h, "/metrics.jsonl: no steps yet.</p>\n");
    if (d->torn_line)
        (void)af_buf_printf(h,
                            "<p class=\"note\">Note: line %zu, the last, is torn (a crash or a "
                            "write in progress) and was skipped.</p>\n",
                            d->torn_line);
    if (d->n_dup)
        (void)af_buf_printf(h,
                            "<p class=\"note\">Note: %zu line(s) repeat a step; the later line "
                            "of each step is plotted.</p>\n",
                            d->n_dup);
    (void)af_buf_puts(h,
                      "<table>\n<tr><th>metric</th><th>last</th><th>min</th><th>max</th></tr>\n");
    for (int m = 0; m < PM_COUNT; m++) {
        if (!plot_has(d, m) && (m >= PM_LOSS || plot_is_sft(d)))
            continue; /* a metric this kind of run does not log */
        double last = (double)NAN, lo = HUGE_VAL, hi = -HUGE_VAL;
        for (size_t i = 0; i < d->n; i++) {
            double v = d->rows[i].v[m];
            if (isfinite(v))
                last = v, lo = fmin(lo, v), hi = fmax(hi, v);
        }
        (void)af_buf_printf(h, "<tr><th>%s</th>", plot_keys[m]);
        if (isfinite(last))
            (void)af_buf_printf(h, "<td>%.4g</td><td>%.4g</td><td>%.4g</td></tr>\n", last, lo, hi);
        else
            (void)af_buf_puts(h, "<td>-</td><td>-</td><td>-</td></tr>\n");
    }
    (void)af_buf_puts(h, "</table>\n");
}

/* Writes every chart's .svg, then curves.html (last, so that it appears only when all is done).
 * *n_charts: how many. */
static int plot_render(const char *run, const struct plot_data *d, size_t *n_charts, char *err,
                       size_t errlen)
{
    const int sft = plot_is_sft(d);
    const struct plot_chart *charts = sft ? plot_sft_charts : plot_charts;
    *n_charts = sft ? PLOT_N_SFT_CHARTS : PLOT_N_CHARTS;
    struct plot_cols cols;
    struct plot_mix mix;
    struct af_buf html, svg;
    plot_cols_init(&cols, d);
    plot_mix_build(d, &mix);
    af_buf_init(&html, AF_BUF_NOLIMIT);
    af_buf_init(&svg, AF_BUF_NOLIMIT);
    plot_html_head(&html, run, d);
    int rc = CLI_OK;
    for (size_t k = 0; k < *n_charts && rc == CLI_OK; k++) {
        const struct plot_chart *ch = &charts[k];
        char file[64];
        af_buf_reset(&svg);
        (void)af_buf_puts(&svg, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        plot_chart_svg(&svg, ch, &cols, &mix, d->n, 1);
        snprintf(file, sizeof file, "%s.svg", ch->file);
        rc = plot_write(run, file, &svg, err, errlen);
        (void)af_buf_printf(&html, "<h2 id=\"%s\">", ch->file);
        svg_escape(&html, ch->title);
        (void)af_buf_puts(&html, "</h2>\n");
        plot_chart_svg(&html, ch, &cols, &mix, d->n, 0);
    }
    (void)af_buf_puts(&html, "</body>\n</html>\n");
    if (rc == CLI_OK)
        rc = plot_write(run, "curves.html", &html, err, errlen);
    af_buf_deinit(&svg);
    af_buf_deinit(&html);
    plot_mix_deinit(&mix);
    plot_cols_deinit(&cols);
    return rc;
}

int cmd_train_plot(int argc, char **argv)
{
    const char *run = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            plot_usage(stdout);
            return CLI_OK;
        }
        if (argv[i][0] == '-' || run) {
            fprintf(stderr, PLOT ": unexpected argument \"%s\"\n", argv[i]);
            plot_usage(stderr);
            return CLI_EUSAGE;
        }
        run = argv[i];
    }
    if (!run || !run[0]) {
        plot_usage(stderr);
        return CLI_EUSAGE;
    }
    char path[PLOT_PATH_MAX], err[PLOT_PATH_MAX + 1024];
    if ((size_t)snprintf(path, sizeof path, "%s/metrics.jsonl", run) >= sizeof path) {
        fprintf(stderr, PLOT ": path too long: %s\n", run);
        return CLI_EINPUT;
    }
    struct plot_data d = {0};
    int rc = plot_load(path, &d, err, sizeof err);
    if (rc == CLI_OK && d.torn_line)
        fprintf(stderr,
                PLOT ": note: %s: skipped line %zu, the last, which is torn (a crash or a "
                     "write in progress)\n",
                path, d.torn_line);
    if (rc == CLI_OK && d.n_dup)
        fprintf(stderr, PLOT ": note: %s: %zu line(s) repeat a step; plotted the later one\n", path,
                d.n_dup);
    size_t n_charts = 0;
    if (rc == CLI_OK) {
        plot_derive(&d);
        rc = plot_render(run, &d, &n_charts, err, sizeof err);
    }
    if (rc == CLI_OK)
        printf("wrote %s/curves.html and %zu chart(s) as %s/*.svg from %zu step(s)\n", run,
               n_charts, run, d.n);
    else
        fprintf(stderr, PLOT ": %s\n", err);
    plot_data_deinit(&d);
    return rc;
}
