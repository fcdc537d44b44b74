/*
 * svg_line.c - inline-SVG line charts: training curves over steps for `agentflow train plot`.
 *
 * Like the bar charts in svg.c: plain SVG 1.1 elements with presentation attributes, no script,
 * no external reference, every piece of text escaped. The x range is the caller's or exactly the
 * data's, so that the first and last steps sit on the plot's edges; the y range is fixed by the
 * caller (rates) or fitted to the data and rounded out to "nice" ticks (1, 2 or 5 times a power of
 * ten). Pixel coordinates are clamped so that absurd data cannot print absurd numbers.
 */
#include "eval/svg.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SVG_LINE_RIGHT 24.0
#define SVG_LINE_LEGEND_ROW 18.0
#define SVG_LINE_MARKERS_MAX 60 /* more points than this: the polyline alone */
#define SVG_LINE_TICKS_MAX 40   /* a bound on the tick loops, whatever the float rounding */
#define SVG_LINE_PX_MAX 1e6

static const char *const svg_line_colors[SVG_LINE_MAX_SERIES] = {
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f"};

/* The data range and the tick step of each axis. */
struct line_frame {
    double x_lo, x_hi, x_step;
    double y_lo, y_hi, y_step;
    size_t n_points; /* finite points over all series */
};

/* n_series, never past the array whatever the caller set. */
static size_t series_count(const struct svg_lines *c)
{
    return c->n_series < SVG_LINE_MAX_SERIES ? c->n_series : SVG_LINE_MAX_SERIES;
}

static int point_ok(const struct svg_line_series *s, size_t i)
{
    return isfinite(s->x[i]) && isfinite(s->y[i]);
}

static void line_frame(const struct svg_lines *c, struct line_frame *f)
{
    double x_lo = HUGE_VAL, x_hi = -HUGE_VAL, y_lo = HUGE_VAL, y_hi = -HUGE_VAL;
    f->n_points = 0;
    for (size_t s = 0; s < series_count(c); s++) {
        const struct svg_line_series *ls = &c->series[s];
        for (size_t i = 0; i < ls->n; i++) {
            if (!point_ok(ls, i))
                continue;
            x_lo = fmin(x_lo, ls->x[i]);
            x_hi = fmax(x_hi, ls->x[i]);
            y_lo = fmin(y_lo, ls->y[i]);
            y_hi = fmax(y_hi, ls->y[i]);
            f->n_points++;
        }
    }
    if (f->n_points == 0)
        x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
    if (c->x_max > c->x_min) {
        x_lo = f->n_points ? fmin(x_lo, c->x_min) : c->x_min;
        x_hi = f->n_points ? fmax(x_hi, c->x_max) : c->x_max;
    } else if (x_lo == x_hi) { /* one step: put it in the middle */
        x_lo -= 1, x_hi += 1;
    }
    const int fixed = c->y_max > c->y_min;
    if (fixed) {
        y_lo = fmin(y_lo, c->y_min);
        y_hi = fmax(y_hi, c->y_max);
    } else if (y_lo == y_hi) {
        double pad = y_lo != 0 ? fabs(y_lo) * 0.1 : 1.0;
        y_lo -= pad, y_hi += pad;
    }
    f->y_step = svg_nice_step(y_hi - y_lo, 5);
    if (!fixed) { /* round out to whole ticks; the epsilon keeps 0.3 / 0.1 from becoming 4 */
        y_lo = floor(y_lo / f->y_step + 1e-9) * f->y_step;
        y_hi = ceil(y_hi / f->y_step - 1e-9) * f->y_step;
    }
    f->x_lo = x_lo, f->x_hi = x_hi, f->y_lo = y_lo, f->y_hi = y_hi;
    f->x_step = svg_nice_step(x_hi - x_lo, 6);
}

static double clamp_px(double v)
{
    if (!(v > -SVG_LINE_PX_MAX)) /* NaN too */
        return -SVG_LINE_PX_MAX;
    return v < SVG_LINE_PX_MAX ? v : SVG_LINE_PX_MAX;
}

static double px_x(const struct line_frame *f, double x)
{
    return clamp_px(SVG_LINE_LEFT + SVG_LINE_PLOT_W * (x - f->x_lo) / (f->x_hi - f->x_lo));
}

static double px_y(const struct line_frame *f, double y)
{
    return clamp_px(SVG_LINE_TOP + SVG_LINE_PLOT_H -
                    SVG_LINE_PLOT_H * (y - f->y_lo) / (f->y_hi - f->y_lo));
}

/* A tick value as text: k * step with the float noise (and a negative zero) rounded away. */
static void tick_label(struct af_buf *b, double k, double step)
{
    double v = k * step;
    if (fabs(v) < step * 1e-9)
        v = 0.0;
    (void)af_buf_printf(b, "%.4g", v);
}

static void line_axes(struct af_buf *b, const struct svg_lines *c, const struct line_frame *f)
{
    const double y0 = SVG_LINE_TOP + SVG_LINE_PLOT_H, x1 = SVG_LINE_LEFT + SVG_LINE_PLOT_W;
    double k = ceil(f->y_lo / f->y_step - 1e-9);
    for (int n = 0; n < SVG_LINE_TICKS_MAX && k * f->y_step <= f->y_hi + f->y_step * 1e-9;
         n++, k++) {
        double y = px_y(f, k * f->y_step);
        (void)af_buf_printf(b,
                            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                            "stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" "
                            "text-anchor=\"end\">",
                            SVG_LINE_LEFT, y, x1, y, SVG_LINE_LEFT - 6, y + 4);
        tick_label(b, k, f->y_step);
        (void)af_buf_puts(b, "</text>\n");
    }
    k = ceil(f->x_lo / f->x_step - 1e-9);
    for (int n = 0; n < SVG_LINE_TICKS_MAX && k * f->x_step <= f->x_hi + f->x_step * 1e-9;
         n++, k++) {
        double x = px_x(f, k * f->x_step);
        (void)af_buf_printf(b,
                            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                            "stroke=\"#333\"/><text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" "
                            "text-anchor=\"middle\">",
                            x, y0, x, y0 + 4, x, y0 + 16);
        tick_label(b, k, f->x_step);
        (void)af_buf_puts(b, "</text>\n");
    }
    (void)af_buf_printf(b,
                        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n"
                        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n",
                        SVG_LINE_LEFT, y0, x1, y0, SVG_LINE_LEFT, SVG_LINE_TOP, SVG_LINE_LEFT, y0);
    (void)af_buf_printf(b,
                        "<text x=\"14\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\" "
                        "transform=\"rotate(-90 14 %.1f)\">",
                        SVG_LINE_TOP + SVG_LINE_PLOT_H / 2, SVG_LINE_TOP + SVG_LINE_PLOT_H / 2);
    svg_escape(b, c->y_label);
    (void)af_buf_printf(b,
                        "</text>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" "
                        "text-anchor=\"middle\">",
                        SVG_LINE_LEFT + SVG_LINE_PLOT_W / 2, y0 + 32);
    svg_escape(b, c->x_label);
    (void)af_buf_puts(b, "</text>\n");
}

/* Lays the legend out in rows under the plot, left to right, wrapping at the chart's width;
 * draws it when b is not NULL. Returns the number of rows. */
static size_t line_legend(struct af_buf *b, const struct svg_lines *c, double width)
{
    double x = SVG_LINE_LEFT, y = SVG_LINE_TOP + SVG_LINE_PLOT_H + 44;
    size_t rows = 0;
    for (size_t s = 0; s < series_count(c); s++) {
        if (!c->series[s].name)
            continue;
        /* about 7 units a character at font-size 12, plus the swatch and a gap */
        double w = 7.0 * (double)strlen(c->series[s].name) + 30.0;
        if (rows == 0) {
            rows = 1;
        } else if (x + w > width - 10 && x > SVG_LINE_LEFT) {
            x = SVG_LINE_LEFT, y += SVG_LINE_LEGEND_ROW;
            rows++;
        }
        if (b) {
            (void)af_buf_printf(b,
                                "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"3\" "
                                "fill=\"%s\"/><text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">",
                                x, y - 5, svg_line_colors[s], x + 16, y);
            svg_escape(b, c->series[s].name);
            (void)af_buf_puts(b, "</text>\n");
        }
        x += w;
    }
    return rows;
}

static void line_series(struct af_buf *b, const struct svg_line_series *s, const char *color,
                        const struct line_frame *f)
{
    size_t n_ok = 0;
    for (size_t i = 0; i < s->n; i++)
        n_ok += (size_t)point_ok(s, i);
    if (n_ok == 0)
        return;
    (void)af_buf_printf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"",
                        color);
    const char *sep = "";
    for (size_t i = 0; i < s->n; i++) {
        if (!point_ok(s, i))
            continue;
        (void)af_buf_printf(b, "%s%.1f,%.1f", sep, px_x(f, s->x[i]), px_y(f, s->y[i]));
        sep = " ";
    }
    (void)af_buf_puts(b, "\"/>\n");
    if (n_ok > SVG_LINE_MARKERS_MAX)
        return;
    for (size_t i = 0; i < s->n; i++) {
        if (!point_ok(s, i))
            continue;
        (void)af_buf_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"><title>",
                            px_x(f, s->x[i]), px_y(f, s->y[i]), color);
        if (s->name) {
            svg_escape(b, s->name);
            (void)af_buf_puts(b, ": ");
        }
        (void)af_buf_printf(b, "%.6g, %.6g</title></circle>\n", s->x[i], s->y[i]);
    }
}

