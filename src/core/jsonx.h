/*
 * jsonx.h - small helpers over jansson that every module needs.
 *
 * jansson rejects strings that are not valid UTF-8; model output and tool output can contain
 * anything, so text from outside goes through af_json_text, which repairs it.
 */
#ifndef AF_CORE_JSONX_H
#define AF_CORE_JSONX_H

#include <jansson.h>
#include <stddef.h>

/* The json_dumps flag for JSON that people and other programs read (CLI output, results,
 * memory as the model sees it): reals with 9 significant digits, enough for any float and for
 * our timings, without the 17-digit noise of an exact double (0.80000000000000004). Files
 * that must round-trip a double bit for bit (checkpoints, cache keys) do not use it. */
#define AF_JSON_REAL_OUT JSON_REAL_PRECISION(9)

/* A JSON string of s (NULL -> ""), with invalid UTF-8 bytes replaced by U+FFFD. New ref. */
json_t *af_json_text(const char *s);
json_t *af_json_textn(const char *s, size_t len);
/* A malloc'd copy of s with invalid UTF-8 bytes replaced by U+FFFD. */
char *af_utf8_repair(const char *s, size_t len);
/* Returns the string member `key` of obj, or NULL when absent or not a string. Borrowed. */
const char *af_json_get_str(const json_t *obj, const char *key);
/* Reads `path` (at most `limit` bytes) as a JSON object. NULL on failure, with a message in
 * err naming the file (and the line and column of a parse error). New ref. */
json_t *af_json_load_object(const char *path, size_t limit, char *err, size_t errlen);
/* Adds n to the integer member `key` of obj (created as 0 first). */
void af_json_add_int(json_t *obj, const char *key, json_int_t n);

#endif
