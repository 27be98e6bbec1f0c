/* CUPTI activity records and NVTX callbacks -> mpress-events lines (docs/event-format.md).
 * Part of libmpress-inject.so; also compiled into tests/profile/test_inject.c, which feeds it
 * hand-built activity buffers. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <generated_nvtx_meta.h>

#include "inject_internal.h"

#define OUT_BYTES (1u << 20)

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static int out_fd = -1;
static char out_buf[OUT_BYTES];
static size_t out_len;

static void flush_locked(void)
{
    size_t off = 0;
    while (out_fd >= 0 && off < out_len) {
        ssize_t w = write(out_fd, out_buf + off, out_len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break; /* a full disk loses the trace, never the program */
        off += (size_t)w;
    }
    out_len = 0;
}

void inject_flush(void)
{
    pthread_mutex_lock(&out_lock);
    flush_locked();
    pthread_mutex_unlock(&out_lock);
}

/* fork: the child starts with an empty buffer and no output, whatever the parent had. */
static void atfork_prepare(void)
{
    pthread_mutex_lock(&out_lock);
}
static void atfork_parent(void)
{
    pthread_mutex_unlock(&out_lock);
}
static void atfork_child(void)
{
    out_len = 0;
    out_fd = -1;
    pthread_mutex_unlock(&out_lock);
}

void inject_set_output(int fd)
{
    static int hooked;
    if (!hooked) {
        hooked = 1;
        pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    }
    pthread_mutex_lock(&out_lock);
    flush_locked();
    out_fd = fd;
    pthread_mutex_unlock(&out_lock);
}

void inject_raw(const char *line)
{
    size_t n = strlen(line);
    pthread_mutex_lock(&out_lock);
    if (out_fd >= 0) {
        if (out_len + n > sizeof(out_buf))
            flush_locked();
        if (n <= sizeof(out_buf)) {
            memcpy(out_buf + out_len, line, n);
            out_len += n;
        }
    }
    pthread_mutex_unlock(&out_lock);
}

void inject_event(const char *fmt, ...)
{
    char line[4096];
    int n = snprintf(line, sizeof(line), "{");
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 3, fmt, ap);
    va_end(ap);
    if (m < 0 || (size_t)(n + m) > sizeof(line) - 3)
        return; /* cannot happen: names are truncated by inject_json_string */
    n += m;
    line[n++] = '}';
    line[n++] = '\n';
    line[n] = '\0';
    inject_raw(line);
}

char *inject_json_string(char *out, size_t cap, const char *s)
{
    size_t k = 0;
    out[k++] = '"';
    for (; s && *s && k + 8 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[k++] = '\\';
            out[k++] = (char)c;
        } else if (c < 0x20) {
            k += (size_t)snprintf(out + k, cap - k, "\\u%04x", c);
        } else {
            out[k++] = (char)c;
        }
    }
    /* never cut a UTF-8 sequence in half: drop a dangling lead/continuation run */
    if (s && *s) {
        while (k > 1 && ((unsigned char)out[k - 1] & 0xC0) == 0x80)
            k--;
        if (k > 1 && ((unsigned char)out[k - 1] & 0xC0) == 0xC0)
            k--;
    }
    out[k++] = '"';
    out[k] = '\0';
    return out;
}

uint64_t inject_now(void)
{
    uint64_t t = 0;
    if (cuptiGetTimestamp(&t) == CUPTI_SUCCESS && t)
        return t;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static const char *copy_kind(unsigned k)
{
    switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "htod";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "dtoh";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "dtod";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "htoh";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "ptop";
    default: return "other";
    }
}

static const char *memory_kind(unsigned k)
{
    switch (k) {
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE: return "device";
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED: return "pinned";
    case CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE: return "pageable";
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED: return "managed";
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC: return "device_static";
    default: return "other";
    }
}

static const char *pool_op(unsigned k)
{
    switch (k) {
    case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED: return "created";
    case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_DESTROYED: return "destroyed";
    case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_TRIMMED: return "trimmed";
    default: return "other";
    }
}

/* A GPU activity without usable times: CUPTI writes 0 (CUPTI_TIMESTAMP_UNKNOWN) where it
 * could not time a kernel (no device memory for the timestamps), and a forced flush hands over
 * records whose end has not been written yet. They are left out (and counted), since an
 * activity that ends before it starts is an error to the event-file reader. */
