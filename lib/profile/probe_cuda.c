/* The bandwidth probe's measurements with the CUDA runtime: pinned host<->device copies and
 * peer copies with and without peer access, one direction alone and both at once, 64 KiB to
 * 1 GiB. Built only with CUDA. Every copy set is timed on the host clock between two full
 * synchronisations, with enough repetitions that launch overhead stays small against the
 * copy time (at least 128 MiB moved per measurement). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "mpress/trace.h"

#define MIN_BYTES (64ull << 10)
#define MAX_BYTES (1ull << 30)
#define MOVE_BYTES (128ull << 20)

struct probe_ctx {
    int n;
    void *dev_a[MPRESS_MAX_GPUS], *dev_b[MPRESS_MAX_GPUS];
    cudaStream_t s1[MPRESS_MAX_GPUS], s2[MPRESS_MAX_GPUS];
    void *host_a, *host_b;
    uint64_t max_bytes;
    struct mpress_probe *pr;
    int cap;
};

static int fail(struct mpress_error *err, const char *what, cudaError_t e)
{
    return mpress_error_set(err, MPRESS_ESYSTEM, "%s: %s", what, cudaGetErrorString(e));
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int sync_all(struct probe_ctx *c)
{
    for (int g = 0; g < c->n; g++) {
        if (cudaSetDevice(g) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
            return -1;
    }
    return 0;
}

static int add(struct probe_ctx *c, enum mpress_probe_kind k, int src, int dst, uint64_t bytes,
               double bps)
{
    if (c->pr->n_samples == c->cap) {
        int nc = c->cap ? c->cap * 2 : 256;
        void *p = realloc(c->pr->samples, (size_t)nc * sizeof(*c->pr->samples));
        if (!p)
            return -1;
        c->pr->samples = p;
        c->cap = nc;
    }
    c->pr->samples[c->pr->n_samples++] = (struct mpress_probe_sample){k, src, dst, bytes, bps};
    return 0;
}

/* One copy of `bytes` in the given direction on stream s of device dev. src/dst -1 = host. */
static cudaError_t copy(struct probe_ctx *c, int src, int dst, int second, uint64_t bytes,
                        cudaStream_t s)
{
    if (src < 0)
        return cudaMemcpyAsync(second ? c->dev_b[dst] : c->dev_a[dst],
                               second ? c->host_b : c->host_a, bytes, cudaMemcpyHostToDevice, s);
    if (dst < 0)
        return cudaMemcpyAsync(second ? c->host_b : c->host_a,
                               second ? c->dev_b[src] : c->dev_a[src], bytes,
                               cudaMemcpyDeviceToHost, s);
    return cudaMemcpyPeerAsync(c->dev_b[dst], dst, c->dev_a[src], src, bytes, s);
}

/* Times reps copies src->dst (and, when both, dst->src at the same time on a second stream);
 * returns bytes/s per direction, or a negative value on a CUDA error. */
static double measure(struct probe_ctx *c, int src, int dst, int both, uint64_t bytes)
{
    int dev1 = src >= 0 ? src : dst, dev2 = dst >= 0 ? dst : src;
    cudaStream_t s1 = c->s1[dev1], s2 = c->s2[dev2];
    uint64_t reps = MOVE_BYTES / bytes;
    if (reps < 3)
        reps = 3;
    /* warm-up: first copies pay for mappings and staging buffers */
    if (copy(c, src, dst, 0, bytes, s1) != cudaSuccess ||
        (both && copy(c, dst, src, 1, bytes, s2) != cudaSuccess) || sync_all(c))
        return -1;
    double t0 = now_s();
    for (uint64_t r = 0; r < reps; r++) {
        if (copy(c, src, dst, 0, bytes, s1) != cudaSuccess)
            return -1;
        if (both && copy(c, dst, src, 1, bytes, s2) != cudaSuccess)
            return -1;
    }
    if (sync_all(c))
        return -1;
    double dt = now_s() - t0;
    return dt > 0 ? (double)(bytes * reps) / dt : -1;
}

static int sweep(struct probe_ctx *c, enum mpress_probe_kind k, enum mpress_probe_kind k_both,
                 int src, int dst, struct mpress_error *err)
{
    for (uint64_t b = MIN_BYTES; b <= c->max_bytes; b *= 4) {
        double one = measure(c, src, dst, 0, b);
        double two = measure(c, src, dst, 1, b);
        if (one < 0 || two < 0)
            return fail(err, "timed copy", cudaGetLastError());
        if (add(c, k, src, dst, b, one) || add(c, k_both, src, dst, b, two))
            return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    }
    return 0;
}

