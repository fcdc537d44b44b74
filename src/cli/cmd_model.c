/*
 * cmd_model.c - `agentflow model info|tokenize|logits|generate|bench|make-random|quantize|
 * merge`: the in-process engine from the command line, for users and for the tests that compare
 * it with llama.cpp.
 */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agentflow/engine.h"
#include "cli/cli.h"
#include "core/clock.h"
#include "core/jsonx.h"
#include "engine/lora_merge.h"

static void model_usage(FILE *f)
{
    fprintf(
        f, "usage: agentflow model info PATH\n"
           "       agentflow model tokenize PATH TEXT [--no-bos] [--no-special]\n"
           "       agentflow model logits PATH --prompt TEXT [--top K] [--chat]\n"
           "       agentflow model generate PATH --prompt TEXT [--chat] [-n N] [sampling]\n"
           "       agentflow model bench PATH [-p 512] [-n 128] [-t 2] [--prefix 2000]\n"
           "       agentflow model make-vocab --input FILE [--input FILE ...] --size N OUT.gguf\n"
           "       agentflow model make-random --arch qwen2|llama --shape SHAPE --type T\n"
           "                                   --seed S [--vocab-from GGUF] OUT.gguf\n"
           "       agentflow model quantize IN.gguf OUT.gguf TYPE [--name NAME]\n"
           "       agentflow model merge BASE.gguf ADAPTER_DIR OUT.gguf [--type T]\n"
           "\n"
           "Common options: --threads N, --ctx N, --chat-template chatml|llama3,\n"
           "  --kv-type f32|f16 (the KV cache's element type; f16 rounds keys and values).\n"
           "tokenize prints the ids on one line (BOS added as the vocabulary says, special\n"
           "  token texts such as <|im_start|> matched, unless --no-bos / --no-special).\n"
           "logits prints {\"n_tokens\":N,\"top\":[[id,logit],...]} for the last position.\n"
           "generate streams the text to stdout; --json prints a JSON record instead.\n"
           "  Sampling: --temp T (0 = greedy), --top-k K, --top-p P, --min-p P,\n"
           "  --freq-penalty F, --presence-penalty F, --seed S, --stop TEXT (repeatable),\n"
           "  --ignore-eos.\n"
           "bench prints prefill and decode tokens/s on random token ids (decode as llama-bench's\n"
           "  tg: -n steps from an empty context; tg_after_pp: after the -p prompt), and the\n"
           "  time of a second prefill that shares a --prefix-token prefix with the first.\n"
           "merge folds a PEFT LoRA folder into the weights it adapts (W += alpha/r * B.A),\n"
           "  written in each tensor's own type or --type T (F32 F16 BF16 Q8_0 Q4_0 Q4_1\n"
           "  Q5_0 Q5_1 Q4_K Q5_K Q6_K); every other tensor and key is copied as it is.\n"
           "Shapes: tiny, small, qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-7b, llama3.2-1b,\n"
           "  llama3-8b. Types: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q4_K_M Q5_K\n"
           "  Q5_K_M Q6_K.\n"
           "quantize --name NAME sets general.name in the output (else the input's is kept).\n"
           "make-random writes the key " AF_GGUF_KEY_RANDOM_WEIGHTS " = true; loading such a\n"
           "  file prints a one-line notice on stderr.\n"
           "Exit codes: 0 ok, 2 usage (a bad flag or value), 3 the engine failed while\n"
           "running, 4 a file named on the command line (model, --input, --vocab-from,\n"
           "adapter, output) that is missing, malformed or cannot be written.\n");
}

enum {
    OPT_THREADS = 256,
    OPT_CTX,
    OPT_TMPL,
    OPT_KV_TYPE,
    OPT_PROMPT,
    OPT_TOP,
    OPT_CHAT,
    OPT_TEMP,
    OPT_TOPK,
    OPT_TOPP,
    OPT_MINP,
    OPT_FREQ,
    OPT_PRES,
    OPT_SEED,
    OPT_STOP,
    OPT_IGNORE_EOS,
    OPT_JSON,
    OPT_NO_BOS,
    OPT_NO_SPECIAL,
    OPT_PREFIX,
    OPT_ARCH,
    OPT_SHAPE,
    OPT_TYPE,
    OPT_NAME,
    OPT_VOCAB,
};

