/*
 * test_train_plot.c - the SVG line chart (eval/svg_line.c) and `agentflow train plot RUN`.
 *
 * The chart: known points land at coordinates computed from the public plot-area constants
 * (fixed and fitted y ranges, a single point, gaps), hostile names come out escaped, a chart
 * without finite points says "no data", many points drop the markers. The command, end to end on
 * a metrics.jsonl written here: every file exists and is complete, the page holds every chart
 * and each tool of the mix (shares at the expected height), validation points only where they
 * were logged, nothing active or external in the page, no temporary file left behind; then the
 * error cases (missing file, malformed line, a non-number field: exit 4 naming them; a torn last
 * line: a note and exit 0; usage: exit 2).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/fileio.h"
#include "eval/svg.h"
#include "support/proc.h"

#define RUN_TIMEOUT_S 60.0

static char g_dir[64];

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

/* The pixel position of data point (x, y) on axes spanning [x_lo, x_hi] x [y_lo, y_hi], as the
 * chart prints it. */
static void point_text(char *buf, size_t len, double x, double y, double x_lo, double x_hi,
                       double y_lo, double y_hi)
{
    snprintf(buf, len, "%.1f,%.1f", SVG_LINE_LEFT + SVG_LINE_PLOT_W * (x - x_lo) / (x_hi - x_lo),
             SVG_LINE_TOP + SVG_LINE_PLOT_H - SVG_LINE_PLOT_H * (y - y_lo) / (y_hi - y_lo));
}

/* --- the line chart --------------------------------------------------------------------- */

static void test_line_points(void **state)
{
    (void)state;
    const double x[] = {1, 2, 3}, y0[] = {0, 0.5, 1}, y1[] = {0.25, (double)NAN, 0.75};
    struct svg_lines c = {.title = "Reward", .x_label = "step", .y_label = "reward"};
    c.series[0] = (struct svg_line_series){"reward_mean", x, y0, 3};
    c.series[1] = (struct svg_line_series){"accuracy", x, y1, 3};
    c.n_series = 2;
    c.y_min = 0, c.y_max = 1;
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    svg_line_chart(&b, &c);
    char p[3][64], want[256];
    for (int i = 0; i < 3; i++)
        point_text(p[i], sizeof p[i], x[i], y0[i], 1, 3, 0, 1);
    snprintf(want, sizeof want, "points=\"%s %s %s\"", p[0], p[1], p[2]);
    assert_true(contains(b.data, want));
    assert_true(contains(b.data, "points=\"64.0,236.0 344.0,136.0 624.0,36.0\""));
    /* the gap is left out, not drawn as 0 */
    point_text(p[0], sizeof p[0], 1, 0.25, 1, 3, 0, 1);
    point_text(p[1], sizeof p[1], 3, 0.75, 1, 3, 0, 1);
    snprintf(want, sizeof want, "points=\"%s %s\"", p[0], p[1]);
    assert_true(contains(b.data, want));
    assert_int_equal(count_of(b.data, "<polyline"), 2);
    assert_int_equal(count_of(b.data, "<circle"), 5);
    assert_true(contains(b.data, ">reward_mean</text>"));
    assert_true(contains(b.data, ">accuracy</text>"));
    assert_true(contains(b.data, ">0.6</text>")); /* a y tick of the fixed [0, 1] */
    assert_null(strstr(b.data, "no data"));
    assert_null(strstr(b.data, "xmlns"));
    assert_int_equal(count_of(b.data, "<svg"), 1);
    assert_int_equal(strncmp(b.data + b.len - 7, "</svg>\n", 7), 0);
    af_buf_deinit(&b);
}

