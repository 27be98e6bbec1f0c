/* The runtime: executes a plan for real. The executor walks the plan's task graph
 * (mpress/sched.h) and deploys its tasks asynchronously to per-device queues (one worker per
 * queue: each GPU's compute stream and copy engines, the CPU queue of host optimizer steps),
 * starting a task when its queue reaches it and its dependencies have ended. It allocates the
 * real tensors of each task (op outputs, saved tensors as the plan's action says, boundary
 * buffers, gradients, optimizer states) and calls a backend for every allocation, copy and
 * kernel. A backend is one table of functions (struct mpress_backend); the executor knows
 * nothing else of it. The host backend (mpress_host_backend_create) emulates each GPU of the
 * plan with a memory arena capped at that GPU's memory. How it works: docs/runtime.md,
 * sections "The executor" and "The host backend". */
#ifndef MPRESS_RUNTIME_H
#define MPRESS_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include "mpress/error.h"
#include "mpress/export.h"
#include "mpress/plan.h"
#include "mpress/sched.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A device of the backend: a GPU index of the plan's topology, or MPRESS_RT_HOST. */
#define MPRESS_RT_HOST (-1)

/* One parameter tensor as the optimizer sees it: working weights w and gradients g (the
 * weight's dtype), fp32 master copy for 16-bit weights, momentum m and variance v (AdamW; SGD
 * uses m only). Pointers are device memory of the backend; NULL where absent. */
struct mpress_rt_param {
    int dtype;              /* enum mpress_dtype of w and g */
    uint64_t n;             /* elements */
    int decay;              /* weight decay applies */
    void *w, *g;
    float *master, *m, *v;
};

/* Optimizer hyper-parameters (AdamW, or SGD with momentum when sgd). */
struct mpress_rt_optim {
    int sgd;
    float lr, beta1, beta2, eps, weight_decay, momentum;
};

/* The buffers of one op call, indexed as the op's tensor lists of struct mpress_model_op (see
 * lib/runtime/host_ops.h for which a forward and a backward read and write). Activations are
 * device memory; the data-loader inputs (token ids, labels) are host memory, which a device
 * backend uploads itself. */
struct mpress_rt_io {
    const void *in[4];
    void *out[4];
    const void *w[12];
    void *saved[8];
    const void *dout[4];
    void *din[4];
    void *dw[12];
    /* Optional: when memory the backend takes for the op call itself (its scratch) does not
     * fit on dev, it calls on_oom(on_oom_arg, dev, err) with err filled; 1: memory may have
     * been freed meanwhile, try again; 0: fail with err (the callee may add to its text). */
    int (*on_oom)(void *arg, int dev, struct mpress_error *err);
    void *on_oom_arg;
};

/* What a random stream is keyed by (docs/runtime.md): dropout of op `op` in micro-batch
 * `micro_batch` of optimizer step `step`. */
struct mpress_rt_key {
    uint64_t seed;
    uint32_t step, micro_batch, op;
};

/* The backend table. Every function returns 0 or an MPRESS_E* code with err filled, unless
 * it returns void. ctx is the backend's own state. Entries marked optional may be NULL. */
