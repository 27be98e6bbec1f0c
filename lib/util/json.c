/* Deterministic atomic JSON writing and strict, position-aware JSON reading. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mpress/json.h"

char *mpress_json_dumps(const json_t *root)
{
    char *s = json_dumps(root, MPRESS_JSON_FLAGS);
    if (!s)
        return NULL;
    size_t n = strlen(s);
    char *out = realloc(s, n + 2);
    if (!out) {
        free(s);
        return NULL;
    }
    out[n] = '\n';
    out[n + 1] = '\0';
    return out;
}

/* ---- temporary files removed on a signal ----------------------------------------------- */

/* A fixed table, so that the signal handler reads only memory that is never freed: a slot is
 * 0 free, 1 being filled or emptied, 2 armed (its path is complete and the file may exist). */
#define TEMP_SLOTS 16
static _Atomic int temp_state[TEMP_SLOTS];
static char temp_path[TEMP_SLOTS][PATH_MAX];

int mpress_temp_register(const char *path)
{
    if (strlen(path) >= PATH_MAX)
        return -1;
    for (int i = 0; i < TEMP_SLOTS; i++) {
        int expect = 0;
        if (atomic_compare_exchange_strong(&temp_state[i], &expect, 1)) {
            memcpy(temp_path[i], path, strlen(path) + 1);
            atomic_store(&temp_state[i], 2);
            return i;
        }
    }
    return -1;
}

void mpress_temp_unregister(int slot)
{
    if (slot >= 0 && slot < TEMP_SLOTS)
        atomic_store(&temp_state[slot], 0);
}

void mpress_temp_cleanup(void)
{
    /* Async-signal-safe: lock-free atomics and unlink only. */
    for (int i = 0; i < TEMP_SLOTS; i++)
        if (atomic_load(&temp_state[i]) == 2)
            unlink(temp_path[i]);
}

/* ---- atomic writes ---------------------------------------------------------------------- */

int mpress_atomic_begin(struct mpress_atomic_file *f, const char *path, struct mpress_error *err)
{
    memset(f, 0, sizeof(*f));
    f->fd = -1;
    f->slot = -1;
    if (!path[0])
        return mpress_error_set(err, MPRESS_EUSAGE, "an empty output file name");
    size_t plen = strlen(path);
    if (plen + 40 >= sizeof(f->tmp))
        return mpress_error_set(err, MPRESS_EUSAGE, "output file name too long: '%s'", path);
    snprintf(f->path, sizeof(f->path), "%s", path);
    /* open() with mode 0666 lets the kernel apply the umask: the file gets the usual mode
     * without the process ever changing its umask (which other threads would see). */
    static _Atomic unsigned counter;
    for (int attempt = 0; attempt < 100; attempt++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        unsigned n = atomic_fetch_add(&counter, 1u);
        snprintf(f->tmp, sizeof(f->tmp), "%s.tmp%ld.%u.%lx", path, (long)getpid(), n,
                 (unsigned long)ts.tv_nsec & 0xfffff);
        /* armed before the file exists: a signal in between unlinks nothing, or our file */
        f->slot = mpress_temp_register(f->tmp);
        f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (f->fd >= 0)
            return 0;
        int e = errno;
        mpress_temp_unregister(f->slot);
        f->slot = -1;
        if (e != EEXIST)
            return mpress_error_set(err, MPRESS_ESYSTEM, "cannot create '%s': %s", path,
                                    strerror(e));
    }
    return mpress_error_set(err, MPRESS_ESYSTEM, "cannot create '%s': no free temporary name",
                            path);
}

void mpress_atomic_abort(struct mpress_atomic_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    if (f->tmp[0])
        unlink(f->tmp);
    mpress_temp_unregister(f->slot);
    f->slot = -1;
    f->tmp[0] = '\0';
}

