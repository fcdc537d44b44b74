/*
 * utf8.h - strict UTF-8 checks and encoding, shared by the JSON helpers, the index build's row
 * scanner and the tokenizer.
 */
#ifndef AF_CORE_UTF8_H
#define AF_CORE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length of the valid UTF-8 sequence at p (at most n bytes, n >= 1), or 0 when it is invalid:
 * overlong forms, surrogates and values past U+10FFFF are rejected, as jansson rejects them. */
size_t af_utf8_seq(const unsigned char *p, size_t n);

/* Writes code point c (at most U+10FFFF) as 1 to 4 bytes at o. Returns the count. */
size_t af_utf8_put(uint32_t c, char *o);

#endif
