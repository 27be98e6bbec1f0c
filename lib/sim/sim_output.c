/* What a run shows, simulated or real: the memory replay behind each GPU's peak and largest
 * residents, the mpress-sim-report JSON, the text `mpress run` prints, the Chrome trace and the
 * SVG plot. Everything here reads a run report (mpress/run_report.h): the schedule that ran,
 * the summary and the event log. Nothing is re-modelled. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "mpress/run_report.h"
#include "strbuf.h"

/* ---- memory replay ----------------------------------------------------------------------- */

/* The list a log event applied. */
static const struct mpress_mem_delta *event_list(const struct mpress_run_report *r, long i,
                                                 int *n)
{
    const struct mpress_run_mem_event *e = &r->mem[i];
    if (e->task < 0)
        return mpress_sched_mem_initial(r->sched, n);
    return e->phase ? mpress_sched_mem_end(r->sched, e->task, n)
                    : mpress_sched_mem_start(r->sched, e->task, n);
}

/* Device index for the tables below: GPUs, then host memory at n_gpus. */
static int dev_index(const struct mpress_run_report *r, int device)
{
    return device < 0 ? r->summary.n_gpus : device;
}

struct agg {
    int kind, owner, iteration, micro_batch;
    int64_t bytes;
};

static void resident_label(const struct agg *a, int dev, char *out, size_t size)
{
    const char *k = mpress_mem_kind_name((enum mpress_mem_kind)a->kind);
    if (a->micro_batch < 0) {
        if (a->kind == MPRESS_MEM_WORKING)
            snprintf(out, size, "op workspace");
        else if (a->owner != dev)
            snprintf(out, size, "%s of gpu %d", k, a->owner);
        else
            snprintf(out, size, "%s", k);
    } else if (a->kind == MPRESS_MEM_PARKED) {
        snprintf(out, size, "parked from gpu %d, iteration %d micro-batch %d", a->owner,
                 a->iteration, a->micro_batch);
    } else {
        const char *what = a->kind == MPRESS_MEM_WORKING ? "recomputed/prefetched" : k;
        snprintf(out, size, "%s, iteration %d micro-batch %d", what, a->iteration,
                 a->micro_batch);
    }
}

/* The largest residents of GPU dev after log event upto: what was allocated and not yet
 * freed, grouped by kind, owner, iteration and micro-batch. */
static int residents_at(const struct mpress_run_report *r, int dev, long upto,
                        struct mpress_run_gpu *g)
{
    g->n_residents = 0;
    if (upto < 0)
        return 0;
    int cap = 64, n = 0;
    struct agg *a = malloc((size_t)cap * sizeof(*a));
    if (!a)
        return -1;
    for (long i = 0; i <= upto; i++) {
        int nd;
        const struct mpress_mem_delta *d = event_list(r, i, &nd);
        for (int m = 0; m < nd; m++) {
            const struct mpress_mem_delta *op = &d[m];
            if (op->device != dev)
                continue;
            int j;
            for (j = n - 1; j >= 0; j--)
                if (a[j].kind == (int)op->kind && a[j].owner == op->owner &&
                    a[j].iteration == op->iteration && a[j].micro_batch == op->micro_batch)
                    break;
            if (j < 0) {
                if (n == cap) {
                    struct agg *q = realloc(a, (size_t)cap * 2 * sizeof(*a));
                    if (!q) {
                        free(a);
                        return -1;
                    }
                    a = q;
                    cap *= 2;
                }
                a[n] = (struct agg){(int)op->kind, op->owner, op->iteration, op->micro_batch, 0};
                j = n++;
            }
            a[j].bytes += op->bytes;
        }
    }
    /* biggest first; ties keep first-allocated order (stable selection) */
    for (int k = 0; k < MPRESS_RUN_RESIDENTS; k++) {
        int best = -1;
        for (int j = 0; j < n; j++)
            if (a[j].bytes > 0 && (best < 0 || a[j].bytes > a[best].bytes))
                best = j;
        if (best < 0)
            break;
        resident_label(&a[best], dev, g->residents[k].label, sizeof(g->residents[k].label));
        g->residents[k].bytes = (uint64_t)a[best].bytes;
        g->n_residents++;
        a[best].bytes = 0;
    }
    free(a);
    return 0;
}

