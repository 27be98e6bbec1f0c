/* The executor's queues (mpress/sched.h's queues of a plan's task graph): one worker thread per
 * queue that has tasks, each issuing its tasks in the schedule's order once their
 * predecessors have ended, with the emulation's rule that a GPU's copies go first; waiting
 * for memory (wait_for_memory); the CPUs an emulated GPU's threads run on (pin_threads); one
 * optimizer step. executor.c runs each task, exec_setup.c makes the buffers. */
#define _GNU_SOURCE             /* sched_getaffinity, pthread_setaffinity_np, sched_getcpu */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_internal.h"

/* ---- the queues -------------------------------------------------------------------------- */

/* A queue's thread. Each waits on its own condition variable for the task at its queue's head,
 * and exec_wake signals only the workers whose task may now start: with one variable for all,
 * every task's start and end woke every thread of the step (a dozen on 2 cores for a 2-device
 * plan that swaps), which took CPU time from the compute threads. */
struct worker {
    struct mpress_exec *x;
    int queue;
    int awaited;                /* the task it waits to start, -1 while running one */
    pthread_cond_t cv;
    pthread_t thread;
};

static int task_ready(const struct mpress_exec *x, int i)
{
    int np = 0;
    const int *preds = mpress_sched_preds(x->sched, i, &np);
    for (int p = 0; p < np; p++)
        if (!x->done[preds[p]])
            return 0;
    return 1;
}

/* Queue q's first task not done (x->lock held), -1 when every one is. */
static int queue_head_task(const struct mpress_exec *x, int q)
{
    int n = 0;
    const int *tasks = mpress_sched_queue_tasks(x->sched, q, &n);
    int h = x->queue_head[q];
    while (h < n && x->done[tasks[h]])
        h++;
    return h < n ? tasks[h] : -1;
}

/* Queue q's head when q is an engine that evicts (a D2H or park queue) and its head is an
 * eviction, else -1 (x->lock held). */
static int eviction_head(const struct mpress_exec *x, int q)
{
    enum mpress_queue_kind k = mpress_sched_queue(x->sched, q)->kind;
    if (k != MPRESS_QUEUE_D2H && k != MPRESS_QUEUE_PARK)
        return -1;
    int h = queue_head_task(x, q);
    return h >= 0 && mpress_sched_task(x->sched, h)->kind == MPRESS_TASK_EVICT ? h : -1;
}

/* Whether a copy engine of compute queue cq's GPU (its own, not another GPU's) has a task at its
 * head that is ready and has not yet moved its bytes (a copy with no link time to wait out: has
 * not yet ended, for until then what it frees is still allocated; exec_copy). On a GPU the
 * copy engines are hardware of their own: a copy starts when it is ready, whatever the compute
 * stream does. Here both are threads on the same CPUs, and a busy machine let a compute thread
 * run a stage's whole warm-up before the eviction thread ran (the tensors the plan evicts
 * stayed on the device: +67 % on the demo's stage 1). So the compute thread lets such a copy
 * move its bytes first; the copy's link time (--throttle) still overlaps the compute. A head
 * that is ready waits for nothing else, so this cannot block. */
int exec_copy_pending(const struct mpress_exec *x, int cq)
{
    const struct mpress_sched_queue *c = mpress_sched_queue(x->sched, cq);
    /* a copy into the GPU (a prefetch) lets the GPU's evictions go first, as the compute
     * does: it allocates on the GPU too, and one that took its memory before a ready
     * eviction had left ran a memory-wall plan out of memory (test_copies_first_own_gpu) */
    int incoming = c->kind == MPRESS_QUEUE_H2D || c->kind == MPRESS_QUEUE_PEER_IN;
    if (c->kind != MPRESS_QUEUE_COMPUTE && !incoming)
        return 0;
    int nq = mpress_sched_queue_count(x->sched);
    for (int q = 0; q < nq; q++) {
        const struct mpress_sched_queue *d = mpress_sched_queue(x->sched, q);
        /* Only this GPU's engines: another GPU's copies neither free nor fill this one's
         * memory, and waiting for them left gpu 1 of the 2-device benchmark idle 32 ms of a
         * 205 ms step with its next task ready (docs/benchmarks.md, "Host backend"). */
        if (q == cq || d->kind == MPRESS_QUEUE_COMPUTE || d->kind == MPRESS_QUEUE_CPU ||
            d->gpu != c->gpu)
            continue;
        /* the queue's head is its first task not done: the thread that ended one has not
         * necessarily taken the next yet, and a copy ready meanwhile still holds this GPU's
         * compute back (without this, a compute task started in that gap beside an evicted
         * tensor still on the device) */
        int h = incoming ? eviction_head(x, q) : queue_head_task(x, q);
        if (h >= 0 && ((!x->started[h] && task_ready(x, h)) || x->queue_moving[q]))
            return 1;
        /* a throttled copy whose link time is over and whose thread has not yet ended it (and
         * freed what it frees): with the GPU's threads on one CPU, the compute thread kept that
         * CPU until its time slice ended, and evictions stayed on the device meanwhile (+9.8 %
         * over the prediction on a memory-wall plan with links at 1e9 bytes/s) */
        if (h >= 0 && x->started[h] && x->queue_link_done[q] > 0 &&
            exec_now_s() >= x->queue_link_done[q])
            return 1;
    }
    return 0;
}

