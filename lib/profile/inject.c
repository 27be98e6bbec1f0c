/* libmpress-inject.so: the CUPTI tracer. The CUDA driver loads it through
 * CUDA_INJECTION64_PATH and calls InitializeInjection when the program first initialises
 * CUDA; it then records activity into the mpress-events file named by MPRESS_EVENTS_FILE.
 * It is also what NVTX_INJECTION64_PATH names: its InitializeInjectionNvtx2 hands NVTX over to
 * the very libcupti it is linked with (see there).
 *
 * It must never break the program it traces: every CUPTI failure is written to the event file
 * (and stderr) and the program carries on untraced. A thread asks CUPTI for completed records
 * every FLUSH_PERIOD_MS, the rest is forced out at exit, and on a fatal signal a last forced
 * flush is attempted, so a crashing program still leaves a usable (possibly cut-short) trace. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "inject_internal.h"
#include "mpress/trace.h"

#define BUFFER_BYTES (4u << 20) /* CUPTI's guidance: a few MB per buffer */
#define FLUSH_PERIOD_MS 500

/* The exported entry points: the CUDA driver looks up the first, NVTX the other two. */
__attribute__((visibility("default"))) int InitializeInjection(void);
__attribute__((visibility("default"))) int InitializeInjectionNvtx2(void *get_export_table);
__attribute__((visibility("default"))) int InitializeInjectionNvtx(void *get_export_table);

static int started;
static CUpti_SubscriberHandle subscriber;

/* NVTX's injection entry points, forwarded to the libcupti this library was linked against.
 *
 * Why not NVTX_INJECTION64_PATH=libcupti.so: NVTX dlopens that path, and where the program
 * already holds another file with the same soname (PyTorch wheels ship their own
 * libcupti.so.13, which then also satisfies this library's dependency), the dynamic loader
 * maps a second, separate CUPTI. NVTX would report ranges to that copy, which has no
 * subscriber, and every range would be lost. Pointing NVTX here and forwarding makes NVTX and
 * the tracer share one CUPTI whatever else is loaded. It works in either order: NVTX may load
 * this library before the driver does (ranges pushed before CUDA initialises). */
typedef int (*nvtx_init_fn)(void *);

nvtx_init_fn inject_cupti_nvtx_entry(const char *name)
{
    /* The object that defines cuptiGetVersion for this library is the libcupti it uses. */
    Dl_info info;
    CUptiResult (*probe)(uint32_t *) = cuptiGetVersion;
    void *addr;
    memcpy(&addr, &probe, sizeof(addr));
    if (!dladdr(addr, &info) || !info.dli_fname)
        return NULL;
    void *h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        return NULL;
    void *sym = dlsym(h, name);
    dlclose(h); /* RTLD_NOLOAD took a reference; the library stays loaded */
    nvtx_init_fn fn = NULL;
    memcpy(&fn, &sym, sizeof(fn));
    return fn;
}

int InitializeInjectionNvtx2(void *get_export_table)
{
    nvtx_init_fn fn = inject_cupti_nvtx_entry("InitializeInjectionNvtx2");
    if (!fn) {
        fprintf(stderr, "mpress-inject: libcupti has no InitializeInjectionNvtx2; NVTX ranges "
                        "are not traced\n");
        return 0; /* NVTX then turns its calls into no-ops */
    }
    return fn(get_export_table);
}

int InitializeInjectionNvtx(void *get_export_table)
{
    nvtx_init_fn fn = inject_cupti_nvtx_entry("InitializeInjectionNvtx");
    return fn ? fn(get_export_table) : 0;
}

/* The flush thread: cuptiActivityFlushPeriod only hands over full buffers, so a program that
 * dies would lose up to a buffer of records. A default (unforced) cuptiActivityFlushAll
 * returns every buffer whose records are complete, full or not, and CUPTI's documentation
 * suggests doing that from a thread of one's own. */
static pthread_t flusher;
static int flusher_running;
static pthread_mutex_t flusher_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t flusher_wake = PTHREAD_COND_INITIALIZER;
static int flusher_stop;

static void *flush_loop(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&flusher_lock);
    while (!flusher_stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += (long)FLUSH_PERIOD_MS * 1000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&flusher_wake, &flusher_lock, &until);
        if (flusher_stop)
            break;
        pthread_mutex_unlock(&flusher_lock);
        cuptiActivityFlushAll(0);
        pthread_mutex_lock(&flusher_lock);
    }
    pthread_mutex_unlock(&flusher_lock);
    return NULL;
}

/* A child forked by the program (data-loader workers) has no flush thread and must leave
 * CUPTI alone: if it calls exit, finish() must not join a thread of its parent. */
static void forget_after_fork(void)
{
    started = 0;
    flusher_running = 0;
}

