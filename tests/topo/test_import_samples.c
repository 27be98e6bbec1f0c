/* The two real dumps in tests/data/topologies (a DGX-1's NCCL topology XML and a DGX-1-like
 * server's `nvidia-smi topo -m`) must import to exactly the DGX-1's NVLink link counts. Both
 * dumps number GPUs as the DGX-1 does (the XML by its dev attributes), so the matrices compare
 * entry by entry. Fails when the dumps are missing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "dgx1_expected.h"
#include "mpress/topology.h"

static void check_dgx1_links(const struct mpress_topology *t, const char *what)
{
    CHECK_INT(t->n_gpus, 8);
    CHECK_INT(t->fabric, MPRESS_FABRIC_DIRECT);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++)
            CHECK_MSG(t->nvlinks[i][j] == dgx1_expected(i, j), "%s: nvlinks[%d][%d] = %d, want %d",
                      what, i, j, t->nvlinks[i][j], dgx1_expected(i, j));
    CHECK_INT(t->n_sockets, 2);
    for (int i = 0; i < 8; i++)
        CHECK_INT(t->gpus[i].socket, i / 4);
    CHECK_NEAR(t->nvlink_bytes_per_s, 25e9, 1e-9);
}

int main(void)
{
    const char *data = getenv("MPRESS_TESTDATA");
    char xml[1024], smi[1024];
    struct stat st;
    if (!data)
        data = "tests/data"; /* by hand, from the source root */
    snprintf(xml, sizeof(xml), "%s/topologies/dgx1-v100.nccl.xml", data);
    snprintf(smi, sizeof(smi), "%s/topologies/v100x8-cubemesh.nvidia-smi.txt", data);
    if (stat(xml, &st) != 0 || stat(smi, &st) != 0) {
        fprintf(stderr, "sample dumps not in %s/topologies\n", data);
        return 1;
    }
    struct mpress_topology t;
    struct mpress_error err;
    char notes[4096];

    mpress_error_clear(&err);
    CHECK_INT(mpress_topology_import(xml, &t, notes, sizeof(notes), &err), 0);
    check_dgx1_links(&t, "xml");
    /* The XML names the model (PCI id 0x1db5) and the PLX switch of each GPU pair. */
    CHECK_STR(t.gpus[0].model, "V100-SXM2-32GB");
    CHECK_INT(t.n_switches, 4);
    for (int i = 0; i < 8; i++)
        CHECK_INT(t.gpus[i].pcie_switch, i / 2);
    CHECK_NEAR(t.pcie_bytes_per_s, 12e9, 1e-6); /* 8 GT/s x16 */
    CHECK(strstr(notes, "PCI device id") != NULL);

    mpress_error_clear(&err);
    CHECK_INT(mpress_topology_import(smi, &t, notes, sizeof(notes), &err), 0);
    check_dgx1_links(&t, "nvidia-smi");
    /* No model in nvidia-smi dumps: NVLink2-like links give the V100-SXM2 default, said so. */
    CHECK_STR(t.gpus[0].model, "V100-SXM2-32GB");
    CHECK(strstr(notes, "assumed") != NULL);
    /* Only GPU2 and GPU3 show a shared switch (both PIX to mlx5_0). */
    CHECK_INT(t.gpus[2].pcie_switch, t.gpus[3].pcie_switch);
    CHECK(t.gpus[0].pcie_switch != t.gpus[1].pcie_switch);
    CHECK(t.gpus[0].pcie_switch != t.gpus[2].pcie_switch);
    CHECK_INT(t.n_switches, 7);

    /* The dump's server has 16 GB GPUs: --gpu picks them. */
    CHECK_INT(mpress_topology_import_as(smi, "v100-16g", &t, notes, sizeof(notes), &err), 0);
    CHECK_STR(t.gpus[7].model, "V100-SXM2-16GB");
    check_dgx1_links(&t, "nvidia-smi --gpu v100-16g");
    return check_done();
}
