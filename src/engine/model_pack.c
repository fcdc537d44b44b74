/*
 * model_pack.c - the engine's matmul weights in the kernels' packed form (quant_pack), made
 * once at load so that no call transposes a block again.
 *
 * Why a copy and not in place: the row-major tensors live in the model file's read-only mapping
 * and are still read as rows (the embedding lookup, training, merging). The copy is about the
 * weights' size; the file's pages of the packed rows are released from the process (they stay
 * in the page cache, clean, and come back if read), so the resident size stays about the
 * weights' once, for a GGUF and a Hugging Face checkpoint alike.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/model.h"
#include "engine/quant.h"

/* The matmul weights of m, up to cap of them, into ws. */
static size_t matmul_weights(struct model *m, struct weight **ws, size_t cap)
{
    size_t n = 0;
    for (int64_t il = 0; il < m->hp.n_layer; il++) {
        struct model_layer *ly = &m->layers[il];
        struct weight *lw[] = {&ly->wq,     &ly->wk,   &ly->wv,    &ly->wo,
                               &ly->w_gate, &ly->w_up, &ly->w_down};
        for (size_t i = 0; i < sizeof lw / sizeof lw[0]; i++)
            if (lw[i]->data && n < cap)
                ws[n++] = lw[i];
    }
    if (m->output.data && n < cap)
        ws[n++] = &m->output;
    return n;
}

static size_t packed_size(const struct weight *w)
{
    return (quant_packed_bytes(w->type, w->n_out, w->n_in) + 63) / 64 * 64;
}

/* The file pages of a packed weight's rows leave this process's memory (they were all read by
 * the load's checks and the packing): a read-only private mapping of the file gives them back
 * from the page cache when rows are read again (the embedding's, a tied head's, training's).
 * Only whole pages inside the tensor, and only rows in the file's mapping (a GGUF, or a
 * safetensors shard of a Hugging Face checkpoint): rows in memory of ours would be lost. */
static void release_rows(const struct model *m, const struct weight *w)
{
    if (!model_in_file(m, w->data, w->row_bytes * (size_t)w->n_out))
        return;
    const long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0)
        return;
    const uintptr_t a = (uintptr_t)w->data, e = a + w->row_bytes * (size_t)w->n_out;
    const uintptr_t lo = (a + (uintptr_t)pg - 1) / (uintptr_t)pg * (uintptr_t)pg;
    const uintptr_t hi = e / (uintptr_t)pg * (uintptr_t)pg;
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

size_t model_pack(struct model *m)
{
    if (m->packed_map)
        return m->packed_bytes;
    const size_t cap = (size_t)m->hp.n_layer * 7 + 1;
    struct weight **ws = calloc(cap, sizeof *ws);
    if (!ws)
        return 0;
    const size_t n = matmul_weights(m, ws, cap);
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += packed_size(ws[i]);
    if (!total) {
        free(ws);
        return 0;
    }
    void *map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) { /* the row-major kernels still work */
        free(ws);
        return 0;
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(map, total, MADV_HUGEPAGE); /* streamed every token: fewer TLB misses */
#endif
    size_t *off = calloc(n, sizeof *off);
    if (!off) {
        munmap(map, total);
        free(ws);
        return 0;
    }
    for (size_t i = 1; i < n; i++)
        off[i] = off[i - 1] + packed_size(ws[i - 1]);
        /* each weight's rows released as soon as they are packed, so that the two copies are not
         * resident at once */
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t i = 0; i < n; i++)
        if (packed_size(ws[i])) {
            ws[i]->packed_form = quant_pack(ws[i]->type, ws[i]->data, ws[i]->n_out, ws[i]->n_in,
                                            (char *)map + off[i]);
            release_rows(m, ws[i]);
        }
    for (size_t i = 0; i < n; i++)
        ws[i]->packed = packed_size(ws[i]) ? (const char *)map + off[i] : NULL;
    free(off);
    free(ws);
    m->packed_map = map;
    m->packed_bytes = total;
    return total;
}

void model_unpack(struct model *m)
{
    if (!m->packed_map)
        return;
    const size_t cap = (size_t)m->hp.n_layer * 7 + 1;
    struct weight **ws = calloc(cap, sizeof *ws);
    if (ws) {
        const size_t n = matmul_weights(m, ws, cap);
        for (size_t i = 0; i < n; i++) {
            const char *p = ws[i]->packed, *b = m->packed_map;
            if (p >= b && p < b + m->packed_bytes)
                ws[i]->packed = NULL;
        }
        free(ws);
    }
    munmap(m->packed_map, m->packed_bytes);
    m->packed_map = NULL;
    m->packed_bytes = 0;
}
