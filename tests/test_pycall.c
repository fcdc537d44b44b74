/*
 * test_pycall.c - the executor's command parser (flow/pycall.h), code-fence extraction, and
 * argument validation against tool cards (tools/validate.c).
 *
 * The inputs imitate what executor models really write: multi-line calls, every quote style,
 * escapes, non-ASCII text, assignments used later, print() and import noise, and broken code
 * that must be rejected with a line:column that points at the fault.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flow/pycall.h"

/* ---- helpers ---------------------------------------------------------------------------- */

static void parse_ok(const char *src, struct af_pycall_list *l)
{
    char err[512];
    int rc = af_pycall_parse(src, strlen(src), l, err, sizeof err);
    if (rc != AF_OK)
        fail_msg("parse failed (%d): %s\nsource:\n%s", rc, err, src);
}

/* Parses src, which must fail with rc and a message containing every given fragment. */
static void parse_err(const char *src, int want_rc, const char *frag1, const char *frag2)
{
    char err[512];
    struct af_pycall_list l = {(struct af_pycall *)1, 99};
    int rc = af_pycall_parse(src, strlen(src), &l, err, sizeof err);
    if (rc != want_rc)
        fail_msg("rc %d, want %d (err: %s)\nsource:\n%s", rc, want_rc, err, src);
    assert_null(l.calls);
    assert_int_equal(l.n, 0);
    if (frag1 && !strstr(err, frag1))
        fail_msg("error \"%s\" lacks \"%s\"", err, frag1);
    if (frag2 && !strstr(err, frag2))
        fail_msg("error \"%s\" lacks \"%s\"", err, frag2);
}

static void assert_json(const json_t *v, const char *want)
{
    char *got = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    char msg[1024];
    assert_non_null(got);
    int same = !strcmp(got, want);
    snprintf(msg, sizeof msg, "json %s, want %s", got, want);
    free(got);
    if (!same)
        fail_msg("%s", msg);
}

/* Parses a one-call source and checks its keyword arguments as compact JSON. */
static void kwargs_are(const char *src, const char *want)
{
    struct af_pycall_list l;
    parse_ok(src, &l);
    assert_int_equal(l.n, 1);
    assert_json(l.calls[0].kwargs, want);
    af_pycall_list_deinit(&l);
}

/* The value of `x = <expr>` used as tool.execute(v=x), as compact JSON. */
static void value_is(const char *expr, const char *want)
{
    char src[1024];
    snprintf(src, sizeof src, "x = %s\ntool.execute(v=x)\n", expr);
    struct af_pycall_list l;
    parse_ok(src, &l);
    assert_int_equal(l.n, 1);
    assert_json(json_object_get(l.calls[0].kwargs, "v"), want);
    af_pycall_list_deinit(&l);
}

static void value_err(const char *expr, const char *frag1, const char *frag2)
{
    char src[1024];
    snprintf(src, sizeof src, "x = %s\ntool.execute(v=x)\n", expr);
    parse_err(src, AF_EPARSE, frag1, frag2);
}

/* ---- calls and statements --------------------------------------------------------------- */

static void test_basic_call(void **state)
{
    (void)state;
    struct af_pycall_list l;
    parse_ok("query = \"capital of France\"\nexecution = tool.execute(query=query, k=3)\n", &l);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.calls[0].target, "execution");
    assert_int_equal(l.calls[0].line, 2);
    assert_json(l.calls[0].args, "[]");
    assert_json(l.calls[0].kwargs, "{\"query\":\"capital of France\",\"k\":3}");
    af_pycall_list_deinit(&l);
    af_pycall_list_deinit(&l); /* idempotent */
    af_pycall_list_deinit(NULL);
}

