/*
 * tools.h - tool cards, the tool registry, and the call interface.
 *
 * A tool has a card (name, description, typed parameters with defaults, output type,
 * limitations) and a call function that receives already-parsed, validated JSON arguments and
 * returns a JSON result. The executor never hands model text to a tool.
 *
 * Results use jansson's json_t. Thread-safety: a registry is read-only after setup and may be
 * shared by concurrent flows; a tool's call function must be safe from any thread.
 */
#ifndef AGENTFLOW_TOOLS_H
#define AGENTFLOW_TOOLS_H

#include <jansson.h>
#include <stddef.h>

#include "agentflow/err.h"
#include "agentflow/llm.h"

enum af_param_type {
    AF_PARAM_STR,
    AF_PARAM_INT,
    AF_PARAM_FLOAT, /* accepts ints too */
    AF_PARAM_BOOL,
    AF_PARAM_LIST,
    AF_PARAM_DICT,
    AF_PARAM_ANY
};

struct af_tool_param {
    const char *name;
    enum af_param_type type;
    int required;
    const char *default_json; /* JSON text of the default when not required, or NULL */
    const char *description;
};

#define AF_TOOL_MAX_PARAMS 16
#define AF_TOOL_MAX_DEMOS 4

struct af_tool_card {
    const char *name; /* the long name the planner sees, e.g. Generalist_Solution_Generator_Tool */
    const char *description;
    const char *version;
    size_t n_params;
    struct af_tool_param params[AF_TOOL_MAX_PARAMS];
    const char *output_type;
    const char *limitations;
    const char *best_practices;
    size_t n_demos;
    const char *demo_commands[AF_TOOL_MAX_DEMOS]; /* shown to the executor, never run */
    const char *demo_descriptions[AF_TOOL_MAX_DEMOS];
    int requires_llm;
};

/* What a call gets besides its arguments. Everything is borrowed for the duration of the call. */
struct af_tool_ctx {
    struct af_llm *llm;                 /* the tool's LLM back-end, or NULL */
    const struct af_sampling *sampling; /* sampling for that back-end */
    const char *model;                  /* model name for that back-end, or NULL */
    double deadline_ms;                 /* af_clock_ms() value after which to give up; 0 = none */
    /* Optional: told about every LLM call the tool makes (for traces and usage). */
    void (*on_llm_call)(void *user, const struct af_llm_request *req,
                        const struct af_llm_reply *reply);
    void *user;
};

/* Sends req on ctx->llm and reports the call to ctx->on_llm_call. Returns reply->err. */
AF_NODISCARD int af_tool_ctx_chat(const struct af_tool_ctx *ctx, const struct af_llm_request *req,
                                  struct af_llm_reply *reply);

/* Runs the tool. `args` is validated against the card (defaults filled). On success sets
 * *result (owned by the caller, json_decref) and returns 0. On failure returns AF_E* and sets
 * *result to a JSON string or object that describes the error. */
typedef int (*af_tool_call_fn)(void *self, const json_t *args, const struct af_tool_ctx *ctx,
                               json_t **result);

struct af_tool;

/* Creates a tool. The card is copied by pointer: it must outlive the tool (static cards).
 * `self` is owned by the tool and released with `free_self` (may be NULL). */
struct af_tool *af_tool_new(const struct af_tool_card *card, af_tool_call_fn call, void *self,
                            void (*free_self)(void *));
void af_tool_free(struct af_tool *t);
const struct af_tool_card *af_tool_card(const struct af_tool *t);
AF_NODISCARD int af_tool_call(struct af_tool *t, const json_t *args, const struct af_tool_ctx *ctx,
                              json_t **result);

/* The card as a JSON object: {tool_name, tool_description, tool_version, input_types,
 * output_type, demo_commands, user_metadata, require_llm_engine}. Owned by the caller. */
json_t *af_tool_card_json(const struct af_tool_card *card);

/* "str", "int", "float", "bool", "list", "dict" or "any". Static string. */
const char *af_tool_param_type_name(enum af_param_type t);

/* Canonical form of a tool name: split on runs of ' ' and '_', lowercase, join with '_'.
 * Writes at most outlen-1 bytes and NUL-terminates. */
void af_tool_canonical_name(const char *name, char *out, size_t outlen);

/* Checks `args` (a JSON object of keyword arguments; positional ones already mapped by name)
 * against the card: unknown names, missing required ones and wrong types are errors. On
 * success *out is a new object with defaults filled in (owned by the caller). On failure
 * returns AF_EINVAL and writes a message naming the argument into err. */
AF_NODISCARD int af_tool_validate_args(const struct af_tool_card *card, const json_t *args,
                                       json_t **out, char *err, size_t errlen);

/* --- Registry --------------------------------------------------------------------------- */
struct af_tool_registry;

