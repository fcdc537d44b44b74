/*
 * sft.c - the fine-tuning loop (see sft.h): data order, loss weights, optimiser steps,
 * metrics, checkpoints and resume.
 */
#include "train/sft.h"

#include <errno.h>
#include <stdarg.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/errf.h"
#include "core/fileio.h"
#include "core/xalloc.h"
#include "engine/gguf.h"
#include "engine/lora.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "train/ckpt.h"
#include "train/net.h"
#include "train/rng.h"
#include "train/runlog.h"
#include "train/sft_data.h"

struct train_sft_opts train_sft_default_opts(void)
{
    struct train_sft_opts o = {0};
    o.lora_rank = 8;
    o.lora_targets = LORA_ALL_TARGETS;
    o.schedule = "constant";
    o.adamw = train_adamw_defaults();
    o.clip = 1.0f;
    o.steps = 100;
    o.batch = 1;
    o.accum = 1;
    o.max_seq = 1024;
    o.save_every = 50;
    o.keep = 2;
    return o;
}

struct run {
    const struct train_sft_opts *o;
    struct model *m;
    struct sft_data *data;
    struct lora_adapter *lora;
    struct train_net *net;
    const struct train_param *params;
    size_t np;
    struct train_adamw_state opt;
    struct train_sched sched;
    struct ckpt_state st;
    struct train_rng rng; /* advances through the current epoch's shuffle */
    int64_t *perm;
    float lr_base, alpha;
    struct af_linelog *metrics;
    struct sft_data *val;       /* held-out conversations, or NULL */
    struct train_early_stop es; /* the lowest val_loss so far */
};

int train_early_stop_update(struct train_early_stop *e, int64_t step, double loss, int patience,
                            int *stop)
{
    *stop = 0;
    if (isfinite(loss) && loss < e->best) {
        e->best = loss;
        e->best_step = step;
        e->n_worse = 0;
        return 1;
    }
    e->n_worse++;
    *stop = patience > 0 && e->n_worse >= patience;
    return 0;
}

static void note(const struct run *r, const char *fmt, ...) AF_PRINTF(2, 3);
static void note(const struct run *r, const char *fmt, ...)
{
    if (!r->o->on_message)
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    r->o->on_message(r->o->user, buf);
}

/* The settings a resumed run must share with the checkpoint, as JSON text (malloc'd). */
static char *settings_json(const struct run *r)
{
    const struct train_sft_opts *o = r->o;
    struct stat sb;
    json_int_t data_bytes = stat(o->data_path, &sb) == 0 ? (json_int_t)sb.st_size : -1;
    json_t *s = json_pack(
        "{s:s,s:s,s:I,s:b,s:i,s:f,s:f,s:i,s:f,s:s,s:I,s:f,s:f,s:f,s:f,s:f,s:f,s:I,s:I,s:I,s:I,"
        "s:s}",
        "model", o->model_path, "data", o->data_path, "data_bytes", data_bytes, "full", o->full,
        "lora_rank", o->full ? 0 : o->lora_rank, "lora_alpha", o->full ? 0.0 : (double)r->alpha,
        "lora_dropout", (double)o->lora_dropout, "lora_targets", (int)o->lora_targets, "lr",
        (double)r->lr_base, "schedule", o->schedule ? o->schedule : "constant", "warmup",
        (json_int_t)o->warmup, "min_lr_ratio", (double)o->min_lr_ratio, "beta1",
        (double)o->adamw.beta1, "beta2", (double)o->adamw.beta2, "eps", (double)o->adamw.eps,
        "weight_decay", (double)o->adamw.weight_decay, "clip", (double)o->clip, "batch",
        (json_int_t)o->batch, "accum", (json_int_t)o->accum, "max_seq", (json_int_t)o->max_seq,
        "seed", (json_int_t)o->seed, "chat_template", o->chat_template ? o->chat_template : "");
    if (o->loss_on != SFT_LOSS_ASSISTANT) /* only when set, so older runs still resume */
        json_object_set_new(s, "loss_on",
                            json_string(o->loss_on == SFT_LOSS_TEXT ? "text" : "all"));
    char *text = json_dumps(s, JSON_COMPACT);
    json_decref(s);
    return text;
}

