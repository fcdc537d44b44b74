/*
 * engine.c - the public engine API (agentflow/engine.h): a model, an optional LoRA adapter, one
 * forward context and a paged KV cache (kv_pool.h) indexed by a radix tree (radix.h);
 * generation with sampling, stop strings and streaming (sched.c). The adapter is set at load,
 * or replaced by the trainer (af_engine_set_lora), which drops the cached blocks computed with
 * the old weights: one engine never mixes KV computed with different weights.
 */
#include "agentflow/engine.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/errf.h"
#include "core/xalloc.h"
#include "engine/chat.h"
#include "engine/forward.h"
#include "engine/lora.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "engine/sample.h"
#include "engine/engine_int.h"

struct af_engine_params af_engine_default_params(void)
{
    struct af_engine_params p = {0};
    p.prefix_cache_bytes = (size_t)1 << 30;
    p.prefix_cache_seqs = 8;
    return p;
}

struct af_engine_gen_params af_engine_default_gen_params(void)
{
    struct af_engine_gen_params p = {0};
    p.top_p = 1.0f;
    p.max_tokens = 256;
    return p;
}

int af_engine_load(const char *path, const struct af_engine_params *p, struct af_engine **out,
                   char *err, size_t errlen)
{
    struct af_engine_params d = af_engine_default_params();
    if (!p)
        p = &d;
    *out = NULL;
    const char *isa = getenv("AGENTFLOW_ISA"); /* ref, avx2, avx512: for comparisons */
    if (isa && *isa && quant_set_isa(isa)) {
        af_errf(err, errlen, "AGENTFLOW_ISA=%s: this CPU cannot run it (ref, avx2, avx512)", isa);
        return AF_EINVAL;
    }
    struct model *m = NULL;
    int rc = model_load(path, &m, err, errlen);
    if (rc)
        return rc;
    /* The matmul weights in the kernels' packed form (same bits); AGENTFLOW_PACK=0 keeps the
     * rows only, for comparisons. */
    const char *pack = getenv("AGENTFLOW_PACK");
    if (!pack || strcmp(pack, "0") != 0)
        (void)model_pack(m);
    struct lora_adapter *lora = NULL;
    if (p->lora_dir && p->lora_dir[0]) {
        char msg[1024] = "";
        rc = lora_load_peft(p->lora_dir, m, &lora, msg, sizeof msg);
        if (rc) {
            /* Most of lora_io's messages already start with the folder or a file in it. */
            int named = !strncmp(msg, p->lora_dir, strlen(p->lora_dir));
            af_errf(err, errlen, "%s%s%s", named ? "" : p->lora_dir, named ? "" : ": ", msg);
            model_free(m);
            return rc;
        }
    }
    enum chat_template t = CHAT_TEMPLATE_NONE;
    if (p->chat_template && p->chat_template[0]) {
        t = chat_template_from_name(p->chat_template);
        if (t == CHAT_TEMPLATE_NONE) {
            af_errf(err, errlen, "unknown chat template '%s' (chatml, llama3)", p->chat_template);
            lora_free(lora);
            model_free(m);
            return AF_EINVAL;
        }
    } else {
        t = chat_template_detect(m->chat_template);
    }
    struct af_engine *e = af_xcalloc(1, sizeof *e);
    e->m = m;
    e->lora = lora;
    e->lora_dir = lora ? af_xstrdup(p->lora_dir) : NULL;
    e->tmpl = t;
    if (t == CHAT_TEMPLATE_CHATML)
        e->default_system = chat_template_default_system(m->chat_template);
    int64_t n_ctx = p->n_ctx > 0 ? p->n_ctx : m->hp.n_ctx_train;
    if (p->n_ctx <= 0 && n_ctx > 32768)
        n_ctx = 32768;
    e->fc = fwd_ctx_new(m, n_ctx, p->n_threads);
    fwd_ctx_set_lora(e->fc, e->lora);
    fwd_ctx_set_invariant(e->fc, p->batch_invariant);
    e->invariant = p->batch_invariant != 0;
    e->draft_max = p->draft_max < 0 ? 0 : p->draft_max > 32 ? 32 : p->draft_max;
    /* One pool holds the running sequences' KV and the cached prefixes: kv_budget_bytes sizes
     * it, else the older prefix_cache_bytes (0 for both: no limit). */
    e->pool =
        kv_pool_new(m, p->kv_budget_bytes ? p->kv_budget_bytes : p->prefix_cache_bytes, p->kv_f16);
    e->tree = radix_new(e->pool);
    e->kv_budget_tokens = e->pool->max_blocks * KV_BLOCK;
    e->logits = af_xmalloc((size_t)m->hp.n_vocab * sizeof(float));
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->idle_cv, NULL);
    e->prefill_chunk = p->prefill_chunk > 0 ? p->prefill_chunk : 256;
    /* For comparisons: each prompt chunk in a forward pass of its own, as before they were
     * fused with the decode rows. */
    const char *alone = getenv("AGENTFLOW_PREFILL_ALONE");
    e->prefill_alone = alone && strcmp(alone, "1") == 0;
    e->max_batch = p->max_batch > 0 ? (p->max_batch < 256 ? p->max_batch : 256) : 64;
    *out = e;
    return AF_OK;
}

