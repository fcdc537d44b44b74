/*
 * prompts_data.h - the prompt templates compiled in from the prompts folder (build/MODE/gen/).
 */
#ifndef AF_FLOW_PROMPTS_DATA_H
#define AF_FLOW_PROMPTS_DATA_H

struct af_prompt_file {
    const char *name; /* file base name without .txt */
    const char *text;
};

/* Terminated by an entry with name == NULL. */
extern const struct af_prompt_file af_prompt_files[];

#endif
