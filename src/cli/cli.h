/*
 * cli.h - the agentflow command-line front end: subcommands and their shared helpers.
 *
 * Only cli/ prints and chooses exit codes: 0 ok, 2 usage, 3 back-end error, 4 bad input file.
 */
#ifndef AF_CLI_CLI_H
#define AF_CLI_CLI_H

#include <stdio.h>

#include "agentflow/flow.h"

/* The one rule: a bad flag 2, a back-end that fails 3, a file named on the command line that
 * is missing or malformed 4. */
enum { CLI_OK = 0, CLI_EUSAGE = 2, CLI_EBACKEND = 3, CLI_EINPUT = 4 };

int cmd_run(int argc, char **argv);
int cmd_tool(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_index(int argc, char **argv);
int cmd_model(int argc, char **argv);
/* `serve` (cmd_serve.c): the flow behind an OpenAI-compatible HTTP API and a live page. */
int cmd_serve(int argc, char **argv);
int cmd_train(int argc, char **argv);
/* `world build` (cmd_world.c): the practice world. */
int cmd_world(int argc, char **argv);
/* `model make-vocab` (cmd_model_vocab.c); argv[0] is "make-vocab". */
int cmd_model_make_vocab(int argc, char **argv);
/* `world traces` (cmd_world_traces.c): expert traces as SFT data; argv[0] is "traces". */
int cmd_world_traces(int argc, char **argv);
/* `train grpo` (cmd_grpo.c); argv[0] is "grpo". */
int cmd_train_grpo(int argc, char **argv);
/* `train plot RUN` (cmd_train_plot.c): curves.html and *.svg from RUN/metrics.jsonl. */
int cmd_train_plot(int argc, char **argv);

/* Prints a one-line notice on stderr when the model at `path` (a GGUF path, or a gguf: URL's
 * part with an optional "+lora:DIR") has random weights (made by `model make-random`). */
void cli_note_random_weights(const char *path);

/* A copy of s (NULL = "") to print on f: when f is a terminal, escape sequences (CSI, OSC
 * and the other ESC strings, whole) and control characters (C0 but newline and tab, DEL,
 * C1) are dropped, so a model's output cannot act on the terminal, and
 * invalid UTF-8 bytes become U+FFFD; one_line turns newlines and tabs into spaces too.
 * Elsewhere the bytes are kept exact. Owned by the caller: free(). */
char *cli_term_text(FILE *f, const char *s, int one_line);

/* When `in` and `out` name one file (af_file_same), prints why `cmd` refuses it (naming both
 * flags) and returns CLI_EUSAGE; else CLI_OK. Either path may be NULL. */
int cli_refuse_same_file(const char *cmd, const char *in_flag, const char *in, const char *out_flag,
                         const char *out);

/* Maps an AF_E* code of a failed solve to an exit code. */
int cli_exit_for(int af_err);

#endif