static const struct option model_opts[] = {
    {"threads", required_argument, 0, OPT_THREADS},
    {"ctx", required_argument, 0, OPT_CTX},
    {"chat-template", required_argument, 0, OPT_TMPL},
    {"kv-type", required_argument, 0, OPT_KV_TYPE},
    {"prompt", required_argument, 0, OPT_PROMPT},
    {"top", required_argument, 0, OPT_TOP},
    {"chat", no_argument, 0, OPT_CHAT},
    {"temp", required_argument, 0, OPT_TEMP},
    {"top-k", required_argument, 0, OPT_TOPK},
    {"top-p", required_argument, 0, OPT_TOPP},
    {"min-p", required_argument, 0, OPT_MINP},
    {"freq-penalty", required_argument, 0, OPT_FREQ},
    {"presence-penalty", required_argument, 0, OPT_PRES},
    {"seed", required_argument, 0, OPT_SEED},
    {"stop", required_argument, 0, OPT_STOP},
    {"ignore-eos", no_argument, 0, OPT_IGNORE_EOS},
    {"json", no_argument, 0, OPT_JSON},
    {"no-bos", no_argument, 0, OPT_NO_BOS},
    {"no-special", no_argument, 0, OPT_NO_SPECIAL},
    {"prefix", required_argument, 0, OPT_PREFIX},
    {"arch", required_argument, 0, OPT_ARCH},
    {"shape", required_argument, 0, OPT_SHAPE},
    {"type", required_argument, 0, OPT_TYPE},
    {"name", required_argument, 0, OPT_NAME},
    {"vocab-from", required_argument, 0, OPT_VOCAB},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

struct model_args {
    struct af_engine_params ep;
    struct af_engine_gen_params gp;
    struct af_engine_random_params rp;
    const char *prompt;
    const char *merge_type; /* --type as given, NULL when absent */
    const char *name;       /* quantize's --name: general.name of the output */
    int top, chat, json, no_bos, no_special;
    long n_prompt_bench, prefix;
    int n_gen_set;
    const char *pos[4];
    int n_pos;
};

static int num(const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end;
    double d = strtod(s, &end);
    if (!*s || *end || d < lo || d > hi) {
        fprintf(stderr, "agentflow model: --%s '%s' must be a number from %g to %g\n", opt, s, lo,
                hi);
        return -1;
    }
    *out = d;
    return 0;
}

static int parse_one(struct model_args *a, int o, const char *v)
{
    double d = 0;
    switch (o) {
    case OPT_THREADS:
    case 't':
        if (num("threads", v, 1, 1024, &d))
            return -1;
        a->ep.n_threads = (int)d;
        break;
    case OPT_CTX:
        if (num("ctx", v, 16, 1 << 24, &d))
            return -1;
        a->ep.n_ctx = (int64_t)d;
        break;
    case OPT_TMPL:
        a->ep.chat_template = v;
        break;
    case OPT_KV_TYPE:
        if (strcmp(v, "f32") && strcmp(v, "f16")) {
            fprintf(stderr, "agentflow model: --kv-type: expected f32 or f16, got '%s'\n", v);
            return -1;
        }
        a->ep.kv_f16 = !strcmp(v, "f16");
        break;
    case OPT_PROMPT:
        a->prompt = v;
        break;
    case OPT_TOP:
        if (num("top", v, 1, 1e7, &d))
            return -1;
        a->top = (int)d;
        break;
    case 'n':
        if (num("n", v, 0, 1e7, &d))
            return -1;
        a->gp.max_tokens = (int)d;
        a->n_gen_set = 1;
        break;
    case 'p':
        if (num("p", v, 1, 1e7, &d))
            return -1;
        a->n_prompt_bench = (long)d;
        break;
    case OPT_PREFIX:
        if (num("prefix", v, 0, 1e7, &d))
            return -1;
        a->prefix = (long)d;
        break;
    case OPT_TEMP:
        if (num("temp", v, 0, 100, &d))
            return -1;
        a->gp.temperature = (float)d;
        break;
    case OPT_TOPK:
        if (num("top-k", v, 0, 1e7, &d))
            return -1;
        a->gp.top_k = (int)d;
        break;
    case OPT_TOPP:
        if (num("top-p", v, 0, 1, &d))
            return -1;
        a->gp.top_p = (float)d;
        break;
    case OPT_MINP:
        if (num("min-p", v, 0, 1, &d))
            return -1;
        a->gp.min_p = (float)d;
        break;
    case OPT_FREQ:
    case OPT_PRES:
        if (num(o == OPT_FREQ ? "freq-penalty" : "presence-penalty", v, -10, 10, &d))
            return -1;
        *(o == OPT_FREQ ? &a->gp.frequency_penalty : &a->gp.presence_penalty) = (float)d;
        break;
    case OPT_SEED:
        if (num("seed", v, 0, 1.8e19, &d))
            return -1;
        a->gp.seed = (uint64_t)d;
        a->rp.seed = (uint64_t)d;
        break;
    case OPT_STOP:
        if (a->gp.n_stop == AF_ENGINE_MAX_STOP) {
            fprintf(stderr, "agentflow model: at most %d --stop strings\n", AF_ENGINE_MAX_STOP);
            return -1;
        }
        a->gp.stop[a->gp.n_stop++] = v;
        break;
    case OPT_ARCH:
        a->rp.arch = v;
        break;
    case OPT_SHAPE:
        a->rp.shape = v;
        break;
    case OPT_TYPE:
        a->rp.type = v;
        a->merge_type = v;
        break;
    case OPT_VOCAB:
        a->rp.vocab_from = v;
        break;
    case OPT_NAME:
        a->name = v;
        break;
    default:
        return -1;
    }
    return 0;
}

static int parse_args(int argc, char **argv, struct model_args *a)
{
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "hn:p:t:", model_opts, NULL)) != -1) {
        if (o == 'h') {
            model_usage(stdout);
            return 1;
        }
        if (o == OPT_CHAT || o == OPT_JSON || o == OPT_NO_BOS || o == OPT_NO_SPECIAL ||
            o == OPT_IGNORE_EOS) {
            *(o == OPT_CHAT         ? &a->chat
              : o == OPT_JSON       ? &a->json
              : o == OPT_NO_BOS     ? &a->no_bos
              : o == OPT_NO_SPECIAL ? &a->no_special
                                    : &a->gp.ignore_eos) = 1;
            continue;
        }
        if (o == '?' || parse_one(a, o, optarg)) {
            model_usage(stderr);
            return -1;
        }
    }
    for (int i = optind; i < argc; i++) {
        if (a->n_pos == 4) {
            fprintf(stderr, "agentflow model: too many arguments\n");
            return -1;
        }
        a->pos[a->n_pos++] = argv[i];
    }
    return 0;
}

