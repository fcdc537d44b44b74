/*
 * fuzz_replies.c - libFuzzer target for the module-reply parsers (flow/parse.h) and the
 * scripted back-end's script loader: any bytes in, no crash, and well-formed outputs.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agentflow/llm.h"
#include "flow/parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    struct next_step ns;
    char err[256];
    if (parse_next_step(text, &ns, err, sizeof err) == AF_OK) {
        if (!ns.context || !ns.sub_goal || !ns.tool_name || !ns.tool_name[0])
            abort();
        next_step_deinit(&ns);
    }
    int expl;
    int v = parse_verdict(text, &expl);
    if (v != 0 && v != 1)
        abort();
    free(parse_final_answer(text));
    af_llm_free(af_llm_scripted_new(text, err, sizeof err));
    free(text);
    return 0;
}
