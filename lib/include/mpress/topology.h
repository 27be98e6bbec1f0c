/* Servers: GPUs, NVLink, PCIe switches, sockets, host memory. Built-in servers, the
 * mpress-topology format, and imports of `nvidia-smi topo -m` and NCCL topology XML dumps.
 * All bandwidths are bytes per second per direction; all sizes are bytes. */
#ifndef MPRESS_TOPOLOGY_H
#define MPRESS_TOPOLOGY_H

#include <stdint.h>
#include <stdio.h>
#include <jansson.h>
#include "mpress/error.h"
#include "mpress/json.h"
#include "mpress/export.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MPRESS_MAX_GPUS 32

/* One row of the built-in GPU table (datasheet values, sources in docs/topologies.md). */
struct mpress_gpu_spec {
    const char *key;        /* short name used by --gpu: "v100", "a100-80g", ... */
    const char *model;      /* "V100-SXM2-32GB" */
    uint64_t memory_bytes;
    double flops_fp16;      /* peak dense 16-bit tensor-core FLOP/s */
    double flops_fp32;      /* peak fp32 FLOP/s (non tensor core) */
    double hbm_bytes_per_s;
    int nvlink_ports;       /* NVLink links per GPU */
    double nvlink_bytes_per_s; /* per link per direction */
    int bf16;               /* 1: bf16 runs on the tensor cores at flops_fp16 (A100 and later);
                               0: no bf16 tensor cores (V100) */
    int pcie_gen;           /* PCIe generation of the GPU's host link (3, 4, 5) */
};

/* NULL-terminated table, and lookup by key or model name (case-insensitive); NULL if none. */
MPRESS_API
const struct mpress_gpu_spec *mpress_gpu_specs(void);
MPRESS_API
const struct mpress_gpu_spec *mpress_gpu_spec_find(const char *key_or_model);
/* The table's keys, space-separated, on lines of at most width columns indented by indent
 * spaces, ending in a newline (for --help texts). */
MPRESS_API
void mpress_gpu_spec_keys_print(FILE *out, int indent, int width);

enum mpress_fabric {
    MPRESS_FABRIC_DIRECT = 0,   /* point-to-point NVLink between pairs (e.g. hybrid cube-mesh) */
    MPRESS_FABRIC_NVSWITCH = 1, /* every GPU's links go to a switch: any pair at full rate,
                                   limited by each GPU's own ports */
};

struct mpress_topo_gpu {
    char model[64];
    uint64_t memory_bytes;
    uint64_t reserve_bytes;     /* CUDA context and allocator fragmentation, not usable */
    double flops_fp16, flops_fp32, hbm_bytes_per_s;
    int nvlink_ports;
    int pcie_switch;            /* index into switches[] */
    int socket;                 /* CPU socket index */
};

struct mpress_topo_switch {
    double uplink_bytes_per_s;  /* shared by all GPUs behind it, per direction */
    int socket;
};

struct mpress_topology {
    char name[64];
    char description[256];
    int n_gpus;
    struct mpress_topo_gpu gpus[MPRESS_MAX_GPUS];
    enum mpress_fabric fabric;
    /* NVLink links between GPU i and j; symmetric, 0 on the diagonal and where there is none.
     * On NVSWITCH, the links each GPU can use toward any peer (its port count). */
    int nvlinks[MPRESS_MAX_GPUS][MPRESS_MAX_GPUS];
    double nvlink_bytes_per_s;  /* per link per direction */
    double pcie_bytes_per_s;    /* each GPU's own PCIe link, per direction */
    int n_switches;
    struct mpress_topo_switch switches[MPRESS_MAX_GPUS];
    int n_sockets;
    double socket_link_bytes_per_s; /* inter-socket link (QPI/UPI), per direction */
    uint64_t host_memory_bytes;
    double host_memory_bytes_per_s; /* per socket, for CPU optimizer steps */
    double cpu_flops;               /* per socket, fp32, for CPU optimizer steps */
    /* Where the bandwidth numbers come from: "datasheet" or "measured" (a probe ran). */
    char bandwidth_source[16];
};

/* NULL-terminated list of built-in server names. */
MPRESS_API
const char *const *mpress_topology_builtin_names(void);
MPRESS_API
int mpress_topology_builtin(const char *name, struct mpress_topology *out,
                            struct mpress_error *err);

/* A built-in name, else a mpress-topology file. */
MPRESS_API
int mpress_topology_resolve(const char *name_or_file, struct mpress_topology *out,
                            struct mpress_error *err);

