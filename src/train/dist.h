/*
 * dist.h - the trainer's ranks (src/train/): Flow-GRPO on many machines with OpenMPI.
 *
 * A process started by mpirun (OpenMPI's OMPI_COMM_WORLD_SIZE in the environment) initialises
 * MPI and is one rank of many; any other process is rank 0 of 1 and makes no MPI call, so the
 * same binary runs alone without mpirun (and builds without OpenMPI, AF_HAVE_MPI unset, as one
 * rank only).
 *
 * Every collective here must be entered by every rank in the same order; the trainer calls
 * them from its main thread only (MPI_THREAD_FUNNELED). Sums are made in rank order after an
 * all-gather, not by MPI_Allreduce, so every rank gets the same bits whatever the timing.
 */
#ifndef AF_TRAIN_DIST_H
#define AF_TRAIN_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "agentflow/err.h"

/* Starts MPI when launched by mpirun (idempotent). AF_EIO with a message when MPI is wanted
 * but missing (a build without OpenMPI) or fails to start. */
AF_NODISCARD int train_dist_init(char *err, size_t errlen);
/* Ends every rank's process with `code` (MPI_Abort) when there are several: a rank that fails
 * alone would leave the others waiting in a collective. Returns when there is one rank. */
void train_dist_abort(int code);
/* Ends MPI if train_dist_init started it. */
void train_dist_finalize(void);
int train_dist_rank(void);
int train_dist_size(void);

/* x[0..n) = the sum over ranks of every rank's x, added in rank order (the same bits on
 * every rank). One rank: unchanged. */
AF_NODISCARD int train_dist_sum_floats(float *x, size_t n, char *err, size_t errlen);
AF_NODISCARD int train_dist_sum_doubles(double *x, size_t n, char *err, size_t errlen);
/* The largest of every rank's v. */
AF_NODISCARD int train_dist_max_i64(int64_t *v, char *err, size_t errlen);
/* AF_EINVAL naming the ranks when v is not the same on every rank (a weight checksum). */
AF_NODISCARD int train_dist_check_same(uint64_t v, const char *what, char *err, size_t errlen);
/* Every rank's string, in rank order, joined by '\n' into *all (malloc'd, on every rank). */
AF_NODISCARD int train_dist_gather_text(const char *s, char **all, char *err, size_t errlen);

/* FNV-1a over n bytes: the weight checksum. */
uint64_t train_dist_checksum(const void *p, size_t n);

#endif
