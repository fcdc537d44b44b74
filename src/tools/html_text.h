/*
 * html_text.h - page text for Web_RAG_Search_Tool: HTML to plain text with libxml2's
 * forgiving HTML parser, and word chunking with overlap.
 *
 * Text extraction drops the content of script, style, noscript, template, svg and head
 * (except the title), turns block elements (p, div, li, h1-h6, tr, br, ...) into line breaks,
 * table cells into spaces, and collapses runs of white space (no-break spaces included) to one
 * space; empty lines are dropped. The result is UTF-8.
 *
 * Thread-safety: every function is safe from any thread (libxml2 is initialised once).
 */
#ifndef AF_TOOLS_HTML_TEXT_H
#define AF_TOOLS_HTML_TEXT_H

#include <jansson.h>
#include <stddef.h>

#include "agentflow/err.h"

/* Converts an HTML document of len bytes to text. `charset` is the charset named by the
 * Content-Type header or NULL (then: UTF-8 when the bytes are valid UTF-8, else whatever the
 * document's <meta> says). On success *out is a malloc'd string owned by the caller (maybe
 * ""). Returns 0, or AF_EPARSE when libxml2 cannot build a document at all (message in err). */
AF_NODISCARD int html_to_text(const char *html, size_t len, const char *charset, char **out,
                              char *err, size_t errlen);

/* 1 when the len bytes at s are valid UTF-8, else 0. */
int html_utf8_valid(const char *s, size_t len);

/* Cuts text into chunks of chunk_words whitespace-separated words, each starting
 * chunk_words - overlap_words words after the previous one (overlap_words < chunk_words; a
 * larger overlap is treated as 0), words joined by one space. The last chunk is the one that
 * reaches the end of the text, so it may be shorter; a text of at most chunk_words words is one
 * chunk, and text without words gives an empty array. Returns a new JSON array of strings
 * (owned by the caller, json_decref). */
json_t *text_chunk_words(const char *text, size_t chunk_words, size_t overlap_words);

#endif
