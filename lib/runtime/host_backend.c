/* The host backend: every GPU of a plan is an emulated device whose memory is an arena capped
 * at that GPU's memory_bytes (the topology reserve charged up front, as the plan charges it),
 * with a high-water mark per memory kind; the host has an arena of host_memory_bytes for
 * swapped tensors and host optimizer states. Copies are memcpy, optionally throttled to the
 * topology's link bandwidth; kernels are lib/runtime/host_ops.c and the files it dispatches
 * to. docs/runtime.md, "The host backend". */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mpress/model.h"
#include "mpress/runtime.h"
#include "host_ops.h"
#include "runtime_internal.h"

_Static_assert(MPRESS_MODEL_MAX_IO == 4 && MPRESS_MODEL_MAX_WEIGHTS == 12 &&
                   MPRESS_MODEL_MAX_SAVED == 8,
               "struct mpress_rt_io mirrors struct mpress_host_io");

/* Freed blocks an arena keeps for the next allocation of the same size (a step allocates the
 * same sizes every micro-batch): no malloc, no fresh pages to fault in. The arena counts bytes
 * as before; the blocks it keeps are bounded so that kept and live bytes together never pass
 * the arena's own high-water mark. */
#define ARENA_KEEP 64

struct arena {
    pthread_mutex_t lock;
    uint64_t capacity, total, peak_total;
    uint64_t cur[MPRESS_MEM_KINDS], at_peak[MPRESS_MEM_KINDS], max_kind[MPRESS_MEM_KINDS];
    void *keep[ARENA_KEEP];
    uint64_t keep_bytes[ARENA_KEEP], kept;
    int n_keep;
};

struct host_be {
    const struct mpress_plan *plan;
    struct mpress_model model;
    struct mpress_host_hparams hp;
    int throttle;
    int n_gpus;
    pthread_mutex_t link_lock;  /* the links' free times (--throttle) */
    double pcie_free[MPRESS_MAX_GPUS][2], uplink_free[MPRESS_MAX_GPUS][2];
    double pair_free[MPRESS_MAX_GPUS][MPRESS_MAX_GPUS];
    struct arena arenas[MPRESS_MAX_GPUS + 1];    /* [n_gpus] is the host */
};

static struct arena *arena_of(struct host_be *b, int dev)
{
    return dev == MPRESS_RT_HOST ? &b->arenas[b->n_gpus] : &b->arenas[dev];
}

static void charge(struct arena *a, int kind, uint64_t bytes)
{
    a->cur[kind] += bytes;
    a->total += bytes;
    if (a->cur[kind] > a->max_kind[kind])
        a->max_kind[kind] = a->cur[kind];
    if (a->total > a->peak_total) {
        a->peak_total = a->total;
        memcpy(a->at_peak, a->cur, sizeof(a->cur));
    }
}

static int hb_alloc(void *ctx, int dev, int kind, uint64_t bytes, const char *what, void **out,
                    struct mpress_error *err)
{
    struct host_be *b = ctx;
    struct arena *a = arena_of(b, dev);
    *out = NULL;
    if (kind < 0 || kind >= MPRESS_MEM_KINDS)
        return mpress_error_set(err, MPRESS_EUSAGE, "memory kind %d", kind);
    pthread_mutex_lock(&a->lock);
    if (bytes > a->capacity - a->total) {
        uint64_t total = a->total, cap = a->capacity;
        pthread_mutex_unlock(&a->lock);
        char d[16];
        if (dev == MPRESS_RT_HOST)
            snprintf(d, sizeof(d), "host");
        else
            snprintf(d, sizeof(d), "gpu %d", dev);
        return mpress_error_set(err, MPRESS_EINFEASIBLE,
                                "out of memory on %s: %s needs %llu bytes, %llu of %llu are in "
                                "use: %llu bytes short", d, what, (unsigned long long)bytes,
                                (unsigned long long)total, (unsigned long long)cap,
                                (unsigned long long)(bytes - (cap - total)));
    }
    charge(a, kind, bytes);
    for (int i = 0; i < a->n_keep; i++)
        if (a->keep_bytes[i] == bytes) {
            *out = a->keep[i];
            a->kept -= bytes;
            a->n_keep--;
            a->keep[i] = a->keep[a->n_keep];
            a->keep_bytes[i] = a->keep_bytes[a->n_keep];
            pthread_mutex_unlock(&a->lock);
            return 0;
        }
    pthread_mutex_unlock(&a->lock);
    void *p = malloc(bytes ? (size_t)bytes : 1);
    if (!p) {
        pthread_mutex_lock(&a->lock);
        a->cur[kind] -= bytes;
        a->total -= bytes;
        pthread_mutex_unlock(&a->lock);
        return mpress_error_set(err, MPRESS_ESYSTEM, "%s: the machine cannot hold %llu more "
                                "bytes", what, (unsigned long long)bytes);
    }
    *out = p;
    return 0;
}

