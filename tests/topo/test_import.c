/* Imports of small hand-written dumps in tests/topo/data: GPU numbering by the XML's dev
 * attribute, nested PCIe switches, NVSwitch in both dump kinds, --gpu, and every rejection
 * path with its file:line:column. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mpress/topology.h"

static char path_buf[1024];

static const char *data(const char *name)
{
    const char *src = getenv("MPRESS_SRCDIR");
    snprintf(path_buf, sizeof(path_buf), "%s/tests/topo/data/%s", src ? src : "..", name);
    return path_buf;
}

static void test_perm_xml(void)
{
    struct mpress_topology t;
    struct mpress_error err;
    char notes[4096];
    mpress_error_clear(&err);
    CHECK_INT(mpress_topology_import(data("perm4.nccl.xml"), &t, notes, sizeof(notes), &err), 0);
    /* Bus 1c = dev 2, 1d = dev 0, 2c = dev 3, 2d = dev 1; links by bus: 1c-1d 4, 1c-2c 2,
     * 1d-2d 1, 2c-2d 3. */
    int want[4][4] = {{0, 1, 4, 0}, {1, 0, 0, 3}, {4, 0, 0, 2}, {0, 3, 2, 0}};
    CHECK_INT(t.n_gpus, 4);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            CHECK_MSG(t.nvlinks[i][j] == want[i][j], "nvlinks[%d][%d] = %d", i, j,
                      t.nvlinks[i][j]);
    CHECK_STR(t.gpus[0].model, "A100-SXM4-40GB"); /* device 0x20b0 */
    CHECK_INT(t.fabric, MPRESS_FABRIC_DIRECT);
    /* dev 0 and dev 2 share the outer switch 1a (dev 2 through a second level). */
    CHECK_INT(t.gpus[0].pcie_switch, t.gpus[2].pcie_switch);
    CHECK(t.gpus[1].pcie_switch != t.gpus[3].pcie_switch);
    CHECK_INT(t.n_switches, 3);
    /* numaid 1 holds dev 0 and 2; sockets follow NUMA id order. */
    CHECK_INT(t.gpus[0].socket, 1);
    CHECK_INT(t.gpus[1].socket, 0);
    CHECK_INT(t.n_sockets, 2);
    CHECK_INT(t.switches[t.gpus[0].pcie_switch].socket, 1);
    CHECK_NEAR(t.pcie_bytes_per_s, 24e9, 1e-6); /* 16 GT/s x16 */
    CHECK_NEAR(t.switches[0].uplink_bytes_per_s, 24e9, 1e-6);
}

static void test_nvswitch(void)
{
    struct mpress_topology t;
    struct mpress_error err;
    char notes[4096];
    CHECK_INT(mpress_topology_import(data("nvswitch2.nccl.xml"), &t, notes, sizeof(notes), &err),
              0);
    CHECK_INT(t.fabric, MPRESS_FABRIC_NVSWITCH);
    CHECK_INT(t.nvlinks[0][1], 12);
    CHECK_STR(t.gpus[1].model, "A100-SXM4-80GB");
    CHECK_NEAR(mpress_topology_p2p_bytes_per_s(&t, 0, 1), 300e9, 1e-9);

    CHECK_INT(mpress_topology_import(data("nvswitch4.smi.txt"), &t, notes, sizeof(notes), &err),
              0);
    CHECK_INT(t.n_gpus, 4);
    CHECK_INT(t.fabric, MPRESS_FABRIC_NVSWITCH);
    CHECK_STR(t.gpus[0].model, "A100-SXM4-80GB");
    CHECK_INT(t.gpus[0].pcie_switch, t.gpus[1].pcie_switch); /* both PXB to NIC0 */
    CHECK_INT(t.gpus[0].socket, 0);
    CHECK_INT(t.gpus[3].socket, 1);
    CHECK(strstr(notes, "assumed") != NULL);

    CHECK_INT(mpress_topology_import_as(data("nvswitch4.smi.txt"), "h100", &t, notes,
                                        sizeof(notes), &err),
              0);
    CHECK_STR(t.gpus[0].model, "H100-SXM5-80GB");
    CHECK(strstr(notes, "12 NVSwitch links per GPU where a H100-SXM5-80GB has 18") != NULL);
    CHECK_INT(mpress_topology_import_as(data("nvswitch4.smi.txt"), "x100", &t, notes,
                                        sizeof(notes), &err),
              MPRESS_EUSAGE);
    /* more links than the given GPU has ports: no valid topology holds both (it was written
     * to stdout and refused by -o) */
    CHECK_INT(mpress_topology_import_as(data("nvswitch4.smi.txt"), "v100", &t, notes,
                                        sizeof(notes), &err),
              MPRESS_EUSAGE);
    CHECK(strstr(err.text, "12 NVLinks at every GPU, but a V100-SXM2-32GB has 6") != NULL);
    CHECK_INT(mpress_topology_import_as(data("perm4.nccl.xml"), "v100", &t, notes,
                                        sizeof(notes), &err),
              0);
}

