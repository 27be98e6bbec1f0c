/* What a finished simulation shows: the largest residents at each GPU's peak, the
 * mpress-sim-report JSON, the text `mpress run` prints, the Chrome trace and the SVG plot.
 * Everything here reads the event log the engine kept; nothing is re-modelled. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "sim_internal.h"
#include "util/strbuf.h"

/* ---- memory replay ----------------------------------------------------------------------- */

static int log_head(const struct mpress_sim *sim, const struct sim_log *l)
{
    if (l->task < 0)
        return sim->init_mem;
    return l->phase ? sim->tasks[l->task].mem_end : sim->tasks[l->task].mem_start;
}

struct agg {
    int kind, owner, iteration, micro_batch;
    int64_t bytes;
};

static void resident_label(const struct agg *a, int dev, char *out, size_t size)
{
    const char *k = mpress_sim_mem_kind_name((enum mpress_sim_mem_kind)a->kind);
    if (a->micro_batch < 0) {
        if (a->kind == MPRESS_SIM_MEM_WORKING)
            snprintf(out, size, "op workspace");
        else if (a->owner != dev)
            snprintf(out, size, "%s of gpu %d", k, a->owner);
        else
            snprintf(out, size, "%s", k);
    } else if (a->kind == MPRESS_SIM_MEM_PARKED) {
        snprintf(out, size, "parked from gpu %d, iteration %d micro-batch %d", a->owner,
                 a->iteration, a->micro_batch);
    } else {
        const char *what = a->kind == MPRESS_SIM_MEM_WORKING ? "recomputed/prefetched" : k;
        snprintf(out, size, "%s, iteration %d micro-batch %d", what, a->iteration,
                 a->micro_batch);
    }
}

void sim_residents_at_peak(struct mpress_sim *sim, int dev, struct mpress_sim_gpu *g)
{
    g->n_residents = 0;
    if (sim->peak_log[dev] < 0)
        return;
    int cap = 64, n = 0;
    struct agg *a = malloc((size_t)cap * sizeof(*a));
    if (!a) {
        sim->failed = 1;
        return;
    }
    for (long i = 0; i <= sim->peak_log[dev]; i++) {
        for (int m = log_head(sim, &sim->log[i]); m >= 0; m = sim->memops[m].next) {
            const struct sim_memop *op = &sim->memops[m];
            if (op->dev != dev)
                continue;
            int j;
            for (j = n - 1; j >= 0; j--)
                if (a[j].kind == op->kind && a[j].owner == op->owner &&
                    a[j].iteration == op->iteration && a[j].micro_batch == op->micro_batch)
                    break;
            if (j < 0) {
                if (n == cap) {
                    struct agg *q = realloc(a, (size_t)cap * 2 * sizeof(*a));
                    if (!q) {
                        free(a);
                        sim->failed = 1;
                        return;
                    }
                    a = q;
                    cap *= 2;
                }
                a[n] = (struct agg){op->kind, op->owner, op->iteration, op->micro_batch, 0};
                j = n++;
            }
            a[j].bytes += op->delta;
        }
    }
    /* biggest first; ties keep first-allocated order (stable selection) */
    for (int r = 0; r < MPRESS_SIM_RESIDENTS; r++) {
        int best = -1;
        for (int j = 0; j < n; j++)
            if (a[j].bytes > 0 && (best < 0 || a[j].bytes > a[best].bytes))
                best = j;
        if (best < 0)
            break;
        resident_label(&a[best], dev, g->residents[r].label, sizeof(g->residents[r].label));
        g->residents[r].bytes = (uint64_t)a[best].bytes;
        g->n_residents++;
        a[best].bytes = 0;
    }
    free(a);
}

/* ---- report -------------------------------------------------------------------------------- */

