/* libmpress-inject.so: the CUPTI tracer. The CUDA driver loads it through
 * CUDA_INJECTION64_PATH and calls InitializeInjection when the program first initialises
 * CUDA; it then records activity into the mpress-events file named by MPRESS_EVENTS_FILE.
 *
 * It must never break the program it traces: every CUPTI failure is written to the event file
 * (and stderr) and the program carries on untraced. Records reach the file every
 * FLUSH_PERIOD_MS and at exit; on a fatal signal a last flush is attempted, so a crashing
 * program still leaves a usable (possibly cut-short) trace. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "inject_internal.h"
#include "mpress/trace.h"

#define BUFFER_BYTES (4u << 20) /* CUPTI's guidance: a few MB per buffer */
#define FLUSH_PERIOD_MS 500

/* The exported entry point the CUDA driver looks up. */
__attribute__((visibility("default"))) int InitializeInjection(void);

static int started;
static CUpti_SubscriberHandle subscriber;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, BUFFER_BYTES);
    *size = *buffer ? BUFFER_BYTES : 0;
    *max_records = 0; /* as many as fit */
}

void CUPTIAPI inject_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer,
                                      size_t size, size_t valid)
{
    (void)size;
    if (buffer && valid > 0)
        inject_decode_buffer(buffer, valid, NULL);
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped)
        inject_event("\"ev\":\"dropped\",\"n\":%zu", dropped);
    free(buffer);
    inject_flush(); /* what is in the file survives a crash */
}

static void report(const char *what, CUptiResult r)
{
    const char *text = "unknown error";
    cuptiGetResultString(r, &text);
    char t[512];
    inject_event("\"ev\":\"error\",\"what\":\"%s\",\"code\":%d,\"text\":%s", what, (int)r,
                 inject_json_string(t, sizeof(t), text));
    fprintf(stderr, "mpress-inject: %s failed: %s; the program runs untraced\n", what, text);
    inject_flush();
}

static void finish(void)
{
    if (!started)
        return;
    started = 0;
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    inject_event("\"ev\":\"end\",\"t\":%llu", (unsigned long long)inject_now());
    inject_flush();
}

/* Fatal signals: flush what CUPTI holds, then let the signal do what it would have done.
 * Not async-signal-safe, but the process is dying anyway and the trace is worth the try. */
static const int fatal_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
static struct sigaction old_actions[sizeof(fatal_signals) / sizeof(fatal_signals[0])];

static void on_fatal(int sig)
{
    static volatile sig_atomic_t in_handler;
    if (!in_handler) {
        in_handler = 1;
        if (started) {
            cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
            inject_flush();
        }
    }
    for (size_t i = 0; i < sizeof(fatal_signals) / sizeof(fatal_signals[0]); i++)
        if (fatal_signals[i] == sig)
            sigaction(sig, &old_actions[i], NULL);
    raise(sig);
}

static void install_signal_handlers(void)
{
    for (size_t i = 0; i < sizeof(fatal_signals) / sizeof(fatal_signals[0]); i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_fatal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESETHAND;
        sigaction(fatal_signals[i], &sa, &old_actions[i]);
    }
}

/* Activity kinds: the first group is needed for a profile; the rest enrich the trace. */
static const struct {
    CUpti_ActivityKind kind;
    const char *name;
    int required;
} kinds[] = {
    {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "CONCURRENT_KERNEL", 1},
    {CUPTI_ACTIVITY_KIND_MEMCPY, "MEMCPY", 1},
    {CUPTI_ACTIVITY_KIND_MEMSET, "MEMSET", 1},
    {CUPTI_ACTIVITY_KIND_MEMORY2, "MEMORY2", 1},
    {CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, "EXTERNAL_CORRELATION", 1},
    {CUPTI_ACTIVITY_KIND_RUNTIME, "RUNTIME", 1},
    {CUPTI_ACTIVITY_KIND_MEMCPY2, "MEMCPY2", 0},
    {CUPTI_ACTIVITY_KIND_MEMORY_POOL, "MEMORY_POOL", 0},
    {CUPTI_ACTIVITY_KIND_MARKER, "MARKER", 0},
    {CUPTI_ACTIVITY_KIND_OVERHEAD, "OVERHEAD", 0},
    {CUPTI_ACTIVITY_KIND_DEVICE, "DEVICE", 0},
};

