/*
 * gguf.c - the strict GGUF reader: maps a file (or takes a buffer), validates every byte of
 * the header, the key/value section and the tensor infos, and exposes them as views.
 *
 * Parsing is one forward pass with a bounds-checked cursor; no count is trusted before it is
 * compared with the bytes that remain, so no allocation is larger than a small multiple of the
 * file. String arrays get their offset table here, so gguf_arr_str is O(1). Keys and tensor
 * names are also sorted once (index arrays) for duplicate detection and O(log n) lookups.
 * Nested arrays (an array whose element type is GGUF_ARRAY) are rejected: no known producer
 * writes them and llama.cpp does not read them.
 */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/errf.h"
#include "core/xalloc.h"
#include "engine/gguf.h"
#include "engine/quant.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c reads little-endian values with memcpy: port rd_u32/rd_u64 first"
#endif

#define GGUF_MAX_KEY_LEN 65535u  /* the spec's limit on key length */
#define GGUF_MAX_NAME_LEN 65535u /* tensor names (ggml itself keeps 64) */
#define GGUF_MIN_KV_BYTES 14u    /* key len 8 + key 1 + type 4 + value 1 */
#define GGUF_MIN_TI_BYTES 33u    /* name len 8 + name 1 + n_dims 4 + ne 8 + type 4 + offset 8 */
#define GGUF_MAX_ALIGNMENT (1u << 30)

struct gguf_file {
    char *name; /* path or the caller's name; owned */
    const uint8_t *base;
    size_t size;
    int mapped;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_off; /* file offset of the data section */
    uint64_t n_kv;
    struct gguf_kv *kvs;
    const struct gguf_kv **kv_sorted; /* by key */
    uint64_t n_tensors;
    struct gguf_tensor *tensors;
    const struct gguf_tensor **t_sorted; /* by name */
};

/* The parse cursor and the error sink. */
struct rd {
    const uint8_t *p;
    size_t size;
    size_t off;
    const char *name;
    char *err;
    size_t errlen;
};

static const size_t vtype_size[GGUF_NVTYPES] = {
    [GGUF_UINT8] = 1,  [GGUF_INT8] = 1,    [GGUF_UINT16] = 2,  [GGUF_INT16] = 2,  [GGUF_UINT32] = 4,
    [GGUF_INT32] = 4,  [GGUF_FLOAT32] = 4, [GGUF_BOOL] = 1,    [GGUF_STRING] = 0, [GGUF_ARRAY] = 0,
    [GGUF_UINT64] = 8, [GGUF_INT64] = 8,   [GGUF_FLOAT64] = 8,
};

static const char *const vtype_names[GGUF_NVTYPES] = {
    "uint8", "int8",   "uint16", "int16",  "uint32", "int32",   "float32",
    "bool",  "string", "array",  "uint64", "int64",  "float64",
};

static const char *vtype_name(uint32_t t)
{
    return t < GGUF_NVTYPES ? vtype_names[t] : "?";
}

