/* The analytic profile: the model definition timed op by op with a roofline on a GPU from the
 * built-in table. Constants and formulas: docs/cost-model.md, "Analytic profiles". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpress/model.h"

double mpress_kernel_time(const struct mpress_model_kernel *k, const struct mpress_gpu_spec *gpu,
                          enum mpress_dtype dtype)
{
    /* Roofline (Williams et al. 2009): a kernel takes as long as its slower resource. 16-bit
     * GEMMs run on tensor cores; fp32 ones on the CUDA cores (the table's fp32 peak). */
    double peak = dtype == MPRESS_DTYPE_FP32 ? gpu->flops_fp32 : gpu->flops_fp16;
    double t_mem = k->bytes / (gpu->hbm_bytes_per_s * MPRESS_ANALYTIC_MEMORY_EFFICIENCY);
    double t_flop = k->flops > 0 ? k->flops / (peak * MPRESS_ANALYTIC_GEMM_EFFICIENCY) : 0.0;
    return t_flop > t_mem ? t_flop : t_mem;
}

void mpress_optimizer_step_traffic(const struct mpress_model_config *m, double param_bytes,
                                   double grad_bytes, double optim_bytes,
                                   struct mpress_optimizer_traffic *out)
{
    /* mpress_model_state_bytes: in fp32 the weights are the master copy and the optimizer
     * states are only the moments; in 16-bit mixed precision the states hold the fp32 master
     * and the 16-bit weights are a copy written from it. */
    int weights_are_master = strcmp(m->dtype, "fp32") == 0;
    out->memory_bytes = grad_bytes + 2.0 * optim_bytes +
                        (weights_are_master ? 2.0 : 1.0) * param_bytes;
    out->pcie_down_bytes = grad_bytes;
    out->pcie_up_bytes = param_bytes;
}

int mpress_profile_from_model(const struct mpress_model *model, const double *fwd_s,
                              const double *bwd_s, const char *source, const char *device,
                              struct mpress_profile *out, struct mpress_error *err)
{
    const struct mpress_model_config *m = &model->config;
    int rc, wb, gb, ob;
    mpress_model_state_bytes(m, &wb, &gb, &ob);

    struct mpress_op *ops = calloc((size_t)model->n_ops, sizeof(*ops));
    if (!ops)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    for (int i = 0; i < model->n_ops; i++) {
        const struct mpress_model_op *mo = &model->ops[i];
        struct mpress_op *po = &ops[i];
        snprintf(po->name, sizeof(po->name), "%s", mo->name);
        snprintf(po->kind, sizeof(po->kind), "%s", mo->kind);
        po->layer = mo->layer;
        po->fwd_s = fwd_s[i];
        po->bwd_s = bwd_s[i];
        po->fwd_flops = mo->fwd_flops;
        /* A weight tied to another op's (GPT's and BERT's output projection = the word
         * embedding) is counted once, at its owner, in params. Megatron-LM keeps a second copy
         * with its own gradients and optimizer states on the stage that runs the tied op
         * (initialize_word_embeddings, megatron/model/module.py), so the tied op carries that
         * copy's model-state bytes. This assumes the owner and the tied op sit on different
         * pipeline stages, as they do in any pipeline of two stages or more. */
        uint64_t states_params = mo->params;
        for (int w = 0; w < mo->n_weights; w++)
            if (mo->weights[w].producer >= 0 && mo->weights[w].producer != i)
                states_params +=
                    mo->weights[w].bytes / (uint64_t)mpress_dtype_size(mo->weights[w].dtype);
        po->params = mo->params;
        po->param_bytes = states_params * (uint64_t)wb;
        po->grad_bytes = states_params * (uint64_t)gb;
        po->optim_bytes = states_params * (uint64_t)ob;
        po->workspace_bytes = mo->workspace_bytes;
        po->output_bytes = mo->output_bytes;
        po->n_tensors = mo->n_saved;
        po->tensors = calloc((size_t)mo->n_saved + 1, sizeof(*po->tensors));
        if (!po->tensors) {
            rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
            goto fail;
        }
        for (int j = 0; j < mo->n_saved; j++) {
            const struct mpress_model_tensor *t = &mo->saved[j];
            struct mpress_saved_tensor *st = &po->tensors[j];
            char id[sizeof(mo->name) + sizeof(t->role) + 1];
            snprintf(id, sizeof(id), "%s.%s", mo->name, t->role);
            if (strlen(id) >= sizeof(st->id)) {
                rc = mpress_error_set(err, MPRESS_EUSAGE, "tensor id '%s' is too long", id);
                goto fail;
            }
            memcpy(st->id, id, strlen(id) + 1);
            snprintf(st->name, sizeof(st->name), "%s", t->role);
            st->bytes = t->bytes;
            st->recompute_op = t->producer;
            st->recompute_s = fwd_s[t->producer];
        }
    }
    mpress_profile_finish(out);
    mpress_profile_init(out);
    snprintf(out->source, sizeof(out->source), "%s", source);
    snprintf(out->device, sizeof(out->device), "%s", device);
    out->model = *m;
    out->n_ops = model->n_ops;
    out->ops = ops;
    return 0;
fail:
    for (int i = 0; i < model->n_ops; i++)
        free(ops[i].tensors);
    free(ops);
    return rc;
}

int mpress_profile_analytic(const struct mpress_model_config *m, const struct mpress_gpu_spec *gpu,
                            struct mpress_profile *out, struct mpress_error *err)
{
    mpress_error_clear(err);
    if (!gpu || !(gpu->flops_fp16 > 0) || !(gpu->flops_fp32 > 0) || !(gpu->hbm_bytes_per_s > 0))
        return mpress_error_set(err, MPRESS_EUSAGE, "a GPU with peak FLOP/s and bandwidth is "
                                                    "needed for an analytic profile");
    /* A bf16 model on a GPU without bf16 tensor cores would be timed at a rate it cannot
     * reach (Volta runs bf16 without tensor cores); refuse rather than mislead. */
    if (strcmp(m->dtype, "bf16") == 0 && !gpu->bf16)
        return mpress_error_set(err, MPRESS_EUSAGE,
                                "%s has no bf16 tensor cores: use --dtype fp16 or a GPU from "
                                "A100 on",
                                gpu->model ? gpu->model : gpu->key);
    struct mpress_model model;
    int rc = mpress_model_build(m, &model, err);
    if (rc)
        return rc;
    enum mpress_dtype act;
    mpress_dtype_parse(m->dtype, &act);
    double *fwd = calloc((size_t)model.n_ops, sizeof(double));
    double *bwd = calloc((size_t)model.n_ops, sizeof(double));
    if (!fwd || !bwd) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    } else {
        for (int i = 0; i < model.n_ops; i++) {
            for (int k = 0; k < model.ops[i].n_kernels; k++)
                fwd[i] += mpress_kernel_time(&model.ops[i].kernels[k], gpu, act);
            bwd[i] = fwd[i] * model.ops[i].bwd_factor;
        }
        rc = mpress_profile_from_model(&model, fwd, bwd, "analytic",
                                       gpu->model ? gpu->model : gpu->key, out, err);
    }
    free(fwd);
    free(bwd);
    mpress_model_finish(&model);
    return rc;
}
