/* Forward and backward of every op kind of the model zoo on the CPU: fp32 arithmetic over
 * stored tensors (fp32, or bf16 for 16-bit configs), GEMMs through cblas_sgemm, dropout from
 * Philox. Layouts follow lib/model/transformer.c: activations [s, b, n] (row r = s·b_count + b),
 * token ids and labels [b, s], q, k, v [b, a, s, d]; attention's qkv row holds q in columns
 * [0, h), k in [h, 2h), v in [2h, 3h), head i at columns i·d .. i·d + d - 1 of each. The
 * formulas are in docs/runtime.md.
 *
 * Speed and memory (docs/runtime.md, "Kernels"): fp32 tensors are used in place (GEMMs read
 * the stored buffers with their strides and accumulate into the gradients with beta = 1);
 * element-wise work runs over chunks of CHUNK elements in stack buffers, so an element-wise op
 * needs no scratch in any dtype; bf16 GEMM operands are converted tile by tile on the stack.
 * What an op still needs (unfused attention's per-head scores, BERT's head backward, 16-bit
 * attention's per-head operands) comes from the caller's scratch allocator (struct mpress_host_scratch:
 * the backend's arena), counted and freed before the op returns.
 *
 * This file: the op call, the embedding, LayerNorm, linear, GELU and residual kernels and the
 * dispatch. Attention is host_attn.c, the heads and the loss host_head.c, the scratch, GEMMs,
 * dropout words and vectorised loops they share host_prim.c (host_ops_internal.h). */
#include <math.h>
#include <string.h>

#include "host_ops_internal.h"

void mpress_host_hparams_default(struct mpress_host_hparams *hp)
{
    hp->hidden_dropout = 0.1f;
    hp->attn_dropout = 0.1f;
    hp->ln_eps = 1e-5f;
}

int mpress_host_blas_threads(int n)
{
    int old = openblas_get_num_threads();
    if (n > 0)
        openblas_set_num_threads(n);
    return old;
}

/* ---- one op call ------------------------------------------------------------------------- */

int hops_find_role(const struct mpress_model_tensor *list, int n, const char *role)
{
    for (int i = 0; i < n; i++)
        if (strcmp(list[i].role, role) == 0)
            return i;
    return -1;
}

int hops_fail(struct call *c, int code, const char *what)
{
    hops_sc_free(&c->sc);
    return mpress_error_set(c->err, code, "op %s: %s", c->op->name, what);
}

/* A scratch allocation failed: the allocator's own error (an arena's "out of memory on gpu
 * ..."), or malloc's. */
int hops_nomem(struct call *c)
{
    int rc = c->sc.rc;
    if (rc) {
        hops_sc_free(&c->sc);
        return rc;
    }
    return hops_fail(c, MPRESS_ESYSTEM, "out of memory for scratch tensors");
}

/* An fp32 view of a whole stored tensor: itself (fp32) or a converted copy in scratch. */
static const float *view(struct call *c, const void *src, enum mpress_dtype t, size_t n)
{
    if (is32(t))
        return src;
    float *x = hops_sc_f(&c->sc, n);
    if (x)
        load_bf16(x, src, n);
    return x;
}

