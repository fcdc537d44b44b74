/*
 * clock.h - monotonic time and sleeping. Safe from any thread.
 */
#ifndef AF_CORE_CLOCK_H
#define AF_CORE_CLOCK_H

#include <stdint.h>

/* Milliseconds on the monotonic clock (arbitrary origin). */
double af_clock_ms(void);
/* CPU time consumed by the calling thread, in milliseconds. */
double af_clock_thread_cpu_ms(void);
/* Sleeps for ms milliseconds (restarts on EINTR). */
void af_clock_sleep_ms(double ms);
/* Wall-clock time as ISO-8601 UTC ("2026-12-02T12:00:00.123Z") into out (>= 32 bytes). */
void af_clock_iso8601(char *out, unsigned long outlen);

#endif
