/*
 * cmd_grpo.c - `agentflow train grpo`: options, data loading (JSONL or benchmark sets), the
 * judge reward, the progress display and exit codes; the loop itself is src/train/grpo.c.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/batch.h"
#include "cli/cli.h"
#include "cli/config.h"
#include "core/clock.h"
#include "core/errf.h"
#include "core/fileio.h"
#include "engine/lora.h"
#include "eval/dataset.h"
#include "eval/judge.h"
#include "train/dist.h"
#include "train/gemm.h"
#include "train/grpo.h"

#define CMD "agentflow train grpo"

static void grpo_usage(FILE *f)
{
    fprintf(f,
            "usage: " CMD " --model BASE.gguf[+lora:DIR] --data DATA --out RUN [options]\n"
            "\n"
            "Trains the planner with Flow-GRPO inside the real flow (docs/TRAINING.md): for each\n"
            "question, --group whole solves; each final answer is scored by the question's\n"
            "benchmark scorer, and the group-relative advantage trains every planner turn.\n"
            "DATA is a JSONL file of {\"question\", \"answer\", \"bench\"} (bench names a scorer;\n"
            "--bench sets it for lines without one), or benchmark names (gameof24,aime24) read\n"
            "from --data-dir. RUN gets metrics.jsonl, rollouts.jsonl, checkpoint-STEP/ and the\n"
            "latest adapter (PEFT format).\n"
            "\n"
            "data and output:\n"
            "  --data DATA, --val DATA   training and validation questions\n"
            "  --bench NAME              scorer for JSONL lines without \"bench\"\n"
            "  --data-dir DIR            benchmark folder (default $AGENTFLOW_DATA or\n"
            "                            ../shared/data/benchmarks)\n"
            "  --out RUN                 the run folder\n"
            "algorithm:\n"
            "  --group G                 rollouts per question (default 8; at least 2)\n"
            "  --batch B                 questions per step (default 32)\n"
            "  --steps N | --epochs E    steps (default: E passes over the data, E = 1)\n"
            "  --lr X                    AdamW learning rate (default 1e-5 LoRA, 1e-6 --full)\n"
            "  --schedule S --warmup N   constant, linear or cosine; warm-up steps (0)\n"
            "  --weight-decay X          AdamW weight decay (default 0.01)\n"
            "  --grad-clip X             global gradient-norm clip (default 1; 0 off)\n"
            "  --clip-low X --clip-high X  PPO ratio clip (default 0.2 and 0.3)\n"
            "  --kl X                    k3 KL coefficient to the reference (default 0.001)\n"
            "  --loss-agg A              token-mean (default) or seq-mean-token-mean\n"
            "  --ppo-epochs E            passes over the rollouts per step (default 1)\n"
            "  --mini-batch M            planner turns per optimiser step (default: all)\n"
            "  --temperature T           planner sampling temperature (default 0.7)\n"
            "  --frequency-penalty P     planner frequency penalty while sampling (default:\n"
            "                            the flow's, 1.2); the update scores each token under\n"
            "                            the same penalised distribution\n"
            "  --dynamic-sampling R      update only on groups whose rewards differ, rolling\n"
            "                            out up to R more batches a step to find B of them\n"
            "                            (DAPO's dynamic sampling; default 0: off)\n"
            "  --max-tokens N            planner reply cap (default 2048)\n"
            "  --reward R                correct (0/1, default) or f1\n"
            "  --judge, --judge-url URL, --judge-model NAME   reward from an LLM judge (default\n"
            "                            engine: the fixed slot; an unparsable verdict is 0)\n"
            "model:\n"
            "  --lora-rank R --lora-alpha A --lora-targets LIST   a new adapter (8, 2R, all)\n"
            "  --ref-adapter             KL reference = the starting adapter (+lora:DIR), not\n"
            "                            the base model\n"
            "  --full                    train every weight (small models): the engine samples\n"
            "                            with them in the file's types; RUN/model.gguf\n"
            "run:\n"
            "  --concurrency N           trajectories at once (default 8)\n"
            "  --seed S                  adapter init, data order, sampling (default 0)\n"
            "  --save-every N --keep K   checkpoints (default 10 and 2; the last step saves)\n"
            "  --eval-every N            accuracy on --val every N steps (val_accuracy)\n"
            "  --resume                  continue RUN from its newest checkpoint\n"
            "  --stop-after N            save and stop after step N\n"
            "  --quiet                   no progress display\n"
            "\n"
            "The fixed, executor and tool slots default to the base model in-process (gguf:BASE);\n"
            "any engine option of `agentflow run` sets them instead (--fixed-url, --url, ...).\n"
            "--max-steps defaults to 3 here, as in the paper's training.\n"
            "\n");
    run_common_usage(f);
    fprintf(f,
            "\nExit codes: 0 ok, 2 usage or a bad setting, 3 back-end error, 4 bad input file.\n");
}

enum {
    G_MODEL = RUN_OPT_END,
    G_DATA,
    G_VAL,
    G_BENCH,
    G_DATADIR,
    G_OUT,
    G_GROUP,
    G_BATCH,
    G_STEPS,
    G_EPOCHS,
    G_LR,
    G_SCHED,
    G_WARMUP,
    G_WD,
    G_GCLIP,
    G_CLIPLO,
    G_CLIPHI,
    G_KL,
    G_AGG,
    G_PPOE,
    G_MINIB,
    G_TEMP,
    G_FREQ,
    G_DYN,
    G_MAXTOK,
    G_REWARD,
    G_JUDGE,
    G_JUDGE_URL,
    G_JUDGE_MODEL,
    G_RANK,
    G_ALPHA,
    G_TARGETS,
    G_FULL,
    G_REFAD,
    G_CONC,
    G_SEED,
    G_SAVE,
    G_KEEP,
    G_EVAL,
    G_RESUME,
    G_STOP,
    G_QUIET,
};

static const struct option grpo_own_opts[] = {
    {"model", required_argument, 0, G_MODEL},
    {"data", required_argument, 0, G_DATA},
    {"val", required_argument, 0, G_VAL},
    {"bench", required_argument, 0, G_BENCH},
    {"data-dir", required_argument, 0, G_DATADIR},
    {"out", required_argument, 0, G_OUT},
    {"group", required_argument, 0, G_GROUP},
    {"batch", required_argument, 0, G_BATCH},
    {"steps", required_argument, 0, G_STEPS},
    {"epochs", required_argument, 0, G_EPOCHS},
    {"lr", required_argument, 0, G_LR},
    {"schedule", required_argument, 0, G_SCHED},
    {"warmup", required_argument, 0, G_WARMUP},
    {"weight-decay", required_argument, 0, G_WD},
    {"grad-clip", required_argument, 0, G_GCLIP},
    {"clip-low", required_argument, 0, G_CLIPLO},
    {"clip-high", required_argument, 0, G_CLIPHI},
    {"kl", required_argument, 0, G_KL},
    {"loss-agg", required_argument, 0, G_AGG},
    {"ppo-epochs", required_argument, 0, G_PPOE},
    {"mini-batch", required_argument, 0, G_MINIB},
    {"temperature", required_argument, 0, G_TEMP},
    {"frequency-penalty", required_argument, 0, G_FREQ},
    {"dynamic-sampling", required_argument, 0, G_DYN},
    {"max-tokens", required_argument, 0, G_MAXTOK},
    {"reward", required_argument, 0, G_REWARD},
    {"judge", no_argument, 0, G_JUDGE},
    {"judge-url", required_argument, 0, G_JUDGE_URL},
    {"judge-model", required_argument, 0, G_JUDGE_MODEL},
    {"lora-rank", required_argument, 0, G_RANK},
    {"lora-alpha", required_argument, 0, G_ALPHA},
    {"lora-targets", required_argument, 0, G_TARGETS},
    {"full", no_argument, 0, G_FULL},
    {"ref-adapter", no_argument, 0, G_REFAD},
    {"concurrency", required_argument, 0, G_CONC},
    {"seed", required_argument, 0, G_SEED},
    {"save-every", required_argument, 0, G_SAVE},
    {"keep", required_argument, 0, G_KEEP},
    {"eval-every", required_argument, 0, G_EVAL},
    {"resume", no_argument, 0, G_RESUME},
    {"stop-after", required_argument, 0, G_STOP},
    {"quiet", no_argument, 0, G_QUIET},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

struct grpo_args {
    struct run_args common;
    struct train_grpo_opts o;
    const char *data, *val, *bench, *data_dir;
    const char *judge_url, *judge_model;
    int judge, quiet, full;
};

/* One numeric option: the name, its bounds and where it goes. */
static int number(const char *opt, const char *arg, double lo, double hi, double *d)
{
    return run_parse_number(CMD, opt, arg, lo, hi, d);
}

