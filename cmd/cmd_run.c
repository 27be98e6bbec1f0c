/* mpress run PLAN: executes a plan on a backend and reports time and memory next to the plan's
 * predictions. `--backend sim` replays it in the simulator; `--backend host` trains the model
 * for real on emulated devices (mpress/runtime.h). Both write a report, a Chrome trace and (sim)
 * an SVG memory plot on request. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "mpress/runtime.h"
#include "mpress/sim.h"

/* The host backend's --report (docs/formats.md, "Host run report"); a file of this kind may
 * be overwritten by the next host run, as a simulation report by the next simulation. */
#define HOST_REPORT_FORMAT "mpress-run-report"

static void help(void)
{
    printf("usage: mpress run PLAN [--backend sim] [--iterations N] [--report FILE.json]\n"
           "                       [--trace FILE.json] [--svg FILE.svg]\n"
           "       mpress run PLAN --backend host [--steps N] [--save FILE] [--load FILE]\n"
           "                       [--data FILE] [--seed N] [--lr X] [--throttle]\n"
           "                       [--no-wait-for-memory] [--no-pin] [--report FILE.json]\n"
           "                       [--trace FILE.json]\n\n"
           "Replays PLAN event by event on its server and prints the iteration time,\n"
           "samples/s, model TFLOP/s, each GPU's peak memory against its capacity, time\n"
           "stalled on swaps and on boundary transfers, and link utilization; next to what\n"
           "the plan predicts (time, samples/s, TFLOP/s, peaks), the prediction and the\n"
           "difference in percent. The simulator models a\n"
           "compute stream and copy engines per GPU, links shared fairly by concurrent\n"
           "copies, and every allocation (docs/simulator.md). A plan whose simulated peak\n"
           "exceeds a GPU's capacity (or the host's memory, for pinned host buffers) fails\n"
           "with exit 1, naming the GPU, the time and the largest residents (the report is\n"
           "still printed and the requested files are still written).\n\n"
           "Options:\n"
           "  --backend NAME     sim (the default), host (real training on this CPU: every\n"
           "                     GPU of the plan is an emulated device with a memory arena\n"
           "                     capped at its memory; docs/runtime.md), or cuda (not in\n"
           "                     this build: exits 4)\n"
           "  --iterations N     iterations to replay, 1 to 20 (default 3); the last one\n"
           "                     is reported as the steady state\n"
           "  --report FILE      write the report as mpress-sim-report JSON\n"
           "  --trace FILE       write a Chrome trace event file (open in Perfetto or\n"
           "                     chrome://tracing): one track per GPU stream and copy\n"
           "                     engine, counters per link and for each GPU's memory\n"
           "  --svg FILE         write an SVG: memory per GPU over the reported iteration\n"
           "                     and what is resident at each GPU's peak against capacity\n"
           "  --wait-for-memory  a compute op whose memory would not fit waits for\n"
           "                     pending evictions from its GPU instead of running out of\n"
           "                     memory (a runtime that throttles); reports the time held.\n"
           "                     A what-if here; the host backend does it by default\n");
    printf("\nHost backend (--backend host): trains the plan's model (its profile must be the\n"
           "model it names) following the plan: its schedule, partition, one action per\n"
           "saved tensor and optimizer placement. Prints step, loss and samples/s on stderr,\n"
           "then each GPU's measured peak memory next to the plan's predicted peak with\n"
           "the same breakdown, and the measured iteration time next to the prediction.\n"
           "An allocation that does not fit its device waits while evictions from that\n"
           "device are still leaving (they free memory: a real runtime waits for such\n"
           "copies too) and is tried again as each task ends; once none is left, a tensor\n"
           "that does not fit fails the run with exit 1, naming the device, stage, op,\n"
           "tensor and bytes short; nothing is saved then. Per GPU the run prints how\n"
           "often and how long allocations waited.\n"
           "  --steps N          optimizer steps to run, 1 to 1000000 (default 10)\n"
           "  --save FILE        write parameters and optimizer state at the end\n"
           "                     (mpress-checkpoint, docs/formats.md; atomic)\n"
           "  --load FILE        resume from a checkpoint of the same model and seed\n"
           "  --data FILE        training bytes (default: docs/ of the source tree)\n"
           "  --seed N           init, dropout and data seed (default 1)\n"
           "  --lr X             AdamW / SGD learning rate (default 0.001)\n"
           "  --throttle         copies take at least bytes / the topology's link\n"
           "                     bandwidth, so that times compare with the simulator\n"
           "  --no-wait-for-memory\n"
           "                     an allocation that does not fit fails at once, even while\n"
           "                     evictions are leaving its GPU: checks that the plan's\n"
           "                     memory holds without such waits, as --backend sim does\n"
           "  --no-pin           let the OS place every thread (default: each emulated\n"
           "                     GPU's compute and copy threads share one CPU, so that\n"
           "                     a compute thread waiting for its copy hands it its CPU)\n"
           "  --report FILE      write the measured run as mpress-run-report JSON\n"
           "  --trace FILE       Chrome trace of the last step, in the simulator's layout\n"
           "  -h, --help         show this help\n\n" CLI_EXIT_CODES);
}

