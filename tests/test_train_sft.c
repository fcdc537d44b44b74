/*
 * test_train_sft.c - `agentflow train sft` end to end on a random tiny model with the Qwen2.5
 * vocabulary: metrics, a falling loss, the PEFT adapter, --resume reproducing an uninterrupted
 * run bit for bit (constant and cosine schedules, LoRA with dropout and full training), kill -9
 * at random moments (mid-save included) never spoiling the last checkpoint, and the errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agentflow/engine.h"
#include "engine/gguf.h"
#include "engine/lora.h"
#include "engine/model.h"
#include "support/proc.h"
#include "support/shared.h"
#include "train/sft.h"

static char dir[256], model[300], data[300];
static int have_model;

static void sh(const char *fmt, ...) AF_PRINTF(1, 2);
static void sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    assert_int_equal(system(cmd), 0);
}

static int setup(void **state)
{
    (void)state;
    char vocab[1024], err[1024];
    snprintf(dir, sizeof dir, "/tmp/af_test_train_sft_%d", (int)getpid());
    mkdir(dir, 0755);
    snprintf(model, sizeof model, "%s/tiny.gguf", dir);
    snprintf(data, sizeof data, "%s/data.jsonl", dir);
    if (!test_shared_path("data/reference/tokenizer/ggml-vocab-qwen2.gguf", vocab, sizeof vocab)) {
        fprintf(stderr, "skipping: ../shared (the Qwen2 vocabulary) is absent\n");
        return 0;
    }
    struct af_engine_random_params rp = {"qwen2", "tiny", "F32", 3, vocab};
    if (af_engine_make_random(&rp, model, err, sizeof err)) {
        fprintf(stderr, "make-random: %s\n", err);
        return -1;
    }
    FILE *f = fopen(data, "w");
    if (!f)
        return -1;
    for (int i = 0; i < 12; i++)
        fprintf(f,
                "{\"messages\":[{\"role\":\"user\",\"content\":\"What is %d plus %d?\"},"
                "{\"role\":\"assistant\",\"content\":\"%d\"}]}\n",
                i, 2 * i, 3 * i);
    fclose(f);
    have_model = 1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Runs `agentflow train sft` with the shared model and data plus the given options. */