static const struct mpress_plan_gpu *predicted_gpu(const struct mpress_plan *plan, int g)
{
    for (int i = 0; i < plan->n_gpus; i++)
        if (plan->gpus && plan->gpus[i].gpu == g)
            return &plan->gpus[i];
    return NULL;
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

static double predicted_tflops(const struct mpress_sim *sim)
{
    return sim->plan->iteration_s > 0 ? sim->model_flops_per_iter / sim->plan->iteration_s / 1e12
                                      : 0;
}

static json_t *residents_json(const struct mpress_sim_gpu *G)
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

json_t *mpress_sim_report_json(const struct mpress_sim *sim)
{
    const struct mpress_plan *plan = sim->plan;
    const struct mpress_sim_summary *S = &sim->summary;
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string(MPRESS_SIM_REPORT_FORMAT));
    json_object_set_new(root, "version", json_integer(MPRESS_SIM_REPORT_VERSION));
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
    json_object_set_new(root, "wait_for_memory", json_boolean(sim->wait_for_memory));
    json_t *w = json_object();
    json_object_set_new(w, "start_s", json_real(S->iteration_start_s));
    json_object_set_new(w, "end_s", json_real(S->iteration_end_s));
    json_object_set_new(root, "reported_iteration", w);
    json_object_set_new(root, "total_s", json_real(S->total_s));
    json_object_set_new(root, "iteration_s", cmp_json(S->iteration_s, plan->iteration_s));
    json_object_set_new(root, "samples_per_s", cmp_json(S->samples_per_s, plan->samples_per_s));
    json_object_set_new(root, "model_tflops", cmp_json(S->model_tflops, predicted_tflops(sim)));
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
        const struct mpress_sim_gpu *G = &S->gpus[g];
        const struct mpress_plan_gpu *P = predicted_gpu(plan, g);
        json_t *o = json_object();
        json_object_set_new(o, "gpu", json_integer(g));
        json_object_set_new(o, "stage", json_integer(G->stage));
        json_object_set_new(o, "capacity", json_integer((json_int_t)G->capacity));
        json_object_set_new(o, "peak", cmp_json_u64(G->peak, P ? P->peak : 0));
        json_object_set_new(o, "peak_time_s", json_real(G->peak_time_s));
        json_t *bd = json_object();
        for (int k = 0; k < MPRESS_SIM_MEM_KINDS; k++)
            json_object_set_new(bd, mpress_sim_mem_kind_name((enum mpress_sim_mem_kind)k),
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
        const struct mpress_sim_link *L = &S->links[i];
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(L->name));
        json_object_set_new(o, "bytes_per_s", json_real(L->bytes_per_s));
        json_object_set_new(o, "bytes", json_real(L->bytes));
        json_object_set_new(o, "utilization", json_real(L->utilization));
        json_array_append_new(links, o);
    }
    json_object_set_new(root, "links", links);

    if (S->out_of_memory) {
        const struct mpress_sim_gpu *G = &S->gpus[S->oom_gpu];
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

/* ", label 1.234 GB" per resident at the GPU's peak, the first without its comma. */
static void residents_text(struct mpress_strbuf *b, const struct mpress_sim_gpu *G)
{
    for (int r = 0; r < G->n_residents; r++)
        sb_printf(b, "%s %s %.3f GB", r ? "," : "", G->residents[r].label,
                  G->residents[r].bytes / 1e9);
}

static void fmt_diff(char *out, size_t size, double sim, double pred)
{
    if (pred > 0)
        snprintf(out, size, "%+.1f %%", pct(sim, pred));
    else
        snprintf(out, size, "-");
}

char *mpress_sim_oom_text(const struct mpress_sim *sim)
{
    const struct mpress_sim_summary *S = &sim->summary;
    struct mpress_strbuf b = {0};
    if (!S->out_of_memory && S->host_out_of_memory) {
        sb_printf(&b, "out of pinned host memory: peak %.3f GB of %.3f GB (host swaps and host "
                    "optimizer states)", S->host_peak / 1e9, S->host_capacity / 1e9);
        return sb_finish(&b);
    }
    if (!S->out_of_memory)
        return NULL;
    const struct mpress_sim_gpu *G = &S->gpus[S->oom_gpu];
    sb_printf(&b, "out of memory on gpu %d at %.6f s: peak %.3f GB of %.3f GB capacity; largest "
                "residents at the peak:", S->oom_gpu, G->oom_time_s, G->peak / 1e9,
            G->capacity / 1e9);
    residents_text(&b, G);
    return sb_finish(&b);
}

char *mpress_sim_render(const struct mpress_sim *sim)
{
    const struct mpress_plan *plan = sim->plan;
    const struct mpress_sim_summary *S = &sim->summary;
    struct mpress_strbuf b = {0};
    char d[32];
    sb_printf(&b, "simulated %s on %s: policy %s, %s, %d stages, %d micro-batches, %d "
                "iteration%s (the last is reported)\n\n",
            plan->profile.model.name, plan->topology.name, plan->policy,
            mpress_schedule_name(plan->schedule), plan->n_stages, plan->micro_batches,
            S->iterations, S->iterations == 1 ? "" : "s");
    sb_printf(&b, "%-22s %14s %14s %10s\n", "", "simulated", "predicted", "diff");
    fmt_diff(d, sizeof(d), S->iteration_s, plan->iteration_s);
    sb_printf(&b, "%-22s %12.4f s %12.4f s %10s\n", "iteration time", S->iteration_s,
            plan->iteration_s, d);
    fmt_diff(d, sizeof(d), S->samples_per_s, plan->samples_per_s);
    sb_printf(&b, "%-22s %14.3f %14.3f %10s\n", "samples/s", S->samples_per_s,
            plan->samples_per_s, d);
    double pt = predicted_tflops(sim);
    fmt_diff(d, sizeof(d), S->model_tflops, pt);
    sb_printf(&b, "%-22s %14.2f %14.2f %10s\n", "model TFLOP/s", S->model_tflops, pt, d);
    sb_printf(&b, "(model TFLOP/s counts 3 x forward FLOPs per sample, recompute not counted; "
                "with recompute: %.2f)\n\n", S->hardware_tflops);

    sb_printf(&b, "%-4s %5s %10s %10s %9s %10s %10s %8s %8s %8s\n", "gpu", "stage", "peak GB",
            "predicted", "diff", "capacity", "peak at s", "busy s", "swap s", "bound s");
    for (int g = 0; g < S->n_gpus; g++) {
        const struct mpress_sim_gpu *G = &S->gpus[g];
        const struct mpress_plan_gpu *P = predicted_gpu(plan, g);
        fmt_diff(d, sizeof(d), (double)G->peak, P ? (double)P->peak : 0);
        char st[8];
        snprintf(st, sizeof(st), G->stage >= 0 ? "%d" : "-", G->stage);
        sb_printf(&b, "%-4d %5s %10.3f %10.3f %9s %10.3f %10.4f %8.4f %8.4f %8.4f%s\n", g, st,
                G->peak / 1e9, P ? P->peak / 1e9 : 0.0, d, G->capacity / 1e9, G->peak_time_s,
                G->busy_s, G->stall_swap_s, G->stall_boundary_s,
                G->out_of_memory ? "  OUT OF MEMORY" : "");
    }
    sb_printf(&b, "(busy, swap and boundary stalls over the reported iteration; stalls count "
                "compute waiting on a copy once the copy could start)\n");
    if (sim->wait_for_memory) {
        sb_printf(&b, "held for memory (--wait-for-memory), reported iteration:");
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
        const struct mpress_sim_gpu *G = &S->gpus[tight];
        sb_printf(&b, "fullest GPU: gpu %d at %.1f %% of capacity at %.4f s; largest residents:",
                tight, 100.0 * G->peak / G->capacity, G->peak_time_s);
        residents_text(&b, G);
        sb_printf(&b, "\n");
    }
    if (S->n_links) {
        sb_printf(&b, "\n%-26s %10s %12s %8s\n", "link (reported iteration)", "GB/s", "GB moved",
                "util");
        for (int i = 0; i < S->n_links; i++) {
            const struct mpress_sim_link *L = &S->links[i];
            sb_printf(&b, "%-26s %10.1f %12.3f %7.1f%%\n", L->name, L->bytes_per_s / 1e9,
                    L->bytes / 1e9, L->utilization * 100);
        }
    }
    if (S->host_peak)
        sb_printf(&b, "\npinned host memory at peak: %.3f GB of %.3f GB%s\n", S->host_peak / 1e9,
                S->host_capacity / 1e9, S->host_out_of_memory ? "  OUT OF MEMORY" : "");
    return sb_finish(&b);
}

/* ---- Chrome trace -------------------------------------------------------------------------
 * pid g = GPU g with tid 0 compute, 1 copy D2H, 2 copy H2D, 3 + b copy to GPU b; pid n_gpus =
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

static void task_track(const struct mpress_sim *sim, const struct sim_task *T, int *pid,
                       int *tid)
{
    int epg = sim->engines_per_gpu;
    if (T->stream >= 0) {
        *pid = sim->stage_gpu[T->stream];
        *tid = 0;
    } else if (T->queue >= sim->cpu_queue0) {
        *pid = sim->n_gpus;
        *tid = T->queue - sim->cpu_queue0;
    } else {
        *pid = T->queue / epg;
        *tid = 1 + T->queue % epg;   /* 1 D2H, 2 H2D, 3 + b peer */
    }
}

