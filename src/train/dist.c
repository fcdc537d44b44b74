/*
 * dist.c - the trainer's ranks over OpenMPI (dist.h).
 */
#include "train/dist.h"

#include <stdlib.h>
#include <string.h>

#include "core/errf.h"
#include "core/xalloc.h"

#ifdef AF_HAVE_MPI
#include <mpi.h>
#endif

static int g_rank = 0, g_size = 1, g_started = 0;

static int launched_by_mpirun(void)
{
    const char *s = getenv("OMPI_COMM_WORLD_SIZE");
    return s && *s;
}

int train_dist_rank(void)
{
    return g_rank;
}

int train_dist_size(void)
{
    return g_size;
}

uint64_t train_dist_checksum(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

#ifdef AF_HAVE_MPI

static int mpi_fail(int rc, const char *what, char *err, size_t errlen)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    af_errf(err, errlen, "MPI %s failed on rank %d: %s", what, g_rank, msg);
    return AF_EIO;
}

int train_dist_init(char *err, size_t errlen)
{
    if (g_started || !launched_by_mpirun())
        return AF_OK;
    int provided = 0;
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS)
        return mpi_fail(rc, "init", err, errlen);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    g_started = 1;
    return AF_OK;
}

void train_dist_abort(int code)
{
    if (g_started && g_size > 1)
        MPI_Abort(MPI_COMM_WORLD, code);
}

void train_dist_finalize(void)
{
    if (g_started)
        MPI_Finalize();
    g_started = 0;
}

/* Gathers every rank's n elements of `size` bytes into all [g_size][n]. */
static int gather(const void *x, size_t n, MPI_Datatype t, void *all, char *err, size_t errlen)
{
    int rc = MPI_Allgather(x, (int)n, t, all, (int)n, t, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? AF_OK : mpi_fail(rc, "all-gather", err, errlen);
}

#define CHUNK ((size_t)1 << 24) /* elements per collective: counts are ints */

int train_dist_sum_floats(float *x, size_t n, char *err, size_t errlen)
{
    if (g_size == 1)
        return AF_OK;
    const size_t c = n < CHUNK ? n : CHUNK;
    float *all = af_xmalloc((c ? c : 1) * (size_t)g_size * sizeof *all);
    int rc = AF_OK;
    for (size_t at = 0; at < n && !rc; at += CHUNK) {
        const size_t m = n - at < CHUNK ? n - at : CHUNK;
        if ((rc = gather(x + at, m, MPI_FLOAT, all, err, errlen)))
            break;
        for (size_t i = 0; i < m; i++) {
            float s = all[i];
            for (int r = 1; r < g_size; r++)
                s += all[(size_t)r * m + i];
            x[at + i] = s;
        }
    }
    free(all);
    return rc;
}

int train_dist_sum_doubles(double *x, size_t n, char *err, size_t errlen)
{
    if (g_size == 1 || n == 0)
        return AF_OK;
    double *all = af_xmalloc(n * (size_t)g_size * sizeof *all);
    int rc = gather(x, n, MPI_DOUBLE, all, err, errlen);
    for (size_t i = 0; i < n && !rc; i++) {
        double s = all[i];
        for (int r = 1; r < g_size; r++)
            s += all[(size_t)r * n + i];
        x[i] = s;
    }
    free(all);
    return rc;
}

int train_dist_max_i64(int64_t *v, char *err, size_t errlen)
{
    if (g_size == 1)
        return AF_OK;
    int64_t *all = af_xmalloc((size_t)g_size * sizeof *all);
    int rc = gather(v, 1, MPI_INT64_T, all, err, errlen);
    for (int r = 0; r < g_size && !rc; r++)
        if (all[r] > *v)
            *v = all[r];
    free(all);
    return rc;
}

int train_dist_check_same(uint64_t v, const char *what, char *err, size_t errlen)
{
    if (g_size == 1)
        return AF_OK;
    uint64_t *all = af_xmalloc((size_t)g_size * sizeof *all);
    int rc = gather(&v, 1, MPI_UINT64_T, all, err, errlen);
    for (int r = 1; r < g_size && !rc; r++)
        if (all[r] != all[0]) {
            af_errf(err, errlen,
                    "%s differs between ranks: rank 0 has %016llx, rank %d has %016llx; the "
                    "ranks no longer train the same model",
                    what, (unsigned long long)all[0], r, (unsigned long long)all[r]);
            rc = AF_EINVAL;
        }
    free(all);
    return rc;
}

int train_dist_gather_text(const char *s, char **out, char *err, size_t errlen)
{
    if (g_size == 1) {
        *out = af_xstrdup(s);
        return AF_OK;
    }
    *out = NULL;
    int len = (int)strlen(s);
    int *lens = af_xmalloc((size_t)g_size * sizeof *lens), *offs = NULL;
    int rc = gather(&len, 1, MPI_INT, lens, err, errlen);
    char *all = NULL;
    if (!rc) {
        offs = af_xmalloc((size_t)g_size * sizeof *offs);
        size_t total = 0;
        for (int r = 0; r < g_size; r++) {
            offs[r] = (int)total;
            total += (size_t)lens[r];
        }
        all = af_xmalloc(total + (size_t)g_size + 1);
        const int m = MPI_Allgatherv(s, len, MPI_CHAR, all, lens, offs, MPI_CHAR, MPI_COMM_WORLD);
        if (m != MPI_SUCCESS)
            rc = mpi_fail(m, "all-gather", err, errlen);
        else { /* join with newlines, in rank order */
            char *j = af_xmalloc(total + (size_t)g_size + 1);
            size_t at = 0;
            for (int r = 0; r < g_size; r++) {
                memcpy(j + at, all + offs[r], (size_t)lens[r]);
                at += (size_t)lens[r];
                if (r + 1 < g_size)
                    j[at++] = '\n';
            }
            j[at] = '\0';
            *out = j;
        }
    }
    free(all);
    free(offs);
    free(lens);
    return rc;
}

#else /* one rank: no OpenMPI in this build */

int train_dist_init(char *err, size_t errlen)
{
    if (launched_by_mpirun()) {
        af_errf(err, errlen,
                "started by mpirun, but this build has no OpenMPI (install libopenmpi-dev and "
                "rebuild)");
        return AF_EIO;
    }
    (void)g_started;
    return AF_OK;
}

void train_dist_abort(int code)
{
    (void)code;
}

void train_dist_finalize(void)
{
}

int train_dist_sum_floats(float *x, size_t n, char *err, size_t errlen)
{
    (void)x, (void)n, (void)err, (void)errlen;
    return AF_OK;
}

int train_dist_sum_doubles(double *x, size_t n, char *err, size_t errlen)
{
    (void)x, (void)n, (void)err, (void)errlen;
    return AF_OK;
}

int train_dist_max_i64(int64_t *v, char *err, size_t errlen)
{
    (void)v, (void)err, (void)errlen;
    return AF_OK;
}

int train_dist_check_same(uint64_t v, const char *what, char *err, size_t errlen)
{
    (void)v, (void)what, (void)err, (void)errlen;
    return AF_OK;
}

int train_dist_gather_text(const char *s, char **out, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    *out = af_xstrdup(s);
    return AF_OK;
}

#endif
