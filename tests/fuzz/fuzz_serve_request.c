/*
 * fuzz_serve_request.c - libFuzzer target for the request bodies of `agentflow serve`
 * (serve_parse_chat and serve_parse_run in src/serve/request.c).
 *
 * Each input is tried as a chat completions body and as a runs body against a registry of two
 * tools. A refusal must be a 4xx with a type, a code and a message; an acceptance must give a
 * query with text, and tools only from the registry.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct af_tool_registry *registry(void)
{
    static struct af_tool_registry *reg; /* built once; the fuzzer is one process */
    char err[256];
    if (!reg) {
        reg = af_tool_registry_new();
        if (af_tool_registry_add_builtins(reg,
                                          "Generalist_Solution_Generator_Tool,"
                                          "Python_Code_Generator_Tool",
                                          NULL, err, sizeof err))
            abort();
    }
    return reg;
}

static void check(int rc, const struct job_spec *spec, const struct serve_err *e)
{
    if (rc != 0) {
        if (e->status < 400 || e->status > 499 || !e->type || !e->code || !e->message[0])
            abort();
        return;
    }
    if (!spec->query || !spec->query[strspn(spec->query, " \t\r\n")] || !spec->title)
        abort();
    if (spec->tools && af_tool_registry_count(spec->tools) > 2)
        abort();
    if (spec->max_steps < 0 || spec->max_steps > 1000 || spec->max_time_s < 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    struct job_spec spec;
    struct serve_err e;
    struct chat_opts o;
    memset(&spec, 0, sizeof spec);
    memset(&e, 0, sizeof e);
    check(serve_parse_chat(body, size, "agentflow", registry(), &spec, &o, &e), &spec, &e);
    job_spec_deinit(&spec);
    memset(&e, 0, sizeof e);
    check(serve_parse_run(body, size, registry(), &spec, &e), &spec, &e);
    job_spec_deinit(&spec);
    return 0;
}