int mpress_atomic_commit(struct mpress_atomic_file *f, struct mpress_error *err)
{
    int e = 0;
    if (f->fd < 0 && (f->fd = open(f->tmp, O_RDONLY | O_CLOEXEC)) < 0)
        e = errno;
    if (!e && fsync(f->fd) != 0 && errno != EINVAL && errno != EROFS)
        e = errno;
    if (f->fd >= 0 && close(f->fd) != 0 && !e)
        e = errno;
    f->fd = -1;
    if (!e && rename(f->tmp, f->path) != 0)
        e = errno;
    if (e) {
        mpress_atomic_abort(f);
        return mpress_error_set(err, MPRESS_ESYSTEM, "cannot write '%s': %s", f->path,
                                strerror(e));
    }
    mpress_temp_unregister(f->slot);
    f->slot = -1;
    return 0;
}

int mpress_write_file_atomic(const char *path, const char *data, size_t size,
                             struct mpress_error *err)
{
    if (strcmp(path, "-") == 0) {
        if (fwrite(data, 1, size, stdout) != size || fflush(stdout) != 0)
            return mpress_error_set(err, MPRESS_ESYSTEM, "cannot write standard output: %s",
                                    strerror(errno));
        return 0;
    }
    struct mpress_atomic_file f;
    int rc = mpress_atomic_begin(&f, path, err);
    if (rc)
        return rc;
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(f.fd, data + off, size - off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            mpress_atomic_abort(&f);
            return mpress_error_set(err, MPRESS_ESYSTEM, "cannot write '%s': %s", path,
                                    strerror(e));
        }
        off += (size_t)w;
    }
    return mpress_atomic_commit(&f, err);
}

int mpress_json_write_file(const char *path, const json_t *root, struct mpress_error *err)
{
    char *s = mpress_json_dumps(root);
    if (!s)
        return mpress_error_set(err, MPRESS_ESYSTEM, "cannot serialize JSON for '%s'", path);
    int rc = mpress_write_file_atomic(path, s, strlen(s), err);
    free(s);
    return rc;
}

/* ---- reading ---------------------------------------------------------------------------- */

int mpress_json_doc_parse(struct mpress_json_doc *doc, const char *text, size_t size,
                          const char *name, struct mpress_error *err)
{
    memset(doc, 0, sizeof(*doc));
    snprintf(doc->file, sizeof(doc->file), "%s", name ? name : "<input>");
    doc->text = malloc(size + 1);
    if (!doc->text)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    memcpy(doc->text, text, size);
    doc->text[size] = '\0';
    doc->size = size;
    if (memchr(text, '\0', size))
        return mpress_error_at(err, MPRESS_EINPUT, doc->file, 0, 0, "",
                               "not a JSON text: contains a NUL byte");
    json_error_t je;
    doc->root = json_loadb(doc->text, size, JSON_REJECT_DUPLICATES, &je);
    if (!doc->root)
        return mpress_error_at(err, MPRESS_EINPUT, doc->file, je.line > 0 ? je.line : 0,
                               je.column > 0 ? je.column : 0, "", "invalid JSON: %s", je.text);
    if (!json_is_object(doc->root))
        return mpress_error_at(err, MPRESS_EINPUT, doc->file, 1, 1, "",
                               "expected a JSON object at the top level");
    return 0;
}

