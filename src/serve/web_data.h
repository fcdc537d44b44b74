/*
 * web_data.h - the files of the page at GET / (src/serve/web/), compiled in by scripts/embed.c
 * into build/MODE/gen/web_data.c, so that the server needs no file and no network.
 */
#ifndef AF_SERVE_WEB_DATA_H
#define AF_SERVE_WEB_DATA_H

#include <stddef.h>

struct af_web_file {
    const char *name; /* base name, e.g. "index.html" */
    const char *data; /* NUL-terminated */
    size_t size;      /* bytes, without the NUL */
};

/* Terminated by an entry with name == NULL. */
extern const struct af_web_file af_web_files[];

#endif
