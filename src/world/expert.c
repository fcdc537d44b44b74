/*
 * expert.c - the scripted expert: an LLM back-end that knows every world question's solution
 * and answers each flow module as a good agent would (query analysis, planner steps,
 * executor commands, verifier verdicts, the final answer). The real flow runs on its replies
 * with the real tools, so its traces hold real tool results; `world traces` turns them into
 * SFT data.
 *
 * It knows which module asks from af_llm_request.module, and which question from the
 * "Query: ..." line that every template starts with. A solve's progress (how many planner
 * turns) is kept per query and restarts with each query analysis, so concurrent solves of
 * different questions do not mix. With noise > 0 a drawn share of the solves is imperfect
 * (a wrong tool, a redundant step, an early STOP, a repeated sub-goal): the stand-in for
 * SFT on a weaker teacher's trajectories.
 */
#include "agentflow/world.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentflow/llm.h"
#include "core/buf.h"
#include "core/errf.h"
#include "core/fileio.h"
#include "core/jsonx.h"
#include "core/xalloc.h"
#include "world/world_int.h"

#define WIKI "Wikipedia_RAG_Search_Tool"
#define PY "Python_Code_Generator_Tool"
#define GENERALIST "Generalist_Solution_Generator_Tool"

enum noise_kind { NOISE_NONE, NOISE_WRONG_TOOL, NOISE_REDUNDANT, NOISE_EARLY_STOP, NOISE_REPEAT };

struct action {
    const char *tool; /* WIKI or PY */
    char *arg;        /* the search words or the Python code (owned) */
    char *goal;       /* the sub-goal sentence (owned) */
    char *learned;    /* what the step adds to the context, e.g. "X: born 1790." (owned) */
};

/* One turn of a solve: an action, or the wrong tool instead of one. */
struct turn {
    int action; /* index into plan */
    int wrong;  /* use GENERALIST with the action's goal */
};

struct solve {
    char *query; /* owned key */
    struct action *plan;
    int n_plan;
    struct turn turns[16];
    int n_turns;
    int stop_after; /* the verifier says STOP after this many turns */
    int turn;       /* planner replies given so far */
    int noise;
};

struct expert {
    json_t *items; /* query -> item */
    double noise;
    uint64_t seed;
    pthread_mutex_t mu;
    struct solve *solves;
    size_t n_solves;
};

static void action_free(struct action *a)
{
    free(a->arg);
    free(a->goal);
    free(a->learned);
}

static void solve_clear(struct solve *s)
{
    for (int i = 0; i < s->n_plan; i++)
        action_free(&s->plan[i]);
    free(s->plan);
    s->plan = NULL;
    s->n_plan = s->n_turns = s->turn = 0;
}

