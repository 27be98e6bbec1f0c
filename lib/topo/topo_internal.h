/* Facts shared inside lib/topo: the memory reserve, effective PCIe rates, PCI device ids of the
 * table's GPUs, filling a topology GPU from a table row, and the dump parsers' common ground.
 * Not a public header. */
#ifndef MPRESS_TOPO_INTERNAL_H
#define MPRESS_TOPO_INTERNAL_H

#include "mpress/topology.h"

/* Per-GPU reserve for a GPU of memory_bytes: 1 GiB (CUDA context with cuBLAS, cuDNN and NCCL
 * loaded, plus what the driver withholds) + 1/32 of the memory (caching-allocator
 * fragmentation). Reasoning and measurements it rests on: docs/topologies.md. */
uint64_t topo_reserve_bytes(uint64_t memory_bytes);

/* Effective PCIe bandwidth per direction of a link at gts GT/s per lane and width lanes: the
 * theoretical rate after line coding, times the ratio measured on a DGX-1 (12 GB/s out of
 * 15.75 GB/s for Gen3 x16). 0 when gts is not a PCIe rate. */
double topo_pcie_bytes_per_s(double gts, int width);

/* The table row of a PCI device id (e.g. 0x1db5 -> V100-SXM2-32GB); NULL when unknown. */
const struct mpress_gpu_spec *topo_gpu_spec_by_pci_id(unsigned device_id);

/* Sets model, memory, reserve, FLOP/s, HBM bandwidth and NVLink ports of g from spec. */
void topo_gpu_fill(struct mpress_topo_gpu *g, const struct mpress_gpu_spec *spec);

/* Appends printf-style text to notes (size bytes, may be NULL), truncating quietly. */
void topo_note(char *notes, size_t size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ---- imports ---------------------------------------------------------------------------- */

/* What a dump says, before the GPU table and a reference server fill in the rest. Group ids
 * (switch, socket) are any non-negative ints; finishing renumbers them in GPU order. */
struct topo_raw {
    int n_gpus;
    int links[MPRESS_MAX_GPUS][MPRESS_MAX_GPUS];
    int nvswitch_ports;                  /* > 0: the dump shows links into an NVSwitch */
    int switch_of[MPRESS_MAX_GPUS];      /* PCIe switch group per GPU */
    double uplink_of[MPRESS_MAX_GPUS];   /* that switch's uplink, 0 when the dump lacks it */
    int switch_known[MPRESS_MAX_GPUS];   /* 0: the dump does not show the GPU's switch */
    int socket_of[MPRESS_MAX_GPUS];
    const struct mpress_gpu_spec *spec;  /* from the dump, NULL when it does not say */
    double pcie_bytes_per_s;             /* 0 when the dump lacks it */
};

int topo_parse_smi(const char *file, const char *text, struct topo_raw *raw, char *notes,
                   size_t notes_size, struct mpress_error *err);
int topo_parse_nccl_xml(const char *file, const char *text, struct topo_raw *raw, char *notes,
                        size_t notes_size, struct mpress_error *err);

#endif
