/* The built-in GPU table: datasheet numbers for the GPUs of the built-in servers, used to fill
 * topologies, analytic profiles (`--gpu`) and what an imported dump lacks. Sources for every
 * number are in docs/topologies.md. */
#include <stddef.h>
#include <strings.h>

#include "mpress/topology.h"

#define GIB (1024ull * 1024ull * 1024ull)
#define T 1e12
#define GBS 1e9

/* HBM capacities are binary: the stacks are 4, 8, 16 or 24 GiB each (V100 32GB = 4 x 8 GiB,
 * H200 = 6 stacks of 24 GiB with 141 GiB enabled). What nvidia-smi reports as usable is a
 * little less; the per-GPU reserve of each server covers that. NVLink bandwidth is per link per
 * direction: NVLink2, NVLink3 and NVLink4 all give 25 GB/s per link per direction; the
 * generations differ in the number of links per GPU (6, 12, 18). */
static const struct mpress_gpu_spec specs[] = {
    /* key, model, memory, fp16 dense tensor, fp32, HBM, NVLink ports, per link */
    {"v100", "V100-SXM2-32GB", 32 * GIB, 125 * T, 15.7 * T, 900 * GBS, 6, 25 * GBS},
    {"v100-16g", "V100-SXM2-16GB", 16 * GIB, 125 * T, 15.7 * T, 900 * GBS, 6, 25 * GBS},
    {"v100-sxm3", "V100-SXM3-32GB", 32 * GIB, 125 * T, 15.7 * T, 900 * GBS, 6, 25 * GBS},
    {"a100-40g", "A100-SXM4-40GB", 40 * GIB, 312 * T, 19.5 * T, 1555 * GBS, 12, 25 * GBS},
    {"a100-80g", "A100-SXM4-80GB", 80 * GIB, 312 * T, 19.5 * T, 2039 * GBS, 12, 25 * GBS},
    {"h100", "H100-SXM5-80GB", 80 * GIB, 989.5 * T, 67 * T, 3350 * GBS, 18, 25 * GBS},
    {"h200", "H200-SXM5-141GB", 141 * GIB, 989.5 * T, 67 * T, 4800 * GBS, 18, 25 * GBS},
    {NULL, NULL, 0, 0, 0, 0, 0, 0},
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
