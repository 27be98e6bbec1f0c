/* The built-in GPU table: datasheet numbers for the GPUs of the built-in servers, used to fill
 * topologies, analytic profiles (`--gpu`) and what an imported dump lacks. Sources for every
 * number are in docs/topologies.md. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "topo_internal.h"

#define GIB (1024ull * 1024ull * 1024ull)
#define T 1e12
#define GBS 1e9

/* HBM capacities are binary: the stacks are 4, 8, 16 or 24 GiB each (V100 32GB = 4 x 8 GiB,
 * H200 = 6 stacks of 24 GiB with 141 GiB enabled). What nvidia-smi reports as usable is a
 * little less; the per-GPU reserve of each server covers that. NVLink bandwidth is per link per
 * direction: NVLink2, NVLink3 and NVLink4 all give 25 GB/s per link per direction; the
 * generations differ in the number of links per GPU (6, 12, 18). */
static const struct mpress_gpu_spec specs[] = {
    /* key, model, memory, fp16 dense tensor, fp32, HBM, NVLink ports, per link, bf16 tensor
     * cores (Volta's tensor cores take fp16 only; Ampere and Hopper give bf16 the fp16 rate) */
    {"v100", "V100-SXM2-32GB", 32 * GIB, 125 * T, 15.7 * T, 900 * GBS, 6, 25 * GBS, 0},
    {"v100-16g", "V100-SXM2-16GB", 16 * GIB, 125 * T, 15.7 * T, 900 * GBS, 6, 25 * GBS, 0},
    {"v100-sxm3", "V100-SXM3-32GB", 32 * GIB, 125 * T, 15.7 * T, 900 * GBS, 6, 25 * GBS, 0},
    {"a100-40g", "A100-SXM4-40GB", 40 * GIB, 312 * T, 19.5 * T, 1555 * GBS, 12, 25 * GBS, 1},
    {"a100-80g", "A100-SXM4-80GB", 80 * GIB, 312 * T, 19.5 * T, 2039 * GBS, 12, 25 * GBS, 1},
    {"h100", "H100-SXM5-80GB", 80 * GIB, 989.5 * T, 67 * T, 3350 * GBS, 18, 25 * GBS, 1},
    {"h200", "H200-SXM5-141GB", 141 * GIB, 989.5 * T, 67 * T, 4800 * GBS, 18, 25 * GBS, 1},
    {NULL, NULL, 0, 0, 0, 0, 0, 0, 0},
};

const struct mpress_gpu_spec *mpress_gpu_specs(void)
{
    return specs;
}

const struct mpress_gpu_spec *mpress_gpu_spec_find(const char *key_or_model)
{
    if (!key_or_model)
        return NULL;
    for (const struct mpress_gpu_spec *s = specs; s->key; s++)
        if (strcasecmp(s->key, key_or_model) == 0 || strcasecmp(s->model, key_or_model) == 0)
            return s;
    return NULL;
}

/* PCI device ids (vendor 0x10de) as listed in the PCI ID database (pci-ids.ucw.cz). */
static const struct {
    unsigned id;
    const char *key;
} pci_ids[] = {
    {0x1db1, "v100-16g"}, {0x1db5, "v100"},     {0x1db8, "v100-sxm3"}, {0x20b0, "a100-40g"},
    {0x20b2, "a100-80g"}, {0x2330, "h100"},     {0x2335, "h200"},
};

const struct mpress_gpu_spec *topo_gpu_spec_by_pci_id(unsigned device_id)
{
    for (size_t i = 0; i < sizeof(pci_ids) / sizeof(pci_ids[0]); i++)
        if (pci_ids[i].id == device_id)
            return mpress_gpu_spec_find(pci_ids[i].key);
    return NULL;
}

uint64_t topo_reserve_bytes(uint64_t memory_bytes)
{
    return GIB + memory_bytes / 32;
}

/* Measured DGX-1 PCIe Gen3 x16 host<->device copy rate over the theoretical one. */
#define PCIE_EFFICIENCY (12.0 / (8.0 * 128.0 / 130.0 / 8.0 * 16.0))

double topo_pcie_bytes_per_s(double gts, int width)
{
    /* Gen1/2 use 8b/10b coding, Gen3 and later 128b/130b (PCIe base specifications). */
    double coding;
    if (gts == 2.5 || gts == 5.0)
        coding = 8.0 / 10.0;
    else if (gts == 8.0 || gts == 16.0 || gts == 32.0 || gts == 64.0)
        coding = 128.0 / 130.0;
    else
        return 0;
    if (width < 1)
        return 0;
    return gts * 1e9 * coding / 8.0 * width * PCIE_EFFICIENCY;
}

void topo_gpu_fill(struct mpress_topo_gpu *g, const struct mpress_gpu_spec *spec)
{
    snprintf(g->model, sizeof(g->model), "%s", spec->model);
    g->memory_bytes = spec->memory_bytes;
    g->reserve_bytes = topo_reserve_bytes(spec->memory_bytes);
    g->flops_fp16 = spec->flops_fp16;
    g->flops_fp32 = spec->flops_fp32;
    g->hbm_bytes_per_s = spec->hbm_bytes_per_s;
    g->nvlink_ports = spec->nvlink_ports;
}

void topo_note(char *notes, size_t size, const char *fmt, ...)
{
    if (!notes || size == 0)
        return;
    size_t used = strnlen(notes, size);
    if (used >= size - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(notes + used, size - used, fmt, ap);
    va_end(ap);
}
