/* mpress profile: analytic profiles of the model zoo, PipeDream graph import, and (handed to
 * cmd_profile_cupti) CUPTI tracing of a command and bandwidth probes. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "mpress/model.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: mpress profile --analytic (--model NAME | --model-config FILE) [options]\n"
            "       mpress profile --import pipedream GRAPH.txt [-o FILE]\n"
            "       mpress profile --list-models\n"
            "       mpress profile [--memory] [-o FILE] -- COMMAND [ARGS...]\n"
            "       mpress profile --probe-bandwidth [options]\n"
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
            "  --gpu TYPE             the GPU the times describe (default v100), one of:\n"
            "                        ");
    for (const struct mpress_gpu_spec *g = mpress_gpu_specs(); g && g->key; g++)
        fprintf(out, " %s", g->key);
    fprintf(out,
            "\n"
            "  --micro-batch N        samples per micro-batch (overrides the config)\n"
            "  --seq N                sequence length (overrides the config)\n"
            "  --dtype fp16|bf16|fp32 activation and weight type (default fp16)\n"
            "  --optimizer adam|sgd   model states: adam 16 bytes/parameter mixed precision,\n"
            "                         sgd (with momentum) 12 (default adam)\n"
            "  --flash                flash-style attention: no s x s tensors are saved\n"
            "\n"
            "Import:\n"
            "  --import pipedream GRAPH.txt\n"
            "                         a PipeDream profiler graph: one op per node in\n"
            "                         topological order, its times (ms -> s), parameters (fp32)\n"
            "                         and activation (saved for backward) carried over\n"
            "\n"
            "CUPTI (needs a GPU and a CUDA build; see docs/):\n"
            "  [--memory] -- COMMAND  trace COMMAND's kernels (and allocations with --memory)\n"
            "  --probe-bandwidth      measure NVLink and PCIe bandwidths of this machine\n"
            "\n"
            "  --list-models          print the named configs and their sizes\n"
            "  -o FILE                write the profile to FILE (default: standard output);\n"
            "                         nothing is written when the command fails\n"
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

/* "--opt VALUE" or "--opt=VALUE": returns the value and advances *i, or NULL when argv[*i] is
 * not opt. *missing is set when opt is there without a value. */
static const char *opt_value(int argc, char **argv, int *i, const char *opt, int *missing)
{
    size_t n = strlen(opt);
    if (strncmp(argv[*i], opt, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] != '\0')
        return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

int cmd_profile(int argc, char **argv)
{
    const char *cmd = "profile";
    /* The CUPTI side parses its own options, including -o and --memory. */
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--") == 0 || strcmp(argv[i], "--probe-bandwidth") == 0)
            return cmd_profile_cupti(argc, argv);

    int analytic = 0, list = 0, flash = 0, gpu_given = 0;
    const char *model = NULL, *model_file = NULL, *gpu_key = "v100", *out = "-";
    const char *import_kind = NULL, *import_file = NULL;
    const char *mb = NULL, *seq = NULL, *dtype = NULL, *optimizer = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int missing = 0;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--analytic") == 0) {
            analytic = 1;
        } else if (strcmp(a, "--list-models") == 0) {
            list = 1;
        } else if (strcmp(a, "--flash") == 0) {
            flash = 1;
        } else if (strcmp(a, "--import") == 0 || strncmp(a, "--import=", 9) == 0) {
            import_kind = opt_value(argc, argv, &i, "--import", &missing);
            if (!missing && i + 1 < argc)
                import_file = argv[++i];
            else
                return cli_usage(cmd, "'--import' needs a kind and a file: --import "
                                      "pipedream GRAPH.txt");
        } else if ((v = opt_value(argc, argv, &i, "--model-config", &missing))) {
            model_file = v;
        } else if ((v = opt_value(argc, argv, &i, "--model", &missing))) {
            model = v;
        } else if ((v = opt_value(argc, argv, &i, "--gpu", &missing))) {
            gpu_key = v;
            gpu_given = 1;
        } else if ((v = opt_value(argc, argv, &i, "--micro-batch", &missing))) {
            mb = v;
        } else if ((v = opt_value(argc, argv, &i, "--seq", &missing))) {
            seq = v;
        } else if ((v = opt_value(argc, argv, &i, "--dtype", &missing))) {
            dtype = v;
        } else if ((v = opt_value(argc, argv, &i, "--optimizer", &missing))) {
            optimizer = v;
        } else if ((v = opt_value(argc, argv, &i, "-o", &missing))) {
            out = v;
        } else if ((v = opt_value(argc, argv, &i, "--output", &missing))) {
            out = v;
        } else if (missing) {
            return cli_usage(cmd, "option '%s' needs a value", a);
        } else if (a[0] == '-') {
            return cli_usage(cmd, "unknown option '%s'", a);
        } else {
            return cli_usage(cmd, "unexpected argument '%s'", a);
        }
    }

    if (list) {
        if (analytic || model || model_file || import_kind)
            return cli_usage(cmd, "'--list-models' takes no other mode");
        return list_models();
    }
    if (model || model_file)
        analytic = 1;
    if (analytic && import_kind)
        return cli_usage(cmd, "choose one of '--analytic' and '--import'");
    if (!analytic && !import_kind)
        return cli_usage(cmd, "nothing to do: give --analytic --model NAME, --import "
                              "pipedream FILE or -- COMMAND");

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
        rc = mpress_profile_import_pipedream(import_file, &p, &err);
        if (rc)
            return cli_fail(cmd, "cannot import the PipeDream graph", &err);
    } else {
        struct mpress_model_config c;
        if (model && model_file)
            return cli_usage(cmd, "choose one of '--model' and '--model-config'");
        if (!model && !model_file)
            return cli_usage(cmd, "'--analytic' needs --model NAME or --model-config FILE");
        if (model && mpress_model_find(model, &c) != 0)
            return cli_usage(cmd, "unknown model '%s' (see 'mpress profile --list-models')",
                             model);
        if (model_file && (rc = mpress_model_config_load(model_file, &c, &err)) != 0)
            return cli_fail(cmd, "cannot read the model config", &err);
        long n;
        if (mb) {
            if (cli_parse_int(mb, 1, 1 << 16, &n) != 0)
                return cli_usage(cmd, "'--micro-batch' wants an integer in [1, 65536], got "
                                      "'%s'",
                                 mb);
            c.micro_batch = (int)n;
        }
        if (seq) {
            if (cli_parse_int(seq, 1, 1 << 20, &n) != 0)
                return cli_usage(cmd, "'--seq' wants an integer in [1, 1048576], got '%s'", seq);
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
        rc = mpress_profile_analytic(&c, gpu, &p, &err);
        if (rc)
            return cli_fail(cmd, "cannot make the analytic profile", &err);
    }
    rc = mpress_profile_save(out, &p, &err);
    mpress_profile_finish(&p);
    if (rc)
        return cli_fail(cmd, "cannot write the profile", &err);
    return 0;
}
