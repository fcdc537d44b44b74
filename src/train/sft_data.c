/*
 * sft_data.c - chat JSONL to (tokens, loss mask) for SFT (see sft_data.h).
 *
 * Each conversation is formatted once in full and tokenized in one go, exactly as the engine
 * tokenizes a chat prompt. The assistant replies are located as character spans: the reply
 * of message i starts where chat_format(msgs[0..i), with the assistant header) ends, and ends
 * after the last end-of-turn marker of chat_format(msgs[0..i]); both renderings must be
 * prefixes of the full text. The spans are then mapped onto tokens by walking the tokens' byte
 * pieces along the text: a token is a target when it carries a byte of a span, so a token
 * that merges the header's "\n" with a reply's leading whitespace is a target (it holds reply
 * bytes) while the header's own tokens and the "\n" after <|im_end|> are not. Pieces that do
 * not spell the text are a bug and fail with AF_EINTERNAL rather than train on a misaligned
 * mask.
 */
#include "train/sft_data.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <zlib.h>

#include "core/buf.h"
#include "core/errf.h"
#include "core/xalloc.h"
#include "engine/chat.h"

#define READ_BLOCK (256 * 1024)

struct span {
    size_t start, end; /* bytes of the full text: reply content through its end-of-turn token */
};

struct loader {
    const char *path;
    const struct tokenizer *tok;
    enum chat_template tmpl;
    char *default_system; /* owned; NULL when the template has none */
    const char *eot;      /* the end-of-turn marker's text */
    int64_t max_seq;
    struct sft_data *d;
    size_t cap; /* allocated d->ex */
    char *err;
    size_t errlen;
};

struct line_reader {
    gzFile gz;
    char *blk; /* READ_BLOCK bytes, owned */
    size_t blk_len, blk_pos;
    int eof;
    struct af_buf line; /* the current line, without its '\n' */
};

static int line_err(struct loader *ld, int64_t line_no, int rc, const char *fmt, ...)
    AF_PRINTF(4, 5);

/* Writes "path: line N: <message>" and returns rc. */
static int line_err(struct loader *ld, int64_t line_no, int rc, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    af_errf(ld->err, ld->errlen, "%s: line %lld: %s", ld->path, (long long)line_no, msg);
    return rc;
}

/* --- reading lines ----------------------------------------------------------------------- */

/* Reads the next line into r->line; *got is 0 at the end of the file. gzread reads plain
 * files as they are, and lines may hold any bytes (a NUL is left for the JSON parser to
 * reject). Returns AF_OK, AF_EIO or AF_ETOOBIG. */
static int reader_next(struct line_reader *r, int *got)
{
    af_buf_reset(&r->line);
    *got = 0;
    for (;;) {
        if (r->blk_pos == r->blk_len) {
            if (r->eof) {
                *got = r->line.len > 0;
                return AF_OK;
            }
            int n = gzread(r->gz, r->blk, READ_BLOCK);
            if (n < 0)
                return AF_EIO;
            if (n == 0)
                r->eof = 1;
            r->blk_len = (size_t)n;
            r->blk_pos = 0;
            continue;
        }
        const char *s = r->blk + r->blk_pos;
        size_t avail = r->blk_len - r->blk_pos;
        const char *nl = memchr(s, '\n', avail);
        size_t take = nl ? (size_t)(nl - s) : avail;
        if (af_buf_append(&r->line, s, take))
            return AF_ETOOBIG;
        r->blk_pos += take + (nl ? 1 : 0);
        if (nl) {
            *got = 1;
            return AF_OK;
        }
    }
}

static int is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\r\n", s[i]) || !s[i])
            return 0;
    return 1;
}

/* --- parsing ----------------------------------------------------------------------------- */

/* Checks messages[i] and points m at its borrowed strings. */
static int parse_msg(struct loader *ld, int64_t line_no, size_t i, json_t *jm, struct chat_msg *m)
{
    if (!json_is_object(jm))
        return line_err(ld, line_no, AF_EPARSE, "messages[%zu]: not an object", i);
    json_t *role = json_object_get(jm, "role");
    if (!role)
        return line_err(ld, line_no, AF_EPARSE, "messages[%zu].role: missing", i);
    if (!json_is_string(role))
        return line_err(ld, line_no, AF_EPARSE, "messages[%zu].role: not a string", i);
    const char *r = json_string_value(role);
    if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"))
        return line_err(ld, line_no, AF_EPARSE,
                        "messages[%zu].role: unknown role '%.64s' (system, user, assistant)", i, r);
    json_t *content = json_object_get(jm, "content");
    if (!content)
        return line_err(ld, line_no, AF_EPARSE, "messages[%zu].content: missing", i);
    if (!json_is_string(content))
        return line_err(ld, line_no, AF_EPARSE, "messages[%zu].content: not a string", i);
    m->role = r;
    m->content = json_string_value(content);
    return AF_OK;
}

