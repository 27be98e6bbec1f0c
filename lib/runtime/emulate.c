/* Emulated servers: a topology whose GPUs are the host backend's devices (workers with their own
 * memory arenas on this machine), so that a small model meets a real memory wall on a machine
 * with no GPU. With measurement, FLOP/s and bandwidths are this machine's: SGEMM on one thread
 * and memcpy between two buffers. Conventions: docs/topologies.md, "Emulated servers". */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "host_ops.h"
#include "topo_internal.h"

/* Square SGEMM size and memcpy bytes of the measurement: large enough that a call takes
 * milliseconds (far above the clock's resolution), small enough to run in a second or so. */
#define GEMM_N 512
#define COPY_BYTES ((size_t)64 << 20)
#define WARMUP 1
#define REPEAT 5

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of REPEAT timed runs after WARMUP untimed ones (the first run also faults the pages
 * in). kind 0: SGEMM of GEMM_N^3 on a, b into c; 1: memcpy of COPY_BYTES from a to c. */
static double timed(int kind, const float *a, const float *b, float *c)
{
    double t[REPEAT];
    for (int r = 0; r < WARMUP + REPEAT; r++) {
        double t0 = now_s();
        if (kind == 0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, GEMM_N, GEMM_N, GEMM_N, 1.0f,
                        a, GEMM_N, b, GEMM_N, 0.0f, c, GEMM_N);
        else
            memcpy(c, a, COPY_BYTES);
        double t1 = now_s();
        if (r >= WARMUP)
            t[r - WARMUP] = t1 - t0;
    }
    qsort(t, REPEAT, sizeof(t[0]), cmp_double);
    return t[REPEAT / 2];
}

/* *flops: 2 N^3 / the median SGEMM time on one OpenBLAS thread (one emulated device is one
 * worker); *bytes_per_s: bytes copied / the median memcpy time. */
static int measure(double *flops, double *bytes_per_s, struct mpress_error *err)
{
    size_t n = (size_t)GEMM_N * GEMM_N;
    size_t words = COPY_BYTES / sizeof(float);
    float *a = malloc(words * sizeof(float)), *b = malloc(n * sizeof(float));
    float *c = malloc(words * sizeof(float));
    if (!a || !b || !c) {
        free(a);
        free(b);
        free(c);
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory for the measurement");
    }
    for (size_t i = 0; i < words; i++)
        a[i] = (float)(i % 97) * 0.01f;
    for (size_t i = 0; i < n; i++)
        b[i] = (float)(i % 89) * 0.01f;
    memset(c, 0, words * sizeof(float));
    int threads = mpress_host_blas_threads(1);
    double tg = timed(0, a, b, c);
    mpress_host_blas_threads(threads);
    double tc = timed(1, a, NULL, c);
    free(a);
    free(b);
    free(c);
    if (!(tg > 0) || !(tc > 0))
        return mpress_error_set(err, MPRESS_ESYSTEM, "the clock did not advance while measuring");
    *flops = 2.0 * GEMM_N * GEMM_N * (double)GEMM_N / tg;
    *bytes_per_s = (double)COPY_BYTES / tc;
    return 0;
}

int mpress_topology_emulate(const struct mpress_topology_emulate_options *o,
                            struct mpress_topology *out, struct mpress_error *err)
{
    if (o->devices < 1 || o->devices > MPRESS_MAX_GPUS)
        return mpress_error_set(err, MPRESS_EUSAGE, "an emulated server has 1 to %d devices, "
                                "not %d", MPRESS_MAX_GPUS, o->devices);
    if (o->memory_bytes == 0)
        return mpress_error_set(err, MPRESS_EUSAGE, "an emulated device needs memory");
    uint64_t reserve = o->reserve_given ? o->reserve_bytes
                                        : o->memory_bytes / MPRESS_EMULATED_RESERVE_DIVISOR;
    if (reserve >= o->memory_bytes)
        return mpress_error_set(err, MPRESS_EUSAGE, "the reserve (%llu bytes) leaves nothing of "
                                "the device memory (%llu bytes)",
                                (unsigned long long)reserve,
                                (unsigned long long)o->memory_bytes);
    double flops = MPRESS_EMULATED_FLOPS, bw = MPRESS_EMULATED_BYTES_PER_S;
    if (o->measure) {
        int rc = measure(&flops, &bw, err);
        if (rc)
            return rc;
    }

    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "emulated-%d", o->devices);
    snprintf(out->description, sizeof(out->description),
             "%d %s devices of %llu bytes on this machine's CPU and memory (%s)", o->devices,
             MPRESS_EMULATED_GPU, (unsigned long long)o->memory_bytes,
             o->measure ? "SGEMM and memcpy rates measured" : "default rates, not measured");
    out->n_gpus = o->devices;
    /* Any two arenas are one memcpy apart: a switch fabric with one port per device, so copies
     * to several peers at once share that device's rate. */
    out->fabric = MPRESS_FABRIC_NVSWITCH;
    out->nvlink_bytes_per_s = bw;
    out->pcie_bytes_per_s = bw;
    out->n_switches = 1;
    out->switches[0].uplink_bytes_per_s = bw;
    out->switches[0].socket = 0;
    out->n_sockets = 1;
    for (int i = 0; i < o->devices; i++) {
        struct mpress_topo_gpu *g = &out->gpus[i];
        snprintf(g->model, sizeof(g->model), "%s", MPRESS_EMULATED_GPU);
        g->memory_bytes = o->memory_bytes;
        g->reserve_bytes = reserve;
        g->flops_fp16 = flops;   /* 16-bit tensors run in fp32 arithmetic on the host */
        g->flops_fp32 = flops;
        g->hbm_bytes_per_s = bw;
        g->nvlink_ports = 1;
        g->pcie_switch = 0;
        g->socket = 0;
        for (int j = 0; j < o->devices; j++)
            out->nvlinks[i][j] = i == j ? 0 : 1;
    }
    out->host_memory_bytes = o->host_memory_bytes ? o->host_memory_bytes
                                                  : MPRESS_EMULATED_HOST_MEMORY;
    out->host_memory_bytes_per_s = bw;
    out->cpu_flops = flops;
    snprintf(out->bandwidth_source, sizeof(out->bandwidth_source), "%s",
             o->measure ? "measured" : "datasheet");
    return MPRESS_OK;
}
