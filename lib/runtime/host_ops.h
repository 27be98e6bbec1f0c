/* The host backend's math: every op kind of struct mpress_model (lib/model/transformer.c) as a
 * forward and a backward over caller-owned buffers whose sizes are exactly the model's tensor
 * bytes, the counter-based RNG that keys dropout, parameter init, the byte-level data loader,
 * AdamW / SGD, and a plain sequential reference trainer (one device, no plan) that is the ground
 * truth a plan-following executor must match bit for bit. The math and its constants are in
 * docs/runtime.md.
 *
 * Storage: tensors of dtype fp32, u8 and i64 are stored as such; fp16 and bf16 tensors are
 * stored as bf16 (2 bytes, round to nearest even), and all arithmetic is fp32. So a tensor's
 * bytes are the plan's bytes for every config. */
#ifndef MPRESS_RUNTIME_HOST_OPS_H
#define MPRESS_RUNTIME_HOST_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "mpress/error.h"
#include "mpress/model.h"

/* ---- counter-based RNG ------------------------------------------------------------------- */

/* Philox 4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3",
 * SC'11): out = philox(ctr, key). */
void mpress_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* What a random stream is keyed by. Dropout of op `op` in micro-batch `micro_batch` of
 * optimizer step `step` uses {seed, step, micro_batch, op}; element i of the tensor takes word
 * i % 4 of philox(ctr = {i / 4, op, micro_batch, step}, key = {seed low, seed high}). So any
 * re-run of an op's forward with the same key (a recompute) draws the same numbers. */
struct mpress_rng_key {
    uint64_t seed;
    uint32_t step, micro_batch, op;
};
/* Streams that are not an op's dropout use reserved `op` values. */
#define MPRESS_RNG_OP_DATA 0xfffffff0u    /* data windows and NSP coin */
#define MPRESS_RNG_OP_MLM 0xfffffff1u     /* BERT MLM masking */
#define MPRESS_RNG_STEP_INIT 0xffffffffu  /* parameter init: micro_batch = weight index */
/* Elements per stream: the block counter is 32 bits. */
#define MPRESS_RNG_MAX_ELEMENTS (UINT64_C(1) << 34)

/* Words first .. first + n - 1 of the stream. */
void mpress_rng_fill(const struct mpress_rng_key *k, uint64_t first, uint64_t n, uint32_t *out);
uint32_t mpress_rng_word(const struct mpress_rng_key *k, uint64_t element);

/* ---- storage ----------------------------------------------------------------------------- */

/* The storage dtype of a model dtype (fp16 -> bf16, others unchanged). */
enum mpress_dtype mpress_host_storage(enum mpress_dtype t);
float mpress_bf16_to_f32(uint16_t v);
uint16_t mpress_f32_to_bf16(float f);                      /* round to nearest even */
/* n elements of a stored tensor of model dtype t to / from fp32 (t an fp16, bf16 or fp32). */
void mpress_host_load(float *dst, const void *src, enum mpress_dtype t, size_t n);
void mpress_host_store(void *dst, const float *src, enum mpress_dtype t, size_t n);

/* OpenBLAS threads per GEMM call; returns the previous count. Results are bit-identical
 * between runs only at one thread count (OpenBLAS splits some GEMMs differently with more
 * threads); an executor whose workers call GEMMs concurrently should use 1. */
int mpress_host_blas_threads(int n);

/* ---- ops --------------------------------------------------------------------------------- */

/* Hyper-parameters of the math (defaults: mpress_host_hparams_default, docs/runtime.md). */
struct mpress_host_hparams {
    float hidden_dropout;   /* embedding, attn_residual, mlp_residual; default 0.1 */
    float attn_dropout;     /* attention probabilities; default 0.1 */
    float ln_eps;           /* LayerNorm epsilon; default 1e-5 (configs name none) */
};
void mpress_host_hparams_default(struct mpress_host_hparams *hp);

/* The buffers of one op call, indexed as the op's tensor lists (struct mpress_model_op): each
 * holds exactly that tensor's bytes, in its storage dtype.
 * forward reads in[] and w[], writes out[] and saved[] (either may be NULL: not wanted, e.g.
 * a recompute that only needs saved tensors).
 * backward reads saved[], dout[] (the gradients of the outputs; for `loss` the fp32 gradient of
 * the loss), w[] and the data-loader inputs among in[] (token ids and labels: embedding, loss);
 * never an activation input (BERT's loss reads its saved nsp_softmax, not the NSP logits).
 * It accumulates into din[] (gradients of the activation inputs; NULL: not wanted; the caller
 * zeroes them before the first contribution) and into dw[] (weight gradients, the weight's
 * dtype; NULL: not wanted). Accumulating a stored value rounds once per call, so the order of
 * calls is part of the result: reverse op order within a micro-batch, micro-batches in order. */
