/* Forward and backward of every op kind of the model zoo on the CPU: fp32 arithmetic over
 * stored tensors (fp32, or bf16 for 16-bit configs), GEMMs through cblas_sgemm, dropout from
 * Philox. Layouts follow lib/model/transformer.c: activations [s, b, n] (row r = s·b_count + b),
 * token ids and labels [b, s], q, k, v [b, a, s, d]; attention's qkv row holds q in columns
 * [0, h), k in [h, 2h), v in [2h, 3h), head i at columns i·d .. i·d + d - 1 of each. The
 * formulas are in docs/runtime.md. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "host_ops.h"

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

/* ---- scratch: every allocation of one op call, freed together ---------------------------- */

#define SC_MAX 48
struct scratch {
    void *p[SC_MAX];
    int n, failed;
};

static void *sc_bytes(struct scratch *sc, size_t bytes)
{
    if (sc->n == SC_MAX) {
        sc->failed = 1;
        return NULL;
    }
    void *p = calloc(bytes ? bytes : 1, 1);
    if (!p)
        sc->failed = 1;
    else
        sc->p[sc->n++] = p;
    return p;
}

static float *sc_f(struct scratch *sc, size_t n)
{
    return sc_bytes(sc, n * sizeof(float));
}

/* An fp32 copy of a stored tensor (zeros when src is NULL). */
static float *sc_load(struct scratch *sc, const void *src, enum mpress_dtype t, size_t n)
{
    float *x = sc_f(sc, n);
    if (x && src)
        mpress_host_load(x, src, t, n);
    return x;
}

static void sc_free(struct scratch *sc)
{
    for (int i = 0; i < sc->n; i++)
        free(sc->p[i]);
    sc->n = 0;
}

/* Stores into dst when wanted. */
static void put(void *dst, enum mpress_dtype t, const float *src, size_t n)
{
    if (dst)
        mpress_host_store(dst, src, t, n);
}

/* dst += add, rounded once to dst's storage. */
static void acc(void *dst, enum mpress_dtype t, const float *add, size_t n)
{
    if (!dst)
        return;
    if (mpress_host_storage(t) == MPRESS_DTYPE_BF16) {
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = mpress_f32_to_bf16(mpress_bf16_to_f32(d[i]) + add[i]);
    } else {
        float *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] += add[i];
    }
}

/* ---- one op call ------------------------------------------------------------------------- */

struct call {
    const struct mpress_model_op *op;
    const struct mpress_host_hparams *hp;
    const struct mpress_rng_key *key;
    const struct mpress_host_io *io;
    struct mpress_error *err;
    int64_t S, B, H, A, D, F, V, T;
    enum mpress_dtype act;
    int bert, flash;
    struct scratch sc;
};

static size_t numel(const struct mpress_model_tensor *t)
{
    return (size_t)(t->bytes / (uint64_t)mpress_dtype_size(t->dtype));
}

static int find_role(const struct mpress_model_tensor *list, int n, const char *role)
{
    for (int i = 0; i < n; i++)
        if (strcmp(list[i].role, role) == 0)
            return i;
    return -1;
}

static int fail(struct call *c, int code, const char *what)
{
    sc_free(&c->sc);
    return mpress_error_set(c->err, code, "op %s: %s", c->op->name, what);
}

static int nomem(struct call *c)
{
    return fail(c, MPRESS_ESYSTEM, "out of memory for scratch tensors");
}

/* Index of weight / saved tensor `role`, checked at call setup. */
static int W(const struct call *c, const char *role)
{
    return find_role(c->op->weights, c->op->n_weights, role);
}
static int SV(const struct call *c, const char *role)
{
    return find_role(c->op->saved, c->op->n_saved, role);
}

static float *load_w(struct call *c, const char *role)
{
    int i = W(c, role);
    return sc_load(&c->sc, c->io->w[i], c->op->weights[i].dtype, numel(&c->op->weights[i]));
}

static float *load_saved(struct call *c, const char *role)
{
    int i = SV(c, role);
    return sc_load(&c->sc, c->io->saved[i], c->op->saved[i].dtype, numel(&c->op->saved[i]));
}

static void acc_w(struct call *c, const char *role, const float *g)
{
    int i = W(c, role);
    acc(c->io->dw[i], c->op->weights[i].dtype, g, numel(&c->op->weights[i]));
}

static void put_saved(struct call *c, const char *role, const float *x)
{
    int i = SV(c, role);
    put(c->io->saved[i], c->op->saved[i].dtype, x, numel(&c->op->saved[i]));
}

static void *saved_ptr(struct call *c, const char *role)
{
    return c->io->saved[SV(c, role)];
}

/* ---- shared kernels ---------------------------------------------------------------------- */

/* Row-major C[M,N] = alpha op(A) op(B) + beta C. */
static void gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                 int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

