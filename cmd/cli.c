/* Messages and argument parsing shared by the subcommands. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* The first bytes of a regular file, NUL-terminated (empty when unreadable). */
static void read_head(const char *path, char *buf, size_t size)
{
    buf[0] = '\0';
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return;
    size_t n = 0;
    while (n + 1 < size) {
        ssize_t r = read(fd, buf + n, size - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    close(fd);
}

/* 1 when the regular file at path holds an output of this kind. */
static int is_kind(const char *path, const char *kind)
{
    char head[4096];
    if (strcmp(kind, CLI_KIND_LP) == 0) {
        read_head(path, head, sizeof(head));
        return strncmp(head, "\\* Problem: mpress_plan *\\", 26) == 0;
    }
    if (strcmp(kind, CLI_KIND_SVG) == 0) {
        read_head(path, head, sizeof(head));
        return (strncmp(head, "<?xml", 5) == 0 || strncmp(head, "<svg", 4) == 0) &&
               strstr(head, "<svg") != NULL;
    }
    if (strcmp(kind, CLI_KIND_TRACE) == 0) {
        read_head(path, head, sizeof(head));
        return head[0] == '{' && strstr(head, "\"generator\": \"mpress") != NULL;
    }
    struct mpress_json_doc doc;
    struct mpress_error err;
    mpress_error_clear(&err);
    int ok = 0;
    if (mpress_json_doc_load(&doc, path, &err) == 0) {
        json_t *f = json_object_get(doc.root, "format");
        ok = json_is_string(f) && strcmp(json_string_value(f), kind) == 0;
    }
    mpress_json_doc_finish(&doc);
    return ok;
}

static const char *kind_name(const char *kind)
{
    if (strcmp(kind, CLI_KIND_LP) == 0)
        return "an LP file written by mpress";
    if (strcmp(kind, CLI_KIND_SVG) == 0)
        return "an SVG file";
    if (strcmp(kind, CLI_KIND_TRACE) == 0)
        return "a trace written by mpress";
    if (strcmp(kind, MPRESS_PLAN_FORMAT) == 0)
        return "an mpress plan";
    if (strcmp(kind, MPRESS_PROFILE_FORMAT) == 0)
        return "an mpress profile";
    if (strcmp(kind, MPRESS_TOPOLOGY_FORMAT) == 0)
        return "an mpress topology";
    if (strcmp(kind, MPRESS_SIM_REPORT_FORMAT) == 0)
        return "an mpress simulation report";
    return kind;
}

int cli_check_output(const char *cmd, const char *opt, const char *path, const char *kind,
                     const char *const *inputs)
{
    if (strcmp(path, "-") == 0)
        return 0;
    for (const char *const *in = inputs; in && *in; in++)
        if (strcmp(*in, "-") != 0 && cli_same_file(*in, path))
            return cli_usage(cmd, "%s '%s' is the input file", opt, path);
    struct stat st;
    if (lstat(path, &st) != 0)
        return 0; /* absent (or unreachable: the write reports why) */
    const char *why = NULL;
    char not_kind[128];
    if (S_ISLNK(st.st_mode))
        why = "a symbolic link";
    else if (S_ISDIR(st.st_mode))
        why = "a directory";
    else if (S_ISFIFO(st.st_mode))
        why = "a FIFO";
    else if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
        why = "a device";
    else if (!S_ISREG(st.st_mode))
        why = "not a regular file";
    else if (!is_kind(path, kind)) {
        snprintf(not_kind, sizeof(not_kind), "not %s", kind_name(kind));
        why = not_kind;
    }
    if (!why)
        return 0;
    cli_error(cmd, "refusing to overwrite '%s': it is %s", path, why);
    return MPRESS_EUSAGE;
}

int cli_check_distinct(const char *cmd, const char *opt_a, const char *a, const char *opt_b,
                       const char *b)
{
    if (!a || !b || strcmp(a, "-") == 0 || strcmp(b, "-") == 0 || !cli_same_file(a, b))
        return 0;
    return cli_usage(cmd, "%s and %s name the same file '%s'", opt_a, opt_b, b);
}

int cli_default_profile(const char *cmd, const struct mpress_topology *topo,
                        struct mpress_profile *prof)
{
    struct mpress_model_config cfg;
    struct mpress_error err;
    mpress_error_clear(&err);
    const struct mpress_gpu_spec *spec = mpress_gpu_spec_find(topo->gpus[0].model);
    if (mpress_model_find(MPRESS_DEFAULT_MODEL, &cfg) || !spec) {
        cli_error(cmd, "cannot build the default profile: no %s",
                  spec ? "model " MPRESS_DEFAULT_MODEL : "GPU spec for the topology");
        return MPRESS_ESYSTEM;
    }
    if (mpress_profile_analytic(&cfg, spec, prof, &err))
        return cli_fail(cmd, "cannot build the default profile", &err);
    return 0;
}