static int open_engine(const struct model_args *a, struct af_engine **e)
{
    char err[1024];
    if (a->n_pos < 1) {
        fprintf(stderr, "agentflow model: missing model PATH\n");
        return CLI_EUSAGE;
    }
    if (af_engine_load(a->pos[0], &a->ep, e, err, sizeof err)) {
        fprintf(stderr, "agentflow model: %s\n", err);
        return CLI_EINPUT;
    }
    cli_note_random_weights(a->pos[0]);
    return CLI_OK;
}

/* The prompt's ids: raw text (BOS as the vocabulary says) or, with --chat, one user message
 * in the chat template. */
static int prompt_ids(struct af_engine *e, const struct model_args *a, const char *text,
                      int32_t **ids, size_t *n)
{
    char err[1024];
    char *chat = NULL;
    if (a->chat) {
        struct af_engine_msg m = {"user", text};
        if (af_engine_chat_prompt(e, &m, 1, &chat, err, sizeof err)) {
            fprintf(stderr, "agentflow model: %s\n", err);
            return CLI_EUSAGE;
        }
        text = chat;
    }
    int rc = af_engine_tokenize(e, text, !a->chat && !a->no_bos, !a->no_special, ids, n, err,
                                sizeof err);
    free(chat);
    if (rc) {
        fprintf(stderr, "agentflow model: %s\n", err);
        return CLI_EBACKEND;
    }
    return CLI_OK;
}

