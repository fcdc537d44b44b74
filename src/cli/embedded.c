/*
 * embedded.c - the default back-end when no URL is given: the embedded model trained on the
 * practice world (models/agentflow-world.gguf) in every slot without a URL, with the compact
 * prompts, the world's passage index (built on first use) and the sandboxed Python tool. The
 * planner slot takes the Flow-GRPO planner (models/agentflow-world-planner.gguf, the model's
 * name with "-planner") when there is one, as the paper trains the planner alone. The planner
 * decodes greedily unless the configuration sets a temperature.
 *
 * Nothing changes when every slot has a URL, or when no embedded model is found: the usual
 * "no back-end URL" message then says how to get one.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agentflow/world.h"
#include "cli/batch.h"
#include "cli/cli.h"
#include "core/xalloc.h"
#include "tools/wiki_index.h"

#define EMBEDDED_NAME "models/agentflow-world.gguf"

/* The repository root guessed from the executable (build/MODE/agentflow or build/agentflow),
 * into root; 0 when it cannot be told. */
static int exe_root(char *root, size_t len)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return 0;
    exe[n] = '\0';
    char *b = strstr(exe, "/build/");
    if (!b)
        return 0;
    *b = '\0';
    snprintf(root, len, "%s", exe);
    return 1;
}

/* The embedded model's path into out, or 0 when there is none. */
static int find_model(char *out, size_t len, char *root, size_t rlen)
{
    const char *env = getenv("AGENTFLOW_EMBEDDED_MODEL");
    if (env && *env) {
        snprintf(out, len, "%s", env);
        if (!exe_root(root, rlen))
            snprintf(root, rlen, ".");
        return access(out, R_OK) == 0;
    }
    if (exe_root(root, rlen)) {
        snprintf(out, len, "%s/%s", root, EMBEDDED_NAME);
        if (access(out, R_OK) == 0)
            return 1;
    }
    snprintf(root, rlen, ".");
    snprintf(out, len, "%s", EMBEDDED_NAME);
    return access(out, R_OK) == 0;
}

/* The planner's file into out: AGENTFLOW_EMBEDDED_PLANNER when set (empty: none), else the
 * model's path with "-planner" before ".gguf", as make-model.sh writes it; 0 when there is none,
 * and the planner slot then takes the embedded model like the others. */
static int find_planner(const char *model, char *out, size_t len)
{
    const char *env = getenv("AGENTFLOW_EMBEDDED_PLANNER");
    if (env) {
        snprintf(out, len, "%s", env);
        return *env && access(out, R_OK) == 0;
    }
    size_t n = strlen(model);
    if (n > 5 && strcmp(model + n - 5, ".gguf") == 0)
        n -= 5;
    snprintf(out, len, "%.*s-planner.gguf", (int)n, model);
    return access(out, R_OK) == 0;
}

/* DIR/wiki.db of the practice world, built (world and index) when missing. */
static int world_index(const char *dir, const char *cmd, char *db, size_t len)
{
    snprintf(db, len, "%s/wiki.db", dir);
    if (access(db, R_OK) == 0)
        return CLI_OK;
    fprintf(stderr, "%s: building the practice world and its index in %s (first use)\n", cmd, dir);
    char err[1024], in[PATH_MAX + 96];
    struct af_world_params p = af_world_default_params();
    if (af_world_build(dir, &p, NULL, err, sizeof err) != AF_OK) {
        fprintf(stderr, "%s: %s\n", cmd, err);
        return CLI_EINPUT;
    }
    snprintf(in, sizeof in, "%s/passages.jsonl", dir);
    struct wiki_build_params wp = wiki_build_default_params();
    wp.shards = 1;
    struct wiki_build_stats st;
    if (wiki_index_build(in, db, &wp, &st, err, sizeof err) != AF_OK) {
        fprintf(stderr, "%s: %s\n", cmd, err);
        return CLI_EINPUT;
    }
    return CLI_OK;
}

int run_apply_embedded(struct run_config *cfg, const char *cmd, int quiet)
{
    int missing = 0;
    for (int i = 0; i < AF_N_SLOTS; i++)
        missing += !cfg->slots[i].url || !cfg->slots[i].url[0];
    if (!missing)
        return CLI_OK;
    char model[PATH_MAX + 64], root[PATH_MAX], url[PATH_MAX + 80];
    char planner[PATH_MAX + 64], purl[PATH_MAX + 80];
    if (!find_model(model, sizeof model, root, sizeof root))
        return CLI_OK;
    int own_planner = find_planner(model, planner, sizeof planner);
    snprintf(url, sizeof url, "gguf:%s", model);
    snprintf(purl, sizeof purl, "gguf:%s", planner);
    for (int i = 0; i < AF_N_SLOTS; i++)
        if (!cfg->slots[i].url || !cfg->slots[i].url[0]) {
            config_set_url(cfg, i, i == AF_SLOT_PLANNER && own_planner ? purl : url);
            /* The flow samples its planner at 0.7, as the paper does its 7B one. This small model
             * copies names and numbers into its sub-goals, and sampling breaks the copies: greedy
             * answers 68 of 100 held-out questions of an unseen world where 0.7 answers 55
             * (docs/WORLD.md). A temperature in --config still wins. */
            if (i == AF_SLOT_PLANNER && !cfg->slots[i].temperature_set)
                cfg->slots[i].sampling.temperature = 0;
        }
    if (!cfg->prompts)
        cfg->prompts = af_xstrdup("compact");
    if (!cfg->tools)
        cfg->tools = af_xstrdup("Wikipedia_RAG_Search_Tool,Python_Code_Generator_Tool,"
                                "Generalist_Solution_Generator_Tool");
    const char *db_env = getenv("AGENTFLOW_WIKI_DB");
    char db[PATH_MAX + 64] = "";
    if (!json_object_get(cfg->tool_options, "wiki_db") && !(db_env && *db_env)) {
        char dir[PATH_MAX + 32];
        const char *wenv = getenv("AGENTFLOW_WORLD_DIR");
        if (wenv && *wenv)
            snprintf(dir, sizeof dir, "%s", wenv);
        else
            snprintf(dir, sizeof dir, "%s/build/world", root);
        int code = world_index(dir, cmd, db, sizeof db);
        if (code != CLI_OK)
            return code;
        json_object_set_new(cfg->tool_options, "wiki_db", json_string(db));
    }
    if (!quiet)
        fprintf(stderr, "%s: no --url given: the embedded model %s answers%s%s%s%s\n", cmd, model,
                own_planner ? ", planning with " : "", own_planner ? planner : "",
                db[0] ? ", searching " : "", db);
    return CLI_OK;
}
