/* Shared by the subcommands: messages in the one format and exit codes. */
#ifndef MPRESS_CLI_H
#define MPRESS_CLI_H

#include "mpress/mpress.h"

/* Subcommands: int cmd_<name>(int argc, char **argv); argv[0] is the subcommand name. */
int cmd_help(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_explain(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_topo(int argc, char **argv);
int cmd_validate(int argc, char **argv);

/* `mpress profile -- COMMAND` and `--probe-bandwidth`: the CUPTI side of `profile`. */
int cmd_profile_cupti(int argc, char **argv);

/* Prints "mpress: <cmd>: <fmt...>" to stderr. */
void cli_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Prints "mpress: <cmd>: <what>: <formatted err>" and returns err->code (4 if unset). */
int cli_fail(const char *cmd, const char *what, const struct mpress_error *err);

/* Usage error: prints the message and "try 'mpress <cmd> --help'", returns MPRESS_EUSAGE. */
int cli_usage(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Usage error for what getopt_long returned as c ('?' unknown option, ':' missing value) when
 * called with opterr = 0 and an optstring starting with ':'. Names the option; returns
 * MPRESS_EUSAGE. */
int cli_bad_option(const char *cmd, int c, char **argv);

/* 1 when a and b name the same file (the same string, or the same inode), else 0: -o must not
 * overwrite the input it is made from. */
int cli_same_file(const char *a, const char *b);

/* Kinds of output besides the JSON formats (MPRESS_PLAN_FORMAT, ...) for cli_check_output. */
#define CLI_KIND_LP "lp"
#define CLI_KIND_SVG "svg"
#define CLI_KIND_TRACE "trace"

/* 0 when the output opt names at path may be written: "-", absent, or a regular file (not a
 * symbolic link) that holds an output of kind (a JSON format name or a CLI_KIND_*). Else, and
 * when path is one of inputs (NULL-terminated, may be NULL), prints why and returns
 * MPRESS_EUSAGE. */
int cli_check_output(const char *cmd, const char *opt, const char *path, const char *kind,
                     const char *const *inputs);

/* MPRESS_EUSAGE with a message when two outputs (either may be NULL or "-") are one file. */
int cli_check_distinct(const char *cmd, const char *opt_a, const char *a, const char *opt_b,
                       const char *b);

/* Parses a whole decimal integer in [min, max]; 0 ok, -1 not. */
int cli_parse_int(const char *s, long min, long max, long *out);
/* Parses a finite non-negative real; 0 ok, -1 not. */
int cli_parse_real(const char *s, double *out);

/* Exit codes as documented in --help. */
#define CLI_EXIT_CODES                                                                           \
    "Exit codes: 0 ok, 1 infeasible (no plan fits / out of memory), 2 usage,\n"                 \
    "            3 bad input file, 4 solver or system failure.\n"

/* The profile a command plans when given none: MPRESS_DEFAULT_MODEL, analytic, on the GPU of
 * topo's first device. prof must be initialized. 0, or an exit code after a message. */
int cli_default_profile(const char *cmd, const struct mpress_topology *topo,
                        struct mpress_profile *prof);

#endif
