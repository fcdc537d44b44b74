/*
 * test_grpo_flow.c - `agentflow train grpo` end to end, through the real flow and the CLI:
 *  - learning: a tiny model is first SFT'd (full) so that its planner picks the Python tool or
 *    the Generalist tool about evenly for a family of questions; a scripted generator answers
 *    "yes" (the gold answer) only when the memory shows the Python tool. After GRPO steps the
 *    sampled P(Python) is above 0.8 and the mean reward has risen;
 *  - lr 0 with a large KL coefficient leaves the adapter as it started;
 *  - resume: N steps straight equal N/2, a stop, --resume and N/2 more, bit for bit;
 *  - bad input: a missing scorer, empty data, G < 2, a planner that is not in-process, files that
 *    are missing or malformed; each named, with exit 2 or 4.
 * Short prompt templates (--prompts) keep each sequence a few hundred byte tokens.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agentflow/err.h"
#include "engine/lora.h"
#include "engine/model.h"
#include "support/proc.h"

#define TOOL_A "Python_Code_Generator_Tool"
#define TOOL_B "Generalist_Solution_Generator_Tool"
#define N_Q 16

static char dir[256];

static void put(const char *name, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void path(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", dir, name);
}

/* Runs the CLI with argv[1..] (NULL-terminated); returns the result (caller deinits). */
static void cli(struct proc_result *r, const char *const *args)
{
    const char *argv[64];
    size_t n = 0;
    argv[n++] = proc_agentflow_bin();
    for (; *args && n < 63; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    assert_int_equal(proc_run(argv, NULL, 600, r), 0);
}

static void cli_ok(const char *const *args)
{
    struct proc_result r;
    cli(&r, args);
    if (r.exit_code != 0)
        fail_msg("exit %d: %s", r.exit_code, r.err);
    proc_result_deinit(&r);
}

/* The planner's exact messages for each question, read from a trace of a scripted run. */
static json_t *planner_messages(void)
{
    char batch[512], out[512], trace[512];
    path(batch, sizeof batch, "queries.jsonl");
    path(out, sizeof out, "batch_out.jsonl");
    path(trace, sizeof trace, "trace.jsonl");
    FILE *f = fopen(batch, "w");
    assert_non_null(f);
    for (int i = 0; i < N_Q; i++)
        fprintf(f, "{\"id\":\"%d\",\"query\":\"Question %d: is it so?\"}\n", i, i);
    fclose(f);
    char plan[512], fixed[512], exec[512], prompts[512];
    snprintf(plan, sizeof plan, "scripted:%s/planA.json", dir);
    snprintf(fixed, sizeof fixed, "scripted:%s/fixed.json", dir);
    snprintf(exec, sizeof exec, "scripted:%s/exec.json", dir);
    path(prompts, sizeof prompts, "prompts");
    const char *args[] = {"run",
                          "--batch",
                          batch,
                          "--out",
                          out,
                          "--trace",
                          trace,
                          "--planner-url",
                          plan,
                          "--fixed-url",
                          fixed,
                          "--executor-url",
                          exec,
                          "--tool-url",
                          exec,
                          "--prompts",
                          prompts,
                          "--tools",
                          TOOL_A "," TOOL_B,
                          "--max-steps",
                          "1",
                          "--quiet",
                          NULL};
    cli_ok(args);
    json_t *by_id = json_object();
    FILE *t = fopen(trace, "r");
    assert_non_null(t);
    char line[65536];
    while (fgets(line, sizeof line, t)) {
        json_t *j = json_loads(line, 0, NULL);
        const char *mod = json_string_value(json_object_get(j, "module"));
        if (mod && !strcmp(mod, "planner"))
            json_object_set(by_id, json_string_value(json_object_get(j, "query_id")),
                            json_object_get(j, "messages"));
        json_decref(j);
    }
    fclose(t);
    assert_int_equal(json_object_size(by_id), N_Q);
    return by_id;
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/af_test_grpo_flow_%d", (int)getpid());
    char p[512];
    mkdir(dir, 0755);
    path(p, sizeof p, "prompts");
    mkdir(p, 0755);
    put("prompts/system.txt", "Be brief.\n");
    put("prompts/query_analysis.txt", "Q: {{query}}\n");
    put("prompts/next_step.txt", "Q: {{query}}\nTools: {{available_tools}}\nPick one.\n");
    put("prompts/tool_command.txt", "Run {{tool_name}} for {{sub_goal}}\n");
    put("prompts/verifier.txt", "Check: {{memory}}\n");
    put("prompts/direct_output.txt", "Answer from: {{memory}}\n");
    put("prompts/retry_planner.txt", "Bad: {{error}}\nTools: {{available_tools}}\n");
    put("prompts/retry_executor.txt", "Bad: {{error}}\n");
    /* only the Python tool's step leads to the gold answer */
    put("fixed.json", "{\"rules\":[{\"match\":\"\\\"tool_name\\\": \\\"" TOOL_A "\\\"\","
                      "\"reply\":\"<answer>yes</answer>\"}],\"default\":\"<answer>no</answer>\"}");
    put("exec.json", "{\"rules\":[],\"default\":\"Generated Command:\\n```python\\nexecution = "
                     "tool.execute(query=\\\"x\\\")\\n```\"}");
    put("planA.json", "{\"rules\":[],\"default\":\"Justification: j\\nContext: c\\nSub-Goal: "
                      "s\\nTool Name: " TOOL_A "\"}");
    json_t *msgs = planner_messages();
    char sft[512], data[512];
    path(sft, sizeof sft, "sft.jsonl");
    path(data, sizeof data, "data.jsonl");
    FILE *fs = fopen(sft, "w"), *fd = fopen(data, "w");
    assert_true(fs && fd);
    for (int i = 0; i < N_Q; i++) {
        char id[16];
        snprintf(id, sizeof id, "%d", i);
        for (int k = 0; k < 2; k++) {
            json_t *m = json_deep_copy(json_object_get(msgs, id));
            char reply[256];
            snprintf(reply, sizeof reply,
                     "Justification: j\nContext: c\nSub-Goal: s\nTool Name: %s",
                     k ? TOOL_B : TOOL_A);
            json_array_append_new(m, json_pack("{s:s,s:s}", "role", "assistant", "content", reply));
            json_t *rec = json_pack("{s:o}", "messages", m);
            char *s = json_dumps(rec, JSON_COMPACT);
            fprintf(fs, "%s\n", s);
            free(s);
            json_decref(rec);
        }
        fprintf(fd,
                "{\"question\":\"Question %d: is it "
                "so?\",\"answer\":\"yes\",\"bench\":\"bamboogle\"}\n",
                i);
    }
    fclose(fs);
    fclose(fd);
    json_decref(msgs);
    char base[512], sftdir[512];
    path(base, sizeof base, "base.gguf");
    path(sftdir, sizeof sftdir, "sft");
    const char *mk[] = {"model",  "make-random", "--arch", "qwen2", "--shape", "tiny",
                        "--type", "F32",         "--seed", "3",     base,      NULL};
    cli_ok(mk);
    const char *tr[] = {"train", "sft",     "--model",      base,   "--data",    sft,   "--out",
                        sftdir,  "--full",  "--lr",         "3e-3", "--steps",   "150", "--batch",
                        "4",     "--quiet", "--save-every", "150",  "--threads", "2",   NULL};
    cli_ok(tr);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* `train grpo` on the SFT'd model, the world above and extra options; returns the exit code
 * and keeps stderr in errbuf. */
/* Appends `train grpo` on the world (the SFT'd model, its data, prompts and scripted slots)
 * writing to `out`, then `extra`, to argv[*n..] and NULL-terminates it (at most cap entries).
 * The strings live until the next call. */
static void world_argv(const char **argv, size_t *n, size_t cap, const char *out,
                       const char *const *extra)
{
    static char model[512], data[512], outp[512], fixed[512], exec[512], prompts[512];
    path(model, sizeof model, "sft/model.gguf");
    path(data, sizeof data, "data.jsonl");
    path(outp, sizeof outp, out);
    snprintf(fixed, sizeof fixed, "scripted:%s/fixed.json", dir);
    snprintf(exec, sizeof exec, "scripted:%s/exec.json", dir);
    path(prompts, sizeof prompts, "prompts");
    const char *base[] = {"train",          "grpo",
                          "--model",        model,
                          "--data",         data,
                          "--out",          outp,
                          "--group",        "8",
                          "--batch",        "2",
                          "--lora-rank",    "4",
                          "--max-tokens",   "100",
                          "--prompts",      prompts,
                          "--fixed-url",    fixed,
                          "--executor-url", exec,
                          "--tool-url",     exec,
                          "--tools",        TOOL_A "," TOOL_B,
                          "--max-steps",    "1",
                          "--quiet",        NULL};
    for (const char *const *a = base; *a && *n + 1 < cap; a++)
        argv[(*n)++] = *a;
    for (; extra && *extra && *n + 1 < cap; extra++)
        argv[(*n)++] = *extra;
    argv[*n] = NULL;
}

static int grpo(const char *out, const char *const *extra, char *errbuf, size_t errlen)
{
    const char *args[80];
    size_t n = 0;
    const char *const common[] = {"--concurrency", "4", "--threads", "2", NULL};
    world_argv(args, &n, 80, out, common);
    for (; extra && *extra && n < 78; extra++)
        args[n++] = *extra;
    args[n] = NULL;
    struct proc_result r;
    cli(&r, args);
    snprintf(errbuf, errlen, "%s", r.err ? r.err : "");
    const int code = r.exit_code;
    proc_result_deinit(&r);
    return code;
}

/* P(tool A) over the rollouts of steps [from, to]. */
static double p_tool_a(const char *run, int from, int to, double *reward)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s/rollouts.jsonl", dir, run);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    char line[8192];
    int n = 0, a = 0;
    double rw = 0;
    while (fgets(line, sizeof line, f)) {
        json_t *j = json_loads(line, 0, NULL);
        const int step = (int)json_integer_value(json_object_get(j, "step"));
        if (step >= from && step <= to) {
            n++;
            a += json_object_get(json_object_get(j, "tools"), TOOL_A) != NULL;
            rw += json_number_value(json_object_get(j, "reward"));
        }
        json_decref(j);
    }
    fclose(f);
    assert_true(n > 0);
    *reward = rw / n;
    return (double)a / n;
}

static void test_learning(void **state)
{
    (void)state;
    char err[4096];
    /* without the flow's frequency penalty: this byte-vocabulary planner spells a tool name
     * with repeated letters, and 1.2 per repeat turns most names into ones no tool has */
    const char *extra[] = {
        "--steps", "16", "--lr", "3e-3", "--save-every", "16", "--frequency-penalty", "0", NULL};
    if (grpo("learn", extra, err, sizeof err) != 0)
        fail_msg("train grpo: %s", err);
    double r0, r1;
    const double p0 = p_tool_a("learn", 1, 1, &r0), p1 = p_tool_a("learn", 13, 16, &r1);
    fprintf(stderr, "P(tool A): step 1 %.3f, steps 13-16 %.3f; reward %.3f -> %.3f\n", p0, p1, r0,
            r1);
    assert_true(p0 > 0.25 && p0 < 0.8); /* the SFT'd planner hesitates between the two */
    assert_true(p1 > 0.8);
    assert_true(r1 > r0);
}

/* The nonzero entries of the LoRA B matrices saved in run folder `run` (a fresh adapter's B is
 * 0, so 0 means no update reached it). */
static int adapter_b_nonzero(const char *run)
{
    char mp[512], ad[512], e2[512];
    path(mp, sizeof mp, "sft/model.gguf");
    path(ad, sizeof ad, run);
    struct model *m = NULL;
    struct lora_adapter *l = NULL;
    assert_int_equal(model_load(mp, &m, e2, sizeof e2), 0);
    assert_int_equal(lora_load_peft(ad, m, &l, e2, sizeof e2), 0);
    int nonzero = 0;
    for (int64_t i = 0; i < l->n_layer * LORA_N_TARGETS; i++) {
        const struct lora_pair *pr = &l->pairs[i];
        for (int64_t k = 0; pr->b && k < pr->n_out * l->rank; k++)
            nonzero += pr->b[k] != 0.0f;
    }
    lora_free(l);
    model_free(m);
    return nonzero;
}

static void test_lr_zero(void **state)
{
    (void)state;
    char err[4096];
    const char *extra[] = {"--steps", "3", "--lr", "0", "--kl", "10", NULL};
    char mp[512];
    path(mp, sizeof mp, "sft/model.gguf");
    /* With an embedded model about, the slots no flag names (the planner's here) still run
     * the base model: `run`'s fallback must not replace it. */
    setenv("AGENTFLOW_EMBEDDED_MODEL", mp, 1);
    const int code = grpo("frozen", extra, err, sizeof err);
    unsetenv("AGENTFLOW_EMBEDDED_MODEL");
    if (code != 0)
        fail_msg("train grpo: %s", err);
    assert_null(strstr(err, "embedded model"));
    /* a fresh adapter has B = 0; with no step size it must still be exactly 0 */
    assert_int_equal(adapter_b_nonzero("frozen"), 0);
}

static char *slurp(const char *run, const char *file, size_t *len)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s/%s", dir, run, file);
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* The file `file` of runs a and b holds the same bytes. */
static void assert_same_file(const char *a_run, const char *b_run, const char *file)
{
    size_t la, lb;
    char *a = slurp(a_run, file, &la), *b = slurp(b_run, file, &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    free(a);
    free(b);
}

/* The metrics that do not depend on timing, line by line. */
static json_t *metrics_core(const char *run)
{
    size_t len;
    char *text = slurp(run, "metrics.jsonl", &len);
    json_t *all = json_array();
    for (char *s = strtok(text, "\n"); s; s = strtok(NULL, "\n")) {
        json_t *j = json_loads(s, 0, NULL);
        assert_non_null(j);
        json_array_append_new(
            all,
            json_pack("{s:O,s:O,s:O,s:O,s:O,s:O,s:O}", "step", json_object_get(j, "step"),
                      "reward_mean", json_object_get(j, "reward_mean"), "loss",
                      json_object_get(j, "loss"), "kl", json_object_get(j, "kl"), "grad_norm",
                      json_object_get(j, "grad_norm"), "entropy", json_object_get(j, "entropy"),
                      "tool_use", json_object_get(j, "tool_use")));
        json_decref(j);
    }
    free(text);
    return all;
}

/* Dynamic sampling: each step rolls out rounds of `batch` questions until `batch` groups have
 * differing rewards (at most 1 + R rounds), logs every rollout, and updates on the differing
 * groups only; when none differs (a gold answer no reply gives) the step updates nothing. */
static int check_dynamic_metrics(const char *run, int steps, int max_rounds, int want_used)
{
    int more = 0;
    size_t len;
    char *text = slurp(run, "metrics.jsonl", &len), *save = NULL;
    int n = 0;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        json_t *j = json_loads(line, 0, NULL);
        assert_non_null(j);
        const int64_t rounds = json_integer_value(json_object_get(j, "rollout_rounds"));
        const int64_t used = json_integer_value(json_object_get(j, "groups_used"));
        const int64_t traj = json_integer_value(json_object_get(j, "trajectories"));
        const double deg = json_number_value(json_object_get(j, "degenerate_frac"));
        const int64_t groups = traj / 8;
        fprintf(stderr, "%s step %d: %lld rounds, %lld of %lld groups used (degenerate %.2f)\n",
                run, n + 1, (long long)rounds, (long long)used, (long long)groups, deg);
        assert_true(rounds >= 1 && rounds <= max_rounds);
        assert_int_equal(traj, rounds * 2 * 8); /* every round's rollouts counted */
        assert_int_equal(used, groups - (int64_t)(deg * (double)groups + 0.5));
        assert_true(used >= 2 || rounds == max_rounds); /* stops once `batch` groups differ */
        if (want_used >= 0)
            assert_int_equal(used, want_used);
        more += rounds > 1;
        json_decref(j);
        n++;
    }
    free(text);
    assert_int_equal(n, steps);
    return more;
}

/* Writes the questions to `name` (its path into p), every `every`-th (from 0) with a gold
 * answer the SFT'd flow gives ("yes"), the others with one no reply gives ("maybe"); every 1
 * makes all of them unanswerable. */
static void write_data(char *p, size_t plen, const char *name, int every)
{
    path(p, plen, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    for (int i = 0; i < N_Q; i++)
        fprintf(f,
                "{\"question\":\"Question %d: is it so?\",\"answer\":\"%s\",\"bench\":"
                "\"bamboogle\"}\n",
                i, every > 1 && i % every == 0 ? "yes" : "maybe");
    fclose(f);
}

static void test_dynamic_sampling(void **state)
{
    (void)state;
    char err[4096], mixed[512];
    /* half the questions have a gold answer no reply gives: their groups are all zeros */
    write_data(mixed, sizeof mixed, "mixed.jsonl", 2);
    const char *extra[] = {"--steps", "3",   "--lr",         "3e-3", "--dynamic-sampling",  "2",
                           "--data",  mixed, "--save-every", "3",    "--frequency-penalty", "0",
                           NULL};
    if (grpo("dyn", extra, err, sizeof err) != 0)
        fail_msg("train grpo: %s", err);
    const int more = check_dynamic_metrics("dyn", 3, 3, -1);
    assert_true(more > 0); /* some step needed more than one round */
    /* every rollout is logged, kept or not */
    size_t len;
    char *roll = slurp("dyn", "rollouts.jsonl", &len),
         *metrics = slurp("dyn", "metrics.jsonl", &len);
    int lines = 0, traj = 0;
    for (const char *c = roll; *c; c++)
        lines += *c == '\n';
    for (const char *c = strstr(metrics, "\"trajectories\":"); c;
         c = strstr(c + 1, "\"trajectories\":"))
        traj += atoi(c + strlen("\"trajectories\":"));
    assert_int_equal(lines, traj);
    free(roll);
    free(metrics);

    /* a gold answer no reply gives: every group is all zeros, three rounds, no update */
    char bad[512];
    write_data(bad, sizeof bad, "never.jsonl", 1);
    const char *extra2[] = {"--steps", "1", "--lr",         "3e-3", "--dynamic-sampling",  "2",
                            "--data",  bad, "--save-every", "1",    "--frequency-penalty", "0",
                            NULL};
    if (grpo("dyn0", extra2, err, sizeof err) != 0)
        fail_msg("train grpo: %s", err);
    (void)check_dynamic_metrics("dyn0", 1, 3, 0);
    assert_int_equal(adapter_b_nonzero("dyn0"), 0); /* no update ran */
}

static void test_resume(void **state)
{
    (void)state;
    char err[4096];
    const char *straight[] = {"--steps", "4", "--lr", "3e-3", "--save-every", "1", NULL};
    if (grpo("straight", straight, err, sizeof err) != 0)
        fail_msg("train grpo: %s", err);
    const char *first[] = {"--steps",      "4", "--lr", "3e-3", "--save-every", "1",
                           "--stop-after", "2", NULL};
    if (grpo("halves", first, err, sizeof err) != 0)
        fail_msg("train grpo (first half): %s", err);
    /* without --resume the folder is refused */
    assert_int_equal(grpo("halves", straight, err, sizeof err), 2);
    assert_non_null(strstr(err, "--resume"));
    /* a resume with other settings is refused by name */
    const char *other[] = {"--steps", "4", "--lr", "1e-3", "--save-every", "1", "--resume", NULL};
    assert_int_equal(grpo("halves", other, err, sizeof err), 2);
    assert_non_null(strstr(err, "'lr'"));
    const char *second[] = {"--steps", "4", "--lr", "3e-3", "--save-every", "1", "--resume", NULL};
    if (grpo("halves", second, err, sizeof err) != 0)
        fail_msg("train grpo --resume: %s", err);
    assert_same_file("straight", "halves", "adapter_model.safetensors");
    json_t *ma = metrics_core("straight"), *mb = metrics_core("halves");
    assert_int_equal(json_array_size(ma), 4);
    assert_true(json_equal(ma, mb));
    json_decref(ma);
    json_decref(mb);
    assert_same_file("straight", "halves", "rollouts.jsonl");
}

static void expect(const char *out, const char *const *extra, int code, const char *needle)
{
    char err[4096];
    const int got = grpo(out, extra, err, sizeof err);
    if (got != code || !strstr(err, needle))
        fail_msg("expected exit %d and '%s', got exit %d: %s", code, needle, got, err);
}

static void test_bad_input(void **state)
{
    (void)state;
    put("nosuch.jsonl", "{\"question\":\"q\",\"answer\":\"a\",\"bench\":\"nosuchbench\"}\n");
    put("empty.jsonl", "\n");
    put("broken.jsonl", "{\"question\":\"q\",\"answer\":\"a\",\"bench\":\"bamboogle\"}\n{oops\n");
    char nosuch[512], empty[512], broken[512], missing[512];
    path(nosuch, sizeof nosuch, "nosuch.jsonl");
    path(empty, sizeof empty, "empty.jsonl");
    path(broken, sizeof broken, "broken.jsonl");
    path(missing, sizeof missing, "missing.jsonl");
    const char *a1[] = {"--data", nosuch, "--steps", "1", NULL};
    expect("bad1", a1, 2, "nosuchbench");
    const char *a2[] = {"--data", empty, "--steps", "1", NULL};
    expect("bad2", a2, 2, "empty");
    const char *a3[] = {"--group", "1", "--steps", "1", NULL};
    expect("bad3", a3, 2, "--group");
    const char *a4[] = {"--model", "http://127.0.0.1:9/v1", "--steps", "1", NULL};
    expect("bad4", a4, 2, "in-process");
    const char *a5[] = {"--data", missing, "--steps", "1", NULL};
    expect("bad5", a5, 4, "missing.jsonl");
    const char *a6[] = {"--data", broken, "--steps", "1", NULL};
    expect("bad6", a6, 4, "line 2");
    const char *a7[] = {"--model", "/nonexistent/model.gguf", "--steps", "1", NULL};
    expect("bad7", a7, 4, "/nonexistent/model.gguf");
    const char *a8[] = {"--planner-url", "http://127.0.0.1:9/v1", "--steps", "1", NULL};
    expect("bad8", a8, 2, "--planner-url");
    const char *a9[] = {"--loss-agg", "median", NULL};
    expect("bad9", a9, 2, "--loss-agg");
}

/* --eval-every runs the planner on --val and logs val_accuracy on those steps only. */
static void test_validation(void **state)
{
    (void)state;
    char err[4096], data[512];
    path(data, sizeof data, "data.jsonl");
    const char *extra[] = {"--steps",      "2", "--lr", "3e-3", "--val", data,
                           "--eval-every", "2", NULL};
    if (grpo("val", extra, err, sizeof err) != 0)
        fail_msg("train grpo --val: %s", err);
    size_t len;
    char *text = slurp("val", "metrics.jsonl", &len);
    char *nl = strchr(text, '\n');
    assert_non_null(nl);
    *nl = 0;
    json_t *a = json_loads(text, 0, NULL), *b = json_loads(nl + 1, 0, NULL);
    assert_true(a && b);
    assert_null(json_object_get(a, "val_accuracy"));
    const json_t *v = json_object_get(b, "val_accuracy");
    assert_true(json_is_number(v));
    const double acc = json_number_value(v) * N_Q; /* one solve per validation question */
    assert_true(acc >= 0 && acc <= N_Q && fabs(acc - floor(acc + 0.5)) < 1e-9);
    json_decref(a);
    json_decref(b);
    free(text);
}

/* kill -9 at a random moment of a run that saves every step, then --resume: the same result
 * as the run that was never stopped. */
static void test_kill_resume(void **state)
{
    (void)state;
    char err[4096];
    const char *straight[] = {"--steps", "4", "--lr", "3e-3", "--save-every", "1", NULL};
    char p[512];
    snprintf(p, sizeof p, "%s/straight/adapter_model.safetensors", dir);
    if (access(p, R_OK) != 0 && grpo("straight", straight, err, sizeof err) != 0)
        fail_msg("train grpo: %s", err);
    const char *argv[80] = {proc_agentflow_bin()};
    size_t na = 1;
    const char *const opts[] = {"--concurrency", "4",    "--threads",    "2", "--steps", "4",
                                "--lr",          "3e-3", "--save-every", "1", NULL};
    world_argv(argv, &na, 80, "killed", opts);
    char outp[512];
    path(outp, sizeof outp, "killed");
    char ck[600];
    snprintf(ck, sizeof ck, "%s/checkpoint-1", outp);
    const pid_t pid = proc_spawn(argv);
    assert_true(pid > 0);
    int status = 0, exited = 0;
    for (int i = 0; i < 1200 && access(ck, F_OK) != 0; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid) {
            exited = 1;
            break;
        }
        usleep(50000);
    }
    if (!exited) {
        usleep((useconds_t)(getpid() % 7) * 100000); /* somewhere in step 2 or 3 */
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    const char *resume[] = {"--steps", "4", "--lr", "3e-3", "--save-every", "1", "--resume", NULL};
    if (grpo("killed", resume, err, sizeof err) != 0)
        fail_msg("train grpo --resume after kill -9: %s", err);
    assert_same_file("straight", "killed", "adapter_model.safetensors");
    json_t *ma = metrics_core("straight"), *mb = metrics_core("killed");
    assert_true(json_equal(ma, mb));
    json_decref(ma);
    json_decref(mb);
}

/* --judge-url: an LLM judge gives the reward (here a scripted one that accepts "no"); --data
 * also takes benchmark names read from --data-dir. */
static void test_judge_and_bench_data(void **state)
{
    (void)state;
    char err[4096], ddir[512], judge[600];
    path(ddir, sizeof ddir, "benchdata");
    mkdir(ddir, 0755);
    char bdir[600];
    snprintf(bdir, sizeof bdir, "%s/bamboogle", ddir);
    mkdir(bdir, 0755);
    put("benchdata/bamboogle/data.json",
        "[{\"question\":\"Question 1: is it so?\",\"answer\":\"yes\"},"
        "{\"question\":\"Question 2: is it so?\",\"answer\":\"yes\"}]");
    put("judge.json", "{\"rules\":[{\"match\":\"Response:\\nno\",\"reply\":\"Fine. Verdict: "
                      "true\"}],\"default\":\"No. Verdict: false\"}");
    snprintf(judge, sizeof judge, "scripted:%s/judge.json", dir);
    const char *extra[] = {"--data",      "bamboogle", "--data-dir", ddir,   "--steps",
                           "1",           "--batch",   "2",          "--lr", "0",
                           "--judge-url", judge,       NULL};
    if (grpo("judged", extra, err, sizeof err) != 0)
        fail_msg("train grpo --judge-url: %s", err);
    /* the judge inverts the scorer: a reward exactly where the answer is "no" */
    char p[600];
    snprintf(p, sizeof p, "%s/judged/rollouts.jsonl", dir);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    char line[8192];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        json_t *j = json_loads(line, 0, NULL);
        const char *ans = json_string_value(json_object_get(j, "answer"));
        const double rw = json_number_value(json_object_get(j, "reward"));
        assert_non_null(ans);
        assert_true(rw == (strcmp(ans, "no") == 0 ? 1.0 : 0.0));
        json_decref(j);
        n++;
    }
    fclose(f);
    assert_int_equal(n, 16); /* both questions of the set, 8 samples each */
}

/* --full: every weight trained; the engine samples with the new weights (the trainer and the
 * engine agree on the sampled tokens' log-probs after updates), the reference stays the
 * file's (KL grows), RUN/model.gguf loads, and a resumed run writes the same file (also when
 * the run had finished and its model file is gone). */
static void test_full_mode(void **state)
{
    (void)state;
    char err[4096];
    const char *full[] = {"--full", "--steps", "3", "--lr", "1e-3", "--save-every", "1", NULL};
    if (grpo("full", full, err, sizeof err) != 0)
        fail_msg("train grpo --full: %s", err);
    json_t *m = metrics_core("full");
    assert_int_equal(json_array_size(m), 3);
    json_decref(m);
    size_t len;
    char *text = slurp("full", "metrics.jsonl", &len);
    char *last = text;
    for (char *p = strchr(text, '\n'); p && p[1]; p = strchr(p + 1, '\n'))
        last = p + 1;
    json_t *j = json_loads(last, 0, NULL);
    assert_non_null(j);
    const double mism = json_number_value(json_object_get(j, "logp_mismatch"));
    const double kl = json_number_value(json_object_get(j, "kl"));
    fprintf(stderr, "full mode, step 3: logp_mismatch %.3g, kl %.3g\n", mism, kl);
    assert_true(mism < 1e-4); /* F32 engine: the same weights as the trainer's */
    assert_true(kl > 1e-6);   /* the weights moved away from the file's */
    json_decref(j);
    free(text);
    char mp[512], e2[512];
    snprintf(mp, sizeof mp, "%s/full/model.gguf", dir);
    struct model *mm = NULL;
    assert_int_equal(model_load(mp, &mm, e2, sizeof e2), 0);
    model_free(mm);
    const char *first[] = {"--full", "--steps",      "3", "--lr", "1e-3", "--save-every",
                           "1",      "--stop-after", "1", NULL};
    if (grpo("full2", first, err, sizeof err) != 0)
        fail_msg("train grpo --full (first part): %s", err);
    const char *rest[] = {"--full",       "--steps", "3",        "--lr", "1e-3",
                          "--save-every", "1",       "--resume", NULL};
    if (grpo("full2", rest, err, sizeof err) != 0)
        fail_msg("train grpo --full --resume: %s", err);
    assert_same_file("full", "full2", "model.gguf");
    /* A finished run whose model file is gone (a kill between the checkpoint and the model)
     * gets it back from --resume. */
    snprintf(mp, sizeof mp, "%s/full2/model.gguf", dir);
    assert_int_equal(unlink(mp), 0);
    if (grpo("full2", rest, err, sizeof err) != 0)
        fail_msg("train grpo --full --resume of a finished run: %s", err);
    assert_same_file("full", "full2", "model.gguf");
}

/* ---- OpenMPI ---------------------------------------------------------------------------- */

static int have_mpirun(void)
{
    return system("command -v mpirun >/dev/null 2>&1") == 0;
}

/* mpirun's full path (proc_run and proc_spawn exec without a PATH search). */
static const char *mpirun_path(void)
{
    static char p[512];
    if (!p[0]) {
        FILE *w = popen("command -v mpirun", "r");
        assert_non_null(w);
        assert_non_null(fgets(p, sizeof p, w));
        pclose(w);
        p[strcspn(p, "\n")] = 0;
    }
    return p;
}

/* `mpirun -np 2 agentflow train grpo ...` on the world; returns the exit code, stderr in errbuf. */
static int grpo_mpi(const char *out, const char *const *extra, char *errbuf, size_t errlen)
{
    const char *argv[80] = {mpirun_path(), "--allow-run-as-root", "--oversubscribe", "-np",
                            "2",           proc_agentflow_bin()};
    size_t n = 6;
    const char *const opts[] = {"--concurrency", "4", "--threads", "1", NULL};
    world_argv(argv, &n, 80, out, opts);
    for (; extra && *extra && n < 78; extra++)
        argv[n++] = *extra;
    argv[n] = NULL;
    /* Under AddressSanitizer the ranks' leak check would report OpenMPI's own allocations
     * (its op and component tables, never freed by MPI_Finalize); the trainer's code is
     * leak-checked by the one-rank tests above. */
    static char asan[600];
    const char *prev = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof asan, "ASAN_OPTIONS=%s%sdetect_leaks=0", prev ? prev : "",
             prev && *prev ? ":" : "");
    const char *const env[] = {asan, NULL};
    struct proc_result r;
    assert_int_equal(proc_run(argv, env, 600, &r), 0);
    snprintf(errbuf, errlen, "%s", r.err ? r.err : "");
    const int code = r.exit_code;
    proc_result_deinit(&r);
    return code;
}

