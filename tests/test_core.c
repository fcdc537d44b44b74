/*
 * test_core.c - buffers, file helpers and error names.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/fileio.h"

static void test_buf_limit(void **state)
{
    (void)state;
    struct af_buf b;
    af_buf_init(&b, 8);
    assert_int_equal(af_buf_puts(&b, "abcd"), AF_OK);
    assert_int_equal(af_buf_printf(&b, "%d", 123), AF_OK);
    assert_string_equal(af_buf_str(&b), "abcd123");
    assert_int_equal(af_buf_puts(&b, "xy"), AF_ETOOBIG);
    assert_string_equal(af_buf_str(&b), "abcd123");
    assert_int_equal(af_buf_putc(&b, 'z'), AF_OK);
    assert_int_equal(b.len, 8);
    char *s = af_buf_detach(&b);
    assert_string_equal(s, "abcd123z");
    free(s);
    af_buf_deinit(&b);
}

static void test_file_atomic_and_limit(void **state)
{
    (void)state;
    char dir[] = "/tmp/af_core_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/f.json", dir);
    char err[256];
    assert_int_equal(af_file_write_atomic(path, "hello", 5, err, sizeof err), AF_OK);
    char *data = NULL;
    size_t len = 0;
    assert_int_equal(af_file_read(path, 100, &data, &len, err, sizeof err), AF_OK);
    assert_int_equal(len, 5);
    assert_string_equal(data, "hello");
    free(data);
    assert_int_equal(af_file_read(path, 3, &data, &len, err, sizeof err), AF_ETOOBIG);
    assert_non_null(strstr(err, path));
    snprintf(path, sizeof path, "%s/missing", dir);
    assert_int_equal(af_file_read(path, 3, &data, &len, err, sizeof err), AF_ENOTFOUND);
    assert_non_null(strstr(err, "missing"));

    snprintf(path, sizeof path, "%s/log.jsonl", dir);
    struct af_linelog *log = NULL;
    assert_int_equal(af_linelog_open(path, &log, err, sizeof err), AF_OK);
    assert_int_equal(af_linelog_append(log, "{\"a\":1}", 7), AF_OK);
    assert_int_equal(af_linelog_append(log, "{\"b\":2}\n", 8), AF_OK);
    af_linelog_close(log);
    assert_int_equal(af_file_read(path, 100, &data, &len, err, sizeof err), AF_OK);
    assert_string_equal(data, "{\"a\":1}\n{\"b\":2}\n");
    free(data);
    unlink(path);
    snprintf(path, sizeof path, "%s/f.json", dir);
    unlink(path);
    rmdir(dir);
}

/* mkdir -p: missing parents made, an existing tree fine, a file in the way named. */
static void test_mkdir_p(void **state)
{
    (void)state;
    char dir[] = "/tmp/af_core_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256], err[256], sub[300];
    snprintf(path, sizeof path, "%s/a//b/c/", dir);
    assert_int_equal(af_mkdir_p(path, 0755, err, sizeof err), AF_OK);
    struct stat sb;
    snprintf(sub, sizeof sub, "%s/a/b/c", dir);
    assert_int_equal(stat(sub, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    assert_int_equal(af_mkdir_p(path, 0755, err, sizeof err), AF_OK); /* exists: fine */
    snprintf(sub, sizeof sub, "%s/a/file", dir);
    assert_int_equal(af_file_write_atomic(sub, "x", 1, err, sizeof err), AF_OK);
    snprintf(path, sizeof path, "%s/a/file/d", dir);
    assert_int_equal(af_mkdir_p(path, 0755, err, sizeof err), AF_EIO);
    assert_non_null(strstr(err, path)); /* the folder asked for */
    char fault[320];
    snprintf(fault, sizeof fault, "folder %s:", sub); /* and the parent at fault */
    assert_non_null(strstr(err, fault));
    assert_int_equal(af_mkdir_p(sub, 0755, err, sizeof err), AF_EIO);
    assert_non_null(strstr(err, "in the way"));
    assert_int_equal(af_mkdir_p("", 0755, err, sizeof err), AF_EINVAL);
    unlink(sub);
    for (const char *d = "a/b/c"; *d;) {
        snprintf(sub, sizeof sub, "%s/%s", dir, d);
        assert_int_equal(rmdir(sub), 0);
        d = !strcmp(d, "a/b/c") ? "a/b" : !strcmp(d, "a/b") ? "a" : "";
    }
    assert_int_equal(rmdir(dir), 0);
}

static void test_strerror(void **state)
{
    (void)state;
    assert_string_equal(af_strerror(AF_ETOOBIG), "input too large");
    assert_string_equal(af_strerror(12345), "unknown error");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buf_limit),
        cmocka_unit_test(test_file_atomic_and_limit),
        cmocka_unit_test(test_mkdir_p),
        cmocka_unit_test(test_strerror),
    };
    return cmocka_run_group_tests_name("core", tests, NULL, NULL);
}
