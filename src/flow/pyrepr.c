/*
 * pyrepr.c - JSON as Python literals (pyrepr.h), for the `--render python` prompt style.
 *
 * Strings follow CPython's unicode_repr: \\ and the chosen quote escaped, \t \n \r named,
 * other control characters (and DEL) as \xNN, everything else, non-ASCII included, as is.
 * Floats follow float_repr: the shortest digits that read back to the same double, in fixed
 * notation for decimal exponents -4..15 and in exponent notation (two digits at least) else.
 */
#include "flow/pyrepr.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"

static void repr_str(struct af_buf *b, const char *s, size_t n)
{
    const int dq = memchr(s, '\'', n) && !memchr(s, '"', n);
    const char q = dq ? '"' : '\'';
    (void)af_buf_putc(b, q);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\' || c == (unsigned char)q) {
            (void)af_buf_putc(b, '\\');
            (void)af_buf_putc(b, (char)c);
        } else if (c == '\n') {
            (void)af_buf_puts(b, "\\n");
        } else if (c == '\r') {
            (void)af_buf_puts(b, "\\r");
        } else if (c == '\t') {
            (void)af_buf_puts(b, "\\t");
        } else if (c < 0x20 || c == 0x7f) {
            (void)af_buf_printf(b, "\\x%02x", c);
        } else {
            (void)af_buf_putc(b, (char)c);
        }
    }
    (void)af_buf_putc(b, q);
}

static void repr_float(struct af_buf *b, double v)
{
    if (isnan(v)) {
        (void)af_buf_puts(b, "nan");
        return;
    }
    if (isinf(v)) {
        (void)af_buf_puts(b, v > 0 ? "inf" : "-inf");
        return;
    }
    char e[40];
    int p = 1;
    for (; p < 17; p++) { /* the fewest significant digits that read back exactly */
        snprintf(e, sizeof e, "%.*e", p - 1, v);
        if (strtod(e, NULL) == v)
            break;
    }
    snprintf(e, sizeof e, "%.*e", p - 1, v);
    const int exp10 = (int)strtol(strchr(e, 'e') + 1, NULL, 10);
    char out[48];
    if (exp10 >= -4 && exp10 < 16) {
        int decimals = p - 1 - exp10;
        snprintf(out, sizeof out, "%.*f", decimals > 0 ? decimals : 0, v);
        size_t len = strlen(out); /* at most 22 bytes: 17 digits, a sign, zeros, a point */
        if (!strchr(out, '.'))
            memcpy(out + len, ".0", 3);
    } else {
        char mant[24];
        size_t m = (size_t)(strchr(e, 'e') - e);
        memcpy(mant, e, m);
        mant[m] = '\0';
        snprintf(out, sizeof out, "%se%c%02d", mant, exp10 < 0 ? '-' : '+', abs(exp10));
    }
    (void)af_buf_puts(b, out);
}

static void repr_value(struct af_buf *b, const json_t *v)
{
    size_t i;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        (void)af_buf_putc(b, '{');
        i = 0;
        for (void *it = json_object_iter((json_t *)(uintptr_t)v); it;
             it = json_object_iter_next((json_t *)(uintptr_t)v, it)) {
            const char *k = json_object_iter_key(it);
            (void)af_buf_puts(b, i++ ? ", " : "");
            repr_str(b, k, strlen(k));
            (void)af_buf_puts(b, ": ");
            repr_value(b, json_object_iter_value(it));
        }
        (void)af_buf_putc(b, '}');
        break;
    }
    case JSON_ARRAY:
        (void)af_buf_putc(b, '[');
        for (i = 0; i < json_array_size(v); i++) {
            (void)af_buf_puts(b, i ? ", " : "");
            repr_value(b, json_array_get(v, i));
        }
        (void)af_buf_putc(b, ']');
        break;
    case JSON_STRING:
        repr_str(b, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        (void)af_buf_printf(b, "%lld", (long long)json_integer_value(v));
        break;
    case JSON_REAL:
        repr_float(b, json_real_value(v));
        break;
    case JSON_TRUE:
        (void)af_buf_puts(b, "True");
        break;
    case JSON_FALSE:
        (void)af_buf_puts(b, "False");
        break;
    default:
        (void)af_buf_puts(b, "None");
        break;
    }
}

char *pyrepr(const json_t *v)
{
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    repr_value(&b, v);
    return af_buf_detach(&b);
}