static int sft(const char *out, const char *const *extra, struct proc_result *r)
{
    const char *argv[48] = {
        proc_agentflow_bin(), "train",  "sft",    "--model", model, "--data", data, "--out", out,
        "--chat-template",    "chatml", "--quiet"};
    size_t n = 12;
    for (size_t i = 0; extra && extra[i]; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    return proc_run(argv, NULL, 300, r);
}

static void sft_ok(const char *out, const char *const *extra)
{
    struct proc_result r;
    assert_int_equal(sft(out, extra, &r), 0);
    if (r.exit_code != 0)
        fail_msg("train sft exited %d: %s", r.exit_code, r.err);
    proc_result_deinit(&r);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
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

static void same_file(const char *a, const char *b)
{
    size_t la, lb;
    char *x = slurp(a, &la), *y = slurp(b, &lb);
    if (la != lb || memcmp(x, y, la) != 0)
        fail_msg("%s and %s differ", a, b);
    free(x);
    free(y);
}

#define SKIP_WITHOUT_MODEL()                                                                       \
    do {                                                                                           \
        if (!have_model) {                                                                         \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

static void test_metrics_and_adapter(void **state)
{
    (void)state;
    SKIP_WITHOUT_MODEL();
    char out[400], path[500];
    snprintf(out, sizeof out, "%s/basic", dir);
    const char *opts[] = {"--steps", "24",      "--lr", "1e-2", "--save-every", "8", "--lora-rank",
                          "4",       "--batch", "2",    NULL};
    sft_ok(out, opts);
    snprintf(path, sizeof path, "%s/metrics.jsonl", out);
    assert_int_equal(proc_count_lines(path), 24);
    size_t len;
    char *m = slurp(path, &len);
    const char *keys[] = {
        "\"step\":", "\"loss\":", "\"lr\":", "\"grad_norm\":", "\"tokens_per_s\":"};
    for (size_t i = 0; i < 5; i++)
        assert_non_null(strstr(m, keys[i]));
    /* the loss falls on data it sees again and again */
    double first = 0, last = 0;
    int line = 0;
    for (char *p = m; p && *p; line++) {
        double l = strtod(strstr(p, "\"loss\":") + 7, NULL);
        if (line < 4)
            first += l / 4;
        if (line >= 20)
            last += l / 4;
        p = strchr(p, '\n');
        p = p ? p + 1 : NULL;
    }
    free(m);
    if (!(last < first - 0.2))
        fail_msg("loss went from %.3f to %.3f", first, last);
    /* two checkpoints kept, the adapter loads for the model */
    snprintf(path, sizeof path, "%s/checkpoint-8", out);
    struct stat sb;
    assert_int_not_equal(stat(path, &sb), 0);
    snprintf(path, sizeof path, "%s/checkpoint-24/optimizer.safetensors", out);
    assert_int_equal(stat(path, &sb), 0);
    char err[1024];
    struct model *mdl = NULL;
    struct lora_adapter *l = NULL;
    assert_int_equal(model_load(model, &mdl, err, sizeof err), 0);
    assert_int_equal(lora_load_peft(out, mdl, &l, err, sizeof err), 0);
    assert_int_equal(l->rank, 4);
    assert_true(l->scale == 2.0f);
    double bsum = 0;
    for (size_t i = 0; i < l->n_floats; i++)
        bsum += (double)(l->data[i] * l->data[i]);
    assert_true(bsum > 0);
    lora_free(l);
    model_free(mdl);
}

/* Run A straight through; run B to `stop` steps (or killed), then resumed: same bits. */
static void resume_case(const char *name, const char *const *common, int kill_it)
{
    char a[400], b[400], pa[500], pb[500];
    snprintf(a, sizeof a, "%s/%s_a", dir, name);
    snprintf(b, sizeof b, "%s/%s_b", dir, name);
    const char *opts[40];
    size_t n = 0;
    for (size_t i = 0; common[i]; i++)
        opts[n++] = common[i];
    opts[n++] = "--steps";
    opts[n++] = "20";
    opts[n] = NULL;
    sft_ok(a, opts);
    if (kill_it) {
        /* kill -9 at a random moment after the first checkpoint appears; saves are frequent */
        const char *argv[48] = {
            proc_agentflow_bin(), "train",  "sft",    "--model", model, "--data", data, "--out", b,
            "--chat-template",    "chatml", "--quiet"};
        size_t k = 12;
        for (size_t i = 0; opts[i]; i++)
            argv[k++] = opts[i];
        argv[k] = NULL;
        pid_t pid = proc_spawn(argv);
        snprintf(pb, sizeof pb, "%s/checkpoint-2", b);
        struct stat sb;
        for (int i = 0; i < 3000 && stat(pb, &sb) != 0; i++)
            usleep(10000);
        srand((unsigned)time(NULL));
        usleep((useconds_t)(rand() % 400000));
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        const char *again[42];
        size_t j = 0;
        for (size_t i = 0; opts[i]; i++)
            again[j++] = opts[i];
        again[j++] = "--resume";
        again[j] = NULL;
        sft_ok(b, again);
    } else {
        const char *first[42], *second[42];
        size_t j = 0;
        for (size_t i = 0; common[i]; i++)
            first[j] = second[j] = common[i], j++;
        /* constant: literally 10 steps, then 20; other schedules span --steps 20 both times */
        const int literal = !!strstr(name, "const");
        first[j] = second[j] = "--steps";
        j++;
        first[j] = literal ? "10" : "20";
        second[j] = "20";
        j++;
        if (!literal) {
            first[j] = "--stop-after";
            first[j + 1] = "10";
            first[j + 2] = NULL;
            second[j] = "--resume";
            second[j + 1] = NULL;
            sft_ok(b, first);
            sft_ok(b, second);
            goto compare;
        }
        first[j] = NULL;
        second[j++] = "--resume";
        second[j] = NULL;
        sft_ok(b, first);
        sft_ok(b, second);
    }
compare:;
    const char *files[] = {"checkpoint-20/optimizer.safetensors",
                           "checkpoint-20/trainer_state.json", NULL, NULL};
    int full = 0;
    for (size_t i = 0; common[i]; i++)
        full |= strcmp(common[i], "--full") == 0;
    files[2] = full ? "checkpoint-20/model.safetensors" : "adapter_model.safetensors";
    for (size_t i = 0; files[i]; i++) {
        snprintf(pa, sizeof pa, "%s/%s", a, files[i]);
        snprintf(pb, sizeof pb, "%s/%s", b, files[i]);
        same_file(pa, pb);
    }
    snprintf(pb, sizeof pb, "%s/metrics.jsonl", b);
    assert_int_equal(proc_count_lines(pb), 20);
}

static void test_resume_bit_exact(void **state)
{
    (void)state;
    SKIP_WITHOUT_MODEL();
    const char *constant[] = {"--lr", "5e-3", "--save-every", "10", "--lora-rank", "4", "--seed",
                              "7",    NULL};
    resume_case("const", constant, 0);
    const char *cosine[] = {"--lr",           "5e-3",   "--save-every", "10",
                            "--schedule",     "cosine", "--warmup",     "3",
                            "--lora-dropout", "0.1",    "--accum",      "2",
                            "--weight-decay", "0.01",   "--recompute",  NULL};
    resume_case("cosine", cosine, 0);
    const char *full[] = {"--full", "--lr", "1e-3", "--save-every", "10", NULL};
    resume_case("full", full, 0);
}

static void test_kill_and_resume(void **state)
{
    (void)state;
    SKIP_WITHOUT_MODEL();
    const char *opts[] = {"--lr", "5e-3",       "--save-every", "1", "--lora-rank",
                          "2",    "--schedule", "linear",       NULL};
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "kill%d", i);
        resume_case(name, opts, 1);
    }
}

static void test_full_model_loads(void **state)
{
    (void)state;
    SKIP_WITHOUT_MODEL();
    char path[500], err[1024];
    snprintf(path, sizeof path, "%s/full_a/model.gguf", dir);
    struct model *m = NULL;
    assert_int_equal(model_load(path, &m, err, sizeof err), 0);
    model_free(m);
    /* The base came from make-random; the trained file must not carry its marker. */
    assert_int_equal(af_engine_random_weights(model), 1);
    assert_int_equal(af_engine_random_weights(path), 0);
    /* Nor its name: "random-..." loses the prefix. */
    struct gguf_file *g = NULL;
    assert_int_equal(gguf_open(path, &g, err, sizeof err), AF_OK);
    char *name = gguf_get_strdup(g, "general.name");
    assert_non_null(name);
    assert_null(strstr(name, "random"));
    free(name);
    gguf_close(g);
    /* A finished run whose model file is gone (a kill between the checkpoint and the model)
     * gets it back from --resume, the same bytes as the uninterrupted run's. */
    char pb[500];
    snprintf(pb, sizeof pb, "%s/full_b/model.gguf", dir);
    assert_int_equal(unlink(pb), 0);
    char b[400];
    snprintf(b, sizeof b, "%s/full_b", dir);
    const char *again[] = {"--full", "--lr",     "1e-3", "--save-every", "10", "--steps",
                           "20",     "--resume", NULL};
    sft_ok(b, again);
    same_file(path, pb);
}

static void expect_fail(const char *out, const char *const *extra, int code, const char *needle)
{
    struct proc_result r;
    assert_int_equal(sft(out, extra, &r), 0);
    if (r.exit_code != code || !strstr(r.err, needle))
        fail_msg("exit %d (want %d), stderr: %s (want '%s')", r.exit_code, code, r.err, needle);
    proc_result_deinit(&r);
}

static void test_errors(void **state)
{
    (void)state;
    SKIP_WITHOUT_MODEL();
    char out[400];
    snprintf(out, sizeof out, "%s/const_a", dir);
    const char *again[] = {"--steps", "5", NULL};
    expect_fail(out, again, 2, "already holds a run");
    const char *other[] = {"--steps", "30",   "--resume", "--lora-rank", "8",
                           "--lr",    "5e-3", "--seed",   "7",           NULL};
    expect_fail(out, other, 2, "lora_rank");
    snprintf(out, sizeof out, "%s/none", dir);
    const char *res[] = {"--resume", NULL};
    expect_fail(out, res, 2, "no checkpoint");
    const char *bad[] = {"--lora-targets", "q,nope", NULL};
    expect_fail(out, bad, 2, "nope");
    const char *badlr[] = {"--lr", "abc", NULL};
    expect_fail(out, badlr, 2, "--lr");
    /* a broken line names the file and line */
    char broken[400];
    snprintf(broken, sizeof broken, "%s/broken.jsonl", dir);
    sh("printf '%%s\\n' '{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
       "{\"role\":\"assistant\",\"content\":\"y\"}]}' '{\"messages\": [' > %s",
       broken);
    const char *argv[] = {
        proc_agentflow_bin(), "train",  "sft", "--model", model, "--data", broken, "--out", out,
        "--chat-template",    "chatml", NULL};
    struct proc_result r;
    assert_int_equal(proc_run(argv, NULL, 60, &r), 0);
    assert_int_not_equal(r.exit_code, 0);
    assert_non_null(strstr(r.err, "line 2"));
    proc_result_deinit(&r);
    const char *argv2[] = {proc_agentflow_bin(),
                           "train",
                           "sft",
                           "--model",
                           "/nonexistent.gguf",
                           "--data",
                           data,
                           "--out",
                           out,
                           NULL};
    assert_int_equal(proc_run(argv2, NULL, 60, &r), 0);
    assert_int_not_equal(r.exit_code, 0);
    assert_non_null(strstr(r.err, "/nonexistent.gguf"));
    proc_result_deinit(&r);
    const char *argv3[] = {proc_agentflow_bin(), "train", "sft", "--data", data, NULL};
    assert_int_equal(proc_run(argv3, NULL, 60, &r), 0);
    assert_int_equal(r.exit_code, 2);
    proc_result_deinit(&r);
}

/* The early-stopping rule: a new best is strictly lower and finite; K evaluations in a row
 * without one stop the run. */
static void test_early_stop_rule(void **state)
{
    (void)state;
    struct train_early_stop e = {(double)INFINITY, 0, 0};
    int stop = 0;
    assert_int_equal(train_early_stop_update(&e, 2, 3.0, 2, &stop), 1);
    assert_int_equal(train_early_stop_update(&e, 4, 2.5, 2, &stop), 1);
    assert_false(stop);
    assert_int_equal(train_early_stop_update(&e, 6, 2.5, 2, &stop), 0); /* equal is no gain */
    assert_false(stop);
    assert_int_equal(train_early_stop_update(&e, 8, (double)NAN, 2, &stop), 0);
    assert_true(stop);
    assert_true(e.best == 2.5 && e.best_step == 4);
    e = (struct train_early_stop){(double)INFINITY, 0, 0};
    for (int i = 0; i < 5; i++) /* patience 0: never stops */
        (void)train_early_stop_update(&e, i, 1.0, 0, &stop);
    assert_false(stop);
}

/* --val: val_loss lines in metrics.jsonl at every --eval-every step and the last, the best
 * weights in best/, and what was written said on stdout. */
static void test_validation(void **state)
{
    (void)state;
    SKIP_WITHOUT_MODEL();
    char out[400], val[400], path[500];
    snprintf(out, sizeof out, "%s/val", dir);
    snprintf(val, sizeof val, "%s/val.jsonl", dir);
    sh("printf '%%s\\n' '{\"messages\":[{\"role\":\"user\",\"content\":\"What is 20 plus 40?\"},"
       "{\"role\":\"assistant\",\"content\":\"60\"}]}' > %s",
       val);
    const char *opts[] = {
        "--steps",      "5", "--lr",         "1e-2", "--lora-rank",  "4", "--val", val,
        "--eval-every", "2", "--save-every", "5",    "--early-stop", "3", NULL};
    struct proc_result r;
    assert_int_equal(sft(out, opts, &r), 0);
    if (r.exit_code != 0)
        fail_msg("train sft exited %d: %s", r.exit_code, r.err);
    assert_non_null(strstr(r.out, "wrote the LoRA adapter"));
    proc_result_deinit(&r);
    snprintf(path, sizeof path, "%s/metrics.jsonl", out);
    assert_int_equal(proc_count_lines(path), 5 + 3); /* validated after steps 2, 4 and 5 */
    size_t len;
    char *m = slurp(path, &len);
    assert_non_null(strstr(m, "{\"step\":2,\"val_loss\":"));
    assert_non_null(strstr(m, "{\"step\":5,\"val_loss\":"));
    free(m);
    struct stat sb;
    snprintf(path, sizeof path, "%s/best/adapter_model.safetensors", out);
    assert_int_equal(stat(path, &sb), 0);
    snprintf(path, sizeof path, "%s/best/best.json", out);
    m = slurp(path, &len);
    assert_non_null(strstr(m, "\"val_loss\""));
    free(m);
    /* --early-stop without --val is a usage error */
    snprintf(out, sizeof out, "%s/val_bad", dir);
    const char *bad[] = {"--early-stop", "2", NULL};
    expect_fail(out, bad, 2, "--val");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_and_adapter),
        cmocka_unit_test(test_resume_bit_exact),
        cmocka_unit_test(test_kill_and_resume),
        cmocka_unit_test(test_full_model_loads),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_early_stop_rule),
        cmocka_unit_test(test_validation),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