static void hb_free(void *ctx, int dev, int kind, void *p, uint64_t bytes)
{
    struct host_be *b = ctx;
    if (!p)
        return;
    struct arena *a = arena_of(b, dev);
    pthread_mutex_lock(&a->lock);
    a->cur[kind] -= bytes;
    a->total -= bytes;
    if (a->n_keep < ARENA_KEEP && a->total + a->kept + bytes <= a->peak_total) {
        a->keep[a->n_keep] = p;
        a->keep_bytes[a->n_keep++] = bytes;
        a->kept += bytes;
        p = NULL;
    }
    pthread_mutex_unlock(&a->lock);
    free(p);
}

static void hb_retag(void *ctx, int dev, void *p, uint64_t bytes, int from, int to)
{
    struct host_be *b = ctx;
    if (!p || from < 0 || to < 0 || from >= MPRESS_MEM_KINDS || to >= MPRESS_MEM_KINDS)
        return;
    struct arena *a = arena_of(b, dev);
    pthread_mutex_lock(&a->lock);
    a->cur[from] -= bytes;
    a->cur[to] += bytes;
    if (a->cur[to] > a->max_kind[to])
        a->max_kind[to] = a->cur[to];
    pthread_mutex_unlock(&a->lock);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Links a throttled copy occupies, FIFO: each GPU's PCIe link and each switch's uplink per
 * direction (0 toward the host, 1 from it), and each ordered GPU pair's NVLinks. A copy takes
 * every link on its path from when the last of them is free, for bytes / the slowest of them;
 * so copies that share a link queue on it (the simulator shares it fairly instead: the same
 * total, other finish times). */
struct link_path {
    double *free_at[3];
    int n;
    double bytes_per_s;
};

static void path_of(struct host_be *b, int src, int dst, struct link_path *p)
{
    const struct mpress_topology *tp = &b->plan->topology;
    p->n = 0;
    p->bytes_per_s = 0;
    if (src == dst)
        return;
    if (src == MPRESS_RT_HOST || dst == MPRESS_RT_HOST) {
        int g = src == MPRESS_RT_HOST ? dst : src, dir = src == MPRESS_RT_HOST;
        double bw = tp->pcie_bytes_per_s;
        p->free_at[p->n++] = &b->pcie_free[g][dir];
        int sw = tp->gpus[g].pcie_switch;
        if (sw >= 0 && sw < tp->n_switches && tp->switches[sw].uplink_bytes_per_s > 0) {
            p->free_at[p->n++] = &b->uplink_free[sw][dir];
            if (tp->switches[sw].uplink_bytes_per_s < bw || bw <= 0)
                bw = tp->switches[sw].uplink_bytes_per_s;
        }
        p->bytes_per_s = bw;
        return;
    }
    double bw = mpress_topology_p2p_bytes_per_s(tp, src, dst);
    if (bw <= 0) {
        /* no NVLink: through the host over both GPUs' PCIe links */
        bw = tp->pcie_bytes_per_s;
        p->free_at[p->n++] = &b->pcie_free[src][0];
        p->free_at[p->n++] = &b->pcie_free[dst][1];
    } else {
        p->free_at[p->n++] = &b->pair_free[src][dst];
    }
    p->bytes_per_s = bw;
}

/* A throttled copy holds the links of its path on one absolute clock (CLOCK_MONOTONIC): from
 * when its task was ready or the last of them is free, whichever is later, for bytes / the
 * slowest one's bandwidth; *done_s is the end. The caller waits for it (clock_nanosleep to the
 * absolute time, returning at once when it has passed). A wait that overshoots therefore
 * delays only its own copy: the next copy on the link starts at the link's free time, not at
 * the late wake-up, and small copies queued behind each other are laid end to end in link
 * time and released together once the clock has passed them. */
static int hb_copy_ready(void *ctx, int dst_dev, void *dst, int src_dev, const void *src,
                         uint64_t bytes, double ready_s, double *done_s,
                         struct mpress_error *err)
{
    (void)err;
    struct host_be *b = ctx;
    *done_s = 0;
    if (b->throttle) {
        struct link_path lp;
        path_of(b, src_dev, dst_dev, &lp);
        if (lp.n && lp.bytes_per_s > 0) {
            pthread_mutex_lock(&b->link_lock);
            double start = ready_s;
            for (int i = 0; i < lp.n; i++)
                if (*lp.free_at[i] > start)
                    start = *lp.free_at[i];
            *done_s = start + (double)bytes / lp.bytes_per_s;
            for (int i = 0; i < lp.n; i++)
                *lp.free_at[i] = *done_s;
            pthread_mutex_unlock(&b->link_lock);
        }
    }
    if (bytes)
        memmove(dst, src, (size_t)bytes);
    return 0;
}

static int hb_copy(void *ctx, int dst_dev, void *dst, int src_dev, const void *src,
                   uint64_t bytes, struct mpress_error *err)
{
    double done = 0;
    int rc = hb_copy_ready(ctx, dst_dev, dst, src_dev, src, bytes, now_s(), &done, err);
    rt_sleep_until(done);
    return rc;
}

static int hb_upload(void *ctx, int dev, void *dst, const void *src, uint64_t bytes,
                     struct mpress_error *err)
{
    (void)ctx, (void)dev, (void)err;
    if (bytes)
        memcpy(dst, src, (size_t)bytes);
    return 0;
}

static int hb_zero(void *ctx, int dev, void *p, uint64_t bytes, struct mpress_error *err)
{
    (void)ctx, (void)dev, (void)err;
    if (bytes)
        memset(p, 0, (size_t)bytes);
    return 0;
}

static void to_host_io(const struct mpress_rt_io *io, struct mpress_host_io *h)
{
    memset(h, 0, sizeof(*h));
    memcpy(h->in, io->in, sizeof(h->in));
    memcpy(h->out, io->out, sizeof(h->out));
    memcpy(h->w, io->w, sizeof(h->w));
    memcpy(h->saved, io->saved, sizeof(h->saved));
    memcpy(h->dout, io->dout, sizeof(h->dout));
    memcpy(h->din, io->din, sizeof(h->din));
    memcpy(h->dw, io->dw, sizeof(h->dw));
}

/* A kernel's scratch memory: working memory of the device's arena, for the duration of the
 * op call, named in the out-of-memory message like the executor's tensors. */
struct op_scratch {
    struct host_be *b;
    int dev, op, stage, bwd;
    uint32_t micro_batch;
    const struct mpress_rt_io *io;  /* its on_oom */
};

static int scratch_alloc(void *ctx, uint64_t bytes, void **out, struct mpress_error *err)
{
    struct op_scratch *s = ctx;
    char what[200];
    snprintf(what, sizeof(what), "stage %d (gpu %d), op %s, %s scratch, micro-batch %u",
             s->stage, s->dev, s->b->model.ops[s->op].name, s->bwd ? "backward" : "forward",
             s->micro_batch);
    int rc;
    while ((rc = hb_alloc(s->b, s->dev, MPRESS_MEM_WORKING, bytes, what, out, err)) ==
               MPRESS_EINFEASIBLE &&
           s->io->on_oom && s->io->on_oom(s->io->on_oom_arg, s->dev, err))
        mpress_error_clear(err);
    return rc;
}

static void scratch_free(void *ctx, void *p, uint64_t bytes)
{
    struct op_scratch *s = ctx;
    hb_free(s->b, s->dev, MPRESS_MEM_WORKING, p, bytes);
}

static int stage_of_op(const struct mpress_plan *plan, int op)
{
    for (int k = 0; k < plan->n_stages; k++)
        if (op >= plan->stages[k].first_op && op <= plan->stages[k].last_op)
            return k;
    return -1;
}

static int hb_run(void *ctx, int dev, int op, const struct mpress_rt_key *key,
                  const struct mpress_rt_io *io, int bwd, struct mpress_error *err)
{
    struct host_be *b = ctx;
    struct mpress_host_io h;
    to_host_io(io, &h);
    struct op_scratch os = {b, dev, op, stage_of_op(b->plan, op), bwd, key->micro_batch, io};
    struct mpress_host_scratch sc = {&os, scratch_alloc, scratch_free};
    h.scratch = &sc;
    struct mpress_rng_key k = {key->seed, key->step, key->micro_batch, key->op};
    return bwd ? mpress_host_backward(&b->model, op, &b->hp, &k, &h, err)
               : mpress_host_forward(&b->model, op, &b->hp, &k, &h, err);
}

static int hb_forward(void *ctx, int dev, int op, const struct mpress_rt_key *key,
                      const struct mpress_rt_io *io, struct mpress_error *err)
{
    return hb_run(ctx, dev, op, key, io, 0, err);
}

static int hb_backward(void *ctx, int dev, int op, const struct mpress_rt_key *key,
                       const struct mpress_rt_io *io, struct mpress_error *err)
{
    return hb_run(ctx, dev, op, key, io, 1, err);
}

static int hb_derive(void *ctx, int dev, int op, int saved, const void *producer_out, void *dst)
{
    (void)dev;
    struct host_be *b = ctx;
    return mpress_host_saved_derive(&b->model, op, saved, producer_out, dst);
}

static int hb_grad_add(void *ctx, int dev, int dtype, void *dst, const void *src, uint64_t n,
                       struct mpress_error *err)
{
    (void)ctx, (void)dev, (void)err;
    if (mpress_host_storage((enum mpress_dtype)dtype) == MPRESS_DTYPE_BF16) {
        uint16_t *d = dst;
        const uint16_t *s = src;
        for (uint64_t k = 0; k < n; k++)
            d[k] = mpress_f32_to_bf16(mpress_bf16_to_f32(d[k]) + mpress_bf16_to_f32(s[k]));
    } else {
        float *d = dst;
        const float *s = src;
        for (uint64_t k = 0; k < n; k++)
            d[k] += s[k];
    }
    return 0;
}

static int hb_step(void *ctx, int dev, const struct mpress_rt_optim *o, int t,
                   const struct mpress_rt_param *p, struct mpress_error *err)
{
    (void)ctx, (void)dev, (void)err;
    struct mpress_host_optim ho = {o->lr, o->beta1, o->beta2, o->eps, o->weight_decay,
                                   o->momentum};
    struct mpress_host_param hp;
    memset(&hp, 0, sizeof(hp));
    hp.owner = -1;
    hp.dtype = (enum mpress_dtype)p->dtype;
    hp.n = p->n;
    hp.decay = p->decay;
    hp.w = p->w;
    hp.g = p->g;
    hp.master = p->master;
    hp.m = p->m;
    hp.v = p->v;
    mpress_host_optim_step(&ho, o->sgd, t, &hp);
    return 0;
}

static void hb_memory(void *ctx, int dev, uint64_t *capacity, uint64_t *peak_total,
                      uint64_t *at_peak, uint64_t *max_kind)
{
    struct host_be *b = ctx;
    struct arena *a = arena_of(b, dev);
    pthread_mutex_lock(&a->lock);
    if (capacity)
        *capacity = a->capacity;
    if (peak_total)
        *peak_total = a->peak_total;
    if (at_peak)
        memcpy(at_peak, a->at_peak, sizeof(a->at_peak));
    if (max_kind)
        memcpy(max_kind, a->max_kind, sizeof(a->max_kind));
    pthread_mutex_unlock(&a->lock);
}

static void hb_usage(void *ctx, int dev, uint64_t *current)
{
    struct host_be *b = ctx;
    struct arena *a = arena_of(b, dev);
    pthread_mutex_lock(&a->lock);
    memcpy(current, a->cur, sizeof(a->cur));
    pthread_mutex_unlock(&a->lock);
}

static void hb_reset_peaks(void *ctx)
{
    struct host_be *b = ctx;
    for (int i = 0; i <= b->n_gpus; i++) {
        struct arena *a = &b->arenas[i];
        pthread_mutex_lock(&a->lock);
        a->peak_total = a->total;
        memcpy(a->at_peak, a->cur, sizeof(a->cur));
        memcpy(a->max_kind, a->cur, sizeof(a->cur));
        pthread_mutex_unlock(&a->lock);
    }
}

static void hb_destroy(void *ctx)
{
    struct host_be *b = ctx;
    if (!b)
        return;
    for (int i = 0; i <= b->n_gpus; i++) {
        for (int j = 0; j < b->arenas[i].n_keep; j++)
            free(b->arenas[i].keep[j]);
        pthread_mutex_destroy(&b->arenas[i].lock);
    }
    pthread_mutex_destroy(&b->link_lock);
    mpress_model_finish(&b->model);
    free(b);
}

int mpress_host_backend_create(const struct mpress_plan *plan,
                               const struct mpress_host_backend_options *opt,
                               struct mpress_backend *out, struct mpress_error *err)
{
    memset(out, 0, sizeof(*out));
    const struct mpress_topology *tp = &plan->topology;
    if (tp->n_gpus < 1 || tp->n_gpus > MPRESS_MAX_GPUS)
        return mpress_error_set(err, MPRESS_EINPUT, "the plan's topology has %d GPUs",
                                tp->n_gpus);
    /* Every emulated byte is a byte of this machine: refuse a plan whose predicted peaks (less
     * the reserves, which are only counted) exceed its physical memory, before any step. */
    uint64_t need = 0;
    for (int g = 0; g < plan->n_gpus && plan->gpus; g++)
        need += plan->gpus[g].peak > plan->gpus[g].reserve
                    ? plan->gpus[g].peak - plan->gpus[g].reserve
                    : 0;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t ram = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    if (ram && need > ram)
        return mpress_error_set(err, MPRESS_EUSAGE, "the host backend cannot run this plan "
                                "here: its GPUs' predicted peaks (reserves aside) need %llu "
                                "bytes, this machine has %llu bytes of memory; plan the model "
                                "against a smaller topology", (unsigned long long)need,
                                (unsigned long long)ram);
    struct host_be *b = calloc(1, sizeof(*b));
    if (!b)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    int rc = mpress_model_build(&plan->profile.model, &b->model, err);
    if (rc) {
        mpress_model_finish(&b->model);
        free(b);
        return rc == MPRESS_ESYSTEM ? rc : MPRESS_EINPUT;
    }
    b->plan = plan;
    b->throttle = opt && opt->throttle;
    pthread_mutex_init(&b->link_lock, NULL);
    b->n_gpus = tp->n_gpus;
    mpress_host_hparams_default(&b->hp);
    /* workers call GEMMs concurrently, and OpenBLAS results are reproducible at one thread
     * count: one thread per call, as the reference trainer is run in the tests */
    mpress_host_blas_threads(1);
    for (int i = 0; i <= b->n_gpus; i++) {
        pthread_mutex_init(&b->arenas[i].lock, NULL);
        b->arenas[i].capacity =
            i < b->n_gpus ? tp->gpus[i].memory_bytes
                          : (tp->host_memory_bytes ? tp->host_memory_bytes : UINT64_MAX);
    }
    for (int g = 0; g < b->n_gpus; g++) {
        struct arena *a = &b->arenas[g];
        uint64_t r = tp->gpus[g].reserve_bytes;
        if (r > a->capacity) {
            unsigned long long cap = a->capacity;
            hb_destroy(b);
            return mpress_error_set(err, MPRESS_EINFEASIBLE, "gpu %d: its reserve of %llu "
                                    "bytes exceeds its %llu bytes of memory", g,
                                    (unsigned long long)r, cap);
        }
        charge(a, MPRESS_MEM_RESERVE, r);
    }
    out->name = "host";
    out->ctx = b;
    out->alloc = hb_alloc;
    out->free = hb_free;
    out->retag = hb_retag;
    out->copy = hb_copy;
    out->copy_ready = hb_copy_ready;
    out->upload = hb_upload;
    out->download = hb_upload;
    out->zero = hb_zero;
    out->forward = hb_forward;
    out->backward = hb_backward;
    out->derive = hb_derive;
    out->grad_add = hb_grad_add;
    out->optimizer_step = hb_step;
    out->synchronize = NULL;    /* every call has finished when it returns */
    out->memory = hb_memory;
    out->usage = hb_usage;
    out->reset_peaks = hb_reset_peaks;
    out->destroy = hb_destroy;
    return 0;
}
