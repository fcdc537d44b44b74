/*
 * cmd_tool.c - `agentflow tool list` prints every tool card as JSON.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

int cmd_tool(int argc, char **argv)
{
    int help = argc >= 2 && strcmp(argv[1], "--help") == 0;
    if (help || argc < 2 || strcmp(argv[1], "list") != 0) {
        fprintf(help ? stdout : stderr,
                "usage: agentflow tool list\n\nPrints each built-in tool's card as JSON.\n");
        return help ? CLI_OK : CLI_EUSAGE;
    }
    struct af_tool_registry *r = af_tool_registry_new();
    char err[512];
    if (af_tool_registry_add_builtins(r, NULL, err, sizeof err)) {
        fprintf(stderr, "agentflow tool: %s\n", err);
        af_tool_registry_free(r);
        return CLI_EFAIL;
    }
    json_t *all = json_array();
    for (size_t i = 0; i < af_tool_registry_count(r); i++)
        json_array_append_new(all, af_tool_card_json(af_tool_card(af_tool_registry_at(r, i))));
    char *s = json_dumps(all, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    printf("%s\n", s ? s : "[]");
    free(s);
    json_decref(all);
    af_tool_registry_free(r);
    return CLI_OK;
}
