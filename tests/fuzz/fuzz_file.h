/* Helpers shared by the libFuzzer targets: the loaders take file paths, so each input is
 * written to an anonymous in-memory file (memfd) and read back through /proc/self/fd/N. */
#ifndef MPRESS_FUZZ_FILE_H
#define MPRESS_FUZZ_FILE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* slot 0 for the input, 1 for re-serialized documents. Returns the path to open. */
static inline const char *fuzz_file(int slot, const void *data, size_t size)
{
    static int fd[2] = {-1, -1};
    static char path[2][64];
    if (fd[slot] < 0) {
        fd[slot] = memfd_create(slot ? "mpress-fuzz-out" : "mpress-fuzz-in", 0);
        if (fd[slot] < 0) {
            perror("memfd_create");
            abort();
        }
        snprintf(path[slot], sizeof(path[slot]), "/proc/self/fd/%d", fd[slot]);
    }
    if (ftruncate(fd[slot], 0) != 0) {
        perror("ftruncate");
        abort();
    }
    const char *p = data;
    size_t done = 0;
    while (done < size) {
        ssize_t w = pwrite(fd[slot], p + done, size - done, (off_t)done);
        if (w <= 0) {
            perror("pwrite");
            abort();
        }
        done += (size_t)w;
    }
    return path[slot];
}

/* A property that failed: print what and abort, so libFuzzer records the input. */
#define FUZZ_ASSERT(cond, ...)                                                                 \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "fuzz property failed: %s: ", #cond);                              \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fputc('\n', stderr);                                                               \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

/* An error that a loader returned must say something and have a known code. */
#define FUZZ_CHECK_ERROR(rc, err)                                                              \
    FUZZ_ASSERT((rc) == MPRESS_OK || ((err).text[0] != '\0' && (rc) == (err).code),            \
                "rc %d code %d text '%s'", (rc), (err).code, (err).text)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
