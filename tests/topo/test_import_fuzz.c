/* Mutations of valid dumps (byte flips, insertions, deletions, truncations, line swaps) must
 * give either a topology or MPRESS_EINPUT with the file named (or, for a well-formed dump
 * that implies no GPU model, MPRESS_EUSAGE asking for --gpu), never a crash or another code.
 * Deterministic: a fixed-seed generator, so a failure replays. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mpress/topology.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
    /* xorshift64* (Vigna, "An experimental exploration of Marsaglia's xorshift generators") */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1dull;
}

static char *slurp(const char *path, size_t *size)
{
    char *text;
    return mpress_read_file(path, 0, &text, size, NULL) == 0 ? text : NULL;
}

static const char tokens[][12] = {"NV", "X", "<", ">", "/>", "\"", "=", "\n", "\t", " ", "GPU9",
                                 "SYS", "PIX", "dev", "<gpu", "</pci>", "&", "NV99", "0x068000"};

static void mutate(char *buf, size_t *len, size_t cap)
{
    int kind = (int)(next() % 5);
    size_t n = *len;
    if (n == 0)
        return;
    size_t at = (size_t)(next() % n);
    if (kind == 0) {
        buf[at] = (char)(next() % 255 + 1);
    } else if (kind == 1) {
        const char *t = tokens[next() % (sizeof(tokens) / sizeof(tokens[0]))];
        size_t k = strlen(t);
        if (n + k < cap) {
            memmove(buf + at + k, buf + at, n - at);
            memcpy(buf + at, t, k);
            *len = n + k;
        }
    } else if (kind == 2) {
        size_t k = (size_t)(next() % 16) + 1;
        if (at + k > n)
            k = n - at;
        memmove(buf + at, buf + at + k, n - at - k);
        *len = n - k;
    } else if (kind == 3) {
        *len = at;
    } else {
        size_t b = (size_t)(next() % n), k = (size_t)(next() % 40);
        if (at + k <= n && b + k <= n && (at + k <= b || b + k <= at)) {
            char tmp[40];
            memcpy(tmp, buf + at, k);
            memcpy(buf + at, buf + b, k);
            memcpy(buf + b, tmp, k);
        }
    }
}

static void fuzz(const char *path, int rounds)
{
    size_t size;
    char *orig = slurp(path, &size);
    CHECK_MSG(orig != NULL, "cannot read %s", path);
    if (!orig)
        return;
    size_t cap = size + 4096;
    char *buf = malloc(cap);
    const char *out = "topo-fuzz-input.txt";
    int ok = 0, bad = 0;
    for (int r = 0; r < rounds; r++) {
        memcpy(buf, orig, size);
        size_t len = size;
        int muts = 1 + (int)(next() % 4);
        for (int m = 0; m < muts; m++)
            mutate(buf, &len, cap);
        /* A new file each round: rewriting one in place makes ext4 flush it (auto_da_alloc),
         * which turned a second of work into tens of seconds of waiting on the disk. */
        remove(out);
        FILE *f = fopen(out, "wb");
        fwrite(buf, 1, len, f);
        fclose(f);
        struct mpress_topology t;
        struct mpress_error err;
        char notes[2048];
        mpress_error_clear(&err);
        int rc = mpress_topology_import(out, &t, notes, sizeof(notes), &err);
        if (rc == 0) {
            ok++;
            CHECK(t.n_gpus >= 1 && t.n_gpus <= MPRESS_MAX_GPUS);
            char *s = mpress_topology_render(&t);
            CHECK(s != NULL);
            free(s);
        } else {
            bad++;
            /* A well-formed dump whose NVLinks imply no GPU model asks for --gpu (usage). */
            CHECK_MSG(rc == MPRESS_EINPUT ||
                          (rc == MPRESS_EUSAGE && strstr(err.text, "give it with --gpu TYPE")),
                      "%s round %d: rc %d: %s", path, r, rc, err.text);
            CHECK_MSG(strcmp(err.file, out) == 0, "%s round %d: file '%s'", path, r, err.file);
        }
    }
    fprintf(stderr, "%s: %d imported, %d rejected\n", path, ok, bad);
    remove(out);
    free(buf);
    free(orig);
}

int main(void)
{
    const char *src = getenv("MPRESS_SRCDIR");
    /* MPRESS_FUZZ_ROUNDS runs longer by hand; the default keeps the suite at about a second. */
    const char *r = getenv("MPRESS_FUZZ_ROUNDS");
    int rounds = r && atoi(r) > 0 ? atoi(r) : 1500;
    const char *data = getenv("MPRESS_TESTDATA");
    const char *local[] = {"perm4.nccl.xml", "nvswitch2.nccl.xml", "nvswitch4.smi.txt"};
    char path[1024];
    for (size_t i = 0; i < sizeof(local) / sizeof(local[0]); i++) {
        snprintf(path, sizeof(path), "%s/tests/topo/data/%s", src ? src : "..", local[i]);
        fuzz(path, rounds);
    }
    /* The real dumps too (tests/data/topologies). */
    const char *samples[] = {"dgx1-v100.nccl.xml", "v100x8-cubemesh.nvidia-smi.txt"};
    for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++) {
        snprintf(path, sizeof(path), "%s/topologies/%s", data ? data : "tests/data",
                 samples[i]);
        FILE *f = fopen(path, "rb");
        CHECK(f != NULL);
        if (!f)
            continue;
        fclose(f);
        fuzz(path, rounds);
    }
    return check_done();
}
