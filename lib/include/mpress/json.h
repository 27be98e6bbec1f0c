/* JSON input and output shared by every format: deterministic, atomic writes and strict,
 * position-aware reads on top of jansson. */
#ifndef MPRESS_JSON_H
#define MPRESS_JSON_H

#include <stdint.h>
#include <jansson.h>
#include "mpress/error.h"
#include "mpress/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The one dump flag set used for every file mpress writes. 10 significant digits is enough for
 * seconds and bytes/s and stable across libc versions for the values mpress writes. */
#define MPRESS_JSON_FLAGS (JSON_SORT_KEYS | JSON_INDENT(2) | JSON_REAL_PRECISION(10))

/* Serializes root with MPRESS_JSON_FLAGS plus a trailing newline into a malloc'd string. */
MPRESS_API
char *mpress_json_dumps(const json_t *root);

/* Writes root to path atomically (temp file in the same folder + rename); "-" writes stdout,
 * "" is MPRESS_EUSAGE. On failure nothing is left at path (an existing file there is
 * untouched). */
MPRESS_API
int mpress_json_write_file(const char *path, const json_t *root, struct mpress_error *err);

/* Writes a whole text buffer atomically, same rules. */
MPRESS_API
int mpress_write_file_atomic(const char *path, const char *data, size_t size,
                             struct mpress_error *err);

/* An output being written: a new file beside path (created with mode 0666 less the umask),
 * renamed over path by commit, removed by abort. Between begin and commit or abort its name
 * is in the table that mpress_temp_cleanup empties. */
struct mpress_atomic_file {
    int fd;            /* open for writing after begin; may be closed (-1) before commit */
    int slot;          /* in the temporary-file table, -1 when it did not fit */
    char path[4096];
    char tmp[4096];
};
MPRESS_API
int mpress_atomic_begin(struct mpress_atomic_file *f, const char *path,
                        struct mpress_error *err);
/* fsync, close, rename over path; on failure the temporary file is removed. */
MPRESS_API
int mpress_atomic_commit(struct mpress_atomic_file *f, struct mpress_error *err);
MPRESS_API
void mpress_atomic_abort(struct mpress_atomic_file *f);

/* Temporary files to remove if the process is killed: register returns a slot (-1 when the
 * table of 16 is full), unregister frees it. mpress_temp_cleanup unlinks every registered
 * path and is async-signal-safe: a SIGINT/SIGTERM handler calls it, then re-raises. */
MPRESS_API
int mpress_temp_register(const char *path);
MPRESS_API
void mpress_temp_unregister(int slot);
MPRESS_API
void mpress_temp_cleanup(void);

/* A parsed document with its source text kept so that JSON paths can be mapped back to
 * line:column for error messages. */
struct mpress_json_doc {
    json_t *root;
    char *text;        /* NUL-terminated source text */
    size_t size;
    char file[512];    /* name used in messages */
};

/* Reads and parses file (rejecting duplicate keys). Parse errors carry line:column. */
MPRESS_API
int mpress_json_doc_load(struct mpress_json_doc *doc, const char *file, struct mpress_error *err);
/* Parses a text buffer; name is used in messages. */
MPRESS_API
int mpress_json_doc_parse(struct mpress_json_doc *doc, const char *text, size_t size,
                          const char *name, struct mpress_error *err);
MPRESS_API
void mpress_json_doc_finish(struct mpress_json_doc *doc);

/* Finds the line and column of the value at a JSON path ("a.b[3].c") in doc->text.
 * Returns 0 and fills line/column, or -1 when the path does not occur. */
MPRESS_API
int mpress_json_doc_locate(const struct mpress_json_doc *doc, const char *path, int *line,
                           int *column);

/* Fills err with code MPRESS_EINPUT for a value at path inside doc: file, position (when the
 * path can be located, else the nearest enclosing one), path and text. Returns MPRESS_EINPUT. */
