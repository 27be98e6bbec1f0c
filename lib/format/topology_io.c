/* mpress-topology v1: writer and strict loader. Field names and rules are documented in
 * docs/formats.md; everything else in mpress reads struct mpress_topology only. */
#include <stdio.h>
#include <string.h>

#include "format_internal.h"
#include "mpress/topology.h"

static const char *const fabric_names[] = {"direct", "nvswitch", NULL};
static const char *const bandwidth_sources[] = {"datasheet", "measured", NULL};

/* Upper bound on NVLink links between one pair or per GPU: far above any server (H100 has 18
 * ports), low enough to catch garbage. */
#define MAX_LINKS 64

json_t *mpress_topology_to_json(const struct mpress_topology *t)
{
    /* Counts outside the arrays cannot be written faithfully: refuse rather than clip. */
    if (t->n_gpus < 0 || t->n_gpus > MPRESS_MAX_GPUS || t->n_switches < 0 ||
        t->n_switches > MPRESS_MAX_GPUS)
        return NULL;
    struct fmt_out o = {0};
    json_t *root = json_object();
    json_t *gpus = json_array(), *links = json_array(), *switches = json_array();
    if (!root || !gpus || !links || !switches) {
        json_decref(root);
        json_decref(gpus);
        json_decref(links);
        json_decref(switches);
        return NULL;
    }
    fmt_set_str(&o, root, "format", MPRESS_TOPOLOGY_FORMAT);
    fmt_set_int(&o, root, "version", MPRESS_TOPOLOGY_VERSION);
    fmt_set_str(&o, root, "name", t->name);
    fmt_set_str(&o, root, "description", t->description);
    int fabric = t->fabric == MPRESS_FABRIC_NVSWITCH ? 1 : 0;
    if (t->fabric != MPRESS_FABRIC_DIRECT && t->fabric != MPRESS_FABRIC_NVSWITCH)
        o.bad = 1;
    fmt_set_str(&o, root, "fabric", fabric_names[fabric]);
    int n = t->n_gpus;
    for (int i = 0; i < n; i++) {
        const struct mpress_topo_gpu *g = &t->gpus[i];
        json_t *jg = json_object(), *row = json_array();
        if (!jg || !row)
            o.bad = 1;
        if (jg) {
            fmt_set_str(&o, jg, "model", g->model);
            fmt_set_u64(&o, jg, "memory_bytes", g->memory_bytes);
            fmt_set_u64(&o, jg, "reserve_bytes", g->reserve_bytes);
            fmt_set_real(&o, jg, "flops_fp16", g->flops_fp16);
            fmt_set_real(&o, jg, "flops_fp32", g->flops_fp32);
            fmt_set_real(&o, jg, "hbm_bytes_per_s", g->hbm_bytes_per_s);
            fmt_set_int(&o, jg, "nvlink_ports", g->nvlink_ports);
            fmt_set_int(&o, jg, "pcie_switch", g->pcie_switch);
            fmt_set_int(&o, jg, "socket", g->socket);
        }
        fmt_append(&o, gpus, jg);
        if (row)
            for (int j = 0; j < n; j++)
                fmt_append(&o, row, json_integer(t->nvlinks[i][j]));
        fmt_append(&o, links, row);
    }
    fmt_set(&o, root, "gpus", gpus);
    fmt_set(&o, root, "nvlinks", links);
    fmt_set_real(&o, root, "nvlink_bytes_per_s", t->nvlink_bytes_per_s);
    fmt_set_real(&o, root, "pcie_bytes_per_s", t->pcie_bytes_per_s);
    for (int i = 0; i < t->n_switches; i++) {
        json_t *js = json_object();
        if (js) {
            fmt_set_real(&o, js, "uplink_bytes_per_s", t->switches[i].uplink_bytes_per_s);
            fmt_set_int(&o, js, "socket", t->switches[i].socket);
        }
        fmt_append(&o, switches, js);
    }
    fmt_set(&o, root, "pcie_switches", switches);
    fmt_set_int(&o, root, "n_sockets", t->n_sockets);
    fmt_set_real(&o, root, "socket_link_bytes_per_s", t->socket_link_bytes_per_s);
    fmt_set_u64(&o, root, "host_memory_bytes", t->host_memory_bytes);
    fmt_set_real(&o, root, "host_memory_bytes_per_s", t->host_memory_bytes_per_s);
    fmt_set_real(&o, root, "cpu_flops", t->cpu_flops);
    fmt_set_str(&o, root, "bandwidth_source", t->bandwidth_source);
    if (o.bad) {
        json_decref(root);
        return NULL;
    }
    return root;
}