static int handle_num(struct grpo_args *a, int o, const char *arg)
{
    struct train_grpo_opts *t = &a->o;
    double d = 0;
    switch (o) {
#define NUM(code, name, lo, hi, expr)                                                              \
    case code:                                                                                     \
        if (number(name, arg, lo, hi, &d))                                                         \
            return -1;                                                                             \
        expr;                                                                                      \
        return 1;
        NUM(G_GROUP, "group", 1, 1e6, t->group = (int64_t)d)
        NUM(G_BATCH, "batch", 1, 1e6, t->batch = (int64_t)d)
        NUM(G_STEPS, "steps", 1, 1e12, t->steps = (int64_t)d)
        NUM(G_EPOCHS, "epochs", 1, 1e6, t->epochs = (int64_t)d)
        NUM(G_LR, "lr", 0, 10, t->lr = (float)d)
        NUM(G_WARMUP, "warmup", 0, 1e12, t->warmup = (int64_t)d)
        NUM(G_WD, "weight-decay", 0, 10, t->adamw.weight_decay = (float)d)
        NUM(G_GCLIP, "grad-clip", 0, 1e9, t->clip = (float)d)
        NUM(G_CLIPLO, "clip-low", 0, 0.999, t->hp.clip_low = (float)d)
        NUM(G_CLIPHI, "clip-high", 0, 1e3, t->hp.clip_high = (float)d)
        NUM(G_KL, "kl", 0, 1e6, t->hp.kl_coef = (float)d)
        NUM(G_PPOE, "ppo-epochs", 1, 1000, t->ppo_epochs = (int)d)
        NUM(G_MINIB, "mini-batch", 0, 1e9, t->mini_batch = (int64_t)d)
        NUM(G_TEMP, "temperature", 1e-3, 100, t->temperature = (float)d)
        NUM(G_FREQ, "frequency-penalty", -100, 100, t->frequency_penalty = (float)d)
        NUM(G_DYN, "dynamic-sampling", 0, 1000, t->dynamic_sampling = (int)d)
        NUM(G_MAXTOK, "max-tokens", 1, 1e6, t->max_tokens = (int)d)
        NUM(G_RANK, "lora-rank", 1, 4096, t->lora_rank = (int)d)
        NUM(G_ALPHA, "lora-alpha", 1e-6, 1e6, t->lora_alpha = (float)d)
        NUM(G_CONC, "concurrency", 1, 4096, t->concurrency = (int)d)
        NUM(G_SEED, "seed", 0, 9e15, t->seed = (uint64_t)d)
        NUM(G_SAVE, "save-every", 1, 1e12, t->save_every = (int64_t)d)
        NUM(G_KEEP, "keep", 1, 1e6, t->keep = (int)d)
        NUM(G_EVAL, "eval-every", 0, 1e12, t->eval_every = (int64_t)d)
        NUM(G_STOP, "stop-after", 1, 1e12, t->stop_after = (int64_t)d)
#undef NUM
    default:
        return 0;
    }
}