static struct lora_adapter *load_adapter(const char *run, struct model **m)
{
    char mp[512], ad[512], e[512];
    path(mp, sizeof mp, "sft/model.gguf");
    path(ad, sizeof ad, run);
    struct lora_adapter *l = NULL;
    if (!*m)
        assert_int_equal(model_load(mp, m, e, sizeof e), 0);
    if (lora_load_peft(ad, *m, &l, e, sizeof e))
        fail_msg("%s", e);
    return l;
}

/* Two ranks agree every step (a checksum mismatch would stop them) and give the one-rank run's
 * result within float tolerance: the same rollouts, the same rewards, nearly the same
 * weights. */
static void test_mpi_two_ranks(void **state)
{
    (void)state;
    if (!have_mpirun())
        skip();
    char err[8192];
    const char *extra[] = {"--steps", "2", "--lr", "3e-3", "--seed", "5", NULL};
    const int code = grpo_mpi("mpi2", extra, err, sizeof err);
    if (code != 0 && strstr(err, "no OpenMPI")) {
        fprintf(stderr, "skipping: this build has no OpenMPI\n");
        skip();
    }
    if (code != 0)
        fail_msg("mpirun -np 2: exit %d: %s", code, err);
    const char *one[] = {"--steps", "2", "--lr", "3e-3", "--seed", "5", "--threads", "1", NULL};
    if (grpo("mpi1", one, err, sizeof err) != 0)
        fail_msg("one rank: %s", err);
    json_t *a = metrics_core("mpi1"), *b = metrics_core("mpi2");
    assert_int_equal(json_array_size(a), 2);
    assert_int_equal(json_array_size(b), 2);
    for (size_t i = 0; i < 2; i++) {
        const json_t *x = json_array_get(a, i), *y = json_array_get(b, i);
        assert_true(
            json_equal(json_object_get(x, "reward_mean"), json_object_get(y, "reward_mean")));
        assert_true(json_equal(json_object_get(x, "tool_use"), json_object_get(y, "tool_use")));
        const double lx = json_number_value(json_object_get(x, "loss")),
                     ly = json_number_value(json_object_get(y, "loss"));
        assert_true(fabs(lx - ly) <= 1e-6 * fmax(1e-3, fabs(lx)));
    }
    json_decref(a);
    json_decref(b);
    char ra[512], rb[512];
    snprintf(ra, sizeof ra, "%s/mpi1/rollouts.jsonl", dir);
    snprintf(rb, sizeof rb, "%s/mpi2/rollouts.jsonl", dir);
    assert_int_equal(proc_count_lines(ra), proc_count_lines(rb));
    struct model *m = NULL;
    struct lora_adapter *x = load_adapter("mpi1", &m), *y = load_adapter("mpi2", &m);
    assert_int_equal(x->n_floats, y->n_floats);
    double maxd = 0, maxv = 0;
    for (size_t i = 0; i < x->n_floats; i++) {
        maxd = fmax(maxd, fabs((double)x->data[i] - (double)y->data[i]));
        maxv = fmax(maxv, fabs((double)x->data[i]));
    }
    fprintf(stderr, "2 ranks vs 1: max |delta| %.3g of max |w| %.3g\n", maxd, maxv);
    assert_true(maxd <= 1e-4 * maxv);
    lora_free(x);
    lora_free(y);
    model_free(m);
}