/* y[T,N] = x[T,K] W[N,K]^T + bias[N] (bias may be NULL). */
static void lin_fwd(const float *x, const float *w, const float *bias, int64_t T, int64_t K,
                    int64_t N, float *y)
{
    gemm(0, 1, T, N, K, 1.0f, x, K, w, K, 0.0f, y, N);
    if (bias)
        for (int64_t r = 0; r < T; r++)
            for (int64_t j = 0; j < N; j++)
                y[r * N + j] += bias[j];
}

/* dx[T,K] = dy W (written, when dx); dW[N,K] += dy^T x, db[N] += column sums of dy (when
 * given; fp32 accumulators). */
static void lin_bwd(const float *x, const float *w, const float *dy, int64_t T, int64_t K,
                    int64_t N, float *dx, float *dw, float *db)
{
    if (dx)
        gemm(0, 0, T, K, N, 1.0f, dy, N, w, K, 0.0f, dx, K);
    if (dw)
        gemm(1, 0, N, K, T, 1.0f, dy, N, x, K, 1.0f, dw, K);
    if (db)
        for (int64_t r = 0; r < T; r++)
            for (int64_t j = 0; j < N; j++)
                db[j] += dy[r * N + j];
}

/* LayerNorm over rows of H (Ba et al. 2016): biased variance, two passes. */
static void ln_fwd(const float *x, const float *g, const float *b, int64_t rows, int64_t H,
                   float eps, float *y)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * H;
        float mean = 0, var = 0;
        for (int64_t j = 0; j < H; j++)
            mean += xr[j];
        mean /= (float)H;
        for (int64_t j = 0; j < H; j++)
            var += (xr[j] - mean) * (xr[j] - mean);
        var /= (float)H;
        float rstd = 1.0f / sqrtf(var + eps);
        for (int64_t j = 0; j < H; j++)
            y[r * H + j] = (xr[j] - mean) * rstd * g[j] + b[j];
    }
}

/* dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dy g (written);
 * dg += sum dy xhat, db += sum dy. */
static void ln_bwd(const float *x, const float *g, const float *dy, int64_t rows, int64_t H,
                   float eps, float *dx, float *dg, float *db)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * H, *dyr = dy + r * H;
        float mean = 0, var = 0;
        for (int64_t j = 0; j < H; j++)
            mean += xr[j];
        mean /= (float)H;
        for (int64_t j = 0; j < H; j++)
            var += (xr[j] - mean) * (xr[j] - mean);
        var /= (float)H;
        float rstd = 1.0f / sqrtf(var + eps);
        float m1 = 0, m2 = 0;
        for (int64_t j = 0; j < H; j++) {
            float xh = (xr[j] - mean) * rstd, dxh = dyr[j] * g[j];
            m1 += dxh;
            m2 += dxh * xh;
            dg[j] += dyr[j] * xh;
            db[j] += dyr[j];
        }
        m1 /= (float)H;
        m2 /= (float)H;
        for (int64_t j = 0; j < H; j++) {
            float xh = (xr[j] - mean) * rstd, dxh = dyr[j] * g[j];
            dx[r * H + j] = rstd * (dxh - m1 - xh * m2);
        }
    }
}

/* GELU, tanh form (Hendrycks & Gimpel 2016, eq. for the approximation; PyTorch's
 * gelu(approximate='tanh')): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
#define GELU_C 0.7978845608028654f
#define GELU_K 0.044715f
static float gelu_f(float x)
{
    return 0.5f * x * (1.0f + tanhf(GELU_C * (x + GELU_K * x * x * x)));
}
static float gelu_d(float x)
{
    float t = tanhf(GELU_C * (x + GELU_K * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_C * (1.0f + 3.0f * GELU_K * x * x);
}

/* mask[i] = 1 when element i is kept: (word >> 8) / 2^24 >= p. */
static void dropout_mask(const struct mpress_rng_key *k, float p, uint64_t n, uint8_t *mask)
{
    uint32_t thr = (uint32_t)llround((double)p * 16777216.0);
    uint32_t w[1024];
    for (uint64_t i = 0; i < n; i += 1024) {
        uint64_t m = n - i < 1024 ? n - i : 1024;
        mpress_rng_fill(k, i, m, w);
        for (uint64_t j = 0; j < m; j++)
            mask[i + j] = (w[j] >> 8) >= thr;
    }
}

static float dropout_scale(float p)
{
    return 1.0f / (1.0f - p);
}

/* ---- embedding --------------------------------------------------------------------------- */

