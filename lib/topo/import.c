/* `mpress topo import`: turns an `nvidia-smi topo -m` text dump or an NCCL topology XML dump
 * into a topology. The parsers (import_smi.c, import_xml.c) report what the dump shows; this
 * file fills in what it lacks from the GPU table and the built-in server with that GPU, and
 * says so in the notes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo_internal.h"

/* Dumps are a few kB; anything far larger is not one. */
#define MAX_DUMP_BYTES (16u << 20)

/* The dump's text: a NUL byte means a binary file, not a dump. */
static int read_dump(const char *file, char **text, size_t *size, struct mpress_error *err)
{
    int rc = mpress_read_file(file, MAX_DUMP_BYTES, text, size, err);
    if (rc)
        return rc;
    if (memchr(*text, '\0', *size)) {
        free(*text);
        *text = NULL;
        return mpress_error_at(err, MPRESS_EINPUT, file, 0, 0, NULL,
                               "binary data: not a topology dump");
    }
    return MPRESS_OK;
}

/* The GPU model an NVLink pattern implies when the dump does not name one. NVSwitch ports per
 * GPU: 6 on DGX-2 (V100-SXM3), 12 on A100, 18 on H100 (the GPU table). A direct mesh of at
 * most 6 links per GPU in which some GPU links to two or more peers is NVLink2 as on the DGX-1
 * (V100-SXM2; the 32 GB one is assumed). Links only within pairs are NVLink bridges, which
 * several PCIe cards take (A40, RTX A6000, RTX 3090 with 4 links, A100 and H100 PCIe with
 * 12): they imply no model. */
static const struct mpress_gpu_spec *guess_gpu(const struct topo_raw *raw, int uniform,
                                               char *why, size_t why_size)
{
    /* The GPUs that come on NVSwitch baseboards, one per port count; the 80 GB A100 and the
     * H100 are assumed where the 40 GB A100 or the H200 have the same count. */
    static const char *const nvswitch_gpus[] = {"v100-sxm3", "a100-80g", "h100"};
    int ports = raw->nvswitch_ports;
    if (!ports && uniform > 0 && raw->n_gpus >= 3 && uniform * (raw->n_gpus - 1) > 6)
        ports = uniform;
    for (size_t k = 0; ports && k < sizeof(nvswitch_gpus) / sizeof(nvswitch_gpus[0]); k++) {
        const struct mpress_gpu_spec *s = mpress_gpu_spec_find(nvswitch_gpus[k]);
        if (s && s->nvlink_ports == ports) {
            snprintf(why, why_size, "every GPU has %d NVLinks to each peer, as through the "
                     "NVSwitch of a server with %s", ports, s->model);
            return s;
        }
    }
    int most = 0, most_peers = 0;
    for (int i = 0; i < raw->n_gpus; i++) {
        int sum = 0, peers = 0;
        for (int j = 0; j < raw->n_gpus; j++) {
            sum += raw->links[i][j];
            peers += raw->links[i][j] > 0;
        }
        if (sum > most)
            most = sum;
        if (peers > most_peers)
            most_peers = peers;
    }
    if (most > 0 && most <= 6 && most_peers >= 2) {
        snprintf(why, why_size, "no GPU has more than 6 NVLinks and they join more than pairs, "
                 "as NVLink2 on V100-SXM2 boards does");
        return mpress_gpu_spec_find("v100");
    }
    return NULL;
}

/* The built-in server whose GPUs are spec: it supplies the host figures a dump lacks. A GPU
 * no built-in server has (the PCIe cards) takes them from the built-in server of its PCIe
 * generation (*by_gen set to 1). */
static int reference_server(const struct mpress_gpu_spec *spec, struct mpress_topology *ref,
                            int *by_gen)
{
    static const char *const by_pcie_gen[] = {"dgx1", "dgx-a100", "dgx-h100"}; /* Gen3..5 */
    struct mpress_error e;
    *by_gen = 0;
    for (const char *const *n = mpress_topology_builtin_names(); *n; n++)
        if (mpress_topology_builtin(*n, ref, &e) == 0 && strcmp(ref->gpus[0].model,
                                                                spec->model) == 0)
            return 0;
    if (spec->pcie_gen < 3 || spec->pcie_gen > 5)
        return -1;
    *by_gen = 1;
    return mpress_topology_builtin(by_pcie_gen[spec->pcie_gen - 3], ref, &e) == 0 ? 0 : -1;
}

