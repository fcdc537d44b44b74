/*
 * gguf_write.c - the GGUF v3 writer: collects KVs (copied) and tensors (borrowed) in memory,
 * then streams the file to PATH.tmp.XXXXXX in the same directory, fsyncs it and renames it
 * over PATH, so readers see the old file or the whole new one, never a part.
 *
 * Layout written: header, KVs in insertion order, tensor infos in insertion order, zero
 * padding to general.alignment (default 32), then each tensor's data at an aligned offset,
 * padded to the alignment. A KV's value is kept as the exact bytes the file holds after the
 * type field (for arrays: after the element type and count), so copying KVs from a gguf_file
 * is a byte copy.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/errf.h"
#include "core/xalloc.h"
#include "engine/gguf.h"
#include "engine/quant.h"

struct wkv {
    char *key;
    enum gguf_vtype type;
    enum gguf_vtype arr_type;
    uint64_t arr_n;
    uint8_t *val; /* the raw value bytes (owned) */
    size_t val_len;
};

struct wtensor {
    char *name;
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    const void *data; /* borrowed */
    uint64_t nbytes;
    uint64_t offset; /* from the data section start, set at write time */
};

struct gguf_writer {
    struct wkv *kvs;
    size_t n_kv, cap_kv;
    struct wtensor *ts;
    size_t n_t, cap_t;
};

static const size_t wsize[GGUF_NVTYPES] = {
    [GGUF_UINT8] = 1,  [GGUF_INT8] = 1,  [GGUF_UINT16] = 2,  [GGUF_INT16] = 2,
    [GGUF_UINT32] = 4, [GGUF_INT32] = 4, [GGUF_FLOAT32] = 4, [GGUF_BOOL] = 1,
    [GGUF_UINT64] = 8, [GGUF_INT64] = 8, [GGUF_FLOAT64] = 8,
};

/* Owned by the caller (gguf_writer_free). */
struct gguf_writer *gguf_writer_new(void)
{
    return af_xcalloc(1, sizeof(struct gguf_writer));
}

void gguf_writer_free(struct gguf_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++)
        free(w->ts[i].name);
    free(w->kvs);
    free(w->ts);
    free(w);
}

/* The slot for `key` (len bytes): the existing one, its old value freed, or a new one. */
static struct wkv *slot(struct gguf_writer *w, const char *key, size_t len)
{
    for (size_t i = 0; i < w->n_kv; i++) {
        struct wkv *kv = &w->kvs[i];
        if (strlen(kv->key) == len && memcmp(kv->key, key, len) == 0) {
            free(kv->val);
            kv->val = NULL;
            return kv;
        }
    }
    if (w->n_kv == w->cap_kv) {
        w->cap_kv = w->cap_kv ? 2 * w->cap_kv : 16;
        w->kvs = af_xrealloc(w->kvs, w->cap_kv * sizeof *w->kvs);
    }
    struct wkv *kv = &w->kvs[w->n_kv++];
    memset(kv, 0, sizeof *kv);
    kv->key = af_xstrndup(key, len);
    return kv;
}

static void set_raw(struct gguf_writer *w, const char *key, size_t key_len, enum gguf_vtype type,
                    enum gguf_vtype arr_type, uint64_t arr_n, const void *val, size_t len)
{
    struct wkv *kv = slot(w, key, key_len);
    kv->type = type;
    kv->arr_type = arr_type;
    kv->arr_n = arr_n;
    kv->val = af_xmalloc(len ? len : 1);
    if (len)
        memcpy(kv->val, val, len);
    kv->val_len = len;
}

static void set_scalar(struct gguf_writer *w, const char *key, enum gguf_vtype t, const void *v)
{
    set_raw(w, key, strlen(key), t, GGUF_UINT8, 0, v, wsize[t]);
}

void gguf_writer_set_scalar(struct gguf_writer *w, const char *key, enum gguf_vtype type,
                            const void *v)
{
    if ((unsigned)type < GGUF_NVTYPES && wsize[type] != 0)
        set_scalar(w, key, type, v);
}

void gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v)
{
    set_scalar(w, key, GGUF_UINT32, &v);
}

void gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v)
{
    set_scalar(w, key, GGUF_INT32, &v);
}

void gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v)
{
    set_scalar(w, key, GGUF_UINT64, &v);
}

void gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v)
{
    set_scalar(w, key, GGUF_FLOAT32, &v);
}

void gguf_writer_set_bool(struct gguf_writer *w, const char *key, int v)
{
    uint8_t b = v != 0;
    set_scalar(w, key, GGUF_BOOL, &b);
}

void gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v)
{
    uint64_t n = strlen(v);
    uint8_t *buf = af_xmalloc((size_t)n + 8);
    memcpy(buf, &n, 8);
    memcpy(buf + 8, v, (size_t)n);
    set_raw(w, key, strlen(key), GGUF_STRING, GGUF_UINT8, 0, buf, (size_t)n + 8);
    free(buf);
}

void gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_vtype type,
                         const void *data, uint64_t n)
{
    if ((unsigned)type >= GGUF_NVTYPES || wsize[type] == 0)
        return; /* strings and nested arrays are not numeric: ignored */
    set_raw(w, key, strlen(key), GGUF_ARRAY, type, n, data, (size_t)n * wsize[type]);
}

void gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const struct gguf_str *v,
                             uint64_t n)
{
    size_t len = 0;
    for (uint64_t i = 0; i < n; i++)
        len += 8 + (size_t)v[i].n;
    uint8_t *buf = af_xmalloc(len ? len : 1), *p = buf;
    for (uint64_t i = 0; i < n; i++) {
        memcpy(p, &v[i].n, 8);
        if (v[i].n)
            memcpy(p + 8, v[i].s, (size_t)v[i].n);
        p += 8 + (size_t)v[i].n;
    }
    struct wkv *kv = slot(w, key, strlen(key));
    kv->type = GGUF_ARRAY;
    kv->arr_type = GGUF_STRING;
    kv->arr_n = n;
    kv->val = buf;
    kv->val_len = len;
}

void gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_kv *kv)
{
    set_raw(w, kv->key.s, (size_t)kv->key.n, kv->type, kv->arr_type, kv->arr_n, kv->data,
            (size_t)kv->nbytes);
}

void gguf_writer_copy_kvs(struct gguf_writer *w, const struct gguf_file *g)
{
    for (uint64_t i = 0; i < gguf_n_kv(g); i++)
        gguf_writer_copy_kv(w, gguf_kv_at(g, i));
}

int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const int64_t *ne, const void *data, uint64_t nbytes, char *err,
                           size_t errlen)
{
    if (!name || !*name || strlen(name) > 65535 || n_dims < 1 || n_dims > GGUF_MAX_DIMS ||
        !quant_type_supported(type)) {
        af_errf(err, errlen,
                "gguf writer: tensor '%s': bad name, n_dims %" PRIu32 " or type %" PRIu32,
                name ? name : "(null)", n_dims, type);
        return AF_EINVAL;
    }
    for (size_t i = 0; i < w->n_t; i++) {
        if (strcmp(w->ts[i].name, name) == 0) {
            af_errf(err, errlen, "gguf writer: tensor '%s': duplicate name", name);
            return AF_EINVAL;
        }
    }
    struct wtensor t = {.type = type, .n_dims = n_dims, .data = data, .nbytes = nbytes};
    uint64_t want = 0;
    int bad = 0;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        bad |= t.ne[d] < 0;
    }
    int64_t blk = quant_block_elems(type);
    if (!bad && t.ne[0] % blk == 0) {
        want = (uint64_t)(t.ne[0] / blk) * quant_block_bytes(type);
        for (uint32_t d = 1; d < GGUF_MAX_DIMS && !bad; d++)
            bad |= __builtin_mul_overflow(want, (uint64_t)t.ne[d], &want);
    } else {
        bad = 1;
    }
    if (bad || want != nbytes || (nbytes && !data)) {
        af_errf(err, errlen,
                "gguf writer: tensor '%s': %s shape [%" PRId64 ", %" PRId64 ", %" PRId64
                ", %" PRId64 "] needs %" PRIu64 " bytes, got %" PRIu64,
                name, quant_type_name(type), t.ne[0], t.ne[1], t.ne[2], t.ne[3], want, nbytes);
        return AF_EINVAL;
    }
    if (w->n_t == w->cap_t) {
        w->cap_t = w->cap_t ? 2 * w->cap_t : 16;
        w->ts = af_xrealloc(w->ts, w->cap_t * sizeof *w->ts);
    }
    t.name = af_xstrdup(name);
    w->ts[w->n_t++] = t;
    return AF_OK;
}

/* --- Writing ---------------------------------------------------------------------------- */

static int put(FILE *f, const void *p, size_t n)
{
    return n == 0 || fwrite(p, 1, n, f) == n ? 0 : -1;
}

static int put_u32(FILE *f, uint32_t v)
{
    return put(f, &v, 4);
}

static int put_u64(FILE *f, uint64_t v)
{
    return put(f, &v, 8);
}

static int put_str(FILE *f, const char *s)
{
    size_t n = strlen(s);
    return put_u64(f, n) || put(f, s, n);
}

