/*
 * err.c - names for the AF_E* status codes.
 */
#include "agentflow/err.h"

const char *af_strerror(int err)
{
    switch (err) {
    case AF_OK:
        return "ok";
    case AF_EINVAL:
        return "invalid argument";
    case AF_ENOMEM:
        return "out of memory";
    case AF_EIO:
        return "I/O error";
    case AF_ETOOBIG:
        return "input too large";
    case AF_EPARSE:
        return "parse error";
    case AF_EBACKEND:
        return "back-end error";
    case AF_ETIMEOUT:
        return "timed out";
    case AF_ENOTFOUND:
        return "not found";
    case AF_ETOOL:
        return "tool error";
    case AF_EINTERNAL:
        return "internal error";
    default:
        return "unknown error";
    }
}