const char *mpress_topology_assumption(const struct mpress_topology *topo)
{
    const char *a = topo ? strstr(topo->description, MPRESS_TOPOLOGY_ASSUMED) : NULL;
    return a ? a + 2 : NULL; /* past the "; " */
}

static void gpu_list(char *out, size_t size, const int *flag, int n)
{
    out[0] = '\0';
    size_t len = 0;
    for (int i = 0; i < n && len < size; i++)
        if (flag[i]) {
            int k = snprintf(out + len, size - len, "%s%d", len ? " " : "", i);
            if (k > 0)
                len += (size_t)k;
        }
}

/* The dump shows more NVLinks at a GPU (gpu, or every GPU when -1) than the GPU model has
 * ports: no topology can hold both. The model was given (--gpu: a usage error) or read from
 * the dump's PCI ids (a dump that contradicts itself). */
static int too_many_links(const char *file, const struct mpress_gpu_spec *given,
                          const struct mpress_gpu_spec *spec, int gpu, int links,
                          struct mpress_error *err)
{
    char where[32];
    snprintf(where, sizeof(where), gpu < 0 ? "every GPU" : "GPU%d", gpu);
    return mpress_error_at(err, given ? MPRESS_EUSAGE : MPRESS_EINPUT, file, 0, 0, NULL,
                           "the dump shows %d NVLinks at %s, but a %s has %d NVLink ports%s",
                           links, where, spec->model, spec->nvlink_ports,
                           given ? ": give the --gpu the server has" : "");
}

/* The GPU model into *spec_out: as given, from the dump's PCI device id, or guessed from the
 * NVLinks (uniform: the link count every pair shares); said in notes. */
static int choose_spec(const char *file, const struct topo_raw *raw,
                       const struct mpress_gpu_spec *given, int uniform,
                       const struct mpress_gpu_spec **spec_out, char *notes, size_t notes_size,
                       struct mpress_error *err)
{
    const struct mpress_gpu_spec *spec = given;
    char why[160] = "";
    if (spec) {
        topo_note(notes, notes_size, "GPU model %s as given\n", spec->model);
    } else if (raw->spec) {
        spec = raw->spec;
        topo_note(notes, notes_size, "GPU model %s from the dump's PCI device id; its "
                  "memory, FLOP/s, HBM and NVLink figures from the GPU table\n", spec->model);
    } else {
        spec = guess_gpu(raw, uniform, why, sizeof(why));
        if (!spec)
            return mpress_error_at(err, MPRESS_EUSAGE, file, 0, 0, NULL,
                                   "the dump does not name the GPU model and its NVLinks do "
                                   "not imply one: give it with --gpu TYPE (`mpress topo "
                                   "--help` lists the types)");
        topo_note(notes, notes_size, "GPU model not in the dump: %s assumed because %s; "
                  "its memory, FLOP/s and bandwidths are used throughout and the topology "
                  "records the assumption; give --gpu TYPE to choose another\n", spec->model,
                  why);
    }
    *spec_out = spec;
    return 0;
}

/* The fabric and NVLink matrix: an NVSwitch when the dump shows switch ports or every pair
 * has the same count, more than a GPU's ports could give them all directly; else the dump's
 * point-to-point links. Each within the GPU model's ports. */
static int fill_nvlinks(const char *file, const struct topo_raw *raw,
                        const struct mpress_gpu_spec *given, const struct mpress_gpu_spec *spec,
                        int uniform, struct mpress_topology *out, char *notes, size_t notes_size,
                        struct mpress_error *err)
{
    int n = raw->n_gpus;
    if (raw->nvswitch_ports > 0 ||
        (uniform > 0 && n >= 3 && uniform * (n - 1) > spec->nvlink_ports)) {
        /* Every pair at the same count, more than a GPU's ports could give them all directly:
         * the links go to an NVSwitch. */
        int ports = raw->nvswitch_ports > 0 ? raw->nvswitch_ports : uniform;
        if (ports > spec->nvlink_ports)
            return too_many_links(file, given, spec, -1, ports, err);
        out->fabric = MPRESS_FABRIC_NVSWITCH;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                out->nvlinks[i][j] = i == j ? 0 : ports;
        if (ports != spec->nvlink_ports)
            topo_note(notes, notes_size, "the dump shows %d NVSwitch links per GPU where a %s "
                      "has %d ports\n", ports, spec->model, spec->nvlink_ports);
        topo_note(notes, notes_size, "fabric: NVSwitch (%d links per GPU)\n", ports);
    } else {
        out->fabric = MPRESS_FABRIC_DIRECT;
        for (int i = 0; i < n; i++) {
            int sum = 0;
            for (int j = 0; j < n; j++) {
                out->nvlinks[i][j] = raw->links[i][j];
                sum += raw->links[i][j];
            }
            if (sum > spec->nvlink_ports)
                return too_many_links(file, given, spec, i, sum, err);
        }
    }
    return 0;
}

