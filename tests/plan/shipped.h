/* A shipped profile (profiles/NAME, below MPRESS_SRCDIR) on a built-in server, restricted to
 * its first gpus GPUs when gpus > 0. Shared by the plan tests. */
#ifndef MPRESS_TEST_SHIPPED_H
#define MPRESS_TEST_SHIPPED_H

#include <stdio.h>
#include <stdlib.h>

#include "mpress/profile.h"
#include "mpress/topology.h"

static inline const char *src_dir(void)
{
    const char *s = getenv("MPRESS_SRCDIR");
    return s ? s : ".";
}

static inline int load_shipped(const char *name, const char *server, int gpus,
                               struct mpress_profile *p, struct mpress_topology *t)
{
    char path[1024];
    struct mpress_error err;
    snprintf(path, sizeof(path), "%s/profiles/%s", src_dir(), name);
    mpress_profile_init(p);
    if (mpress_profile_load(path, p, &err) || mpress_topology_builtin(server, t, &err) ||
        (gpus > 0 && mpress_topology_restrict(t, gpus, &err))) {
        fprintf(stderr, "cannot load %s on %s: %s\n", name, server, err.text);
        return -1;
    }
    return 0;
}

#endif
