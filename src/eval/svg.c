/*
 * svg.c - inline-SVG grouped bar charts for the eval report, text measuring and nice tick steps
 * shared with the line charts, and HTML/XML escaping.
 *
 * The chart is plain SVG 1.1 elements with presentation attributes: no CSS dependency, no
 * script, no xmlns (it lives inside an HTML5 page), so it renders offline in any browser.
 * Layout (svg_bar_layout) is computed from measured text widths: the title and the legend have
 * rows of their own, groups share the plot width evenly, and x labels that do not fit their
 * group are rotated, with the margins grown to hold them.
 */
#include "eval/svg.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SVG_BAR_W_MAX 22.0
#define SVG_PLOT_W_MIN 300.0
#define SVG_GROUP_W_MIN 30.0
#define SVG_LABEL_MAX 40  /* bytes of an x label before it is cut with an ellipsis */
#define SVG_LABEL_PX 11.0 /* font sizes */
#define SVG_TITLE_PX 13.0
#define SVG_LEGEND_PX 12.0
#define SVG_VALUE_PX 10.0
#define SVG_ROTATE_DEG 40.0

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

/* Advance widths of DejaVu Sans (the common fallback for sans-serif, and wider than Arial or
 * Helvetica, so text measured with it fits with those too), in 1/1000 em, for ' '..'~'. */
static const unsigned short svg_char_w[95] = {
    318,  401, 460, 838, 636, 950, 780, 275, 390, 390, 500, 838, 318, 361, 318, 337, /* ' '../ */
    636,  636, 636, 636, 636, 636, 636, 636, 636, 636, 337, 337, 838, 838, 838, 531, /* 0..? */
    1000, 684, 686, 698, 770, 632, 575, 775, 752, 295, 295, 656, 557, 863, 748, 787, /* @..O */
    603,  787, 695, 635, 611, 732, 684, 989, 685, 611, 685, 390, 337, 390, 838, 500, /* P.._ */
    500,  613, 635, 550, 635, 615, 352, 635, 634, 278, 278, 579, 278, 974, 634, 612, /* `..o */
    635,  635, 411, 521, 392, 634, 592, 818, 592, 592, 525, 636, 337, 636, 838};     /* p..~ */

double svg_text_width(const char *s, double font_px)
{
    double em = 0.0;
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p >= 0x20 && *p < 0x7f)
            em += svg_char_w[*p - 0x20] / 1000.0;
        else if ((*p & 0xC0) != 0x80) /* one per code point: a wide glyph's width */
            em += 1.0;
    }
    return em * font_px;
}

double svg_nice_step(double span, double n_ticks)
{
    double raw = span / n_ticks;
    if (!(raw > 0) || !isfinite(raw))
        return 1.0;
    double mag = pow(10.0, floor(log10(raw))), f = raw / mag;
    return (f <= 1.0 ? 1.0 : f <= 2.0 ? 2.0 : f <= 5.0 ? 5.0 : 10.0) * mag;
}

/* The label as drawn: cut to SVG_LABEL_MAX bytes (at a UTF-8 boundary) with an ellipsis.
 * Returns the number of bytes kept of s; *cut says whether the ellipsis follows. */
static size_t short_label_len(const char *s, int *cut)
{
    size_t len = strlen(s);
    *cut = len > SVG_LABEL_MAX;
    if (!*cut)
        return len;
    size_t n = SVG_LABEL_MAX - 1;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return n;
}

static double short_label_width(const char *s)
{
    int cut;
    char tmp[SVG_LABEL_MAX + 4];
    size_t n = short_label_len(s, &cut);
    memcpy(tmp, s, n);
    memcpy(tmp + n, cut ? "\xE2\x80\xA6" : "", cut ? 4 : 1);
    return svg_text_width(tmp, SVG_LABEL_PX);
}

static void svg_short_label(struct af_buf *b, const char *s)
{
    int cut;
    size_t n = short_label_len(s, &cut);
    svg_escape_n(b, s, n);
    if (cut)
        (void)af_buf_puts(b, "\xE2\x80\xA6");
}

static double legend_width(const struct svg_bars *c)
{
    double w = 0;
    for (size_t s = 0; s < c->n_series; s++)
        if (c->series_names[s])
            w += 16.0 + svg_text_width(c->series_names[s], SVG_LEGEND_PX) + 14.0;
    return w;
}

