/* The model's head on the host (GPT: tied logits; BERT: dense, GELU, LayerNorm, tied logits,
 * pooler and NSP) and the loss (softmax cross-entropy, BERT's NSP term). Layouts and shared
 * helpers: host_ops.c, host_ops_internal.h. */
#include <math.h>
#include <string.h>

#include "host_ops_internal.h"

static float *sc_fz(struct scratch *sc, size_t n)
{
    float *x = hops_sc_f(sc, n);
    if (x)
        memset(x, 0, n * sizeof(float));
    return x;
}

static void acc(void *dst, enum mpress_dtype t, const float *add, size_t n)
{
    chunk_acc(dst, t, 0, add, n);
}

/* ---- head -------------------------------------------------------------------------------- */

/* A stored tensor the op writes: its saved buffer, or scratch of its bytes when the caller does
 * not want it saved. */
static void *saved_or_scratch(struct call *c, const char *role)
{
    int i = SV(c, role);
    return c->io->saved[i] ? c->io->saved[i] : hops_sc_bytes(&c->sc, (size_t)c->op->saved[i].bytes);
}

/* The BERT head, forward: every intermediate is computed into its saved tensor (stored in the
 * activation dtype; later steps read it from there, so forward, recompute and backward see the
 * same values). */
static int bert_head_fwd(struct call *c)
{
    int64_t T = c->T, H = c->H, V = c->V, B = c->B;
    enum mpress_dtype at = c->act, wt = c->op->weights[W(c, "word")].dtype;
    float gs[LN_MAX], bs[LN_MAX], xb[CHUNK], yb[CHUNK];
    void *t = saved_or_scratch(c, "dense_out"), *g = saved_or_scratch(c, "ln_input");
    void *u = saved_or_scratch(c, "decoder_input"), *p = saved_or_scratch(c, "pooler_out");
    const float *lg = hops_view_small(c, c->io->w[W(c, "ln_gamma")], wt, (size_t)H, gs, LN_MAX);
    const float *lb = hops_view_small(c, c->io->w[W(c, "ln_beta")], wt, (size_t)H, bs, LN_MAX);
    if (c->sc.failed)
        return hops_nomem(c);
    const void *x = c->io->in[0];
    struct mat xm = M_(x, at, H, 0), wd = M_(c->io->w[W(c, "dense_weight")], wt, H, 1);
    hops_gemm_st(&xm, &wd, T, H, H, c->io->w[W(c, "dense_bias")], 0, t, at, H);
    size_t n = (size_t)(T * H);
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? n - i : CHUNK;
        float *y = chunk_out(g, at, i, yb);
        gelu_rows(chunk_in(t, at, i, m, xb), y, m);
        chunk_put(g, at, i, y, m);
    }
    int rc = hops_ln_fwd(c, g, at, lg, lb, T, H, c->hp->ln_eps, u, at);
    if (rc)
        return rc;
    struct mat um = M_(u, at, H, 0), word = M_(c->io->w[W(c, "word")], wt, H, 1);
    if (c->io->out[0])
        hops_gemm_st(&um, &word, T, V, H, c->io->w[W(c, "decoder_bias")], 0, c->io->out[0], at, V);
    /* rows 0 .. b-1 of x are sequence position 0 */
    struct mat wp = M_(c->io->w[W(c, "pooler_weight")], wt, H, 1);
    hops_gemm_st(&xm, &wp, B, H, H, c->io->w[W(c, "pooler_bias")], 0, p, at, H);
    for (size_t i = 0; i < (size_t)(B * H); i += CHUNK) {
        size_t m = (size_t)(B * H) - i < CHUNK ? (size_t)(B * H) - i : CHUNK;
        float *y = chunk_out(p, at, i, yb);
        const float *v = chunk_in(p, at, i, m, xb);
        for (size_t j = 0; j < m; j++)
            y[j] = tanhf(v[j]);
        chunk_put(p, at, i, y, m);
    }
    struct mat pm = M_(p, at, H, 0), wn = M_(c->io->w[W(c, "nsp_weight")], wt, H, 1);
    if (c->io->out[1])
        hops_gemm_st(&pm, &wn, B, 2, H, c->io->w[W(c, "nsp_bias")], 0, c->io->out[1], at, 2);
    hops_sc_free(&c->sc);
    return 0;
}

