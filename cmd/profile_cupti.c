/* mpress profile -- COMMAND: runs a program under the CUPTI tracer (libmpress-inject.so,
 * loaded by the CUDA driver through CUDA_INJECTION64_PATH) and turns its event file into a
 * profile; and mpress profile --probe-bandwidth. cmd_profile hands argv over unchanged when it
 * holds "--" or "--probe-bandwidth". The traced program always runs, also when tracing cannot
 * start (no driver, no GPU, CUPTI refusing); mpress then says why and exits 4. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "config.h"
#include "mpress/trace.h"

static const char *const cmd = "profile";

static void usage(FILE *out)
{
    fprintf(out,
            "usage: mpress profile [options] [-o FILE] -- COMMAND [ARGS...]\n"
            "       mpress profile --events FILE [options] [-o FILE] --\n"
            "       mpress profile --probe-bandwidth [-o TOPOLOGY]\n"
            "\n"
            "Runs COMMAND with the CUPTI tracer injected (CUDA_INJECTION64_PATH) and NVTX\n"
            "ranges routed to CUPTI through it (NVTX_INJECTION64_PATH), then builds an\n"
            "mpress-profile (source \"cupti\") from its trace. Ops are NVTX ranges named\n"
            "\"fwd:NAME\" and \"bwd:NAME\" (or PyTorch's emit_nvtx ranges), steps are ranges\n"
            "named \"step...\"; every kernel, copy, memset and allocation counts toward the\n"
            "innermost range it was issued in; device allocations are traced in every run.\n"
            "If tracing cannot start (no driver, no GPU, another profiler holds CUPTI), COMMAND\n"
            "still runs and mpress exits 4 saying why.\n"
            "Rules and the event-file format: docs/event-format.md.\n"
            "\n"
            "  --memory          run COMMAND twice: once for times, once with\n"
            "                    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync so that every\n"
            "                    tensor is its own allocation; bytes come from the second run,\n"
            "                    and how far its step time is from the first is reported\n"
            "  --nvtx-torch      put a sitecustomize.py on PYTHONPATH that turns on\n"
            "                    torch.autograd.profiler.emit_nvtx (per-operator ranges) and\n"
            "                    marks a \"step\" range per optimizer step, without editing the\n"
            "                    script\n"
            "  --warmup N        steps left out of the medians (default 1 when there are 2 or\n"
            "                    more steps)\n"
            "  --events FILE     keep the event file at FILE (with --memory, FILE and\n"
            "                    FILE.memory); with nothing after --, analyse FILE instead of\n"
            "                    running a command\n"
            "  --model-name NAME profile.model.name (default \"traced\")\n"
            "  --dtype TYPE      fp16|bf16|fp32, to count parameters from bytes (default fp16)\n"
            "  --optimizer NAME  adam|sgd (default adam)\n"
            "  -o FILE           write the profile (or topology) to FILE (default: standard\n"
            "                    output, and then COMMAND's standard output goes to standard\n"
            "                    error); --output FILE is the same\n"
            "  -h, --help        this help\n"
            "  --probe-bandwidth measure pinned host<->device and peer copies (with and without\n"
            "                    peer access, one direction and both), 64 KiB to 1 GiB, and\n"
            "                    write a topology with bandwidth_source \"measured\"\n"
            "\n"
            "Environment: MPRESS_INJECT_LIB overrides where the tracer is looked up;\n"
            "MPRESS_CUPTI_LIB, when set, is given to NVTX instead of the tracer.\n"
            "\n" CLI_EXIT_CODES);
}

static int file_exists(const char *p)
{
    struct stat st;
    return p && *p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The tracer: $MPRESS_INJECT_LIB, beside this executable (build tree: cmd/../lib/profile;
 * install: bin/../lib*), then where the build put or installs it. */
static int find_inject(char *out, size_t size)
{
    const char *env = getenv("MPRESS_INJECT_LIB");
    if (env && *env) {
        snprintf(out, size, "%s", env);
        return file_exists(out) ? 0 : -1;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = '\0';
        static const char *const rel[] = {
            "../lib/profile/libmpress-inject.so", "../lib/libmpress-inject.so",
            "../lib64/libmpress-inject.so", "../lib/x86_64-linux-gnu/libmpress-inject.so"};
        for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
            if (snprintf(out, size, "%s/%s", exe, rel[i]) >= (int)size)
                continue;
            if (file_exists(out))
                return 0;
        }
    }
    struct mpress_trace_paths p;
    mpress_trace_paths_get(&p);
    const char *cand[] = {p.inject_build, p.inject_install};
    for (size_t i = 0; i < 2; i++)
        if (file_exists(cand[i])) {
            snprintf(out, size, "%s", cand[i]);
            return 0;
        }
    return -1;
}

