/*
 * chat.c - ChatML and Llama 3 chat formatting (see chat.h). The Jinja templates themselves
 * are not interpreted: we recognise which family a model uses and write that family's format,
 * as llama.cpp's built-in templates do.
 */
#include "engine/chat.h"

#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/xalloc.h"

enum chat_template chat_template_from_name(const char *name)
{
    if (!name)
        return CHAT_TEMPLATE_NONE;
    if (!strcmp(name, "chatml") || !strcmp(name, "qwen") || !strcmp(name, "qwen2"))
        return CHAT_TEMPLATE_CHATML;
    if (!strcmp(name, "llama3") || !strcmp(name, "llama-3"))
        return CHAT_TEMPLATE_LLAMA3;
    return CHAT_TEMPLATE_NONE;
}

const char *chat_template_name(enum chat_template t)
{
    switch (t) {
    case CHAT_TEMPLATE_CHATML:
        return "chatml";
    case CHAT_TEMPLATE_LLAMA3:
        return "llama3";
    default:
        return "none";
    }
}

enum chat_template chat_template_detect(const char *jinja)
{
    if (!jinja)
        return CHAT_TEMPLATE_NONE;
    if (strstr(jinja, "<|im_start|>"))
        return CHAT_TEMPLATE_CHATML;
    if (strstr(jinja, "<|start_header_id|>"))
        return CHAT_TEMPLATE_LLAMA3;
    return CHAT_TEMPLATE_NONE;
}

/* Qwen2.5's templates write their default system message as a literal after
 * "<|im_start|>system\n" in the branch taken when messages[0] is not a system message. */
char *chat_template_default_system(const char *jinja)
{
    if (!jinja || chat_template_detect(jinja) != CHAT_TEMPLATE_CHATML)
        return NULL;
    const char *marker = "<|im_start|>system\\n";
    /* Only a plain literal qualifies, not an expression such as {{ message['content'] }}. */
    for (const char *p = strstr(jinja, marker); p; p = strstr(p + 1, marker)) {
        const char *start = p + strlen(marker);
        const char *end = strstr(start, "<|im_end|>");
        if (!end || end == start || memchr(start, '{', (size_t)(end - start)) ||
            memchr(start, '\'', (size_t)(end - start)) || memchr(start, '"', (size_t)(end - start)))
            continue;
        return af_xstrndup(start, (size_t)(end - start));
    }
    return NULL;
}

/* Llama 3's template trims each message's content. */
static void put_trimmed(struct af_buf *b, const char *s)
{
    size_t n = strlen(s);
    while (n && strchr(" \t\r\n", *s)) {
        s++;
        n--;
    }
    while (n && strchr(" \t\r\n", s[n - 1]))
        n--;
    (void)af_buf_append(b, s, n);
}

char *chat_format(enum chat_template t, const struct chat_msg *msgs, size_t n, int add_assistant,
                  const char *default_system)
{
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    int has_system = n > 0 && !strcmp(msgs[0].role, "system");
    if (t == CHAT_TEMPLATE_LLAMA3) {
        (void)af_buf_puts(&b, "<|begin_of_text|>");
        for (size_t i = 0; i < n; i++) {
            (void)af_buf_printf(&b, "<|start_header_id|>%s<|end_header_id|>\n\n", msgs[i].role);
            put_trimmed(&b, msgs[i].content ? msgs[i].content : "");
            (void)af_buf_puts(&b, "<|eot_id|>");
        }
        if (add_assistant)
            (void)af_buf_puts(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    } else {
        if (!has_system && default_system)
            (void)af_buf_printf(&b, "<|im_start|>system\n%s<|im_end|>\n", default_system);
        for (size_t i = 0; i < n; i++)
            (void)af_buf_printf(&b, "<|im_start|>%s\n%s<|im_end|>\n", msgs[i].role,
                                msgs[i].content ? msgs[i].content : "");
        if (add_assistant)
            (void)af_buf_puts(&b, "<|im_start|>assistant\n");
    }
    return af_buf_detach(&b);
}