void svg_bar_layout(const struct svg_bars *c, struct svg_bar_geom *g)
{
    memset(g, 0, sizeof *g);
    double vmax = c->y_max;
    for (size_t s = 0; s < c->n_series; s++)
        for (size_t k = 0; k < c->n_groups; k++)
            if (c->values[s][k] > vmax)
                vmax = c->values[s][k];
    g->y_step = svg_nice_step(vmax > 0 ? vmax : 1.0, 5);
    g->y_top = ceil((vmax > 0 ? vmax : 1.0) / g->y_step - 1e-9) * g->y_step;
    /* y tick labels: the widest decides the left margin */
    double tick_w = 0;
    for (double v = 0; v <= g->y_top + g->y_step * 1e-9; v += g->y_step) {
        char t[32];
        snprintf(t, sizeof t, "%.4g", v);
        double w = svg_text_width(t, SVG_LABEL_PX);
        tick_w = w > tick_w ? w : tick_w;
    }
    g->has_legend = legend_width(c) > 0;
    g->legend_y = 36.0;
    g->plot_top = g->has_legend ? 60.0 : 40.0;
    double max_label = 0;
    for (size_t k = 0; k < c->n_groups; k++) {
        double w = short_label_width(c->labels[k]);
        max_label = w > max_label ? w : max_label;
    }
    /* Each bar's slot holds its value label, so that neighbours' labels never touch. */
    double value_w = 0;
    for (size_t s = 0; s < c->n_series; s++)
        for (size_t k = 0; k < c->n_groups; k++) {
            char t[48];
            snprintf(t, sizeof t, "%.*f", c->decimals, c->values[s][k]);
            double w = svg_text_width(c->values[s][k] < 0 ? "n/a" : t, SVG_VALUE_PX);
            value_w = w > value_w ? w : value_w;
        }
    const double slot_min = fmax(14.0, value_w + 4.0);
    const double ns = (double)c->n_series;
    g->group_w = fmax(SVG_GROUP_W_MIN, ns * slot_min + 8.0);
    double n = c->n_groups ? (double)c->n_groups : 1.0;
    /* Horizontal labels when the widest fits a group of at most 110 px; else rotated. */
    double want_w = max_label + 8.0;
    if (want_w > g->group_w && want_w <= 110.0)
        g->group_w = want_w;
    g->rotate = max_label + 4.0 > g->group_w;
    const double a = SVG_ROTATE_DEG * M_PI / 180.0;
    double label_left = g->rotate ? max_label * cos(a) : 0; /* reach left of a group's centre */
    g->plot_left = 30.0 + tick_w + 8.0;
    if (label_left - g->group_w / 2 > g->plot_left - 4)
        g->plot_left = label_left - g->group_w / 2 + 4;
    g->plot_w = g->group_w * n;
    if (g->plot_w < SVG_PLOT_W_MIN) { /* few groups: spread them over the plot */
        g->plot_w = SVG_PLOT_W_MIN;
        g->group_w = g->plot_w / n;
    }
    g->bar_w = fmin((g->group_w - 8.0) / ns, fmax(slot_min, 28.0));
    g->width = g->plot_left + g->plot_w + 12.0;
    /* The title is bold: DejaVu Sans Bold runs up to 15% wider than the regular face. */
    double title_w = 8.0 + 1.15 * svg_text_width(c->title, SVG_TITLE_PX) + 8.0;
    double leg_w = g->plot_left + legend_width(c) + 8.0;
    g->width = fmax(g->width, fmax(title_w, leg_w));
    double label_h = g->rotate ? max_label * sin(a) + SVG_LABEL_PX * cos(a) : SVG_LABEL_PX;
    g->height = g->plot_top + SVG_BAR_PLOT_H + 10.0 + label_h + 12.0;
}

static void svg_axes(struct af_buf *b, const struct svg_bars *c, const struct svg_bar_geom *g)
{
    double y0 = g->plot_top + SVG_BAR_PLOT_H, x1 = g->plot_left + g->plot_w;
    for (double v = 0; v <= g->y_top + g->y_step * 1e-9; v += g->y_step) {
        double y = y0 - SVG_BAR_PLOT_H * v / g->y_top;
        (void)af_buf_printf(b,
                            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                            "stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" "
                            "text-anchor=\"end\">%.4g</text>\n",
                            g->plot_left, y, x1, y, g->plot_left - 6, y + 4,
                            fabs(v) < g->y_step * 1e-9 ? 0.0 : v);
    }
    (void)af_buf_printf(b,
                        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n",
                        g->plot_left, y0, x1, y0);
    double ym = g->plot_top + SVG_BAR_PLOT_H / 2;
    (void)af_buf_printf(b,
                        "<text x=\"14\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\" "
                        "transform=\"rotate(-90 14 %.1f)\">",
                        ym, ym);
    svg_escape(b, c->y_label);
    (void)af_buf_puts(b, "</text>\n");
}