static const char *const topology_keys[] = {
    "format", "version", "name", "description", "fabric", "gpus", "nvlinks",
    "nvlink_bytes_per_s", "pcie_bytes_per_s", "pcie_switches", "n_sockets",
    "socket_link_bytes_per_s", "host_memory_bytes", "host_memory_bytes_per_s", "cpu_flops",
    "bandwidth_source", NULL};
static const char *const gpu_keys[] = {
    "model", "memory_bytes", "reserve_bytes", "flops_fp16", "flops_fp32", "hbm_bytes_per_s",
    "nvlink_ports", "pcie_switch", "socket", NULL};
static const char *const switch_keys[] = {"uplink_bytes_per_s", "socket", NULL};

/* Supported ranges of the rates (docs/formats.md, "Limits"): a bandwidth that is not 0 lies
 * within 1e6..1e15 B/s and a FLOP/s figure within 1e6..1e18. Links, memories and processors of
 * real servers lie well inside (about 1e6 to 1e13 B/s, 1e9 to 1e16 FLOP/s); values far outside,
 * finite as they are, only make predicted times overflow or vanish, and the planner's MILP
 * coefficients span more than a double solver resolves. */
#define MIN_BYTES_PER_S 1e6
#define MAX_BYTES_PER_S 1e15
#define MIN_FLOPS 1e6
#define MAX_FLOPS 1e18

static int check_rate(const struct mpress_json_doc *doc, const char *obj_path, const char *key,
                      double v, int flops, struct mpress_error *err)
{
    double lo = flops ? MIN_FLOPS : MIN_BYTES_PER_S, hi = flops ? MAX_FLOPS : MAX_BYTES_PER_S;
    if (v == 0 || (v >= lo && v <= hi))
        return 0;
    char path[512];
    mpress_json_path_key(path, sizeof(path), obj_path, key);
    return mpress_json_doc_error(doc, err, path, "%g %s is outside the supported range %g to %g",
                                 v, flops ? "FLOP/s" : "B/s", lo, hi);
}

/* Every rate of t against its supported range, with the path of the first one outside. */
static int check_rates(const struct mpress_json_doc *doc, const char *obj_path,
                       const struct mpress_topology *t, struct mpress_error *err)
{
    char arr[512], path[512];
    mpress_json_path_key(arr, sizeof(arr), obj_path, "pcie_switches");
    for (int i = 0; i < t->n_switches; i++) {
        mpress_json_path_index(path, sizeof(path), arr, (size_t)i);
        if (check_rate(doc, path, "uplink_bytes_per_s", t->switches[i].uplink_bytes_per_s, 0, err))
            return MPRESS_EINPUT;
    }
    mpress_json_path_key(arr, sizeof(arr), obj_path, "gpus");
    for (int i = 0; i < t->n_gpus; i++) {
        const struct mpress_topo_gpu *g = &t->gpus[i];
        mpress_json_path_index(path, sizeof(path), arr, (size_t)i);
        if (check_rate(doc, path, "flops_fp16", g->flops_fp16, 1, err) ||
            check_rate(doc, path, "flops_fp32", g->flops_fp32, 1, err) ||
            check_rate(doc, path, "hbm_bytes_per_s", g->hbm_bytes_per_s, 0, err))
            return MPRESS_EINPUT;
    }
    if (check_rate(doc, obj_path, "nvlink_bytes_per_s", t->nvlink_bytes_per_s, 0, err) ||
        check_rate(doc, obj_path, "pcie_bytes_per_s", t->pcie_bytes_per_s, 0, err) ||
        check_rate(doc, obj_path, "socket_link_bytes_per_s", t->socket_link_bytes_per_s, 0, err) ||
        check_rate(doc, obj_path, "host_memory_bytes_per_s", t->host_memory_bytes_per_s, 0,
                   err) ||
        check_rate(doc, obj_path, "cpu_flops", t->cpu_flops, 1, err))
        return MPRESS_EINPUT;
    return 0;
}