/* Parses one line. On success *root holds the JSON (caller json_decref's it) and *msgs (caller
 * frees) borrows its strings. */
static int parse_line(struct loader *ld, int64_t line_no, const char *s, size_t len, json_t **root,
                      struct chat_msg **msgs, size_t *n_msgs)
{
    *root = NULL;
    *msgs = NULL;
    json_error_t je;
    json_t *j = json_loadb(s, len, 0, &je);
    if (!j)
        return line_err(ld, line_no, AF_EPARSE, "invalid JSON at column %d: %s", je.column,
                        je.text);
    int rc = AF_OK;
    struct chat_msg *cm = NULL;
    json_t *jmsgs = json_is_object(j) ? json_object_get(j, "messages") : NULL;
    if (!json_is_object(j)) {
        rc = line_err(ld, line_no, AF_EPARSE, "not a JSON object");
        goto out;
    }
    if (!json_is_array(jmsgs)) {
        rc = line_err(ld, line_no, AF_EPARSE, "messages: %s", jmsgs ? "not an array" : "missing");
        goto out;
    }
    size_t n = json_array_size(jmsgs);
    cm = af_xcalloc(n ? n : 1, sizeof *cm);
    int has_assistant = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        rc = parse_msg(ld, line_no, i, json_array_get(jmsgs, i), &cm[i]);
        has_assistant |= !rc && !strcmp(cm[i].role, "assistant");
    }
    if (!rc && !has_assistant)
        rc = line_err(ld, line_no, AF_EPARSE, "no assistant message (nothing to train on)");
    if (!rc) {
        *root = j;
        *msgs = cm;
        *n_msgs = n;
        return AF_OK;
    }
out:
    free(cm);
    json_decref(j);
    return rc;
}

/* --- locating the replies ---------------------------------------------------------------- */

/* The last occurrence of needle in [s, s + n), or NULL. */
static const char *last_in(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = n >= k ? n - k + 1 : 0; i-- > 0;)
        if (!memcmp(s + i, needle, k))
            return s + i;
    return NULL;
}

/* Fills sp[] with one span per assistant message of the text chat_format gave for msgs. */
static int find_spans(struct loader *ld, int64_t line_no, const struct chat_msg *msgs, size_t n,
                      const char *text, size_t len, struct span *sp, size_t *n_sp)
{
    size_t k = 0, prev_end = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(msgs[i].role, "assistant"))
            continue;
        char *pre = chat_format(ld->tmpl, msgs, i, 1, ld->default_system);
        char *thru = chat_format(ld->tmpl, msgs, i + 1, 0, ld->default_system);
        size_t a = strlen(pre), b = strlen(thru);
        const char *e = a <= b ? last_in(thru + a, b - a, ld->eot) : NULL;
        int ok = e && b <= len && a >= prev_end && !memcmp(pre, text, a) && !memcmp(thru, text, b);
        if (ok) {
            sp[k].start = a;
            sp[k].end = (size_t)(e - thru) + strlen(ld->eot);
            prev_end = sp[k++].end;
        }
        free(pre);
        free(thru);
        if (!ok)
            return line_err(ld, line_no, AF_EINTERNAL,
                            "messages[%zu]: the %s rendering of the conversation is not "
                            "message by message (cannot locate the reply)",
                            i, chat_template_name(ld->tmpl));
    }
    *n_sp = k;
    return AF_OK;
}

/* Marks the tokens whose bytes overlap a span, walking the tokens' pieces along the text.
 * SPM's space prefix (a leading ' ' the text lacks) is taken as synthetic. Returns 0, or -1
 * when the pieces do not spell the text. */