static void test_line_fitted_range(void **state)
{
    (void)state;
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    /* one point: x spans step +- 1 and y its value +- 10 %, so it lands in the middle */
    const double x1[] = {5}, y1[] = {2};
    struct svg_lines c = {.title = "t", .x_label = "step", .y_label = "kl"};
    c.series[0] = (struct svg_line_series){NULL, x1, y1, 1};
    c.n_series = 1;
    svg_line_chart(&b, &c);
    assert_true(contains(b.data, "points=\"344.0,136.0\""));
    assert_true(contains(b.data, "cx=\"344.0\" cy=\"136.0\""));
    af_buf_reset(&b);
    /* a fitted range is rounded out to whole ticks: [0.13, 0.47] -> [0.1, 0.5] by 0.1 */
    const double x2[] = {10, 20, 30}, y2[] = {0.13, 0.47, 0.3};
    c.series[0] = (struct svg_line_series){"v", x2, y2, 3};
    svg_line_chart(&b, &c);
    char p[3][64], want[256];
    for (int i = 0; i < 3; i++)
        point_text(p[i], sizeof p[i], x2[i], y2[i], 10, 30, 0.1, 0.5);
    snprintf(want, sizeof want, "points=\"%s %s %s\"", p[0], p[1], p[2]);
    assert_true(contains(b.data, want));
    assert_true(contains(b.data, ">0.1</text>"));
    assert_true(contains(b.data, ">0.5</text>"));
    assert_null(strstr(b.data, ">0.6</text>"));
    af_buf_reset(&b);
    /* data outside a fixed range widen it rather than leave the plot */
    const double y3[] = {0, 0.5, 2};
    c.series[0] = (struct svg_line_series){"v", x2, y3, 3};
    c.y_min = 0, c.y_max = 1;
    svg_line_chart(&b, &c);
    for (int i = 0; i < 3; i++)
        point_text(p[i], sizeof p[i], x2[i], y3[i], 10, 30, 0, 2);
    snprintf(want, sizeof want, "points=\"%s %s %s\"", p[0], p[1], p[2]);
    assert_true(contains(b.data, want));
    af_buf_deinit(&b);
}

static void test_line_escaping(void **state)
{
    (void)state;
    const char *evil = "<script>alert('x')</script>&\"";
    const double x[] = {1, 2}, y[] = {0.1, 0.2};
    struct svg_lines c = {.title = evil, .x_label = evil, .y_label = evil};
    c.series[0] = (struct svg_line_series){evil, x, y, 2};
    c.n_series = 1;
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    svg_line_chart(&b, &c);
    const char *esc = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;";
    /* title (twice), both axis labels, the legend and both points' tooltips */
    assert_int_equal(count_of(b.data, esc), 7);
    assert_null(strstr(b.data, "<script"));
    assert_null(strstr(b.data, "alert('x')"));
    af_buf_deinit(&b);
}

static void test_line_no_data(void **state)
{
    (void)state;
    const double x[] = {1, 2, 3}, y[] = {(double)NAN, HUGE_VAL, (double)NAN};
    struct svg_lines c = {.title = "Validation accuracy", .x_label = "step", .y_label = "acc"};
    c.series[0] = (struct svg_line_series){"val", x, y, 3};
    c.n_series = 1;
    c.standalone = 1;
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    svg_line_chart(&b, &c);
    assert_true(contains(b.data, ">no data</text>"));
    assert_null(strstr(b.data, "<polyline"));
    assert_null(strstr(b.data, "<circle"));
    assert_true(contains(b.data, "xmlns=\"http://www.w3.org/2000/svg\""));
    af_buf_reset(&b);
    c.n_series = 0;
    svg_line_chart(&b, &c);
    assert_true(contains(b.data, ">no data</text>"));
    af_buf_deinit(&b);
}

/* Every number printed is a clamped coordinate or a short label: no 300-digit run. */
static void check_short_numbers(const char *s)
{
    size_t run = 0;
    for (; *s; s++) {
        run = (*s >= '0' && *s <= '9') ? run + 1 : 0;
        assert_true(run < 16);
    }
}

