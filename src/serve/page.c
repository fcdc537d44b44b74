/*
 * page.c - GET / and its assets: the live page, served from the files compiled in
 * (web_data.h). Each is sent with a strict Content-Security-Policy: the page loads nothing
 * from elsewhere and runs no inline script, so model or tool text that slipped past the
 * page's escaping still could not run.
 */
#include <string.h>

#include "serve/serve_int.h"
#include "serve/web_data.h"

static const char CSP[] = "default-src 'self'; script-src 'self'; style-src 'self'; "
                          "img-src 'self' data:; connect-src 'self'; object-src 'none'; "
                          "base-uri 'none'; frame-ancestors 'none'";

static const char *content_type(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (dot && strcmp(dot, ".js") == 0)
        return "text/javascript; charset=utf-8";
    if (dot && strcmp(dot, ".css") == 0)
        return "text/css; charset=utf-8";
    return "text/html; charset=utf-8";
}

int serve_page(struct req *rq, const char *url, enum MHD_Result *ret)
{
    const char *name = strcmp(url, "/") == 0 ? "index.html" : url[0] == '/' ? url + 1 : url;
    for (const struct af_web_file *f = af_web_files; f->name; f++) {
        if (strcmp(f->name, name) != 0)
            continue;
        struct MHD_Response *r = MHD_create_response_from_buffer(
            f->size, (void *)(uintptr_t)f->data, MHD_RESPMEM_PERSISTENT);
        if (!r) {
            *ret = MHD_NO;
            return 1;
        }
        MHD_add_response_header(r, "Content-Type", content_type(f->name));
        MHD_add_response_header(r, "Content-Security-Policy", CSP);
        MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
        rq->route = "page";
        *ret = serve_reply(rq, 200, r);
        return 1;
    }
    return 0;
}