static int do_info(const struct model_args *a)
{
    struct af_engine *e = NULL;
    int code = open_engine(a, &e);
    if (code)
        return code;
    char *s = af_engine_info_json(e);
    printf("%s\n", s);
    free(s);
    af_engine_free(e);
    return CLI_OK;
}

static int do_tokenize(const struct model_args *a)
{
    if (a->n_pos != 2) {
        fprintf(stderr, "agentflow model tokenize: expected PATH TEXT\n");
        return CLI_EUSAGE;
    }
    struct af_engine *e = NULL;
    int code = open_engine(a, &e);
    if (code)
        return code;
    int32_t *ids = NULL;
    size_t n = 0;
    code = prompt_ids(e, a, a->pos[1], &ids, &n);
    if (!code) {
        for (size_t i = 0; i < n; i++)
            printf("%s%d", i ? " " : "", ids[i]);
        printf("\n");
    }
    free(ids);
    af_engine_free(e);
    return code;
}

struct top_entry {
    int32_t id;
    float logit;
};

static int top_desc(const void *x, const void *y)
{
    const struct top_entry *a = x, *b = y;
    if (a->logit != b->logit)
        return a->logit > b->logit ? -1 : 1;
    return a->id - b->id;
}

static int do_logits(const struct model_args *a)
{
    if (!a->prompt || a->n_pos != 1) {
        fprintf(stderr, "agentflow model logits: expected PATH --prompt TEXT\n");
        return CLI_EUSAGE;
    }
    struct af_engine *e = NULL;
    int code = open_engine(a, &e);
    if (code)
        return code;
    int32_t *ids = NULL;
    size_t n = 0;
    char err[1024];
    code = prompt_ids(e, a, a->prompt, &ids, &n);
    int64_t nv = af_engine_n_vocab(e);
    float *logits = malloc((size_t)nv * sizeof *logits);
    struct top_entry *all = malloc((size_t)nv * sizeof *all);
    if (!code && (!logits || !all)) {
        fprintf(stderr, "agentflow model logits: out of memory\n");
        code = CLI_EBACKEND;
    }
    int rc = code ? AF_OK : af_engine_logits(e, ids, n, 0, logits, err, sizeof err);
    if (rc) {
        fprintf(stderr, "agentflow model logits: %s\n", err);
        code = rc == AF_EPARSE ? CLI_EINPUT : CLI_EBACKEND; /* EPARSE: weights that overflow */
    }
    if (!code) {
        for (int64_t i = 0; i < nv; i++) {
            all[i].id = (int32_t)i;
            all[i].logit = logits[i];
        }
        qsort(all, (size_t)nv, sizeof *all, top_desc);
        int k = a->top > 0 ? a->top : 10;
        printf("{\"n_tokens\":%zu,\"top\":[", n);
        for (int i = 0; i < k && i < nv; i++)
            printf("%s[%d,%.6g]", i ? "," : "", all[i].id, (double)all[i].logit);
        printf("]}\n");
    }
    free(all);
    free(logits);
    free(ids);
    af_engine_free(e);
    return code;
}

