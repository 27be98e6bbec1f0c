/* Built-in servers, the GPU table, restrict and peer bandwidth, checked against the numbers as
 * the datasheets and white papers state them, written here independently of lib/topo's tables. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dgx1_expected.h"
#include "mpress/topology.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static void test_gpu_table(void)
{
    const struct mpress_gpu_spec *s = mpress_gpu_specs();
    int n = 0;
    while (s[n].key)
        n++;
    CHECK_INT(n, 21);
    const char *keys[] = {"v100", "v100-16g", "v100-sxm3", "a100-40g", "a100-80g", "h100",
                          "h200", "v100-pcie", "v100-pcie-16g", "a100-pcie-40g",
                          "a100-pcie-80g", "h100-pcie", "t4", "a10", "a40", "l4", "l40s",
                          "rtx-a6000", "rtx-3090", "rtx-4090", "gtx-1080ti"};
    for (int i = 0; i < (int)(sizeof(keys) / sizeof(keys[0])); i++)
        CHECK_MSG(mpress_gpu_spec_find(keys[i]) != NULL, "%s missing", keys[i]);
    CHECK(mpress_gpu_spec_find("V100-SXM2-32GB") == mpress_gpu_spec_find("v100"));
    CHECK(mpress_gpu_spec_find("A100") == NULL);
    CHECK(mpress_gpu_spec_find(NULL) == NULL);
    const struct mpress_gpu_spec *v = mpress_gpu_spec_find("v100");
    CHECK_NEAR(v->memory_bytes, 32 * GIB, 0);
    CHECK_NEAR(v->flops_fp16, 125e12, 1e-9);
    CHECK_INT(v->nvlink_ports, 6);
    /* NVLink totals per GPU per direction: 150, 300, 450 GB/s (V100, A100, H100 datasheets). */
    CHECK_NEAR(v->nvlink_ports * v->nvlink_bytes_per_s, 150e9, 1e-9);
    const struct mpress_gpu_spec *a = mpress_gpu_spec_find("a100-80g");
    CHECK_NEAR(a->nvlink_ports * a->nvlink_bytes_per_s, 300e9, 1e-9);
    const struct mpress_gpu_spec *h = mpress_gpu_spec_find("H200");
    CHECK_NEAR(h->nvlink_ports * h->nvlink_bytes_per_s, 450e9, 1e-9);
    CHECK_NEAR(h->memory_bytes, 141 * GIB, 0);
}

/* Every row complete and consistent: key and model unique, memory, FLOP/s and bandwidth
 * positive, fp16 above fp32 where there are tensor cores, NVLink ports and rate both or
 * neither, a PCIe generation mpress has host figures for. */
static void test_gpu_table_complete(void)
{
    const struct mpress_gpu_spec *s = mpress_gpu_specs();
    for (int i = 0; s[i].key; i++) {
        const struct mpress_gpu_spec *g = &s[i];
        CHECK_MSG(g->model && g->model[0] && strlen(g->model) < 64, "%s: model", g->key);
        CHECK_MSG(mpress_gpu_spec_find(g->key) == g, "%s: key not unique", g->key);
        CHECK_MSG(mpress_gpu_spec_find(g->model) == g, "%s: model not unique", g->key);
        CHECK_MSG(g->memory_bytes >= 8 * (uint64_t)GIB, "%s: memory", g->key);
        CHECK_MSG(g->flops_fp16 > 0 && g->flops_fp32 > 0 && g->hbm_bytes_per_s > 0,
                  "%s: FLOP/s or bandwidth missing", g->key);
        CHECK_MSG(g->pcie_gen >= 3 && g->pcie_gen <= 5, "%s: PCIe generation %d", g->key,
                  g->pcie_gen);
        CHECK_MSG((g->nvlink_ports > 0) == (g->nvlink_bytes_per_s > 0), "%s: NVLink", g->key);
        if (g->bf16 || g->flops_fp16 > 20 * g->flops_fp32 / 10)
            CHECK_MSG(g->flops_fp16 >= 2 * g->flops_fp32 * 0.99, "%s: tensor rate", g->key);
    }
}

