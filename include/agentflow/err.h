/*
 * err.h - the one set of status codes used by every agentflow module.
 *
 * Functions that can fail return 0 (AF_OK) or a negative AF_E* value; the detail
 * (file, field, offset, URL) lives on the handle, readable through <module>_errmsg().
 */
#ifndef AGENTFLOW_ERR_H
#define AGENTFLOW_ERR_H

#if defined(__GNUC__)
#define AF_NODISCARD __attribute__((warn_unused_result))
#define AF_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define AF_NODISCARD
#define AF_PRINTF(f, a)
#endif

enum af_err {
    AF_OK = 0,
    AF_EINVAL = -1,    /* bad argument or usage */
    AF_ENOMEM = -2,    /* allocation failed */
    AF_EIO = -3,       /* file or socket I/O */
    AF_ETOOBIG = -4,   /* input exceeds an explicit limit */
    AF_EPARSE = -5,    /* malformed input (JSON, model output, command) */
    AF_EBACKEND = -6,  /* LLM back-end answered with an error */
    AF_ETIMEOUT = -7,  /* a deadline passed */
    AF_ENOTFOUND = -8, /* unknown tool, file, key */
    AF_ETOOL = -9,     /* tool reported a failure */
    AF_EINTERNAL = -10 /* invariant broken; a bug */
};

/* Returns a static, human-readable name for an AF_E* code. Safe from any thread. */
const char *af_strerror(int err);

#endif
