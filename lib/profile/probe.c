/* Bandwidth probe results -> a topology with measured bandwidths. The measuring itself is in
 * probe_cuda.c (built with CUDA only); everything here is plain C so that the inference rules
 * are tested on synthetic measurements. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "mpress/trace.h"
#include "topo_internal.h"
#include "strbuf.h"

void mpress_probe_finish(struct mpress_probe *pr)
{
    if (!pr)
        return;
    free(pr->samples);
    memset(pr, 0, sizeof(*pr));
}

const char *mpress_probe_kind_name(enum mpress_probe_kind k)
{
    static const char *const names[] = {"h2d", "d2h", "h2d-both", "d2h-both",
                                        "peer-staged", "peer-staged-both", "peer", "peer-both"};
    return (unsigned)k < MPRESS_PROBE_KINDS ? names[k] : "?";
}

/* Best rate of a kind between src and dst over all sizes (large copies reach the link's rate;
 * small ones show latency). 0 when not measured. */
static double best(const struct mpress_probe *pr, enum mpress_probe_kind k, int src, int dst)
{
    double b = 0;
    for (int i = 0; i < pr->n_samples; i++) {
        const struct mpress_probe_sample *s = &pr->samples[i];
        if (s->kind == k && s->src == src && s->dst == dst && s->bytes_per_s > b)
            b = s->bytes_per_s;
    }
    return b;
}

/* The GPU table row for a driver name such as "NVIDIA H200" or "Tesla V100-SXM2-32GB": rows
 * whose family (key up to '-') occurs in the name, the one closest in memory size. */
static const struct mpress_gpu_spec *spec_for(const char *name, uint64_t memory)
{
    char low[64];
    size_t n = 0;
    for (; name[n] && n + 1 < sizeof(low); n++)
        low[n] = (char)tolower((unsigned char)name[n]);
    low[n] = '\0';
    const struct mpress_gpu_spec *pick = NULL;
    double dist = 0;
    for (const struct mpress_gpu_spec *s = mpress_gpu_specs(); s && s->key; s++) {
        char model[64];
        size_t m = 0;
        for (; s->model[m] && m + 1 < sizeof(model); m++)
            model[m] = (char)tolower((unsigned char)s->model[m]);
        model[m] = '\0';
        if (strstr(low, model))
            return s; /* the driver's name carries the full model: "Tesla V100-SXM2-32GB" */
        char fam[16];
        size_t k = strcspn(s->key, "-");
        if (k >= sizeof(fam))
            continue;
        memcpy(fam, s->key, k);
        fam[k] = '\0';
        if (!strstr(low, fam))
            continue;
        double d = fabs((double)s->memory_bytes - (double)memory);
        if (!pick || d < dist) {
            pick = s;
            dist = d;
        }
    }
    return pick;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int mpress_probe_topology(const struct mpress_probe *pr, struct mpress_topology *t,
                          struct mpress_error *err)
{
    if (pr->n_gpus < 1 || pr->n_gpus > MPRESS_MAX_GPUS)
        return mpress_error_set(err, MPRESS_ESYSTEM, "the probe saw %d GPUs", pr->n_gpus);
    memset(t, 0, sizeof(*t));
    int n = pr->n_gpus;
    snprintf(t->name, sizeof(t->name), "measured");
    snprintf(t->description, sizeof(t->description),
             "%d x %s, bandwidths measured by mpress profile --probe-bandwidth", n,
             pr->names[0]);
    snprintf(t->bandwidth_source, sizeof(t->bandwidth_source), "measured");
    t->n_gpus = n;
    t->n_sockets = 1;
    t->n_switches = n;
    t->host_memory_bytes = pr->host_memory_bytes;

    /* PCIe: each GPU's link is the slower of its two directions at its best size; the
     * topology's one per-GPU figure is the median over GPUs. The switch layout cannot be seen
     * from single-GPU copies, so every GPU gets a switch of its own at its own rate. */
    double pcie[MPRESS_MAX_GPUS], sorted[MPRESS_MAX_GPUS];
    for (int g = 0; g < n; g++) {
        double h2d = best(pr, MPRESS_PROBE_H2D, -1, g), d2h = best(pr, MPRESS_PROBE_D2H, g, -1);
        pcie[g] = h2d < d2h ? h2d : d2h;
        if (pcie[g] <= 0)
            return mpress_error_set(err, MPRESS_ESYSTEM,
                                    "no host<->device measurement for GPU %d", g);
        sorted[g] = pcie[g];
    }
    qsort(sorted, (size_t)n, sizeof(double), cmp_double);
    t->pcie_bytes_per_s = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);

    const struct mpress_gpu_spec *specs[MPRESS_MAX_GPUS];
    for (int g = 0; g < n; g++) {
        struct mpress_topo_gpu *gpu = &t->gpus[g];
        const struct mpress_gpu_spec *spec = spec_for(pr->names[g], pr->memory_bytes[g]);
        specs[g] = spec;
        if (spec)
            topo_gpu_fill(gpu, spec);
        else
            snprintf(gpu->model, sizeof(gpu->model), "%s", pr->names[g]);
        gpu->memory_bytes = pr->memory_bytes[g];
        gpu->reserve_bytes = topo_reserve_bytes(pr->memory_bytes[g]);
        gpu->pcie_switch = g;
        gpu->socket = 0;
        t->switches[g].uplink_bytes_per_s = pcie[g];
        t->switches[g].socket = 0;
    }

    /* NVLink: a pair with peer access whose direct copies beat 1.5x PCIe goes over NVLink;
     * links = its rate over the datasheet rate per link, rounded, at least 1 and at most the
     * GPU's ports. The rate per link written is the measured one: the mean of rate / links
     * over linked pairs. */
    double per_link_sum = 0;
    int linked = 0, all_linked = n > 1;
    double pair_bw[MPRESS_MAX_GPUS][MPRESS_MAX_GPUS] = {{0}};
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++) {
            double ab = best(pr, MPRESS_PROBE_PEER, a, b), ba = best(pr, MPRESS_PROBE_PEER, b, a);
            double bw = ab > ba ? ab : ba;
            pair_bw[a][b] = bw;
            if (!pr->peer_access[a][b] || bw <= 1.5 * t->pcie_bytes_per_s) {
                all_linked = 0;
                continue;
            }
            double per = specs[a] ? specs[a]->nvlink_bytes_per_s : 0;
            int links = per > 0 ? (int)floor(bw / per + 0.5) : 1;
            if (links < 1)
                links = 1;
            int ports = t->gpus[a].nvlink_ports < t->gpus[b].nvlink_ports
                            ? t->gpus[a].nvlink_ports
                            : t->gpus[b].nvlink_ports;
            if (ports > 0 && links > ports)
                links = ports;
            t->nvlinks[a][b] = t->nvlinks[b][a] = links;
            per_link_sum += bw / links;
            linked++;
        }
    /* Every pair at about the same rate, each near a GPU's full port count: an NVSwitch. */
    if (all_linked && n > 2) {
        double lo = 0, hi = 0;
        for (int a = 0; a < n; a++)
            for (int b = a + 1; b < n; b++) {
                if (lo == 0 || pair_bw[a][b] < lo)
                    lo = pair_bw[a][b];
                if (pair_bw[a][b] > hi)
                    hi = pair_bw[a][b];
            }
        if (hi <= 1.25 * lo && t->gpus[0].nvlink_ports > 0) {
            t->fabric = MPRESS_FABRIC_NVSWITCH;
            per_link_sum = 0;
            linked = 0;
            for (int a = 0; a < n; a++)
                for (int b = a + 1; b < n; b++) {
                    int ports = t->gpus[a].nvlink_ports;
                    t->nvlinks[a][b] = t->nvlinks[b][a] = ports;
                    per_link_sum += pair_bw[a][b] / ports;
                    linked++;
                }
        }
    }
    t->nvlink_bytes_per_s = linked ? per_link_sum / linked : 0;
    return 0;
}