/* Peaks recomputed from what the datasheets and architecture white papers give per GPU:
 * SMs x boost clock x FLOP per clock per SM (fp32: 2 x FP32 lanes; dense fp16 tensor with fp32
 * accumulation: 1024 on Volta, Turing (T4) and on GA102/AD10x professional parts, 2048 on GA100, 512 on
 * GeForce Ampere/Ada, 4 on Pascal without tensor cores), and GDDR bandwidth = bus bits x data
 * rate / 8. Datasheets round, hence 1.5 %. */
static void test_gpu_table_computed(void)
{
    static const struct {
        const char *key;
        int sms;
        double boost_mhz;
        int fp32_lanes;     /* per SM */
        int tensor_flop;    /* dense fp16 per clock per SM, 0: not checked */
        int bus_bits;       /* GDDR bus, 0: HBM, not checked */
        double gbps;        /* per pin */
    } ref[] = {
        {"v100", 80, 1530, 64, 1024, 0, 0},
        {"v100-pcie", 80, 1380, 64, 1024, 0, 0},
        {"a100-80g", 108, 1410, 64, 2048, 0, 0},
        {"a100-pcie-40g", 108, 1410, 64, 2048, 0, 0},
        {"h100", 132, 1980, 128, 0, 0, 0},
        {"h100-pcie", 114, 1755, 128, 0, 0, 0},
        {"t4", 40, 1590, 64, 1024, 256, 10},
        {"a10", 72, 1695, 128, 1024, 384, 12.5},
        {"a40", 84, 1740, 128, 1024, 384, 14.5},
        {"l4", 58, 2040, 128, 1024, 192, 12.5},
        {"l40s", 142, 2520, 128, 1024, 384, 18},
        {"rtx-a6000", 84, 1800, 128, 1024, 384, 16},
        {"rtx-3090", 82, 1695, 128, 512, 384, 19.5},
        {"rtx-4090", 128, 2520, 128, 512, 384, 21},
        {"gtx-1080ti", 28, 1582, 128, 4, 352, 11},
    };
    for (size_t i = 0; i < sizeof(ref) / sizeof(ref[0]); i++) {
        const struct mpress_gpu_spec *g = mpress_gpu_spec_find(ref[i].key);
        CHECK_MSG(g != NULL, "%s missing", ref[i].key);
        if (!g)
            continue;
        double clk = ref[i].boost_mhz * 1e6;
        CHECK_NEAR(g->flops_fp32, ref[i].sms * clk * 2.0 * ref[i].fp32_lanes, 0.015);
        if (ref[i].tensor_flop)
            CHECK_NEAR(g->flops_fp16, ref[i].sms * clk * ref[i].tensor_flop, 0.015);
        if (ref[i].bus_bits)
            CHECK_NEAR(g->hbm_bytes_per_s, ref[i].bus_bits * ref[i].gbps * 1e9 / 8, 1e-9);
    }
    /* NVLink bridges as the datasheets total them, both directions: 112.5 GB/s on GA102
     * boards, 600 GB/s on A100 and H100 PCIe; none on the others. */
    const char *ga102[] = {"a40", "rtx-a6000", "rtx-3090"};
    for (int i = 0; i < 3; i++) {
        const struct mpress_gpu_spec *g = mpress_gpu_spec_find(ga102[i]);
        CHECK_NEAR(2 * g->nvlink_ports * g->nvlink_bytes_per_s, 112.5e9, 1e-9);
    }
    CHECK_NEAR(2 * 12 * 25e9, 2 * mpress_gpu_spec_find("h100-pcie")->nvlink_ports *
                                  mpress_gpu_spec_find("h100-pcie")->nvlink_bytes_per_s, 1e-9);
    const char *none[] = {"a10", "l4", "l40s", "rtx-4090", "gtx-1080ti", "v100-pcie", "t4"};
    for (int i = 0; i < 7; i++)
        CHECK_INT(mpress_gpu_spec_find(none[i])->nvlink_ports, 0);
    CHECK_NEAR(mpress_gpu_spec_find("rtx-3090")->memory_bytes, 24 * GIB, 0);
    CHECK_NEAR(mpress_gpu_spec_find("gtx-1080ti")->memory_bytes, 11 * GIB, 0);
    CHECK_NEAR(mpress_gpu_spec_find("l40s")->memory_bytes, 48 * GIB, 0);
    CHECK_INT(mpress_gpu_spec_find("gtx-1080ti")->bf16, 0);
    CHECK_INT(mpress_gpu_spec_find("t4")->bf16, 0); /* Turing tensor cores: fp16 only */
    CHECK_INT(mpress_gpu_spec_find("l4")->bf16, 1);
}

