/*
 * pycall.h - the executor's command language: tool.execute(...) calls written as Python, read
 * as data (private to flow/).
 *
 * The executor model answers with a short Python snippet such as
 *     query = "capital of France"
 *     execution = tool.execute(query=query, k=3)
 * Nothing in it is ever run. af_pycall_parse reads the subset that such snippets use: literal
 * values (str, int, float, bool, None, list, tuple, dict), `NAME = literal` assignments whose
 * names later stand for their values, `[NAME =] tool.execute(...)` calls, ignored `print(...)`
 * statements and ignored import lines. Everything else is an error that names line:column.
 *
 * Statement rules (the exact contract):
 *   - Statements are separated by newlines or ';'. Newlines inside (), [] and {} do not end a
 *     statement; a backslash at the end of a line joins it with the next. '#' starts a comment
 *     outside strings. Indentation is ignored (no statement has a body).
 *   - `NAME = <value>` binds NAME; a later NAME inside a value is replaced by a deep copy.
 *   - `NAME = tool.execute(...)` and `tool.execute(...)` each add one call, in source order.
 *     A name bound to a call result cannot be used in a value (its value is unknown until the
 *     tool runs); using it is an error that says so.
 *   - `print(...)` is ignored, whatever its arguments; `print(tool.execute(...))` counts as a
 *     bare call. `import ...` and `from ... import ...` are ignored.
 *   - A statement that is only a defined name (`execution` on the last line) is ignored.
 *   - Anything else (for/if/def/with, calls to other functions, attribute access, subscripts,
 *     augmented assignment, arithmetic) is an error naming its line:column and token.
 * Value rules: '+' only between string literals; unary +/- only on number literals; dict
 * keys are strings or ints (ints become decimal strings); tuples become arrays, None null.
 * Strings: ', ", ''' and """ quotes, r/u/f prefixes (f only without {} fields, {{ }} allowed),
 * b is an error; Python escapes, \N{...} is an error, unknown escapes are kept verbatim,
 * \u surrogate pairs are combined and lone surrogates rejected; the result must be UTF-8.
 *
 * Thread-safety: every function here is safe from any thread (no shared state).
 */
#ifndef AF_FLOW_PYCALL_H
#define AF_FLOW_PYCALL_H

#include <jansson.h>
#include <stddef.h>

#include "agentflow/err.h"
#include "agentflow/tools.h"

#define AF_PYCALL_MAX_SRC_BYTES ((size_t)1 << 20)    /* longer sources fail with AF_ETOOBIG */
#define AF_PYCALL_MAX_DEPTH 64                       /* nesting of [], (), {} in one value */
#define AF_PYCALL_MAX_CALLS 64                       /* tool.execute(...) calls per source */
#define AF_PYCALL_MAX_VALUE_BYTES ((size_t)16 << 20) /* budget for substituted variables */

/* One tool.execute(...) call. */
struct af_pycall {
    json_t *args;   /* positional arguments, a JSON array; owned */
    json_t *kwargs; /* keyword arguments, a JSON object in source order; owned */
    char *target;   /* the name assigned to ("execution"), or NULL for a bare call; owned */
    int line;       /* 1-based line where the statement starts */
};

struct af_pycall_list {
    struct af_pycall *calls; /* owned; NULL when n == 0 */
    size_t n;
};

/* Parses `len` bytes of `src` (need not be NUL-terminated; borrowed for the call only).
 * On success fills *out (caller-owned storage; release with af_pycall_list_deinit) and returns
 * 0; a source with no call at all is a success with out->n == 0. On failure *out is left
 * empty and the return is:
 *   AF_ETOOBIG  the source exceeds AF_PYCALL_MAX_SRC_BYTES, or substituted variables exceed
 *               AF_PYCALL_MAX_VALUE_BYTES;
 *   AF_EPARSE   anything else (syntax, unsupported statement, undefined name, limits on
 *               depth and number of calls).
 * The message goes into err (errlen bytes, may be NULL/0) as "line L:C: what, expected X". */
AF_NODISCARD int af_pycall_parse(const char *src, size_t len, struct af_pycall_list *out, char *err,
                                 size_t errlen);

/* Frees every call in l and leaves it empty. Accepts NULL. */
void af_pycall_list_deinit(struct af_pycall_list *l);

/* Extracts the command code from an executor reply (borrowed, NUL-terminated). In order:
 *   1. a JSON object reply with a string "command" member;
 *   2. the reference regex  Generated Command:.*?```python\n(.*?)```  (case-insensitive);
 *   3. the LONGEST match of ```python\s*\n(.*?)```  (case-insensitive);
 *   4. the longest ``` ... ``` block (any or no language tag) containing "tool.execute(",
 *      else the longest ``` ... ``` block;
 *   5. the whole reply when it contains "tool.execute(".
 * The result has a leading "```python" and surrounding whitespace and backticks stripped.
 * Returns a malloc'd string owned by the caller (free()), or NULL when nothing was found. */
char *af_pycall_extract_command(const char *reply);

/* Binds a parsed call to a tool card: positional argument i names card->params[i] (more
 * positional arguments than parameters is an error), keyword arguments are merged (one name
 * given both ways is an error), then af_tool_validate_args checks and fills defaults. On
 * success *kwargs_out is a new object owned by the caller (json_decref) and 0 is returned;
 * on failure *kwargs_out is NULL, a message naming the argument and tool goes into err and
 * AF_EINVAL is returned (AF_EINTERNAL when the card's own default is not valid JSON).
 * `call` and `card` are borrowed. */
AF_NODISCARD int af_pycall_bind(const struct af_pycall *call, const struct af_tool_card *card,
                                json_t **kwargs_out, char *err, size_t errlen);

#endif