/* Σ (x - mean)² in eight lanes. */
static float sqdev_f(const float *restrict x, float mean, size_t n)
{
    float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            a[j] += (x[i + j] - mean) * (x[i + j] - mean);
    for (int j = 0; i < n; i++, j++)
        a[j] += (x[i] - mean) * (x[i] - mean);
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

/* ---- embedding --------------------------------------------------------------------------- */

static int tok_check(struct call *c, const int64_t *tok, const int64_t *types)
{
    for (int64_t i = 0; i < c->T; i++) {
        if (tok[i] < 0 || tok[i] >= c->V)
            return hops_fail(c, MPRESS_EINPUT, "token id out of the vocabulary");
        if (types && (types[i] < 0 || types[i] > 1))
            return hops_fail(c, MPRESS_EINPUT, "token type is not 0 or 1");
    }
    return 0;
}

/* out[s,b,:] = dropout(word[tok[b,s]] + position[s] (+ token_type[type[b,s]])) */
static int embedding_fwd(struct call *c)
{
    const int64_t *tok = c->io->in[0], *types = c->bert ? c->io->in[1] : NULL;
    int rc = tok_check(c, tok, types);
    if (rc)
        return rc;
    int64_t S = c->S, B = c->B, H = c->H;
    int wi = W(c, "word"), pi = W(c, "position"), ti = c->bert ? W(c, "token_type") : -1;
    enum mpress_dtype wt = c->op->weights[wi].dtype;
    void *out = c->io->out[0];
    uint8_t *msave = saved_ptr(c, "dropout_mask");
    float p = c->hp->hidden_dropout, sc = dropout_scale(p);
    uint32_t thr = drop_thr(p);
    float wb[CHUNK], pb[CHUNK], tb[CHUNK], yb[CHUNK];
    uint8_t mb[CHUNK];
    for (int64_t s = 0; s < S; s++)
        for (int64_t b = 0; b < B; b++) {
            int64_t r = s * B + b, t = tok[b * S + s];
            for (int64_t j0 = 0; j0 < H; j0 += CHUNK) {
                size_t n = (size_t)(H - j0 < CHUNK ? H - j0 : CHUNK), o = (size_t)(r * H + j0);
                const float *w = chunk_in(c->io->w[wi], wt, (size_t)(t * H + j0), n, wb);
                const float *ps = chunk_in(c->io->w[pi], wt, (size_t)(s * H + j0), n, pb);
                const float *tt = ti < 0 ? NULL
                                         : chunk_in(c->io->w[ti], wt,
                                                    (size_t)(types[b * S + s] * H + j0), n, tb);
                uint8_t *m = msave ? msave + o : mb;
                mask_chunk(c->key, thr, o, n, m);
                float *y = chunk_out(out, c->act, o, yb);
                for (size_t j = 0; j < n; j++) {
                    float v = w[j] + ps[j];
                    if (tt)
                        v += tt[j];
                    y[j] = m[j] ? v * sc : 0.0f;
                }
                chunk_put(out, c->act, o, y, n);
            }
        }
    return 0;
}

/* Rows ids[b·S + s] (ids NULL: row s) of dw (stored [rows, H]) += Σ over the tokens r = s·B + b
 * in order of g_r·m_r/(1-p), each row accumulated in fp32 on the stack and rounded once.
 * Blocks of rows at a time; the tokens are scanned once per block. */
static void scatter_rows(struct call *c, const int64_t *ids, int64_t rows, void *dw,
                         enum mpress_dtype wt)
{
    enum { ACC = 8192 };
    float a[ACC], gb[CHUNK];
    int64_t S = c->S, B = c->B, H = c->H;
    int64_t cn = H < CHUNK ? H : CHUNK, rb = ACC / cn;
    const uint8_t *mask = saved_ptr(c, "dropout_mask");
    float sc = dropout_scale(c->hp->hidden_dropout);
    for (int64_t j0 = 0; j0 < H; j0 += cn) {
        size_t n = (size_t)(H - j0 < cn ? H - j0 : cn);
        for (int64_t v0 = 0; v0 < rows; v0 += rb) {
            int64_t nv = rows - v0 < rb ? rows - v0 : rb;
            memset(a, 0, (size_t)nv * n * sizeof(float));
            for (int64_t s = 0; s < S; s++)
                for (int64_t b = 0; b < B; b++) {
                    int64_t id = ids ? ids[b * S + s] : s;
                    if (id < v0 || id >= v0 + nv)
                        continue;
                    size_t o = (size_t)((s * B + b) * H + j0);
                    const float *g = chunk_in(c->io->dout[0], c->act, o, n, gb);
                    float *restrict ar = a + (size_t)(id - v0) * n;
                    const uint8_t *m = mask + o;
                    for (size_t j = 0; j < n; j++)
                        ar[j] += m[j] ? g[j] * sc : 0.0f;
                }
            for (int64_t v = 0; v < nv; v++)
                chunk_acc(dw, wt, (size_t)((v0 + v) * H + j0), a + (size_t)v * n, n);
        }
    }
}

static int embedding_bwd(struct call *c)
{
    const int64_t *tok = c->io->in[0], *types = c->bert ? c->io->in[1] : NULL;
    int rc = tok_check(c, tok, types);
    if (rc)
        return rc;
    int wi = W(c, "word"), pi = W(c, "position");
    enum mpress_dtype wt = c->op->weights[wi].dtype;
    if (c->io->dw[wi])
        scatter_rows(c, tok, c->V, c->io->dw[wi], wt);
    if (c->io->dw[pi])
        scatter_rows(c, NULL, c->S, c->io->dw[pi], wt);
    if (c->bert && c->io->dw[W(c, "token_type")])
        scatter_rows(c, types, 2, c->io->dw[W(c, "token_type")], wt);
    return 0;
}

/* ---- layernorm, linear, gelu, residual --------------------------------------------------- */

void hops_save_input_copy(struct call *c, int saved_index, int input_index)
{
    /* the executor may hand the input itself over as the saved tensor (no copy then) */
    if (c->io->saved[saved_index] && c->io->saved[saved_index] != c->io->in[input_index])
        memcpy(c->io->saved[saved_index], c->io->in[input_index],
               (size_t)c->op->saved[saved_index].bytes);
}

/* An fp32 view of n elements: src itself (fp32), converted into buf (when n <= cap), or a
 * converted copy in scratch. */
const float *hops_view_small(struct call *c, const void *src, enum mpress_dtype t, size_t n,
                             float *buf, size_t cap)
{
    if (is32(t) || n > cap)
        return view(c, src, t, n);
    load_bf16(buf, src, n);
    return buf;
}

/* An fp32 row buffer of n elements: buf when n <= cap, else scratch. */
float *hops_row_buf(struct call *c, size_t n, float *buf, size_t cap)
{
    return n <= cap ? buf : hops_sc_f(&c->sc, n);
}

/* LayerNorm over rows of H (Ba et al. 2016): biased variance, two passes; x, y stored (dtype
 * xt, yt), gamma and beta fp32. */
int hops_ln_fwd(struct call *c, const void *x, enum mpress_dtype xt, const float *g,
                const float *b, int64_t rows, int64_t H, float eps, void *y,
                enum mpress_dtype yt)
{
    float xs[LN_MAX], ys[LN_MAX];
    size_t h = (size_t)H;
    float *xb = is32(xt) ? NULL : hops_row_buf(c, h, xs, LN_MAX);
    float *yb = is32(yt) ? NULL : hops_row_buf(c, h, ys, LN_MAX);
    if (c->sc.failed)
        return hops_nomem(c);
    for (int64_t r = 0; r < rows; r++) {
        const float *restrict xr = chunk_in(x, xt, (size_t)r * h, h, xb);
        float *restrict yr = chunk_out(y, yt, (size_t)r * h, yb);
        float mean = sum_f(xr, h) / (float)H;
        float var = sqdev_f(xr, mean, h) / (float)H;
        float rstd = 1.0f / sqrtf(var + eps);
        for (size_t j = 0; j < h; j++)
            yr[j] = (xr[j] - mean) * rstd * g[j] + b[j];
        chunk_put(y, yt, (size_t)r * h, yr, h);
    }
    return 0;
}

/* Σ dxh and Σ dxh·xh over a row (eight lanes), dxh = dy·g, xh = (x - mean)·rstd. */
static void ln_dots(const float *restrict x, const float *restrict dy, const float *restrict g,
                    float mean, float rstd, size_t n, float *m1, float *m2)
{
    float a[8] = {0, 0, 0, 0, 0, 0, 0, 0}, q[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) {
            float xh = (x[i + j] - mean) * rstd, dxh = dy[i + j] * g[i + j];
            a[j] += dxh;
            q[j] += dxh * xh;
        }
    for (int j = 0; i < n; i++, j++) {
        float xh = (x[i] - mean) * rstd, dxh = dy[i] * g[i];
        a[j] += dxh;
        q[j] += dxh * xh;
    }
    *m1 = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
    *m2 = ((q[0] + q[4]) + (q[1] + q[5])) + ((q[2] + q[6]) + (q[3] + q[7]));
}

/* dx += rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dy g (dx stored, dtype
 * dt, NULL: not wanted); dg += Σ dy xhat, db += Σ dy over the rows (fp32 accumulators, each
 * stored gradient rounded once; NULL: not wanted). */
int hops_ln_bwd(struct call *c, const void *x, enum mpress_dtype xt, const float *g,
                const void *dy, int64_t rows, int64_t H, float eps, void *dx,
                enum mpress_dtype dt, void *dg, void *db, enum mpress_dtype wt)
{
    float xs[LN_MAX], ds[LN_MAX], os[LN_MAX], ga[LN_MAX], ba[LN_MAX];
    size_t h = (size_t)H;
    float *xb = is32(xt) ? NULL : hops_row_buf(c, h, xs, LN_MAX);
    float *db_ = is32(dt) ? NULL : hops_row_buf(c, h, ds, LN_MAX);
    float *ob = hops_row_buf(c, h, os, LN_MAX);
    float *gacc = hops_row_buf(c, h, ga, LN_MAX), *bacc = hops_row_buf(c, h, ba, LN_MAX);
    if (c->sc.failed)
        return hops_nomem(c);
    memset(gacc, 0, h * sizeof(float));
    memset(bacc, 0, h * sizeof(float));
    for (int64_t r = 0; r < rows; r++) {
        const float *restrict xr = chunk_in(x, xt, (size_t)r * h, h, xb);
        const float *restrict dyr = chunk_in(dy, dt, (size_t)r * h, h, db_);
        float mean = sum_f(xr, h) / (float)H;
        float var = sqdev_f(xr, mean, h) / (float)H;
        float rstd = 1.0f / sqrtf(var + eps);
        float m1, m2;
        ln_dots(xr, dyr, g, mean, rstd, h, &m1, &m2);
        m1 /= (float)H;
        m2 /= (float)H;
        float *restrict o = ob;
        for (size_t j = 0; j < h; j++) {
            float xh = (xr[j] - mean) * rstd, dxh = dyr[j] * g[j];
            gacc[j] += dyr[j] * xh;
            bacc[j] += dyr[j];
            o[j] = rstd * (dxh - m1 - xh * m2);
        }
        chunk_acc(dx, dt, (size_t)r * h, o, h);
    }
    chunk_acc(dg, wt, 0, gacc, h);
    chunk_acc(db, wt, 0, bacc, h);
    return 0;
}

static int layernorm_fwd(struct call *c)
{
    float gs[LN_MAX], bs[LN_MAX];
    int gi = W(c, "gamma"), bi = W(c, "beta");
    enum mpress_dtype wt = c->op->weights[gi].dtype;
    const float *g = hops_view_small(c, c->io->w[gi], wt, (size_t)c->H, gs, LN_MAX);
    const float *b = hops_view_small(c, c->io->w[bi], wt, (size_t)c->H, bs, LN_MAX);
    if (c->sc.failed)
        return hops_nomem(c);
    int rc = 0;
    if (c->io->out[0])
        rc = hops_ln_fwd(c, c->io->in[0], c->act, g, b, c->T, c->H, c->hp->ln_eps, c->io->out[0],
                         c->act);
    if (!rc)
        hops_save_input_copy(c, SV(c, "input"), 0);
    hops_sc_free(&c->sc);
    return rc;
}

static int layernorm_bwd(struct call *c)
{
    float gs[LN_MAX];
    int gi = W(c, "gamma"), bi = W(c, "beta");
    enum mpress_dtype wt = c->op->weights[gi].dtype;
    const float *g = hops_view_small(c, c->io->w[gi], wt, (size_t)c->H, gs, LN_MAX);
    if (c->sc.failed)
        return hops_nomem(c);
    int rc = hops_ln_bwd(c, saved_ptr(c, "input"), c->act, g, c->io->dout[0], c->T, c->H,
                         c->hp->ln_eps, c->io->din[0], c->act, c->io->dw[gi], c->io->dw[bi], wt);
    hops_sc_free(&c->sc);
    return rc;
}

/* weight [n, k], input [s, b, k]: y = x W^T + bias */
static int linear_fwd(struct call *c)
{
    int wi = W(c, "weight"), bi = W(c, "bias");
    int64_t N = c->op->weights[wi].shape[0], K = c->op->weights[wi].shape[1];
    enum mpress_dtype wt = c->op->weights[wi].dtype;
    if (c->io->out[0]) {
        struct mat x = M_(c->io->in[0], c->act, K, 0), w = M_(c->io->w[wi], wt, K, 1);
        hops_gemm_st(&x, &w, c->T, N, K, c->io->w[bi], 0, c->io->out[0], c->act, N);
    }
    hops_save_input_copy(c, SV(c, "input"), 0);
    return 0;
}

/* dx += dy W, dW += dy^T x, dbias += column sums of dy */
static int linear_bwd(struct call *c)
{
    int wi = W(c, "weight"), bi = W(c, "bias");
    int64_t N = c->op->weights[wi].shape[0], K = c->op->weights[wi].shape[1], T = c->T;
    enum mpress_dtype wt = c->op->weights[wi].dtype;
    const void *dy = c->io->dout[0];
    if (c->io->din[0]) {
        struct mat a = M_(dy, c->act, N, 0), w = M_(c->io->w[wi], wt, K, 0);
        hops_gemm_st(&a, &w, T, K, N, NULL, 1, c->io->din[0], c->act, K);
    }
    if (c->io->dw[wi]) {
        struct mat a = M_(dy, c->act, N, 1), x = M_(saved_ptr(c, "input"), c->act, K, 0);
        hops_gemm_st(&a, &x, N, K, T, NULL, 1, c->io->dw[wi], wt, K);
    }
    if (c->io->dw[bi])
        hops_colsum_acc(dy, c->act, T, N, c->io->dw[bi], wt);
    return 0;
}

static int gelu_fwd(struct call *c)
{
    size_t n = (size_t)(c->T * c->F);
    float xb[CHUNK], yb[CHUNK];
    void *out = c->io->out[0];
    for (size_t i = 0; out && i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? n - i : CHUNK;
        const float *x = chunk_in(c->io->in[0], c->act, i, m, xb);
        float *y = chunk_out(out, c->act, i, yb);
        gelu_rows(x, y, m);
        chunk_put(out, c->act, i, y, m);
    }
    hops_save_input_copy(c, SV(c, "input"), 0);
    return 0;
}

static int gelu_bwd(struct call *c)
{
    size_t n = (size_t)(c->T * c->F);
    float xb[CHUNK], db[CHUNK], gb[CHUNK];
    const void *x = saved_ptr(c, "input");
    for (size_t i = 0; c->io->din[0] && i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? n - i : CHUNK;
        gelu_grad(chunk_in(x, c->act, i, m, xb), chunk_in(c->io->dout[0], c->act, i, m, db),
                       gb, m);
        chunk_acc(c->io->din[0], c->act, i, gb, m);
    }
    return 0;
}

/* out = residual + dropout(branch) */
static int residual_fwd(struct call *c)
{
    size_t n = (size_t)(c->T * c->H);
    float bb[CHUNK], xb[CHUNK], yb[CHUNK];
    uint8_t mb[CHUNK];
    uint8_t *msave = saved_ptr(c, "dropout_mask");
    void *out = c->io->out[0];
    float p = c->hp->hidden_dropout, sc = dropout_scale(p);
    uint32_t thr = drop_thr(p);
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? n - i : CHUNK;
        uint8_t *restrict mk = msave ? msave + i : mb;
        mask_chunk(c->key, thr, i, m, mk);
        if (!out)
            continue;
        const float *restrict br = chunk_in(c->io->in[0], c->act, i, m, bb);
        const float *restrict x = chunk_in(c->io->in[1], c->act, i, m, xb);
        float *restrict y = chunk_out(out, c->act, i, yb);
        for (size_t j = 0; j < m; j++)
            y[j] = x[j] + (mk[j] ? br[j] * sc : 0.0f);
        chunk_put(out, c->act, i, y, m);
    }
    return 0;
}