static int write_text(const char *file, char *text, struct mpress_error *err)
{
    if (!text)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    int rc = mpress_write_file_atomic(file, text, strlen(text), err);
    free(text);
    return rc;
}

static int write_json(const char *file, json_t *root, struct mpress_error *err)
{
    if (!root)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    int rc = mpress_json_write_file(file, root, err);
    json_decref(root);
    return rc;
}


/* ---- the host backend --------------------------------------------------------------------- */

struct host_opts {
    long steps;
    const char *save, *load, *data, *report, *trace;
    unsigned long long seed;
    double lr;
    int throttle, wait_for_memory, no_pin;
};

static const char *const kind_keys[MPRESS_MEM_KINDS] = {
    "weights", "gradients", "optimizer", "activations", "parked", "inflight", "working",
    "buffers", "reserve"};

static void predicted_kinds(const struct mpress_plan_gpu *pg, uint64_t out[MPRESS_MEM_KINDS])
{
    memset(out, 0, sizeof(uint64_t) * MPRESS_MEM_KINDS);
    out[MPRESS_MEM_WEIGHTS] = pg->weights;
    out[MPRESS_MEM_GRADIENTS] = pg->gradients;
    out[MPRESS_MEM_OPTIMIZER] = pg->optimizer;
    out[MPRESS_MEM_ACTIVATIONS] = pg->activations;
    out[MPRESS_MEM_PARKED] = pg->parked;
    out[MPRESS_MEM_WORKING] = pg->working;
    out[MPRESS_MEM_BUFFERS] = pg->buffers;
    out[MPRESS_MEM_RESERVE] = pg->reserve;
}

static double pct(uint64_t measured, uint64_t predicted)
{
    return predicted ? 100.0 * ((double)measured - (double)predicted) / (double)predicted : 0;
}

/* The difference column: a signed percentage, or "not predicted" where the plan has none of
 * that kind (a percentage of 0 bytes does not exist). */
static const char *pct_text(uint64_t measured, uint64_t predicted, char *buf, size_t size)
{
    if (!predicted)
        snprintf(buf, size, "%s", measured ? "not predicted" : "+0.00 %");
    else
        snprintf(buf, size, "%+.2f %%", pct(measured, predicted));
    return buf;
}

/* The neutral run report of the last step (mpress/run_report.h), so that the table and the
 * trace come from the simulator's output code: the tasks at their measured times, the
 * schedule's memory lists applied at those times (what the plan charges, along the real
 * timeline), and the summary from what was measured (peaks and breakdowns from the arenas,
 * the mean step time). */
struct host_report {
    struct mpress_run_report r;
    struct mpress_run_task_time *times;
    struct mpress_run_mem_event *mem;
};