static void test_dgx1(void)
{
    struct mpress_topology t;
    struct mpress_error err;
    mpress_error_clear(&err);
    CHECK_INT(mpress_topology_builtin("dgx1", &t, &err), 0);
    CHECK_INT(t.n_gpus, 8);
    CHECK_INT(t.fabric, MPRESS_FABRIC_DIRECT);
    for (int i = 0; i < 8; i++) {
        int sum = 0;
        for (int j = 0; j < 8; j++) {
            CHECK_MSG(t.nvlinks[i][j] == dgx1_expected(i, j), "nvlinks[%d][%d] = %d", i, j,
                      t.nvlinks[i][j]);
            sum += t.nvlinks[i][j];
        }
        CHECK_INT(sum, 6);
        CHECK_STR(t.gpus[i].model, "V100-SXM2-32GB");
        CHECK_INT(t.gpus[i].pcie_switch, i / 2);
        CHECK_INT(t.gpus[i].socket, i / 4);
        CHECK(t.gpus[i].reserve_bytes > 0 && t.gpus[i].reserve_bytes < t.gpus[i].memory_bytes / 4);
    }
    CHECK_INT(t.n_switches, 4);
    CHECK_INT(t.n_sockets, 2);
    CHECK_INT(t.switches[3].socket, 1);
    CHECK_NEAR(t.nvlink_bytes_per_s, 25e9, 1e-9);
    CHECK_NEAR(t.pcie_bytes_per_s, 12e9, 1e-6);
    CHECK_NEAR((double)t.host_memory_bytes, 512 * GIB, 0);
    CHECK_STR(t.bandwidth_source, "datasheet");
    CHECK_NEAR(mpress_topology_p2p_bytes_per_s(&t, 0, 3), 50e9, 1e-9);
    CHECK_NEAR(mpress_topology_p2p_bytes_per_s(&t, 3, 0), 50e9, 1e-9);
    CHECK_NEAR(mpress_topology_p2p_bytes_per_s(&t, 0, 1), 25e9, 1e-9);
    CHECK(mpress_topology_p2p_bytes_per_s(&t, 0, 5) == 0);
    CHECK(mpress_topology_p2p_bytes_per_s(&t, 2, 2) == 0);
    CHECK(mpress_topology_p2p_bytes_per_s(&t, 0, 8) == 0);

    struct mpress_topology t16;
    CHECK_INT(mpress_topology_builtin("dgx1-16g", &t16, &err), 0);
    CHECK_NEAR(t16.gpus[0].memory_bytes, 16 * GIB, 0);
    CHECK(memcmp(t16.nvlinks, t.nvlinks, sizeof(t.nvlinks)) == 0);
}

