/*
 * term.c - guards on what the CLI shows and writes: text from a model made safe to show on a
 * terminal, and one file named as both input and output refused.
 *
 * Model output may carry escape sequences (CSI, OSC: set the title, write the clipboard,
 * clear the screen). Printed to a terminal they would act; to a pipe or file the bytes are
 * the output and stay exact (and --json escapes them as JSON does).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/fileio.h"
#include "core/utf8.h"
#include "core/xalloc.h"

/* Length of the escape sequence at s[0] == ESC (n bytes left): CSI (ESC [ ... final byte),
 * OSC, DCS, SOS, PM and APC strings (to BEL or ESC \\, or the end), else ESC and one byte. */
static size_t escape_len(const char *s, size_t n)
{
    if (n < 2)
        return n;
    size_t i = 2;
    if (s[1] == '[') {
        while (i < n && !((unsigned char)s[i] >= 0x40 && (unsigned char)s[i] <= 0x7e))
            i++;
        return i < n ? i + 1 : n;
    }
    if (strchr("]PX^_", s[1])) {
        for (; i < n; i++) {
            if (s[i] == '\a')
                return i + 1;
            if (s[i] == 0x1b && i + 1 < n && s[i + 1] == '\\')
                return i + 2;
        }
        return n;
    }
    return 2;
}

char *cli_term_text(FILE *f, const char *s, int one_line)
{
    if (!s)
        s = "";
    if (!isatty(fileno(f)))
        return af_xstrdup(s);
    size_t n = strlen(s), o = 0;
    char *out = af_xmalloc(n * 3 + 1); /* an invalid byte becomes U+FFFD, 3 bytes */
    for (size_t i = 0; i < n;) {
        const unsigned char *p = (const unsigned char *)s + i;
        if (p[0] == 0x1b) { /* the whole sequence goes, not just its first byte */
            i += escape_len(s + i, n - i);
            continue;
        }
        size_t k = af_utf8_seq(p, n - i);
        if (k == 0) { /* a stray byte: 0x9b alone is CSI on some terminals */
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
            continue;
        }
        int c0 = k == 1 && (p[0] < 0x20 || p[0] == 0x7f);
        int c1 = k == 2 && p[0] == 0xc2 && p[1] < 0xa0; /* U+0080..U+009F */
        if (c0 && (p[0] == '\n' || p[0] == '\t'))
            out[o++] = one_line ? ' ' : (char)p[0];
        else if (!c0 && !c1) {
            memcpy(out + o, p, k);
            o += k;
        }
        i += k;
    }
    out[o] = '\0';
    return out;
}

int cli_refuse_same_file(const char *cmd, const char *in_flag, const char *in, const char *out_flag,
                         const char *out)
{
    if (!af_file_same(in, out))
        return CLI_OK;
    /* writing the output would destroy the input before (or while) it is read */
    fprintf(stderr, "%s: %s '%s' and %s '%s' are the same file; name another output\n", cmd,
            in_flag, in, out_flag, out);
    return CLI_EUSAGE;
}
