/*
 * scripted.c - a back-end that answers from a script of rules (tests, demos, CI).
 *
 * Rules are tried in order; the first whose `match` occurs in the prompt and that has uses
 * left answers. Thread-safe: rule use counts are guarded by a mutex.
 */
#include "agentflow/llm.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/fileio.h"
#include "core/xalloc.h"

#define SCRIPT_MAX_BYTES (64u << 20)

struct rule {
    char *match; /* NULL = any prompt */
    char *reply; /* NULL when error is set */
    char *error;
    int all_msgs; /* match against every message, not only the last user one */
    long times;   /* uses left; -1 = unlimited */
    double delay_ms;
};

struct scripted {
    struct rule *rules;
    size_t n_rules;
    char *dflt;
    pthread_mutex_t mu;
    long n_calls;
};

static void scripted_free(void *p)
{
    struct scripted *s = p;
    if (!s)
        return;
    for (size_t i = 0; i < s->n_rules; i++) {
        free(s->rules[i].match);
        free(s->rules[i].reply);
        free(s->rules[i].error);
    }
    free(s->rules);
    free(s->dflt);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static const char *last_user(const struct af_llm_request *req)
{
    for (size_t i = req->n_msgs; i > 0; i--)
        if (req->msgs[i - 1].role && strcmp(req->msgs[i - 1].role, "user") == 0)
            return req->msgs[i - 1].content ? req->msgs[i - 1].content : "";
    return "";
}

static int rule_matches(const struct rule *r, const struct af_llm_request *req)
{
    if (!r->match)
        return 1;
    if (!r->all_msgs)
        return strstr(last_user(req), r->match) != NULL;
    for (size_t i = 0; i < req->n_msgs; i++)
        if (req->msgs[i].content && strstr(req->msgs[i].content, r->match))
            return 1;
    return 0;
}

static int scripted_chat(void *p, const struct af_llm_request *req, struct af_llm_reply *reply)
{
    struct scripted *s = p;
    const struct rule *hit = NULL;
    pthread_mutex_lock(&s->mu);
    s->n_calls++;
    for (size_t i = 0; i < s->n_rules; i++) {
        struct rule *r = &s->rules[i];
        if (r->times == 0 || !rule_matches(r, req))
            continue;
        if (r->times > 0)
            r->times--;
        hit = r;
        break;
    }
    pthread_mutex_unlock(&s->mu);
    if (hit && hit->delay_ms > 0)
        af_clock_sleep_ms(hit->delay_ms);
    reply->n_attempts = 1;
    reply->model = af_xstrdup(req->model ? req->model : "scripted");
    if (hit && hit->error) {
        reply->errmsg = af_xstrdup(hit->error);
        return AF_EBACKEND;
    }
    const char *text = hit ? hit->reply : s->dflt;
    if (!text) {
        struct af_buf b;
        af_buf_init(&b, 512);
        (void)af_buf_printf(&b, "scripted back-end: no rule matches the prompt starting '%.120s'",
                            last_user(req));
        reply->errmsg = af_buf_detach(&b);
        return AF_ENOTFOUND;
    }
    reply->text = af_xstrdup(text);
    reply->finish_reason = af_xstrdup("stop");
    size_t in = 0;
    for (size_t i = 0; i < req->n_msgs; i++)
        in += req->msgs[i].content ? strlen(req->msgs[i].content) : 0;
    /* A rough 4-bytes-per-token estimate keeps usage accounting exercised in tests. */
    reply->prompt_tokens = (int64_t)(in / 4 + 1);
    reply->completion_tokens = (int64_t)(strlen(text) / 4 + 1);
    return AF_OK;
}

static const struct af_llm_ops scripted_ops = {
    .kind = "scripted",
    .chat = scripted_chat,
    .free = scripted_free,
    .describe = NULL,
};

static int load_rule(struct rule *r, json_t *j, size_t idx, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    r->times = -1;
    if (!json_is_object(j)) {
        snprintf(err, errlen, "scripted back-end: rules[%zu] is not an object", idx);
        return AF_EPARSE;
    }
    json_t *m = json_object_get(j, "match"), *rep = json_object_get(j, "reply");
    json_t *e = json_object_get(j, "error"), *t = json_object_get(j, "times");
    if ((m && !json_is_string(m)) || (rep && !json_is_string(rep)) || (e && !json_is_string(e)) ||
        (t && !json_is_integer(t)) || (!rep && !e)) {
        snprintf(err, errlen,
                 "scripted back-end: rules[%zu] needs string 'reply' or 'error' (optional "
                 "string 'match', integer 'times')",
                 idx);
        return AF_EPARSE;
    }
    r->match = m ? af_xstrdup(json_string_value(m)) : NULL;
    r->reply = rep ? af_xstrdup(json_string_value(rep)) : NULL;
    r->error = e ? af_xstrdup(json_string_value(e)) : NULL;
    r->all_msgs = json_is_true(json_object_get(j, "any_message"));
    r->times = t ? (long)json_integer_value(t) : -1;
    r->delay_ms = json_number_value(json_object_get(j, "delay_ms"));
    return AF_OK;
}

struct af_llm *af_llm_scripted_new(const char *script_json, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loads(script_json, 0, &je);
    if (!root) {
        snprintf(err, errlen, "scripted back-end: bad JSON at line %d column %d: %s", je.line,
                 je.column, je.text);
        return NULL;
    }
    json_t *rules = json_object_get(root, "rules"), *dflt = json_object_get(root, "default");
    if (!json_is_object(root) || (rules && !json_is_array(rules)) ||
        (dflt && !json_is_string(dflt))) {
        snprintf(err, errlen, "scripted back-end: expected {\"rules\":[...], \"default\":\"...\"}");
        json_decref(root);
        return NULL;
    }
    struct scripted *s = af_xcalloc(1, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    size_t n = rules ? json_array_size(rules) : 0;
    s->rules = af_xcalloc(n ? n : 1, sizeof *s->rules);
    for (size_t i = 0; i < n; i++) {
        if (load_rule(&s->rules[i], json_array_get(rules, i), i, err, errlen) != AF_OK) {
            s->n_rules = i;
            scripted_free(s);
            json_decref(root);
            return NULL;
        }
        s->n_rules = i + 1;
    }
    s->dflt = dflt ? af_xstrdup(json_string_value(dflt)) : NULL;
    json_decref(root);
    return af_llm_new_custom(&scripted_ops, s);
}

struct af_llm *af_llm_scripted_new_file(const char *path, char *err, size_t errlen)
{
    char *text = NULL;
    if (af_file_read(path, SCRIPT_MAX_BYTES, &text, NULL, err, errlen) != AF_OK)
        return NULL;
    char inner[512];
    struct af_llm *llm = af_llm_scripted_new(text, inner, sizeof inner);
    free(text);
    if (!llm)
        snprintf(err, errlen, "%s: %s", path, inner);
    return llm;
}