/* Where an op call takes its scratch memory (what it needs beyond its tensors: fp32 staging of
 * 16-bit operands, attention's per-head scores, ...): alloc gives `bytes` (0 or an MPRESS_E*
 * code with err filled, e.g. MPRESS_EINFEASIBLE when a device arena cannot hold them), free
 * returns them; every allocation is freed before the call returns. The host backend counts
 * them in the device's arena as working memory. */
struct mpress_host_scratch {
    void *ctx;
    int (*alloc)(void *ctx, uint64_t bytes, void **out, struct mpress_error *err);
    void (*free)(void *ctx, void *p, uint64_t bytes);
};

struct mpress_host_io {
    const void *in[MPRESS_MODEL_MAX_IO];
    void *out[MPRESS_MODEL_MAX_IO];
    const void *w[MPRESS_MODEL_MAX_WEIGHTS];
    void *saved[MPRESS_MODEL_MAX_SAVED];
    const void *dout[MPRESS_MODEL_MAX_IO];
    void *din[MPRESS_MODEL_MAX_IO];
    void *dw[MPRESS_MODEL_MAX_WEIGHTS];
    const struct mpress_host_scratch *scratch;  /* NULL: malloc */
};

/* Op `op` of model m; key->op should be `op` (the trainer's convention), and a backward (or a
 * recompute) takes the key of its forward: flash-style attention redraws its mask from it. Errors: MPRESS_EUSAGE
 * for a missing buffer or an op kind this backend does not know, MPRESS_EINPUT for a token or
 * label out of the vocabulary, MPRESS_ESYSTEM when scratch memory cannot be had, or the scratch
 * allocator's own error (io->scratch). Scratch memory is taken from io->scratch (or malloc) and
 * freed before returning; docs/runtime.md, "Kernels", lists what each op takes. */
int mpress_host_forward(const struct mpress_model *m, int op, const struct mpress_host_hparams *hp,
                        const struct mpress_rng_key *key, const struct mpress_host_io *io,
                        struct mpress_error *err);
int mpress_host_backward(const struct mpress_model *m, int op,
                         const struct mpress_host_hparams *hp, const struct mpress_rng_key *key,
                         const struct mpress_host_io *io, struct mpress_error *err);

/* A saved tensor whose producer is another op (an op's input kept for backward, or attention's
 * q, k, v cut from the qkv output) is a function of that producer's output 0: this writes saved
 * tensor `saved` of op `op` from it, bit-identical to what op's forward saved. Returns -1 when
 * the tensor's producer is the op itself (recompute it by re-running op's forward). */
int mpress_host_saved_derive(const struct mpress_model *m, int op, int saved,
                             const void *producer_out, void *dst);

/* ---- parameters, init and optimizer ------------------------------------------------------ */

/* One weight of one op. Own weights have working weights `w` (the weight's dtype), gradients
 * `g` (same dtype) and optimizer state: for 16-bit configs an fp32 master copy plus AdamW's m
 * and v (12 bytes per parameter), for fp32 configs m and v with `w` itself the master (8);
 * SGD keeps one momentum instead of m and v. A tied weight (BERT/GPT head's word embedding) has
 * its own gradient `g` and no optimizer state; in the reference trainer `w` aliases the owner's
 * weights; mpress_host_tied_reduce adds its gradient into the owner's before the step. */
struct mpress_host_param {
    int op, index;          /* op and weight index in the model */
    int owner;              /* index in mpress_host_params of the owning param, -1 own */
    enum mpress_dtype dtype;
    uint64_t n;             /* elements */
    int decay;              /* weight decay applies (matrices and embeddings, not biases/LN) */
    void *w, *g;
    float *master, *m, *v;  /* NULL where absent */
};
struct mpress_host_params {
    int n;
    struct mpress_host_param *p;
    int *first;             /* first[op]: index of op's weight 0 in p; first[n_ops] = n */
    int sgd;                /* optimizer is SGD with momentum (m only) */
};

/* Allocates all parameters and initialises them from seed (docs/runtime.md, "Init"). */
int mpress_host_params_create(const struct mpress_model *m, uint64_t seed,
                              struct mpress_host_params *out, struct mpress_error *err);
void mpress_host_params_finish(struct mpress_host_params *ps);  /* accepts zeroed */
void mpress_host_params_zero_grad(struct mpress_host_params *ps);
/* Owner gradient += tied copy's gradient (each tied weight in order), stored once. */
void mpress_host_tied_reduce(struct mpress_host_params *ps);

