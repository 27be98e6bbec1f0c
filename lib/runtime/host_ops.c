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
 * the backend's arena), counted and freed before the op returns. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "host_ops.h"

/* GCC vectorises at -O2 (the project's debugoptimized build) only loops whose trip count needs
 * no scalar epilogue (its "very cheap" cost model), and never one with a float comparison while
 * -ftrapping-math is on. These kernels are loops over runtime lengths with selects, so this
 * file asks for the dynamic cost model and no trapping math (no value changes: nothing here
 * reads the floating-point environment). Clang vectorises them at -O2 as they are. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic", "no-trapping-math")
#endif

/* The hottest element-wise loops are compiled for AVX2 and AVX-512 as well, and the CPU's best
 * is chosen when the library loads (GCC's target_clones, x86-64 with ifunc support). The
 * clones compute the same values: these loops are element by element (or in the fixed lanes of
 * sum_f), without contraction into fused multiply-adds (ISO C mode: -ffp-contract=off), so a
 * wider vector gives the same bits. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define HOT __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HOT
#endif

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

/* Elements per stack chunk of the element-wise loops (4 KiB of fp32). */
#define CHUNK 1024

/* ---- scratch: every allocation of one op call, freed together ---------------------------- */

#define SC_MAX 48
struct scratch {
    const struct mpress_host_scratch *src;  /* NULL: malloc */
    struct mpress_error *err;
    void *p[SC_MAX];
    uint64_t bytes[SC_MAX];
    uint64_t cur;                           /* bytes held now */
    int n, failed, rc;                      /* rc: the allocator's error (err filled) */
};

static void *sc_bytes(struct scratch *sc, size_t bytes)
{
    if (sc->failed)
        return NULL;
    if (sc->n == SC_MAX) {
        sc->failed = 1;
        return NULL;
    }
    void *p = NULL;
    if (sc->src) {
        int rc = sc->src->alloc(sc->src->ctx, bytes, &p, sc->err);
        if (rc) {
            sc->failed = 1;
            sc->rc = rc;
            return NULL;
        }
    } else {
        p = malloc(bytes ? bytes : 1);
    }
    if (!p) {
        sc->failed = 1;
        return NULL;
    }
    sc->p[sc->n] = p;
    sc->bytes[sc->n++] = bytes;
    sc->cur += bytes;
    return p;
}

static float *sc_f(struct scratch *sc, size_t n)
{
    return sc_bytes(sc, n * sizeof(float));
}

static float *sc_fz(struct scratch *sc, size_t n)
{
    float *x = sc_f(sc, n);
    if (x)
        memset(x, 0, n * sizeof(float));
    return x;
}

/* Frees the newest allocations down to `keep` of them. */
static void sc_pop(struct scratch *sc, int keep)
{
    while (sc->n > keep) {
        sc->n--;
        if (sc->src)
            sc->src->free(sc->src->ctx, sc->p[sc->n], sc->bytes[sc->n]);
        else
            free(sc->p[sc->n]);
        sc->cur -= sc->bytes[sc->n];
    }
}

static void sc_free(struct scratch *sc)
{
    sc_pop(sc, 0);
}

/* ---- storage helpers --------------------------------------------------------------------- */

static int is32(enum mpress_dtype t)
{
    return mpress_host_storage(t) == MPRESS_DTYPE_FP32;
}

static void load_bf16(float *restrict d, const uint16_t *restrict s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)s[i] << 16;
        memcpy(&d[i], &u, sizeof(u));
    }
}

/* fp32 view of elements [off, off + n) of a stored tensor: the buffer itself for fp32 storage,
 * else converted into buf (n elements). */
static const float *chunk_in(const void *src, enum mpress_dtype t, size_t off, size_t n,
                             float *buf)
{
    if (is32(t))
        return (const float *)src + off;
    load_bf16(buf, (const uint16_t *)src + off, n);
    return buf;
}

/* Where to compute elements [off, off + n) of a result stored at dst: dst itself for fp32
 * storage, else buf (then chunk_put stores it). */
static float *chunk_out(void *dst, enum mpress_dtype t, size_t off, float *buf)
{
    return dst && is32(t) ? (float *)dst + off : buf;
}

static void chunk_put(void *dst, enum mpress_dtype t, size_t off, const float *x, size_t n)
{
    if (dst && !is32(t))
        mpress_host_store((uint16_t *)dst + off, x, t, n);
}

/* dst[off ..] += add, rounded once to dst's storage. */
static void chunk_acc(void *dst, enum mpress_dtype t, size_t off, const float *restrict add,
                      size_t n)
{
    if (!dst)
        return;
    if (is32(t)) {
        float *restrict d = (float *)dst + off;
        for (size_t i = 0; i < n; i++)
            d[i] += add[i];
    } else {
        uint16_t *d = (uint16_t *)dst + off;
        for (size_t i = 0; i < n; i++)
            d[i] = mpress_f32_to_bf16(mpress_bf16_to_f32(d[i]) + add[i]);
    }
}

