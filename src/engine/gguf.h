/*
 * gguf.h - GGUF v3 (and v2) files: a strict, mmap'd reader and an atomic writer.
 *
 * The reader validates everything before any caller sees the file: magic, version, counts,
 * key and value types, string lengths, array sizes, tensor dims and types, offsets inside the
 * file, alignment and overlap. A failure returns AF_EPARSE (or AF_EIO / AF_ETOOBIG) with a
 * message naming the file and the key, tensor or byte offset at fault.
 *
 * Nested arrays (element type GGUF_ARRAY) are rejected with AF_EPARSE. Keys and tensor names
 * are 1..65535 bytes; general.alignment must be a uint32 power of two (at most 2^30).
 *
 * Strings in a file are not NUL-terminated: they are (pointer, length) views into the map.
 * A gguf_file is read-only after gguf_open and safe to share between threads.
 */
#ifndef AF_ENGINE_GGUF_H
#define AF_ENGINE_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "agentflow/err.h"

/* Value types, numbered as in the GGUF spec. */
enum gguf_vtype {
    GGUF_UINT8 = 0,
    GGUF_INT8 = 1,
    GGUF_UINT16 = 2,
    GGUF_INT16 = 3,
    GGUF_UINT32 = 4,
    GGUF_INT32 = 5,
    GGUF_FLOAT32 = 6,
    GGUF_BOOL = 7,
    GGUF_STRING = 8,
    GGUF_ARRAY = 9,
    GGUF_UINT64 = 10,
    GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12,
    GGUF_NVTYPES
};

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

struct gguf_str {
    const char *s; /* not NUL-terminated; points into the map */
    uint64_t n;
};

struct gguf_kv {
    struct gguf_str key;
    enum gguf_vtype type;     /* GGUF_ARRAY for arrays */
    enum gguf_vtype arr_type; /* element type when type == GGUF_ARRAY */
    uint64_t arr_n;           /* element count when type == GGUF_ARRAY */
    const uint8_t *data;      /* the raw little-endian value (first element for arrays) */
    const uint64_t *str_off;  /* arrays of strings: byte offset of element i's uint64 length
                                 prefix from data (element 0 is at 0); NULL otherwise */
    uint64_t nbytes;          /* bytes of the raw value at data: the scalar, the string with its
                                 uint64 length prefix, or all array elements (no array header) */
};

struct gguf_tensor {
    struct gguf_str name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the contiguous (row) dimension; unused dims are 1 */
    uint32_t type;             /* a ggml type (engine/quant.h) */
    uint64_t offset;           /* from the start of the data section */
    const void *data;          /* into the map */
    uint64_t nbytes;
};

struct gguf_file;

/* Maps and validates `path`. *out is owned by the caller (gguf_close). Tensor types must be
 * known to engine/quant.h and each tensor's size must be a whole number of blocks.
 * Returns AF_ENOTFOUND when `path` does not exist, AF_EIO when it cannot be opened or mapped
 * (or is not a regular file), AF_EPARSE for any malformed content; *out is NULL on error. */
AF_NODISCARD int gguf_open(const char *path, struct gguf_file **out, char *err, size_t errlen);
/* The same over a caller's buffer, which must outlive the handle (for fuzzing and tests).
 * `name` is used in messages. */
AF_NODISCARD int gguf_open_mem(const void *data, size_t len, const char *name,
                               struct gguf_file **out, char *err, size_t errlen);
void gguf_close(struct gguf_file *g);

const char *gguf_path(const struct gguf_file *g);
/* 1 when g reads a read-only private mapping of its file (gguf_open of a non-empty file), with
 * its bounds in *base and *size; 0 for a caller's buffer (gguf_open_mem). */
int gguf_file_mapping(const struct gguf_file *g, const void **base, size_t *size);
uint32_t gguf_version(const struct gguf_file *g);
uint32_t gguf_alignment(const struct gguf_file *g);
uint64_t gguf_file_size(const struct gguf_file *g);

