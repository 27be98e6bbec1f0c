/* mpress profile: analytic and host-measured profiles of the model zoo, PipeDream graph import,
 * and (handed to cmd_profile_cupti) CUPTI tracing of a command and bandwidth probes. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "mpress/model.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: mpress profile --analytic (--model NAME | --model-config FILE) [options]\n"
            "       mpress profile --backend host (--model NAME | --model-config FILE) [options]\n"
            "       mpress profile --import pipedream GRAPH.txt [--stages N] [-o FILE]\n"
            "       mpress profile --list-models\n"
            "       mpress profile [CUPTI options] [-o FILE] -- COMMAND [ARGS...]\n"
            "       mpress profile --events FILE [CUPTI options] [-o FILE] --\n"
            "       mpress profile --probe-bandwidth [-o TOPOLOGY]\n"
            "\n"
            "Writes an mpress-profile: the model's ops in execution order, each with forward\n"
            "and backward time per micro-batch, parameter, gradient and optimizer-state bytes,\n"
            "workspace bytes, the bytes a pipeline cut after it sends, and the tensors it saves\n"
            "for backward (bytes, and what recomputing each costs).\n"
            "\n"
            "Analytic (no GPU needed): ops, FLOPs and saved tensors come from the model\n"
            "definition; times from a roofline on the GPU's datasheet peaks (formulas and\n"
            "constants in docs/cost-model.md, configs in docs/models.md).\n"
            "  --analytic             make an analytic profile (implied by --model and\n"
            "                         --model-config)\n"
            "  --model NAME           a named config, see --list-models (the planner's default\n"
            "                         is " MPRESS_DEFAULT_MODEL ")\n"
            "  --model-config FILE    an mpress-model JSON file: family, layers, hidden, heads,\n"
            "                         ffn, seq, vocab, ...\n"
            "  --gpu TYPE             the GPU the times describe (default v100), one of:\n");
    mpress_gpu_spec_keys_print(out, 25, 80);
    fprintf(out,
            "  --micro-batch N        samples per micro-batch (overrides the config)\n"
            "  --seq N                sequence length (overrides the config)\n"
            "  --dtype fp16|bf16|fp32 activation and weight type (default fp16; bf16 needs a\n"
            "                         GPU with bf16 tensor cores, A100 and later)\n"
            "  --optimizer adam|sgd   model states: adam 16 bytes/parameter mixed precision,\n"
            "                         sgd (with momentum) 12 (default adam)\n"
            "  --flash                flash-style attention: no s x s tensors are saved\n"
            "\n"
            "Host (no GPU needed): the same ops, bytes and saved tensors, but each op's forward\n"
            "and backward is run and timed on this CPU with the host backend's math (fp32\n"
            "arithmetic, 16-bit tensors stored as bf16, OpenBLAS GEMMs) on buffers of the\n"
            "op's exact tensor bytes; device \"" MPRESS_HOST_DEVICE
            "\", source \"host\". The times\n"
            "are this machine's and vary from run to run (docs/runtime.md, \"Host profiles\").\n"
            "The model's parameters and one micro-batch's activations must fit in RAM\n"
            "(else exit 1).\n"
            "The model options above apply, except --gpu.\n"
            "  --backend host         time the ops on this CPU\n"
            "  --warmup N             whole passes (forward, then backward) before the\n"
            "                         timed ones (default 2)\n"
            "  --repeat N             timed passes; each op's median is recorded (default 9)\n"
            "  --threads N            OpenBLAS threads per GEMM (default 1: the rate of one\n"
            "                         worker thread, as `mpress topo emulate --measure`\n"
            "                         assumes for an emulated device)\n"
            "  Progress goes to stderr when it is a terminal.\n"
            "\n"
            "Import:\n"
            "  --import pipedream GRAPH.txt\n"
            "                         a PipeDream profiler graph: one op per node in\n"
            "                         topological order, its times (ms -> s), parameters (fp32)\n"
            "                         and activation (saved for backward) carried over\n"
            "  --stages N             order the nodes so that the best straight pipeline of N\n"
            "                         stages, cut along the graph's antichains as PipeDream's\n"
            "                         optimizer cuts it, is N ranges of the op order (plan\n"
            "                         with --gpus N to reach it); graphs of up to 4096 nodes\n"
            "                         and 4096 cuts (downward-closed node sets)\n"
            "\n"
            "CUPTI (needs a GPU and a CUDA build; docs/event-format.md; the full help of\n"
            "this mode: mpress profile --help --):\n"
            "  -- COMMAND [ARGS...]   run COMMAND under the CUPTI tracer and build the profile\n"
            "                         from its NVTX ranges, kernels, copies and allocations\n"
            "  --memory               run COMMAND a second time with one allocation per tensor\n"
            "                         (PyTorch's cudaMallocAsync backend) for the byte counts\n"
            "  --nvtx-torch           turn on PyTorch's per-operator NVTX ranges without\n"
            "                         editing the script\n"
            "  --warmup N             steps left out of the medians\n"
            "  --events FILE          keep the event file; with nothing after --, analyse it\n"
            "  --model-name NAME      profile.model.name; --dtype and --optimizer as above\n"
            "  --probe-bandwidth      measure PCIe and peer (NVLink) copy bandwidths of this\n"
            "                         machine and write a topology (-o TOPOLOGY)\n"
            "\n"
            "  --list-models          print the named configs and their sizes\n"
            "  -o FILE                write the profile to FILE (default: standard output);\n"
            "                         nothing is written when the command fails; FILE must\n"
            "                         not be the input file\n"
            "\n" CLI_EXIT_CODES);
}

static int list_models(void)
{
    printf("%-20s %-6s %6s %6s %6s %6s %7s %4s %14s\n", "name", "family", "layers", "hidden",
           "heads", "seq", "vocab", "mb", "parameters");
    for (const char *const *n = mpress_model_names(); *n; n++) {
        struct mpress_model_config c;
        struct mpress_model m;
        struct mpress_error err;
        mpress_model_find(*n, &c);
        if (mpress_model_build(&c, &m, &err) != 0)
            return cli_fail("profile", "cannot build a named config", &err);
        printf("%-20s %-6s %6d %6d %6d %6d %7d %4d %14llu\n", c.name, c.family, c.layers,
               c.hidden, c.heads, c.seq, c.vocab, c.micro_batch,
               (unsigned long long)mpress_model_params(&m));
        mpress_model_finish(&m);
    }
    return 0;
}

static void host_progress(void *ctx, int done, int total, const char *op)
{
    (void)ctx;
    fprintf(stderr, "\rmpress: profile: %s %d/%d %-40.40s", done * 2 <= total ? "forward" :
            "backward", done, total, op);
}

int cmd_profile(int argc, char **argv)
{
    const char *cmd = "profile";
    /* The CUPTI side parses its own options, including -o and --memory; an option only it
     * knows sends the command there too, so that a forgotten "--" is named as such. */
    static const char *const cupti_only[] = {"--", "--probe-bandwidth", "--memory",
                                             "--nvtx-torch", "--events", "--warmup",
                                             "--model-name"};
    /* Except with --backend, whose --warmup is its own. */
    int backend_given = 0;
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--backend") == 0 || strncmp(argv[i], "--backend=", 10) == 0)
            backend_given = 1;
    for (int i = 1; i < argc && !backend_given; i++)
        for (size_t k = 0; k < sizeof(cupti_only) / sizeof(cupti_only[0]); k++)
            if (strcmp(argv[i], cupti_only[k]) == 0)
                return cmd_profile_cupti(argc, argv);

    enum { O_ANALYTIC = 256, O_LIST, O_FLASH, O_IMPORT, O_MODEL_CONFIG, O_MODEL, O_GPU,
           O_MICRO_BATCH, O_SEQ, O_DTYPE, O_OPTIMIZER, O_BACKEND, O_WARMUP, O_REPEAT,
           O_THREADS, O_STAGES };
    static const struct option opts[] = {
        {"analytic", no_argument, NULL, O_ANALYTIC},
        {"list-models", no_argument, NULL, O_LIST},
        {"flash", no_argument, NULL, O_FLASH},
        {"import", required_argument, NULL, O_IMPORT},
        {"model-config", required_argument, NULL, O_MODEL_CONFIG},
        {"model", required_argument, NULL, O_MODEL},
        {"gpu", required_argument, NULL, O_GPU},
        {"micro-batch", required_argument, NULL, O_MICRO_BATCH},
        {"seq", required_argument, NULL, O_SEQ},
        {"dtype", required_argument, NULL, O_DTYPE},
        {"optimizer", required_argument, NULL, O_OPTIMIZER},
        {"backend", required_argument, NULL, O_BACKEND},
        {"warmup", required_argument, NULL, O_WARMUP},
        {"repeat", required_argument, NULL, O_REPEAT},
        {"threads", required_argument, NULL, O_THREADS},
        {"stages", required_argument, NULL, O_STAGES},
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int analytic = 0, list = 0, flash = 0, gpu_given = 0;
    const char *model = NULL, *model_file = NULL, *gpu_key = "v100", *out = "-";
    const char *import_kind = NULL, *import_file = NULL;
    const char *mb = NULL, *seq = NULL, *dtype = NULL, *optimizer = NULL;
    const char *backend = NULL, *warmup = NULL, *repeat = NULL, *threads = NULL;
    const char *stages = NULL;
    static const char import_form[] =
        "'--import' needs a kind and a file: --import pipedream GRAPH.txt";
    optind = 1;
    opterr = 0;
    /* '+': stop at the first operand, which may only be the FILE of '--import KIND FILE'. */
    for (;;) {
        int c = getopt_long(argc, argv, "+:o:h", opts, NULL);
        if (c == -1) {
            if (optind >= argc)
                break;
            if (import_kind && !import_file) {
                import_file = argv[optind++];
                continue;
            }
            return cli_usage(cmd, "unexpected argument '%s'", argv[optind]);
        }
        switch (c) {
        case 'h':
            usage(stdout);
            return 0;
        case O_ANALYTIC: analytic = 1; break;
        case O_LIST: list = 1; break;
        case O_FLASH: flash = 1; break;
        case O_IMPORT: import_kind = optarg; break;
        case O_MODEL_CONFIG: model_file = optarg; break;
        case O_MODEL: model = optarg; break;
        case O_GPU:
            gpu_key = optarg;
            gpu_given = 1;
            break;
        case O_MICRO_BATCH: mb = optarg; break;
        case O_SEQ: seq = optarg; break;
        case O_DTYPE: dtype = optarg; break;
        case O_OPTIMIZER: optimizer = optarg; break;
        case O_BACKEND: backend = optarg; break;
        case O_WARMUP: warmup = optarg; break;
        case O_REPEAT: repeat = optarg; break;
        case O_THREADS: threads = optarg; break;
        case O_STAGES: stages = optarg; break;
        case 'o': out = optarg; break;
        default:
            if (c == ':' && optopt == O_IMPORT)
                return cli_usage(cmd, "%s", import_form);
            return cli_bad_option(cmd, c, argv);
        }
    }
    if (import_kind && !import_file)
        return cli_usage(cmd, "%s", import_form);

    if (list) {
        if (analytic || model || model_file || import_kind || backend)
            return cli_usage(cmd, "'--list-models' takes no other mode");
        return list_models();
    }
    struct mpress_host_profile_options ho;
    mpress_host_profile_options_init(&ho);
    if (backend) {
        if (strcmp(backend, "host") != 0)
            return cli_usage(cmd, "unknown backend '%s' (host)", backend);
        if (analytic || import_kind)
            return cli_usage(cmd, "'--backend' does not go with '--%s'",
                             analytic ? "analytic" : "import");
        if (gpu_given)
            return cli_usage(cmd, "'--gpu' does not apply to '--backend host': the times are "
                                  "this CPU's");
        long v;
        if (warmup && cli_parse_int(warmup, 0, 1000000, &v) != 0)
            return cli_usage(cmd, "'--warmup' wants an integer in [0, 1000000], got '%s'",
                             warmup);
        if (warmup)
            ho.warmup = (int)v;
        if (repeat && cli_parse_int(repeat, 1, 1000000, &v) != 0)
            return cli_usage(cmd, "'--repeat' wants an integer in [1, 1000000], got '%s'",
                             repeat);
        if (repeat)
            ho.repeat = (int)v;
        if (threads && cli_parse_int(threads, 1, 1024, &v) != 0)
            return cli_usage(cmd, "'--threads' wants an integer in [1, 1024], got '%s'",
                             threads);
        if (threads)
            ho.threads = (int)v;
        if (isatty(STDERR_FILENO))
            ho.progress = host_progress;
    } else if (warmup || repeat || threads) {
        return cli_usage(cmd, "'--%s' needs '--backend host'",
                         warmup ? "warmup" : repeat ? "repeat" : "threads");
    }
    if (model || model_file || backend)
        analytic = 1;
    if (analytic && import_kind)
        return cli_usage(cmd, "choose one of '--analytic' and '--import'");
    if (!analytic && !import_kind)
        return cli_usage(cmd, "nothing to do: give --analytic --model NAME, --import "
                              "pipedream FILE or -- COMMAND");

    const char *input = import_kind ? import_file : model_file;
    const char *inputs[] = {input ? input : "-", NULL};
    int orc = cli_check_output(cmd, "-o", out, MPRESS_PROFILE_FORMAT, inputs);
    if (orc)
        return orc;

    struct mpress_profile p;
    struct mpress_error err;
    mpress_profile_init(&p);
    mpress_error_clear(&err);
    int rc;
    if (import_kind) {
        if (model || model_file || mb || seq || dtype || optimizer || flash || gpu_given)
            return cli_usage(cmd, "model options do not apply to '--import'");
        if (strcmp(import_kind, "pipedream") != 0)
            return cli_usage(cmd, "unknown import kind '%s' (pipedream)", import_kind);
        long n_stages = 0;
        if (stages && cli_parse_int(stages, 1, MPRESS_MAX_OPS, &n_stages) != 0)
            return cli_usage(cmd, "'--stages' wants an integer in [1, %d], got '%s'",
                             MPRESS_MAX_OPS, stages);
        double bottleneck = 0;
        rc = mpress_profile_import_pipedream_stages(import_file, (int)n_stages, &p, &bottleneck,
                                                    &err);
        if (rc == MPRESS_EUSAGE)
            return cli_usage(cmd, "%s", err.text);
        if (rc)
            return cli_fail(cmd, "cannot import the PipeDream graph", &err);
        if (n_stages > 0)
            fprintf(stderr, "mpress: profile: ordered for %ld stages: PipeDream's straight "
                    "pipeline has a slowest stage of %.3f ms (forward + backward)\n",
                    n_stages, bottleneck * 1e3);
    } else {
        struct mpress_model_config c;
        if (stages)
            return cli_usage(cmd, "'--stages' applies only to '--import'");
        if (model && model_file)
            return cli_usage(cmd, "choose one of '--model' and '--model-config'");
        if (!model && !model_file)
            return cli_usage(cmd, "'--%s' needs --model NAME or --model-config FILE",
                             backend ? "backend" : "analytic");
        if (model && mpress_model_find(model, &c) != 0)
            return cli_usage(cmd, "unknown model '%s' (see 'mpress profile --list-models')",
                             model);
        if (model_file && (rc = mpress_model_config_load(model_file, &c, &err)) != 0)
            return cli_fail(cmd, "cannot read the model config", &err);
        long n;
        if (mb) {
            if (cli_parse_int(mb, 1, MPRESS_MODEL_MAX_MICRO_BATCH, &n) != 0)
                return cli_usage(cmd, "'--micro-batch' wants an integer in [1, %d], got '%s'",
                                 MPRESS_MODEL_MAX_MICRO_BATCH, mb);
            c.micro_batch = (int)n;
        }
        if (seq) {
            if (cli_parse_int(seq, 1, MPRESS_MODEL_MAX_SEQ, &n) != 0)
                return cli_usage(cmd, "'--seq' wants an integer in [1, %d], got '%s'",
                                 MPRESS_MODEL_MAX_SEQ, seq);
            c.seq = (int)n;
        }
        if (dtype) {
            if (strcmp(dtype, "fp16") && strcmp(dtype, "bf16") && strcmp(dtype, "fp32"))
                return cli_usage(cmd, "'--dtype' wants fp16, bf16 or fp32, got '%s'", dtype);
            snprintf(c.dtype, sizeof(c.dtype), "%s", dtype);
        }
        if (optimizer) {
            if (strcmp(optimizer, "adam") && strcmp(optimizer, "sgd"))
                return cli_usage(cmd, "'--optimizer' wants adam or sgd, got '%s'", optimizer);
            snprintf(c.optimizer, sizeof(c.optimizer), "%s", optimizer);
        }
        if (flash)
            c.flash_attention = 1;
        const struct mpress_gpu_spec *gpu = mpress_gpu_spec_find(gpu_key);
        if (!gpu)
            return cli_usage(cmd, "unknown GPU '%s' (see 'mpress profile --help')", gpu_key);
        if (mpress_model_config_check(&c, &err) != 0)
            return cli_usage(cmd, "the model does not work: %s%s%s", err.path,
                             err.path[0] ? ": " : "", err.text);
        if (backend) {
            rc = mpress_profile_host(&c, &ho, &p, &err);
            if (ho.progress)
                fprintf(stderr, "\r%70s\r", "");
            if (rc)
                return cli_fail(cmd, "cannot make the host profile", &err);
        } else {
            rc = mpress_profile_analytic(&c, gpu, &p, &err);
            if (rc)
                return cli_fail(cmd, "cannot make the analytic profile", &err);
        }
    }
    rc = mpress_profile_save(out, &p, &err);
    mpress_profile_finish(&p);
    if (rc)
        return cli_fail(cmd, "cannot write the profile", &err);
    return 0;
}
