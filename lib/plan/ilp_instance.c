/* The instance the MILP sees: blocks (runs of ops between allowed cuts) with their times and
 * bytes in the MILP's units, runs of identical consecutive blocks, and classes of
 * interchangeable saved tensors with their counts per block. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ilp_internal.h"

void ilp_inst_free(struct inst *in)
{
    free(in->run_first);
    free(in->run_len);
    free(in->blk);
    free(in->cls);
    free(in->cnt);
    free(in->tcls);
    free(in->xcls);
}

/* The tied matrix's runs and bytes, and the classes a block's recompute would need from the
 * previous stage (struct inst). 0, or -1 when memory runs out. */
static int memory_terms(const struct mpress_profile *p, struct inst *in)
{
    struct plan_tied tw;
    int run_of_op[2] = {-1, -1};
    if (plan_tied_find(p, &tw)) {
        for (int r = 0; r < in->NR; r++)
            for (int b = in->run_first[r]; b < in->run_first[r] + in->run_len[r]; b++)
                for (int q = 0; q < 2; q++) {
                    int op = q ? tw.copy : tw.owner;
                    if (op >= in->blk[b].first && op <= in->blk[b].last)
                        run_of_op[q] = in->run_len[r] == 1 ? r : -2;
                }
        /* embedding and head are one of a kind, so each is a run of one block */
        if (run_of_op[0] >= 0 && run_of_op[1] >= 0) {
            in->tied = 1;
            in->tied_ro = run_of_op[0];
            in->tied_rc = run_of_op[1];
            in->tied_p = (double)tw.p / GB;
            in->tied_g = (double)tw.g / GB;
            in->tied_o = (double)tw.o / GB;
        }
    }
    const int C = in->C;
    int *here = C > 0 ? malloc(sizeof(int) * (size_t)C) : NULL;
    if (C > 0 && !here)
        return -1;
    for (int r = 0; r < in->NR && C > 0; r++)
        for (int b = in->run_first[r]; b < in->run_first[r] + in->run_len[r]; b++) {
            memset(here, 0, sizeof(int) * (size_t)C);
            int j = 0;
            for (int i = 0; i < in->blk[b].first; i++)
                j += p->ops[i].n_tensors;
            for (int i = in->blk[b].first; i <= in->blk[b].last; i++)
                for (int t = 0; t < p->ops[i].n_tensors; t++, j++) {
                    int cl = in->tcls[j];
                    /* counted: a stage input wherever this block opens a stage */
                    if (!plan_stage_input(&p->ops[i].tensors[t], in->blk[b].first))
                        continue;
                    if (!in->xcls && !(in->xcls = calloc((size_t)in->NR * (size_t)C, 1))) {
                        free(here);
                        return -1;
                    }
                    if (++here[cl] > in->xcls[r * C + cl] && here[cl] <= UCHAR_MAX)
                        in->xcls[r * C + cl] = (unsigned char)here[cl];
                }
        }
    free(here);
    return 0;
}

int ilp_mapped(const struct mpress_topology *topo)
{
    return topo->fabric != MPRESS_FABRIC_NVSWITCH && topo->n_gpus > 1;
}

int ilp_host_opt(const struct mpress_topology *topo)
{
    return topo->pcie_bytes_per_s > 0 && plan_host_bw(topo) > 0;
}