static int host_report_build(struct host_report *h, struct mpress_exec *x,
                             struct mpress_backend *be, long steps, double it,
                             int wait_for_memory, struct mpress_error *err)
{
    const struct mpress_sched *s = mpress_exec_sched(x);
    const struct mpress_plan *plan = mpress_sched_plan(s);
    const double *tt = mpress_exec_task_times(x);
    const double *ready = mpress_exec_task_ready_times(x);
    int n = mpress_sched_task_count(s);
    memset(h, 0, sizeof(*h));
    h->times = calloc((size_t)n + 1, sizeof(*h->times));
    h->mem = calloc(2 * (size_t)n + 1, sizeof(*h->mem));
    if (!h->times || !h->mem)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    long nm = 0;
    h->mem[nm++] = (struct mpress_run_mem_event){0, -1, 0};
    struct mpress_run_summary *S = &h->r.summary;
    S->n_gpus = plan->topology.n_gpus;
    for (int i = 0; i < n; i++) {
        h->times[i] = (struct mpress_run_task_time){ready[i], tt[2 * i], tt[2 * i + 1]};
        h->mem[nm++] = (struct mpress_run_mem_event){tt[2 * i], i, 0};
        h->mem[nm++] = (struct mpress_run_mem_event){tt[2 * i + 1], i, 1};
        const struct mpress_task *t = mpress_sched_task(s, i);
        if (t->queue == mpress_sched_compute_queue(s, t->src) && t->src >= 0)
            S->gpus[t->src].busy_s += tt[2 * i + 1] - tt[2 * i];
        if (tt[2 * i + 1] > S->total_s)
            S->total_s = tt[2 * i + 1];
    }
    /* in time order; ties keep task order (a stable insertion sort) */
    for (long i = 1; i < nm; i++) {
        struct mpress_run_mem_event e = h->mem[i];
        long j = i - 1;
        while (j >= 1 && h->mem[j].t > e.t) {
            h->mem[j + 1] = h->mem[j];
            j--;
        }
        h->mem[j + 1] = e;
    }
    h->r.sched = s;
    h->r.verb = "measured";
    h->r.times = h->times;
    h->r.mem = h->mem;
    h->r.n_mem = nm;
    const struct mpress_model_config *mc = &plan->profile.model;
    S->iterations = (int)steps;
    S->iteration_s = it;
    S->iteration_end_s = S->total_s;
    S->samples_per_s = it > 0 ? (double)plan->micro_batches * mc->micro_batch / it : 0;
    for (int o = 0; o < plan->profile.n_ops; o++)
        S->model_flops_per_iter += 3.0 * plan->profile.ops[o].fwd_flops * plan->micro_batches;
    S->model_tflops = it > 0 ? S->model_flops_per_iter / it / 1e12 : 0;
    S->hardware_tflops = S->model_tflops;
    S->oom_gpu = -1;
    h->r.wait_for_memory = wait_for_memory;
    for (int g = 0; g < S->n_gpus; g++) {
        struct mpress_run_gpu *G = &S->gpus[g];
        G->gpu = g;
        mpress_exec_memory_waits(x, g, NULL, NULL, &G->stall_memory_s);
        G->stage = plan->gpus && g < plan->n_gpus ? plan->gpus[g].stage : -1;
        be->memory(be->ctx, g, &G->capacity, &G->peak, G->at_peak, NULL);
        /* the arenas count bytes by kind, not by tensor: the largest kinds at the peak */
        int used[MPRESS_MEM_KINDS] = {0};
        for (G->n_residents = 0; G->n_residents < MPRESS_RUN_RESIDENTS; G->n_residents++) {
            int best = -1;
            for (int k = 0; k < MPRESS_MEM_KINDS; k++)
                if (!used[k] && G->at_peak[k] && (best < 0 || G->at_peak[k] > G->at_peak[best]))
                    best = k;
            if (best < 0)
                break;
            used[best] = 1;
            struct mpress_run_resident *R = &G->residents[G->n_residents];
            snprintf(R->label, sizeof(R->label), "%s", kind_keys[best]);
            R->bytes = G->at_peak[best];
        }
    }
    uint64_t hat[MPRESS_MEM_KINDS];
    be->memory(be->ctx, MPRESS_RT_HOST, &S->host_capacity, &S->host_peak, hat, NULL);
    return 0;
}

static void host_report_finish(struct host_report *h)
{
    free(h->times);
    free(h->mem);
}

static json_t *kinds_json(const uint64_t *k)
{
    json_t *o = json_object();
    for (int i = 0; i < MPRESS_MEM_KINDS; i++)
        if (i != MPRESS_MEM_INFLIGHT)
            json_object_set_new(o, kind_keys[i], json_integer((json_int_t)k[i]));
    return o;
}