void svg_line_chart(struct af_buf *b, const struct svg_lines *c)
{
    struct line_frame f;
    line_frame(c, &f);
    const double width = SVG_LINE_LEFT + SVG_LINE_PLOT_W + SVG_LINE_RIGHT;
    const size_t rows = line_legend(NULL, c, width);
    const double height =
        SVG_LINE_TOP + SVG_LINE_PLOT_H + 44 + SVG_LINE_LEGEND_ROW * (double)rows - 4;
    (void)af_buf_printf(b,
                        "<svg class=\"chart\"%s width=\"%.0f\" height=\"%.0f\" "
                        "viewBox=\"0 0 %.0f %.0f\" role=\"img\" font-family=\"sans-serif\">\n",
                        c->standalone ? " xmlns=\"http://www.w3.org/2000/svg\"" : "", width, height,
                        width, height);
    (void)af_buf_puts(b, "<title>");
    svg_escape(b, c->title);
    (void)af_buf_puts(b, "</title>\n<text x=\"8\" y=\"20\" font-size=\"13\" font-weight=\"bold\">");
    svg_escape(b, c->title);
    (void)af_buf_puts(b, "</text>\n");
    line_axes(b, c, &f);
    if (f.n_points == 0)
        (void)af_buf_printf(b,
                            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"#888\" "
                            "text-anchor=\"middle\">no data</text>\n",
                            SVG_LINE_LEFT + SVG_LINE_PLOT_W / 2,
                            SVG_LINE_TOP + SVG_LINE_PLOT_H / 2);
    for (size_t s = 0; s < series_count(c); s++)
        line_series(b, &c->series[s], svg_line_colors[s], &f);
    (void)line_legend(b, c, width);
    (void)af_buf_puts(b, "</svg>\n");
}
