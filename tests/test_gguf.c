/*
 * test_gguf.c - the GGUF reader and writer (engine/gguf.h): round trips of every value type
 * and of tensors, the reference model and vocabulary files, and hostile inputs (each must fail
 * with AF_EPARSE and a message naming the file and the fault; no prefix of a valid file opens).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fileio.h"
#include "engine/gguf.h"
#include "engine/quant.h"

/* --- Helpers ------------------------------------------------------------------------------ */

static char tmp_dir[64];

static int setup_dir(void **state)
{
    (void)state;
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/af_gguf_XXXXXX");
    return mkdtemp(tmp_dir) ? 0 : -1;
}

static int teardown_dir(void **state)
{
    (void)state;
    DIR *d = opendir(tmp_dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            char p[512];
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(p, sizeof p, "%s/%s", tmp_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(tmp_dir);
    return 0;
}

static void tmp_path(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", tmp_dir, name);
}

/* A growable byte buffer for hand-built files. */
struct bb {
    uint8_t *p;
    size_t n, cap;
};

static void bb_put(struct bb *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void bb_u32(struct bb *b, uint32_t v)
{
    bb_put(b, &v, 4);
}

static void bb_u64(struct bb *b, uint64_t v)
{
    bb_put(b, &v, 8);
}

static void bb_str(struct bb *b, const char *s)
{
    bb_u64(b, strlen(s));
    bb_put(b, s, strlen(s));
}

static void bb_header(struct bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    bb_put(b, "GGUF", 4);
    bb_u32(b, version);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}

static void bb_kv_u32(struct bb *b, const char *key, uint32_t v)
{
    bb_str(b, key);
    bb_u32(b, GGUF_UINT32);
    bb_u32(b, v);
}

static void bb_kv_str(struct bb *b, const char *key, const char *v)
{
    bb_str(b, key);
    bb_u32(b, GGUF_STRING);
    bb_str(b, v);
}

static void bb_tinfo(struct bb *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                     uint32_t type, uint64_t offset)
{
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        bb_u64(b, ne[d]);
    bb_u32(b, type);
    bb_u64(b, offset);
}

static void bb_pad(struct bb *b, size_t align)
{
    static const uint8_t z[64];
    while (b->n % align)
        bb_put(b, z, 1);
}

static void bb_zeros(struct bb *b, size_t n)
{
    uint8_t z[64] = {0};
    while (n) {
        size_t k = n < sizeof z ? n : sizeof z;
        bb_put(b, z, k);
        n -= k;
    }
}

/* Opens `b` from memory as "bad.gguf" and asserts AF_EPARSE with each of the substrings. */
static void expect_fail(const struct bb *b, const char *s1, const char *s2)
{
    struct gguf_file *g = (struct gguf_file *)1;
    char err[512] = "";
    int rc = gguf_open_mem(b->p, b->n, "bad.gguf", &g, err, sizeof err);
    if (rc != AF_EPARSE || strstr(err, "bad.gguf") == NULL || (s1 && !strstr(err, s1)) ||
        (s2 && !strstr(err, s2)))
        print_error("rc %d err '%s' (want '%s' and '%s')\n", rc, err, s1 ? s1 : "", s2 ? s2 : "");
    assert_int_equal(rc, AF_EPARSE);
    assert_null(g);
    assert_non_null(strstr(err, "bad.gguf: "));
    if (s1)
        assert_non_null(strstr(err, s1));
    if (s2)
        assert_non_null(strstr(err, s2));
}

static void expect_ok(const struct bb *b)
{
    struct gguf_file *g = NULL;
    char err[512] = "";
    int rc = gguf_open_mem(b->p, b->n, "ok.gguf", &g, err, sizeof err);
    if (rc != AF_OK)
        print_error("%s\n", err);
    assert_int_equal(rc, AF_OK);
    gguf_close(g);
}

/* --- Round trips -------------------------------------------------------------------------- */

static struct gguf_file *write_and_open(struct gguf_writer *w, const char *name)
{
    char path[256], err[512];
    tmp_path(path, sizeof path, name);
    int rc = gguf_writer_write(w, path, err, sizeof err);
    if (rc)
        print_error("%s\n", err);
    assert_int_equal(rc, AF_OK);
    struct gguf_file *g = NULL;
    rc = gguf_open(path, &g, err, sizeof err);
    if (rc)
        print_error("%s\n", err);
    assert_int_equal(rc, AF_OK);
    assert_string_equal(gguf_path(g), path);
    return g;
}

static void check_getter_errors(const struct gguf_file *g);
static void check_scalar_values(const struct gguf_file *g);

static void test_roundtrip_scalars(void **state)
{
    (void)state;
    struct gguf_writer *w = gguf_writer_new();
    uint8_t u8 = 200;
    int8_t i8 = -100;
    uint16_t u16 = 60000;
    int16_t i16 = -30000;
    int64_t i64 = -5000000000LL;
    double f64 = 3.25e100;
    gguf_writer_set_scalar(w, "t.u8", GGUF_UINT8, &u8);
    gguf_writer_set_scalar(w, "t.i8", GGUF_INT8, &i8);
    gguf_writer_set_scalar(w, "t.u16", GGUF_UINT16, &u16);
    gguf_writer_set_scalar(w, "t.i16", GGUF_INT16, &i16);
    gguf_writer_set_u32(w, "t.u32", 4000000000u);
    gguf_writer_set_i32(w, "t.i32", -2000000000);
    gguf_writer_set_f32(w, "t.f32", 0.5f);
    gguf_writer_set_bool(w, "t.bool", 1);
    gguf_writer_set_str(w, "t.str", "héllo");
    gguf_writer_set_u64(w, "t.u64", 0xfedcba9876543210ull);
    gguf_writer_set_scalar(w, "t.i64", GGUF_INT64, &i64);
    gguf_writer_set_scalar(w, "t.f64", GGUF_FLOAT64, &f64);
    gguf_writer_set_str(w, "t.empty", "");
    gguf_writer_set_u32(w, "t.u32", 7); /* replaced in place: order kept */
    struct gguf_file *g = write_and_open(w, "scalars.gguf");
    gguf_writer_free(w);

    assert_int_equal(gguf_version(g), 3);
    assert_int_equal(gguf_alignment(g), 32);
    assert_int_equal(gguf_n_kv(g), 13);
    assert_int_equal(gguf_n_tensors(g), 0);
    static const char *const order[] = {"t.u8",  "t.i8",  "t.u16",  "t.i16", "t.u32",
                                        "t.i32", "t.f32", "t.bool", "t.str", "t.u64",
                                        "t.i64", "t.f64", "t.empty"};
    static const enum gguf_vtype types[] = {
        GGUF_UINT8, GGUF_INT8,   GGUF_UINT16, GGUF_INT16, GGUF_UINT32,  GGUF_INT32, GGUF_FLOAT32,
        GGUF_BOOL,  GGUF_STRING, GGUF_UINT64, GGUF_INT64, GGUF_FLOAT64, GGUF_STRING};
    for (uint64_t i = 0; i < 13; i++) {
        assert_true(gguf_str_eq(gguf_kv_at(g, i)->key, order[i]));
        assert_int_equal(gguf_kv_at(g, i)->type, types[i]);
        assert_ptr_equal(gguf_find_kv(g, order[i]), gguf_kv_at(g, i));
    }
    assert_null(gguf_kv_at(g, 13));
    assert_null(gguf_find_kv(g, "t.u3"));
    assert_null(gguf_find_kv(g, "t.u320"));
    check_scalar_values(g);
    check_getter_errors(g);
    gguf_close(g);

    /* A float64 in float range reads through the float getter. */
    w = gguf_writer_new();
    f64 = 0.125;
    gguf_writer_set_scalar(w, "d", GGUF_FLOAT64, &f64);
    gguf_writer_set_scalar(w, "bad", GGUF_STRING, "x"); /* not a scalar: ignored */
    g = write_and_open(w, "f64.gguf");
    gguf_writer_free(w);
    assert_int_equal(gguf_n_kv(g), 1);
    char err[256];
    float f = 0;
    assert_int_equal(gguf_get_f32(g, "d", &f, err, sizeof err), AF_OK);
    assert_true(f == 0.125f);
    gguf_close(g);
}

/* The values written by test_roundtrip_scalars, through the typed getters. */
static void check_scalar_values(const struct gguf_file *g)
{
    char err[256];
    uint64_t u = 0;
    uint32_t u32 = 0;
    int64_t s = 0;
    float f = 0;
    int b = 0;
    assert_int_equal(gguf_get_u64(g, "t.u8", &u, err, sizeof err), AF_OK);
    assert_int_equal(u, 200);
    assert_int_equal(gguf_get_i64(g, "t.i8", &s, err, sizeof err), AF_OK);
    assert_int_equal(s, -100);
    assert_int_equal(gguf_get_u32(g, "t.u16", &u32, err, sizeof err), AF_OK);
    assert_int_equal(u32, 60000);
    assert_int_equal(gguf_get_i64(g, "t.i16", &s, err, sizeof err), AF_OK);
    assert_int_equal(s, -30000);
    assert_int_equal(gguf_get_u32(g, "t.u32", &u32, err, sizeof err), AF_OK);
    assert_int_equal(u32, 7);
    assert_int_equal(gguf_get_i64(g, "t.i32", &s, err, sizeof err), AF_OK);
    assert_int_equal(s, -2000000000);
    assert_int_equal(gguf_get_f32(g, "t.f32", &f, err, sizeof err), AF_OK);
    assert_true(f == 0.5f);
    assert_int_equal(gguf_get_bool(g, "t.bool", &b, err, sizeof err), AF_OK);
    assert_int_equal(b, 1);
    assert_int_equal(gguf_get_u64(g, "t.u64", &u, err, sizeof err), AF_OK);
    assert_true(u == 0xfedcba9876543210ull);
    assert_int_equal(gguf_get_i64(g, "t.i64", &s, err, sizeof err), AF_OK);
    assert_true(s == -5000000000LL);
    /* 3.25e100 does not fit a float. */
    assert_int_equal(gguf_get_f32(g, "t.f64", &f, err, sizeof err), AF_EPARSE);
    assert_non_null(strstr(err, "'t.f64'"));
    assert_non_null(strstr(err, "float64"));
    double d;
    memcpy(&d, gguf_find_kv(g, "t.f64")->data, 8);
    assert_true(d == 3.25e100);
    assert_int_equal(gguf_get_f32(g, "t.i32", &f, err, sizeof err), AF_OK);
    assert_true(f == -2000000000.0f);
    struct gguf_str str;
    assert_int_equal(gguf_get_str(g, "t.str", &str, err, sizeof err), AF_OK);
    assert_true(gguf_str_eq(str, "héllo"));
    char *dup = gguf_get_strdup(g, "t.str");
    assert_string_equal(dup, "héllo");
    free(dup);
    dup = gguf_get_strdup(g, "t.empty");
    assert_string_equal(dup, "");
    free(dup);
    assert_null(gguf_get_strdup(g, "t.u8"));
    assert_null(gguf_get_strdup(g, "nope"));
}

/* Type and range errors name the key and its type. */
static void check_getter_errors(const struct gguf_file *g)
{
    char err[256];
    uint64_t u = 0;
    uint32_t u32 = 0;
    int64_t s = 0;
    float f = 0;
    int b = 0;
    struct gguf_str str;
    assert_int_equal(gguf_get_u64(g, "t.i8", &u, err, sizeof err), AF_EPARSE);
    assert_non_null(strstr(err, "t.i8"));
    assert_non_null(strstr(err, "int8"));
    assert_int_equal(gguf_get_u32(g, "t.u64", &u32, err, sizeof err), AF_EPARSE);
    assert_non_null(strstr(err, "'t.u64'"));
    assert_int_equal(gguf_get_i64(g, "t.u64", &s, err, sizeof err), AF_EPARSE);
    assert_int_equal(gguf_get_str(g, "t.u32", &str, err, sizeof err), AF_EPARSE);
    assert_non_null(strstr(err, "uint32"));
    assert_int_equal(gguf_get_u32(g, "t.str", &u32, err, sizeof err), AF_EPARSE);
    assert_non_null(strstr(err, "string"));
    assert_int_equal(gguf_get_f32(g, "t.str", &f, err, sizeof err), AF_EPARSE);
    assert_int_equal(gguf_get_bool(g, "t.str", &b, err, sizeof err), AF_EPARSE);
    assert_int_equal(gguf_get_u32(g, "missing.key", &u32, err, sizeof err), AF_ENOTFOUND);
    assert_non_null(strstr(err, "missing.key"));
    assert_int_equal(gguf_get_bool(g, "t.u8", &b, err, sizeof err), AF_OK);
    assert_int_equal(b, 1);
}

/* copy_kvs round-trips byte for byte. */
static void check_copy_kvs(const struct gguf_file *g)
{
    struct gguf_writer *w2 = gguf_writer_new();
    gguf_writer_copy_kvs(w2, g);
    struct gguf_file *g2 = write_and_open(w2, "arrays2.gguf");
    gguf_writer_free(w2);
    assert_int_equal(gguf_n_kv(g2), gguf_n_kv(g));
    for (uint64_t i = 0; i < gguf_n_kv(g); i++) {
        const struct gguf_kv *a = gguf_kv_at(g, i), *b = gguf_kv_at(g2, i);
        assert_int_equal(a->key.n, b->key.n);
        assert_memory_equal(a->key.s, b->key.s, a->key.n);
        assert_int_equal(a->type, b->type);
        assert_int_equal(a->arr_n, b->arr_n);
        assert_int_equal(a->nbytes, b->nbytes);
        if (a->nbytes)
            assert_memory_equal(a->data, b->data, a->nbytes);
    }
    gguf_close(g2);
}

static void test_roundtrip_arrays(void **state)
{
    (void)state;
    struct gguf_writer *w = gguf_writer_new();
    const int32_t i32s[] = {-1, 0, 1, 2147483647};
    const float f32s[] = {0.25f, -1.5f, 1e30f};
    const uint8_t u8s[] = {0, 255, 7};
    const int64_t i64s[] = {-9000000000000000000LL, 5};
    const double f64s[] = {1.0 / 3.0, -2.0};
    const uint16_t u16s[] = {65535, 1};
    gguf_writer_set_arr(w, "a.i32", GGUF_INT32, i32s, 4);
    gguf_writer_set_arr(w, "a.f32", GGUF_FLOAT32, f32s, 3);
    gguf_writer_set_arr(w, "a.u8", GGUF_UINT8, u8s, 3);
    gguf_writer_set_arr(w, "a.i64", GGUF_INT64, i64s, 2);
    gguf_writer_set_arr(w, "a.f64", GGUF_FLOAT64, f64s, 2);
    gguf_writer_set_arr(w, "a.u16", GGUF_UINT16, u16s, 2);
    gguf_writer_set_arr(w, "a.empty", GGUF_UINT32, NULL, 0);
    gguf_writer_set_arr(w, "a.bad", GGUF_STRING, i32s, 1); /* ignored */
    const struct gguf_str strs[] = {{"abc", 3}, {"", 0}, {"x\0y", 3}, {"\xe2\x96\x81the", 6}};
    gguf_writer_set_arr_str(w, "a.str", strs, 4);
    gguf_writer_set_arr_str(w, "a.str0", NULL, 0);
    struct gguf_file *g = write_and_open(w, "arrays.gguf");
    gguf_writer_free(w);

    assert_int_equal(gguf_n_kv(g), 9);
    assert_null(gguf_find_kv(g, "a.bad"));
    const struct gguf_kv *kv = gguf_find_kv(g, "a.i32");
    assert_non_null(kv);
    assert_int_equal(kv->type, GGUF_ARRAY);
    assert_int_equal(kv->arr_type, GGUF_INT32);
    assert_int_equal(kv->arr_n, 4);
    for (uint64_t i = 0; i < 4; i++)
        assert_true(gguf_arr_i64(kv, i) == i32s[i]);
    kv = gguf_find_kv(g, "a.f32");
    for (uint64_t i = 0; i < 3; i++)
        assert_true(gguf_arr_f64(kv, i) == (double)f32s[i]);
    kv = gguf_find_kv(g, "a.u8");
    assert_true(gguf_arr_i64(kv, 1) == 255);
    kv = gguf_find_kv(g, "a.i64");
    assert_true(gguf_arr_i64(kv, 0) == i64s[0]);
    kv = gguf_find_kv(g, "a.f64");
    assert_true(gguf_arr_f64(kv, 0) == f64s[0]);
    assert_true(gguf_arr_i64(kv, 1) == -2);
    kv = gguf_find_kv(g, "a.u16");
    assert_true(gguf_arr_f64(kv, 0) == 65535.0);
    kv = gguf_find_kv(g, "a.empty");
    assert_int_equal(kv->arr_n, 0);
    assert_int_equal(kv->arr_type, GGUF_UINT32);
    kv = gguf_find_kv(g, "a.str");
    assert_int_equal(kv->arr_type, GGUF_STRING);
    assert_int_equal(kv->arr_n, 4);
    for (uint64_t i = 0; i < 4; i++) {
        struct gguf_str s = gguf_arr_str(kv, i);
        assert_int_equal(s.n, strs[i].n);
        assert_memory_equal(s.s, strs[i].s, s.n);
    }
    assert_int_equal(gguf_find_kv(g, "a.str0")->arr_n, 0);

    /* An array is not a scalar. */
    char err[256];
    uint32_t u32;
    assert_int_equal(gguf_get_u32(g, "a.i32", &u32, err, sizeof err), AF_EPARSE);
    assert_non_null(strstr(err, "array of int32"));

    check_copy_kvs(g);
    gguf_close(g);
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)((i * 131u + seed * 7u) >> 1);
}

static void check_tensors(struct gguf_writer *w, uint32_t align, const char *name)
{
    /* F32 [3, 5], F16 [7], Q8_0 [64, 3], Q4_K [256, 2, 2] */
    const int64_t ne_f32[] = {3, 5}, ne_f16[] = {7}, ne_q8[] = {64, 3}, ne_q4k[] = {256, 2, 2};
    static uint8_t d_f32[60], d_f16[14], d_q8[6 * 34], d_q4k[4 * 144];
    fill(d_f32, sizeof d_f32, 1);
    fill(d_f16, sizeof d_f16, 2);
    fill(d_q8, sizeof d_q8, 3);
    fill(d_q4k, sizeof d_q4k, 4);
    char err[256];
    assert_int_equal(gguf_writer_add_tensor(w, "t.f32", GGML_TYPE_F32, 2, ne_f32, d_f32,
                                            sizeof d_f32, err, sizeof err),
                     AF_OK);
    assert_int_equal(gguf_writer_add_tensor(w, "t.f16", GGML_TYPE_F16, 1, ne_f16, d_f16,
                                            sizeof d_f16, err, sizeof err),
                     AF_OK);
    assert_int_equal(gguf_writer_add_tensor(w, "t.q8_0", GGML_TYPE_Q8_0, 2, ne_q8, d_q8,
                                            sizeof d_q8, err, sizeof err),
                     AF_OK);
    assert_int_equal(gguf_writer_add_tensor(w, "t.q4_k", GGML_TYPE_Q4_K, 3, ne_q4k, d_q4k,
                                            sizeof d_q4k, err, sizeof err),
                     AF_OK);
    struct gguf_file *g = write_and_open(w, name);
    assert_int_equal(gguf_alignment(g), align);
    assert_int_equal(gguf_n_tensors(g), 4);
    static const char *const names[] = {"t.f32", "t.f16", "t.q8_0", "t.q4_k"};
    const uint8_t *datas[] = {d_f32, d_f16, d_q8, d_q4k};
    const uint64_t sizes[] = {sizeof d_f32, sizeof d_f16, sizeof d_q8, sizeof d_q4k};
    const uint32_t tys[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K};
    const uint32_t dims[] = {2, 1, 2, 3};
    uint64_t prev_end = 0;
    for (uint64_t i = 0; i < 4; i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        assert_true(gguf_str_eq(t->name, names[i]));
        assert_ptr_equal(gguf_find_tensor(g, names[i]), t);
        assert_int_equal(t->type, tys[i]);
        assert_int_equal(t->n_dims, dims[i]);
        assert_int_equal(t->nbytes, sizes[i]);
        assert_int_equal(t->offset % align, 0);
        assert_true(t->offset >= prev_end);
        prev_end = t->offset + t->nbytes;
        assert_int_equal(((uintptr_t)t->data - (uintptr_t)gguf_tensor_at(g, 0)->data) % align, 0);
        assert_memory_equal(t->data, datas[i], sizes[i]);
    }
    const struct gguf_tensor *t = gguf_find_tensor(g, "t.q4_k");
    assert_int_equal(t->ne[0], 256);
    assert_int_equal(t->ne[1], 2);
    assert_int_equal(t->ne[2], 2);
    assert_int_equal(t->ne[3], 1);
    assert_int_equal(gguf_find_tensor(g, "t.f16")->ne[1], 1);
    assert_null(gguf_find_tensor(g, "t.q4"));
    assert_null(gguf_tensor_at(g, 4));
    /* The file ends padded to the alignment. */
    assert_int_equal(gguf_file_size(g) % align, 0);
    gguf_close(g);
}

static void test_roundtrip_tensors(void **state)
{
    (void)state;
    struct gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "llama");
    check_tensors(w, 32, "tensors.gguf");
    gguf_writer_free(w);

    w = gguf_writer_new();
    gguf_writer_set_u32(w, "general.alignment", 64);
    check_tensors(w, 64, "tensors64.gguf");
    gguf_writer_free(w);

    w = gguf_writer_new();
    gguf_writer_set_u32(w, "general.alignment", 1);
    check_tensors(w, 1, "tensors1.gguf");
    gguf_writer_free(w);
}

static void test_writer_errors(void **state)
{
    (void)state;
    struct gguf_writer *w = gguf_writer_new();
    char err[256];
    float d[64] = {0};
    const int64_t ne[] = {16, 4};
    assert_int_equal(
        gguf_writer_add_tensor(w, "a", GGML_TYPE_F32, 2, ne, d, sizeof d, err, sizeof err), AF_OK);
    assert_int_equal(
        gguf_writer_add_tensor(w, "a", GGML_TYPE_F32, 2, ne, d, sizeof d, err, sizeof err),
        AF_EINVAL);
    assert_non_null(strstr(err, "'a'"));
    assert_non_null(strstr(err, "duplicate"));
    assert_int_equal(
        gguf_writer_add_tensor(w, "b", GGML_TYPE_F32, 2, ne, d, sizeof d - 4, err, sizeof err),
        AF_EINVAL);
    assert_non_null(strstr(err, "'b'"));
    assert_int_equal(gguf_writer_add_tensor(w, "c", GGML_TYPE_Q8_0, 2, ne, d, 34, err, sizeof err),
                     AF_EINVAL);
    assert_non_null(strstr(err, "'c'"));
    assert_int_equal(gguf_writer_add_tensor(w, "d", 99, 2, ne, d, sizeof d, err, sizeof err),
                     AF_EINVAL);
    assert_int_equal(
        gguf_writer_add_tensor(w, "e", GGML_TYPE_F32, 5, ne, d, sizeof d, err, sizeof err),
        AF_EINVAL);
    gguf_writer_set_u32(w, "", 1); /* the reader would reject an empty key */
    char path0[256];
    tmp_path(path0, sizeof path0, "never0.gguf");
    assert_int_equal(gguf_writer_write(w, path0, err, sizeof err), AF_EINVAL);
    assert_non_null(strstr(err, "key 0"));
    gguf_writer_free(w);
    w = gguf_writer_new();
    gguf_writer_set_u32(w, "general.alignment", 3);
    char path[256];
    tmp_path(path, sizeof path, "never.gguf");
    assert_int_equal(gguf_writer_write(w, path, err, sizeof err), AF_EINVAL);
    assert_non_null(strstr(err, "alignment"));
    assert_int_equal(access(path, F_OK), -1);
    snprintf(path, sizeof path, "%s/no/such/dir/x.gguf", tmp_dir);
    gguf_writer_set_u32(w, "general.alignment", 32);
    assert_int_equal(gguf_writer_write(w, path, err, sizeof err), AF_EIO);
    assert_non_null(strstr(err, path));
    gguf_writer_free(w);

    /* Overwriting an existing file replaces it whole; no temporary is left behind. */
    w = gguf_writer_new();
    gguf_writer_set_str(w, "k", "one");
    tmp_path(path, sizeof path, "over.gguf");
    assert_int_equal(gguf_writer_write(w, path, err, sizeof err), AF_OK);
    gguf_writer_set_str(w, "k", "two");
    assert_int_equal(gguf_writer_write(w, path, err, sizeof err), AF_OK);
    gguf_writer_free(w);
    struct gguf_file *g = NULL;
    assert_int_equal(gguf_open(path, &g, err, sizeof err), AF_OK);
    char *v = gguf_get_strdup(g, "k");
    assert_string_equal(v, "two");
    free(v);
    gguf_close(g);
    DIR *dir = opendir(tmp_dir);
    struct dirent *e;
    while ((e = readdir(dir)) != NULL)
        assert_null(strstr(e->d_name, ".tmp."));
    closedir(dir);
}

/* --- Reference files ---------------------------------------------------------------------- */

static int shared_dir(char *out, size_t cap)
{
    const char *s = getenv("AGENTFLOW_SHARED");
    const char *src = getenv("AGENTFLOW_SRC");
    if (s && *s)
        snprintf(out, cap, "%s", s);
    else if (src && *src)
        snprintf(out, cap, "%s/../shared", src);
    else
        snprintf(out, cap, "../shared");
    struct stat st;
    return stat(out, &st) == 0 && S_ISDIR(st.st_mode);
}

static struct gguf_file *open_ref(const char *rel)
{
    char dir[512], path[1024], err[512];
    if (!shared_dir(dir, sizeof dir))
        return NULL;
    snprintf(path, sizeof path, "%s/data/reference/%s", dir, rel);
    if (access(path, R_OK) != 0)
        return NULL;
    struct gguf_file *g = NULL;
    int rc = gguf_open(path, &g, err, sizeof err);
    if (rc)
        print_error("%s\n", err);
    assert_int_equal(rc, AF_OK);
    return g;
}

static void check_arch(const struct gguf_file *g, const char *arch, uint64_t n_vocab)
{
    char *a = gguf_get_strdup(g, "general.architecture");
    assert_non_null(a);
    assert_string_equal(a, arch);
    free(a);
    const struct gguf_kv *tok = gguf_find_kv(g, "tokenizer.ggml.tokens");
    assert_non_null(tok);
    assert_int_equal(tok->type, GGUF_ARRAY);
    assert_int_equal(tok->arr_type, GGUF_STRING);
    assert_int_equal(tok->arr_n, n_vocab);
    /* Every token is inside the file. */
    const uint8_t *lo = (const uint8_t *)tok->data;
    for (uint64_t i = 0; i < tok->arr_n; i++) {
        struct gguf_str s = gguf_arr_str(tok, i);
        assert_true((const uint8_t *)s.s >= lo);
    }
}

static void test_reference_models(void **state)
{
    (void)state;
    struct gguf_file *g = open_ref("models/tiny-qwen2-f32.gguf");
    if (!g) {
        print_message("reference models absent: skipped\n");
        skip();
        return;
    }
    check_arch(g, "qwen2", 151936);
    assert_int_equal(gguf_n_tensors(g), 26); /* 2 + 12 per layer, tied output */
    assert_null(gguf_find_tensor(g, "output.weight"));
    const struct gguf_tensor *t = gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(t);
    assert_int_equal(t->type, GGML_TYPE_F32);
    assert_int_equal(t->ne[0], 32);
    assert_int_equal(t->ne[1], 151936);
    assert_int_equal(t->nbytes, 32ull * 151936 * 4);
    t = gguf_find_tensor(g, "blk.1.attn_k.bias");
    assert_non_null(t);
    assert_int_equal(t->n_dims, 1);
    assert_int_equal(t->ne[0], 16);
    uint32_t u = 0;
    char err[256];
    assert_int_equal(gguf_get_u32(g, "qwen2.block_count", &u, err, sizeof err), AF_OK);
    assert_int_equal(u, 2);
    assert_int_equal(gguf_get_u32(g, "qwen2.embedding_length", &u, err, sizeof err), AF_OK);
    assert_int_equal(u, 32);
    float f = 0;
    assert_int_equal(gguf_get_f32(g, "qwen2.rope.freq_base", &f, err, sizeof err), AF_OK);
    assert_true(f == 1e6f);
    struct gguf_str s = gguf_arr_str(gguf_find_kv(g, "tokenizer.ggml.tokens"), 0);
    assert_true(gguf_str_eq(s, "!"));
    gguf_close(g);

    g = open_ref("models/tiny-qwen2-q8_0.gguf");
    assert_non_null(g);
    check_arch(g, "qwen2", 151936);
    t = gguf_find_tensor(g, "token_embd.weight");
    assert_int_equal(t->type, GGML_TYPE_Q8_0);
    assert_int_equal(t->nbytes, 151936ull * 34);
    gguf_close(g);

    static const char *const llamas[] = {"models/tiny-llama-f32.gguf", "models/tiny-llama-f16.gguf",
                                         "models/tiny-llama-q4_0.gguf",
                                         "models/tiny-llama-kq-q4_k_m.gguf"};
    static const uint32_t embd_type[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q4_0,
                                         GGML_TYPE_Q6_K};
    static const int64_t n_embd[] = {64, 64, 64, 256};
    for (int i = 0; i < 4; i++) {
        g = open_ref(llamas[i]);
        assert_non_null(g);
        check_arch(g, "llama", 32000);
        t = gguf_find_tensor(g, "token_embd.weight");
        assert_non_null(t);
        assert_int_equal(t->type, embd_type[i]);
        assert_int_equal(t->ne[0], n_embd[i]);
        assert_int_equal(t->ne[1], 32000);
        /* The K-quant model ties its output to token_embd (20 tensors, no output.weight). */
        if (i == 3)
            assert_null(gguf_find_tensor(g, "output.weight"));
        else
            assert_non_null(gguf_find_tensor(g, "output.weight"));
        assert_int_equal(gguf_n_tensors(g), i == 3 ? 20 : 21);
        t = gguf_find_tensor(g, "blk.1.ffn_down.weight");
        assert_non_null(t);
        assert_int_equal(t->ne[0], i == 3 ? 512 : 192); /* n_ff */
        assert_int_equal(t->ne[1], n_embd[i]);
        if (i == 3) {
            assert_int_equal(t->type, GGML_TYPE_Q6_K);
            assert_int_equal(t->nbytes, 2ull * 256 * 210);
            t = gguf_find_tensor(g, "blk.0.attn_q.weight");
            assert_int_equal(t->type, GGML_TYPE_Q4_K);
            assert_int_equal(t->nbytes, 256ull * 144);
        }
        gguf_close(g);
    }
}

static void test_reference_vocabs(void **state)
{
    (void)state;
    struct gguf_file *g = open_ref("tokenizer/ggml-vocab-qwen2.gguf");
    if (!g) {
        print_message("reference tokenizer files absent: skipped\n");
        skip();
        return;
    }
    check_arch(g, "qwen2", 151936);
    assert_int_equal(gguf_n_tensors(g), 0);
    const struct gguf_kv *m = gguf_find_kv(g, "tokenizer.ggml.merges");
    assert_non_null(m);
    assert_int_equal(m->arr_type, GGUF_STRING);
    assert_true(m->arr_n > 100000);
    gguf_close(g);
    g = open_ref("tokenizer/ggml-vocab-llama-spm.gguf");
    assert_non_null(g);
    check_arch(g, "llama", 32000);
    const struct gguf_kv *sc = gguf_find_kv(g, "tokenizer.ggml.scores");
    assert_non_null(sc);
    assert_int_equal(sc->arr_type, GGUF_FLOAT32);
    assert_int_equal(sc->arr_n, 32000);
    gguf_close(g);
    g = open_ref("tokenizer/ggml-vocab-llama-bpe.gguf");
    assert_non_null(g);
    check_arch(g, "llama", 128256);
    gguf_close(g);
}

/* --- Hostile inputs ----------------------------------------------------------------------- */

/* A small valid file: 3 KVs (one string array) and 2 tensors. Owned by the caller (free). */
static uint8_t *small_file(size_t *len)
{
    struct gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_u32(w, "llama.block_count", 1);
    const struct gguf_str toks[] = {{"<s>", 3}, {"a", 1}, {"bc", 2}};
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    float d[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const int64_t ne[] = {4, 2}, ne1[] = {32};
    uint8_t q[34] = {0};
    char err[256], path[256];
    assert_int_equal(
        gguf_writer_add_tensor(w, "w.f32", GGML_TYPE_F32, 2, ne, d, sizeof d, err, sizeof err),
        AF_OK);
    assert_int_equal(
        gguf_writer_add_tensor(w, "w.q8", GGML_TYPE_Q8_0, 1, ne1, q, sizeof q, err, sizeof err),
        AF_OK);
    tmp_path(path, sizeof path, "small.gguf");
    assert_int_equal(gguf_writer_write(w, path, err, sizeof err), AF_OK);
    gguf_writer_free(w);
    char *data = NULL;
    assert_int_equal(af_file_read(path, 1 << 20, &data, len, err, sizeof err), AF_OK);
    return (uint8_t *)data;
}

static void test_truncated_prefixes(void **state)
{
    (void)state;
    size_t len = 0;
    uint8_t *full = small_file(&len);
    struct gguf_file *g = NULL;
    char err[512];
    assert_int_equal(gguf_open_mem(full, len, "small.gguf", &g, err, sizeof err), AF_OK);
    /* The last tensor's data ends before the final padding: cuts inside the padding still
     * hold every byte the file declares. */
    const struct gguf_tensor *last = gguf_tensor_at(g, 1);
    size_t need = (size_t)((const uint8_t *)last->data - full) + (size_t)last->nbytes;
    gguf_close(g);
    for (size_t n = 0; n < need; n++) {
        /* A fresh heap copy of exactly n bytes, so ASan catches any read past the cut. */
        uint8_t *cut = malloc(n ? n : 1);
        assert_non_null(cut);
        memcpy(cut, full, n);
        g = (struct gguf_file *)1;
        err[0] = '\0';
        int rc = gguf_open_mem(cut, n, "cut.gguf", &g, err, sizeof err);
        if (rc != AF_EPARSE)
            print_error("prefix %zu: rc %d\n", n, rc);
        assert_int_equal(rc, AF_EPARSE);
        assert_null(g);
        assert_non_null(strstr(err, "cut.gguf: "));
        assert_non_null(strstr(err, "offset 0x"));
        free(cut);
    }
    for (size_t n = need; n <= len; n++) {
        assert_int_equal(gguf_open_mem(full, n, "cut.gguf", &g, err, sizeof err), AF_OK);
        gguf_close(g);
    }
    /* The same through the file path. */
    char path[256];
    tmp_path(path, sizeof path, "cut.gguf");
    assert_int_equal(af_file_write_atomic(path, full, need - 1, err, sizeof err), AF_OK);
    assert_int_equal(gguf_open(path, &g, err, sizeof err), AF_EPARSE);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "'w.q8'"));
    assert_non_null(strstr(err, "past the end"));
    assert_int_equal(af_file_write_atomic(path, "", 0, err, sizeof err), AF_OK);
    assert_int_equal(gguf_open(path, &g, err, sizeof err), AF_EPARSE);
    assert_non_null(strstr(err, "magic"));
    tmp_path(path, sizeof path, "absent.gguf");
    assert_int_equal(gguf_open(path, &g, err, sizeof err), AF_ENOTFOUND);
    assert_non_null(strstr(err, "absent.gguf"));
    assert_int_equal(gguf_open(tmp_dir, &g, err, sizeof err), AF_EIO);
    free(full);
}