/* Keeps the first n GPUs (and the switches/sockets they use). More than it has: MPRESS_EUSAGE. */
MPRESS_API
int mpress_topology_restrict(struct mpress_topology *topo, int n, struct mpress_error *err);

/* Peer bandwidth from a to b in bytes/s per direction over NVLink; 0 when there is none. */
MPRESS_API
double mpress_topology_p2p_bytes_per_s(const struct mpress_topology *topo, int a, int b);

/* mpress-topology v1 */
#define MPRESS_TOPOLOGY_FORMAT "mpress-topology"
#define MPRESS_TOPOLOGY_VERSION 1
MPRESS_API
int mpress_topology_load(const char *file, struct mpress_topology *out, struct mpress_error *err);
/* Reads a topology object embedded at obj (its JSON path obj_path) inside doc. */
MPRESS_API
int mpress_topology_from_json(const struct mpress_json_doc *doc, const json_t *obj,
                              const char *obj_path, struct mpress_topology *out,
                              struct mpress_error *err);
MPRESS_API
json_t *mpress_topology_to_json(const struct mpress_topology *topo);
MPRESS_API
int mpress_topology_save(const char *file, const struct mpress_topology *topo,
                         struct mpress_error *err);

/* Import of an `nvidia-smi topo -m` text dump or an NCCL topology XML dump (kind detected).
 * What the dump lacks comes from the GPU table; notes (may be NULL) says what was filled in. */
MPRESS_API
int mpress_topology_import(const char *file, struct mpress_topology *out, char *notes,
                           size_t notes_size, struct mpress_error *err);

/* A matrix in the style of `nvidia-smi topo -m` plus bandwidths and memory, malloc'd. */
MPRESS_API
char *mpress_topology_render(const struct mpress_topology *topo);

/* As mpress_topology_import, with the GPU model given (a GPU table key or model name, as
 * `--gpu` takes it) instead of taken from the dump; NULL behaves as mpress_topology_import.
 * An unknown gpu is MPRESS_EUSAGE. */
MPRESS_API
int mpress_topology_import_as(const char *file, const char *gpu, struct mpress_topology *out,
                              char *notes, size_t notes_size, struct mpress_error *err);

/* An import whose dump does not name the GPU model and that took the one its NVLinks imply
 * records that in the description: "...; GPU model assumed: MODEL (the dump does not name
 * it)". */
#define MPRESS_TOPOLOGY_ASSUMED "; GPU model assumed: "
/* "GPU model assumed: MODEL (...)" when topo records such an assumption, else NULL. */
MPRESS_API
const char *mpress_topology_assumption(const struct mpress_topology *topo);

/* An emulated server (`mpress topo emulate`): n devices of the host backend, each a worker with
 * its own memory arena on this machine, all joined to each other through an NVSwitch-like
 * fabric of one port each (so plans may park tensors on peers) and to the host through one
 * PCIe-like switch. With measure, the devices' FLOP/s are this CPU's single-thread SGEMM rate
 * and every bandwidth is this machine's memcpy rate (bandwidth_source "measured"); without it,
 * the fixed figures below (bandwidth_source "datasheet": nothing was measured). Details:
 * docs/topologies.md, "Emulated servers". */
#define MPRESS_EMULATED_GPU "host-emulated"
#define MPRESS_EMULATED_FLOPS 5e10              /* FLOP/s of a device, not measured */
#define MPRESS_EMULATED_BYTES_PER_S 1e10        /* every bandwidth, not measured */
#define MPRESS_EMULATED_HOST_MEMORY (16ull << 30) /* host memory unless given */
#define MPRESS_EMULATED_RESERVE_DIVISOR 64      /* reserve = memory / 64 unless given */
struct mpress_topology_emulate_options {
    int devices;                /* 1 .. MPRESS_MAX_GPUS */
    uint64_t memory_bytes;      /* per device, > 0 */
    uint64_t host_memory_bytes; /* 0: MPRESS_EMULATED_HOST_MEMORY */
    int reserve_given;          /* 0: reserve = memory / MPRESS_EMULATED_RESERVE_DIVISOR */
    uint64_t reserve_bytes;     /* with reserve_given, < memory_bytes */
    int measure;                /* 1: time SGEMM and memcpy on this machine */
};
MPRESS_API
int mpress_topology_emulate(const struct mpress_topology_emulate_options *o,
                            struct mpress_topology *out, struct mpress_error *err);

#ifdef __cplusplus
}
#endif
#endif
