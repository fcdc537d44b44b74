/*
 * cmd_eval.c - `agentflow eval score --bench NAME --pred FILE.jsonl [--data-dir DIR]`:
 * scores saved predictions against a benchmark's data.json with the score/ module.
 *
 * Items are keyed by their index in the data array, never by pid (MedQA repeats pids).
 * Prints one JSON line per prediction, then a summary line. Exit codes: 0 ok, 2 usage,
 * 4 bad input file (missing file, bad JSON line, index out of range).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentflow/score.h"
#include "cli/cli.h"
#include "core/fileio.h"
#include "core/jsonx.h"

#define EVAL_DATA_LIMIT ((size_t)256 << 20)
#define EVAL_PRED_LIMIT ((size_t)1 << 30)

static void eval_usage(FILE *f)
{
    fprintf(f, "usage: agentflow eval score --bench NAME --pred FILE.jsonl [--data-dir DIR]\n"
               "\n"
               "Scores each prediction line {\"index\": N, \"answer\": \"...\"} against item N of\n"
               "DIR/NAME/data.json (DIR: --data-dir, else $AGENTFLOW_DATA, else\n"
               "../shared/data/benchmarks). Prints {index, extracted, correct[, f1]} per line,\n"
               "then {bench, n, correct, accuracy} (accuracy in %%).\n"
               "Benchmarks:");
    for (const char *const *b = af_score_benchmarks(); *b; b++)
        fprintf(f, " %s", *b);
    fprintf(f, "\nExit: 0 ok, 2 usage, 4 bad input file.\n");
}

struct eval_args {
    const char *bench, *pred, *data_dir;
};

static int parse_args(int argc, char **argv, struct eval_args *a)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        eval_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_EUSAGE : -1;
    }
    if (strcmp(argv[1], "score") != 0) {
        fprintf(stderr, "agentflow eval: unknown action \"%s\"\n", argv[1]);
        eval_usage(stderr);
        return CLI_EUSAGE;
    }
    for (int i = 2; i < argc; i++) {
        const char **dst = NULL;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            eval_usage(stdout);
            return -1;
        } else if (strcmp(argv[i], "--bench") == 0) {
            dst = &a->bench;
        } else if (strcmp(argv[i], "--pred") == 0) {
            dst = &a->pred;
        } else if (strcmp(argv[i], "--data-dir") == 0) {
            dst = &a->data_dir;
        }
        if (!dst || i + 1 >= argc) {
            fprintf(stderr, "agentflow eval score: %s \"%s\"\n",
                    dst ? "missing value for" : "unknown option", argv[i]);
            return CLI_EUSAGE;
        }
        *dst = argv[++i];
    }
    if (!a->bench || !a->pred) {
        fprintf(stderr, "agentflow eval score: --bench and --pred are required\n");
        return CLI_EUSAGE;
    }
    for (const char *const *b = af_score_benchmarks(); *b; b++)
        if (strcmp(*b, a->bench) == 0)
            return CLI_OK;
    fprintf(stderr, "agentflow eval score: unknown benchmark \"%s\"\n", a->bench);
    eval_usage(stderr);
    return CLI_EUSAGE;
}

static int load_data(const struct eval_args *a, json_t **out)
{
    const char *dir = a->data_dir;
    if (!dir)
        dir = getenv("AGENTFLOW_DATA");
    if (!dir || !*dir)
        dir = "../shared/data/benchmarks";
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/%s/data.json", dir, a->bench);
    char *text = NULL;
    size_t len = 0;
    if (af_file_read(path, EVAL_DATA_LIMIT, &text, &len, err, sizeof err) != AF_OK) {
        fprintf(stderr, "agentflow eval score: %s\n", err);
        return CLI_EINPUT;
    }
    json_error_t jerr;
    *out = json_loadb(text, len, 0, &jerr);
    free(text);
    if (!json_is_array(*out)) {
        fprintf(stderr, "agentflow eval score: %s:%d: %s\n", path, jerr.line,
                *out ? "expected a JSON array" : jerr.text);
        json_decref(*out);
        *out = NULL;
        return CLI_EINPUT;
    }
    return CLI_OK;
}

/* Parses one prediction line into *index and a borrowed *answer (valid while *obj lives). */
static int parse_pred(const char *line, size_t len, size_t n_items, json_t **obj, size_t *index,
                      const char **answer, char *why, size_t whylen)
{
    json_error_t jerr;
    *obj = json_loadb(line, len, 0, &jerr);
    if (!json_is_object(*obj)) {
        snprintf(why, whylen, "%s", *obj ? "expected a JSON object" : jerr.text);
        return -1;
    }
    const json_t *ix = json_object_get(*obj, "index");
    const json_t *an = json_object_get(*obj, "answer");
    if (!json_is_integer(ix) || json_integer_value(ix) < 0 ||
        (size_t)json_integer_value(ix) >= n_items) {
        snprintf(why, whylen, "\"index\" must be an integer in [0, %zu)", n_items);
        return -1;
    }
    if (!json_is_string(an) && !json_is_null(an) && an) {
        snprintf(why, whylen, "\"answer\" must be a string");
        return -1;
    }
    *index = (size_t)json_integer_value(ix);
    *answer = json_is_string(an) ? json_string_value(an) : "";
    return 0;
}