static void test_bad_header(void **state)
{
    (void)state;
    struct bb b = {0};
    bb_put(&b, "GGUG", 4);
    bb_u32(&b, 3);
    bb_u64(&b, 0);
    bb_u64(&b, 0);
    expect_fail(&b, "magic", "offset 0x0");
    b.n = 0;
    bb_header(&b, 1, 0, 0);
    expect_fail(&b, "version 1", "offset 0x4");
    b.n = 0;
    bb_header(&b, 99, 0, 0);
    expect_fail(&b, "version 99", NULL);
    b.n = 0;
    bb_header(&b, 2, 0, 0);
    expect_ok(&b);
    b.n = 0;
    bb_header(&b, 3, 0, 0);
    expect_ok(&b);
    b.n = 0;
    bb_header(&b, 3, UINT64_MAX, 0);
    expect_fail(&b, "n_tensors", NULL);
    b.n = 0;
    bb_header(&b, 3, 0, UINT64_MAX);
    expect_fail(&b, "n_kv", NULL);
    b.n = 0;
    bb_header(&b, 3, 0, UINT64_MAX / 14 + 1); /* n_kv * 14 would wrap */
    expect_fail(&b, "n_kv", NULL);
    b.n = 0;
    bb_header(&b, 3, 1ull << 62, 1ull << 62);
    bb_zeros(&b, 1000);
    expect_fail(&b, "n_tensors", NULL);
    b.n = 0;
    bb_header(&b, 3, 0, 2); /* 2 KVs announced, one present */
    bb_kv_u32(&b, "a", 1);
    bb_zeros(&b, 20);
    expect_fail(&b, "key 1", NULL);
    free(b.p);
}

