/*
 * resume.c - scanning an append-only JSONL result file and a worker pool over numbered jobs.
 */
#include "eval/resume.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "core/errf.h"
#include "core/fileio.h"
#include "core/xalloc.h"

#define RESUME_MAX_BYTES (1ull << 32)

int eval_log_scan(const char *path, void (*on_line)(void *user, json_t *obj, size_t lineno),
                  void *user, char *err, size_t errlen)
{
    char *data = NULL;
    size_t len = 0;
    int rc = af_file_read(path, RESUME_MAX_BYTES, &data, &len, err, errlen);
    if (rc == AF_ENOTFOUND)
        return AF_OK;
    if (rc)
        return rc;
    size_t keep = 0, lineno = 0;
    for (size_t start = 0; start < len;) {
        char *nl = memchr(data + start, '\n', len - start);
        if (!nl)
            break;
        *nl = '\0';
        lineno++;
        json_t *j = json_loads(data + start, 0, NULL);
        if (json_is_object(j))
            on_line(user, j, lineno);
        json_decref(j);
        start = (size_t)(nl - data) + 1;
        keep = start;
    }
    free(data);
    if (keep < len && truncate(path, (off_t)keep) != 0) {
        af_errf(err, errlen, "cannot cut the partial last line of '%s': %s", path, strerror(errno));
        return AF_EIO;
    }
    return AF_OK;
}

struct pool {
    pthread_mutex_t mu;
    size_t next, n_jobs;
    void (*job)(void *user, size_t i);
    void *user;
};

static void *pool_worker(void *arg)
{
    struct pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        size_t i = p->next < p->n_jobs ? p->next++ : p->n_jobs;
        pthread_mutex_unlock(&p->mu);
        if (i == p->n_jobs)
            return NULL;
        p->job(p->user, i);
    }
}

void eval_pool_run(size_t n_threads, size_t n_jobs, void (*job)(void *user, size_t i), void *user)
{
    struct pool p = {.next = 0, .n_jobs = n_jobs, .job = job, .user = user};
    pthread_mutex_init(&p.mu, NULL);
    size_t nt = n_threads < n_jobs ? n_threads : n_jobs;
    pthread_t *th = af_xcalloc(nt ? nt : 1, sizeof *th);
    size_t started = 0;
    for (; started < nt; started++)
        if (pthread_create(&th[started], NULL, pool_worker, &p) != 0)
            break;
    if (started == 0 && n_jobs > 0)
        pool_worker(&p);
    for (size_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    free(th);
    pthread_mutex_destroy(&p.mu);
}
