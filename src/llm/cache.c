/*
 * cache.c - a persistent LLM response cache in SQLite, and the decorator that consults it.
 *
 * A request's key is a 128-bit hash (two FNV-1a 64 passes with different bases) of a canonical
 * JSON text of (model, messages, sampling). The model is the request's model, or the inner
 * back-end's description when the request names none. A hit returns the stored text, model,
 * finish reason and token usage without calling the inner back-end; failed replies are never
 * stored. By default only greedy calls (temperature 0) are cached (AF_LLM_CACHE_ALL: all).
 *
 * One connection per cache, guarded by a mutex; the database is in WAL mode with a busy
 * timeout, so several processes may share the file.
 */
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentflow/llm.h"
#include "core/errf.h"
#include "core/xalloc.h"

struct af_llm_cache {
    sqlite3 *db;
    sqlite3_stmt *get, *put;
    pthread_mutex_t mu;
    uint64_t hits, misses;
    char *path;
};

struct cache_llm {
    struct af_llm_cache *cache; /* borrowed */
    struct af_llm *inner;       /* borrowed */
    int flags;
};

static const char CACHE_SCHEMA[] = "PRAGMA journal_mode=WAL;"
                                   "PRAGMA synchronous=NORMAL;"
                                   "CREATE TABLE IF NOT EXISTS responses ("
                                   " key TEXT PRIMARY KEY, text TEXT NOT NULL, model TEXT,"
                                   " finish_reason TEXT, prompt_tokens INTEGER,"
                                   " completion_tokens INTEGER, created REAL);";

static int cache_fail(sqlite3 *db, const char *path, const char *what, char *err, size_t errlen)
{
    af_errf(err, errlen, "cache '%s': %s: %s", path, what, db ? sqlite3_errmsg(db) : "no memory");
    return AF_EIO;
}

int af_llm_cache_open(const char *path, struct af_llm_cache **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!path || !*path) {
        af_errf(err, errlen, "cache: empty file name");
        return AF_EINVAL;
    }
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc != SQLITE_OK) {
        cache_fail(db, path, "cannot open", err, errlen);
        sqlite3_close(db);
        return AF_EIO;
    }
    sqlite3_busy_timeout(db, 30000);
    char *msg = NULL;
    if (sqlite3_exec(db, CACHE_SCHEMA, NULL, NULL, &msg) != SQLITE_OK) {
        af_errf(err, errlen, "cache '%s': cannot create the table: %s", path, msg ? msg : "?");
        sqlite3_free(msg);
        sqlite3_close(db);
        return AF_EIO;
    }
    struct af_llm_cache *c = af_xcalloc(1, sizeof *c);
    c->db = db;
    c->path = af_xstrdup(path);
    pthread_mutex_init(&c->mu, NULL);
    if (sqlite3_prepare_v2(db,
                           "SELECT text, model, finish_reason, prompt_tokens, completion_tokens"
                           " FROM responses WHERE key = ?1",
                           -1, &c->get, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "INSERT OR REPLACE INTO responses VALUES (?1, ?2, ?3, ?4, ?5, ?6,"
                           " julianday('now'))",
                           -1, &c->put, NULL) != SQLITE_OK) {
        cache_fail(db, path, "cannot prepare statements", err, errlen);
        af_llm_cache_close(c);
        return AF_EIO;
    }
    *out = c;
    return AF_OK;
}

void af_llm_cache_close(struct af_llm_cache *c)
{
    if (!c)
        return;
    sqlite3_finalize(c->get);
    sqlite3_finalize(c->put);
    sqlite3_close(c->db);
    pthread_mutex_destroy(&c->mu);
    free(c->path);
    free(c);
}

void af_llm_cache_stats(struct af_llm_cache *c, uint64_t *hits, uint64_t *misses)
{
    pthread_mutex_lock(&c->mu);
    if (hits)
        *hits = c->hits;
    if (misses)
        *misses = c->misses;
    pthread_mutex_unlock(&c->mu);
}