static void test_multiline_and_several_calls(void **state)
{
    (void)state;
    struct af_pycall_list l;
    parse_ok("# search twice\n"
             "execution = tool.execute(\n"
             "    query=\"first\",\n"
             "    k=5,\n"
             ")\n"
             "\n"
             "result2 = tool.execute(query=[\n"
             "    \"a\",\n"
             "    \"b\"],\n"
             "  k=1)\n"
             "tool.execute(query='bare')",
             &l);
    assert_int_equal(l.n, 3);
    assert_int_equal(l.calls[0].line, 2);
    assert_string_equal(l.calls[0].target, "execution");
    assert_json(l.calls[0].kwargs, "{\"query\":\"first\",\"k\":5}");
    assert_int_equal(l.calls[1].line, 7);
    assert_string_equal(l.calls[1].target, "result2");
    assert_json(l.calls[1].kwargs, "{\"query\":[\"a\",\"b\"],\"k\":1}");
    assert_int_equal(l.calls[2].line, 11);
    assert_null(l.calls[2].target);
    af_pycall_list_deinit(&l);
}

static void test_separators_and_continuation(void **state)
{
    (void)state;
    kwargs_are("a = 1; b = \\\n  2; tool.execute(x=a, y=b);", "{\"x\":1,\"y\":2}");
    kwargs_are("a = 'x'\r\nexecution = tool.execute(q=a,\r\n  k=2)\r\n", "{\"q\":\"x\",\"k\":2}");
    kwargs_are("\xEF\xBB\xBF    execution = tool.execute(q=1)  ", "{\"q\":1}");
    struct af_pycall_list l;
    parse_ok("", &l);
    assert_int_equal(l.n, 0);
    parse_ok("# only a comment\n\n   \n", &l);
    assert_int_equal(l.n, 0);
}

static void test_positional_args(void **state)
{
    (void)state;
    struct af_pycall_list l;
    parse_ok("execution = tool.execute(\"What is 2+2?\", 3, flag=True)", &l);
    assert_json(l.calls[0].args, "[\"What is 2+2?\",3]");
    assert_json(l.calls[0].kwargs, "{\"flag\":true}");
    af_pycall_list_deinit(&l);
    parse_err("tool.execute(q=1, 2)", AF_EPARSE, "line 1:19", "positional argument follows");
    parse_err("tool.execute(q=1, q=2)", AF_EPARSE, "line 1:19", "keyword argument 'q' repeated");
    parse_err("tool.execute(*args)", AF_EPARSE, "line 1:14", "'*'");
    parse_err("tool.execute(True=1)", AF_EPARSE, "'True' cannot be a keyword argument", NULL);
}

static void test_assignments_substitute(void **state)
{
    (void)state;
    kwargs_are("queries = [\"Zürich\", \"東京\"]\n"
               "opts = {\"lang\": \"de\", \"list\": queries}\n"
               "execution = tool.execute(queries=queries, opts=opts, n=[queries, 1])\n",
               "{\"queries\":[\"Zürich\",\"東京\"],\"opts\":{\"lang\":\"de\",\"list\":[\"Zürich\","
               "\"東京\"]},\"n\":[[\"Zürich\",\"東京\"],1]}");
    /* rebinding takes the newest value; a call result name becomes a value again */
    kwargs_are("q = 'old'\nq = 'new'\nexecution = tool.execute(q=q)\nexecution = 5\n"
               "print(execution)\n",
               "{\"q\":\"new\"}");
    kwargs_are("a = 1\nb = a\ntool.execute(b=b)", "{\"b\":1}");
}

static void test_print_and_imports_ignored(void **state)
{
    (void)state;
    struct af_pycall_list l;
    parse_ok("import json\n"
             "from os import (path,\n    sep)\n"
             "import numpy as np; x = 1\n"
             "execution = tool.execute(query=\"x\", k=x)\n"
             "print(execution)\n"
             "print(f\"Result: {execution}\", [1, (2)], end='')\n"
             "execution\n",
             &l);
    assert_int_equal(l.n, 1);
    assert_int_equal(l.calls[0].line, 5);
    af_pycall_list_deinit(&l);
    parse_ok("print(tool.execute(query='inside print'))", &l);
    assert_int_equal(l.n, 1);
    assert_null(l.calls[0].target);
    assert_json(l.calls[0].kwargs, "{\"query\":\"inside print\"}");
    af_pycall_list_deinit(&l);
    parse_err("print('r', tool.execute(q=1))", AF_EPARSE, "line 1:12", "only argument");
    parse_err("print(x", AF_EPARSE, "line 1:8", "'(' opened at line 1:6 is never closed");
}