int mpress_run_replay_memory(struct mpress_run_report *r)
{
    struct mpress_run_summary *S = &r->summary;
    int G = S->n_gpus;
    uint64_t cur[MPRESS_MAX_GPUS + 1][MPRESS_MEM_KINDS];
    uint64_t total[MPRESS_MAX_GPUS + 1];
    long peak_event[MPRESS_MAX_GPUS];
    memset(cur, 0, sizeof(cur));
    memset(total, 0, sizeof(total));
    S->host_peak = 0;
    for (int g = 0; g < G; g++) {
        struct mpress_run_gpu *P = &S->gpus[g];
        P->peak = 0;
        P->peak_time_s = 0;
        memset(P->at_peak, 0, sizeof(P->at_peak));
        P->out_of_memory = 0;
        P->oom_time_s = 0;
        peak_event[g] = -1;
    }
    for (long i = 0; i < r->n_mem; i++) {
        int n;
        const struct mpress_mem_delta *d = event_list(r, i, &n);
        for (int m = 0; m < n; m++) {
            int dev = dev_index(r, d[m].device);
            cur[dev][d[m].kind] += (uint64_t)d[m].bytes;
            total[dev] += (uint64_t)d[m].bytes;
        }
        /* peaks are looked at once the whole list is applied */
        for (int m = 0; m < n; m++) {
            int dev = dev_index(r, d[m].device);
            uint64_t tot = total[dev];
            if (dev == G) {
                if (tot > S->host_peak)
                    S->host_peak = tot;
                continue;
            }
            struct mpress_run_gpu *P = &S->gpus[dev];
            if (tot > P->peak) {
                P->peak = tot;
                P->peak_time_s = r->mem[i].t;
                memcpy(P->at_peak, cur[dev], sizeof(P->at_peak));
                peak_event[dev] = i;
            }
            if (tot > P->capacity && !P->out_of_memory) {
                P->out_of_memory = 1;
                P->oom_time_s = r->mem[i].t;
            }
        }
    }
    S->out_of_memory = 0;
    S->oom_gpu = -1;
    S->host_out_of_memory = S->host_capacity > 0 && S->host_peak > S->host_capacity;
    for (int g = 0; g < G; g++) {
        struct mpress_run_gpu *P = &S->gpus[g];
        if (P->out_of_memory) {
            S->out_of_memory = 1;
            if (S->oom_gpu < 0 || P->oom_time_s < S->gpus[S->oom_gpu].oom_time_s)
                S->oom_gpu = g;
        }
        if (residents_at(r, g, peak_event[g], P))
            return MPRESS_ESYSTEM;
    }
    return 0;
}

uint64_t mpress_run_memory_at(const struct mpress_run_report *r, int gpu, double t)
{
    uint64_t total = 0;
    for (long i = 0; i < r->n_mem && r->mem[i].t <= t; i++) {
        int n;
        const struct mpress_mem_delta *d = event_list(r, i, &n);
        for (int m = 0; m < n; m++)
            if (d[m].device == gpu || (gpu < 0 && d[m].device < 0))
                total += (uint64_t)d[m].bytes;
    }
    return total;
}

/* ---- report -------------------------------------------------------------------------------- */

static const struct mpress_plan_gpu *predicted_gpu(const struct mpress_plan *plan, int g)
{
    for (int i = 0; i < plan->n_gpus; i++)
        if (plan->gpus && plan->gpus[i].gpu == g)
            return &plan->gpus[i];
    return NULL;
}

/* Bytes in GiB (2^30), the unit every command prints sizes in; rates stay in GB/s (10^9 B/s),
 * as the datasheets and topology files state them. */
static double gib(double bytes)
{
    return bytes / 1073741824.0;
}

static double pct(double sim, double pred)
{
    return pred != 0 ? (sim - pred) / pred * 100.0 : NAN;
}

static json_t *cmp_json(double sim, double pred)
{
    json_t *o = json_object();
    json_object_set_new(o, "simulated", json_real(sim));
    json_object_set_new(o, "predicted", pred > 0 ? json_real(pred) : json_null());
    double d = pct(sim, pred);
    json_object_set_new(o, "diff_pct", pred > 0 && isfinite(d) ? json_real(d) : json_null());
    return o;
}

static json_t *cmp_json_u64(uint64_t sim, uint64_t pred)
{
    json_t *o = json_object();
    json_object_set_new(o, "simulated", json_integer((json_int_t)sim));
    json_object_set_new(o, "predicted", pred ? json_integer((json_int_t)pred) : json_null());
    json_object_set_new(o, "diff_pct",
                        pred ? json_real(pct((double)sim, (double)pred)) : json_null());
    return o;
}

static double predicted_tflops(const struct mpress_run_report *r)
{
    const struct mpress_plan *plan = mpress_sched_plan(r->sched);
    return plan->iteration_s > 0 ? r->summary.model_flops_per_iter / plan->iteration_s / 1e12 : 0;
}

static json_t *residents_json(const struct mpress_run_gpu *G)
{
    json_t *arr = json_array();
    for (int r = 0; r < G->n_residents; r++) {
        json_t *o = json_object();
        json_object_set_new(o, "label", json_string(G->residents[r].label));
        json_object_set_new(o, "bytes", json_integer((json_int_t)G->residents[r].bytes));
        json_array_append_new(arr, o);
    }
    return arr;
}