static void test_line_many(void **state)
{
    (void)state;
    enum { N = 500 };
    double *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    assert_non_null(x);
    assert_non_null(y);
    for (int i = 0; i < N; i++)
        x[i] = i + 1, y[i] = (i % 7) * 1e300; /* absurd values: coordinates stay bounded */
    struct svg_lines c = {.title = "t", .x_label = "step", .y_label = "y"};
    for (size_t s = 0; s < SVG_LINE_MAX_SERIES; s++)
        c.series[s] = (struct svg_line_series){"s", x, y, N};
    c.n_series = SVG_LINE_MAX_SERIES + 5; /* clamped, not read past the array */
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    svg_line_chart(&b, &c);
    assert_int_equal(count_of(b.data, "<polyline"), SVG_LINE_MAX_SERIES);
    assert_null(strstr(b.data, "<circle")); /* too many points for markers */
    assert_null(strstr(b.data, "nan"));
    assert_null(strstr(b.data, "inf"));
    check_short_numbers(b.data);
    /* values whose span overflows a double */
    const double xs[] = {1, 2, 3}, ys[] = {-1e308, 1e308, 0};
    struct svg_lines e = {.title = "t", .x_label = "step", .y_label = "y"};
    e.series[0] = (struct svg_line_series){"s", xs, ys, 3};
    e.n_series = 1;
    af_buf_reset(&b);
    svg_line_chart(&b, &e);
    assert_int_equal(count_of(b.data, "<polyline"), 1);
    check_short_numbers(b.data);
    assert_null(strstr(b.data, "nan"));
    assert_null(strstr(b.data, "inf"));
    af_buf_deinit(&b);
    free(x);
    free(y);
}

/* --- the command ------------------------------------------------------------------------ */

static const char *tmp_path(const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", g_dir, name);
    return buf;
}

static void rm_rf(const char *path)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
}

static void write_file(const char *dir, const char *rel, const char *text)
{
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    assert_int_equal(af_file_write_atomic(path, text, strlen(text), err, sizeof err), 0);
}

static char *read_file(const char *dir, const char *rel)
{
    char path[1024], *text = NULL, err[256];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    if (af_file_read(path, 1 << 26, &text, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        fail();
    }
    return text;
}

static int exists(const char *dir, const char *rel)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    return access(path, F_OK) == 0;
}

/* A fresh run directory with metrics.jsonl = text. */
static void make_run(const char *name, const char *text, char *dir, size_t len)
{
    tmp_path(name, dir, len);
    rm_rf(dir);
    assert_int_equal(mkdir(dir, 0777), 0);
    write_file(dir, "metrics.jsonl", text);
}

static int plot(const char *dir, struct proc_result *r)
{
    const char *argv[] = {proc_agentflow_bin(), "train", "plot", dir, NULL};
    assert_int_equal(proc_run(argv, NULL, RUN_TIMEOUT_S, r), 0);
    if (r->exit_code != 0 && r->exit_code != 4) /* 4 is what the bad-input cases expect */
        fprintf(stderr, "train plot %s: exit %d, stderr: %s\n", dir, r->exit_code, r->err);
    return r->exit_code;
}

/* 12 steps as train grpo writes them: three tools (one with a hostile name) at fixed counts
 * 6:3:1 (shares 0.6, 0.3, 0.1), validation on steps 4, 8 and 12. */
static char *metrics_text(int n_steps, int with_val)
{
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    for (int s = 1; s <= n_steps; s++) {
        (void)af_buf_printf(
            &b,
            "{\"step\":%d,\"reward_mean\":%.3f,\"accuracy\":%.3f,\"degenerate_frac\":0.5,"
            "\"kl\":%g,\"clip_frac_low\":0.0,\"clip_frac_high\":0.0,\"entropy\":%.2f,"
            "\"loss\":0.01,\"grad_norm\":0.3,\"lr\":1e-5,\"turns_mean\":%.1f,\"turns_max\":%d,"
            "\"tool_error_rate\":%.2f,\"tokens_per_turn\":%.1f,\"trajectories\":4,\"turns\":8,"
            "\"tool_use\":{"
            "\"Python_Code_Generator_Tool\":6,\"Wikipedia_Search_Tool\":3,"
            "\"<img src=x onerror=alert(1)>\":1},\"rollout_tok_s\":1789.2,"
            "\"phase_s\":{\"rollout\":23.3,\"backward\":5.9},\"optimizer_steps\":1",
            s, 0.05 * s, 0.04 * s, 1e-4 * s, 5.5 - 0.01 * s, 2.0 + 0.1 * s, 3 + s % 2,
            0.5 - 0.02 * s, 40.0 + s);
        if (with_val && s % 4 == 0)
            (void)af_buf_printf(&b, ",\"val_accuracy\":%.2f", 0.25 + 0.05 * s);
        (void)af_buf_puts(&b, "}\n");
    }
    return af_buf_detach(&b);
}

