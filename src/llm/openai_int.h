/*
 * openai_int.h - internals of the OpenAI-compatible HTTP back-end (llm/openai.c), exposed so
 * that tests can check the retry arithmetic without timing anything.
 *
 * Every function here is pure (or touches only caller-owned state) and is safe from any thread.
 */
#ifndef AF_LLM_OPENAI_INT_H
#define AF_LLM_OPENAI_INT_H

#include <stdint.h>
#include <time.h>

/* Parses a Retry-After header value: delta-seconds ("120") or an HTTP date ("Wed, 21 Oct 2015
 * 07:28:00 GMT"), the latter relative to `now`. Leading and trailing blanks are ignored. On
 * success stores the wait in *ms (>= 0; a date in the past gives 0) and returns 0; returns -1
 * when the value is neither. */
int openai_parse_retry_after(const char *value, time_t now, double *ms);

/* True (1) for HTTP statuses worth retrying: 408, 429 and 5xx. */
int openai_status_retryable(long status);

/* A fresh, non-zero seed for openai_next_random, from the clock, the thread id and the stack
 * address, so concurrent calls do not share a random stream. */
uint64_t openai_rng_seed(void);

/* Advances the xorshift64 state *s (non-zero) and returns a uniform double in [0, 1). */
double openai_next_random(uint64_t *s);

/* Full-jitter backoff before retry number `retry` (0 for the first retry): uniform in
 * [0, min(max_ms, base_ms * 2^retry)]. Advances *rng. */
double openai_backoff_ms(int retry, double base_ms, double max_ms, uint64_t *rng);

#endif
