/*
 * fuzz_pycall.c - libFuzzer target for the executor's command parser (flow/pycall.h).
 *
 * Each input is treated as a whole executor reply: the command is extracted from it and
 * parsed, the raw input is parsed as code too, and every call that parses is bound to a small
 * card so that validation runs as well. Invariants checked: a failed parse leaves the list
 * empty with a "line L:C: " message; a successful one never exceeds the call limit and holds
 * only arrays, objects and valid JSON.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flow/pycall.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct af_tool_card fuzz_card = {
    .name = "Fuzz_Tool",
    .n_params = 4,
    .params =
        {
            {"query", AF_PARAM_STR, 1, NULL, "q"},
            {"k", AF_PARAM_INT, 0, "3", "k"},
            {"t", AF_PARAM_FLOAT, 0, "0.5", "t"},
            {"x", AF_PARAM_ANY, 0, NULL, "x"},
        },
};

static void check_parse(const char *src, size_t len)
{
    struct af_pycall_list l;
    char err[256];
    int rc = af_pycall_parse(src, len, &l, err, sizeof err);
    if (rc != AF_OK) {
        if (l.n != 0 || l.calls != NULL || strncmp(err, "line ", 5) != 0)
            abort();
        return;
    }
    if (l.n > AF_PYCALL_MAX_CALLS)
        abort();
    for (size_t i = 0; i < l.n; i++) {
        const struct af_pycall *c = &l.calls[i];
        if (!json_is_array(c->args) || !json_is_object(c->kwargs) || c->line < 1)
            abort();
        char *dump = json_dumps(c->kwargs, JSON_COMPACT);
        if (!dump)
            abort();
        free(dump);
        json_t *bound = NULL;
        if (af_pycall_bind(c, &fuzz_card, &bound, err, sizeof err) == AF_OK)
            json_decref(bound);
        else if (bound)
            abort();
    }
    af_pycall_list_deinit(&l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    check_parse(text, size);
    char *cmd = af_pycall_extract_command(text);
    if (cmd) {
        check_parse(cmd, strlen(cmd));
        free(cmd);
    }
    free(text);
    return 0;
}
