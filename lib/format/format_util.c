/* Helpers shared by the topology, profile and plan formats: paths, unknown-field checks,
 * choice strings, integer-overflow diagnosis, checked atomic saves. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format_internal.h"

int fmt_array_object(const struct mpress_json_doc *doc, const json_t *arr, size_t i,
                     const char *arr_path, json_t **out, char *path, size_t psize,
                     struct mpress_error *err)
{
    mpress_json_path_index(path, psize, arr_path, i);
    *out = json_array_get(arr, i);
    if (!json_is_object(*out))
        return mpress_json_doc_error(doc, err, path, "expected an object");
    return 0;
}

int fmt_check_keys(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                   const char *const *keys, struct mpress_error *err)
{
    const char *key;
    json_t *value;
    /* json_object_foreach needs a non-const object; iteration does not modify it. */
    json_object_foreach((json_t *)obj, key, value) {
        int known = 0;
        for (const char *const *k = keys; *k; k++)
            if (strcmp(*k, key) == 0) {
                known = 1;
                break;
            }
        if (!known) {
            char path[512];
            mpress_json_path_key(path, sizeof(path), obj_path, key);
            return mpress_json_doc_error(doc, err, path, "unknown field");
        }
    }
    return 0;
}

int fmt_read_name(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                  const char *key, char *out, size_t size, struct mpress_error *err)
{
    if (mpress_jread_str(doc, obj, obj_path, key, out, size, err))
        return MPRESS_EINPUT;
    if (!out[0]) {
        char path[512];
        mpress_json_path_key(path, sizeof(path), obj_path, key);
        return mpress_json_doc_error(doc, err, path, "expected a non-empty string");
    }
    return 0;
}

int fmt_read_choice(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                    const char *key, const char *const *choices, int *index,
                    struct mpress_error *err)
{
    char s[64];
    if (mpress_jread_str(doc, obj, obj_path, key, s, sizeof(s), err))
        return MPRESS_EINPUT;
    for (int i = 0; choices[i]; i++)
        if (strcmp(s, choices[i]) == 0) {
            *index = i;
            return 0;
        }
    char list[256] = "";
    size_t n = 0;
    for (int i = 0; choices[i] && n < sizeof(list); i++) {
        int k = snprintf(list + n, sizeof(list) - n, "%s\"%s\"", i ? ", " : "", choices[i]);
        if (k < 0)
            break;
        n += (size_t)k;
    }
    char path[512];
    mpress_json_path_key(path, sizeof(path), obj_path, key);
    return mpress_json_doc_error(doc, err, path, "expected one of %s, got \"%s\"", list, s);
}

int fmt_read_positive(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                      const char *key, double *out, struct mpress_error *err)
{
    if (mpress_jread_nonneg(doc, obj, obj_path, key, out, err))
        return MPRESS_EINPUT;
    if (!(*out > 0)) {
        char path[512];
        mpress_json_path_key(path, sizeof(path), obj_path, key);
        return mpress_json_doc_error(doc, err, path, "expected a positive number, got 0");
    }
    return 0;
}

/* ---- string sets ----------------------------------------------------------------------- */

static uint64_t str_hash(const char *s)
{
    return mpress_fnv1a64(s, strlen(s));
}

int fmt_names_init(struct fmt_names *s, size_t n)
{
    s->cap = 16;
    while (s->cap < 2 * n + 2)
        s->cap *= 2;
    s->slot = calloc(s->cap, sizeof(*s->slot));
    s->where = calloc(s->cap, sizeof(*s->where));
    if (!s->slot || !s->where) {
        free(s->slot);
        free(s->where);
        s->slot = NULL;
        s->where = NULL;
        return -1;
    }
    return 0;
}

void fmt_names_free(struct fmt_names *s)
{
    free(s->slot);
    free(s->where);
    s->slot = NULL;
    s->where = NULL;
}

/* Inserts name with index w; returns -1 if inserted, else the index stored with the earlier
 * occurrence. */
int fmt_names_add(struct fmt_names *s, const char *name, int w)
{
    size_t i = (size_t)str_hash(name) & (s->cap - 1);
    while (s->slot[i]) {
        if (strcmp(s->slot[i], name) == 0)
            return s->where[i];
        i = (i + 1) & (s->cap - 1);
    }
    s->slot[i] = name;
    s->where[i] = w;
    return -1;
}

