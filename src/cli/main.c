/*
 * main.c - the agentflow CLI entry point: dispatches to a subcommand.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

#define AGENTFLOW_VERSION "0.1.0"

static void usage(FILE *f)
{
    fprintf(f, "usage: agentflow COMMAND [options]\n"
               "\n"
               "commands:\n"
               "  run      answer a query (or a batch of queries) with the agent flow\n"
               "  serve    serve the flow over an OpenAI-compatible HTTP API, with a live page\n"
               "  tool     list the tools or call one directly\n"
               "  eval     benchmarks: run them through the flow (eval run), write the reports\n"
               "           of a run (eval report), or score saved predictions (eval score)\n"
               "  index    build or query the offline Wikipedia passage index\n"
               "  model    inspect, run, benchmark, quantize, merge or generate GGUF models\n"
               "  train    fine-tune a model (sft: chat JSONL; grpo: Flow-GRPO in the flow;\n"
               "           plot: curves of a run)\n"
               "  world    generate the practice world: encyclopedia, questions, index\n"
               "  version  print the version\n"
               "\n"
               "Run 'agentflow COMMAND --help' for a command's options.\n"
               "Exit codes, for every command: 0 ok, 2 usage (a bad flag or value), 3 a\n"
               "back-end failed (an LLM server, the engine, a tool's server), 4 a file named on\n"
               "the command line that is missing or malformed (or cannot be written).\n");
}

int cli_exit_for(int af_err)
{
    switch (af_err) {
    case AF_OK:
        return CLI_OK;
    case AF_EBACKEND:
    case AF_ETIMEOUT:
    case AF_EIO:
    case AF_ENOTFOUND:
    case AF_EPARSE:  /* a back-end's reply that could not be read (malformed JSON) */
    case AF_ETOOBIG: /* a reply over max_response_bytes */
        return CLI_EBACKEND;
    case AF_EINVAL:
        return CLI_EUSAGE;
    default: /* a tool's or the engine's failure, or a bug: not the user's input */
        return CLI_EBACKEND;
    }
}

int main(int argc, char **argv)
{
    /* A peer closing a socket must be an error value, not a kill. */
    signal(SIGPIPE, SIG_IGN);
    if (argc < 2) {
        usage(stderr);
        return CLI_EUSAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "run") == 0)
        return cmd_run(argc - 1, argv + 1);
    if (strcmp(cmd, "serve") == 0)
        return cmd_serve(argc - 1, argv + 1);
    if (strcmp(cmd, "tool") == 0)
        return cmd_tool(argc - 1, argv + 1);
    if (strcmp(cmd, "eval") == 0)
        return cmd_eval(argc - 1, argv + 1);
    if (strcmp(cmd, "index") == 0)
        return cmd_index(argc - 1, argv + 1);
    if (strcmp(cmd, "model") == 0)
        return cmd_model(argc - 1, argv + 1);
    if (strcmp(cmd, "train") == 0)
        return cmd_train(argc - 1, argv + 1);
    if (strcmp(cmd, "world") == 0)
        return cmd_world(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("agentflow %s\n", AGENTFLOW_VERSION);
        return CLI_OK;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return CLI_OK;
    }
    fprintf(stderr, "agentflow: unknown command '%s'\n", cmd);
    usage(stderr);
    return CLI_EUSAGE;
}