static void acc(void *dst, enum mpress_dtype t, const float *add, size_t n)
{
    chunk_acc(dst, t, 0, add, n);
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

/* A scratch allocation failed: the allocator's own error (an arena's "out of memory on gpu
 * ..."), or malloc's. */
static int nomem(struct call *c)
{
    int rc = c->sc.rc;
    if (rc) {
        sc_free(&c->sc);
        return rc;
    }
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

/* An fp32 view of a whole stored tensor: itself (fp32) or a converted copy in scratch. */
static const float *view(struct call *c, const void *src, enum mpress_dtype t, size_t n)
{
    if (is32(t))
        return src;
    float *x = sc_f(&c->sc, n);
    if (x)
        load_bf16(x, src, n);
    return x;
}

static void *saved_ptr(struct call *c, const char *role)
{
    return c->io->saved[SV(c, role)];
}

/* ---- fast math --------------------------------------------------------------------------- */

/* exp(x) without libm, in a form the vectoriser takes: x = n ln 2 + r with n = round(x log2 e)
 * (the 1.5·2^23 rounding trick) and r reduced in two steps (ln 2 = 0.693359375 - 2.12194440e-4
 * + ..., the first part exact in 9 bits, so n·it is exact), exp(r) by its Taylor series to
 * degree 7 (|r| <= 0.347: truncation below 1e-8 relative), times 2^n built in the exponent
 * bits. Relative error within about 2 ulp on [-87, 88]; 0 below -87 (exp(-87) = 1.6e-38), and
 * exp(88) above 88. Deterministic: no libm, no lookup, the same bits on every call. */
static inline float exp_fast(float x)
{
    float c = x > -87.0f ? x : -87.0f;
    c = c < 88.0f ? c : 88.0f;
    float t = c * 1.44269504088896341f + 12582912.0f;
    float n = t - 12582912.0f;
    int32_t ti;
    memcpy(&ti, &t, sizeof(ti));
    float r = c - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t bits = (ti - 0x4B400000 + 127) * 8388608;
    float s;
    memcpy(&s, &bits, sizeof(s));
    float e = p * s;
    return x > -87.0f ? e : 0.0f;
}

/* GELU, tanh form (Hendrycks & Gimpel 2016, eq. for the approximation; PyTorch's
 * gelu(approximate='tanh')): 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed
 * as x·σ(2u) (0.5 (1 + tanh u) = σ(2u) = 1 / (1 + exp(-2u)): the same function, with no
 * cancellation for negative x). The derivative from the same σ: σ + x·2σ(1 - σ)·u'. */
#define GELU_C 0.7978845608028654f
#define GELU_K 0.044715f
static inline float gelu_sig(float x)
{
    float u = GELU_C * (x + GELU_K * x * x * x);
    return 1.0f / (1.0f + exp_fast(-2.0f * u));
}

HOT static void gelu_rows(const float *restrict x, float *restrict y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] * gelu_sig(x[i]);
}

/* g[i] = dy[i]·gelu'(x[i]) */
HOT static void gelu_grad(const float *restrict x, const float *restrict dy, float *restrict g,
                      size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float s = gelu_sig(x[i]);
        float du = GELU_C * (1.0f + 3.0f * GELU_K * x[i] * x[i]);
        g[i] = dy[i] * (s + x[i] * 2.0f * s * (1.0f - s) * du);
    }
}