/* Copies a key or name into `dst` for a message: at most 80 bytes, non-printables as '?'. */
static void show_name(char *dst, size_t cap, const char *s, uint64_t n)
{
    size_t k = 0;
    for (uint64_t i = 0; i < n && k + 4 < cap && i < 80; i++) {
        unsigned char c = (unsigned char)s[i];
        dst[k++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (n > 80 && k + 4 < cap) {
        memcpy(dst + k, "...", 3);
        k += 3;
    }
    dst[k] = '\0';
}

/* "NAME: CTX at offset 0xAT: MESSAGE". Returns AF_EPARSE. */
static int fail(const struct rd *r, const char *ctx, size_t at, const char *fmt, ...)
    AF_PRINTF(4, 5);
static int fail(const struct rd *r, const char *ctx, size_t at, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    af_errf(r->err, r->errlen, "%s: %s at offset 0x%zx: %s", r->name, ctx, at, msg);
    return AF_EPARSE;
}

static size_t rd_left(const struct rd *r)
{
    return r->size - r->off;
}

static int rd_u32(struct rd *r, uint32_t *v)
{
    if (rd_left(r) < 4)
        return -1;
    memcpy(v, r->p + r->off, 4);
    r->off += 4;
    return 0;
}

static int rd_u64(struct rd *r, uint64_t *v)
{
    if (rd_left(r) < 8)
        return -1;
    memcpy(v, r->p + r->off, 8);
    r->off += 8;
    return 0;
}

/* Reads a GGUF string (uint64 length + bytes) of at most `max` bytes. `what` names it. */
static int rd_str(struct rd *r, struct gguf_str *s, uint64_t max, const char *ctx, const char *what)
{
    size_t at = r->off;
    uint64_t n;
    if (rd_u64(r, &n))
        return fail(r, ctx, at, "%s length truncated (file size %zu)", what, r->size);
    if (n > rd_left(r))
        return fail(r, ctx, at, "%s length %" PRIu64 " past the end of the file (size %zu)", what,
                    n, r->size);
    if (n > max)
        return fail(r, ctx, at, "%s length %" PRIu64 " over the limit %" PRIu64, what, n, max);
    s->s = (const char *)(r->p + r->off);
    s->n = n;
    r->off += (size_t)n;
    return AF_OK;
}

static int str_cmp(struct gguf_str a, const char *b, size_t bn)
{
    size_t n = a.n < bn ? (size_t)a.n : bn;
    int c = n ? memcmp(a.s, b, n) : 0;
    if (c)
        return c;
    return a.n < bn ? -1 : a.n > bn ? 1 : 0;
}

int gguf_str_eq(struct gguf_str a, const char *b)
{
    return b && str_cmp(a, b, strlen(b)) == 0;
}

/* The elements of a string array: builds kv->str_off in one pass. */
static int parse_str_array(struct rd *r, struct gguf_kv *kv, const char *ctx)
{
    if (kv->arr_n > rd_left(r) / 8)
        return fail(r, ctx, r->off,
                    "string array count %" PRIu64 " cannot fit in the %zu bytes left", kv->arr_n,
                    rd_left(r));
    size_t start = r->off;
    uint64_t *offs = kv->arr_n ? af_xmalloc((size_t)kv->arr_n * sizeof *offs) : NULL;
    kv->str_off = offs;
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        size_t at = r->off;
        uint64_t n;
        if (rd_u64(r, &n))
            return fail(r, ctx, at, "string %" PRIu64 " of %" PRIu64 " truncated", i, kv->arr_n);
        if (n > rd_left(r))
            return fail(r, ctx, at,
                        "string %" PRIu64 " length %" PRIu64 " past the end of the file (size %zu)",
                        i, n, r->size);
        offs[i] = at - start;
        r->off += (size_t)n;
    }
    kv->nbytes = r->off - start;
    return AF_OK;
}

static int parse_array(struct rd *r, struct gguf_kv *kv, const char *ctx)
{
    size_t at = r->off;
    uint32_t et;
    uint64_t n;
    if (rd_u32(r, &et) || rd_u64(r, &n))
        return fail(r, ctx, at, "array header truncated (file size %zu)", r->size);
    if (et >= GGUF_NVTYPES)
        return fail(r, ctx, at, "unknown array element type %" PRIu32, et);
    if (et == GGUF_ARRAY)
        return fail(r, ctx, at, "nested arrays are not supported");
    kv->arr_type = (enum gguf_vtype)et;
    kv->arr_n = n;
    kv->data = r->p + r->off;
    if (et == GGUF_STRING)
        return parse_str_array(r, kv, ctx);
    size_t es = vtype_size[et];
    if (n > rd_left(r) / es)
        return fail(r, ctx, at,
                    "array of %" PRIu64 " %s past the end of the file (size %zu, %zu bytes left)",
                    n, vtype_name(et), r->size, rd_left(r));
    kv->nbytes = n * es;
    r->off += (size_t)kv->nbytes;
    return AF_OK;
}

static int parse_kv(struct rd *r, struct gguf_kv *kv, uint64_t idx)
{
    char ctx[128];
    snprintf(ctx, sizeof ctx, "key %" PRIu64, idx);
    size_t at = r->off;
    int rc = rd_str(r, &kv->key, GGUF_MAX_KEY_LEN, ctx, "key");
    if (rc)
        return rc;
    if (kv->key.n == 0)
        return fail(r, ctx, at, "empty key");
    char shown[96];
    show_name(shown, sizeof shown, kv->key.s, kv->key.n);
    snprintf(ctx, sizeof ctx, "key '%s'", shown);
    size_t tat = r->off;
    uint32_t t;
    if (rd_u32(r, &t))
        return fail(r, ctx, tat, "value type truncated (file size %zu)", r->size);
    if (t >= GGUF_NVTYPES)
        return fail(r, ctx, tat, "unknown value type %" PRIu32, t);
    kv->type = (enum gguf_vtype)t;
    if (t == GGUF_ARRAY)
        return parse_array(r, kv, ctx);
    kv->data = r->p + r->off;
    if (t == GGUF_STRING) {
        struct gguf_str s;
        size_t vat = r->off;
        rc = rd_str(r, &s, UINT64_MAX, ctx, "string value");
        kv->nbytes = r->off - vat;
        return rc;
    }
    if (rd_left(r) < vtype_size[t])
        return fail(r, ctx, r->off, "%s value truncated (file size %zu)", vtype_name(t), r->size);
    kv->nbytes = vtype_size[t];
    r->off += vtype_size[t];
    return AF_OK;
}

static int cmp_kv_ptr(const void *a, const void *b)
{
    const struct gguf_kv *x = *(const struct gguf_kv *const *)a;
    const struct gguf_kv *y = *(const struct gguf_kv *const *)b;
    return str_cmp(x->key, y->key.s, (size_t)y->key.n);
}

static int cmp_t_ptr(const void *a, const void *b)
{
    const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a;
    const struct gguf_tensor *y = *(const struct gguf_tensor *const *)b;
    return str_cmp(x->name, y->name.s, (size_t)y->name.n);
}

/* Reads the KV section, sorts the keys, rejects duplicates and reads general.alignment. */
static int parse_kvs(struct rd *r, struct gguf_file *g)
{
    g->kvs = af_xcalloc(g->n_kv ? (size_t)g->n_kv : 1, sizeof *g->kvs);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        int rc = parse_kv(r, &g->kvs[i], i);
        if (rc)
            return rc;
    }
    g->kv_sorted = af_xmalloc((g->n_kv ? (size_t)g->n_kv : 1) * sizeof *g->kv_sorted);
    for (uint64_t i = 0; i < g->n_kv; i++)
        g->kv_sorted[i] = &g->kvs[i];
    qsort(g->kv_sorted, (size_t)g->n_kv, sizeof *g->kv_sorted, cmp_kv_ptr);
    for (uint64_t i = 1; i < g->n_kv; i++) {
        const struct gguf_kv *a = g->kv_sorted[i - 1], *b = g->kv_sorted[i];
        if (cmp_kv_ptr(&g->kv_sorted[i - 1], &g->kv_sorted[i]) == 0) {
            const struct gguf_kv *later = a > b ? a : b;
            char shown[96], ctx[128];
            show_name(shown, sizeof shown, later->key.s, later->key.n);
            snprintf(ctx, sizeof ctx, "key '%s'", shown);
            return fail(r, ctx, (size_t)((const uint8_t *)later->key.s - 8 - r->p),
                        "duplicate key");
        }
    }
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const struct gguf_kv *al = gguf_find_kv(g, "general.alignment");
    if (al) {
        size_t at = (size_t)((const uint8_t *)al->key.s - 8 - r->p);
        if (al->type != GGUF_UINT32)
            return fail(r, "key 'general.alignment'", at, "type %s, want uint32",
                        vtype_name(al->type));
        uint32_t a;
        memcpy(&a, al->data, 4);
        if (a == 0 || (a & (a - 1)) != 0 || a > GGUF_MAX_ALIGNMENT)
            return fail(r, "key 'general.alignment'", at,
                        "alignment %" PRIu32 " is not a power of two in [1, 2^30]", a);
        g->alignment = a;
    }
    return AF_OK;
}