static void test_bad_kvs(void **state)
{
    (void)state;
    struct bb b = {0};
    /* A string value longer than the file. */
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "general.name");
    bb_u32(&b, GGUF_STRING);
    bb_u64(&b, 1000);
    bb_put(&b, "abc", 3);
    expect_fail(&b, "'general.name'", "past the end");
    /* A key length past the end. */
    b.n = 0;
    bb_header(&b, 3, 0, 1);
    bb_u64(&b, 1ull << 40);
    bb_zeros(&b, 16);
    expect_fail(&b, "key 0", "past the end");
    /* A key over the 65535-byte limit. */
    b.n = 0;
    bb_header(&b, 3, 0, 1);
    bb_u64(&b, 70000);
    bb_zeros(&b, 70000 + 5);
    expect_fail(&b, "key 0", "limit");
    /* An empty key. */
    b.n = 0;
    bb_header(&b, 3, 0, 1);
    bb_u64(&b, 0);
    bb_u32(&b, GGUF_UINT32);
    bb_u32(&b, 0);
    expect_fail(&b, "empty key", NULL);
    free(b.p);
}

static void test_bad_kv_types(void **state)
{
    (void)state;
    struct bb b = {0};
    /* Unknown value types, scalar and array element. */
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "x.y");
    bb_u32(&b, 13);
    bb_u32(&b, 0);
    bb_zeros(&b, 16);
    expect_fail(&b, "'x.y'", "unknown value type 13");
    b.n = 0;
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "x.arr");
    bb_u32(&b, GGUF_ARRAY);
    bb_u32(&b, 77);
    bb_u64(&b, 0);
    expect_fail(&b, "'x.arr'", "element type 77");
    /* Nested arrays. */
    b.n = 0;
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "x.nest");
    bb_u32(&b, GGUF_ARRAY);
    bb_u32(&b, GGUF_ARRAY);
    bb_u64(&b, 1);
    bb_zeros(&b, 16);
    expect_fail(&b, "'x.nest'", "nested");
    /* Array counts past the end (numeric, and strings whose count wraps n*8). */
    b.n = 0;
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "x.big");
    bb_u32(&b, GGUF_ARRAY);
    bb_u32(&b, GGUF_UINT64);
    bb_u64(&b, (1ull << 61) + 1);
    bb_zeros(&b, 64);
    expect_fail(&b, "'x.big'", "past the end");
    b.n = 0;
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "x.strs");
    bb_u32(&b, GGUF_ARRAY);
    bb_u32(&b, GGUF_STRING);
    bb_u64(&b, UINT64_MAX / 8 + 2);
    bb_zeros(&b, 64);
    expect_fail(&b, "'x.strs'", "count");
    b.n = 0;
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "x.strs");
    bb_u32(&b, GGUF_ARRAY);
    bb_u32(&b, GGUF_STRING);
    bb_u64(&b, 2);
    bb_str(&b, "ok");
    bb_u64(&b, 5);
    bb_put(&b, "abc", 3);
    expect_fail(&b, "'x.strs'", "string 1");
    /* A truncated scalar. */
    b.n = 0;
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "x.f64");
    bb_u32(&b, GGUF_FLOAT64);
    bb_u32(&b, 0);
    expect_fail(&b, "'x.f64'", "truncated");
    /* Duplicate keys (not adjacent). */
    b.n = 0;
    bb_header(&b, 3, 0, 3);
    bb_kv_u32(&b, "a.b", 1);
    bb_kv_str(&b, "c", "d");
    bb_kv_u32(&b, "a.b", 2);
    expect_fail(&b, "'a.b'", "duplicate key");
    free(b.p);
}