static void test_comments_with_quotes_and_parens(void **state)
{
    (void)state;
    kwargs_are("# It's a \"test\" (with parens\n"
               "execution = tool.execute(  # open ( here\n"
               "    query=\"a # not a comment\",  # it's fine )\n"
               "    k=2)  # done'\n",
               "{\"query\":\"a # not a comment\",\"k\":2}");
}

static void test_unsupported_statements(void **state)
{
    (void)state;
    parse_err("x = 1\nfor q in [1, 2]:\n    tool.execute(q=q)", AF_EPARSE, "line 2:1",
              "unsupported statement starting with 'for'");
    parse_err("def f():\n  pass", AF_EPARSE, "line 1:1", "'def'");
    parse_err("q = 'a'\nresult = search(q)", AF_EPARSE, "line 2:10", "function call 'search(...)'");
    parse_err("os.system('rm -rf /')", AF_EPARSE, "line 1:1", "attribute access on 'os'");
    parse_err("run(1)", AF_EPARSE, "unsupported call 'run'(...)", NULL);
    parse_err("tool.run(query='x')", AF_EPARSE, "line 1:6", "found tool.run");
    parse_err("x = 1\nx += 1", AF_EPARSE, "line 2:1", "unsupported statement starting with 'x'");
    parse_err("y = 1 + 2", AF_EPARSE, "line 1:7", "'+' joins string literals only");
    parse_err("y = 5 * 2", AF_EPARSE, "line 1:7", "operators are not supported");
    parse_err("y = [x for x in z]", AF_EPARSE, "line 1:6", "name 'x' is not defined");
    parse_err("y = [1 for x in z]", AF_EPARSE, "line 1:8", "comprehensions");
    parse_err("y = str(5)", AF_EPARSE, "line 1:5", "function call 'str(...)'");
    parse_err("y = tool.execute", AF_EPARSE, "line 1:17", "expected '('");
    parse_err("y = [tool.execute(q=1)]", AF_EPARSE, "line 1:6", "statement of its own");
    parse_err("tool.execute(q=1) tool.execute(q=2)", AF_EPARSE, "line 1:19",
              "expected end of statement");
    parse_err("None = 1", AF_EPARSE, "cannot assign to 'None'", NULL);
    parse_err("42", AF_EPARSE, "line 1:1", "unsupported statement starting with '42'");
    parse_err("tool.execute(q=1))", AF_EPARSE, "line 1:18", "unmatched ')'");
    parse_err("x = 1 $", AF_EPARSE, "line 1:7", "unexpected character '$'");
    parse_err("x = 1\n\n   y = 2 \\ 3", AF_EPARSE, "line 3:10", "'\\'");
}

static void test_names(void **state)
{
    (void)state;
    parse_err("execution = tool.execute(query=q)", AF_EPARSE, "line 1:32",
              "name 'q' is not defined");
    parse_err("q = \"東京\"; z = w", AF_EPARSE, "line 1:15", "name 'w' is not defined");
    parse_err("execution = tool.execute(q=1)\nnext = tool.execute(q=execution)", AF_EPARSE,
              "line 2:23", "holds a tool.execute(...) result");
    parse_err("x = inf", AF_EPARSE, "name 'inf' is not defined", NULL);
    parse_err("x = float('nan')", AF_EPARSE, "function call 'float(...)'", NULL);
}

/* ---- literals --------------------------------------------------------------------------- */

static void test_quotes(void **state)
{
    (void)state;
    value_is("\"It's\"", "\"It's\"");
    value_is("'say \"hi\"'", "\"say \\\"hi\\\"\"");
    value_is("\"\"\"He said \"yes\" and 'no'\nline 2\"\"\"",
             "\"He said \\\"yes\\\" and 'no'\\nline 2\"");
    value_is("'''a \"\"\" b'''", "\"a \\\"\\\"\\\" b\"");
    value_is("''", "\"\"");
    value_is("\"\"\"\"\"\"", "\"\"");
    value_is("\"\"\"ends with quote\\\"\"\"\"", "\"ends with quote\\\"\"");
    value_is("u'unicode prefix'", "\"unicode prefix\"");
}

