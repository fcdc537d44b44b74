/*
 * model.h - a loaded decoder-only transformer (qwen2, llama): hyperparameters, weights as
 * typed views into the mapped file, the tokenizer, and the chat template.
 *
 * Weights keep their file type (F32 ... Q6_K) and layout: a 2-D weight of ne = [n_in, n_out]
 * is n_out rows of n_in elements, each row quant_row_bytes(type, n_in) bytes. A model is
 * read-only after loading and may be shared by any number of contexts and threads.
 */
#ifndef AF_ENGINE_MODEL_H
#define AF_ENGINE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "agentflow/err.h"
#include "engine/gguf.h"
#include "engine/safetensors.h"
#include "engine/tokenizer.h"

enum model_arch { MODEL_ARCH_QWEN2, MODEL_ARCH_LLAMA };
enum rope_style { ROPE_NORM, ROPE_NEOX }; /* adjacent pairs / halves */

struct weight {
    const void *data; /* NULL when absent (optional biases) */
    uint32_t type;
    int64_t n_in, n_out; /* ne[0], ne[1] (n_out = 1 for vectors) */
    size_t row_bytes;
    /* The same rows in the active kernels' packed form (quant_pack), or NULL: matmuls read it,
     * with the same bits; everything else reads data. */
    const void *packed;
    int packed_form; /* quant_pack's return for it */
};

struct model_hparams {
    enum model_arch arch;
    int64_t n_vocab, n_ctx_train, n_embd, n_layer, n_ff, n_head, n_head_kv, head_dim;
    int64_t n_rot; /* rotated dims per head */
    float rms_eps, rope_base, rope_freq_scale;
    enum rope_style rope_style;
    int tied_output; /* output head reuses token_embd */
};

struct model_layer {
    struct weight attn_norm, wq, wk, wv, wo, bq, bk, bv, bo;
    struct weight ffn_norm, w_gate, w_up, w_down;
};

struct model {
    struct model_hparams hp;
    struct weight tok_embd, output_norm, output;
    struct model_layer *layers;     /* hp.n_layer */
    const float *rope_freq_factors; /* n_rot / 2 divisors of the angles (Llama 3.1), or NULL */
    struct tokenizer *tok;
    char *chat_template; /* tokenizer.chat_template or NULL */
    char *name;          /* general.name or the file name */
    char *path;
    struct gguf_file *gguf; /* GGUF models */
    struct st_file **st;    /* Hugging Face checkpoints: the safetensors shards */
    size_t n_st;
    void **owned; /* memory we allocated for converted tensors */
    size_t n_owned;
    void *packed_map; /* model_pack's mapping, and its bytes */
    size_t packed_bytes;
    int rope_neox_hf; /* HF layout: q/k rows not permuted, so RoPE is NEOX for every arch */
};

/* A tensor as found in the file, before shape checks. */
struct tensor_view {
    const void *data;
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[4];
    uint64_t nbytes;
};

/* Loads a GGUF file, or a Hugging Face checkpoint: a folder (or its config.json) with
 * config.json, *.safetensors and, for text, tokenizer.json. The model is a supported
 * architecture. Every tensor's type and shape is checked
 * against the hyperparameters, and norms are checked for NaN / Inf; errors name the tensor or
 * key. *out is owned by the caller (model_free). */
AF_NODISCARD int model_load(const char *path, struct model **out, char *err, size_t errlen);
void model_free(struct model *m);
/* Packs the matmul weights (the layers' projections and the output head) that the active
 * kernels have a packed form for into one anonymous mapping owned by m (freed by model_free),
 * and points their `packed` at it. The row-major data stays for everything else: the
 * embedding's rows, training, merging. Returns the packed bytes (0: none). */
size_t model_pack(struct model *m);
/* Drops model_pack's mapping: every weight it packed reads its rows again. */
void model_unpack(struct model *m);
/* 1 when the n bytes at p lie in a read-only mapping of the model's file (the GGUF, or a
 * safetensors shard): pages there may be dropped and come back from the page cache. */
int model_in_file(const struct model *m, const void *p, size_t n);

const char *model_arch_name(enum model_arch a);

/* model_hf.c: the Hugging Face side. hf_load_config fills m->hp (and rope factors) from
 * config.json and opens the shards; hf_find looks up a tensor by its GGUF name. */
AF_NODISCARD int hf_load_config(struct model *m, const char *dir, char *err, size_t errlen);
int hf_find(struct model *m, const char *gguf_name, struct tensor_view *out);
/* Takes ownership of p (freed with the model); returns p. */
void *model_own(struct model *m, void *p);
/* Bytes of all weights. */
uint64_t model_weight_bytes(const struct model *m);
/* The number of parameters. */
uint64_t model_n_params(const struct model *m);

#endif