static void shuffle_epoch(struct run *r)
{
    const int64_t n = (int64_t)r->data->n;
    r->st.epoch_rng = r->rng;
    for (int64_t i = 0; i < n; i++)
        r->perm[i] = i;
    train_rng_shuffle(&r->rng, r->perm, n);
}

static const struct sft_example *next_example(struct run *r)
{
    if (r->st.pos >= (int64_t)r->data->n) {
        r->st.epoch++;
        r->st.pos = 0;
        shuffle_epoch(r);
    }
    return &r->data->ex[r->perm[r->st.pos++]];
}

/* One optimiser step; fills s. */
static int step_once(struct run *r, struct train_sft_step *s, char *err, size_t errlen)
{
    const struct train_sft_opts *o = r->o;
    const int64_t nseq = o->batch * o->accum;
    const struct sft_example **ex = af_xmalloc((size_t)nseq * sizeof *ex);
    int64_t n_target = 0, n_tokens = 0;
    for (int64_t i = 0; i < nseq; i++) {
        ex[i] = next_example(r);
        n_tokens += ex[i]->n;
        for (int64_t t = 1; t < ex[i]->n; t++)
            n_target += ex[i]->target[t];
    }
    const double t0 = af_clock_ms();
    train_grads_zero(r->params, r->np);
    double loss = 0;
    int rc = AF_OK;
    for (int64_t i = 0; i < nseq && !rc; i++) {
        const int64_t T = ex[i]->n;
        float *w = af_xmalloc((size_t)(T - 1) * sizeof *w);
        for (int64_t t = 0; t < T - 1; t++)
            w[t] = ex[i]->target[t + 1] ? 1.0f / (float)n_target : 0.0f;
        train_net_set_dropout_seed(r->net, train_mix(o->seed, (uint64_t)(r->st.step * nseq + i)));
        double l = 0;
        rc = train_net_loss(r->net, ex[i]->tokens, T, w, 1, &l, NULL, err, errlen);
        loss += l;
        free(w);
    }
    free(ex);
    if (rc)
        return rc;
    const float lr = train_sched_lr(&r->sched, r->st.step);
    memset(s, 0, sizeof *s);
    if (train_grads_nonfinite(r->params, r->np)) {
        s->skipped = 1;
        s->grad_norm = NAN;
    } else {
        s->grad_norm = train_clip_grad_norm(r->params, r->np, (double)o->clip);
        train_adamw_step(&r->opt, r->params, r->np, &o->adamw, lr);
    }
    r->st.step++;
    const double ms = af_clock_ms() - t0;
    s->step = r->st.step;
    s->steps = o->steps;
    s->loss = loss;
    s->lr = lr;
    s->tokens = n_tokens;
    s->tokens_per_s = ms > 0 ? (double)n_tokens * 1000.0 / ms : 0;
    return AF_OK;
}

static int log_step(struct run *r, const struct train_sft_step *s, char *err, size_t errlen)
{
    json_t *o = json_pack("{s:I,s:f,s:f,s:f,s:I,s:f}", "step", (json_int_t)s->step, "loss", s->loss,
                          "lr", (double)s->lr, "grad_norm", s->skipped ? 0.0 : s->grad_norm,
                          "tokens", (json_int_t)s->tokens, "tokens_per_s", s->tokens_per_s);
    if (s->skipped)
        json_object_set_new(o, "skipped", json_string("non-finite gradients"));
    char *line = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    int rc = af_linelog_append(r->metrics, line, strlen(line));
    free(line);
    if (rc)
        af_errf(err, errlen, "%s/metrics.jsonl: cannot append", r->o->out_dir);
    return rc;
}

/* The run's outputs (model.gguf, or the adapter's PEFT folder) from the weights as they are. */
static int write_outputs(struct run *r, char *err, size_t errlen)
{
    const struct train_sft_opts *o = r->o;
    if (r->lora)
        return lora_save_peft(r->lora, r->m, o->out_dir, o->model_path, err, errlen);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.gguf", o->out_dir);
    return ckpt_write_gguf(r->m, o->model_path, r->params, r->np, path, err, errlen);
}