json_t *mpress_run_report_json(const struct mpress_run_report *r)
{
    const struct mpress_plan *plan = mpress_sched_plan(r->sched);
    const struct mpress_run_summary *S = &r->summary;
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string(MPRESS_RUN_REPORT_FORMAT));
    json_object_set_new(root, "version", json_integer(MPRESS_RUN_REPORT_VERSION));
    json_object_set_new(root, "generator", json_string("mpress " MPRESS_VERSION));

    json_t *p = json_object();
    json_object_set_new(p, "policy", json_string(plan->policy));
    json_object_set_new(p, "schedule", json_string(mpress_schedule_name(plan->schedule)));
    json_object_set_new(p, "micro_batches", json_integer(plan->micro_batches));
    json_object_set_new(p, "stages", json_integer(plan->n_stages));
    json_object_set_new(p, "prefetch_lookahead", json_integer(plan->prefetch_lookahead));
    json_object_set_new(p, "model", json_string(plan->profile.model.name));
    json_object_set_new(p, "topology", json_string(plan->topology.name));
    json_object_set_new(p, "profile_hash", json_string(plan->profile_hash));
    json_object_set_new(p, "topology_hash", json_string(plan->topology_hash));
    json_object_set_new(root, "plan", p);

    json_object_set_new(root, "iterations", json_integer(S->iterations));
    json_object_set_new(root, "wait_for_memory", json_boolean(r->wait_for_memory));
    json_t *w = json_object();
    json_object_set_new(w, "start_s", json_real(S->iteration_start_s));
    json_object_set_new(w, "end_s", json_real(S->iteration_end_s));
    json_object_set_new(root, "reported_iteration", w);
    json_object_set_new(root, "total_s", json_real(S->total_s));
    json_object_set_new(root, "iteration_s", cmp_json(S->iteration_s, plan->iteration_s));
    json_object_set_new(root, "samples_per_s", cmp_json(S->samples_per_s, plan->samples_per_s));
    json_object_set_new(root, "model_tflops", cmp_json(S->model_tflops, predicted_tflops(r)));
    json_object_set_new(root, "hardware_tflops", json_real(S->hardware_tflops));
    json_object_set_new(root, "flops_counted",
                        json_string("model_tflops: 3 x forward FLOPs per sample, recompute not "
                                    "counted; hardware_tflops adds the forward FLOPs that "
                                    "recompute runs again"));
    json_object_set_new(root, "host_peak_bytes", json_integer((json_int_t)S->host_peak));
    json_object_set_new(root, "host_capacity_bytes", json_integer((json_int_t)S->host_capacity));
    json_object_set_new(root, "host_out_of_memory", json_boolean(S->host_out_of_memory));

    json_t *gpus = json_array();
    for (int g = 0; g < S->n_gpus; g++) {
        const struct mpress_run_gpu *G = &S->gpus[g];
        const struct mpress_plan_gpu *P = predicted_gpu(plan, g);
        json_t *o = json_object();
        json_object_set_new(o, "gpu", json_integer(g));
        json_object_set_new(o, "stage", json_integer(G->stage));
        json_object_set_new(o, "capacity", json_integer((json_int_t)G->capacity));
        json_object_set_new(o, "peak", cmp_json_u64(G->peak, P ? P->peak : 0));
        json_object_set_new(o, "peak_time_s", json_real(G->peak_time_s));
        json_t *bd = json_object();
        for (int k = 0; k < MPRESS_MEM_KINDS; k++)
            json_object_set_new(bd, mpress_mem_kind_name((enum mpress_mem_kind)k),
                                json_integer((json_int_t)G->at_peak[k]));
        json_object_set_new(o, "at_peak", bd);
        if (P) {
            /* the plan's breakdown at its predicted peak, to see which kind disagrees */
            json_t *pb = json_object();
            json_object_set_new(pb, "weights", json_integer((json_int_t)P->weights));
            json_object_set_new(pb, "gradients", json_integer((json_int_t)P->gradients));
            json_object_set_new(pb, "optimizer", json_integer((json_int_t)P->optimizer));
            json_object_set_new(pb, "activations", json_integer((json_int_t)P->activations));
            json_object_set_new(pb, "parked", json_integer((json_int_t)P->parked));
            json_object_set_new(pb, "working", json_integer((json_int_t)P->working));
            json_object_set_new(pb, "buffers", json_integer((json_int_t)P->buffers));
            json_object_set_new(pb, "reserve", json_integer((json_int_t)P->reserve));
            json_object_set_new(o, "predicted_breakdown", pb);
        }
        json_object_set_new(o, "residents", residents_json(G));
        json_object_set_new(o, "out_of_memory", json_boolean(G->out_of_memory));
        json_object_set_new(o, "oom_time_s", G->out_of_memory ? json_real(G->oom_time_s)
                                                              : json_null());
        json_object_set_new(o, "busy_s", json_real(G->busy_s));
        json_object_set_new(o, "stall_swap_s", json_real(G->stall_swap_s));
        json_object_set_new(o, "stall_boundary_s", json_real(G->stall_boundary_s));
        json_object_set_new(o, "stall_optimizer_s", json_real(G->stall_optimizer_s));
        json_object_set_new(o, "stall_memory_s", json_real(G->stall_memory_s));
        json_array_append_new(gpus, o);
    }
    json_object_set_new(root, "gpus", gpus);

    json_t *links = json_array();
    for (int i = 0; i < S->n_links; i++) {
        const struct mpress_run_link *L = &S->links[i];
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(L->name));
        json_object_set_new(o, "bytes_per_s", json_real(L->bytes_per_s));
        json_object_set_new(o, "bytes", json_real(L->bytes));
        json_object_set_new(o, "utilization", json_real(L->utilization));
        json_array_append_new(links, o);
    }
    json_object_set_new(root, "links", links);

    if (S->out_of_memory) {
        const struct mpress_run_gpu *G = &S->gpus[S->oom_gpu];
        json_t *o = json_object();
        json_object_set_new(o, "gpu", json_integer(S->oom_gpu));
        json_object_set_new(o, "time_s", json_real(G->oom_time_s));
        json_object_set_new(o, "peak", json_integer((json_int_t)G->peak));
        json_object_set_new(o, "capacity", json_integer((json_int_t)G->capacity));
        json_object_set_new(o, "residents", residents_json(G));
        json_object_set_new(root, "out_of_memory", o);
    } else {
        json_object_set_new(root, "out_of_memory", json_null());
    }
    return root;
}