/* The "pcie_switches" array (read before the GPUs, which refer to switches by index). */
static int read_switches(const struct mpress_json_doc *doc, const json_t *obj,
                         const char *obj_path, struct mpress_topology *t,
                         struct mpress_error *err)
{
    char path[512], sub[512], sw_path[512];
    json_t *arr;
    mpress_json_path_key(sw_path, sizeof(sw_path), obj_path, "pcie_switches");
    if (mpress_jread_array(doc, obj, obj_path, "pcie_switches", &arr, err))
        return MPRESS_EINPUT;
    if (json_array_size(arr) < 1 || json_array_size(arr) > MPRESS_MAX_GPUS)
        return mpress_json_doc_error(doc, err, sw_path, "expected 1 to %d PCIe switches, got %zu",
                                     MPRESS_MAX_GPUS, json_array_size(arr));
    t->n_switches = (int)json_array_size(arr);
    for (int i = 0; i < t->n_switches; i++) {
        json_t *js;
        struct mpress_topo_switch *s = &t->switches[i];
        if (fmt_array_object(doc, arr, (size_t)i, sw_path, &js, path, sizeof(path), err) ||
            fmt_check_keys(doc, js, path, switch_keys, err) ||
            fmt_read_positive(doc, js, path, "uplink_bytes_per_s", &s->uplink_bytes_per_s,
                              err) ||
            mpress_jread_int(doc, js, path, "socket", 0, 1 << 30, &s->socket, err))
            return MPRESS_EINPUT;
        if (s->socket >= t->n_sockets) {
            mpress_json_path_key(sub, sizeof(sub), path, "socket");
            return mpress_json_doc_error(doc, err, sub,
                                         "socket %d does not exist (n_sockets is %d)", s->socket,
                                         t->n_sockets);
        }
    }
    return 0;
}

/* The "gpus" array: each GPU's fields, its reserve within its memory, and its switch and
 * socket among those read before. */
static int read_gpus(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                     struct mpress_topology *t, struct mpress_error *err)
{
    char path[512], sub[512], gpus_path[512];
    json_t *arr;
    mpress_json_path_key(gpus_path, sizeof(gpus_path), obj_path, "gpus");
    if (mpress_jread_array(doc, obj, obj_path, "gpus", &arr, err))
        return MPRESS_EINPUT;
    if (json_array_size(arr) < 1 || json_array_size(arr) > MPRESS_MAX_GPUS)
        return mpress_json_doc_error(doc, err, gpus_path, "expected 1 to %d GPUs, got %zu",
                                     MPRESS_MAX_GPUS, json_array_size(arr));
    t->n_gpus = (int)json_array_size(arr);
    for (int i = 0; i < t->n_gpus; i++) {
        json_t *jg;
        struct mpress_topo_gpu *g = &t->gpus[i];
        if (fmt_array_object(doc, arr, (size_t)i, gpus_path, &jg, path, sizeof(path), err) ||
            fmt_check_keys(doc, jg, path, gpu_keys, err) ||
            fmt_read_name(doc, jg, path, "model", g->model, sizeof(g->model), err) ||
            mpress_jread_u64(doc, jg, path, "memory_bytes", &g->memory_bytes, err) ||
            mpress_jread_u64(doc, jg, path, "reserve_bytes", &g->reserve_bytes, err) ||
            mpress_jread_nonneg(doc, jg, path, "flops_fp16", &g->flops_fp16, err) ||
            mpress_jread_nonneg(doc, jg, path, "flops_fp32", &g->flops_fp32, err) ||
            mpress_jread_nonneg(doc, jg, path, "hbm_bytes_per_s", &g->hbm_bytes_per_s, err) ||
            mpress_jread_int(doc, jg, path, "nvlink_ports", 0, MAX_LINKS, &g->nvlink_ports,
                             err) ||
            mpress_jread_int(doc, jg, path, "pcie_switch", 0, 1 << 30, &g->pcie_switch, err) ||
            mpress_jread_int(doc, jg, path, "socket", 0, 1 << 30, &g->socket, err))
            return MPRESS_EINPUT;
        if (g->memory_bytes == 0) {
            mpress_json_path_key(sub, sizeof(sub), path, "memory_bytes");
            return mpress_json_doc_error(doc, err, sub, "expected a positive size, got 0");
        }
        if (g->reserve_bytes > g->memory_bytes) {
            mpress_json_path_key(sub, sizeof(sub), path, "reserve_bytes");
            return mpress_json_doc_error(doc, err, sub,
                                         "reserve (%llu bytes) exceeds the GPU's memory (%llu "
                                         "bytes)",
                                         (unsigned long long)g->reserve_bytes,
                                         (unsigned long long)g->memory_bytes);
        }
        if (g->pcie_switch >= t->n_switches) {
            mpress_json_path_key(sub, sizeof(sub), path, "pcie_switch");
            return mpress_json_doc_error(doc, err, sub,
                                         "PCIe switch %d does not exist (pcie_switches has %d)",
                                         g->pcie_switch, t->n_switches);
        }
        if (g->socket >= t->n_sockets) {
            mpress_json_path_key(sub, sizeof(sub), path, "socket");
            return mpress_json_doc_error(doc, err, sub,
                                         "socket %d does not exist (n_sockets is %d)", g->socket,
                                         t->n_sockets);
        }
    }
    return 0;
}

