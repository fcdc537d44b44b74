/*
 * drip_server.h - test helper: a hostile HTTP server on 127.0.0.1 that answers every request
 * with a 200 header at once, then drips its body one byte at a time, for the tests that a
 * stalled or dripping reply cannot hang a call past its deadline.
 *
 * One thread accepts and serves connections one after another; a connection ends when the
 * client closes it or the server stops. Safe to stop from any thread.
 */
#ifndef AF_TEST_DRIP_SERVER_H
#define AF_TEST_DRIP_SERVER_H

struct drip_server;

/* Starts the server; each byte of a body follows the previous after interval_ms. NULL when it
 * cannot start. Owned by the caller: drip_server_stop. */
struct drip_server *drip_server_start(int interval_ms);

/* Stops the server, closes any connection and joins the thread. Accepts NULL. */
void drip_server_stop(struct drip_server *ds);

/* "http://127.0.0.1:PORT/v1". Borrowed, valid until drip_server_stop. */
const char *drip_server_url(const struct drip_server *ds);

/* Connections accepted so far. */
int drip_server_connections(struct drip_server *ds);

#endif
