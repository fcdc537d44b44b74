/*
 * pycall.c - reads the executor's Python-subset commands as data (see pycall.h).
 *
 * Two layers. The lexer turns the source into tokens; like Python's tokenizer it drops
 * newlines inside brackets, and it only finds where strings and numbers end (strings are
 * decoded when the parser consumes them, so looking ahead is cheap). The recursive-descent
 * parser evaluates literal expressions straight into jansson values; nothing is executed.
 *
 * Invariants: the first error wins and every later step is a no-op; recursion is bounded by
 * AF_PYCALL_MAX_DEPTH; literal values are bounded by the source size, and the bytes created by
 * substituting variables are charged to AF_PYCALL_MAX_VALUE_BYTES, so no input can make the
 * parser allocate more than a fixed multiple of its limits (the values of `b = [a, a, a]`
 * would otherwise grow exponentially).
 */
#include "flow/pycall.h"

#include "core/errf.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/buf.h"
#include "core/xalloc.h"

#define NODE_COST 32                         /* budget charged per substituted JSON node */
#define OPEN_SLOTS (AF_PYCALL_MAX_DEPTH + 8) /* remembered positions of open brackets */
#define MAX_NUM_CHARS 256                    /* longest numeric literal */

/* T_OP is any other operator: shown in errors, never accepted. */
// clang-format off
enum tok_kind {
    T_ERROR, T_EOF, T_NEWLINE, T_NAME, T_INT, T_FLOAT, T_STRING, T_LPAR, T_RPAR, T_LSQB, T_RSQB,
    T_LBRACE, T_RBRACE, T_COMMA, T_COLON, T_SEMI, T_DOT, T_EQUAL, T_PLUS, T_MINUS, T_OP
};
// clang-format on

enum { STR_RAW = 1, STR_BYTES = 2, STR_F = 4, STR_PLAIN = 8 /* u'' */ };

struct token {
    enum tok_kind kind;
    size_t start, end; /* source span, prefix and quotes included */
    int line, col;     /* 1-based position of start */
    unsigned flags;    /* T_STRING: STR_* */
    size_t body_start, body_end;
    int body_line, body_col;
    uint64_t ival; /* T_INT: magnitude */
    double fval;   /* T_FLOAT */
};

/* Everything the lexer needs to resume; copied to look ahead. */
struct lex_state {
    size_t pos;
    int line, col;
    size_t depth; /* open brackets */
};

struct open_mark {
    int line, col, ch;
};

struct parser {
    const char *src;
    size_t len;
    struct lex_state lx;
    /* Where each open bracket is; entry d is rewritten identically when a look-ahead is
     * re-lexed, so it needs no saving. */
    struct open_mark open[OPEN_SLOTS];
    struct token cur;
    int failed;
    int rc;
    char *err;
    size_t errlen;
    json_t *vars;    /* name -> literal value */
    json_t *results; /* name -> true, for names bound to tool.execute results */
    size_t budget;   /* substitution bytes still allowed */
    struct af_pycall_list *out;
    size_t cap;
};

static const char *const keywords[] = {
    "False", "None",     "True",  "and",    "as",   "assert", "async",  "await",    "break",
    "class", "continue", "def",   "del",    "elif", "else",   "except", "finally",  "for",
    "from",  "global",   "if",    "import", "in",   "is",     "lambda", "nonlocal", "not",
    "or",    "pass",     "raise", "return", "try",  "while",  "with",   "yield",
};

