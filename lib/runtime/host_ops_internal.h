/* What the host backend's op files share: host_ops.c (the op call, the element-wise, linear,
 * LayerNorm and embedding kernels, dispatch), host_attn.c (attention, unfused and flash),
 * host_head.c (the GPT and BERT heads, the loss) and host_prim.c (the scratch arena, GEMMs
 * over stored tensors). Layouts, formulas and speed: host_ops.c. The helpers that inner loops
 * call (storage chunks, fast math, the vectorised loops, dropout masks) are static inline
 * here, so that each file compiles them into its loops (and into each target clone); the
 * others are functions prefixed hops_. Internal to lib/runtime; include it last, after any
 * system header (its pragma applies to what follows). */
#ifndef MPRESS_RUNTIME_HOST_OPS_INTERNAL_H
#define MPRESS_RUNTIME_HOST_OPS_INTERNAL_H

#include <cblas.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "host_ops.h"

/* GCC vectorises at -O2 (the project's debugoptimized build) only loops whose trip count needs
 * no scalar epilogue (its "very cheap" cost model), and never one with a float comparison while
 * -ftrapping-math is on. These kernels are loops over runtime lengths with selects, so every
 * file that includes this header asks for the dynamic cost model and no trapping math (no
 * value changes: nothing here reads the floating-point environment). Clang vectorises them at
 * -O2 as they are. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic", "no-trapping-math")
#endif

/* The hottest element-wise loops are compiled for AVX2 and AVX-512 as well, and the CPU's best
 * is chosen when the library loads (GCC's target_clones, x86-64 with ifunc support). The
 * clones compute the same values: these loops are element by element (or in the fixed lanes of
 * sum_f), without contraction into fused multiply-adds (ISO C mode: -ffp-contract=off), so a
 * wider vector gives the same bits. The HOT functions are static inline in this header, so
 * that each file that calls one has its own clones and resolver, local as before: GCC 12 gives
 * a target_clones function's ifunc symbol default visibility whatever -fvisibility says, so an
 * extern one would be exported from libmpress.so. (A target clone is never inlined; inline
 * only spares the files that do not call it an unused-function warning.) */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define HOT __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HOT
#endif

/* Elements per stack chunk of the element-wise loops (4 KiB of fp32). */
#define CHUNK 1024

/* Rows of H of 16-bit tensors are converted into stack rows up to this length (else scratch). */
#define LN_MAX 2048

/* ---- one op call, and its scratch: every allocation of the call, freed together ---------- */

#define SC_MAX 48
struct scratch {
    const struct mpress_host_scratch *src;  /* NULL: malloc */
    struct mpress_error *err;
    void *p[SC_MAX];
    uint64_t bytes[SC_MAX];
    uint64_t cur;                           /* bytes held now */
    int n, failed, rc;                      /* rc: the allocator's error (err filled) */
};

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

/* A stored matrix operand: op(X)[i, j] is X[i·ld + j] (or X[j·ld + i] transposed). */
struct mat {
    const void *p;
    enum mpress_dtype t;
    int64_t ld;
    int trans;
};

/* ---- shared functions -------------------------------------------------------------------- */

/* scratch (host_prim.c) */
void *hops_sc_bytes(struct scratch *sc, size_t bytes);
float *hops_sc_f(struct scratch *sc, size_t n);
void hops_sc_free(struct scratch *sc);

/* the op call (host_ops.c) */
int hops_find_role(const struct mpress_model_tensor *list, int n, const char *role);
int hops_fail(struct call *c, int code, const char *what);
int hops_nomem(struct call *c);
void hops_save_input_copy(struct call *c, int saved_index, int input_index);
const float *hops_view_small(struct call *c, const void *src, enum mpress_dtype t, size_t n,
                             float *buf, size_t cap);
float *hops_row_buf(struct call *c, size_t n, float *buf, size_t cap);

/* LayerNorm over rows (host_ops.c; the BERT head's too) */
int hops_ln_fwd(struct call *c, const void *x, enum mpress_dtype xt, const float *g,
                const float *b, int64_t rows, int64_t H, float eps, void *y,
                enum mpress_dtype yt);
int hops_ln_bwd(struct call *c, const void *x, enum mpress_dtype xt, const float *g,
                const void *dy, int64_t rows, int64_t H, float eps, void *dx,
                enum mpress_dtype dt, void *dg, void *db, enum mpress_dtype wt);

/* GEMMs over stored tensors, column sums (host_prim.c) */
void hops_gemm_st(const struct mat *a, const struct mat *b, int64_t M, int64_t N, int64_t K,
                  const void *bias, int accumulate, void *C, enum mpress_dtype ct, int64_t ldc);
void hops_colsum_acc(const void *dy, enum mpress_dtype dt, int64_t T, int64_t N, void *db,
                     enum mpress_dtype t);