/* ", label 1.234 GiB" per resident at the GPU's peak, the first without its comma. */
static void residents_text(struct mpress_strbuf *b, const struct mpress_run_gpu *G)
{
    for (int r = 0; r < G->n_residents; r++)
        sb_printf(b, "%s %s %.3f GiB", r ? "," : "", G->residents[r].label,
                  gib((double)G->residents[r].bytes));
}

static void fmt_diff(char *out, size_t size, double sim, double pred)
{
    if (pred > 0)
        snprintf(out, size, "%+.1f %%", pct(sim, pred));
    else
        snprintf(out, size, "-");
}

char *mpress_run_oom_text(const struct mpress_run_report *r)
{
    const struct mpress_run_summary *S = &r->summary;
    struct mpress_strbuf b = {0};
    if (!S->out_of_memory && S->host_out_of_memory) {
        sb_printf(&b, "out of pinned host memory: peak %.3f GiB of %.3f GiB (host swaps and host "
                    "optimizer states)", gib((double)S->host_peak), gib((double)S->host_capacity));
        return sb_finish(&b);
    }
    if (!S->out_of_memory)
        return NULL;
    const struct mpress_run_gpu *G = &S->gpus[S->oom_gpu];
    sb_printf(&b, "out of memory on gpu %d at %.6f s: peak %.3f GiB of %.3f GiB capacity; largest "
                "residents at the peak:", S->oom_gpu, G->oom_time_s, gib((double)G->peak),
            gib((double)G->capacity));
    residents_text(&b, G);
    return sb_finish(&b);
}

char *mpress_run_render(const struct mpress_run_report *r)
{
    const struct mpress_plan *plan = mpress_sched_plan(r->sched);
    const struct mpress_run_summary *S = &r->summary;
    struct mpress_strbuf b = {0};
    char d[32];
    sb_printf(&b, "%s %s on %s: policy %s, %s, %d stages, %d micro-batches, %d "
                "iteration%s (the last is reported)\n\n", r->verb,
            plan->profile.model.name, plan->topology.name, plan->policy,
            mpress_schedule_name(plan->schedule), plan->n_stages, plan->micro_batches,
            S->iterations, S->iterations == 1 ? "" : "s");
    sb_printf(&b, "%-22s %14s %14s %10s\n", "", r->verb, "predicted", "diff");
    fmt_diff(d, sizeof(d), S->iteration_s, plan->iteration_s);
    sb_printf(&b, "%-22s %12.4f s %12.4f s %10s\n", "iteration time", S->iteration_s,
            plan->iteration_s, d);
    fmt_diff(d, sizeof(d), S->samples_per_s, plan->samples_per_s);
    sb_printf(&b, "%-22s %14.3f %14.3f %10s\n", "samples/s", S->samples_per_s,
            plan->samples_per_s, d);
    double pt = predicted_tflops(r);
    fmt_diff(d, sizeof(d), S->model_tflops, pt);
    sb_printf(&b, "%-22s %14.2f %14.2f %10s\n", "model TFLOP/s", S->model_tflops, pt, d);
    sb_printf(&b, "(model TFLOP/s counts 3 x forward FLOPs per sample, recompute not counted; "
                "with recompute: %.2f)\n\n", S->hardware_tflops);

    sb_printf(&b, "%-4s %5s %10s %10s %9s %10s %10s %8s %8s %8s\n", "gpu", "stage", "peak GiB",
            "pred. GiB", "diff", "cap. GiB", "peak at s", "busy s", "swap s", "bound s");
    for (int g = 0; g < S->n_gpus; g++) {
        const struct mpress_run_gpu *G = &S->gpus[g];
        const struct mpress_plan_gpu *P = predicted_gpu(plan, g);
        fmt_diff(d, sizeof(d), (double)G->peak, P ? (double)P->peak : 0);
        char st[8];
        snprintf(st, sizeof(st), G->stage >= 0 ? "%d" : "-", G->stage);
        sb_printf(&b, "%-4d %5s %10.3f %10.3f %9s %10.3f %10.4f %8.4f %8.4f %8.4f%s\n", g, st,
                gib((double)G->peak), P ? gib((double)P->peak) : 0.0, d, gib((double)G->capacity),
                G->peak_time_s,
                G->busy_s, G->stall_swap_s, G->stall_boundary_s,
                G->out_of_memory ? "  OUT OF MEMORY" : "");
    }
    sb_printf(&b, "(busy, swap and boundary stalls over the reported iteration; stalls count "
                "compute waiting on a copy once the copy could start)\n");
    if (r->wait_for_memory) {
        sb_printf(&b, "held for memory (waiting for evictions), reported iteration:");
        for (int g = 0; g < S->n_gpus; g++)
            sb_printf(&b, "%s gpu %d %.4f s", g ? "," : "", g, S->gpus[g].stall_memory_s);
        sb_printf(&b, "\n");
    }
    int tight = -1;
    for (int g = 0; g < S->n_gpus; g++)
        if (S->gpus[g].capacity &&
            (tight < 0 || (double)S->gpus[g].peak / S->gpus[g].capacity >
                              (double)S->gpus[tight].peak / S->gpus[tight].capacity))
            tight = g;
    if (tight >= 0) {
        const struct mpress_run_gpu *G = &S->gpus[tight];
        sb_printf(&b, "fullest GPU: gpu %d at %.1f %% of capacity at %.4f s; largest residents:",
                tight, 100.0 * G->peak / G->capacity, G->peak_time_s);
        residents_text(&b, G);
        sb_printf(&b, "\n");
    }
    if (S->n_links) {
        sb_printf(&b, "\n%-26s %10s %12s %8s\n", "link (reported iteration)", "GB/s", "GiB moved",
                "util");
        for (int i = 0; i < S->n_links; i++) {
            const struct mpress_run_link *L = &S->links[i];
            sb_printf(&b, "%-26s %10.1f %12.3f %7.1f%%\n", L->name, L->bytes_per_s / 1e9,
                    gib((double)L->bytes), L->utilization * 100);
        }
    }
    if (S->host_peak)
        sb_printf(&b, "\npinned host memory at peak: %.3f GiB of %.3f GiB%s\n",
                gib((double)S->host_peak), gib((double)S->host_capacity),
                S->host_out_of_memory ? "  OUT OF MEMORY" : "");
    return sb_finish(&b);
}

