/*
 * tokenizer.h - the vocabularies of GGUF models, exact to llama.cpp's tokenizer.
 *
 * Kinds (GGUF tokenizer.ggml.model):
 *   "gpt2"  byte-level BPE with merges, pre-tokenised by the regexes of
 *           tokenizer.ggml.pre: "qwen2", "llama-bpe" (Llama 3), "default" / "gpt2";
 *   "llama" SentencePiece BPE by scores (Llama 2, llama2.c), with byte fallback <0xNN>.
 * Special and control tokens (token_type CONTROL / USER_DEFINED) are matched in the text when
 * parse_special is set, as llama.cpp's tokenizer does.
 *
 * A tokenizer is immutable after creation and safe to use from any thread.
 */
#ifndef AF_ENGINE_TOKENIZER_H
#define AF_ENGINE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "agentflow/err.h"
#include "engine/gguf.h"

/* llama.cpp's token types (tokenizer.ggml.token_type). */
enum tok_type {
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6
};

struct tokenizer;

/* Builds the tokenizer from a GGUF file's tokenizer.* keys. Copies what it needs: g may be
 * closed afterwards. *out is owned by the caller (tok_free). Errors name the key at fault. */
AF_NODISCARD int tok_from_gguf(const struct gguf_file *g, struct tokenizer **out, char *err,
                               size_t errlen);
/* Builds it from a Hugging Face tokenizer.json (model.type "BPE", byte-level) plus, when
 * present, tokenizer_config.json in the same folder for BOS/EOS and the chat template. */
AF_NODISCARD int tok_from_hf(const char *tokenizer_json_path, struct tokenizer **out, char *err,
                             size_t errlen);
/* Builds it from a llama2.c tokenizer.bin (u32 max_token_length, then per token f32 score,
 * i32 len, bytes), read to the end of the file. Ids 0/1/2 are <unk>/<s>/</s> and the
 * vocabulary is treated as llama.cpp's SPM (add BOS, space prefix, <0xNN> byte fallback). */
AF_NODISCARD int tok_from_llama2c(const char *path, struct tokenizer **out, char *err,
                                  size_t errlen);
/* Accepts NULL. */
void tok_free(struct tokenizer *t);

/* Encodes len bytes of text (need not be valid UTF-8). add_special: prepend BOS (and append EOS)
 * as the vocabulary's add_bos / add_eos say. parse_special: match control / user-defined token
 * texts such as "<|im_start|>". *ids is malloc'd (also when *n_ids is 0) and owned by the
 * caller. Invalid UTF-8 is read as llama.cpp reads it (BPE: each bad byte becomes U+FFFD;
 * SPM: bytes fall back to <0xNN>). Returns AF_OK, AF_EINVAL, AF_ETOOBIG (over 1 GiB) or
 * AF_EINTERNAL. Safe from any thread. */
AF_NODISCARD int tok_encode(const struct tokenizer *t, const char *text, size_t len,
                            int add_special, int parse_special, int32_t **ids, size_t *n_ids);

/* The bytes a token stands for (byte-level decoded; SPM "▁" turned into a space; <0xNN> to the
 * byte). Control tokens give their text only when `special` is set, else "". Returns the byte
 * count written (at most cap; the result is not NUL-terminated), or -needed when cap is too
 * small. */
int tok_piece(const struct tokenizer *t, int32_t id, int special, char *buf, size_t cap);
/* Decodes ids into a malloc'd NUL-terminated string (caller frees): the concatenated pieces
 * (out-of-range ids skipped). SPM: the leading space of the first piece is removed when the
 * vocabulary adds a space prefix (llama_detokenize's lstrip). llama.cpp's clean_spaces pass
 * (" ," -> ",", for llama-bpe) is NOT applied, so byte-level BPE round-trips exactly. */
char *tok_decode(const struct tokenizer *t, const int32_t *ids, size_t n, int special);

size_t tok_n_vocab(const struct tokenizer *t);
/* The token's text as stored in the vocabulary (e.g. "Ġthe"), NUL-terminated. Borrowed;
 * NULL when id is out of range. */
const char *tok_text(const struct tokenizer *t, int32_t id);
enum tok_type tok_get_type(const struct tokenizer *t, int32_t id);
/* -1 when the vocabulary has no such token. */
int32_t tok_bos(const struct tokenizer *t);
int32_t tok_eos(const struct tokenizer *t);
int32_t tok_eot(const struct tokenizer *t);
/* 1 for tokens that end a generation: EOS, EOT, and control tokens such as <|im_end|>,
 * <|eot_id|>, <|eom_id|>, <|endoftext|>. */
int tok_is_eog(const struct tokenizer *t, int32_t id);
/* The id of a token with exactly this text, or -1. */
int32_t tok_find(const struct tokenizer *t, const char *text);
/* "gpt2" or "llama"; and the pre-tokeniser name ("qwen2", "llama-bpe", "default"). Static. */
const char *tok_model_name(const struct tokenizer *t);
const char *tok_pre_name(const struct tokenizer *t);
/* tokenizer.chat_template (GGUF) or tokenizer_config.json's chat_template; NULL when absent.
 * Borrowed, valid until tok_free. */
const char *tok_chat_template(const struct tokenizer *t);
/* 1 when tok_encode(add_special = 1) prepends BOS. */
int tok_add_bos(const struct tokenizer *t);

#endif
