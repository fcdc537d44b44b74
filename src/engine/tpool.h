/*
 * tpool.h - the engine's own worker threads for the parallel loops of a forward pass.
 *
 * Why not OpenMP there: libgomp counts the threads of every host thread's team, and once that
 * count passes the cores (the model loaded on one thread, the flow's solve threads taking turns
 * at driving the scheduler, a trainer's team) its idle workers spin only about 100 times before
 * sleeping in the kernel. Every loop of a decode step, about 200 per token, then pays a futex
 * wake-up, which a VM makes dear: bench/agent at concurrency 1 took 116 s with the engine's
 * loops on OpenMP and 85 s with no other team in the process. These workers spin for a while
 * after each loop, whoever called it, and only then sleep.
 */
#ifndef AF_ENGINE_TPOOL_H
#define AF_ENGINE_TPOOL_H

struct tpool;

/* n_threads in all, the caller of tpool_run being one of them (n_threads - 1 workers are
 * started now). Owned by the caller: tpool_free. */
struct tpool *tpool_new(int n_threads);
void tpool_free(struct tpool *p);
int tpool_threads(const struct tpool *p);

/* The process's pool of n_threads (<= 0: 1), made on first use and kept until exit; every
 * engine context asking for the same count shares it, so that two engines computing at once
 * (a planner and a frozen model) take turns on the same cores instead of oversubscribing them
 * with threads that spin. Not to be freed. */
struct tpool *tpool_shared(int n_threads);

/* A loop's body: called on up to nth threads at once with distinct tids (tid 0 on the calling
 * thread), it takes the loop's work units itself (an atomic counter in arg) until none is
 * left, so that whichever threads come do all the work. A worker that comes late does not
 * join, and the caller alone may do everything. */
typedef void (*tpool_fn)(void *arg, int tid, int nth);

/* Runs fn(arg, tid, nth) on the calling thread and on the workers that come while the run is
 * open, nth clamped to [1, tpool_threads], and returns when every call has returned. One run
 * at a time per pool: a run asked for while another is in progress (another thread) waits for
 * it. fn must not call tpool_run on the same pool. */
void tpool_run(struct tpool *p, int nth, tpool_fn fn, void *arg);

#endif