/* GPT: logits = x word^T. BERT: t = x Wd^T + bd (dense_out), g = gelu(t) (ln_input),
 * u = LN(g) (decoder_input), logits = u word^T + decoder_bias; on the first token x0 = x[0]:
 * p = tanh(x0 Wp^T + bp) (pooler_out), nsp_logits = p Wn^T + bn. */
int hops_head_fwd(struct call *c)
{
    hops_save_input_copy(c, SV(c, "input"), 0);
    if (c->bert)
        return bert_head_fwd(c);
    int wi = W(c, "word");
    struct mat x = M_(c->io->in[0], c->act, c->H, 0);
    struct mat word = M_(c->io->w[wi], c->op->weights[wi].dtype, c->H, 1);
    if (c->io->out[0])
        hops_gemm_st(&x, &word, c->T, c->V, c->H, NULL, 0, c->io->out[0], c->act, c->V);
    return 0;
}

/* The BERT head, backward: fp32 scratch du (then reused for dx) and dg [T, H], dp [B, H]. */
static int bert_head_bwd(struct call *c)
{
    int64_t T = c->T, H = c->H, V = c->V, B = c->B;
    enum mpress_dtype at = c->act, wt = c->op->weights[W(c, "word")].dtype;
    enum mpress_dtype f32 = MPRESS_DTYPE_FP32;
    float gs[LN_MAX], tb[CHUNK], pb[CHUNK];
    const void *dl = c->io->dout[0], *dn = c->io->dout[1], *x = saved_ptr(c, "input");
    const void *t = saved_ptr(c, "dense_out"), *g = saved_ptr(c, "ln_input");
    const void *u = saved_ptr(c, "decoder_input"), *p = saved_ptr(c, "pooler_out");
    const float *lg = hops_view_small(c, c->io->w[W(c, "ln_gamma")], wt, (size_t)H, gs, LN_MAX);
    float *du = sc_fz(&c->sc, (size_t)(T * H)), *dg = sc_fz(&c->sc, (size_t)(T * H));
    float *dp = sc_fz(&c->sc, (size_t)(B * H));
    if (c->sc.failed)
        return hops_nomem(c);
#define DW(role) c->io->dw[W(c, role)]
    struct mat dla = M_(dl, at, V, 0), dlt = M_(dl, at, V, 1), xm = M_(x, at, H, 0);
    struct mat word = M_(c->io->w[W(c, "word")], wt, H, 0), um = M_(u, at, H, 0);
    /* logits = u word^T + decoder_bias */
    hops_gemm_st(&dla, &word, T, H, V, NULL, 1, du, f32, H);
    if (DW("word"))
        hops_gemm_st(&dlt, &um, V, H, T, NULL, 1, DW("word"), wt, H);
    hops_colsum_acc(dl, at, T, V, DW("decoder_bias"), wt);
    /* u = LN(g), g = gelu(t) */
    int rc = hops_ln_bwd(c, g, at, lg, du, T, H, c->hp->ln_eps, dg, f32, DW("ln_gamma"),
                         DW("ln_beta"), wt);
    if (rc)
        return rc;
    for (size_t i = 0; i < (size_t)(T * H); i += CHUNK) {
        size_t m = (size_t)(T * H) - i < CHUNK ? (size_t)(T * H) - i : CHUNK;
        memcpy(pb, dg + i, m * sizeof(float));
        gelu_grad(chunk_in(t, at, i, m, tb), pb, dg + i, m);
    }
    /* t = x Wd^T + bd; dx into du, now free */
    float *dx = du;
    memset(dx, 0, (size_t)(T * H) * sizeof(float));
    struct mat dgm = M_(dg, f32, H, 0), dgt = M_(dg, f32, H, 1);
    struct mat wd = M_(c->io->w[W(c, "dense_weight")], wt, H, 0);
    hops_gemm_st(&dgm, &wd, T, H, H, NULL, 1, dx, f32, H);
    if (DW("dense_weight"))
        hops_gemm_st(&dgt, &xm, H, H, T, NULL, 1, DW("dense_weight"), wt, H);
    hops_colsum_acc(dg, f32, T, H, DW("dense_bias"), wt);
    /* nsp = p Wn^T + bn, p = tanh(x0 Wp^T + bp) */
    struct mat dnm = M_(dn, at, 2, 0), dnt = M_(dn, at, 2, 1), pm = M_(p, at, H, 0);
    struct mat wn = M_(c->io->w[W(c, "nsp_weight")], wt, H, 0);
    hops_gemm_st(&dnm, &wn, B, H, 2, NULL, 1, dp, f32, H);
    if (DW("nsp_weight"))
        hops_gemm_st(&dnt, &pm, 2, H, B, NULL, 1, DW("nsp_weight"), wt, H);
    hops_colsum_acc(dn, at, B, 2, DW("nsp_bias"), wt);
    for (size_t i = 0; i < (size_t)(B * H); i += CHUNK) {
        size_t m = (size_t)(B * H) - i < CHUNK ? (size_t)(B * H) - i : CHUNK;
        const float *pv = chunk_in(p, at, i, m, pb);
        for (size_t j = 0; j < m; j++)
            dp[i + j] *= 1.0f - pv[j] * pv[j];
    }
    struct mat dpm = M_(dp, f32, H, 0), dpt = M_(dp, f32, H, 1);
    struct mat wp = M_(c->io->w[W(c, "pooler_weight")], wt, H, 0);
    hops_gemm_st(&dpm, &wp, B, H, H, NULL, 1, dx, f32, H); /* dx0 added to rows 0 .. b-1 */
    if (DW("pooler_weight"))
        hops_gemm_st(&dpt, &xm, H, H, B, NULL, 1, DW("pooler_weight"), wt, H);
    hops_colsum_acc(dp, f32, B, H, DW("pooler_bias"), wt);
#undef DW
    acc(c->io->din[0], at, dx, (size_t)(T * H));
    hops_sc_free(&c->sc);
    return 0;
}