static void test_nvswitch(void)
{
    struct mpress_topology t;
    struct mpress_error err;
    mpress_error_clear(&err);
    CHECK_INT(mpress_topology_builtin("dgx2", &t, &err), 0);
    CHECK_INT(t.n_gpus, 16);
    CHECK_INT(t.fabric, MPRESS_FABRIC_NVSWITCH);
    CHECK_STR(t.gpus[15].model, "V100-SXM3-32GB");
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++)
            CHECK_INT(t.nvlinks[i][j], i == j ? 0 : 6);
    /* 300 GB/s bidirectional per GPU = 150 GB/s per direction, to any one peer. */
    CHECK_NEAR(mpress_topology_p2p_bytes_per_s(&t, 0, 15), 150e9, 1e-9);
    CHECK_INT(t.n_switches, 8);
    CHECK_INT(t.n_sockets, 2);
    CHECK_NEAR((double)t.host_memory_bytes, 1536 * GIB, 0);

    CHECK_INT(mpress_topology_builtin("dgx-a100", &t, &err), 0);
    CHECK_INT(t.n_gpus, 8);
    CHECK_INT(t.nvlinks[2][7], 12);
    CHECK_NEAR(mpress_topology_p2p_bytes_per_s(&t, 7, 2), 300e9, 1e-9);
    CHECK_NEAR(t.gpus[0].memory_bytes, 80 * GIB, 0);
    CHECK_NEAR(t.pcie_bytes_per_s, 24e9, 1e-6); /* Gen4: twice Gen3 */
    CHECK_NEAR((double)t.host_memory_bytes, 2048 * GIB, 0);
    CHECK_INT(mpress_topology_builtin("dgx-a100-40g", &t, &err), 0);
    CHECK_NEAR(t.gpus[0].memory_bytes, 40 * GIB, 0);
    CHECK_INT(mpress_topology_builtin("dgx-h100", &t, &err), 0);
    CHECK_NEAR(mpress_topology_p2p_bytes_per_s(&t, 0, 1), 450e9, 1e-9);
    CHECK_NEAR(t.pcie_bytes_per_s, 48e9, 1e-6);
    CHECK_INT(mpress_topology_builtin("dgx-h200", &t, &err), 0);
    CHECK_NEAR(t.gpus[0].memory_bytes, 141 * GIB, 0);
    CHECK_INT(t.nvlinks[0][1], 18);

    CHECK_INT(mpress_topology_builtin("dgx3", &t, &err), MPRESS_EUSAGE);
    CHECK(strstr(err.text, "dgx3") != NULL);

    int n = 0;
    for (const char *const *p = mpress_topology_builtin_names(); *p; p++, n++)
        CHECK_INT(mpress_topology_builtin(*p, &t, &err), 0);
    CHECK_INT(n, 7);
}

static void test_restrict(void)
{
    struct mpress_topology t;
    struct mpress_error err;
    mpress_error_clear(&err);
    CHECK_INT(mpress_topology_builtin("dgx1", &t, &err), 0);
    CHECK_INT(mpress_topology_restrict(&t, 9, &err), MPRESS_EUSAGE);
    CHECK_INT(mpress_topology_restrict(&t, 0, &err), MPRESS_EUSAGE);
    CHECK_INT(t.n_gpus, 8);
    CHECK_INT(mpress_topology_restrict(&t, 3, &err), 0);
    CHECK_INT(t.n_gpus, 3);
    CHECK_INT(t.n_switches, 2); /* GPUs 0,1 on switch 0, GPU 2 on switch 1 */
    CHECK_INT(t.n_sockets, 1);
    CHECK_INT(t.gpus[2].pcie_switch, 1);
    CHECK_INT(t.nvlinks[0][1], 1);
    CHECK_INT(t.nvlinks[1][2], 2);
    CHECK_INT(t.nvlinks[0][3], 0);
    CHECK_INT(t.nvlinks[3][0], 0);
    CHECK(t.gpus[3].memory_bytes == 0);

    /* Restrict dgx2 to 10 GPUs: 5 switches, both sockets (GPUs 8 and 9 are on socket 1). */
    CHECK_INT(mpress_topology_builtin("dgx2", &t, &err), 0);
    CHECK_INT(mpress_topology_restrict(&t, 10, &err), 0);
    CHECK_INT(t.n_switches, 5);
    CHECK_INT(t.n_sockets, 2);
    CHECK_INT(t.switches[4].socket, 1);
    CHECK_INT(t.nvlinks[9][10], 0);
    CHECK_INT(t.nvlinks[9][8], 6);

    /* Renumbering: drop GPU 0's switch by hand-building a topology whose first GPUs use
     * switch 2 and socket 1. */
    CHECK_INT(mpress_topology_builtin("dgx1", &t, &err), 0);
    t.gpus[0].pcie_switch = 3;
    t.gpus[0].socket = 1;
    t.gpus[1].pcie_switch = 3;
    t.gpus[1].socket = 1;
    CHECK_INT(mpress_topology_restrict(&t, 2, &err), 0);
    CHECK_INT(t.n_switches, 1);
    CHECK_INT(t.n_sockets, 1);
    CHECK_INT(t.gpus[1].pcie_switch, 0);
    CHECK_INT(t.gpus[1].socket, 0);
    CHECK_INT(t.switches[0].socket, 0);
}