static int tok_check(struct call *c, const int64_t *tok, const int64_t *types)
{
    for (int64_t i = 0; i < c->T; i++) {
        if (tok[i] < 0 || tok[i] >= c->V)
            return fail(c, MPRESS_EINPUT, "token id out of the vocabulary");
        if (types && (types[i] < 0 || types[i] > 1))
            return fail(c, MPRESS_EINPUT, "token type is not 0 or 1");
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
    float *word = load_w(c, "word"), *pos = load_w(c, "position");
    float *tt = c->bert ? load_w(c, "token_type") : NULL;
    float *y = sc_f(&c->sc, (size_t)(c->T * H));
    uint8_t *mask = sc_bytes(&c->sc, (size_t)(c->T * H));
    if (c->sc.failed)
        return nomem(c);
    for (int64_t s = 0; s < S; s++)
        for (int64_t b = 0; b < B; b++) {
            int64_t r = s * B + b, t = tok[b * S + s];
            for (int64_t j = 0; j < H; j++) {
                float v = word[t * H + j] + pos[s * H + j];
                if (tt)
                    v += tt[types[b * S + s] * H + j];
                y[r * H + j] = v;
            }
        }
    float p = c->hp->hidden_dropout, sc = dropout_scale(p);
    dropout_mask(c->key, p, (uint64_t)(c->T * H), mask);
    for (int64_t i = 0; i < c->T * H; i++)
        y[i] = mask[i] ? y[i] * sc : 0.0f;
    put(c->io->out[0], c->act, y, (size_t)(c->T * H));
    if (saved_ptr(c, "dropout_mask"))
        memcpy(saved_ptr(c, "dropout_mask"), mask, (size_t)(c->T * H));
    sc_free(&c->sc);
    return 0;
}

static int embedding_bwd(struct call *c)
{
    const int64_t *tok = c->io->in[0], *types = c->bert ? c->io->in[1] : NULL;
    int rc = tok_check(c, tok, types);
    if (rc)
        return rc;
    int64_t S = c->S, B = c->B, H = c->H, V = c->V;
    float *g = sc_load(&c->sc, c->io->dout[0], c->act, (size_t)(c->T * H));
    float *dword = sc_f(&c->sc, (size_t)(V * H)), *dpos = sc_f(&c->sc, (size_t)(S * H));
    float *dtt = c->bert ? sc_f(&c->sc, (size_t)(2 * H)) : NULL;
    if (c->sc.failed)
        return nomem(c);
    const uint8_t *mask = saved_ptr(c, "dropout_mask");
    float sc = dropout_scale(c->hp->hidden_dropout);
    for (int64_t i = 0; i < c->T * H; i++)
        g[i] = mask[i] ? g[i] * sc : 0.0f;
    for (int64_t s = 0; s < S; s++)
        for (int64_t b = 0; b < B; b++) {
            int64_t r = s * B + b, t = tok[b * S + s];
            for (int64_t j = 0; j < H; j++) {
                dword[t * H + j] += g[r * H + j];
                dpos[s * H + j] += g[r * H + j];
                if (dtt)
                    dtt[types[b * S + s] * H + j] += g[r * H + j];
            }
        }
    acc_w(c, "word", dword);
    acc_w(c, "position", dpos);
    if (dtt)
        acc_w(c, "token_type", dtt);
    sc_free(&c->sc);
    return 0;
}

/* ---- layernorm, linear, gelu, residual --------------------------------------------------- */

static void save_input_copy(struct call *c, int saved_index, int input_index)
{
    if (c->io->saved[saved_index])
        memcpy(c->io->saved[saved_index], c->io->in[input_index],
               (size_t)c->op->saved[saved_index].bytes);
}

static int layernorm_fwd(struct call *c)
{
    size_t n = (size_t)(c->T * c->H);
    float *x = sc_load(&c->sc, c->io->in[0], c->act, n);
    float *g = load_w(c, "gamma"), *b = load_w(c, "beta"), *y = sc_f(&c->sc, n);
    if (c->sc.failed)
        return nomem(c);
    ln_fwd(x, g, b, c->T, c->H, c->hp->ln_eps, y);
    put(c->io->out[0], c->act, y, n);
    save_input_copy(c, SV(c, "input"), 0);
    sc_free(&c->sc);
    return 0;
}

static int layernorm_bwd(struct call *c)
{
    size_t n = (size_t)(c->T * c->H);
    float *x = load_saved(c, "input"), *g = load_w(c, "gamma");
    float *dy = sc_load(&c->sc, c->io->dout[0], c->act, n), *dx = sc_f(&c->sc, n);
    float *dg = sc_f(&c->sc, (size_t)c->H), *db = sc_f(&c->sc, (size_t)c->H);
    if (c->sc.failed)
        return nomem(c);
    ln_bwd(x, g, dy, c->T, c->H, c->hp->ln_eps, dx, dg, db);
    acc(c->io->din[0], c->act, dx, n);
    acc_w(c, "gamma", dg);
    acc_w(c, "beta", db);
    sc_free(&c->sc);
    return 0;
}

/* weight [n, k], input [s, b, k] */
static int linear_fwd(struct call *c)
{
    int64_t N = c->op->weights[W(c, "weight")].shape[0];
    int64_t K = c->op->weights[W(c, "weight")].shape[1];
    float *x = sc_load(&c->sc, c->io->in[0], c->act, (size_t)(c->T * K));
    float *w = load_w(c, "weight"), *b = load_w(c, "bias");
    float *y = sc_f(&c->sc, (size_t)(c->T * N));
    if (c->sc.failed)
        return nomem(c);
    lin_fwd(x, w, b, c->T, K, N, y);
    put(c->io->out[0], c->act, y, (size_t)(c->T * N));
    save_input_copy(c, SV(c, "input"), 0);
    sc_free(&c->sc);
    return 0;
}

static int linear_bwd(struct call *c)
{
    int64_t N = c->op->weights[W(c, "weight")].shape[0];
    int64_t K = c->op->weights[W(c, "weight")].shape[1];
    float *x = load_saved(c, "input"), *w = load_w(c, "weight");
    float *dy = sc_load(&c->sc, c->io->dout[0], c->act, (size_t)(c->T * N));
    float *dx = sc_f(&c->sc, (size_t)(c->T * K));
    float *dw = sc_f(&c->sc, (size_t)(N * K)), *db = sc_f(&c->sc, (size_t)N);
    if (c->sc.failed)
        return nomem(c);
    lin_bwd(x, w, dy, c->T, K, N, c->io->din[0] ? dx : NULL, dw, db);
    acc(c->io->din[0], c->act, dx, (size_t)(c->T * K));
    acc_w(c, "weight", dw);
    acc_w(c, "bias", db);
    sc_free(&c->sc);
    return 0;
}

static int gelu_fwd(struct call *c)
{
    size_t n = (size_t)(c->T * c->F);
    float *x = sc_load(&c->sc, c->io->in[0], c->act, n);
    if (c->sc.failed)
        return nomem(c);
    for (size_t i = 0; i < n; i++)
        x[i] = gelu_f(x[i]);
    put(c->io->out[0], c->act, x, n);
    save_input_copy(c, SV(c, "input"), 0);
    sc_free(&c->sc);
    return 0;
}

static int gelu_bwd(struct call *c)
{
    size_t n = (size_t)(c->T * c->F);
    float *x = load_saved(c, "input");
    float *dy = sc_load(&c->sc, c->io->dout[0], c->act, n);
    if (c->sc.failed)
        return nomem(c);
    for (size_t i = 0; i < n; i++)
        dy[i] *= gelu_d(x[i]);
    acc(c->io->din[0], c->act, dy, n);
    sc_free(&c->sc);
    return 0;
}

/* out = residual + dropout(branch) */
static int residual_fwd(struct call *c)
{
    size_t n = (size_t)(c->T * c->H);
    float *br = sc_load(&c->sc, c->io->in[0], c->act, n);
    float *x = sc_load(&c->sc, c->io->in[1], c->act, n);
    uint8_t *mask = sc_bytes(&c->sc, n);
    if (c->sc.failed)
        return nomem(c);
    float p = c->hp->hidden_dropout, sc = dropout_scale(p);
    dropout_mask(c->key, p, n, mask);
    for (size_t i = 0; i < n; i++)
        x[i] += mask[i] ? br[i] * sc : 0.0f;
    put(c->io->out[0], c->act, x, n);
    if (saved_ptr(c, "dropout_mask"))
        memcpy(saved_ptr(c, "dropout_mask"), mask, n);
    sc_free(&c->sc);
    return 0;
}

static int residual_bwd(struct call *c)
{
    size_t n = (size_t)(c->T * c->H);
    float *dy = sc_load(&c->sc, c->io->dout[0], c->act, n), *db = sc_f(&c->sc, n);
    if (c->sc.failed)
        return nomem(c);
    const uint8_t *mask = saved_ptr(c, "dropout_mask");
    float sc = dropout_scale(c->hp->hidden_dropout);
    for (size_t i = 0; i < n; i++)
        db[i] = mask[i] ? dy[i] * sc : 0.0f;
    acc(c->io->din[0], c->act, db, n);
    acc(c->io->din[1], c->act, dy, n);
    sc_free(&c->sc);
    return 0;
}

/* ---- attention --------------------------------------------------------------------------- */

/* Raw element copy between qkv [s, b, 3h] and one of q, k, v [b, a, s, d] (part 0, 1, 2). */
static void qkv_split(const void *qkv, void *dst, int part, int64_t S, int64_t B, int64_t H,
                      int64_t A, size_t esz)
{
    int64_t D = H / A;
    const char *src = qkv;
    char *d = dst;
    for (int64_t b = 0; b < B; b++)
        for (int64_t a = 0; a < A; a++)
            for (int64_t s = 0; s < S; s++)
                memcpy(d + (size_t)(((b * A + a) * S + s) * D) * esz,
                       src + (size_t)((s * B + b) * 3 * H + part * H + a * D) * esz, (size_t)D * esz);
}

/* Scores of one head: sc[S,S] = q k^T / sqrt(d), causal entries (j > i) -inf. */
static void head_scores(const float *q, const float *k, int64_t S, int64_t D, int causal,
                        float *sc)
{
    gemm(0, 1, S, S, D, 1.0f / sqrtf((float)D), q, D, k, D, 0.0f, sc, S);
    if (causal)
        for (int64_t i = 0; i < S; i++)
            for (int64_t j = i + 1; j < S; j++)
                sc[i * S + j] = -INFINITY;
}

static int attn_fwd(struct call *c)
{
    int64_t S = c->S, B = c->B, H = c->H, A = c->A, D = c->D;
    size_t esz = (size_t)mpress_dtype_size(c->act);
    size_t nq = (size_t)(B * A * S * D), nss = (size_t)(S * S);
    uint64_t nmask = (uint64_t)(B * A) * (uint64_t)nss;
    if (nmask > MPRESS_RNG_MAX_ELEMENTS)
        return fail(c, MPRESS_EUSAGE, "attention dropout mask exceeds the RNG stream");
    char *raw[3];
    float *qkv[3];
    for (int p = 0; p < 3; p++) {
        raw[p] = sc_bytes(&c->sc, nq * esz);
        qkv[p] = sc_f(&c->sc, nq);
    }
    float *sc = sc_f(&c->sc, nss), *ctx = sc_f(&c->sc, (size_t)(S * D));
    float *out = sc_f(&c->sc, (size_t)(c->T * H));
    uint8_t *mask = sc_bytes(&c->sc, (size_t)nmask);
    float *P = c->flash ? sc_f(&c->sc, nss) : sc_f(&c->sc, (size_t)nmask);
    float *Pd = c->flash ? sc_f(&c->sc, nss) : sc_f(&c->sc, (size_t)nmask);
    float *lse = c->flash ? sc_f(&c->sc, (size_t)(B * A * S)) : NULL;
    if (c->sc.failed)
        return nomem(c);
    for (int p = 0; p < 3; p++) {
        qkv_split(c->io->in[0], raw[p], p, S, B, H, A, esz);
        mpress_host_load(qkv[p], raw[p], c->act, nq);
    }
    float pd = c->hp->attn_dropout, dsc = dropout_scale(pd);
    dropout_mask(c->key, pd, nmask, mask);
    for (int64_t b = 0; b < B; b++)
        for (int64_t a = 0; a < A; a++) {
            size_t h = (size_t)(b * A + a);
            const float *q = qkv[0] + h * (size_t)(S * D), *k = qkv[1] + h * (size_t)(S * D);
            const float *v = qkv[2] + h * (size_t)(S * D);
            float *ph = c->flash ? P : P + h * nss, *pdh = c->flash ? Pd : Pd + h * nss;
            const uint8_t *mh = mask + h * nss;
            head_scores(q, k, S, D, !c->bert, sc);
            for (int64_t i = 0; i < S; i++) {
                float mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < S; j++)
                    mx = fmaxf(mx, sc[i * S + j]);
                for (int64_t j = 0; j < S; j++) {
                    float e = expf(sc[i * S + j] - mx);
                    ph[i * S + j] = e;
                    sum += e;
                }
                for (int64_t j = 0; j < S; j++) {
                    ph[i * S + j] /= sum;
                    pdh[i * S + j] = mh[i * S + j] ? ph[i * S + j] * dsc : 0.0f;
                }
                if (lse)
                    lse[h * (size_t)S + (size_t)i] = mx + logf(sum);
            }
            gemm(0, 0, S, D, S, 1.0f, pdh, S, v, D, 0.0f, ctx, D);
            for (int64_t s = 0; s < S; s++)
                memcpy(out + (s * B + b) * H + a * D, ctx + s * D, (size_t)D * sizeof(float));
        }
    put(c->io->out[0], c->act, out, (size_t)(c->T * H));
    static const char *const qkv_roles[3] = {"q", "k", "v"};
    for (int p = 0; p < 3; p++)
        if (saved_ptr(c, qkv_roles[p]))
            memcpy(saved_ptr(c, qkv_roles[p]), raw[p], nq * esz);
    if (c->flash) {
        put_saved(c, "softmax_lse", lse);
    } else {
        put_saved(c, "softmax_out", P);
        put_saved(c, "dropout_out", Pd);
        if (saved_ptr(c, "dropout_mask"))
            memcpy(saved_ptr(c, "dropout_mask"), mask, (size_t)nmask);
    }
    sc_free(&c->sc);
    return 0;
}