int hops_head_bwd(struct call *c)
{
    if (c->bert)
        return bert_head_bwd(c);
    int64_t T = c->T, H = c->H, V = c->V;
    int wi = W(c, "word");
    enum mpress_dtype wt = c->op->weights[wi].dtype;
    const void *dl = c->io->dout[0];
    struct mat dla = M_(dl, c->act, V, 0), dlt = M_(dl, c->act, V, 1);
    struct mat word = M_(c->io->w[wi], wt, H, 0), x = M_(saved_ptr(c, "input"), c->act, H, 0);
    if (c->io->din[0])
        hops_gemm_st(&dla, &word, T, H, V, NULL, 1, c->io->din[0], c->act, H);
    if (c->io->dw[wi])
        hops_gemm_st(&dlt, &x, V, H, T, NULL, 1, c->io->dw[wi], wt, H);
    return 0;
}

/* ---- loss -------------------------------------------------------------------------------- */

/* Softmax of rows of n stored logits (dtype zt) into p (fp32, NULL: not wanted); adds to *sum
 * the sum over rows of -log p[label] (double). */
static int softmax_xent(struct call *c, const void *z, enum mpress_dtype zt,
                        const int64_t *labels, int64_t rows, int64_t n, int label_stride_s,
                        float *p, double *sum)
{
    float zs[LN_MAX], ps[LN_MAX];
    float *zb = is32(zt) ? NULL : hops_row_buf(c, (size_t)n, zs, LN_MAX);
    float *pb = p ? NULL : hops_row_buf(c, (size_t)n, ps, LN_MAX);
    if (c->sc.failed)
        return hops_nomem(c);
    *sum = 0;
    for (int64_t r = 0; r < rows; r++) {
        /* row r = s·b_count + b; its label is labels[b·s_count + s] (or labels[r] for NSP) */
        int64_t li = label_stride_s ? (r % c->B) * c->S + r / c->B : r;
        int64_t lab = labels[li];
        if (lab < 0 || lab >= n)
            return hops_fail(c, MPRESS_EINPUT, "label out of range");
        const float *restrict zr = chunk_in(z, zt, (size_t)(r * n), (size_t)n, zb);
        float *restrict pr = p ? p + r * n : pb;
        float mx = max_f(zr, (size_t)n), s = exp_sum(zr, mx, pr, (size_t)n);
        for (int64_t j = 0; j < n; j++)
            pr[j] = pr[j] / s;
        *sum += (double)(logf(s) + mx - zr[lab]);
    }
    return 0;
}