static int handle_own(struct grpo_args *a, int o, const char *arg)
{
    char err[512];
    int r = handle_num(a, o, arg);
    if (r)
        return r < 0 ? -1 : 0;
    switch (o) {
    case G_MODEL:
        a->o.model = arg;
        return 0;
    case G_DATA:
        a->data = arg;
        return 0;
    case G_VAL:
        a->val = arg;
        return 0;
    case G_BENCH:
        a->bench = arg;
        return 0;
    case G_DATADIR:
        a->data_dir = arg;
        return 0;
    case G_OUT:
        a->o.out_dir = arg;
        return 0;
    case G_SCHED:
        a->o.schedule = arg;
        return 0;
    case G_AGG:
        if (grpo_agg_from_name(arg) < 0) {
            fprintf(stderr, CMD ": --loss-agg '%s': token-mean or seq-mean-token-mean\n", arg);
            return -1;
        }
        a->o.agg = (enum grpo_agg)grpo_agg_from_name(arg);
        return 0;
    case G_REWARD:
        if (strcmp(arg, "correct") && strcmp(arg, "f1")) {
            fprintf(stderr, CMD ": --reward '%s': correct or f1\n", arg);
            return -1;
        }
        a->o.reward_f1 = !strcmp(arg, "f1");
        return 0;
    case G_JUDGE:
        a->judge = 1;
        return 0;
    case G_JUDGE_URL:
    case G_JUDGE_MODEL:
        a->judge = 1;
        *(o == G_JUDGE_URL ? &a->judge_url : &a->judge_model) = arg;
        return 0;
    case G_TARGETS:
        if (lora_targets_parse(arg, &a->o.lora_targets, err, sizeof err)) {
            fprintf(stderr, CMD ": --lora-targets: %s\n", err);
            return -1;
        }
        return 0;
    case G_FULL:
        a->full = 1;
        return 0;
    case G_REFAD:
        a->o.ref_adapter = 1;
        return 0;
    case G_RESUME:
        a->o.resume = 1;
        return 0;
    case G_QUIET:
        a->quiet = 1;
        return 0;
    case 'h':
        grpo_usage(stdout);
        return 1;
    default:
        grpo_usage(stderr);
        return -1;
    }
}