struct af_tool_registry *af_tool_registry_new(void);
/* Frees the registry and every tool in it. Accepts NULL. */
void af_tool_registry_free(struct af_tool_registry *r);
/* Adds a tool; the registry takes ownership. Fails with AF_EINVAL on a duplicate name. */
AF_NODISCARD int af_tool_registry_add(struct af_tool_registry *r, struct af_tool *t);
size_t af_tool_registry_count(const struct af_tool_registry *r);
/* Tools in alphabetical order of their names. Borrowed. */
struct af_tool *af_tool_registry_at(const struct af_tool_registry *r, size_t i);
/* Finds a tool by name after canonicalisation (case, spaces, underscores), or by an alias:
 * the released AgentFlow's name for one of ours (Ground_Google_Search_Tool is Web_Search_Tool).
 * Borrowed or NULL. */
struct af_tool *af_tool_registry_find(const struct af_tool_registry *r, const char *name);
/* The built-in tool name that `name` is an alias of (after canonicalisation), or NULL.
 * Static. */
const char *af_tool_alias_target(const char *name);

/* Creates every built-in tool whose name is in `names` (comma-separated long names, canonical
 * matching; NULL or "" = all built-ins) and adds it to r. `opts` (borrowed, may be NULL) is a
 * JSON object of tool options such as {"wiki_db": PATH}; each tool reads the keys it knows (see
 * docs/CONFIG.md) and falls back to its environment variable. An unknown name fails with
 * AF_ENOTFOUND and a message naming it. */
AF_NODISCARD int af_tool_registry_add_builtins(struct af_tool_registry *r, const char *names,
                                               const json_t *opts, char *err, size_t errlen);

/* Returns opts[key] when it is a non-empty string, else getenv(env) when non-empty, else NULL.
 * Borrowed from opts or the environment. */
const char *af_tool_option(const json_t *opts, const char *key, const char *env);

/* Built-in tools. Each returns a new tool owned by the caller; opts as above. */
struct af_tool *af_tool_base_generator_new(const json_t *opts);
/* Python_Code_Generator_Tool: generated or given code run in a sandbox (tools/sandbox.h). */
struct af_tool *af_tool_python_coder_new(const json_t *opts);
/* Wikipedia_RAG_Search_Tool: BM25 over an `agentflow index build` database named by opts
 * "wiki_db" or AGENTFLOW_WIKI_DB (read now). Without either, or with a missing or bad database,
 * the tool still exists and each call returns AF_ETOOL with an error result that names the file
 * or says how to configure one. The index is opened on the first call and kept; calls are
 * serialised on it, so the tool is safe from any thread. With opts "wiki_url" or
 * AGENTFLOW_WIKI_URL (an http/https Search-R1 / FlashRAG retriever URL, e.g.
 * http://127.0.0.1:8000/retrieve) it queries that server instead; wiki_url wins over wiki_db. */
struct af_tool *af_tool_wikipedia_new(const json_t *opts);

/* Web_Search_Tool: a SearXNG JSON search at opts "search_url" or AGENTFLOW_SEARCH_URL (read
 * now); without one, or when the provider fails, each call returns AF_ETOOL with an error
 * result. Safe from any thread. */
struct af_tool *af_tool_web_search_new(const json_t *opts);
/* Web_RAG_Search_Tool: fetches one http(s) page, ranks its chunks against the query (BM25, or
 * embeddings from opts "embed_url" / AGENTFLOW_EMBED_URL) and has the tool's LLM answer from
 * the best ones. Safe from any thread. */
struct af_tool *af_tool_web_rag_new(const json_t *opts);

/* --- MCP servers (tools/mcp_tool.c) --------------------------------------------------------- */
/* Starts one Model Context Protocol server over stdio (spec: "COMMAND ARGS..." or
 * "stdio:COMMAND ARGS...", split like a shell: blanks, quotes, backslashes), or connects to one
 * over streamable HTTP (spec: an http:// or https:// endpoint URL), and adds one tool
 * per tool it lists, keeping the server's tool names. Each card is built from the tool's
 * inputSchema; calls are checked against that schema, sent as tools/call, and return
 * {text, is_error, content[, structured_content]} (AF_ETOOL when isError is true; AF_EINVAL
 * with an {error} result when the arguments break the schema). Options read
 * from opts: "mcp_timeout_ms" / AGENTFLOW_MCP_TIMEOUT_MS (per request, default 30000),
 * "mcp_max_bytes" (largest message, default 1048576), "mcp_stderr" (a file for the servers'
 * stderr; default inherited). A tool name that is already in r is an error (AF_EINVAL) and
 * nothing from that server is added. Errors name the server command. The tools share the
 * server, which stops when the last of them is freed; calls are serialised per server, so the
 * tools are safe from any thread, and a server that crashes or hangs gives AF_ETOOL results. */
AF_NODISCARD int af_tool_registry_add_mcp_server(struct af_tool_registry *r, const char *spec,
                                                 const json_t *opts, char *err, size_t errlen);
/* Adds every server named by opts "mcp" or AGENTFLOW_MCP: one spec per line, or a JSON array of
 * spec strings. Nothing configured is not an error. Stops at the first failing server. */
AF_NODISCARD int af_tool_registry_add_mcp(struct af_tool_registry *r, const json_t *opts, char *err,
                                          size_t errlen);
/* Appends spec as one more line of opts["mcp"] (for a repeatable --mcp flag). opts is borrowed
 * and changed. */
void af_tool_mcp_option_append(json_t *opts, const char *spec);

#endif
