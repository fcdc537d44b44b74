/*
 * fileio.h - whole-file reads with a limit, atomic writes, and fsync'd line appends.
 *
 * Errors are returned as AF_E* codes; a message naming the file goes into `err`
 * (a caller-provided buffer of `errlen` bytes, may be NULL). Safe from any thread.
 */
#ifndef AF_CORE_FILEIO_H
#define AF_CORE_FILEIO_H

#include <stddef.h>

#include "agentflow/err.h"

/* Reads all of `path` into *out (owned by the caller, free()), NUL-terminated, length in *len
 * (may be NULL). Fails with AF_ETOOBIG when the file is larger than `limit` bytes. */
AF_NODISCARD int af_file_read(const char *path, size_t limit, char **out, size_t *len, char *err,
                              size_t errlen);

/* Writes `data` to `path` through a temporary file in the same directory, fsync and rename,
 * so a reader sees either the old file or the whole new one. */
AF_NODISCARD int af_file_write_atomic(const char *path, const void *data, size_t len, char *err,
                                      size_t errlen);

/* Creates the folder `path` and any missing parents (mkdir -p), with `mode` (before the
 * umask). An existing folder is fine. A folder that cannot be made (a file in the way, no
 * permission) is AF_EIO; `err` names `path` and, when it differs, the parent at fault. */
AF_NODISCARD int af_mkdir_p(const char *path, unsigned mode, char *err, size_t errlen);

/* An append-only JSONL log: each line is written with one write() and fsync'd. */
/* 1 when a and b name one existing file (same device and inode: links and other spellings
 * of a path included), else 0. */
int af_file_same(const char *a, const char *b);

struct af_linelog;

/* Opens (creating) `path` for appending. *out is owned by the caller (af_linelog_close). */
AF_NODISCARD int af_linelog_open(const char *path, struct af_linelog **out, char *err,
                                 size_t errlen);
/* Appends `line` (a '\n' is added when missing) and fsyncs (a pipe or device that cannot be
 * synced is not an error). On AF_EIO errno names the cause. Safe from any thread. */
AF_NODISCARD int af_linelog_append(struct af_linelog *log, const char *line, size_t len);
/* Sets whether af_linelog_append fsyncs (default on). */
void af_linelog_set_fsync(struct af_linelog *log, int on);
void af_linelog_close(struct af_linelog *log);

#endif
