/*
 * safetensors_write.h - writes a Hugging Face *.safetensors file that engine/safetensors.h (and
 * the Python safetensors library) reads: an 8-byte little-endian header length, a JSON header
 * {"__metadata__": {...}, name: {"dtype", "shape", "data_offsets": [begin, end]}} padded with
 * spaces to a multiple of 8 bytes, then each tensor's bytes in the order given, back to back.
 *
 * The data is written as it lies in memory, so the host must be little-endian (x86-64, arm64).
 * Safe from any thread; the caller's tensors are only read.
 */
#ifndef AF_ENGINE_SAFETENSORS_WRITE_H
#define AF_ENGINE_SAFETENSORS_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "agentflow/err.h"

struct st_write_tensor {
    const char *name;  /* unique, not "__metadata__" */
    const char *dtype; /* "F32", "F16" or "BF16" */
    int64_t shape[4];  /* the file's order: shape[n_dims - 1] is contiguous */
    int n_dims;        /* 0 (a scalar) .. 4 */
    const void *data;  /* nbytes bytes; may be NULL when nbytes is 0 */
    size_t nbytes;     /* must equal product(shape) * the dtype's size */
};

/* Writes the n tensors (all borrowed) to `path` atomically: PATH.tmp.PID in the same folder,
 * fsync, rename over PATH, fsync of the folder; a reader sees the old file or the whole new
 * one. metadata_json may be NULL, else a JSON object whose values are all strings (it becomes
 * "__metadata__"). Returns AF_EINVAL (a bad dtype, shape, size, name or metadata; the message
 * names the tensor) or AF_EIO (the message names the file); the file is left untouched on
 * error. */
AF_NODISCARD int st_write(const char *path, const struct st_write_tensor *t, size_t n,
                          const char *metadata_json, char *err, size_t errlen);

#endif
