/*
 * safetensors.h - Hugging Face *.safetensors files, mmap'd and checked: an 8-byte header length,
 * a JSON header of {name: {dtype, shape, data_offsets}}, then the data. Offsets must lie in the
 * file, not overlap, and match dtype x shape. F32, F16 and BF16 are supported.
 */
#ifndef AF_ENGINE_SAFETENSORS_H
#define AF_ENGINE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "agentflow/err.h"

struct st_tensor {
    char *name;
    uint32_t type; /* a ggml type: GGML_TYPE_F32, _F16 or _BF16 */
    uint32_t n_dims;
    int64_t ne[4]; /* ne[0] is the last (contiguous) dimension of the file's shape */
    const void *data;
    uint64_t nbytes;
};

struct st_file;

/* *out is owned by the caller (st_close). Errors name the file and the tensor or offset. */
AF_NODISCARD int st_open(const char *path, struct st_file **out, char *err, size_t errlen);
void st_close(struct st_file *f);
size_t st_n_tensors(const struct st_file *f);
const struct st_tensor *st_tensor_at(const struct st_file *f, size_t i);
const struct st_tensor *st_find(const struct st_file *f, const char *name);
/* The file's read-only private mapping (NULL and 0 for an empty file). */
void st_file_mapping(const struct st_file *f, const void **base, size_t *size);

#endif
