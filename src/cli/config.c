/*
 * config.c - layered run configuration and the back-ends it names.
 */
#include "cli/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentflow/engine.h"
#include "agentflow/world.h"
#include "cli/cli.h"
#include "core/xalloc.h"

static void set_str(char **dst, const char *v)
{
    free(*dst);
    *dst = v ? af_xstrdup(v) : NULL;
}

void config_init(struct run_config *c)
{
    memset(c, 0, sizeof *c);
    struct af_flow_params d = af_flow_default_params();
    for (int i = 0; i < AF_N_SLOTS; i++) {
        c->slots[i].sampling = d.slots[i].sampling;
        c->slots[i].api_key_env = af_xstrdup("OPENAI_API_KEY");
        c->slots[i].timeout_s = 300;
        c->slots[i].connect_timeout_s = 10;
        c->slots[i].stall_timeout_s = 30;
        c->slots[i].max_retries = 5;
    }
    c->max_steps = d.max_steps;
    c->max_time_s = d.max_time_s;
    c->tool_options = json_object();
}

void config_deinit(struct run_config *c)
{
    for (int i = 0; i < AF_N_SLOTS; i++) {
        free(c->slots[i].url);
        free(c->slots[i].model);
        free(c->slots[i].api_key_env);
        for (size_t k = 0; k < AF_LLM_MAX_STOP; k++)
            free(c->slots[i].stop[k]);
    }
    free(c->tools);
    free(c->prompts);
    free(c->trace);
    json_decref(c->tool_options);
    free(c->chat_template);
    json_decref(c->effective);
    memset(c, 0, sizeof *c);
}

void config_set_url(struct run_config *c, int slot, const char *url)
{
    for (int i = 0; i < AF_N_SLOTS; i++)
        if (slot < 0 || slot == i)
            set_str(&c->slots[i].url, url);
}

void config_set_model(struct run_config *c, int slot, const char *model)
{
    for (int i = 0; i < AF_N_SLOTS; i++)
        if (slot < 0 || slot == i)
            set_str(&c->slots[i].model, model);
}

static int bad(char *err, size_t errlen, const char *origin, const char *key, const char *want)
{
    snprintf(err, errlen, "%s: key '%s' must be %s", origin, key, want);
    return AF_EINVAL;
}

static int apply_stop(struct slot_cfg *s, const json_t *v, const char *origin, const char *key,
                      char *err, size_t errlen)
{
    if (!json_is_array(v) || json_array_size(v) > AF_LLM_MAX_STOP)
        return bad(err, errlen, origin, key, "a list of at most 8 strings");
    for (size_t k = 0; k < AF_LLM_MAX_STOP; k++) {
        free(s->stop[k]);
        s->stop[k] = NULL;
    }
    s->sampling.n_stop = 0;
    for (size_t k = 0; k < json_array_size(v); k++) {
        const char *t = json_string_value(json_array_get(v, k));
        if (!t)
            return bad(err, errlen, origin, key, "a list of strings");
        s->stop[k] = af_xstrdup(t);
        s->sampling.stop[k] = s->stop[k];
        s->sampling.n_stop = k + 1;
    }
    return AF_OK;
}