static void test_escapes(void **state)
{
    (void)state;
    value_is("\"a\\nb\\tc\\\\d\\'e\\\"f\\rg\"", "\"a\\nb\\tc\\\\d'e\\\"f\\rg\"");
    value_is("'\\x41\\u00e9\\U0001F600\\101\\a\\v'", "\"Aé😀A\\u0007\\u000B\"");
    value_is("'\\ud83d\\ude00'", "\"😀\"");
    value_is("'keep \\d and \\q'", "\"keep \\\\d and \\\\q\"");
    value_is("'joined \\\nline'", "\"joined line\"");
    value_is("r'C:\\new\\table'", "\"C:\\\\new\\\\table\"");
    value_is("R\"raw \\\" quote\"", "\"raw \\\\\\\" quote\"");
    value_is("f'plain {{braces}}'", "\"plain {braces}\"");
    value_is("rf'\\d{{2}}'", "\"\\\\d{2}\"");
    value_err("f'{name}'", "line 1:7", "f-string replacement fields");
    value_err("b'bytes'", "line 1:5", "bytes literals are not supported");
    value_err("'\\N{BULLET}'", "line 1:6", "\\N{...}");
    value_err("'\\ud83d alone'", "line 1:6", "lone surrogate \\uD83D");
    value_err("'\\x4'", "line 1:6", "truncated \\x escape");
    value_err("'\\U00110000'", "line 1:6", "above U+10FFFF");

    /* \0 puts a NUL inside the string; jansson keeps the length */
    struct af_pycall_list l;
    parse_ok("tool.execute(s='a\\0b')", &l);
    const json_t *s = json_object_get(l.calls[0].kwargs, "s");
    assert_int_equal(json_string_length(s), 3);
    assert_memory_equal(json_string_value(s), "a\0b", 3);
    af_pycall_list_deinit(&l);
}

static void test_concatenation_and_utf8(void **state)
{
    (void)state;
    kwargs_are("execution = tool.execute(query=(\"Zürich \"\n    '東京 '\n    \"🙂\"))",
               "{\"query\":\"Zürich 東京 🙂\"}");
    value_is("\"a\" + 'b' \"c\"", "\"abc\"");
    value_err("\"a\" + 1", "line 1:11", "a string literal after '+'");
    value_err("'a' + x", "line 1:11", "a string literal after '+'");
    value_err("'bad \xff byte'", "line 1:5", "not valid UTF-8");
    value_err("'\xe6\x9d'", "line 1:5", "not valid UTF-8");
    parse_err("x = \xc3\xa9", AF_EPARSE, "line 1:5", "non-ASCII character outside a string");
}

static void test_numbers_values(void **state)
{
    (void)state;
    value_is("[0, -5, +3, 1_000, 0x1F, 0o17, 0b101, -0x10, --2, 0_0]",
             "[0,-5,3,1000,31,15,5,-16,2,0]");
    value_is("[1.5, .5, 1., 1e-3, -2.5E2, 1_0.0_1]", "[1.5,0.5,1.0,0.001,-250.0,10.01]");
    value_is("[-9223372036854775808, 9223372036854775807]",
             "[-9223372036854775808,9223372036854775807]");
    value_err("9223372036854775808", "line 1:5", "too large");
    value_err("0x10000000000000000", "line 1:5", "too large");
    value_err("-9223372036854775809", "line 1:6", "too large");
    value_err("012", "line 1:5", "leading zeros");
    value_err("1e400", "line 1:5", "out of range");
    value_err("3j", "line 1:5", "invalid numeric literal");
    value_err("1__0", "line 1:5", "'_' must separate digits");
    value_err("0x", "line 1:5", "invalid base-16");
    value_err("0b12", "line 1:5", "invalid base-2");
    value_err("-'a'", "line 1:6", "signs apply to number literals only");
    value_err("-x", "line 1:6", "signs apply to number literals only");
}

