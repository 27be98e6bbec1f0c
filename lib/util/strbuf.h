/* A growing text buffer for the renderers (topology matrix, plan explanation, simulator
 * report, trace, SVG). Internal to libmpress. */
#ifndef MPRESS_UTIL_STRBUF_H
#define MPRESS_UTIL_STRBUF_H

#include <stddef.h>

struct mpress_strbuf {
    char *s;        /* NUL-terminated text, or NULL while empty */
    size_t n, cap;  /* length, allocated size */
    int failed;     /* an allocation or format failed: later appends are ignored */
};

#if defined(__GNUC__)
#define MPRESS_INTERNAL __attribute__((visibility("hidden")))
#else
#define MPRESS_INTERNAL
#endif

/* Appends printf-style text. */
MPRESS_INTERNAL void sb_printf(struct mpress_strbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Hands over the text (an empty string when nothing was appended), or NULL after a failure,
 * in which case the buffer's memory is freed. */
MPRESS_INTERNAL char *sb_finish(struct mpress_strbuf *b);

#endif