static int run_host(const char *file, const struct mpress_plan *plan, const struct host_opts *ho)
{
    struct mpress_error err;
    mpress_error_clear(&err);
    struct mpress_backend be;
    struct mpress_host_backend_options bo = {ho->throttle};
    char what[600];
    int rc = mpress_host_backend_create(plan, &bo, &be, &err);
    if (rc) {
        snprintf(what, sizeof(what), "cannot run '%s' on the host backend", file);
        return cli_fail("run", what, &err);
    }
    uint8_t *data = NULL;
    size_t n_data = 0;
    struct mpress_exec *x = NULL;
    double *losses = NULL, *secs = NULL;
    json_t *root = NULL;
    struct host_report hr;
    memset(&hr, 0, sizeof(hr));
    rc = mpress_runtime_corpus_load(ho->data, &data, &n_data, &err);
    if (rc) {
        rc = cli_fail("run", "cannot read the training data", &err);
        goto done;
    }
    struct mpress_exec_options eo;
    mpress_exec_options_init(&eo);
    eo.seed = ho->seed;
    eo.data = data;
    eo.n_data = n_data;
    eo.lr = (float)ho->lr;
    eo.wait_for_memory = ho->wait_for_memory;
    eo.pin_threads = !ho->no_pin;
    rc = mpress_exec_create(plan, &be, &eo, &x, &err);
    if (rc) {
        snprintf(what, sizeof(what), "cannot run '%s' on the host backend", file);
        rc = cli_fail("run", what, &err);
        goto done;
    }
    if (ho->load && (rc = mpress_exec_load(x, ho->load, &err))) {
        snprintf(what, sizeof(what), "cannot resume from '%s'", ho->load);
        rc = cli_fail("run", what, &err);
        goto done;
    }
    losses = calloc((size_t)ho->steps, sizeof(double));
    secs = calloc((size_t)ho->steps, sizeof(double));
    if (!losses || !secs) {
        cli_error("run", "out of memory");
        rc = MPRESS_ESYSTEM;
        goto done;
    }
    const struct mpress_model_config *mc = &plan->profile.model;
    double samples = (double)plan->micro_batches * mc->micro_batch;
    for (long s = 0; s < ho->steps; s++) {
        rc = mpress_exec_step(x, &losses[s], &secs[s], &err);
        if (rc) {
            snprintf(what, sizeof(what), "step %d of '%s' failed",
                     mpress_exec_steps_done(x) + 1, file);
            rc = cli_fail("run", what, &err);
            goto done;
        }
        fprintf(stderr, "step %d: loss %.6f, %.1f samples/s\n", mpress_exec_steps_done(x),
                losses[s], secs[s] > 0 ? samples / secs[s] : 0.0);
    }
    /* the steady state: steps after the first (which warms caches and allocators) */
    double it = 0;
    long first = ho->steps > 1 ? 1 : 0;
    for (long s = first; s < ho->steps; s++)
        it += secs[s];
    it /= (double)(ho->steps - first);
    if ((rc = host_report_build(&hr, x, &be, ho->steps, it, ho->wait_for_memory, &err))) {
        rc = cli_fail("run", "cannot report", &err);
        goto done;
    }
    char *table = mpress_run_render(&hr.r);
    if (!table) {
        cli_error("run", "out of memory");
        rc = MPRESS_ESYSTEM;
        goto done;
    }
    fputs(table, stdout);
    free(table);
    printf("\nhost run of %s: %s, %ld steps from step %d; loss: first %.6f, last %.6f\n",
           file, mc->name, ho->steps, mpress_exec_steps_done(x) - (int)ho->steps, losses[0],
           losses[ho->steps - 1]);
    root = json_object();
    json_t *jg = json_array();
    printf("memory per GPU, bytes at its peak (measured | predicted | difference):\n");
    for (int g = 0; g < plan->topology.n_gpus; g++) {
        uint64_t cap = 0, peak = 0, at[MPRESS_MEM_KINDS], mx[MPRESS_MEM_KINDS],
                 pk[MPRESS_MEM_KINDS];
        be.memory(be.ctx, g, &cap, &peak, at, mx);
        const struct mpress_plan_gpu *pg = g < plan->n_gpus ? &plan->gpus[g] : NULL;
        struct mpress_plan_gpu zero;
        memset(&zero, 0, sizeof(zero));
        if (!pg)
            pg = &zero;
        predicted_kinds(pg, pk);
        printf("  gpu %d (stage %d, capacity %llu): peak %llu | %llu | %+.2f %%", g, pg->stage,
               (unsigned long long)cap, (unsigned long long)peak, (unsigned long long)pg->peak,
               pct(peak, pg->peak));
        uint64_t pin = mpress_exec_pinned_bytes(x, g);
        if (pin)
            printf(" (%llu bytes of stage inputs held for recompute)", (unsigned long long)pin);
        printf("\n");
        for (int k = 0; k < MPRESS_MEM_KINDS; k++) {
            if (k == MPRESS_MEM_INFLIGHT || (!at[k] && !pk[k]))
                continue;
            char diff[32];
            printf("    %-12s %12llu | %12llu | %s\n", kind_keys[k], (unsigned long long)at[k],
                   (unsigned long long)pk[k], pct_text(at[k], pk[k], diff, sizeof(diff)));
        }
        json_t *o = json_object();
        json_object_set_new(o, "gpu", json_integer(g));
        json_object_set_new(o, "stage", json_integer(pg->stage));
        json_object_set_new(o, "capacity_bytes", json_integer((json_int_t)cap));
        json_object_set_new(o, "measured_peak_bytes", json_integer((json_int_t)peak));
        json_object_set_new(o, "predicted_peak_bytes", json_integer((json_int_t)pg->peak));
        json_object_set_new(o, "measured_at_peak", kinds_json(at));
        json_object_set_new(o, "measured_max_per_kind", kinds_json(mx));
        json_object_set_new(o, "predicted", kinds_json(pk));
        json_object_set_new(o, "held_for_recompute_bytes", json_integer((json_int_t)pin));
        long waits = 0;
        double wait_s = 0;
        mpress_exec_memory_waits(x, g, &waits, &wait_s, NULL);
        if (ho->wait_for_memory) {
            printf("    waited for evictions %ld time%s, %.4f s over the %ld steps\n", waits,
                   waits == 1 ? "" : "s", wait_s, ho->steps);
            json_object_set_new(o, "memory_waits", json_integer(waits));
            json_object_set_new(o, "memory_wait_s", json_real(wait_s));
        }
        json_array_append_new(jg, o);
    }
    uint64_t hpeak = 0, hat[MPRESS_MEM_KINDS], hmx[MPRESS_MEM_KINDS];
    be.memory(be.ctx, MPRESS_RT_HOST, NULL, &hpeak, hat, hmx);
    printf("  host: peak %llu bytes\n", (unsigned long long)hpeak);
    if (ho->report) {
        json_object_set_new(root, "format", json_string(HOST_REPORT_FORMAT));
        json_object_set_new(root, "version", json_integer(2));
        json_object_set_new(root, "wait_for_memory", json_boolean(ho->wait_for_memory));
        json_object_set_new(root, "backend", json_string("host"));
        json_object_set_new(root, "model", json_string(mc->name));
        json_object_set_new(root, "steps", json_integer(ho->steps));
        json_object_set_new(root, "last_step", json_integer(mpress_exec_steps_done(x)));
        json_t *jl = json_array(), *js = json_array();
        for (long s = 0; s < ho->steps; s++) {
            json_array_append_new(jl, json_real(losses[s]));
            json_array_append_new(js, json_real(secs[s]));
        }
        json_object_set_new(root, "losses", jl);
        json_object_set_new(root, "step_seconds", js);
        json_object_set_new(root, "measured_iteration_s", json_real(it));
        json_object_set_new(root, "predicted_iteration_s", json_real(plan->iteration_s));
        json_object_set_new(root, "measured_samples_per_s",
                            json_real(it > 0 ? samples / it : 0.0));
        json_object_set_new(root, "predicted_samples_per_s", json_real(plan->samples_per_s));
        json_object_set_new(root, "gpus", jg);
        jg = NULL;
        json_t *h = json_object();
        json_object_set_new(h, "measured_peak_bytes", json_integer((json_int_t)hpeak));
        json_object_set_new(h, "measured_at_peak", kinds_json(hat));
        json_object_set_new(root, "host", h);
        if ((rc = mpress_json_write_file(ho->report, root, &err))) {
            rc = cli_fail("run", "cannot write the report", &err);
            goto done;
        }
    }
    if (ho->trace && (rc = write_text(ho->trace, mpress_run_trace(&hr.r), &err))) {
        rc = cli_fail("run", "cannot write the trace", &err);
        goto done;
    }
    if (ho->save && (rc = mpress_exec_save(x, ho->save, &err))) {
        snprintf(what, sizeof(what), "cannot save '%s'", ho->save);
        rc = cli_fail("run", what, &err);
        goto done;
    }
    json_decref(jg);
done:
    host_report_finish(&hr);
    json_decref(root);
    free(losses);
    free(secs);
    mpress_exec_destroy(x);
    free(data);
    if (be.destroy)
        be.destroy(be.ctx);
    return rc;
}