static int untimed(uint64_t start, uint64_t end)
{
    return start == 0 || end == 0 || end < start;
}

uint64_t inject_decode_buffer(uint8_t *buf, size_t valid, uint64_t *unknown)
{
    CUpti_Activity *rec = NULL;
    uint64_t n = 0, n_untimed = 0;
    char name[1024];
    CUptiResult r;
    while ((r = cuptiActivityGetNextRecord(buf, valid, &rec)) == CUPTI_SUCCESS) {
        n++;
        switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            const inject_kernel_t *k = (const void *)rec;
            if (untimed(k->start, k->end)) {
                n_untimed++;
                break;
            }
            inject_event("\"ev\":\"kernel\",\"corr\":%" PRIu32 ",\"dev\":%" PRIu32
                         ",\"stream\":%" PRIu32 ",\"start\":%" PRIu64 ",\"end\":%" PRIu64
                         ",\"name\":%s",
                         k->correlationId, k->deviceId, k->streamId, k->start, k->end,
                         inject_json_string(name, sizeof(name), k->name));
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const inject_memcpy_t *m = (const void *)rec;
            if (untimed(m->start, m->end)) {
                n_untimed++;
                break;
            }
            inject_event("\"ev\":\"memcpy\",\"corr\":%" PRIu32 ",\"dev\":%" PRIu32
                         ",\"src\":%" PRIu32 ",\"dst\":%" PRIu32 ",\"kind\":\"%s\",\"bytes\":%" PRIu64
                         ",\"start\":%" PRIu64 ",\"end\":%" PRIu64,
                         m->correlationId, m->deviceId, m->deviceId, m->deviceId,
                         copy_kind(m->copyKind), m->bytes, m->start, m->end);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY2: {
            const inject_memcpy2_t *m = (const void *)rec;
            if (untimed(m->start, m->end)) {
                n_untimed++;
                break;
            }
            inject_event("\"ev\":\"memcpy\",\"corr\":%" PRIu32 ",\"dev\":%" PRIu32
                         ",\"src\":%" PRIu32 ",\"dst\":%" PRIu32 ",\"kind\":\"%s\",\"bytes\":%" PRIu64
                         ",\"start\":%" PRIu64 ",\"end\":%" PRIu64,
                         m->correlationId, m->deviceId, m->srcDeviceId, m->dstDeviceId,
                         copy_kind(m->copyKind), m->bytes, m->start, m->end);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            const inject_memset_t *m = (const void *)rec;
            if (untimed(m->start, m->end)) {
                n_untimed++;
                break;
            }
            inject_event("\"ev\":\"memset\",\"corr\":%" PRIu32 ",\"dev\":%" PRIu32
                         ",\"bytes\":%" PRIu64 ",\"start\":%" PRIu64 ",\"end\":%" PRIu64,
                         m->correlationId, m->deviceId, m->bytes, m->start, m->end);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMORY2: {
            const inject_memory2_t *m = (const void *)rec;
            const char *ev =
                m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION ? "alloc"
                : m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE  ? "free"
                                                                                          : NULL;
            if (!ev)
                break;
            inject_event("\"ev\":\"%s\",\"corr\":%" PRIu32 ",\"dev\":%" PRIu32
                         ",\"addr\":\"0x%" PRIx64 "\",\"bytes\":%" PRIu64 ",\"t\":%" PRIu64
                         ",\"mem\":\"%s\",\"pool\":%d,\"stream\":%" PRIu32,
                         ev, m->correlationId, m->deviceId, m->address, m->bytes, m->timestamp,
                         memory_kind(m->memoryKind),
                         m->memoryPoolConfig.memoryPoolType != CUPTI_ACTIVITY_MEMORY_POOL_TYPE_INVALID,
                         m->streamId);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMORY_POOL: {
            const inject_pool_t *m = (const void *)rec;
            inject_event("\"ev\":\"pool\",\"op\":\"%s\",\"corr\":%" PRIu32 ",\"dev\":%" PRIu32
                         ",\"addr\":\"0x%" PRIx64 "\",\"size\":%" PRIu64 ",\"used\":%" PRIu64
                         ",\"t\":%" PRIu64,
                         pool_op(m->memoryPoolOperationType), m->correlationId, m->deviceId,
                         m->address, m->size, m->utilizedSize, m->timestamp);
            break;
        }
        case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
            const inject_extcorr_t *e = (const void *)rec;
            if (e->externalKind == INJECT_EXT_KIND)
                inject_event("\"ev\":\"corr\",\"corr\":%" PRIu32 ",\"ext\":%" PRIu64,
                             e->correlationId, e->externalId);
            break;
        }
        case CUPTI_ACTIVITY_KIND_RUNTIME:
        case CUPTI_ACTIVITY_KIND_DRIVER: {
            const inject_api_t *a = (const void *)rec;
            inject_event("\"ev\":\"api\",\"api\":\"%s\",\"cbid\":%u,\"corr\":%" PRIu32
                         ",\"tid\":%" PRIu32 ",\"start\":%" PRIu64 ",\"end\":%" PRIu64
                         ",\"ret\":%" PRIu32,
                         rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? "runtime" : "driver",
                         (unsigned)a->cbid, a->correlationId, a->threadId, a->start, a->end,
                         a->returnValue);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MARKER: {
            const inject_marker_t *m = (const void *)rec;
            const char *fl = (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_START) ? "start"
                             : (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_END) ? "end"
                                                                           : "instant";
            inject_event("\"ev\":\"marker\",\"id\":%" PRIu32 ",\"t\":%" PRIu64
                         ",\"flag\":\"%s\",\"name\":%s",
                         m->id, m->timestamp, fl,
                         inject_json_string(name, sizeof(name), m->name));
            break;
        }
        case CUPTI_ACTIVITY_KIND_OVERHEAD: {
            const inject_overhead_t *o = (const void *)rec;
            inject_event("\"ev\":\"overhead\",\"kind\":%u,\"start\":%" PRIu64 ",\"end\":%" PRIu64,
                         (unsigned)o->overheadKind, o->start, o->end);
            break;
        }
        case CUPTI_ACTIVITY_KIND_DEVICE: {
            const inject_device_t *d = (const void *)rec;
            inject_event("\"ev\":\"device\",\"dev\":%" PRIu32 ",\"name\":%s,\"memory\":%" PRIu64
                         ",\"cc\":\"%u.%u\",\"sms\":%u",
                         d->id, inject_json_string(name, sizeof(name), d->name),
                         d->globalMemorySize, d->computeCapabilityMajor,
                         d->computeCapabilityMinor, d->numMultiprocessors);
            break;
        }
        default:
            if (unknown)
                (*unknown)++;
            break;
        }
    }
    if (n_untimed)
        inject_event("\"ev\":\"dropped\",\"n\":%" PRIu64 ",\"why\":\"no timestamps\"",
                     n_untimed);
    /* CUPTI_ERROR_INVALID_KIND: an incomplete or invalid record; the walk cannot go past it. */
    if (r != CUPTI_ERROR_MAX_LIMIT_REACHED) {
        const char *text = "unknown error";
        cuptiGetResultString(r, &text);
        char t[256];
        inject_event("\"ev\":\"note\",\"what\":\"cuptiActivityGetNextRecord\",\"text\":"
                     "%s,\"records_read\":%" PRIu64,
                     inject_json_string(t, sizeof(t), text), n);
    }
    return n;
}

/* ---- NVTX ------------------------------------------------------------------------------ */

#define MAX_DEPTH 512

static atomic_uint_fast64_t next_range_id = 1;
static _Thread_local uint64_t stack[MAX_DEPTH];
static _Thread_local int depth;
static _Thread_local int overflow; /* pushes beyond MAX_DEPTH, popped without events */

/* nvtxDomainRegisterString handles -> text, for messages of type REGISTERED. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    const void *handle;
    char *text;
} *reg;
static size_t n_reg, cap_reg;

static void register_string(const void *handle, const char *text)
{
    pthread_mutex_lock(&reg_lock);
    if (n_reg == cap_reg) {
        size_t nc = cap_reg ? cap_reg * 2 : 64;
        void *p = realloc(reg, nc * sizeof(*reg));
        if (!p) {
            pthread_mutex_unlock(&reg_lock);
            return;
        }
        reg = p;
        cap_reg = nc;
    }
    reg[n_reg].handle = handle;
    reg[n_reg].text = strdup(text ? text : "");
    n_reg++;
    pthread_mutex_unlock(&reg_lock);
}

static const char *registered(const void *handle)
{
    const char *s = "<registered string>";
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < n_reg; i++)
        if (reg[i].handle == handle && reg[i].text)
            s = reg[i].text;
    pthread_mutex_unlock(&reg_lock);
    return s;
}

static const char *attrib_message(const nvtxEventAttributes_t *a, char *tmp, size_t cap)
{
    if (!a)
        return "";
    switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII: return a->message.ascii ? a->message.ascii : "";
    case NVTX_MESSAGE_TYPE_REGISTERED: return registered(a->message.registered);
    case NVTX_MESSAGE_TYPE_UNICODE:
        /* wide strings: keep the ASCII subset, which is what op names use */
        if (a->message.unicode) {
            size_t k = 0;
            for (const wchar_t *w = a->message.unicode; *w && k + 1 < cap; w++)
                tmp[k++] = *w < 128 ? (char)*w : '?';
            tmp[k] = '\0';
            return tmp;
        }
        return "";
    default: return "";
    }
}

