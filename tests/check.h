/* Minimal assertions for unit tests: count failures, print where, exit 1 if any failed.
 * A test returns check_done() from main. Exit 77 means skipped (meson convention). */
#ifndef MPRESS_TEST_CHECK_H
#define MPRESS_TEST_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int check_failures_;
static int check_count_;

#define CHECK(cond)                                                                              \
    do {                                                                                         \
        check_count_++;                                                                          \
        if (!(cond)) {                                                                           \
            check_failures_++;                                                                   \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);             \
        }                                                                                        \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                     \
    do {                                                                                         \
        check_count_++;                                                                          \
        if (!(cond)) {                                                                           \
            check_failures_++;                                                                   \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);             \
            fprintf(stderr, __VA_ARGS__);                                                        \
            fputc('\n', stderr);                                                                 \
        }                                                                                        \
    } while (0)

#define CHECK_INT(a, b)                                                                          \
    do {                                                                                         \
        long long a_ = (long long)(a), b_ = (long long)(b);                                      \
        CHECK_MSG(a_ == b_, "%s = %lld, %s = %lld", #a, a_, #b, b_);                             \
    } while (0)

#define CHECK_STR(a, b)                                                                          \
    do {                                                                                         \
        const char *a_ = (a), *b_ = (b);                                                         \
        CHECK_MSG(a_ && b_ && strcmp(a_, b_) == 0, "%s = \"%s\", %s = \"%s\"", #a,              \
                  a_ ? a_ : "(null)", #b, b_ ? b_ : "(null)");                                   \
    } while (0)

/* |a - b| <= rel * max(|a|, |b|) */
#define CHECK_NEAR(a, b, rel)                                                                    \
    do {                                                                                         \
        double a_ = (double)(a), b_ = (double)(b);                                               \
        double m_ = fabs(a_) > fabs(b_) ? fabs(a_) : fabs(b_);                                   \
        CHECK_MSG(fabs(a_ - b_) <= (rel) * m_, "%s = %.9g, %s = %.9g (rel %.3g)", #a, a_, #b,   \
                  b_, m_ > 0 ? fabs(a_ - b_) / m_ : 0.0);                                        \
    } while (0)

static inline int check_done(void)
{
    fprintf(stderr, "%d checks, %d failed\n", check_count_, check_failures_);
    return check_failures_ ? 1 : 0;
}

#endif