int mpress_probe_bandwidth(struct mpress_probe *pr, struct mpress_error *err)
{
    memset(pr, 0, sizeof(*pr));
    struct probe_ctx c = {.pr = pr, .max_bytes = MAX_BYTES};
    int n = 0, rc = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return fail(err, "no GPU to probe: cudaGetDeviceCount", e);
    if (n < 1)
        return mpress_error_set(err, MPRESS_ESYSTEM, "no GPU to probe");
    if (n > MPRESS_MAX_GPUS)
        n = MPRESS_MAX_GPUS;
    c.n = pr->n_gpus = n;
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGE_SIZE);
    pr->host_memory_bytes = pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize : 0;

    for (int g = 0; g < n; g++) {
        struct cudaDeviceProp prop;
        if ((e = cudaGetDeviceProperties(&prop, g)) != cudaSuccess) {
            rc = fail(err, "cudaGetDeviceProperties", e);
            goto done;
        }
        snprintf(pr->names[g], sizeof(pr->names[g]), "%.63s", prop.name);
        pr->memory_bytes[g] = prop.totalGlobalMem;
        for (int h = 0; h < n; h++) {
            int can = 0;
            if (h != g && cudaDeviceCanAccessPeer(&can, g, h) == cudaSuccess)
                pr->peer_access[g][h] = can;
        }
        size_t free_b = 0, total_b = 0;
        if ((e = cudaSetDevice(g)) != cudaSuccess ||
            (e = cudaMemGetInfo(&free_b, &total_b)) != cudaSuccess) {
            rc = fail(err, "cudaMemGetInfo", e);
            goto done;
        }
        while (c.max_bytes > MIN_BYTES && 2 * c.max_bytes > free_b / 2)
            c.max_bytes /= 4;
    }
    if (pr->host_memory_bytes)
        while (c.max_bytes > MIN_BYTES && 2 * c.max_bytes > pr->host_memory_bytes / 8)
            c.max_bytes /= 4;
    if ((e = cudaHostAlloc(&c.host_a, c.max_bytes, cudaHostAllocPortable)) != cudaSuccess ||
        (e = cudaHostAlloc(&c.host_b, c.max_bytes, cudaHostAllocPortable)) != cudaSuccess) {
        rc = fail(err, "cudaHostAlloc (pinned host memory)", e);
        goto done;
    }
    for (int g = 0; g < n; g++) {
        if ((e = cudaSetDevice(g)) != cudaSuccess ||
            (e = cudaMalloc(&c.dev_a[g], c.max_bytes)) != cudaSuccess ||
            (e = cudaMalloc(&c.dev_b[g], c.max_bytes)) != cudaSuccess ||
            (e = cudaStreamCreateWithFlags(&c.s1[g], cudaStreamNonBlocking)) != cudaSuccess ||
            (e = cudaStreamCreateWithFlags(&c.s2[g], cudaStreamNonBlocking)) != cudaSuccess) {
            rc = fail(err, "device buffers", e);
            goto done;
        }
    }

    for (int g = 0; g < n && !rc; g++) {
        rc = sweep(&c, MPRESS_PROBE_H2D, MPRESS_PROBE_H2D_BOTH, -1, g, err);
        if (!rc)
            rc = sweep(&c, MPRESS_PROBE_D2H, MPRESS_PROBE_D2H_BOTH, g, -1, err);
    }
    /* Peer copies before peer access is enabled go through host memory... */
    for (int a = 0; a < n && !rc; a++)
        for (int b = 0; b < n && !rc; b++)
            if (a != b)
                rc = sweep(&c, MPRESS_PROBE_PEER_STAGED, MPRESS_PROBE_PEER_STAGED_BOTH, a, b, err);
    /* ... and directly (NVLink or PCIe peer-to-peer) once it is. */
    for (int a = 0; a < n && !rc; a++)
        for (int b = 0; b < n && !rc; b++)
            if (a != b && pr->peer_access[a][b] && pr->peer_access[b][a]) {
                cudaSetDevice(a);
                e = cudaDeviceEnablePeerAccess(b, 0);
                if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
                    rc = fail(err, "cudaDeviceEnablePeerAccess", e);
                    break;
                }
                cudaGetLastError();
                cudaSetDevice(b);
                e = cudaDeviceEnablePeerAccess(a, 0);
                if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
                    rc = fail(err, "cudaDeviceEnablePeerAccess", e);
                    break;
                }
                cudaGetLastError();
                rc = sweep(&c, MPRESS_PROBE_PEER, MPRESS_PROBE_PEER_BOTH, a, b, err);
            }
done:
    for (int g = 0; g < n; g++) {
        cudaSetDevice(g);
        for (int h = 0; h < n; h++)
            if (h != g && pr->peer_access[g][h])
                cudaDeviceDisablePeerAccess(h);
        cudaGetLastError();
        if (c.s1[g])
            cudaStreamDestroy(c.s1[g]);
        if (c.s2[g])
            cudaStreamDestroy(c.s2[g]);
        cudaFree(c.dev_a[g]);
        cudaFree(c.dev_b[g]);
    }
    cudaFreeHost(c.host_a);
    cudaFreeHost(c.host_b);
    if (rc)
        mpress_probe_finish(pr);
    return rc;
}