uint64_t gguf_n_kv(const struct gguf_file *g);
const struct gguf_kv *gguf_kv_at(const struct gguf_file *g, uint64_t i);
/* NULL when absent. */
const struct gguf_kv *gguf_find_kv(const struct gguf_file *g, const char *key);

/* Typed getters. They return AF_ENOTFOUND when the key is absent and AF_EPARSE (with a message
 * naming the key and its actual type) when the value cannot be represented. Integer getters
 * accept any integer type in range (and bool); the float getter accepts F32, F64 and integers. */
AF_NODISCARD int gguf_get_u64(const struct gguf_file *g, const char *key, uint64_t *out, char *err,
                              size_t errlen);
AF_NODISCARD int gguf_get_u32(const struct gguf_file *g, const char *key, uint32_t *out, char *err,
                              size_t errlen);
AF_NODISCARD int gguf_get_i64(const struct gguf_file *g, const char *key, int64_t *out, char *err,
                              size_t errlen);
AF_NODISCARD int gguf_get_f32(const struct gguf_file *g, const char *key, float *out, char *err,
                              size_t errlen);
AF_NODISCARD int gguf_get_bool(const struct gguf_file *g, const char *key, int *out, char *err,
                               size_t errlen);
AF_NODISCARD int gguf_get_str(const struct gguf_file *g, const char *key, struct gguf_str *out,
                              char *err, size_t errlen);
/* A malloc'd NUL-terminated copy of a string value, or NULL when absent or not a string. */
char *gguf_get_strdup(const struct gguf_file *g, const char *key);

/* Array access: element i of an array kv (no checks beyond i < arr_n). */
struct gguf_str gguf_arr_str(const struct gguf_kv *kv, uint64_t i);
/* Element i of a numeric array as a double / int64 (any numeric element type). */
double gguf_arr_f64(const struct gguf_kv *kv, uint64_t i);
int64_t gguf_arr_i64(const struct gguf_kv *kv, uint64_t i);

uint64_t gguf_n_tensors(const struct gguf_file *g);
const struct gguf_tensor *gguf_tensor_at(const struct gguf_file *g, uint64_t i);
/* NULL when absent. */
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *g, const char *name);

/* Compares a view with a C string. */
int gguf_str_eq(struct gguf_str a, const char *b);

/* --- Writer --------------------------------------------------------------------------------
 * Collects KVs and tensors in memory (values copied; tensor data borrowed until write) and
 * writes a GGUF v3 file atomically (temporary file, fsync, rename). Keys keep insertion order;
 * setting an existing key replaces its value in place. */
struct gguf_writer;

struct gguf_writer *gguf_writer_new(void);
void gguf_writer_free(struct gguf_writer *w);
void gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v);
void gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v);
void gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v);
void gguf_writer_set_bool(struct gguf_writer *w, const char *key, int v);
void gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v);
/* Any scalar type (not GGUF_STRING / GGUF_ARRAY): the value's bytes are copied from `v`
 * (1, 2, 4 or 8 bytes, host order = little-endian). Ignored for other types. */
void gguf_writer_set_scalar(struct gguf_writer *w, const char *key, enum gguf_vtype type,
                            const void *v);
/* A numeric array: `n` elements of `type` (not GGUF_STRING / GGUF_ARRAY) copied from `data`. */
void gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_vtype type,
                         const void *data, uint64_t n);
/* An array of n strings (each copied, with its length). */
void gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const struct gguf_str *v,
                             uint64_t n);
/* Copies one KV of an open file, byte for byte (any type). */
void gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_kv *kv);
/* Copies every KV of `g` (for quantize / merge), in order. */
void gguf_writer_copy_kvs(struct gguf_writer *w, const struct gguf_file *g);
/* Adds a tensor; `data` (nbytes, borrowed until gguf_writer_write returns) must match type
 * and shape. Fails with AF_EINVAL on a duplicate name or a size mismatch. */
AF_NODISCARD int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type,
                                        uint32_t n_dims, const int64_t *ne, const void *data,
                                        uint64_t nbytes, char *err, size_t errlen);
AF_NODISCARD int gguf_writer_write(struct gguf_writer *w, const char *path, char *err,
                                   size_t errlen);

#endif