/* ---- Chrome trace -------------------------------------------------------------------------
 * pid g = GPU g with tid 0 compute, 1 copy D2H, 2 copy H2D, 3 + b copy to GPU b, 3 + G + b
 * copy from GPU b (D2D prefetches), 3 + 2G + b D2D evictions to GPU b; pid n_gpus =
 * host CPUs (tid = socket); pid n_gpus + 1 = links, one counter track per link (GB/s) since
 * concurrent flows share a link; memory counters sit on each GPU's pid. Times in µs. */

/* The trace can hold hundreds of thousands of events, so it is written as text, one event per
 * line, rather than built as a jansson tree: the tree and its sorted, indented dump cost tens
 * of times more time and memory than the simulation itself. Keys are written in sorted order
 * and times with fixed decimals, so the bytes are as deterministic as mpress_json_dumps. */

static void json_str(struct mpress_strbuf *b, const char *s)
{
    sb_printf(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            sb_printf(b, "\\%c", c);
        else if (c < 0x20)
            sb_printf(b, "\\u%04x", c);
        else
            sb_printf(b, "%c", c);
    }
    sb_printf(b, "\"");
}

static void meta(struct mpress_strbuf *b, const char *what, int pid, int tid, const char *name)
{
    sb_printf(b, "{\"args\": {\"name\": ");
    json_str(b, name);
    sb_printf(b, "}, \"name\": \"%s\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d},\n", what, pid,
            tid);
}

static void counter(struct mpress_strbuf *b, const char *name, int pid, double t, const char *key,
                    double v)
{
    sb_printf(b, "{\"args\": {\"%s\": %.6f}, \"name\": ", key, v);
    json_str(b, name);
    sb_printf(b, ", \"ph\": \"C\", \"pid\": %d, \"tid\": 0, \"ts\": %.3f},\n", pid, t * 1e6);
}

/* Track of task i: its queue's GPU (tid 0 compute, 1 D2H, 2 H2D, 3 + b peer engine toward b,
 * 3 + G + b from b, 3 + 2G + b D2D evictions toward b),
 * or the host (pid n_gpus) with the socket as tid. */
static void task_track(const struct mpress_run_report *r, int i, int *pid, int *tid)
{
    const struct mpress_task *T = mpress_sched_task(r->sched, i);
    const struct mpress_sched_queue *Q = mpress_sched_queue(r->sched, T->queue);
    switch (Q->kind) {
    case MPRESS_QUEUE_CPU:
        *pid = r->summary.n_gpus;
        *tid = Q->gpu;
        return;
    case MPRESS_QUEUE_D2H:
        *tid = 1;
        break;
    case MPRESS_QUEUE_H2D:
        *tid = 2;
        break;
    case MPRESS_QUEUE_PEER:
        *tid = 3 + Q->peer;
        break;
    case MPRESS_QUEUE_PEER_IN:
        *tid = 3 + r->summary.n_gpus + Q->peer;
        break;
    case MPRESS_QUEUE_PARK:
        *tid = 3 + 2 * r->summary.n_gpus + Q->peer;
        break;
    default:
        *tid = 0;
    }
    *pid = Q->gpu;
}

