/*
 * bench/grpo.c - Flow-GRPO speed (src/train/grpo_int.h): rollouts and the update, on a tiny model
 * and on the random Qwen2.5-0.5B shape.
 *
 *  1. rollouts: whole solves through the flow (short prompt templates, the planner in-process,
 *     the fixed / executor / tool slots scripted so that the planner's engine is what is
 *     measured), one at a time and --conc at a time: trajectories/s, planner tokens/s, and the
 *     speed-up of the concurrent run;
 *  2. the update: turns of --prompt + --resp tokens; the time of each phase (logp_old, logp_ref,
 *     backward, optimiser) and the update's tokens/s, against `train sft`'s forward + backward
 *     (train_net_loss) on the same sequences.
 *
 *   build/release/bench/grpo [-t 2] [--conc 64] [--prompt 512] [--resp 128] [--turns 8]
 *                            [--dir /tmp/agentflow-bench] [--skip-05b]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agentflow/engine.h"
#include "agentflow/flow.h"
#include "agentflow/llm.h"
#include "agentflow/tools.h"
#include "core/clock.h"
#include "engine/lora.h"
#include "engine/model.h"
#include "train/gemm.h"
#include "train/grpo_int.h"
#include "train/net.h"

struct opts {
    int threads, conc, prompt, resp, turns, skip_05b;
    const char *dir;
};

static void put(const char *dir, const char *name, const char *text)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static const char *model_file(const struct opts *o, const char *shape, const char *type, char *path,
                              size_t n)
{
    char err[1024];
    snprintf(path, n, "%s/grpo-%s-%s.gguf", o->dir, shape, type);
    if (access(path, R_OK) == 0)
        return path;
    fprintf(stderr, "making %s ...\n", path);
    struct af_engine_random_params rp = {"qwen2", shape, type, 1, NULL};
    if (af_engine_make_random(&rp, path, err, sizeof err)) {
        fprintf(stderr, "bench/grpo: %s\n", err);
        return NULL;
    }
    return path;
}

/* trajectories of n questions x 1 sample, `conc` at once; prints the rate. */
static double rollouts(const struct opts *o, const char *label, struct af_flow_params *fp,
                       const json_t *data, int n, int conc, int max_tokens)
{
    int64_t *items = malloc((size_t)n * sizeof *items);
    for (int i = 0; i < n; i++)
        items[i] = i % (int64_t)json_array_size(data);
    fp->slots[AF_SLOT_PLANNER].sampling.max_tokens = max_tokens;
    struct grpo_rollout_req q = {fp, data, items, n, 1, 7, 0, conc, 0, NULL, NULL, NULL, NULL};
    struct grpo_traj *t = NULL;
    char err[1024];
    const double t0 = af_clock_ms();
    int rc = grpo_rollouts(&q, &t, err, sizeof err);
    const double s = (af_clock_ms() - t0) / 1000.0;
    int64_t tok = 0, gen = 0;
    for (int i = 0; i < n && t; i++) {
        for (size_t k = 0; k < t[i].n_turns; k++)
            tok += t[i].turns[k].n_resp;
        gen += t[i].gen_tokens;
        grpo_traj_deinit(&t[i]);
    }
    free(t);
    free(items);
    if (rc)
        fprintf(stderr, "bench/grpo: %s\n", err);
    printf("  %-28s %3d trajectories, %2d at once: %6.2f s, %7.2f traj/s, %8.1f planner tok/s\n",
           label, n, conc, s, n / s, (double)tok / s);
    (void)o;
    (void)gen;
    return (double)tok / s;
}

