/*
 * fake_server.h - test helper: a loopback OpenAI-compatible chat completions server on
 * libmicrohttpd, for the HTTP back-end tests, the CLI end-to-end tests and the benchmarks.
 *
 * It listens on 127.0.0.1 at a free port and serves POST /v1/chat/completions, one thread per
 * connection, so many slow requests are answered concurrently. Each request is answered by,
 * in this order of priority:
 *   1. the next entry of a FIFO queue of canned responses (fake_server_push);
 *   2. the first rule whose substring occurs in the last user message (fake_server_add_rule),
 *      as a well-formed chat completion; rules are never used up;
 *   3. the default responder (fake_server_set_default); before one is set, a 404 whose
 *      {"error":{"message":...}} says that nothing matched.
 * Other paths get 404 and other methods 405, without using a queue entry. Bodies over 16 MiB
 * get 413. Every request, whatever its answer, is counted and recorded.
 *
 * Thread-safety: every function is safe from any thread, concurrently with the server
 * answering requests. There is no global state: several servers can run at once.
 * Set FAKE_SERVER_LOG=1 in the environment to see libmicrohttpd's error log.
 */
#ifndef AF_TEST_FAKE_SERVER_H
#define AF_TEST_FAKE_SERVER_H

#include <stddef.h>

struct fake_server;

/* Starts a server on 127.0.0.1 at a free port. Returns NULL when it cannot. Owned by the
 * caller: fake_server_stop. */
struct fake_server *fake_server_start(void);

/* Wakes any request that is waiting out a delay (it is dropped unanswered), stops the server,
 * joins its threads and frees everything. Accepts NULL. */
void fake_server_stop(struct fake_server *fs);

/* "http://127.0.0.1:PORT/v1", a base URL for the OpenAI back-end. Borrowed, valid until
 * fake_server_stop. */
const char *fake_server_url(const struct fake_server *fs);

/* The TCP port the server listens on. */
int fake_server_port(const struct fake_server *fs);

/* Queues one canned response: HTTP `status` with `body` (copied; NULL = empty) as
 * application/json, plus one extra header when extra_header_name is not NULL (both copied),
 * sent after waiting delay_ms (plus the base delay, fake_server_set_delay). */
void fake_server_push(struct fake_server *fs, int status, const char *body,
                      const char *extra_header_name, const char *extra_header_value, int delay_ms);

/* Sets the response used when the queue is empty and no rule matches (body copied). */
void fake_server_set_default(struct fake_server *fs, int status, const char *body, int delay_ms);

/* Sets a base delay, in milliseconds, added before every response (queued, rule or default).
 * Default 0. */
void fake_server_set_delay(struct fake_server *fs, int delay_ms);

/* Adds a rule (strings copied): a request whose last "user" message content contains
 * match_substring is answered HTTP 200 with a chat completion whose content is reply_text,
 * finish_reason "stop", the request's model, and usage {prompt_tokens: request body bytes / 4,
 * completion_tokens: reply bytes / 4} (rounded up). Rules are tried in the order added. */
void fake_server_add_rule(struct fake_server *fs, const char *match_substring,
                          const char *reply_text);

/* A valid chat completion JSON document whose choices[0].message.content is `content`
 * (NULL gives a JSON null), model "fake-model", finish_reason "stop", usage
 * {prompt_tokens: 8, completion_tokens: bytes / 4 rounded up}. Owned by the caller: free(). */
char *fake_server_chat_body(const char *content);

/* The number of requests received so far, on any path. */
size_t fake_server_request_count(struct fake_server *fs);

/* Copies of the last request's body, path ("/v1/chat/completions") and the value of its
 * header `name` (case-insensitive). Owned by the caller: free(). Body and path are "" before
 * the first request; the header is NULL when absent. */
char *fake_server_last_request(struct fake_server *fs);
char *fake_server_last_path(struct fake_server *fs);
char *fake_server_last_header(struct fake_server *fs, const char *name);

#endif