static int save(struct run *r, char *err, size_t errlen)
{
    const struct train_sft_opts *o = r->o;
    int rc = ckpt_save(o->out_dir, &r->st, r->lora, r->m, r->params, r->np, &r->opt, o->keep, err,
                       errlen);
    return rc ? rc : write_outputs(r, err, errlen);
}

static int check_opts(const struct train_sft_opts *o, char *err, size_t errlen)
{
    if (!o->model_path || !o->data_path || !o->out_dir) {
        af_errf(err, errlen, "train sft needs --model, --data and --out");
        return AF_EINVAL;
    }
    const struct {
        int bad;
        const char *msg;
    } checks[] = {
        {o->steps < 1, "--steps must be at least 1"},
        {o->batch < 1 || o->accum < 1, "--batch and --accum must be at least 1"},
        {o->max_seq < 2, "--max-seq must be at least 2"},
        {o->save_every < 1, "--save-every must be at least 1"},
        {o->eval_every < 0 || o->early_stop < 0, "--eval-every and --early-stop must not be "
                                                 "negative"},
        {!o->val_path && (o->eval_every > 0 || o->early_stop > 0),
         "--eval-every and --early-stop need --val FILE"},
        {!(o->lr >= 0) || !isfinite(o->lr), "--lr must be a non-negative number"},
        {o->warmup < 0, "--warmup must not be negative"},
        {!o->full && o->lora_rank < 1, "--lora-rank must be at least 1"},
        {o->schedule && train_sched_from_name(o->schedule) < 0,
         "--schedule must be constant, linear or cosine"},
    };
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++)
        if (checks[i].bad) {
            af_errf(err, errlen, "%s", checks[i].msg);
            return AF_EINVAL;
        }
    return AF_OK;
}

/* The mean loss over every assistant token of the validation set, with the weights as they
 * are (no dropout: log-probs as at inference). Sets *n_tokens to the tokens averaged over. */
static int val_loss(struct run *r, double *loss, int64_t *n_tokens, char *err, size_t errlen)
{
    double sum = 0;
    int64_t n = 0;
    for (size_t i = 0; i < r->val->n; i++) {
        const struct sft_example *ex = &r->val->ex[i];
        if (ex->n < 2)
            continue;
        float *logp = af_xmalloc((size_t)(ex->n - 1) * sizeof *logp);
        int rc = train_net_logprobs(r->net, ex->tokens, ex->n, 1, logp, err, errlen);
        for (int64_t t = 0; !rc && t + 1 < ex->n; t++)
            if (ex->target[t + 1]) {
                sum -= (double)logp[t];
                n++;
            }
        free(logp);
        if (rc)
            return rc;
    }
    *loss = n ? sum / (double)n : (double)NAN;
    *n_tokens = n;
    return AF_OK;
}

/* Writes the current weights into out_dir/best/ with best.json {step, val_loss}. */
static int save_best(struct run *r, double loss, char *err, size_t errlen)
{
    const struct train_sft_opts *o = r->o;
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/best", o->out_dir);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        af_errf(err, errlen, "%s: cannot create the folder: %s", dir, strerror(errno));
        return AF_EIO;
    }
    int rc;
    if (r->lora) {
        rc = lora_save_peft(r->lora, r->m, dir, o->model_path, err, errlen);
    } else {
        snprintf(path, sizeof path, "%s/model.gguf", dir);
        rc = ckpt_write_gguf(r->m, o->model_path, r->params, r->np, path, err, errlen);
    }
    if (rc)
        return rc;
    char text[128];
    int len = snprintf(text, sizeof text, "{\"step\": %lld, \"val_loss\": %.9g}\n",
                       (long long)r->st.step, loss);
    snprintf(path, sizeof path, "%s/best.json", dir);
    return af_file_write_atomic(path, text, (size_t)len, err, errlen);
}