static void test_bad_alignment(void **state)
{
    (void)state;
    struct bb b = {0};
    static const uint32_t bad[] = {0, 3, 48, 0x80000000u};
    for (int i = 0; i < 4; i++) {
        b.n = 0;
        bb_header(&b, 3, 0, 1);
        bb_kv_u32(&b, "general.alignment", bad[i]);
        expect_fail(&b, "'general.alignment'", "power of two");
    }
    b.n = 0;
    bb_header(&b, 3, 0, 1);
    bb_kv_str(&b, "general.alignment", "32");
    expect_fail(&b, "'general.alignment'", "uint32");
    /* A valid non-default alignment moves the data section. */
    b.n = 0;
    bb_header(&b, 3, 1, 1);
    bb_kv_u32(&b, "general.alignment", 256);
    const uint64_t ne[] = {4};
    bb_tinfo(&b, "t", 1, ne, GGML_TYPE_F32, 0);
    bb_pad(&b, 256);
    bb_put(&b, "\x01\x02\x03\x04", 4);
    bb_zeros(&b, 12);
    struct gguf_file *g = NULL;
    char err[256];
    assert_int_equal(gguf_open_mem(b.p, b.n, "a.gguf", &g, err, sizeof err), AF_OK);
    assert_int_equal(gguf_alignment(g), 256);
    assert_int_equal(((const uint8_t *)gguf_tensor_at(g, 0)->data - b.p), 256);
    gguf_close(g);
    free(b.p);
}