/* dV = Pd^T dC, dPd = dC V^T, dP = dPd m / (1 - p), dS = P (dP - rowsum(P dP)) / sqrt(d),
 * dQ = dS K, dK = dS^T Q. Unfused: P, m and Pd are saved. Flash-style: P = exp(scores - lse)
 * from the saved q, k and log-sum-exp, m drawn again from the same RNG key. */
static int attn_bwd(struct call *c)
{
    int64_t S = c->S, B = c->B, H = c->H, A = c->A, D = c->D;
    size_t nss = (size_t)(S * S);
    uint64_t nmask = (uint64_t)(B * A) * (uint64_t)nss;
    float *q = load_saved(c, "q"), *k = load_saved(c, "k"), *v = load_saved(c, "v");
    float *dout = sc_load(&c->sc, c->io->dout[0], c->act, (size_t)(c->T * H));
    float *dqkv = sc_f(&c->sc, (size_t)(c->T * 3 * H));
    float *dC = sc_f(&c->sc, (size_t)(S * D)), *dP = sc_f(&c->sc, nss);
    float *dq = sc_f(&c->sc, (size_t)(S * D)), *dk = sc_f(&c->sc, (size_t)(S * D));
    float *dv = sc_f(&c->sc, (size_t)(S * D));
    float *P, *Pd, *lse = NULL;
    uint8_t *mask;
    if (c->flash) {
        P = sc_f(&c->sc, nss);
        Pd = sc_f(&c->sc, nss);
        mask = sc_bytes(&c->sc, (size_t)nmask);
        lse = load_saved(c, "softmax_lse");
    } else {
        P = load_saved(c, "softmax_out");
        Pd = load_saved(c, "dropout_out");
        mask = saved_ptr(c, "dropout_mask");
    }
    if (c->sc.failed)
        return nomem(c);
    float pd = c->hp->attn_dropout, dsc = dropout_scale(pd), rs = 1.0f / sqrtf((float)D);
    if (c->flash)
        dropout_mask(c->key, pd, nmask, mask);
    for (int64_t b = 0; b < B; b++)
        for (int64_t a = 0; a < A; a++) {
            size_t h = (size_t)(b * A + a), off = h * (size_t)(S * D);
            const float *qh = q + off, *kh = k + off, *vh = v + off;
            const uint8_t *mh = mask + h * nss;
            float *ph = P, *pdh = Pd;
            if (c->flash) {
                head_scores(qh, kh, S, D, !c->bert, ph);
                for (int64_t i = 0; i < S; i++)
                    for (int64_t j = 0; j < S; j++) {
                        float e = expf(ph[i * S + j] - lse[h * (size_t)S + (size_t)i]);
                        ph[i * S + j] = e;
                        pdh[i * S + j] = mh[i * S + j] ? e * dsc : 0.0f;
                    }
            } else {
                ph = P + h * nss;
                pdh = Pd + h * nss;
            }
            for (int64_t s = 0; s < S; s++)
                memcpy(dC + s * D, dout + (s * B + b) * H + a * D, (size_t)D * sizeof(float));
            gemm(1, 0, S, D, S, 1.0f, pdh, S, dC, D, 0.0f, dv, D);
            gemm(0, 1, S, S, D, 1.0f, dC, D, vh, D, 0.0f, dP, S);
            for (int64_t i = 0; i < S; i++) {
                float dot = 0;
                for (int64_t j = 0; j < S; j++) {
                    float g = mh[i * S + j] ? dP[i * S + j] * dsc : 0.0f;
                    dP[i * S + j] = g;
                    dot += g * ph[i * S + j];
                }
                for (int64_t j = 0; j < S; j++)
                    dP[i * S + j] = ph[i * S + j] * (dP[i * S + j] - dot) * rs;
            }
            gemm(0, 0, S, D, S, 1.0f, dP, S, kh, D, 0.0f, dq, D);
            gemm(1, 0, S, D, S, 1.0f, dP, S, qh, D, 0.0f, dk, D);
            for (int64_t s = 0; s < S; s++) {
                float *row = dqkv + (s * B + b) * 3 * H + a * D;
                memcpy(row, dq + s * D, (size_t)D * sizeof(float));
                memcpy(row + H, dk + s * D, (size_t)D * sizeof(float));
                memcpy(row + 2 * H, dv + s * D, (size_t)D * sizeof(float));
            }
        }
    acc(c->io->din[0], c->act, dqkv, (size_t)(c->T * 3 * H));
    sc_free(&c->sc);
    return 0;
}