/* Sums in eight lanes (a fixed order, so the same bits on every call, and vectorisable). */
static float sum_f(const float *restrict x, size_t n)
{
    float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            a[j] += x[i + j];
    for (int j = 0; i < n; i++, j++)
        a[j] += x[i];
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

static float max_f(const float *restrict x, size_t n)
{
    float a[8];
    for (int j = 0; j < 8; j++)
        a[j] = -INFINITY;
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            a[j] = x[i + j] > a[j] ? x[i + j] : a[j];
    for (int j = 0; i < n; i++, j++)
        a[j] = x[i] > a[j] ? x[i] : a[j];
    float m = a[0];
    for (int j = 1; j < 8; j++)
        m = a[j] > m ? a[j] : m;
    return m;
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

/* p[j] = exp(z[j] - mx), returns Σ p (eight lanes). */
HOT static float exp_sum(const float *z, float mx, float *p, size_t n)
{
    for (size_t j = 0; j < n; j++)
        p[j] = exp_fast(z[j] - mx);
    return sum_f(p, n);
}

/* ---- GEMMs ------------------------------------------------------------------------------- */

/* Row-major C[M,N] = alpha op(A) op(B) + beta C. */
static void gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                 int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

/* A stored matrix operand: op(X)[i, j] is X[i·ld + j] (or X[j·ld + i] transposed). */
struct mat {
    const void *p;
    enum mpress_dtype t;
    int64_t ld;
    int trans;
};

/* Tile sizes of the 16-bit GEMM: fp32 copies of an MT x KT tile of op(A), a KT x MT tile of
 * op(B) and an MT x MT result on the stack (80 KiB). */
#define MT 64
#define KT 128

/* fp32 copy of op(X)[i0 .. i0+m, j0 .. j0+n] into buf (n columns). */
static void tile_load(const struct mat *x, int64_t i0, int64_t j0, int64_t m, int64_t n,
                      float *buf)
{
    if (!x->trans) {
        for (int64_t i = 0; i < m; i++) {
            const float *r = chunk_in(x->p, x->t, (size_t)((i0 + i) * x->ld + j0), (size_t)n,
                                      buf + i * n);
            if (r != buf + i * n)
                memcpy(buf + i * n, r, (size_t)n * sizeof(float));
        }
        return;
    }
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < m; i++) {
            size_t k = (size_t)((j0 + j) * x->ld + i0 + i);
            buf[i * n + j] = is32(x->t) ? ((const float *)x->p)[k]
                                        : mpress_bf16_to_f32(((const uint16_t *)x->p)[k]);
        }
}

/* C[M,N] (stored, dtype ct, leading dimension ldc) = op(A) op(B) (+ bias[N]) when acc is 0,
 * C += op(A) op(B) when acc is 1. fp32 operands go to cblas_sgemm as they are (accumulation
 * with beta = 1); 16-bit ones in tiles converted on the stack, each result element rounded to
 * C's storage once. */
static void gemm_st(const struct mat *a, const struct mat *b, int64_t M, int64_t N, int64_t K,
                    const void *bias, int accumulate, void *C, enum mpress_dtype ct, int64_t ldc)
{
    if (is32(a->t) && is32(b->t) && is32(ct)) {
        float *c = C;
        gemm(a->trans, b->trans, M, N, K, 1.0f, a->p, a->ld, b->p, b->ld,
             accumulate ? 1.0f : 0.0f, c, ldc);
        const float *restrict bs = bias;
        if (bias)
            for (int64_t r = 0; r < M; r++) {
                float *restrict cr = c + r * ldc;
                for (int64_t j = 0; j < N; j++)
                    cr[j] += bs[j];
            }
        return;
    }
    float ta[MT * KT], tb[KT * MT], tc[MT * MT], bb[MT];
    for (int64_t i0 = 0; i0 < M; i0 += MT)
        for (int64_t j0 = 0; j0 < N; j0 += MT) {
            int64_t m = M - i0 < MT ? M - i0 : MT, n = N - j0 < MT ? N - j0 : MT;
            memset(tc, 0, sizeof(tc));
            for (int64_t k0 = 0; k0 < K; k0 += KT) {
                int64_t k = K - k0 < KT ? K - k0 : KT;
                tile_load(a, i0, k0, m, k, ta);
                tile_load(b, k0, j0, k, n, tb);
                gemm(0, 0, m, n, k, 1.0f, ta, k, tb, n, 1.0f, tc, n);
            }
            const float *bs = bias ? chunk_in(bias, ct, (size_t)j0, (size_t)n, bb) : NULL;
            for (int64_t i = 0; i < m; i++) {
                float *row = tc + i * n;
                if (bs)
                    for (int64_t j = 0; j < n; j++)
                        row[j] += bs[j];
                size_t off = (size_t)((i0 + i) * ldc + j0);
                if (accumulate)
                    chunk_acc(C, ct, off, row, (size_t)n);
                else if (is32(ct))
                    memcpy((float *)C + off, row, (size_t)n * sizeof(float));
                else
                    mpress_host_store((uint16_t *)C + off, row, ct, (size_t)n);
            }
        }
}

/* Column sums of dy[T,N] added to db (stored, dtype t), each rounded once. */
static void colsum_acc(const void *dy, enum mpress_dtype dt, int64_t T, int64_t N, void *db,
                       enum mpress_dtype t)
{
    float s[CHUNK], buf[CHUNK];
    for (int64_t j0 = 0; j0 < N; j0 += CHUNK) {
        size_t n = (size_t)(N - j0 < CHUNK ? N - j0 : CHUNK);
        memset(s, 0, n * sizeof(float));
        for (int64_t r = 0; r < T; r++) {
            const float *restrict d = chunk_in(dy, dt, (size_t)(r * N + j0), n, buf);
            for (size_t j = 0; j < n; j++)
                s[j] += d[j];
        }
        chunk_acc(db, t, (size_t)j0, s, n);
    }
}

/* A stored matrix with its dtype. */
static struct mat M_(const void *p, enum mpress_dtype t, int64_t ld, int trans)
{
    struct mat m = {p, t, ld, trans};
    return m;
}

/* ---- dropout ----------------------------------------------------------------------------- */

static uint32_t drop_thr(float p)
{
    return (uint32_t)llround((double)p * 16777216.0);
}

/* Words [first, first + n) of a stream (1 <= n <= CHUNK), as mpress_rng_fill gives them:
 * Philox 4x32-10 (host_rng.c, docs/runtime.md) on the blocks first / 4 .. (first + n - 1) / 4
 * side by side, one round of all of them at a time, so that the rounds vectorise. */
HOT static void rng_words(const struct mpress_rng_key *k, uint64_t first, size_t n, uint32_t *out)
{
    enum { NB = CHUNK / 4 + 2 };
    uint32_t c0[NB], c1[NB], c2[NB], c3[NB];
    uint64_t b0 = first >> 2;
    size_t nb = (size_t)(((first + n - 1) >> 2) - b0 + 1);
    for (size_t j = 0; j < nb; j++) {
        c0[j] = (uint32_t)(b0 + j);
        c1[j] = k->op;
        c2[j] = k->micro_batch;
        c3[j] = k->step;
    }
    uint32_t k0 = (uint32_t)k->seed, k1 = (uint32_t)(k->seed >> 32);
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        for (size_t j = 0; j < nb; j++) {
            uint64_t p0 = (uint64_t)0xD2511F53u * c0[j], p1 = (uint64_t)0xCD9E8D57u * c2[j];
            uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[j] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3[j] ^ k1;
            c1[j] = (uint32_t)p1;
            c3[j] = (uint32_t)p0;
            c0[j] = n0;
            c2[j] = n2;
        }
    }
    uint32_t all[4 * NB];
    for (size_t j = 0; j < nb; j++) {
        all[4 * j] = c0[j];
        all[4 * j + 1] = c1[j];
        all[4 * j + 2] = c2[j];
        all[4 * j + 3] = c3[j];
    }
    memcpy(out, all + (first & 3), n * sizeof(uint32_t));
}

/* Keep flags of elements [first, first + n) of the stream (n <= CHUNK): element i is kept when
 * (word_i >> 8) / 2^24 >= p. */