static const char *const chart_files[] = {
    "reward.svg",          "val_accuracy.svg",    "kl.svg",      "entropy.svg", "turns.svg",
    "tool_error_rate.svg", "response_length.svg", "tool_mix.svg"};
#define N_CHARTS (sizeof chart_files / sizeof chart_files[0])

/* No temporary file of the atomic writes is left in dir. */
static void check_no_tmp(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strstr(e->d_name, ".tmp"))
            fprintf(stderr, "left behind: %s\n", e->d_name);
        assert_null(strstr(e->d_name, ".tmp"));
    }
    closedir(d);
}

/* The points attribute of the first polyline after `after` in text (malloc'd). */
static char *points_after(const char *text, const char *after)
{
    const char *p = strstr(text, after);
    assert_non_null(p);
    p = strstr(p, "points=\"");
    assert_non_null(p);
    p += 8;
    const char *q = strchr(p, '"');
    assert_non_null(q);
    char *s = malloc((size_t)(q - p) + 1);
    assert_non_null(s);
    memcpy(s, p, (size_t)(q - p));
    s[q - p] = 0;
    return s;
}

/* A train sft log (loss, lr, grad_norm, no reward) gets its own charts: the loss with its
 * trailing mean over 100 steps, the learning rate and the gradient norm; no reward chart. */
static void test_plot_sft(void **state)
{
    (void)state;
    char dir[512];
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    for (int st = 1; st <= 120; st++)
        (void)af_buf_printf(&b,
                            "{\"step\":%d,\"loss\":%d,\"lr\":0.001,\"grad_norm\":1.5,"
                            "\"tokens\":100,\"tokens_per_s\":900.0}\n",
                            st, st);
    make_run("run_sft", b.data, dir, sizeof dir);
    af_buf_deinit(&b);
    struct proc_result r;
    assert_int_equal(plot(dir, &r), 0);
    assert_true(contains(r.out, "3 chart(s)"));
    proc_result_deinit(&r);
    char *loss = read_file(dir, "loss.svg");
    assert_int_equal(count_of(loss, "<polyline"), 2);
    assert_true(contains(loss, ">loss_mean_100</text>"));
    free(loss);
    char *lr = read_file(dir, "lr.svg");
    assert_int_equal(count_of(lr, "<polyline"), 1);
    free(lr);
    char *gn = read_file(dir, "grad_norm.svg");
    assert_int_equal(count_of(gn, "<polyline"), 1);
    free(gn);
    assert_false(exists(dir, "reward.svg"));
    char *html = read_file(dir, "curves.html");
    assert_true(contains(html, "Training loss"));
    /* step 120: the mean of steps 21-120, 70.5; the rows of GRPO's metrics are left out */
    assert_true(contains(html, "<tr><th>loss_mean_100</th><td>70.5</td><td>1</td><td>70.5</td>"));
    assert_true(contains(html, "<tr><th>loss</th><td>120</td><td>1</td><td>120</td>"));
    assert_false(contains(html, "<th>reward_mean</th>"));
    free(html);
    check_no_tmp(dir);
    rm_rf(dir);
}

