/*
 * tpool.c - spin-then-sleep workers for the engine's loops (see tpool.h for why).
 *
 * A run publishes (fn, arg) under a new generation. Workers that see it join while it is open
 * (at most nth - 1 of them, each with its own tid) and call fn, which takes work units until
 * none is left; the caller does the same as tid 0, then closes the run and waits only for the
 * workers that joined. A worker the host has descheduled therefore never holds a run up: the
 * caller does its share (on a loaded machine, all of it). Workers spin on the generation for
 * TPOOL_SPIN_MS after their last run, yielding the core after the first TPOOL_PAUSE_US, then
 * sleep on a condition variable, which the caller signals only when someone sleeps. The sleeper
 * count and the generation are sequentially consistent, so a worker about to sleep either sees
 * the new generation or is seen by the caller.
 */
#include "engine/tpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/clock.h"
#include "core/xalloc.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* Long enough to bridge the gaps inside and between decode steps (sampling, a token's
 * callbacks), short enough that an idle engine frees its cores almost at once. */
#define TPOOL_SPIN_MS 0.5
#define TPOOL_PAUSE_US 50.0 /* then sched_yield between looks: others may need the core */
#define TPOOL_MAX_SHARED 8

/* state: the generation's low 32 bits, CLOSED, and how many workers joined (low 16 bits). */
#define ST_CLOSED ((uint64_t)1 << 31)
#define ST_COUNT 0xFFFFu

struct worker {
    struct tpool *p;
    pthread_t th;
};

struct tpool {
    int n, asked; /* threads running; asked for (more than n if one could not start) */
    struct worker *w;
    pthread_mutex_t run_mu; /* one run at a time */
    pthread_mutex_t mu;     /* sleeping */
    pthread_cond_t cv;
    _Atomic uint64_t gen;
    _Atomic uint64_t state;
    _Atomic int done; /* joined workers that have returned from fn */
    _Atomic int sleepers;
    _Atomic int stop;
    tpool_fn fn;
    void *arg;
    _Atomic int nth; /* read by workers that may come too late for the run */
};

static void wait_for_gen(struct tpool *p, uint64_t seen)
{
    double t0 = -1;
    for (unsigned spins = 1; atomic_load(&p->gen) == seen && !atomic_load(&p->stop); spins++) {
        if (t0 < 0 || spins % 64) {
            CPU_RELAX();
            if (t0 < 0 && spins % 64 == 0)
                t0 = af_clock_ms();
            continue;
        }
        const double waited = af_clock_ms() - t0;
        if (waited > TPOOL_PAUSE_US / 1000.0)
            sched_yield();
        if (waited < TPOOL_SPIN_MS)
            continue;
        pthread_mutex_lock(&p->mu);
        atomic_fetch_add(&p->sleepers, 1);
        while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
            pthread_cond_wait(&p->cv, &p->mu);
        atomic_fetch_sub(&p->sleepers, 1);
        pthread_mutex_unlock(&p->mu);
        t0 = -1;
    }
}

/* Joins the run of generation g if it is still open and has room: the tid, else 0. */
static int join_run(struct tpool *p, uint64_t g)
{
    uint64_t s = atomic_load(&p->state);
    for (;;) {
        if ((s >> 32) != (g & 0xFFFFFFFFu) || (s & ST_CLOSED) || (int)(s & ST_COUNT) + 1 >= p->nth)
            return 0;
        if (atomic_compare_exchange_weak(&p->state, &s, s + 1))
            return (int)(s & ST_COUNT) + 1;
    }
}

static void *worker_main(void *a)
{
    struct worker *w = a;
    struct tpool *p = w->p;
    uint64_t seen = 0;
    for (;;) {
        wait_for_gen(p, seen);
        if (atomic_load(&p->stop))
            return NULL;
        seen = atomic_load(&p->gen);
        /* p->nth, fn and arg are the run's while it is open; join_run reads nth only then. */
        const int tid = join_run(p, seen);
        if (tid) {
            p->fn(p->arg, tid, p->nth);
            atomic_fetch_add(&p->done, 1);
        }
    }
}

struct tpool *tpool_new(int n_threads)
{
    struct tpool *p = af_xcalloc(1, sizeof *p);
    p->n = p->asked = n_threads > 0 ? n_threads : 1;
    pthread_mutex_init(&p->run_mu, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    atomic_store(&p->state, ST_CLOSED);
    p->w = af_xcalloc((size_t)p->n, sizeof *p->w);
    for (int t = 1; t < p->n; t++) {
        p->w[t].p = p;
        if (pthread_create(&p->w[t].th, NULL, worker_main, &p->w[t]) != 0) {
            p->n = t; /* fewer threads; every run still completes */
            break;
        }
    }
    return p;
}

void tpool_free(struct tpool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int t = 1; t < p->n; t++)
        pthread_join(p->w[t].th, NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->run_mu);
    free(p->w);
    free(p);
}

struct tpool *tpool_shared(int n_threads)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static struct tpool *pools[TPOOL_MAX_SHARED];
    const int n = n_threads > 0 ? n_threads : 1;
    struct tpool *found = NULL;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < TPOOL_MAX_SHARED && !found; i++) {
        if (!pools[i])
            pools[i] = found = tpool_new(n);
        else if (pools[i]->asked == n)
            found = pools[i];
    }
    pthread_mutex_unlock(&mu);
    return found ? found : tpool_new(n); /* a ninth count: its own, leaked at exit */
}

int tpool_threads(const struct tpool *p)
{
    return p ? p->n : 1;
}

void tpool_run(struct tpool *p, int nth, tpool_fn fn, void *arg)
{
    if (!p || p->n < 2 || nth < 2) {
        fn(arg, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->run_mu);
    p->fn = fn;
    p->arg = arg;
    p->nth = nth < p->n ? nth : p->n;
    atomic_store(&p->done, 0);
    const uint64_t g = atomic_load(&p->gen) + 1;
    atomic_store(&p->state, (g & 0xFFFFFFFFu) << 32);
    atomic_store(&p->gen, g);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    fn(arg, 0, p->nth);
    const int joined = (int)(atomic_fetch_or(&p->state, ST_CLOSED) & ST_COUNT);
    for (unsigned spins = 1; atomic_load(&p->done) < joined; spins++) {
        CPU_RELAX();
        if (spins % 256 == 0)
            sched_yield(); /* a worker the host has paused in the middle of a unit */
    }
    pthread_mutex_unlock(&p->run_mu);
}
