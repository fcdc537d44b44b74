/*
 * config.h - the run configuration: engine slots, budgets, tools, prompts, trace.
 *
 * Built in layers, lowest first: defaults, --config FILE.json, environment (OPENAI_API_KEY,
 * AGENTFLOW_*), flags. The same keys exist at every layer (docs/CONFIG.md).
 */
#ifndef AF_CLI_CONFIG_H
#define AF_CLI_CONFIG_H

#include <jansson.h>
#include <stddef.h>

#include <stdint.h>

#include "agentflow/flow.h"

struct slot_cfg {
    char *url;         /* http(s)://.../v1, scripted:FILE or gguf:PATH; owned */
    char *model;       /* owned */
    char *api_key_env; /* name of the variable holding the key; owned */
    struct af_sampling sampling;
    char *stop[AF_LLM_MAX_STOP]; /* owned; sampling.stop points here */
    double timeout_s;
    double connect_timeout_s;
    double stall_timeout_s; /* a reply that begins then stalls this long fails; 0 = no check */
    int max_retries;
    int temperature_set; /* a --config file set temperature (the embedded default then yields) */
};

struct run_config {
    struct slot_cfg slots[AF_N_SLOTS];
    int max_steps;
    double max_time_s;
    char *tools;   /* comma-separated long names; NULL = all built-ins */
    char *prompts; /* folder of template overrides */
    char *trace;   /* JSONL trace file */
    int detailed;
    int render_python;    /* prompts show tools, cards and memory as Python literals */
    json_t *tool_options; /* object of strings read by the tools (owned) */
    int threads;          /* in-process engine: OpenMP threads (0 = all cores) */
    int64_t ctx;          /* in-process engine: tokens per sequence (0 = the model's) */
    int prefill_chunk;    /* in-process engine: prompt tokens per scheduler step (0 = 256) */
    int draft;            /* in-process engine: prompt-lookup draft tokens per step (0 = off) */
    int kv_mib;           /* in-process engine: the paged KV cache's MiB (0 = 1024) */
    int kv_f16;           /* in-process engine: keys and values cached as F16 (kv_type "f16") */
    int max_batch;        /* in-process engine: generations decoded together (0 = 64) */
    char *chat_template;  /* in-process engine: "chatml", "llama3" or NULL = the model's */
    json_t *effective;    /* the merged configuration as JSON, for records */
};

void config_init(struct run_config *c);
void config_deinit(struct run_config *c);

/* Applies a JSON object (a config file's content or env-derived keys). Returns 0 or AF_EINVAL
 * with a message naming the key at fault. */
int config_apply_json(struct run_config *c, json_t *j, const char *origin, char *err,
                      size_t errlen);
/* Applies AGENTFLOW_* environment variables. */
int config_apply_env(struct run_config *c, char *err, size_t errlen);
/* Sets one slot's url or model (slot < 0: every slot). Strings copied. */
void config_set_url(struct run_config *c, int slot, const char *url);
void config_set_model(struct run_config *c, int slot, const char *model);

/* The effective configuration as JSON (every slot's url, model, key variable, sampling and
 * timeouts; never a key itself), for result records. Owned by the caller. */
json_t *config_to_json(const struct run_config *c);

/* Parses a `--tool-opt KEY=VALUE` flag into flags["tool_options"][KEY]. Returns 0, or AF_EINVAL
 * with a message when there is no '=' or the key is empty. */
int config_tool_opt_flag(json_t *flags, const char *kv, char *err, size_t errlen);

/* The back-ends of a configuration: slots naming the same URL and key share one handle. */
struct backends {
    struct af_llm *llm[AF_N_SLOTS]; /* borrowed views into owned[] */
    struct af_llm *owned[AF_N_SLOTS];
    size_t n_owned;
};

/* Creates the back-ends. Fails with AF_EINVAL (a slot without a URL, an unknown scheme) or
 * AF_EPARSE (a gguf: or scripted: file that is missing or unusable), message in err. */
int backends_open(const struct run_config *c, struct backends *b, char *err, size_t errlen);
void backends_close(struct backends *b);

/* Fills flow params from the config and back-ends (pointers borrowed from both). */
void config_flow_params(const struct run_config *c, const struct backends *b,
                        struct af_flow_params *p);

#endif