struct mpress_backend {
    const char *name;                       /* "host" */
    void *ctx;
    /* Device memory of `bytes` on dev, counted as `kind` (enum mpress_mem_kind). `what` names
     * the tensor for the message when it does not fit: MPRESS_EINFEASIBLE, naming the device,
     * the bytes asked and the bytes short. Contents are undefined. */
    int (*alloc)(void *ctx, int dev, int kind, uint64_t bytes, const char *what, void **out,
                 struct mpress_error *err);
    void (*free)(void *ctx, int dev, int kind, void *p, uint64_t bytes);
    /* Optional: the bytes at p on dev are counted as kind `to` from now on instead of `from`
     * (an op output that its consumer keeps as its saved tensor, as a framework keeps the
     * input it saves for backward). Without it the executor saves a copy of such a tensor. */
    void (*retag)(void *ctx, int dev, void *p, uint64_t bytes, int from, int to);
    /* Copy between devices (or within one): the copy queue of a task calls it. */
    int (*copy)(void *ctx, int dst_dev, void *dst, int src_dev, const void *src, uint64_t bytes,
                struct mpress_error *err);
    /* Optional: the same copy for a task whose dependencies were all done at ready_s (seconds
     * of CLOCK_MONOTONIC), returning as soon as the bytes are at dst. A backend that emulates
     * link time reserves the copy's links from ready_s or when they are free, whichever is
     * later, and sets *done_s to when that reservation ends (else to 0); the caller treats the
     * copy as done only then. So a late call (a thread woken late) does not delay the copies
     * queued behind it, and the caller knows when the data has moved. The executor calls it
     * instead of copy when it is there. */
    int (*copy_ready)(void *ctx, int dst_dev, void *dst, int src_dev, const void *src,
                      uint64_t bytes, double ready_s, double *done_s, struct mpress_error *err);
    /* Host memory of the caller to / from device memory. */
    int (*upload)(void *ctx, int dev, void *dst, const void *src, uint64_t bytes,
                  struct mpress_error *err);
    int (*download)(void *ctx, int dev, void *dst, const void *src, uint64_t bytes,
                    struct mpress_error *err);
    int (*zero)(void *ctx, int dev, void *p, uint64_t bytes, struct mpress_error *err);
    /* Op `op` of the model the backend was made for. */
    int (*forward)(void *ctx, int dev, int op, const struct mpress_rt_key *key,
                   const struct mpress_rt_io *io, struct mpress_error *err);
    int (*backward)(void *ctx, int dev, int op, const struct mpress_rt_key *key,
                    const struct mpress_rt_io *io, struct mpress_error *err);
    /* Saved tensor `saved` of op `op` from its producer's output 0 (q, k, v cut from qkv, or
     * a copy); -1 when the tensor is the op's own (re-run op's forward instead). */
    int (*derive)(void *ctx, int dev, int op, int saved, const void *producer_out, void *dst);
    /* dst += src over n elements of dtype (tied-weight gradient fold), rounded once. */
    int (*grad_add)(void *ctx, int dev, int dtype, void *dst, const void *src, uint64_t n,
                    struct mpress_error *err);
    /* One optimizer step (t = 1 for the first) of p on dev (MPRESS_RT_HOST for a host step). */
    int (*optimizer_step)(void *ctx, int dev, const struct mpress_rt_optim *o, int t,
                          const struct mpress_rt_param *p, struct mpress_error *err);
    /* Optional: waits for everything issued on dev (an asynchronous backend). */
    int (*synchronize)(void *ctx, int dev, struct mpress_error *err);
    /* Optional: the memory a device holds now and at its peak, per kind (MPRESS_MEM_KINDS
     * entries each): peak_total and at_peak (the breakdown when the total peaked), max_kind
     * (each kind's own high-water mark). */
    void (*memory)(void *ctx, int dev, uint64_t *capacity, uint64_t *peak_total,
                   uint64_t *at_peak, uint64_t *max_kind);
    /* Optional: the bytes dev holds now, per kind (MPRESS_MEM_KINDS entries). The executor
     * checks after each step that only model states and the reserve are left. */
    void (*usage)(void *ctx, int dev, uint64_t *current);
    /* Optional: forget the peaks (after warm-up). */
    void (*reset_peaks)(void *ctx);
    void (*destroy)(void *ctx);             /* optional */
};

/* ---- host backend ------------------------------------------------------------------------ */

struct mpress_host_backend_options {
    int throttle;           /* 1: copies take at least bytes / the topology's link bandwidth */
};
/* Emulated devices for every GPU of plan's topology (arena capped at memory_bytes, the
 * reserve charged up front as the plan charges it) and a host arena (host_memory_bytes).
 * The backend keeps pointers into plan (keep it alive). */
MPRESS_API
int mpress_host_backend_create(const struct mpress_plan *plan,
                               const struct mpress_host_backend_options *opt,
                               struct mpress_backend *out, struct mpress_error *err);

/* ---- executor ---------------------------------------------------------------------------- */

