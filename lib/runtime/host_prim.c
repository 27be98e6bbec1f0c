/* The primitives the host op kernels share that are not inlined into loops
 * (host_ops_internal.h): the scratch of one op call, GEMMs over stored tensors of any dtype
 * and column sums. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "host_ops_internal.h"

/* ---- scratch: every allocation of one op call, freed together ---------------------------- */

void *hops_sc_bytes(struct scratch *sc, size_t bytes)
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

float *hops_sc_f(struct scratch *sc, size_t n)
{
    return hops_sc_bytes(sc, n * sizeof(float));
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

void hops_sc_free(struct scratch *sc)
{
    sc_pop(sc, 0);
}

/* ---- GEMMs ------------------------------------------------------------------------------- */

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
void hops_gemm_st(const struct mat *a, const struct mat *b, int64_t M, int64_t N, int64_t K,
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
void hops_colsum_acc(const void *dy, enum mpress_dtype dt, int64_t T, int64_t N, void *db,
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