static void mask_chunk(const struct mpress_rng_key *k, uint32_t thr, uint64_t first, size_t n,
                       uint8_t *mask)
{
    uint32_t w[CHUNK];
    if (n == 0)
        return;
    rng_words(k, first, n, w);
    for (size_t j = 0; j < n; j++)
        mask[j] = (w[j] >> 8) >= thr;
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

static void save_input_copy(struct call *c, int saved_index, int input_index)
{
    if (c->io->saved[saved_index])
        memcpy(c->io->saved[saved_index], c->io->in[input_index],
               (size_t)c->op->saved[saved_index].bytes);
}

/* Rows of H of 16-bit tensors are converted into stack rows up to this length (else scratch). */
#define LN_MAX 2048

/* An fp32 view of n elements: src itself (fp32), converted into buf (when n <= cap), or a
 * converted copy in scratch. */
static const float *view_small(struct call *c, const void *src, enum mpress_dtype t, size_t n,
                               float *buf, size_t cap)
{
    if (is32(t) || n > cap)
        return view(c, src, t, n);
    load_bf16(buf, src, n);
    return buf;
}

/* An fp32 row buffer of n elements: buf when n <= cap, else scratch. */
static float *row_buf(struct call *c, size_t n, float *buf, size_t cap)
{
    return n <= cap ? buf : sc_f(&c->sc, n);
}

/* LayerNorm over rows of H (Ba et al. 2016): biased variance, two passes; x, y stored (dtype
 * xt, yt), gamma and beta fp32. */
static int ln_fwd(struct call *c, const void *x, enum mpress_dtype xt, const float *g,
                  const float *b, int64_t rows, int64_t H, float eps, void *y,
                  enum mpress_dtype yt)
{
    float xs[LN_MAX], ys[LN_MAX];
    size_t h = (size_t)H;
    float *xb = is32(xt) ? NULL : row_buf(c, h, xs, LN_MAX);
    float *yb = is32(yt) ? NULL : row_buf(c, h, ys, LN_MAX);
    if (c->sc.failed)
        return nomem(c);
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
static int ln_bwd(struct call *c, const void *x, enum mpress_dtype xt, const float *g,
                  const void *dy, int64_t rows, int64_t H, float eps, void *dx,
                  enum mpress_dtype dt, void *dg, void *db, enum mpress_dtype wt)
{
    float xs[LN_MAX], ds[LN_MAX], os[LN_MAX], ga[LN_MAX], ba[LN_MAX];
    size_t h = (size_t)H;
    float *xb = is32(xt) ? NULL : row_buf(c, h, xs, LN_MAX);
    float *db_ = is32(dt) ? NULL : row_buf(c, h, ds, LN_MAX);
    float *ob = row_buf(c, h, os, LN_MAX);
    float *gacc = row_buf(c, h, ga, LN_MAX), *bacc = row_buf(c, h, ba, LN_MAX);
    if (c->sc.failed)
        return nomem(c);
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
    const float *g = view_small(c, c->io->w[gi], wt, (size_t)c->H, gs, LN_MAX);
    const float *b = view_small(c, c->io->w[bi], wt, (size_t)c->H, bs, LN_MAX);
    if (c->sc.failed)
        return nomem(c);
    int rc = 0;
    if (c->io->out[0])
        rc = ln_fwd(c, c->io->in[0], c->act, g, b, c->T, c->H, c->hp->ln_eps, c->io->out[0],
                    c->act);
    if (!rc)
        save_input_copy(c, SV(c, "input"), 0);
    sc_free(&c->sc);
    return rc;
}

static int layernorm_bwd(struct call *c)
{
    float gs[LN_MAX];
    int gi = W(c, "gamma"), bi = W(c, "beta");
    enum mpress_dtype wt = c->op->weights[gi].dtype;
    const float *g = view_small(c, c->io->w[gi], wt, (size_t)c->H, gs, LN_MAX);
    if (c->sc.failed)
        return nomem(c);
    int rc = ln_bwd(c, saved_ptr(c, "input"), c->act, g, c->io->dout[0], c->T, c->H,
                    c->hp->ln_eps, c->io->din[0], c->act, c->io->dw[gi], c->io->dw[bi], wt);
    sc_free(&c->sc);
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
        gemm_st(&x, &w, c->T, N, K, c->io->w[bi], 0, c->io->out[0], c->act, N);
    }
    save_input_copy(c, SV(c, "input"), 0);
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
        gemm_st(&a, &w, T, K, N, NULL, 1, c->io->din[0], c->act, K);
    }
    if (c->io->dw[wi]) {
        struct mat a = M_(dy, c->act, N, 1), x = M_(saved_ptr(c, "input"), c->act, K, 0);
        gemm_st(&a, &x, N, K, T, NULL, 1, c->io->dw[wi], wt, K);
    }
    if (c->io->dw[bi])
        colsum_acc(dy, c->act, T, N, c->io->dw[bi], wt);
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
    save_input_copy(c, SV(c, "input"), 0);
    return 0;
}

