/*
 * judge.c - the LLM-judge scorer: our own grading prompt and the verdict parser.
 */
#include "eval/judge.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/buf.h"
#include "core/errf.h"
#include "core/xalloc.h"

static const char JUDGE_SYSTEM[] = "You grade answers to benchmark questions fairly and briefly.";

void eval_judge_init(struct eval_judge *j, struct af_llm *llm, const char *model)
{
    memset(j, 0, sizeof *j);
    j->llm = llm;
    j->model = model;
    j->sampling = af_llm_default_sampling();
    j->sampling.max_tokens = 512;
}

/* Gold as text: a string as is, a list as "a" or "b", anything else as JSON. */
static void gold_text(struct af_buf *b, const json_t *gold)
{
    if (json_is_string(gold)) {
        (void)af_buf_puts(b, json_string_value(gold));
    } else if (json_is_array(gold)) {
        for (size_t i = 0; i < json_array_size(gold); i++) {
            if (i)
                (void)af_buf_puts(b, " (or) ");
            gold_text(b, json_array_get(gold, i));
        }
    } else {
        char *s = json_dumps(gold, JSON_ENCODE_ANY | JSON_COMPACT);
        (void)af_buf_puts(b, s ? s : "null");
        free(s);
    }
}

char *eval_judge_prompt(const char *query, const json_t *gold, const char *answer)
{
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    (void)af_buf_printf(
        &b,
        "Grade a response to a benchmark question. Decide whether the response's final answer "
        "is the same as the gold answer. Judge only the final answer: ignore formatting, "
        "wording, extra explanation and equivalent ways of writing the same value. For a "
        "multiple-choice question the chosen option must be the gold option. For a puzzle "
        "whose gold is one of several solutions, any valid solution counts.\n\n"
        "Question:\n%s\n\nGold answer:\n",
        query ? query : "");
    gold_text(&b, gold);
    (void)af_buf_printf(&b,
                        "\n\nResponse:\n%s\n\nReply with one short sentence of reasoning, then a "
                        "last line that is exactly \"Verdict: true\" or \"Verdict: false\".",
                        answer ? answer : "");
    return af_buf_detach(&b);
}

static int word_is(const char *p, const char *w)
{
    size_t n = strlen(w);
    return strncasecmp(p, w, n) == 0 && !isalnum((unsigned char)p[n]);
}

int eval_judge_parse(const char *reply)
{
    const char *last = NULL;
    for (const char *p = reply ? reply : ""; *p; p++)
        if (strncasecmp(p, "verdict", 7) == 0)
            last = p + 7;
    if (!last)
        return -1;
    while (*last == ':' || *last == '*' || *last == ' ' || *last == '\t' || *last == '"')
        last++;
    if (word_is(last, "true") || word_is(last, "yes") || word_is(last, "correct"))
        return 1;
    if (word_is(last, "false") || word_is(last, "no") || word_is(last, "incorrect"))
        return 0;
    return -1;
}

int eval_judge_item(const struct eval_judge *j, const char *query, const json_t *gold,
                    const char *answer, int *verdict, char **reply, char *err, size_t errlen)
{
    *verdict = -1;
    *reply = NULL;
    char *prompt = eval_judge_prompt(query, gold, answer);
    struct af_msg msgs[2] = {{"system", JUDGE_SYSTEM}, {"user", prompt}};
    struct af_llm_request req = {msgs, 2, j->sampling, j->model, 0};
    struct af_llm_reply rep;
    af_llm_reply_init(&rep);
    int rc = af_llm_chat(j->llm, &req, &rep);
    free(prompt);
    if (rc != AF_OK) {
        af_errf(err, errlen, "judge: %s", rep.errmsg ? rep.errmsg : af_strerror(rc));
    } else {
        *verdict = eval_judge_parse(rep.text);
        *reply = rep.text;
        rep.text = NULL;
    }
    af_llm_reply_deinit(&rep);
    return rc;
}