/* Validation after a step: a metrics line, best/ when the loss is the lowest so far. Sets
 * *stop when early stopping says so. */
static int validate(struct run *r, int *stop, char *err, size_t errlen)
{
    double loss = (double)NAN;
    int64_t n = 0;
    int rc = val_loss(r, &loss, &n, err, errlen);
    if (rc)
        return rc;
    json_t *o = json_pack("{s:I,s:f,s:I}", "step", (json_int_t)r->st.step, "val_loss",
                          isfinite(loss) ? loss : 0.0, "val_tokens", (json_int_t)n);
    char *line = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(o);
    rc = af_linelog_append(r->metrics, line, strlen(line));
    free(line);
    if (rc) {
        af_errf(err, errlen, "%s/metrics.jsonl: cannot append", r->o->out_dir);
        return rc;
    }
    if (train_early_stop_update(&r->es, r->st.step, loss, r->o->early_stop, stop))
        return save_best(r, loss, err, errlen);
    if (*stop)
        note(r,
             "early stop after step %lld: %d evaluations without a lower val_loss; the best, "
             "step %lld (val_loss %.4f), is in %s/best",
             (long long)r->st.step, r->es.n_worse, (long long)r->es.best_step, r->es.best,
             r->o->out_dir);
    return AF_OK;
}

static int setup(struct run *r, char *err, size_t errlen)
{
    const struct train_sft_opts *o = r->o;
    int rc = model_load(o->model_path, &r->m, err, errlen);
    if (rc)
        return rc;
    if ((rc = sft_data_load(o->data_path, r->m, o->chat_template, o->max_seq, &r->data, err,
                            errlen)))
        return rc;
    if (r->data->n == 0) {
        af_errf(err, errlen, "%s: no conversation with an assistant reply to train on",
                o->data_path);
        return AF_EPARSE;
    }
    if (o->loss_on == SFT_LOSS_TEXT)
        sft_data_target_text(r->data, r->m->tok);
    else if (o->loss_on == SFT_LOSS_ALL)
        sft_data_target_all(r->data);
    note(r,
         "data: %zu conversations, %lld tokens, %lld %s tokens (%zu cut to --max-seq "
         "%lld, %zu skipped)",
         r->data->n, (long long)r->data->n_tokens, (long long)r->data->n_target,
         o->loss_on != SFT_LOSS_ASSISTANT ? "target" : "assistant", r->data->n_truncated,
         (long long)o->max_seq, r->data->n_skipped);
    if (o->val_path) {
        if ((rc = sft_data_load(o->val_path, r->m, o->chat_template, o->max_seq, &r->val, err,
                                errlen)))
            return rc;
        if (r->val->n_target == 0) {
            af_errf(err, errlen, "%s: no assistant reply to validate on", o->val_path);
            return AF_EPARSE;
        }
        note(r, "validation: %zu conversations, %lld assistant tokens", r->val->n,
             (long long)r->val->n_target);
    }
    struct train_net_params np = train_net_default_params();
    np.full = o->full;
    np.checkpoint = o->recompute;
    if (!o->full) {
        rc = lora_new(&r->m->hp, o->lora_rank, r->alpha, o->lora_dropout, o->lora_targets, &r->lora,
                      err, errlen);
        if (rc)
            return rc;
        lora_init(r->lora, o->seed);
        np.lora = r->lora;
    }
    if ((rc = train_net_new(r->m, &np, &r->net, err, errlen)))
        return rc;
    r->params = train_net_params_list(r->net, &r->np);
    if ((rc = train_adamw_init(&r->opt, r->params, r->np, err, errlen)))
        return rc;
    r->sched.kind =
        (enum train_sched_kind)train_sched_from_name(o->schedule ? o->schedule : "constant");
    r->sched.lr = r->lr_base;
    r->sched.warmup = o->warmup;
    r->sched.total = o->steps;
    r->sched.min_lr_ratio = o->min_lr_ratio;
    r->perm = af_xmalloc(r->data->n * sizeof *r->perm);
    return AF_OK;
}