static void test_constants_and_containers(void **state)
{
    (void)state;
    value_is("[True, False, None]", "[true,false,null]");
    value_is("(1,)", "[1]");
    value_is("()", "[]");
    value_is("(1, 'a', [2, 3],)", "[1,\"a\",[2,3]]");
    value_is("(5)", "5");
    value_is("[]", "[]");
    value_is("{}", "{}");
    value_is("{'a': 1, \"b\": [None], 2: 'two', -3: (4,),}",
             "{\"a\":1,\"b\":[null],\"2\":\"two\",\"-3\":[4]}");
    value_is("{'k': {'nested': {'deep': [1, {'x': True}]}}}",
             "{\"k\":{\"nested\":{\"deep\":[1,{\"x\":true}]}}}");
    value_err("{1.5: 'a'}", "line 1:6", "keys must be strings or integers");
    value_err("{1, 2}", "line 1:6", "set literals are not supported");
    value_err("{'a' 1}", "line 1:10", "expected ':'");
    value_err("[1, 2)", "line 1:10", "expected ',' or ']'");
    value_err("[1 2]", "line 1:8", "expected ',' or ']'");
    value_err("(1 2)", "line 1:8", "expected ',' or ')'");
    value_err("{'a\\0': 1}", "line 1:6", "NUL");
}

static void test_unterminated_and_unbalanced(void **state)
{
    (void)state;
    parse_err("execution = tool.execute(query=\"abc)\n", AF_EPARSE, "line 1:32",
              "unterminated string literal");
    parse_err("x = '''abc\n\n", AF_EPARSE, "line 1:5", "unterminated triple-quoted");
    parse_err("x = 'abc\\", AF_EPARSE, "line 1:5", "unterminated string literal");
    parse_err("execution = tool.execute(query=\"a\"", AF_EPARSE, "line 1:35",
              "'(' opened at line 1:25 is never closed");
    parse_err("execution = tool.execute(query=[\"a\",\n    \"b\"\n", AF_EPARSE, "line 3:1",
              "'[' opened at line 1:32 is never closed");
    parse_err("execution = tool.execute(query=\"a\"\nprint(execution)", AF_EPARSE, "line 2:1",
              "(is the '(' opened at line 1:25 left open?)");
    parse_err("x = ]", AF_EPARSE, "line 1:5", "expected a value, found ']'");
    parse_err("from x import (a,", AF_EPARSE, "never closed", NULL);
    const char src[] = "x = 1\nq = 'a\0b'";
    char err[256];
    struct af_pycall_list l;
    assert_int_equal(af_pycall_parse(src, sizeof src - 1, &l, err, sizeof err), AF_EPARSE);
    assert_non_null(strstr(err, "line 2:7: the command contains a NUL byte"));
}

