/*
 * runner.c - the parallel, resumable benchmark runner behind `agentflow eval run`.
 *
 * A job is one (bench, index, trial). A job is done when RUNDIR/results.jsonl holds a
 * complete line for it; a rerun skips those (a torn last line is cut off first) and runs the
 * rest, `concurrency` at a time. Each finished job appends one line (one write, fsync'd);
 * a solve that fails on a back-end error writes nothing, so a rerun retries it.
 */
#include "eval/runner.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agentflow/score.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/errf.h"
#include "core/fileio.h"
#include "core/jsonx.h"
#include "core/xalloc.h"
#include "eval/resume.h"

struct job {
    size_t set, index;
    int trial;
};

struct runner {
    const struct af_flow_params *base;
    const struct eval_dataset *sets;
    const struct eval_run_opts *o;
    struct eval_summary *sum;
    struct job *jobs; /* the jobs still to run */
    size_t n_jobs;
    struct af_linelog *out;
    struct eval_progress progress;
    pthread_mutex_t mu;
    json_t *done; /* "bench/index/trial" -> {correct, steps, latency_ms} of lines already there */
};

static void job_key(const char *bench, size_t index, int trial, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/%zu/%d", bench, index, trial);
}

void eval_summary_deinit(struct eval_summary *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_benches; i++)
        free(s->benches[i].bench);
    free(s->benches);
    memset(s, 0, sizeof *s);
}

static double pct(size_t a, size_t b)
{
    return b ? 100.0 * (double)a / (double)b : 0.0;
}

json_t *eval_summary_json(const struct eval_summary *s)
{
    json_t *arr = json_array();
    size_t n = 0, correct = 0, failed = 0, resumed = 0, judged = 0, judge_correct = 0;
    for (size_t i = 0; i < s->n_benches; i++) {
        const struct eval_bench_summary *b = &s->benches[i];
        double dn = b->n ? (double)b->n : 1.0;
        json_t *bj =
            json_pack("{s:s,s:I,s:I,s:f,s:I,s:I,s:f,s:f}", "bench", b->bench, "n", (json_int_t)b->n,
                      "correct", (json_int_t)b->correct, "accuracy", pct(b->correct, b->n),
                      "failed", (json_int_t)b->failed, "resumed", (json_int_t)b->resumed,
                      "avg_steps", b->steps / dn, "avg_latency_ms", b->latency_ms / dn);
        if (b->judged)
            json_object_update_new(bj,
                                   json_pack("{s:I,s:I,s:f}", "judged", (json_int_t)b->judged,
                                             "judge_correct", (json_int_t)b->judge_correct,
                                             "judge_accuracy", pct(b->judge_correct, b->judged)));
        json_array_append_new(arr, bj);
        n += b->n;
        correct += b->correct;
        failed += b->failed;
        resumed += b->resumed;
        judged += b->judged;
        judge_correct += b->judge_correct;
    }
    json_t *total = json_pack("{s:I,s:I,s:f,s:I,s:I}", "n", (json_int_t)n, "correct",
                              (json_int_t)correct, "accuracy", pct(correct, n), "failed",
                              (json_int_t)failed, "resumed", (json_int_t)resumed);
    if (judged)
        json_object_update_new(total, json_pack("{s:I,s:I,s:f}", "judged", (json_int_t)judged,
                                                "judge_correct", (json_int_t)judge_correct,
                                                "judge_accuracy", pct(judge_correct, judged)));
    return json_pack("{s:o,s:o}", "benches", arr, "total", total);
}

/* Records a line already in results.jsonl under its key. */
static void on_done_line(void *user, json_t *obj, size_t lineno)
{
    (void)lineno;
    json_t *done = user;
    const char *bench = af_json_get_str(obj, "bench");
    json_t *ix = json_object_get(obj, "index"), *tr = json_object_get(obj, "trial");
    if (!bench || !json_is_integer(ix) || !json_is_integer(tr) || json_integer_value(ix) < 0)
        return;
    char key[128];
    job_key(bench, (size_t)json_integer_value(ix), (int)json_integer_value(tr), key, sizeof key);
    json_t *correct = json_object_get(json_object_get(obj, "correct"), "rule");
    json_t *judge = json_object_get(json_object_get(obj, "correct"), "judge");
    json_t *d = json_pack("{s:b,s:f,s:f}", "correct", json_is_true(correct), "steps",
                          json_number_value(json_object_get(obj, "steps")), "latency_ms",
                          json_number_value(json_object_get(obj, "latency_ms")));
    if (json_is_boolean(judge))
        json_object_set(d, "judge", judge);
    json_object_set_new(done, key, d);
}