static void task_name(const struct mpress_sim *sim, const struct sim_task *T, char *out,
                      size_t size)
{
    const struct mpress_plan *plan = sim->plan;
    const struct mpress_profile *pr = &plan->profile;
    const struct mpress_sim_task *P = &T->pub;
    const char *opn = P->op >= 0 ? pr->ops[P->op].name : "";
    const char *tn = "";
    if (P->action >= 0) {
        const struct mpress_plan_action *a = &plan->actions[P->action];
        tn = pr->ops[a->op].tensors[a->tensor].id;
    }
    char dst[16];
    snprintf(dst, sizeof(dst), P->dst < 0 ? "host" : "gpu%d", P->dst);
    switch (P->kind) {
    case MPRESS_SIM_FORWARD:
        snprintf(out, size, "F %s mb%d", opn, P->micro_batch);
        break;
    case MPRESS_SIM_BACKWARD:
        snprintf(out, size, "B %s mb%d", opn, P->micro_batch);
        break;
    case MPRESS_SIM_RECOMPUTE:
        snprintf(out, size, "recompute %s mb%d", tn, P->micro_batch);
        break;
    case MPRESS_SIM_OPTIMIZER:
        snprintf(out, size, "optimizer step stage %d", P->stage);
        break;
    case MPRESS_SIM_EVICT:
        snprintf(out, size, "evict %s mb%d -> %s", tn, P->micro_batch, dst);
        break;
    case MPRESS_SIM_PREFETCH:
        snprintf(out, size, "prefetch %s mb%d -> %s", tn, P->micro_batch, dst);
        break;
    case MPRESS_SIM_SEND_ACT:
        snprintf(out, size, "send activation mb%d -> %s", P->micro_batch, dst);
        break;
    case MPRESS_SIM_SEND_GRAD:
        snprintf(out, size, "send gradient mb%d -> %s", P->micro_batch, dst);
        break;
    case MPRESS_SIM_GRAD_D2H:
        snprintf(out, size, "gradients stage %d -> host", P->stage);
        break;
    case MPRESS_SIM_WEIGHTS_H2D:
        snprintf(out, size, "weights stage %d -> %s", P->stage, dst);
        break;
    default:
        snprintf(out, size, "?");
    }
}