static void test_limits(void **state)
{
    (void)state;
    char src[1024];
    struct af_pycall_list l;
    int n = snprintf(src, sizeof src, "tool.execute(v=");
    for (int i = 0; i < AF_PYCALL_MAX_DEPTH; i++)
        n += snprintf(src + n, sizeof src - (size_t)n, "[");
    for (int i = 0; i < AF_PYCALL_MAX_DEPTH; i++)
        n += snprintf(src + n, sizeof src - (size_t)n, "]");
    snprintf(src + n, sizeof src - (size_t)n, ")");
    parse_ok(src, &l);
    af_pycall_list_deinit(&l);
    n = snprintf(src, sizeof src, "tool.execute(v=");
    for (int i = 0; i <= AF_PYCALL_MAX_DEPTH; i++)
        n += snprintf(src + n, sizeof src - (size_t)n, "(");
    parse_err(src, AF_EPARSE, "line 1:80", "nesting deeper than 64 levels");
    /* substitution cannot smuggle extra depth past the limit */
    n = snprintf(src, sizeof src, "a = ");
    for (int i = 0; i < 40; i++)
        n += snprintf(src + n, sizeof src - (size_t)n, "[");
    for (int i = 0; i < 40; i++)
        n += snprintf(src + n, sizeof src - (size_t)n, "]");
    n += snprintf(src + n, sizeof src - (size_t)n, "\nb = ");
    for (int i = 0; i < 30; i++)
        n += snprintf(src + n, sizeof src - (size_t)n, "[");
    snprintf(src + n, sizeof src - (size_t)n, "a]");
    parse_err(src, AF_EPARSE, "line 2:35", "after substituting 'a'");

    /* too many calls */
    char *many = malloc(70 * 20 + 1);
    size_t m = 0;
    for (int i = 0; i < AF_PYCALL_MAX_CALLS + 1; i++)
        m += (size_t)snprintf(many + m, 20, "tool.execute(q=%d)\n", i % 10);
    parse_err(many, AF_EPARSE, "line 65:1", "more than 64 tool.execute(...) calls");
    many[m - 19] = '\0'; /* exactly 64 calls */
    parse_ok(many, &l);
    assert_int_equal(l.n, 64);
    af_pycall_list_deinit(&l);
    free(many);

    /* source size */
    size_t big = AF_PYCALL_MAX_SRC_BYTES + 1;
    char *huge = malloc(big + 1);
    memset(huge, ' ', big);
    huge[big] = '\0';
    parse_err(huge, AF_ETOOBIG, "limit is 1048576", NULL);
    free(huge);

    /* doubling through variables: 2^30 strings would be far past the value budget */
    char grow[2048];
    n = snprintf(grow, sizeof grow, "v0 = 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'\n");
    for (int i = 1; i <= 30; i++)
        n += snprintf(grow + n, sizeof grow - (size_t)n, "v%d = [v%d, v%d]\n", i, i - 1, i - 1);
    parse_err(grow, AF_ETOOBIG, "substituted values exceed", NULL);
}

/* ---- code extraction -------------------------------------------------------------------- */

static void extract_is(const char *reply, const char *want)
{
    char *got = af_pycall_extract_command(reply);
    if (!want) {
        if (got)
            fail_msg("extracted \"%s\", want nothing", got);
        return;
    }
    if (!got)
        fail_msg("nothing extracted, want \"%s\"", want);
    char msg[1024];
    int same = !strcmp(got, want);
    snprintf(msg, sizeof msg, "extracted \"%s\", want \"%s\"", got, want);
    free(got);
    if (!same)
        fail_msg("%s", msg);
}

static void test_extract_generated_command(void **state)
{
    (void)state;
    extract_is("Analysis: need a search.\nCommand Explanation: we call it.\n"
               "Generated Command:\n```python\nexecution = tool.execute(query=\"x\")\n```\n",
               "execution = tool.execute(query=\"x\")");
    /* a longer example block before the label loses to the one after it */
    extract_is("Command Explanation: e.g.\n```python\nexecution = tool.execute(query=\"a long "
               "example query\", k=10)\n```\nGENERATED COMMAND: here it is\n```Python\n"
               "execution = tool.execute(query=\"b\")\n```",
               "execution = tool.execute(query=\"b\")");
    /* the label's regex needs "```python\n" exactly; with a trailing space the fallback runs */
    extract_is("Generated Command:\n```python \nexecution = tool.execute(q=1)\n```",
               "execution = tool.execute(q=1)");
}

static void test_extract_fallbacks(void **state)
{
    (void)state;
    extract_is("```python\nshort = 1\n```\ntext\n```python\nexecution = tool.execute(q=2)\n"
               "```\n```python\nx\n```",
               "execution = tool.execute(q=2)");
    /* a ```python block beats a longer untagged one */
    extract_is(
        "```python\ntool.execute(q=1)\n```\n```\nexecution = tool.execute(q=1, k=2)  # long\n```",
        "tool.execute(q=1)");
    extract_is("```PYTHON  \r\n  execution = tool.execute(q=3)\r\n```",
               "execution = tool.execute(q=3)");
    extract_is("```json\n{\"a\": \"a much longer block without a call in it\"}\n```\n"
               "```\nexecution = tool.execute(q=4)\n```",
               "execution = tool.execute(q=4)");
    extract_is("```\nno call here\n```", "no call here");
    extract_is("Sure: `tool.execute(query=\"x\")`", "Sure: `tool.execute(query=\"x\")");
    extract_is("execution = tool.execute(q=5)\n", "execution = tool.execute(q=5)");
    extract_is("```python\nexecution = tool.execute(q=6)", "execution = tool.execute(q=6)");
    extract_is("{\"analysis\": \"a\", \"explanation\": \"e\", \"command\": "
               "\"execution = tool.execute(q=7)\"}",
               "execution = tool.execute(q=7)");
    extract_is("I cannot help with that.", NULL);
    extract_is("", NULL);
    assert_null(af_pycall_extract_command(NULL));
}

