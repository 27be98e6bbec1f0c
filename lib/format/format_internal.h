/* Helpers shared by the three format loaders and writers (not part of the public API). */
#ifndef MPRESS_FORMAT_INTERNAL_H
#define MPRESS_FORMAT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "mpress/error.h"
#include "mpress/json.h"

struct mpress_plan;

/* JSON paths: mpress_json_path_key / mpress_json_path_index (mpress/json.h). */

/* Element i of the array arr at arr_path, which must be an object: *out and its path in
 * path[psize], or an error at that path. */
int fmt_array_object(const struct mpress_json_doc *doc, const json_t *arr, size_t i,
                     const char *arr_path, json_t **out, char *path, size_t psize,
                     struct mpress_error *err);

/* Rejects members of obj whose names are not in keys (NULL-terminated). */
int fmt_check_keys(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                   const char *const *keys, struct mpress_error *err);


/* Reads a non-empty string member. */
int fmt_read_name(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                  const char *key, char *out, size_t size, struct mpress_error *err);
/* Reads a string member that must be one of choices (NULL-terminated); *index gets its rank. */
int fmt_read_choice(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                    const char *key, const char *const *choices, int *index,
                    struct mpress_error *err);
/* Reads a real member that must be finite and > 0. */
int fmt_read_positive(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                      const char *key, double *out, struct mpress_error *err);

/* Open-addressing set of strings (borrowed pointers), to find duplicate op names and tensor
 * ids in linear time; each name carries an int (op index, flat tensor index). */
struct fmt_names {
    const char **slot;
    int *where;
    size_t cap;
};
int fmt_names_init(struct fmt_names *s, size_t n);   /* 0 ok, -1 out of memory */
void fmt_names_free(struct fmt_names *s);
/* Inserts name with w; returns -1 when new, else the int stored with the earlier one. */
int fmt_names_add(struct fmt_names *s, const char *name, int w);
/* The int stored with name, or -1. */
int fmt_names_find(const struct fmt_names *s, const char *name);

/* Loads and parses a file like mpress_json_doc_load, but explains integers that do not fit in
 * 64 bits (jansson refuses them while parsing) with their JSON path and position. */
int fmt_doc_load(struct mpress_json_doc *doc, const char *file, struct mpress_error *err);

/* An error at a path that has no position (a member missing from the top-level object) gets
 * the position of the top-level object. */
void fmt_root_position(const struct mpress_json_doc *doc, struct mpress_error *err);

/* Writing: set members, remembering whether anything failed (allocation, or a uint64 that does
 * not fit in a JSON integer, i.e. above INT64_MAX). */
struct fmt_out {
    int bad;
};
void fmt_set(struct fmt_out *o, json_t *obj, const char *key, json_t *value);
void fmt_set_u64(struct fmt_out *o, json_t *obj, const char *key, uint64_t v);
void fmt_set_int(struct fmt_out *o, json_t *obj, const char *key, long long v);
void fmt_set_real(struct fmt_out *o, json_t *obj, const char *key, double v);
void fmt_set_str(struct fmt_out *o, json_t *obj, const char *key, const char *v);
void fmt_set_bool(struct fmt_out *o, json_t *obj, const char *key, int v);
void fmt_append(struct fmt_out *o, json_t *arr, json_t *value);

/* Serializes root, checks that what would be written reads back with check() (the loader of
 * that format), and writes it atomically. Takes ownership of root (NULL: serialization failed).
 * A document that would not load is refused with MPRESS_ESYSTEM: nothing is written. */
int fmt_save_checked(const char *file, json_t *root, const char *format,
                     int (*check)(const struct mpress_json_doc *doc, struct mpress_error *err),
                     struct mpress_error *err);

/* Whole-document checks used by fmt_save_checked and mpress_validate_file. */
int fmt_topology_check(const struct mpress_json_doc *doc, struct mpress_error *err);
int fmt_profile_check(const struct mpress_json_doc *doc, struct mpress_error *err);
int fmt_plan_check(const struct mpress_json_doc *doc, struct mpress_error *err);

/* Reads a plan document (root of doc) into out; frees what it allocated on error. */
int fmt_plan_from_doc(const struct mpress_json_doc *doc, struct mpress_plan *out,
                      struct mpress_error *err);

/* mpress_hash_hex of the canonical serialization of a document object. 0 ok, -1 no memory. */
int fmt_hash_json(const json_t *obj, char out[17]);

#endif
