/* The built-in servers (`--topology NAME`), restriction to the first n GPUs, and peer
 * bandwidth. Every number is cited in docs/topologies.md; GPU numbers come from the GPU table. */
#include <stdio.h>
#include <string.h>

#include "topo_internal.h"

#define GIB (1024ull * 1024ull * 1024ull)

/* One server: the GPU table row, how GPUs sit behind PCIe switches and sockets, and the host. */
struct server {
    const char *name;
    const char *description;
    const char *gpu;          /* GPU table key */
    int n_gpus;
    int nvswitch;             /* 1: NVSwitch fabric, 0: the DGX-1 hybrid cube-mesh */
    int gpus_per_switch;      /* consecutive GPUs share one PCIe switch */
    int gpus_per_socket;      /* consecutive GPUs share one socket */
    double pcie_gts;          /* PCIe rate per lane (x16 links everywhere) */
    uint64_t host_memory_bytes;
    double host_memory_bytes_per_s; /* per socket */
    double cpu_flops;               /* per socket, fp32 */
    double socket_link_bytes_per_s; /* per direction */
};

/* Rows in the order of struct server's fields; one list feeds both the table and the name
 * list. CPU peak = cores x base clock x fp32 FLOP per cycle (2 FMA units x SIMD lanes x 2); host
 * memory bandwidth = channels x 8 bytes x transfer rate. Derivations in docs/topologies.md. */
#define SERVERS(X)                                                                               \
    X("dgx1", "NVIDIA DGX-1: 8x V100-SXM2-32GB, NVLink2 hybrid cube-mesh, 2x Xeon E5-2698 v4",  \
      "v100", 8, 0, 2, 4, 8.0, 512 * GIB, 4 * 8 * 2133e6, 20 * 2.2e9 * 32, 2 * 19.2e9)        \
    X("dgx1-16g",                                                                              \
      "NVIDIA DGX-1: 8x V100-SXM2-16GB, NVLink2 hybrid cube-mesh, 2x Xeon E5-2698 v4",        \
      "v100-16g", 8, 0, 2, 4, 8.0, 512 * GIB, 4 * 8 * 2133e6, 20 * 2.2e9 * 32, 2 * 19.2e9)    \
    X("dgx2", "NVIDIA DGX-2: 16x V100-SXM3-32GB, NVSwitch, 2x Xeon Platinum 8168", "v100-sxm3", \
      16, 1, 2, 8, 8.0, 1536 * GIB, 6 * 8 * 2666e6, 24 * 2.7e9 * 64, 3 * 20.8e9)               \
    X("dgx-a100", "NVIDIA DGX A100 640GB: 8x A100-SXM4-80GB, NVSwitch, 2x AMD EPYC 7742",       \
      "a100-80g", 8, 1, 2, 4, 16.0, 2048 * GIB, 8 * 8 * 3200e6, 64 * 2.25e9 * 32, 4 * 36e9)   \
    X("dgx-a100-40g", "NVIDIA DGX A100 320GB: 8x A100-SXM4-40GB, NVSwitch, 2x AMD EPYC 7742",   \
      "a100-40g", 8, 1, 2, 4, 16.0, 1024 * GIB, 8 * 8 * 3200e6, 64 * 2.25e9 * 32, 4 * 36e9)   \
    X("dgx-h100", "NVIDIA DGX H100: 8x H100-SXM5-80GB, NVSwitch, 2x Xeon Platinum 8480C",      \
      "h100", 8, 1, 2, 4, 32.0, 2048 * GIB, 8 * 8 * 4800e6, 56 * 2.0e9 * 64, 4 * 32e9)         \
    X("dgx-h200", "NVIDIA DGX H200: 8x H200-SXM5-141GB, NVSwitch, 2x Xeon Platinum 8480C",     \
      "h200", 8, 1, 2, 4, 32.0, 2048 * GIB, 8 * 8 * 4800e6, 56 * 2.0e9 * 64, 4 * 32e9)