static void task_name(const struct mpress_plan *plan, const struct mpress_task *P, char *out,
                      size_t size)
{
    const struct mpress_profile *pr = &plan->profile;
    const char *opn = P->op >= 0 ? pr->ops[P->op].name : "";
    const char *tn = "";
    if (P->action >= 0) {
        const struct mpress_plan_action *a = &plan->actions[P->action];
        tn = pr->ops[a->op].tensors[a->tensor].id;
    }
    char dst[16];
    snprintf(dst, sizeof(dst), P->dst < 0 ? "host" : "gpu%d", P->dst);
    switch (P->kind) {
    case MPRESS_TASK_FORWARD:
        snprintf(out, size, "F %s mb%d", opn, P->micro_batch);
        break;
    case MPRESS_TASK_BACKWARD:
        snprintf(out, size, "B %s mb%d", opn, P->micro_batch);
        break;
    case MPRESS_TASK_RECOMPUTE:
        snprintf(out, size, "recompute %s mb%d", tn, P->micro_batch);
        break;
    case MPRESS_TASK_OPTIMIZER:
        snprintf(out, size, "optimizer step stage %d", P->stage);
        break;
    case MPRESS_TASK_EVICT:
        snprintf(out, size, "evict %s mb%d -> %s", tn, P->micro_batch, dst);
        break;
    case MPRESS_TASK_PREFETCH:
        snprintf(out, size, "prefetch %s mb%d -> %s", tn, P->micro_batch, dst);
        break;
    case MPRESS_TASK_SEND_ACT:
        snprintf(out, size, "send activation mb%d -> %s", P->micro_batch, dst);
        break;
    case MPRESS_TASK_SEND_GRAD:
        snprintf(out, size, "send gradient mb%d -> %s", P->micro_batch, dst);
        break;
    case MPRESS_TASK_GRAD_D2H:
        snprintf(out, size, "gradients stage %d -> host", P->stage);
        break;
    case MPRESS_TASK_WEIGHTS_H2D:
        snprintf(out, size, "weights stage %d -> %s", P->stage, dst);
        break;
    case MPRESS_TASK_TIED_GRAD:
        snprintf(out, size, "tied gradient %s -> %s", opn, dst);
        break;
    default:
        snprintf(out, size, "?");
    }
}

static void trace_tracks(struct mpress_strbuf *b, const struct mpress_run_report *r)
{
    int G = r->summary.n_gpus;
    int NK = mpress_sched_queue_count(r->sched) - G * (3 + G);
    char name[160];
    for (int g = 0; g < G; g++) {
        if (r->summary.gpus[g].stage >= 0)
            snprintf(name, sizeof(name), "gpu %d (stage %d)", g, r->summary.gpus[g].stage);
        else
            snprintf(name, sizeof(name), "gpu %d", g);
        meta(b, "process_name", g, 0, name);
        meta(b, "thread_name", g, 0, "compute");
        meta(b, "thread_name", g, 1, "copy engine d2h");
        meta(b, "thread_name", g, 2, "copy engine h2d");
        for (int d = 0; d < G; d++) {
            if (d == g)
                continue;
            snprintf(name, sizeof(name), "copy engine -> gpu %d", d);
            meta(b, "thread_name", g, 3 + d, name);
            snprintf(name, sizeof(name), "copy engine <- gpu %d", d);
            meta(b, "thread_name", g, 3 + G + d, name);
            snprintf(name, sizeof(name), "copy engine park -> gpu %d", d);
            meta(b, "thread_name", g, 3 + 2 * G + d, name);
        }
    }
    meta(b, "process_name", G, 0, "host");
    for (int k = 0; k < NK; k++) {
        snprintf(name, sizeof(name), "cpu socket %d", k);
        meta(b, "thread_name", G, k, name);
    }
    meta(b, "process_name", G + 1, 0, "links");
}

static void trace_task(struct mpress_strbuf *b, const struct mpress_run_report *r, int i)
{
    const struct mpress_plan *plan = mpress_sched_plan(r->sched);
    const struct mpress_task *P = mpress_sched_task(r->sched, i);
    const struct mpress_run_task_time *W = &r->times[i];
    char name[160];
    int pid, tid;
    task_track(r, i, &pid, &tid);
    task_name(plan, P, name, sizeof(name));
    sb_printf(b, "{\"args\": {");
    sb_printf(b, "\"bytes\": %.0f, \"iteration\": %d", (double)P->bytes, P->iteration);
    if (P->micro_batch >= 0)
        sb_printf(b, ", \"micro_batch\": %d", P->micro_batch);
    if (P->op >= 0) {
        sb_printf(b, ", \"op\": ");
        json_str(b, plan->profile.ops[P->op].name);
    }
    sb_printf(b, ", \"ready_us\": %.3f, \"stage\": %d", W->ready_s * 1e6, P->stage);
    if (P->action >= 0) {
        const struct mpress_plan_action *a = &plan->actions[P->action];
        sb_printf(b, ", \"tensor\": ");
        json_str(b, plan->profile.ops[a->op].tensors[a->tensor].id);
    }
    /* µs with ns decimals; the duration is taken between the rounded ends so that spans
     * on one track never overlap after rounding */
    double ts = round(W->start_s * 1e9) / 1e3, te = round(W->end_s * 1e9) / 1e3;
    sb_printf(b, "}, \"cat\": \"%s\", \"dur\": %.3f, \"name\": ",
              mpress_task_kind_name(P->kind), te - ts);
    json_str(b, name);
    sb_printf(b, ", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f},\n", pid, tid, ts);
}