/* What NVTX_INJECTION64_PATH names: the tracer itself, which hands NVTX to the libcupti it is
 * linked with (so that NVTX and the tracer share one CUPTI even where the program ships its own
 * libcupti); $MPRESS_CUPTI_LIB overrides that with a libcupti of one's choosing. */
static void find_nvtx_injection(char *out, size_t size, const char *inject)
{
    const char *env = getenv("MPRESS_CUPTI_LIB");
    snprintf(out, size, "%s", env && *env ? env : inject);
}

/* dlsym's object pointer -> a function pointer, the way POSIX allows (ISO C does not). */
#define LOAD_SYM(h, fn, name)                                                                    \
    do {                                                                                         \
        void *sym_ = dlsym(h, name);                                                             \
        memcpy(&(fn), &sym_, sizeof(fn));                                                        \
    } while (0)

/* Why the driver may not have loaded the tracer. */
static const char *driver_problem(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return "no NVIDIA driver on this machine (libcuda.so.1 cannot be loaded)";
    int (*init)(unsigned) = NULL;
    int (*count)(int *) = NULL;
    LOAD_SYM(h, init, "cuInit");
    LOAD_SYM(h, count, "cuDeviceGetCount");
    int n = 0;
    const char *why = NULL;
    if (!init || !count || init(0) != 0 || count(&n) != 0 || n == 0)
        why = "the NVIDIA driver found no usable GPU";
    dlclose(h);
    return why;
}

/* The name of device 0 from the driver, for traces without a device record (CUPTI makes that
 * record at CUDA initialisation, which may come before the tracer is loaded). */
static int driver_device_name(char *out, size_t size)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return -1;
    int (*init)(unsigned) = NULL;
    int (*get)(int *, int) = NULL;
    int (*name)(char *, int, int) = NULL;
    LOAD_SYM(h, init, "cuInit");
    LOAD_SYM(h, get, "cuDeviceGet");
    LOAD_SYM(h, name, "cuDeviceGetName");
    int dev = 0, rc = -1;
    if (init && get && name && init(0) == 0 && get(&dev, 0) == 0 &&
        name(out, (int)size, dev) == 0)
        rc = 0;
    dlclose(h);
    return rc;
}

/* The sitecustomize for --nvtx-torch, in a fresh folder put first on PYTHONPATH. It chains to
 * nothing: a program that has its own sitecustomize on the path loses it for this run. */
static const char sitecustomize[] =
    "# Written by `mpress profile --nvtx-torch` for one run: per-operator NVTX ranges from\n"
    "# PyTorch (emit_nvtx), and a \"step\" range per optimizer step for mpress's analysis.\n"
    "# Only the first Python process of the command: processes it starts (spawned data-loader\n"
    "# workers, subprocesses) inherit the variable below and are left alone, so that they do\n"
    "# not each initialise CUDA for nothing.\n"
    "import atexit\n"
    "import os\n"
    "import sys\n"
    "try:\n"
    "    if os.environ.get('MPRESS_NVTX_TORCH_PID'):\n"
    "        raise ImportError('not the first Python process')\n"
    "    os.environ['MPRESS_NVTX_TORCH_PID'] = str(os.getpid())\n"
    "    import torch\n"
    "    import torch.cuda.nvtx as _nvtx\n"
    "    _ctx = torch.autograd.profiler.emit_nvtx()\n"
    "    _ctx.__enter__()\n"
    "    _nvtx.range_push('step')\n"
    "    def _pre(opt, args, kwargs):\n"
    "        _nvtx.range_push('optim:')\n"
    "    def _post(opt, args, kwargs):\n"
    "        _nvtx.range_pop()\n"
    "        _nvtx.range_pop()\n"
    "        _nvtx.range_push('step')\n"
    "    from torch.optim.optimizer import register_optimizer_step_pre_hook, "
    "register_optimizer_step_post_hook\n"
    "    register_optimizer_step_pre_hook(_pre)\n"
    "    register_optimizer_step_post_hook(_post)\n"
    "    def _end():\n"
    "        _nvtx.range_pop()\n"
    "        _ctx.__exit__(None, None, None)\n"
    "    atexit.register(_end)\n"
    "except ImportError as e:\n"
    "    if str(e) != 'not the first Python process':\n"
    "        print('mpress: profile: --nvtx-torch: cannot import torch: %s' % e, "
    "file=sys.stderr)\n"
    "except Exception as e:\n"
    "    print('mpress: profile: --nvtx-torch: cannot turn on emit_nvtx: %s' % e, "
    "file=sys.stderr)\n";

