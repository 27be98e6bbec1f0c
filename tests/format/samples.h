/* Small valid documents built in C for the format tests, and helpers to mutate their JSON and
 * check how the loaders reject the result. */
#ifndef MPRESS_TEST_FORMAT_SAMPLES_H
#define MPRESS_TEST_FORMAT_SAMPLES_H

#include "mpress/mpress.h"

/* 4 V100s in a DGX-1-like quarter: pairs 0-1 and 2-3 behind one PCIe switch each, two sockets. */
void sample_topology(struct mpress_topology *t);
/* A 2-layer toy transformer: 8 ops, 10 saved tensors. */
void sample_profile(struct mpress_profile *p);
/* Three stages on GPUs 2, 0, 3 of sample_topology, every kind of action, GPU 1 parks bytes. */
void sample_plan(struct mpress_plan *plan);

/* A fresh temporary folder for the test (removed by test_cleanup) and a path in it. */
const char *test_dir(void);
const char *test_path(const char *name);
void test_cleanup(void);

/* Navigates a path like "ops[2].tensors[0].bytes"; NULL when absent. */
json_t *jget(json_t *root, const char *path);
/* Replaces (or adds) the value at path; takes ownership of value. Aborts the test if the
 * parent does not exist. */
void jset(json_t *root, const char *path, json_t *value);
/* Removes the member or element at path. */
void jdel(json_t *root, const char *path);

/* Loader under test: 0 or an mpress_status, fills err. */
typedef int (*load_fn)(const char *file, struct mpress_error *err);

/* Writes text to a file named name in the test folder and returns its path. */
const char *write_text(const char *name, const char *text);

/* Dumps doc (taking ownership), loads it with load, and checks: code 3, the error's JSON path
 * equals want_path, its text contains want_text, its file is the written file. When marker is
 * not NULL, the error's line:column must be where marker first occurs in the dumped text
 * (found by plain search, independently of the loader's locator). Returns nonzero on failure. */
int expect_reject(load_fn load, json_t *doc, const char *want_path, const char *want_text,
                  const char *marker);
/* The same for a document given as text. */
int expect_reject_text(load_fn load, const char *text, const char *want_path,
                       const char *want_text, const char *marker);

#endif
