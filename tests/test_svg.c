/*
 * test_svg.c - the report's bar charts: layout from measured text widths (legend under the
 * title, x labels that fit or are rotated, titles not clipped, groups spread over the plot,
 * nice y ticks), then the same charts in headless Chromium (Debian `chromium`): no text of a
 * chart overlaps another or leaves the chart, as the browser lays them out. The Chromium part
 * skips with a message where the browser is absent; AGENTFLOW_CHROMIUM names another binary.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/fileio.h"
#include "eval/svg.h"
#include "support/proc.h"

static const char *const benches[] = {"2wiki",    "aime24", "amc23",    "bamboogle", "gaia",
                                      "gameof24", "gpqa",   "hotpotqa", "medqa",     "musique"};
static const double rule_acc[] = {40.0, 100.0, 52.5, 66.7, 12.3, 100.0, 33.0, 57.0, 80.0, 25.3};
static const double judge_acc[] = {42.0, 100.0, 50.0, 70.4, -1.0, 98.0, 35.0, 60.0, 81.0, 27.0};

static struct svg_bars accuracy_chart(void)
{
    struct svg_bars c = {.title = "Accuracy per benchmark (mean over trials)",
                         .y_label = "accuracy (%)",
                         .labels = benches,
                         .n_groups = 10,
                         .series_names = {"rule", "judge"},
                         .values = {rule_acc, judge_acc},
                         .n_series = 2,
                         .y_max = 100,
                         .decimals = 1};
    return c;
}

static const char *const tools[] = {"Generalist_Solution_Generator_Tool"};
static const double tool_share[] = {100.0};

static struct svg_bars tools_chart(void)
{
    struct svg_bars c = {.title = "Tool usage (% of runs using each tool, all benchmarks)",
                         .y_label = "runs (%)",
                         .labels = tools,
                         .n_groups = 1,
                         .values = {tool_share},
                         .n_series = 1,
                         .y_max = 100,
                         .decimals = 1};
    return c;
}

static const char *const step_bins[] = {"1", "2", "3"};
static const double step_counts[] = {14, 3, 1};

static struct svg_bars steps_chart(void)
{
    struct svg_bars c = {.title = "Steps per run (histogram, all benchmarks)",
                         .y_label = "runs",
                         .labels = step_bins,
                         .n_groups = 3,
                         .values = {step_counts},
                         .n_series = 1,
                         .decimals = 0};
    return c;
}

static void test_text_width(void **state)
{
    (void)state;
    /* Chromium with DejaVu Sans gives 121.0 px for this at 11 px. */
    double w = svg_text_width("bamboogle gameof24", 11.0);
    assert_true(w > 120.9 && w < 121.1);
    assert_true(svg_text_width("", 11.0) == 0.0);
    assert_true(svg_text_width("\xC3\xA9t\xC3\xA9", 10.0) > svg_text_width("t", 10.0));
}

static void test_nice_ticks(void **state)
{
    (void)state;
    struct svg_bars c = steps_chart();
    struct svg_bar_geom g;
    svg_bar_layout(&c, &g);
    assert_true(g.y_step == 5.0 && g.y_top == 15.0); /* 0 5 10 15, not 0 4 7 10 14 */
    c = accuracy_chart();
    svg_bar_layout(&c, &g);
    assert_true(g.y_step == 20.0 && g.y_top == 100.0);
    static const double small[] = {0.3};
    c = tools_chart();
    c.values[0] = small;
    c.y_max = 0;
    svg_bar_layout(&c, &g);
    assert_true(fabs(g.y_step - 0.1) < 1e-12 && fabs(g.y_top - 0.3) < 1e-12);
}

static void test_layout(void **state)
{
    (void)state;
    struct svg_bar_geom g;
    struct svg_bars c = accuracy_chart();
    svg_bar_layout(&c, &g);
    /* the legend has its own row between the title (baseline 20) and the plot */
    assert_true(g.has_legend);
    assert_true(g.legend_y - 12.0 >= 20.0 + 3.0 && g.legend_y + 4.0 <= g.plot_top - 10.0);
    /* x labels fit their group, or are rotated */
    double widest = svg_text_width("bamboogle", 11.0);
    assert_true(g.rotate || widest + 4.0 <= g.group_w);
    /* both bars of a group, with their value labels, fit the group */
    assert_true(2 * g.bar_w <= g.group_w);
    assert_true(svg_text_width("100.0", 10.0) + 2.0 <= g.bar_w);
    assert_true(svg_text_width(c.title, 13.0) + 8.0 <= g.width);
    /* one long tool name: the title is not clipped, the bar sits mid-plot, the label fits */
    c = tools_chart();
    svg_bar_layout(&c, &g);
    assert_true(svg_text_width(c.title, 13.0) + 8.0 <= g.width);
    assert_true(g.plot_w >= 300.0 && g.group_w == g.plot_w);
    assert_true(!g.has_legend && g.plot_top <= 40.0);
    assert_true(g.rotate || svg_text_width(tools[0], 11.0) + 4.0 <= g.group_w);
    /* three short bins spread over the whole plot, not bunched at its left */
    c = steps_chart();
    svg_bar_layout(&c, &g);
    assert_true(g.group_w * 3 >= g.plot_w - 1e-9 && g.plot_w >= 300.0);
    assert_false(g.rotate);
}

/* The in-page check: every text's box, rotated with it (getBBox by getCTM), against every
 * other text of the chart (separating axes of two convex quads) and against the chart. */
