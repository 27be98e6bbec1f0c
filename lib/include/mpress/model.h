/* The model zoo: GPT and BERT written as data (ops in execution order, the tensors each reads,
 * writes, owns and saves for backward, with shapes, dtypes and FLOPs), the analytic profile
 * derived from that data on a named GPU, and the import of PipeDream profiler graphs.
 *
 * The same struct mpress_model is what a runtime walks to execute the model, so a profile's ops
 * and saved tensors are exactly the runtime's. Formulas and constants: docs/cost-model.md,
 * section "Analytic profiles"; configs and the model-config file: docs/models.md. */
#ifndef MPRESS_MODEL_H
#define MPRESS_MODEL_H

#include <stdint.h>
#include "mpress/error.h"
#include "mpress/profile.h"
#include "mpress/topology.h"
#include "mpress/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The planner's built-in default: GPT-3 6.7B, micro-batch 1. */
#define MPRESS_DEFAULT_MODEL "gpt3-6.7b"

/* Roofline efficiencies of the analytic time model (fractions of the datasheet peak); their
 * reasoning is in docs/cost-model.md. */
#define MPRESS_ANALYTIC_GEMM_EFFICIENCY 0.70
#define MPRESS_ANALYTIC_MEMORY_EFFICIENCY 0.80
/* Backward time / forward time: a GEMM's backward is two GEMMs of its size (input and weight
 * gradients); FlashAttention's backward also recomputes the scores (Dao et al. 2022). */
#define MPRESS_ANALYTIC_BWD_FACTOR 2.0
#define MPRESS_ANALYTIC_FLASH_BWD_FACTOR 2.5

enum mpress_dtype {
    MPRESS_DTYPE_FP16 = 0,
    MPRESS_DTYPE_BF16 = 1,
    MPRESS_DTYPE_FP32 = 2,
    MPRESS_DTYPE_U8 = 3,   /* dropout masks */
    MPRESS_DTYPE_I64 = 4,  /* token ids, labels */
};
MPRESS_API
const char *mpress_dtype_name(enum mpress_dtype t);          /* "fp16", ... */
MPRESS_API
int mpress_dtype_size(enum mpress_dtype t);                  /* bytes per element */
MPRESS_API
int mpress_dtype_parse(const char *s, enum mpress_dtype *out); /* 0 ok, -1 unknown */

#define MPRESS_MODEL_MAX_DIMS 4

/* A tensor of the model definition. For an op's inputs, producer/producer_output name the op
 * output it is (producer -1: a model input from the data loader). For saved tensors, producer is
 * the op whose forward regenerates it (what recomputing it costs). For weights, producer is -1
 * for the op's own parameters, or the index of the op that owns a tied weight. A model input
 * (producer -1) names its input in producer_output: 0 tokens, then token types (BERT), labels,
 * NSP labels (BERT). */
struct mpress_model_tensor {
    char role[32];          /* "input", "q", "softmax_out", "weight", ... */
    enum mpress_dtype dtype;
    int ndim;
    int64_t shape[MPRESS_MODEL_MAX_DIMS];
    uint64_t bytes;         /* product of shape times the dtype's size */
    int producer;
    int producer_output;
};

/* One kernel of an op, timed by a roofline: GEMMs against the dtype's peak FLOP/s, memory-bound
 * kernels against HBM bandwidth. Both take max(FLOPs / peak, bytes / bandwidth). */
enum mpress_kernel_kind {
    MPRESS_KERNEL_GEMM = 0,
    MPRESS_KERNEL_MEMORY = 1,
};
struct mpress_model_kernel {
    char name[24];
    enum mpress_kernel_kind kind;
    double flops;           /* matrix-multiply FLOPs (2 per multiply-add); 0 for memory kernels */
    double bytes;           /* bytes read and written in HBM */
};

#define MPRESS_MODEL_MAX_IO 4
#define MPRESS_MODEL_MAX_WEIGHTS 12
#define MPRESS_MODEL_MAX_SAVED 8
#define MPRESS_MODEL_MAX_KERNELS 6

