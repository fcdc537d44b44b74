/*
 * progress.c - the eval progress bar / progress lines on stderr.
 */
#include "eval/progress.h"

#include <string.h>
#include <unistd.h>

#include "core/clock.h"

#define BAR_WIDTH 30

enum eval_progress_mode eval_progress_auto(FILE *f, int quiet)
{
    if (quiet)
        return EVAL_PROGRESS_QUIET;
    return isatty(fileno(f)) ? EVAL_PROGRESS_BAR : EVAL_PROGRESS_LINES;
}

void eval_progress_init(struct eval_progress *p, FILE *f, enum eval_progress_mode mode,
                        size_t total, size_t every)
{
    memset(p, 0, sizeof *p);
    p->f = f;
    p->mode = mode;
    p->total = total;
    p->every = every ? every : 1;
    p->t0_ms = af_clock_ms();
}

void eval_progress_format_eta(double seconds, char *out, size_t outlen)
{
    long s = seconds > 0 ? (long)(seconds + 0.5) : 0;
    if (s >= 3600)
        snprintf(out, outlen, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
    else if (s >= 60)
        snprintf(out, outlen, "%ldm%02lds", s / 60, s % 60);
    else
        snprintf(out, outlen, "%lds", s);
}

/* "12/50 acc 41.7% (2 failed) ETA 1m20s" */
static void status_text(const struct eval_progress *p, char *out, size_t outlen)
{
    size_t scored = p->done - p->failed;
    double acc = scored ? 100.0 * (double)p->correct / (double)scored : 0.0;
    double el = (af_clock_ms() - p->t0_ms) / 1000.0;
    char eta[32] = "?";
    if (p->done > 0 && p->done < p->total)
        eval_progress_format_eta(el / (double)p->done * (double)(p->total - p->done), eta,
                                 sizeof eta);
    else if (p->done >= p->total)
        snprintf(eta, sizeof eta, "0s");
    char failed[48] = "";
    if (p->failed)
        snprintf(failed, sizeof failed, " (%zu failed)", p->failed);
    snprintf(out, outlen, "%zu/%zu acc %.1f%%%s ETA %s", p->done, p->total, acc, failed, eta);
}

static void draw_bar(struct eval_progress *p)
{
    char bar[BAR_WIDTH + 1], text[160];
    size_t fill = p->total ? p->done * BAR_WIDTH / p->total : BAR_WIDTH;
    for (size_t i = 0; i < BAR_WIDTH; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[BAR_WIDTH] = '\0';
    status_text(p, text, sizeof text);
    fprintf(p->f, "\r\033[K[%s] %s", bar, text);
    fflush(p->f);
    p->drawn = 1;
}

void eval_progress_item(struct eval_progress *p, int correct, int failed)
{
    p->done++;
    if (failed)
        p->failed++;
    else if (correct)
        p->correct++;
    if (p->mode == EVAL_PROGRESS_BAR) {
        draw_bar(p);
    } else if (p->mode == EVAL_PROGRESS_LINES && (p->done % p->every == 0 || p->done == p->total)) {
        char text[160];
        status_text(p, text, sizeof text);
        fprintf(p->f, "[eval] %s\n", text);
    }
}

void eval_progress_message(struct eval_progress *p, const char *msg)
{
    if (p->mode == EVAL_PROGRESS_BAR && p->drawn)
        fprintf(p->f, "\r\033[K");
    fprintf(p->f, "%s\n", msg);
    if (p->mode == EVAL_PROGRESS_BAR && p->drawn)
        draw_bar(p);
}

void eval_progress_finish(struct eval_progress *p)
{
    if (p->mode == EVAL_PROGRESS_BAR && p->drawn)
        fprintf(p->f, "\n");
    fflush(p->f);
    p->drawn = 0;
}
