/* mpress-topology v1: round trip, deterministic bytes, the shipped sample file, and one case
 * per rejection path of the strict loader. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "samples.h"

static int load_topo(const char *file, struct mpress_error *err)
{
    struct mpress_topology t;
    return mpress_topology_load(file, &t, err);
}

static char *read_all(const char *file)
{
    FILE *f = fopen(file, "rb");
    if (!f)
        return NULL;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *s = malloc(n + 1);
    memcpy(s, buf, n + 1);
    return s;
}

static void check_equal(const struct mpress_topology *a, const struct mpress_topology *b)
{
    CHECK_STR(a->name, b->name);
    CHECK_STR(a->description, b->description);
    CHECK_INT(a->n_gpus, b->n_gpus);
    for (int i = 0; i < a->n_gpus && i < b->n_gpus; i++) {
        const struct mpress_topo_gpu *x = &a->gpus[i], *y = &b->gpus[i];
        CHECK_STR(x->model, y->model);
        CHECK_INT(x->memory_bytes, y->memory_bytes);
        CHECK_INT(x->reserve_bytes, y->reserve_bytes);
        /* values with at most 10 significant digits come back exactly */
        CHECK(x->flops_fp16 == y->flops_fp16);
        CHECK(x->flops_fp32 == y->flops_fp32);
        CHECK(x->hbm_bytes_per_s == y->hbm_bytes_per_s);
        CHECK_INT(x->nvlink_ports, y->nvlink_ports);
        CHECK_INT(x->pcie_switch, y->pcie_switch);
        CHECK_INT(x->socket, y->socket);
        for (int j = 0; j < a->n_gpus; j++)
            CHECK_INT(a->nvlinks[i][j], b->nvlinks[i][j]);
    }
    CHECK_INT(a->fabric, b->fabric);
    CHECK(a->nvlink_bytes_per_s == b->nvlink_bytes_per_s);
    CHECK(a->pcie_bytes_per_s == b->pcie_bytes_per_s);
    CHECK_INT(a->n_switches, b->n_switches);
    for (int i = 0; i < a->n_switches && i < b->n_switches; i++) {
        CHECK(a->switches[i].uplink_bytes_per_s == b->switches[i].uplink_bytes_per_s);
        CHECK_INT(a->switches[i].socket, b->switches[i].socket);
    }
    CHECK_INT(a->n_sockets, b->n_sockets);
    CHECK(a->socket_link_bytes_per_s == b->socket_link_bytes_per_s);
    CHECK_INT(a->host_memory_bytes, b->host_memory_bytes);
    CHECK(a->host_memory_bytes_per_s == b->host_memory_bytes_per_s);
    CHECK(a->cpu_flops == b->cpu_flops);
    CHECK_STR(a->bandwidth_source, b->bandwidth_source);
}

#define REJECT(doc, path, text, marker) CHECK(expect_reject(load_topo, doc, path, text, marker) == 0)