_Thread_local int exec_current_task = -1;

/* Evictions from GPU dev that will free memory without waiting for anything (x->lock held):
 * running, or ready at the head of their engine (a D2H or park queue of dev; a ready head
 * starts at once). Their count; *bytes their bytes. */
static int evictions_leaving(const struct mpress_exec *x, int dev, uint64_t *bytes)
{
    int nq = mpress_sched_queue_count(x->sched), count = 0;
    *bytes = 0;
    for (int q = 0; q < nq; q++) {
        int h = mpress_sched_queue(x->sched, q)->gpu == dev ? eviction_head(x, q) : -1;
        if (h >= 0 && (x->started[h] || task_ready(x, h))) {
            count++;
            *bytes += mpress_sched_task(x->sched, h)->bytes;
        }
    }
    return count;
}

/* A real runtime frees an evicted tensor only when its copy has ended; one that finds a GPU
 * full may wait for those copies instead of failing (PyTorch's CUDA caching allocator, for
 * one, synchronises its pending frees and retries before it reports out of memory). An
 * eviction itself never waits (it would wait for its own GPU's evictions, or a peer's for
 * its own), so every eviction waited for ends, or fails the step. */
int exec_wait_for_evictions(struct mpress_exec *x, int dev, int locked, struct mpress_error *err)
{
    int t = exec_current_task;
    if (dev < 0 || dev >= MPRESS_MAX_GPUS || t < 0 ||
        mpress_sched_task(x->sched, t)->kind == MPRESS_TASK_EVICT)
        return 0;
    if (!locked)
        pthread_mutex_lock(&x->lock);
    uint64_t bytes = 0;
    int n = evictions_leaving(x, dev, &bytes), waited = 0;
    if (n > 0 && x->opt.wait_for_memory && !x->failed) {
        long seen = x->task_ends;
        double t0 = exec_now_s();
        while (x->task_ends == seen && !x->failed)
            pthread_cond_wait(&x->mem_cv, &x->lock);
        double dt = exec_now_s() - t0;
        x->mem_waits[dev]++;
        x->mem_wait_s[dev] += dt;
        x->mem_wait_last_s[dev] += dt;
        waited = !x->failed;
    } else if (n > 0 && !x->opt.wait_for_memory) {
        size_t len = strlen(err->text);
        snprintf(err->text + len, sizeof(err->text) - len,
                 "; %d eviction%s from gpu %d (%llu bytes) had not yet left it "
                 "(mpress run waits for them unless given --no-wait-for-memory)", n,
                 n == 1 ? "" : "s", dev,
                 (unsigned long long)bytes);
    }
    if (!locked)
        pthread_mutex_unlock(&x->lock);
    return waited;
}

/* Whether w's awaited task may start (x->lock held): the step failed, or the task's
 * predecessors have ended and, on a compute queue, no copy of its GPU waits to move bytes. */
static int may_start(const struct mpress_exec *x, const struct worker *w)
{
    return x->failed || (w->awaited >= 0 && task_ready(x, w->awaited) &&
                         !exec_copy_pending(x, w->queue));
}

void exec_wake(struct mpress_exec *x)
{
    for (int k = 0; k < x->n_workers; k++) {
        struct worker *w = &x->workers[k];
        if (w->awaited >= 0 && may_start(x, w))
            pthread_cond_signal(&w->cv);
    }
}

/* pin_threads: the CPUs the process may run on, for this step's workers. */
static void find_cpus(struct mpress_exec *x)
{
    x->n_cpus = 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (!x->opt.pin_threads || sched_getaffinity(0, sizeof(set), &set) != 0)
        return;
    for (int c = 0; c < CPU_SETSIZE && x->n_cpus < MPRESS_EXEC_MAX_CPUS; c++)
        if (CPU_ISSET(c, &set))
            x->cpus[x->n_cpus++] = c;
    if (x->n_cpus < 2)
        x->n_cpus = 0;
}