/* The GPUs' sockets and PCIe switches, and the switches' uplinks (ref's where the dump has
 * none). */
static void place_gpus(const struct topo_raw *raw, const struct mpress_topology *ref,
                       struct mpress_topology *out, char *notes, size_t notes_size)
{
    int n = raw->n_gpus;
    /* Sockets numbered in ascending order of the dump's ids (NUMA ids in XML); switches in
     * order of first use by GPU 0, 1, ...; a GPU whose switch the dump does not show gets one
     * of its own (its uplink is then its own link). */
    int sw_id[MPRESS_MAX_GPUS];
    int unknown[MPRESS_MAX_GPUS] = {0}, n_unknown = 0, uplink_missing = 0;
    for (int i = 0; i < n; i++) {
        int so = 0;
        for (int j = 0; j < n; j++) {
            int first = 1; /* j is the first GPU with its id, and that id is below i's */
            for (int k = 0; k < j; k++)
                if (raw->socket_of[k] == raw->socket_of[j])
                    first = 0;
            if (first && raw->socket_of[j] < raw->socket_of[i])
                so++;
        }
        if (so + 1 > out->n_sockets)
            out->n_sockets = so + 1;
        out->gpus[i].socket = so;
        int sw = -1;
        if (raw->switch_known[i])
            for (int k = 0; k < out->n_switches; k++)
                if (sw_id[k] == raw->switch_of[i])
                    sw = k;
        if (sw < 0) {
            sw = out->n_switches++;
            sw_id[sw] = raw->switch_known[i] ? raw->switch_of[i] : -1 - i;
            out->switches[sw].socket = so;
            double up = raw->switch_known[i] ? raw->uplink_of[i] : out->pcie_bytes_per_s;
            if (up <= 0) {
                up = ref->switches[0].uplink_bytes_per_s;
                uplink_missing = 1;
            }
            out->switches[sw].uplink_bytes_per_s = up;
        }
        out->gpus[i].pcie_switch = sw;
        if (!raw->switch_known[i]) {
            unknown[i] = 1;
            n_unknown++;
        }
    }
    if (n_unknown) {
        char list[128];
        gpu_list(list, sizeof(list), unknown, n);
        topo_note(notes, notes_size, "the dump does not show which PCIe switch GPU%s %s "
                  "%s behind (NVLink entries hide it): each has a switch of its own here\n",
                  n_unknown > 1 ? "s" : "", list, n_unknown > 1 ? "are" : "is");
    }
    if (uplink_missing)
        topo_note(notes, notes_size, "PCIe switch uplink bandwidth not in the dump: %.1f GB/s "
                  "as on '%s'\n", ref->switches[0].uplink_bytes_per_s / 1e9, ref->name);
}

/* A topology from what the dump showed (raw): the GPU model, the host figures of the nearest
 * built-in server (ref), the fabric and links, the sockets and switches; every assumption in
 * notes. */
