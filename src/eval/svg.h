/*
 * svg.h - the small inline-SVG charts of the eval report (grouped bar charts, histograms), the
 * line charts of `train plot` (svg_line.c), and the HTML/XML text escaping that every piece of
 * data in a report goes through.
 *
 * Output is appended to an unlimited af_buf; the SVG carries no xmlns unless asked for (inline
 * in HTML5 it needs none), no script and no external reference, so a page stays self-contained
 * and offline. Thread-safety: plain functions on caller-owned data.
 */
#ifndef AF_EVAL_SVG_H
#define AF_EVAL_SVG_H

#include <stddef.h>

#include "core/buf.h"

/* Appends s[0..len) with & < > " ' escaped as entities (invalid UTF-8 passes through as is;
 * callers repair it first when it matters). */
void svg_escape_n(struct af_buf *b, const char *s, size_t len);
/* The same for a NUL-terminated string (NULL appends nothing). */
void svg_escape(struct af_buf *b, const char *s);

#define SVG_MAX_SERIES 4

/* A grouped bar chart: n_groups groups (labels[i]) of n_series bars each (values[s][i]; a
 * negative value is drawn as "no data"). y runs from 0 to y_max (at least the largest value),
 * rounded up to a nice tick; value labels are printed with `decimals` digits after the point. */
struct svg_bars {
    const char *title;                        /* shown above the chart, escaped */
    const char *y_label;                      /* e.g. "accuracy (%)" */
    const char *const *labels;                /* n_groups group labels */
    size_t n_groups;                          /* may be 0: an empty chart with a note */
    const char *series_names[SVG_MAX_SERIES]; /* legend; NULL for a single unnamed series */
    const double *values[SVG_MAX_SERIES];     /* values[s][group] */
    size_t n_series;                          /* 1..SVG_MAX_SERIES */
    double y_max;                             /* 0: the largest value */
    int decimals;
};

/* Where svg_bar_chart puts things, in SVG user units (exposed for tests). */
struct svg_bar_geom {
    double width, height;
    double plot_left, plot_top, plot_w; /* the plot is SVG_BAR_PLOT_H high */
    double group_w, bar_w; /* each group's slot across the plot; one bar's slot in it */
    double y_step, y_top;  /* y ticks: 0, y_step, ... y_top (a nice step) */
    int rotate;            /* x labels rotated (they do not fit their group) */
    int has_legend;
    double legend_y; /* baseline of the legend's row, under the title's */
};
#define SVG_BAR_PLOT_H 200.0

/* Lays c out from measured text widths: the title and the legend on rows of their own, the
 * plot at least 300 wide with groups spread evenly over it, y ticks at a nice step (1, 2 or
 * 5 times a power of ten) up to a multiple of it, x labels rotated when they do not fit. */
void svg_bar_layout(const struct svg_bars *c, struct svg_bar_geom *g);
/* Appends an <svg> element drawing c, laid out by svg_bar_layout. */
void svg_bar_chart(struct af_buf *b, const struct svg_bars *c);

/* The width in px of s (UTF-8) set in sans-serif at font_px, measured with DejaVu Sans's
 * advance widths (wider than Arial's, so the estimate errs on the roomy side). */
double svg_text_width(const char *s, double font_px);
/* 1, 2 or 5 times a power of ten, about span / n_ticks (1 when span is not positive). */
double svg_nice_step(double span, double n_ticks);

/* Line charts (svg_line.c): training curves over steps. More series than the bar chart's,
 * since a tool mix has one per tool. */
#define SVG_LINE_MAX_SERIES 8

/* The plot area, in SVG user units: x runs from SVG_LINE_LEFT to SVG_LINE_LEFT +
 * SVG_LINE_PLOT_W, y from SVG_LINE_TOP + SVG_LINE_PLOT_H (the bottom of the y range) up to
 * SVG_LINE_TOP (its top). Public so that tests can compute where a point lands. */
#define SVG_LINE_LEFT 64.0
#define SVG_LINE_TOP 36.0
#define SVG_LINE_PLOT_W 560.0
#define SVG_LINE_PLOT_H 200.0

/* One series: n points (x[i], y[i]), drawn in order as a polyline with a marker per point
 * when there are few. A point whose x or y is not finite is left out (a gap in the data, e.g.
 * validation run on some steps only). The arrays are borrowed for the call. */
struct svg_line_series {
    const char *name; /* legend entry, escaped; NULL: no legend entry */
    const double *x;
    const double *y;
    size_t n;
};

struct svg_lines {
    const char *title;   /* shown above the chart, escaped */
    const char *x_label; /* e.g. "step" */
    const char *y_label; /* e.g. "reward" */
    struct svg_line_series series[SVG_LINE_MAX_SERIES];
    size_t n_series; /* 0..SVG_LINE_MAX_SERIES; with no finite point the chart says "no data" */
    /* When y_max > y_min, the y range is exactly [y_min, y_max] (widened only to fit data
     * outside it), e.g. [0, 1] for rates; otherwise it is fitted to the data and rounded out
     * to the tick step. */
    double y_min, y_max;
    /* When x_max > x_min, the x range is [x_min, x_max] (widened to fit the data), e.g. all
     * the steps of a run for a metric logged on some of them; otherwise exactly the data's. */
    double x_min, x_max;
    int standalone; /* 1: add the xmlns a separate .svg file needs (inline HTML5 needs none) */
};

/* Appends an <svg> element drawing c: a title, y and x ticks with grid lines, the axis labels,
 * one polyline per series and a legend under the plot. Same guarantees as svg_bar_chart: no
 * script, no external reference, every text escaped. */
void svg_line_chart(struct af_buf *b, const struct svg_lines *c);

#endif