/* An emulated GPU's threads share one CPU. Copies first (exec_copy_pending) makes a compute
 * thread wait for a copy of its own GPU that is ready; the copy's thread, woken by the task
 * that made it ready, was placed by the kernel on another busy CPU and ran only when that
 * CPU's running thread yielded it: 1 to 5 ms later on the 2-core benchmark machine while the
 * waiting compute thread's CPU stood idle (test_pinned_workers; docs/benchmarks.md, "Host
 * backend"). On one CPU the waiting compute thread hands it straight to the copy. The CPU
 * queue (host optimizer steps) is left to the OS. A failed pin leaves the thread where it
 * is: only timing depends on it. */
static void pin_worker(const struct mpress_exec *x, int queue)
{
    const struct mpress_sched_queue *d = mpress_sched_queue(x->sched, queue);
    if (!x->n_cpus || d->kind == MPRESS_QUEUE_CPU || d->gpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(x->cpus[d->gpu % x->n_cpus], &set);
    (void)pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct mpress_exec *x = w->x;
    int n = 0;
    const int *tasks = mpress_sched_queue_tasks(x->sched, w->queue, &n);
    enum mpress_queue_kind kind = mpress_sched_queue(x->sched, w->queue)->kind;
    int copy_queue = kind != MPRESS_QUEUE_COMPUTE && kind != MPRESS_QUEUE_CPU;
    pin_worker(x, w->queue);
    for (int q = 0; q < n; q++) {
        int i = tasks[q], np = 0;
        const int *preds = mpress_sched_preds(x->sched, i, &np);
        pthread_mutex_lock(&x->lock);
        x->queue_head[w->queue] = q;
        w->awaited = i;
        exec_wake(x);
        while (!may_start(x, w)) {
            pthread_cond_wait(&w->cv, &x->lock);
            x->wakeups++;
        }
        w->awaited = -1;
        x->started[i] = 1;
        if (copy_queue)
            x->queue_moving[w->queue] = 1; /* until its bytes have moved (exec_copy) */
        exec_wake(x);
        int stop = x->failed;
        /* ready when the last predecessor ended (the trace's ready time; copies start on
         * their emulated links from then) */
        double ready = 0;
        for (int p = 0; p < np && !stop; p++)
            if (x->times[2 * preds[p] + 1] > ready)
                ready = x->times[2 * preds[p] + 1];
        pthread_mutex_unlock(&x->lock);
        if (stop)
            break;
        x->ready[i] = ready;
        x->queue_ready[w->queue] = x->t0 + ready;
        struct mpress_error e;
        mpress_error_clear(&e);
        x->times[2 * i] = exec_now_s() - x->t0;
        x->task_cpu[i] = sched_getcpu();
        exec_current_task = i;
        int rc = exec_run_task(x, i, &e);
        exec_current_task = -1;
        x->times[2 * i + 1] = exec_now_s() - x->t0;
        pthread_mutex_lock(&x->lock);
        x->queue_moving[w->queue] = 0;
        x->queue_link_done[w->queue] = 0;
        x->task_ends++;
        pthread_cond_broadcast(&x->mem_cv);
        if (rc) {
            if (!x->failed) {
                x->failed = rc;
                x->err = e;
                x->err.code = rc;
            }
        } else {
            x->done[i] = 1;
        }
        exec_wake(x);
        pthread_mutex_unlock(&x->lock);
        if (rc)
            break;
    }
    return NULL;
}

int mpress_exec_step(struct mpress_exec *x, double *loss, double *seconds,
                     struct mpress_error *err)
{
    int rc = 0;
    for (int m = 0; m < x->M && !rc; m++)
        rc = mpress_host_batch_fill(&x->model.config, x->opt.data, x->opt.n_data, x->opt.seed,
                                    (uint32_t)x->steps, (uint32_t)m, &x->batch[m], err);
    if (rc)
        return rc;
    for (int i = 0; i < x->hp.n && !rc; i++) {
        int g = exec_gpu_of_stage(x, x->stage_of[x->hp.p[i].op]);
        rc = x->be->zero(x->be->ctx, g, x->dp[i].g,
                         x->dp[i].n * (uint64_t)mpress_dtype_size(x->dp[i].dtype), err);
    }
    if (rc)
        return rc;
    int nt = mpress_sched_task_count(x->sched), nq = mpress_sched_queue_count(x->sched);
    memset(x->done, 0, (size_t)nt);
    memset(x->started, 0, (size_t)nt);
    memset(x->queue_head, 0, (size_t)nq * sizeof(int));
    memset(x->queue_moving, 0, (size_t)nq);
    memset(x->queue_link_done, 0, (size_t)nq * sizeof(double));
    memset(x->mem_wait_last_s, 0, sizeof(x->mem_wait_last_s));
    x->task_ends = 0;
    find_cpus(x);
    memset(x->grad_unpacked, 0, (size_t)x->M * (size_t)x->S);
    for (int i = 0; i < 2 * nt; i++)
        x->times[i] = -1;
    for (int i = 0; i < nt; i++)
        x->ready[i] = -1;
    x->failed = 0;
    mpress_error_clear(&x->err);
    struct worker *w = calloc((size_t)nq + 1, sizeof(*w));
    if (!w)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    int n_run = 0;
    for (int q = 0; q < nq; q++) {
        int n = 0;
        mpress_sched_queue_tasks(x->sched, q, &n);
        if (!n)
            continue;
        w[n_run].x = x;
        w[n_run].queue = q;
        w[n_run].awaited = -1;
        pthread_cond_init(&w[n_run].cv, NULL);
        n_run++;
    }
    x->workers = w;
    x->n_workers = 0;
    x->wakeups = 0;
    x->t0 = exec_now_s();
    int started = 0;
    for (int k = 0; k < n_run; k++) {
        /* counted before the thread runs, so that exec_wake sees it as soon as it can wait */
        pthread_mutex_lock(&x->lock);
        x->n_workers = k + 1;
        pthread_mutex_unlock(&x->lock);
        if (pthread_create(&w[k].thread, NULL, worker_main, &w[k]) != 0) {
            pthread_mutex_lock(&x->lock);
            x->n_workers = k;
            if (!x->failed) {
                x->failed = MPRESS_ESYSTEM;
                mpress_error_set(&x->err, MPRESS_ESYSTEM, "cannot start a queue thread");
            }
            exec_wake(x);
            pthread_mutex_unlock(&x->lock);
            break;
        }
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(w[i].thread, NULL);
    x->workers = NULL;
    x->n_workers = 0;
    for (int k = 0; k < n_run; k++)
        pthread_cond_destroy(&w[k].cv);
    free(w);
    if (x->be->synchronize)
        for (int g = 0; g < x->plan->topology.n_gpus && !x->failed; g++)
            if ((rc = x->be->synchronize(x->be->ctx, g, &x->err)))
                x->failed = rc;
    double dt = exec_now_s() - x->t0;
    if (x->failed) {
        if (err)
            *err = x->err;
        exec_free_step_state(x);
        return x->failed;
    }
    for (int i = 0; i < nt; i++)
        if (!x->done[i]) {
            exec_free_step_state(x);
            return mpress_error_set(err, MPRESS_ESYSTEM, "internal error: task %d did not run",
                                    i);
        }
    /* Every tensor of the step has been freed by the task the schedule gives it: anything
     * left (but model states and reserves) is a bug in the data flow, not memory to carry. */
    for (int d = -1; x->be->usage && d < x->plan->topology.n_gpus; d++) {
        uint64_t cur[MPRESS_MEM_KINDS];
        x->be->usage(x->be->ctx, d, cur);
        for (int kd = MPRESS_MEM_ACTIVATIONS; kd <= MPRESS_MEM_BUFFERS; kd++)
            if (cur[kd]) {
                exec_free_step_state(x);
                return mpress_error_set(err, MPRESS_ESYSTEM, "internal error: %llu bytes of "
                                        "%s left on %s %d after the step",
                                        (unsigned long long)cur[kd], mpress_mem_kind_name(kd),
                                        d < 0 ? "host" : "gpu", d);
            }
    }
    exec_free_step_state(x);     /* resets the per-step bookkeeping; frees nothing now */
    double sum = 0;
    for (int m = 0; m < x->M; m++)
        sum += x->loss[m];
    x->steps++;
    if (loss)
        *loss = sum / x->M;
    if (seconds)
        *seconds = dt;
    return 0;
}

int mpress_exec_steps_done(const struct mpress_exec *x)
{
    return x->steps;
}

const struct mpress_sched *mpress_exec_sched(const struct mpress_exec *x)
{
    return x->sched;
}

const double *mpress_exec_task_times(const struct mpress_exec *x)
{
    return x->times;
}

const double *mpress_exec_task_ready_times(const struct mpress_exec *x)
{
    return x->ready;
}

uint64_t mpress_exec_pinned_bytes(const struct mpress_exec *x, int gpu)
{
    return gpu >= 0 && gpu < MPRESS_MAX_GPUS ? x->pinned_bytes[gpu] : 0;
}

void mpress_exec_memory_waits(const struct mpress_exec *x, int gpu, long *waits,
                              double *seconds, double *last_s)
{
    int ok = gpu >= 0 && gpu < MPRESS_MAX_GPUS;
    if (waits)
        *waits = ok ? x->mem_waits[gpu] : 0;
    if (seconds)
        *seconds = ok ? x->mem_wait_s[gpu] : 0;
    if (last_s)
        *last_s = ok ? x->mem_wait_last_s[gpu] : 0;
}