void af_engine_free(struct af_engine *e)
{
    if (!e)
        return;
    radix_free(e->tree);
    kv_pool_free(e->pool);
    fwd_ctx_free(e->fc);
    lora_free(e->lora);
    free(e->lora_dir);
    model_free(e->m);
    free(e->default_system);
    free(e->logits);
    free(e->step_logits);
    for (size_t i = 0; i < e->n_owned_w; i++)
        free(e->owned_w[i]);
    free(e->owned_w);
    pthread_cond_destroy(&e->idle_cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

const struct model *af_engine_model(const struct af_engine *e)
{
    return e->m;
}

static int lora_same_shape(const struct lora_adapter *a, const struct lora_adapter *b)
{
    if (a->n_layer != b->n_layer || a->rank != b->rank || a->targets != b->targets ||
        a->n_floats != b->n_floats)
        return 0;
    for (int64_t i = 0; i < a->n_layer * LORA_N_TARGETS; i++)
        if (a->pairs[i].n_in != b->pairs[i].n_in || a->pairs[i].n_out != b->pairs[i].n_out)
            return 0;
    return 1;
}

int af_engine_set_lora(struct af_engine *e, const struct lora_adapter *l, char *err, size_t errlen)
{
    struct lora_adapter *copy = NULL;
    if (l) {
        if (l->n_layer != e->m->hp.n_layer) {
            af_errf(err, errlen, "adapter of %lld layers for a model of %lld",
                    (long long)l->n_layer, (long long)e->m->hp.n_layer);
            return AF_EINVAL;
        }
        int rc = lora_new(&e->m->hp, l->rank, l->alpha, l->dropout, l->targets, &copy, err, errlen);
        if (rc)
            return rc;
        if (!lora_same_shape(copy, l)) {
            af_errf(err, errlen, "the adapter's matrices do not match this model's shapes");
            lora_free(copy);
            return AF_EINVAL;
        }
        copy->scale = l->scale;
        memcpy(copy->data, l->data, l->n_floats * sizeof *l->data);
    }
    engine_exclusive_begin(e, 1);
    struct lora_adapter *old = e->lora;
    e->lora = copy;
    fwd_ctx_set_lora(e->fc, e->lora);
    if (copy && !e->lora_dir)
        e->lora_dir = af_xstrdup("(set in process)");
    if (!copy) {
        free(e->lora_dir);
        e->lora_dir = NULL;
    }
    radix_invalidate(e->tree);
    engine_exclusive_end(e);
    lora_free(old);
    return AF_OK;
}

/* The model's weight named `name` (a GGUF tensor name), or NULL. */
static struct weight *weight_named(struct model *m, const char *name)
{
    if (!strcmp(name, "token_embd.weight"))
        return &m->tok_embd;
    if (!strcmp(name, "output_norm.weight"))
        return &m->output_norm;
    if (!strcmp(name, "output.weight"))
        return m->hp.tied_output ? NULL : &m->output;
    long long il;
    int used = 0;
    if (sscanf(name, "blk.%lld.%n", &il, &used) != 1 || used == 0 || il < 0 || il >= m->hp.n_layer)
        return NULL;
    struct model_layer *ly = &m->layers[il];
    const char *rest = name + used;
    static const char *const names[] = {"attn_norm.weight", "ffn_norm.weight", "attn_q.weight",
                                        "attn_k.weight",    "attn_v.weight",   "attn_output.weight",
                                        "ffn_gate.weight",  "ffn_up.weight",   "ffn_down.weight",
                                        "attn_q.bias",      "attn_k.bias",     "attn_v.bias",
                                        "attn_output.bias"};
    struct weight *ws[] = {&ly->attn_norm, &ly->ffn_norm, &ly->wq,   &ly->wk,     &ly->wv,
                           &ly->wo,        &ly->w_gate,   &ly->w_up, &ly->w_down, &ly->bq,
                           &ly->bk,        &ly->bv,       &ly->bo};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(rest, names[i]))
            return ws[i]->data ? ws[i] : NULL;
    return NULL;
}

/* Frees p when it is one of the engine's own weight buffers. */
static void drop_owned(struct af_engine *e, const void *p)
{
    for (size_t k = 0; k < e->n_owned_w; k++)
        if (e->owned_w[k] == p) {
            free(e->owned_w[k]);
            e->owned_w[k] = e->owned_w[--e->n_owned_w];
            return;
        }
}

int af_engine_set_weights(struct af_engine *e, const char *const *names, const float *const *values,
                          const int64_t *counts, size_t n, char *err, size_t errlen)
{
    struct weight **ws = af_xcalloc(n ? n : 1, sizeof *ws);
    for (size_t i = 0; i < n; i++) {
        ws[i] = weight_named(e->m, names[i]);
        if (!ws[i]) {
            af_errf(err, errlen, "%s: no such tensor in this model", names[i]);
            free(ws);
            return AF_EINVAL;
        }
        if (counts[i] != ws[i]->n_in * ws[i]->n_out) {
            af_errf(err, errlen, "%s: %lld values for a tensor of %lld", names[i],
                    (long long)counts[i], (long long)(ws[i]->n_in * ws[i]->n_out));
            free(ws);
            return AF_EINVAL;
        }
    }
    /* encode outside the lock: only the pointer swap needs the engine to be idle. A weight
     * that a matmul reads packed (the output head, for a tied embedding) is packed again. */
    void **bufs = af_xcalloc(n ? n : 1, sizeof *bufs), **pk = af_xcalloc(n ? n : 1, sizeof *pk);
    int *form = af_xcalloc(n ? n : 1, sizeof *form);
    for (size_t i = 0; i < n; i++) {
        const struct weight *w = ws[i];
        bufs[i] = af_xmalloc(w->row_bytes * (size_t)w->n_out + 64);
        for (int64_t r = 0; r < w->n_out; r++)
            quant_quantize_row(w->type, values[i] + r * w->n_in,
                               (char *)bufs[i] + (size_t)r * w->row_bytes, w->n_in);
        const struct weight *mw = w == &e->m->tok_embd && e->m->hp.tied_output ? &e->m->output : w;
        const size_t pb = mw->packed ? quant_packed_bytes(w->type, w->n_out, w->n_in) : 0;
        if (pb) {
            pk[i] = af_xaligned(64, (pb + 63) / 64 * 64);
            form[i] = quant_pack(w->type, bufs[i], w->n_out, w->n_in, pk[i]);
        }
    }
    engine_exclusive_begin(e, 1);
    e->owned_w = af_xrealloc(e->owned_w, (e->n_owned_w + 2 * n) * sizeof *e->owned_w);
    for (size_t i = 0; i < n; i++) {
        struct weight *w = ws[i];
        struct weight *mw = w == &e->m->tok_embd && e->m->hp.tied_output ? &e->m->output : w;
        if (mw != w)
            mw->data = bufs[i]; /* the head is the embedding */
        drop_owned(e, w->data);
        if (mw->packed) /* ours, or in the model's mapping (freed with it) */
            drop_owned(e, mw->packed);
        w->data = bufs[i];
        e->owned_w[e->n_owned_w++] = bufs[i];
        mw->packed = pk[i]; /* NULL (the rows) where the kernels have no packed form */
        mw->packed_form = form[i];
        if (pk[i])
            e->owned_w[e->n_owned_w++] = pk[i];
    }
    radix_invalidate(e->tree);
    engine_exclusive_end(e);
    free(bufs);
    free(pk);
    free(form);
    free(ws);
    return AF_OK;
}

int64_t af_engine_n_vocab(const struct af_engine *e)
{
    return e->m->hp.n_vocab;
}

const char *af_engine_model_path(const struct af_engine *e)
{
    return e->m->path;
}

static json_t *type_counts(const struct model *m)
{
    json_t *o = json_object();
    for (uint64_t i = 0; m->gguf && i < gguf_n_tensors(m->gguf); i++) {
        const char *name = quant_type_name(gguf_tensor_at(m->gguf, i)->type);
        json_t *c = json_object_get(o, name);
        json_object_set_new(o, name, json_integer(c ? json_integer_value(c) + 1 : 1));
    }
    return o;
}

static json_t *lora_json(const struct af_engine *e)
{
    const struct lora_adapter *l = e->lora;
    if (!l)
        return json_null();
    json_t *targets = json_array();
    for (int t = 0; t < LORA_N_TARGETS; t++)
        if (l->targets & (1u << t))
            json_array_append_new(targets, json_string(lora_target_peft_name((enum lora_target)t)));
    return json_pack("{ss si sf sf so}", "dir", e->lora_dir, "rank", l->rank, "alpha",
                     (double)l->alpha, "scale", (double)l->scale, "targets", targets);
}

char *af_engine_info_json(struct af_engine *e)
{
    const struct model *m = e->m;
    const struct model_hparams *hp = &m->hp;
    json_t *j = json_pack(
        "{ss ss ss sI sI sI sI sI sI sI sI sI sf sf sf ss sb sI sI so}", "path", m->path, "name",
        m->name, "arch", model_arch_name(hp->arch), "n_vocab", (json_int_t)hp->n_vocab,
        "n_ctx_train", (json_int_t)hp->n_ctx_train, "n_embd", (json_int_t)hp->n_embd, "n_layer",
        (json_int_t)hp->n_layer, "n_ff", (json_int_t)hp->n_ff, "n_head", (json_int_t)hp->n_head,
        "n_head_kv", (json_int_t)hp->n_head_kv, "head_dim", (json_int_t)hp->head_dim, "n_rot",
        (json_int_t)hp->n_rot, "rms_eps", (double)hp->rms_eps, "rope_base", (double)hp->rope_base,
        "rope_freq_scale", (double)hp->rope_freq_scale, "rope_style",
        hp->rope_style == ROPE_NEOX ? "neox" : "norm", "tied_output", hp->tied_output, "n_params",
        (json_int_t)model_n_params(m), "weight_bytes", (json_int_t)model_weight_bytes(m),
        "tensor_types", type_counts(m));
    json_t *tok =
        !m->tok ? json_null()
                : json_pack("{ss ss sI si si si}", "model", tok_model_name(m->tok), "pre",
                            tok_pre_name(m->tok), "n_tokens", (json_int_t)tok_n_vocab(m->tok),
                            "bos", tok_bos(m->tok), "eos", tok_eos(m->tok), "eot", tok_eot(m->tok));
    json_object_set_new(j, "tokenizer", tok);
    json_object_set_new(j, "chat_template", json_string(chat_template_name(e->tmpl)));
    json_object_set_new(j, "lora", lora_json(e));
    /* the kernel set, and the bytes of the weights it reads packed (model_pack) */
    json_object_set_new(j, "kernels", json_string(quant_isa()));
    json_object_set_new(j, "packed_bytes", json_integer((json_int_t)m->packed_bytes));
    pthread_mutex_lock(&e->mu);
    json_object_set_new(
        j, "batching",
        json_pack("{s:i,s:i,s:I,s:I,s:I,s:b,s:i,s:I,s:I}", "max_batch", e->max_batch,
                  "prefill_chunk", e->prefill_chunk, "decode_steps", (json_int_t)e->n_steps,
                  "decode_rows", (json_int_t)e->n_rows, "widest_step", (json_int_t)e->max_rows,
                  "batch_invariant", e->invariant, "draft_max", e->draft_max, "drafted",
                  (json_int_t)e->n_drafted, "draft_kept", (json_int_t)e->n_draft_kept));
    json_object_set_new(json_object_get(j, "batching"), "kv_budget_tokens",
                        json_integer((json_int_t)e->kv_budget_tokens));
    json_object_set_new(json_object_get(j, "batching"), "preempted",
                        json_integer((json_int_t)e->n_preempted));
    json_object_set_new(json_object_get(j, "batching"), "prefill_chunks_fused",
                        json_integer((json_int_t)e->n_fused));
    json_object_set_new(json_object_get(j, "batching"), "prefill_chunks_alone",
                        json_integer((json_int_t)e->n_alone));
    json_object_set_new(json_object_get(j, "batching"), "requests",
                        json_integer((json_int_t)engine_queue_len(e)));
    const struct kv_snap *ks = &e->kv_snap;
    json_object_set_new(j, "kv_cache",
                        json_pack("{s:i,s:s,s:I,s:I,s:I,s:I,s:I,s:I}", "block_tokens", KV_BLOCK,
                                  "type", e->pool->f16 ? "f16" : "f32", "block_bytes",
                                  (json_int_t)kv_pool_block_bytes(e->pool), "blocks_total",
                                  (json_int_t)e->pool->max_blocks, "blocks_used",
                                  (json_int_t)ks->blocks_used, "blocks_cached",
                                  (json_int_t)ks->blocks_cached, "hit_tokens", (json_int_t)ks->hits,
                                  "evicted_blocks", (json_int_t)ks->evicted));
    pthread_mutex_unlock(&e->mu);
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(j);
    return s;
}

int af_engine_tokenize(struct af_engine *e, const char *text, int add_special, int parse_special,
                       int32_t **ids, size_t *n_ids, char *err, size_t errlen)
{
    if (!e->m->tok) {
        af_errf(err, errlen, "%s has no tokenizer (no tokenizer.json)", e->m->path);
        return AF_EINVAL;
    }
    int rc = tok_encode(e->m->tok, text, strlen(text), add_special, parse_special, ids, n_ids);
    if (rc)
        af_errf(err, errlen, "tokenizing failed: %s", af_strerror(rc));
    return rc;
}

char *af_engine_detokenize(struct af_engine *e, const int32_t *ids, size_t n, int special)
{
    return e->m->tok ? tok_decode(e->m->tok, ids, n, special) : af_xstrdup("");
}

int af_engine_chat_prompt(struct af_engine *e, const struct af_engine_msg *msgs, size_t n,
                          char **out, char *err, size_t errlen)
{
    *out = NULL;
    if (e->tmpl == CHAT_TEMPLATE_NONE) {
        af_errf(err, errlen,
                "%s has no chat template we recognise: pass --chat-template chatml or llama3",
                e->m->path);
        return AF_EINVAL;
    }
    struct chat_msg *cm = af_xcalloc(n ? n : 1, sizeof *cm);
    for (size_t i = 0; i < n; i++) {
        cm[i].role = msgs[i].role;
        cm[i].content = msgs[i].content;
    }
    *out = chat_format(e->tmpl, cm, n, 1, e->default_system);
    free(cm);
    return AF_OK;
}

int af_engine_logits(struct af_engine *e, const int32_t *ids, size_t n_ids, int all_logits,
                     float *logits, char *err, size_t errlen)
{
    if (!n_ids) {
        af_errf(err, errlen, "no tokens to evaluate");
        return AF_EINVAL;
    }
    engine_exclusive_begin(e, 0);
    int rc;
    /* Blocks past the pool's budget if need be (fwd_eval): this call is the one that runs. */
    struct kv_seq s;
    kv_seq_init_pool(&s, e->pool);
    if (all_logits) { /* every row from scratch, and nothing cached (as before) */
        rc = fwd_eval(e->fc, &s, ids, (int64_t)n_ids, FWD_LOGITS_ALL, logits, err, errlen);
        radix_release(e->tree, &s, 0);
    } else {
        const int64_t reused = radix_acquire(e->tree, &s, ids, (int64_t)n_ids);
        rc = fwd_eval(e->fc, &s, ids + reused, (int64_t)n_ids - reused, FWD_LOGITS_LAST, logits,
                      err, errlen);
        if (rc)
            kv_seq_truncate(&s, reused);
        radix_release(e->tree, &s, 1);
    }
    kv_seq_deinit(&s);
    engine_exclusive_end(e);
    return rc;
}

void af_engine_result_deinit(struct af_engine_result *r)
{
    if (!r)
        return;
    free(r->text);
    free(r->ids);
    free(r->logprobs);
    memset(r, 0, sizeof *r);
}