static AF_PRINTF(4, 5) void perr(struct parser *p, int line, int col, const char *fmt, ...)
{
    if (p->failed)
        return;
    p->failed = 1;
    if (!p->rc)
        p->rc = AF_EPARSE;
    if (!p->err || !p->errlen)
        return;
    int n = snprintf(p->err, p->errlen, "line %d:%d: ", line, col);
    if (n < 0 || (size_t)n >= p->errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

static json_t *jcheck(json_t *j)
{
    if (!j)
        abort(); /* jansson returns NULL here only when out of memory */
    return j;
}

static int is_ident_start(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int is_digit(int c)
{
    return c >= '0' && c <= '9';
}

static int is_ident_char(int c)
{
    return is_ident_start(c) || is_digit(c);
}

/* The value of digit c in bases up to 36, or -1. */
static int digit_val(int c)
{
    c = c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
    return is_digit(c) ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : -1;
}

static int tok_is(const struct parser *p, const struct token *t, const char *word)
{
    size_t n = strlen(word);
    return t->kind == T_NAME && t->end - t->start == n && !memcmp(p->src + t->start, word, n);
}

static int is_keyword(const struct parser *p, const struct token *t)
{
    for (size_t i = 0; i < sizeof keywords / sizeof keywords[0]; i++)
        if (tok_is(p, t, keywords[i]))
            return 1;
    return 0;
}

/* A printable rendering of at most ~24 bytes of s, cut on a UTF-8 boundary. */
static void show_text(const char *s, size_t n, char *out, size_t outlen)
{
    size_t o = 0, i = 0, keep = n > 24 ? 24 : n;
    while (keep < n && keep > 0 && ((unsigned char)s[keep] & 0xC0) == 0x80)
        keep--;
    for (; i < keep && o + 5 < outlen; i++) {
        unsigned char c = (unsigned char)s[i];
        out[o++] = (c < 0x20 || c == 0x7F) ? '?' : (char)c;
    }
    if (i < n && o + 4 < outlen) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
}

static const char *tok_desc(const struct parser *p, const struct token *t, char *buf, size_t n)
{
    if (t->kind == T_EOF)
        return "end of input";
    if (t->kind == T_NEWLINE)
        return "newline";
    char text[64];
    show_text(p->src + t->start, t->end - t->start, text, sizeof text);
    snprintf(buf, n, "'%s'", text);
    return buf;
}

/* ---- lexer ------------------------------------------------------------------------------ */

static int peekc(const struct parser *p, size_t off)
{
    size_t i = p->lx.pos + off;
    return i < p->len ? (unsigned char)p->src[i] : -1;
}

static void step(const char *s, size_t *i, int *line, int *col)
{
    unsigned char c = (unsigned char)s[(*i)++];
    if (c == '\n') {
        (*line)++;
        *col = 1;
    } else if ((c & 0xC0) != 0x80) {
        (*col)++;
    }
}

static void adv(struct parser *p)
{
    step(p->src, &p->lx.pos, &p->lx.line, &p->lx.col);
}

static void skip_blank(struct parser *p)
{
    for (;;) {
        int c = peekc(p, 0), c1 = peekc(p, 1);
        if (c == ' ' || c == '\t' || c == '\f' || c == '\r' || c == '\v' ||
            (c == '\n' && p->lx.depth > 0)) {
            adv(p);
        } else if (c == '#') {
            while (peekc(p, 0) >= 0 && peekc(p, 0) != '\n')
                adv(p);
        } else if (c == '\\' && (c1 == '\n' || (c1 == '\r' && peekc(p, 2) == '\n'))) {
            adv(p); /* a backslash at the end of a line joins it with the next */
            if (c1 == '\r')
                adv(p);
            adv(p);
        } else {
            return;
        }
    }
}

/* STR_* flags for an identifier that is a string prefix (r, u, b, f, br, rb, fr, rf in any
 * case), or 0 for any other identifier. */
static unsigned string_prefix(const char *s, size_t n)
{
    static const char letters[] = "rRbBfF";
    static const unsigned bits[] = {STR_RAW, STR_RAW, STR_BYTES, STR_BYTES, STR_F, STR_F};
    unsigned flags = 0;
    if (n == 1 && (s[0] == 'u' || s[0] == 'U'))
        return STR_PLAIN;
    for (size_t i = 0; i < n && n <= 2; i++) {
        const char *l = strchr(letters, s[i]);
        if (!l || (flags & bits[l - letters]))
            return 0;
        flags |= bits[l - letters];
    }
    return (flags & STR_BYTES) && (flags & STR_F) ? 0 : flags;
}

/* Scans a string whose opening quote is at the current position. */
static enum tok_kind lex_string(struct parser *p, struct token *t, unsigned flags)
{
    int q = peekc(p, 0);
    int triple = peekc(p, 1) == q && peekc(p, 2) == q;
    for (int i = 0; i < (triple ? 3 : 1); i++)
        adv(p);
    t->flags = flags & (STR_RAW | STR_BYTES | STR_F);
    t->body_start = p->lx.pos;
    t->body_line = p->lx.line;
    t->body_col = p->lx.col;
    for (;;) {
        int c = peekc(p, 0);
        if (c < 0 || (c == '\n' && !triple)) {
            perr(p, t->line, t->col, "unterminated %sstring literal, expected a closing %s",
                 triple ? "triple-quoted " : "",
                 q == '"' ? (triple ? "\"\"\"" : "\"") : (triple ? "'''" : "'"));
            return T_ERROR;
        }
        if (c == '\\') {
            adv(p);
            if (peekc(p, 0) >= 0)
                adv(p);
            continue;
        }
        if (c == q && (!triple || (peekc(p, 1) == q && peekc(p, 2) == q))) {
            t->body_end = p->lx.pos;
            for (int i = 0; i < (triple ? 3 : 1); i++)
                adv(p);
            return T_STRING;
        }
        adv(p);
    }
}

static int acc_digit(uint64_t *v, unsigned base, unsigned d)
{
    if (*v > (UINT64_MAX - d) / base)
        return -1;
    *v = *v * base + d;
    return 0;
}

/* Appends the digits (of `base`, '_' allowed between them) at the current position to buf.
 * Returns the number of digits, or -1 after an error. */
static int scan_digits(struct parser *p, const struct token *t, unsigned base, char *buf, size_t *n)
{
    int count = 0;
    for (;;) {
        int c = peekc(p, 0);
        int d = c >= 0 ? digit_val(c) : -1;
        if (c == '_' && count > 0) {
            int c2 = peekc(p, 1);
            int d2 = c2 >= 0 ? digit_val(c2) : -1;
            if (d2 < 0 || (unsigned)d2 >= base) {
                perr(p, t->line, t->col, "invalid numeric literal: '_' must separate digits");
                return -1;
            }
            adv(p);
            continue;
        }
        if (d < 0 || (unsigned)d >= base)
            return count;
        if (*n + 2 >= MAX_NUM_CHARS) {
            perr(p, t->line, t->col, "numeric literal longer than %d characters",
                 MAX_NUM_CHARS - 2);
            return -1;
        }
        buf[(*n)++] = (char)c;
        count++;
        adv(p);
    }
}

static enum tok_kind finish_int(struct parser *p, struct token *t, const char *digits, size_t n,
                                unsigned base)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (acc_digit(&v, base, (unsigned)digit_val(digits[i]))) {
            perr(p, t->line, t->col, "integer literal too large (it must fit in 64 bits)");
            return T_ERROR;
        }
    }
    t->ival = v;
    return T_INT;
}

static enum tok_kind lex_based_int(struct parser *p, struct token *t)
{
    int c = peekc(p, 1);
    unsigned base = (c == 'x' || c == 'X') ? 16 : (c == 'o' || c == 'O') ? 8 : 2;
    char buf[MAX_NUM_CHARS];
    size_t n = 0;
    adv(p);
    adv(p);
    if (peekc(p, 0) == '_')
        adv(p);
    int count = scan_digits(p, t, base, buf, &n);
    if (count < 0)
        return T_ERROR;
    if (count == 0 || is_ident_char(peekc(p, 0))) {
        perr(p, t->line, t->col, "invalid base-%u integer literal", base);
        return T_ERROR;
    }
    return finish_int(p, t, buf, n, base);
}

static enum tok_kind lex_number(struct parser *p, struct token *t)
{
    int c1 = peekc(p, 1);
    if (peekc(p, 0) == '0' && c1 >= 0 && strchr("xXoObB", c1))
        return lex_based_int(p, t);
    char buf[MAX_NUM_CHARS + 4]; /* digits, then at most '.', 'e', a sign and the NUL */
    size_t n = 0;
    int is_float = 0;
    if (scan_digits(p, t, 10, buf, &n) < 0)
        return T_ERROR;
    size_t int_digits = n;
    if (peekc(p, 0) == '.') {
        is_float = 1;
        buf[n++] = '.';
        adv(p);
        if (scan_digits(p, t, 10, buf, &n) < 0)
            return T_ERROR;
    }
    int e1 = peekc(p, 1), e2 = peekc(p, 2);
    if ((peekc(p, 0) == 'e' || peekc(p, 0) == 'E') &&
        (is_digit(e1) || ((e1 == '+' || e1 == '-') && is_digit(e2)))) {
        is_float = 1;
        buf[n++] = 'e';
        adv(p);
        if (e1 == '+' || e1 == '-') {
            buf[n++] = (char)e1;
            adv(p);
        }
        if (scan_digits(p, t, 10, buf, &n) < 0)
            return T_ERROR;
    }
    if (is_ident_char(peekc(p, 0))) {
        perr(p, t->line, t->col, "invalid numeric literal");
        return T_ERROR;
    }
    buf[n] = '\0';
    if (!is_float) {
        for (size_t i = 0; i + 1 < int_digits && buf[0] == '0'; i++) {
            if (buf[i + 1] != '0') {
                perr(p, t->line, t->col, "leading zeros in a decimal integer (use 0o for octal)");
                return T_ERROR;
            }
        }
        return finish_int(p, t, buf, n, 10);
    }
    errno = 0;
    t->fval = strtod(buf, NULL);
    if (!isfinite(t->fval)) {
        perr(p, t->line, t->col, "float literal out of range");
        return T_ERROR;
    }
    return T_FLOAT;
}

static enum tok_kind lex_name(struct parser *p, struct token *t)
{
    while (is_ident_char(peekc(p, 0)))
        adv(p);
    int q = peekc(p, 0);
    if (q == '"' || q == '\'') {
        unsigned flags = string_prefix(p->src + t->start, p->lx.pos - t->start);
        if (flags)
            return lex_string(p, t, flags);
    }
    return T_NAME;
}

/* Scans an operator we never accept, whole ("**", "+=", "=="), for the error message. */
static enum tok_kind lex_op(struct parser *p)
{
    int c = peekc(p, 0);
    adv(p);
    int c2 = peekc(p, 0);
    if (c2 == c && c2 >= 0 && strchr("*/<>=", c2)) {
        adv(p);
        c2 = peekc(p, 0);
    }
    if (c2 == '=' || (c == '-' && c2 == '>'))
        adv(p);
    return T_OP;
}

static enum tok_kind bad_char(struct parser *p, const struct token *t, int c)
{
    if (c >= 0x21 && c < 0x7F)
        perr(p, t->line, t->col, "unexpected character '%c'", c);
    else if (c < 0x80)
        perr(p, t->line, t->col, "unexpected character \\x%02X", (unsigned)c);
    else
        perr(p, t->line, t->col, "unexpected non-ASCII character outside a string");
    return T_ERROR;
}

static enum tok_kind lex_punct(struct parser *p, struct token *t, int c)
{
    static const char chars[] = "([{)]},:;.=+-";
    static const enum tok_kind kinds[] = {T_LPAR,   T_LSQB,  T_LBRACE, T_RPAR, T_RSQB,
                                          T_RBRACE, T_COMMA, T_COLON,  T_SEMI, T_DOT,
                                          T_EQUAL,  T_PLUS,  T_MINUS};
    int c2 = peekc(p, 1);
    const char *f = strchr(chars, c);
    if ((c == '=' || c == '+' || c == '-') && (c2 == '=' || (c == '-' && c2 == '>')))
        return lex_op(p);
    if (!f)
        return strchr("*/%<>!&|^~@", c) ? lex_op(p) : bad_char(p, t, c);
    if (f - chars < 3) { /* an opening bracket: remember where, for "never closed" */
        if (p->lx.depth < OPEN_SLOTS) {
            p->open[p->lx.depth].line = t->line;
            p->open[p->lx.depth].col = t->col;
            p->open[p->lx.depth].ch = c;
        }
        p->lx.depth++;
    } else if (f - chars < 6 && p->lx.depth > 0) {
        p->lx.depth--;
    }
    adv(p);
    return kinds[f - chars];
}

static enum tok_kind lex_token(struct parser *p, struct token *t)
{
    memset(t, 0, sizeof *t);
    if (p->failed)
        return t->kind = T_ERROR;
    skip_blank(p);
    t->start = p->lx.pos;
    t->line = p->lx.line;
    t->col = p->lx.col;
    int c = peekc(p, 0);
    enum tok_kind k;
    if (c < 0) {
        k = T_EOF;
    } else if (c == '\n') {
        adv(p);
        k = T_NEWLINE;
    } else if (is_ident_start(c)) {
        k = lex_name(p, t);
    } else if (is_digit(c) || (c == '.' && is_digit(peekc(p, 1)))) {
        k = lex_number(p, t);
    } else if (c == '"' || c == '\'') {
        k = lex_string(p, t, 0);
    } else {
        k = lex_punct(p, t, c);
    }
    t->end = p->lx.pos;
    return t->kind = k;
}

static void next(struct parser *p)
{
    lex_token(p, &p->cur);
}

/* The kind of the n-th token after the current one (1 = the next); fills *t when non-NULL. */
static enum tok_kind peek(struct parser *p, int n, struct token *t)
{
    struct lex_state saved = p->lx;
    struct token tmp;
    if (!t)
        t = &tmp;
    for (int i = 0; i < n; i++)
        lex_token(p, t);
    p->lx = saved;
    return t->kind;
}

/* Reports that the current token is not what `expected` describes. Returns -1. */
static int unexpected(struct parser *p, const char *expected)
{
    const struct token *t = &p->cur;
    char desc[96], hint[96] = "";
    if (p->failed)
        return -1;
    if (p->lx.depth > 0) {
        size_t d = p->lx.depth - 1 < OPEN_SLOTS ? p->lx.depth - 1 : OPEN_SLOTS - 1;
        const struct open_mark *m = &p->open[d];
        if (t->kind == T_EOF)
            snprintf(hint, sizeof hint, "; '%c' opened at line %d:%d is never closed", m->ch,
                     m->line, m->col);
        else if (t->line > m->line)
            snprintf(hint, sizeof hint, " (is the '%c' opened at line %d:%d left open?)", m->ch,
                     m->line, m->col);
    }
    perr(p, t->line, t->col, "expected %s, found %s%s", expected, tok_desc(p, t, desc, sizeof desc),
         hint);
    return -1;
}

static int expect(struct parser *p, enum tok_kind k, const char *what)
{
    if (p->cur.kind != k)
        return unexpected(p, what);
    next(p);
    return 0;
}

/* ---- strings ---------------------------------------------------------------------------- */

static int put_utf8(struct af_buf *b, uint32_t cp)
{
    static const unsigned char lead[] = {0, 0, 0xC0, 0xE0, 0xF0};
    unsigned char u[4];
    size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    for (size_t k = n - 1; k > 0; k--, cp >>= 6)
        u[k] = (unsigned char)(0x80 | (cp & 0x3F));
    u[0] = (unsigned char)(lead[n] | cp);
    return af_buf_append(b, u, n);
}

/* Reads exactly `n` hex digits at s[i..end). Returns -1 when there are fewer. */
static int read_hex(const char *s, size_t i, size_t end, int n, uint32_t *cp)
{
    uint32_t v = 0;
    for (int k = 0; k < n; k++) {
        int d = i + (size_t)k < end ? digit_val((unsigned char)s[i + (size_t)k]) : -1;
        if (d < 0 || d > 15)
            return -1;
        v = v * 16 + (uint32_t)d;
    }
    *cp = v;
    return 0;
}

/* Decodes \u / \U / \x at s[*i] (the letter), combining a \uD8xx\uDCxx surrogate pair. */
static int decode_hex_escape(struct parser *p, const char *s, size_t *i, size_t end, int line,
                             int col, uint32_t *cp)
{
    char kind = s[*i];
    int n = kind == 'x' ? 2 : kind == 'u' ? 4 : 8;
    if (read_hex(s, *i + 1, end, n, cp)) {
        perr(p, line, col, "truncated \\%c escape, expected %d hex digits", kind, n);
        return -1;
    }
    *i += 1 + (size_t)n;
    if (*cp > 0x10FFFF) {
        perr(p, line, col, "\\U escape above U+10FFFF");
        return -1;
    }
    if (*cp >= 0xD800 && *cp <= 0xDBFF && *i + 6 <= end && s[*i] == '\\' && s[*i + 1] == 'u') {
        uint32_t lo;
        if (!read_hex(s, *i + 2, end, 4, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
            *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
            *i += 6;
        }
    }
    if (*cp >= 0xD800 && *cp <= 0xDFFF) {
        perr(p, line, col, "lone surrogate \\u%04X; write the character itself", (unsigned)*cp);
        return -1;
    }
    return 0;
}

/* The value of the one-letter escape \c, or -1. */
static int simple_escape(int c)
{
    static const char from[] = "\\'\"abfnrtv";
    static const char to[] = {'\\', '\'', '"', 7, 8, 12, '\n', '\r', '\t', 11};
    const char *f = c > 0 ? strchr(from, c) : NULL;
    return f ? to[f - from] : -1;
}

/* Decodes the escape whose backslash is at s[*i]; advances *i, *line and *col past it. */
static int decode_escape(struct parser *p, const char *s, size_t *i, size_t end, int *line,
                         int *col, struct af_buf *b)
{
    int eline = *line, ecol = *col;
    size_t j = *i + 1; /* the lexer guarantees a character after every backslash */
    int c = (unsigned char)s[j];
    uint32_t cp;
    int rc = 0;
    if (c == '\n' || (c == '\r' && j + 1 < end && s[j + 1] == '\n')) {
        j += c == '\r' ? 2 : 1; /* line continuation inside the string */
    } else if (simple_escape(c) >= 0) {
        rc = af_buf_putc(b, (char)simple_escape(c));
        j++;
    } else if (c >= '0' && c <= '7') {
        cp = 0;
        for (int k = 0; k < 3 && j < end && s[j] >= '0' && s[j] <= '7'; k++)
            cp = cp * 8 + (uint32_t)(s[j++] - '0');
        rc = put_utf8(b, cp);
    } else if (c == 'x' || c == 'u' || c == 'U') {
        if (decode_hex_escape(p, s, &j, end, eline, ecol, &cp))
            return -1;
        rc = put_utf8(b, cp);
    } else if (c == 'N') {
        perr(p, eline, ecol, "\\N{...} escapes are not supported; write the character itself");
        return -1;
    } else {
        rc = af_buf_putc(b, '\\'); /* unknown escape: kept, as Python does */
    }
    while (*i < j)
        step(s, i, line, col);
    return rc ? -1 : 0;
}

/* Appends the decoded value of string token t to b. */
static int decode_string(struct parser *p, const struct token *t, struct af_buf *b)
{
    const char *s = p->src;
    size_t i = t->body_start, end = t->body_end;
    int line = t->body_line, col = t->body_col;
    if (t->flags & STR_BYTES) {
        perr(p, t->line, t->col, "bytes literals are not supported; use a str");
        return -1;
    }
    while (i < end) {
        unsigned char c = (unsigned char)s[i];
        size_t from = i;
        if (c == '\\' && !(t->flags & STR_RAW)) {
            if (decode_escape(p, s, &i, end, &line, &col, b))
                return -1;
            continue;
        }
        if ((t->flags & STR_F) && (c == '{' || c == '}')) {
            if (i + 1 >= end || (unsigned char)s[i + 1] != c) {
                perr(p, line, col, "f-string replacement fields ({...}) are not supported");
                return -1;
            }
            step(s, &i, &line, &col); /* {{ and }} stand for one brace */
            from = i;
        } else if (c == '\r' && i + 1 < end && s[i + 1] == '\n') {
            step(s, &i, &line, &col);
            continue; /* CRLF inside a triple-quoted string reads as LF */
        }
        step(s, &i, &line, &col); /* raw strings keep their backslashes as they are */
        if (af_buf_append(b, s + from, i - from))
            return -1;
    }
    return 0;
}

/* ---- values ----------------------------------------------------------------------------- */

static int parse_expr(struct parser *p, int depth, json_t **out);
static int parse_items(struct parser *p, int depth, enum tok_kind close, json_t *c, json_t **out);

/* Bytes a deep copy of v costs against the budget; *depth gets its container nesting. */
static size_t value_cost(json_t *v, int *depth)
{
    size_t cost = NODE_COST, i;
    const char *key;
    json_t *child;
    int d = 0, cd;
    *depth = 0;
    if (json_is_string(v))
        return cost + json_string_length(v);
    if (json_is_array(v)) {
        json_array_foreach(v, i, child)
        {
            cost += value_cost(child, &cd);
            d = cd > d ? cd : d;
        }
        *depth = d + 1;
    } else if (json_is_object(v)) {
        json_object_foreach(v, key, child)
        {
            cost += value_cost(child, &cd) + strlen(key);
            d = cd > d ? cd : d;
        }
        *depth = d + 1;
    }
    return cost;
}

/* String literals joined by adjacency ("a" "b") or '+' ("a" + "b"). */
static int parse_strings(struct parser *p, json_t **out)
{
    struct token first = p->cur;
    struct af_buf b;
    int rc = 0;
    af_buf_init(&b, AF_PYCALL_MAX_SRC_BYTES);
    for (;;) {
        if (decode_string(p, &p->cur, &b)) {
            rc = -1;
            break;
        }
        next(p);
        if (p->cur.kind == T_STRING)
            continue;
        if (p->cur.kind != T_PLUS)
            break;
        next(p);
        if (p->cur.kind != T_STRING) {
            rc = unexpected(p, "a string literal after '+' ('+' joins string literals only)");
            break;
        }
    }
    if (!rc) {
        *out = json_stringn(af_buf_str(&b), b.len);
        if (!*out) {
            perr(p, first.line, first.col, "string literal is not valid UTF-8");
            rc = -1;
        }
    }
    af_buf_deinit(&b);
    return rc;
}

static int parse_number(struct parser *p, int neg, json_t **out)
{
    const struct token *t = &p->cur;
    if (t->kind == T_FLOAT) {
        *out = jcheck(json_real(neg ? -t->fval : t->fval));
    } else if (neg && t->ival <= (uint64_t)INT64_MAX + 1) {
        *out = jcheck(
            json_integer(t->ival == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(json_int_t)t->ival));
    } else if (!neg && t->ival <= (uint64_t)INT64_MAX) {
        *out = jcheck(json_integer((json_int_t)t->ival));
    } else {
        perr(p, t->line, t->col, "integer literal too large (it must fit in 64 bits)");
        return -1;
    }
    next(p);
    return 0;
}

static int substitute(struct parser *p, const struct token *t, json_t *v, int depth, json_t **out)
{
    int vdepth;
    size_t cost = value_cost(v, &vdepth);
    if (depth + vdepth > AF_PYCALL_MAX_DEPTH) {
        perr(p, t->line, t->col, "nesting deeper than %d levels (after substituting '%.*s')",
             AF_PYCALL_MAX_DEPTH, (int)(t->end - t->start), p->src + t->start);
        return -1;
    }
    if (cost > p->budget) {
        p->rc = AF_ETOOBIG;
        perr(p, t->line, t->col, "substituted values exceed %zu bytes", AF_PYCALL_MAX_VALUE_BYTES);
        return -1;
    }
    p->budget -= cost;
    *out = jcheck(json_deep_copy(v));
    next(p);
    return 0;
}

/* The value bound to name token t (borrowed), or NULL; *is_result tells whether the name
 * holds a tool.execute result instead. */
static json_t *lookup(struct parser *p, const struct token *t, int *is_result)
{
    char *name = af_xstrndup(p->src + t->start, t->end - t->start);
    json_t *v = json_object_get(p->vars, name);
    *is_result = json_object_get(p->results, name) != NULL;
    free(name);
    return v;
}

static int parse_name(struct parser *p, int depth, json_t **out)
{
    struct token t = p->cur;
    int n = t.end - t.start > 64 ? 64 : (int)(t.end - t.start);
    const char *s = p->src + t.start;
    if (tok_is(p, &t, "True") || tok_is(p, &t, "False") || tok_is(p, &t, "None")) {
        *out = jcheck(s[0] == 'T' ? json_true() : s[0] == 'F' ? json_false() : json_null());
        next(p);
        return 0;
    }
    enum tok_kind nk = peek(p, 1, NULL);
    if (tok_is(p, &t, "tool") && nk == T_DOT) {
        perr(p, t.line, t.col, "tool.execute(...) must be a statement of its own, not a value");
    } else if (nk == T_LPAR) {
        perr(p, t.line, t.col, "function call '%.*s(...)' is not supported in a value", n, s);
    } else if (nk == T_DOT) {
        perr(p, t.line, t.col, "attribute access '%.*s.' is not supported", n, s);
    } else if (is_keyword(p, &t)) {
        perr(p, t.line, t.col, "'%.*s' is not supported in a value, expected a literal", n, s);
    } else {
        int is_result;
        json_t *v = lookup(p, &t, &is_result);
        if (v)
            return substitute(p, &t, v, depth, out);
        if (is_result)
            perr(p, t.line, t.col,
                 "name '%.*s' holds a tool.execute(...) result, which is not "
                 "known while parsing; pass the value itself",
                 n, s);
        else
            perr(p, t.line, t.col, "name '%.*s' is not defined", n, s);
    }
    return -1;
}

static int enter(struct parser *p, int depth)
{
    if (depth > AF_PYCALL_MAX_DEPTH) {
        perr(p, p->cur.line, p->cur.col, "nesting deeper than %d levels", AF_PYCALL_MAX_DEPTH);
        return -1;
    }
    next(p);
    return 0;
}

/* (x) is x; (), (x,) and (x, y) are tuples, which become arrays. */
static int parse_paren(struct parser *p, int depth, json_t **out)
{
    if (enter(p, depth))
        return -1;
    json_t *first = NULL, *arr;
    if (p->cur.kind == T_RPAR) {
        next(p);
        *out = jcheck(json_array());
        return 0;
    }
    if (parse_expr(p, depth, &first))
        return -1;
    if (p->cur.kind == T_RPAR) {
        next(p);
        *out = first;
        return 0;
    }
    if (p->cur.kind != T_COMMA) {
        json_decref(first);
        return unexpected(p, "',' or ')'");
    }
    next(p);
    arr = jcheck(json_array());
    json_array_append_new(arr, first);
    return parse_items(p, depth, T_RPAR, arr, out);
}

/* A dict key as JSON object keys need it: strings as they are, ints in decimal. */
static int dict_key(struct parser *p, const struct token *t, const json_t *k, char *num,
                    size_t numlen, const char **key)
{
    if (json_is_string(k)) {
        *key = json_string_value(k);
        if (strlen(*key) != json_string_length(k)) {
            perr(p, t->line, t->col, "dictionary key contains a NUL character");
            return -1;
        }
        return 0;
    }
    if (json_is_integer(k)) {
        snprintf(num, numlen, "%" JSON_INTEGER_FORMAT, json_integer_value(k));
        *key = num;
        return 0;
    }
    perr(p, t->line, t->col, "dictionary keys must be strings or integers");
    return -1;
}

static int parse_dict_entry(struct parser *p, int depth, json_t *obj)
{
    struct token kt = p->cur;
    json_t *k = NULL, *v = NULL;
    char num[32];
    const char *key;
    int rc = -1;
    if (parse_expr(p, depth, &k))
        goto out;
    if (p->cur.kind != T_COLON) {
        if (json_object_size(obj) == 0 && (p->cur.kind == T_COMMA || p->cur.kind == T_RBRACE))
            perr(p, kt.line, kt.col, "set literals are not supported");
        else
            unexpected(p, "':'");
        goto out;
    }
    next(p);
    if (dict_key(p, &kt, k, num, sizeof num, &key) || parse_expr(p, depth, &v))
        goto out;
    json_object_set_new(obj, key, v);
    v = NULL;
    rc = 0;
out:
    json_decref(k);
    json_decref(v);
    return rc;
}

/* Items up to `close` into c: values when c is an array, key: value pairs when it is an
 * object. The opening bracket is already consumed. Frees c on failure. */
static int parse_items(struct parser *p, int depth, enum tok_kind close, json_t *c, json_t **out)
{
    static const char *const expected[] = {"',' or ')'", "',' or ']'", "',' or '}'"};
    const char *exp = expected[close == T_RPAR ? 0 : close == T_RSQB ? 1 : 2];
    while (p->cur.kind != close) {
        json_t *v = NULL;
        if (json_is_object(c) ? parse_dict_entry(p, depth, c) : parse_expr(p, depth, &v))
            goto fail;
        if (v)
            json_array_append_new(c, v);
        if (p->cur.kind == T_COMMA)
            next(p);
        else if (p->cur.kind != close && unexpected(p, exp))
            goto fail;
    }
    next(p);
    *out = c;
    return 0;
fail:
    json_decref(c);
    return -1;
}

static int parse_primary(struct parser *p, int depth, json_t **out)
{
    enum tok_kind k = p->cur.kind;
    switch (k) {
    case T_INT:
    case T_FLOAT:
        return parse_number(p, 0, out);
    case T_STRING:
        return parse_strings(p, out);
    case T_NAME:
        return parse_name(p, depth, out);
    case T_LSQB:
    case T_LBRACE:
        if (enter(p, depth + 1))
            return -1;
        return parse_items(p, depth + 1, k == T_LSQB ? T_RSQB : T_RBRACE,
                           jcheck(k == T_LSQB ? json_array() : json_object()), out);
    case T_LPAR:
        return parse_paren(p, depth + 1, out);
    default:
        return unexpected(p, "a value");
    }
}

/* After a complete value: a clear message for the operators and postfixes we do not do. */
static int check_after_value(struct parser *p)
{
    const struct token *t = &p->cur;
    const char *why = NULL;
    char desc[96];
    if (t->kind == T_PLUS)
        why = "'+' joins string literals only";
    else if (t->kind == T_MINUS || t->kind == T_OP)
        why = "operators are not supported; arguments must be literal values";
    else if (t->kind == T_DOT || t->kind == T_LPAR || t->kind == T_LSQB)
        why = "attribute access, calls and indexing are not supported";
    else if (t->kind == T_NAME && is_keyword(p, t))
        why = "comprehensions and conditional expressions are not supported";
    if (why)
        perr(p, t->line, t->col, "unexpected %s after a value: %s",
             tok_desc(p, t, desc, sizeof desc), why);
    return why ? -1 : 0;
}

static int parse_expr(struct parser *p, int depth, json_t **out)
{
    int neg = 0, n_signs = 0, rc;
    *out = NULL;
    while (p->cur.kind == T_MINUS || p->cur.kind == T_PLUS) {
        neg ^= p->cur.kind == T_MINUS;
        if (++n_signs > AF_PYCALL_MAX_DEPTH) {
            perr(p, p->cur.line, p->cur.col, "too many unary signs");
            return -1;
        }
        next(p);
    }
    if (n_signs && p->cur.kind != T_INT && p->cur.kind != T_FLOAT)
        return unexpected(p, "a number after a unary sign (signs apply to number literals only)");
    rc = n_signs ? parse_number(p, neg, out) : parse_primary(p, depth, out);
    if (!rc)
        rc = check_after_value(p);
    if (rc) {
        json_decref(*out);
        *out = NULL;
    }
    return rc;
}

/* ---- statements ------------------------------------------------------------------------- */

static int parse_kwarg(struct parser *p, json_t *kwargs)
{
    struct token t = p->cur;
    int n = t.end - t.start > 64 ? 64 : (int)(t.end - t.start);
    if (is_keyword(p, &t)) {
        perr(p, t.line, t.col, "'%.*s' cannot be a keyword argument", n, p->src + t.start);
        return -1;
    }
    char *name = af_xstrndup(p->src + t.start, t.end - t.start);
    json_t *v = NULL;
    int rc = -1;
    if (json_object_get(kwargs, name)) {
        perr(p, t.line, t.col, "keyword argument '%.*s' repeated", n, p->src + t.start);
        goto out;
    }
    next(p);
    next(p);
    if (parse_expr(p, 0, &v))
        goto out;
    json_object_set_new(kwargs, name, v);
    rc = 0;
out:
    free(name);
    return rc;
}

static int parse_args(struct parser *p, json_t *args, json_t *kwargs)
{
    int seen_kw = 0;
    while (p->cur.kind != T_RPAR) {
        if (p->cur.kind == T_NAME && peek(p, 1, NULL) == T_EQUAL) {
            if (parse_kwarg(p, kwargs))
                return -1;
            seen_kw = 1;
        } else {
            json_t *v = NULL;
            if (seen_kw) {
                perr(p, p->cur.line, p->cur.col, "positional argument follows keyword argument");
                return -1;
            }
            if (parse_expr(p, 0, &v))
                return -1;
            json_array_append_new(args, v);
        }
        if (p->cur.kind == T_COMMA)
            next(p);
        else if (p->cur.kind != T_RPAR)
            return unexpected(p, "',' or ')'");
    }
    next(p);
    return 0;
}

static void add_call(struct parser *p, json_t *args, json_t *kwargs, char *target, int line)
{
    struct af_pycall_list *l = p->out;
    if (l->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 4;
        l->calls = af_xrealloc(l->calls, p->cap * sizeof *l->calls);
    }
    struct af_pycall *c = &l->calls[l->n++];
    c->args = args;
    c->kwargs = kwargs;
    c->target = target;
    c->line = line;
    if (target) {
        json_object_del(p->vars, target);
        json_object_set_new(p->results, target, jcheck(json_true()));
    }
}

/* tool.execute(...) at the current token; `target` (owned, may be NULL) receives it. */
static int parse_call(struct parser *p, char *target, int line)
{
    json_t *args = NULL, *kwargs = NULL;
    struct token t = p->cur;
    if (p->out->n >= AF_PYCALL_MAX_CALLS) {
        perr(p, t.line, t.col, "more than %d tool.execute(...) calls", AF_PYCALL_MAX_CALLS);
        goto fail;
    }
    next(p); /* tool */
    if (expect(p, T_DOT, "'.'"))
        goto fail;
    t = p->cur;
    if (!tok_is(p, &t, "execute")) {
        int n = t.end - t.start > 64 ? 64 : (int)(t.end - t.start);
        perr(p, t.line, t.col, "only tool.execute(...) can be called, found tool.%.*s", n,
             p->src + t.start);
        goto fail;
    }
    next(p);
    if (expect(p, T_LPAR, "'(' after tool.execute"))
        goto fail;
    args = jcheck(json_array());
    kwargs = jcheck(json_object());
    if (parse_args(p, args, kwargs))
        goto fail;
    add_call(p, args, kwargs, target, line);
    return 0;
fail:
    json_decref(args);
    json_decref(kwargs);
    free(target);
    return -1;
}

/* print(...): its arguments are skipped unread, except print(tool.execute(...)), a call. */
static int parse_print(struct parser *p)
{
    int line = p->cur.line, level = 0;
    next(p); /* print */
    struct token t1;
    if (peek(p, 1, &t1) == T_NAME && tok_is(p, &t1, "tool") && peek(p, 2, NULL) == T_DOT) {
        next(p); /* ( */
        if (parse_call(p, NULL, line))
            return -1;
        if (p->cur.kind == T_COMMA)
            next(p);
        return expect(p, T_RPAR, "')' closing print(tool.execute(...))");
    }
    do {
        enum tok_kind k = p->cur.kind;
        if (k == T_EOF)
            return unexpected(p, "')'");
        if (k == T_ERROR)
            return -1;
        if (tok_is(p, &p->cur, "tool") && peek(p, 1, NULL) == T_DOT) {
            perr(p, p->cur.line, p->cur.col, "tool.execute(...) must be print's only argument");
            return -1;
        }
        level += (k == T_LPAR || k == T_LSQB || k == T_LBRACE);
        level -= (k == T_RPAR || k == T_RSQB || k == T_RBRACE);
        next(p);
    } while (level > 0);
    return 0;
}

static int skip_import(struct parser *p)
{
    while (p->cur.kind != T_NEWLINE && p->cur.kind != T_SEMI && p->cur.kind != T_EOF) {
        if (p->cur.kind == T_ERROR)
            return -1;
        next(p);
    }
    if (p->cur.kind == T_EOF && p->lx.depth > 0)
        return unexpected(p, "')'");
    return 0;
}

static int parse_assign(struct parser *p)
{
    struct token t = p->cur;
    int n = t.end - t.start > 64 ? 64 : (int)(t.end - t.start);
    json_t *v = NULL;
    if (is_keyword(p, &t)) {
        perr(p, t.line, t.col, "cannot assign to '%.*s'", n, p->src + t.start);
        return -1;
    }
    char *name = af_xstrndup(p->src + t.start, t.end - t.start);
    next(p); /* NAME */
    next(p); /* = */
    if (tok_is(p, &p->cur, "tool") && peek(p, 1, NULL) == T_DOT)
        return parse_call(p, name, t.line);
    if (parse_expr(p, 0, &v)) {
        free(name);
        return -1;
    }
    json_object_set_new(p->vars, name, v);
    json_object_del(p->results, name);
    free(name);
    return 0;
}

static int is_closer(enum tok_kind k)
{
    return k == T_RPAR || k == T_RSQB || k == T_RBRACE;
}

static int unsupported(struct parser *p, const struct token *t, enum tok_kind nk)
{
    char d[96];
    const char *what = "unsupported statement starting with";
    const char *tail = "; expected NAME = value, tool.execute(...), print(...) or an import";
    tok_desc(p, t, d, sizeof d);
    if (t->kind == T_NAME && nk == T_LPAR && !is_keyword(p, t)) {
        what = "unsupported call";
        tail = "(...); only tool.execute(...) and print(...) may be called";
    } else if (t->kind == T_NAME && nk == T_DOT) {
        what = "unsupported statement: attribute access on";
        tail = "";
    } else if (is_closer(t->kind)) {
        what = "unmatched";
        tail = "";
    }
    perr(p, t->line, t->col, "%s %s%s", what, d, tail);
    return -1;
}

static int end_statement(struct parser *p)
{
    enum tok_kind k = p->cur.kind;
    if (k == T_NEWLINE || k == T_SEMI) {
        next(p);
        return 0;
    }
    if (k == T_EOF || p->failed)
        return p->failed ? -1 : 0;
    if (is_closer(k))
        return unsupported(p, &p->cur, T_ERROR);
    return unexpected(p, "end of statement (newline or ';')");
}

static int parse_statement(struct parser *p)
{
    struct token t = p->cur;
    enum tok_kind nk;
    int rc, is_result = 0;
    if (t.kind == T_NEWLINE || t.kind == T_SEMI) {
        next(p);
        return 0;
    }
    nk = t.kind == T_NAME ? peek(p, 1, NULL) : T_ERROR;
    if (tok_is(p, &t, "import") || tok_is(p, &t, "from"))
        rc = skip_import(p);
    else if (t.kind == T_NAME && nk == T_EQUAL)
        rc = parse_assign(p);
    else if (tok_is(p, &t, "tool") && nk == T_DOT)
        rc = parse_call(p, NULL, t.line);
    else if (tok_is(p, &t, "print") && nk == T_LPAR)
        rc = parse_print(p);
    else if (t.kind == T_NAME && (nk == T_NEWLINE || nk == T_SEMI || nk == T_EOF) &&
             (lookup(p, &t, &is_result) || is_result)) {
        next(p); /* a bare defined name, as at the end of a notebook cell */
        rc = 0;
    } else
        rc = p->failed ? -1 : unsupported(p, &t, nk);
    return rc ? -1 : end_statement(p);
}

static void line_col_at(const char *s, size_t off, int *line, int *col)
{
    *line = *col = 1;
    for (size_t i = 0; i < off;)
        step(s, &i, line, col);
}

int af_pycall_parse(const char *src, size_t len, struct af_pycall_list *out, char *err,
                    size_t errlen)
{
    struct parser p;
    memset(&p, 0, sizeof p);
    *out = (struct af_pycall_list){NULL, 0};
    if (err && errlen)
        err[0] = '\0';
    p.err = err;
    p.errlen = errlen;
    if (!src)
        len = 0;
    if (len > AF_PYCALL_MAX_SRC_BYTES) {
        if (err && errlen)
            snprintf(err, errlen, "line 1:1: the command is %zu bytes; the limit is %zu", len,
                     AF_PYCALL_MAX_SRC_BYTES);
        return AF_ETOOBIG;
    }
    p.src = src ? src : "";
    p.len = len;
    p.lx.line = p.lx.col = 1;
    const char *nul = memchr(p.src, 0, len);
    if (nul) {
        int line, col;
        line_col_at(p.src, (size_t)(nul - p.src), &line, &col);
        perr(&p, line, col, "the command contains a NUL byte");
        return AF_EPARSE;
    }
    if (len >= 3 && !memcmp(p.src, "\xEF\xBB\xBF", 3))
        p.lx.pos = 3;
    p.vars = jcheck(json_object());
    p.results = jcheck(json_object());
    p.budget = AF_PYCALL_MAX_VALUE_BYTES;
    p.out = out;
    next(&p);
    while (!p.failed && p.cur.kind != T_EOF) {
        if (parse_statement(&p) && !p.failed) { /* a failure must always say why */
            p.rc = AF_EINTERNAL;
            perr(&p, p.cur.line, p.cur.col, "internal parser error");
        }
    }
    json_decref(p.vars);
    json_decref(p.results);
    if (p.failed) {
        af_pycall_list_deinit(out);
        return p.rc ? p.rc : AF_EPARSE;
    }
    return AF_OK;
}

void af_pycall_list_deinit(struct af_pycall_list *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++) {
        json_decref(l->calls[i].args);
        json_decref(l->calls[i].kwargs);
        free(l->calls[i].target);
    }
    free(l->calls);
    *l = (struct af_pycall_list){NULL, 0};
}

/* ---- command extraction ----------------------------------------------------------------- */

static const char *ci_find(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (!strncasecmp(hay, needle, n))
            return hay;
    return NULL;
}

static int is_py_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* A copy of s[0..n) without a leading ```python, surrounding whitespace or trailing '`'s. */
static char *clean_command(const char *s, size_t n)
{
    while (n && is_py_space(*s))
        s++, n--;
    if (n >= 9 && !strncasecmp(s, "```python", 9)) {
        s += 9, n -= 9;
        while (n && is_py_space(*s))
            s++, n--;
    }
    while (n && (is_py_space(s[n - 1]) || s[n - 1] == '`'))
        n--;
    return af_xstrndup(s, n);
}

/* Generated Command:.*?```python\n(.*?)``` */
static char *extract_generated(const char *reply)
{
    const char *g = ci_find(reply, "generated command:");
    const char *b = g ? ci_find(g, "```python\n") : NULL;
    const char *e = b ? strstr(b + 10, "```") : NULL;
    return e ? clean_command(b + 10, (size_t)(e - (b + 10))) : NULL;
}

/* The longest match of ```python\s*\n(.*?)``` */
static char *extract_longest_python(const char *reply)
{
    const char *pos = reply, *best = NULL;
    size_t best_len = 0;
    const char *b;
    while ((b = ci_find(pos, "```python")) != NULL) {
        const char *q = b + 9, *start = NULL;
        for (; is_py_space(*q); q++)
            if (*q == '\n')
                start = q + 1; /* \s* is greedy, then backs off to the last newline */
        const char *e = start ? strstr(start, "```") : NULL;
        if (!e) {
            pos = b + 1;
            continue;
        }
        if (!best || (size_t)(e - start) > best_len) {
            best = start;
            best_len = (size_t)(e - start);
        }
        pos = e + 3;
    }
    return best ? clean_command(best, best_len) : NULL;
}

static int contains_call(const char *s, size_t n)
{
    static const char needle[] = "tool.execute(";
    size_t k = sizeof needle - 1;
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, needle, k))
            return 1;
    return 0;
}