static int start_or_resume(struct run *r, char *err, size_t errlen)
{
    const struct train_sft_opts *o = r->o;
    int64_t latest = 0;
    r->st.settings_json = settings_json(r);
    int rc = train_run_start(o->out_dir, o->resume, r->st.settings_json, &latest, err, errlen);
    if (rc)
        return rc;
    if (latest == 0) {
        train_rng_seed(&r->rng, train_mix(o->seed, 0x5eedull));
        shuffle_epoch(r);
        return AF_OK;
    }
    struct ckpt_state saved = {0};
    rc = ckpt_load(o->out_dir, latest, r->lora, r->m, r->params, r->np, &r->opt, &saved, err,
                   errlen);
    free(saved.settings_json);
    if (rc)
        return rc;
    if (saved.pos > (int64_t)r->data->n) {
        af_errf(err, errlen,
                "--resume: the checkpoint's data position %lld is past the %zu "
                "conversations",
                (long long)saved.pos, r->data->n);
        return AF_EINVAL;
    }
    r->st.step = saved.step;
    r->st.epoch = saved.epoch;
    r->st.pos = saved.pos;
    r->rng = saved.epoch_rng;
    const int64_t pos = r->st.pos;
    shuffle_epoch(r); /* the same permutation as before the stop */
    r->st.pos = pos;
    note(r, "resumed from %s/checkpoint-%lld (epoch %lld, conversation %lld)", o->out_dir,
         (long long)latest, (long long)r->st.epoch, (long long)r->st.pos);
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", o->out_dir);
    return train_metrics_trim(path, r->st.step, err, errlen);
}

int train_sft_run(const struct train_sft_opts *o, char *err, size_t errlen)
{
    int rc = check_opts(o, err, errlen);
    if (rc)
        return rc;
    struct run r = {0};
    r.o = o;
    r.es.best = (double)INFINITY;
    r.lr_base = o->lr > 0 ? o->lr : (o->full ? 1e-5f : 1e-4f);
    r.alpha = o->lora_alpha > 0 ? o->lora_alpha : 2.0f * (float)o->lora_rank;
    if (!(rc = setup(&r, err, errlen)) && !(rc = start_or_resume(&r, err, errlen))) {
        rc = af_mkdir_p(o->out_dir, 0755, err, errlen);
        char path[4096];
        snprintf(path, sizeof path, "%s/metrics.jsonl", o->out_dir);
        if (!rc)
            rc = af_linelog_open(path, &r.metrics, err, errlen);
        /* The outputs again from the last checkpoint: a kill between the checkpoint and the
         * model file must not leave a finished run without its model. */
        if (r.st.step >= o->steps && !rc) {
            note(&r, "the run already has %lld steps (--steps %lld): nothing to do",
                 (long long)r.st.step, (long long)o->steps);
            rc = write_outputs(&r, err, errlen);
        }
        while (!rc && r.st.step < o->steps) {
            struct train_sft_step s;
            if ((rc = step_once(&r, &s, err, errlen)))
                break;
            if ((rc = log_step(&r, &s, err, errlen)))
                break;
            int early = 0;
            const int64_t every = o->eval_every > 0 ? o->eval_every : o->save_every;
            if (r.val && (r.st.step % every == 0 || r.st.step == o->steps) &&
                (rc = validate(&r, &early, err, errlen)))
                break;
            const int stop = (o->stop_after > 0 && r.st.step >= o->stop_after) || early;
            if (r.st.step % o->save_every == 0 || r.st.step == o->steps || stop) {
                if ((rc = save(&r, err, errlen)))
                    break;
                s.saved = 1;
            }
            if (o->on_step)
                o->on_step(o->user, &s);
            if (stop) {
                if (!early)
                    note(&r, "stopped after step %lld as asked; continue with --resume",
                         (long long)r.st.step);
                break;
            }
        }
    }
    af_linelog_close(r.metrics);
    free(r.perm);
    free(r.st.settings_json);
    train_adamw_deinit(&r.opt);
    train_net_free(r.net);
    lora_free(r.lora);
    sft_data_free(r.data);
    sft_data_free(r.val);
    model_free(r.m);
    return rc;
}