static int stream_piece(void *user, int32_t id, const char *piece, size_t len)
{
    (void)id;
    if (*(const int *)user) {
        /* a terminal: escape and control bytes from the model must not act on it; a piece may
         * hold part of a UTF-8 character, so only single control bytes go */
        for (size_t i = 0; i < len; i++) {
            unsigned char c = (unsigned char)piece[i];
            if ((c >= 0x20 && c != 0x7f) || c == '\n' || c == '\t')
                fputc(c, stdout);
        }
    } else {
        fwrite(piece, 1, len, stdout);
    }
    fflush(stdout);
    return 0;
}

static void print_result_json(const struct af_engine_result *r)
{
    json_t *ids = json_array(), *lps = json_array();
    for (size_t i = 0; i < r->n_ids; i++) {
        json_array_append_new(ids, json_integer(r->ids[i]));
        json_array_append_new(lps, json_real((double)r->logprobs[i]));
    }
    json_t *j = json_pack("{ss sI sI sI so so ss sf sf}", "text", r->text, "n_prompt",
                          (json_int_t)r->n_prompt, "n_cached", (json_int_t)r->n_cached,
                          "n_generated", (json_int_t)r->n_ids, "ids", ids, "logprobs", lps,
                          "finish_reason", r->finish_reason ? r->finish_reason : "", "prefill_ms",
                          r->prefill_ms, "decode_ms", r->decode_ms);
    char *s = json_dumps(j, JSON_COMPACT | AF_JSON_REAL_OUT);
    printf("%s\n", s ? s : "{}");
    free(s);
    json_decref(j);
}

static int do_generate(struct model_args *a)
{
    if (!a->prompt || a->n_pos != 1) {
        fprintf(stderr, "agentflow model generate: expected PATH --prompt TEXT\n");
        return CLI_EUSAGE;
    }
    struct af_engine *e = NULL;
    int code = open_engine(a, &e);
    if (code)
        return code;
    int32_t *ids = NULL;
    size_t n = 0;
    char err[1024];
    code = prompt_ids(e, a, a->prompt, &ids, &n);
    if (!code) {
        int tty = isatty(fileno(stdout));
        if (!a->json) {
            a->gp.on_token = stream_piece;
            a->gp.user = &tty;
        }
        struct af_engine_result r;
        int rc = af_engine_generate(e, ids, n, &a->gp, &r, err, sizeof err);
        if (rc) {
            fprintf(stderr, "\nagentflow model generate: %s\n", err);
            code = rc == AF_EPARSE ? CLI_EINPUT : CLI_EBACKEND; /* EPARSE: weights that overflow */
        } else if (a->json) {
            print_result_json(&r);
        } else {
            printf("\n");
            fprintf(stderr, "[%zu prompt tokens, %zu generated, %.1f ms prefill, %.1f ms decode]\n",
                    r.n_prompt, r.n_ids, r.prefill_ms, r.decode_ms);
        }
        af_engine_result_deinit(&r);
    }
    free(ids);
    af_engine_free(e);
    return code;
}

static void random_ids(int32_t *ids, size_t n, int64_t n_vocab, uint64_t *state)
{
    for (size_t i = 0; i < n; i++) {
        *state = *state * 6364136223846793005ull + 1442695040888963407ull;
        /* Stay in the first 90% of ids: the end of real vocabularies is control tokens. */
        ids[i] = (int32_t)((*state >> 33) % (uint64_t)(n_vocab * 9 / 10));
    }
}

static int bench_gen(struct af_engine *e, const int32_t *ids, size_t n, int n_gen,
                     struct af_engine_result *r)
{
    char err[1024];
    struct af_engine_gen_params gp = af_engine_default_gen_params();
    gp.max_tokens = n_gen;
    gp.ignore_eos = 1;
    if (af_engine_generate(e, ids, n, &gp, r, err, sizeof err)) {
        fprintf(stderr, "agentflow model bench: %s\n", err);
        return CLI_EBACKEND;
    }
    return CLI_OK;
}