char *mpress_run_trace(const struct mpress_run_report *r)
{
    const struct mpress_plan *plan = mpress_sched_plan(r->sched);
    struct mpress_strbuf b = {0};
    int G = r->summary.n_gpus;
    sb_printf(&b, "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"generator\": \"mpress "
                MPRESS_VERSION "\", \"model\": ");
    json_str(&b, plan->profile.model.name);
    sb_printf(&b, ", \"topology\": ");
    json_str(&b, plan->topology.name);
    sb_printf(&b, "}, \"traceEvents\": [\n");
    trace_tracks(&b, r);
    int n = mpress_sched_task_count(r->sched);
    for (int i = 0; i < n; i++)
        trace_task(&b, r, i);
    for (long i = 0; i < r->n_rates; i++) {
        const struct mpress_run_rate_event *e = &r->rates[i];
        counter(&b, r->link_names[e->link], G + 1, e->t, "GB/s", e->bytes_per_s / 1e9);
    }
    /* memory counters: each GPU's total after every change */
    uint64_t tot[MPRESS_MAX_GPUS + 1] = {0};
    for (long i = 0; i < r->n_mem; i++) {
        int touched[MPRESS_MAX_GPUS + 1] = {0}, nd;
        const struct mpress_mem_delta *d = event_list(r, i, &nd);
        for (int m = 0; m < nd; m++) {
            int dev = dev_index(r, d[m].device);
            tot[dev] += (uint64_t)d[m].bytes;
            touched[dev] = 1;
        }
        for (int g = 0; g < G; g++)
            if (touched[g])
                counter(&b, "memory", g, r->mem[i].t, "GiB", gib((double)tot[g]));
    }
    /* The last event has no trailing comma: a metadata event that sorts the links process
     * after the GPUs. */
    sb_printf(&b, "{\"args\": {\"sort_index\": %d}, \"name\": \"process_sort_index\", \"ph\": "
                "\"M\", \"pid\": %d, \"tid\": 0}\n]}\n", G + 1, G + 1);
    return sb_finish(&b);
}

/* ---- SVG ------------------------------------------------------------------------------------ */

static const char *const gpu_colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
static const char *const kind_colors[MPRESS_MEM_KINDS] = {
    "#4e79a7", "#a0cbe8", "#f28e2b", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f"};

static void xml_text(struct mpress_strbuf *b, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': sb_printf(b, "&amp;"); break;
        case '<': sb_printf(b, "&lt;"); break;
        case '>': sb_printf(b, "&gt;"); break;
        case '"': sb_printf(b, "&quot;"); break;
        default: sb_printf(b, "%c", *s);
        }
    }
}