static int bench_rollouts(const struct opts *o, const char *gguf, const char *name, int max_tok,
                          int n1, int nc)
{
    char err[1024], pdir[1024];
    snprintf(pdir, sizeof pdir, "%s/grpo-prompts", o->dir);
    mkdir(pdir, 0755);
    put(pdir, "system.txt", "Be brief.\n");
    put(pdir, "query_analysis.txt", "Q: {{query}}\n");
    put(pdir, "next_step.txt", "Q: {{query}}\nTools: {{available_tools}}\nPick one.\n");
    put(pdir, "tool_command.txt", "Run {{tool_name}} for {{sub_goal}}\n");
    put(pdir, "verifier.txt", "Check: {{memory}}\n");
    put(pdir, "direct_output.txt", "Answer from: {{memory}}\n");
    struct af_engine_params ep = af_engine_default_params();
    ep.n_threads = o->threads;
    struct af_engine *e = NULL;
    if (af_engine_load(gguf, &ep, &e, err, sizeof err)) {
        fprintf(stderr, "bench/grpo: %s\n", err);
        return -1;
    }
    struct af_llm *planner = af_llm_engine_new(e, name);
    struct af_llm *fixed =
        af_llm_scripted_new("{\"rules\":[{\"match\":\"Check:\",\"reply\":\"Conclusion: STOP\"}],"
                            "\"default\":\"<answer>x</answer>\"}",
                            err, sizeof err);
    struct af_tool_registry *reg = af_tool_registry_new();
    struct af_prompts *pr = NULL;
    if (!fixed ||
        af_tool_registry_add_builtins(reg, "Generalist_Solution_Generator_Tool", NULL, err,
                                      sizeof err) ||
        af_prompts_load(pdir, &pr, err, sizeof err)) {
        fprintf(stderr, "bench/grpo: %s\n", err);
        return -1;
    }
    struct af_flow_params fp = af_flow_default_params();
    fp.max_steps = 1;
    fp.max_parse_retries = 0;
    fp.tools = reg;
    fp.prompts = pr;
    for (int s = 0; s < AF_N_SLOTS; s++)
        fp.slots[s].llm = fixed;
    fp.slots[AF_SLOT_PLANNER].llm = planner;
    fp.slots[AF_SLOT_PLANNER].sampling.temperature = 0.7;
    fp.slots[AF_SLOT_PLANNER].sampling.top_p = 1.0;
    fp.slots[AF_SLOT_PLANNER].sampling.frequency_penalty = 0;
    json_t *data = json_array();
    for (int i = 0; i < 64; i++) {
        char q[96];
        snprintf(q, sizeof q, "Question %d: what is %d plus %d?", i, i, 2 * i);
        json_array_append_new(
            data, json_pack("{s:s,s:s,s:s}", "question", q, "answer", "0", "bench", "bamboogle"));
    }
    printf("rollouts on %s (planner reply cap %d tokens, 1 planner call per trajectory):\n", name,
           max_tok);
    const double one = rollouts(o, "one at a time", &fp, data, n1, 1, max_tok);
    const double many = rollouts(o, "concurrent", &fp, data, nc, o->conc, max_tok);
    printf("  concurrent / one at a time: %.2fx planner tok/s\n", many / one);
    json_decref(data);
    af_prompts_free(pr);
    af_tool_registry_free(reg);
    af_llm_free(fixed);
    af_llm_free(planner);
    af_engine_free(e);
    return 0;
}