static const char *CHECK_JS =
    "function quad(t){var b=t.getBBox(),m=t.getCTM(),s=t.ownerSVGElement,p=s.createSVGPoint(),"
    "r=[];[[b.x,b.y],[b.x+b.width,b.y],[b.x+b.width,b.y+b.height],[b.x,b.y+b.height]].forEach("
    "function(c){p.x=c[0];p.y=c[1];var q=p.matrixTransform(m);r.push([q.x,q.y]);});return r;}\n"
    "function sep(a,b){for(var k=0;k<2;k++){var P=k?b:a;for(var i=0;i<4;i++){var j=(i+1)%4,"
    "nx=P[j][1]-P[i][1],ny=P[i][0]-P[j][0],lo1=1e9,hi1=-1e9,lo2=1e9,hi2=-1e9;a.forEach(function"
    "(v){var d=v[0]*nx+v[1]*ny;lo1=Math.min(lo1,d);hi1=Math.max(hi1,d);});b.forEach(function(v)"
    "{var d=v[0]*nx+v[1]*ny;lo2=Math.min(lo2,d);hi2=Math.max(hi2,d);});var n=Math.hypot(nx,ny)"
    ";if(n>0&&(hi1<=lo2+0.5*n||hi2<=lo1+0.5*n))return true;}}return false;}\n"
    "var out=[];document.querySelectorAll('svg').forEach(function(svg,si){var vb=svg.viewBox."
    "baseVal,ts=[].slice.call(svg.querySelectorAll('text')).map(function(t){return{t:t."
    "textContent,q:quad(t)};});ts.forEach(function(a,i){a.q.forEach(function(v){if(v[0]<vb.x-"
    "0.5||v[1]<vb.y-0.5||v[0]>vb.x+vb.width+0.5||v[1]>vb.y+vb.height+0.5)out.push('chart '+si+"
    "': '+a.t+' leaves the chart');});for(var j=i+1;j<ts.length;j++)if(!sep(a.q,ts[j].q))out."
    "push('chart '+si+': '+a.t+' overlaps '+ts[j].t);});});\n"
    "document.body.setAttribute('data-result',out.length?out.join(' | '):'ok');\n";

static const char *chromium_path(void)
{
    const char *env = getenv("AGENTFLOW_CHROMIUM");
    if (env && *env)
        return access(env, X_OK) == 0 ? env : NULL;
    static const char *const cands[] = {"/usr/bin/chromium", "/usr/bin/chromium-browser",
                                        "/usr/bin/google-chrome"};
    for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++)
        if (access(cands[i], X_OK) == 0)
            return cands[i];
    return NULL;
}

static void test_chromium_layout(void **state)
{
    (void)state;
    const char *chromium = chromium_path();
    if (!chromium) {
        fprintf(stderr, "skipped: no chromium (Debian package `chromium`, installed by "
                        "scripts/install-deps.sh; or set AGENTFLOW_CHROMIUM)\n");
        skip();
    }
    char dir[] = "/tmp/af_svg_XXXXXX", page[64], shot[64], url[80], shot_arg[90], err[256];
    assert_non_null(mkdtemp(dir));
    snprintf(page, sizeof page, "%s/charts.html", dir);
    snprintf(shot, sizeof shot, "%s/charts.png", dir);
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    (void)af_buf_puts(&b, "<!DOCTYPE html><html><head><meta charset=\"utf-8\"></head><body>\n");
    struct svg_bars charts[3] = {accuracy_chart(), tools_chart(), steps_chart()};
    for (size_t i = 0; i < 3; i++) {
        svg_bar_chart(&b, &charts[i]);
        (void)af_buf_puts(&b, "<br>\n");
    }
    (void)af_buf_printf(&b, "<script>%s</script></body></html>\n", CHECK_JS);
    assert_int_equal(af_file_write_atomic(page, b.data, b.len, err, sizeof err), 0);
    af_buf_deinit(&b);
    snprintf(url, sizeof url, "file://%s", page);
    const char *dump[] = {chromium, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                          url,      NULL};
    struct proc_result r;
    assert_int_equal(proc_run(dump, NULL, 120.0, &r), 0);
    const char *res = strstr(r.out, "data-result=\"");
    if (!res) {
        proc_result_deinit(&r);
        fprintf(stderr, "skipped: chromium ran but gave no DOM (%s)\n", chromium);
        skip();
    }
    res += strlen("data-result=\"");
    if (strncmp(res, "ok\"", 3) != 0)
        fail_msg("chart layout in chromium: %.*s", (int)strcspn(res, "\""), res);
    proc_result_deinit(&r);
    /* A screenshot for whoever wants to look (kept only when the test fails). */
    snprintf(shot_arg, sizeof shot_arg, "--screenshot=%s", shot);
    const char *snap[] = {chromium,
                          "--headless",
                          "--no-sandbox",
                          "--disable-gpu",
                          "--hide-scrollbars",
                          "--window-size=1000,1100",
                          shot_arg,
                          url,
                          NULL};
    assert_int_equal(proc_run(snap, NULL, 120.0, &r), 0);
    proc_result_deinit(&r);
    assert_int_equal(access(shot, R_OK), 0);
    unlink(shot);
    unlink(page);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_width),
        cmocka_unit_test(test_nice_ticks),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_chromium_layout),
    };
    return cmocka_run_group_tests_name("svg", tests, NULL, NULL);
}