/* Any ``` ... ``` block; a language tag on the opening line is skipped. */
static char *extract_any_block(const char *reply)
{
    const char *pos = reply, *best = NULL, *b;
    size_t best_len = 0;
    int best_call = 0;
    while ((b = strstr(pos, "```")) != NULL) {
        const char *start = b + 3, *q = start;
        while (*q && *q != '\n' && *q != '`' && !is_py_space(*q))
            q++;
        while (*q == ' ' || *q == '\t' || *q == '\r')
            q++;
        if (*q == '\n')
            start = q + 1;
        const char *e = strstr(start, "```");
        if (!e)
            break;
        size_t n = (size_t)(e - start);
        int call = contains_call(start, n);
        if (!best || call > best_call || (call == best_call && n > best_len)) {
            best = start;
            best_len = n;
            best_call = call;
        }
        pos = e + 3;
    }
    return best ? clean_command(best, best_len) : NULL;
}

static char *extract_json(const char *reply)
{
    const char *s = reply;
    while (is_py_space(*s))
        s++;
    if (*s != '{')
        return NULL;
    json_t *j = json_loads(s, 0, NULL);
    const char *cmd = json_string_value(json_object_get(j, "command"));
    char *r = cmd ? clean_command(cmd, strlen(cmd)) : NULL;
    json_decref(j);
    return r;
}