static void expert_free(void *p)
{
    struct expert *e = p;
    if (!e)
        return;
    for (size_t i = 0; i < e->n_solves; i++) {
        solve_clear(&e->solves[i]);
        free(e->solves[i].query);
    }
    free(e->solves);
    json_decref(e->items);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

static const char *fact_phrase(const char *fact)
{
    static const char *const map[][2] = {{"born", "year of birth"},
                                         {"born in", "birthplace"},
                                         {"died", "year of death"},
                                         {"member of", "organisation"},
                                         {"founded", "founding year"},
                                         {"established", "founding year"},
                                         {"founded by", "founder"},
                                         {"headquarters", "headquarters"},
                                         {"members", "number of members"},
                                         {"creator", "creator"},
                                         {"completed", "year of completion"},
                                         {"length", "length"},
                                         {"population", "population"},
                                         {"capital", "capital"},
                                         {"country", "country"},
                                         {"occupation", "occupation"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(map[i][0], fact) == 0)
            return map[i][1];
    return fact;
}

static void value_text(const json_t *v, char *out, size_t len)
{
    if (json_is_string(v))
        snprintf(out, len, "%s", json_string_value(v));
    else
        snprintf(out, len, "%lld", (long long)json_integer_value(v));
}

/* A Python program that searches every order, operation and bracketing of the numbers and
 * prints the first expression equal to 24. The same program for every puzzle: the skill is
 * handing the search to the tool. */
static char *solver_code(const json_t *nums)
{
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    (void)af_buf_puts(&b, "from itertools import permutations, product\nnums = [");
    for (size_t i = 0; i < json_array_size(nums); i++)
        (void)af_buf_printf(&b, "%s%lld", i ? ", " : "",
                            (long long)json_integer_value(json_array_get(nums, i)));
    (void)af_buf_puts(&b, "]\nforms = ['(({0}{4}{1}){5}{2}){6}{3}', '({0}{4}{1}){5}({2}{6}{3})',\n"
                          "         '({0}{4}({1}{5}{2})){6}{3}', '{0}{4}(({1}{5}{2}){6}{3})',\n"
                          "         '{0}{4}({1}{5}({2}{6}{3}))']\n"
                          "def find():\n"
                          "    for n in permutations(nums):\n"
                          "        for ops in product('+-*/', repeat=3):\n"
                          "            for f in forms:\n"
                          "                e = f.format(*n, *ops)\n"
                          "                try:\n"
                          "                    if abs(eval(e) - 24) < 1e-9:\n"
                          "                        return e\n"
                          "                except ZeroDivisionError:\n"
                          "                    pass\n"
                          "    return 'no solution'\n"
                          "print(find())\n");
    return af_buf_detach(&b);
}

/* Turns an item's solution into actions: consecutive searches of one entity become one. */
static void make_plan(const json_t *item, struct solve *s)
{
    const json_t *sol = json_object_get(item, "solution");
    s->plan = af_xcalloc(json_array_size(sol) + 1, sizeof *s->plan);
    s->n_plan = 0;
    size_t i = 0;
    while (i < json_array_size(sol)) {
        const json_t *st = json_array_get(sol, i);
        struct action *a = &s->plan[s->n_plan++];
        const char *q = json_string_value(json_object_get(st, "query"));
        char v[256];
        if (q) {
            struct af_buf goal, learned;
            af_buf_init(&goal, AF_BUF_NOLIMIT);
            af_buf_init(&learned, AF_BUF_NOLIMIT);
            (void)af_buf_printf(&goal, "Search the encyclopedia for %s to find its ", q);
            (void)af_buf_printf(&learned, "%s:", q);
            size_t j = i;
            for (; j < json_array_size(sol); j++) {
                const json_t *sj = json_array_get(sol, j);
                const char *qj = json_string_value(json_object_get(sj, "query"));
                if (!qj || strcmp(qj, q) != 0)
                    break;
                const char *ph = fact_phrase(json_string_value(json_object_get(sj, "fact")));
                value_text(json_object_get(sj, "value"), v, sizeof v);
                (void)af_buf_printf(&goal, "%s%s", j > i ? " and " : "", ph);
                (void)af_buf_printf(&learned, "%s %s %s", j > i ? "," : "", ph, v);
            }
            (void)af_buf_puts(&goal, ".");
            (void)af_buf_puts(&learned, ".");
            a->tool = WIKI;
            a->arg = af_xstrdup(q);
            a->goal = af_buf_detach(&goal);
            a->learned = af_buf_detach(&learned);
            i = j;
        } else {
            const char *code = json_string_value(json_object_get(st, "code"));
            const json_t *nums = json_object_get(st, "search24");
            value_text(json_object_get(st, "value"), v, sizeof v);
            a->tool = PY;
            if (code) {
                a->arg = af_xstrdup(code);
                /* "print(1738 - 1704)" -> "Compute 1738 - 1704 with Python." */
                size_t n = strlen(code);
                struct af_buf g;
                af_buf_init(&g, AF_BUF_NOLIMIT);
                (void)af_buf_printf(&g, "Compute %.*s with Python.", (int)(n > 7 ? n - 7 : 0),
                                    code + 6);
                a->goal = af_buf_detach(&g);
                struct af_buf l;
                af_buf_init(&l, AF_BUF_NOLIMIT);
                (void)af_buf_printf(&l, "%.*s = %s.", (int)(n > 7 ? n - 7 : 0), code + 6, v);
                a->learned = af_buf_detach(&l);
            } else {
                a->arg = solver_code(nums);
                a->goal = af_xstrdup("Search with Python for an expression of the four numbers "
                                     "that equals 24.");
                a->learned = af_xstrdup("Python found an expression equal to 24.");
            }
            i++;
        }
    }
}

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The turns of a solve: the plan in order, with at most one imperfection drawn per solve. */
static void plan_turns(struct expert *e, struct solve *s)
{
    struct wrng r;
    wrng_seed(&r, e->seed ^ hash_str(s->query));
    s->noise = NOISE_NONE;
    if ((double)(wrng_next(&r) >> 11) * 0x1.0p-53 < e->noise)
        s->noise = wrng_range(&r, NOISE_WRONG_TOOL, NOISE_REPEAT);
    if (s->noise == NOISE_EARLY_STOP && s->n_plan < 2)
        s->noise = NOISE_WRONG_TOOL;
    int at = wrng_range(&r, 0, s->n_plan - 1);
    s->n_turns = 0;
    for (int k = 0; k < s->n_plan; k++) {
        if (s->noise == NOISE_WRONG_TOOL && k == at)
            s->turns[s->n_turns++] = (struct turn){k, 1};
        s->turns[s->n_turns++] = (struct turn){k, 0};
        if ((s->noise == NOISE_REDUNDANT || s->noise == NOISE_REPEAT) && k == at)
            s->turns[s->n_turns++] = (struct turn){k, 0};
    }
    s->stop_after = s->n_turns;
    if (s->noise == NOISE_EARLY_STOP)
        s->stop_after = wrng_range(&r, 1, s->n_plan - 1);
}

/* The query of a prompt: the rest of its first line after "Query: ". Malloc'd or NULL. */
static char *prompt_query(const struct af_llm_request *req)
{
    for (size_t i = 0; i < req->n_msgs; i++) {
        const char *c = req->msgs[i].content;
        if (!c || !req->msgs[i].role || strcmp(req->msgs[i].role, "user") != 0)
            continue;
        const char *q = strstr(c, "Query: ");
        if (!q)
            continue;
        q += 7;
        return af_xstrndup(q, strcspn(q, "\n"));
    }
    return NULL;
}

static struct solve *find_solve(struct expert *e, const char *query, int create)
{
    for (size_t i = 0; i < e->n_solves; i++)
        if (strcmp(e->solves[i].query, query) == 0)
            return &e->solves[i];
    if (!create)
        return NULL;
    e->solves = af_xrealloc(e->solves, (e->n_solves + 1) * sizeof *e->solves);
    struct solve *s = &e->solves[e->n_solves++];
    memset(s, 0, sizeof *s);
    s->query = af_xstrdup(query);
    return s;
}

/* The printed output of the last Python run in the prompt's memory (the JSON rendering or the
 * compact one), trimmed; malloc'd, or NULL. */
static char *last_printed(const struct af_llm_request *req)
{
    const char *c = req->n_msgs > 1 ? req->msgs[1].content : NULL, *hit = NULL;
    for (const char *p = c; p && (p = strstr(p, "\"printed_output\": \"")); p++)
        hit = p;
    if (!hit) {
        /* The compact memory: "Result: <printed text>" on the last step's line. */
        for (const char *p = c; p && (p = strstr(p, "\nResult: ")); p++)
            hit = p;
        if (!hit)
            return NULL;
        hit += 9;
        return af_xstrndup(hit, strcspn(hit, "\n"));
    }
    hit = strchr(hit, ':') + 1;
    while (*hit == ' ')
        hit++;
    const char *end = hit + 1;
    while (*end && !(*end == '"' && end[-1] != '\\'))
        end++;
    char *json = af_xstrndup(hit, (size_t)(end - hit) + 1);
    json_t *j = json_loads(json, JSON_DECODE_ANY, NULL);
    free(json);
    const char *s = json_string_value(j);
    char *out = NULL;
    if (s) {
        size_t n = strlen(s);
        while (n && (s[n - 1] == '\n' || s[n - 1] == ' '))
            n--;
        out = af_xstrndup(s, n);
    }
    json_decref(j);
    return out;
}

static void known_so_far(const struct solve *s, int upto, struct af_buf *b)
{
    int any = 0;
    for (int t = 0; t < upto && t < s->n_turns; t++) {
        const struct turn *tu = &s->turns[t];
        if (tu->wrong)
            continue;
        /* A repeated action adds nothing new to say. */
        int dup = 0;
        for (int u = 0; u < t; u++)
            dup |= !s->turns[u].wrong && s->turns[u].action == tu->action;
        if (dup)
            continue;
        (void)af_buf_printf(b, "%s%s", any ? " " : "", s->plan[tu->action].learned);
        any = 1;
    }
    if (!any)
        (void)af_buf_puts(b, "Nothing has been looked up yet.");
}

static void reply_analysis(const json_t *item, const struct solve *s, struct af_buf *b)
{
    const char *family = json_string_value(json_object_get(item, "family"));
    family = family ? family : "";
    const char *first = s->n_plan ? s->plan[0].arg : "";
    if (!strcmp(family, "lookup"))
        (void)af_buf_printf(&*b,
                            "Concise Summary: The query asks for one fact about %s.\n"
                            "Required Skills: looking a fact up\n"
                            "Relevant Tools: " WIKI " finds the passages about %s.\n"
                            "Additional Considerations: The name is not widely known; the answer "
                            "must come from a search.",
                            first, first);
    else if (!strcmp(family, "multihop"))
        (void)af_buf_printf(b,
                            "Concise Summary: The query needs a chain of %d facts, starting from "
                            "%s.\n"
                            "Required Skills: following facts from one entity to the next\n"
                            "Relevant Tools: " WIKI " finds each entity's passages.\n"
                            "Additional Considerations: Each search needs the name found by the "
                            "one before.",
                            s->n_plan, first);
    else if (!strcmp(family, "calc"))
        (void)af_buf_printf(b,
                            "Concise Summary: The query needs numbers about %s, then arithmetic.\n"
                            "Required Skills: looking facts up, arithmetic\n"
                            "Relevant Tools: " WIKI " finds the numbers; " PY
                            " does the arithmetic.\n"
                            "Additional Considerations: Compute with the tool, not by hand.",
                            first);
    else if (!strcmp(family, "arith"))
        (void)af_buf_puts(b, "Concise Summary: An arithmetic word problem.\n"
                             "Required Skills: arithmetic\n"
                             "Relevant Tools: " PY " computes the result.\n"
                             "Additional Considerations: Write the whole computation as one "
                             "expression.");
    else
        (void)af_buf_puts(b, "Concise Summary: Combine four numbers into 24.\n"
                             "Required Skills: searching over expressions\n"
                             "Relevant Tools: " PY " can try every expression.\n"
                             "Additional Considerations: Use each number exactly once.");
}

static void reply_planner(const struct solve *s, struct af_buf *b)
{
    int t = s->turn < s->n_turns ? s->turn : s->n_turns - 1;
    const struct turn *tu = &s->turns[t];
    const struct action *a = &s->plan[tu->action];
    (void)af_buf_puts(b, "Justification: ");
    if (tu->wrong)
        (void)af_buf_puts(b, "A general answer may already know this.\n");
    else if (!strcmp(a->tool, WIKI))
        (void)af_buf_printf(b, "The passages about %s hold the missing fact.\n", a->arg);
    else
        (void)af_buf_puts(b, "The numbers are known; the computation is left.\n");
    (void)af_buf_puts(b, "Context: ");
    known_so_far(s, t, b);
    (void)af_buf_printf(b, "\nSub-Goal: %s\nTool Name: %s", a->goal,
                        tu->wrong ? GENERALIST : a->tool);
}

static void reply_executor(const struct solve *s, struct af_buf *b)
{
    int t = s->turn > 0 ? s->turn - 1 : 0;
    const struct turn *tu = &s->turns[t < s->n_turns ? t : s->n_turns - 1];
    const struct action *a = &s->plan[tu->action];
    json_t *lit = json_string(tu->wrong ? a->goal : a->arg);
    char *q = json_dumps(lit, JSON_ENCODE_ANY);
    json_decref(lit);
    if (tu->wrong)
        (void)af_buf_printf(
            b,
            "Analysis: Ask for the fact directly.\n"
            "Command Explanation: The sub-goal as the query.\n"
            "Generated Command:\n```python\nexecution = tool.execute(query=%s)\n```",
            q);
    else if (!strcmp(a->tool, WIKI))
        (void)af_buf_printf(b,
                            "Analysis: Find the passages about %s.\n"
                            "Command Explanation: The name as the query, three passages.\n"
                            "Generated Command:\n```python\nexecution = tool.execute(query=%s, "
                            "k=3)\n```",
                            a->arg, q);
    else
        (void)af_buf_printf(b,
                            "Analysis: Run the computation.\n"
                            "Command Explanation: The code prints the result.\n"
                            "Generated Command:\n```python\nexecution = tool.execute(code=%s)\n```",
                            q);
    free(q);
}

static void reply_verifier(const struct solve *s, struct af_buf *b)
{
    if (s->turn >= s->stop_after) {
        (void)af_buf_puts(b, "Known: ");
        known_so_far(s, s->turn, b);
        (void)af_buf_puts(b, "\nThis is enough to answer.\nConclusion: STOP");
        return;
    }
    const struct turn *next = &s->turns[s->turn < s->n_turns ? s->turn : s->n_turns - 1];
    (void)af_buf_printf(b, "Still missing: %s\nConclusion: CONTINUE", s->plan[next->action].goal);
}

/* The answer a solve reaches: the gold when every step ran, else what the last step gave. */
static char *solve_answer(const json_t *item, const struct solve *s,
                          const struct af_llm_request *req)
{
    const char *family = json_string_value(json_object_get(item, "family"));
    if (family && !strcmp(family, "24")) {
        char *p = last_printed(req);
        return p ? p : af_xstrdup("no solution");
    }
    const json_t *ans = json_object_get(item, "answer");
    if (s->stop_after < s->n_turns) {
        /* Stopped early: the value of the last step taken, which answers another question. */
        const json_t *sol = json_object_get(item, "solution");
        ans = json_object_get(json_array_get(sol, 0), "value");
    }
    if (json_is_array(ans))
        ans = json_array_get(ans, 0);
    char v[256];
    value_text(ans, v, sizeof v);
    return af_xstrdup(v);
}

static int expert_chat(void *p, const struct af_llm_request *req, struct af_llm_reply *reply)
{
    struct expert *e = p;
    reply->n_attempts = 1;
    reply->model = af_xstrdup("world-expert");
    const char *mod = req->module;
    if (!mod) {
        /* A tool's own LLM call (the generalist): it knows nothing of this world. */
        reply->text = af_xstrdup("I have no reliable information about that; the encyclopedia "
                                 "search would know.");
        reply->finish_reason = af_xstrdup("stop");
        return AF_OK;
    }
    char *query = prompt_query(req);
    const json_t *item = query ? json_object_get(e->items, query) : NULL;
    if (!item) {
        struct af_buf m;
        af_buf_init(&m, 4096);
        (void)af_buf_printf(&m, "world expert: '%.200s' is not a question of this world",
                            query ? query : "(no 'Query:' line in the prompt)");
        reply->errmsg = af_buf_detach(&m);
        free(query);
        return AF_ENOTFOUND;
    }
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    pthread_mutex_lock(&e->mu);
    struct solve *s = find_solve(e, query, !strcmp(mod, "query_analysis"));
    int rc = AF_OK;
    if (!s) {
        rc = AF_EINVAL;
    } else if (!strcmp(mod, "query_analysis")) {
        solve_clear(s);
        make_plan(item, s);
        plan_turns(e, s);
        reply_analysis(item, s, &b);
    } else if (!strcmp(mod, "planner")) {
        reply_planner(s, &b);
        s->turn++;
    } else if (!strcmp(mod, "executor")) {
        reply_executor(s, &b);
    } else if (!strcmp(mod, "verifier")) {
        reply_verifier(s, &b);
    } else {
        char *ans = solve_answer(item, s, req);
        if (!strcmp(mod, "direct_output")) {
            (void)af_buf_puts(&b, "**Process Summary:** ");
            known_so_far(s, s->turn, &b);
            (void)af_buf_printf(&b, "\n**Answer:** %s", ans);
        } else {
            known_so_far(s, s->turn, &b);
            (void)af_buf_printf(&b, " So the answer is %s.", ans);
        }
        free(ans);
    }
    pthread_mutex_unlock(&e->mu);
    free(query);
    if (rc != AF_OK) {
        af_buf_deinit(&b);
        reply->errmsg = af_xstrdup("world expert: a module was called before the query analysis");
        return rc;
    }
    reply->text = af_buf_detach(&b);
    reply->finish_reason = af_xstrdup("stop");
    reply->prompt_tokens = 0;
    for (size_t i = 0; i < req->n_msgs; i++)
        reply->prompt_tokens += req->msgs[i].content ? (int64_t)strlen(req->msgs[i].content) : 0;
    reply->completion_tokens = (int64_t)strlen(reply->text);
    return AF_OK;
}

static const struct af_llm_ops expert_ops = {
    .kind = "world-expert",
    .chat = expert_chat,
    .free = expert_free,
    .describe = NULL,
};

static int load_items(const char *dir, json_t *items, char *err, size_t errlen)
{
    static const char *const splits[] = {"train", "val", "test"};
    size_t n = 0;
    for (const char *const *b = af_world_benchmarks(); *b; b++)
        for (int s = 0; s < 3; s++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/benchmarks/%s/%s.jsonl", dir, *b, splits[s]);
            char *data = NULL;
            size_t len = 0;
            int rc = af_file_read(path, 256u << 20, &data, &len, err, errlen);
            if (rc != AF_OK)
                return rc;
            size_t line = 0;
            for (char *p = data, *nl; p && *p; p = nl ? nl + 1 : NULL) {
                nl = strchr(p, '\n');
                if (nl)
                    *nl = '\0';
                line++;
                if (!*p)
                    continue;
                json_error_t je;
                json_t *it = json_loads(p, 0, &je);
                const char *q = json_string_value(json_object_get(it, "query"));
                if (!q || !json_is_array(json_object_get(it, "solution"))) {
                    af_errf(err, errlen,
                            "%s:%zu: not a world question (needs \"query\" and "
                            "\"solution\")",
                            path, line);
                    json_decref(it);
                    free(data);
                    return AF_EPARSE;
                }
                json_object_set_new(items, q, it);
                n++;
            }
            free(data);
        }
    if (n == 0) {
        af_errf(err, errlen, "%s/benchmarks: no world questions", dir);
        return AF_EPARSE;
    }
    return AF_OK;
}

struct af_llm *af_world_expert_new(const char *dir, double noise, uint64_t seed, char *err,
                                   size_t errlen)
{
    if (!dir || noise < 0 || noise > 1) {
        af_errf(err, errlen, "world expert: needs a world folder and a noise in [0, 1]");
        return NULL;
    }
    struct expert *e = af_xcalloc(1, sizeof *e);
    e->items = json_object();
    e->noise = noise;
    e->seed = seed;
    pthread_mutex_init(&e->mu, NULL);
    if (load_items(dir, e->items, err, errlen) != AF_OK) {
        expert_free(e);
        return NULL;
    }
    return af_llm_new_custom(&expert_ops, e);
}
