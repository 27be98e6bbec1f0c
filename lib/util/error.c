/* The caller-owned error struct every library call fills. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "mpress/error.h"

void mpress_error_clear(struct mpress_error *err)
{
    if (err)
        memset(err, 0, sizeof(*err));
}

static void set_text(struct mpress_error *err, const char *fmt, va_list ap)
{
    vsnprintf(err->text, sizeof(err->text), fmt, ap);
}

int mpress_error_set(struct mpress_error *err, int code, const char *fmt, ...)
{
    if (!err)
        return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    set_text(err, fmt, ap);
    va_end(ap);
    return code;
}

int mpress_error_at(struct mpress_error *err, int code, const char *file, int line, int column,
                    const char *path, const char *fmt, ...)
{
    if (!err)
        return code;
    err->code = code;
    snprintf(err->file, sizeof(err->file), "%s", file ? file : "");
    err->line = line;
    err->column = column;
    snprintf(err->path, sizeof(err->path), "%s", path ? path : "");
    va_list ap;
    va_start(ap, fmt);
    set_text(err, fmt, ap);
    va_end(ap);
    return code;
}

/* Appends to buf at *n, truncating silently (messages may be cut, never overflow). */
static void append(char *buf, size_t size, size_t *n, const char *fmt, ...)
{
    if (*n + 1 >= size)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *n, size - *n, fmt, ap);
    va_end(ap);
    if (k > 0)
        *n = (size_t)k >= size - *n ? size - 1 : *n + (size_t)k;
}

void mpress_error_format(const struct mpress_error *err, char *buf, size_t size)
{
    if (!size)
        return;
    buf[0] = '\0';
    if (!err)
        return;
    size_t n = 0;
    if (err->file[0]) {
        append(buf, size, &n, "%s", err->file);
        if (err->line > 0) {
            append(buf, size, &n, ":%d", err->line);
            if (err->column > 0)
                append(buf, size, &n, ":%d", err->column);
        }
        append(buf, size, &n, ": ");
    }
    if (err->path[0])
        append(buf, size, &n, "%s: ", err->path);
    append(buf, size, &n, "%s", err->text[0] ? err->text : "unknown error");
}

const char *mpress_format_bytes(unsigned long long bytes, char *buf, size_t size)
{
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, size, "%llu bytes", bytes);
    else
        snprintf(buf, size, "%.2f %s", v, units[u]);
    return buf;
}