/* What an op of the model does; mpress_op_kind_name gives the string profiles carry in
 * ops[i].kind (one table). Code compares the enum, files keep the string. */
enum mpress_op_kind {
    MPRESS_OP_EMBEDDING = 0,
    MPRESS_OP_LN1 = 1,
    MPRESS_OP_QKV = 2,
    MPRESS_OP_ATTN_CORE = 3,
    MPRESS_OP_ATTN_PROJ = 4,
    MPRESS_OP_ATTN_RESIDUAL = 5,
    MPRESS_OP_LN2 = 6,
    MPRESS_OP_MLP_UP = 7,
    MPRESS_OP_GELU = 8,
    MPRESS_OP_MLP_DOWN = 9,
    MPRESS_OP_MLP_RESIDUAL = 10,
    MPRESS_OP_FINAL_LAYERNORM = 11,
    MPRESS_OP_HEAD = 12,
    MPRESS_OP_LOSS = 13,
};
#define MPRESS_N_OP_KINDS 14
MPRESS_API
const char *mpress_op_kind_name(enum mpress_op_kind k);           /* "ln1", ...; "unknown" */
MPRESS_API
int mpress_op_kind_parse(const char *s, enum mpress_op_kind *out); /* 0 ok, -1 unknown */

struct mpress_model_op {
    char name[96];          /* "embedding", "layer3.qkv", "final_layernorm", "head", "loss" */
    enum mpress_op_kind op_kind;
    char kind[32];          /* mpress_op_kind_name(op_kind): "embedding", "ln1", ... */
    int layer;              /* transformer layer, -1 outside the stack */
    int n_inputs, n_outputs, n_weights, n_saved, n_kernels;
    struct mpress_model_tensor inputs[MPRESS_MODEL_MAX_IO];
    struct mpress_model_tensor outputs[MPRESS_MODEL_MAX_IO];
    struct mpress_model_tensor weights[MPRESS_MODEL_MAX_WEIGHTS];
    struct mpress_model_tensor saved[MPRESS_MODEL_MAX_SAVED]; /* kept for backward */
    struct mpress_model_kernel kernels[MPRESS_MODEL_MAX_KERNELS];
    double fwd_flops;       /* sum of the kernels' FLOPs */
    double bwd_factor;      /* backward FLOPs and time / forward */
    uint64_t params;        /* own parameters (tied weights are counted at their owner) */
    uint64_t workspace_bytes; /* transient: inputs + outputs (and their gradients) + scratch */
    uint64_t output_bytes;  /* activations produced at or before this op and read after it */
};

struct mpress_model {
    struct mpress_model_config config;
    int n_ops;
    struct mpress_model_op *ops;
};

/* Named configs. find: 0 and *out filled, -1 when unknown. names: NULL-terminated. */
MPRESS_API
int mpress_model_find(const char *name, struct mpress_model_config *out);
MPRESS_API
const char *const *mpress_model_names(void);
/* Published parameter count of a named config (the number in its name / paper), 0 if none. */
MPRESS_API
double mpress_model_published_params(const char *name);

/* The supported range of each integer field of a config (docs/models.md), the one statement
 * the config check, the model-config loader and the CLI options use. */
#define MPRESS_MODEL_MAX_LAYERS 10000
#define MPRESS_MODEL_MAX_HIDDEN (1 << 17)
#define MPRESS_MODEL_MAX_HEADS (1 << 17)
#define MPRESS_MODEL_MAX_FFN (1 << 20)
#define MPRESS_MODEL_MAX_SEQ (1 << 20)
#define MPRESS_MODEL_MAX_VOCAB (1 << 24)
#define MPRESS_MODEL_MAX_MICRO_BATCH (1 << 16)
/* [*lo, *hi] of field ("layers", "hidden", "heads", "ffn", "seq", "vocab", "micro_batch"):
 * 0, or -1 for another name. */
