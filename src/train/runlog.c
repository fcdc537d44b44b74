/*
 * runlog.c - what every training loop shares around its steps (runlog.h).
 */
#include "train/runlog.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/errf.h"
#include "core/fileio.h"
#include "core/xalloc.h"
#include "train/ckpt.h"

/* Names the first setting that differs between a checkpoint's and this run's. */
int train_settings_match(const char *saved, const char *now, char *err, size_t errlen)
{
    json_t *a = json_loads(saved, 0, NULL), *b = json_loads(now, 0, NULL);
    int rc = AF_OK;
    const char *key;
    json_t *v;
    json_object_foreach(b, key, v)
    {
        json_t *w = json_object_get(a, key);
        if (!w || !json_equal(v, w)) {
            char *sv = w ? json_dumps(w, JSON_ENCODE_ANY) : NULL,
                 *nv = json_dumps(v, JSON_ENCODE_ANY);
            af_errf(err, errlen,
                    "--resume: setting '%s' is %s now but %s in the checkpoint; resume with the "
                    "same settings (only --steps may change)",
                    key, nv ? nv : "?", sv ? sv : "absent");
            free(sv);
            free(nv);
            rc = AF_EINVAL;
            break;
        }
    }
    json_decref(a);
    json_decref(b);
    return rc;
}

/* Keeps the metrics lines of steps <= step (a resume drops the ones after its checkpoint). */
int train_metrics_trim(const char *path, int64_t step, char *err, size_t errlen)
{
    char *text = NULL;
    size_t len = 0;
    if (af_file_read(path, (size_t)1 << 30, &text, &len, NULL, 0) != AF_OK)
        return AF_OK; /* none yet */
    char *out = af_xmalloc(len + 1);
    size_t olen = 0;
    for (char *p = text; *p;) {
        char *nl = strchr(p, '\n');
        size_t l = nl ? (size_t)(nl - p) : strlen(p);
        json_t *o = json_loadb(p, l, 0, NULL);
        json_int_t s = o ? json_integer_value(json_object_get(o, "step")) : 0;
        json_decref(o);
        if (o && nl && s <= step) { /* a torn last line has no newline: dropped */
            memcpy(out + olen, p, l + 1);
            olen += l + 1;
        }
        p += l + (nl ? 1 : 0);
    }
    int rc = af_file_write_atomic(path, out, olen, err, errlen);
    free(out);
    free(text);
    return rc;
}

uint64_t train_mix(uint64_t a, uint64_t b)
{
    uint64_t z = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int train_run_start(const char *out_dir, int resume, const char *settings_now, int64_t *latest,
                    char *err, size_t errlen)
{
    *latest = ckpt_latest(out_dir);
    if (!resume) {
        if (*latest > 0) {
            af_errf(err, errlen,
                    "%s already holds a run (checkpoint-%lld); pass --resume to continue it or "
                    "choose another --out",
                    out_dir, (long long)*latest);
            return AF_EINVAL;
        }
        return AF_OK;
    }
    if (*latest == 0) {
        af_errf(err, errlen, "--resume: %s has no checkpoint to resume from", out_dir);
        return AF_EINVAL;
    }
    char *prev = NULL;
    int rc = ckpt_read_settings(out_dir, *latest, &prev, err, errlen);
    if (rc)
        return rc;
    rc = train_settings_match(prev, settings_now, err, errlen);
    free(prev);
    return rc;
}
