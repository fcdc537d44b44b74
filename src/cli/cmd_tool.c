/*
 * cmd_tool.c - `agentflow tool list` prints every tool card as JSON; `agentflow tool call NAME
 * --args JSON` runs one tool directly (for tests and for users debugging tools).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/config.h"
#include "core/clock.h"
#include "core/jsonx.h"

static void tool_usage(FILE *f)
{
    fprintf(f, "usage: agentflow tool list [--tool-opt KEY=VALUE]... [--mcp \"CMD ARGS\"]...\n"
               "       agentflow tool call NAME --args JSON [--url URL] [--model NAME]\n"
               "                           [--tool-opt KEY=VALUE]... [--wiki-db DB]\n"
               "                           [--mcp \"CMD ARGS\"]...\n"
               "\n"
               "list   prints each tool's card as JSON: the built-ins, then the tools of the\n"
               "       MCP servers given by --mcp (repeatable) or the tool option mcp\n"
               "call   validates JSON arguments against the tool's card, runs the tool and\n"
               "       prints {tool, args, result, error, duration_ms}. Tools that call\n"
               "       an LLM use --url/--model (or AGENTFLOW_URL/AGENTFLOW_MODEL). Tool\n"
               "       options (docs/CONFIG.md) come from --tool-opt or their variables.\n"
               "\n"
               "Exit codes: 0 ok (call: the tool ran, even if it reported an error), 2 usage\n"
               "(a bad flag, unknown tool, arguments the card refuses), 3 a tool could not be\n"
               "set up (an MCP server that does not start or answer), 4 a file named on the\n"
               "command line (a gguf: model, a scripted: file) that is missing or malformed.\n");
}

static int print_json(json_t *j)
{
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | AF_JSON_REAL_OUT);
    printf("%s\n", s ? s : "null");
    free(s);
    json_decref(j);
    return CLI_OK;
}

static int tool_list(struct af_tool_registry *r)
{
    json_t *all = json_array();
    for (size_t i = 0; i < af_tool_registry_count(r); i++)
        json_array_append_new(all, af_tool_card_json(af_tool_card(af_tool_registry_at(r, i))));
    return print_json(all);
}

/* The built-ins plus the tools of the configured MCP servers. NULL (message printed) on error. */
static struct af_tool_registry *load_tools(const json_t *tool_opts)
{
    char err[1024];
    struct af_tool_registry *r = af_tool_registry_new();
    if (af_tool_registry_add_builtins(r, NULL, tool_opts, err, sizeof err) ||
        af_tool_registry_add_mcp(r, tool_opts, err, sizeof err)) {
        fprintf(stderr, "agentflow tool: %s\n", err);
        af_tool_registry_free(r);
        return NULL;
    }
    return r;
}

/* --mcp, --tool-opt and --wiki-db into flags["tool_options"]. 0, or -1 (message printed). */
static int tool_opt_arg(json_t *flags, int o, const char *arg)
{
    char kv[4096], err[512];
    if (o == 'c') {
        json_t *t = json_object_get(flags, "tool_options");
        if (!t) {
            t = json_object();
            json_object_set_new(flags, "tool_options", t);
        }
        af_tool_mcp_option_append(t, arg);
        return 0;
    }
    snprintf(kv, sizeof kv, "%s%s", o == 'w' ? "wiki_db=" : "", arg);
    if (config_tool_opt_flag(flags, kv, err, sizeof err)) {
        fprintf(stderr, "agentflow tool: %s\n", err);
        return -1;
    }
    return 0;
}

