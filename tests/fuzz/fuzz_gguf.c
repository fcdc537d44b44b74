/*
 * fuzz_gguf.c - libFuzzer target for the GGUF reader (engine/gguf.h).
 *
 * Each input is opened as a whole file from a heap copy of exactly its size (so ASan sees any
 * read past the end). A failure must come with a message naming the file and an offset; a
 * success is walked completely: every KV through the typed getters and the array accessors,
 * every tensor's data touched at both ends, each lookup by name finding the same entry. The
 * values found must lie inside the buffer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void inside(const void *p, uint64_t n, const uint8_t *lo, size_t size)
{
    const uint8_t *q = p;
    if (n == 0)
        return;
    if (q < lo || q > lo + size || n > (uint64_t)(lo + size - q))
        abort();
}

static void walk_kv(const struct gguf_file *g, const struct gguf_kv *kv, const uint8_t *buf,
                    size_t size)
{
    char key[256], err[256];
    size_t kn = kv->key.n < sizeof key - 1 ? (size_t)kv->key.n : sizeof key - 1;
    memcpy(key, kv->key.s, kn);
    key[kn] = '\0';
    inside(kv->key.s, kv->key.n, buf, size);
    inside(kv->data, kv->nbytes, buf, size);
    if (kn == kv->key.n && !memchr(key, '\0', kn) && gguf_find_kv(g, key) != kv)
        abort();
    uint64_t u;
    uint32_t u32;
    int64_t s;
    float f;
    int b;
    struct gguf_str str;
    (void)gguf_get_u64(g, key, &u, err, sizeof err);
    (void)gguf_get_u32(g, key, &u32, err, sizeof err);
    (void)gguf_get_i64(g, key, &s, err, sizeof err);
    (void)gguf_get_f32(g, key, &f, err, sizeof err);
    (void)gguf_get_bool(g, key, &b, err, sizeof err);
    if (gguf_get_str(g, key, &str, err, sizeof err) == AF_OK)
        inside(str.s, str.n, buf, size);
    free(gguf_get_strdup(g, key));
    if (kv->type != GGUF_ARRAY)
        return;
    volatile double acc = 0;
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        if (kv->arr_type == GGUF_STRING) {
            struct gguf_str e = gguf_arr_str(kv, i);
            inside(e.s, e.n, buf, size);
            if (e.n)
                acc += (unsigned char)e.s[e.n - 1];
        } else {
            acc += gguf_arr_f64(kv, i);
            acc += (double)gguf_arr_i64(kv, i);
        }
    }
    (void)acc;
}

static void walk(const struct gguf_file *g, const uint8_t *buf, size_t size)
{
    if (gguf_version(g) != 2 && gguf_version(g) != 3)
        abort();
    uint32_t a = gguf_alignment(g);
    if (a == 0 || (a & (a - 1)) != 0 || gguf_file_size(g) != size)
        abort();
    for (uint64_t i = 0; i < gguf_n_kv(g); i++)
        walk_kv(g, gguf_kv_at(g, i), buf, size);
    volatile uint8_t acc = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        inside(t->name.s, t->name.n, buf, size);
        inside(t->data, t->nbytes, buf, size);
        if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS || t->offset % a != 0)
            abort();
        if (t->nbytes) {
            const uint8_t *d = t->data;
            acc ^= d[0];
            acc ^= d[t->nbytes - 1];
        }
        char name[256];
        if (t->name.n < sizeof name && !memchr(t->name.s, '\0', (size_t)t->name.n)) {
            memcpy(name, t->name.s, (size_t)t->name.n);
            name[t->name.n] = '\0';
            if (gguf_find_tensor(g, name) != t)
                abort();
        }
    }
    (void)acc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    if (size)
        memcpy(copy, data, size);
    struct gguf_file *g = NULL;
    char err[512];
    int rc = gguf_open_mem(copy, size, "fuzz.gguf", &g, err, sizeof err);
    if (rc != AF_OK) {
        if (g || rc != AF_EPARSE || strncmp(err, "fuzz.gguf: ", 11) != 0 ||
            !strstr(err, "offset 0x"))
            abort();
    } else {
        walk(g, copy, size);
        gguf_close(g);
    }
    free(copy);
    return 0;
}