#define SERVER_ROW(name, ...) {name, __VA_ARGS__},
#define SERVER_NAME(name, ...) name,
static const struct server servers[] = {SERVERS(SERVER_ROW)};
#define N_SERVERS (sizeof(servers) / sizeof(servers[0]))

static const char *const names[] = {SERVERS(SERVER_NAME) NULL};

/* DGX-1 hybrid cube-mesh (DGX-1 with Tesla V100 system architecture white paper, fig. 3):
 * double links form the ring 0-3-2-1-5-6-7-4-0, single links the remaining cube edges. */
static const int dgx1_links[][3] = {
    {0, 3, 2}, {3, 2, 2}, {2, 1, 2}, {1, 5, 2}, {5, 6, 2}, {6, 7, 2}, {7, 4, 2}, {4, 0, 2},
    {0, 1, 1}, {0, 2, 1}, {1, 3, 1}, {2, 6, 1}, {3, 7, 1}, {4, 5, 1}, {4, 6, 1}, {5, 7, 1},
};

const char *const *mpress_topology_builtin_names(void)
{
    return names;
}

int mpress_topology_builtin(const char *name, struct mpress_topology *out,
                            struct mpress_error *err)
{
    const struct server *s = NULL;
    for (size_t i = 0; i < N_SERVERS; i++)
        if (name && strcmp(servers[i].name, name) == 0)
            s = &servers[i];
    if (!s)
        return mpress_error_set(err, MPRESS_EUSAGE, "unknown built-in server '%s'",
                                name ? name : "(null)");
    const struct mpress_gpu_spec *spec = mpress_gpu_spec_find(s->gpu);
    if (!spec)
        return mpress_error_set(err, MPRESS_ESYSTEM, "GPU table has no '%s'", s->gpu);

    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%s", s->name);
    snprintf(out->description, sizeof(out->description), "%s", s->description);
    out->n_gpus = s->n_gpus;
    out->fabric = s->nvswitch ? MPRESS_FABRIC_NVSWITCH : MPRESS_FABRIC_DIRECT;
    out->nvlink_bytes_per_s = spec->nvlink_bytes_per_s;
    out->pcie_bytes_per_s = topo_pcie_bytes_per_s(s->pcie_gts, 16);
    out->n_switches = s->n_gpus / s->gpus_per_switch;
    out->n_sockets = s->n_gpus / s->gpus_per_socket;
    for (int i = 0; i < s->n_gpus; i++) {
        topo_gpu_fill(&out->gpus[i], spec);
        out->gpus[i].pcie_switch = i / s->gpus_per_switch;
        out->gpus[i].socket = i / s->gpus_per_socket;
    }
    /* Each switch's uplink to its socket is one x16 link of the same generation. */
    for (int k = 0; k < out->n_switches; k++) {
        out->switches[k].uplink_bytes_per_s = out->pcie_bytes_per_s;
        out->switches[k].socket = k * s->gpus_per_switch / s->gpus_per_socket;
    }
    if (s->nvswitch) {
        for (int i = 0; i < s->n_gpus; i++)
            for (int j = 0; j < s->n_gpus; j++)
                out->nvlinks[i][j] = i == j ? 0 : spec->nvlink_ports;
    } else {
        for (size_t k = 0; k < sizeof(dgx1_links) / sizeof(dgx1_links[0]); k++) {
            int a = dgx1_links[k][0], b = dgx1_links[k][1];
            out->nvlinks[a][b] = out->nvlinks[b][a] = dgx1_links[k][2];
        }
    }
    out->socket_link_bytes_per_s = s->socket_link_bytes_per_s;
    out->host_memory_bytes = s->host_memory_bytes;
    out->host_memory_bytes_per_s = s->host_memory_bytes_per_s;
    out->cpu_flops = s->cpu_flops;
    snprintf(out->bandwidth_source, sizeof(out->bandwidth_source), "datasheet");
    return MPRESS_OK;
}

