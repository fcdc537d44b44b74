/*
 * cmd_world.c - `agentflow world build`: writes the practice world (encyclopedia, question
 * families with splits) and indexes its passages for Wikipedia_RAG_Search_Tool.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentflow/world.h"
#include "cli/cli.h"
#include "tools/wiki_index.h"

static void world_usage(FILE *f)
{
    fprintf(f,
            "usage: agentflow world build --out DIR [--seed S] [--max-train N] [--max-val N]\n"
            "                             [--max-test N] [--no-index]\n"
            "       agentflow world traces --world DIR --out FILE ... (world traces --help)\n"
            "       agentflow world drills --out FILE [--n 40000] [--seed 7] [--names P]\n"
            "\n"
            "Generates a practice world: an encyclopedia of about 2,160 fictional people,\n"
            "places, organisations and works, and four question families over it, each with\n"
            "train, val and test splits and difficulty levels (\"level\"):\n"
            "  world-lookup    one fact of one entity (1 search)\n"
            "  world-multihop  a chain of 2 or 3 facts (2-3 searches)\n"
            "  world-calc      facts then arithmetic (searches, then Python), and arithmetic\n"
            "                  word problems (Python)\n"
            "  world-24        Game of 24, scored by the exact checker\n"
            "Test questions start from entities that no training question starts from.\n"
            "\n"
            "DIR gets entities.jsonl, passages.jsonl, world.json, wiki.db (the passages indexed\n"
            "as by `agentflow index build`; not with --no-index) and benchmarks/NAME/ with\n"
            "train.jsonl, val.jsonl, test.jsonl and data.json (the test split). Use them with\n"
            "  agentflow run --wiki-db DIR/wiki.db ...\n"
            "  agentflow eval run --data-dir DIR/benchmarks --bench world-lookup ...\n"
            "  agentflow train grpo --data DIR/benchmarks/world-lookup/train.jsonl ...\n"
            "The same seed writes the same bytes (wiki.db aside, which SQLite lays out).\n"
            "\n"
            "  --seed S       the world (default 1)\n"
            "  --max-train N  items per family in the train split (default 4000); --max-val\n"
            "                 (default 200) and --max-test (default 300) likewise\n"
            "\n"
            "drills writes copy drills for `train sft`: short conversations whose replies\n"
            "repeat numbers from their prompts (a sub-goal's expression into a Python call, a\n"
            "printed result into an answer, one value among several facts, a list). They\n"
            "teach a model trained from scratch to copy digits from its context. --names P\n"
            "makes that share of them (0 to 1, default 0) copy names of the world's syllables\n"
            "instead: lists, one name among several facts, a result's name into a search.\n"
            "Exit codes: 0 ok, 2 usage, 4 an output file could not be written.\n");
}

static int parse_count(const char *cmd, const char *flag, const char *v, size_t *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (!*v || *end || errno || v[0] == '-' || n > 1000000) {
        fprintf(stderr, "agentflow world %s: %s takes 0 to 1000000 (got '%s')\n", cmd, flag, v);
        return CLI_EUSAGE;
    }
    *out = (size_t)n;
    return CLI_OK;
}

static int world_build(int argc, char **argv)
{
    struct af_world_params p = af_world_default_params();
    const char *out = NULL;
    int index = 1, rc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            world_usage(stdout);
            return CLI_OK;
        } else if (strcmp(a, "--no-index") == 0) {
            index = 0;
        } else if (v && strcmp(a, "--out") == 0) {
            out = v, i++;
        } else if (v && strcmp(a, "--seed") == 0) {
            size_t s;
            if ((rc = parse_count("build", a, v, &s)) != CLI_OK)
                return rc;
            p.seed = s, i++;
        } else if (v && strcmp(a, "--max-train") == 0) {
            if ((rc = parse_count("build", a, v, &p.max_train)) != CLI_OK)
                return rc;
            i++;
        } else if (v && strcmp(a, "--max-val") == 0) {
            if ((rc = parse_count("build", a, v, &p.max_val)) != CLI_OK)
                return rc;
            i++;
        } else if (v && strcmp(a, "--max-test") == 0) {
            if ((rc = parse_count("build", a, v, &p.max_test)) != CLI_OK)
                return rc;
            i++;
        } else {
            fprintf(stderr, "agentflow world build: unexpected argument '%s'\n", a);
            world_usage(stderr);
            return CLI_EUSAGE;
        }
    }
    if (!out) {
        fprintf(stderr, "agentflow world build: --out DIR is required\n");
        world_usage(stderr);
        return CLI_EUSAGE;
    }
    char err[1024];
    struct af_world_stats st;
    if ((rc = af_world_build(out, &p, &st, err, sizeof err)) != AF_OK) {
        fprintf(stderr, "agentflow world build: %s\n", err);
        return rc == AF_EINVAL ? CLI_EUSAGE : CLI_EINPUT;
    }
    fprintf(stderr,
            "world %llu: %zu entities, %zu passages; %zu train, %zu val, %zu test questions in "
            "%s/benchmarks\n",
            (unsigned long long)p.seed, st.entities, st.passages, st.items[0], st.items[1],
            st.items[2], out);
    if (!index)
        return CLI_OK;
    char in[4096], db[4096];
    snprintf(in, sizeof in, "%s/passages.jsonl", out);
    snprintf(db, sizeof db, "%s/wiki.db", out);
    struct wiki_build_params wp = wiki_build_default_params();
    wp.shards = 1; /* a few thousand passages: one table is fastest to build and to query */
    struct wiki_build_stats ws;
    if ((rc = wiki_index_build(in, db, &wp, &ws, err, sizeof err)) != AF_OK) {
        fprintf(stderr, "agentflow world build: indexing: %s\n", err);
        return CLI_EINPUT;
    }
    fprintf(stderr, "indexed %zu passages into %s\n", ws.n_passages, db);
    return CLI_OK;
}