/* Reads one tensor info (no cross-tensor checks yet). */
static int parse_tinfo(struct rd *r, struct gguf_tensor *t, uint64_t idx)
{
    char ctx[128];
    snprintf(ctx, sizeof ctx, "tensor %" PRIu64, idx);
    size_t at = r->off;
    int rc = rd_str(r, &t->name, GGUF_MAX_NAME_LEN, ctx, "name");
    if (rc)
        return rc;
    if (t->name.n == 0)
        return fail(r, ctx, at, "empty tensor name");
    char shown[96];
    show_name(shown, sizeof shown, t->name.s, t->name.n);
    snprintf(ctx, sizeof ctx, "tensor '%s'", shown);
    if (rd_u32(r, &t->n_dims))
        return fail(r, ctx, at, "n_dims truncated (file size %zu)", r->size);
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return fail(r, ctx, at, "n_dims %" PRIu32 " not in 1..%d", t->n_dims, GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1;
        if (d < t->n_dims && rd_u64(r, &ne))
            return fail(r, ctx, at, "ne[%" PRIu32 "] truncated (file size %zu)", d, r->size);
        if (ne > (uint64_t)INT64_MAX)
            return fail(r, ctx, at, "ne[%" PRIu32 "] = %" PRId64 " is negative", d, (int64_t)ne);
        t->ne[d] = (int64_t)ne;
    }
    if (rd_u32(r, &t->type) || rd_u64(r, &t->offset))
        return fail(r, ctx, at, "type/offset truncated (file size %zu)", r->size);
    return AF_OK;
}

