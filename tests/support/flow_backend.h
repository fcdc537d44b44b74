/*
 * flow_backend.h - benchmark helper: a fake OpenAI-compatible server with a fixed latency and
 * the replies of a three-step solve of "What is 6 times 7?", run in a child process so that
 * its CPU is not the measured program's.
 */
#ifndef AF_TEST_FLOW_BACKEND_H
#define AF_TEST_FLOW_BACKEND_H

#include <stddef.h>
#include <sys/types.h>

/* Starts the server (every reply delayed by delay_ms) and writes its base URL into url.
 * Returns the child's pid (kill it with SIGTERM when done), or -1. */
pid_t flow_backend_spawn(int delay_ms, char *url, size_t urllen);

#endif