/* attention (host_attn.c); hops_qkv_split also derives q, k, v for a recompute */
void hops_qkv_split(const void *qkv, void *dst, int part, int64_t S, int64_t B, int64_t H,
                    int64_t A, size_t esz);
int hops_attn_fwd(struct call *c);
int hops_attn_bwd(struct call *c);

/* heads and loss (host_head.c) */
int hops_head_fwd(struct call *c);
int hops_head_bwd(struct call *c);
int hops_loss_fwd(struct call *c);
int hops_loss_bwd(struct call *c);

/* ---- storage helpers --------------------------------------------------------------------- */

static inline int is32(enum mpress_dtype t)
{
    return mpress_host_storage(t) == MPRESS_DTYPE_FP32;
}

static inline void load_bf16(float *restrict d, const uint16_t *restrict s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)s[i] << 16;
        memcpy(&d[i], &u, sizeof(u));
    }
}

/* fp32 view of elements [off, off + n) of a stored tensor: the buffer itself for fp32 storage,
 * else converted into buf (n elements). */
static inline const float *chunk_in(const void *src, enum mpress_dtype t, size_t off,
                                    size_t n, float *buf)
{
    if (is32(t))
        return (const float *)src + off;
    load_bf16(buf, (const uint16_t *)src + off, n);
    return buf;
}

/* Where to compute elements [off, off + n) of a result stored at dst: dst itself for fp32
 * storage, else buf (then chunk_put stores it). */
static inline float *chunk_out(void *dst, enum mpress_dtype t, size_t off, float *buf)
{
    return dst && is32(t) ? (float *)dst + off : buf;
}

static inline void chunk_put(void *dst, enum mpress_dtype t, size_t off, const float *x,
                             size_t n)
{
    if (dst && !is32(t))
        mpress_host_store((uint16_t *)dst + off, x, t, n);
}

/* dst[off ..] += add, rounded once to dst's storage. */
static inline void chunk_acc(void *dst, enum mpress_dtype t, size_t off,
                             const float *restrict add, size_t n)
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

/* Index of weight / saved tensor `role`, checked at call setup. */
static inline int W(const struct call *c, const char *role)
{
    return hops_find_role(c->op->weights, c->op->n_weights, role);
}
static inline int SV(const struct call *c, const char *role)
{
    return hops_find_role(c->op->saved, c->op->n_saved, role);
}

static inline void *saved_ptr(struct call *c, const char *role)
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

/* Sums in eight lanes (a fixed order, so the same bits on every call, and vectorisable). */
static inline float sum_f(const float *restrict x, size_t n)
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

static inline float max_f(const float *restrict x, size_t n)
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

HOT static inline void gelu_rows(const float *restrict x, float *restrict y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] * gelu_sig(x[i]);
}

/* g[i] = dy[i]·gelu'(x[i]) */
HOT static inline void gelu_grad(const float *restrict x, const float *restrict dy,
                                 float *restrict g, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float s = gelu_sig(x[i]);
        float du = GELU_C * (1.0f + 3.0f * GELU_K * x[i] * x[i]);
        g[i] = dy[i] * (s + x[i] * 2.0f * s * (1.0f - s) * du);
    }
}

/* p[j] = exp(z[j] - mx), returns Σ p (eight lanes). */
HOT static inline float exp_sum(const float *z, float mx, float *p, size_t n)
{
    for (size_t j = 0; j < n; j++)
        p[j] = exp_fast(z[j] - mx);
    return sum_f(p, n);
}

/* ---- GEMMs ------------------------------------------------------------------------------- */

/* Row-major C[M,N] = alpha op(A) op(B) + beta C. */
static inline void gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                        const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                        float *C, int64_t ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

/* A stored matrix with its dtype. */
static inline struct mat M_(const void *p, enum mpress_dtype t, int64_t ld, int trans)
{
    struct mat m = {p, t, ld, trans};
    return m;
}

/* ---- dropout ----------------------------------------------------------------------------- */

static inline uint32_t drop_thr(float p)
{
    return (uint32_t)llround((double)p * 16777216.0);
}

/* Words [first, first + n) of a stream (1 <= n <= CHUNK), as mpress_rng_fill gives them:
 * Philox 4x32-10 (host_rng.c, docs/runtime.md) on the blocks first / 4 .. (first + n - 1) / 4
 * side by side, one round of all of them at a time, so that the rounds vectorise. */
HOT static inline void rng_words(const struct mpress_rng_key *k, uint64_t first, size_t n,
                                 uint32_t *out)
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
static inline void mask_chunk(const struct mpress_rng_key *k, uint32_t thr, uint64_t first,
                              size_t n, uint8_t *mask)
{
    uint32_t w[CHUNK];
    if (n == 0)
        return;
    rng_words(k, first, n, w);
    for (size_t j = 0; j < n; j++)
        mask[j] = (w[j] >> 8) >= thr;
}

static inline float dropout_scale(float p)
{
    return 1.0f / (1.0f - p);
}

#endif