/* The "nvlinks" matrix: n_gpus rows of n_gpus link counts in [0, MAX_LINKS] (its path into
 * nv_path, whether any pair has a link into *any_link). */
static int read_nvlink_rows(const struct mpress_json_doc *doc, const json_t *obj,
                            const char *obj_path, struct mpress_topology *t, char *nv_path,
                            size_t nv_size, int *any_link, struct mpress_error *err)
{
    char path[512], sub[512];
    json_t *arr;
    mpress_json_path_key(nv_path, nv_size, obj_path, "nvlinks");
    if (mpress_jread_array(doc, obj, obj_path, "nvlinks", &arr, err))
        return MPRESS_EINPUT;
    if (json_array_size(arr) != (size_t)t->n_gpus)
        return mpress_json_doc_error(doc, err, nv_path, "expected %d rows (one per GPU), got %zu",
                                     t->n_gpus, json_array_size(arr));
    *any_link = 0;
    for (int i = 0; i < t->n_gpus; i++) {
        json_t *row = json_array_get(arr, (size_t)i);
        mpress_json_path_index(path, sizeof(path), nv_path, (size_t)i);
        if (!json_is_array(row) || json_array_size(row) != (size_t)t->n_gpus)
            return mpress_json_doc_error(doc, err, path,
                                         "expected an array of %d link counts (one per GPU)",
                                         t->n_gpus);
        for (int j = 0; j < t->n_gpus; j++) {
            json_t *v = json_array_get(row, (size_t)j);
            mpress_json_path_index(sub, sizeof(sub), path, (size_t)j);
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) > MAX_LINKS)
                return mpress_json_doc_error(doc, err, sub,
                                             "expected a link count in [0, %d]", MAX_LINKS);
            t->nvlinks[i][j] = (int)json_integer_value(v);
            *any_link |= t->nvlinks[i][j] != 0;
        }
    }
    return 0;
}

/* The NVLink matrix is symmetric with a zero diagonal, and within each GPU's ports. */
static int check_nvlinks(const struct mpress_json_doc *doc, const char *nv_path,
                         const struct mpress_topology *t, struct mpress_error *err)
{
    char path[512], sub[512];
    for (int i = 0; i < t->n_gpus; i++) {
        int sum = 0;
        for (int j = 0; j < t->n_gpus; j++) {
            mpress_json_path_index(path, sizeof(path), nv_path, (size_t)i);
            mpress_json_path_index(sub, sizeof(sub), path, (size_t)j);
            if (i == j && t->nvlinks[i][j] != 0)
                return mpress_json_doc_error(doc, err, sub,
                                             "a GPU has no NVLink to itself: expected 0, got %d",
                                             t->nvlinks[i][j]);
            if (t->nvlinks[i][j] != t->nvlinks[j][i])
                return mpress_json_doc_error(doc, err, sub,
                                             "not symmetric: GPU %d to %d has %d links, GPU %d "
                                             "to %d has %d",
                                             i, j, t->nvlinks[i][j], j, i, t->nvlinks[j][i]);
            sum += t->nvlinks[i][j];
        }
        /* Point-to-point fabrics use one port per link; on NVSwitch a row repeats the GPU's
         * port count for every peer, so only the per-pair value is bounded. */
        if (t->fabric == MPRESS_FABRIC_DIRECT && sum > t->gpus[i].nvlink_ports) {
            mpress_json_path_index(path, sizeof(path), nv_path, (size_t)i);
            return mpress_json_doc_error(doc, err, path,
                                         "GPU %d has %d links in total but only %d NVLink ports",
                                         i, sum, t->gpus[i].nvlink_ports);
        }
        if (t->fabric == MPRESS_FABRIC_NVSWITCH)
            for (int j = 0; j < t->n_gpus; j++)
                if (t->nvlinks[i][j] > t->gpus[i].nvlink_ports) {
                    mpress_json_path_index(path, sizeof(path), nv_path, (size_t)i);
                    mpress_json_path_index(sub, sizeof(sub), path, (size_t)j);
                    return mpress_json_doc_error(doc, err, sub,
                                                 "%d links exceed GPU %d's %d NVLink ports",
                                                 t->nvlinks[i][j], i, t->gpus[i].nvlink_ports);
                }
    }
    return 0;
}