static int finish(const char *file, const char *kind, const struct topo_raw *raw,
                  const struct mpress_gpu_spec *given, struct mpress_topology *out, char *notes,
                  size_t notes_size, struct mpress_error *err)
{
    int n = raw->n_gpus;
    /* uniform: the link count every pair shares, 0 when pairs differ. */
    int uniform = n >= 2 ? raw->links[0][1] : 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (i != j && raw->links[i][j] != uniform)
                uniform = 0;

    const struct mpress_gpu_spec *spec = NULL;
    int rc = choose_spec(file, raw, given, uniform, &spec, notes, notes_size, err);
    if (rc)
        return rc;

    struct mpress_topology ref;
    int by_gen;
    if (reference_server(spec, &ref, &by_gen) != 0)
        return mpress_error_set(err, MPRESS_ESYSTEM, "no built-in server has %s GPUs or "
                                "their PCIe generation", spec->model);
    if (by_gen)
        topo_note(notes, notes_size, "no built-in server has %s GPUs: what the dump lacks of "
                  "the host is taken from '%s', a PCIe Gen%d server (edit the file where the "
                  "machine has less host memory or a slower CPU)\n", spec->model, ref.name,
                  spec->pcie_gen);

    memset(out, 0, sizeof(*out));
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    snprintf(out->name, sizeof(out->name), "%.63s", base);
    snprintf(out->description, sizeof(out->description), "%d GPUs imported from the %s dump "
             "'%.100s'%s%s%s", n, kind, base, given || raw->spec ? "" : MPRESS_TOPOLOGY_ASSUMED,
             given || raw->spec ? "" : spec->model,
             given || raw->spec ? "" : " (the dump does not name it)");
    out->n_gpus = n;
    for (int i = 0; i < n; i++)
        topo_gpu_fill(&out->gpus[i], spec);
    out->nvlink_bytes_per_s = spec->nvlink_bytes_per_s;

    rc = fill_nvlinks(file, raw, given, spec, uniform, out, notes, notes_size, err);
    if (rc)
        return rc;
    if (spec->nvlink_ports > 0)
        topo_note(notes, notes_size, "NVLink bandwidth %.4g GB/s per link per direction from "
                  "the GPU table\n", spec->nvlink_bytes_per_s / 1e9);
    else
        topo_note(notes, notes_size, "a %s has no NVLink: GPUs exchange data over PCIe\n",
                  spec->model);

    out->pcie_bytes_per_s = raw->pcie_bytes_per_s;
    if (out->pcie_bytes_per_s <= 0) {
        out->pcie_bytes_per_s = ref.pcie_bytes_per_s;
        topo_note(notes, notes_size, "PCIe bandwidth not in the dump: %.1f GB/s per direction "
                  "as on '%s'\n", ref.pcie_bytes_per_s / 1e9, ref.name);
    }

    place_gpus(raw, &ref, out, notes, notes_size);

    out->socket_link_bytes_per_s = ref.socket_link_bytes_per_s;
    out->host_memory_bytes = ref.host_memory_bytes;
    out->host_memory_bytes_per_s = ref.host_memory_bytes_per_s;
    out->cpu_flops = ref.cpu_flops;
    topo_note(notes, notes_size, "host memory, its bandwidth, CPU FLOP/s and the socket link "
              "are not in the dump: taken from '%s'\n", ref.name);
    snprintf(out->bandwidth_source, sizeof(out->bandwidth_source), "datasheet");
    return MPRESS_OK;
}

int mpress_topology_import_as(const char *file, const char *gpu, struct mpress_topology *out,
                              char *notes, size_t notes_size, struct mpress_error *err)
{
    if (notes && notes_size)
        notes[0] = '\0';
    const struct mpress_gpu_spec *given = NULL;
    if (gpu) {
        given = mpress_gpu_spec_find(gpu);
        if (!given)
            return mpress_error_set(err, MPRESS_EUSAGE, "unknown GPU type '%s'", gpu);
    }
    char *text;
    size_t size;
    int rc = read_dump(file, &text, &size, err);
    if (rc)
        return rc;
    struct topo_raw *raw = calloc(1, sizeof(*raw));
    if (!raw) {
        free(text);
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    }
    const char *p = text;
    if ((unsigned char)p[0] == 0xef && (unsigned char)p[1] == 0xbb && (unsigned char)p[2] == 0xbf)
        p += 3; /* UTF-8 byte order mark */
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
        p++;
    const char *kind = "";
    if (*p == '{') {
        rc = mpress_error_at(err, MPRESS_EINPUT, file, 0, 0, NULL,
                             "a JSON file, not a topology dump (a mpress-topology file is "
                             "used as it is: `mpress topo show FILE`)");
    } else if (*p == '<') {
        kind = "NCCL topology XML";
        rc = topo_parse_nccl_xml(file, text, raw, notes, notes_size, err);
    } else {
        kind = "nvidia-smi topo -m";
        rc = topo_parse_smi(file, text, raw, notes, notes_size, err);
    }
    if (rc == MPRESS_OK)
        rc = finish(file, kind, raw, given, out, notes, notes_size, err);
    free(raw);
    free(text);
    return rc;
}

int mpress_topology_import(const char *file, struct mpress_topology *out, char *notes,
                           size_t notes_size, struct mpress_error *err)
{
    return mpress_topology_import_as(file, NULL, out, notes, notes_size, err);
}