static void range_push(const char *msg)
{
    uint64_t id = atomic_fetch_add(&next_range_id, 1);
    if (depth == MAX_DEPTH) {
        overflow++;
        return;
    }
    uint64_t parent = depth ? stack[depth - 1] : 0;
    stack[depth++] = id;
    char name[1024];
    inject_event("\"ev\":\"push\",\"id\":%" PRIu64 ",\"parent\":%" PRIu64 ",\"tid\":%ld"
                 ",\"t\":%" PRIu64 ",\"name\":%s",
                 id, parent, (long)syscall(SYS_gettid), inject_now(),
                 inject_json_string(name, sizeof(name), msg));
    /* Fails harmlessly (and is then just not attributed) where CUPTI is not running. */
    cuptiActivityPushExternalCorrelationId(INJECT_EXT_KIND, id);
}

static void range_pop(void)
{
    if (overflow) {
        overflow--;
        return;
    }
    if (depth == 0)
        return; /* pushed before the tracer was loaded */
    uint64_t id = stack[--depth], last = 0;
    cuptiActivityPopExternalCorrelationId(INJECT_EXT_KIND, &last);
    inject_event("\"ev\":\"pop\",\"id\":%" PRIu64 ",\"tid\":%ld,\"t\":%" PRIu64, id,
                 (long)syscall(SYS_gettid), inject_now());
}