/* One key of a slot object ("planner": {...}) or of the top level (applied to every slot). */
static int apply_slot_key(struct slot_cfg *s, const char *k, const json_t *v, const char *origin,
                          char *err, size_t errlen)
{
    if (!strcmp(k, "url") || !strcmp(k, "model") || !strcmp(k, "api_key_env")) {
        if (!json_is_string(v))
            return bad(err, errlen, origin, k, "a string");
        set_str(!strcmp(k, "url")     ? &s->url
                : !strcmp(k, "model") ? &s->model
                                      : &s->api_key_env,
                json_string_value(v));
    } else if (!strcmp(k, "temperature") || !strcmp(k, "top_p") ||
               !strcmp(k, "frequency_penalty") || !strcmp(k, "timeout_s") ||
               !strcmp(k, "connect_timeout_s") || !strcmp(k, "stall_timeout_s")) {
        if (!json_is_number(v) || json_number_value(v) < 0)
            return bad(err, errlen, origin, k, "a non-negative number");
        double d = json_number_value(v);
        double *dst = !strcmp(k, "temperature")         ? &s->sampling.temperature
                      : !strcmp(k, "top_p")             ? &s->sampling.top_p
                      : !strcmp(k, "frequency_penalty") ? &s->sampling.frequency_penalty
                      : !strcmp(k, "timeout_s")         ? &s->timeout_s
                      : !strcmp(k, "stall_timeout_s")   ? &s->stall_timeout_s
                                                        : &s->connect_timeout_s;
        *dst = d;
        if (dst == &s->sampling.temperature)
            s->temperature_set = 1;
    } else if (!strcmp(k, "max_tokens") || !strcmp(k, "max_retries")) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000)
            return bad(err, errlen, origin, k, "a non-negative integer");
        if (!strcmp(k, "max_tokens"))
            s->sampling.max_tokens = (int)json_integer_value(v);
        else
            s->max_retries = (int)json_integer_value(v);
    } else if (!strcmp(k, "seed")) {
        if (!json_is_integer(v))
            return bad(err, errlen, origin, k, "an integer");
        s->sampling.has_seed = 1;
        s->sampling.seed = (int64_t)json_integer_value(v);
    } else if (!strcmp(k, "ignore_eos")) {
        if (!json_is_boolean(v))
            return bad(err, errlen, origin, k, "true or false");
        s->sampling.ignore_eos = json_is_true(v);
    } else if (!strcmp(k, "stop")) {
        return apply_stop(s, v, origin, k, err, errlen);
    } else {
        return 1; /* not a slot key */
    }
    return AF_OK;
}

static int slot_index(const char *name)
{
    for (int i = 0; i < AF_N_SLOTS; i++)
        if (!strcmp(name, af_slot_name(i)))
            return i;
    return -1;
}

static int apply_tools(struct run_config *c, const json_t *v, const char *origin, char *err,
                       size_t errlen)
{
    if (json_is_string(v)) {
        set_str(&c->tools, json_string_value(v));
        return AF_OK;
    }
    if (!json_is_array(v))
        return bad(err, errlen, origin, "tools", "a string or a list of tool names");
    char buf[4096];
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < json_array_size(v); i++) {
        const char *t = json_string_value(json_array_get(v, i));
        if (!t || used >= sizeof buf)
            return bad(err, errlen, origin, "tools", "a list of tool names");
        used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%s", i ? "," : "", t);
    }
    set_str(&c->tools, buf);
    return AF_OK;
}