int mpress_topology_from_json(const struct mpress_json_doc *doc, const json_t *obj,
                              const char *obj_path, struct mpress_topology *out,
                              struct mpress_error *err)
{
    /* Filled into a scratch copy so that *out is untouched on error. */
    static const struct mpress_topology zero;
    struct mpress_topology t = zero;
    char path[512], nv_path[512];
    int idx, any_link = 0;

    if (!json_is_object(obj))
        return mpress_json_doc_error(doc, err, obj_path, "expected an object");
    if (mpress_jread_header(doc, obj, obj_path, MPRESS_TOPOLOGY_FORMAT, MPRESS_TOPOLOGY_VERSION,
                            NULL, err) ||
        fmt_check_keys(doc, obj, obj_path, topology_keys, err) ||
        fmt_read_name(doc, obj, obj_path, "name", t.name, sizeof(t.name), err) ||
        mpress_jread_str(doc, obj, obj_path, "description", t.description,
                         sizeof(t.description), err) ||
        fmt_read_choice(doc, obj, obj_path, "fabric", fabric_names, &idx, err))
        return MPRESS_EINPUT;
    t.fabric = idx == 1 ? MPRESS_FABRIC_NVSWITCH : MPRESS_FABRIC_DIRECT;
    if (mpress_jread_int(doc, obj, obj_path, "n_sockets", 1, MPRESS_MAX_GPUS, &t.n_sockets,
                         err))
        return MPRESS_EINPUT;

    /* PCIe switches before GPUs, which refer to them. */
    int rc = read_switches(doc, obj, obj_path, &t, err);
    if (!rc)
        rc = read_gpus(doc, obj, obj_path, &t, err);
    if (!rc)
        rc = read_nvlink_rows(doc, obj, obj_path, &t, nv_path, sizeof(nv_path), &any_link, err);
    if (!rc)
        rc = check_nvlinks(doc, nv_path, &t, err);
    if (rc)
        return rc;
    if (mpress_jread_nonneg(doc, obj, obj_path, "nvlink_bytes_per_s", &t.nvlink_bytes_per_s,
                            err))
        return MPRESS_EINPUT;
    if (any_link && !(t.nvlink_bytes_per_s > 0)) {
        mpress_json_path_key(path, sizeof(path), obj_path, "nvlink_bytes_per_s");
        return mpress_json_doc_error(doc, err, path,
                                     "expected a positive number: the server has NVLinks");
    }
    if (fmt_read_positive(doc, obj, obj_path, "pcie_bytes_per_s", &t.pcie_bytes_per_s, err) ||
        mpress_jread_nonneg(doc, obj, obj_path, "socket_link_bytes_per_s",
                            &t.socket_link_bytes_per_s, err) ||
        mpress_jread_u64(doc, obj, obj_path, "host_memory_bytes", &t.host_memory_bytes, err) ||
        mpress_jread_nonneg(doc, obj, obj_path, "host_memory_bytes_per_s",
                            &t.host_memory_bytes_per_s, err) ||
        mpress_jread_nonneg(doc, obj, obj_path, "cpu_flops", &t.cpu_flops, err) ||
        fmt_read_choice(doc, obj, obj_path, "bandwidth_source", bandwidth_sources, &idx, err))
        return MPRESS_EINPUT;
    snprintf(t.bandwidth_source, sizeof(t.bandwidth_source), "%s", bandwidth_sources[idx]);
    if (t.n_sockets > 1 && !(t.socket_link_bytes_per_s > 0)) {
        mpress_json_path_key(path, sizeof(path), obj_path, "socket_link_bytes_per_s");
        return mpress_json_doc_error(doc, err, path,
                                     "expected a positive number: the server has %d sockets",
                                     t.n_sockets);
    }
    if (check_rates(doc, obj_path, &t, err))
        return MPRESS_EINPUT;
    *out = t;
    return 0;
}

int fmt_topology_check(const struct mpress_json_doc *doc, struct mpress_error *err)
{
    struct mpress_topology t;
    return mpress_topology_from_json(doc, doc->root, "", &t, err);
}

int mpress_topology_load(const char *file, struct mpress_topology *out, struct mpress_error *err)
{
    struct mpress_json_doc doc;
    int rc = fmt_doc_load(&doc, file, err);
    if (rc == 0)
        rc = mpress_topology_from_json(&doc, doc.root, "", out, err);
    fmt_root_position(&doc, err);
    mpress_json_doc_finish(&doc);
    return rc;
}

int mpress_topology_save(const char *file, const struct mpress_topology *topo,
                         struct mpress_error *err)
{
    return fmt_save_checked(file, mpress_topology_to_json(topo), "topology",
                            fmt_topology_check, err);
}
