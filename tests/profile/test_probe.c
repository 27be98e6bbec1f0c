/* Bandwidth probe results -> topology, on synthetic measurements with hand-worked answers. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "mpress/trace.h"

#define GB 1e9
#define GIB (1ull << 30)

static struct mpress_probe_sample samples[256];

static void add(struct mpress_probe *pr, enum mpress_probe_kind k, int src, int dst,
                uint64_t bytes, double bps)
{
    samples[pr->n_samples++] = (struct mpress_probe_sample){k, src, dst, bytes, bps};
}

static void host_links(struct mpress_probe *pr, int g, double h2d, double d2h)
{
    add(pr, MPRESS_PROBE_H2D, -1, g, 64 << 10, 0.25 * h2d); /* small copies: latency-bound */
    add(pr, MPRESS_PROBE_H2D, -1, g, GIB, h2d);
    add(pr, MPRESS_PROBE_D2H, g, -1, 64 << 10, 0.25 * d2h);
    add(pr, MPRESS_PROBE_D2H, g, -1, GIB, d2h);
    add(pr, MPRESS_PROBE_H2D_BOTH, -1, g, GIB, 0.8 * h2d);
}

static void roundtrip(const struct mpress_topology *t)
{
    char dir[] = "/tmp/mpress-probe-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof(path), "%s/t.json", dir);
    struct mpress_error err = {0};
    CHECK_MSG(mpress_topology_save(path, t, &err) == 0, "save: %s", err.text);
    struct mpress_topology u;
    int rc = mpress_topology_load(path, &u, &err);
    CHECK_MSG(rc == 0, "load: %s: %s", err.path, err.text);
    if (rc == 0) {
        CHECK_STR(u.bandwidth_source, "measured");
        CHECK_INT(u.n_gpus, t->n_gpus);
    }
    unlink(path);
    rmdir(dir);
}

static void test_direct(void)
{
    /* Four V100s: pairs (0,1), (1,2), (2,3) at ~2 links' worth, (0,2) at one link's, (0,3)
     * over PCIe, and (1,3) fast but without peer access. */
    struct mpress_probe pr;
    memset(&pr, 0, sizeof(pr));
    pr.samples = samples;
    pr.n_gpus = 4;
    pr.host_memory_bytes = 512 * GIB;
    for (int g = 0; g < 4; g++) {
        snprintf(pr.names[g], sizeof(pr.names[g]), "Tesla V100-SXM2-32GB");
        pr.memory_bytes[g] = 34089730048ull;
        for (int h = 0; h < 4; h++)
            pr.peer_access[g][h] = g != h;
    }
    pr.peer_access[1][3] = pr.peer_access[3][1] = 0;
    host_links(&pr, 0, 12 * GB, 13 * GB);
    host_links(&pr, 1, 12.5 * GB, 11.5 * GB);
    host_links(&pr, 2, 11 * GB, 13 * GB);
    host_links(&pr, 3, 12 * GB, 13 * GB);
    add(&pr, MPRESS_PROBE_PEER, 0, 1, GIB, 45 * GB);
    add(&pr, MPRESS_PROBE_PEER, 0, 1, 64 << 10, 5 * GB);
    add(&pr, MPRESS_PROBE_PEER, 0, 2, GIB, 22 * GB);
    add(&pr, MPRESS_PROBE_PEER, 0, 3, GIB, 9 * GB);
    add(&pr, MPRESS_PROBE_PEER, 2, 1, GIB, 48 * GB); /* only the other direction measured */
    add(&pr, MPRESS_PROBE_PEER, 1, 3, GIB, 23 * GB);
    add(&pr, MPRESS_PROBE_PEER, 2, 3, GIB, 47 * GB);
    add(&pr, MPRESS_PROBE_PEER_STAGED, 0, 1, GIB, 8 * GB); /* staged copies do not count */

    struct mpress_topology t;
    struct mpress_error err = {0};
    CHECK_INT(mpress_probe_topology(&pr, &t, &err), 0);
    /* PCIe per GPU = min(h2d, d2h) = 12, 11.5, 11, 12 GB/s; median (11.5 + 12) / 2 */
    CHECK_NEAR(t.pcie_bytes_per_s, 11.75 * GB, 1e-12);
    CHECK_NEAR(t.switches[2].uplink_bytes_per_s, 11 * GB, 1e-12);
    /* NVLink needs > 1.5 x 11.75 = 17.625 GB/s and peer access; links = round(bw / 25 GB/s) */
    CHECK_INT(t.nvlinks[0][1], 2);
    CHECK_INT(t.nvlinks[1][0], 2);
    CHECK_INT(t.nvlinks[0][2], 1);
    CHECK_INT(t.nvlinks[0][3], 0);
    CHECK_INT(t.nvlinks[1][2], 2);
    CHECK_INT(t.nvlinks[1][3], 0);
    CHECK_INT(t.nvlinks[2][3], 2);
    /* per link: mean(45/2, 22/1, 48/2, 47/2) = 23 GB/s */
    CHECK_NEAR(t.nvlink_bytes_per_s, 23 * GB, 1e-12);
    CHECK_INT(t.fabric, MPRESS_FABRIC_DIRECT);
    CHECK_STR(t.gpus[0].model, "V100-SXM2-32GB");
    CHECK_INT(t.gpus[0].memory_bytes, 34089730048ull);
    CHECK_INT(t.gpus[0].nvlink_ports, 6);
    CHECK(t.gpus[0].reserve_bytes > 0 && t.gpus[0].reserve_bytes < t.gpus[0].memory_bytes);
    CHECK_STR(t.bandwidth_source, "measured");
    CHECK_INT(t.host_memory_bytes, 512 * GIB);
    roundtrip(&t);

    char *table = mpress_probe_render(&pr);
    CHECK(table && strstr(table, "peer-staged          0    1   1073741824         8.00"));
    CHECK(table && strstr(table, "h2d               host    0"));
    free(table);
}

