/*
 * safetensors_write.c - the safetensors writer (see safetensors_write.h). The header is built
 * with jansson, then the file is streamed to PATH.tmp.PID so tensor data is never copied.
 */
#include "engine/safetensors_write.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/errf.h"
#include "core/xalloc.h"

/* What engine/safetensors.c accepts. */
#define ST_MAX_HEADER (100u << 20)

static size_t dtype_size(const char *dtype)
{
    if (!dtype)
        return 0;
    if (!strcmp(dtype, "F32"))
        return 4;
    if (!strcmp(dtype, "F16") || !strcmp(dtype, "BF16"))
        return 2;
    return 0;
}

/* Checks t's dtype, shape and size; adds its header entry at data offset *off. */
static int add_tensor(json_t *h, const struct st_write_tensor *t, size_t i, uint64_t *off,
                      char *err, size_t errlen)
{
    const char *name = t->name ? t->name : "";
    size_t elem = dtype_size(t->dtype);
    if (!t->name || !*t->name || !strcmp(t->name, "__metadata__") || json_object_get(h, name)) {
        af_errf(err, errlen, "safetensors tensor %zu: name '%s' is empty, reserved or repeated", i,
                name);
        return AF_EINVAL;
    }
    if (!elem) {
        af_errf(err, errlen, "safetensors tensor '%s': dtype %s is not F32, F16 or BF16", name,
                t->dtype ? t->dtype : "(null)");
        return AF_EINVAL;
    }
    if (t->n_dims < 0 || t->n_dims > 4) {
        af_errf(err, errlen, "safetensors tensor '%s': %d dimensions (0..4)", name, t->n_dims);
        return AF_EINVAL;
    }
    uint64_t count = 1;
    json_t *shape = json_array();
    for (int d = 0; d < t->n_dims; d++) {
        int64_t v = t->shape[d];
        if (v < 0 || v > (1ll << 40) || (v && count > UINT64_MAX / 8 / (uint64_t)v)) {
            af_errf(err, errlen, "safetensors tensor '%s': bad dimension %d (%lld)", name, d,
                    (long long)v);
            json_decref(shape);
            return AF_EINVAL;
        }
        count *= (uint64_t)v;
        json_array_append_new(shape, json_integer((json_int_t)v));
    }
    if ((uint64_t)t->nbytes != count * elem || (t->nbytes && !t->data)) {
        af_errf(err, errlen, "safetensors tensor '%s': %zu bytes given, the shape needs %llu", name,
                t->nbytes, (unsigned long long)(count * elem));
        json_decref(shape);
        return AF_EINVAL;
    }
    if (*off > (uint64_t)INT64_MAX - t->nbytes) {
        af_errf(err, errlen, "safetensors tensor '%s': data offset overflows", name);
        json_decref(shape);
        return AF_EINVAL;
    }
    json_t *e = json_object();
    json_object_set_new(e, "dtype", json_string(t->dtype));
    json_object_set_new(e, "shape", shape);
    json_object_set_new(e, "data_offsets",
                        json_pack("[I, I]", (json_int_t)*off, (json_int_t)(*off + t->nbytes)));
    json_object_set_new(h, name, e);
    *off += t->nbytes;
    return AF_OK;
}

/* The metadata object: every value a string, as the format requires. New reference. */
static int parse_metadata(const char *text, json_t **out, char *err, size_t errlen)
{
    json_error_t je;
    json_t *md = json_loads(text, 0, &je);
    *out = NULL;
    if (!json_is_object(md)) {
        af_errf(err, errlen, "safetensors metadata: line %d column %d: %s", je.line, je.column,
                md ? "not a JSON object" : je.text);
        json_decref(md);
        return AF_EINVAL;
    }
    const char *k;
    json_t *v;
    json_object_foreach(md, k, v)
    {
        if (!json_is_string(v)) {
            af_errf(err, errlen, "safetensors metadata: value of \"%s\" is not a string", k);
            json_decref(md);
            return AF_EINVAL;
        }
    }
    *out = md;
    return AF_OK;
}

/* The header text, spaces appended to a multiple of 8 bytes. Owned by the caller (free). */
static int build_header(const struct st_write_tensor *t, size_t n, const char *metadata_json,
                        char **out, size_t *out_len, char *err, size_t errlen)
{
    *out = NULL;
    json_t *h = json_object(), *md = NULL;
    int rc = AF_OK;
    if (metadata_json && (rc = parse_metadata(metadata_json, &md, err, errlen)))
        goto out;
    if (md)
        json_object_set(h, "__metadata__", md);
    uint64_t off = 0;
    for (size_t i = 0; i < n && rc == AF_OK; i++)
        rc = add_tensor(h, &t[i], i, &off, err, errlen);
    if (rc)
        goto out;
    char *s = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!s) {
        af_errf(err, errlen, "safetensors header: cannot encode the JSON");
        rc = AF_EINVAL;
        goto out;
    }
    size_t len = strlen(s), padded = (len + 7) & ~(size_t)7;
    if (padded > ST_MAX_HEADER) {
        af_errf(err, errlen, "safetensors header: %zu bytes is over the limit of %u", padded,
                ST_MAX_HEADER);
        free(s);
        rc = AF_ETOOBIG;
        goto out;
    }
    char *p = af_xmalloc(padded);
    memcpy(p, s, len);
    memset(p + len, ' ', padded - len);
    free(s);
    *out = p;
    *out_len = padded;
out:
    json_decref(md);
    json_decref(h);
    return rc;
}

static int write_all(int fd, const void *data, size_t n)
{
    const char *p = data;
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

/* Makes the rename durable; errors are ignored (some file systems refuse). */
static void sync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir =
        slash ? af_xstrndup(path, slash == path ? 1 : (size_t)(slash - path)) : af_xstrdup(".");
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

static int write_body(int fd, const char *hdr, size_t hlen, const struct st_write_tensor *t,
                      size_t n)
{
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    if (write_all(fd, len8, 8) || write_all(fd, hdr, hlen))
        return -1;
    for (size_t i = 0; i < n; i++)
        if (t[i].nbytes && write_all(fd, t[i].data, t[i].nbytes))
            return -1;
    return fsync(fd);
}

int st_write(const char *path, const struct st_write_tensor *t, size_t n, const char *metadata_json,
             char *err, size_t errlen)
{
    char *hdr = NULL;
    size_t hlen = 0;
    int rc = build_header(t, n, metadata_json, &hdr, &hlen, err, errlen);
    if (rc)
        return rc;
    size_t plen = strlen(path);
    char *tmp = af_xmalloc(plen + 32);
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        af_errf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
        rc = AF_EIO;
        goto out;
    }
    int bad = write_body(fd, hdr, hlen, t, n);
    int e = errno;
    if (close(fd) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (!bad && rename(tmp, path) != 0) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        unlink(tmp);
        af_errf(err, errlen, "%s: cannot write: %s", path, strerror(e));
        rc = AF_EIO;
        goto out;
    }
    sync_dir(path);
out:
    free(tmp);
    free(hdr);
    return rc;
}
