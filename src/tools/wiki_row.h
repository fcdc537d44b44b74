/*
 * wiki_row.h - one input row of the passage index build: a JSONL line ({"id","title","text"})
 * or a DPR / Search-R1 TSV line (id, text, title).
 *
 * JSONL lines of the usual shape (a flat object of strings, integers and nulls) are read by a
 * direct scanner that decodes only what the row needs; anything else (nesting, reals, booleans,
 * repeated keys, bad UTF-8, any syntax error) goes to jansson, whose verdict and message stand.
 * Both accept the same lines and give the same fields (tests/test_wiki_index.c compares them).
 */
#ifndef AF_TOOLS_WIKI_ROW_H
#define AF_TOOLS_WIKI_ROW_H

#include <jansson.h>
#include <stddef.h>

#include "agentflow/err.h"

struct wiki_row {
    const char *id, *title, *text; /* not NUL-terminated; see the parsers for their lifetime */
    size_t id_len, title_len, text_len;
    char idnum[32]; /* an integer id, printed */
};

/* Per-thread decoding space for wiki_row_jsonl. Zero-initialise; free with
 * wiki_row_scratch_free. */
struct wiki_row_scratch {
    char *buf;
    size_t cap;
    json_t *keep; /* the last jansson parse, kept while its fields are in use */
};

void wiki_row_scratch_free(struct wiki_row_scratch *sc);

/* Parses a JSONL line (len bytes; the line is not modified). The fields point into sc or into
 * row->idnum, valid until the next call with sc. Returns 0, or AF_EPARSE with the reason in why
 * ("invalid JSON: ...", "\"text\" must be a string", ...). */
AF_NODISCARD int wiki_row_jsonl(const char *line, size_t len, struct wiki_row *row,
                                struct wiki_row_scratch *sc, char *why, size_t whylen);

/* The same through jansson only (the reference the scanner is tested against). */
AF_NODISCARD int wiki_row_jsonl_jansson(const char *line, size_t len, struct wiki_row *row,
                                        struct wiki_row_scratch *sc, char *why, size_t whylen);

/* Parses a TSV line in place (quoted fields are unquoted inside line); the fields point into
 * line. Returns 0 or AF_EPARSE with the reason in why. */
AF_NODISCARD int wiki_row_tsv(char *line, size_t len, struct wiki_row *row, char *why,
                              size_t whylen);

#endif