/* loss = mean over s·b tokens of -log softmax(logits)[label] (+ BERT: mean over b of the NSP
 * cross-entropy). Saves both softmaxes in fp32 (softmax, BERT's nsp_softmax). */
int hops_loss_fwd(struct call *c)
{
    int64_t T = c->T, V = c->V, B = c->B;
    double sum, nsum = 0;
    int rc = softmax_xent(c, c->io->in[0], c->act, c->io->in[1], T, V, 1,
                          saved_ptr(c, "softmax"), &sum);
    if (!rc && c->bert)
        rc = softmax_xent(c, c->io->in[2], c->act, c->io->in[3], B, 2, 0,
                          saved_ptr(c, "nsp_softmax"), &nsum);
    if (rc)
        return rc;
    float loss = (float)(sum / (double)T);
    if (c->bert)
        loss += (float)(nsum / (double)B);
    if (c->io->out[0])
        memcpy(c->io->out[0], &loss, sizeof(loss));
    hops_sc_free(&c->sc);
    return 0;
}

/* dz += dL·(p - onehot(label))/rows over rows of n (dz stored, dtype act; NULL: only the
 * labels are checked). */
static int xent_grad(struct call *c, const float *p, const int64_t *labels, int64_t rows,
                     int64_t n, int label_stride_s, float g, void *dz)
{
    float gb[CHUNK];
    for (int64_t r = 0; r < rows; r++) {
        int64_t li = label_stride_s ? (r % c->B) * c->S + r / c->B : r;
        int64_t lab = labels[li];
        if (lab < 0 || lab >= n)
            return hops_fail(c, MPRESS_EINPUT, "label out of range");
        for (int64_t j0 = 0; dz && j0 < n; j0 += CHUNK) {
            size_t m = (size_t)(n - j0 < CHUNK ? n - j0 : CHUNK);
            const float *restrict pr = p + r * n + j0;
            float *restrict v = gb;
            for (size_t j = 0; j < m; j++)
                v[j] = pr[j] * g;
            if (lab >= j0 && lab < j0 + (int64_t)m)
                v[lab - j0] = (pr[lab - j0] - 1.0f) * g;
            chunk_acc(dz, c->act, (size_t)(r * n + j0), v, m);
        }
    }
    return 0;
}

int hops_loss_bwd(struct call *c)
{
    float dl;
    memcpy(&dl, c->io->dout[0], sizeof(dl));
    int rc = xent_grad(c, saved_ptr(c, "softmax"), c->io->in[1], c->T, c->V, 1,
                       dl / (float)c->T, c->io->din[0]);
    if (!rc && c->bert)
        rc = xent_grad(c, saved_ptr(c, "nsp_softmax"), c->io->in[3], c->B, 2, 0,
                       dl / (float)c->B, c->io->din[2]);
    return rc;
}