int main(void)
{
    struct mpress_topology t, back;
    struct mpress_error err;
    sample_topology(&t);

    /* Round trip, and the same bytes twice. */
    const char *f1 = test_path("a.json");
    CHECK_INT(mpress_topology_save(f1, &t, &err), 0);
    char *s1 = read_all(f1);
    memset(&back, 0x5a, sizeof(back));
    CHECK_INT(mpress_topology_load(f1, &back, &err), 0);
    check_equal(&t, &back);
    CHECK_INT(mpress_topology_save(test_path("b.json"), &back, &err), 0);
    char *s2 = read_all(test_path("b.json"));
    CHECK(s1 && s2 && strcmp(s1, s2) == 0);
    CHECK(s1 && s1[strlen(s1) - 1] == '\n');
    CHECK(s1 && strstr(s1, "\n  \"bandwidth_source\": \"datasheet\",\n  \"cpu_flops\""));
    free(s2);

    /* The hand-written sample in tests/format/data is this same topology in canonical form. */
    const char *src = getenv("MPRESS_SRCDIR");
    if (src) {
        char p[1024];
        snprintf(p, sizeof(p), "%s/tests/format/data/topology.json", src);
        if (getenv("MPRESS_REGEN")) /* on purpose only: MPRESS_REGEN=1 meson test ... */
            CHECK_INT(mpress_topology_save(p, &t, &err), 0);
        char *shipped = read_all(p);
        CHECK_MSG(shipped && strcmp(shipped, s1) == 0, "%s differs from the saved sample", p);
        CHECK_INT(mpress_topology_load(p, &back, &err), 0);
        check_equal(&t, &back);
        free(shipped);
    }

    /* A topology that breaks a rule is not written: nothing is left at the path. */
    struct mpress_topology bad = t;
    bad.nvlinks[0][1] = 3;
    const char *f3 = test_path("c.json");
    CHECK_INT(mpress_topology_save(f3, &bad, &err), MPRESS_ESYSTEM);
    CHECK(strstr(err.text, "nvlinks[0][1]: not symmetric") != NULL);
    CHECK(access(f3, F_OK) != 0);
    /* Counts beyond the arrays and non-finite numbers cannot be written. */
    bad = t;
    bad.n_gpus = MPRESS_MAX_GPUS + 1;
    CHECK(mpress_topology_to_json(&bad) == NULL);
    CHECK_INT(mpress_topology_save(f3, &bad, &err), MPRESS_ESYSTEM);
    CHECK(access(f3, F_OK) != 0);
    bad = t;
    bad.pcie_bytes_per_s = 1.0 / 0.0;
    CHECK(mpress_topology_to_json(&bad) == NULL);
    /* Loading into *out leaves it untouched on error. */
    back = t;
    CHECK_INT(mpress_topology_load(test_path("nonexistent.json"), &back, &err), MPRESS_EINPUT);
    check_equal(&t, &back);

    json_t *base = mpress_topology_to_json(&t);
    CHECK(base != NULL);
#define COPY json_deep_copy(base)
    json_t *m;

    /* format and version */
    m = COPY; jset(m, "format", json_string("mpress-plan"));
    REJECT(m, "format", "expected \"mpress-topology\", got \"mpress-plan\"", "\"mpress-plan\"");
    m = COPY; jset(m, "version", json_integer(2));
    REJECT(m, "version", "unsupported mpress-topology version 2", NULL);
    m = COPY; jdel(m, "format");
    REJECT(m, "format", "missing field", NULL);
    /* missing, mistyped, unknown fields */
    m = COPY; jdel(m, "pcie_bytes_per_s");
    REJECT(m, "pcie_bytes_per_s", "missing field", NULL);
    m = COPY; jdel(m, "gpus[2].socket");
    REJECT(m, "gpus[2].socket", "missing field", NULL);
    m = COPY; jset(m, "gpus[1].memory_bytes", json_string("32 GB"));
    REJECT(m, "gpus[1].memory_bytes", "expected a non-negative integer, got a string",
           "\"32 GB\"");
    m = COPY; jset(m, "gpus[1].model", json_integer(7));
    REJECT(m, "gpus[1].model", "expected a string, got an integer", NULL);
    m = COPY; jset(m, "gpus[0].colour", json_string("green"));
    REJECT(m, "gpus[0].colour", "unknown field", "\"green\"");
    m = COPY; jset(m, "extra", json_true());
    REJECT(m, "extra", "unknown field", "true");
    m = COPY; jset(m, "gpus[3]", json_integer(1));
    REJECT(m, "gpus[3]", "expected an object", NULL);
    m = COPY; jset(m, "fabric", json_string("mesh"));
    REJECT(m, "fabric", "expected one of \"direct\", \"nvswitch\", got \"mesh\"", "\"mesh\"");
    m = COPY; jset(m, "bandwidth_source", json_string("guess"));
    REJECT(m, "bandwidth_source", "expected one of", "\"guess\"");
    m = COPY; jset(m, "gpus[0].model", json_string(""));
    REJECT(m, "gpus[0].model", "expected a non-empty string", NULL);
    /* negative and overflowing sizes */
    m = COPY; jset(m, "host_memory_bytes", json_integer(-123456789));
    REJECT(m, "host_memory_bytes", "got a negative integer", "-123456789");
    m = COPY; jset(m, "gpus[2].memory_bytes", json_integer(0));
    REJECT(m, "gpus[2].memory_bytes", "expected a positive size", NULL);
    m = COPY; jset(m, "gpus[2].reserve_bytes", json_integer(34359738369LL));
    REJECT(m, "gpus[2].reserve_bytes", "exceeds the GPU's memory", "34359738369");
    {
        /* jansson refuses the integer while parsing; the loader still names its path */
        char *text = mpress_json_dumps(base);
        char *at = strstr(text, "549755813888");
        char big[4096];
        snprintf(big, sizeof(big), "%.*s18446744073709551616%s", (int)(at - text), text,
                 at + strlen("549755813888"));
        CHECK(expect_reject_text(load_topo, big, "host_memory_bytes",
                                 "integer 18446744073709551616 does not fit in 64 bits",
                                 "18446744073709551616") == 0);
        snprintf(big, sizeof(big), "%.*s-9223372036854775809%s", (int)(at - text), text,
                 at + strlen("549755813888"));
        CHECK(expect_reject_text(load_topo, big, "host_memory_bytes",
                                 "integer -9223372036854775809 does not fit in 64 bits",
                                 "-9223372036854775809") == 0);
        /* a real beyond double range cannot be finite: jansson stops at it, the loader
         * still names its path and where it starts */
        snprintf(big, sizeof(big), "%.*s-1.5e999%s", (int)(at - text), text,
                 at + strlen("549755813888"));
        CHECK(expect_reject_text(load_topo, big, "host_memory_bytes",
                                 "number -1.5e999 is out of range (numbers must be finite)",
                                 "-1.5e999") == 0);
        at = strstr(text, "\"flops_fp16\": 1.25e14") + strlen("\"flops_fp16\": ");
        snprintf(big, sizeof(big), "%.*s1e400%s", (int)(at - text), text, at + strlen("1.25e14"));
        CHECK(expect_reject_text(load_topo, big, "gpus[0].flops_fp16", "number 1e400 is out of range",
                                 "1e400") == 0);
        free(text);
    }
    /* negative or zero bandwidths and negative rates */
    m = COPY; jset(m, "nvlink_bytes_per_s", json_real(-25e9));
    REJECT(m, "nvlink_bytes_per_s", "expected a non-negative number", NULL);
    m = COPY; jset(m, "nvlink_bytes_per_s", json_integer(0));
    REJECT(m, "nvlink_bytes_per_s", "the server has NVLinks", NULL);
    m = COPY; jset(m, "pcie_bytes_per_s", json_integer(0));
    REJECT(m, "pcie_bytes_per_s", "expected a positive number", NULL);
    m = COPY; jset(m, "pcie_switches[1].uplink_bytes_per_s", json_string("fast"));
    REJECT(m, "pcie_switches[1].uplink_bytes_per_s", "expected a number, got a string",
           "\"fast\"");
    m = COPY; jset(m, "gpus[3].flops_fp16", json_real(-1.0));
    REJECT(m, "gpus[3].flops_fp16", "expected a non-negative number", NULL);
    m = COPY; jset(m, "socket_link_bytes_per_s", json_integer(0));
    REJECT(m, "socket_link_bytes_per_s", "the server has 2 sockets", NULL);
    /* NVLink matrix */
    m = COPY; jset(m, "nvlinks[1][0]", json_integer(3));
    REJECT(m, "nvlinks[0][1]", "not symmetric: GPU 0 to 1 has 1 links, GPU 1 to 0 has 3", NULL);
    m = COPY; jset(m, "nvlinks[2][2]", json_integer(1));
    REJECT(m, "nvlinks[2][2]", "no NVLink to itself", NULL);
    m = COPY; jset(m, "nvlinks[3][1]", json_integer(-1));
    REJECT(m, "nvlinks[3][1]", "expected a link count in [0, 64]", NULL);
    m = COPY; jdel(m, "nvlinks[3]");
    REJECT(m, "nvlinks", "expected 4 rows", NULL);
    m = COPY; jdel(m, "nvlinks[3][0]");
    REJECT(m, "nvlinks[3]", "expected an array of 4 link counts", NULL);
    m = COPY; jset(m, "gpus[0].nvlink_ports", json_integer(3));
    REJECT(m, "nvlinks[0]", "GPU 0 has 4 links in total but only 3 NVLink ports", NULL);
    /* NVSwitch: every pair may use all of a GPU's ports, but not more */
    {
        struct mpress_topology nv = t, x;
        nv.fabric = MPRESS_FABRIC_NVSWITCH;
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++)
                nv.nvlinks[i][j] = i == j ? 0 : 6;
        const char *fn = test_path("nvswitch.json");
        CHECK_INT(mpress_topology_save(fn, &nv, &err), 0);
        CHECK_INT(mpress_topology_load(fn, &x, &err), 0);
        CHECK_INT(x.fabric, MPRESS_FABRIC_NVSWITCH);
        CHECK_INT(x.nvlinks[3][0], 6);
        json_t *jn = mpress_topology_to_json(&nv);
        jset(jn, "nvlinks[1][2]", json_integer(7));
        jset(jn, "nvlinks[2][1]", json_integer(7));
        REJECT(jn, "nvlinks[1][2]", "7 links exceed GPU 1's 6 NVLink ports", NULL);
        /* the same links on a direct fabric break the per-GPU total first */
        jn = mpress_topology_to_json(&nv);
        jset(jn, "fabric", json_string("direct"));
        REJECT(jn, "nvlinks[0]", "GPU 0 has 18 links in total but only 6 NVLink ports", NULL);
    }
    /* references out of range */
    m = COPY; jset(m, "gpus[1].pcie_switch", json_integer(2));
    REJECT(m, "gpus[1].pcie_switch", "PCIe switch 2 does not exist (pcie_switches has 2)", NULL);
    m = COPY; jset(m, "gpus[1].pcie_switch", json_integer(-1));
    REJECT(m, "gpus[1].pcie_switch", "expected an integer in", NULL);
    m = COPY; jset(m, "gpus[0].socket", json_integer(5));
    REJECT(m, "gpus[0].socket", "socket 5 does not exist (n_sockets is 2)", NULL);
    m = COPY; jset(m, "pcie_switches[0].socket", json_integer(2));
    REJECT(m, "pcie_switches[0].socket", "socket 2 does not exist", NULL);
    m = COPY; jset(m, "n_sockets", json_integer(0));
    REJECT(m, "n_sockets", "expected an integer in [1, 32], got 0", NULL);
    /* GPU count outside [1, MPRESS_MAX_GPUS] */
    m = COPY; jset(m, "gpus", json_array()); jset(m, "nvlinks", json_array());
    REJECT(m, "gpus", "expected 1 to 32 GPUs, got 0", NULL);
    m = COPY;
    {
        json_t *g = jget(m, "gpus");
        while (json_array_size(g) < 33)
            json_array_append_new(g, json_deep_copy(json_array_get(g, 0)));
    }
    REJECT(m, "gpus", "expected 1 to 32 GPUs, got 33", NULL);
    m = COPY; jset(m, "pcie_switches", json_array());
    REJECT(m, "pcie_switches", "expected 1 to 32 PCIe switches, got 0", NULL);

    /* Errors inside a plan carry the embedding path; line:column still point at the value. */
    m = COPY; jset(m, "gpus[2].hbm_bytes_per_s", json_string("HBM2"));
    {
        json_t *outer = json_pack("{s:o}", "topology", m);
        char *text = mpress_json_dumps(outer);
        struct mpress_json_doc doc;
        CHECK_INT(mpress_json_doc_parse(&doc, text, strlen(text), "outer.json", &err), 0);
        struct mpress_topology x;
        CHECK_INT(mpress_topology_from_json(&doc, json_object_get(doc.root, "topology"),
                                            "topology", &x, &err),
                  MPRESS_EINPUT);
        CHECK_STR(err.path, "topology.gpus[2].hbm_bytes_per_s");
        const char *at = strstr(text, "\"HBM2\"");
        int line = 1, col = 1;
        for (const char *c = text; c < at; c++)
            line += *c == '\n', col = *c == '\n' ? 1 : col + 1;
        CHECK_INT(err.line, line);
        CHECK_INT(err.column, col);
        mpress_json_doc_finish(&doc);
        free(text);
        json_decref(outer);
    }

    json_decref(base);
    free(s1);
    test_cleanup();
    return check_done();
}