int cmd_run(int argc, char **argv)
{
    static const struct option opts[] = {
        {"backend", required_argument, NULL, 'b'},
        {"iterations", required_argument, NULL, 'i'},
        {"report", required_argument, NULL, 'r'},
        {"trace", required_argument, NULL, 't'},
        {"svg", required_argument, NULL, 's'},
        {"wait-for-memory", no_argument, NULL, 'w'},
        {"no-wait-for-memory", no_argument, NULL, 'W'},
        {"steps", required_argument, NULL, 'n'},
        {"save", required_argument, NULL, 'S'},
        {"load", required_argument, NULL, 'L'},
        {"data", required_argument, NULL, 'd'},
        {"seed", required_argument, NULL, 'e'},
        {"lr", required_argument, NULL, 'l'},
        {"throttle", no_argument, NULL, 'T'},
        {"no-pin", no_argument, NULL, 'P'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *backend = "sim", *report = NULL, *trace = NULL, *svg = NULL;
    long iterations = 3;
    int c, host_only = 0, sim_only = 0, wait_flag = 0, no_wait = 0;
    struct host_opts ho = {10, NULL, NULL, NULL, NULL, NULL, 1, 0, 0, 0, 0};
    long seed = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 'b':
            backend = optarg;
            break;
        case 'n':
            if (cli_parse_int(optarg, 1, 1000000, &ho.steps))
                return cli_usage("run", "--steps: expected an integer from 1 to 1000000, "
                                        "got '%s'", optarg);
            host_only = 1;
            break;
        case 'S':
            ho.save = optarg;
            host_only = 1;
            break;
        case 'L':
            ho.load = optarg;
            host_only = 1;
            break;
        case 'd':
            ho.data = optarg;
            host_only = 1;
            break;
        case 'e':
            if (cli_parse_int(optarg, 0, 2147483647L, &seed))
                return cli_usage("run", "--seed: expected an integer from 0 to 2147483647, "
                                        "got '%s'", optarg);
            ho.seed = (unsigned long long)seed;
            host_only = 1;
            break;
        case 'l':
            if (cli_parse_real(optarg, &ho.lr) || !(ho.lr > 0) || ho.lr > 10)
                return cli_usage("run", "--lr: expected a number above 0 and at most 10, "
                                        "got '%s'", optarg);
            host_only = 1;
            break;
        case 'T':
            ho.throttle = 1;
            host_only = 1;
            break;
        case 'P':
            ho.no_pin = 1;
            host_only = 1;
            break;
        case 'i':
            sim_only = 1;
            if (cli_parse_int(optarg, 1, 20, &iterations))
                return cli_usage("run", "--iterations: expected an integer from 1 to 20, "
                                        "got '%s'", optarg);
            break;
        case 'r':
            report = optarg;
            break;
        case 't':
            trace = optarg;
            break;
        case 's':
            svg = optarg;
            sim_only = 1;
            break;
        case 'w':
            wait_flag = 1;
            break;
        case 'W':
            no_wait = 1;
            host_only = 1;
            break;
        case 'h':
            help();
            return 0;
        default:
            return cli_bad_option("run", c, argv);
        }
    }
    if (strcmp(backend, "cuda") == 0) {
        cli_error("run", "backend 'cuda' is not available in this build (sim and host are)");
        return MPRESS_ESYSTEM;
    }
    int host = strcmp(backend, "host") == 0;
    if (!host && strcmp(backend, "sim") != 0)
        return cli_usage("run", "unknown backend '%s' (sim, host or cuda)", backend);
    if (host && sim_only)
        return cli_usage("run", "--iterations and --svg are for --backend sim (the host "
                                "backend takes --steps)");
    if (!host && host_only)
        return cli_usage("run", "--steps, --save, --load, --data, --seed, --lr, --throttle, "
                                "--no-pin and --no-wait-for-memory need --backend host");
    if (wait_flag && no_wait)
        return cli_usage("run", "--wait-for-memory and --no-wait-for-memory contradict each "
                                "other");
    /* The host backend waits for leaving evictions unless told not to; the simulator
     * replays without such waits unless asked (its what-if). */
    ho.wait_for_memory = host ? !no_wait : wait_flag;
    if (optind >= argc)
        return cli_usage("run", "missing PLAN");
    if (optind + 1 < argc)
        return cli_usage("run", "one PLAN only, got '%s' too", argv[optind + 1]);
    const char *file = argv[optind];
    const char *inputs[] = {file, NULL};
    if ((report && cli_check_output("run", "--report", report,
                                    host ? HOST_REPORT_FORMAT : MPRESS_SIM_REPORT_FORMAT,
                                    inputs)) ||
        (trace && cli_check_output("run", "--trace", trace, CLI_KIND_TRACE, inputs)) ||
        (svg && cli_check_output("run", "--svg", svg, CLI_KIND_SVG, inputs)) ||
        cli_check_distinct("run", "--report", report, "--trace", trace) ||
        cli_check_distinct("run", "--report", report, "--svg", svg) ||
        cli_check_distinct("run", "--trace", trace, "--svg", svg))
        return MPRESS_EUSAGE;

    struct mpress_error err;
    mpress_error_clear(&err);
    struct mpress_plan *plan = malloc(sizeof(*plan));
    if (!plan) {
        cli_error("run", "out of memory");
        return MPRESS_ESYSTEM;
    }
    mpress_plan_init(plan);
    int rc = mpress_plan_load(file, plan, &err);
    if (rc) {
        rc = cli_fail("run", "cannot load plan", &err);
        mpress_plan_finish(plan);
        free(plan);
        return rc;
    }
    if (host) {
        ho.report = report;
        ho.trace = trace;
        rc = run_host(file, plan, &ho);
        mpress_plan_finish(plan);
        free(plan);
        return rc;
    }
    struct mpress_sim_options opt;
    mpress_sim_options_init(&opt);
    opt.iterations = (int)iterations;
    opt.wait_for_memory = ho.wait_for_memory;
    struct mpress_sim *sim = NULL;
    rc = mpress_sim_run(plan, &opt, &sim, &err);
    if (rc) {
        char what[600];
        snprintf(what, sizeof(what), "cannot simulate '%s'", file);
        rc = cli_fail("run", what, &err);
        goto done;
    }
    /* the outputs read the neutral run report, as a real run's would */
    const struct mpress_run_report *rr = mpress_sim_run_report(sim);
    if ((report && write_json(report, mpress_run_report_json(rr), &err)) ||
        (trace && write_text(trace, mpress_run_trace(rr), &err)) ||
        (svg && write_text(svg, mpress_run_svg(rr), &err))) {
        rc = cli_fail("run", "cannot write output", &err);
        goto done;
    }
    char *text = mpress_run_render(rr);
    if (!text) {
        cli_error("run", "out of memory");
        rc = MPRESS_ESYSTEM;
        goto done;
    }
    fputs(text, stdout);
    free(text);
    char *oom = mpress_run_oom_text(rr);
    if (oom) {
        fflush(stdout);
        cli_error("run", "'%s' does not fit: %s", file, oom);
        free(oom);
        rc = MPRESS_EINFEASIBLE;
    }
done:
    mpress_sim_destroy(sim);
    mpress_plan_finish(plan);
    free(plan);
    return rc;
}