static int gelu_bwd(struct call *c)
{
    size_t n = (size_t)(c->T * c->F);
    float xb[CHUNK], db[CHUNK], gb[CHUNK];
    const void *x = saved_ptr(c, "input");
    for (size_t i = 0; c->io->din[0] && i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? n - i : CHUNK;
        gelu_grad(chunk_in(x, c->act, i, m, xb), chunk_in(c->io->dout[0], c->act, i, m, db), gb,
                  m);
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

/* One head's S x D operand, fp32: a strided view of the stored tensor (fp32: ld as given), or
 * converted into buf (16-bit: ld D). */
static const float *head_in(const void *p, enum mpress_dtype t, size_t off, int64_t S,
                            int64_t D, int64_t ld, float *buf, int64_t *ld_out)
{
    if (is32(t)) {
        *ld_out = ld;
        return (const float *)p + off;
    }
    for (int64_t s = 0; s < S; s++)
        load_bf16(buf + s * D, (const uint16_t *)p + off + (size_t)(s * ld), (size_t)D);
    *ld_out = D;
    return buf;
}

/* Stores (or accumulates, rounded once) one head's fp32 S x D result into rows of ld. */
static void head_out(void *p, enum mpress_dtype t, size_t off, int64_t S, int64_t D, int64_t ld,
                     const float *x, int accumulate)
{
    for (int64_t s = 0; s < S; s++) {
        size_t o = off + (size_t)(s * ld);
        if (accumulate)
            chunk_acc(p, t, o, x + s * D, (size_t)D);
        else
            mpress_host_store((uint16_t *)p + o, x + s * D, t, (size_t)D);
    }
}

/* Softmax of one head's scores in place (P = softmax(sc), causal rows cut at the diagonal),
 * then Pd = dropout(P) with the head's mask (saved, or drawn here); lse (flash) when given. */
static void head_softmax(struct call *c, float *P, float *Pd, uint8_t *mask, uint64_t first,
                         float *lse, int64_t i0, int64_t nb)
{
    int64_t S = c->S;
    float pd = c->hp->attn_dropout, dsc = dropout_scale(pd);
    uint32_t thr = drop_thr(pd);
    uint8_t mb[CHUNK];
    for (int64_t r = 0; r < nb; r++) {
        int64_t i = i0 + r;
        float *restrict pr = P + r * S;
        size_t n = (size_t)(c->bert ? S : i + 1);
        float mx = max_f(pr, n), sum = exp_sum(pr, mx, pr, n);
        for (size_t j = 0; j < n; j++)
            pr[j] = pr[j] / sum;
        for (size_t j = n; j < (size_t)S; j++)
            pr[j] = 0.0f;
        if (lse)
            lse[i] = mx + logf(sum);
        for (int64_t j0 = 0; j0 < S; j0 += CHUNK) {
            size_t m = (size_t)(S - j0 < CHUNK ? S - j0 : CHUNK);
            uint8_t *restrict mk = mask ? mask + i * S + j0 : mb;
            mask_chunk(c->key, thr, first + (uint64_t)(i * S + j0), m, mk);
            float *restrict pdr = Pd + r * S + j0;
            const float *restrict p = pr + j0;
            for (size_t j = 0; j < m; j++)
                pdr[j] = mk[j] ? p[j] * dsc : 0.0f;
        }
    }
}

/* Flash attention works on blocks of query rows whose scores fit a stack tile of FT floats
 * (at most FR rows), as FlashAttention keeps its tiles on chip: no S x S buffer. */
#define FT 4096
#define FR 16

static int64_t flash_rows(int64_t S)
{
    int64_t r = FT / S;
    return r < 1 ? 1 : r > FR ? FR : r;
}

/* Flash forward of one head: per block of rows, P = softmax(q k^T / sqrt(d)) and its
 * log-sum-exp (saved), Pd = dropout(P) with the mask drawn from the key, context = Pd v into
 * ctx (rows of ldc). */
static void flash_fwd_head(struct call *c, const float *q, int64_t lq, const float *k, int64_t lk,
                           const float *v, int64_t lv, uint64_t first, float *lse, float *ctx,
                           int64_t ldc)
{
    int64_t S = c->S, D = c->D, br = flash_rows(S);
    float P[FT], Pd[FT];
    for (int64_t i0 = 0; i0 < S; i0 += br) {
        int64_t nb = S - i0 < br ? S - i0 : br;
        gemm(0, 1, nb, S, D, 1.0f / sqrtf((float)D), q + i0 * lq, lq, k, lk, 0.0f, P, S);
        head_softmax(c, P, Pd, NULL, first, lse, i0, nb);
        if (ctx)
            gemm(0, 0, nb, D, S, 1.0f, Pd, S, v, lv, 0.0f, ctx + i0 * ldc, ldc);
    }
}

/* S = q k^T / sqrt(d) (causal for GPT), P = softmax(S), Pd = dropout(P), context = Pd v, one
 * head at a time. fp32: q, k, v read from the qkv rows and the context written into the output
 * rows with their strides, P and Pd into their saved tensors; scratch: P and Pd of one head when
 * they are not saved (flash, or a recompute that does not want them) or 16-bit, and for 16-bit
 * storage fp32 copies of the head's q, k, v and context. */
static int attn_fwd(struct call *c)
{
    int64_t S = c->S, B = c->B, H = c->H, A = c->A, D = c->D;
    size_t esz = (size_t)mpress_dtype_size(c->act);
    size_t nss = (size_t)(S * S);
    uint64_t nmask = (uint64_t)(B * A) * (uint64_t)nss;
    if (nmask > MPRESS_RNG_MAX_ELEMENTS)
        return fail(c, MPRESS_EUSAGE, "attention dropout mask exceeds the RNG stream");
    static const char *const qkv_roles[3] = {"q", "k", "v"};
    for (int p = 0; p < 3; p++)
        if (saved_ptr(c, qkv_roles[p]))
            qkv_split(c->io->in[0], saved_ptr(c, qkv_roles[p]), p, S, B, H, A, esz);
    void *out = c->io->out[0];
    void *Psv = c->flash ? NULL : saved_ptr(c, "softmax_out");
    void *Pdsv = c->flash ? NULL : saved_ptr(c, "dropout_out");
    uint8_t *msv = c->flash ? NULL : saved_ptr(c, "dropout_mask");
    float *lse = c->flash ? saved_ptr(c, "softmax_lse") : NULL;
    if (!out && !Psv && !Pdsv && !msv && !lse)
        return 0;
    int bf = !is32(c->act);
    float *P = c->flash || (Psv && !bf) ? NULL : sc_f(&c->sc, nss);
    float *Pd = c->flash || (Pdsv && !bf) ? NULL : sc_f(&c->sc, nss);
    float *hb = bf ? sc_f(&c->sc, (size_t)(4 * S * D)) : NULL;
    if (c->sc.failed)
        return nomem(c);
    const void *qkv = c->io->in[0];
    for (int64_t b = 0; b < B; b++)
        for (int64_t a = 0; a < A; a++) {
            size_t h = (size_t)(b * A + a), off = (size_t)(b * 3 * H + a * D);
            int64_t lq, lk, lv, ld = B * 3 * H;
            const float *q = head_in(qkv, c->act, off, S, D, ld, hb, &lq);
            const float *k = head_in(qkv, c->act, off + (size_t)H, S, D, ld, hb ? hb + S * D : 0,
                                     &lk);
            const float *v = head_in(qkv, c->act, off + (size_t)(2 * H), S, D, ld,
                                     hb ? hb + 2 * S * D : 0, &lv);
            size_t oo = (size_t)(b * H + a * D);
            if (c->flash) {
                float *ctx = !out ? NULL : bf ? hb + 3 * S * D : (float *)out + oo;
                flash_fwd_head(c, q, lq, k, lk, v, lv, h * nss, lse ? lse + h * (size_t)S : NULL,
                               ctx, bf ? D : B * H);
                if (out && bf)
                    head_out(out, c->act, oo, S, D, B * H, ctx, 0);
                continue;
            }
            float *ph = P ? P : (float *)Psv + h * nss, *pdh = Pd ? Pd : (float *)Pdsv + h * nss;
            gemm(0, 1, S, S, D, 1.0f / sqrtf((float)D), q, lq, k, lk, 0.0f, ph, S);
            head_softmax(c, ph, pdh, msv ? msv + h * nss : NULL, h * nss, NULL, 0, S);
            if (Psv && P)
                mpress_host_store((uint16_t *)Psv + h * nss, ph, c->act, nss);
            if (Pdsv && Pd)
                mpress_host_store((uint16_t *)Pdsv + h * nss, pdh, c->act, nss);
            if (!out)
                continue;
            if (bf) {
                gemm(0, 0, S, D, S, 1.0f, pdh, S, v, lv, 0.0f, hb + 3 * S * D, D);
                head_out(out, c->act, oo, S, D, B * H, hb + 3 * S * D, 0);
            } else {
                gemm(0, 0, S, D, S, 1.0f, pdh, S, v, lv, 0.0f, (float *)out + oo, B * H);
            }
        }
    sc_free(&c->sc);
    return 0;
}

/* Flash-style: P = exp(scores - lse) of rows i0 .. i0 + nb - 1 of one head from q (those rows),
 * k and the saved log-sum-exp, Pd from the mask drawn again from the same RNG key. */
static void flash_probs(struct call *c, const float *q, int64_t lq, const float *k, int64_t lk,
                        const float *lse, uint64_t first, float *P, float *Pd, int64_t i0,
                        int64_t nb)
{
    int64_t S = c->S, D = c->D;
    float pd = c->hp->attn_dropout, dsc = dropout_scale(pd);
    uint32_t thr = drop_thr(pd);
    uint8_t mb[CHUNK];
    gemm(0, 1, nb, S, D, 1.0f / sqrtf((float)D), q, lq, k, lk, 0.0f, P, S);
    for (int64_t r = 0; r < nb; r++) {
        int64_t i = i0 + r;
        float *restrict pr = P + r * S;
        size_t n = (size_t)(c->bert ? S : i + 1);
        for (size_t j = 0; j < n; j++)
            pr[j] = exp_fast(pr[j] - lse[i]);
        for (size_t j = n; j < (size_t)S; j++)
            pr[j] = 0.0f;
        for (int64_t j0 = 0; j0 < S; j0 += CHUNK) {
            size_t m = (size_t)(S - j0 < CHUNK ? S - j0 : CHUNK);
            mask_chunk(c->key, thr, first + (uint64_t)(i * S + j0), m, mb);
            float *restrict pdr = Pd + r * S + j0;
            for (size_t j = 0; j < m; j++)
                pdr[j] = mb[j] ? pr[j0 + j] * dsc : 0.0f;
        }
    }
}

/* dS = P (dP m/(1-p) - rowsum(P dP m/(1-p))) / sqrt(d), in place in dP. */
static void head_dscores(struct call *c, const float *P, const uint8_t *mask, const float *Pd,
                         float *dP, int64_t i0, int64_t nb)
{
    int64_t S = c->S;
    float dsc = dropout_scale(c->hp->attn_dropout), rs = 1.0f / sqrtf((float)c->D);
    for (int64_t r = 0; r < nb; r++) {
        int64_t i = i0 + r;
        float *restrict g = dP + r * S;
        const float *restrict p = P + r * S;
        size_t n = (size_t)(c->bert ? S : i + 1);
        if (mask) {
            const uint8_t *restrict m = mask + i * S;
            for (size_t j = 0; j < n; j++)
                g[j] = m[j] ? g[j] * dsc : 0.0f;
        } else { /* flash: Pd = P m/(1-p), so m is Pd != 0 where P != 0 */
            const float *restrict d = Pd + r * S;
            for (size_t j = 0; j < n; j++)
                g[j] = d[j] != 0.0f ? g[j] * dsc : 0.0f;
        }
        float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        size_t j = 0;
        for (; j + 8 <= n; j += 8)
            for (int l = 0; l < 8; l++)
                a[l] += g[j + l] * p[j + l];
        for (int l = 0; j < n; j++, l++)
            a[l] += g[j] * p[j];
        float dot = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
        for (j = 0; j < n; j++)
            g[j] = p[j] * (g[j] - dot) * rs;
        for (j = n; j < (size_t)S; j++)
            g[j] = 0.0f;
    }
}

/* Flash backward of one head, per block of rows (stack tiles, as forward): P and Pd again,
 * dV += Pd^T dC, dP = dC V^T, dS, dQ += dS K for the block's rows, dK += dS^T Q; dq, dk, dv
 * are fp32 rows of ld, accumulated. */
static void flash_bwd_head(struct call *c, const float *q, int64_t lq, const float *k, int64_t lk,
                           const float *v, int64_t lv, const float *dC, int64_t lc,
                           const float *lse, uint64_t first, float *dq, float *dk, float *dv,
                           int64_t ld)
{
    int64_t S = c->S, D = c->D, br = flash_rows(S);
    float P[FT], Pd[FT], dP[FT];
    for (int64_t i0 = 0; i0 < S; i0 += br) {
        int64_t nb = S - i0 < br ? S - i0 : br;
        flash_probs(c, q + i0 * lq, lq, k, lk, lse, first, P, Pd, i0, nb);
        gemm(1, 0, S, D, nb, 1.0f, Pd, S, dC + i0 * lc, lc, 1.0f, dv, ld);
        gemm(0, 1, nb, S, D, 1.0f, dC + i0 * lc, lc, v, lv, 0.0f, dP, S);
        head_dscores(c, P, NULL, Pd, dP, i0, nb);
        gemm(0, 0, nb, D, S, 1.0f, dP, S, k, lk, 1.0f, dq + i0 * ld, ld);
        gemm(1, 0, S, D, nb, 1.0f, dP, S, q + i0 * lq, lq, 1.0f, dk, ld);
    }
}

/* dV = Pd^T dC, dPd = dC V^T, dP = dPd m / (1 - p), dS = P (dP - rowsum(P dP)) / sqrt(d),
 * dQ = dS K, dK = dS^T Q, each head's gradients accumulated into its columns of dqkv.
 * Unfused: P, m and Pd are saved. Flash-style: P = exp(scores - lse) from the saved q, k and
 * log-sum-exp, m drawn again from the same RNG key. */
static int attn_bwd(struct call *c)
{
    int64_t S = c->S, B = c->B, H = c->H, A = c->A, D = c->D;
    size_t nss = (size_t)(S * S), nsd = (size_t)(S * D);
    int bf = !is32(c->act), fl = c->flash;
    void *din = c->io->din[0];
    if (!din)
        return 0;
    const void *q = saved_ptr(c, "q"), *k = saved_ptr(c, "k"), *v = saved_ptr(c, "v");
    const void *Psv = fl ? NULL : saved_ptr(c, "softmax_out");
    const void *Pdsv = fl ? NULL : saved_ptr(c, "dropout_out");
    const uint8_t *mask = fl ? NULL : saved_ptr(c, "dropout_mask");
    const float *lse = fl ? saved_ptr(c, "softmax_lse") : NULL;
    float *dP = fl ? NULL : sc_f(&c->sc, nss);
    float *P = !fl && bf ? sc_f(&c->sc, nss) : NULL, *Pd = !fl && bf ? sc_f(&c->sc, nss) : NULL;
    float *hb = bf ? sc_f(&c->sc, 7 * nsd) : NULL; /* q k v dC dq dk dv */
    if (c->sc.failed)
        return nomem(c);
    int64_t l3 = B * 3 * H;
    for (int64_t b = 0; b < B; b++)
        for (int64_t a = 0; a < A; a++) {
            size_t h = (size_t)(b * A + a), off = h * nsd;
            int64_t lq, lk, lv, lc;
            const float *qh = head_in(q, c->act, off, S, D, D, hb, &lq);
            const float *kh = head_in(k, c->act, off, S, D, D, hb ? hb + nsd : 0, &lk);
            const float *vh = head_in(v, c->act, off, S, D, D, hb ? hb + 2 * nsd : 0, &lv);
            const float *dC = head_in(c->io->dout[0], c->act, (size_t)(b * H + a * D), S, D,
                                      B * H, hb ? hb + 3 * nsd : 0, &lc);
            size_t oq = (size_t)(b * 3 * H + a * D), ok = oq + (size_t)H, ov = oq + 2 * (size_t)H;
            float *fd = din;
            if (fl) {
                if (bf)
                    memset(hb + 4 * nsd, 0, 3 * nsd * sizeof(float));
                float *dq = bf ? hb + 4 * nsd : fd + oq, *dk = bf ? hb + 5 * nsd : fd + ok;
                float *dv = bf ? hb + 6 * nsd : fd + ov;
                flash_bwd_head(c, qh, lq, kh, lk, vh, lv, dC, lc, lse + h * (size_t)S, h * nss, dq,
                               dk, dv, bf ? D : l3);
                if (bf) {
                    head_out(din, c->act, oq, S, D, l3, dq, 1);
                    head_out(din, c->act, ok, S, D, l3, dk, 1);
                    head_out(din, c->act, ov, S, D, l3, dv, 1);
                }
                continue;
            }
            const float *ph, *pdh;
            if (bf) {
                load_bf16(P, (const uint16_t *)Psv + h * nss, nss);
                load_bf16(Pd, (const uint16_t *)Pdsv + h * nss, nss);
                ph = P;
                pdh = Pd;
            } else {
                ph = (const float *)Psv + h * nss;
                pdh = (const float *)Pdsv + h * nss;
            }
            if (bf)
                gemm(1, 0, S, D, S, 1.0f, pdh, S, dC, lc, 0.0f, hb + 6 * nsd, D);
            else
                gemm(1, 0, S, D, S, 1.0f, pdh, S, dC, lc, 1.0f, fd + ov, l3);
            gemm(0, 1, S, S, D, 1.0f, dC, lc, vh, lv, 0.0f, dP, S);
            head_dscores(c, ph, mask + h * nss, pdh, dP, 0, S);
            if (bf) {
                gemm(0, 0, S, D, S, 1.0f, dP, S, kh, lk, 0.0f, hb + 4 * nsd, D);
                gemm(1, 0, S, D, S, 1.0f, dP, S, qh, lq, 0.0f, hb + 5 * nsd, D);
                head_out(din, c->act, oq, S, D, l3, hb + 4 * nsd, 1);
                head_out(din, c->act, ok, S, D, l3, hb + 5 * nsd, 1);
                head_out(din, c->act, ov, S, D, l3, hb + 6 * nsd, 1);
            } else {
                gemm(0, 0, S, D, S, 1.0f, dP, S, kh, lk, 1.0f, fd + oq, l3);
                gemm(1, 0, S, D, S, 1.0f, dP, S, qh, lq, 1.0f, fd + ok, l3);
            }
        }
    sc_free(&c->sc);
    return 0;
}

/* ---- head -------------------------------------------------------------------------------- */

/* A stored tensor the op writes: its saved buffer, or scratch of its bytes when the caller does
 * not want it saved. */
static void *saved_or_scratch(struct call *c, const char *role)
{
    int i = SV(c, role);
    return c->io->saved[i] ? c->io->saved[i] : sc_bytes(&c->sc, (size_t)c->op->saved[i].bytes);
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
    const float *lg = view_small(c, c->io->w[W(c, "ln_gamma")], wt, (size_t)H, gs, LN_MAX);
    const float *lb = view_small(c, c->io->w[W(c, "ln_beta")], wt, (size_t)H, bs, LN_MAX);
    if (c->sc.failed)
        return nomem(c);
    const void *x = c->io->in[0];
    struct mat xm = M_(x, at, H, 0), wd = M_(c->io->w[W(c, "dense_weight")], wt, H, 1);
    gemm_st(&xm, &wd, T, H, H, c->io->w[W(c, "dense_bias")], 0, t, at, H);
    size_t n = (size_t)(T * H);
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t m = n - i < CHUNK ? n - i : CHUNK;
        float *y = chunk_out(g, at, i, yb);
        gelu_rows(chunk_in(t, at, i, m, xb), y, m);
        chunk_put(g, at, i, y, m);
    }
    int rc = ln_fwd(c, g, at, lg, lb, T, H, c->hp->ln_eps, u, at);
    if (rc)
        return rc;
    struct mat um = M_(u, at, H, 0), word = M_(c->io->w[W(c, "word")], wt, H, 1);
    if (c->io->out[0])
        gemm_st(&um, &word, T, V, H, c->io->w[W(c, "decoder_bias")], 0, c->io->out[0], at, V);
    /* rows 0 .. b-1 of x are sequence position 0 */
    struct mat wp = M_(c->io->w[W(c, "pooler_weight")], wt, H, 1);
    gemm_st(&xm, &wp, B, H, H, c->io->w[W(c, "pooler_bias")], 0, p, at, H);
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
        gemm_st(&pm, &wn, B, 2, H, c->io->w[W(c, "nsp_bias")], 0, c->io->out[1], at, 2);
    sc_free(&c->sc);
    return 0;
}

/* GPT: logits = x word^T. BERT: t = x Wd^T + bd (dense_out), g = gelu(t) (ln_input),
 * u = LN(g) (decoder_input), logits = u word^T + decoder_bias; on the first token x0 = x[0]:
 * p = tanh(x0 Wp^T + bp) (pooler_out), nsp_logits = p Wn^T + bn. */
static int head_fwd(struct call *c)
{
    save_input_copy(c, SV(c, "input"), 0);
    if (c->bert)
        return bert_head_fwd(c);
    int wi = W(c, "word");
    struct mat x = M_(c->io->in[0], c->act, c->H, 0);
    struct mat word = M_(c->io->w[wi], c->op->weights[wi].dtype, c->H, 1);
    if (c->io->out[0])
        gemm_st(&x, &word, c->T, c->V, c->H, NULL, 0, c->io->out[0], c->act, c->V);
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
    const float *lg = view_small(c, c->io->w[W(c, "ln_gamma")], wt, (size_t)H, gs, LN_MAX);
    float *du = sc_fz(&c->sc, (size_t)(T * H)), *dg = sc_fz(&c->sc, (size_t)(T * H));
    float *dp = sc_fz(&c->sc, (size_t)(B * H));
    if (c->sc.failed)
        return nomem(c);
#define DW(role) c->io->dw[W(c, role)]
    struct mat dla = M_(dl, at, V, 0), dlt = M_(dl, at, V, 1), xm = M_(x, at, H, 0);
    struct mat word = M_(c->io->w[W(c, "word")], wt, H, 0), um = M_(u, at, H, 0);
    /* logits = u word^T + decoder_bias */
    gemm_st(&dla, &word, T, H, V, NULL, 1, du, f32, H);
    if (DW("word"))
        gemm_st(&dlt, &um, V, H, T, NULL, 1, DW("word"), wt, H);
    colsum_acc(dl, at, T, V, DW("decoder_bias"), wt);
    /* u = LN(g), g = gelu(t) */
    int rc = ln_bwd(c, g, at, lg, du, T, H, c->hp->ln_eps, dg, f32, DW("ln_gamma"),
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
    gemm_st(&dgm, &wd, T, H, H, NULL, 1, dx, f32, H);
    if (DW("dense_weight"))
        gemm_st(&dgt, &xm, H, H, T, NULL, 1, DW("dense_weight"), wt, H);
    colsum_acc(dg, f32, T, H, DW("dense_bias"), wt);
    /* nsp = p Wn^T + bn, p = tanh(x0 Wp^T + bp) */
    struct mat dnm = M_(dn, at, 2, 0), dnt = M_(dn, at, 2, 1), pm = M_(p, at, H, 0);
    struct mat wn = M_(c->io->w[W(c, "nsp_weight")], wt, H, 0);
    gemm_st(&dnm, &wn, B, H, 2, NULL, 1, dp, f32, H);
    if (DW("nsp_weight"))
        gemm_st(&dnt, &pm, 2, H, B, NULL, 1, DW("nsp_weight"), wt, H);
    colsum_acc(dn, at, B, 2, DW("nsp_bias"), wt);
    for (size_t i = 0; i < (size_t)(B * H); i += CHUNK) {
        size_t m = (size_t)(B * H) - i < CHUNK ? (size_t)(B * H) - i : CHUNK;
        const float *pv = chunk_in(p, at, i, m, pb);
        for (size_t j = 0; j < m; j++)
            dp[i + j] *= 1.0f - pv[j] * pv[j];
    }
    struct mat dpm = M_(dp, f32, H, 0), dpt = M_(dp, f32, H, 1);
    struct mat wp = M_(c->io->w[W(c, "pooler_weight")], wt, H, 0);
    gemm_st(&dpm, &wp, B, H, H, NULL, 1, dx, f32, H); /* dx0 added to rows 0 .. b-1 */
    if (DW("pooler_weight"))
        gemm_st(&dpt, &xm, H, H, B, NULL, 1, DW("pooler_weight"), wt, H);
    colsum_acc(dp, f32, B, H, DW("pooler_bias"), wt);
#undef DW
    acc(c->io->din[0], at, dx, (size_t)(T * H));
    sc_free(&c->sc);
    return 0;
}

static int head_bwd(struct call *c)
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
        gemm_st(&dla, &word, T, H, V, NULL, 1, c->io->din[0], c->act, H);
    if (c->io->dw[wi])
        gemm_st(&dlt, &x, V, H, T, NULL, 1, c->io->dw[wi], wt, H);
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
    float *zb = is32(zt) ? NULL : row_buf(c, (size_t)n, zs, LN_MAX);
    float *pb = p ? NULL : row_buf(c, (size_t)n, ps, LN_MAX);
    if (c->sc.failed)
        return nomem(c);
    *sum = 0;
    for (int64_t r = 0; r < rows; r++) {
        /* row r = s·b_count + b; its label is labels[b·s_count + s] (or labels[r] for NSP) */
        int64_t li = label_stride_s ? (r % c->B) * c->S + r / c->B : r;
        int64_t lab = labels[li];
        if (lab < 0 || lab >= n)
            return fail(c, MPRESS_EINPUT, "label out of range");
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
static int loss_fwd(struct call *c)
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
    sc_free(&c->sc);
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
            return fail(c, MPRESS_EINPUT, "label out of range");
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

static int loss_bwd(struct call *c)
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
        qkv_split(producer_out, dst, part, cf->seq, cf->micro_batch, cf->hidden, cf->heads,
                  (size_t)mpress_dtype_size(t->dtype));
        return 0;
    }
    memcpy(dst, producer_out, (size_t)t->bytes);
    return 0;
}