static void test_partial_xml(void)
{
    struct mpress_topology t;
    struct mpress_error err;
    char notes[4096];
    mpress_error_clear(&err);
    CHECK_INT(mpress_topology_import(data("partial.nccl.xml"), &t, notes, sizeof(notes), &err),
              0);
    CHECK_INT(t.n_gpus, 2);
    CHECK_INT(t.nvlinks[0][1], 1);
    CHECK_INT(t.nvlinks[1][0], 1);
    CHECK_STR(t.gpus[0].model, "V100-SXM2-16GB"); /* device 0x1db1 */
    CHECK_INT(t.n_sockets, 1);
    CHECK_INT(t.n_switches, 1);
    /* 5 + 5 links to GPUs outside the dump are left out, and said so. */
    CHECK(strstr(notes, "10 NVLinks to devices that are neither GPUs of the dump") != NULL);
}

static void test_pcie_only(void)
{
    struct mpress_topology t;
    struct mpress_error err;
    char notes[4096];
    mpress_error_clear(&err);
    /* No NVLink, no model: the GPU type has to be given (a usage error naming --gpu). */
    CHECK_INT(mpress_topology_import(data("pcie4.smi.txt"), &t, notes, sizeof(notes), &err),
              MPRESS_EUSAGE);
    CHECK(strstr(err.text, "give it with --gpu TYPE") != NULL);
    CHECK_INT(mpress_topology_import_as(data("pcie4.smi.txt"), "a100-40g", &t, notes,
                                        sizeof(notes), &err),
              0);
    CHECK_INT(t.gpus[0].pcie_switch, t.gpus[1].pcie_switch); /* PIX */
    CHECK(t.gpus[2].pcie_switch != t.gpus[0].pcie_switch);  /* NODE */
    CHECK_INT(t.gpus[2].socket, 0);
    CHECK_INT(t.gpus[3].socket, 1); /* SYS, other affinity */
    CHECK_INT(t.n_switches, 3);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            CHECK_INT(t.nvlinks[i][j], 0);
}

/* Every GPU of the table imports (each has host figures, from its own built-in server or one
 * of its PCIe generation); a GPU without a built-in server says where the host came from. */
