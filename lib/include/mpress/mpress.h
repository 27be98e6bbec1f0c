/* libmpress: everything. */
#ifndef MPRESS_MPRESS_H
#define MPRESS_MPRESS_H

#include "mpress/error.h"
#include "mpress/json.h"
#include "mpress/topology.h"
#include "mpress/profile.h"
#include "mpress/plan.h"
#include "mpress/model.h"
#include "mpress/planner.h"
#include "mpress/sim.h"
#include "mpress/runtime.h"
#include "mpress/trace.h"
#include "mpress/compare.h"
#include "mpress/export.h"

#ifdef __cplusplus
extern "C" {
#endif

MPRESS_API
const char *mpress_version(void);
/* 1 when built with CUDA support (it says nothing about whether a GPU is present). */
MPRESS_API
int mpress_has_cuda(void);

#ifdef __cplusplus
}
#endif
#endif