int ilp_inst_build(const struct mpress_profile *p, const struct mpress_topology *topo,
                   const struct mpress_plan_options *o, struct inst *in,
                   struct mpress_error *err)
{
    memset(in, 0, sizeof(*in));
    int n = p->n_ops, nt = plan_count_tensors(p);
    char *cut_ok = malloc((size_t)n);
    in->blk = calloc((size_t)n, sizeof(*in->blk));
    in->cls = calloc((size_t)(nt + 1), sizeof(*in->cls));
    in->tcls = calloc((size_t)(nt + 1), sizeof(int));
    if (!cut_ok || !in->blk || !in->cls || !in->tcls) {
        free(cut_ok);
        ilp_inst_free(in);
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    }
    plan_cut_points(p, o->cuts, cut_ok);
    int b = 0, start = 0, j = 0;
    for (int i = 0; i < n; i++) {
        const struct mpress_op *op = &p->ops[i];
        struct block *bk = &in->blk[b];
        bk->t += op->fwd_s + op->bwd_s;
        bk->tf += op->fwd_s;
        bk->p += op->param_bytes / GB;
        bk->g += op->grad_bytes / GB;
        bk->o += op->optim_bytes / GB;
        bk->opt_touch +=
            plan_optimizer_bytes(p, op->param_bytes, op->grad_bytes, op->optim_bytes) / GB;
        bk->gp += (double)(op->grad_bytes + op->param_bytes) / GB;
        if (op->workspace_bytes / GB > bk->w)
            bk->w = op->workspace_bytes / GB;
        for (int t = 0; t < op->n_tensors; t++, j++) {
            const struct mpress_saved_tensor *ts = &op->tensors[t];
            bk->a += ts->bytes / GB;
            int c = 0;
            for (; c < in->C; c++) {
                const struct tclass *k = &in->cls[c];
                const struct mpress_op *ok = &p->ops[k->op];
                const struct mpress_saved_tensor *tk = &ok->tensors[k->tensor];
                if (plan_same_class(ok, tk, op, ts))
                    break;
            }
            if (c == in->C) {
                in->cls[c].op = i;
                in->cls[c].tensor = t;
                in->cls[c].s = ts->bytes / GB;
                in->cls[c].r = ts->recompute_s;
                in->C++;
            }
            in->tcls[j] = c;
        }
        if (cut_ok[i]) {
            bk->first = start;
            bk->last = i;
            bk->x = op->output_bytes / GB;
            start = i + 1;
            b++;
        }
    }
    in->B = b;
    free(cut_ok);
    in->cnt = calloc((size_t)(in->B * (in->C ? in->C : 1)), sizeof(int));
    if (!in->cnt) {
        ilp_inst_free(in);
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    }
    j = 0;
    b = 0;
    for (int i = 0; i < n; i++) {
        while (in->blk[b].last < i)
            b++;
        for (int t = 0; t < p->ops[i].n_tensors; t++, j++)
            in->cnt[b * in->C + in->tcls[j]]++;
    }
    /* Runs: blocks identical in every constant and class count (a transformer's layers) are
     * interchangeable, so the MILP decides how many of a run each slot takes. */
    in->run_first = calloc((size_t)in->B, sizeof(int));
    in->run_len = calloc((size_t)in->B, sizeof(int));
    if (!in->run_first || !in->run_len) {
        ilp_inst_free(in);
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    }
    /* The blocks of a tied matrix's two sides are runs of their own, whatever their constants:
     * the tied rows need to know which slot holds each. */
    struct plan_tied tw;
    int tied_op[2] = {-1, -1};
    if (plan_tied_find(p, &tw))
        tied_op[0] = tw.owner, tied_op[1] = tw.copy;
    for (b = 0; b < in->B; b++) {
        if (in->NR > 0) {
            const struct block *x = &in->blk[in->run_first[in->NR - 1]], *y = &in->blk[b];
            int same = 1;
            for (int q = 0; q < 2; q++)
                if (tied_op[q] >= 0 && ((tied_op[q] >= x->first && tied_op[q] <= x->last) ||
                                        (tied_op[q] >= y->first && tied_op[q] <= y->last)))
                    same = 0;
            same = same && x->t == y->t && x->tf == y->tf && x->opt_touch == y->opt_touch &&
                       x->p == y->p && x->g == y->g && x->o == y->o && x->a == y->a &&
                       x->w == y->w && x->x == y->x && x->gp == y->gp;
            for (int c = 0; c < in->C && same; c++)
                same = in->cnt[in->run_first[in->NR - 1] * in->C + c] == in->cnt[b * in->C + c];
            if (same) {
                in->run_len[in->NR - 1]++;
                continue;
            }
        }
        in->run_first[in->NR] = b;
        in->run_len[in->NR] = 1;
        in->NR++;
    }
    in->N = topo->n_gpus;
    in->M = o->micro_batches;
    in->mapped = ilp_mapped(topo);
    in->host_opt = ilp_host_opt(topo);
    for (int a = 0; a < topo->n_gpus; a++)
        for (int g = 0; g < topo->n_gpus; g++)
            if (plan_nvlink_bw(topo, a, g) > 0)
                in->d2d = 1;
    if (memory_terms(p, in)) {
        ilp_inst_free(in);
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    }
    return 0;
}
