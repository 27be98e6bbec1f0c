/* CUPTI event files and their analysis into a profile.
 *
 * The tracer injected into a CUDA program (libmpress-inject.so) writes an mpress-events file:
 * JSON lines, one event per line, described in docs/event-format.md. This header reads such a
 * file and turns it into a struct mpress_profile with source "cupti". Nothing here needs CUPTI
 * or a GPU, so event files can be analysed (and tested) anywhere. */
#ifndef MPRESS_TRACE_H
#define MPRESS_TRACE_H

#include <stdint.h>
#include "mpress/error.h"
#include "mpress/profile.h"
#include "mpress/topology.h"
#include "mpress/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* mpress-events v1: the first line is {"format": "mpress-events", "version": 1, ...}. */
#define MPRESS_EVENTS_FORMAT "mpress-events"
#define MPRESS_EVENTS_VERSION 1

/* Environment variable through which `mpress profile` tells the tracer where to write. */
#define MPRESS_EVENTS_ENV "MPRESS_EVENTS_FILE"

/* A loaded event file (opaque). */
struct mpress_trace;

/* Reads an event file. A last line cut short (a program that crashed mid-write) is dropped and
 * counted in the summary; any other malformed line is an error naming FILE:LINE. */
MPRESS_API
int mpress_trace_load(const char *file, struct mpress_trace **out, struct mpress_error *err);
/* Same, from a text buffer; name is used in messages. */
MPRESS_API
int mpress_trace_parse(const char *text, size_t size, const char *name, struct mpress_trace **out,
                       struct mpress_error *err);
MPRESS_API
void mpress_trace_destroy(struct mpress_trace *t); /* accepts NULL */

struct mpress_trace_options {
    int warmup_steps;        /* steps left out of the medians; -1: 1 when there are >= 2 steps */
    char model_name[64];     /* profile.model.name; "" -> "traced" */
    char dtype[8];           /* profile.model.dtype; "" -> "fp16" */
    char optimizer[16];      /* profile.model.optimizer; "" -> "adam" */
};
MPRESS_API
void mpress_trace_options_init(struct mpress_trace_options *opt);

#define MPRESS_TRACE_MAX_DEVICES 64

struct mpress_trace_device {
    int id;                  /* CUDA device ordinal as CUPTI reports it */
    char name[64];           /* "" when the trace has no device record */
    uint64_t memory_bytes;   /* total memory, 0 when unknown */
    uint64_t peak_bytes;     /* peak of live device allocations seen in the trace */
};

/* What the analysis saw besides the profile itself. */
struct mpress_trace_summary {
    int tracer_ok;           /* the tracer reported that CUPTI started */
    char tracer_error[512];  /* first error the tracer reported, "" if none */
    int clean_exit;          /* the traced program reached exit (an "end" event) */
    int truncated_line;      /* a cut-short last line was dropped */
    uint64_t n_events;
    int n_steps;             /* step ranges (1 when the trace has none: the whole run) */
    int n_steps_used;        /* after warm-up */
    double step_s;           /* median wall time of the used steps that hold an op range, 0
                              * without step ranges */
    uint64_t n_gpu_activities;    /* kernels, memcpys and memsets */
    uint64_t n_unattributed;      /* of those, ones outside every op range */
    uint64_t n_allocs, n_frees;   /* device memory records */
    uint64_t unmatched_frees;     /* frees of memory allocated before tracing began */
    uint64_t unattributed_persistent_bytes; /* long-lived allocations outside every op */
    uint64_t dropped_records;     /* records CUPTI reported as dropped */
    int n_devices;
    struct mpress_trace_device devices[MPRESS_TRACE_MAX_DEVICES];
};

/* Builds a profile (source "cupti") from a trace; out is initialised here and must be finished
 * by the caller, also on failure. sum may be NULL. A trace with no op ranges is MPRESS_EINPUT.
 * The mapping rules are in docs/event-format.md. */
