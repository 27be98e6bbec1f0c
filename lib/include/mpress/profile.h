/* Profiles: the model, the device it was measured or modelled on, and its ops in execution
 * order with times, model-state bytes and the tensors each saves for backward. */
#ifndef MPRESS_PROFILE_H
#define MPRESS_PROFILE_H

#include <stdint.h>
#include <jansson.h>
#include "mpress/error.h"
#include "mpress/json.h"
#include "mpress/export.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mpress_model_config {
    char name[64];          /* "gpt3-6.7b", or the imported file's stem */
    char family[16];        /* "gpt" | "bert" | "import" */
    int layers, hidden, heads, ffn, seq, vocab, micro_batch;
    char dtype[8];          /* "fp16" | "bf16" | "fp32" */
    char optimizer[16];     /* "adam" | "sgd" */
    int flash_attention;    /* 1: attention saves no s^2 tensors */
};

struct mpress_saved_tensor {
    char id[96];            /* unique within the profile, e.g. "layer3.attn_core.softmax_out" */
    char name[48];          /* role within its op, e.g. "softmax_out"; op kind + name = class */
    uint64_t bytes;
    double recompute_s;     /* seconds to regenerate it: forward time of what regenerates it */
    int recompute_op;       /* index of the op whose forward regenerates it (usually its own) */
};

struct mpress_op {
    char name[96];          /* unique, e.g. "layer3.qkv" */
    char kind[48];          /* "layernorm", "qkv", "attn_core", ..., or imported description */
    int layer;              /* transformer layer, -1 outside the layer stack */
    double fwd_s, bwd_s;    /* per micro-batch */
    double fwd_flops;       /* per micro-batch */
    uint64_t params;        /* parameter count */
    uint64_t param_bytes, grad_bytes, optim_bytes; /* model states */
    uint64_t workspace_bytes;  /* transient memory while it runs */
    uint64_t output_bytes;     /* what a stage cut right after it sends to the next stage */
    int n_tensors;
    struct mpress_saved_tensor *tensors; /* saved for backward */
};

struct mpress_profile {
    char source[16];        /* "analytic" | "cupti" | "host" | "import" */
    char device[64];        /* GPU model the times describe */
    struct mpress_model_config model;
    int n_ops;
    struct mpress_op *ops;
};

MPRESS_API
void mpress_profile_init(struct mpress_profile *p);
MPRESS_API
void mpress_profile_finish(struct mpress_profile *p);   /* frees; accepts zeroed structs */
MPRESS_API
int mpress_profile_copy(struct mpress_profile *dst, const struct mpress_profile *src,
                        struct mpress_error *err);

/* Supported sizes (docs/formats.md, "Limits"), refused at load beyond: ops of a profile and
 * saved tensors of all its ops together. Every count the planner and the simulator form from
 * them (times MPRESS_MAX_GPUS stages, times the tasks one op makes) stays within int. */
#define MPRESS_MAX_OPS (1 << 18)
#define MPRESS_MAX_TENSORS (1 << 20)

/* mpress-profile v1 */
#define MPRESS_PROFILE_FORMAT "mpress-profile"
#define MPRESS_PROFILE_VERSION 1
MPRESS_API
int mpress_profile_load(const char *file, struct mpress_profile *out, struct mpress_error *err);
MPRESS_API
int mpress_profile_from_json(const struct mpress_json_doc *doc, const json_t *obj,
                             const char *obj_path, struct mpress_profile *out,
                             struct mpress_error *err);
MPRESS_API
json_t *mpress_profile_to_json(const struct mpress_profile *p);
MPRESS_API
int mpress_profile_save(const char *file, const struct mpress_profile *p,
                        struct mpress_error *err);

/* Sums over all ops. */
MPRESS_API
uint64_t mpress_profile_saved_bytes(const struct mpress_profile *p);
MPRESS_API
uint64_t mpress_profile_params(const struct mpress_profile *p);

#ifdef __cplusplus
}
#endif
#endif
