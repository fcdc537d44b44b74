/*
 * wiki_row.c - parsing one input row of the index build. See wiki_row.h.
 *
 * jansson builds a full object tree for every line, about a fifth of a build's CPU; the direct
 * scanner validates the same grammar for the common shape and decodes the strings once.
 */
#include "tools/wiki_row.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errf.h"
#include "core/utf8.h"
#include "core/xalloc.h"

void wiki_row_scratch_free(struct wiki_row_scratch *sc)
{
    json_decref(sc->keep);
    sc->keep = NULL;
    free(sc->buf);
    sc->buf = NULL;
    sc->cap = 0;
}

/* --- jansson ------------------------------------------------------------------------------- */

int wiki_row_jsonl_jansson(const char *line, size_t len, struct wiki_row *row,
                           struct wiki_row_scratch *sc, char *why, size_t whylen)
{
    json_decref(sc->keep);
    sc->keep = NULL;
    json_error_t je;
    json_t *o = json_loadb(line, len, 0, &je);
    if (!o) {
        af_errf(why, whylen, "invalid JSON: %s", je.text);
        return AF_EPARSE;
    }
    sc->keep = o;
    if (!json_is_object(o)) {
        af_errf(why, whylen, "expected a JSON object");
        return AF_EPARSE;
    }
    json_t *id = json_object_get(o, "id"), *ti = json_object_get(o, "title");
    json_t *tx = json_object_get(o, "text");
    if (json_is_string(id)) {
        row->id = json_string_value(id);
        row->id_len = json_string_length(id);
    } else if (json_is_integer(id)) {
        int n = snprintf(row->idnum, sizeof row->idnum, "%" JSON_INTEGER_FORMAT,
                         json_integer_value(id));
        row->id = row->idnum;
        row->id_len = (size_t)n;
    } else {
        af_errf(why, whylen, "\"id\" must be a string or an integer");
        return AF_EPARSE;
    }
    if (!json_is_string(tx)) {
        af_errf(why, whylen, "\"text\" must be a string");
        return AF_EPARSE;
    }
    if (ti && !json_is_string(ti) && !json_is_null(ti)) {
        af_errf(why, whylen, "\"title\" must be a string");
        return AF_EPARSE;
    }
    row->text = json_string_value(tx);
    row->text_len = json_string_length(tx);
    row->title = json_is_string(ti) ? json_string_value(ti) : "";
    row->title_len = json_is_string(ti) ? json_string_length(ti) : 0;
    return AF_OK;
}

/* --- The direct scanner -------------------------------------------------------------------- */

static const char *skip_ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

static int hex4(const char *p, const char *e, unsigned *out)
{
    if (e - p < 4)
        return 0;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                            : 16u;
        if (d > 15)
            return 0;
        v = v * 16 + d;
    }
    *out = v;
    return 1;
}

/* A \u escape at p (p[0] == '\\', p[1] == 'u'), surrogate pairs joined: writes its UTF-8 at o.
 * Returns the input bytes used, or 0 for what jansson rejects (\u0000, lone surrogates). */
static size_t unicode_escape(const char *p, const char *e, char *o, size_t *olen)
{
    unsigned cp, lo;
    if (!hex4(p + 2, e, &cp) || cp == 0 || (cp >= 0xDC00 && cp <= 0xDFFF))
        return 0;
    size_t used = 6;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (e - p < 12 || p[6] != '\\' || p[7] != 'u' || !hex4(p + 8, e, &lo) || lo < 0xDC00 ||
            lo > 0xDFFF)
            return 0;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        used = 12;
    }
    *olen = af_utf8_put(cp, o);
    return used;
}

/* The JSON string opening at *pp, decoded to out (room for its raw length). Advances *pp past
 * the closing quote. Returns its decoded length, or SIZE_MAX to fall back to jansson. */
