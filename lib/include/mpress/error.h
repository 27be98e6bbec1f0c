/* mpress error reporting: one caller-owned struct filled by every library call that can fail.
 *
 * Library functions return 0 on success or one of enum mpress_status (> 0), which is also the
 * exit code the CLI uses. They never print, exit or abort. */
#ifndef MPRESS_ERROR_H
#define MPRESS_ERROR_H

#include <stddef.h>
#include "mpress/export.h"

#ifdef __cplusplus
extern "C" {
#endif

enum mpress_status {
    MPRESS_OK = 0,
    MPRESS_EINFEASIBLE = 1, /* no plan fits, or a run would run out of memory */
    MPRESS_EUSAGE = 2,      /* bad command line or bad argument value */
    MPRESS_EINPUT = 3,      /* bad input file */
    MPRESS_ESYSTEM = 4,     /* solver, I/O, driver or other system failure */
};

/* Where and what. file/line/column/path are empty (or 0) when unknown. */
struct mpress_error {
    int code;          /* enum mpress_status */
    char file[512];    /* input file the error is about */
    int line, column;  /* 1-based position in file, 0 when unknown */
    char path[256];    /* JSON path, e.g. "ops[12].tensors[3].bytes" */
    char text[1024];   /* what is wrong, lower-case, no trailing period */
};

MPRESS_API
void mpress_error_clear(struct mpress_error *err);

/* Sets code and text (printf-style); keeps file/line/column/path. Returns code. NULL err ok. */
MPRESS_API
int mpress_error_set(struct mpress_error *err, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Sets everything at once. Returns code. */
MPRESS_API
int mpress_error_at(struct mpress_error *err, int code, const char *file, int line, int column,
                    const char *path, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 7, 8)))
#endif
    ;

/* "FILE:LINE:COL: PATH: text", leaving out the parts that are unknown. */
MPRESS_API
void mpress_error_format(const struct mpress_error *err, char *buf, size_t size);

/* bytes in binary units for messages, into buf: "640 bytes", "338.00 KiB", "17.83 GiB".
 * Returns buf. */
MPRESS_API
const char *mpress_format_bytes(unsigned long long bytes, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