/* ---- head -------------------------------------------------------------------------------- */

/* GPT: logits = x word^T. BERT: t = x Wd^T + bd (dense_out), g = gelu(t) (ln_input),
 * u = LN(g) (decoder_input), logits = u word^T + decoder_bias; on the first token x0 = x[0]:
 * p = tanh(x0 Wp^T + bp) (pooler_out), nsp_logits = p Wn^T + bn. */
static int head_fwd(struct call *c)
{
    int64_t T = c->T, H = c->H, V = c->V, B = c->B;
    float *x = sc_load(&c->sc, c->io->in[0], c->act, (size_t)(T * H));
    float *word = load_w(c, "word"), *logits = sc_f(&c->sc, (size_t)(T * V));
    if (c->sc.failed)
        return nomem(c);
    save_input_copy(c, SV(c, "input"), 0);
    if (!c->bert) {
        lin_fwd(x, word, NULL, T, H, V, logits);
        put(c->io->out[0], c->act, logits, (size_t)(T * V));
        sc_free(&c->sc);
        return 0;
    }
    float *wd = load_w(c, "dense_weight"), *bd = load_w(c, "dense_bias");
    float *lg = load_w(c, "ln_gamma"), *lb = load_w(c, "ln_beta");
    float *decb = load_w(c, "decoder_bias");
    float *wp = load_w(c, "pooler_weight"), *bp = load_w(c, "pooler_bias");
    float *wn = load_w(c, "nsp_weight"), *bn = load_w(c, "nsp_bias");
    float *t = sc_f(&c->sc, (size_t)(T * H)), *g = sc_f(&c->sc, (size_t)(T * H));
    float *u = sc_f(&c->sc, (size_t)(T * H)), *p = sc_f(&c->sc, (size_t)(B * H));
    float *nsp = sc_f(&c->sc, (size_t)(B * 2));
    if (c->sc.failed)
        return nomem(c);
    lin_fwd(x, wd, bd, T, H, H, t);
    for (int64_t i = 0; i < T * H; i++)
        g[i] = gelu_f(t[i]);
    ln_fwd(g, lg, lb, T, H, c->hp->ln_eps, u);
    lin_fwd(u, word, decb, T, H, V, logits);
    lin_fwd(x, wp, bp, B, H, H, p); /* rows 0 .. b-1 of x are sequence position 0 */
    for (int64_t i = 0; i < B * H; i++)
        p[i] = tanhf(p[i]);
    lin_fwd(p, wn, bn, B, H, 2, nsp);
    put(c->io->out[0], c->act, logits, (size_t)(T * V));
    put(c->io->out[1], c->act, nsp, (size_t)(B * 2));
    put_saved(c, "dense_out", t);
    put_saved(c, "ln_input", g);
    put_saved(c, "decoder_input", u);
    put_saved(c, "pooler_out", p);
    sc_free(&c->sc);
    return 0;
}