/* ---- validation and binding ------------------------------------------------------------- */

static const struct af_tool_card test_card = {
    .name = "Test_Tool",
    .description = "for tests",
    .n_params = 7,
    .params =
        {
            {"query", AF_PARAM_STR, 1, NULL, "what to look for"},
            {"k", AF_PARAM_INT, 0, "3", "how many"},
            {"temperature", AF_PARAM_FLOAT, 0, "0.5", "sampling"},
            {"verbose", AF_PARAM_BOOL, 0, "false", "chatty"},
            {"items", AF_PARAM_LIST, 0, NULL, "a list"},
            {"options", AF_PARAM_DICT, 0, "{\"x\": 1}", "a dict"},
            {"extra", AF_PARAM_ANY, 0, NULL, "anything"},
        },
};

static int validate_src(const char *src, json_t **out, char *err, size_t errlen)
{
    struct af_pycall_list l;
    parse_ok(src, &l);
    assert_int_equal(l.n, 1);
    int rc = af_pycall_bind(&l.calls[0], &test_card, out, err, errlen);
    af_pycall_list_deinit(&l);
    return rc;
}

static void bind_is(const char *src, const char *want)
{
    char err[512] = "";
    json_t *out = NULL;
    int rc = validate_src(src, &out, err, sizeof err);
    if (rc != AF_OK)
        fail_msg("bind failed: %s", err);
    assert_json(out, want);
    json_decref(out);
}

static void bind_err(const char *src, const char *want)
{
    char err[512] = "";
    json_t *out = (json_t *)1;
    assert_int_equal(validate_src(src, &out, err, sizeof err), AF_EINVAL);
    assert_null(out);
    if (strcmp(err, want))
        fail_msg("error \"%s\", want \"%s\"", err, want);
}

static void test_validate_defaults_and_types(void **state)
{
    (void)state;
    bind_is(
        "tool.execute(query='q')",
        "{\"query\":\"q\",\"k\":3,\"temperature\":0.5,\"verbose\":false,\"options\":{\"x\":1}}");
    bind_is("tool.execute(query='q', temperature=1, k=2.0, items=('a',), extra=None, "
            "options={}, verbose=True)",
            "{\"query\":\"q\",\"k\":2,\"temperature\":1.0,\"verbose\":true,\"items\":[\"a\"],"
            "\"options\":{},\"extra\":null}");
    bind_is("tool.execute('positional', 7)",
            "{\"query\":\"positional\",\"k\":7,\"temperature\":0.5,\"verbose\":false,\"options\":"
            "{\"x\":1}}");
    /* float accepts an int and hands the tool a real; int accepts an integral real */
    json_t *out = NULL;
    char err[512];
    assert_int_equal(
        validate_src("tool.execute(query='q', temperature=2, k=4.0)", &out, err, sizeof err),
        AF_OK);
    assert_true(json_is_real(json_object_get(out, "temperature")));
    assert_true(json_is_integer(json_object_get(out, "k")));
    json_decref(out);
}