static int apply_top_key(struct run_config *c, const char *k, json_t *v, const char *origin,
                         char *err, size_t errlen)
{
    if (!strcmp(k, "max_steps")) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1000)
            return bad(err, errlen, origin, k, "an integer from 1 to 1000");
        c->max_steps = (int)json_integer_value(v);
    } else if (!strcmp(k, "max_time")) {
        if (!json_is_number(v) || json_number_value(v) <= 0)
            return bad(err, errlen, origin, k, "a positive number of seconds");
        c->max_time_s = json_number_value(v);
    } else if (!strcmp(k, "tools")) {
        return apply_tools(c, v, origin, err, errlen);
    } else if (!strcmp(k, "prefill_chunk") || !strcmp(k, "max_batch")) {
        const json_int_t lim = !strcmp(k, "max_batch") ? 256 : (1 << 20);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > lim)
            return bad(err, errlen, origin, k,
                       !strcmp(k, "max_batch") ? "an integer from 0 (default) to 256"
                                               : "a non-negative integer (0 = default)");
        *(!strcmp(k, "max_batch") ? &c->max_batch : &c->prefill_chunk) = (int)json_integer_value(v);
    } else if (!strcmp(k, "kv_mib") || !strcmp(k, "kv_budget_mb")) { /* the older name */
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 24))
            return bad(err, errlen, origin, k, "a non-negative number of MiB (0 = 1024)");
        c->kv_mib = (int)json_integer_value(v);
    } else if (!strcmp(k, "kv_type")) {
        if (!json_is_string(v) ||
            (strcmp(json_string_value(v), "f32") && strcmp(json_string_value(v), "f16")))
            return bad(err, errlen, origin, k, "\"f32\" (default) or \"f16\"");
        c->kv_f16 = !strcmp(json_string_value(v), "f16");
    } else if (!strcmp(k, "draft")) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 32)
            return bad(err, errlen, origin, k, "an integer from 0 (off) to 32");
        c->draft = (int)json_integer_value(v);
    } else if (!strcmp(k, "threads") || !strcmp(k, "ctx")) {
        json_int_t lim = !strcmp(k, "threads") ? 1024 : (1 << 24);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > lim)
            return bad(err, errlen, origin, k, "a non-negative integer (0 = default)");
        if (!strcmp(k, "threads"))
            c->threads = (int)json_integer_value(v);
        else
            c->ctx = (int64_t)json_integer_value(v);
    } else if (!strcmp(k, "chat_template")) {
        if (!json_is_string(v) ||
            (strcmp(json_string_value(v), "chatml") && strcmp(json_string_value(v), "llama3")))
            return bad(err, errlen, origin, k, "\"chatml\" or \"llama3\"");
        set_str(&c->chat_template, json_string_value(v));
    } else if (!strcmp(k, "tool_options")) {
        const char *key;
        json_t *val;
        if (!json_is_object(v))
            return bad(err, errlen, origin, k, "an object of strings");
        json_object_foreach(v, key, val)
        {
            if (!json_is_string(val))
                return bad(err, errlen, origin, "tool_options", "an object of strings");
        }
        json_object_update(c->tool_options, v);
    } else if (!strcmp(k, "prompts") || !strcmp(k, "trace")) {
        if (!json_is_string(v))
            return bad(err, errlen, origin, k, "a string");
        set_str(!strcmp(k, "prompts") ? &c->prompts : &c->trace, json_string_value(v));
    } else if (!strcmp(k, "render")) {
        const char *r = json_string_value(v);
        if (!r || (strcmp(r, "json") && strcmp(r, "python")))
            return bad(err, errlen, origin, k, "\"json\" or \"python\"");
        c->render_python = !strcmp(r, "python");
    } else if (!strcmp(k, "detailed")) {
        if (!json_is_boolean(v))
            return bad(err, errlen, origin, k, "true or false");
        c->detailed = json_is_true(v);
    } else {
        snprintf(err, errlen, "%s: unknown key '%s'", origin, k);
        return AF_EINVAL;
    }
    return AF_OK;
}

int config_apply_json(struct run_config *c, json_t *j, const char *origin, char *err, size_t errlen)
{
    if (!json_is_object(j)) {
        snprintf(err, errlen, "%s: the configuration must be a JSON object", origin);
        return AF_EINVAL;
    }
    const char *k;
    json_t *v;
    json_object_foreach(j, k, v)
    {
        int si = slot_index(k);
        if (si >= 0) {
            if (!json_is_object(v))
                return bad(err, errlen, origin, k, "an object of slot settings");
            const char *sk;
            json_t *sv;
            json_object_foreach(v, sk, sv)
            {
                char where[256];
                snprintf(where, sizeof where, "%s: %s", origin, k);
                int rc = apply_slot_key(&c->slots[si], sk, sv, where, err, errlen);
                if (rc == 1) {
                    snprintf(err, errlen, "%s: unknown key '%s.%s'", origin, k, sk);
                    return AF_EINVAL;
                }
                if (rc)
                    return rc;
            }
            continue;
        }
        int rc = 1;
        for (int i = 0; i < AF_N_SLOTS; i++) {
            rc = apply_slot_key(&c->slots[i], k, v, origin, err, errlen);
            if (rc != AF_OK)
                break;
        }
        if (rc == 1)
            rc = apply_top_key(c, k, v, origin, err, errlen);
        if (rc)
            return rc;
    }
    return AF_OK;
}

/* AGENTFLOW_URL, AGENTFLOW_MODEL, AGENTFLOW_<SLOT>_URL, AGENTFLOW_<SLOT>_MODEL,
 * AGENTFLOW_MAX_STEPS, AGENTFLOW_MAX_TIME, AGENTFLOW_TOOLS, AGENTFLOW_PROMPTS. */