int mpress_topology_restrict(struct mpress_topology *topo, int n, struct mpress_error *err)
{
    if (n < 1 || n > topo->n_gpus)
        return mpress_error_set(err, MPRESS_EUSAGE, "%d GPUs asked for, '%s' has %d", n,
                                topo->name, topo->n_gpus);
    if (n == topo->n_gpus)
        return MPRESS_OK;
    /* New index of each switch and socket still in use, in order of first use by a GPU, so
     * that restricting a built-in keeps its numbering where nothing was dropped. */
    int sw_map[MPRESS_MAX_GPUS], so_map[MPRESS_MAX_GPUS];
    for (int i = 0; i < MPRESS_MAX_GPUS; i++)
        sw_map[i] = so_map[i] = -1;
    int n_sw = 0, n_so = 0;
    struct mpress_topo_switch sw[MPRESS_MAX_GPUS];
    for (int i = 0; i < n; i++) {
        struct mpress_topo_gpu *g = &topo->gpus[i];
        if (g->socket >= 0 && g->socket < MPRESS_MAX_GPUS && so_map[g->socket] < 0)
            so_map[g->socket] = n_so++;
        int k = g->pcie_switch;
        if (k >= 0 && k < topo->n_switches && sw_map[k] < 0) {
            sw_map[k] = n_sw;
            sw[n_sw++] = topo->switches[k];
        }
    }
    /* A switch's socket is normally that of its GPUs; keep any other one it names too. */
    for (int k = 0; k < n_sw; k++) {
        int so = sw[k].socket;
        if (so >= 0 && so < MPRESS_MAX_GPUS && so_map[so] < 0)
            so_map[so] = n_so++;
        sw[k].socket = so >= 0 && so < MPRESS_MAX_GPUS ? so_map[so] : 0;
    }
    for (int i = 0; i < n; i++) {
        struct mpress_topo_gpu *g = &topo->gpus[i];
        g->pcie_switch = g->pcie_switch >= 0 && g->pcie_switch < topo->n_switches
                             ? sw_map[g->pcie_switch]
                             : 0;
        g->socket = g->socket >= 0 && g->socket < MPRESS_MAX_GPUS ? so_map[g->socket] : 0;
    }
    memset(&topo->gpus[n], 0, sizeof(topo->gpus[0]) * (size_t)(MPRESS_MAX_GPUS - n));
    for (int i = 0; i < MPRESS_MAX_GPUS; i++)
        for (int j = 0; j < MPRESS_MAX_GPUS; j++)
            if (i >= n || j >= n)
                topo->nvlinks[i][j] = 0;
    memset(topo->switches, 0, sizeof(topo->switches));
    memcpy(topo->switches, sw, sizeof(sw[0]) * (size_t)n_sw);
    topo->n_switches = n_sw;
    topo->n_sockets = n_so;
    topo->n_gpus = n;
    size_t len = strlen(topo->description);
    snprintf(topo->description + len, sizeof(topo->description) - len, " (first %d GPUs)", n);
    return MPRESS_OK;
}

double mpress_topology_p2p_bytes_per_s(const struct mpress_topology *topo, int a, int b)
{
    if (!topo || a < 0 || b < 0 || a >= topo->n_gpus || b >= topo->n_gpus || a == b)
        return 0;
    if (topo->fabric == MPRESS_FABRIC_NVSWITCH) {
        /* Through the switch any pair runs at the rate of the smaller end's ports; traffic to
         * several peers at once shares those ports (the caller models that sharing). */
        int ports = topo->gpus[a].nvlink_ports < topo->gpus[b].nvlink_ports
                        ? topo->gpus[a].nvlink_ports
                        : topo->gpus[b].nvlink_ports;
        if (topo->nvlinks[a][b] > 0 && topo->nvlinks[a][b] < ports)
            ports = topo->nvlinks[a][b];
        return topo->nvlinks[a][b] > 0 ? ports * topo->nvlink_bytes_per_s : 0;
    }
    return topo->nvlinks[a][b] * topo->nvlink_bytes_per_s;
}
