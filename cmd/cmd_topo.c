/* mpress topo: list the built-in servers, show one (or a topology file) as a matrix in the
 * style of `nvidia-smi topo -m`, import `nvidia-smi topo -m` or NCCL XML dumps, and write an
 * emulated server for the host backend. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: mpress topo list\n"
            "       mpress topo show NAME|FILE [--gpus N]\n"
            "       mpress topo import FILE [--gpu TYPE] [-o OUT]\n"
            "       mpress topo emulate --devices N --memory SIZE [--host-memory SIZE]\n"
            "                           [--reserve SIZE] [--measure] [-o OUT]\n"
            "\n"
            "list     the built-in servers, one per line with a description.\n"
            "show     prints the GPU matrix (NV# = NVLinks, PIX = same PCIe switch, NODE = same\n"
            "         socket, SYS = across sockets), peer bandwidths, PCIe switches, memory,\n"
            "         reserve and host figures of a built-in server or a mpress-topology file.\n"
            "         A NAME that is neither a built-in server nor an existing file is a usage\n"
            "         error (exit 2); a FILE that is not a valid topology gives exit 3.\n"
            "import   turns an `nvidia-smi topo -m` text dump or an NCCL topology XML dump\n"
            "         (NCCL_TOPO_DUMP_FILE) into a mpress-topology file; what the dump lacks\n"
            "         (GPU specs, bandwidths, host figures) comes from the built-in tables and is\n"
            "         listed on stderr as notes.\n"
            "emulate  writes a mpress-topology file of N emulated devices for the host\n"
            "         backend (GPU model \"" MPRESS_EMULATED_GPU
            "\"), each with SIZE of memory, joined\n"
            "         to each other by an NVSwitch-like fabric (so plans may park tensors on\n"
            "         peers) and to the host by one PCIe-like switch (docs/topologies.md,\n"
            "         \"Emulated servers\").\n"
            "\n"
            "Options:\n"
            "  --gpus N          show: keep the first N GPUs (and the switches and sockets\n"
            "                    they use); more than the server has is a usage error\n"
            "  --gpu TYPE        import: the GPU model, instead of the one the dump names or\n"
            "                    implies (nvidia-smi dumps never name it). A dump that names\n"
            "                    none and whose NVLinks imply none needs it (else exit 2); an\n"
            "                    implied model is said in the notes and recorded in the\n"
            "                    topology, and `mpress plan` repeats it. TYPE is one of:\n");
    mpress_gpu_spec_keys_print(out, 20, 80);
    fprintf(out, "  -o, --output OUT  import, emulate: write the topology to OUT (atomically)\n"
                 "                    instead of stdout; OUT must not be the input file\n"
                 "  --devices N       emulate: devices, 1 to %d\n"
                 "  --memory SIZE     emulate: memory per device. SIZE is bytes, or a number\n"
                 "                    with B, KiB, MiB, GiB or TiB (96MiB, 1GiB)\n"
                 "  --host-memory SIZE\n"
                 "                    emulate: host memory (default 16GiB)\n"
                 "  --reserve SIZE    emulate: memory per device the planner leaves unused\n"
                 "                    (default 1/%d of --memory, rounded down)\n"
                 "  --measure         emulate: FLOP/s from a 512^3 SGEMM on one OpenBLAS thread\n"
                 "                    and every bandwidth from a 64 MiB memcpy, median of 5 runs\n"
                 "                    on this machine (bandwidth_source \"measured\"); without it\n"
                 "                    the fixed figures %.0e FLOP/s and %.0e bytes/s, so the\n"
                 "                    file is the same on every machine\n",
                 MPRESS_MAX_GPUS, MPRESS_EMULATED_RESERVE_DIVISOR, MPRESS_EMULATED_FLOPS,
                 MPRESS_EMULATED_BYTES_PER_S);
    fprintf(out,
                 "  -h, --help        show this help\n\n" CLI_EXIT_CODES);
}

static int topo_list(int argc, char **argv)
{
    if (argc > 1)
        return cli_usage("topo", "list takes no arguments");
    for (const char *const *n = mpress_topology_builtin_names(); *n; n++) {
        struct mpress_topology t;
        struct mpress_error err;
        mpress_error_clear(&err);
        if (mpress_topology_builtin(*n, &t, &err))
            return cli_fail("topo", "list", &err);
        printf("%-14s %s\n", *n, t.description);
    }
    return 0;
}

static int topo_show(int argc, char **argv)
{
    static const struct option opts[] = {
        {"gpus", required_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    long gpus = 0;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (cli_parse_int(optarg, 1, MPRESS_MAX_GPUS, &gpus))
                return cli_usage("topo", "--gpus: expected an integer from 1 to %d, got '%s'",
                                 MPRESS_MAX_GPUS, optarg);
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return cli_bad_option("topo", c, argv);
        }
    }
    if (optind != argc - 1)
        return cli_usage("topo", "show takes one NAME or FILE");
    const char *what = argv[optind];
    struct mpress_topology *t = malloc(sizeof(*t));
    if (!t) {
        cli_error("topo", "out of memory");
        return MPRESS_ESYSTEM;
    }
    struct mpress_error err;
    mpress_error_clear(&err);
    int rc = mpress_topology_resolve(what, t, &err);
    if (rc == MPRESS_EUSAGE) {
        rc = cli_usage("topo", "show: %s", err.text);
    } else if (rc) {
        rc = cli_fail("topo", "cannot load topology", &err);
    } else if (gpus && (rc = mpress_topology_restrict(t, (int)gpus, &err)) != 0) {
        rc = cli_usage("topo", "--gpus: %s", err.text);
    } else {
        char *s = mpress_topology_render(t);
        if (!s) {
            cli_error("topo", "out of memory");
            rc = MPRESS_ESYSTEM;
        } else {
            fputs(s, stdout);
            free(s);
        }
    }
    free(t);
    return rc;
}

static int topo_import(int argc, char **argv)
{
    static const struct option opts[] = {
        {"gpu", required_argument, NULL, 'g'},
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *gpu = NULL, *output = NULL;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'g':
            if (!mpress_gpu_spec_find(optarg))
                return cli_usage("topo", "--gpu: unknown GPU type '%s'", optarg);
            gpu = optarg;
            break;
        case 'o':
            output = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return cli_bad_option("topo", c, argv);
        }
    }
    if (optind != argc - 1)
        return cli_usage("topo", "import takes one FILE");
    const char *file = argv[optind];
    const char *inputs[] = {file, NULL};
    int orc = output ? cli_check_output("topo", "-o", output, MPRESS_TOPOLOGY_FORMAT, inputs) : 0;
    if (orc)
        return orc;

    struct mpress_topology *t = malloc(sizeof(*t));
    char *notes = malloc(8192);
    if (!t || !notes) {
        free(t);
        free(notes);
        cli_error("topo", "out of memory");
        return MPRESS_ESYSTEM;
    }
    struct mpress_error err;
    mpress_error_clear(&err);
    int rc = mpress_topology_import_as(file, gpu, t, notes, 8192, &err);
    if (rc) {
        rc = cli_fail("topo", "cannot import", &err);
        goto done;
    }
    for (char *line = notes, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl)
            nl = line + strlen(line) - 1;
        cli_error("topo", "note: %.*s", (int)(nl - line + (*nl != '\n')), line);
    }
    /* Standard output too goes through the checked save: what is printed loads. */
    rc = mpress_topology_save(output ? output : "-", t, &err);
    if (rc)
        rc = cli_fail("topo", "cannot write topology", &err);