MPRESS_API
int mpress_model_config_range(const char *field, int *lo, int *hi);

/* Checks a config (ranges, hidden divisible by heads, sizes that fit 64-bit byte counts).
 * Failures are MPRESS_EUSAGE with the offending field in err->path. */
MPRESS_API
int mpress_model_config_check(const struct mpress_model_config *m, struct mpress_error *err);

/* Reads an mpress-model v1 file (docs/models.md). */
#define MPRESS_MODEL_FORMAT "mpress-model"
#define MPRESS_MODEL_VERSION 1
MPRESS_API
int mpress_model_config_load(const char *file, struct mpress_model_config *out,
                             struct mpress_error *err);

/* Builds the op list of a config. finish accepts a zeroed struct. */
MPRESS_API
int mpress_model_build(const struct mpress_model_config *m, struct mpress_model *out,
                       struct mpress_error *err);
MPRESS_API
void mpress_model_finish(struct mpress_model *model);
/* The gradients an op's backward holds together: one per activation input and per output,
 * each the size of its tensor (the part of workspace_bytes that is not scratch). */
MPRESS_API
uint64_t mpress_model_op_gradient_bytes(const struct mpress_model_op *op);

/* Facts of a built model, per micro-batch. */
MPRESS_API
uint64_t mpress_model_params(const struct mpress_model *model);
MPRESS_API
double mpress_model_flops(const struct mpress_model *model);  /* forward + backward */
MPRESS_API
uint64_t mpress_model_layer_saved_bytes(const struct mpress_model *model, int layer);
/* Model-state bytes per parameter for the config's dtype and optimizer (ZeRO, Rajbhandari et
 * al. 2020): weights, gradients, optimizer states. */
MPRESS_API
void mpress_model_state_bytes(const struct mpress_model_config *m, int *weight, int *grad,
                              int *optim);

/* What one optimizer step moves, for parameters whose model states are param_bytes (weights in
 * the training dtype), grad_bytes and optim_bytes (docs/cost-model.md, "Optimizer step"). The
 * elementwise step (Adam, SGD) reads the gradients and the optimizer states and writes the
 * states and the weights; the weights are also read when they are the master copy (fp32
 * training), while in mixed precision the fp32 master is one of the optimizer states and the
 * 16-bit weights are only written. On the host (states in host memory, step on the CPU) only
 * the gradients cross PCIe down and the updated weights up: master weights and moments stay on
 * the host. Planner and simulator both take the step's traffic from here. */
struct mpress_optimizer_traffic {
    double memory_bytes;    /* read + written where the step runs (HBM, or host memory) */
    double pcie_down_bytes; /* host step: gradients, GPU -> host */
    double pcie_up_bytes;   /* host step: updated weights, host -> GPU */
};
MPRESS_API
void mpress_optimizer_step_traffic(const struct mpress_model_config *m, double param_bytes,
                                   double grad_bytes, double optim_bytes,
                                   struct mpress_optimizer_traffic *out);

/* Roofline time of one kernel on gpu for the activation dtype. */
MPRESS_API
double mpress_kernel_time(const struct mpress_model_kernel *k, const struct mpress_gpu_spec *gpu,
                          enum mpress_dtype dtype);

/* The profile of a built model with the given times (seconds per micro-batch, fwd_s[i] and
 * bwd_s[i] for op i): ops, model-state bytes, workspace, cut and saved-tensor bytes are the
 * model's, a saved tensor's recompute time is its producer's forward time. Every profile made
 * from the zoo (analytic, host) comes through here, so they differ in their times only.
 * source and device become the profile's fields. out must be initialized; it is replaced. */
MPRESS_API
int mpress_profile_from_model(const struct mpress_model *model, const double *fwd_s,
                              const double *bwd_s, const char *source, const char *device,
                              struct mpress_profile *out, struct mpress_error *err);

/* The analytic profile of config m on gpu (source "analytic"). out must be initialized
 * (mpress_profile_init); it is replaced. */
