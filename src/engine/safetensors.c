/*
 * safetensors.c - the safetensors reader (see safetensors.h).
 */
#include "engine/safetensors.h"

#include <fcntl.h>
#include <jansson.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/errf.h"
#include "core/xalloc.h"
#include "engine/quant.h"

#define ST_MAX_HEADER (100u << 20)

struct st_file {
    char *path;
    void *map;
    size_t size;
    struct st_tensor *t;
    size_t n;
};

static int dtype_of(const char *s, uint32_t *type, size_t *elem)
{
    if (!strcmp(s, "F32"))
        *type = GGML_TYPE_F32, *elem = 4;
    else if (!strcmp(s, "F16"))
        *type = GGML_TYPE_F16, *elem = 2;
    else if (!strcmp(s, "BF16"))
        *type = GGML_TYPE_BF16, *elem = 2;
    else
        return -1;
    return 0;
}

static int by_offset(const void *a, const void *b)
{
    const struct st_tensor *x = a, *y = b;
    return x->data < y->data ? -1 : x->data > y->data;
}

static int parse_tensor(struct st_file *f, const char *name, json_t *v, const uint8_t *base,
                        uint64_t data_len, char *err, size_t errlen)
{
    struct st_tensor *t = &f->t[f->n];
    json_t *shape = json_object_get(v, "shape"), *offs = json_object_get(v, "data_offsets");
    const char *dtype = json_string_value(json_object_get(v, "dtype"));
    size_t elem = 0;
    if (!dtype || dtype_of(dtype, &t->type, &elem)) {
        af_errf(err, errlen, "%s: tensor '%s': dtype %s is not supported (F32, F16, BF16)", f->path,
                name, dtype ? dtype : "(missing)");
        return AF_EPARSE;
    }
    size_t nd = json_array_size(shape);
    if (!json_is_array(shape) || nd > 4 || json_array_size(offs) != 2) {
        af_errf(err, errlen, "%s: tensor '%s': bad shape or data_offsets", f->path, name);
        return AF_EPARSE;
    }
    uint64_t count = 1;
    t->n_dims = nd ? (uint32_t)nd : 1;
    for (int i = 0; i < 4; i++)
        t->ne[i] = 1;
    for (size_t i = 0; i < nd; i++) {
        json_int_t d = json_integer_value(json_array_get(shape, i));
        if (!json_is_integer(json_array_get(shape, i)) || d < 0 || d > (1ll << 40) ||
            (d && count > UINT64_MAX / (uint64_t)d)) {
            af_errf(err, errlen, "%s: tensor '%s': bad dimension %zu", f->path, name, i);
            return AF_EPARSE;
        }
        t->ne[nd - 1 - i] = d;
        count *= (uint64_t)d;
    }
    json_int_t b = json_integer_value(json_array_get(offs, 0));
    json_int_t e = json_integer_value(json_array_get(offs, 1));
    if (b < 0 || e < b || (uint64_t)e > data_len || (uint64_t)(e - b) != count * elem) {
        af_errf(err, errlen,
                "%s: tensor '%s': data_offsets [%lld, %lld) do not fit the %llu data bytes or "
                "the shape (%llu bytes expected)",
                f->path, name, (long long)b, (long long)e, (unsigned long long)data_len,
                (unsigned long long)(count * elem));
        return AF_EPARSE;
    }
    t->name = af_xstrdup(name);
    t->data = base + b;
    t->nbytes = (uint64_t)(e - b);
    f->n++;
    return AF_OK;
}

static int parse_header(struct st_file *f, char *err, size_t errlen)
{
    uint64_t hlen;
    if (f->size < 8) {
        af_errf(err, errlen, "%s: %zu bytes is too short for a safetensors file", f->path, f->size);
        return AF_EPARSE;
    }
    memcpy(&hlen, f->map, 8);
    if (hlen > ST_MAX_HEADER || hlen > f->size - 8) {
        af_errf(err, errlen, "%s: header length %llu at offset 0 exceeds the file (%zu bytes)",
                f->path, (unsigned long long)hlen, f->size);
        return AF_EPARSE;
    }
    json_error_t je;
    json_t *h = json_loadb((const char *)f->map + 8, (size_t)hlen, 0, &je);
    if (!json_is_object(h)) {
        af_errf(err, errlen, "%s: header JSON at byte %d: %s", f->path, je.position + 8,
                h ? "not an object" : je.text);
        json_decref(h);
        return AF_EPARSE;
    }
    const uint8_t *base = (const uint8_t *)f->map + 8 + hlen;
    uint64_t data_len = f->size - 8 - hlen;
    f->t = af_xcalloc(json_object_size(h) + 1, sizeof *f->t);
    const char *name;
    json_t *v;
    int rc = AF_OK;
    json_object_foreach(h, name, v)
    {
        if (!strcmp(name, "__metadata__"))
            continue;
        if ((rc = parse_tensor(f, name, v, base, data_len, err, errlen)))
            break;
    }
    json_decref(h);
    if (rc)
        return rc;
    struct st_tensor *sorted = af_xmalloc((f->n + 1) * sizeof *sorted);
    memcpy(sorted, f->t, f->n * sizeof *sorted);
    qsort(sorted, f->n, sizeof *sorted, by_offset);
    for (size_t i = 1; i < f->n && rc == AF_OK; i++)
        if ((const uint8_t *)sorted[i - 1].data + sorted[i - 1].nbytes >
            (const uint8_t *)sorted[i].data) {
            af_errf(err, errlen, "%s: tensors '%s' and '%s' overlap", f->path, sorted[i - 1].name,
                    sorted[i].name);
            rc = AF_EPARSE;
        }
    free(sorted);
    return rc;
}

int st_open(const char *path, struct st_file **out, char *err, size_t errlen)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        af_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return AF_ENOTFOUND;
    }
    struct st_file *f = af_xcalloc(1, sizeof *f);
    f->path = af_xstrdup(path);
    f->size = (size_t)sb.st_size;
    f->map = f->size ? mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        af_errf(err, errlen, "%s: cannot map %zu bytes", path, f->size);
        st_close(f);
        return AF_EIO;
    }
    int rc = parse_header(f, err, errlen);
    if (rc) {
        st_close(f);
        return rc;
    }
    *out = f;
    return AF_OK;
}

void st_file_mapping(const struct st_file *f, const void **base, size_t *size)
{
    *base = f->map;
    *size = f->map ? f->size : 0;
}

void st_close(struct st_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++)
        free(f->t[i].name);
    free(f->t);
    if (f->map)
        munmap(f->map, f->size);
    free(f->path);
    free(f);
}

size_t st_n_tensors(const struct st_file *f)
{
    return f->n;
}

const struct st_tensor *st_tensor_at(const struct st_file *f, size_t i)
{
    return i < f->n ? &f->t[i] : NULL;
}

const struct st_tensor *st_find(const struct st_file *f, const char *name)
{
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name))
            return &f->t[i];
    return NULL;
}
