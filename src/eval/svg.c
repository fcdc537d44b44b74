/*
 * svg.c - inline-SVG grouped bar charts for the eval report, and HTML/XML escaping.
 *
 * The chart is plain SVG 1.1 elements with presentation attributes: no CSS dependency, no
 * script, no xmlns (it lives inside an HTML5 page), so it renders offline in any browser.
 */
#include "eval/svg.h"

#include <stdio.h>
#include <string.h>

#define SVG_BAR_W 22.0
#define SVG_GAP 14.0
#define SVG_LEFT 56.0
#define SVG_TOP 40.0
#define SVG_PLOT_H 200.0
#define SVG_BOTTOM 56.0
#define SVG_LABEL_MAX 16

static const char *const svg_colors[SVG_MAX_SERIES] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759"};

void svg_escape_n(struct af_buf *b, const char *s, size_t len)
{
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        const char *ent = NULL;
        switch (s[i]) {
        case '&':
            ent = "&amp;";
            break;
        case '<':
            ent = "&lt;";
            break;
        case '>':
            ent = "&gt;";
            break;
        case '"':
            ent = "&quot;";
            break;
        case '\'':
            ent = "&#39;";
            break;
        case '\0':
            ent = "\xEF\xBF\xBD"; /* U+FFFD: a NUL cannot appear in HTML text */
            break;
        default:
            continue;
        }
        (void)af_buf_append(b, s + run, i - run);
        (void)af_buf_puts(b, ent);
        run = i + 1;
    }
    (void)af_buf_append(b, s + run, len - run);
}

void svg_escape(struct af_buf *b, const char *s)
{
    if (s)
        svg_escape_n(b, s, strlen(s));
}

/* Appends s cut to SVG_LABEL_MAX bytes (at a UTF-8 boundary) with an ellipsis. */
static void svg_short_label(struct af_buf *b, const char *s)
{
    size_t len = strlen(s);
    if (len <= SVG_LABEL_MAX) {
        svg_escape_n(b, s, len);
        return;
    }
    size_t cut = SVG_LABEL_MAX - 1;
    while (cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80)
        cut--;
    svg_escape_n(b, s, cut);
    (void)af_buf_puts(b, "\xE2\x80\xA6");
}

static double svg_y_max(const struct svg_bars *c)
{
    double m = c->y_max;
    for (size_t s = 0; s < c->n_series; s++)
        for (size_t g = 0; g < c->n_groups; g++)
            if (c->values[s][g] > m)
                m = c->values[s][g];
    return m > 0 ? m : 1.0;
}

static void svg_axes(struct af_buf *b, const struct svg_bars *c, double width, double ymax)
{
    double y0 = SVG_TOP + SVG_PLOT_H;
    for (int k = 0; k <= 4; k++) {
        double v = ymax * k / 4.0, y = y0 - SVG_PLOT_H * k / 4.0;
        (void)af_buf_printf(b,
                            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                            "stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" "
                            "text-anchor=\"end\">%.*f</text>\n",
                            SVG_LEFT, y, width - 10, y, SVG_LEFT - 6, y + 4, ymax < 10 ? 1 : 0, v);
    }
    (void)af_buf_printf(b,
                        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n",
                        SVG_LEFT, y0, width - 10, y0);
    (void)af_buf_printf(b,
                        "<text x=\"14\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\" "
                        "transform=\"rotate(-90 14 %.1f)\">",
                        SVG_TOP + SVG_PLOT_H / 2, SVG_TOP + SVG_PLOT_H / 2);
    svg_escape(b, c->y_label);
    (void)af_buf_puts(b, "</text>\n");
}

static void svg_legend(struct af_buf *b, const struct svg_bars *c, double width)
{
    double x = width - 10;
    for (size_t s = c->n_series; s-- > 0;) {
        if (!c->series_names[s])
            continue;
        x -= 8.0 * (double)strlen(c->series_names[s]) + 30.0;
        (void)af_buf_printf(b,
                            "<rect x=\"%.1f\" y=\"10\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                            "<text x=\"%.1f\" y=\"20\" font-size=\"12\">",
                            x, svg_colors[s], x + 16);
        svg_escape(b, c->series_names[s]);
        (void)af_buf_puts(b, "</text>\n");
    }
}

static void svg_bar(struct af_buf *b, const struct svg_bars *c, size_t s, size_t g, double x,
                    double ymax)
{
    double v = c->values[s][g], y0 = SVG_TOP + SVG_PLOT_H;
    if (v < 0) {
        (void)af_buf_printf(b,
                            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" "
                            "text-anchor=\"middle\" fill=\"#888\">n/a</text>\n",
                            x + SVG_BAR_W / 2, y0 - 4);
        return;
    }
    double h = SVG_PLOT_H * v / ymax;
    (void)af_buf_printf(b,
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">",
                        x, y0 - h, SVG_BAR_W - 2, h, svg_colors[s]);
    (void)af_buf_puts(b, "<title>");
    svg_escape(b, c->labels[g]);
    if (c->series_names[s]) {
        (void)af_buf_puts(b, " \xC2\xB7 ");
        svg_escape(b, c->series_names[s]);
    }
    (void)af_buf_printf(b, ": %.*f</title></rect>\n", c->decimals, v);
    (void)af_buf_printf(b,
                        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" "
                        "text-anchor=\"middle\">%.*f</text>\n",
                        x + SVG_BAR_W / 2 - 1, y0 - h - 3, c->decimals, v);
}

void svg_bar_chart(struct af_buf *b, const struct svg_bars *c)
{
    double group_w = SVG_BAR_W * (double)c->n_series + SVG_GAP;
    double width = SVG_LEFT + group_w * (double)c->n_groups + 20;
    if (width < 360)
        width = 360;
    double height = SVG_TOP + SVG_PLOT_H + SVG_BOTTOM, ymax = svg_y_max(c);
    (void)af_buf_printf(b,
                        "<svg class=\"chart\" width=\"%.0f\" height=\"%.0f\" "
                        "viewBox=\"0 0 %.0f %.0f\" role=\"img\" font-family=\"sans-serif\">\n",
                        width, height, width, height);
    (void)af_buf_puts(b, "<title>");
    svg_escape(b, c->title);
    (void)af_buf_puts(b, "</title>\n<text x=\"8\" y=\"20\" font-size=\"13\" font-weight=\"bold\">");
    svg_escape(b, c->title);
    (void)af_buf_puts(b, "</text>\n");
    svg_axes(b, c, width, ymax);
    svg_legend(b, c, width);
    if (c->n_groups == 0)
        (void)af_buf_printf(b,
                            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"#888\">"
                            "no data</text>\n",
                            SVG_LEFT + 20, SVG_TOP + SVG_PLOT_H / 2);
    for (size_t g = 0; g < c->n_groups; g++) {
        double x = SVG_LEFT + SVG_GAP / 2 + group_w * (double)g;
        for (size_t s = 0; s < c->n_series; s++)
            svg_bar(b, c, s, g, x + SVG_BAR_W * (double)s, ymax);
        (void)af_buf_printf(b,
                            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" "
                            "text-anchor=\"middle\">",
                            x + SVG_BAR_W * (double)c->n_series / 2, SVG_TOP + SVG_PLOT_H + 16);
        svg_short_label(b, c->labels[g]);
        (void)af_buf_puts(b, "</text>\n");
    }
    (void)af_buf_puts(b, "</svg>\n");
}