char *mpress_probe_render(const struct mpress_probe *pr)
{
    struct mpress_strbuf b = {0};
    for (int g = 0; g < pr->n_gpus; g++)
        sb_printf(&b, "GPU %d: %s, %.1f GiB\n", g, pr->names[g],
                  (double)pr->memory_bytes[g] / (1024.0 * 1024 * 1024));
    sb_printf(&b, "%-17s %4s %4s %12s %12s\n", "copy", "src", "dst", "bytes", "GB/s");
    for (int i = 0; i < pr->n_samples; i++) {
        const struct mpress_probe_sample *x = &pr->samples[i];
        char src[16], dst[16];
        if (x->src < 0)
            snprintf(src, sizeof(src), "host");
        else
            snprintf(src, sizeof(src), "%d", x->src);
        if (x->dst < 0)
            snprintf(dst, sizeof(dst), "host");
        else
            snprintf(dst, sizeof(dst), "%d", x->dst);
        sb_printf(&b, "%-17s %4s %4s %12llu %12.2f\n", mpress_probe_kind_name(x->kind), src, dst,
                  (unsigned long long)x->bytes, x->bytes_per_s / 1e9);
    }
    return sb_finish(&b);
}

#if !MPRESS_HAVE_CUDA
int mpress_probe_bandwidth(struct mpress_probe *out, struct mpress_error *err)
{
    memset(out, 0, sizeof(*out));
    return mpress_error_set(err, MPRESS_ESYSTEM,
                            "this mpress was built without CUDA (rebuild with the CUDA toolkit "
                            "to probe bandwidths)");
}
#endif