static void test_render(void)
{
    struct mpress_topology t;
    struct mpress_error err;
    CHECK_INT(mpress_topology_builtin("dgx1", &t, &err), 0);
    char *s = mpress_topology_render(&t);
    CHECK(s != NULL);
    if (!s)
        return;
    /* Row GPU0: X NV1 NV1 NV2 NV2 then GPU5 is on the other socket (SYS). */
    const char *row = strstr(s, "\nGPU0 ");
    CHECK(row != NULL);
    if (row) {
        char cells[9][8];
        int got = sscanf(row + 1, "%7s %7s %7s %7s %7s %7s %7s %7s %7s", cells[0], cells[1],
                         cells[2], cells[3], cells[4], cells[5], cells[6], cells[7], cells[8]);
        CHECK_INT(got, 9);
        CHECK_STR(cells[1], "X");
        CHECK_STR(cells[2], "NV1");
        CHECK_STR(cells[4], "NV2");
        CHECK_STR(cells[6], "SYS");
    }
    free(s);
    /* Without NVLink the PCIe relation shows: PIX, NODE, SYS. */
    memset(t.nvlinks, 0, sizeof(t.nvlinks));
    s = mpress_topology_render(&t);
    row = s ? strstr(s, "\nGPU0 ") : NULL;
    CHECK(row != NULL);
    if (row) {
        char c[5][8];
        CHECK_INT(sscanf(row + 1, "%7s %7s %7s %7s %7s", c[0], c[1], c[2], c[3], c[4]), 5);
        CHECK_STR(c[2], "PIX");
        CHECK_STR(c[3], "NODE");
    }
    free(s);
}

/* Every built-in survives the mpress-topology writer and loader unchanged (the same JSON and
 * the same rendering), also when restricted. */
static void test_roundtrip(void)
{
    for (const char *const *n = mpress_topology_builtin_names(); *n; n++) {
        for (int restrict_to = 0; restrict_to <= 3; restrict_to += 3) {
            struct mpress_topology a, b;
            struct mpress_error err;
            mpress_error_clear(&err);
            CHECK_INT(mpress_topology_builtin(*n, &a, &err), 0);
            if (restrict_to)
                CHECK_INT(mpress_topology_restrict(&a, restrict_to, &err), 0);
            char file[128];
            snprintf(file, sizeof(file), "topo-roundtrip-%s-%d.json", *n, restrict_to);
            CHECK_INT(mpress_topology_save(file, &a, &err), 0);
            int rc = mpress_topology_load(file, &b, &err);
            CHECK_MSG(rc == 0, "%s: %s", file, err.text);
            remove(file);
            if (rc)
                continue;
            json_t *ja = mpress_topology_to_json(&a), *jb = mpress_topology_to_json(&b);
            char *sa = mpress_json_dumps(ja), *sb = mpress_json_dumps(jb);
            CHECK(sa && sb && strcmp(sa, sb) == 0);
            free(sa);
            free(sb);
            json_decref(ja);
            json_decref(jb);
            sa = mpress_topology_render(&a);
            sb = mpress_topology_render(&b);
            CHECK(sa && sb && strcmp(sa, sb) == 0);
            free(sa);
            free(sb);
        }
    }
}

int main(void)
{
    test_roundtrip();
    test_gpu_table();
    test_gpu_table_complete();
    test_gpu_table_computed();
    test_dgx1();
    test_nvswitch();
    test_restrict();
    test_render();
    return check_done();
}
