/* MPRESS_API: what libmpress exports.
 *
 * libmpress is built with hidden symbol visibility (-fvisibility=hidden), so a function is part
 * of the shared library's interface only when its declaration carries MPRESS_API. Every public
 * declaration in include/mpress/ takes it, on the line before the declaration:
 *
 *     MPRESS_API
 *     int mpress_plan_load(const char *file, struct mpress_plan *out, struct mpress_error *err);
 *
 * Public names start with mpress_. Functions shared between files of libmpress but not meant
 * for users are declared in a folder's internal header without MPRESS_API and stay hidden; the
 * test `exports` fails when libmpress.so exports a symbol without the mpress_ prefix or misses
 * a function a public header declares (docs/architecture.md, "Public API"). */
#ifndef MPRESS_EXPORT_H
#define MPRESS_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define MPRESS_API __attribute__((visibility("default")))
#else
#define MPRESS_API
#endif

#endif