void CUPTIAPI inject_nvtx_callback(void *userdata, CUpti_CallbackDomain domain,
                                   CUpti_CallbackId cbid, const void *cbdata)
{
    (void)userdata;
    if (domain != CUPTI_CB_DOMAIN_NVTX || !cbdata)
        return;
    const CUpti_NvtxData *d = cbdata;
    char tmp[512];
    switch (cbid) {
    case CUPTI_CBID_NVTX_nvtxRangePushA: {
        const nvtxRangePushA_params *p = d->functionParams;
        range_push(p && p->message ? p->message : "");
        break;
    }
    case CUPTI_CBID_NVTX_nvtxRangePushW: {
        const nvtxRangePushW_params *p = d->functionParams;
        nvtxEventAttributes_t a;
        memset(&a, 0, sizeof(a));
        a.messageType = NVTX_MESSAGE_TYPE_UNICODE;
        a.message.unicode = p ? p->message : NULL;
        range_push(attrib_message(&a, tmp, sizeof(tmp)));
        break;
    }
    case CUPTI_CBID_NVTX_nvtxRangePushEx: {
        const nvtxRangePushEx_params *p = d->functionParams;
        range_push(attrib_message(p ? p->eventAttrib : NULL, tmp, sizeof(tmp)));
        break;
    }
    case CUPTI_CBID_NVTX_nvtxDomainRangePushEx: {
        const nvtxDomainRangePushEx_params *p = d->functionParams;
        range_push(attrib_message(p ? p->core.eventAttrib : NULL, tmp, sizeof(tmp)));
        break;
    }
    case CUPTI_CBID_NVTX_nvtxRangePop:
    case CUPTI_CBID_NVTX_nvtxDomainRangePop:
        range_pop();
        break;
    case CUPTI_CBID_NVTX_nvtxDomainRegisterStringA: {
        const nvtxDomainRegisterStringA_params *p = d->functionParams;
        const nvtxStringHandle_t *h = d->functionReturnValue;
        if (p && h)
            register_string(*h, p->string);
        break;
    }
    default:
        break;
    }
}
