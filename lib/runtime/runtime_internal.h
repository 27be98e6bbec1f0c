/* Internal to lib/runtime: the checkpoint file (docs/formats.md, "Checkpoint"), shared by the
 * executor and the tests' sequential reference runs. */
#ifndef MPRESS_RUNTIME_INTERNAL_H
#define MPRESS_RUNTIME_INTERNAL_H

#include <errno.h>
#include <stdint.h>
#include <time.h>

#include "mpress/error.h"
#include "mpress/model.h"
#include "host_ops.h"

/* Sleeps until t_s seconds of CLOCK_MONOTONIC (at once when that has passed): the emulated
 * links' absolute clock (host_backend.c, exec_setup.c). */
static inline void rt_sleep_until(double t_s)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (t_s <= (double)now.tv_sec + 1e-9 * (double)now.tv_nsec)
        return;
    struct timespec ts = {(time_t)t_s, (long)((t_s - (double)(time_t)t_s) * 1e9)};
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

#define MPRESS_CHECKPOINT_FORMAT "mpress-checkpoint"
#define MPRESS_CHECKPOINT_VERSION 1

/* Writes the owned parameters of ps (weights, fp32 master, momentum, variance where present;
 * tied copies are left out: their owner carries them), the step count and the seed, atomically:
 * on failure nothing is left at file. */
int mpress_checkpoint_save(const char *file, const struct mpress_model *m,
                           const struct mpress_host_params *ps, uint32_t step, uint64_t seed,
                           struct mpress_error *err);
/* Reads a checkpoint into ps (made for m by mpress_host_params_create); tied copies take their
 * owner's weights. Refuses (MPRESS_EINPUT) a file of another model, version or seed. */
int mpress_checkpoint_load(const char *file, const struct mpress_model *m,
                           struct mpress_host_params *ps, uint32_t *step, uint64_t seed,
                           struct mpress_error *err);

#endif
