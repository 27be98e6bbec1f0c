/* Tiny random planning instances built in C (no files): a profile of a few ops and saved
 * tensors and a server of up to 3 GPUs, from a fixed-seed generator. Shared by the plan tests. */
#ifndef MPRESS_TEST_TINY_H
#define MPRESS_TEST_TINY_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpress/planner.h"

#define MB 1000000ULL

static uint64_t tiny_state_;

static inline uint32_t tiny_rand(void)
{
    /* xorshift64*: reproducible everywhere, unlike rand(). */
    tiny_state_ ^= tiny_state_ >> 12;
    tiny_state_ ^= tiny_state_ << 25;
    tiny_state_ ^= tiny_state_ >> 27;
    return (uint32_t)((tiny_state_ * 2685821657736338717ULL) >> 32);
}

static inline int tiny_range(int lo, int hi) /* inclusive */
{
    return lo + (int)(tiny_rand() % (uint32_t)(hi - lo + 1));
}

/* Appends one op with n saved tensors; tensors of "kind"/"role" pairs repeat to give classes
 * with several members. */
static inline struct mpress_op *tiny_op(struct mpress_profile *p, const char *kind, double fwd,
                                        uint64_t params_mb, uint64_t out_mb, int n_tensors)
{
    p->ops = realloc(p->ops, sizeof(struct mpress_op) * (size_t)(p->n_ops + 1));
    struct mpress_op *op = &p->ops[p->n_ops];
    memset(op, 0, sizeof(*op));
    snprintf(op->name, sizeof(op->name), "op%d", p->n_ops);
    snprintf(op->kind, sizeof(op->kind), "%s", kind);
    op->layer = -1;
    op->fwd_s = fwd;
    op->bwd_s = 2 * fwd;
    op->param_bytes = 2 * params_mb * MB;
    op->grad_bytes = 2 * params_mb * MB;
    op->optim_bytes = 12 * params_mb * MB;
    op->output_bytes = out_mb * MB;
    op->n_tensors = n_tensors;
    op->tensors = calloc((size_t)(n_tensors ? n_tensors : 1), sizeof(struct mpress_saved_tensor));
    for (int t = 0; t < n_tensors; t++)
        snprintf(op->tensors[t].id, sizeof(op->tensors[t].id), "op%d.t%d", p->n_ops, t);
    p->n_ops++;
    return op;
}

/* A server of g identical GPUs of cap_mb each. nvswitch: every pair through a switch. */
static inline void tiny_topo(struct mpress_topology *t, int g, int nvswitch, uint64_t cap_mb)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "tiny%d", g);
    t->n_gpus = g;
    t->fabric = nvswitch ? MPRESS_FABRIC_NVSWITCH : MPRESS_FABRIC_DIRECT;
    t->nvlink_bytes_per_s = 1000 * MB;
    t->pcie_bytes_per_s = 300 * MB;
    t->n_switches = 1;
    t->switches[0].uplink_bytes_per_s = 400 * MB;
    t->n_sockets = 1;
    t->host_memory_bytes = 100000 * MB;
    t->host_memory_bytes_per_s = 2000 * MB;
    t->cpu_flops = 1e12;
    snprintf(t->bandwidth_source, sizeof(t->bandwidth_source), "datasheet");
    for (int i = 0; i < g; i++) {
        snprintf(t->gpus[i].model, sizeof(t->gpus[i].model), "tiny");
        /* Half a MB off the MB grid of every size: no exact ties at capacity. */
        t->gpus[i].memory_bytes = cap_mb * MB + MB / 2;
        t->gpus[i].reserve_bytes = 10 * MB;
        t->gpus[i].hbm_bytes_per_s = 100000 * MB;
        t->gpus[i].nvlink_ports = nvswitch ? 2 : 4;
        t->gpus[i].pcie_switch = 0;
        for (int j = 0; j < g; j++)
            t->nvlinks[i][j] = nvswitch && i != j ? 2 : 0;
    }
}

static inline void tiny_profile_init(struct mpress_profile *p)
{
    mpress_profile_init(p);
    snprintf(p->source, sizeof(p->source), "analytic");
    snprintf(p->device, sizeof(p->device), "tiny");
    snprintf(p->model.name, sizeof(p->model.name), "tiny");
    snprintf(p->model.family, sizeof(p->model.family), "gpt");
    p->model.micro_batch = 1;
    p->model.layers = 1;
    p->model.hidden = 64;
    p->model.heads = 1;
    p->model.ffn = 256;
    p->model.seq = 16;
    p->model.vocab = 100;
    snprintf(p->model.dtype, sizeof(p->model.dtype), "fp16");
    snprintf(p->model.optimizer, sizeof(p->model.optimizer), "adam");
}

#endif
