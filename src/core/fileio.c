/*
 * fileio.c - limited reads, atomic writes (temp + fsync + rename) and fsync'd JSONL appends.
 */
#include "core/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/errf.h"
#include "core/xalloc.h"

static void seterr(char *err, size_t errlen, const char *what, const char *path, int e)
{
    if (err && errlen)
        snprintf(err, errlen, "%s '%s': %s", what, path, strerror(e));
}

int af_file_read(const char *path, size_t limit, char **out, size_t *len, char *err, size_t errlen)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        seterr(err, errlen, "cannot open", path, errno);
        return errno == ENOENT ? AF_ENOTFOUND : AF_EIO;
    }
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size > limit) {
        if (err)
            snprintf(err, errlen, "file '%s' is %lld bytes, over the limit of %zu", path,
                     (long long)st.st_size, limit);
        close(fd);
        return AF_ETOOBIG;
    }
    size_t cap = 4096, n = 0;
    char *data = af_xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap) {
            cap *= 2;
            data = af_xrealloc(data, cap);
        }
        ssize_t r = read(fd, data + n, cap - n - 1);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            seterr(err, errlen, "cannot read", path, errno);
            free(data);
            close(fd);
            return AF_EIO;
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n > limit) {
            if (err)
                snprintf(err, errlen, "file '%s' is over the limit of %zu bytes", path, limit);
            free(data);
            close(fd);
            return AF_ETOOBIG;
        }
    }
    close(fd);
    data[n] = '\0';
    *out = data;
    if (len)
        *len = n;
    return AF_OK;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int af_file_write_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen)
{
    size_t plen = strlen(path);
    char *tmp = af_xmalloc(plen + 32);
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        seterr(err, errlen, "cannot create", tmp, errno);
        free(tmp);
        return AF_EIO;
    }
    int rc = AF_OK;
    if (write_all(fd, data, len) != 0 || fsync(fd) != 0) {
        seterr(err, errlen, "cannot write", tmp, errno);
        rc = AF_EIO;
    }
    if (close(fd) != 0 && rc == AF_OK) {
        seterr(err, errlen, "cannot close", tmp, errno);
        rc = AF_EIO;
    }
    if (rc == AF_OK && rename(tmp, path) != 0) {
        seterr(err, errlen, "cannot rename into", path, errno);
        rc = AF_EIO;
    }
    if (rc != AF_OK)
        unlink(tmp);
    free(tmp);
    return rc;
}

struct af_linelog {
    int fd;
    int do_fsync;
    pthread_mutex_t mu;
};

int af_linelog_open(const char *path, struct af_linelog **out, char *err, size_t errlen)
{
    *out = NULL;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        seterr(err, errlen, "cannot open for appending", path, errno);
        return AF_EIO;
    }
    struct af_linelog *log = af_xcalloc(1, sizeof *log);
    log->fd = fd;
    log->do_fsync = 1;
    pthread_mutex_init(&log->mu, NULL);
    *out = log;
    return AF_OK;
}

void af_linelog_set_fsync(struct af_linelog *log, int on)
{
    log->do_fsync = on;
}

int af_linelog_append(struct af_linelog *log, const char *line, size_t len)
{
    int need_nl = len == 0 || line[len - 1] != '\n';
    char *tmp = NULL;
    const char *p = line;
    if (need_nl) {
        /* One write() per line, so concurrent appenders and a kill never interleave halves. */
        tmp = af_xmalloc(len + 1);
        memcpy(tmp, line, len);
        tmp[len] = '\n';
        p = tmp;
        len++;
    }
    pthread_mutex_lock(&log->mu);
    int rc = write_all(log->fd, p, len) == 0 ? AF_OK : AF_EIO;
    /* EINVAL/EROFS: a pipe or a device (--trace /dev/stderr) that cannot be synced */
    if (rc == AF_OK && log->do_fsync && fdatasync(log->fd) != 0 && errno != EINVAL &&
        errno != EROFS)
        rc = AF_EIO;
    int saved = errno;
    pthread_mutex_unlock(&log->mu);
    free(tmp);
    errno = saved; /* the caller may name the cause */
    return rc;
}

void af_linelog_close(struct af_linelog *log)
{
    if (!log)
        return;
    close(log->fd);
    pthread_mutex_destroy(&log->mu);
    free(log);
}

/* mkdir of one level (`path`, a prefix of `want`): fine when it exists as a folder. */
static int mkdir_one(const char *path, const char *want, unsigned mode, char *err, size_t errlen)
{
    struct stat sb;
    if (mkdir(path, (mode_t)mode) == 0)
        return AF_OK;
    const int e = errno;
    if (e == EEXIST && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return AF_OK;
    const char *why = e == EEXIST ? "a file of that name is in the way" : strerror(e);
    if (strcmp(path, want))
        af_errf(err, errlen, "%s: cannot create the folder %s: %s", want, path, why);
    else
        af_errf(err, errlen, "%s: cannot create the folder: %s", path, why);
    return AF_EIO;
}

int af_mkdir_p(const char *path, unsigned mode, char *err, size_t errlen)
{
    if (!path || !*path) {
        af_errf(err, errlen, "cannot create a folder with an empty name");
        return AF_EINVAL;
    }
    char *p = af_xstrdup(path);
    int rc = AF_OK;
    /* Each parent in turn ("a", "a/b", ...), skipping the leading '/' and repeated slashes. */
    for (char *c = p + 1; *c && rc == AF_OK; c++) {
        if (*c != '/' || c[-1] == '/')
            continue;
        *c = '\0';
        rc = mkdir_one(p, path, mode, err, errlen);
        *c = '/';
    }
    if (rc == AF_OK)
        rc = mkdir_one(p, path, mode, err, errlen);
    free(p);
    return rc;
}

int af_file_same(const char *a, const char *b)
{
    struct stat sa, sb;
    if (!a || !b || stat(a, &sa) != 0 || stat(b, &sb) != 0)
        return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}
