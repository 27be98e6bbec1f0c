/* The mapping-free relaxation's server and plan (lib/plan/ilp_relax.c), worked by hand on dgx1:
 * each GPU's NVLinks carry 6 x 25 GB/s in all (links 1, 1, 2, 2 to its four peers) and its own
 * PCIe link 12 GB/s, so the relaxed port must run at 162 GB/s to carry what both carried; four
 * PCIe switches and two sockets become eight of each. tests/plan/test_exact.c checks the
 * relaxation itself on every enumerated assignment of tiny instances. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "../../lib/plan/plan_internal.h"

static void dgx1_relaxed(void)
{
    struct mpress_topology t, r;
    struct mpress_error err;
    CHECK_INT(mpress_topology_builtin("dgx1", &t, &err), 0);
    CHECK_INT(plan_topology_relax(&t, &r), 0);
    CHECK(r.fabric == MPRESS_FABRIC_NVSWITCH);
    CHECK_INT(r.n_gpus, 8);
    CHECK_INT(r.n_switches, 8);
    CHECK_INT(r.n_sockets, 8);
    CHECK_NEAR(r.host_memory_bytes_per_s, 68.256e9, 1e-12);
    CHECK(r.host_memory_bytes == t.host_memory_bytes);
    for (int g = 0; g < 8; g++) {
        CHECK_NEAR(plan_port_bw(&r, g), 162e9, 1e-12);
        CHECK_INT(r.gpus[g].pcie_switch, g);
        CHECK_INT(r.gpus[g].socket, g);
        CHECK_NEAR(r.switches[g].uplink_bytes_per_s, 12e9, 1e-12);
        CHECK(r.gpus[g].memory_bytes == t.gpus[g].memory_bytes &&
              r.gpus[g].reserve_bytes == t.gpus[g].reserve_bytes);
        CHECK_NEAR(r.gpus[g].hbm_bytes_per_s, t.gpus[g].hbm_bytes_per_s, 1e-12);
        for (int q = 0; q < 8; q++)
            if (q != g)
                CHECK_NEAR(plan_nvlink_bw(&r, g, q), 162e9, 1e-12);
    }
    /* GPU 0's links by hand: 25 + 25 + 50 + 50 GB/s to GPUs 1, 2, 3 and 4. */
    CHECK_NEAR(plan_nvlink_bw(&t, 0, 1) + plan_nvlink_bw(&t, 0, 2) + plan_nvlink_bw(&t, 0, 3) +
                   plan_nvlink_bw(&t, 0, 4),
               150e9, 1e-12);
}

static void not_relaxed(void)
{
    struct mpress_topology t, r;
    struct mpress_error err;
    CHECK_INT(mpress_topology_builtin("dgx2", &t, &err), 0);
    CHECK_INT(plan_topology_relax(&t, &r), -1); /* NVSwitch already: mapping fixed */
    CHECK_INT(mpress_topology_builtin("dgx1", &t, &err), 0);
    CHECK_INT(mpress_topology_restrict(&t, 1, &err), 0);
    CHECK_INT(plan_topology_relax(&t, &r), -1); /* one GPU */
    CHECK_INT(mpress_topology_builtin("dgx1", &t, &err), 0);
    t.gpus[3].memory_bytes /= 2;
    CHECK_INT(plan_topology_relax(&t, &r), -1); /* GPUs that differ: the mapping matters */
}

/* Stages on GPUs 5, 2 and 7 move to 0, 1 and 2; the other GPUs, 0 1 3 4 6, to 3 4 5 6 7 in
 * that order, so a D2D peer 2 becomes 1 and peers 0 and 6 become 3 and 7. */
static void plan_moved(void)
{
    struct mpress_profile p;
    mpress_profile_init(&p);
    p.n_ops = 3;
    p.ops = calloc(3, sizeof(*p.ops));
    p.ops[0].n_tensors = 1;
    p.ops[0].tensors = calloc(1, sizeof(*p.ops[0].tensors));
    p.ops[0].tensors[0].bytes = 300;
    struct mpress_assignment a, out;
    CHECK_INT(mpress_assignment_init(&a, &p, NULL), 0);
    CHECK_INT(mpress_assignment_init(&out, &p, NULL), 0);
    a.n_stages = 3;
    int gpus[3] = {5, 2, 7};
    for (int k = 0; k < 3; k++) {
        a.stages[k].first_op = a.stages[k].last_op = k;
        a.stages[k].gpu = gpus[k];
        a.stages[k].optimizer_on_host = k == 1;
    }
    a.actions[0].action = MPRESS_ACTION_D2D_SWAP;
    a.actions[0].n_peers = 3;
    int peers[3] = {2, 0, 6};
    for (int i = 0; i < 3; i++)
        a.actions[0].peers[i] = peers[i], a.actions[0].peer_bytes[i] = 100;
    plan_assignment_relax(&a, 8, &out);
    CHECK_INT(out.n_stages, 3);
    for (int k = 0; k < 3; k++) {
        CHECK_INT(out.stages[k].gpu, k);
        CHECK_INT(out.stages[k].first_op, k);
        CHECK_INT(out.stages[k].optimizer_on_host, k == 1);
    }
    CHECK_INT(out.actions[0].n_peers, 3);
    CHECK_INT(out.actions[0].peers[0], 1);
    CHECK_INT(out.actions[0].peers[1], 3);
    CHECK_INT(out.actions[0].peers[2], 7);
    CHECK(out.actions[0].peer_bytes[2] == 100);
    mpress_assignment_finish(&a);
    mpress_assignment_finish(&out);
    mpress_profile_finish(&p);
}

int main(void)
{
    dgx1_relaxed();
    not_relaxed();
    plan_moved();
    return check_done();
}