static int make_dir(const char *path, char *err, size_t errlen)
{
    if (mkdir(path, 0777) == 0 || errno == EEXIST)
        return AF_OK;
    af_errf(err, errlen, "cannot create the folder '%s': %s", path, strerror(errno));
    return AF_EIO;
}

static int write_run_json(const struct runner *r, char *err, size_t errlen)
{
    json_t *j = r->o->run_info ? json_deep_copy(r->o->run_info) : json_object();
    json_t *benches = json_array();
    for (size_t i = 0; i < r->sum->n_benches; i++) {
        size_t n = eval_dataset_size(&r->sets[i]);
        size_t sel = r->o->limit && r->o->limit < n ? r->o->limit : n;
        json_array_append_new(benches, json_pack("{s:s,s:s,s:I,s:I}", "bench", r->sets[i].bench,
                                                 "data", r->sets[i].path, "items", (json_int_t)n,
                                                 "selected", (json_int_t)sel));
    }
    char now[40];
    af_clock_iso8601(now, sizeof now);
    json_object_set_new(j, "benches", benches);
    json_object_set_new(j, "limit",
                        r->o->limit ? json_integer((json_int_t)r->o->limit) : json_null());
    json_object_set_new(j, "trials", json_integer(r->o->trials));
    json_object_set_new(j, "concurrency", json_integer(r->o->concurrency));
    json_object_set_new(j, "started_at", json_string(now));
    char *text = json_dumps(j, JSON_INDENT(2) | AF_JSON_REAL_OUT);
    json_decref(j);
    struct af_buf path;
    af_buf_init(&path, AF_BUF_NOLIMIT);
    (void)af_buf_printf(&path, "%s/run.json", r->o->out_dir);
    int rc = af_file_write_atomic(af_buf_str(&path), text, strlen(text), err, errlen);
    af_buf_deinit(&path);
    free(text);
    return rc;
}

/* Builds the list of jobs not done yet; tallies the done ones into the summary. */
static void plan_jobs(struct runner *r)
{
    size_t cap = 64;
    r->jobs = af_xcalloc(cap, sizeof *r->jobs);
    for (size_t s = 0; s < r->sum->n_benches; s++) {
        struct eval_bench_summary *bs = &r->sum->benches[s];
        size_t n = eval_dataset_size(&r->sets[s]);
        if (r->o->limit && r->o->limit < n)
            n = r->o->limit;
        for (size_t i = 0; i < n; i++)
            for (int t = 0; t < r->o->trials; t++) {
                char key[128];
                job_key(bs->bench, i, t, key, sizeof key);
                json_t *d = json_object_get(r->done, key);
                if (d) {
                    bs->n++;
                    bs->resumed++;
                    bs->correct += json_is_true(json_object_get(d, "correct")) ? 1 : 0;
                    bs->steps += json_number_value(json_object_get(d, "steps"));
                    bs->latency_ms += json_number_value(json_object_get(d, "latency_ms"));
                    json_t *jv = json_object_get(d, "judge");
                    bs->judged += jv ? 1 : 0;
                    bs->judge_correct += json_is_true(jv) ? 1 : 0;
                    continue;
                }
                if (r->n_jobs == cap)
                    r->jobs = af_xrealloc(r->jobs, (cap *= 2) * sizeof *r->jobs);
                r->jobs[r->n_jobs++] = (struct job){s, i, t};
            }
    }
}

/* ["Tool_A", "Tool_B"]: the tools the memory records, in step order. */
static json_t *tools_used(const json_t *memory)
{
    json_t *tools = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(memory, i, m)
    {
        const char *t = af_json_get_str(m, "tool");
        if (t && *t)
            json_array_append_new(tools, af_json_text(t));
    }
    return tools;
}