static void print_result(const char *bench, size_t index, const struct af_score *s)
{
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer((json_int_t)index));
    json_object_set_new(o, "extracted", af_json_text(s->extracted));
    json_object_set_new(o, "correct", json_boolean(s->correct));
    if (af_score_reports_f1(bench))
        json_object_set_new(o, "f1", json_real(s->f1));
    char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    printf("%s\n", line ? line : "{}");
    free(line);
    json_decref(o);
}

static int score_lines(const struct eval_args *a, const json_t *items, const char *text, size_t *n,
                       size_t *n_correct)
{
    size_t lineno = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        const char *line = p;
        p += len + (nl ? 1 : 0);
        lineno++;
        if (strspn(line, " \t\r") >= len)
            continue;
        json_t *obj = NULL;
        size_t index = 0;
        const char *answer = NULL;
        char why[256], err[512];
        if (parse_pred(line, len, json_array_size(items), &obj, &index, &answer, why, sizeof why) !=
            0) {
            fprintf(stderr, "agentflow eval score: %s:%zu: %s\n", a->pred, lineno, why);
            json_decref(obj);
            return CLI_EINPUT;
        }
        struct af_score s;
        int rc = af_score_item(a->bench, json_array_get(items, index), answer, &s, err, sizeof err);
        json_decref(obj);
        if (rc != AF_OK) {
            fprintf(stderr, "agentflow eval score: %s:%zu: item %zu: %s\n", a->pred, lineno, index,
                    err);
            return CLI_EINPUT;
        }
        print_result(a->bench, index, &s);
        (*n)++;
        *n_correct += s.correct ? 1 : 0;
        af_score_deinit(&s);
    }
    return CLI_OK;
}

int cmd_eval(int argc, char **argv)
{
    struct eval_args a = {NULL, NULL, NULL};
    int rc = parse_args(argc, argv, &a);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    json_t *items = NULL;
    char *text = NULL, err[512];
    if ((rc = load_data(&a, &items)) != CLI_OK)
        goto out;
    if (af_file_read(a.pred, EVAL_PRED_LIMIT, &text, NULL, err, sizeof err) != AF_OK) {
        fprintf(stderr, "agentflow eval score: %s\n", err);
        rc = CLI_EINPUT;
        goto out;
    }
    size_t n = 0, n_correct = 0;
    if ((rc = score_lines(&a, items, text, &n, &n_correct)) != CLI_OK)
        goto out;
    json_t *jb = json_string(a.bench);
    char *bench = json_dumps(jb, JSON_ENCODE_ANY);
    json_decref(jb);
    printf("{\"bench\":%s,\"n\":%zu,\"correct\":%zu,\"accuracy\":%.2f}\n", bench ? bench : "\"\"",
           n, n_correct, n ? 100.0 * (double)n_correct / (double)n : 0.0);
    free(bench);
out:
    free(text);
    json_decref(items);
    return rc;
}
