/*
 * cmd_train.c - `agentflow train sft`: option parsing, the progress display and exit codes;
 * the loop itself is src/train/sft.c. `train grpo` is cmd_grpo.c.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/clock.h"
#include "engine/lora.h"
#include "train/gemm.h"
#include "train/sft.h"

static void train_usage(FILE *f)
{
    fprintf(f,
            "usage: agentflow train sft --model BASE.gguf --data FILE.jsonl --out DIR [options]\n"
            "       agentflow train grpo --model BASE.gguf --data DATA --out RUN [options]\n"
            "       (Flow-GRPO: `agentflow train grpo --help`)\n"
            "       agentflow train plot RUN   (curves.html and *.svg from RUN/metrics.jsonl)\n"
            "\n"
            "Fine-tunes on chat JSONL ({\"messages\":[{\"role\",\"content\"},...]}, gzip ok) with\n"
            "the loss on assistant replies only (--loss-on). DIR gets metrics.jsonl,\n"
            "checkpoint-STEP/ and the latest adapter (adapter_model.safetensors +\n"
            "adapter_config.json, PEFT format), or model.gguf with --full.\n"
            "\n"
            "  --lora-rank R         adapter rank (default 8)\n"
            "  --lora-alpha A        scale numerator, delta = A/R * B·A (default 2R)\n"
            "  --lora-dropout P      dropout on the adapter inputs (default 0)\n"
            "  --lora-targets LIST   q,k,v,o,gate,up,down or all (default all)\n"
            "  --full                train every weight instead (small models)\n"
            "  --lr X                peak learning rate (default 1e-4; 1e-5 with --full)\n"
            "  --schedule S          constant, linear or cosine (default constant)\n"
            "  --warmup N            linear warm-up steps (default 0)\n"
            "  --min-lr-ratio X      cosine floor as a fraction of --lr (default 0)\n"
            "  --weight-decay X      AdamW decoupled weight decay (default 0)\n"
            "  --beta1 X --beta2 X --eps X   AdamW moments (0.9, 0.999, 1e-8)\n"
            "  --clip X              clip the global gradient norm (default 1; 0 off)\n"
            "  --steps N             optimiser steps (default 100)\n"
            "  --batch B             conversations per step (default 1)\n"
            "  --accum K             gradient accumulation: K batches per step (default 1)\n"
            "  --max-seq N           cut conversations to N tokens (default 1024)\n"
            "  --loss-on WHAT        assistant (default): the replies only; all: every token,\n"
            "                        prompts included (pre-training on transcripts); text:\n"
            "                        every token but the prompts' numbers (their loss teaches\n"
            "                        a small model typical digits instead of copying them)\n"
            "  --seed S              adapter init, data order and dropout (default 0)\n"
            "  --save-every N        checkpoint every N steps (default 50, and the last)\n"
            "  --keep N              checkpoints kept (default 2)\n"
            "  --recompute           recompute activations in the backward (less memory)\n"
            "  --resume              continue the run in DIR from its newest checkpoint\n"
            "  --stop-after N        save and stop after step N (the schedule still spans\n"
            "                        --steps); continue later with --resume\n"
            "  --chat-template NAME  chatml or llama3 instead of the model's\n"
            "  -t, --threads N       threads (default: all cores)\n"
            "  --val FILE            held-out chat JSONL: validation loss (val_loss) in\n"
            "                        metrics.jsonl, the best weights so far in DIR/best/\n"
            "  --eval-every N        validate every N steps and at the last (default:\n"
            "                        --save-every)\n"
            "  --early-stop K        stop after K validations in a row without a lower\n"
            "                        val_loss (DIR/best/ keeps the best)\n"
            "  --quiet               no progress display\n"
            "\n"
            "Exit codes: 0 ok, 2 usage (a bad flag or value, an unknown --chat-template, an\n"
            "--out that holds another run, a --resume whose settings differ), 4 a file named\n"
            "on the command line (--model, --data, --val) that is missing or malformed, or an\n"
            "--out that cannot be written.\n");
}

enum {
    O_MODEL = 1000,
    O_DATA,
    O_OUT,
    O_RANK,
    O_ALPHA,
    O_DROPOUT,
    O_TARGETS,
    O_FULL,
    O_LR,
    O_SCHED,
    O_WARMUP,
    O_MINLR,
    O_WD,
    O_B1,
    O_B2,
    O_EPS,
    O_CLIP,
    O_STEPS,
    O_BATCH,
    O_ACCUM,
    O_MAXSEQ,
    O_SEED,
    O_SAVE,
    O_KEEP,
    O_RECOMP,
    O_RESUME,
    O_STOP,
    O_TEMPLATE,
    O_QUIET,
    O_VAL,
    O_EVAL_EVERY,
    O_EARLY_STOP,
    O_LOSS_ON
};

static const struct option train_opts[] = {
    {"model", required_argument, NULL, O_MODEL},
    {"data", required_argument, NULL, O_DATA},
    {"out", required_argument, NULL, O_OUT},
    {"lora-rank", required_argument, NULL, O_RANK},
    {"lora-alpha", required_argument, NULL, O_ALPHA},
    {"lora-dropout", required_argument, NULL, O_DROPOUT},
    {"lora-targets", required_argument, NULL, O_TARGETS},
    {"full", no_argument, NULL, O_FULL},
    {"lr", required_argument, NULL, O_LR},
    {"schedule", required_argument, NULL, O_SCHED},
    {"warmup", required_argument, NULL, O_WARMUP},
    {"min-lr-ratio", required_argument, NULL, O_MINLR},
    {"weight-decay", required_argument, NULL, O_WD},
    {"beta1", required_argument, NULL, O_B1},
    {"beta2", required_argument, NULL, O_B2},
    {"eps", required_argument, NULL, O_EPS},
    {"clip", required_argument, NULL, O_CLIP},
    {"steps", required_argument, NULL, O_STEPS},
    {"batch", required_argument, NULL, O_BATCH},
    {"accum", required_argument, NULL, O_ACCUM},
    {"max-seq", required_argument, NULL, O_MAXSEQ},
    {"seed", required_argument, NULL, O_SEED},
    {"save-every", required_argument, NULL, O_SAVE},
    {"keep", required_argument, NULL, O_KEEP},
    {"recompute", no_argument, NULL, O_RECOMP},
    {"resume", no_argument, NULL, O_RESUME},
    {"stop-after", required_argument, NULL, O_STOP},
    {"chat-template", required_argument, NULL, O_TEMPLATE},
    {"threads", required_argument, NULL, 't'},
    {"quiet", no_argument, NULL, O_QUIET},
    {"val", required_argument, NULL, O_VAL},
    {"eval-every", required_argument, NULL, O_EVAL_EVERY},
    {"early-stop", required_argument, NULL, O_EARLY_STOP},
    {"loss-on", required_argument, NULL, O_LOSS_ON},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static int num(const char *opt, const char *v, double lo, double hi, double *out)
{
    char *end;
    double d = strtod(v, &end);
    if (!*v || *end || !isfinite(d) || d < lo || d > hi) {
        fprintf(stderr, "agentflow train: --%s '%s' is not a number in [%g, %g]\n", opt, v, lo, hi);
        return -1;
    }
    *out = d;
    return 0;
}

struct progress {
    int quiet, tty;
    double t0;
    int64_t first; /* first step of this process (after a resume) */
};