/* Finds the process of rank `rank` whose command line names `needle`; 0 when none. */
static pid_t find_rank(int rank, const char *needle)
{
    char want[64];
    snprintf(want, sizeof want, "OMPI_COMM_WORLD_RANK=%d", rank);
    FILE *ls = popen("ls /proc", "r");
    char name[64];
    pid_t found = 0;
    while (ls && !found && fgets(name, sizeof name, ls)) {
        const int pid = atoi(name);
        if (pid <= 0)
            continue;
        char p[128], buf[16384];
        snprintf(p, sizeof p, "/proc/%d/cmdline", pid);
        FILE *f = fopen(p, "rb");
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        for (size_t i = 0; i < n; i++)
            buf[i] = buf[i] ? buf[i] : ' ';
        buf[n] = 0;
        if (!strstr(buf, needle) || strstr(buf, "mpirun"))
            continue;
        snprintf(p, sizeof p, "/proc/%d/environ", pid);
        f = fopen(p, "rb");
        if (!f)
            continue;
        n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        for (size_t i = 0; i < n; i++)
            if (!strcmp(buf + i, want)) {
                found = pid;
                break;
            } else {
                i += strlen(buf + i);
            }
    }
    if (ls)
        pclose(ls);
    return found;
}

/* Killing one rank stops the other with an error, not a hang. */
static void test_mpi_kill_rank(void **state)
{
    (void)state;
    if (!have_mpirun())
        skip();
    static char outp[512];
    path(outp, sizeof outp, "mpikill");
    const char *argv[80] = {mpirun_path(), "--allow-run-as-root", "--oversubscribe", "-np",
                            "2",           proc_agentflow_bin()};
    size_t na = 6;
    const char *const opts[] = {"--steps", "500", "--threads", "1", NULL};
    world_argv(argv, &na, 80, "mpikill", opts);
    const pid_t mp = proc_spawn(argv);
    assert_true(mp > 0);
    pid_t victim = 0;
    for (int i = 0; i < 600 && !victim; i++) { /* up to 60 s for the ranks to start */
        usleep(100000);
        victim = find_rank(1, outp);
    }
    if (!victim) {
        kill(mp, SIGKILL);
        waitpid(mp, NULL, 0);
        fail_msg("rank 1 of the mpirun job never appeared");
    }
    sleep(2); /* into the training loop */
    assert_int_equal(kill(victim, SIGKILL), 0);
    int status = 0, done = 0;
    for (int i = 0; i < 1200 && !done; i++) { /* 120 s: a hang fails the test */
        if (waitpid(mp, &status, WNOHANG) == mp)
            done = 1;
        else
            usleep(100000);
    }
    if (!done) {
        kill(mp, SIGKILL);
        waitpid(mp, NULL, 0);
        fail_msg("mpirun still runs 120 s after rank 1 was killed: a hang");
    }
    assert_false(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(find_rank(0, outp), 0); /* rank 0 is gone too */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_input),        cmocka_unit_test(test_lr_zero),
        cmocka_unit_test(test_resume),           cmocka_unit_test(test_learning),
        cmocka_unit_test(test_dynamic_sampling), cmocka_unit_test(test_validation),
        cmocka_unit_test(test_kill_resume),      cmocka_unit_test(test_judge_and_bench_data),
        cmocka_unit_test(test_full_mode),        cmocka_unit_test(test_mpi_two_ranks),
        cmocka_unit_test(test_mpi_kill_rank),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