struct mpress_exec_options {
    uint64_t seed;          /* init, dropout, data; default 1 */
    const uint8_t *data;    /* corpus (borrowed) */
    size_t n_data;
    float lr;               /* 0: the default (1e-3) */
    int progress;           /* 1: a line per step on stderr */
    /* 1: an allocation on a GPU that does not fit, made by a task other than an eviction,
     * waits while evictions from that GPU are running or ready at their engine's head (they
     * will free memory) and is tried again after each task ends; it fails as before when
     * none is left. 0: it fails at once (the default; the message says how many bytes were
     * still leaving). The simulator's --wait-for-memory, as a runtime does it. */
    int wait_for_memory;
    /* 1 (mpress_exec_options_init's default): the threads of each emulated GPU (its compute
     * stream and its copy engines) run on one CPU of the process's affinity mask, GPU g on
     * the (g mod n)-th of its n CPUs, so that a compute thread that waits for its GPU's copy
     * hands its CPU straight to that copy (docs/runtime.md, "Queues"). 0: the OS places
     * every thread. Nothing is pinned where the mask has one CPU. */
    int pin_threads;
};
MPRESS_API
void mpress_exec_options_init(struct mpress_exec_options *o);

struct mpress_exec;

/* Checks that plan can be run (its profile is the model it names: op count, names, kinds,
 * saved-tensor and model-state bytes; a synchronous schedule) and sets up its parameters on
 * the backend. Errors: MPRESS_EINPUT (the plan's profile does not match its model: the text
 * says where), MPRESS_EUSAGE (what the runtime cannot run, e.g. the async schedule),
 * MPRESS_EINFEASIBLE (the model states do not fit), MPRESS_ESYSTEM. The executor borrows plan
 * and the backend. */
MPRESS_API
int mpress_exec_create(const struct mpress_plan *plan, struct mpress_backend *be,
                       const struct mpress_exec_options *opt, struct mpress_exec **out,
                       struct mpress_error *err);
MPRESS_API
void mpress_exec_destroy(struct mpress_exec *x);       /* accepts NULL */

/* Runs one optimizer step (the plan's micro-batches through its schedule). *loss receives the
 * mean micro-batch loss; *seconds the wall time. Errors as the backend's (MPRESS_EINFEASIBLE
 * when a tensor does not fit: device, stage, op, tensor and bytes short in the text). */
MPRESS_API
int mpress_exec_step(struct mpress_exec *x, double *loss, double *seconds,
                     struct mpress_error *err);
MPRESS_API
int mpress_exec_steps_done(const struct mpress_exec *x);
MPRESS_API
const struct mpress_sched *mpress_exec_sched(const struct mpress_exec *x);
/* Start and end of each task of the last step, seconds from the step's start (the trace). */
MPRESS_API
const double *mpress_exec_task_times(const struct mpress_exec *x);
/* When each task of the last step became ready (every predecessor ended), seconds from the
 * step's start; 0 for a task without predecessors. */
MPRESS_API
const double *mpress_exec_task_ready_times(const struct mpress_exec *x);
/* Bytes the run held beyond what the plan frees: stage inputs kept for a recompute whose
 * chain reaches into the previous stage (the plan frees them after their forward). */
MPRESS_API
uint64_t mpress_exec_pinned_bytes(const struct mpress_exec *x, int gpu);
/* wait_for_memory: how often allocations on gpu waited for an eviction to end, and for how
 * long, over every step run (*waits, *seconds) and in the last step (*last_s); any may be
 * NULL. */
MPRESS_API
void mpress_exec_memory_waits(const struct mpress_exec *x, int gpu, long *waits,
                              double *seconds, double *last_s);

/* Checkpoints: the model config name, the step count and every owned parameter with its
 * optimizer state, in model order (docs/formats.md, "Checkpoint"). save writes atomically. */
MPRESS_API
int mpress_exec_save(struct mpress_exec *x, const char *file, struct mpress_error *err);
MPRESS_API
int mpress_exec_load(struct mpress_exec *x, const char *file, struct mpress_error *err);

/* The training corpus: the bytes of file, or without one (NULL) the default corpus, the
 * markdown files of the docs/ folder of the source tree this library was built from
 * (mpress_runtime_corpus_dir), concatenated in a fixed order. *data is malloc'd. */
MPRESS_API
const char *mpress_runtime_corpus_dir(void);
MPRESS_API
int mpress_runtime_corpus_load(const char *file, uint8_t **data, size_t *n,
                               struct mpress_error *err);

#ifdef __cplusplus
}
#endif
#endif
