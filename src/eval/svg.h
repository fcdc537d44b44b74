/*
 * svg.h - the small inline-SVG charts of the eval report (grouped bar charts, histograms) and
 * the HTML/XML text escaping that every piece of data in the report goes through.
 *
 * Output is appended to an unlimited af_buf; the SVG carries no xmlns (inline in HTML5), no
 * script and no external reference, so the page stays self-contained and offline.
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
 * negative value is drawn as "no data"). y runs from 0 to y_max (at least the largest value);
 * value labels are printed with `decimals` digits after the point. */
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

/* Appends an <svg> element drawing c. */
void svg_bar_chart(struct af_buf *b, const struct svg_bars *c);

#endif