static int tool_list_cmd(int argc, char **argv, json_t *flags)
{
    static const struct option opts[] = {{"tool-opt", required_argument, 0, 'o'},
                                         {"wiki-db", required_argument, 0, 'w'},
                                         {"mcp", required_argument, 0, 'c'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (o == 'o' || o == 'w' || o == 'c') {
            if (tool_opt_arg(flags, o, optarg))
                return CLI_EUSAGE;
        } else {
            tool_usage(o == 'h' ? stdout : stderr);
            return o == 'h' ? CLI_OK : CLI_EUSAGE;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "agentflow tool list: unexpected argument '%s'\n", argv[optind]);
        return CLI_EUSAGE;
    }
    struct af_tool_registry *r = load_tools(json_object_get(flags, "tool_options"));
    if (!r)
        return CLI_EBACKEND;
    int code = tool_list(r);
    af_tool_registry_free(r);
    return code;
}

static int run_call(struct af_tool *tool, json_t *args, const struct run_config *cfg)
{
    char err[1024];
    json_t *valid = NULL, *result = NULL;
    const struct af_tool_card *card = af_tool_card(tool);
    if (af_tool_validate_args(card, args, &valid, err, sizeof err) != AF_OK) {
        fprintf(stderr, "agentflow tool call: %s\n", err);
        return CLI_EUSAGE;
    }
    struct backends be;
    memset(&be, 0, sizeof be);
    struct af_tool_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    /* Without a URL the tool still runs; one that needs its LLM reports that as its error.
     * A URL that was given but does not open is the user's to fix. */
    if (card->requires_llm) {
        int brc = backends_open(cfg, &be, err, sizeof err);
        if (brc == AF_OK) {
            ctx.llm = be.llm[AF_SLOT_TOOL];
            ctx.sampling = &cfg->slots[AF_SLOT_TOOL].sampling;
            ctx.model = cfg->slots[AF_SLOT_TOOL].model;
        } else if (cfg->slots[AF_SLOT_FIXED].url || cfg->slots[AF_SLOT_TOOL].url) {
            fprintf(stderr, "agentflow tool call: %s\n", err);
            json_decref(valid);
            return brc == AF_EINVAL ? CLI_EUSAGE : CLI_EINPUT;
        }
    }
    double t0 = af_clock_ms();
    int rc = af_tool_call(tool, valid, &ctx, &result);
    json_t *out = json_object();
    json_object_set_new(out, "tool", json_string(card->name));
    json_object_set_new(out, "args", valid);
    json_object_set_new(out, "result", result ? result : json_null());
    json_object_set_new(out, "error", rc ? json_string(af_strerror(rc)) : json_null());
    json_object_set_new(out, "duration_ms", json_real(af_clock_ms() - t0));
    backends_close(&be);
    return print_json(out);
}

static int tool_call(int argc, char **argv, json_t *flags)
{
    static const struct option opts[] = {
        {"args", required_argument, 0, 'a'},    {"url", required_argument, 0, 'u'},
        {"model", required_argument, 0, 'm'},   {"tool-opt", required_argument, 0, 'o'},
        {"wiki-db", required_argument, 0, 'w'}, {"mcp", required_argument, 0, 'c'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    const char *args_text = "{}", *url = NULL, *model = NULL;
    char err[512];
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (o == 'a')
            args_text = optarg;
        else if (o == 'u')
            url = optarg;
        else if (o == 'm')
            model = optarg;
        else if (o == 'o' || o == 'w' || o == 'c') {
            if (tool_opt_arg(flags, o, optarg))
                return CLI_EUSAGE;
        } else {
            tool_usage(o == 'h' ? stdout : stderr);
            return o == 'h' ? CLI_OK : CLI_EUSAGE;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "agentflow tool call: expected one tool NAME\n");
        return CLI_EUSAGE;
    }
    struct af_tool_registry *r = load_tools(json_object_get(flags, "tool_options"));
    if (!r)
        return CLI_EBACKEND;
    struct af_tool *tool = af_tool_registry_find(r, argv[optind]);
    if (!tool) {
        fprintf(stderr, "agentflow tool call: unknown tool '%s' (see 'agentflow tool list')\n",
                argv[optind]);
        af_tool_registry_free(r);
        return CLI_EUSAGE;
    }
    json_error_t je;
    json_t *args = json_loads(args_text, 0, &je);
    if (!json_is_object(args)) {
        fprintf(stderr, "agentflow tool call: --args must be a JSON object (column %d: %s)\n",
                je.column, args ? "not an object" : je.text);
        json_decref(args);
        af_tool_registry_free(r);
        return CLI_EUSAGE;
    }
    struct run_config cfg;
    config_init(&cfg);
    int code = CLI_OK;
    if (config_apply_env(&cfg, err, sizeof err) != AF_OK) {
        fprintf(stderr, "agentflow tool call: %s\n", err);
        code = CLI_EUSAGE;
    } else {
        if (url)
            config_set_url(&cfg, -1, url);
        if (model)
            config_set_model(&cfg, -1, model);
        code = run_call(tool, args, &cfg);
    }
    json_decref(args);
    config_deinit(&cfg);
    af_tool_registry_free(r);
    return code;
}

int cmd_tool(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "list") && strcmp(argv[1], "call"))) {
        int help = argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"));
        tool_usage(help ? stdout : stderr);
        return help ? CLI_OK : CLI_EUSAGE;
    }
    json_t *flags = json_object();
    int code = !strcmp(argv[1], "call") ? tool_call(argc - 1, argv + 1, flags)
                                        : tool_list_cmd(argc - 1, argv + 1, flags);
    json_decref(flags);
    return code;
}
