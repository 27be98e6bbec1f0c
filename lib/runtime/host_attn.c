/* Attention on the host (docs/runtime.md, "Kernels"): unfused (P, its dropout mask and Pd
 * saved) and flash (blocks of query rows in stack tiles, the log-sum-exp saved, P and the mask
 * drawn again in backward). Layouts and shared helpers: host_ops.c, host_ops_internal.h. */
#include <math.h>
#include <string.h>

#include "host_ops_internal.h"

/* ---- attention --------------------------------------------------------------------------- */

/* Raw element copy between qkv [s, b, 3h] and one of q, k, v [b, a, s, d] (part 0, 1, 2). */
void hops_qkv_split(const void *qkv, void *dst, int part, int64_t S, int64_t B, int64_t H,
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
int hops_attn_fwd(struct call *c)
{
    int64_t S = c->S, B = c->B, H = c->H, A = c->A, D = c->D;
    size_t esz = (size_t)mpress_dtype_size(c->act);
    size_t nss = (size_t)(S * S);
    uint64_t nmask = (uint64_t)(B * A) * (uint64_t)nss;
    if (nmask > MPRESS_RNG_MAX_ELEMENTS)
        return hops_fail(c, MPRESS_EUSAGE, "attention dropout mask exceeds the RNG stream");
    static const char *const qkv_roles[3] = {"q", "k", "v"};
    for (int p = 0; p < 3; p++)
        if (saved_ptr(c, qkv_roles[p]))
            hops_qkv_split(c->io->in[0], saved_ptr(c, qkv_roles[p]), p, S, B, H, A, esz);
    void *out = c->io->out[0];
    void *Psv = c->flash ? NULL : saved_ptr(c, "softmax_out");
    void *Pdsv = c->flash ? NULL : saved_ptr(c, "dropout_out");
    uint8_t *msv = c->flash ? NULL : saved_ptr(c, "dropout_mask");
    float *lse = c->flash ? saved_ptr(c, "softmax_lse") : NULL;
    if (!out && !Psv && !Pdsv && !msv && !lse)
        return 0;
    int bf = !is32(c->act);
    float *P = c->flash || (Psv && !bf) ? NULL : hops_sc_f(&c->sc, nss);
    float *Pd = c->flash || (Pdsv && !bf) ? NULL : hops_sc_f(&c->sc, nss);
    float *hb = bf ? hops_sc_f(&c->sc, (size_t)(4 * S * D)) : NULL;
    if (c->sc.failed)
        return hops_nomem(c);
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
    hops_sc_free(&c->sc);
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
int hops_attn_bwd(struct call *c)
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
    float *dP = fl ? NULL : hops_sc_f(&c->sc, nss);
    float *P = !fl && bf ? hops_sc_f(&c->sc, nss) : NULL;
    float *Pd = !fl && bf ? hops_sc_f(&c->sc, nss) : NULL;
    float *hb = bf ? hops_sc_f(&c->sc, 7 * nsd) : NULL; /* q k v dC dq dk dv */
    if (c->sc.failed)
        return hops_nomem(c);
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
    hops_sc_free(&c->sc);
    return 0;
}