int mpress_read_file(const char *file, size_t max_bytes, char **text, size_t *size,
                     struct mpress_error *err)
{
    *text = NULL;
    *size = 0;
    if (!max_bytes || max_bytes > MPRESS_MAX_FILE_BYTES)
        max_bytes = MPRESS_MAX_FILE_BYTES;
    /* O_NONBLOCK: opening a FIFO that no process writes would otherwise wait for a writer
     * forever. It is cleared at once, so reads wait for data as usual; a FIFO without a
     * writer reads as empty. */
    int fd = open(file, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    int e = fd < 0 ? errno : 0;
    if (!e && fstat(fd, &st) != 0)
        e = errno;
    if (!e && S_ISDIR(st.st_mode))
        e = EISDIR;
    if (!e) {
        int fl = fcntl(fd, F_GETFL);
        if (fl == -1 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == -1)
            e = errno;
    }
    if (e) {
        if (fd >= 0)
            close(fd);
        /* A path that names no readable file is the user's input being wrong, not the system
         * failing: only the rest (EMFILE, ENOMEM, EIO, ...) is MPRESS_ESYSTEM. */
        int input = e == ENOENT || e == EACCES || e == EISDIR || e == ENOTDIR ||
                    e == ENAMETOOLONG || e == ELOOP || e == EPERM || e == ENXIO;
        return mpress_error_at(err, input ? MPRESS_EINPUT : MPRESS_ESYSTEM, file, 0, 0, "",
                               "cannot open: %s", strerror(e));
    }
    if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > (uint64_t)max_bytes) {
        close(fd);
        return mpress_error_at(err, MPRESS_EINPUT, file, 0, 0, "",
                               "larger than %zu bytes: not a file mpress reads", max_bytes);
    }
    /* Read at most max_bytes + 1: one byte past the limit proves the input too large, so a
     * device that never ends (/dev/zero) fails after a bounded read. */
    size_t cap = S_ISREG(st.st_mode) ? (size_t)st.st_size + 1 : (size_t)1 << 16, n = 0;
    if (cap > max_bytes + 1)
        cap = max_bytes + 1;
    char *buf = malloc(cap + 1);
    while (buf && !e) {
        if (n == cap) {
            if (cap > max_bytes)
                break;
            size_t nc = cap > max_bytes / 2 ? max_bytes + 1 : cap * 2;
            char *nb = realloc(buf, nc + 1);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap = nc;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0) {
            if (errno != EINTR)
                e = errno;
            continue;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (!buf)
        return mpress_error_at(err, MPRESS_ESYSTEM, file, 0, 0, "", "out of memory");
    int rc = 0;
    if (e)
        rc = mpress_error_at(err, MPRESS_EINPUT, file, 0, 0, "", "cannot read: %s",
                             strerror(e));
    else if (n > max_bytes)
        rc = mpress_error_at(err, MPRESS_EINPUT, file, 0, 0, "",
                             "larger than %zu bytes: not a file mpress reads", max_bytes);
    else if (n == 0 && S_ISFIFO(st.st_mode))
        rc = mpress_error_at(err, MPRESS_EINPUT, file, 0, 0, "",
                             "no data: nothing was writing to this FIFO when it was opened");
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    *text = buf;
    *size = n;
    return 0;
}

int mpress_json_doc_load(struct mpress_json_doc *doc, const char *file, struct mpress_error *err)
{
    memset(doc, 0, sizeof(*doc));
    char *buf;
    size_t n;
    int rc = mpress_read_file(file, 0, &buf, &n, err);
    if (rc)
        return rc;
    rc = mpress_json_doc_parse(doc, buf, n, file, err);
    free(buf);
    return rc;
}

void mpress_json_doc_finish(struct mpress_json_doc *doc)
{
    if (!doc)
        return;
    json_decref(doc->root);
    free(doc->text);
    memset(doc, 0, sizeof(*doc));
}

/* A small scanner over JSON text that tracks the path, line and column of every value. It
 * looks for the value at the path target, or (target NULL) for the value that starts at byte
 * target_off; then the text need only be valid JSON up to there, as when the parser stopped
 * at that value. */
struct scan {
    const char *s;
    size_t i, n;
    int line, col;
    const char *target;
    size_t target_off;
    int found_line, found_col;
    size_t best_len;            /* longest matched prefix of target, for the nearest fallback */
    int best_line, best_col;
};

static void adv(struct scan *sc)
{
    if (sc->i >= sc->n)
        return;
    if (sc->s[sc->i] == '\n') {
        sc->line++;
        sc->col = 1;
    } else if (((unsigned char)sc->s[sc->i] & 0xC0) != 0x80) {
        sc->col++;
    } else {
        /* UTF-8 continuation byte: same column */
    }
    sc->i++;
}

static void skip_ws(struct scan *sc)
{
    while (sc->i < sc->n && strchr(" \t\r\n", sc->s[sc->i]))
        adv(sc);
}

/* Reads a string token; copies its raw (escaped) contents into out when out != NULL. */
static void scan_string(struct scan *sc, char *out, size_t size)
{
    size_t k = 0;
    adv(sc); /* opening quote */
    while (sc->i < sc->n && sc->s[sc->i] != '"') {
        if (sc->s[sc->i] == '\\') {
            if (out && k + 1 < size)
                out[k++] = sc->s[sc->i];
            adv(sc);
        }
        if (out && k + 1 < size && sc->i < sc->n)
            out[k++] = sc->s[sc->i];
        adv(sc);
    }
    adv(sc); /* closing quote */
    if (out)
        out[k] = '\0';
}

static int path_match(struct scan *sc, const char *path, int line, int col)
{
    if (!sc->target) {
        if (sc->i != sc->target_off)
            return 0;
        sc->found_line = line;
        sc->found_col = col;
        return 1;
    }
    if (strcmp(path, sc->target) == 0) {
        sc->found_line = line;
        sc->found_col = col;
        return 1;
    }
    size_t len = strlen(path);
    if (len > sc->best_len && strncmp(path, sc->target, len) == 0 &&
        (sc->target[len] == '.' || sc->target[len] == '[')) {
        sc->best_len = len;
        sc->best_line = line;
        sc->best_col = col;
    }
    return 0;
}

/* Looking for an offset and gone beyond it: nothing more to find. */
static int past(const struct scan *sc)
{
    return !sc->target && sc->i > sc->target_off;
}

static int scan_value(struct scan *sc, char *path, size_t cap, int depth)
{
    skip_ws(sc);
    if (sc->i >= sc->n || depth > 256 || past(sc))
        return 0;
    if (path_match(sc, path, sc->line, sc->col))
        return 1;
    size_t plen = strlen(path);
    char c = sc->s[sc->i];
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        long idx = 0;
        adv(sc);
        skip_ws(sc);
        while (sc->i < sc->n && sc->s[sc->i] != close && !past(sc)) {
            if (c == '{') {
                char key[256];
                scan_string(sc, key, sizeof(key));
                skip_ws(sc);
                adv(sc); /* colon */
                mpress_json_path_key(path, cap, path, key);
            } else {
                mpress_json_path_index(path, cap, path, (size_t)idx++);
            }
            if (scan_value(sc, path, cap, depth + 1))
                return 1;
            path[plen] = '\0';
            skip_ws(sc);
            if (sc->i < sc->n && sc->s[sc->i] == ',') {
                adv(sc);
                skip_ws(sc);
            }
        }
        adv(sc);
    } else if (c == '"') {
        scan_string(sc, NULL, 0);
    } else {
        while (sc->i < sc->n && !strchr(",]} \t\r\n", sc->s[sc->i]))
            adv(sc);
    }
    return 0;
}

static int locate(const struct mpress_json_doc *doc, const char *path, int *line, int *column,
                  int nearest)
{
    if (!doc || !doc->text)
        return -1;
    struct scan sc = {.s = doc->text, .n = doc->size, .line = 1, .col = 1, .target = path};
    char buf[1024] = "";
    if (scan_value(&sc, buf, sizeof(buf), 0)) {
        *line = sc.found_line;
        *column = sc.found_col;
        return 0;
    }
    if (nearest && sc.best_line > 0) {
        *line = sc.best_line;
        *column = sc.best_col;
        return 0;
    }
    return -1;
}

int mpress_json_doc_locate(const struct mpress_json_doc *doc, const char *path, int *line,
                           int *column)
{
    return locate(doc, path, line, column, 0);
}

int mpress_json_doc_path_at(const struct mpress_json_doc *doc, size_t offset, char *path,
                            size_t size, int *line, int *column)
{
    if (!doc || !doc->text || offset >= doc->size || size == 0)
        return -1;
    struct scan sc = {.s = doc->text, .n = doc->size, .line = 1, .col = 1, .target = NULL,
                      .target_off = offset};
    char buf[1024] = "";
    if (!scan_value(&sc, buf, sizeof(buf), 0))
        return -1;
    snprintf(path, size, "%s", buf);
    *line = sc.found_line;
    *column = sc.found_col;
    return 0;
}

int mpress_json_doc_error(const struct mpress_json_doc *doc, struct mpress_error *err,
                          const char *path, const char *fmt, ...)
{
    if (!err)
        return MPRESS_EINPUT;
    int line = 0, col = 0;
    if (locate(doc, path, &line, &col, 1) != 0) {
        line = 0;
        col = 0;
    }
    mpress_error_at(err, MPRESS_EINPUT, doc ? doc->file : "", line, col, path, "%s", "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->text, sizeof(err->text), fmt, ap);
    va_end(ap);
    return MPRESS_EINPUT;
}


static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static int get_member(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                      const char *key, json_t **out, char *path, size_t psize,
                      struct mpress_error *err)
{
    mpress_json_path_key(path, psize, obj_path, key);
    *out = json_object_get(obj, key);
    if (!*out)
        return mpress_json_doc_error(doc, err, path, "missing field");
    return 0;
}

int mpress_jread_u64(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                     const char *key, uint64_t *out, struct mpress_error *err)
{
    char path[512];
    json_t *v;
    if (get_member(doc, obj, obj_path, key, &v, path, sizeof(path), err))
        return MPRESS_EINPUT;
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        if (json_is_real(v) && json_real_value(v) >= 9.2e18)
            return mpress_json_doc_error(doc, err, path,
                                         "expected a non-negative integer, got a value too "
                                         "large for 64 bits");
        return mpress_json_doc_error(doc, err, path, "expected a non-negative integer, got %s",
                                     json_is_integer(v) ? "a negative integer" : type_name(v));
    }
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

int mpress_jread_int(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                     const char *key, int min, int max, int *out, struct mpress_error *err)
{
    char path[512];
    json_t *v;
    if (get_member(doc, obj, obj_path, key, &v, path, sizeof(path), err))
        return MPRESS_EINPUT;
    if (!json_is_integer(v))
        return mpress_json_doc_error(doc, err, path, "expected an integer, got %s",
                                     type_name(v));
    json_int_t x = json_integer_value(v);
    if (x < min || x > max)
        return mpress_json_doc_error(doc, err, path,
                                     "expected an integer in [%d, %d], got %lld", min, max,
                                     (long long)x);
    *out = (int)x;
    return 0;
}

static int read_real(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                     const char *key, double *out, int nonneg, struct mpress_error *err)
{
    char path[512];
    json_t *v;
    if (get_member(doc, obj, obj_path, key, &v, path, sizeof(path), err))
        return MPRESS_EINPUT;
    if (!json_is_number(v))
        return mpress_json_doc_error(doc, err, path, "expected a number, got %s", type_name(v));
    double x = json_number_value(v);
    if (!isfinite(x))
        return mpress_json_doc_error(doc, err, path, "expected a finite number");
    if (nonneg && x < 0)
        return mpress_json_doc_error(doc, err, path, "expected a non-negative number, got %g",
                                     x);
    *out = x;
    return 0;
}

int mpress_jread_real(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                      const char *key, double *out, struct mpress_error *err)
{
    return read_real(doc, obj, obj_path, key, out, 0, err);
}

int mpress_jread_nonneg(const struct mpress_json_doc *doc, const json_t *obj,
                        const char *obj_path, const char *key, double *out,
                        struct mpress_error *err)
{
    return read_real(doc, obj, obj_path, key, out, 1, err);
}

int mpress_jread_bool(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                      const char *key, int *out, struct mpress_error *err)
{
    char path[512];
    json_t *v;
    if (get_member(doc, obj, obj_path, key, &v, path, sizeof(path), err))
        return MPRESS_EINPUT;
    if (!json_is_boolean(v))
        return mpress_json_doc_error(doc, err, path, "expected a boolean, got %s",
                                     type_name(v));
    *out = json_is_true(v);
    return 0;
}

int mpress_jread_str(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                     const char *key, char *out, size_t size, struct mpress_error *err)
{
    char path[512];
    json_t *v;
    if (get_member(doc, obj, obj_path, key, &v, path, sizeof(path), err))
        return MPRESS_EINPUT;
    if (!json_is_string(v))
        return mpress_json_doc_error(doc, err, path, "expected a string, got %s", type_name(v));
    size_t n = json_string_length(v);
    if (n >= size)
        return mpress_json_doc_error(doc, err, path,
                                     "string too long (%zu bytes, at most %zu)", n, size - 1);
    if (memchr(json_string_value(v), '\0', n))
        return mpress_json_doc_error(doc, err, path, "string contains a NUL character");
    memcpy(out, json_string_value(v), n + 1);
    return 0;
}

int mpress_jread_array(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                       const char *key, json_t **out, struct mpress_error *err)
{
    char path[512];
    json_t *v;
    if (get_member(doc, obj, obj_path, key, &v, path, sizeof(path), err))
        return MPRESS_EINPUT;
    if (!json_is_array(v))
        return mpress_json_doc_error(doc, err, path, "expected an array, got %s", type_name(v));
    *out = v;
    return 0;
}

int mpress_jread_object(const struct mpress_json_doc *doc, const json_t *obj,
                        const char *obj_path, const char *key, json_t **out,
                        struct mpress_error *err)
{
    char path[512];
    json_t *v;
    if (get_member(doc, obj, obj_path, key, &v, path, sizeof(path), err))
        return MPRESS_EINPUT;
    if (!json_is_object(v))
        return mpress_json_doc_error(doc, err, path, "expected an object, got %s",
                                     type_name(v));
    *out = v;
    return 0;
}

int mpress_jread_header(const struct mpress_json_doc *doc, const json_t *obj,
                        const char *obj_path, const char *want, int max_version, int *version,
                        struct mpress_error *err)
{
    char fmt[64], path[512];
    if (mpress_jread_str(doc, obj, obj_path, "format", fmt, sizeof(fmt), err))
        return MPRESS_EINPUT;
    if (strcmp(fmt, want) != 0) {
        mpress_json_path_key(path, sizeof(path), obj_path, "format");
        return mpress_json_doc_error(doc, err, path, "expected \"%s\", got \"%s\"", want, fmt);
    }
    json_t *v = json_object_get(obj, "version");
    if (v && json_is_integer(v) &&
        (json_integer_value(v) < 1 || json_integer_value(v) > max_version)) {
        mpress_json_path_key(path, sizeof(path), obj_path, "version");
        return mpress_json_doc_error(doc, err, path,
                                     "unsupported %s version %lld (this build reads 1 to %d)",
                                     want, (long long)json_integer_value(v), max_version);
    }
    int x;
    if (mpress_jread_int(doc, obj, obj_path, "version", 1, max_version, &x, err))
        return MPRESS_EINPUT;
    if (version)
        *version = x;
    return 0;
}

uint64_t mpress_fnv1a64(const void *data, size_t size)
{
    /* FNV-1a 64: offset basis and prime of the 64-bit variant. */
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < size; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

void mpress_hash_hex(const void *data, size_t size, char out[17])
{
    snprintf(out, 17, "%016llx", (unsigned long long)mpress_fnv1a64(data, size));
}

/* Copies base into out unless it is out already; returns the length kept, or size when there
 * is no room to append. */
static size_t path_base(char *out, size_t size, const char *base)
{
    if (size == 0)
        return 0;
    size_t n = base ? strlen(base) : 0;
    if (out == base)
        return n < size ? n : size;
    if (n >= size)
        n = size - 1;
    if (n)
        memmove(out, base, n);
    out[n] = '\0';
    return n;
}

void mpress_json_path_key(char *out, size_t size, const char *obj_path, const char *key)
{
    size_t n = path_base(out, size, obj_path);
    if (n < size)
        snprintf(out + n, size - n, "%s%s", n ? "." : "", key);
}

void mpress_json_path_index(char *out, size_t size, const char *arr_path, size_t i)
{
    size_t n = path_base(out, size, arr_path);
    if (n < size)
        snprintf(out + n, size - n, "[%zu]", i);
}