/* A file with one tensor described by (n_dims, ne, type, offset) and `data` bytes of data. */
static void one_tensor(struct bb *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                       uint32_t type, uint64_t offset, size_t data)
{
    b->n = 0;
    bb_header(b, 3, 1, 0);
    bb_tinfo(b, name, n_dims, ne, type, offset);
    bb_pad(b, 32);
    bb_zeros(b, data);
}

static void test_bad_tensors(void **state)
{
    (void)state;
    struct bb b = {0};
    const uint64_t ne4[] = {32, 2, 1, 1, 1};
    one_tensor(&b, "blk.0.attn_q.weight", 2, ne4, GGML_TYPE_F32, 0, 256);
    expect_ok(&b);
    one_tensor(&b, "blk.0.attn_q.weight", 0, ne4, GGML_TYPE_F32, 0, 256);
    expect_fail(&b, "'blk.0.attn_q.weight'", "n_dims 0");
    one_tensor(&b, "blk.0.attn_q.weight", 5, ne4, GGML_TYPE_F32, 0, 256);
    expect_fail(&b, "'blk.0.attn_q.weight'", "n_dims 5");
    one_tensor(&b, "t.unknown", 2, ne4, 99, 0, 256);
    expect_fail(&b, "'t.unknown'", "unknown tensor type 99");
    one_tensor(&b, "t.q2k", 2, (const uint64_t[]){256, 1}, GGML_TYPE_Q2_K, 0, 256);
    expect_fail(&b, "'t.q2k'", "Q2_K");
    one_tensor(&b, "t.iq4", 2, (const uint64_t[]){256, 1}, 23, 0, 256);
    expect_fail(&b, "'t.iq4'", "tensor type IQ4_XS (23) is not supported: the engine reads F32");
    expect_fail(&b, "IQ4_XS", "makes one from an F16, BF16 or F32 GGUF");
    one_tensor(&b, "t.mx", 2, (const uint64_t[]){32, 1}, 39, 0, 256);
    expect_fail(&b, "'t.mx'", "MXFP4 (39)");
    one_tensor(&b, "t.gap", 2, ne4, 31, 0, 256);
    expect_fail(&b, "'t.gap'", "unknown tensor type 31");
    one_tensor(&b, "t.blk", 2, (const uint64_t[]){48, 2}, GGML_TYPE_Q8_0, 0, 256);
    expect_fail(&b, "'t.blk'", "ne[0] = 48 is not a multiple");
    one_tensor(&b, "t.neg", 2, (const uint64_t[]){32, (uint64_t)-1}, GGML_TYPE_F32, 0, 256);
    expect_fail(&b, "'t.neg'", "negative");
    one_tensor(&b, "t.ovf", 4, (const uint64_t[]){1ull << 20, 1ull << 20, 1ull << 20, 1ull << 20},
               GGML_TYPE_F32, 0, 256);
    expect_fail(&b, "'t.ovf'", "overflow");
    one_tensor(&b, "t.ovf2", 2, (const uint64_t[]){1ull << 62, 2}, GGML_TYPE_F32, 0, 256);
    expect_fail(&b, "'t.ovf2'", "overflow");
    one_tensor(&b, "t.past", 2, ne4, GGML_TYPE_F32, 0, 255);
    expect_fail(&b, "'t.past'", "past the end of the file (size");
    one_tensor(&b, "t.past2", 2, ne4, GGML_TYPE_F32, UINT64_MAX - 31, 256);
    expect_fail(&b, "'t.past2'", "past the end");
    one_tensor(&b, "t.mis", 2, ne4, GGML_TYPE_F32, 16, 512);
    expect_fail(&b, "'t.mis'", "not a multiple of the alignment 32");
    one_tensor(&b, "t.zero", 2, (const uint64_t[]){0, 5}, GGML_TYPE_F32, 0, 0);
    expect_ok(&b);

    /* Two tensors overlapping, and two with the same name. */
    b.n = 0;
    bb_header(&b, 3, 2, 0);
    bb_tinfo(&b, "a", 1, (const uint64_t[]){64}, GGML_TYPE_F32, 0);
    bb_tinfo(&b, "b", 1, (const uint64_t[]){64}, GGML_TYPE_F32, 224);
    bb_pad(&b, 32);
    bb_zeros(&b, 512);
    expect_fail(&b, "'b'", "overlaps tensor 'a'");
    b.n = 0;
    bb_header(&b, 3, 2, 0);
    bb_tinfo(&b, "a", 1, (const uint64_t[]){64}, GGML_TYPE_F32, 256);
    bb_tinfo(&b, "b", 1, (const uint64_t[]){64}, GGML_TYPE_F32, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 512);
    expect_ok(&b);
    b.n = 0;
    bb_header(&b, 3, 2, 0);
    bb_tinfo(&b, "same", 1, (const uint64_t[]){64}, GGML_TYPE_F32, 0);
    bb_tinfo(&b, "same", 1, (const uint64_t[]){64}, GGML_TYPE_F32, 256);
    bb_pad(&b, 32);
    bb_zeros(&b, 512);
    expect_fail(&b, "'same'", "duplicate tensor name");
    /* An empty name and a name longer than the file. */
    b.n = 0;
    bb_header(&b, 3, 1, 0);
    bb_tinfo(&b, "", 1, (const uint64_t[]){64}, GGML_TYPE_F32, 0);
    bb_zeros(&b, 300);
    expect_fail(&b, "tensor 0", "empty");
    b.n = 0;
    bb_header(&b, 3, 1, 0);
    bb_u64(&b, 1ull << 50);
    bb_zeros(&b, 40);
    expect_fail(&b, "tensor 0", "past the end");
    free(b.p);
}

