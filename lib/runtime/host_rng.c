/* Philox 4x32-10 and the storage conversions of the host backend. Philox is written from its
 * definition in Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3" (SC'11), section
 * 4.3 (multipliers, Weyl key schedule); the test checks the Random123 known-answer vectors. */
#include <string.h>

#include "host_ops.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u /* golden ratio */
#define PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */

void mpress_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += PHILOX_W0;
            k1 += PHILOX_W1;
        }
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

static void block(const struct mpress_rng_key *k, uint64_t blk, uint32_t out[4])
{
    uint32_t ctr[4] = {(uint32_t)blk, k->op, k->micro_batch, k->step};
    uint32_t key[2] = {(uint32_t)k->seed, (uint32_t)(k->seed >> 32)};
    mpress_philox4x32_10(ctr, key, out);
}

void mpress_rng_fill(const struct mpress_rng_key *k, uint64_t first, uint64_t n, uint32_t *out)
{
    uint64_t i = 0;
    uint32_t w[4];
    while (i < n) {
        uint64_t e = first + i;
        block(k, e >> 2, w);
        for (unsigned j = (unsigned)(e & 3); j < 4 && i < n; j++)
            out[i++] = w[j];
    }
}

uint32_t mpress_rng_word(const struct mpress_rng_key *k, uint64_t element)
{
    uint32_t w[4];
    block(k, element >> 2, w);
    return w[element & 3];
}

enum mpress_dtype mpress_host_storage(enum mpress_dtype t)
{
    return t == MPRESS_DTYPE_FP16 ? MPRESS_DTYPE_BF16 : t;
}

float mpress_bf16_to_f32(uint16_t v)
{
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

uint16_t mpress_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

void mpress_host_load(float *dst, const void *src, enum mpress_dtype t, size_t n)
{
    if (mpress_host_storage(t) == MPRESS_DTYPE_BF16) {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++)
            dst[i] = mpress_bf16_to_f32(s[i]);
    } else {
        memcpy(dst, src, n * sizeof(float));
    }
}

void mpress_host_store(void *dst, const float *src, enum mpress_dtype t, size_t n)
{
    if (mpress_host_storage(t) == MPRESS_DTYPE_BF16) {
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = mpress_f32_to_bf16(src[i]);
    } else {
        memcpy(dst, src, n * sizeof(float));
    }
}
