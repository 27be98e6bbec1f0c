/* Build facts. */
#include "mpress/mpress.h"
#include "config.h"

const char *mpress_version(void)
{
    return MPRESS_VERSION;
}

int mpress_has_cuda(void)
{
    return MPRESS_HAVE_CUDA;
}