static int head_bwd(struct call *c)
{
    int64_t T = c->T, H = c->H, V = c->V, B = c->B;
    float *x = load_saved(c, "input"), *word = load_w(c, "word");
    float *dl = sc_load(&c->sc, c->io->dout[0], c->act, (size_t)(T * V));
    float *dword = sc_f(&c->sc, (size_t)(V * H)), *dx = sc_f(&c->sc, (size_t)(T * H));
    if (c->sc.failed)
        return nomem(c);
    if (!c->bert) {
        lin_bwd(x, word, dl, T, H, V, dx, dword, NULL);
        acc(c->io->din[0], c->act, dx, (size_t)(T * H));
        acc_w(c, "word", dword);
        sc_free(&c->sc);
        return 0;
    }
    float *dnsp = sc_load(&c->sc, c->io->dout[1], c->act, (size_t)(B * 2));
    float *t = load_saved(c, "dense_out"), *g = load_saved(c, "ln_input");
    float *u = load_saved(c, "decoder_input"), *p = load_saved(c, "pooler_out");
    float *wd = load_w(c, "dense_weight"), *lg = load_w(c, "ln_gamma");
    float *wp = load_w(c, "pooler_weight"), *wn = load_w(c, "nsp_weight");
    float *ddecb = sc_f(&c->sc, (size_t)V), *du = sc_f(&c->sc, (size_t)(T * H));
    float *dg = sc_f(&c->sc, (size_t)(T * H)), *dlg = sc_f(&c->sc, (size_t)H);
    float *dlb = sc_f(&c->sc, (size_t)H), *dwd = sc_f(&c->sc, (size_t)(H * H));
    float *dbd = sc_f(&c->sc, (size_t)H), *dwn = sc_f(&c->sc, (size_t)(2 * H));
    float *dbn = sc_f(&c->sc, 2), *dp = sc_f(&c->sc, (size_t)(B * H));
    float *dwp = sc_f(&c->sc, (size_t)(H * H)), *dbp = sc_f(&c->sc, (size_t)H);
    float *dx0 = sc_f(&c->sc, (size_t)(B * H));
    if (c->sc.failed)
        return nomem(c);
    lin_bwd(u, word, dl, T, H, V, du, dword, ddecb);
    ln_bwd(g, lg, du, T, H, c->hp->ln_eps, dg, dlg, dlb);
    for (int64_t i = 0; i < T * H; i++)
        dg[i] *= gelu_d(t[i]);
    lin_bwd(x, wd, dg, T, H, H, dx, dwd, dbd);
    lin_bwd(p, wn, dnsp, B, H, 2, dp, dwn, dbn);
    for (int64_t i = 0; i < B * H; i++)
        dp[i] *= 1.0f - p[i] * p[i];
    lin_bwd(x, wp, dp, B, H, H, dx0, dwp, dbp);
    for (int64_t i = 0; i < B * H; i++)
        dx[i] += dx0[i];
    acc(c->io->din[0], c->act, dx, (size_t)(T * H));
    acc_w(c, "dense_weight", dwd);
    acc_w(c, "dense_bias", dbd);
    acc_w(c, "ln_gamma", dlg);
    acc_w(c, "ln_beta", dlb);
    acc_w(c, "word", dword);
    acc_w(c, "decoder_bias", ddecb);
    acc_w(c, "pooler_weight", dwp);
    acc_w(c, "pooler_bias", dbp);
    acc_w(c, "nsp_weight", dwn);
    acc_w(c, "nsp_bias", dbn);
    sc_free(&c->sc);
    return 0;
}