static int mark_by_pieces(const struct tokenizer *tok, const char *text, size_t len,
                          const int32_t *ids, size_t n_ids, const struct span *sp, size_t n_sp,
                          uint8_t *target)
{
    size_t cap = 256, off = 0, k = 0;
    char *buf = af_xmalloc(cap);
    int rc = 0;
    for (size_t t = 0; t < n_ids && !rc; t++) {
        int pl = tok_piece(tok, ids[t], 1, buf, cap);
        if (pl < 0) {
            cap = (size_t)-pl;
            buf = af_xrealloc(buf, cap);
            pl = tok_piece(tok, ids[t], 1, buf, cap);
        }
        const char *p = buf;
        size_t pn = pl > 0 ? (size_t)pl : 0;
        if (pn > len - off || memcmp(text + off, p, pn)) {
            if (pn && p[0] == ' ' && pn - 1 <= len - off && !memcmp(text + off, p + 1, pn - 1)) {
                p++;
                pn--;
            } else {
                rc = -1;
                break;
            }
        }
        size_t s = off, e = off + pn;
        off = e;
        while (k < n_sp && sp[k].end <= s)
            k++;
        target[t] = k < n_sp && s < sp[k].end && e > sp[k].start;
    }
    free(buf);
    return rc || off != len ? -1 : 0;
}

/* --- building examples ------------------------------------------------------------------- */

static void push_example(struct loader *ld, const struct sft_example *ex)
{
    struct sft_data *d = ld->d;
    if (d->n == ld->cap) {
        ld->cap = ld->cap ? 2 * ld->cap : 64;
        d->ex = af_xrealloc(d->ex, ld->cap * sizeof *d->ex);
    }
    d->ex[d->n++] = *ex;
    d->n_tokens += ex->n;
    d->n_target += ex->n_target;
}

void sft_data_target_all(struct sft_data *d)
{
    d->n_target = 0;
    for (size_t i = 0; i < d->n; i++) {
        struct sft_example *ex = &d->ex[i];
        ex->n_target = 0;
        for (int64_t t = 0; t < ex->n; t++)
            ex->n_target += ex->target[t] = t > 0;
        d->n_target += ex->n_target;
    }
}

static int token_has_digit(const struct tokenizer *tok, int32_t id)
{
    char piece[256];
    int n = tok_piece(tok, id, 1, piece, sizeof piece);
    if (n < 0) /* longer than any digit-free piece we care about: look at its text instead */
        return strpbrk(tok_text(tok, id) ? tok_text(tok, id) : "", "0123456789") != NULL;
    for (int i = 0; i < n; i++)
        if (piece[i] >= '0' && piece[i] <= '9')
            return 1;
    return 0;
}

void sft_data_target_text(struct sft_data *d, const struct tokenizer *tok)
{
    const size_t nv = tok_n_vocab(tok);
    uint8_t *digit = af_xmalloc(nv ? nv : 1);
    for (size_t v = 0; v < nv; v++)
        digit[v] = (uint8_t)token_has_digit(tok, (int32_t)v);
    d->n_target = 0;
    for (size_t i = 0; i < d->n; i++) {
        struct sft_example *ex = &d->ex[i];
        ex->n_target = 0;
        for (int64_t t = 0; t < ex->n; t++) {
            const int32_t id = ex->tokens[t];
            const int number = id >= 0 && (size_t)id < nv && digit[id];
            ex->target[t] = ex->target[t] || (t > 0 && !number);
            ex->n_target += ex->target[t];
        }
        d->n_target += ex->n_target;
    }
    free(digit);
}

/* Formats, tokenizes and masks one conversation, then cuts, skips or keeps it. */
static int build_example(struct loader *ld, int64_t line_no, const struct chat_msg *msgs, size_t n)
{
    char *text = chat_format(ld->tmpl, msgs, n, 0, ld->default_system);
    size_t len = strlen(text);
    int32_t *ids = NULL;
    size_t n_ids = 0, n_sp = 0;
    uint8_t *target = NULL;
    struct span *sp = af_xmalloc(n * sizeof *sp);
    int rc = tok_encode(ld->tok, text, len, 0, 1, &ids, &n_ids);
    if (rc) {
        rc = line_err(ld, line_no, rc, "tokenizing failed: %s", af_strerror(rc));
        goto out;
    }
    rc = find_spans(ld, line_no, msgs, n, text, len, sp, &n_sp);
    if (rc)
        goto out;
    target = af_xcalloc(n_ids ? n_ids : 1, 1);
    if (mark_by_pieces(ld->tok, text, len, ids, n_ids, sp, n_sp, target)) {
        rc = line_err(ld, line_no, AF_EINTERNAL,
                      "cannot map the assistant replies onto the %zu tokens: the tokens' "
                      "pieces do not spell the formatted text",
                      n_ids);
        goto out;
    }
    struct sft_example ex = {ids, target, (int64_t)n_ids, 0, line_no};
    if (ld->max_seq > 0 && ex.n > ld->max_seq) {
        ex.n = ld->max_seq;
        ld->d->n_truncated++;
    }
    for (int64_t t = 0; t < ex.n; t++)
        ex.n_target += target[t];
    if (!ex.n_target) {
        ld->d->n_skipped++;
        goto out;
    }
    push_example(ld, &ex);
    ids = NULL;
    target = NULL;
out:
    free(text);
    free(ids);
    free(target);
    free(sp);
    return rc;
}