int fmt_names_find(const struct fmt_names *s, const char *name)
{
    size_t i = (size_t)str_hash(name) & (s->cap - 1);
    while (s->slot[i]) {
        if (strcmp(s->slot[i], name) == 0)
            return s->where[i];
        i = (i + 1) & (s->cap - 1);
    }
    return -1;
}

/* ---- integers that do not fit ----------------------------------------------------------- */

/* Byte offset of 1-based line:column in text, counting columns as the JSON locator does
 * (UTF-8 continuation bytes do not advance the column). */
static size_t offset_of(const char *text, size_t size, int line, int column)
{
    int l = 1, c = 1;
    for (size_t i = 0; i < size; i++) {
        if (l == line && c == column && ((unsigned char)text[i] & 0xC0) != 0x80)
            return i;
        if (text[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)text[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    return size;
}

/* Depth-first search, in document order, for a number that was written as an integer but
 * parsed as a real beyond the int64 range. Fills path and returns 1 when found. */
static int find_overflow(const struct mpress_json_doc *doc, const json_t *v, char *path,
                         size_t cap, char *token, size_t token_size)
{
    size_t plen = strlen(path);
    if (json_is_object(v)) {
        const char *key;
        json_t *m;
        json_object_foreach((json_t *)v, key, m) {
            snprintf(path + plen, cap - plen, "%s%s", plen ? "." : "", key);
            if (find_overflow(doc, m, path, cap, token, token_size))
                return 1;
            path[plen] = '\0';
        }
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            snprintf(path + plen, cap - plen, "[%zu]", i);
            if (find_overflow(doc, json_array_get(v, i), path, cap, token, token_size))
                return 1;
            path[plen] = '\0';
        }
    } else if (json_is_real(v) && fabs(json_real_value(v)) >= 9223372036854775807.0) {
        int line, col;
        if (mpress_json_doc_locate(doc, path, &line, &col) != 0)
            return 0;
        size_t off = offset_of(doc->text, doc->size, line, col), k = 0;
        int integral = 1;
        while (off < doc->size && !strchr(",]} \t\r\n", doc->text[off])) {
            if (strchr(".eE", doc->text[off]))
                integral = 0;
            if (k + 1 < token_size)
                token[k++] = doc->text[off];
            off++;
        }
        token[k] = '\0';
        /* -9223372036854775808 fits but rounds to the same double as its overflowing
         * neighbour: ask strtoll which one this is. */
        errno = 0;
        (void)strtoll(token, NULL, 10);
        int overflows = errno == ERANGE || k + 1 >= token_size;
        if (k + 1 >= token_size && token_size > 4)
            memcpy(token + token_size - 4, "...", 4);
        return integral && overflows;
    }
    return 0;
}

void fmt_root_position(const struct mpress_json_doc *doc, struct mpress_error *err)
{
    if (!err || err->code != MPRESS_EINPUT || err->line > 0 || !doc->text || !doc->root ||
        strcmp(err->file, doc->file) != 0)
        return;
    /* A member missing from the top-level object: point at that object's opening brace. */
    const char *brace = strchr(doc->text, '{');
    char path[8];
    int line, col;
    if (brace && mpress_json_doc_path_at(doc, (size_t)(brace - doc->text), path, sizeof(path),
                                         &line, &col) == 0) {
        err->line = line;
        err->column = col;
    }
}

/* jansson stops at a real beyond double range ("real number overflow") with the position of
 * the token's last character: name the value's path and give its first character. */
static int explain_real_overflow(struct mpress_json_doc *doc, struct mpress_error *err)
{
    if (!strstr(err->text, "real number overflow") || err->line <= 0)
        return 0;
    size_t end = offset_of(doc->text, doc->size, err->line, err->column);
    if (end >= doc->size)
        return 0;
    size_t start = end;
    while (start > 0 && !strchr(",:[{ \t\r\n", doc->text[start - 1]))
        start--;
    char path[512], token[48];
    int line, col;
    if (mpress_json_doc_path_at(doc, start, path, sizeof(path), &line, &col) != 0 || !path[0])
        return 0;
    size_t len = end + 1 - start;
    snprintf(token, sizeof(token), "%.*s%s", (int)(len > 40 ? 40 : len), doc->text + start,
             len > 40 ? "..." : "");
    mpress_error_at(err, MPRESS_EINPUT, doc->file, line, col, path,
                    "number %s is out of range (numbers must be finite)", token);
    return 1;
}

int fmt_doc_load(struct mpress_json_doc *doc, const char *file, struct mpress_error *err)
{
    int rc = mpress_json_doc_load(doc, file, err);
    if (rc != MPRESS_EINPUT || !doc->text || doc->root)
        return rc;
    if (explain_real_overflow(doc, err))
        return rc;
    /* jansson refuses integers outside int64 while parsing, with a terse message and the
     * position where it stopped. Parse again reading integers as reals to find which value
     * it was, so the message can name its JSON path like every other error. */
    json_error_t je;
    json_t *root = json_loadb(doc->text, doc->size,
                              JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &je);
    if (!root)
        return rc;
    char path[1024] = "", token[48] = "";
    if (find_overflow(doc, root, path, sizeof(path), token, sizeof(token)))
        rc = mpress_json_doc_error(doc, err, path,
                                   "integer %s does not fit in 64 bits (the largest allowed "
                                   "is 9223372036854775807)",
                                   token);
    json_decref(root);
    return rc;
}

/* ---- writing ---------------------------------------------------------------------------- */

void fmt_set(struct fmt_out *o, json_t *obj, const char *key, json_t *value)
{
    if (!value || json_object_set_new(obj, key, value) != 0)
        o->bad = 1;
}

void fmt_set_u64(struct fmt_out *o, json_t *obj, const char *key, uint64_t v)
{
    if (v > (uint64_t)INT64_MAX) {
        o->bad = 1;
        return;
    }
    fmt_set(o, obj, key, json_integer((json_int_t)v));
}

void fmt_set_int(struct fmt_out *o, json_t *obj, const char *key, long long v)
{
    fmt_set(o, obj, key, json_integer((json_int_t)v));
}

void fmt_set_real(struct fmt_out *o, json_t *obj, const char *key, double v)
{
    /* json_real refuses NaN and infinities: the document is then not written. */
    fmt_set(o, obj, key, json_real(v));
}

void fmt_set_str(struct fmt_out *o, json_t *obj, const char *key, const char *v)
{
    fmt_set(o, obj, key, json_string(v));
}

void fmt_set_bool(struct fmt_out *o, json_t *obj, const char *key, int v)
{
    fmt_set(o, obj, key, json_boolean(v));
}

void fmt_append(struct fmt_out *o, json_t *arr, json_t *value)
{
    if (!value || json_array_append_new(arr, value) != 0)
        o->bad = 1;
}

int fmt_save_checked(const char *file, json_t *root, const char *format,
                     int (*check)(const struct mpress_json_doc *doc, struct mpress_error *err),
                     struct mpress_error *err)
{
    if (!root)
        return mpress_error_at(err, MPRESS_ESYSTEM, file, 0, 0, "",
                               "cannot serialize the %s (out of memory, a non-finite number "
                               "or a size above 2^63-1)",
                               format);
    char *s = mpress_json_dumps(root);
    json_decref(root);
    if (!s)
        return mpress_error_at(err, MPRESS_ESYSTEM, file, 0, 0, "", "out of memory");
    size_t n = strlen(s);
    struct mpress_json_doc doc;
    struct mpress_error why;
    mpress_error_clear(&why);
    int rc = mpress_json_doc_parse(&doc, s, n, file, &why);
    if (rc == 0)
        rc = check(&doc, &why);
    mpress_json_doc_finish(&doc);
    if (rc != 0) {
        char msg[1400];
        /* Not the reader's fault: the caller built an inconsistent struct. */
        snprintf(msg, sizeof(msg), "%s%s%s", why.path, why.path[0] ? ": " : "", why.text);
        free(s);
        return mpress_error_at(err, MPRESS_ESYSTEM, file, 0, 0, "",
                               "refusing to write an invalid %s: %s", format, msg);
    }
    rc = mpress_write_file_atomic(file, s, n, err);
    free(s);
    return rc;
}

int fmt_hash_json(const json_t *obj, char out[17])
{
    char *s = obj ? mpress_json_dumps(obj) : NULL;
    if (!s) {
        out[0] = '\0';
        return -1;
    }
    mpress_hash_hex(s, strlen(s), out);
    free(s);
    return 0;
}