int config_apply_env(struct run_config *c, char *err, size_t errlen)
{
    const char *v;
    if ((v = getenv("AGENTFLOW_URL")) && *v)
        config_set_url(c, -1, v);
    if ((v = getenv("AGENTFLOW_MODEL")) && *v)
        config_set_model(c, -1, v);
    static const char *upper[AF_N_SLOTS] = {"PLANNER", "FIXED", "EXECUTOR", "TOOL"};
    for (int i = 0; i < AF_N_SLOTS; i++) {
        char name[64];
        snprintf(name, sizeof name, "AGENTFLOW_%s_URL", upper[i]);
        if ((v = getenv(name)) && *v)
            config_set_url(c, i, v);
        snprintf(name, sizeof name, "AGENTFLOW_%s_MODEL", upper[i]);
        if ((v = getenv(name)) && *v)
            config_set_model(c, i, v);
    }
    if ((v = getenv("AGENTFLOW_MAX_STEPS")) && *v) {
        char *end;
        long n = strtol(v, &end, 10);
        if (*end || n < 1 || n > 1000) {
            snprintf(err, errlen, "environment: AGENTFLOW_MAX_STEPS='%s' is not 1..1000", v);
            return AF_EINVAL;
        }
        c->max_steps = (int)n;
    }
    if ((v = getenv("AGENTFLOW_MAX_TIME")) && *v) {
        char *end;
        double d = strtod(v, &end);
        if (*end || d <= 0) {
            snprintf(err, errlen, "environment: AGENTFLOW_MAX_TIME='%s' is not a positive number",
                     v);
            return AF_EINVAL;
        }
        c->max_time_s = d;
    }
    if ((v = getenv("AGENTFLOW_TOOLS")) && *v)
        set_str(&c->tools, v);
    if ((v = getenv("AGENTFLOW_PROMPTS")) && *v)
        set_str(&c->prompts, v);
    if ((v = getenv("AGENTFLOW_THREADS")) && *v) {
        char *end;
        long n = strtol(v, &end, 10);
        if (*end || n < 0 || n > 1024) {
            snprintf(err, errlen, "environment: AGENTFLOW_THREADS='%s' is not 0..1024", v);
            return AF_EINVAL;
        }
        c->threads = (int)n;
    }
    if ((v = getenv("AGENTFLOW_CTX")) && *v) {
        char *end;
        long long n = strtoll(v, &end, 10);
        if (*end || n < 0 || n > (1 << 24)) {
            snprintf(err, errlen, "environment: AGENTFLOW_CTX='%s' is not a token count", v);
            return AF_EINVAL;
        }
        c->ctx = n;
    }
    if ((v = getenv("AGENTFLOW_CHAT_TEMPLATE")) && *v) {
        if (strcmp(v, "chatml") && strcmp(v, "llama3")) {
            snprintf(err, errlen,
                     "environment: AGENTFLOW_CHAT_TEMPLATE='%s' is not chatml or "
                     "llama3",
                     v);
            return AF_EINVAL;
        }
        set_str(&c->chat_template, v);
    }
    return AF_OK;
}

/* expert:DIR[?noise=P][&seed=S]: the practice world's scripted expert (world.h). */
static struct af_llm *open_expert(const char *spec, const char *slot, int *code, char *err,
                                  size_t errlen)
{
    char dir[4096];
    size_t n = strcspn(spec, "?");
    snprintf(dir, sizeof dir, "%.*s", (int)n, spec);
    double noise = 0;
    unsigned long long seed = 0;
    for (const char *p = spec[n] ? spec + n + 1 : NULL; p && *p;) {
        char *end = NULL;
        if (!strncmp(p, "noise=", 6)) {
            noise = strtod(p + 6, &end);
        } else if (!strncmp(p, "seed=", 5)) {
            seed = strtoull(p + 5, &end, 10);
        }
        if (!end || (*end && *end != '&') || noise < 0 || noise > 1) {
            snprintf(err, errlen,
                     "%s slot: expert:%s: expected expert:DIR[?noise=P][&seed=S] with P in "
                     "[0, 1]",
                     slot, spec);
            *code = AF_EINVAL;
            return NULL;
        }
        p = *end ? end + 1 : end;
    }
    char msg[1024];
    struct af_llm *llm = af_world_expert_new(dir, noise, seed, msg, sizeof msg);
    if (!llm)
        snprintf(err, errlen, "%s slot: %s", slot, msg);
    return llm;
}

/* Opens one slot's back-end. *code says why it failed: AF_EINVAL for a setting (no URL, an
 * unknown scheme), AF_EPARSE for a file the URL names (gguf:, scripted:) that is missing or
 * cannot be used. */
