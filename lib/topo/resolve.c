/* `--topology NAME|FILE`: a built-in server name, else a mpress-topology file. An argument
 * that is neither (no such built-in, no such file) is a usage error, so that a mistyped name
 * gets exit 2 with the list of names; a file that exists but is bad is MPRESS_EINPUT. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "mpress/topology.h"

int mpress_topology_resolve(const char *name_or_file, struct mpress_topology *out,
                            struct mpress_error *err)
{
    if (!name_or_file || !*name_or_file)
        return mpress_error_set(err, MPRESS_EUSAGE, "empty topology name");
    for (const char *const *n = mpress_topology_builtin_names(); *n; n++)
        if (strcmp(*n, name_or_file) == 0)
            return mpress_topology_builtin(name_or_file, out, err);
    struct stat st;
    if (stat(name_or_file, &st) != 0 && errno == ENOENT) {
        char list[256] = "";
        size_t len = 0;
        for (const char *const *n = mpress_topology_builtin_names(); *n && len < sizeof(list);
             n++)
            len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s", len ? ", " : "", *n);
        return mpress_error_set(err, MPRESS_EUSAGE,
                                "'%s' is neither a built-in server (%s) nor an existing file",
                                name_or_file, list);
    }
    return mpress_topology_load(name_or_file, out, err);
}