static void test_every_gpu(void)
{
    struct mpress_topology t;
    struct mpress_error err;
    char notes[4096];
    for (const struct mpress_gpu_spec *g = mpress_gpu_specs(); g->key; g++) {
        mpress_error_clear(&err);
        int rc = mpress_topology_import_as(data("pcie4.smi.txt"), g->key, &t, notes,
                                           sizeof(notes), &err);
        CHECK_MSG(rc == 0, "%s: rc %d %s", g->key, rc, err.text);
        if (rc)
            continue;
        CHECK_STR(t.gpus[3].model, g->model);
        CHECK_NEAR(t.gpus[0].flops_fp16, g->flops_fp16, 0);
        CHECK(t.host_memory_bytes > 0 && t.cpu_flops > 0 && t.pcie_bytes_per_s > 0);
        CHECK(mpress_topology_assumption(&t) == NULL); /* given, not assumed */
    }
    CHECK_INT(mpress_topology_import_as(data("pcie4.smi.txt"), "l4", &t, notes, sizeof(notes),
                                        &err),
              0);
    CHECK(strstr(notes, "no built-in server has L4 GPUs: what the dump lacks of the host is "
                        "taken from 'dgx-a100', a PCIe Gen4 server") != NULL);
    CHECK(strstr(notes, "a L4 has no NVLink") != NULL);
    CHECK_NEAR(t.pcie_bytes_per_s, 24e9, 0.01); /* Gen4 x16 at the measured efficiency */
}

/* A PCIe card named by its PCI device id (0x26b9, L40S): no assumption, host figures from the
 * Gen4 server, the GPU's own PCIe rate from the dump (Gen4 x16 at the measured efficiency). */
static void test_pcie_card_xml(void)
{
    struct mpress_topology t;
    struct mpress_error err;
    char notes[4096];
    mpress_error_clear(&err);
    CHECK_INT(mpress_topology_import(data("l40s2.nccl.xml"), &t, notes, sizeof(notes), &err), 0);
    CHECK_INT(t.n_gpus, 2);
    CHECK_STR(t.gpus[0].model, "L40S");
    CHECK_NEAR(t.gpus[1].memory_bytes, 48.0 * (1u << 30), 0);
    CHECK_INT(t.nvlinks[0][1], 0);
    CHECK(mpress_topology_assumption(&t) == NULL);
    CHECK(strstr(notes, "from the dump's PCI device id") != NULL);
    CHECK_NEAR(t.pcie_bytes_per_s, 16e9 * 128 / 130 / 8 * 16 * (12.0 / 15.753846), 0.001);
}

/* NVLinks only within pairs are bridges, which several PCIe cards take: no model implied, so
 * --gpu is asked for; with it, the pairs are direct links, and a GPU without NVLink cannot
 * have them. */
static void test_bridges(void)
{
    struct mpress_topology t;
    struct mpress_error err;
    char notes[4096];
    mpress_error_clear(&err);
    CHECK_INT(mpress_topology_import(data("bridge4.smi.txt"), &t, notes, sizeof(notes), &err),
              MPRESS_EUSAGE);
    CHECK(strstr(err.text, "--gpu TYPE") != NULL);
    CHECK_INT(mpress_topology_import_as(data("bridge4.smi.txt"), "rtx-3090", &t, notes,
                                        sizeof(notes), &err),
              0);
    CHECK_INT(t.fabric, MPRESS_FABRIC_DIRECT);
    CHECK_INT(t.nvlinks[0][1], 4);
    CHECK_INT(t.nvlinks[2][3], 4);
    CHECK_INT(t.nvlinks[0][2], 0);
    CHECK_NEAR(mpress_topology_p2p_bytes_per_s(&t, 0, 1), 56.25e9, 1e-9);
    CHECK_INT(mpress_topology_import_as(data("bridge4.smi.txt"), "a10", &t, notes,
                                        sizeof(notes), &err),
              MPRESS_EUSAGE);
    CHECK(strstr(err.text, "a A10 has 0 NVLink ports") != NULL);
}

/* An implied model is recorded in the topology (and survives a save and load); a given one or
 * one read from PCI ids is not an assumption. */