MPRESS_API
int mpress_json_doc_error(const struct mpress_json_doc *doc, struct mpress_error *err,
                          const char *path, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* Strict field readers. Each reads member key of object obj whose own path is obj_path, and on
 * failure fills err via mpress_json_doc_error with path "obj_path.key" and returns
 * MPRESS_EINPUT. A missing key is an error unless the _opt variant is used (which leaves *out
 * unchanged and returns 0). Integers must be JSON integers; u64 rejects negatives; reals accept
 * integers and reals, must be finite and, for _nonneg, >= 0. */
MPRESS_API
int mpress_jread_u64(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                     const char *key, uint64_t *out, struct mpress_error *err);
MPRESS_API
int mpress_jread_int(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                     const char *key, int min, int max, int *out, struct mpress_error *err);
MPRESS_API
int mpress_jread_real(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                      const char *key, double *out, struct mpress_error *err);
MPRESS_API
int mpress_jread_nonneg(const struct mpress_json_doc *doc, const json_t *obj,
                        const char *obj_path, const char *key, double *out,
                        struct mpress_error *err);
MPRESS_API
int mpress_jread_bool(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                      const char *key, int *out, struct mpress_error *err);
/* Copies a string into out[size]; too long is an error. */
MPRESS_API
int mpress_jread_str(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                     const char *key, char *out, size_t size, struct mpress_error *err);
/* Returns the member as array/object (borrowed) or fills err. */
MPRESS_API
int mpress_jread_array(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                       const char *key, json_t **out, struct mpress_error *err);
MPRESS_API
int mpress_jread_object(const struct mpress_json_doc *doc, const json_t *obj,
                        const char *obj_path, const char *key, json_t **out,
                        struct mpress_error *err);

/* The one header check of every mpress document: "format" of the object obj at obj_path (the
 * root: doc->root, "") equals want and "version" is an integer in [1, max_version] (a newer
 * one: "unsupported WANT version N (this build reads 1 to MAX)"). *version gets it (version
 * may be NULL). */
MPRESS_API
int mpress_jread_header(const struct mpress_json_doc *doc, const json_t *obj,
                        const char *obj_path, const char *want, int max_version, int *version,
                        struct mpress_error *err);

/* 64-bit FNV-1a (Fowler, Noll, Vo) of a buffer: the one hash of the project, not
 * cryptographic. mpress_hash_hex writes it as 16 lower-case hex digits in out[17]; used for
 * the hashes of the profile and topology a plan was made from (of their canonical
 * serialization), for string sets and for shortened op kinds. */
MPRESS_API
uint64_t mpress_fnv1a64(const void *data, size_t size);
MPRESS_API
void mpress_hash_hex(const void *data, size_t size, char out[17]);

/* The one way JSON paths are joined: member key of the object at obj_path ("a.b" + "c" ->
 * "a.b.c", "" + "c" -> "c") and element i of the array at arr_path ("a" + 3 -> "a[3]"). out
 * may be obj_path / arr_path itself (appends in place); the result is cut to size. */
MPRESS_API
void mpress_json_path_key(char *out, size_t size, const char *obj_path, const char *key);
MPRESS_API
void mpress_json_path_index(char *out, size_t size, const char *arr_path, size_t i);

/* The largest file mpress reads (docs/formats.md, "Files mpress reads and writes"). */
#define MPRESS_MAX_FILE_BYTES ((size_t)256 << 20)

/* Reads a whole file into *text (malloc'd, NUL-terminated; *size excludes the NUL). Input
 * files that are missing, unreadable, folders or behind a bad path, larger than max_bytes
 * (0 or more than MPRESS_MAX_FILE_BYTES: MPRESS_MAX_FILE_BYTES), a FIFO that nothing writes,
 * or failing to read are MPRESS_EINPUT with err->file set; running out of memory is
 * MPRESS_ESYSTEM. On failure *text is NULL. Never waits for a FIFO's writer to appear. */
MPRESS_API
int mpress_read_file(const char *file, size_t max_bytes, char **text, size_t *size,
                     struct mpress_error *err);

/* The inverse of mpress_json_doc_locate: the JSON path ("" for the top level), line and
 * column of the value that starts at byte offset of doc->text. The text need only be valid JSON up to offset (as when
 * the parser stopped at that value; doc->root may be NULL). Returns 0, or -1 when no value
 * starts there. */
MPRESS_API
int mpress_json_doc_path_at(const struct mpress_json_doc *doc, size_t offset, char *path,
                            size_t size, int *line, int *column);

#ifdef __cplusplus
}
#endif
#endif
