/* A growing text buffer for the renderers. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "strbuf.h"

void sb_printf(struct mpress_strbuf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->s ? b->cap - b->n : 0;
        int w = vsnprintf(b->s ? b->s + b->n : NULL, room, fmt, ap);
        va_end(ap);
        if (w < 0) {
            b->failed = 1;
            return;
        }
        if (b->s && (size_t)w < room) {
            b->n += (size_t)w;
            return;
        }
        size_t nc = b->cap ? b->cap : 4096;
        while (nc < b->n + (size_t)w + 1)
            nc *= 2;
        char *q = realloc(b->s, nc);
        if (!q) {
            b->failed = 1;
            return;
        }
        b->s = q;
        b->cap = nc;
    }
}

char *sb_finish(struct mpress_strbuf *b)
{
    if (b->failed) {
        free(b->s);
        b->s = NULL;
        return NULL;
    }
    return b->s ? b->s : calloc(1, 1);
}