/* Type, shape and size of one tensor, and its data range in the file. */
static int check_tensor(const struct rd *r, const struct gguf_file *g, struct gguf_tensor *t,
                        size_t at)
{
    char shown[96], ctx[128];
    show_name(shown, sizeof shown, t->name.s, t->name.n);
    snprintf(ctx, sizeof ctx, "tensor '%s'", shown);
    if (t->type >= GGML_TYPE_COUNT || strcmp(quant_type_name(t->type), "?") == 0)
        return fail(r, ctx, at, "unknown tensor type %" PRIu32, t->type);
    if (!quant_type_supported(t->type))
        return fail(r, ctx, at,
                    "tensor type %s (%" PRIu32 ") is not supported: the engine reads %s (the "
                    "Q4_K_M, Q5_K_M, Q6_K and Q8_0 files among them); `agentflow model quantize` "
                    "makes one from an F16, BF16 or F32 GGUF",
                    quant_type_name(t->type), t->type, quant_supported_names());
    int64_t blk = quant_block_elems(t->type);
    if (t->ne[0] % blk != 0)
        return fail(r, ctx, at,
                    "ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRId64, t->ne[0],
                    quant_type_name(t->type), blk);
    int64_t nel = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        if (__builtin_mul_overflow(nel, t->ne[d], &nel))
            return fail(r, ctx, at, "element count overflows int64");
    uint64_t nb = (uint64_t)(t->ne[0] / blk) * quant_block_bytes(t->type);
    for (int d = 1; d < GGUF_MAX_DIMS; d++)
        if (__builtin_mul_overflow(nb, (uint64_t)t->ne[d], &nb))
            return fail(r, ctx, at, "byte size overflows uint64");
    t->nbytes = nb;
    if (t->offset % g->alignment != 0)
        return fail(r, ctx, at,
                    "data offset 0x%" PRIx64 " is not a multiple of the alignment %" PRIu32,
                    t->offset, g->alignment);
    uint64_t start, end;
    if (__builtin_add_overflow(g->data_off, t->offset, &start))
        return fail(r, ctx, at, "data offset 0x%" PRIx64 " past the end of the file (size %zu)",
                    t->offset, g->size);
    if (__builtin_add_overflow(start, nb, &end) || end > g->size)
        return fail(r, ctx, at,
                    "data [0x%" PRIx64 ", 0x%" PRIx64 " + %" PRIu64
                    ") past the end of the file (size %zu)",
                    start, start, nb, g->size);
    t->data = g->base + start;
    return AF_OK;
}