MPRESS_API
int mpress_trace_analyse(const struct mpress_trace *t, const struct mpress_trace_options *opt,
                         struct mpress_profile *out, struct mpress_trace_summary *sum,
                         struct mpress_error *err);

/* Takes the memory fields (model-state, workspace and output bytes, saved tensors) of each op
 * from mem (a memory pass, e.g. run with one allocation per tensor) into timing (the timing
 * pass). The two must have the same ops in the same order, else MPRESS_EINPUT. Saved tensors'
 * recompute_s are rescaled to timing's forward times. */
MPRESS_API
int mpress_trace_merge_memory(struct mpress_profile *timing, const struct mpress_profile *mem,
                              struct mpress_error *err);

/* ---- bandwidth probe (mpress profile --probe-bandwidth) ---------------------------------- */

enum mpress_probe_kind {
    MPRESS_PROBE_H2D,               /* pinned host -> device, alone */
    MPRESS_PROBE_D2H,               /* device -> pinned host, alone */
    MPRESS_PROBE_H2D_BOTH,          /* host -> device while device -> host runs */
    MPRESS_PROBE_D2H_BOTH,
    MPRESS_PROBE_PEER_STAGED,       /* src -> dst without peer access (through the host) */
    MPRESS_PROBE_PEER_STAGED_BOTH,  /* ... while dst -> src runs */
    MPRESS_PROBE_PEER,              /* src -> dst with peer access enabled */
    MPRESS_PROBE_PEER_BOTH,
    MPRESS_PROBE_KINDS
};

struct mpress_probe_sample {
    enum mpress_probe_kind kind;
    int src, dst;                   /* device ordinals; -1 is the host */
    uint64_t bytes;                 /* size of one copy */
    double bytes_per_s;             /* per direction */
};

/* What a probe measured on this machine. */
struct mpress_probe {
    int n_gpus;
    char names[MPRESS_MAX_GPUS][64];          /* as the driver names them */
    uint64_t memory_bytes[MPRESS_MAX_GPUS];
    int peer_access[MPRESS_MAX_GPUS][MPRESS_MAX_GPUS]; /* cudaDeviceCanAccessPeer */
    uint64_t host_memory_bytes;
    int n_samples;
    struct mpress_probe_sample *samples;     /* malloc'd */
};
MPRESS_API
void mpress_probe_finish(struct mpress_probe *pr);   /* frees; accepts zeroed structs */

/* Runs the copies (needs a CUDA build and a GPU; MPRESS_ESYSTEM with the driver's reason
 * otherwise). Sizes 64 KiB to 1 GiB (capped by free memory), several repetitions each, timed
 * on the host clock between full synchronisations. */
MPRESS_API
int mpress_probe_bandwidth(struct mpress_probe *out, struct mpress_error *err);

/* Turns measurements into a topology with bandwidth_source "measured"; the rules (how NVLink
 * counts are inferred from peer bandwidth, what comes from the GPU table) are in
 * docs/event-format.md. Pure C: testable without a GPU. */
MPRESS_API
int mpress_probe_topology(const struct mpress_probe *pr, struct mpress_topology *out,
                          struct mpress_error *err);

/* A table of every sample, one line each, malloc'd. */
MPRESS_API
char *mpress_probe_render(const struct mpress_probe *pr);

MPRESS_API
const char *mpress_probe_kind_name(enum mpress_probe_kind k);

/* Where the tracer (libmpress-inject.so) and libcupti were when mpress was built; inject_build
 * and cupti are "" where it was built without CUPTI. */
struct mpress_trace_paths {
    const char *inject_build;    /* in the build tree */
    const char *inject_install;  /* under the install prefix */
    const char *cupti;           /* the libcupti.so the build found (the tracer's RUNPATH) */
};
MPRESS_API
void mpress_trace_paths_get(struct mpress_trace_paths *out);

#ifdef __cplusplus
}
#endif
#endif