void inject_flusher_start(void)
{
    static int hooked;
    if (!hooked) {
        hooked = 1;
        pthread_atfork(NULL, NULL, forget_after_fork);
    }
    /* The thread takes no signals: they stay with the program's own threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    flusher_running = pthread_create(&flusher, NULL, flush_loop, NULL) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

int inject_flusher_running(void)
{
    return flusher_running;
}

void inject_flusher_stop(void)
{
    if (!flusher_running)
        return;
    pthread_mutex_lock(&flusher_lock);
    flusher_stop = 1;
    pthread_cond_signal(&flusher_wake);
    pthread_mutex_unlock(&flusher_lock);
    pthread_join(flusher, NULL);
    flusher_running = 0;
}

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
    inject_flusher_stop();
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
        /* If the flush hangs (the crash left a lock held, in CUPTI or here), a dying program
         * must still die rather than keep mpress waiting: the default SIGALRM ends it. */
        struct sigaction dfl, old_alarm;
        memset(&dfl, 0, sizeof(dfl));
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGALRM, &dfl, &old_alarm);
        unsigned old_left = alarm(5);
        if (started) {
            cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
            inject_flush();
        }
        /* A program whose own handler survives the signal gets its alarm back. */
        alarm(old_left);
        sigaction(SIGALRM, &old_alarm, NULL);
    }
    for (size_t i = 0; i < sizeof(fatal_signals) / sizeof(fatal_signals[0]); i++)
        if (fatal_signals[i] == sig)
            sigaction(sig, &old_actions[i], NULL);
    raise(sig);
}

void inject_install_signal_handlers(void)
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
    /* External correlation records come only with API records: kernels launched through the
     * driver API directly (Triton, libraries that skip the runtime) need DRIVER to be
     * attributed. */
    {CUPTI_ACTIVITY_KIND_DRIVER, "DRIVER", 0},
    {CUPTI_ACTIVITY_KIND_MEMCPY2, "MEMCPY2", 0},
    {CUPTI_ACTIVITY_KIND_MEMORY_POOL, "MEMORY_POOL", 0},
    {CUPTI_ACTIVITY_KIND_MARKER, "MARKER", 0},
    {CUPTI_ACTIVITY_KIND_OVERHEAD, "OVERHEAD", 0},
    {CUPTI_ACTIVITY_KIND_DEVICE, "DEVICE", 0},
};

int inject_version_ok(uint32_t runtime, uint32_t built)
{
    /* xxyyzz since CUDA 13.0 (cupti_version.h): xx major, yy minor, zz update */
    return runtime / 10000 == built / 10000 && runtime / 100 >= built / 100;
}

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

    /* Record layouts change between CUPTI releases (a new layout gets a new struct name and
     * a CUPTI emits the newest it knows): refuse another major release, or an older minor
     * release than the headers this was built with. Updates within one minor release
     * (130000, 130001) keep the layouts. */
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
    if (!inject_version_ok(version, CUPTI_API_VERSION)) {
        inject_event("\"ev\":\"error\",\"what\":\"cupti version\",\"code\":0,"
                     "\"text\":\"CUPTI %u at run time, built for %u: record layouts may "
                     "differ\"",
                     version, (unsigned)CUPTI_API_VERSION);
        fprintf(stderr, "mpress-inject: CUPTI %u at run time, built for %u; not tracing\n",
                version, (unsigned)CUPTI_API_VERSION);
        inject_flush();
        return 1;
    }

    /* Subscribe first, as CUPTI asks of every client: when another tool holds CUPTI (Nsight
     * Systems, Nsight Compute, cuda-gdb, a profiler inside the program) this fails with
     * CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED before anything of the other tool's
     * session is touched, and names that tool. */
    char other[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 1] = "";
    CUpti_SubscriberParams sp;
    memset(&sp, 0, sizeof(sp));
    sp.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
    sp.subscriberName = "mpress";
    sp.oldSubscriberName = other;
    sp.oldSubscriberSize = sizeof(other) - 1;
    r = cuptiSubscribe_v2(&subscriber, inject_nvtx_callback, NULL, &sp);
    if (r != CUPTI_SUCCESS) {
        char what[160];
        if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && other[0]) {
            /* keep the tool's name printable and short in the event line */
            for (char *c = other; *c; c++)
                if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20)
                    *c = '?';
            snprintf(what, sizeof(what), "cuptiSubscribe (CUPTI is held by %s)", other);
        } else {
            snprintf(what, sizeof(what), "cuptiSubscribe");
        }
        report(what, r);
        return 1;
    }
    r = cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_NVTX);
    if (r != CUPTI_SUCCESS) {
        report("cuptiEnableDomain(NVTX)", r);
        cuptiUnsubscribe(subscriber);
        return 1;
    }

    r = cuptiActivityRegisterCallbacks(buffer_requested, inject_buffer_completed);
    if (r != CUPTI_SUCCESS) {
        report("cuptiActivityRegisterCallbacks", r);
        cuptiUnsubscribe(subscriber);
        return 1;
    }
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        r = cuptiActivityEnable(kinds[i].kind);
        if (r == CUPTI_SUCCESS)
            continue;
        char what[96];
        snprintf(what, sizeof(what), "cuptiActivityEnable(%s)", kinds[i].name);
        if (kinds[i].required) {
            /* e.g. CUPTI_ERROR_INSUFFICIENT_PRIVILEGES in a sandbox, CUPTI_ERROR_UNKNOWN
             * without a driver */
            report(what, r);
            for (size_t j = 0; j < i; j++)
                cuptiActivityDisable(kinds[j].kind);
            cuptiUnsubscribe(subscriber);
            return 1;
        }
        const char *text = "unknown error";
        cuptiGetResultString(r, &text);
        char t[256];
        inject_event("\"ev\":\"note\",\"what\":\"%s\",\"text\":%s", what,
                     inject_json_string(t, sizeof(t), text));
    }
    cuptiActivityFlushPeriod(FLUSH_PERIOD_MS);
    started = 1;
    inject_flusher_start();
    atexit(finish);
    inject_install_signal_handlers();
    inject_event("\"ev\":\"status\",\"ok\":true,\"t\":%llu", (unsigned long long)inject_now());
    inject_flush();
    return 1;
}
