/* `mpress topo show`: a GPU matrix in the style of `nvidia-smi topo -m` followed by the
 * bandwidths, memory and host figures the planner uses. */
#include <stdio.h>

#include "mpress/topology.h"
#include "strbuf.h"

/* The relation of a GPU pair as nvidia-smi names it: NV# where NVLink joins them, else the
 * PCIe path: PIX behind one switch, NODE within a socket, SYS across sockets. */
static void relation(const struct mpress_topology *t, int i, int j, char *out, size_t size)
{
    if (i == j)
        snprintf(out, size, " X");
    else if (t->nvlinks[i][j] > 0)
        snprintf(out, size, "NV%d", t->nvlinks[i][j]);
    else if (t->gpus[i].pcie_switch == t->gpus[j].pcie_switch)
        snprintf(out, size, "PIX");
    else if (t->gpus[i].socket == t->gpus[j].socket)
        snprintf(out, size, "NODE");
    else
        snprintf(out, size, "SYS");
}

static double gb(double bytes_per_s)
{
    return bytes_per_s / 1e9;
}

static double gib(uint64_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0 * 1024.0);
}

char *mpress_topology_render(const struct mpress_topology *t)
{
    struct mpress_strbuf b = {0};
    int n = t->n_gpus;
    sb_printf(&b, "%s: %s\n\n", t->name, t->description);
    sb_printf(&b, "%-8s", "");
    for (int j = 0; j < n; j++) {
        char h[16];
        snprintf(h, sizeof(h), "GPU%d", j);
        sb_printf(&b, "%-8s", h);
    }
    sb_printf(&b, "Switch  Socket\n");
    for (int i = 0; i < n; i++) {
        char h[16];
        snprintf(h, sizeof(h), "GPU%d", i);
        sb_printf(&b, "%-8s", h);
        for (int j = 0; j < n; j++) {
            char r[16];
            relation(t, i, j, r, sizeof(r));
            sb_printf(&b, "%-8s", r);
        }
        sb_printf(&b, "%-8d%d\n", t->gpus[i].pcie_switch, t->gpus[i].socket);
    }
    sb_printf(&b, "\nLegend:\n"
            "  X    = self\n"
            "  NV#  = # NVLinks%s\n"
            "  PIX  = behind the same PCIe switch\n"
            "  NODE = different PCIe switches on the same socket\n"
            "  SYS  = across the socket link\n\n",
        t->fabric == MPRESS_FABRIC_NVSWITCH ? " (each GPU's ports, through NVSwitch)" : "");

    sb_printf(&b, "Fabric: %s\n",
              t->fabric == MPRESS_FABRIC_NVSWITCH ? "NVSwitch" : "direct NVLink");
    sb_printf(&b, "NVLink: %.1f GB/s per link per direction\n", gb(t->nvlink_bytes_per_s));
    sb_printf(&b, "Peer bandwidth over NVLink (GB/s per direction):\n");
    for (int i = 0; i < n; i++) {
        sb_printf(&b, "  GPU%-3d", i);
        for (int j = 0; j < n; j++) {
            if (i == j)
                sb_printf(&b, " %6s", "-");
            else
                sb_printf(&b, " %6.1f", gb(mpress_topology_p2p_bytes_per_s(t, i, j)));
        }
        sb_printf(&b, "\n");
    }
    sb_printf(&b, "PCIe: %.1f GB/s per GPU per direction\n", gb(t->pcie_bytes_per_s));
    for (int k = 0; k < t->n_switches; k++) {
        sb_printf(&b, "  switch %d: socket %d, uplink %.1f GB/s, GPUs", k, t->switches[k].socket,
            gb(t->switches[k].uplink_bytes_per_s));
        for (int i = 0; i < n; i++)
            if (t->gpus[i].pcie_switch == k)
                sb_printf(&b, " %d", i);
        sb_printf(&b, "\n");
    }
    sb_printf(&b, "Memory per GPU:\n");
    for (int i = 0; i < n; i++) {
        const struct mpress_topo_gpu *g = &t->gpus[i];
        sb_printf(&b,
            "  GPU%-3d %-18s %7.2f GiB, reserve %5.2f GiB, %6.1f TFLOP/s fp16, "
            "%5.1f TFLOP/s fp32, HBM %6.1f GB/s, %d NVLink ports\n",
            i, g->model, gib(g->memory_bytes), gib(g->reserve_bytes), g->flops_fp16 / 1e12,
            g->flops_fp32 / 1e12, gb(g->hbm_bytes_per_s), g->nvlink_ports);
    }
    sb_printf(&b, "Host: sockets %d, %.0f GiB memory, %.1f GB/s memory and %.2f TFLOP/s fp32 per "
            "socket, socket link %.1f GB/s per direction\n",
        t->n_sockets, gib(t->host_memory_bytes), gb(t->host_memory_bytes_per_s),
        t->cpu_flops / 1e12, gb(t->socket_link_bytes_per_s));
    sb_printf(&b, "Bandwidth source: %s\n", t->bandwidth_source);
    return sb_finish(&b);
}
