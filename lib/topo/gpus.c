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
 * H200 = 6 stacks of 24 GiB with 141 GiB enabled); so are GDDR ones (8 or 16 Gbit chips). What
 * nvidia-smi reports as usable is a little less; the per-GPU reserve of each server covers
 * that. NVLink bandwidth is per link per direction: NVLink2, NVLink3 and NVLink4 all give
 * 25 GB/s per link per direction on the data-centre parts, which differ in the number of
 * links per GPU (6, 12, 18); GA102 boards (A40, RTX A6000, RTX 3090) have 4 narrower links of
 * 14.0625 GB/s for a two-GPU bridge. The PCIe cards' NVLink is a bridge between two GPUs.
 * fp16 is the dense tensor-core rate with fp32 accumulation, what mixed-precision training
 * runs at: GeForce parts accumulate in fp32 at half their fp16-accumulate rate. */
static const struct mpress_gpu_spec specs[] = {
    /* key, model, memory, fp16 dense tensor, fp32, memory bandwidth, NVLink ports, per link,
     * bf16 tensor cores (Pascal, Volta and Turing have none; Ampere and later give bf16 the fp16
     * rate), PCIe generation of the GPU's host link */
    {"v100", "V100-SXM2-32GB", 32 * GIB, 125 * T, 15.7 * T, 900 * GBS, 6, 25 * GBS, 0, 3},
    {"v100-16g", "V100-SXM2-16GB", 16 * GIB, 125 * T, 15.7 * T, 900 * GBS, 6, 25 * GBS, 0, 3},
    {"v100-sxm3", "V100-SXM3-32GB", 32 * GIB, 125 * T, 15.7 * T, 900 * GBS, 6, 25 * GBS, 0, 3},
    {"a100-40g", "A100-SXM4-40GB", 40 * GIB, 312 * T, 19.5 * T, 1555 * GBS, 12, 25 * GBS, 1, 4},
    {"a100-80g", "A100-SXM4-80GB", 80 * GIB, 312 * T, 19.5 * T, 2039 * GBS, 12, 25 * GBS, 1, 4},
    {"h100", "H100-SXM5-80GB", 80 * GIB, 989.5 * T, 67 * T, 3350 * GBS, 18, 25 * GBS, 1, 5},
    {"h200", "H200-SXM5-141GB", 141 * GIB, 989.5 * T, 67 * T, 4800 * GBS, 18, 25 * GBS, 1, 5},
    /* PCIe data-centre cards */
    {"v100-pcie", "V100-PCIE-32GB", 32 * GIB, 112 * T, 14 * T, 900 * GBS, 0, 0, 0, 3},
    {"v100-pcie-16g", "V100-PCIE-16GB", 16 * GIB, 112 * T, 14 * T, 900 * GBS, 0, 0, 0, 3},
    {"a100-pcie-40g", "A100-PCIE-40GB", 40 * GIB, 312 * T, 19.5 * T, 1555 * GBS, 12, 25 * GBS,
     1, 4},
    {"a100-pcie-80g", "A100-PCIE-80GB", 80 * GIB, 312 * T, 19.5 * T, 1935 * GBS, 12, 25 * GBS,
     1, 4},
    {"h100-pcie", "H100-PCIE-80GB", 80 * GIB, 756 * T, 51 * T, 2000 * GBS, 12, 25 * GBS, 1, 5},
    {"t4", "T4", 16 * GIB, 65 * T, 8.1 * T, 320 * GBS, 0, 0, 0, 3},
    {"a10", "A10", 24 * GIB, 125 * T, 31.2 * T, 600 * GBS, 0, 0, 1, 4},
    {"a40", "A40", 48 * GIB, 149.7 * T, 37.4 * T, 696 * GBS, 4, 14.0625 * GBS, 1, 4},
    {"l4", "L4", 24 * GIB, 121 * T, 30.3 * T, 300 * GBS, 0, 0, 1, 4},
    {"l40s", "L40S", 48 * GIB, 362.05 * T, 91.6 * T, 864 * GBS, 0, 0, 1, 4},
    /* workstation and desktop cards */
    {"rtx-a6000", "RTX-A6000", 48 * GIB, 154.8 * T, 38.7 * T, 768 * GBS, 4, 14.0625 * GBS, 1, 4},
    {"rtx-3090", "RTX-3090", 24 * GIB, 71 * T, 35.6 * T, 936 * GBS, 4, 14.0625 * GBS, 1, 4},
    {"rtx-4090", "RTX-4090", 24 * GIB, 165.2 * T, 82.6 * T, 1008 * GBS, 0, 0, 1, 4},
    /* Pascal: no tensor cores, fp16 at 1/64 of the fp32 rate (2 fp16 FLOP per clock per SM
     * against 128 for fp32, CUDA C++ Programming Guide, compute capability 6.1); train it in
     * fp32 (--dtype fp32). */
    {"gtx-1080ti", "GTX-1080-Ti", 11 * GIB, 0.1772 * T, 11.34 * T, 484 * GBS, 0, 0, 0, 3},
    {NULL, NULL, 0, 0, 0, 0, 0, 0, 0, 0},
};

const struct mpress_gpu_spec *mpress_gpu_specs(void)
{
    return specs;
}

void mpress_gpu_spec_keys_print(FILE *out, int indent, int width)
{
    int col = indent;
    fprintf(out, "%*s", indent, "");
    for (const struct mpress_gpu_spec *s = specs; s->key; s++) {
        int len = (int)strlen(s->key) + (s != specs);
        if (s != specs && col + len > width) {
            fprintf(out, "\n%*s", indent, "");
            col = indent;
            len--;
        } else if (s != specs) {
            fputc(' ', out);
        }
        fputs(s->key, out);
        col += len;
    }
    fputc('\n', out);
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
    {0x1db1, "v100-16g"},      {0x1db5, "v100"},          {0x1db8, "v100-sxm3"},
    {0x20b0, "a100-40g"},      {0x20b2, "a100-80g"},      {0x2330, "h100"},
    {0x2335, "h200"},          {0x1db4, "v100-pcie-16g"}, {0x1db6, "v100-pcie"},
    {0x20f1, "a100-pcie-40g"}, {0x20b5, "a100-pcie-80g"}, {0x2331, "h100-pcie"},
    {0x2236, "a10"},           {0x2235, "a40"},           {0x27b8, "l4"},
    {0x26b9, "l40s"},          {0x2230, "rtx-a6000"},     {0x2204, "rtx-3090"},
    {0x2684, "rtx-4090"},      {0x1b06, "gtx-1080ti"},    {0x1eb8, "t4"},
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
