/* mpress validate FILE...: checks topology, profile and plan files with the strict loaders
 * and says what each one is. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static void help(void)
{
    printf("usage: mpress validate FILE...\n\n"
           "Checks that each FILE is a valid mpress-topology, mpress-profile or mpress-plan\n"
           "document (every field, unit and reference; for a plan also the embedded profile\n"
           "and topology and their hashes) and prints its format, version and a one-line\n"
           "summary. The first error in a file is reported as FILE:LINE:COL: JSON.PATH: what\n"
           "is wrong. All files are checked; the exit code is that of the first bad one.\n\n"
           "Options:\n"
           "  -h, --help   show this help\n\n" CLI_EXIT_CODES);
}

static int file_version(const char *file)
{
    struct mpress_json_doc doc;
    struct mpress_error err;
    int v = 0;
    if (mpress_json_doc_load(&doc, file, &err) == 0 &&
        json_is_integer(json_object_get(doc.root, "version")))
        v = (int)json_integer_value(json_object_get(doc.root, "version"));
    mpress_json_doc_finish(&doc);
    return v;
}

static int summarize_topology(const char *file, struct mpress_error *err)
{
    struct mpress_topology t;
    if (mpress_topology_load(file, &t, err))
        return err->code;
    int links = 0;
    for (int i = 0; i < t.n_gpus; i++)
        for (int j = i + 1; j < t.n_gpus; j++)
            links += t.nvlinks[i][j];
    char models[256] = "";
    size_t n = 0;
    for (int i = 0; i < t.n_gpus; i++) {
        int seen = 0;
        for (int k = 0; k < i; k++)
            seen |= strcmp(t.gpus[k].model, t.gpus[i].model) == 0;
        if (!seen && n < sizeof(models)) {
            int w = snprintf(models + n, sizeof(models) - n, "%s%s", n ? ", " : "",
                             t.gpus[i].model);
            n += w > 0 ? (size_t)w : 0;
        }
    }
    if (t.fabric == MPRESS_FABRIC_NVSWITCH)
        printf("%s: %d GPUs (%s), NVSwitch with %d links per GPU", t.name, t.n_gpus, models,
               t.gpus[0].nvlink_ports);
    else
        printf("%s: %d GPUs (%s), %d NVLink links between pairs", t.name, t.n_gpus, models,
               links);
    char mem[32];
    printf(", %d PCIe switch%s, %d socket%s, %s host memory\n", t.n_switches,
           t.n_switches == 1 ? "" : "es", t.n_sockets, t.n_sockets == 1 ? "" : "s",
           mpress_format_bytes(t.host_memory_bytes, mem, sizeof(mem)));
    return 0;
}

static int summarize_profile(const char *file, struct mpress_error *err)
{
    struct mpress_profile p;
    if (mpress_profile_load(file, &p, err))
        return err->code;
    int tensors = 0;
    for (int i = 0; i < p.n_ops; i++)
        tensors += p.ops[i].n_tensors;
    char saved[32];
    printf("%s (%s, %s): %d ops, %" PRIu64 " parameters, %d saved tensors, %s saved per "
           "micro-batch\n",
           p.model.name, p.source, p.device, p.n_ops, mpress_profile_params(&p), tensors,
           mpress_format_bytes(mpress_profile_saved_bytes(&p), saved, sizeof(saved)));
    mpress_profile_finish(&p);
    return 0;
}

static int summarize_plan(const char *file, struct mpress_error *err)
{
    struct mpress_plan p;
    if (mpress_plan_load(file, &p, err))
        return err->code;
    int count[MPRESS_N_ACTIONS] = {0};
    for (int i = 0; i < p.n_actions; i++)
        count[p.actions[i].action]++;
    printf("%s plan for %s on %s, %s with %d micro-batches: %d stages; %d keep, %d recompute, "
           "%d host_swap, %d d2d_swap; predicted %.4g s per iteration\n",
           p.policy, p.profile.model.name, p.topology.name, mpress_schedule_name(p.schedule),
           p.micro_batches, p.n_stages, count[0], count[1], count[2], count[3], p.iteration_s);
    mpress_plan_finish(&p);
    return 0;
}

/* Checking a file reads it more than once (the check, then the summary). A pipe or device
 * such as /dev/stdin can be read only once, so it is first copied whole into a temporary file,
 * whose path goes into tmp. Returns the path to read, or NULL with err filled. */
static int copy_slot = -1;

static const char *readable_copy(const char *file, char *tmp, size_t size,
                                 struct mpress_error *err)
{
    struct stat st;
    tmp[0] = '\0';
    if (stat(file, &st) != 0 || S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))
        return file; /* the loaders report what is wrong with it */
    char *text;
    size_t n;
    if (mpress_read_file(file, 0, &text, &n, err) != 0)
        return NULL;
    const char *dir = getenv("TMPDIR");
    snprintf(tmp, size, "%s/mpress-validate-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(tmp);
    if (fd >= 0)
        copy_slot = mpress_temp_register(tmp); /* removed if a signal comes */
    size_t off = 0;
    while (fd >= 0 && off < n) {
        ssize_t w = write(fd, text + off, n - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    free(text);
    if (fd < 0 || off < n || close(fd) != 0) {
        int e = errno;
        if (fd >= 0)
            unlink(tmp);
        mpress_temp_unregister(copy_slot);
        tmp[0] = '\0';
        mpress_error_at(err, MPRESS_ESYSTEM, file, 0, 0, "",
                        "cannot copy it to a temporary file: %s", strerror(e));
        return NULL;
    }
    return tmp;
}

int cmd_validate(int argc, char **argv)
{
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
        if (c == 'h') {
            help();
            return 0;
        }
        return cli_bad_option("validate", c, argv);
    }
    if (optind >= argc)
        return cli_usage("validate", "missing FILE");
    int rc = 0;
    for (int i = optind; i < argc; i++) {
        const char *file = argv[i];
        struct mpress_error err;
        char kind[32], tmp[512];
        mpress_error_clear(&err);
        const char *path = readable_copy(file, tmp, sizeof(tmp), &err);
        int r = path ? mpress_validate_file(path, kind, sizeof(kind), &err) : err.code;
        if (r == 0) {
            printf("%s: %s v%d: ", file, kind, file_version(path));
            if (strcmp(kind, MPRESS_TOPOLOGY_FORMAT) == 0)
                r = summarize_topology(path, &err);
            else if (strcmp(kind, MPRESS_PROFILE_FORMAT) == 0)
                r = summarize_profile(path, &err);
            else
                r = summarize_plan(path, &err);
            fflush(stdout);
        }
        if (tmp[0]) {
            unlink(tmp);
            mpress_temp_unregister(copy_slot);
            if (strcmp(err.file, tmp) == 0) /* messages name what the user gave */
                snprintf(err.file, sizeof(err.file), "%s", file);
        }
        if (r != 0) {
            cli_fail("validate", r == MPRESS_EINPUT ? "bad input file" : "cannot validate",
                     &err);
            if (rc == 0)
                rc = r;
        }
    }
    return rc;
}
