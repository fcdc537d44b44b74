/*
 * cmd_index.c - `agentflow index build` turns a passage dump (JSONL or DPR TSV, optionally
 * gzip'd) into an FTS5 index for Wikipedia_RAG_Search_Tool, with a progress bar on stderr;
 * `agentflow index query DB TEXT [-k N]` prints the JSON hits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/clock.h"
#include "core/jsonx.h"
#include "tools/wiki_index.h"

static void index_usage(FILE *f)
{
    fprintf(f, "usage: agentflow index build --input FILE --out DB [--skip-bad] [--shards N]\n"
               "       agentflow index query DB TEXT [-k N]\n"
               "\n"
               "build  reads JSONL ({\"id\",\"title\",\"text\"} per line) or the DPR / Search-R1\n"
               "       passage TSV (id, text, title; header skipped), plain or gzip'd, into an\n"
               "       SQLite FTS5 index at DB (written as DB.tmp, renamed at the end).\n"
               "       --skip-bad counts and skips malformed lines instead of failing (a\n"
               "       truncated or damaged gzip stream still fails). Blank lines are counted.\n"
               "       --shards N builds N FTS5 tables in parallel (default: one per CPU, at\n"
               "       most 4; 1 to 16); queries score over all of them as over one table.\n"
               "query  prints the N best passages (default 5) as a JSON array of\n"
               "       {id, title, text, score}, best first.\n"
               "Use the index with --wiki-db DB or AGENTFLOW_WIKI_DB=DB.\n"
               "A killed build leaves DB.tmp and DB.tmp.N behind; any index command on DB\n"
               "removes them first, unless a live build still holds them.\n"
               "Exit codes: 0 ok, 2 usage, 4 bad input file or database.\n");
}

struct progress {
    double t0, last;
    int tty;
};

static void on_progress(void *user, size_t n_done, size_t bytes_done, size_t bytes_total)
{
    struct progress *pr = user;
    double now = af_clock_ms();
    if (!pr->tty || now - pr->last < 200)
        return;
    pr->last = now;
    double secs = (now - pr->t0) / 1000.0;
    double pct = bytes_total ? 100.0 * (double)bytes_done / (double)bytes_total : 0.0;
    fprintf(stderr, "\r  %zu passages  %.0f/s  %5.1f%% of input ", n_done,
            secs > 0 ? (double)n_done / secs : 0.0, pct);
}

static int exit_for(int rc)
{
    return rc == AF_EINVAL ? CLI_EUSAGE : CLI_EINPUT;
}

static int index_build(int argc, char **argv)
{
    const char *in = NULL, *out = NULL;
    struct wiki_build_params p = wiki_build_default_params();
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--input") == 0 && i + 1 < argc)
            in = argv[++i];
        else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc)
            out = argv[++i];
        else if (strcmp(argv[i], "--skip-bad") == 0)
            p.skip_bad = 1;
        else if (strcmp(argv[i], "--shards") == 0 && i + 1 < argc) {
            char *end = NULL;
            long v = strtol(argv[++i], &end, 10);
            if (!*argv[i] || *end || v < 1 || v > 16) {
                fprintf(stderr, "agentflow index build: --shards takes 1 to 16 (got '%s')\n",
                        argv[i]);
                return CLI_EUSAGE;
            }
            p.shards = (int)v;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            index_usage(stdout);
            return CLI_OK;
        } else {
            fprintf(stderr, "agentflow index build: unexpected argument '%s'\n", argv[i]);
            index_usage(stderr);
            return CLI_EUSAGE;
        }
    }
    if (!in || !out) {
        fprintf(stderr, "agentflow index build: --input and --out are required\n");
        index_usage(stderr);
        return CLI_EUSAGE;
    }
    if (cli_refuse_same_file("agentflow index build", "--input", in, "--out", out) != CLI_OK)
        return CLI_EUSAGE;
    struct progress pr = {.t0 = af_clock_ms(), .tty = isatty(2)};
    p.progress = on_progress;
    p.user = &pr;
    struct wiki_build_stats st;
    char err[1024];
    int rc = wiki_index_build(in, out, &p, &st, err, sizeof err);
    if (pr.tty)
        fputc('\n', stderr);
    if (rc) {
        fprintf(stderr, "agentflow index build: %s\n", err);
        return exit_for(rc);
    }
    double secs = st.build_ms / 1000.0;
    if (st.n_stale_removed)
        fprintf(stderr, "removed %zu file%s left by an interrupted build of %s\n",
                st.n_stale_removed, st.n_stale_removed == 1 ? "" : "s", out);
    fprintf(stderr,
            "indexed %zu passages (%zu bad lines skipped, %zu blank lines) from %s into %s in "
            "%.1f s (%.0f passages/s)\n",
            st.n_passages, st.n_skipped, st.n_blank, in, out, secs,
            secs > 0 ? (double)st.n_passages / secs : 0.0);
    return CLI_OK;
}

static int index_query(int argc, char **argv)
{
    const char *pos[2] = {NULL, NULL};
    int n_pos = 0;
    long k = 5;
    for (int i = 1; i < argc; i++) {
        if ((strcmp(argv[i], "-k") == 0 || strcmp(argv[i], "--k") == 0) && i + 1 < argc) {
            char *end;
            k = strtol(argv[++i], &end, 10);
            if (*end || k < 1 || k > 1000) {
                fprintf(stderr, "agentflow index query: -k wants 1..1000, got '%s'\n", argv[i]);
                return CLI_EUSAGE;
            }
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            index_usage(stdout);
            return CLI_OK;
        } else if (n_pos < 2) {
            pos[n_pos++] = argv[i];
        } else {
            fprintf(stderr, "agentflow index query: unexpected argument '%s'\n", argv[i]);
            return CLI_EUSAGE;
        }
    }
    if (n_pos != 2) {
        index_usage(stderr);
        return CLI_EUSAGE;
    }
    size_t n_stale = 0;
    if (wiki_index_remove_stale(pos[0], &n_stale) == 0 && n_stale)
        fprintf(stderr, "removed %zu file%s left by an interrupted build of %s\n", n_stale,
                n_stale == 1 ? "" : "s", pos[0]);
    struct wiki_index *ix = NULL;
    json_t *hits = NULL;
    char err[1024];
    int rc = wiki_index_open(pos[0], 0, &ix, err, sizeof err);
    if (!rc)
        rc = wiki_index_query(ix, pos[1], (int)k, &hits, err, sizeof err);
    wiki_index_close(ix);
    if (rc) {
        fprintf(stderr, "agentflow index query: %s\n", err);
        return exit_for(rc);
    }
    char *s = json_dumps(hits, JSON_INDENT(2) | JSON_PRESERVE_ORDER | AF_JSON_REAL_OUT);
    printf("%s\n", s ? s : "[]");
    free(s);
    json_decref(hits);
    return CLI_OK;
}

int cmd_index(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        index_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_EUSAGE : CLI_OK;
    }
    if (strcmp(argv[1], "build") == 0)
        return index_build(argc - 1, argv + 1);
    if (strcmp(argv[1], "query") == 0)
        return index_query(argc - 1, argv + 1);
    fprintf(stderr, "agentflow index: unknown subcommand '%s'\n", argv[1]);
    index_usage(stderr);
    return CLI_EUSAGE;
}