/* ---- loss -------------------------------------------------------------------------------- */

/* Softmax of rows of n logits into p; returns the sum over rows of -log p[label] (double). */
static int softmax_xent(struct call *c, const float *z, const int64_t *labels, int64_t rows,
                        int64_t n, int label_stride_s, float *p, double *sum)
{
    *sum = 0;
    for (int64_t r = 0; r < rows; r++) {
        /* row r = s·b_count + b; its label is labels[b·s_count + s] (or labels[r] for NSP) */
        int64_t li = label_stride_s ? (r % c->B) * c->S + r / c->B : r;
        int64_t lab = labels[li];
        if (lab < 0 || lab >= n)
            return fail(c, MPRESS_EINPUT, "label out of range");
        const float *zr = z + r * n;
        float mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < n; j++)
            mx = fmaxf(mx, zr[j]);
        for (int64_t j = 0; j < n; j++) {
            float e = expf(zr[j] - mx);
            p[r * n + j] = e;
            s += e;
        }
        for (int64_t j = 0; j < n; j++)
            p[r * n + j] /= s;
        *sum += (double)(logf(s) + mx - zr[lab]);
    }
    return 0;
}

/* loss = mean over s·b tokens of -log softmax(logits)[label] (+ BERT: mean over b of the NSP
 * cross-entropy). Saves both softmaxes in fp32 (softmax, BERT's nsp_softmax). */
