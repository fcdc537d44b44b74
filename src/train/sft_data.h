/*
 * sft_data.h - the data loader of `agentflow train sft`: chat JSONL (optionally gzip'd) to
 * token ids plus a loss mask that is set on the assistant replies only.
 *
 * Each line is {"messages":[{"role":"system"|"user"|"assistant","content":"..."},...]}. The
 * conversation is formatted with the same chat template, default system message and
 * tokenizer flags (add_special off, parse_special on) that af_engine_chat_prompt and the GGUF
 * back-end use at inference, so training sees exactly the prompt format inference produces.
 * Invariant: tokens[] equals tok_encode of the whole formatted conversation text in one go.
 */
#ifndef AF_TRAIN_SFT_DATA_H
#define AF_TRAIN_SFT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "agentflow/err.h"
#include "engine/model.h"

/* Lines longer than this fail with AF_ETOOBIG. */
#define SFT_LINE_MAX ((size_t)256 << 20)

struct sft_example {
    int32_t *tokens; /* n ids of the whole formatted conversation (owned by the sft_data) */
    uint8_t *target; /* n flags: 1 when token t carries a byte of an assistant reply's content
                      * or is the end-of-turn token closing it (<|im_end|>, <|eot_id|>); the
                      * assistant header and the newline after <|im_end|> are 0 */
    int64_t n, n_target;
    int64_t line; /* 1-based line in the file */
};

struct sft_data {
    struct sft_example *ex; /* n examples, in file order */
    size_t n;
    int64_t n_tokens, n_target; /* sums over ex[] */
    size_t n_truncated;         /* conversations cut to max_seq (skipped ones included) */
    size_t n_skipped;           /* conversations with no target token left after the cut */
};

/* Reads every line of path (JSONL, plain or gzip'd; lines of any length up to SFT_LINE_MAX;
 * blank lines skipped), formats each conversation with the model's chat template and marks
 * the assistant tokens. template_name ("chatml" / "llama3") overrides the template; NULL or ""
 * detects it from m->chat_template. ChatML conversations without a system message get the
 * template's default system message (Qwen2.5), as at inference. Conversations longer than
 * max_seq tokens (max_seq > 0) are cut to max_seq; one left with no target token is skipped
 * (counted in n_skipped, not an error). An empty file gives 0 examples and AF_OK.
 * m is borrowed (only m->tok, m->chat_template and m->path are read).
 * Returns AF_OK with *out owned by the caller (sft_data_free); AF_EINVAL for a missing or
 * unknown template or one whose end-of-turn token the vocabulary lacks; AF_EPARSE for a
 * malformed line (err names the file, the line and the field, e.g. "f.jsonl: line 7:
 * messages[2].role: unknown role 'bot'"), AF_EIO when the file cannot be read, AF_ETOOBIG for an
 * over-long line, AF_EINTERNAL when the replies cannot be mapped to tokens (a bug). On error *out
 * is NULL. Safe from any thread (m is only read). */
AF_NODISCARD int sft_data_load(const char *path, const struct model *m, const char *template_name,
                               int64_t max_seq, struct sft_data **out, char *err, size_t errlen);
/* Marks every token but the first of every example as a target, so that the loss covers the
 * prompts too (language-model pre-training on the transcripts: the tool results and memory
 * repeat names and numbers, the copying the replies need). Updates the n_target counts. */
void sft_data_target_all(struct sft_data *d);
/* The same, except the prompt tokens whose text has a decimal digit (`--loss-on text`): a
 * number in a prompt is mostly unpredictable where it stands (a value read from a passage),
 * and its loss teaches a small model to write a typical digit instead of copying one, while
 * the prompts' names and words still teach it to continue a name it has seen. The replies keep
 * every target they had. tok is the tokenizer the data was encoded with (borrowed). */
void sft_data_target_text(struct sft_data *d, const struct tokenizer *tok);
/* Frees d and every example. Accepts NULL. */
void sft_data_free(struct sft_data *d);

#endif