static void test_assumption_recorded(void)
{
    struct mpress_topology t, back;
    struct mpress_error err;
    char notes[4096];
    mpress_error_clear(&err);
    CHECK_INT(mpress_topology_import(data("nvswitch4.smi.txt"), &t, notes, sizeof(notes), &err),
              0);
    const char *a = mpress_topology_assumption(&t);
    CHECK(a != NULL);
    CHECK_STR(a ? a : "", "GPU model assumed: A100-SXM4-80GB (the dump does not name it)");
    CHECK(strstr(notes, "the topology records the assumption") != NULL);
    const char *tmp = "test_import_assumed.json";
    CHECK_INT(mpress_topology_save(tmp, &t, &err), 0);
    CHECK_INT(mpress_topology_load(tmp, &back, &err), 0);
    CHECK(mpress_topology_assumption(&back) != NULL);
    remove(tmp);
    CHECK_INT(mpress_topology_import_as(data("nvswitch4.smi.txt"), "a100-40g", &t, notes,
                                        sizeof(notes), &err),
              0);
    CHECK(mpress_topology_assumption(&t) == NULL);
    CHECK_INT(mpress_topology_import(data("perm4.nccl.xml"), &t, notes, sizeof(notes), &err), 0);
    CHECK(mpress_topology_assumption(&t) == NULL); /* PCI device ids name it */
    struct mpress_topology b;
    CHECK_INT(mpress_topology_builtin("dgx1", &b, &err), 0);
    CHECK(mpress_topology_assumption(&b) == NULL);
}

static void bad(const char *name, int line, int col, const char *text)
{
    struct mpress_topology t;
    struct mpress_error err;
    char notes[4096];
    mpress_error_clear(&err);
    int rc = mpress_topology_import(data(name), &t, notes, sizeof(notes), &err);
    CHECK_MSG(rc == MPRESS_EINPUT, "%s: rc %d", name, rc);
    const char *f = strrchr(err.file, '/');
    CHECK_STR(f ? f + 1 : err.file, name);
    CHECK_MSG(err.line == line && err.column == col, "%s: at %d:%d, want %d:%d (%s)", name,
              err.line, err.column, line, col, err.text);
    CHECK_MSG(strstr(err.text, text) != NULL, "%s: '%s' lacks '%s'", name, err.text, text);
}

static void test_bad(void)
{
    bad("bad-columns.smi.txt", 4, 1, "row 'GPU2' has 3 entries where the header (line 1) gives 4");
    bad("bad-token.smi.txt", 2, 17, "unknown entry 'NVL'");
    bad("bad-asym.smi.txt", 4, 9, "disagrees with row 'GPU0'");
    bad("bad-short.smi.txt", 4, 1, "the matrix ends after 2 of 3 rows");
    bad("bad-header.smi.txt", 1, 41, "unknown header column 'Temperature'");
    bad("not-a-dump.txt", 1, 1, "not a topology dump");
    bad("bad-unclosed.nccl.xml", 6, 3, "closing tag </cpu> does not match <pci> opened at line 3");
    bad("bad-root.nccl.xml", 2, 1, "root element is <topology>");
    bad("bad-nodev.nccl.xml", 4, 7, "<gpu> has no 'dev' attribute");
    bad("bad-asym.nccl.xml", 9, 7, "GPU 1 lists 1 NVLinks to GPU 0, which lists 2 back");
    bad("bad-attr.nccl.xml", 5, 45, "expected a quoted attribute value");
    /* A width no PCIe link has once gave a switch an uplink of 1.3e17 B/s, which the saved
     * topology then refused to load (found by fuzz_topo_xml). */
    bad("bad-width.nccl.xml", 3, 5, "attribute link_width=\"16888888888888888888\": expected an "
        "integer in [0, 32]");

    struct mpress_topology t;
    struct mpress_error err;
    CHECK_INT(mpress_topology_import(data("no-such-file.txt"), &t, NULL, 0, &err),
              MPRESS_EINPUT);
    CHECK(strstr(err.text, "cannot open") != NULL);
}

int main(void)
{
    test_perm_xml();
    test_nvswitch();
    test_partial_xml();
    test_pcie_only();
    test_every_gpu();
    test_bridges();
    test_pcie_card_xml();
    test_assumption_recorded();
    test_bad();
    return check_done();
}
