/*
 * prompts.h - template rendering for the flow's prompts (private to flow/).
 *
 * Templates use {{name}} placeholders. An unknown placeholder renders as empty text, so a
 * user's own templates may use any subset of the variables.
 */
#ifndef AF_FLOW_PROMPTS_H
#define AF_FLOW_PROMPTS_H

#include <stddef.h>

#include "agentflow/flow.h"

struct prompt_var {
    const char *name;
    const char *value; /* borrowed; NULL renders as "" */
};

/* Renders template `name` with vars. Returns a malloc'd string owned by the caller, or NULL
 * when the template does not exist. p may be NULL (compiled-in templates). */
char *prompt_render(const struct af_prompts *p, const char *name, const struct prompt_var *vars,
                    size_t n_vars);

#endif