static int cmp_t_off(const void *a, const void *b)
{
    const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a;
    const struct gguf_tensor *y = *(const struct gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset ? 1 : (x > y) - (x < y);
}

/* Duplicate names and overlapping data. `at[i]` is the file offset of tensor i's info. */
static int check_tensor_set(const struct rd *r, struct gguf_file *g, const size_t *at)
{
    size_t n = (size_t)g->n_tensors;
    g->t_sorted = af_xmalloc((n ? n : 1) * sizeof *g->t_sorted);
    for (size_t i = 0; i < n; i++)
        g->t_sorted[i] = &g->tensors[i];
    qsort(g->t_sorted, n, sizeof *g->t_sorted, cmp_t_ptr);
    char shown[96], ctx[128];
    for (size_t i = 1; i < n; i++) {
        if (cmp_t_ptr(&g->t_sorted[i - 1], &g->t_sorted[i]) != 0)
            continue;
        const struct gguf_tensor *later =
            g->t_sorted[i - 1] > g->t_sorted[i] ? g->t_sorted[i - 1] : g->t_sorted[i];
        show_name(shown, sizeof shown, later->name.s, later->name.n);
        snprintf(ctx, sizeof ctx, "tensor '%s'", shown);
        return fail(r, ctx, at[later - g->tensors], "duplicate tensor name");
    }
    const struct gguf_tensor **by_off = af_xmalloc((n ? n : 1) * sizeof *by_off);
    memcpy(by_off, g->t_sorted, n * sizeof *by_off);
    qsort(by_off, n, sizeof *by_off, cmp_t_off);
    int rc = AF_OK;
    const struct gguf_tensor *prev = NULL;
    for (size_t i = 0; i < n && rc == AF_OK; i++) {
        const struct gguf_tensor *t = by_off[i];
        if (t->nbytes == 0)
            continue;
        if (prev && prev->offset + prev->nbytes > t->offset) {
            char other[96];
            show_name(shown, sizeof shown, t->name.s, t->name.n);
            show_name(other, sizeof other, prev->name.s, prev->name.n);
            snprintf(ctx, sizeof ctx, "tensor '%s'", shown);
            uint64_t base = g->data_off;
            rc = fail(r, ctx, at[t - g->tensors],
                      "data [0x%" PRIx64 ", 0x%" PRIx64 ") overlaps tensor '%s' [0x%" PRIx64
                      ", 0x%" PRIx64 ")",
                      base + t->offset, base + t->offset + t->nbytes, other, base + prev->offset,
                      base + prev->offset + prev->nbytes);
        }
        prev = t;
    }
    free(by_off);
    return rc;
}

static int parse_tensors(struct rd *r, struct gguf_file *g)
{
    size_t n = (size_t)g->n_tensors;
    g->tensors = af_xcalloc(n ? n : 1, sizeof *g->tensors);
    size_t *at = af_xmalloc((n ? n : 1) * sizeof *at);
    int rc = AF_OK;
    for (size_t i = 0; i < n && rc == AF_OK; i++) {
        at[i] = r->off;
        rc = parse_tinfo(r, &g->tensors[i], i);
    }
    if (rc == AF_OK) {
        uint64_t a = g->alignment;
        g->data_off = ((uint64_t)r->off + a - 1) / a * a;
        for (size_t i = 0; i < n && rc == AF_OK; i++)
            rc = check_tensor(r, g, &g->tensors[i], at[i]);
    }
    if (rc == AF_OK)
        rc = check_tensor_set(r, g, at);
    free(at);
    return rc;
}

static int parse_header(struct rd *r, struct gguf_file *g)
{
    if (r->size < 4 || memcmp(r->p, "GGUF", 4) != 0) {
        char got[16] = "";
        for (size_t i = 0; i < 4 && i < r->size; i++)
            snprintf(got + 2 * i, sizeof got - 2 * i, "%02x", r->p[i]);
        return fail(r, "header", 0, "bad magic (got '%s', want 47475546 \"GGUF\")", got);
    }
    r->off = 4;
    if (rd_u32(r, &g->version))
        return fail(r, "header", 4, "version truncated (file size %zu)", r->size);
    if (g->version != 2 && g->version != 3)
        return fail(r, "header", 4, "unsupported GGUF version %" PRIu32 " (want 2 or 3)",
                    g->version);
    if (rd_u64(r, &g->n_tensors) || rd_u64(r, &g->n_kv))
        return fail(r, "header", 8, "counts truncated (file size %zu)", r->size);
    size_t left = rd_left(r);
    if (g->n_tensors > left / GGUF_MIN_TI_BYTES)
        return fail(r, "header", 8, "n_tensors %" PRIu64 " cannot fit in the %zu bytes left",
                    g->n_tensors, left);
    if (g->n_kv > left / GGUF_MIN_KV_BYTES ||
        g->n_kv * GGUF_MIN_KV_BYTES + g->n_tensors * GGUF_MIN_TI_BYTES > left)
        return fail(r, "header", 16, "n_kv %" PRIu64 " cannot fit in the %zu bytes left", g->n_kv,
                    left);
    return AF_OK;
}

int gguf_open_mem(const void *data, size_t len, const char *name, struct gguf_file **out, char *err,
                  size_t errlen)
{
    *out = NULL;
    if (!name)
        name = "<memory>";
    if (!data && len) {
        af_errf(err, errlen, "%s: no buffer", name);
        return AF_EINVAL;
    }
    struct gguf_file *g = af_xcalloc(1, sizeof *g);
    g->name = af_xstrdup(name);
    g->base = data;
    g->size = len;
    struct rd r = {.p = data, .size = len, .name = g->name, .err = err, .errlen = errlen};
    int rc = parse_header(&r, g);
    if (rc == AF_OK)
        rc = parse_kvs(&r, g);
    if (rc == AF_OK)
        rc = parse_tensors(&r, g);
    if (rc != AF_OK) {
        gguf_close(g);
        return rc;
    }
    *out = g;
    return AF_OK;
}

int gguf_open(const char *path, struct gguf_file **out, char *err, size_t errlen)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        af_errf(err, errlen, "%s: open: %s", path, strerror(e));
        return e == ENOENT ? AF_ENOTFOUND : AF_EIO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        af_errf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return AF_EIO;
    }
    size_t size = (size_t)st.st_size;
    void *map = NULL;
    if (size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            af_errf(err, errlen, "%s: mmap %zu bytes: %s", path, size, strerror(errno));
            close(fd);
            return AF_EIO;
        }
    }
    close(fd);
    static const uint8_t empty[1];
    int rc = gguf_open_mem(map ? map : empty, size, path, out, err, errlen);
    if (rc != AF_OK) {
        if (map)
            munmap(map, size);
        return rc;
    }
    (*out)->mapped = map != NULL;
    return AF_OK;
}