static void test_plot_end_to_end(void **state)
{
    (void)state;
    char dir[512];
    char *text = metrics_text(12, 1);
    make_run("run_e2e", text, dir, sizeof dir);
    free(text);
    struct proc_result r;
    assert_int_equal(plot(dir, &r), 0);
    assert_true(contains(r.out, "curves.html"));
    assert_true(contains(r.out, "12 step(s)"));
    assert_null(strstr(r.err, "note"));
    proc_result_deinit(&r);
    for (size_t k = 0; k < N_CHARTS; k++) {
        char *svg = read_file(dir, chart_files[k]);
        assert_int_equal(strncmp(svg, "<?xml", 5), 0);
        assert_true(contains(svg, "xmlns=\"http://www.w3.org/2000/svg\""));
        assert_int_equal(count_of(svg, "<svg"), 1);
        assert_true(contains(svg, "</svg>\n"));
        assert_null(strstr(svg, "no data"));
        free(svg);
    }
    char *html = read_file(dir, "curves.html");
    assert_int_equal(count_of(html, "<svg"), N_CHARTS);
    const char *titles[] = {">Reward</h2>",
                            ">Validation accuracy</h2>",
                            ">KL to the reference</h2>",
                            ">Entropy</h2>",
                            ">Turns per trajectory</h2>",
                            ">Tool-call error rate</h2>",
                            ">Response length</h2>",
                            ">Tool mix</h2>"};
    for (size_t k = 0; k < N_CHARTS; k++)
        assert_true(contains(html, titles[k]));
    /* the tool mix names each tool, the hostile one escaped */
    assert_true(contains(html, ">Python_Code_Generator_Tool</text>"));
    assert_true(contains(html, ">Wikipedia_Search_Tool</text>"));
    assert_true(contains(html, ">&lt;img src=x onerror=alert(1)&gt;</text>"));
    assert_null(strstr(html, "<img"));
    assert_null(strstr(html, "<script"));
    assert_null(strstr(html, "http"));
    assert_null(strstr(html, "src=\""));
    assert_null(strstr(html, "href"));
    /* shares 0.6, 0.3, 0.1 on a [0, 1] axis, most used tool first: flat lines at those heights */
    char *mix = read_file(dir, "tool_mix.svg");
    const double share[3] = {0.6, 0.3, 0.1};
    for (int t = 0; t < 3; t++) {
        char first[64], last[64], series[32];
        point_text(first, sizeof first, 1, share[t], 1, 12, 0, 1);
        point_text(last, sizeof last, 12, share[t], 1, 12, 0, 1);
        snprintf(series, sizeof series, "stroke=\"%s\"",
                 t == 0   ? "#4e79a7"
                 : t == 1 ? "#f28e2b"
                          : "#59a14f");
        char *pts = points_after(mix, series);
        assert_int_equal(count_of(pts, " "), 11);
        assert_int_equal(strncmp(pts, first, strlen(first)), 0);
        assert_true(contains(pts, last));
        free(pts);
    }
    free(mix);
    /* validation only on the steps that ran it: 3 points, the first at step 4 of 1..12 */
    char *val = read_file(dir, "val_accuracy.svg");
    char *pts = points_after(val, "<polyline");
    assert_int_equal(count_of(pts, " "), 2);
    char first[64];
    point_text(first, sizeof first, 4, 0.45, 1, 12, 0, 1);
    assert_int_equal(strncmp(pts, first, strlen(first)), 0);
    free(pts);
    free(val);
    free(html);
    check_no_tmp(dir);
    rm_rf(dir);
}