static int loss_fwd(struct call *c)
{
    int64_t T = c->T, V = c->V, B = c->B;
    float *z = sc_load(&c->sc, c->io->in[0], c->act, (size_t)(T * V));
    float *p = sc_f(&c->sc, (size_t)(T * V));
    float *zn = c->bert ? sc_load(&c->sc, c->io->in[2], c->act, (size_t)(B * 2)) : NULL;
    float *pn = c->bert ? sc_f(&c->sc, (size_t)(B * 2)) : NULL;
    if (c->sc.failed)
        return nomem(c);
    double sum, nsum = 0;
    int rc = softmax_xent(c, z, c->io->in[1], T, V, 1, p, &sum);
    if (!rc && c->bert)
        rc = softmax_xent(c, zn, c->io->in[3], B, 2, 0, pn, &nsum);
    if (rc)
        return rc;
    float loss = (float)(sum / (double)T);
    if (c->bert)
        loss += (float)(nsum / (double)B);
    if (c->io->out[0])
        memcpy(c->io->out[0], &loss, sizeof(loss));
    put_saved(c, "softmax", p);
    if (c->bert)
        put_saved(c, "nsp_softmax", pn);
    sc_free(&c->sc);
    return 0;
}

static int loss_bwd(struct call *c)
{
    int64_t T = c->T, V = c->V, B = c->B;
    float dl;
    memcpy(&dl, c->io->dout[0], sizeof(dl));
    float *p = load_saved(c, "softmax");
    float *pn = c->bert ? load_saved(c, "nsp_softmax") : NULL;
    if (c->sc.failed)
        return nomem(c);
    const int64_t *labels = c->io->in[1];
    float g = dl / (float)T;
    for (int64_t r = 0; r < T; r++) {
        int64_t lab = labels[(r % B) * c->S + r / B];
        if (lab < 0 || lab >= V)
            return fail(c, MPRESS_EINPUT, "label out of range");
        for (int64_t j = 0; j < V; j++)
            p[r * V + j] = (p[r * V + j] - (j == lab ? 1.0f : 0.0f)) * g;
    }
    acc(c->io->din[0], c->act, p, (size_t)(T * V));
    if (c->bert) {
        const int64_t *nl = c->io->in[3];
        float gn = dl / (float)B;
        for (int64_t r = 0; r < B; r++) {
            if (nl[r] < 0 || nl[r] >= 2)
                return fail(c, MPRESS_EINPUT, "label out of range");
            for (int64_t j = 0; j < 2; j++)
                pn[r * 2 + j] = (pn[r * 2 + j] - (j == nl[r] ? 1.0f : 0.0f)) * gn;
        }
        acc(c->io->din[2], c->act, pn, (size_t)(B * 2));
    }
    sc_free(&c->sc);
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
    {"attn_core", attn_fwd, attn_bwd},
    {"gelu", gelu_fwd, gelu_bwd},
    {"attn_residual", residual_fwd, residual_bwd},
    {"mlp_residual", residual_fwd, residual_bwd},
    {"head", head_fwd, head_bwd},
    {"loss", loss_fwd, loss_bwd},
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
        qkv_split(producer_out, dst, part, cf->seq, cf->micro_batch, cf->hidden, cf->heads,
                  (size_t)mpress_dtype_size(t->dtype));
        return 0;
    }
    memcpy(dst, producer_out, (size_t)t->bytes);
    return 0;
}