static int bench_update(const struct opts *o, const char *gguf, const char *name)
{
    char err[1024];
    struct model *m = NULL;
    if (model_load(gguf, &m, err, sizeof err)) {
        fprintf(stderr, "bench/grpo: %s\n", err);
        return -1;
    }
    struct lora_adapter *l = NULL;
    if (lora_new(&m->hp, 16, 32, 0, LORA_ALL_TARGETS, &l, err, sizeof err))
        return -1;
    lora_init(l, 1);
    struct train_net_params p = train_net_default_params();
    p.lora = l;
    struct train_net *net = NULL;
    if (train_net_new(m, &p, &net, err, sizeof err)) {
        fprintf(stderr, "bench/grpo: %s\n", err);
        return -1;
    }
    size_t np = 0;
    const struct train_param *par = train_net_params_list(net, &np);
    struct train_adamw_state opt;
    if (train_adamw_init(&opt, par, np, err, sizeof err))
        return -1;
    const struct train_adamw aw = train_adamw_defaults();
    const int nt = o->turns;
    struct grpo_turn *t = calloc((size_t)nt, sizeof *t);
    uint64_t st = 99;
    for (int k = 0; k < nt; k++) {
        t[k].n_prompt = o->prompt;
        t[k].n_resp = o->resp;
        const int64_t T = t[k].n_prompt + t[k].n_resp;
        t[k].ids = malloc((size_t)T * sizeof *t[k].ids);
        for (int64_t i = 0; i < T; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            t[k].ids[i] = (int32_t)((st >> 33) % (uint64_t)m->hp.n_vocab);
        }
        t[k].logp_engine = calloc((size_t)t[k].n_resp, sizeof(float));
        t[k].adv = k % 2 ? 1.0f : -1.0f;
        t[k].traj = k / 2;
    }
    struct grpo_update_req q = {
        net, par, np, &opt, &aw,  1e-5f, 1.0f, 0.7f, grpo_default_hp(), GRPO_AGG_TOKEN_MEAN,
        1,   0,   1,  NULL, NULL, 0,     NULL, 0.0f};
    struct grpo_update_stats us = {0};
    const double tokens = (double)nt * (double)(o->prompt + o->resp);
    /* small models run both twice and keep the second (warm caches and scratch buffers);
     * the 0.5B shape once, its runs are long enough */
    const int reps = m->hp.n_embd < 512 ? 2 : 1;
    double upd = 0, sft = 0;
    for (int rep = 0; rep < reps; rep++) {
        for (int k = 0; k < nt; k++) {
            free(t[k].logp_old);
            free(t[k].logp_ref);
            t[k].logp_old = t[k].logp_ref = NULL;
            t[k].scored = 0;
        }
        const double t0 = af_clock_ms();
        if (grpo_update(&q, t, (size_t)nt, &us, err, sizeof err)) {
            fprintf(stderr, "bench/grpo: %s\n", err);
            return -1;
        }
        upd = (af_clock_ms() - t0) / 1000.0;
        /* train sft's work on the same sequences: a forward + backward each, then one step */
        const double t1 = af_clock_ms();
        train_grads_zero(par, np);
        for (int k = 0; k < nt; k++) {
            double loss;
            if (train_net_loss(net, t[k].ids, t[k].n_prompt + t[k].n_resp, NULL, 1, &loss, NULL,
                               err, sizeof err))
                return -1;
        }
        train_adamw_step(&opt, par, np, &aw, 1e-5f);
        sft = (af_clock_ms() - t1) / 1000.0;
    }
    printf("update on %s: %d turns of %d + %d tokens (LoRA rank 16)\n", name, nt, o->prompt,
           o->resp);
    printf("  phases: logp_old %.2f s (0 on-policy: the backward's forward gives it), logp_ref "
           "%.2f s, backward %.2f s, optimiser %.3f s\n",
           us.old_s, us.ref_s, us.bwd_s, us.opt_s);
    printf("  whole update: %.2f s, %.0f tok/s (reference forward + forward/backward)\n", upd,
           tokens / upd);
    printf("  backward pass alone: %.0f tok/s; train sft's forward+backward: %.0f tok/s "
           "(%.2fx)\n",
           tokens / us.bwd_s, tokens / sft, sft / us.bwd_s);
    for (int k = 0; k < nt; k++) {
        free(t[k].ids);
        free(t[k].logp_engine);
        free(t[k].logp_old);
        free(t[k].logp_ref);
    }
    free(t);
    train_adamw_deinit(&opt);
    train_net_free(net);
    lora_free(l);
    model_free(m);
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = {2, 64, 512, 128, 8, 0, "/tmp/agentflow-bench"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--skip-05b"))
            o.skip_05b = 1;
        else if (v && !strcmp(a, "-t"))
            o.threads = atoi(v), i++;
        else if (v && !strcmp(a, "--conc"))
            o.conc = atoi(v), i++;
        else if (v && !strcmp(a, "--prompt"))
            o.prompt = atoi(v), i++;
        else if (v && !strcmp(a, "--resp"))
            o.resp = atoi(v), i++;
        else if (v && !strcmp(a, "--turns"))
            o.turns = atoi(v), i++;
        else if (v && !strcmp(a, "--dir"))
            o.dir = v, i++;
        else {
            fprintf(stderr, "usage: bench/grpo [-t 2] [--conc 64] [--prompt 512] [--resp 128] "
                            "[--turns 8] [--dir DIR] [--skip-05b]\n");
            return 2;
        }
    }
    if (o.threads < 1 || o.conc < 1 || o.prompt < 1 || o.resp < 1 || o.turns < 1) {
        fprintf(stderr, "bench/grpo: every count must be >= 1\n");
        return 2;
    }
    mkdir(o.dir, 0755);
    train_gemm_set_threads(o.threads);
    char tiny[1024], big[1024];
    if (!model_file(&o, "tiny", "F32", tiny, sizeof tiny) ||
        bench_rollouts(&o, tiny, "tiny (F32)", 64, 16, o.conc) ||
        bench_update(&o, tiny, "tiny (F32)"))
        return 1;
    if (o.skip_05b)
        return 0;
    if (!model_file(&o, "qwen2.5-0.5b", "Q8_0", big, sizeof big) ||
        bench_rollouts(&o, big, "Qwen2.5-0.5B shape (Q8_0)", 32, 2, 8) ||
        bench_update(&o, big, "Qwen2.5-0.5B shape (Q8_0)"))
        return 1;
    return 0;
}