static int write_sitecustomize(char *dir, size_t size)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, size, "%s/mpress-nvtx-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir))
        return -1;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/sitecustomize.py", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(sitecustomize, f);
    return fclose(f) == 0 ? 0 : -1;
}

struct run_env {
    const char *inject;      /* NULL: run without the tracer */
    const char *nvtx;        /* NVTX_INJECTION64_PATH */
    const char *events;
    const char *pythonpath_dir; /* NULL: leave PYTHONPATH */
    int memory_pass;
    int stdout_to_stderr;       /* the profile goes to standard output: keep it clean */
};

/* Runs argv with the tracing environment; returns the wait status, or -1 (errno set) when it
 * could not be started at all (a pipe closed on exec carries exec's errno back). */
static int run_command(char **argv, const struct run_env *e)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int saved = errno;
        close(pfd[0]);
        close(pfd[1]);
        errno = saved;
        return -1;
    }
    if (pid == 0) {
        close(pfd[0]);
        if (e->inject) {
            setenv("CUDA_INJECTION64_PATH", e->inject, 1);
            setenv("NVTX_INJECTION64_PATH", e->nvtx, 1);
            setenv(MPRESS_EVENTS_ENV, e->events, 1);
        }
        if (e->memory_pass)
            setenv("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync", 1);
        if (e->stdout_to_stderr)
            dup2(STDERR_FILENO, STDOUT_FILENO);
        if (e->pythonpath_dir) {
            const char *old = getenv("PYTHONPATH");
            char *pp = malloc(strlen(e->pythonpath_dir) + (old ? strlen(old) : 0) + 2);
            if (pp) {
                sprintf(pp, "%s%s%s", e->pythonpath_dir, old && *old ? ":" : "",
                        old ? old : "");
                setenv("PYTHONPATH", pp, 1);
            }
        }
        execvp(argv[0], argv);
        int err = errno;
        if (write(pfd[1], &err, sizeof(err)) < 0) {
            /* the parent then sees status 127 */
        }
        _exit(127);
    }
    close(pfd[1]);
    int exec_errno = 0;
    ssize_t got;
    do
        got = read(pfd[0], &exec_errno, sizeof(exec_errno));
    while (got < 0 && errno == EINTR);
    close(pfd[0]);
    /* The program owns the terminal's ^C: mpress waits for it and then analyses. */
    struct sigaction ign, old_int, old_quit;
    memset(&ign, 0, sizeof(ign));
    ign.sa_handler = SIG_IGN;
    sigaction(SIGINT, &ign, &old_int);
    sigaction(SIGQUIT, &ign, &old_quit);
    int status = 0;
    pid_t w;
    do
        w = waitpid(pid, &status, 0);
    while (w < 0 && errno == EINTR);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGQUIT, &old_quit, NULL);
    if (got == (ssize_t)sizeof(exec_errno) && exec_errno) {
        errno = exec_errno;
        return -1;
    }
    return w < 0 ? -1 : status;
}