static int do_bench(struct model_args *a)
{
    long np = a->n_prompt_bench > 0 ? a->n_prompt_bench : 512;
    int ng = a->n_gen_set ? a->gp.max_tokens : 128;
    long prefix = a->prefix > 0 ? a->prefix : 2000;
    if (a->ep.n_threads <= 0)
        a->ep.n_threads = 2;
    struct af_engine *e = NULL;
    int code = open_engine(a, &e);
    if (code)
        return code;
    int64_t nv = af_engine_n_vocab(e);
    size_t cap = (size_t)(np > prefix + 64 ? np : prefix + 64);
    int32_t *ids = malloc(cap * sizeof *ids), *ids2 = malloc(cap * sizeof *ids2);
    uint64_t st = 42;
    struct af_engine_result r[5];
    memset(r, 0, sizeof r);
    random_ids(ids, 16, nv, &st);
    code = bench_gen(e, ids, 16, 2, &r[0]); /* warm-up: page in the weights */
    random_ids(ids, (size_t)np, nv, &st);
    if (!code)
        code = bench_gen(e, ids, (size_t)np, ng + 1, &r[1]);
    /* tg as llama-bench measures it: ng one-token steps from an empty context (a 1-token
     * prompt, then ng decodes), after the run above has touched the KV pool's pages, as
     * llama-bench's warm-up run does its cache */
    random_ids(ids, 1, nv, &st);
    if (!code)
        code = bench_gen(e, ids, 1, ng + 1, &r[4]);
    random_ids(ids, (size_t)prefix + 64, nv, &st);
    memcpy(ids2, ids, (size_t)prefix * sizeof *ids);
    random_ids(ids2 + prefix, 64, nv, &st);
    if (!code)
        code = bench_gen(e, ids, (size_t)prefix + 64, 1, &r[2]);
    if (!code)
        code = bench_gen(e, ids2, (size_t)prefix + 64, 1, &r[3]);
    if (!code) {
        double pp = (double)np / (r[1].prefill_ms / 1000.0);
        double tg = (double)ng / (r[4].decode_ms / 1000.0);
        double tg_pp = (double)ng / (r[1].decode_ms / 1000.0);
        printf("{\"model\":\"%s\",\"threads\":%d,\"pp\":%ld,\"pp_tokens_per_s\":%.2f,\"tg\":%d,"
               "\"tg_tokens_per_s\":%.2f,\"tg_after_pp_tokens_per_s\":%.2f,\"prefix\":%ld,"
               "\"first_prefill_ms\":%.2f,\"second_prefill_ms\":%.2f,"
               "\"second_cached_tokens\":%zu,\"ratio\":%.4f}\n",
               a->pos[0], a->ep.n_threads, np, pp, ng, tg, tg_pp, prefix, r[2].prefill_ms,
               r[3].prefill_ms, r[3].n_cached, r[3].prefill_ms / r[2].prefill_ms);
    }
    for (int i = 0; i < 5; i++)
        af_engine_result_deinit(&r[i]);
    free(ids);
    free(ids2);
    af_engine_free(e);
    return code;
}

static int do_make_random(const struct model_args *a)
{
    char err[1024];
    if (a->n_pos != 1 || !a->rp.arch) {
        fprintf(stderr, "agentflow model make-random: expected --arch ARCH ... OUT.gguf\n");
        return CLI_EUSAGE;
    }
    if (cli_refuse_same_file("agentflow model make-random", "--vocab-from", a->rp.vocab_from, "OUT",
                             a->pos[0]) != CLI_OK)
        return CLI_EUSAGE;
    int rc = af_engine_make_random(&a->rp, a->pos[0], err, sizeof err);
    if (rc) {
        fprintf(stderr, "agentflow model make-random: %s\n", err);
        return rc == AF_EINVAL ? CLI_EUSAGE : CLI_EINPUT; /* a bad flag, or a file at fault */
    }
    printf("wrote %s: %s %s, %s, random weights (seed %llu), vocabulary %s\n", a->pos[0],
           a->rp.arch, a->rp.shape ? a->rp.shape : "tiny", a->rp.type ? a->rp.type : "F32",
           (unsigned long long)a->rp.seed, a->rp.vocab_from ? a->rp.vocab_from : "of bytes");
    return CLI_OK;
}