/* Non-printable bytes in a key are shown as '?' and a long key is cut. */
static void test_message_names(void **state)
{
    (void)state;
    struct bb b = {0};
    bb_header(&b, 3, 0, 1);
    char key[200];
    memset(key, 'k', sizeof key - 1);
    key[sizeof key - 1] = '\0';
    key[0] = '\n';
    bb_str(&b, key);
    bb_u32(&b, 42);
    struct gguf_file *g = NULL;
    char err[512];
    assert_int_equal(gguf_open_mem(b.p, b.n, "n.gguf", &g, err, sizeof err), AF_EPARSE);
    assert_null(strchr(err, '\n'));
    assert_non_null(strstr(err, "'?kkk"));
    assert_non_null(strstr(err, "...'"));
    assert_non_null(strstr(err, "offset 0xe7")); /* 24 + 8 + 199 = 231 */
    free(b.p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_scalars),
        cmocka_unit_test(test_roundtrip_arrays),
        cmocka_unit_test(test_roundtrip_tensors),
        cmocka_unit_test(test_writer_errors),
        cmocka_unit_test(test_reference_models),
        cmocka_unit_test(test_reference_vocabs),
        cmocka_unit_test(test_truncated_prefixes),
        cmocka_unit_test(test_bad_header),
        cmocka_unit_test(test_bad_kvs),
        cmocka_unit_test(test_bad_kv_types),
        cmocka_unit_test(test_bad_alignment),
        cmocka_unit_test(test_bad_tensors),
        cmocka_unit_test(test_message_names),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