static int residual_bwd(struct call *c)
{
    size_t n = (size_t)(c->T * c->H);
    float dbuf[CHUNK], gb[CHUNK];
    const uint8_t *mask = saved_ptr(c, "dropout_mask");
    float sc = dropout_scale(c->hp->hidden_dropout);
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? n - i : CHUNK;
        const float *restrict dy = chunk_in(c->io->dout[0], c->act, i, m, dbuf);
        const uint8_t *restrict mk = mask + i;
        float *restrict g = gb;
        for (size_t j = 0; j < m; j++)
            g[j] = mk[j] ? dy[j] * sc : 0.0f;
        chunk_acc(c->io->din[0], c->act, i, g, m);
        chunk_acc(c->io->din[1], c->act, i, dy, m);
    }
    return 0;
}

/* ---- dispatch ---------------------------------------------------------------------------- */

struct kind {
    const char *name;
    int (*fwd)(struct call *);
    int (*bwd)(struct call *);
};
static const struct kind kinds[] = {
    {"embedding", embedding_fwd, embedding_bwd},
    {"ln1", layernorm_fwd, layernorm_bwd},
    {"ln2", layernorm_fwd, layernorm_bwd},
    {"final_layernorm", layernorm_fwd, layernorm_bwd},
    {"qkv", linear_fwd, linear_bwd},
    {"attn_proj", linear_fwd, linear_bwd},
    {"mlp_up", linear_fwd, linear_bwd},
    {"mlp_down", linear_fwd, linear_bwd},
    {"attn_core", hops_attn_fwd, hops_attn_bwd},
    {"gelu", gelu_fwd, gelu_bwd},
    {"attn_residual", residual_fwd, residual_bwd},
    {"mlp_residual", residual_fwd, residual_bwd},
    {"head", hops_head_fwd, hops_head_bwd},
    {"loss", hops_loss_fwd, hops_loss_bwd},
};

