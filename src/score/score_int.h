/*
 * score_int.h - private to score/: the per-benchmark scorers behind af_score_item and the
 * text helpers they share.
 *
 * Each scorer receives the extracted answer (never NULL) and fills out->correct, out->f1
 * and out->details (a JSON object that the dispatcher created). They return 0, or
 * AF_EPARSE with a message when the item lacks a field; a wrong answer is not an error.
 */
#ifndef AF_SCORE_SCORE_INT_H
#define AF_SCORE_SCORE_INT_H

#include <jansson.h>
#include <stddef.h>

#include "agentflow/score.h"

typedef int (*score_fn)(const json_t *item, const char *pred, struct af_score *out, char *err,
                        size_t errlen);

int score_qa(const json_t *item, const char *pred, struct af_score *out, char *err, size_t errlen);
int score_gaia(const json_t *item, const char *pred, struct af_score *out, char *err,
               size_t errlen);
int score_math(const json_t *item, const char *pred, struct af_score *out, char *err,
               size_t errlen);
int score_game24(const json_t *item, const char *pred, struct af_score *out, char *err,
                 size_t errlen);
int score_mcq(const json_t *item, const char *pred, struct af_score *out, char *err, size_t errlen);

/* A malloc'd copy of s[0..n) without leading and trailing ASCII whitespace. */
char *score_trim_dup(const char *s, size_t n);
/* SQuAD normalisation: lowercase, drop ASCII punctuation, drop the words a/an/the, collapse
 * whitespace. Returns a malloc'd string. */
char *score_norm_squad(const char *s);
/* Parses s as a number after dropping '$', '%', ',', '*' and whitespace, a \boxed{...} or
 * \text{...} wrapper and one trailing '.'. Returns 0 and sets *out, or -1 when s is not
 * exactly one finite decimal number. */
int score_parse_number(const char *s, double *out);
/* The lenient number reading of norm.c: score_parse_number's input plus a leading `x =`,
 * LaTeX spacing and wrappers, degree marks, thousands separators and a trailing unit.
 * Returns 0 and sets *out, or -1. */
int score_parse_quantity(const char *s, double *out);
/* Reads s as a whole calendar date (day-month-year, month-day-year or ISO). Returns 0 and
 * sets the three fields, or -1. */
int score_parse_date(const char *s, int *year, int *month, int *day);
/* 1 when both read as the same date (score_parse_date), else 0. */
int score_same_date(const char *a, const char *b);
/* 1 when gold is a plain number (score_parse_number) and pred a quantity
 * (score_parse_quantity) of the same value, else 0. */
int score_same_quantity(const char *pred, const char *gold);
/* A malloc'd rendering of a gold value: strings as they are, integers in decimal, reals
 * with %.17g; NULL for anything else. */
char *score_gold_text(const json_t *v);

#endif