/* The result line of one finished solve. Owned by the caller. */
static json_t *result_line(const struct runner *r, const struct job *jb, const json_t *item,
                           const struct af_flow_result *res, double latency_ms,
                           const char *trace_rel, int *correct)
{
    const char *bench = r->sets[jb->set].bench;
    const char *answer = res->answer ? res->answer : res->direct_output;
    struct af_score sc;
    char err[512];
    int src = af_score_item(bench, item, answer ? answer : "", &sc, err, sizeof err);
    *correct = src == AF_OK && sc.correct;
    json_t *j = json_object();
    json_object_set_new(j, "bench", json_string(bench));
    json_object_set_new(j, "index", json_integer((json_int_t)jb->index));
    json_object_set_new(j, "trial", json_integer(jb->trial));
    json_object_set_new(j, "query", af_json_text(eval_item_query(item)));
    json_object_set_new(j, "gold", json_deep_copy(eval_item_gold(item)));
    json_object_set_new(j, "answer", answer ? af_json_text(answer) : json_null());
    json_object_set_new(j, "extracted", src == AF_OK ? af_json_text(sc.extracted) : json_null());
    json_object_set_new(j, "correct", json_pack("{s:b}", "rule", *correct));
    if (src == AF_OK && af_score_reports_f1(bench))
        json_object_set_new(j, "f1", json_real(sc.f1));
    if (src != AF_OK)
        json_object_set_new(j, "score_error", af_json_text(err));
    else if (sc.details)
        json_object_set(j, "score_details", sc.details);
    json_object_set_new(j, "steps", json_integer(res->steps));
    json_object_set_new(j, "tools", tools_used(res->memory));
    json_object_set(j, "tokens", res->usage ? res->usage : json_object());
    json_object_set_new(j, "latency_ms", json_real(latency_ms));
    json_object_set_new(j, "trace", json_string(trace_rel));
    af_score_deinit(&sc);
    return j;
}

/* What one job came to, for the summary and the progress display. */
struct outcome {
    int failed;  /* no line written */
    int correct; /* rule verdict */
    int judge;   /* 1, 0, -1 unparsable, -2 not judged */
    int steps;
    double latency_ms;
    char why[1024];
};

/* Tallies one finished job and reports it. Called with r->mu held. */
static void tally(struct runner *r, const struct job *jb, const struct outcome *oc)
{
    struct eval_bench_summary *bs = &r->sum->benches[jb->set];
    if (oc->failed) {
        bs->failed++;
        struct af_buf b;
        af_buf_init(&b, 4096);
        (void)af_buf_printf(&b, "[eval] %s index %zu trial %d failed: %s", bs->bench, jb->index,
                            jb->trial, oc->why);
        eval_progress_message(&r->progress, af_buf_str(&b));
        af_buf_deinit(&b);
    } else {
        bs->n++;
        bs->correct += oc->correct ? 1 : 0;
        bs->steps += oc->steps;
        bs->latency_ms += oc->latency_ms;
        bs->judged += oc->judge >= 0 ? 1 : 0;
        bs->judge_correct += oc->judge == 1 ? 1 : 0;
    }
    eval_progress_item(&r->progress, oc->correct, oc->failed);
}

/* Adds correct.judge (and the judge's reply) to line j. Returns AF_OK or the failed call's
 * code (the reason in oc->why). */
static int judge_line(const struct runner *r, const json_t *item, json_t *j, struct outcome *oc)
{
    char *reply = NULL;
    int rc =
        eval_judge_item(r->o->judge, eval_item_query(item), eval_item_gold(item),
                        af_json_get_str(j, "answer"), &oc->judge, &reply, oc->why, sizeof oc->why);
    if (rc != AF_OK)
        return rc;
    json_object_set_new(json_object_get(j, "correct"), "judge",
                        oc->judge >= 0 ? json_boolean(oc->judge) : json_null());
    json_object_set_new(j, "judge_reply", af_json_text(reply));
    free(reply);
    return AF_OK;
}

/* Scores a finished solve and appends its line. */
static void finish_job(struct runner *r, const struct job *jb, const json_t *item,
                       const struct af_flow_result *res, const char *rel, struct outcome *oc)
{
    json_t *j = result_line(r, jb, item, res, oc->latency_ms, rel, &oc->correct);
    if (r->o->judge && judge_line(r, item, j, oc) != AF_OK) {
        oc->failed = 1;
        json_decref(j);
        return;
    }
    char *line = json_dumps(j, JSON_COMPACT | AF_JSON_REAL_OUT);
    json_decref(j);
    if (!line || af_linelog_append(r->out, line, strlen(line)) != AF_OK) {
        oc->failed = 1;
        snprintf(oc->why, sizeof oc->why, "cannot append to %s/results.jsonl", r->o->out_dir);
    }
    free(line);
}

/* Opens the job's own trace file (a stale one from a killed run is removed first). */
static struct af_trace *open_job_trace(struct runner *r, const char *rel)
{
    char err[512];
    struct af_buf tpath;
    af_buf_init(&tpath, AF_BUF_NOLIMIT);
    (void)af_buf_printf(&tpath, "%s/%s", r->o->out_dir, rel);
    unlink(af_buf_str(&tpath));
    struct af_trace *t = NULL;
    if (af_trace_open(af_buf_str(&tpath), &t, err, sizeof err) != AF_OK) {
        pthread_mutex_lock(&r->mu);
        eval_progress_message(&r->progress, err);
        pthread_mutex_unlock(&r->mu);
        t = NULL;
    }
    af_buf_deinit(&tpath);
    return t;
}