char *af_pycall_extract_command(const char *reply)
{
    char *r;
    if (!reply)
        return NULL;
    if ((r = extract_json(reply)) || (r = extract_generated(reply)) ||
        (r = extract_longest_python(reply)) || (r = extract_any_block(reply)))
        return r;
    if (strstr(reply, "tool.execute("))
        return clean_command(reply, strlen(reply));
    return NULL;
}

/* ---- binding to a tool card ------------------------------------------------------------- */

int af_pycall_bind(const struct af_pycall *call, const struct af_tool_card *card,
                   json_t **kwargs_out, char *err, size_t errlen)
{
    size_t n_pos = json_array_size(call->args);
    const char *key;
    json_t *v;
    *kwargs_out = NULL;
    if (n_pos > card->n_params) {
        af_errf(err, errlen, "tool %s takes at most %zu positional argument%s, got %zu", card->name,
                card->n_params, card->n_params == 1 ? "" : "s", n_pos);
        return AF_EINVAL;
    }
    json_t *merged = jcheck(json_object());
    for (size_t i = 0; i < n_pos; i++) {
        const char *name = card->params[i].name;
        if (json_object_get(call->kwargs, name)) {
            af_errf(err, errlen, "argument '%s' of tool %s given both by position and by keyword",
                    name, card->name);
            json_decref(merged);
            return AF_EINVAL;
        }
        json_object_set(merged, name, json_array_get(call->args, i));
    }
    json_object_foreach(call->kwargs, key, v)
    {
        json_object_set(merged, key, v);
    }
    int rc = af_tool_validate_args(card, merged, kwargs_out, err, errlen);
    json_decref(merged);
    return rc;
}