static void test_nvswitch(void)
{
    /* Three H200s behind NVSwitch: every pair within 25% of the others -> NVSWITCH with the
     * GPU's 18 ports per pair; per link = mean(380, 400, 390) / 18. */
    struct mpress_probe pr;
    memset(&pr, 0, sizeof(pr));
    pr.samples = samples;
    pr.n_gpus = 3;
    for (int g = 0; g < 3; g++) {
        snprintf(pr.names[g], sizeof(pr.names[g]), "NVIDIA H200");
        pr.memory_bytes[g] = 150754820096ull;
        for (int h = 0; h < 3; h++)
            pr.peer_access[g][h] = g != h;
        host_links(&pr, g, 50 * GB, 52 * GB);
    }
    add(&pr, MPRESS_PROBE_PEER, 0, 1, GIB, 380 * GB);
    add(&pr, MPRESS_PROBE_PEER, 0, 2, GIB, 400 * GB);
    add(&pr, MPRESS_PROBE_PEER, 1, 2, GIB, 390 * GB);
    struct mpress_topology t;
    struct mpress_error err = {0};
    CHECK_INT(mpress_probe_topology(&pr, &t, &err), 0);
    CHECK_INT(t.fabric, MPRESS_FABRIC_NVSWITCH);
    CHECK_INT(t.nvlinks[0][2], 18);
    CHECK_NEAR(t.nvlink_bytes_per_s, 390 * GB / 18, 1e-12);
    CHECK_STR(t.gpus[1].model, "H200-SXM5-141GB");
    CHECK_NEAR(t.pcie_bytes_per_s, 50 * GB, 1e-12);
    roundtrip(&t);

    /* one GPU alone: no peers, still a topology */
    pr.n_gpus = 1;
    CHECK_INT(mpress_probe_topology(&pr, &t, &err), 0);
    CHECK_INT(t.n_gpus, 1);
    CHECK_NEAR(t.nvlink_bytes_per_s, 0, 0);
    roundtrip(&t);

    /* a GPU without host measurements is an error, not a zero bandwidth */
    pr.n_gpus = 3;
    pr.n_samples = 0;
    CHECK_INT(mpress_probe_topology(&pr, &t, &err), MPRESS_ESYSTEM);
}

int main(void)
{
    test_direct();
    test_nvswitch();
    return check_done();
}