static struct af_llm *open_one(const struct run_config *c, const struct slot_cfg *s,
                               const char *slot, int *code, char *err, size_t errlen)
{
    *code = AF_EINVAL;
    if (!s->url || !s->url[0]) {
        snprintf(err, errlen,
                 "no back-end URL for the %s slot: pass --url URL (or --%s-url), set "
                 "AGENTFLOW_URL, put \"url\" in the --config file, or build the embedded "
                 "model (make model)",
                 slot, slot);
        return NULL;
    }
    if (!strncmp(s->url, "scripted:", 9)) {
        *code = AF_EPARSE;
        return af_llm_scripted_new_file(s->url + 9, err, errlen);
    }
    if (!strncmp(s->url, "gguf:", 5)) {
        *code = AF_EPARSE;
        struct af_engine_params ep = af_engine_default_params();
        ep.n_threads = c->threads;
        ep.n_ctx = c->ctx;
        ep.chat_template = c->chat_template;
        ep.prefill_chunk = c->prefill_chunk;
        ep.draft_max = c->draft;
        ep.kv_budget_bytes = (size_t)c->kv_mib << 20;
        ep.kv_f16 = c->kv_f16;
        ep.max_batch = c->max_batch;
        char msg[1024];
        struct af_llm *llm = af_llm_gguf_new(s->url + 5, &ep, msg, sizeof msg);
        if (!llm)
            snprintf(err, errlen, "%s slot: %s", slot, msg);
        else
            cli_note_random_weights(s->url + 5);
        return llm;
    }
    if (!strncmp(s->url, "expert:", 7)) {
        *code = AF_EPARSE;
        return open_expert(s->url + 7, slot, code, err, errlen);
    }
    if (strncmp(s->url, "http://", 7) && strncmp(s->url, "https://", 8)) {
        snprintf(err, errlen,
                 "%s slot: URL '%s' must start with http://, https://, scripted:, gguf: or "
                 "expert:",
                 slot, s->url);
        return NULL;
    }
    struct af_llm_openai_params p = af_llm_openai_default_params();
    p.base_url = s->url;
    p.model = s->model;
    p.api_key = s->api_key_env ? getenv(s->api_key_env) : NULL;
    p.timeout_ms = (long)(s->timeout_s * 1000.0);
    p.connect_timeout_ms = (long)(s->connect_timeout_s * 1000.0);
    p.stall_timeout_ms = (long)(s->stall_timeout_s * 1000.0);
    p.max_retries = s->max_retries;
    return af_llm_openai_new(&p, err, errlen);
}

static int same_endpoint(const struct slot_cfg *a, const struct slot_cfg *b)
{
    return a->url && b->url && !strcmp(a->url, b->url) &&
           !strcmp(a->api_key_env ? a->api_key_env : "", b->api_key_env ? b->api_key_env : "") &&
           a->timeout_s == b->timeout_s && a->connect_timeout_s == b->connect_timeout_s &&
           a->stall_timeout_s == b->stall_timeout_s && a->max_retries == b->max_retries;
}

int backends_open(const struct run_config *c, struct backends *b, char *err, size_t errlen)
{
    memset(b, 0, sizeof *b);
    for (int i = 0; i < AF_N_SLOTS; i++) {
        for (int k = 0; k < i && !b->llm[i]; k++)
            if (same_endpoint(&c->slots[i], &c->slots[k]))
                b->llm[i] = b->llm[k];
        if (b->llm[i])
            continue;
        /* The tool slot is optional: without its own URL, tools use the fixed slot. */
        if (i == AF_SLOT_TOOL && (!c->slots[i].url || !c->slots[i].url[0])) {
            b->llm[i] = b->llm[AF_SLOT_FIXED];
            continue;
        }
        int code = AF_EINVAL;
        struct af_llm *llm = open_one(c, &c->slots[i], af_slot_name(i), &code, err, errlen);
        if (!llm) {
            backends_close(b);
            return code;
        }
        b->owned[b->n_owned++] = llm;
        b->llm[i] = llm;
    }
    return AF_OK;
}

void backends_close(struct backends *b)
{
    for (size_t i = 0; i < b->n_owned; i++)
        af_llm_free(b->owned[i]);
    memset(b, 0, sizeof *b);
}

