/*
 * chat.h - chat templates: ChatML (Qwen) and Llama 3, recognised from the model's
 * tokenizer.chat_template or chosen by name. The output is text with the special tokens
 * spelled out, to be tokenized with parse_special on and add_special off.
 */
#ifndef AF_ENGINE_CHAT_H
#define AF_ENGINE_CHAT_H

#include <stddef.h>

#include "agentflow/err.h"

enum chat_template { CHAT_TEMPLATE_NONE, CHAT_TEMPLATE_CHATML, CHAT_TEMPLATE_LLAMA3 };

struct chat_msg {
    const char *role; /* "system", "user", "assistant" (borrowed) */
    const char *content;
};

/* "chatml" / "qwen", "llama3"; CHAT_TEMPLATE_NONE when unknown. */
enum chat_template chat_template_from_name(const char *name);
const char *chat_template_name(enum chat_template t);
/* Recognises a Jinja template by its markers; CHAT_TEMPLATE_NONE when neither. */
enum chat_template chat_template_detect(const char *jinja);

/* Formats msgs and, when add_assistant is set, the header of the assistant's reply.
 * default_system (may be NULL) is inserted when the messages have no system message (Qwen2.5's
 * template does this). Returns a malloc'd string (caller frees). */
char *chat_format(enum chat_template t, const struct chat_msg *msgs, size_t n, int add_assistant,
                  const char *default_system);

/* The default system message a template text carries for conversations without one (Qwen2.5),
 * as a malloc'd string, or NULL. */
char *chat_template_default_system(const char *jinja);

#endif