static int setup(struct call *c, const struct mpress_model *m, int op,
                 const struct mpress_host_hparams *hp, const struct mpress_rng_key *key,
                 const struct mpress_host_io *io, struct mpress_error *err, const struct kind **k)
{
    memset(c, 0, sizeof(*c));
    c->err = err;
    if (op < 0 || op >= m->n_ops)
        return mpress_error_set(err, MPRESS_EUSAGE, "op %d is not in the model (%d ops)", op,
                                m->n_ops);
    c->op = &m->ops[op];
    c->hp = hp;
    c->key = key;
    c->io = io;
    c->sc.src = io->scratch;
    c->sc.err = err;
    const struct mpress_model_config *cf = &m->config;
    c->S = cf->seq;
    c->B = cf->micro_batch;
    c->H = cf->hidden;
    c->A = cf->heads;
    c->D = cf->hidden / cf->heads;
    c->F = cf->ffn;
    c->V = cf->vocab;
    c->T = c->S * c->B;
    c->bert = strcmp(cf->family, "bert") == 0;
    c->flash = cf->flash_attention != 0;
    if (mpress_dtype_parse(cf->dtype, &c->act) != 0)
        return mpress_error_set(err, MPRESS_EUSAGE, "unknown dtype '%s'", cf->dtype);
    if (!(hp->hidden_dropout >= 0 && hp->hidden_dropout < 1 && hp->attn_dropout >= 0 &&
          hp->attn_dropout < 1 && hp->ln_eps > 0))
        return mpress_error_set(err, MPRESS_EUSAGE,
                                "dropout must be in [0, 1) and the LayerNorm epsilon positive");
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (strcmp(kinds[i].name, c->op->kind) == 0)
            *k = &kinds[i];
    if (!*k)
        return mpress_error_set(err, MPRESS_EUSAGE, "op %s: kind '%s' has no host kernel",
                                c->op->name, c->op->kind);
    for (int i = 0; i < c->op->n_weights; i++)
        if (!io->w[i])
            return mpress_error_set(err, MPRESS_EUSAGE, "op %s: weight %s has no buffer",
                                    c->op->name, c->op->weights[i].role);
    return 0;
}