/* AdamW (Loshchilov & Hutter 2019) as torch.optim.AdamW computes it; SGD with momentum. */
struct mpress_host_optim {
    float lr;               /* 1e-3 */
    float beta1, beta2;     /* 0.9, 0.999 */
    float eps;              /* 1e-8 */
    float weight_decay;     /* 0.01, decoupled, only where param.decay */
    float momentum;         /* SGD only: 0.9 */
};
void mpress_host_optim_default(struct mpress_host_optim *o);
/* One step (t = 1 for the first) on param p: reads p->g, updates state and working weights.
 * Tied copies are skipped (their owner carries the update). */
void mpress_host_optim_step(const struct mpress_host_optim *o, int sgd, int t,
                            struct mpress_host_param *p);

/* ---- data -------------------------------------------------------------------------------- */

/* The data-loader inputs of one micro-batch, each [b, s] (nsp_labels [b]) int64. GPT uses
 * tokens and labels; BERT all four. */
struct mpress_host_batch {
    int64_t *tokens, *token_types, *labels, *nsp_labels;
};
int mpress_host_batch_init(const struct mpress_model_config *c, struct mpress_host_batch *b,
                           struct mpress_error *err);
void mpress_host_batch_finish(struct mpress_host_batch *b);
/* Fills b from the bytes of a corpus for (seed, step, micro_batch): docs/runtime.md, "Data".
 * Fails (MPRESS_EINPUT) when the corpus is shorter than seq + 1 bytes or the vocabulary cannot
 * hold bytes (GPT: vocab >= 256; BERT: vocab >= 257, the mask token is vocab - 1). */
int mpress_host_batch_fill(const struct mpress_model_config *c, const uint8_t *data, size_t n,
                           uint64_t seed, uint32_t step, uint32_t micro_batch,
                           struct mpress_host_batch *b, struct mpress_error *err);
/* The buffer of model input k (producer -1, producer_output k) of a batch. */
const int64_t *mpress_host_batch_input(const struct mpress_model_config *c,
                                       const struct mpress_host_batch *b, int k);

/* ---- the sequential reference trainer ---------------------------------------------------- */

struct mpress_host_trainer_options {
    uint64_t seed;          /* init, dropout and data; default 1 */
    struct mpress_host_hparams hp;
    struct mpress_host_optim optim;
};
void mpress_host_trainer_options_default(struct mpress_host_trainer_options *o);

/* One device, no plan: every op's outputs, saved tensors and output gradients live in their
 * own buffers for the whole step. */
struct mpress_host_trainer {
    struct mpress_model model;
    struct mpress_host_trainer_options opt;
    struct mpress_host_params params;
    const uint8_t *data;    /* borrowed corpus */
    size_t n_data;
    uint32_t step;          /* optimizer steps taken */
    struct mpress_host_batch batch;
    /* per op: buffers of outputs, saved tensors and output gradients, [op][i] */
    void *(*out)[MPRESS_MODEL_MAX_IO];
    void *(*saved)[MPRESS_MODEL_MAX_SAVED];
    void *(*dout)[MPRESS_MODEL_MAX_IO];
    float loss_grad;        /* fp32 gradient fed to the loss op: 1 / micro-batches */
};

int mpress_host_trainer_create(const struct mpress_model_config *c,
                               const struct mpress_host_trainer_options *o, const uint8_t *data,
                               size_t n_data, struct mpress_host_trainer **out,
                               struct mpress_error *err);
void mpress_host_trainer_destroy(struct mpress_host_trainer *t);   /* accepts NULL */
/* The buffers of op i's call, wired as the trainer runs it. */
void mpress_host_trainer_io(const struct mpress_host_trainer *t, int op,
                            struct mpress_host_io *io);
/* Forward and backward of one micro-batch of the current step; weight gradients accumulate.
 * *loss: that micro-batch's loss. The caller sets t->loss_grad (1 / micro-batches). */
int mpress_host_trainer_micro_batch(struct mpress_host_trainer *t, uint32_t micro_batch,
                                    float *loss, struct mpress_error *err);
/* One optimizer step over micro_batches micro-batches: zero gradients, forward and backward of
 * each in order, tied reduce, optimizer step. *loss: mean of the micro-batch losses. */
/* Tied reduce, then the optimizer step on every parameter; the step counter advances (the
 * gradients stay as reduced). */
void mpress_host_trainer_apply(struct mpress_host_trainer *t);
int mpress_host_trainer_step(struct mpress_host_trainer *t, int micro_batches, double *loss,
                             struct mpress_error *err);

#endif