static void test_plot_sparse(void **state)
{
    (void)state;
    char dir[512];
    /* no validation at all, a step logged twice (the later line wins), no tool calls on step 2,
     * more tools than series (the rest become "other"), a blank line */
    const char *text =
        "{\"step\":1,\"reward_mean\":0.1,\"tool_use\":{\"a\":1,\"b\":1,\"c\":1,\"d\":1,\"e\":1,"
        "\"f\":1,\"g\":1,\"h\":1,\"i\":1,\"j\":1}}\n"
        "{\"step\":2,\"reward_mean\":0.9,\"tool_use\":{}}\n"
        "\n"
        "{\"step\":2,\"reward_mean\":0.5,\"tool_use\":{}}\n"
        "{\"step\":3,\"reward_mean\":0.2,\"tool_use\":{\"a\":4}}\n";
    make_run("run_sparse", text, dir, sizeof dir);
    struct proc_result r;
    assert_int_equal(plot(dir, &r), 0);
    assert_true(contains(r.err, "1 line(s) repeat a step"));
    assert_true(contains(r.out, "3 step(s)"));
    proc_result_deinit(&r);
    char *val = read_file(dir, "val_accuracy.svg");
    assert_true(contains(val, ">no data</text>"));
    free(val);
    char *reward = read_file(dir, "reward.svg");
    char want[256], p[3][64];
    const double y[3] = {0.1, 0.5, 0.2};
    for (int i = 0; i < 3; i++)
        point_text(p[i], sizeof p[i], i + 1, y[i], 1, 3, 0, 1);
    snprintf(want, sizeof want, "points=\"%s %s %s\"", p[0], p[1], p[2]);
    assert_true(contains(reward, want));
    free(reward);
    char *mix = read_file(dir, "tool_mix.svg");
    assert_int_equal(count_of(mix, "<polyline"), SVG_LINE_MAX_SERIES);
    assert_true(contains(mix, ">other</text>"));
    assert_true(contains(mix, ">a</text>"));
    /* "a": 1/10 on step 1, no point on step 2 (no calls), all of them on step 3 */
    char *pts = points_after(mix, "<polyline");
    point_text(p[0], sizeof p[0], 1, 0.1, 1, 3, 0, 1);
    point_text(p[1], sizeof p[1], 3, 1.0, 1, 3, 0, 1);
    snprintf(want, sizeof want, "%s %s", p[0], p[1]);
    assert_string_equal(pts, want);
    free(pts);
    free(mix);
    char *html = read_file(dir, "curves.html");
    assert_true(contains(html, "repeat a step"));
    free(html);
    rm_rf(dir);
}

static void test_plot_torn(void **state)
{
    (void)state;
    char dir[512];
    char *text = metrics_text(3, 0);
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    (void)af_buf_printf(&b, "%s{\"step\":4,\"reward_mean\":0.", text);
    free(text);
    make_run("run_torn", b.data, dir, sizeof dir);
    af_buf_deinit(&b);
    struct proc_result r;
    assert_int_equal(plot(dir, &r), 0);
    assert_true(contains(r.err, "metrics.jsonl: skipped line 4, the last, which is torn"));
    assert_true(contains(r.out, "3 step(s)"));
    proc_result_deinit(&r);
    char *html = read_file(dir, "curves.html");
    assert_true(contains(html, "line 4, the last, is torn"));
    assert_true(contains(html, "3 step(s), 1 to 3."));
    free(html);
    rm_rf(dir);
}