static void describe_status(int status, char *buf, size_t size)
{
    if (WIFEXITED(status))
        snprintf(buf, size, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, size, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(buf, size, "ended with wait status %d", status);
}

/* Loads and analyses one event file; on failure prints why (naming the program) and returns
 * the exit code. ran_cmd is NULL for --events analysis without a run. */
static int analyse_events(const char *events, const char *ran_cmd,
                          const struct mpress_trace_options *opt, struct mpress_profile *p,
                          struct mpress_trace_summary *sum)
{
    struct mpress_error err = {0};
    struct mpress_trace *t = NULL;
    mpress_profile_init(p);
    struct stat st;
    if (ran_cmd && (stat(events, &st) != 0 || st.st_size == 0)) {
        const char *why = driver_problem();
        cli_error(cmd, "no trace: %s; '%s' ran untraced", why
                  ? why
                  : "the program never initialised CUDA (or the driver ignored "
                    "CUDA_INJECTION64_PATH)",
                  ran_cmd);
        return MPRESS_ESYSTEM;
    }
    int rc = mpress_trace_load(events, &t, &err);
    if (rc)
        return cli_fail(cmd, "cannot read the event file", &err);
    rc = mpress_trace_analyse(t, opt, p, sum, &err);
    mpress_trace_destroy(t);
    if (ran_cmd && !sum->tracer_ok) {
        cli_error(cmd, "CUPTI did not start: %s; '%s' ran untraced",
                  sum->tracer_error[0] ? sum->tracer_error : "the tracer reported no start",
                  ran_cmd);
        return MPRESS_ESYSTEM;
    }
    if (rc)
        return cli_fail(cmd, "cannot build a profile from the trace", &err);
    char name[64];
    if (ran_cmd && strcmp(p->device, "unknown") == 0 &&
        driver_device_name(name, sizeof(name)) == 0)
        snprintf(p->device, sizeof(p->device), "%s", name);
    return 0;
}

static void print_summary(const char *label, const struct mpress_profile *p,
                          const struct mpress_trace_summary *s)
{
    fprintf(stderr,
            "mpress: profile: %s%s%d ops, %d step%s (%d used), %llu GPU activities "
            "(%llu outside op ranges), %llu allocations\n",
            label, label[0] ? ": " : "", p->n_ops, s->n_steps, s->n_steps == 1 ? "" : "s",
            s->n_steps_used, (unsigned long long)s->n_gpu_activities,
            (unsigned long long)s->n_unattributed, (unsigned long long)s->n_allocs);
    for (int d = 0; d < s->n_devices; d++)
        fprintf(stderr,
                "mpress: profile:   device %d%s%s: traced allocations peak at %llu bytes "
                "(%.1f MiB)\n",
                s->devices[d].id, s->devices[d].name[0] ? " " : "", s->devices[d].name,
                (unsigned long long)s->devices[d].peak_bytes,
                (double)s->devices[d].peak_bytes / 1048576.0);
    if (s->dropped_records)
        fprintf(stderr, "mpress: profile:   warning: CUPTI dropped %llu records\n",
                (unsigned long long)s->dropped_records);
    if (s->truncated_line || !s->clean_exit)
        fprintf(stderr, "mpress: profile:   warning: the trace ends early (the program did "
                        "not exit normally); it was analysed up to where it stops\n");
    if (s->unattributed_persistent_bytes)
        fprintf(stderr, "mpress: profile:   %llu bytes of long-lived allocations are outside "
                        "every op range\n",
                (unsigned long long)s->unattributed_persistent_bytes);
}

/* Seconds of GPU time per step the profile accounts for: the fallback comparison when the
 * trace has no step ranges. */
static double profile_time(const struct mpress_profile *p)
{
    double s = 0;
    for (int i = 0; i < p->n_ops; i++)
        s += p->ops[i].fwd_s + p->ops[i].bwd_s;
    return s;
}

/* --probe-bandwidth: measure, show the table on stderr, write the topology. */
static int probe_bandwidth(const char *out)
{
    struct mpress_probe pr;
    struct mpress_topology topo;
    struct mpress_error err = {0};
    if (mpress_probe_bandwidth(&pr, &err) != 0)
        return cli_fail(cmd, "cannot probe bandwidths", &err);
    char *table = mpress_probe_render(&pr);
    if (table)
        fputs(table, stderr);
    free(table);
    int rc = mpress_probe_topology(&pr, &topo, &err);
    mpress_probe_finish(&pr);
    if (rc)
        return cli_fail(cmd, "cannot build a topology from the measurements", &err);
    if (mpress_topology_save(out, &topo, &err) != 0)
        return cli_fail(cmd, "cannot write the topology", &err);
    return 0;
}

int cmd_profile_cupti(int argc, char **argv)
{
    int memory = 0, nvtx_torch = 0, probe = 0, dashdash = -1;
    const char *out = "-", *events_keep = NULL;
    struct mpress_trace_options opt;
    mpress_trace_options_init(&opt);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            dashdash = i;
            break;
        }
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--memory") == 0) {
            memory = 1;
        } else if (strcmp(a, "--nvtx-torch") == 0) {
            nvtx_torch = 1;
        } else if (strcmp(a, "--probe-bandwidth") == 0) {
            probe = 1;
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            if (!val)
                return cli_usage(cmd, "%s needs a file name", a);
            out = val;
            i++;
        } else if (strcmp(a, "--events") == 0) {
            if (!val)
                return cli_usage(cmd, "--events needs a file name");
            events_keep = val;
            i++;
        } else if (strcmp(a, "--warmup") == 0) {
            long w;
            if (!val || cli_parse_int(val, 0, 1000000, &w) != 0)
                return cli_usage(cmd, "--warmup needs a number of steps >= 0, got '%s'",
                                 val ? val : "");
            opt.warmup_steps = (int)w;
            i++;
        } else if (strcmp(a, "--model-name") == 0) {
            if (!val || strlen(val) >= sizeof(opt.model_name) || !*val)
                return cli_usage(cmd, "--model-name needs a name of 1 to %zu characters",
                                 sizeof(opt.model_name) - 1);
            snprintf(opt.model_name, sizeof(opt.model_name), "%s", val);
            i++;
        } else if (strcmp(a, "--dtype") == 0) {
            if (!val || (strcmp(val, "fp16") && strcmp(val, "bf16") && strcmp(val, "fp32")))
                return cli_usage(cmd, "--dtype must be fp16, bf16 or fp32");
            snprintf(opt.dtype, sizeof(opt.dtype), "%s", val);
            i++;
        } else if (strcmp(a, "--optimizer") == 0) {
            if (!val || (strcmp(val, "adam") && strcmp(val, "sgd")))
                return cli_usage(cmd, "--optimizer must be adam or sgd");
            snprintf(opt.optimizer, sizeof(opt.optimizer), "%s", val);
            i++;
        } else if (a[0] != '-') {
            return cli_usage(cmd, "unexpected '%s': put -- before the command to profile", a);
        } else {
            return cli_usage(cmd, "unknown option '%s' for CUPTI profiling", a);
        }
    }
    if (probe) {
        if (dashdash >= 0 || memory || nvtx_torch || events_keep)
            return cli_usage(cmd, "--probe-bandwidth takes only -o");
        int rc = cli_check_output(cmd, "-o", out, MPRESS_TOPOLOGY_FORMAT, NULL);
        return rc ? rc : probe_bandwidth(out);
    }
    if (dashdash < 0)
        return cli_usage(cmd, "CUPTI profiling needs -- COMMAND [ARGS...] (or --events FILE "
                              "-- to analyse a kept trace)");
    char **prog = argv + dashdash + 1;
    int nprog = argc - dashdash - 1;
    const char *inputs[] = {events_keep ? events_keep : "-", NULL};
    int orc = cli_check_output(cmd, "-o", out, MPRESS_PROFILE_FORMAT, inputs);
    if (orc)
        return orc;

    struct mpress_profile p, pm;
    struct mpress_trace_summary s, sm;
    mpress_profile_init(&p);
    mpress_profile_init(&pm);
    int rc = 0;

    if (nprog == 0) {
        /* Analysis of an existing event file. */
        if (!events_keep)
            return cli_usage(cmd, "nothing after --: give a command, or --events FILE to "
                                  "analyse a kept event file");
        if (memory || nvtx_torch)
            return cli_usage(cmd, "--memory and --nvtx-torch need a command to run");
        rc = analyse_events(events_keep, NULL, &opt, &p, &s);
        if (rc == 0)
            print_summary("", &p, &s);
        if (rc == 0) {
            struct mpress_error err = {0};
            if (mpress_profile_save(out, &p, &err) != 0)
                rc = cli_fail(cmd, "cannot write the profile", &err);
        }
        mpress_profile_finish(&p);
        return rc;
    }

    char inject[PATH_MAX], cupti[PATH_MAX], events[PATH_MAX], events_mem[PATH_MAX + 16];
    char pydir[PATH_MAX] = "";
    int have_inject = find_inject(inject, sizeof(inject)) == 0;
    find_nvtx_injection(cupti, sizeof(cupti), inject);
    if (events_keep) {
        if (strlen(events_keep) >= sizeof(events))
            return cli_usage(cmd, "--events: file name too long");
        snprintf(events, sizeof(events), "%s", events_keep);
        snprintf(events_mem, sizeof(events_mem), "%s.memory", events_keep);
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(events, sizeof(events), "%s/mpress-events-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        int fd = mkstemp(events);
        if (fd < 0) {
            cli_error(cmd, "cannot create a temporary event file: %s", strerror(errno));
            return MPRESS_ESYSTEM;
        }
        close(fd);
        snprintf(events_mem, sizeof(events_mem), "%s.memory", events);
    }
    unlink(events); /* empty until the tracer writes: its absence means it never ran */
    if (nvtx_torch && write_sitecustomize(pydir, sizeof(pydir)) != 0) {
        cli_error(cmd, "cannot write sitecustomize.py for --nvtx-torch: %s", strerror(errno));
        return MPRESS_ESYSTEM;
    }

    struct run_env env = {.inject = have_inject ? inject : NULL, .nvtx = cupti,
                          .events = events, .pythonpath_dir = pydir[0] ? pydir : NULL,
                          .stdout_to_stderr = strcmp(out, "-") == 0};
    int status = run_command(prog, &env);
    char how[128] = "";
    if (status < 0) {
        cli_error(cmd, "cannot start '%s': %s", prog[0], strerror(errno));
        rc = MPRESS_ESYSTEM;
        goto done;
    }
    if (status != 0)
        describe_status(status, how, sizeof(how));
    if (!have_inject) {
        cli_error(cmd, "no trace: %s; '%s' ran untraced",
                  MPRESS_HAVE_CUPTI
                      ? "the CUPTI tracer libmpress-inject.so was not found (set "
                        "MPRESS_INJECT_LIB)"
                      : "this mpress was built without CUPTI",
                  prog[0]);
        rc = MPRESS_ESYSTEM;
        goto done;
    }
    rc = analyse_events(events, prog[0], &opt, &p, &s);
    if (rc)
        goto done;
    print_summary(memory ? "timing pass" : "", &p, &s);

    if (memory) {
        env.events = events_mem;
        env.memory_pass = 1;
        unlink(events_mem);
        int st2 = run_command(prog, &env);
        if (st2 < 0) {
            cli_error(cmd, "cannot start '%s' again for the memory pass: %s", prog[0],
                      strerror(errno));
            rc = MPRESS_ESYSTEM;
            goto done;
        }
        if (st2 != 0 && status == 0)
            describe_status(st2, how, sizeof(how));
        rc = analyse_events(events_mem, prog[0], &opt, &pm, &sm);
        if (rc)
            goto done;
        print_summary("memory pass", &pm, &sm);
        double a = s.step_s > 0 && sm.step_s > 0 ? s.step_s : profile_time(&p);
        double b = s.step_s > 0 && sm.step_s > 0 ? sm.step_s : profile_time(&pm);
        fprintf(stderr,
                "mpress: profile: memory pass %s %.6g s vs timing pass %.6g s (%+.1f%%)\n",
                s.step_s > 0 && sm.step_s > 0 ? "step time" : "GPU time per step", b, a,
                a > 0 ? 100.0 * (b - a) / a : 0.0);
        struct mpress_error err = {0};
        if (mpress_trace_merge_memory(&p, &pm, &err) != 0) {
            rc = cli_fail(cmd, "cannot combine the timing and memory passes", &err);
            goto done;
        }
    }
    struct mpress_error err = {0};
    if (mpress_profile_save(out, &p, &err) != 0) {
        rc = cli_fail(cmd, "cannot write the profile", &err);
        goto done;
    }
    if (how[0]) {
        /* The trace up to the failure was still worth a profile; the failure still counts. */
        cli_error(cmd, "'%s' %s; the profile from its trace was written", prog[0], how);
        rc = MPRESS_ESYSTEM;
    }
done:
    if (how[0] && rc == MPRESS_ESYSTEM && !p.n_ops)
        cli_error(cmd, "'%s' %s", prog[0], how);
    if (!events_keep) {
        unlink(events);
        unlink(events_mem);
    }
    if (pydir[0]) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/sitecustomize.py", pydir);
        unlink(path);
        rmdir(pydir);
    }
    mpress_profile_finish(&p);
    mpress_profile_finish(&pm);
    return rc;
}