/* The shared table names its every-slot model option "model" too; ours is the planner file,
 * so that one is renamed "slot-model". */
static struct option *merged_opts(void)
{
    struct option *opts = run_opts_merge(grpo_own_opts);
    for (struct option *p = opts; p->name; p++)
        if (!strcmp(p->name, "model") && p->val < RUN_OPT_END) {
            p->name = "slot-model";
            break;
        }
    return opts;
}

static int parse_args(int argc, char **argv, struct grpo_args *a)
{
    struct option *opts = merged_opts();
    int o, rc = 0;
    optind = 1;
    while (rc == 0 && (o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int h = run_args_handle(&a->common, CMD, o, optarg);
        rc = h < 0 ? -1 : h > 0 ? 0 : handle_own(a, o, optarg);
    }
    free(opts);
    if (rc == 0 && optind < argc) {
        fprintf(stderr, CMD ": unexpected argument '%s'\n", argv[optind]);
        rc = -1;
    }
    return rc;
}

/* ---- data ------------------------------------------------------------------------------ */

/* JSONL lines, each an object; `bench` fills in a missing "bench". */
static int load_jsonl(const char *path, const char *bench, json_t *out)
{
    char err[1024], *text = NULL;
    size_t len = 0;
    if (af_file_read(path, (size_t)1 << 30, &text, &len, err, sizeof err)) {
        fprintf(stderr, CMD ": %s\n", err);
        return CLI_EINPUT;
    }
    int line = 0, code = CLI_OK;
    for (char *p = text; *p && code == CLI_OK;) {
        char *nl = strchr(p, '\n');
        const size_t l = nl ? (size_t)(nl - p) : strlen(p);
        line++;
        size_t k = 0;
        while (k < l && (p[k] == ' ' || p[k] == '\t' || p[k] == '\r'))
            k++;
        if (k < l) {
            json_error_t je;
            json_t *j = json_loadb(p, l, 0, &je);
            if (!j || !json_is_object(j)) {
                fprintf(stderr, CMD ": %s: line %d: %s\n", path, line,
                        j ? "not a JSON object" : je.text);
                code = CLI_EINPUT;
            } else {
                if (bench && !json_object_get(j, "bench"))
                    json_object_set_new(j, "bench", json_string(bench));
                json_array_append(out, j);
            }
            json_decref(j);
        }
        p += l + (nl ? 1 : 0);
    }
    free(text);
    return code;
}

static int load_data(const char *spec, const struct grpo_args *a, json_t **out)
{
    *out = json_array();
    struct stat sb;
    if (stat(spec, &sb) == 0 || strchr(spec, '/') || strstr(spec, ".json"))
        return load_jsonl(spec, a->bench, *out);
    char err[1024], **names = NULL;
    if (eval_bench_list_parse(spec, &names, err, sizeof err)) {
        fprintf(stderr, CMD ": --data %s: neither a file nor benchmark names: %s\n", spec, err);
        return CLI_EINPUT;
    }
    int code = CLI_OK;
    for (char **n = names; *n && code == CLI_OK; n++) {
        struct eval_dataset d;
        if (eval_dataset_load(eval_data_dir(a->data_dir), *n, &d, err, sizeof err)) {
            fprintf(stderr, CMD ": %s\n", err);
            code = CLI_EINPUT;
            break;
        }
        for (size_t i = 0; i < eval_dataset_size(&d); i++) {
            json_t *it = json_deep_copy(eval_dataset_item(&d, i));
            json_object_set_new(it, "bench", json_string(*n));
            if (!json_object_get(it, "question") && eval_item_query(it)[0])
                json_object_set_new(it, "question", json_string(eval_item_query(it)));
            json_array_append_new(*out, it);
        }
        eval_dataset_deinit(&d);
    }
    eval_bench_list_free(names);
    return code;
}

/* ---- judge reward ---------------------------------------------------------------------- */

static int judge_reward(void *user, const json_t *item, const char *answer, double *reward,
                        int *correct, char *err, size_t errlen)
{
    const struct eval_judge *j = user;
    int verdict = -1;
    char *reply = NULL;
    const char *q = json_string_value(json_object_get(item, "question"));
    int rc = eval_judge_item(j, q ? q : eval_item_query(item), eval_item_gold(item),
                             answer ? answer : "", &verdict, &reply, err, errlen);
    free(reply);
    if (rc)
        return rc;
    *correct = verdict == 1;
    *reward = *correct ? 1.0 : 0.0;
    return AF_OK;
}

/* ---- progress -------------------------------------------------------------------------- */

struct progress {
    int quiet, tty;
    double t0;
    int64_t first, step, steps;
};

static void on_message(void *user, const char *msg)
{
    (void)user;
    fprintf(stderr, CMD ": %s\n", msg);
}

static void on_rollout(void *user, int64_t done, int64_t total)
{
    const struct progress *p = user;
    if (p->quiet || !p->tty)
        return;
    fprintf(stderr, "\rstep %lld/%lld: rollouts %lld/%lld\033[K", (long long)p->step + 1,
            (long long)p->steps, (long long)done, (long long)total);
}

static void on_step(void *user, const struct train_grpo_step *s)
{
    struct progress *p = user;
    p->step = s->step;
    p->steps = s->steps;
    if (p->quiet)
        return;
    if (!p->first) {
        p->first = s->step;
        p->t0 = af_clock_ms();
    }
    char val[48] = "";
    if (!isnan(s->val_accuracy))
        snprintf(val, sizeof val, " val %.3f", s->val_accuracy);
    fprintf(stderr,
            "%sstep %lld/%lld reward %.3f acc %.3f degenerate %.2f kl %.2e loss %.4f |g| %.3g "
            "turns %lld rollout %.1fs update %.1fs%s%s\n",
            p->tty ? "\r\033[K" : "", (long long)s->step, (long long)s->steps, s->reward_mean,
            s->accuracy, s->degenerate_frac, s->kl, s->loss, s->grad_norm, (long long)s->turns,
            s->rollout_s, s->update_s, val, s->saved ? " (saved)" : "");
}

/* ---- the command ----------------------------------------------------------------------- */

static int exit_for(int rc)
{
    switch (rc) {
    case AF_OK:
        return CLI_OK;
    case AF_EINVAL:
        return CLI_EUSAGE;
    case AF_EBACKEND:
    case AF_ETIMEOUT:
        return CLI_EBACKEND;
    default:
        return CLI_EINPUT;
    }
}

int cmd_train_grpo(int argc, char **argv)
{
    struct grpo_args a;
    memset(&a, 0, sizeof a);
    run_args_init(&a.common);
    a.o = train_grpo_default_opts();
    struct run_config cfg;
    config_init(&cfg);
    struct run_ctx rc;
    memset(&rc, 0, sizeof rc);
    json_t *data = NULL, *val = NULL;
    struct progress prog = {0};
    struct eval_judge judge;
    struct run_config jcfg;
    struct backends jbe;
    int have_jcfg = 0, have_jbe = 0;
    char err[2048];
    int code = parse_args(argc, argv, &a);
    if (code != 0) {
        code = code > 0 ? CLI_OK : CLI_EUSAGE;
        goto out;
    }
    if (!a.o.model || !a.data || !a.o.out_dir) {
        fprintf(stderr, CMD ": --model, --data and --out are required\n");
        code = CLI_EUSAGE;
        goto out;
    }
    if (strstr(a.o.model, "://") || !strncmp(a.o.model, "scripted:", 9)) {
        fprintf(stderr,
                CMD ": --model %s: the planner must run in-process (a GGUF file, "
                    "gguf:PATH[+lora:DIR]) so that it can sample and be trained\n",
                a.o.model);
        code = CLI_EUSAGE;
        goto out;
    }
    if (a.common.slot_url[AF_SLOT_PLANNER]) {
        fprintf(stderr, CMD ": the planner is --model (in-process, trained); --planner-url "
                            "cannot be set\n");
        code = CLI_EUSAGE;
        goto out;
    }
    if (!json_object_get(a.common.flags, "max_steps"))
        json_object_set_new(a.common.flags, "max_steps", json_integer(3));
    /* Slots not named by a flag or the config run the base model in-process, not the
     * embedded model that `run` falls back to. */
    char base_url[4200];
    {
        const char *base = a.o.model;
        if (!strncmp(base, "gguf:", 5))
            base += 5;
        char path[4096];
        snprintf(path, sizeof path, "%s", base);
        char *plus = strstr(path, "+lora:");
        if (plus)
            *plus = '\0';
        struct stat sb;
        if (stat(path, &sb) != 0) {
            fprintf(stderr, CMD ": --model %s: %s\n", path, strerror(errno));
            code = CLI_EINPUT;
            goto out;
        }
        snprintf(base_url, sizeof base_url, "gguf:%s", path);
        a.common.default_url = base_url;
    }
    if ((code = run_build_config(&a.common, CMD, &cfg)) != CLI_OK)
        goto out;
    if ((code = load_data(a.data, &a, &data)) != CLI_OK)
        goto out;
    if (a.val && (code = load_data(a.val, &a, &val)) != CLI_OK)
        goto out;
    if ((code = run_ctx_open(&rc, &cfg)) != CLI_OK)
        goto out;
    a.o.full = a.full;
    a.o.data = data;
    a.o.val = val;
    a.o.flow = rc.params;
    a.o.flow.on_step = NULL;
    a.o.n_threads = cfg.threads;
    a.o.prefill_chunk = cfg.prefill_chunk;
    a.o.max_batch = cfg.max_batch;
    a.o.chat_template = cfg.chat_template;
    if (a.judge && a.judge_url) { /* the judge's own engine */
        config_init(&jcfg);
        have_jcfg = 1;
        config_set_url(&jcfg, -1, a.judge_url);
        if (a.judge_model)
            config_set_model(&jcfg, -1, a.judge_model);
        if (backends_open(&jcfg, &jbe, err, sizeof err) != AF_OK) {
            fprintf(stderr, CMD ": --judge-url: %s\n", err);
            code = CLI_EUSAGE;
            goto out;
        }
        have_jbe = 1;
        eval_judge_init(&judge, jbe.llm[AF_SLOT_FIXED], a.judge_model);
        a.o.reward = judge_reward;
        a.o.reward_user = &judge;
    } else if (a.judge) {
        const struct af_flow_slot *fixed = &rc.params.slots[AF_SLOT_FIXED];
        eval_judge_init(&judge, fixed->llm, a.judge_model ? a.judge_model : fixed->model);
        a.o.reward = judge_reward;
        a.o.reward_user = &judge;
    }
    train_gemm_set_threads(cfg.threads);
    if (train_dist_init(err, sizeof err)) {
        fprintf(stderr, CMD ": %s\n", err);
        code = CLI_EBACKEND;
        goto out;
    }
    prog.quiet = a.quiet || train_dist_rank() != 0;
    prog.tty = isatty(2);
    a.o.on_step = on_step;
    a.o.on_message = on_message;
    a.o.on_rollout = on_rollout;
    a.o.user = &prog;
    int rcode = train_grpo_run(&a.o, err, sizeof err);
    if (rcode) {
        if (train_dist_size() > 1)
            fprintf(stderr, CMD ": rank %d: %s\n", train_dist_rank(), err);
        else
            fprintf(stderr, "%s" CMD ": %s\n", prog.tty && !prog.quiet ? "\n" : "", err);
        code = exit_for(rcode);
        train_dist_abort(code); /* the other ranks would wait for this one */
    }
    train_dist_finalize();
out:
    if (have_jbe)
        backends_close(&jbe);
    if (have_jcfg)
        config_deinit(&jcfg);
    json_decref(data);
    json_decref(val);
    run_ctx_close(&rc);
    config_deinit(&cfg);
    run_args_deinit(&a.common);
    return code;
}
