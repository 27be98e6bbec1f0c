/* Internal to lib/model: what the PipeDream import and its stage ordering share. */
#ifndef MPRESS_PIPEDREAM_INTERNAL_H
#define MPRESS_PIPEDREAM_INTERNAL_H

#include "mpress/error.h"
#include "mpress/model.h"

/* Limits of --stages (docs/cost-model.md, "PipeDream import"): graphs of more nodes, or with
 * more downward-closed node sets, are refused with MPRESS_EINPUT. */
#define MPRESS_PIPEDREAM_MAX_ORDER_NODES 4096
#define MPRESS_PIPEDREAM_MAX_IDEALS 4096

/* Node i has no incoming edge and its description starts with "Input": a model input, whose
 * times count as zero. */
int mpress_pipedream_is_input(const struct mpress_pipedream_graph *g, int i);

/* Reorders g->order so that the best straight pipeline of `stages` stages (PipeDream's
 * dynamic program over downward-closed node sets, slowest stage's forward + backward
 * minimised) is `stages` contiguous ranges; *bottleneck_s is that slowest stage's time. */
int mpress_pipedream_order_stages(struct mpress_pipedream_graph *g, int stages, const char *file,
                                  double *bottleneck_s, struct mpress_error *err);

#endif