static uint64_t fnv1a(const char *s, uint64_t h)
{
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

/* The key of a request: 32 hex digits into out (>= 33 bytes). */
static void request_key(const struct cache_llm *cl, const struct af_llm_request *req, char out[33])
{
    json_t *msgs = json_array();
    for (size_t i = 0; i < req->n_msgs; i++)
        json_array_append_new(msgs, json_pack("[s?s?]", req->msgs[i].role, req->msgs[i].content));
    json_t *stop = json_array();
    for (size_t i = 0; i < req->sampling.n_stop; i++)
        json_array_append_new(stop,
                              json_string(req->sampling.stop[i] ? req->sampling.stop[i] : ""));
    const struct af_sampling *s = &req->sampling;
    json_t *k =
        json_pack("{s:s,s:o,s:f,s:f,s:i,s:f,s:o,s:o}", "model",
                  req->model ? req->model : af_llm_describe(cl->inner), "messages", msgs,
                  "temperature", s->temperature, "top_p", s->top_p, "max_tokens", s->max_tokens,
                  "frequency_penalty", s->frequency_penalty, "seed",
                  s->has_seed ? json_integer((json_int_t)s->seed) : json_null(), "stop", stop);
    if (k && s->ignore_eos) /* only when set, so the keys stored before it existed still match */
        json_object_set_new(k, "ignore_eos", json_true());
    char *text = k ? json_dumps(k, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(k);
    const char *t = text ? text : "";
    uint64_t a = fnv1a(t, 14695981039346656037ull), b = fnv1a(t, 0x6c62272e07bb0142ull ^ a);
    snprintf(out, 33, "%016" PRIx64 "%016" PRIx64, a, b);
    free(text);
}

static char *col_dup(sqlite3_stmt *st, int col)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    return t ? af_xstrdup((const char *)t) : NULL;
}

/* Fills *reply from the cache; returns 1 on a hit. */
static int cache_get(struct af_llm_cache *c, const char *key, struct af_llm_reply *reply)
{
    pthread_mutex_lock(&c->mu);
    sqlite3_reset(c->get);
    sqlite3_bind_text(c->get, 1, key, -1, SQLITE_TRANSIENT);
    int hit = sqlite3_step(c->get) == SQLITE_ROW;
    if (hit) {
        reply->text = col_dup(c->get, 0);
        reply->model = col_dup(c->get, 1);
        reply->finish_reason = col_dup(c->get, 2);
        reply->prompt_tokens = sqlite3_column_int64(c->get, 3);
        reply->completion_tokens = sqlite3_column_int64(c->get, 4);
        hit = reply->text != NULL;
    }
    sqlite3_reset(c->get);
    if (hit)
        c->hits++;
    else
        c->misses++;
    pthread_mutex_unlock(&c->mu);
    return hit;
}

static void cache_put(struct af_llm_cache *c, const char *key, const struct af_llm_reply *r)
{
    pthread_mutex_lock(&c->mu);
    sqlite3_reset(c->put);
    sqlite3_bind_text(c->put, 1, key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(c->put, 2, r->text, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(c->put, 3, r->model, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(c->put, 4, r->finish_reason, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(c->put, 5, r->prompt_tokens);
    sqlite3_bind_int64(c->put, 6, r->completion_tokens);
    if (sqlite3_step(c->put) != SQLITE_DONE)
        fprintf(stderr, "agentflow: warning: cache '%s': cannot store a reply: %s\n", c->path,
                sqlite3_errmsg(c->db));
    sqlite3_reset(c->put);
    pthread_mutex_unlock(&c->mu);
}

static int cache_chat(void *self, const struct af_llm_request *req, struct af_llm_reply *reply)
{
    struct cache_llm *cl = self;
    if (!(cl->flags & AF_LLM_CACHE_ALL) && req->sampling.temperature > 0.0)
        return af_llm_chat(cl->inner, req, reply);
    char key[33];
    request_key(cl, req, key);
    if (cache_get(cl->cache, key, reply)) {
        reply->n_attempts = 0;
        return AF_OK;
    }
    int rc = af_llm_chat(cl->inner, req, reply);
    if (rc == AF_OK && reply->text)
        cache_put(cl->cache, key, reply);
    return rc;
}

static void cache_llm_free(void *self)
{
    free(self);
}

static const char *cache_describe(void *self)
{
    const struct cache_llm *cl = self;
    return af_llm_describe(cl->inner);
}

static const struct af_llm_ops cache_ops = {
    .kind = "cache",
    .chat = cache_chat,
    .free = cache_llm_free,
    .describe = cache_describe,
};

struct af_llm *af_llm_cache_wrap(struct af_llm_cache *c, struct af_llm *inner, int flags)
{
    struct cache_llm *cl = af_xcalloc(1, sizeof *cl);
    cl->cache = c;
    cl->inner = inner;
    cl->flags = flags;
    return af_llm_new_custom(&cache_ops, cl);
}