MPRESS_API
int mpress_profile_analytic(const struct mpress_model_config *m, const struct mpress_gpu_spec *gpu,
                            struct mpress_profile *out, struct mpress_error *err);

/* The host profile: each op's forward and backward timed on this CPU with the host backend's
 * math (fp32 arithmetic, OpenBLAS GEMMs; docs/runtime.md, "Host profiles"), source "host",
 * device MPRESS_HOST_DEVICE. Tensor bytes are the model's, as in the analytic profile. The
 * parameters and one micro-batch's activations live in RAM while it runs. */
#define MPRESS_HOST_DEVICE MPRESS_EMULATED_GPU
struct mpress_host_profile_options {
    int warmup;             /* whole passes left out of the timing; default 2 */
    int repeat;             /* timed passes, each op's median is recorded; default 9 */
    int threads;            /* OpenBLAS threads per GEMM; default 1 */
    uint64_t seed;          /* weights, dropout and the synthetic batch; default 1 */
    /* Optional: called after each op's forward and backward run, done counting 1 .. total =
     * 2 P n_ops for P = warmup + repeat passes: P forward passes in op order, then P backward
     * passes in reverse order. */
    void (*progress)(void *ctx, int done, int total, const char *op_name);
    void *progress_ctx;
};
MPRESS_API
void mpress_host_profile_options_init(struct mpress_host_profile_options *o);
/* out must be initialized; it is replaced. MPRESS_EUSAGE: bad options or config; MPRESS_ESYSTEM:
 * out of memory. */
MPRESS_API
int mpress_profile_host(const struct mpress_model_config *m,
                        const struct mpress_host_profile_options *o, struct mpress_profile *out,
                        struct mpress_error *err);

/* PipeDream profiler graphs (format: tests/data/README.md). */
struct mpress_pipedream_node {
    char id[32];            /* "node4" */
    char desc[256];         /* the module's repr, whitespace runs collapsed (may be cut) */
    char kind[48];          /* desc, or when longer a prefix + '~' + 8 hex digits of its hash */
    double fwd_ms, bwd_ms;
    double activation_bytes; /* summed when the file gives a list */
    double parameter_bytes;
    int line;               /* line of the node in the file */
};
struct mpress_pipedream_edge {
    int src, dst;           /* node indices */
    int line;
};
struct mpress_pipedream_graph {
    int n_nodes, n_edges;
    struct mpress_pipedream_node *nodes;   /* in file order */
    struct mpress_pipedream_edge *edges;   /* in file order */
    int *order;             /* node indices in the deterministic topological order */
};
/* Parses the file and orders the nodes (Kahn's algorithm, smallest node number first). */
MPRESS_API
int mpress_pipedream_load(const char *file, struct mpress_pipedream_graph *out,
                          struct mpress_error *err);
MPRESS_API
void mpress_pipedream_finish(struct mpress_pipedream_graph *g);

/* The graph as a profile: one op per node in topological order (name = node id, kind = the
 * module description), times ms -> s, parameters as fp32, one saved tensor per op of its
 * activation size, output_bytes = all activations crossing a cut after the op. */
MPRESS_API
int mpress_profile_import_pipedream(const char *file, struct mpress_profile *out,
                                    struct mpress_error *err);
/* The same with the nodes ordered for a straight pipeline of `stages` stages (0: as above):
 * the best partition PipeDream's optimizer finds along the graph's antichains becomes
 * contiguous ranges of the op order (lib/model/pipedream_order.c); *bottleneck_s (may be NULL)
 * gets its slowest stage's forward + backward time. MPRESS_EUSAGE for stages outside
 * 0 .. nodes, MPRESS_EINPUT for a graph past the documented limits. */
MPRESS_API
int mpress_profile_import_pipedream_stages(const char *file, int stages,
                                           struct mpress_profile *out, double *bottleneck_s,
                                           struct mpress_error *err);

#ifdef __cplusplus
}
#endif
#endif
