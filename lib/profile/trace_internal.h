/* Internal representation of a loaded mpress-events file, shared by the loader and the
 * analyser. */
#ifndef MPRESS_TRACE_INTERNAL_H
#define MPRESS_TRACE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "mpress/trace.h"

struct trace_range {        /* one NVTX push..pop */
    uint64_t id, parent;    /* parent 0: outermost on its thread */
    uint64_t tid;
    uint64_t start, end;    /* ns; end = last timestamp of the trace when never popped */
    char *name;
    long line;              /* line of the push, for messages */
};

struct trace_pop {
    uint64_t id, t;
    long line;
};

struct trace_corr {         /* CUPTI correlation id -> external id (= range id) */
    uint64_t corr, ext;
};

struct trace_act {          /* a kernel, memcpy or memset on a GPU */
    uint64_t corr;
    int dev;
    uint64_t start, end;
};

struct trace_mem {          /* a device allocation or release */
    uint64_t corr, addr, bytes, t;
    int dev, is_alloc;
    size_t seq;             /* position in the file: ties at equal t keep file order */
};

struct mpress_trace {
    struct trace_range *ranges;
    size_t n_ranges, cap_ranges;
    struct trace_pop *pops;
    size_t n_pops, cap_pops;
    struct trace_corr *corrs;
    size_t n_corrs, cap_corrs;
    struct trace_act *acts;
    size_t n_acts, cap_acts;
    struct trace_mem *mems;
    size_t n_mems, cap_mems;
    int n_devices;
    struct mpress_trace_device devices[MPRESS_TRACE_MAX_DEVICES];
    int tracer_ok, clean_exit, truncated_line;
    char tracer_error[512];
    uint64_t dropped, n_events;
    uint64_t t_max;         /* latest timestamp seen */
};

/* Finds or adds the device with ordinal id; NULL when the table is full. */
struct mpress_trace_device *trace_device(struct mpress_trace *t, int id);

/* Sorts ranges by id and correlations by corr, applies pops, checks ids. */
int trace_index(struct mpress_trace *t, struct mpress_error *err);

/* Index of the range with this id, or -1. */
long trace_range_find(const struct mpress_trace *t, uint64_t id);

#endif