char *mpress_run_svg(const struct mpress_run_report *r)
{
    const struct mpress_plan *plan = mpress_sched_plan(r->sched);
    const struct mpress_run_summary *S = &r->summary;
    int G = S->n_gpus;
    const double W = 960, X0 = 70, X1 = 900, Y0 = 60, Y1 = 340, B0 = 420, B1 = 700;
    double t0 = S->iteration_start_s, t1 = S->iteration_end_s;
    if (!(t1 > t0))
        t1 = t0 + 1;
    double ymax = 1;
    for (int g = 0; g < G; g++) {
        if ((double)S->gpus[g].capacity > ymax)
            ymax = (double)S->gpus[g].capacity;
        if ((double)S->gpus[g].peak > ymax)
            ymax = (double)S->gpus[g].peak;
    }
    ymax *= 1.05;
    struct mpress_strbuf b = {0};
    sb_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    sb_printf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"760\" "
                "viewBox=\"0 0 %.0f 760\" font-family=\"sans-serif\" font-size=\"12\">\n", W, W);
    sb_printf(&b, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%.0f\" "
                "y=\"24\" font-size=\"15\">", X0);
    xml_text(&b, plan->profile.model.name);
    sb_printf(&b, " on ");
    xml_text(&b, plan->topology.name);
    sb_printf(&b, ": memory per GPU over the reported iteration (%.4f s to %.4f s)</text>\n", t0,
            t1);
    /* axes */
    sb_printf(&b, "<g stroke=\"#444\" fill=\"none\"><line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" "
                "y2=\"%.0f\"/><line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\"/></g>\n",
            X0, Y1, X1, Y1, X0, Y0, X0, Y1);
    for (int i = 0; i <= 4; i++) {
        double v = ymax * i / 4, y = Y1 - (Y1 - Y0) * i / 4;
        sb_printf(&b, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%.1f GiB</text>\n", X0 - 4,
                y + 4, gib(v));
        double t = t0 + (t1 - t0) * i / 4, x = X0 + (X1 - X0) * i / 4;
        sb_printf(&b, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%.3f s</text>\n", x,
                Y1 + 16, t);
    }
    /* capacity lines */
    for (int g = 0; g < G; g++) {
        int seen = 0;
        for (int h = 0; h < g; h++)
            seen |= S->gpus[h].capacity == S->gpus[g].capacity;
        if (seen)
            continue;
        double y = Y1 - (Y1 - Y0) * (double)S->gpus[g].capacity / ymax;
        sb_printf(&b, "<line x1=\"%.0f\" y1=\"%.2f\" x2=\"%.0f\" y2=\"%.2f\" stroke=\"#d00\" "
                    "stroke-dasharray=\"6 4\"/><text x=\"%.0f\" y=\"%.2f\" fill=\"#d00\" "
                    "text-anchor=\"end\">capacity %.1f GiB</text>\n",
                X0, y, X1, y, X1, y - 4, gib((double)S->gpus[g].capacity));
    }
    /* one step line per GPU */
    uint64_t tot[MPRESS_MAX_GPUS + 1] = {0};
    long i = 0;
    for (; i < r->n_mem && r->mem[i].t <= t0; i++) {
        int nd;
        const struct mpress_mem_delta *d = event_list(r, i, &nd);
        for (int m = 0; m < nd; m++)
            tot[dev_index(r, d[m].device)] += (uint64_t)d[m].bytes;
    }
    long start = i;
    for (int g = 0; g < G; g++) {
        uint64_t v = tot[g];
        double sx = (X1 - X0) / (t1 - t0), sy = (Y1 - Y0) / ymax;
        sb_printf(&b, "<polyline fill=\"none\" stroke-width=\"1.5\" stroke=\"%s\" points=\"%.2f,"
                    "%.2f", gpu_colors[g % 10], X0, Y1 - v * sy);
        for (long j = start; j < r->n_mem && r->mem[j].t <= t1; j++) {
            int hit = 0, nd;
            const struct mpress_mem_delta *d = event_list(r, j, &nd);
            for (int m = 0; m < nd; m++)
                if (d[m].device == g) {
                    v += (uint64_t)d[m].bytes;
                    hit = 1;
                }
            if (!hit)
                continue;
            double x = X0 + (r->mem[j].t - t0) * sx;
            sb_printf(&b, " %.2f,%.2f %.2f,%.2f", x, Y1 - (double)tot[g] * sy, x, Y1 - v * sy);
            tot[g] = v;
        }
        sb_printf(&b, " %.2f,%.2f\"/>\n", X1, Y1 - v * sy);
        sb_printf(&b, "<text x=\"%.0f\" y=\"%.0f\" fill=\"%s\">gpu %d</text>\n", X1 + 8,
                Y0 + 14.0 * g + 4, gpu_colors[g % 10], g);
    }
    /* stacked bars at each GPU's peak */
    sb_printf(&b, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"15\">what is resident at each GPU's "
                "peak, against capacity</text>\n", X0, B0 - 24);
    double bw = (X1 - X0) / (G > 0 ? G : 1), sy = (B1 - B0) / ymax;
    sb_printf(&b, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#444\"/>\n", X0,
            B1, X1, B1);
    for (int g = 0; g < G; g++) {
        const struct mpress_run_gpu *P = &S->gpus[g];
        double x = X0 + bw * g + bw * 0.2, w = bw * 0.6, y = B1;
        for (int k = 0; k < MPRESS_MEM_KINDS; k++) {
            double h = (double)P->at_peak[k] * sy;
            if (h <= 0)
                continue;
            y -= h;
            sb_printf(&b, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\">"
                        "<title>gpu %d %s %.3f GiB</title></rect>\n",
                    x, y, w, h, kind_colors[k], g,
                    mpress_mem_kind_name((enum mpress_mem_kind)k),
                    gib((double)P->at_peak[k]));
        }
        double cy = B1 - (double)P->capacity * sy;
        sb_printf(&b, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#d00\" "
                    "stroke-width=\"2\"/>\n", x - 4, cy, x + w + 4, cy);
        sb_printf(&b, "<text x=\"%.2f\" y=\"%.0f\" text-anchor=\"middle\">gpu %d</text>\n",
                x + w / 2, B1 + 16, g);
        sb_printf(&b, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"10\">%.1f"
                    "</text>\n", x + w / 2, y - 3, gib((double)P->peak));
    }
    for (int k = 0; k < MPRESS_MEM_KINDS; k++) {
        double x = X0 + 95.0 * k;
        sb_printf(&b, "<rect x=\"%.0f\" y=\"%.0f\" width=\"10\" height=\"10\" fill=\"%s\"/>"
                    "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\">%s</text>\n",
                x, B1 + 30, kind_colors[k], x + 14, B1 + 39,
                mpress_mem_kind_name((enum mpress_mem_kind)k));
    }
    sb_printf(&b, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" fill=\"#d00\">red: capacity; "
                "numbers: peak GiB</text>\n", X0, B1 + 56.0);
    sb_printf(&b, "</svg>\n");
    return sb_finish(&b);
}
