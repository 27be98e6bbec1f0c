/* File input and output of lib/util: atomic writes keep the umask and leave no temporary file,
 * registered temporary files go when a signal arrives, reads are bounded and never wait for a
 * FIFO's writer. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "mpress/json.h"

static char dir[64];

static int count_entries(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

/* The file gets 0666 less the umask, the umask is what it was, nothing else is left. */
static void test_atomic_mode(void)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/a.txt", dir);
    mode_t old = umask(027);
    struct mpress_error err;
    CHECK_INT(mpress_write_file_atomic(path, "hello\n", 6, &err), 0);
    mode_t now = umask(old);
    CHECK_INT(now, 027);
    struct stat st;
    CHECK_INT(stat(path, &st), 0);
    CHECK_INT(st.st_mode & 0777, 0640);
    CHECK_INT(st.st_size, 6);
    CHECK_INT(count_entries(), 1);
    /* replacing keeps the new content only */
    CHECK_INT(mpress_write_file_atomic(path, "hi\n", 3, &err), 0);
    CHECK_INT(stat(path, &st), 0);
    CHECK_INT(st.st_size, 3);
    CHECK_INT(count_entries(), 1);
    /* a folder that does not exist: an error, and nothing made */
    char bad[160];
    snprintf(bad, sizeof(bad), "%s/no/such/x.txt", dir);
    CHECK_INT(mpress_write_file_atomic(bad, "x", 1, &err), MPRESS_ESYSTEM);
    CHECK_INT(count_entries(), 1);
    unlink(path);
}

/* A child begins an atomic write, installs a handler that empties the table and dies of the
 * signal, and is sent SIGTERM: it dies of SIGTERM and the temporary file is gone. */
static void on_term(int sig)
{
    mpress_temp_cleanup();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void test_signal_cleanup(void)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/b.txt", dir);
    int ready[2];
    CHECK_INT(pipe(ready), 0);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGTERM, on_term);
        struct mpress_atomic_file f;
        struct mpress_error err;
        if (mpress_atomic_begin(&f, path, &err) != 0)
            _exit(3);
        if (write(ready[1], "x", 1) != 1)
            _exit(4);
        for (;;)
            pause();
    }
    char c;
    CHECK_INT(read(ready[0], &c, 1), 1);
    CHECK_INT(count_entries(), 1); /* the temporary file exists */
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
    CHECK_INT(count_entries(), 0);
    close(ready[0]);
    close(ready[1]);

    /* the table frees its slots: more writes than slots, one after another */
    struct mpress_error err;
    for (int i = 0; i < 40; i++)
        CHECK_INT(mpress_write_file_atomic(path, "x", 1, &err), 0);
    int slot = mpress_temp_register(path);
    CHECK(slot >= 0);
    mpress_temp_unregister(slot);
    unlink(path);
}

static void test_read_bounds(void)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/c.txt", dir);
    struct mpress_error err;
    CHECK_INT(mpress_write_file_atomic(path, "0123456789", 10, &err), 0);
    char *text;
    size_t n;
    CHECK_INT(mpress_read_file(path, 10, &text, &n, &err), 0);
    CHECK_INT(n, 10);
    free(text);
    CHECK_INT(mpress_read_file(path, 9, &text, &n, &err), MPRESS_EINPUT);
    CHECK(text == NULL);
    CHECK(strstr(err.text, "larger than 9 bytes") != NULL);
    /* a device that never ends: one byte past the limit, then the error */
    CHECK_INT(mpress_read_file("/dev/zero", 1000, &text, &n, &err), MPRESS_EINPUT);
    CHECK(strstr(err.text, "larger than 1000 bytes") != NULL);
    /* 0 is the global limit, not "none" */
    CHECK_INT(mpress_read_file("/dev/zero", 0, &text, &n, &err), MPRESS_EINPUT);
    CHECK(strstr(err.text, "larger than 268435456 bytes") != NULL);
    unlink(path);

    /* a FIFO without a writer: refused at once (alarm: a reader that waits fails the test) */
    snprintf(path, sizeof(path), "%s/fifo", dir);
    CHECK_INT(mkfifo(path, 0600), 0);
    alarm(20);
    CHECK_INT(mpress_read_file(path, 0, &text, &n, &err), MPRESS_EINPUT);
    alarm(0);
    CHECK(strstr(err.text, "FIFO") != NULL);
    unlink(path);
    CHECK_INT(mpress_read_file(dir, 0, &text, &n, &err), MPRESS_EINPUT);
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/mpress-io-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_atomic_mode();
    test_signal_cleanup();
    test_read_bounds();
    rmdir(dir);
    return check_done();
}
