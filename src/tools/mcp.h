/*
 * mcp.h - a Model Context Protocol client (JSON-RPC 2.0 over stdio or streamable HTTP).
 *
 * mcp_client_open spawns the server command as a child process in its own process group
 * (newline-delimited JSON on its stdin/stdout, its stderr inherited or sent to a file), runs the
 * lifecycle (initialize -> result -> notifications/initialized) and keeps the connection.
 * Requests carry increasing integer ids; replies with other ids (late answers to timed-out
 * requests) are skipped, requests from the server are answered (ping) or refused (-32601), and
 * notifications are ignored. Every read and write has a deadline; a reply line longer than
 * max_bytes is discarded and reported as AF_ETOOBIG. A server that exits, writes something other
 * than JSON, or does not answer in time gives an error naming the server command.
 *
 * With an http:// or https:// spec the streamable HTTP transport is used instead: each message
 * is POSTed to the URL (libcurl, Accept: application/json, text/event-stream), the reply is
 * taken from a JSON body or from the data of an SSE stream, the Mcp-Session-Id header from
 * initialize is sent on every later request (with MCP-Protocol-Version), and the session is
 * ended with DELETE when the client is freed. Requests from the server over HTTP are ignored,
 * and no standalone GET stream is opened.
 *
 * Thread-safety: a client may be used from any thread; requests are serialised on its mutex.
 * Clients are reference-counted (one reference per tool built on it); the last release shuts
 * the server down (stdin closed, then SIGTERM, then SIGKILL to its process group) and reaps it.
 */
#ifndef AF_TOOLS_MCP_H
#define AF_TOOLS_MCP_H

#include <jansson.h>
#include <stddef.h>

#include "agentflow/err.h"

#define MCP_DEFAULT_TIMEOUT_MS 30000.0
#define MCP_DEFAULT_MAX_BYTES ((size_t)1 << 20)
#define MCP_PROTOCOL_VERSION "2025-06-18"

struct mcp_params {
    const char *spec;        /* "CMD ARGS...", "stdio:CMD ARGS..." or an http(s) URL (borrowed) */
    double timeout_ms;       /* per request; <= 0 = MCP_DEFAULT_TIMEOUT_MS */
    size_t max_bytes;        /* cap on one message from the server; 0 = MCP_DEFAULT_MAX_BYTES */
    const char *stderr_path; /* NULL = inherit our stderr; else a file appended to */
};

struct mcp_client;

struct mcp_params mcp_default_params(void);

/* Splits a command line into words: blanks separate, '...' and "..." quote, backslash escapes
 * (outside single quotes). On success *argv_out is a NULL-terminated array owned by the caller
 * (free with mcp_argv_free) and *argc_out its length (>= 1). AF_EINVAL on an empty command or
 * an unterminated quote. */
AF_NODISCARD int mcp_split_command(const char *cmd, char ***argv_out, size_t *argc_out, char *err,
                                   size_t errlen);
void mcp_argv_free(char **argv);

/* Starts the server (or connects to the URL) and initialises the session. On success *out is a
 * new client owned by the caller (mcp_client_release). Errors: AF_EINVAL (bad spec), AF_EIO
 * (cannot start, it exited, or cannot connect), AF_EPARSE (not JSON-RPC), AF_ETIMEOUT,
 * AF_EBACKEND (an error response to initialize, or an HTTP error status); err names the server
 * command or URL. */
AF_NODISCARD int mcp_client_open(const struct mcp_params *p, struct mcp_client **out, char *err,
                                 size_t errlen);
void mcp_client_retain(struct mcp_client *c);
/* Drops a reference; the last one stops the server and frees the client. Accepts NULL. */
void mcp_client_release(struct mcp_client *c);

/* The command as given (without "stdio:"), and the server's serverInfo name/version ("" when
 * absent). Borrowed; valid while the client lives. */
const char *mcp_client_spec(const struct mcp_client *c);
const char *mcp_client_server_name(const struct mcp_client *c);
const char *mcp_client_server_version(const struct mcp_client *c);
/* The child's pid, or -1 once it has been reaped. */
long mcp_client_pid(const struct mcp_client *c);

/* Sends `method` with `params` (stolen; may be NULL) and waits for its reply until
 * min(now + timeout, deadline_ms) (deadline_ms 0 = none). On success *result is the reply's
 * result (owned by the caller). A JSON-RPC error reply gives AF_EBACKEND with its code and
 * message in err; transport failures give the codes of mcp_client_open. */
AF_NODISCARD int mcp_client_request(struct mcp_client *c, const char *method, json_t *params,
                                    double deadline_ms, json_t **result, char *err, size_t errlen);

/* tools/list, following nextCursor (at most 100 pages). *tools is a new array of the tool
 * objects {name, description, inputSchema, ...} owned by the caller. */
AF_NODISCARD int mcp_client_list_tools(struct mcp_client *c, json_t **tools, char *err,
                                       size_t errlen);

#endif