/* The legend: a row of its own under the title, left-aligned with the plot. */
static void svg_legend(struct af_buf *b, const struct svg_bars *c, const struct svg_bar_geom *g)
{
    double x = g->plot_left;
    for (size_t s = 0; s < c->n_series; s++) {
        if (!c->series_names[s])
            continue;
        (void)af_buf_printf(b,
                            "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">",
                            x, g->legend_y - 10, svg_colors[s], x + 16, g->legend_y);
        svg_escape(b, c->series_names[s]);
        (void)af_buf_puts(b, "</text>\n");
        x += 16.0 + svg_text_width(c->series_names[s], SVG_LEGEND_PX) + 14.0;
    }
}

static void svg_bar(struct af_buf *b, const struct svg_bars *c, const struct svg_bar_geom *g,
                    size_t s, size_t k, double x)
{
    double v = c->values[s][k], y0 = g->plot_top + SVG_BAR_PLOT_H;
    if (v < 0) {
        (void)af_buf_printf(b,
                            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" "
                            "text-anchor=\"middle\" fill=\"#888\">n/a</text>\n",
                            x + g->bar_w / 2, y0 - 4);
        return;
    }
    double h = SVG_BAR_PLOT_H * v / g->y_top, rw = fmin(g->bar_w - 4.0, SVG_BAR_W_MAX);
    (void)af_buf_printf(b,
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">",
                        x + (g->bar_w - rw) / 2, y0 - h, rw, h, svg_colors[s]);
    (void)af_buf_puts(b, "<title>");
    svg_escape(b, c->labels[k]);
    if (c->series_names[s]) {
        (void)af_buf_puts(b, " \xC2\xB7 ");
        svg_escape(b, c->series_names[s]);
    }
    (void)af_buf_printf(b, ": %.*f</title></rect>\n", c->decimals, v);
    (void)af_buf_printf(b,
                        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" "
                        "text-anchor=\"middle\">%.*f</text>\n",
                        x + g->bar_w / 2, y0 - h - 3, c->decimals, v);
}

/* The x label of group k, centred under it, or rotated with its end there. */
static void svg_x_label(struct af_buf *b, const struct svg_bars *c, const struct svg_bar_geom *g,
                        size_t k)
{
    double xc = g->plot_left + g->group_w * ((double)k + 0.5),
           y = g->plot_top + SVG_BAR_PLOT_H + 16;
    if (g->rotate)
        (void)af_buf_printf(b,
                            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\" "
                            "transform=\"rotate(-%.0f %.1f %.1f)\">",
                            xc, y, SVG_ROTATE_DEG, xc, y - 4);
    else
        (void)af_buf_printf(b,
                            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" "
                            "text-anchor=\"middle\">",
                            xc, y);
    svg_short_label(b, c->labels[k]);
    (void)af_buf_puts(b, "</text>\n");
}

void svg_bar_chart(struct af_buf *b, const struct svg_bars *c)
{
    struct svg_bar_geom g;
    svg_bar_layout(c, &g);
    (void)af_buf_printf(b,
                        "<svg class=\"chart\" width=\"%.0f\" height=\"%.0f\" "
                        "viewBox=\"0 0 %.0f %.0f\" role=\"img\" font-family=\"sans-serif\">\n",
                        ceil(g.width), ceil(g.height), ceil(g.width), ceil(g.height));
    (void)af_buf_puts(b, "<title>");
    svg_escape(b, c->title);
    (void)af_buf_puts(b, "</title>\n<text x=\"8\" y=\"20\" font-size=\"13\" font-weight=\"bold\">");
    svg_escape(b, c->title);
    (void)af_buf_puts(b, "</text>\n");
    svg_axes(b, c, &g);
    svg_legend(b, c, &g);
    if (c->n_groups == 0)
        (void)af_buf_printf(b,
                            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"#888\">"
                            "no data</text>\n",
                            g.plot_left + 20, g.plot_top + SVG_BAR_PLOT_H / 2);
    for (size_t k = 0; k < c->n_groups; k++) {
        double x = g.plot_left + g.group_w * ((double)k + 0.5) - g.bar_w * (double)c->n_series / 2;
        for (size_t s = 0; s < c->n_series; s++)
            svg_bar(b, c, &g, s, k, x + g.bar_w * (double)s);
        svg_x_label(b, c, &g, k);
    }
    (void)af_buf_puts(b, "</svg>\n");
}