static int put_pad(FILE *f, uint64_t pos, uint32_t align)
{
    static const uint8_t zeros[256];
    uint64_t pad = (align - pos % align) % align;
    while (pad > 0) {
        size_t k = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
        if (put(f, zeros, k))
            return -1;
        pad -= k;
    }
    return 0;
}

/* general.alignment as set (a uint32 power of two), or the default. -1 when invalid. */
static int64_t writer_alignment(const struct gguf_writer *w)
{
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kvs[i].key, "general.alignment") != 0)
            continue;
        uint32_t a;
        if (w->kvs[i].type != GGUF_UINT32)
            return -1;
        memcpy(&a, w->kvs[i].val, 4);
        return a && (a & (a - 1)) == 0 && a <= (1u << 30) ? (int64_t)a : -1;
    }
    return GGUF_DEFAULT_ALIGNMENT;
}

/* Header, KVs and tensor infos; assigns tensor offsets. Returns 0 or -1 on a write error. */
static int write_meta(struct gguf_writer *w, FILE *f, uint32_t align)
{
    if (put(f, "GGUF", 4) || put_u32(f, 3) || put_u64(f, w->n_t) || put_u64(f, w->n_kv))
        return -1;
    for (size_t i = 0; i < w->n_kv; i++) {
        const struct wkv *kv = &w->kvs[i];
        if (put_str(f, kv->key) || put_u32(f, (uint32_t)kv->type))
            return -1;
        if (kv->type == GGUF_ARRAY && (put_u32(f, (uint32_t)kv->arr_type) || put_u64(f, kv->arr_n)))
            return -1;
        if (put(f, kv->val, kv->val_len))
            return -1;
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        struct wtensor *t = &w->ts[i];
        t->offset = off;
        off += (t->nbytes + align - 1) / align * align;
        if (put_str(f, t->name) || put_u32(f, t->n_dims))
            return -1;
        for (uint32_t d = 0; d < t->n_dims; d++)
            if (put_u64(f, (uint64_t)t->ne[d]))
                return -1;
        if (put_u32(f, t->type) || put_u64(f, t->offset))
            return -1;
    }
    return 0;
}

static int write_all(struct gguf_writer *w, FILE *f, uint32_t align)
{
    if (write_meta(w, f, align))
        return -1;
    off_t pos = ftello(f);
    if (pos < 0 || put_pad(f, (uint64_t)pos, align))
        return -1;
    for (size_t i = 0; i < w->n_t; i++) {
        const struct wtensor *t = &w->ts[i];
        if (put(f, t->data, (size_t)t->nbytes) || put_pad(f, t->nbytes, align))
            return -1;
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

/* What the reader would reject: keys of 0 or more than 65535 bytes, a bad alignment. */
static int check_writer(const struct gguf_writer *w, const char *path, int64_t align, char *err,
                        size_t errlen)
{
    for (size_t i = 0; i < w->n_kv; i++) {
        size_t n = strlen(w->kvs[i].key);
        if (n == 0 || n > 65535) {
            af_errf(err, errlen, "%s: key %zu ('%.64s'): length %zu not in 1..65535", path, i,
                    w->kvs[i].key, n);
            return AF_EINVAL;
        }
    }
    if (align < 0) {
        af_errf(err, errlen, "%s: general.alignment must be a uint32 power of two", path);
        return AF_EINVAL;
    }
    return AF_OK;
}

int gguf_writer_write(struct gguf_writer *w, const char *path, char *err, size_t errlen)
{
    int64_t align = writer_alignment(w);
    int vrc = check_writer(w, path, align, err, errlen);
    if (vrc != AF_OK)
        return vrc;
    size_t plen = strlen(path);
    char *tmp = af_xmalloc(plen + 16);
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp.XXXXXX", 12);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        af_errf(err, errlen, "%s: create temporary file: %s", path, strerror(errno));
        free(tmp);
        return AF_EIO;
    }
    FILE *f = fchmod(fd, 0644) == 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        int e0 = errno;
        close(fd);
        unlink(tmp);
        af_errf(err, errlen, "%s: open temporary file: %s", path, strerror(e0));
        free(tmp);
        return AF_EIO;
    }
    int rc = write_all(w, f, (uint32_t)align);
    if (rc == 0)
        rc = fflush(f) != 0 || fsync(fileno(f)) != 0 ? -1 : 0;
    int e = errno;
    if (fclose(f) != 0 && rc == 0) {
        rc = -1;
        e = errno;
    }
    if (rc == 0 && rename(tmp, path) != 0) {
        rc = -1;
        e = errno;
    }
    if (rc == 0)
        sync_dir(path);
    if (rc != 0) {
        unlink(tmp);
        af_errf(err, errlen, "%s: write: %s", path, strerror(e));
    }
    free(tmp);
    return rc == 0 ? AF_OK : AF_EIO;
}
