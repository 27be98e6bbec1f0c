/* mpress: profile -> plan -> run. One table of subcommands; each lives in cmd_<name>.c. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "cli.h"

struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
};

static const struct command commands[] = {
    {"profile", cmd_profile, "make a profile: analytic model, PipeDream import, or CUPTI"},
    {"plan", cmd_plan, "choose stages, GPU mapping and per-tensor actions (GLPK ILP)"},
    {"run", cmd_run, "execute a plan (simulator, or host: real training) and report"},
    {"explain", cmd_explain, "describe a plan in words and tables"},
    {"compare", cmd_compare, "a plan beside ZeRO and Megatron recompute on the same server"},
    {"topo", cmd_topo, "list, show, import and emulate server topologies"},
    {"validate", cmd_validate, "check a topology, profile or plan file"},
    {"help", cmd_help, "show help for mpress or a command"},
};
#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *out)
{
    fprintf(out, "usage: mpress <command> [options]\n\n"
                 "Plans pipeline-parallel training of models that do not fit in GPU memory:\n"
                 "keep, recompute, host swap or D2D swap over NVLink, per saved tensor.\n\n"
                 "Commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\nRun 'mpress <command> --help' for a command's options.\n\n" CLI_EXIT_CODES);
}

int cmd_help(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < N_COMMANDS; i++) {
        if (strcmp(argv[1], commands[i].name) == 0 && commands[i].fn != cmd_help) {
            char help[] = "--help";
            char *args[] = {argv[1], help, NULL};
            return commands[i].fn(2, args);
        }
    }
    fprintf(stderr, "mpress: help: unknown command '%s'\nTry 'mpress help'.\n", argv[1]);
    return MPRESS_EUSAGE;
}

/* SIGINT, SIGTERM, SIGHUP: remove the temporary files of outputs being written, then die of
 * the same signal (the shell reports 128 + its number: 130, 143, 129). */
static void on_signal(int sig)
{
    mpress_temp_cleanup();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void catch_signals(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        struct sigaction sa, old;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        /* a signal ignored by whoever started mpress (nohup) stays ignored */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaction(sigs[i], &sa, NULL);
    }
}

/* Standard output that could not be written (a full disk, a closed pipe) fails the command
 * that otherwise succeeded: exit 4 with a message. */
static int finish_stdout(int rc)
{
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout))
        return rc;
    int e = errno;
    if (rc == 0) {
        fprintf(stderr, "mpress: cannot write standard output: %s\n",
                e ? strerror(e) : "write error");
        rc = MPRESS_ESYSTEM;
    }
    return rc;
}

static int run(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return MPRESS_EUSAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("mpress %s%s\n", mpress_version(), mpress_has_cuda() ? " (cuda)" : "");
        return 0;
    }
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "mpress: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return MPRESS_EUSAGE;
}

/* Branch and bound allocates and frees every node's problem. With glibc's default trim
 * threshold (128 KiB) the freed top of the heap went back to the kernel after each node and
 * came back as fresh zeroed pages at the next: the default `mpress plan` spent 0.4-0.5 s of
 * its 2.2 s in the kernel. Freed memory up to 256 MiB now stays in the process (1.7 s, the
 * same plan; docs/benchmarks.md, "Planner"). Setting the trim threshold fixes glibc's mmap
 * threshold at its 128 KiB start, where it would otherwise grow with the blocks freed, so
 * that every tensor of the host runtime above it was a fresh mapping (the 2-device host
 * benchmark's step +10-15 % against its prediction); blocks up to 32 MiB (glibc's largest
 * threshold) come from the heap again. */
static void tune_malloc(void)
{
#if defined(__GLIBC__)
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
#endif
}

int main(int argc, char **argv)
{
    tune_malloc();
    catch_signals();
    return finish_stdout(run(argc, argv));
}