static size_t scan_string(const char **pp, const char *e, char *out)
{
    const char *p = *pp + 1;
    size_t n = 0;
    for (;;) {
        const char *s = p;
        while (p < e && (unsigned char)*p >= 0x20 && (unsigned char)*p < 0x80 && *p != '"' &&
               *p != '\\')
            p++;
        memcpy(out + n, s, (size_t)(p - s));
        n += (size_t)(p - s);
        if (p >= e)
            return SIZE_MAX;
        unsigned char c = (unsigned char)*p;
        if (c == '"') {
            *pp = p + 1;
            return n;
        }
        if (c < 0x20)
            return SIZE_MAX;
        if (c >= 0x80) {
            size_t k = af_utf8_seq((const unsigned char *)p, (size_t)(e - p));
            if (!k)
                return SIZE_MAX;
            memcpy(out + n, p, k);
            n += k;
            p += k;
            continue;
        }
        if (p + 1 >= e)
            return SIZE_MAX;
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *f = p[1] ? strchr(from, p[1]) : NULL;
        if (f) {
            out[n++] = to[f - from];
            p += 2;
        } else if (p[1] == 'u') {
            size_t k, used = unicode_escape(p, e, out + n, &k);
            if (!used)
                return SIZE_MAX;
            n += k;
            p += used;
        } else {
            return SIZE_MAX;
        }
    }
}

/* A JSON integer at *pp that fits in 18 digits, printed into idnum. Returns its length, or 0 to
 * fall back (reals, bad numbers, large ones). */
static size_t scan_integer(const char **pp, const char *e, char *idnum, size_t cap)
{
    const char *p = *pp, *s = p;
    if (p < e && *p == '-')
        p++;
    const char *d = p;
    while (p < e && *p >= '0' && *p <= '9')
        p++;
    size_t nd = (size_t)(p - d);
    if (nd == 0 || nd > 18 || (d[0] == '0' && nd > 1))
        return 0;
    if (p < e && (*p == '.' || *p == 'e' || *p == 'E'))
        return 0;
    long long v = 0;
    for (const char *q = d; q < p; q++)
        v = v * 10 + (*q - '0');
    if (*s == '-')
        v = -v;
    *pp = p;
    return (size_t)snprintf(idnum, cap, "%lld", v);
}

enum field { F_OTHER = -1, F_ID, F_TITLE, F_TEXT };

static enum field field_of(const char *k, size_t n)
{
    if (n == 2 && memcmp(k, "id", 2) == 0)
        return F_ID;
    if (n == 5 && memcmp(k, "title", 5) == 0)
        return F_TITLE;
    if (n == 4 && memcmp(k, "text", 4) == 0)
        return F_TEXT;
    return F_OTHER;
}