done:
    free(t);
    free(notes);
    return rc;
}

/* A size: decimal bytes, or a decimal number followed by B, KiB, MiB, GiB or TiB (powers of
 * 1024). 0 ok, -1 not a size, beyond 64 bits, or 0 unless zero_ok. */
static int parse_size(const char *s, int zero_ok, uint64_t *out)
{
    static const struct { const char *suffix; unsigned shift; } units[] = {
        {"", 0}, {"B", 0}, {"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}};
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (strcmp(end, units[i].suffix) == 0) {
            if ((v == 0 && !zero_ok) || v > (UINT64_MAX >> units[i].shift))
                return -1;
            *out = (uint64_t)v << units[i].shift;
            return 0;
        }
    return -1;
}

static int topo_emulate(int argc, char **argv)
{
    static const struct option opts[] = {
        {"devices", required_argument, NULL, 'd'},
        {"memory", required_argument, NULL, 'm'},
        {"host-memory", required_argument, NULL, 'H'},
        {"reserve", required_argument, NULL, 'r'},
        {"measure", no_argument, NULL, 'M'},
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    static const char size_form[] = "expected bytes or a number with B, KiB, MiB, GiB or TiB "
                                    "(e.g. 96MiB)";
    struct mpress_topology_emulate_options eo;
    memset(&eo, 0, sizeof(eo));
    const char *output = NULL;
    long devices = 0;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            if (cli_parse_int(optarg, 1, MPRESS_MAX_GPUS, &devices))
                return cli_usage("topo", "--devices: expected an integer from 1 to %d, got '%s'",
                                 MPRESS_MAX_GPUS, optarg);
            break;
        case 'm':
            if (parse_size(optarg, 0, &eo.memory_bytes))
                return cli_usage("topo", "--memory: %s, got '%s'", size_form, optarg);
            break;
        case 'H':
            if (parse_size(optarg, 0, &eo.host_memory_bytes))
                return cli_usage("topo", "--host-memory: %s, got '%s'", size_form, optarg);
            break;
        case 'r':
            if (parse_size(optarg, 1, &eo.reserve_bytes))
                return cli_usage("topo", "--reserve: %s, got '%s'", size_form, optarg);
            eo.reserve_given = 1;
            break;
        case 'M':
            eo.measure = 1;
            break;
        case 'o':
            output = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return cli_bad_option("topo", c, argv);
        }
    }
    if (optind != argc)
        return cli_usage("topo", "emulate takes no operands, got '%s'", argv[optind]);
    if (!devices || !eo.memory_bytes)
        return cli_usage("topo", "emulate needs --devices N and --memory SIZE");
    const char *no_inputs[] = {NULL};
    int orc = output ? cli_check_output("topo", "-o", output, MPRESS_TOPOLOGY_FORMAT, no_inputs)
                     : 0;
    if (orc)
        return orc;
    eo.devices = (int)devices;
    struct mpress_topology *t = malloc(sizeof(*t));
    if (!t) {
        cli_error("topo", "out of memory");
        return MPRESS_ESYSTEM;
    }
    struct mpress_error err;
    mpress_error_clear(&err);
    int rc = mpress_topology_emulate(&eo, t, &err);
    if (rc == MPRESS_EUSAGE)
        rc = cli_usage("topo", "emulate: %s", err.text);
    else if (rc)
        rc = cli_fail("topo", "cannot emulate", &err);
    else if ((rc = mpress_topology_save(output ? output : "-", t, &err)) != 0)
        rc = cli_fail("topo", "cannot write topology", &err);
    free(t);
    return rc;
}

int cmd_topo(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage("topo", "expected list, show, import or emulate");
    const char *sub = argv[1];
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 || strcmp(sub, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(sub, "list") == 0)
        return topo_list(argc - 1, argv + 1);
    if (strcmp(sub, "show") == 0)
        return topo_show(argc - 1, argv + 1);
    if (strcmp(sub, "import") == 0)
        return topo_import(argc - 1, argv + 1);
    if (strcmp(sub, "emulate") == 0)
        return topo_emulate(argc - 1, argv + 1);
    return cli_usage("topo", "unknown subcommand '%s' (expected list, show, import or emulate)",
                     sub);
}