void gguf_close(struct gguf_file *g)
{
    if (!g)
        return;
    if (g->mapped)
        munmap((void *)(uintptr_t)g->base, g->size);
    if (g->kvs)
        for (uint64_t i = 0; i < g->n_kv; i++)
            free((void *)(uintptr_t)g->kvs[i].str_off);
    free(g->kvs);
    free(g->kv_sorted);
    free(g->tensors);
    free(g->t_sorted);
    free(g->name);
    free(g);
}

const char *gguf_path(const struct gguf_file *g)
{
    return g->name;
}

int gguf_file_mapping(const struct gguf_file *g, const void **base, size_t *size)
{
    *base = g->base;
    *size = g->size;
    return g->mapped;
}

uint32_t gguf_version(const struct gguf_file *g)
{
    return g->version;
}

uint32_t gguf_alignment(const struct gguf_file *g)
{
    return g->alignment;
}

uint64_t gguf_file_size(const struct gguf_file *g)
{
    return g->size;
}

uint64_t gguf_n_kv(const struct gguf_file *g)
{
    return g->n_kv;
}

const struct gguf_kv *gguf_kv_at(const struct gguf_file *g, uint64_t i)
{
    return i < g->n_kv ? &g->kvs[i] : NULL;
}

const struct gguf_kv *gguf_find_kv(const struct gguf_file *g, const char *key)
{
    if (!g->kv_sorted || !key)
        return NULL;
    size_t kn = strlen(key), lo = 0, hi = (size_t)g->n_kv;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = str_cmp(g->kv_sorted[mid]->key, key, kn);
        if (c == 0)
            return g->kv_sorted[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

uint64_t gguf_n_tensors(const struct gguf_file *g)
{
    return g->n_tensors;
}

const struct gguf_tensor *gguf_tensor_at(const struct gguf_file *g, uint64_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *g, const char *name)
{
    if (!g->t_sorted || !name)
        return NULL;
    size_t kn = strlen(name), lo = 0, hi = (size_t)g->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = str_cmp(g->t_sorted[mid]->name, name, kn);
        if (c == 0)
            return g->t_sorted[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* --- Values --------------------------------------------------------------------------- */

/* Reads a scalar of numeric type t at p. Sets exactly one of *u (unsigned), *s (signed) or
 * *f (float) and returns 'u', 's' or 'f'; 0 for a non-numeric type. */
static int rd_num(enum gguf_vtype t, const uint8_t *p, uint64_t *u, int64_t *s, double *f)
{
    switch (t) {
    case GGUF_UINT8:
    case GGUF_BOOL:
        *u = p[0];
        return 'u';
    case GGUF_INT8:
        *s = (int8_t)p[0];
        return 's';
    case GGUF_UINT16: {
        uint16_t v;
        memcpy(&v, p, 2);
        *u = v;
        return 'u';
    }
    case GGUF_INT16: {
        int16_t v;
        memcpy(&v, p, 2);
        *s = v;
        return 's';
    }
    case GGUF_UINT32: {
        uint32_t v;
        memcpy(&v, p, 4);
        *u = v;
        return 'u';
    }
    case GGUF_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        *s = v;
        return 's';
    }
    case GGUF_UINT64:
        memcpy(u, p, 8);
        return 'u';
    case GGUF_INT64:
        memcpy(s, p, 8);
        return 's';
    case GGUF_FLOAT32: {
        float v;
        memcpy(&v, p, 4);
        *f = (double)v;
        return 'f';
    }
    case GGUF_FLOAT64:
        memcpy(f, p, 8);
        return 'f';
    default:
        return 0;
    }
}

static int kv_lookup(const struct gguf_file *g, const char *key, const struct gguf_kv **kv,
                     char *err, size_t errlen)
{
    *kv = gguf_find_kv(g, key);
    if (!*kv) {
        af_errf(err, errlen, "%s: key '%s' not found", g->name, key);
        return AF_ENOTFOUND;
    }
    return AF_OK;
}

static int bad_type(const struct gguf_file *g, const struct gguf_kv *kv, const char *want,
                    char *err, size_t errlen)
{
    char shown[96];
    show_name(shown, sizeof shown, kv->key.s, kv->key.n);
    af_errf(err, errlen, "%s: key '%s' at offset 0x%zx: is %s%s%s, want %s", g->name, shown,
            (size_t)((const uint8_t *)kv->key.s - 8 - g->base), vtype_name(kv->type),
            kv->type == GGUF_ARRAY ? " of " : "",
            kv->type == GGUF_ARRAY ? vtype_name(kv->arr_type) : "", want);
    return AF_EPARSE;
}

/* An integer value of kv as (neg, magnitude-ish): returns 0 and sets *u / *s, with *is_neg. */
static int kv_int(const struct gguf_kv *kv, uint64_t *u, int64_t *s, int *is_signed)
{
    double f;
    if (kv->type == GGUF_ARRAY || kv->type == GGUF_STRING)
        return -1;
    int k = rd_num(kv->type, kv->data, u, s, &f);
    if (k != 'u' && k != 's')
        return -1;
    *is_signed = k == 's';
    return 0;
}

int gguf_get_u64(const struct gguf_file *g, const char *key, uint64_t *out, char *err,
                 size_t errlen)
{
    const struct gguf_kv *kv;
    int rc = kv_lookup(g, key, &kv, err, errlen), sg;
    if (rc)
        return rc;
    uint64_t u = 0;
    int64_t s = 0;
    if (kv_int(kv, &u, &s, &sg) || (sg && s < 0))
        return bad_type(g, kv, "a non-negative integer", err, errlen);
    *out = sg ? (uint64_t)s : u;
    return AF_OK;
}

int gguf_get_u32(const struct gguf_file *g, const char *key, uint32_t *out, char *err,
                 size_t errlen)
{
    uint64_t v;
    int rc = gguf_get_u64(g, key, &v, err, errlen);
    if (rc)
        return rc;
    if (v > UINT32_MAX)
        return bad_type(g, gguf_find_kv(g, key), "an integer in uint32 range", err, errlen);
    *out = (uint32_t)v;
    return AF_OK;
}

int gguf_get_i64(const struct gguf_file *g, const char *key, int64_t *out, char *err, size_t errlen)
{
    const struct gguf_kv *kv;
    int rc = kv_lookup(g, key, &kv, err, errlen), sg;
    if (rc)
        return rc;
    uint64_t u = 0;
    int64_t s = 0;
    if (kv_int(kv, &u, &s, &sg) || (!sg && u > (uint64_t)INT64_MAX))
        return bad_type(g, kv, "an integer in int64 range", err, errlen);
    *out = sg ? s : (int64_t)u;
    return AF_OK;
}

int gguf_get_f32(const struct gguf_file *g, const char *key, float *out, char *err, size_t errlen)
{
    const struct gguf_kv *kv;
    int rc = kv_lookup(g, key, &kv, err, errlen);
    if (rc)
        return rc;
    uint64_t u = 0;
    int64_t s = 0;
    double f = 0;
    int k = (kv->type == GGUF_ARRAY || kv->type == GGUF_STRING || kv->type == GGUF_BOOL)
                ? 0
                : rd_num(kv->type, kv->data, &u, &s, &f);
    if (k == 0 || (k == 'f' && isfinite(f) && (f > (double)FLT_MAX || f < -(double)FLT_MAX)))
        return bad_type(g, kv, "a number in float range", err, errlen);
    *out = k == 'f' ? (float)f : k == 's' ? (float)s : (float)u;
    return AF_OK;
}

int gguf_get_bool(const struct gguf_file *g, const char *key, int *out, char *err, size_t errlen)
{
    const struct gguf_kv *kv;
    int rc = kv_lookup(g, key, &kv, err, errlen), sg;
    if (rc)
        return rc;
    uint64_t u = 0;
    int64_t s = 0;
    if (kv_int(kv, &u, &s, &sg))
        return bad_type(g, kv, "bool", err, errlen);
    *out = sg ? s != 0 : u != 0;
    return AF_OK;
}

int gguf_get_str(const struct gguf_file *g, const char *key, struct gguf_str *out, char *err,
                 size_t errlen)
{
    const struct gguf_kv *kv;
    int rc = kv_lookup(g, key, &kv, err, errlen);
    if (rc)
        return rc;
    if (kv->type != GGUF_STRING)
        return bad_type(g, kv, "string", err, errlen);
    uint64_t n;
    memcpy(&n, kv->data, 8);
    out->s = (const char *)kv->data + 8;
    out->n = n;
    return AF_OK;
}

char *gguf_get_strdup(const struct gguf_file *g, const char *key)
{
    struct gguf_str s = {NULL, 0};
    if (gguf_get_str(g, key, &s, NULL, 0) != AF_OK)
        return NULL;
    return af_xstrndup(s.s, (size_t)s.n);
}

struct gguf_str gguf_arr_str(const struct gguf_kv *kv, uint64_t i)
{
    struct gguf_str s = {"", 0};
    if (kv->type != GGUF_ARRAY || kv->arr_type != GGUF_STRING || i >= kv->arr_n)
        return s;
    const uint8_t *p = kv->data + kv->str_off[i];
    memcpy(&s.n, p, 8);
    s.s = (const char *)p + 8;
    return s;
}

double gguf_arr_f64(const struct gguf_kv *kv, uint64_t i)
{
    if (kv->type != GGUF_ARRAY || i >= kv->arr_n || vtype_size[kv->arr_type] == 0)
        return 0;
    uint64_t u = 0;
    int64_t s = 0;
    double f = 0;
    int k = rd_num(kv->arr_type, kv->data + i * vtype_size[kv->arr_type], &u, &s, &f);
    return k == 'f' ? f : k == 's' ? (double)s : (double)u;
}

int64_t gguf_arr_i64(const struct gguf_kv *kv, uint64_t i)
{
    if (kv->type != GGUF_ARRAY || i >= kv->arr_n || vtype_size[kv->arr_type] == 0)
        return 0;
    uint64_t u = 0;
    int64_t s = 0;
    double f = 0;
    int k = rd_num(kv->arr_type, kv->data + i * vtype_size[kv->arr_type], &u, &s, &f);
    if (k == 'f')
        return (f >= -9.2e18 && f <= 9.2e18) ? (int64_t)f : 0;
    return k == 's' ? s : (int64_t)u;
}