static void test_plot_bad_input(void **state)
{
    (void)state;
    char dir[512], path[600];
    struct proc_result r;
    /* a missing RUN, then a RUN without metrics.jsonl */
    tmp_path("run_missing", dir, sizeof dir);
    rm_rf(dir);
    assert_int_equal(plot(dir, &r), 4);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    assert_true(contains(r.err, path));
    proc_result_deinit(&r);
    assert_int_equal(mkdir(dir, 0777), 0);
    assert_int_equal(plot(dir, &r), 4);
    assert_true(contains(r.err, path));
    proc_result_deinit(&r);
    assert_false(exists(dir, "curves.html"));
    rm_rf(dir);
    /* a malformed line in the middle (a newline after it: not torn) */
    make_run("run_bad", "{\"step\":1,\"kl\":0.1}\n{\"step\":2,\"kl\":\n{\"step\":3}\n", dir,
             sizeof dir);
    assert_int_equal(plot(dir, &r), 4);
    snprintf(path, sizeof path, "%s/metrics.jsonl: line 2:", dir);
    assert_true(contains(r.err, path));
    proc_result_deinit(&r);
    assert_false(exists(dir, "curves.html"));
    assert_false(exists(dir, "reward.svg"));
    /* the last line, complete with its newline, but not JSON: an error too */
    write_file(dir, "metrics.jsonl", "{\"step\":1}\nnot json\n");
    assert_int_equal(plot(dir, &r), 4);
    assert_true(contains(r.err, "metrics.jsonl: line 2:"));
    proc_result_deinit(&r);
    /* JSON, but a field of the wrong type, or no step */
    write_file(dir, "metrics.jsonl", "{\"step\":1}\n{\"step\":2,\"kl\":\"high\"}\n");
    assert_int_equal(plot(dir, &r), 4);
    assert_true(contains(r.err, "line 2: \"kl\" is not a number"));
    proc_result_deinit(&r);
    write_file(dir, "metrics.jsonl", "{\"reward_mean\":1}\n");
    assert_int_equal(plot(dir, &r), 4);
    assert_true(contains(r.err, "line 1: no integer \"step\""));
    proc_result_deinit(&r);
    write_file(dir, "metrics.jsonl", "[1,2]\n");
    assert_int_equal(plot(dir, &r), 4);
    assert_true(contains(r.err, "line 1: not a JSON object"));
    proc_result_deinit(&r);
    write_file(dir, "metrics.jsonl", "{\"step\":1,\"tool_use\":{\"a\":\"many\"}}\n");
    assert_int_equal(plot(dir, &r), 4);
    assert_true(contains(r.err, "line 1: tool_use \"a\" is not a call count"));
    proc_result_deinit(&r);
    /* an empty log is not an error: every chart says so */
    write_file(dir, "metrics.jsonl", "");
    assert_int_equal(plot(dir, &r), 0);
    proc_result_deinit(&r);
    char *html = read_file(dir, "curves.html");
    assert_int_equal(count_of(html, ">no data</text>"), N_CHARTS);
    assert_true(contains(html, "no steps yet"));
    free(html);
    rm_rf(dir);
}

static void test_plot_usage(void **state)
{
    (void)state;
    struct proc_result r;
    const char *none[] = {proc_agentflow_bin(), "train", "plot", NULL};
    assert_int_equal(proc_run(none, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 2);
    assert_true(contains(r.err, "usage: agentflow train plot RUN"));
    proc_result_deinit(&r);
    const char *two[] = {proc_agentflow_bin(), "train", "plot", "a", "b", NULL};
    assert_int_equal(proc_run(two, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 2);
    assert_true(contains(r.err, "unexpected argument \"b\""));
    proc_result_deinit(&r);
    const char *opt[] = {proc_agentflow_bin(), "train", "plot", "--bogus", "a", NULL};
    assert_int_equal(proc_run(opt, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 2);
    proc_result_deinit(&r);
    const char *help[] = {proc_agentflow_bin(), "train", "plot", "--help", NULL};
    assert_int_equal(proc_run(help, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 0);
    assert_true(contains(r.out, "curves.html"));
    proc_result_deinit(&r);
    const char *top[] = {proc_agentflow_bin(), "train", "--help", NULL};
    assert_int_equal(proc_run(top, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_true(contains(r.out, "agentflow train plot RUN"));
    proc_result_deinit(&r);
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/af_plot_XXXXXX");
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
    const struct CMUnitTest svg_tests[] = {
        cmocka_unit_test(test_line_points),   cmocka_unit_test(test_line_fitted_range),
        cmocka_unit_test(test_line_escaping), cmocka_unit_test(test_line_no_data),
        cmocka_unit_test(test_line_many),
    };
    int rc = cmocka_run_group_tests_name("svg_line", svg_tests, NULL, NULL);
    if (access(proc_agentflow_bin(), X_OK) != 0) {
        fprintf(stderr, "test_train_plot: %s not built; the CLI tests need it (run 'make')\n",
                proc_agentflow_bin());
        return rc ? rc : 1;
    }
    const struct CMUnitTest cli_tests[] = {
        cmocka_unit_test(test_plot_end_to_end), cmocka_unit_test(test_plot_sparse),
        cmocka_unit_test(test_plot_sft),        cmocka_unit_test(test_plot_torn),
        cmocka_unit_test(test_plot_bad_input),  cmocka_unit_test(test_plot_usage),
    };
    return rc | cmocka_run_group_tests_name("train_plot", cli_tests, setup, teardown);
}