int mpress_host_forward(const struct mpress_model *m, int op, const struct mpress_host_hparams *hp,
                        const struct mpress_rng_key *key, const struct mpress_host_io *io,
                        struct mpress_error *err)
{
    struct call c;
    const struct kind *k = NULL;
    int rc = setup(&c, m, op, hp, key, io, err, &k);
    if (rc)
        return rc;
    for (int i = 0; i < c.op->n_inputs; i++)
        if (!io->in[i])
            return mpress_error_set(err, MPRESS_EUSAGE, "op %s: input %s has no buffer",
                                    c.op->name, c.op->inputs[i].role);
    return k->fwd(&c);
}

int mpress_host_backward(const struct mpress_model *m, int op,
                         const struct mpress_host_hparams *hp, const struct mpress_rng_key *key,
                         const struct mpress_host_io *io, struct mpress_error *err)
{
    struct call c;
    const struct kind *k = NULL;
    int rc = setup(&c, m, op, hp, key, io, err, &k);
    if (rc)
        return rc;
    for (int i = 0; i < c.op->n_saved; i++)
        if (!io->saved[i])
            return mpress_error_set(err, MPRESS_EUSAGE, "op %s: saved %s has no buffer",
                                    c.op->name, c.op->saved[i].role);
    for (int i = 0; i < c.op->n_outputs; i++)
        if (!io->dout[i])
            return mpress_error_set(err, MPRESS_EUSAGE, "op %s: gradient of %s has no buffer",
                                    c.op->name, c.op->outputs[i].role);
    /* backward reads the data-loader inputs, no activation input */
    for (int i = 0; i < c.op->n_inputs; i++) {
        const struct mpress_model_tensor *t = &c.op->inputs[i];
        if (t->producer < 0 && !io->in[i])
            return mpress_error_set(err, MPRESS_EUSAGE, "op %s: input %s has no buffer",
                                    c.op->name, t->role);
    }
    return k->bwd(&c);
}

int mpress_host_saved_derive(const struct mpress_model *m, int op, int saved,
                             const void *producer_out, void *dst)
{
    const struct mpress_model_op *o = &m->ops[op];
    const struct mpress_model_tensor *t = &o->saved[saved];
    if (t->producer == op)
        return -1;
    if (strcmp(o->kind, "attn_core") == 0 && o->inputs[0].producer == t->producer) {
        int part = strcmp(t->role, "q") == 0 ? 0 : strcmp(t->role, "k") == 0 ? 1 : 2;
        const struct mpress_model_config *cf = &m->config;
        hops_qkv_split(producer_out, dst, part, cf->seq, cf->micro_batch, cf->hidden, cf->heads,
                       (size_t)mpress_dtype_size(t->dtype));
        return 0;
    }
    memcpy(dst, producer_out, (size_t)t->bytes);
    return 0;
}
