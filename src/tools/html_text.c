/*
 * html_text.c - HTML to plain text and word chunking for Web_RAG_Search_Tool (html_text.h).
 *
 * The document tree is walked iteratively (first child, next sibling, parent), so a deeply
 * nested page cannot exhaust the stack. Text goes through one writer that collapses white
 * space and turns block boundaries into single newlines.
 */
#include "tools/html_text.h"

#include <libxml/HTMLparser.h>
#include <libxml/parser.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/errf.h"
#include "core/jsonx.h"
#include "core/xalloc.h"

static pthread_once_t g_xml_once = PTHREAD_ONCE_INIT;

static void xml_init_once(void)
{
    xmlInitParser();
}

/* --- the text writer -------------------------------------------------------------------- */

struct writer {
    struct af_buf out;
    int pending_space; /* white space seen since the last character */
    int pending_nl;    /* a block boundary seen since the last character */
};

static void put_char(struct writer *w, char c)
{
    if (w->out.len > 0) {
        if (w->pending_nl)
            (void)af_buf_putc(&w->out, '\n');
        else if (w->pending_space)
            (void)af_buf_putc(&w->out, ' ');
    }
    w->pending_nl = w->pending_space = 0;
    (void)af_buf_putc(&w->out, c);
}

static void put_text(struct writer *w, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
        if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f' || *p == '\v') {
            w->pending_space = 1;
        } else if (p[0] == 0xC2 && p[1] == 0xA0) { /* U+00A0 no-break space */
            w->pending_space = 1;
            p++;
        } else {
            put_char(w, (char)*p);
        }
    }
}

/* --- element classes -------------------------------------------------------------------- */

static int name_in(const xmlChar *name, const char *const *set)
{
    for (size_t i = 0; set[i]; i++)
        if (strcmp((const char *)name, set[i]) == 0)
            return 1;
    return 0;
}

static const char *const skipped[] = {"script", "style",  "noscript", "template", "svg",
                                      "canvas", "object", "iframe",   "select",   NULL};

static const char *const blocks[] = {
    "address", "article", "aside", "blockquote", "body",    "br",       "caption",    "dd",
    "details", "dialog",  "div",   "dl",         "dt",      "fieldset", "figcaption", "figure",
    "footer",  "form",    "h1",    "h2",         "h3",      "h4",       "h5",         "h6",
    "header",  "hgroup",  "hr",    "html",       "legend",  "li",       "main",       "nav",
    "ol",      "p",       "pre",   "section",    "summary", "table",    "tbody",      "tfoot",
    "thead",   "title",   "tr",    "ul",         NULL};

static const char *const cells[] = {"td", "th", NULL};

/* Called when an element opens or closes. */
static void element_edge(struct writer *w, const xmlNode *n)
{
    if (name_in(n->name, blocks))
        w->pending_nl = 1;
    else if (name_in(n->name, cells))
        w->pending_space = 1;
}

/* The head contributes only its <title> elements. */
static void emit_head(struct writer *w, const xmlNode *head)
{
    for (const xmlNode *c = head->children; c; c = c->next) {
        if (c->type != XML_ELEMENT_NODE || strcmp((const char *)c->name, "title") != 0)
            continue;
        xmlChar *t = xmlNodeGetContent(c);
        w->pending_nl = 1;
        put_text(w, (const char *)t);
        w->pending_nl = 1;
        xmlFree(t);
    }
}

/* Handles node n; returns 1 when the walk should descend into its children. */
static int visit(struct writer *w, const xmlNode *n)
{
    if (n->type == XML_TEXT_NODE || n->type == XML_CDATA_SECTION_NODE) {
        put_text(w, (const char *)n->content);
        return 0;
    }
    if (n->type != XML_ELEMENT_NODE || !n->name)
        return 0;
    if (strcmp((const char *)n->name, "head") == 0) {
        emit_head(w, n);
        return 0;
    }
    if (name_in(n->name, skipped))
        return 0;
    element_edge(w, n);
    return n->children != NULL;
}