/* The scanner proper: 0 with row filled, or 1 to let jansson judge the line. */
static int scan_row(const char *line, size_t len, struct wiki_row *row, char *buf)
{
    const char *p = skip_ws(line, line + len), *e = line + len;
    size_t used = 0;
    int seen[3] = {0, 0, 0}, title_null = 0;
    if (p >= e || *p != '{')
        return 1;
    p = skip_ws(p + 1, e);
    if (p < e && *p == '}')
        return 1; /* no fields: jansson names what is missing */
    for (;;) {
        if (p >= e || *p != '"')
            return 1;
        char *key = buf + used;
        size_t kn = scan_string(&p, e, key);
        if (kn == SIZE_MAX)
            return 1;
        enum field f = field_of(key, kn);
        p = skip_ws(p, e);
        if (p >= e || *p != ':')
            return 1;
        p = skip_ws(p + 1, e);
        if (p >= e)
            return 1;
        if (f != F_OTHER && seen[f])
            return 1; /* a repeated key: jansson keeps the last */
        if (*p == '"') {
            char *val = buf + used;
            size_t vn = scan_string(&p, e, val);
            if (vn == SIZE_MAX)
                return 1;
            if (f == F_ID) {
                row->id = val;
                row->id_len = vn;
            } else if (f == F_TITLE) {
                row->title = val;
                row->title_len = vn;
            } else if (f == F_TEXT) {
                row->text = val;
                row->text_len = vn;
            }
            if (f != F_OTHER)
                used += vn; /* keep it; an unknown key's value is overwritten */
        } else if ((*p == '-' || (*p >= '0' && *p <= '9')) && f != F_TITLE && f != F_TEXT) {
            char other[32];
            char *dst = f == F_ID ? row->idnum : other;
            size_t n = scan_integer(&p, e, dst, sizeof other);
            if (!n)
                return 1;
            if (f == F_ID) {
                row->id = row->idnum;
                row->id_len = n;
            }
        } else if (e - p >= 4 && memcmp(p, "null", 4) == 0 && f != F_ID && f != F_TEXT) {
            p += 4;
            title_null |= f == F_TITLE;
        } else {
            return 1;
        }
        if (f != F_OTHER)
            seen[f] = 1;
        p = skip_ws(p, e);
        if (p < e && *p == ',') {
            p = skip_ws(p + 1, e);
            continue;
        }
        if (p < e && *p == '}')
            break;
        return 1;
    }
    if (skip_ws(p + 1, e) != e || !seen[F_ID] || !seen[F_TEXT])
        return 1;
    if (!seen[F_TITLE] || title_null) {
        row->title = "";
        row->title_len = 0;
    }
    return 0;
}

int wiki_row_jsonl(const char *line, size_t len, struct wiki_row *row, struct wiki_row_scratch *sc,
                   char *why, size_t whylen)
{
    if (sc->cap < len + 1) {
        free(sc->buf);
        sc->cap = len + 1 > 4096 ? len + 1 : 4096;
        sc->buf = af_xmalloc(sc->cap);
    }
    if (scan_row(line, len, row, sc->buf) == 0)
        return AF_OK;
    return wiki_row_jsonl_jansson(line, len, row, sc, why, whylen);
}

/* --- TSV ---------------------------------------------------------------------------------- */

/* One TSV field starting at *p, unquoted in place ("" -> "). Advances *p past the field and
 * its tab. Returns 0, or -1 on an unterminated quote. */
static int tsv_field(char **p, char *end, const char **out, size_t *outlen)
{
    char *s = *p;
    if (s < end && *s == '"') {
        char *w = s, *r = s + 1;
        for (;;) {
            if (r >= end)
                return -1;
            if (*r == '"') {
                if (r + 1 < end && r[1] == '"') {
                    *w++ = '"';
                    r += 2;
                    continue;
                }
                r++;
                break;
            }
            *w++ = *r++;
        }
        if (r < end && *r != '\t')
            return -1;
        *out = s;
        *outlen = (size_t)(w - s);
        *p = r < end ? r + 1 : r;
        return 0;
    }
    char *tab = memchr(s, '\t', (size_t)(end - s));
    *out = s;
    *outlen = tab ? (size_t)(tab - s) : (size_t)(end - s);
    *p = tab ? tab + 1 : end;
    return 0;
}

/* DPR TSV: id \t text \t title. */
int wiki_row_tsv(char *line, size_t len, struct wiki_row *row, char *why, size_t whylen)
{
    char *p = line, *end = line + len;
    if (tsv_field(&p, end, &row->id, &row->id_len) || p >= end ||
        tsv_field(&p, end, &row->text, &row->text_len) ||
        tsv_field(&p, end, &row->title, &row->title_len)) {
        af_errf(why, whylen, "expected 3 tab-separated fields (id, text, title)");
        return AF_EPARSE;
    }
    if (p < end) {
        af_errf(why, whylen, "more than 3 tab-separated fields");
        return AF_EPARSE;
    }
    if (row->id_len == 0) {
        af_errf(why, whylen, "empty id");
        return AF_EPARSE;
    }
    return AF_OK;
}
