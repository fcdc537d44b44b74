/*
 * prefix.h - the prefix cache: a small pool of KV sequences. A new prompt reuses the longest
 * cached prefix of its tokens; a sequence whose tail differs is copied up to the shared part, so
 * the old one stays for the prompts that still match it. Least recently used sequences are
 * dropped beyond a count and a byte budget. Not thread-safe (the engine holds its lock).
 */
#ifndef AF_ENGINE_PREFIX_H
#define AF_ENGINE_PREFIX_H

#include <stddef.h>
#include <stdint.h>

#include "engine/forward.h"

struct prefix_cache;

/* Owned by the caller (prefix_cache_free). max_seqs >= 1. */
struct prefix_cache *prefix_cache_new(const struct model *m, int max_seqs, size_t max_bytes);
void prefix_cache_free(struct prefix_cache *pc);

/* Returns a sequence whose first *n_reused tokens are prompt[0..*n_reused) with their KV, and
 * nothing after them; at most n - 1 are reused so the last prompt token is always evaluated
 * (its logits are needed). The sequence is the caller's alone until prefix_release: others
 * may copy its prefix but never extend or drop it, so many generations can hold one each
 * (the pool grows past max_seqs while they do, and shrinks back on release). */
struct kv_seq *prefix_acquire(struct prefix_cache *pc, const int32_t *prompt, int64_t n,
                              int64_t *n_reused);
/* Gives the sequence back to the pool (its tokens stay for later prompts), then trims. */
void prefix_release(struct prefix_cache *pc, struct kv_seq *seq);
/* Drops idle sequences, least recently used first, beyond the byte budget and the count;
 * `keep` (may be NULL) is spared. */
void prefix_trim(struct prefix_cache *pc, const struct kv_seq *keep);
size_t prefix_cache_bytes(const struct prefix_cache *pc);

#endif