char *mpress_sim_trace(const struct mpress_sim *sim)
{
    const struct mpress_plan *plan = sim->plan;
    struct mpress_strbuf b = {0};
    int G = sim->n_gpus, NK = sim->n_queues - sim->cpu_queue0;
    char name[160];
    sb_printf(&b, "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"generator\": \"mpress "
                MPRESS_VERSION "\", \"model\": ");
    json_str(&b, plan->profile.model.name);
    sb_printf(&b, ", \"topology\": ");
    json_str(&b, plan->topology.name);
    sb_printf(&b, "}, \"traceEvents\": [\n");
    for (int g = 0; g < G; g++) {
        if (sim->gpu_stage[g] >= 0)
            snprintf(name, sizeof(name), "gpu %d (stage %d)", g, sim->gpu_stage[g]);
        else
            snprintf(name, sizeof(name), "gpu %d", g);
        meta(&b, "process_name", g, 0, name);
        meta(&b, "thread_name", g, 0, "compute");
        meta(&b, "thread_name", g, 1, "copy engine d2h");
        meta(&b, "thread_name", g, 2, "copy engine h2d");
        for (int d = 0; d < G; d++) {
            if (d == g)
                continue;
            snprintf(name, sizeof(name), "copy engine -> gpu %d", d);
            meta(&b, "thread_name", g, 3 + d, name);
        }
    }
    meta(&b, "process_name", G, 0, "host");
    for (int k = 0; k < NK; k++) {
        snprintf(name, sizeof(name), "cpu socket %d", k);
        meta(&b, "thread_name", G, k, name);
    }
    meta(&b, "process_name", G + 1, 0, "links");

    for (int i = 0; i < sim->n_tasks; i++) {
        const struct sim_task *T = &sim->tasks[i];
        const struct mpress_sim_task *P = &T->pub;
        int pid, tid;
        task_track(sim, T, &pid, &tid);
        task_name(sim, T, name, sizeof(name));
        sb_printf(&b, "{\"args\": {");
        sb_printf(&b, "\"bytes\": %.0f, \"iteration\": %d", P->bytes, P->iteration);
        if (P->micro_batch >= 0)
            sb_printf(&b, ", \"micro_batch\": %d", P->micro_batch);
        if (P->op >= 0) {
            sb_printf(&b, ", \"op\": ");
            json_str(&b, plan->profile.ops[P->op].name);
        }
        sb_printf(&b, ", \"ready_us\": %.3f, \"stage\": %d", P->ready_s * 1e6, P->stage);
        if (P->action >= 0) {
            const struct mpress_plan_action *a = &plan->actions[P->action];
            sb_printf(&b, ", \"tensor\": ");
            json_str(&b, plan->profile.ops[a->op].tensors[a->tensor].id);
        }
        /* µs with ns decimals; the duration is taken between the rounded ends so that spans
         * on one track never overlap after rounding */
        double ts = round(P->start_s * 1e9) / 1e3, te = round(P->end_s * 1e9) / 1e3;
        sb_printf(&b, "}, \"cat\": \"%s\", \"dur\": %.3f, \"name\": ",
                mpress_sim_task_kind_name(P->kind), te - ts);
        json_str(&b, name);
        sb_printf(&b, ", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f},\n", pid, tid,
                ts);
    }
    for (int i = 0; i < sim->n_rates; i++) {
        const struct sim_rate *r = &sim->rates[i];
        counter(&b, sim->res[r->res].name, G + 1, r->t, "GB/s", r->rate / 1e9);
    }
    /* memory counters: each GPU's total after every change */
    uint64_t tot[MPRESS_MAX_GPUS + 1] = {0};
    for (long i = 0; i < sim->n_log; i++) {
        int touched[MPRESS_MAX_GPUS + 1] = {0};
        for (int m = log_head(sim, &sim->log[i]); m >= 0; m = sim->memops[m].next) {
            tot[sim->memops[m].dev] += (uint64_t)sim->memops[m].delta;
            touched[sim->memops[m].dev] = 1;
        }
        for (int g = 0; g < G; g++)
            if (touched[g])
                counter(&b, "memory", g, sim->log[i].t, "GB", tot[g] / 1e9);
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
static const char *const kind_colors[MPRESS_SIM_MEM_KINDS] = {
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

char *mpress_sim_svg(const struct mpress_sim *sim)
{
    const struct mpress_sim_summary *S = &sim->summary;
    int G = sim->n_gpus;
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
    xml_text(&b, sim->plan->profile.model.name);
    sb_printf(&b, " on ");
    xml_text(&b, sim->plan->topology.name);
    sb_printf(&b, ": memory per GPU over the reported iteration (%.4f s to %.4f s)</text>\n", t0,
            t1);
    /* axes */
    sb_printf(&b, "<g stroke=\"#444\" fill=\"none\"><line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" "
                "y2=\"%.0f\"/><line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\"/></g>\n",
            X0, Y1, X1, Y1, X0, Y0, X0, Y1);
    for (int i = 0; i <= 4; i++) {
        double v = ymax * i / 4, y = Y1 - (Y1 - Y0) * i / 4;
        sb_printf(&b, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%.1f GB</text>\n", X0 - 4,
                y + 4, v / 1e9);
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
                    "text-anchor=\"end\">capacity %.1f GB</text>\n",
                X0, y, X1, y, X1, y - 4, S->gpus[g].capacity / 1e9);
    }
    /* one step line per GPU */
    uint64_t tot[MPRESS_MAX_GPUS + 1] = {0};
    long i = 0;
    for (; i < sim->n_log && sim->log[i].t <= t0; i++)
        for (int m = log_head(sim, &sim->log[i]); m >= 0; m = sim->memops[m].next)
            tot[sim->memops[m].dev] += (uint64_t)sim->memops[m].delta;
    long start = i;
    for (int g = 0; g < G; g++) {
        uint64_t v = tot[g];
        double sx = (X1 - X0) / (t1 - t0), sy = (Y1 - Y0) / ymax;
        sb_printf(&b, "<polyline fill=\"none\" stroke-width=\"1.5\" stroke=\"%s\" points=\"%.2f,"
                    "%.2f", gpu_colors[g % 10], X0, Y1 - v * sy);
        for (long j = start; j < sim->n_log && sim->log[j].t <= t1; j++) {
            int hit = 0;
            for (int m = log_head(sim, &sim->log[j]); m >= 0; m = sim->memops[m].next)
                if (sim->memops[m].dev == g) {
                    v += (uint64_t)sim->memops[m].delta;
                    hit = 1;
                }
            if (!hit)
                continue;
            double x = X0 + (sim->log[j].t - t0) * sx;
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
        const struct mpress_sim_gpu *P = &S->gpus[g];
        double x = X0 + bw * g + bw * 0.2, w = bw * 0.6, y = B1;
        for (int k = 0; k < MPRESS_SIM_MEM_KINDS; k++) {
            double h = (double)P->at_peak[k] * sy;
            if (h <= 0)
                continue;
            y -= h;
            sb_printf(&b, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\">"
                        "<title>gpu %d %s %.3f GB</title></rect>\n",
                    x, y, w, h, kind_colors[k], g,
                    mpress_sim_mem_kind_name((enum mpress_sim_mem_kind)k),
                    P->at_peak[k] / 1e9);
        }
        double cy = B1 - (double)P->capacity * sy;
        sb_printf(&b, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#d00\" "
                    "stroke-width=\"2\"/>\n", x - 4, cy, x + w + 4, cy);
        sb_printf(&b, "<text x=\"%.2f\" y=\"%.0f\" text-anchor=\"middle\">gpu %d</text>\n",
                x + w / 2, B1 + 16, g);
        sb_printf(&b, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"10\">%.1f"
                    "</text>\n", x + w / 2, y - 3, P->peak / 1e9);
    }
    for (int k = 0; k < MPRESS_SIM_MEM_KINDS; k++) {
        double x = X0 + 95.0 * k;
        sb_printf(&b, "<rect x=\"%.0f\" y=\"%.0f\" width=\"10\" height=\"10\" fill=\"%s\"/>"
                    "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\">%s</text>\n",
                x, B1 + 30, kind_colors[k], x + 14, B1 + 39,
                mpress_sim_mem_kind_name((enum mpress_sim_mem_kind)k));
    }
    sb_printf(&b, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" fill=\"#d00\">red: capacity; "
                "numbers: peak GB</text>\n", X0, B1 + 56.0);
    sb_printf(&b, "</svg>\n");
    return sb_finish(&b);
}