static int do_quantize(const struct model_args *a)
{
    char err[1024];
    if (a->n_pos != 3) {
        fprintf(stderr, "agentflow model quantize: expected IN.gguf OUT.gguf TYPE\n");
        return CLI_EUSAGE;
    }
    if (cli_refuse_same_file("agentflow model quantize", "IN", a->pos[0], "OUT", a->pos[1]) !=
        CLI_OK)
        return CLI_EUSAGE;
    int rc = af_engine_quantize_named(a->pos[0], a->pos[1], a->pos[2], a->name, err, sizeof err);
    if (rc) {
        fprintf(stderr, "agentflow model quantize: %s\n", err);
        return rc == AF_EINVAL ? CLI_EUSAGE : CLI_EINPUT;
    }
    return CLI_OK;
}

static int do_merge(const struct model_args *a)
{
    char err[1024];
    if (a->n_pos != 3) {
        fprintf(stderr, "agentflow model merge: expected BASE.gguf ADAPTER_DIR OUT.gguf\n");
        return CLI_EUSAGE;
    }
    if (a->merge_type && lora_merge_parse_type(a->merge_type) < 0) {
        fprintf(stderr,
                "agentflow model merge: unknown --type '%s' (F32, F16, BF16, Q8_0, Q4_0, Q4_1, "
                "Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)\n",
                a->merge_type);
        return CLI_EUSAGE;
    }
    if (cli_refuse_same_file("agentflow model merge", "BASE", a->pos[0], "OUT", a->pos[2]) !=
        CLI_OK)
        return CLI_EUSAGE;
    struct lora_merge_stats st = {0, 0};
    if (lora_merge_files(a->pos[0], a->pos[1], a->pos[2], a->merge_type, &st, err, sizeof err)) {
        fprintf(stderr, "agentflow model merge: %s\n", err);
        return CLI_EINPUT;
    }
    printf("%s: %zu tensors merged (%s), %zu copied\n", a->pos[2], st.n_merged,
           a->merge_type ? a->merge_type : "their own types", st.n_copied);
    return CLI_OK;
}

int cmd_model(int argc, char **argv)
{
    static const char *subs[] = {"info",  "tokenize",    "logits",   "generate",
                                 "bench", "make-random", "quantize", "merge"};
    if (argc >= 2 && !strcmp(argv[1], "make-vocab"))
        return cmd_model_make_vocab(argc - 1, argv + 1);
    int which = -1;
    for (int i = 0; argc >= 2 && i < 8; i++)
        if (!strcmp(argv[1], subs[i]))
            which = i;
    if (which < 0) {
        int help = argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"));
        if (!help && argc >= 2)
            fprintf(stderr, "agentflow model: unknown subcommand '%s'\n", argv[1]);
        model_usage(help ? stdout : stderr);
        return help ? CLI_OK : CLI_EUSAGE;
    }
    struct model_args a;
    memset(&a, 0, sizeof a);
    a.ep = af_engine_default_params();
    a.gp = af_engine_default_gen_params();
    a.rp.type = "F32";
    int rc = parse_args(argc - 1, argv + 1, &a);
    if (rc)
        return rc > 0 ? CLI_OK : CLI_EUSAGE;
    switch (which) {
    case 0:
        return do_info(&a);
    case 1:
        return do_tokenize(&a);
    case 2:
        return do_logits(&a);
    case 3:
        return do_generate(&a);
    case 4:
        return do_bench(&a);
    case 5:
        return do_make_random(&a);
    case 6:
        return do_quantize(&a);
    default:
        return do_merge(&a);
    }
}