static void test_validate_errors(void **state)
{
    (void)state;
    bind_err("tool.execute(query='q', x=1)",
             "unknown argument 'x' for tool Test_Tool; expected one of: query, k, temperature, "
             "verbose, items, options, extra");
    bind_err("tool.execute(k=1)", "missing required argument 'query' for tool Test_Tool");
    bind_err("tool.execute(query='q', k='3')",
             "argument 'k' of tool Test_Tool must be int, got str");
    bind_err("tool.execute(query='q', k=2.5)",
             "argument 'k' of tool Test_Tool must be int, got float");
    bind_err("tool.execute(query='q', k=True)",
             "argument 'k' of tool Test_Tool must be int, got bool");
    bind_err("tool.execute(query=None)",
             "argument 'query' of tool Test_Tool must be str, got None");
    bind_err("tool.execute(query='q', verbose=1)",
             "argument 'verbose' of tool Test_Tool must be bool, got int");
    bind_err("tool.execute(query='q', items={})",
             "argument 'items' of tool Test_Tool must be list, got dict");
    bind_err("tool.execute(query='q', options=[])",
             "argument 'options' of tool Test_Tool must be dict, got list");
    bind_err("tool.execute(query='q', temperature='hot')",
             "argument 'temperature' of tool Test_Tool must be float, got str");
    bind_err("tool.execute('q', 1, 0.1, True, [], {}, 0, 'one too many')",
             "tool Test_Tool takes at most 7 positional arguments, got 8");
    bind_err("tool.execute('q', query='again')",
             "argument 'query' of tool Test_Tool given both by position and by keyword");
}

static void test_validate_direct(void **state)
{
    (void)state;
    static const struct af_tool_card empty = {.name = "Empty_Tool"};
    static const struct af_tool_card bad_default = {
        .name = "Bad_Tool",
        .n_params = 1,
        .params = {{"n", AF_PARAM_INT, 0, "{not json", "broken"}},
    };
    char err[256];
    json_t *out = NULL;
    json_t *args = json_pack("{s:i}", "a", 1);
    assert_int_equal(af_tool_validate_args(&empty, args, &out, err, sizeof err), AF_EINVAL);
    assert_string_equal(err, "unknown argument 'a' for tool Empty_Tool; it takes no arguments");
    json_decref(args);
    args = json_object();
    assert_int_equal(af_tool_validate_args(&empty, args, &out, err, sizeof err), AF_OK);
    assert_json(out, "{}");
    json_decref(out);
    assert_int_equal(af_tool_validate_args(&bad_default, args, &out, err, sizeof err),
                     AF_EINTERNAL);
    assert_null(out);
    assert_non_null(strstr(err, "default of 'n' is not valid JSON"));
    json_decref(args);
    args = json_array();
    assert_int_equal(af_tool_validate_args(&empty, args, &out, err, sizeof err), AF_EINVAL);
    assert_non_null(strstr(err, "must be a JSON object"));
    json_decref(args);
}

static void test_canonical_names(void **state)
{
    (void)state;
    char out[64];
    af_tool_canonical_name("generalist solution_generator   TOOL", out, sizeof out);
    assert_string_equal(out, "generalist_solution_generator_tool");
    af_tool_canonical_name("  _Web_Search_Tool_ ", out, sizeof out);
    assert_string_equal(out, "web_search_tool");
    af_tool_canonical_name("Wikipedia__Search", out, sizeof out);
    assert_string_equal(out, "wikipedia_search");
    af_tool_canonical_name(NULL, out, sizeof out);
    assert_string_equal(out, "");
    af_tool_canonical_name("Python_Coder_Tool", out, 8);
    assert_string_equal(out, "python_");
    af_tool_canonical_name("abc", out, 1);
    assert_string_equal(out, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic_call),
        cmocka_unit_test(test_multiline_and_several_calls),
        cmocka_unit_test(test_separators_and_continuation),
        cmocka_unit_test(test_positional_args),
        cmocka_unit_test(test_assignments_substitute),
        cmocka_unit_test(test_print_and_imports_ignored),
        cmocka_unit_test(test_comments_with_quotes_and_parens),
        cmocka_unit_test(test_unsupported_statements),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_quotes),
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_concatenation_and_utf8),
        cmocka_unit_test(test_numbers_values),
        cmocka_unit_test(test_constants_and_containers),
        cmocka_unit_test(test_unterminated_and_unbalanced),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_extract_generated_command),
        cmocka_unit_test(test_extract_fallbacks),
        cmocka_unit_test(test_validate_defaults_and_types),
        cmocka_unit_test(test_validate_errors),
        cmocka_unit_test(test_validate_direct),
        cmocka_unit_test(test_canonical_names),
    };
    return cmocka_run_group_tests_name("pycall", tests, NULL, NULL);
}