/* Picks the template as af_engine_new does: the name when given, else detection. */
static int pick_template(struct loader *ld, const struct model *m, const char *template_name)
{
    const char *what = m->path ? m->path : "the model";
    if (!m->tok) {
        af_errf(ld->err, ld->errlen, "%s has no tokenizer", what);
        return AF_EINVAL;
    }
    if (template_name && template_name[0]) {
        ld->tmpl = chat_template_from_name(template_name);
        if (ld->tmpl == CHAT_TEMPLATE_NONE) {
            af_errf(ld->err, ld->errlen, "unknown chat template '%s' (chatml, llama3)",
                    template_name);
            return AF_EINVAL;
        }
    } else {
        ld->tmpl = chat_template_detect(m->chat_template);
        if (ld->tmpl == CHAT_TEMPLATE_NONE) {
            af_errf(ld->err, ld->errlen,
                    "%s has no chat template we recognise: pass --chat-template chatml or "
                    "llama3",
                    what);
            return AF_EINVAL;
        }
    }
    ld->eot = ld->tmpl == CHAT_TEMPLATE_LLAMA3 ? "<|eot_id|>" : "<|im_end|>";
    /* Without the marker as one token the turns would be spelled out in pieces: a template
     * that does not belong to this vocabulary, whose mask would train the wrong stop. */
    if (tok_find(ld->tok, ld->eot) < 0) {
        af_errf(ld->err, ld->errlen,
                "%s: the %s chat template does not fit this vocabulary (no %s token); pass "
                "the model's own --chat-template",
                what, chat_template_name(ld->tmpl), ld->eot);
        return AF_EINVAL;
    }
    if (ld->tmpl == CHAT_TEMPLATE_CHATML)
        ld->default_system = chat_template_default_system(m->chat_template);
    return AF_OK;
}

static int load_lines(struct loader *ld, struct line_reader *r)
{
    for (int64_t line_no = 1;; line_no++) {
        int got = 0;
        int rc = reader_next(r, &got);
        if (rc == AF_ETOOBIG)
            return line_err(ld, line_no, rc, "longer than %zu bytes", SFT_LINE_MAX);
        if (rc) {
            int zerr = 0;
            const char *msg = gzerror(r->gz, &zerr);
            return line_err(ld, line_no, rc, "read failed: %s",
                            zerr == Z_ERRNO ? strerror(errno) : msg);
        }
        if (!got)
            return AF_OK;
        if (is_blank(r->line.data, r->line.len))
            continue;
        json_t *root = NULL;
        struct chat_msg *msgs = NULL;
        size_t n = 0;
        rc = parse_line(ld, line_no, r->line.data, r->line.len, &root, &msgs, &n);
        if (!rc)
            rc = build_example(ld, line_no, msgs, n);
        free(msgs);
        json_decref(root);
        if (rc)
            return rc;
    }
}

int sft_data_load(const char *path, const struct model *m, const char *template_name,
                  int64_t max_seq, struct sft_data **out, char *err, size_t errlen)
{
    *out = NULL;
    struct loader ld = {0};
    ld.path = path;
    ld.tok = m->tok;
    ld.max_seq = max_seq;
    ld.err = err;
    ld.errlen = errlen;
    struct line_reader r = {0};
    af_buf_init(&r.line, SFT_LINE_MAX);
    int rc = pick_template(&ld, m, template_name);
    if (rc)
        goto out;
    errno = 0;
    r.gz = gzopen(path, "rb");
    if (!r.gz) {
        af_errf(err, errlen, "%s: cannot open: %s", path, errno ? strerror(errno) : "zlib");
        rc = AF_EIO;
        goto out;
    }
    gzbuffer(r.gz, READ_BLOCK);
    r.blk = af_xmalloc(READ_BLOCK);
    ld.d = af_xcalloc(1, sizeof *ld.d);
    rc = load_lines(&ld, &r);
out:
    if (r.gz)
        gzclose(r.gz);
    free(r.blk);
    af_buf_deinit(&r.line);
    free(ld.default_system);
    if (rc) {
        sft_data_free(ld.d);
        return rc;
    }
    *out = ld.d;
    return AF_OK;
}

void sft_data_free(struct sft_data *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n; i++) {
        free(d->ex[i].tokens);
        free(d->ex[i].target);
    }
    free(d->ex);
    free(d);
}