static void run_job(void *user, size_t k)
{
    struct runner *r = user;
    const struct job *jb = &r->jobs[k];
    const struct eval_dataset *set = &r->sets[jb->set];
    const json_t *item = eval_dataset_item(set, jb->index);
    char rel[256], id[160];
    snprintf(id, sizeof id, "%s-%zu-%d", set->bench, jb->index, jb->trial);
    snprintf(rel, sizeof rel, "traces/%s.jsonl", id);
    struct af_flow_params p = *r->base;
    p.trace = open_job_trace(r, rel);
    struct outcome oc;
    memset(&oc, 0, sizeof oc);
    oc.judge = -2;
    struct af_flow_result res;
    double t0 = af_clock_ms();
    int rc = af_flow_solve(&p, id, eval_item_query(item), &res);
    oc.latency_ms = af_clock_ms() - t0;
    oc.steps = res.steps;
    char terr[600];
    if (af_trace_status(p.trace, NULL, terr, sizeof terr) != AF_OK) { /* said, not silent */
        pthread_mutex_lock(&r->mu);
        eval_progress_message(&r->progress, terr);
        pthread_mutex_unlock(&r->mu);
    }
    af_trace_close(p.trace);
    if (rc == AF_OK) {
        finish_job(r, jb, item, &res, rel, &oc);
    } else {
        oc.failed = 1;
        snprintf(oc.why, sizeof oc.why, "%s", res.errmsg ? res.errmsg : af_strerror(rc));
    }
    pthread_mutex_lock(&r->mu);
    tally(r, jb, &oc);
    pthread_mutex_unlock(&r->mu);
    af_flow_result_deinit(&res);
}

static void init_summary(struct eval_summary *sum, const struct eval_dataset *sets, size_t n)
{
    sum->benches = af_xcalloc(n ? n : 1, sizeof *sum->benches);
    sum->n_benches = n;
    for (size_t i = 0; i < n; i++)
        sum->benches[i].bench = af_xstrdup(sets[i].bench);
}

static int open_run_dir(struct runner *r, char *err, size_t errlen)
{
    struct af_buf p;
    af_buf_init(&p, AF_BUF_NOLIMIT);
    (void)af_buf_printf(&p, "%s/traces", r->o->out_dir);
    int rc = af_mkdir_p(r->o->out_dir, 0777, err, errlen);
    if (rc == AF_OK)
        rc = make_dir(af_buf_str(&p), err, errlen);
    af_buf_reset(&p);
    (void)af_buf_printf(&p, "%s/results.jsonl", r->o->out_dir);
    if (rc == AF_OK)
        rc = eval_log_scan(af_buf_str(&p), on_done_line, r->done, err, errlen);
    if (rc == AF_OK)
        rc = write_run_json(r, err, errlen);
    if (rc == AF_OK)
        rc = af_linelog_open(af_buf_str(&p), &r->out, err, errlen);
    af_buf_deinit(&p);
    return rc == AF_OK ? AF_OK : AF_EIO;
}

int eval_run(const struct af_flow_params *base, const struct eval_dataset *sets, size_t n_sets,
             const struct eval_run_opts *o, struct eval_summary *sum, char *err, size_t errlen)
{
    struct runner r;
    memset(&r, 0, sizeof r);
    memset(sum, 0, sizeof *sum);
    r.base = base;
    r.sets = sets;
    r.o = o;
    r.sum = sum;
    r.done = json_object();
    pthread_mutex_init(&r.mu, NULL);
    init_summary(sum, sets, n_sets);
    int rc = open_run_dir(&r, err, errlen);
    if (rc == AF_OK) {
        plan_jobs(&r);
        eval_progress_init(&r.progress, stderr, o->progress, r.n_jobs, o->progress_every);
        eval_pool_run(o->concurrency > 0 ? (size_t)o->concurrency : 1, r.n_jobs, run_job, &r);
        eval_progress_finish(&r.progress);
        for (size_t i = 0; i < n_sets; i++)
            if (sum->benches[i].failed)
                rc = AF_EBACKEND;
    } else {
        eval_summary_deinit(sum);
    }
    af_linelog_close(r.out);
    free(r.jobs);
    json_decref(r.done);
    pthread_mutex_destroy(&r.mu);
    return rc;
}