void config_flow_params(const struct run_config *c, const struct backends *b,
                        struct af_flow_params *p)
{
    *p = af_flow_default_params();
    p->max_steps = c->max_steps;
    p->max_time_s = c->max_time_s;
    p->detailed_answer = c->detailed;
    p->render_python = c->render_python;
    for (int i = 0; i < AF_N_SLOTS; i++) {
        p->slots[i].llm = b->llm[i];
        p->slots[i].model = c->slots[i].model;
        p->slots[i].sampling = c->slots[i].sampling;
    }
}

static json_t *slot_json(const struct slot_cfg *s)
{
    json_t *j = json_pack(
        "{s:s?,s:s?,s:s?,s:f,s:f,s:i,s:f,s:f,s:f,s:f,s:i}", "url", s->url, "model", s->model,
        "api_key_env", s->api_key_env, "temperature", s->sampling.temperature, "top_p",
        s->sampling.top_p, "max_tokens", s->sampling.max_tokens, "frequency_penalty",
        s->sampling.frequency_penalty, "timeout_s", s->timeout_s, "connect_timeout_s",
        s->connect_timeout_s, "stall_timeout_s", s->stall_timeout_s, "max_retries", s->max_retries);
    json_object_set_new(j, "ignore_eos", json_boolean(s->sampling.ignore_eos));
    if (s->sampling.has_seed)
        json_object_set_new(j, "seed", json_integer((json_int_t)s->sampling.seed));
    if (s->sampling.n_stop) {
        json_t *st = json_array();
        for (size_t i = 0; i < s->sampling.n_stop; i++)
            json_array_append_new(st, json_string(s->stop[i]));
        json_object_set_new(j, "stop", st);
    }
    return j;
}

json_t *config_to_json(const struct run_config *c)
{
    json_t *j = json_object();
    for (int i = 0; i < AF_N_SLOTS; i++)
        json_object_set_new(j, af_slot_name(i), slot_json(&c->slots[i]));
    json_object_set_new(j, "max_steps", json_integer(c->max_steps));
    json_object_set_new(j, "max_time", json_real(c->max_time_s));
    json_object_set_new(j, "tools", c->tools ? json_string(c->tools) : json_null());
    json_object_set_new(j, "prompts", c->prompts ? json_string(c->prompts) : json_null());
    json_object_set_new(j, "detailed", json_boolean(c->detailed));
    json_object_set_new(j, "render", json_string(c->render_python ? "python" : "json"));
    json_object_set_new(j, "tool_options", json_deep_copy(c->tool_options));
    json_object_set_new(j, "threads", json_integer(c->threads));
    json_object_set_new(j, "ctx", json_integer((json_int_t)c->ctx));
    json_object_set_new(j, "prefill_chunk", json_integer(c->prefill_chunk));
    json_object_set_new(j, "draft", json_integer(c->draft));
    json_object_set_new(j, "kv_mib", json_integer(c->kv_mib));
    json_object_set_new(j, "kv_type", json_string(c->kv_f16 ? "f16" : "f32"));
    json_object_set_new(j, "max_batch", json_integer(c->max_batch));
    json_object_set_new(j, "chat_template",
                        c->chat_template ? json_string(c->chat_template) : json_null());
    return j;
}

int config_tool_opt_flag(json_t *flags, const char *kv, char *err, size_t errlen)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv) {
        snprintf(err, errlen, "--tool-opt '%s' must be KEY=VALUE", kv);
        return AF_EINVAL;
    }
    json_t *o = json_object_get(flags, "tool_options");
    if (!o) {
        o = json_object();
        json_object_set_new(flags, "tool_options", o);
    }
    char *key = af_xstrndup(kv, (size_t)(eq - kv));
    json_object_set_new(o, key, json_string(eq + 1));
    free(key);
    return AF_OK;
}

void cli_note_random_weights(const char *path)
{
    const char *lora = strstr(path, "+lora:");
    size_t n = lora ? (size_t)(lora - path) : strlen(path);
    char *file = af_xstrndup(path, n);
    if (af_engine_random_weights(file))
        fprintf(stderr,
                "agentflow: note: %s has random weights (written by agentflow model "
                "make-random): every module runs, but its replies are noise\n",
                file);
    free(file);
}
