/* Reading mpress-events files (JSON lines written by the CUPTI tracer) into flat arrays that
 * the analyser walks. The format is in docs/event-format.md. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "mpress/json.h"
#include "trace_internal.h"

void mpress_trace_destroy(struct mpress_trace *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_ranges; i++)
        free(t->ranges[i].name);
    free(t->ranges);
    free(t->pops);
    free(t->corrs);
    free(t->acts);
    free(t->mems);
    free(t);
}

/* Appends one zeroed element to a growable array; NULL when out of memory. */
static void *grow(void **arr, size_t *n, size_t *cap, size_t elem)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        void *p = realloc(*arr, nc * elem);
        if (!p)
            return NULL;
        *arr = p;
        *cap = nc;
    }
    void *e = (char *)*arr + (*n)++ * elem;
    memset(e, 0, elem);
    return e;
}

struct line_ctx {
    const char *name;
    long line;
    json_t *obj;
    struct mpress_error *err;
};

static int bad(struct line_ctx *c, const char *key, const char *fmt, const char *detail)
{
    mpress_error_at(c->err, MPRESS_EINPUT, c->name, (int)c->line, 0, key ? key : "", fmt,
                    detail);
    return MPRESS_EINPUT;
}

static int get_u64(struct line_ctx *c, const char *key, uint64_t *out, int optional)
{
    json_t *v = json_object_get(c->obj, key);
    if (!v) {
        if (optional)
            return 0;
        return bad(c, key, "missing field%s", "");
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return bad(c, key, "expected a non-negative integer%s", "");
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int get_int(struct line_ctx *c, const char *key, int *out, int optional)
{
    json_t *v = json_object_get(c->obj, key);
    if (!v) {
        if (optional)
            return 0;
        return bad(c, key, "missing field%s", "");
    }
    if (!json_is_integer(v) || json_integer_value(v) < -1 || json_integer_value(v) > 1 << 30)
        return bad(c, key, "expected an integer in [-1, 2^30]%s", "");
    *out = (int)json_integer_value(v);
    return 0;
}

/* Addresses are hex strings ("0x7f00...") because they may not fit a signed JSON integer. */
static int get_addr(struct line_ctx *c, const char *key, uint64_t *out)
{
    json_t *v = json_object_get(c->obj, key);
    if (!v)
        return bad(c, key, "missing field%s", "");
    const char *s = json_string_value(v);
    char *end;
    if (!s || strncmp(s, "0x", 2) != 0 || !s[2])
        return bad(c, key, "expected a hex string like \"0x1000\"%s", "");
    errno = 0;
    unsigned long long a = strtoull(s + 2, &end, 16);
    if (errno || *end)
        return bad(c, key, "expected a hex string like \"0x1000\"%s", "");
    *out = (uint64_t)a;
    return 0;
}

static const char *get_str(struct line_ctx *c, const char *key)
{
    json_t *v = json_object_get(c->obj, key);
    return v ? json_string_value(v) : NULL;
}

static int parse_header(struct line_ctx *c)
{
    const char *fmt = get_str(c, "format");
    if (!fmt || strcmp(fmt, MPRESS_EVENTS_FORMAT) != 0)
        return bad(c, "format", "not an event file: expected \"format\": \"%s\" on line 1",
                   MPRESS_EVENTS_FORMAT);
    json_t *v = json_object_get(c->obj, "version");
    if (!json_is_integer(v))
        return bad(c, "version", "missing or non-integer version%s", "");
    if (json_integer_value(v) < 1 || json_integer_value(v) > MPRESS_EVENTS_VERSION) {
        char buf[64];
        snprintf(buf, sizeof(buf), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return bad(c, "version", "unsupported version %s (this build reads version 1)", buf);
    }
    return 0;
}

static int parse_event(struct mpress_trace *t, struct line_ctx *c)
{
    const char *ev = get_str(c, "ev");
    if (!ev)
        return bad(c, "ev", "missing event kind%s", "");
    int rc = 0;
    if (strcmp(ev, "push") == 0) {
        struct trace_range *r = grow((void **)&t->ranges, &t->n_ranges, &t->cap_ranges,
                                     sizeof(*r));
        if (!r)
            return mpress_error_set(c->err, MPRESS_ESYSTEM, "out of memory");
        const char *name = get_str(c, "name");
        if (!name)
            return bad(c, "name", "missing range name%s", "");
        r->name = strdup(name);
        if (!r->name)
            return mpress_error_set(c->err, MPRESS_ESYSTEM, "out of memory");
        r->end = UINT64_MAX;
        (void)((rc = get_u64(c, "id", &r->id, 0)) ||
             (rc = get_u64(c, "parent", &r->parent, 1)) ||
             (rc = get_u64(c, "tid", &r->tid, 1)) ||
             (rc = get_u64(c, "t", &r->start, 0)));
        r->line = c->line;
        if (!rc && r->id == 0)
            return bad(c, "id", "range ids start at 1%s", "");
    } else if (strcmp(ev, "pop") == 0) {
        struct trace_pop *p = grow((void **)&t->pops, &t->n_pops, &t->cap_pops, sizeof(*p));
        if (!p)
            return mpress_error_set(c->err, MPRESS_ESYSTEM, "out of memory");
        (void)((rc = get_u64(c, "id", &p->id, 0)) ||
             (rc = get_u64(c, "t", &p->t, 0)));
        p->line = c->line;
    } else if (strcmp(ev, "corr") == 0) {
        struct trace_corr *k = grow((void **)&t->corrs, &t->n_corrs, &t->cap_corrs, sizeof(*k));
        if (!k)
            return mpress_error_set(c->err, MPRESS_ESYSTEM, "out of memory");
        (void)((rc = get_u64(c, "corr", &k->corr, 0)) ||
             (rc = get_u64(c, "ext", &k->ext, 0)));
    } else if (strcmp(ev, "kernel") == 0 || strcmp(ev, "memcpy") == 0 ||
               strcmp(ev, "memset") == 0) {
        struct trace_act *a = grow((void **)&t->acts, &t->n_acts, &t->cap_acts, sizeof(*a));
        if (!a)
            return mpress_error_set(c->err, MPRESS_ESYSTEM, "out of memory");
        (void)((rc = get_u64(c, "corr", &a->corr, 0)) ||
             (rc = get_int(c, "dev", &a->dev, 0)) ||
             (rc = get_u64(c, "start", &a->start, 0)) ||
             (rc = get_u64(c, "end", &a->end, 0)));
        if (!rc && a->end < a->start)
            return bad(c, "end", "activity ends before it starts%s", "");
    } else if (strcmp(ev, "alloc") == 0 || strcmp(ev, "free") == 0) {
        const char *mem = get_str(c, "mem");
        /* Only device memory counts toward a GPU's footprint; pinned host memory, managed
         * memory and the like are recorded by the tracer but not analysed. */
        if (mem && strcmp(mem, "device") != 0)
            return 0;
        struct trace_mem *m = grow((void **)&t->mems, &t->n_mems, &t->cap_mems, sizeof(*m));
        if (!m)
            return mpress_error_set(c->err, MPRESS_ESYSTEM, "out of memory");
        m->is_alloc = ev[0] == 'a';
        m->seq = t->n_mems - 1;
        (void)((rc = get_u64(c, "corr", &m->corr, 0)) ||
             (rc = get_int(c, "dev", &m->dev, 0)) ||
             (rc = get_addr(c, "addr", &m->addr)) ||
             (rc = get_u64(c, "bytes", &m->bytes, !m->is_alloc)) ||
             (rc = get_u64(c, "t", &m->t, 0)));
    } else if (strcmp(ev, "device") == 0) {
        int id = 0;
        uint64_t membytes = 0;
        (void)((rc = get_int(c, "dev", &id, 0)) ||
             (rc = get_u64(c, "memory", &membytes, 1)));
        if (rc)
            return rc;
        struct mpress_trace_device *d = trace_device(t, id);
        if (d) {
            const char *name = get_str(c, "name");
            snprintf(d->name, sizeof(d->name), "%s", name ? name : "");
            d->memory_bytes = membytes;
        }
    } else if (strcmp(ev, "status") == 0) {
        json_t *ok = json_object_get(c->obj, "ok");
        if (json_is_true(ok))
            t->tracer_ok = 1;
    } else if (strcmp(ev, "error") == 0) {
        if (!t->tracer_error[0]) {
            const char *what = get_str(c, "what"), *text = get_str(c, "text");
            snprintf(t->tracer_error, sizeof(t->tracer_error), "%s: %s", what ? what : "cupti",
                     text ? text : "unknown error");
        }
    } else if (strcmp(ev, "dropped") == 0) {
        uint64_t n = 0;
        rc = get_u64(c, "n", &n, 0);
        t->dropped += n;
    } else if (strcmp(ev, "end") == 0) {
        t->clean_exit = 1;
    } else if (strcmp(ev, "api") == 0 || strcmp(ev, "marker") == 0 ||
               strcmp(ev, "overhead") == 0 || strcmp(ev, "pool") == 0) {
        /* Recorded for inspection; the analysis attributes through "corr" events instead. */
    } else {
        /* Unknown kinds are skipped so that version-1 readers accept files from tracers that
         * add kinds; a kind whose meaning changes gets a new version. */
    }
    return rc; /* a getter's own code (MPRESS_EINPUT), kept through the chains above */
}

struct mpress_trace_device *trace_device(struct mpress_trace *t, int id)
{
    for (int i = 0; i < t->n_devices; i++)
        if (t->devices[i].id == id)
            return &t->devices[i];
    if (t->n_devices == MPRESS_TRACE_MAX_DEVICES)
        return NULL;
    struct mpress_trace_device *d = &t->devices[t->n_devices++];
    memset(d, 0, sizeof(*d));
    d->id = id;
    return d;
}

int mpress_trace_parse(const char *text, size_t size, const char *name, struct mpress_trace **out,
                       struct mpress_error *err)
{
    *out = NULL;
    struct mpress_trace *t = calloc(1, sizeof(*t));
    if (!t)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    struct line_ctx c = {.name = name ? name : "<events>", .err = err};
    size_t pos = 0;
    int rc = 0, seen_header = 0;
    while (pos < size) {
        const char *ln = text + pos;
        const char *nl = memchr(ln, '\n', size - pos);
        size_t len = nl ? (size_t)(nl - ln) : size - pos;
        pos += len + (nl ? 1 : 0);
        c.line++;
        if (len == 0)
            continue;
        json_error_t je;
        c.obj = json_loadb(ln, len, JSON_REJECT_DUPLICATES, &je);
        if (!c.obj || !json_is_object(c.obj)) {
            json_decref(c.obj);
            if (!nl && seen_header) {
                /* The writer died mid-line: keep everything before it. */
                t->truncated_line = 1;
                break;
            }
            rc = mpress_error_at(err, MPRESS_EINPUT, c.name, (int)c.line,
                                 c.obj ? 1 : je.column > 0 ? je.column : 0, "",
                                 "invalid event line: %s", c.obj ? "not an object" : je.text);
            goto fail;
        }
        if (!seen_header) {
            rc = parse_header(&c);
            seen_header = 1;
        } else {
            rc = parse_event(t, &c);
            t->n_events++;
        }
        json_decref(c.obj);
        if (rc)
            goto fail;
    }
    if (!seen_header) {
        rc = mpress_error_at(err, MPRESS_EINPUT, c.name, 0, 0, "",
                             "empty event file: the tracer wrote nothing");
        goto fail;
    }
    rc = trace_index(t, err);
    if (rc) {
        if (err && !err->file[0])
            snprintf(err->file, sizeof(err->file), "%s", c.name);
        goto fail;
    }
    *out = t;
    return 0;
fail:
    mpress_trace_destroy(t);
    return rc;
}

int mpress_trace_load(const char *file, struct mpress_trace **out, struct mpress_error *err)
{
    *out = NULL;
    char *buf;
    size_t n;
    int rc = mpress_read_file(file, 0, &buf, &n, err);
    if (rc)
        return rc;
    rc = mpress_trace_parse(buf, n, file, out, err);
    free(buf);
    return rc;
}
