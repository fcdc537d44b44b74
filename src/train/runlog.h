/*
 * runlog.h - what the training loops (sft.c, grpo.c) share around their steps: the check that a
 * resumed run has the checkpoint's settings, the trim of metrics lines past a checkpoint, and
 * the seed mixer that derives reproducible streams from (seed, counter).
 *
 * Thread-safety: plain functions on caller-owned data.
 */
#ifndef AF_TRAIN_RUNLOG_H
#define AF_TRAIN_RUNLOG_H

#include <stddef.h>
#include <stdint.h>

#include "agentflow/err.h"

/* Compares two settings objects (JSON texts): every key of `now` must be in `saved` with an
 * equal value. AF_EINVAL names the first setting that differs (with both values). */
AF_NODISCARD int train_settings_match(const char *saved, const char *now, char *err, size_t errlen);

/* Where a run starts: *latest = 0 for a fresh run (AF_EINVAL when out_dir already holds a
 * checkpoint and resume is off), else the newest checkpoint's step, after checking that its
 * settings equal settings_now (AF_EINVAL names the first that differs; no checkpoint to resume
 * is AF_EINVAL too). */
AF_NODISCARD int train_run_start(const char *out_dir, int resume, const char *settings_now,
                                 int64_t *latest, char *err, size_t errlen);

/* Rewrites the metrics file `path` (JSONL with a "step" key) keeping the lines of steps <=
 * step, atomically; a torn last line is dropped. A missing file is not an error. */
AF_NODISCARD int train_metrics_trim(const char *path, int64_t step, char *err, size_t errlen);

/* A 64-bit hash of (a, b) (splitmix64's finaliser): a seed for stream b of run seed a. */
uint64_t train_mix(uint64_t a, uint64_t b);

#endif
