/*
 * clock.c - monotonic clock, thread CPU clock and sleeping.
 */
#include "core/clock.h"

#include <errno.h>
#include <stdio.h>
#include <time.h>

double af_clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

double af_clock_thread_cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void af_clock_sleep_ms(double ms)
{
    if (ms <= 0)
        return;
    struct timespec ts;
    ts.tv_sec = (time_t)(ms / 1e3);
    ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1e3) * 1e6);
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

void af_clock_iso8601(char *out, unsigned long outlen)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char base[24];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, outlen, "%s.%03ldZ", base, ts.tv_nsec / 1000000L);
}
