/*
 * progress.h - the eval progress display on stderr: a bar redrawn in place when stderr is a
 * terminal, a plain line every N items otherwise, nothing when quiet. Shows items done/total,
 * accuracy so far and an ETA. Not thread-safe: the runner calls it under its own lock.
 */
#ifndef AF_EVAL_PROGRESS_H
#define AF_EVAL_PROGRESS_H

#include <stddef.h>
#include <stdio.h>

enum eval_progress_mode { EVAL_PROGRESS_QUIET, EVAL_PROGRESS_LINES, EVAL_PROGRESS_BAR };

struct eval_progress {
    FILE *f;
    enum eval_progress_mode mode;
    size_t total;   /* items to run now */
    size_t done;    /* finished now (failed ones included) */
    size_t correct; /* of those, correct by the rule scorer */
    size_t failed;
    size_t every; /* LINES mode: a line every `every` items */
    double t0_ms;
    int drawn; /* BAR mode: a bar is on screen */
};

/* EVAL_PROGRESS_BAR when f is a terminal, else LINES; QUIET when quiet is set. */
enum eval_progress_mode eval_progress_auto(FILE *f, int quiet);

void eval_progress_init(struct eval_progress *p, FILE *f, enum eval_progress_mode mode,
                        size_t total, size_t every);
/* Counts one finished item (failed: the solve did not produce a result line). */
void eval_progress_item(struct eval_progress *p, int correct, int failed);
/* Prints a message line without garbling the bar (the bar is redrawn after it). */
void eval_progress_message(struct eval_progress *p, const char *msg);
/* Ends the display (a final newline after the bar). */
void eval_progress_finish(struct eval_progress *p);

/* Formats seconds as "1h02m", "3m05s" or "12s" into out. */
void eval_progress_format_eta(double seconds, char *out, size_t outlen);

#endif