static int world_drills(int argc, char **argv)
{
    const char *out = NULL;
    struct af_world_drills_params p = af_world_drills_default_params();
    size_t n = p.n, seed = (size_t)p.seed;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            world_usage(stdout);
            return CLI_OK;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "agentflow world drills: %s needs a value (or is unknown)\n", a);
            return CLI_EUSAGE;
        }
        const char *v = argv[++i];
        int rc = CLI_OK;
        if (!strcmp(a, "--out")) {
            out = v;
        } else if (!strcmp(a, "--n")) {
            rc = parse_count("drills", "--n", v, &n);
        } else if (!strcmp(a, "--seed")) {
            rc = parse_count("drills", "--seed", v, &seed);
        } else if (!strcmp(a, "--names")) {
            char *end = NULL;
            p.names = strtod(v, &end);
            if (end == v || *end || !(p.names >= 0 && p.names <= 1)) {
                fprintf(stderr,
                        "agentflow world drills: --names wants a share in [0, 1], not "
                        "\"%s\"\n",
                        v);
                return CLI_EUSAGE;
            }
        } else {
            fprintf(stderr, "agentflow world drills: unknown option %s\n", a);
            return CLI_EUSAGE;
        }
        if (rc)
            return rc;
    }
    if (!out) {
        fprintf(stderr, "agentflow world drills: --out FILE is required\n");
        return CLI_EUSAGE;
    }
    p.n = n;
    p.seed = (uint64_t)seed;
    char err[1024];
    if (af_world_drills(out, &p, err, sizeof err)) {
        fprintf(stderr, "agentflow world drills: %s\n", err);
        return CLI_EINPUT;
    }
    fprintf(stderr, "wrote %zu drills to %s\n", n, out);
    return CLI_OK;
}

int cmd_world(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "drills") == 0)
        return world_drills(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "build") == 0)
        return world_build(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "traces") == 0)
        return cmd_world_traces(argc - 1, argv + 1);
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        world_usage(stdout);
        return CLI_OK;
    }
    world_usage(stderr);
    return CLI_EUSAGE;
}