static void walk(struct writer *w, const xmlNode *root)
{
    const xmlNode *n = root;
    while (n) {
        if (visit(w, n)) {
            n = n->children;
            continue;
        }
        while (n && !n->next) {
            n = n->parent;
            if (n && n->type == XML_ELEMENT_NODE)
                element_edge(w, n);
            if (!n || n->type == XML_DOCUMENT_NODE || n->type == XML_HTML_DOCUMENT_NODE)
                return;
        }
        if (n)
            n = n->next;
    }
}

int html_utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    while (p < end) {
        unsigned c = *p;
        size_t need;
        if (c < 0x80)
            need = 0;
        else if (c >= 0xC2 && c <= 0xDF)
            need = 1;
        else if ((c & 0xF0) == 0xE0)
            need = 2;
        else if (c >= 0xF0 && c <= 0xF4)
            need = 3;
        else
            return 0;
        if ((size_t)(end - p) < need + 1)
            return 0;
        for (size_t i = 1; i <= need; i++)
            if ((p[i] & 0xC0) != 0x80)
                return 0;
        p += need + 1;
    }
    return 1;
}

int html_to_text(const char *html, size_t len, const char *charset, char **out, char *err,
                 size_t errlen)
{
    *out = NULL;
    if (len > INT32_MAX) {
        af_errf(err, errlen, "HTML document of %zu bytes is too large to parse", len);
        return AF_ETOOBIG;
    }
    pthread_once(&g_xml_once, xml_init_once);
    const char *enc = charset && charset[0] ? charset : html_utf8_valid(html, len) ? "UTF-8" : NULL;
    int opts = HTML_PARSE_NOERROR | HTML_PARSE_NOWARNING | HTML_PARSE_NONET | HTML_PARSE_RECOVER;
    htmlDocPtr doc = htmlReadMemory(html, (int)len, NULL, enc, opts);
    if (!doc && enc)
        doc = htmlReadMemory(html, (int)len, NULL, NULL, opts); /* unknown charset name */
    if (!doc) {
        af_errf(err, errlen, "libxml2 could not parse the HTML document (%zu bytes)", len);
        return AF_EPARSE;
    }
    struct writer w = {.pending_space = 0};
    af_buf_init(&w.out, AF_BUF_NOLIMIT);
    const xmlNode *root = xmlDocGetRootElement(doc);
    if (root)
        walk(&w, root);
    xmlFreeDoc(doc);
    *out = af_buf_detach(&w.out);
    return AF_OK;
}

/* --- chunking --------------------------------------------------------------------------- */

struct word {
    size_t off, len;
};

static int is_ws(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static struct word *split_words(const char *text, size_t *n_out)
{
    size_t n = 0, cap = 0;
    struct word *v = NULL;
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    while (s[i]) {
        while (s[i] && is_ws(s[i]))
            i++;
        if (!s[i])
            break;
        size_t start = i;
        while (s[i] && !is_ws(s[i]))
            i++;
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            v = af_xrealloc(v, cap * sizeof *v);
        }
        v[n].off = start;
        v[n].len = i - start;
        n++;
    }
    *n_out = n;
    return v;
}

json_t *text_chunk_words(const char *text, size_t chunk_words, size_t overlap_words)
{
    json_t *arr = json_array();
    size_t n = 0;
    struct word *w = split_words(text ? text : "", &n);
    if (chunk_words == 0)
        chunk_words = 1;
    size_t step = overlap_words < chunk_words ? chunk_words - overlap_words : chunk_words;
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    for (size_t start = 0; start < n; start += step) {
        size_t end = start + chunk_words < n ? start + chunk_words : n;
        af_buf_reset(&b);
        for (size_t i = start; i < end; i++) {
            if (i > start)
                (void)af_buf_putc(&b, ' ');
            (void)af_buf_append(&b, text + w[i].off, w[i].len);
        }
        json_array_append_new(arr, af_json_textn(af_buf_str(&b), b.len));
        if (end == n)
            break;
    }
    af_buf_deinit(&b);
    free(w);
    return arr;
}