static void on_message(void *user, const char *msg)
{
    (void)user;
    fprintf(stderr, "agentflow train: %s\n", msg);
}

static void on_step(void *user, const struct train_sft_step *s)
{
    struct progress *p = user;
    if (p->quiet)
        return;
    if (!p->first) {
        p->first = s->step;
        p->t0 = af_clock_ms();
    }
    const double el = (af_clock_ms() - p->t0) / 1000.0;
    const double per =
        (double)(s->step - p->first + 1) > 0 ? el / (double)(s->step - p->first + 1) : 0;
    const double eta = per * (double)(s->steps - s->step);
    char bar[21];
    const int fill = (int)(20 * s->step / (s->steps > 0 ? s->steps : 1));
    for (int i = 0; i < 20; i++)
        bar[i] = i < fill ? '#' : '-';
    bar[20] = 0;
    char line[256];
    snprintf(line, sizeof line,
             "[%s] step %lld/%lld loss %.4f lr %.2e |g| %.3g %.0f tok/s ETA %.0fs%s%s", bar,
             (long long)s->step, (long long)s->steps, s->loss, (double)s->lr, s->grad_norm,
             s->tokens_per_s, eta, s->saved ? " (saved)" : "", s->skipped ? " (skipped)" : "");
    const int every = s->steps >= 20 ? (int)(s->steps / 20) : 1;
    if (p->tty)
        fprintf(stderr, "\r%s\033[K%s", line, s->step == s->steps ? "\n" : "");
    else if (s->step % every == 0 || s->step == s->steps || s->saved)
        fprintf(stderr, "%s\n", line);
}