int InitializeInjection(void)
{
    static int called;
    if (called)
        return 1;
    called = 1;
    const char *path = getenv(MPRESS_EVENTS_ENV);
    if (!path || !*path) {
        fprintf(stderr, "mpress-inject: %s is not set; not tracing\n", MPRESS_EVENTS_ENV);
        return 1;
    }
    /* A command may start several CUDA processes (a launcher and its workers): the first one
     * gets the file, the others PATH.PID, so that none overwrites another's trace. */
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) {
        char alt[4096];
        snprintf(alt, sizeof(alt), "%s.%ld", path, (long)getpid());
        fd = open(alt, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    }
    if (fd < 0) {
        fprintf(stderr, "mpress-inject: cannot create '%s': %s; not tracing\n", path,
                strerror(errno));
        return 1;
    }
    inject_set_output(fd);

    /* Record layouts change between CUPTI releases: refuse a CUPTI older than the headers this
     * was built with, or of another major release. */
    uint32_t version = 0;
    CUptiResult r = cuptiGetVersion(&version);
    char header[256];
    snprintf(header, sizeof(header),
             "{\"format\":\"%s\",\"version\":%d,\"cupti_version\":%u,\"cupti_built\":%u,"
             "\"pid\":%ld}\n",
             MPRESS_EVENTS_FORMAT, MPRESS_EVENTS_VERSION, version, (unsigned)CUPTI_API_VERSION,
             (long)getpid());
    inject_raw(header);
    if (r != CUPTI_SUCCESS) {
        report("cuptiGetVersion", r);
        return 1;
    }
    if (version < CUPTI_API_VERSION || version / 10000 != CUPTI_API_VERSION / 10000) {
        inject_event("\"ev\":\"error\",\"what\":\"cupti version\",\"code\":0,"
                     "\"text\":\"CUPTI %u at run time, built for %u: record layouts may "
                     "differ\"",
                     version, (unsigned)CUPTI_API_VERSION);
        fprintf(stderr, "mpress-inject: CUPTI %u at run time, built for %u; not tracing\n",
                version, (unsigned)CUPTI_API_VERSION);
        inject_flush();
        return 1;
    }

    r = cuptiActivityRegisterCallbacks(buffer_requested, inject_buffer_completed);
    if (r != CUPTI_SUCCESS) {
        report("cuptiActivityRegisterCallbacks", r);
        return 1;
    }
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        r = cuptiActivityEnable(kinds[i].kind);
        if (r == CUPTI_SUCCESS)
            continue;
        char what[96];
        snprintf(what, sizeof(what), "cuptiActivityEnable(%s)", kinds[i].name);
        if (kinds[i].required) {
            /* e.g. CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED when another profiler holds
             * CUPTI, or CUPTI_ERROR_INSUFFICIENT_PRIVILEGES in a sandbox */
            report(what, r);
            for (size_t j = 0; j < i; j++)
                cuptiActivityDisable(kinds[j].kind);
            return 1;
        }
        const char *text = "unknown error";
        cuptiGetResultString(r, &text);
        char t[256];
        inject_event("\"ev\":\"note\",\"what\":\"%s\",\"text\":%s", what,
                     inject_json_string(t, sizeof(t), text));
    }
    r = cuptiSubscribe(&subscriber, inject_nvtx_callback, NULL);
    if (r == CUPTI_SUCCESS)
        r = cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_NVTX);
    if (r != CUPTI_SUCCESS) {
        report("cuptiSubscribe/cuptiEnableDomain(NVTX)", r);
        for (size_t j = 0; j < sizeof(kinds) / sizeof(kinds[0]); j++)
            cuptiActivityDisable(kinds[j].kind);
        return 1;
    }
    cuptiActivityFlushPeriod(FLUSH_PERIOD_MS);
    started = 1;
    atexit(finish);
    install_signal_handlers();
    inject_event("\"ev\":\"status\",\"ok\":true,\"t\":%llu", (unsigned long long)inject_now());
    inject_flush();
    return 1;
}
