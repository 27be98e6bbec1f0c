/* Mutation fuzzing of the three loaders, deterministic (fixed seed): every mutated sample must
 * be refused with MPRESS_EINPUT and a message, or accepted; an accepted document must save and
 * reload to the same bytes (the writer's own check agrees with the loader). Run it under
 * -Db_sanitize=address to also catch leaks on the error paths. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "samples.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint32_t next(void)
{
    /* xorshift64* (Vigna, "An experimental exploration of Marsaglia's xorshift generators") */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (uint32_t)((rng * 2685821657736338717ULL) >> 32);
}

static char *read_all(const char *file, size_t *size)
{
    FILE *f = fopen(file, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t r = fread(s, 1, (size_t)n, f);
    fclose(f);
    s[r] = '\0';
    *size = r;
    return s;
}

/* One random edit of text (len bytes, buffer of cap bytes); returns the new length. */
static size_t mutate(char *buf, size_t len, size_t cap)
{
    static const char alphabet[] = "{}[],:\"0123456789-+.eEtfn \\x";
    static const char *const tokens[] = {"99999999999999999999", "-1", "1e999", "0", "null",
                                         "\"\"", "[]", "{}", "1.5", "true", "-9223372036854775808"};
    size_t pos = len ? next() % len : 0;
    switch (next() % 6) {
    case 0: /* replace a byte */
        buf[pos] = alphabet[next() % (sizeof(alphabet) - 1)];
        return len;
    case 1: /* delete a span */ {
        size_t n = 1 + next() % 8;
        if (pos + n > len)
            n = len - pos;
        memmove(buf + pos, buf + pos + n, len - pos - n + 1);
        return len - n;
    }
    case 2: /* insert a token */ {
        const char *t = tokens[next() % (sizeof(tokens) / sizeof(tokens[0]))];
        size_t n = strlen(t);
        if (len + n + 1 > cap)
            return len;
        memmove(buf + pos + n, buf + pos, len - pos + 1);
        memcpy(buf + pos, t, n);
        return len + n;
    }
    case 3: /* replace a number with a token */ {
        while (pos < len && !(buf[pos] >= '0' && buf[pos] <= '9'))
            pos++;
        size_t end = pos;
        while (end < len && strchr("0123456789.e+-", buf[end]))
            end++;
        const char *t = tokens[next() % (sizeof(tokens) / sizeof(tokens[0]))];
        size_t n = strlen(t);
        if (len - (end - pos) + n + 1 > cap)
            return len;
        memmove(buf + pos + n, buf + end, len - end + 1);
        memcpy(buf + pos, t, n);
        return len - (end - pos) + n;
    }
    case 4: /* truncate */
        buf[pos] = '\0';
        return pos;
    default: /* change a digit: keeps the syntax, breaks references and sums */
        while (pos < len && !(buf[pos] >= '0' && buf[pos] <= '9'))
            pos++;
        if (pos < len)
            buf[pos] = (char)('0' + next() % 10);
        return len;
    }
}

static int resave(const char *kind, const char *in, const char *out, struct mpress_error *err)
{
    int rc;
    if (strcmp(kind, "mpress-topology") == 0) {
        struct mpress_topology t;
        rc = mpress_topology_load(in, &t, err);
        if (!rc)
            rc = mpress_topology_save(out, &t, err);
    } else if (strcmp(kind, "mpress-profile") == 0) {
        struct mpress_profile p;
        mpress_profile_init(&p);
        rc = mpress_profile_load(in, &p, err);
        if (!rc)
            rc = mpress_profile_save(out, &p, err);
        mpress_profile_finish(&p);
    } else {
        struct mpress_plan p;
        mpress_plan_init(&p);
        rc = mpress_plan_load(in, &p, err);
        if (!rc)
            rc = mpress_plan_save(out, &p, err);
        mpress_plan_finish(&p);
    }
    return rc;
}

int main(void)
{
    struct mpress_topology t;
    struct mpress_profile p;
    struct mpress_plan plan;
    struct mpress_error err;
    sample_topology(&t);
    sample_profile(&p);
    sample_plan(&plan);
    CHECK_INT(mpress_topology_save(test_path("topology.json"), &t, &err), 0);
    CHECK_INT(mpress_profile_save(test_path("profile.json"), &p, &err), 0);
    CHECK_INT(mpress_plan_save(test_path("plan.json"), &plan, &err), 0);
    mpress_profile_finish(&p);
    mpress_plan_finish(&plan);

    static const char *const names[3] = {"topology.json", "profile.json", "plan.json"};
    const int rounds = 1000;
    int accepted = 0, refused = 0;
    for (int d = 0; d < 3; d++) {
        size_t len;
        char src_path[400];
        snprintf(src_path, sizeof(src_path), "%s", test_path(names[d]));
        char *orig = read_all(src_path, &len);
        CHECK(orig != NULL);
        if (!orig)
            continue;
        size_t cap = len + 256;
        char *buf = malloc(cap);
        for (int r = 0; r < rounds; r++) {
            memcpy(buf, orig, len + 1);
            size_t n = len;
            int edits = 1 + (int)(next() % 3);
            for (int e = 0; e < edits; e++)
                n = mutate(buf, n, cap);
            char mpath[400], kind[32] = "";
            snprintf(mpath, sizeof(mpath), "%s", write_text("m.json", buf));
            mpress_error_clear(&err);
            int rc = mpress_validate_file(mpath, kind, sizeof(kind), &err);
            if (rc != 0) {
                refused++;
                CHECK_MSG(rc == MPRESS_EINPUT && err.code == MPRESS_EINPUT && err.text[0] &&
                              strcmp(err.file, mpath) == 0,
                          "doc %d round %d: rc %d, text '%s'", d, r, rc, err.text);
                continue;
            }
            accepted++;
            /* accepted: save and reload give stable bytes */
            char o1[400], o2[400];
            snprintf(o1, sizeof(o1), "%s", test_path("o1.json"));
            snprintf(o2, sizeof(o2), "%s", test_path("o2.json"));
            CHECK_MSG(resave(kind, mpath, o1, &err) == 0, "doc %d round %d: %s", d, r, err.text);
            CHECK_MSG(resave(kind, o1, o2, &err) == 0, "doc %d round %d: %s", d, r, err.text);
            size_t n1, n2;
            char *b1 = read_all(o1, &n1), *b2 = read_all(o2, &n2);
            CHECK_MSG(b1 && b2 && n1 == n2 && memcmp(b1, b2, n1) == 0,
                      "doc %d round %d: resave differs", d, r);
            free(b1);
            free(b2);
        }
        free(buf);
        free(orig);
    }
    fprintf(stderr, "%d mutated documents accepted, %d refused\n", accepted, refused);
    CHECK(refused > accepted); /* the mutations do break most documents */
    test_cleanup();
    return check_done();
}