static int do_sft(int argc, char **argv)
{
    struct train_sft_opts o = train_sft_default_opts();
    struct progress prog = {0};
    int threads = 0, opt;
    double d;
    char err[2048];
    optind = 1;
    while ((opt = getopt_long(argc, argv, "ht:", train_opts, NULL)) != -1) {
        int bad = 0;
        switch (opt) {
        case 'h':
            train_usage(stdout);
            return CLI_OK;
        case O_MODEL:
            o.model_path = optarg;
            break;
        case O_DATA:
            o.data_path = optarg;
            break;
        case O_OUT:
            o.out_dir = optarg;
            break;
        case O_FULL:
            o.full = 1;
            break;
        case O_RECOMP:
            o.recompute = 1;
            break;
        case O_RESUME:
            o.resume = 1;
            break;
        case O_QUIET:
            prog.quiet = 1;
            break;
        case O_SCHED:
            o.schedule = optarg;
            break;
        case O_TEMPLATE:
            o.chat_template = optarg;
            break;
        case O_VAL:
            o.val_path = optarg;
            break;
        case O_EVAL_EVERY:
            bad = num("eval-every", optarg, 1, 1e12, &d), o.eval_every = (int64_t)d;
            break;
        case O_EARLY_STOP:
            bad = num("early-stop", optarg, 1, 1e6, &d), o.early_stop = (int)d;
            break;
        case O_LOSS_ON:
            if (!strcmp(optarg, "all") || !strcmp(optarg, "assistant") || !strcmp(optarg, "text")) {
                o.loss_on = !strcmp(optarg, "all")    ? SFT_LOSS_ALL
                            : !strcmp(optarg, "text") ? SFT_LOSS_TEXT
                                                      : SFT_LOSS_ASSISTANT;
            } else {
                fprintf(stderr, "agentflow train: --loss-on: '%s' is not assistant, all or text\n",
                        optarg);
                bad = 1;
            }
            break;
        case O_TARGETS:
            if (lora_targets_parse(optarg, &o.lora_targets, err, sizeof err)) {
                fprintf(stderr, "agentflow train: --lora-targets: %s\n", err);
                bad = 1;
            }
            break;
        case O_RANK:
            bad = num("lora-rank", optarg, 1, 4096, &d), o.lora_rank = (int)d;
            break;
        case O_ALPHA:
            bad = num("lora-alpha", optarg, 1e-6, 1e6, &d), o.lora_alpha = (float)d;
            break;
        case O_DROPOUT:
            bad = num("lora-dropout", optarg, 0, 0.99, &d), o.lora_dropout = (float)d;
            break;
        case O_LR:
            bad = num("lr", optarg, 0, 10, &d), o.lr = (float)d;
            break;
        case O_WARMUP:
            bad = num("warmup", optarg, 0, 1e12, &d), o.warmup = (int64_t)d;
            break;
        case O_MINLR:
            bad = num("min-lr-ratio", optarg, 0, 1, &d), o.min_lr_ratio = (float)d;
            break;
        case O_WD:
            bad = num("weight-decay", optarg, 0, 10, &d), o.adamw.weight_decay = (float)d;
            break;
        case O_B1:
            bad = num("beta1", optarg, 0, 0.999999, &d), o.adamw.beta1 = (float)d;
            break;
        case O_B2:
            bad = num("beta2", optarg, 0, 0.999999999, &d), o.adamw.beta2 = (float)d;
            break;
        case O_EPS:
            bad = num("eps", optarg, 0, 1, &d), o.adamw.eps = (float)d;
            break;
        case O_CLIP:
            bad = num("clip", optarg, 0, 1e9, &d), o.clip = (float)d;
            break;
        case O_STEPS:
            bad = num("steps", optarg, 1, 1e12, &d), o.steps = (int64_t)d;
            break;
        case O_BATCH:
            bad = num("batch", optarg, 1, 1e6, &d), o.batch = (int64_t)d;
            break;
        case O_ACCUM:
            bad = num("accum", optarg, 1, 1e6, &d), o.accum = (int64_t)d;
            break;
        case O_MAXSEQ:
            bad = num("max-seq", optarg, 2, 1e7, &d), o.max_seq = (int64_t)d;
            break;
        case O_SEED:
            bad = num("seed", optarg, 0, 9e15, &d), o.seed = (uint64_t)d;
            break;
        case O_SAVE:
            bad = num("save-every", optarg, 1, 1e12, &d), o.save_every = (int64_t)d;
            break;
        case O_KEEP:
            bad = num("keep", optarg, 1, 1e6, &d), o.keep = (int)d;
            break;
        case O_STOP:
            bad = num("stop-after", optarg, 1, 1e12, &d), o.stop_after = (int64_t)d;
            break;
        case 't':
            bad = num("threads", optarg, 1, 4096, &d), threads = (int)d;
            break;
        default:
            bad = 1;
            break;
        }
        if (bad) {
            train_usage(stderr);
            return CLI_EUSAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "agentflow train sft: unexpected argument '%s'\n", argv[optind]);
        return CLI_EUSAGE;
    }
    if (!o.model_path || !o.data_path || !o.out_dir) {
        fprintf(stderr, "agentflow train sft: --model, --data and --out are required\n");
        train_usage(stderr);
        return CLI_EUSAGE;
    }
    train_gemm_set_threads(threads);
    prog.tty = isatty(2);
    o.on_step = on_step;
    o.on_message = on_message;
    o.user = &prog;
    int rc = train_sft_run(&o, err, sizeof err);
    if (rc) {
        fprintf(stderr, "agentflow train sft: %s\n", err);
        return rc == AF_EINVAL ? CLI_EUSAGE : CLI_EINPUT;
    }
    if (o.full)
        printf("wrote %s/model.gguf (every weight trained; --url gguf:%s/model.gguf), "
               "metrics in %s/metrics.jsonl, checkpoints in %s/checkpoint-*/\n",
               o.out_dir, o.out_dir, o.out_dir, o.out_dir);
    else
        printf("wrote the LoRA adapter to %s/ (adapter_model.safetensors, adapter_config.json; "
               "--url gguf:%s+lora:%s), metrics in %s/metrics.jsonl, checkpoints in "
               "%s/checkpoint-*/\n",
               o.out_dir, o.model_path, o.out_dir, o.out_dir, o.out_dir);
    return CLI_OK;
}

int cmd_train(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "sft"))
        return do_sft(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "grpo"))
        return cmd_train_grpo(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "plot"))
        return cmd_train_plot(argc - 1, argv + 1);
    const int help = argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"));
    if (!help && argc >= 2)
        fprintf(stderr, "agentflow train: unknown subcommand '%s'\n", argv[1]);
    train_usage(help ? stdout : stderr);
    return help ? CLI_OK : CLI_EUSAGE;
}
