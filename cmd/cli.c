/* Messages and argument parsing shared by the subcommands. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static void vmessage(const char *cmd, const char *fmt, va_list ap)
{
    fprintf(stderr, "mpress: %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void cli_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage(cmd, fmt, ap);
    va_end(ap);
}

int cli_fail(const char *cmd, const char *what, const struct mpress_error *err)
{
    char buf[2048];
    mpress_error_format(err, buf, sizeof(buf));
    fprintf(stderr, "mpress: %s: %s: %s\n", cmd, what, buf);
    return err && err->code ? err->code : MPRESS_ESYSTEM;
}

int cli_usage(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmessage(cmd, fmt, ap);
    va_end(ap);
    fprintf(stderr, "Try 'mpress %s --help'.\n", cmd);
    return MPRESS_EUSAGE;
}

int cli_bad_option(const char *cmd, int c, char **argv)
{
    /* optopt names a short option (and is the value of a long one that lacks its argument);
     * a long option is named by argv[optind - 1], which getopt has already passed. */
    char shortopt[3] = {'-', (char)optopt, '\0'};
    const char *prev = optind > 0 ? argv[optind - 1] : "";
    const char *next = argv[optind] ? argv[optind] : "";
    int is_long = strncmp(prev, "--", 2) == 0 &&
                  !(optopt > 0 && optopt < 256 && next[0] == '-' && next[1] != '-' &&
                    strchr(next, optopt)); /* not a later letter of a cluster like -qx */
    if (c == ':')
        return cli_usage(cmd, "option '%s' needs a value", is_long ? prev : shortopt);
    if (optopt && is_long && strchr(prev, '='))
        return cli_usage(cmd, "option '%.*s' takes no value", (int)(strchr(prev, '=') - prev),
                         prev);
    return cli_usage(cmd, "unknown option '%s'", optopt && !is_long ? shortopt : prev);
}

int cli_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    if (strcmp(a, b) == 0)
        return 1;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

int cli_parse_int(const char *s, long min, long max, long *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

int cli_parse_real(const char *s, double *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < 0)
        return -1;
    *out = v;
    return 0;
}
