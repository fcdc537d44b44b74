/*
 * jsonx.c - jansson helpers: UTF-8 repair, typed getters, counters.
 */
#include "core/jsonx.h"

#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/errf.h"
#include "core/fileio.h"
#include "core/utf8.h"

char *af_utf8_repair(const char *s, size_t len)
{
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        size_t k = p[i] ? af_utf8_seq(p + i, len - i) : 0;
        if (k) {
            (void)af_buf_append(&b, p + i, k);
            i += k;
        } else {
            (void)af_buf_puts(&b, p[i] ? "\xEF\xBF\xBD" : "");
            i++;
        }
    }
    return af_buf_detach(&b);
}

json_t *af_json_textn(const char *s, size_t len)
{
    if (!s)
        return json_string("");
    json_t *j = json_stringn(s, len);
    if (j)
        return j;
    char *fixed = af_utf8_repair(s, len);
    j = json_string(fixed);
    free(fixed);
    return j ? j : json_string("");
}

json_t *af_json_text(const char *s)
{
    return af_json_textn(s, s ? strlen(s) : 0);
}

const char *af_json_get_str(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

void af_json_add_int(json_t *obj, const char *key, json_int_t n)
{
    json_t *v = json_object_get(obj, key);
    json_int_t cur = json_is_integer(v) ? json_integer_value(v) : 0;
    json_object_set_new(obj, key, json_integer(cur + n));
}

json_t *af_json_load_object(const char *path, size_t limit, char *err, size_t errlen)
{
    char *text = NULL;
    if (af_file_read(path, limit, &text, NULL, err, errlen))
        return NULL;
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    free(text);
    if (!json_is_object(j)) {
        af_errf(err, errlen, "%s: line %d column %d: %s", path, je.line, je.column,
                j ? "not a JSON object" : je.text);
        json_decref(j);
        return NULL;
    }
    return j;
}
