/* The tracer's own code without a GPU: the NVTX callback driven with hand-made callback data,
 * and the buffer decoder fed hand-built CUPTI activity buffers. cuptiActivityGetNextRecord
 * walks such buffers without a driver (checked with CUDA 13.0), so the real decoding path
 * runs here; the resulting event file then goes through the analyser. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <generated_nvtx_meta.h>
#include <nvtx3/nvToolsExt.h>

#include "check.h"
#include "inject_internal.h"
#include "mpress/trace.h"

static uint8_t *buf;
static size_t used;

#define APPEND(rec)                                                                              \
    do {                                                                                         \
        memcpy(buf + used, &(rec), sizeof(rec));                                                 \
        used += sizeof(rec);                                                                     \
    } while (0)

static void nvtx(CUpti_CallbackId cbid, const void *params, const void *ret)
{
    CUpti_NvtxData d = {.functionName = "nvtx", .functionParams = params,
                        .functionReturnValue = ret};
    inject_nvtx_callback(NULL, CUPTI_CB_DOMAIN_NVTX, cbid, &d);
}

static void ext(uint32_t corr, uint64_t range)
{
    inject_extcorr_t e;
    memset(&e, 0, sizeof(e));
    e.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
    e.externalKind = INJECT_EXT_KIND;
    e.externalId = range;
    e.correlationId = corr;
    APPEND(e);
}

static void memory(uint32_t corr, int op, int kind, uint64_t addr, uint64_t bytes, uint64_t t)
{
    inject_memory2_t m;
    memset(&m, 0, sizeof(m));
    m.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
    m.memoryOperationType = op;
    m.memoryKind = kind;
    m.correlationId = corr;
    m.address = addr;
    m.bytes = bytes;
    m.timestamp = t;
    APPEND(m);
}

static volatile sig_atomic_t own_segv_seen;
static void own_segv(int sig)
{
    (void)sig;
    own_segv_seen = 1;
}

int main(void)
{
    /* The layouts the decoder reads, as in CUDA 13.0's cupti_activity.h. If a toolkit update
     * changes one, the decoder must be checked against the new header before changing these. */
    CHECK_INT(CUPTI_API_VERSION, 130001);
    CHECK_INT(sizeof(inject_kernel_t), 216);
    CHECK_INT(sizeof(inject_memcpy_t), 96);
    CHECK_INT(sizeof(inject_memcpy2_t), 96);
    CHECK_INT(sizeof(inject_memset_t), 88);
    CHECK_INT(sizeof(inject_memory2_t), 128);
    CHECK_INT(sizeof(inject_pool_t), 80);
    CHECK_INT(sizeof(inject_api_t), 40);
    CHECK_INT(sizeof(inject_marker_t), 56);
    CHECK_INT(sizeof(inject_overhead_t), 56);
    CHECK_INT(sizeof(inject_extcorr_t), 24);
    CHECK_INT(sizeof(inject_device_t), 184);

    /* Which CUPTI may feed records into these layouts: xxyyzz versions since CUDA 13.0. */
    CHECK_INT(inject_version_ok(130001, 130001), 1);
    CHECK_INT(inject_version_ok(130000, 130001), 1); /* an update of the same minor release */
    CHECK_INT(inject_version_ok(130100, 130001), 1);
    CHECK_INT(inject_version_ok(129999, 130001), 0);
    CHECK_INT(inject_version_ok(28, 130001), 0);     /* CUDA 12.9 Update 1 counted 1, 2, ... */
    CHECK_INT(inject_version_ok(140000, 130001), 0);

    /* NVTX_INJECTION64_PATH names the tracer, which must forward to the libcupti it is linked
     * with: the forward target lives in libcupti, and the exported entry point in the tracer
     * itself (not libcupti's, which a dlsym on the tracer's handle would also find). */
    {
        int (*fwd)(void *) = inject_cupti_nvtx_entry("InitializeInjectionNvtx2");
        Dl_info info;
        void *addr = NULL;
        memcpy(&addr, &fwd, sizeof(addr));
        CHECK(fwd != NULL);
        CHECK(fwd && dladdr(addr, &info) && strstr(info.dli_fname, "libcupti") != NULL);
        const char *lib = getenv("MPRESS_INJECT_LIB");
        CHECK_MSG(lib && *lib, "%s", "MPRESS_INJECT_LIB names the built tracer");
        void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : NULL;
        CHECK_MSG(h != NULL, "dlopen: %s", dlerror());
        void *sym = h ? dlsym(h, "InitializeInjectionNvtx2") : NULL;
        CHECK(sym && dladdr(sym, &info) && strstr(info.dli_fname, "libmpress-inject") != NULL);
        CHECK(h && dlsym(h, "InitializeInjection") != NULL);
        if (h)
            dlclose(h);

        /* And the real NVTX loader (nvtx3, compiled into this test) takes the tracer from
         * NVTX_INJECTION64_PATH: after the first range call it is loaded. Without a driver
         * CUPTI has no subscriber to report to; the calls must simply return. */
        if (lib) {
            setenv("NVTX_INJECTION64_PATH", lib, 1);
            nvtxRangePushA("probe");
            nvtxRangePop();
            void *again = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
            CHECK_MSG(again != NULL, "%s", "NVTX did not load the tracer");
            if (again)
                dlclose(again);
            unsetenv("NVTX_INJECTION64_PATH");
        }
    }

    /* The flush thread runs until stopped. A child forked while it runs has no such thread
     * and must not act as if it had one (nor touch CUPTI at its exit): it forgets it. */
    {
        inject_flusher_start();
        CHECK_INT(inject_flusher_running(), 1);
        pid_t child = fork();
        if (child == 0) {
            alarm(10); /* a hang becomes a failure */
            int forgot = !inject_flusher_running();
            inject_flusher_stop();
            _exit(forgot ? 0 : 3);
        }
        int st = -1;
        if (child > 0)
            waitpid(child, &st, 0);
        CHECK_MSG(child > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "forked child: wait status %d (exit 3: it kept its parent's flusher)", st);
        CHECK_INT(inject_flusher_running(), 1);
        inject_flusher_stop();
        CHECK_INT(inject_flusher_running(), 0);
        inject_flusher_stop(); /* twice is harmless */
    }

    /* The fatal-signal handler passes the signal on: a program that aborts still dies of
     * SIGABRT (mpress reports how it ended), and one that handles SIGSEGV itself still gets
     * it, with its own alarm left as it was. */
    {
        pid_t child = fork();
        if (child == 0) {
            inject_install_signal_handlers();
            abort();
        }
        int st = 0;
        if (child > 0)
            waitpid(child, &st, 0);
        CHECK_MSG(child > 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
                  "aborting child: wait status %d", st);
        child = fork();
        if (child == 0) {
            struct sigaction own;
            memset(&own, 0, sizeof(own));
            own.sa_handler = own_segv;
            sigaction(SIGSEGV, &own, NULL);
            alarm(30);
            inject_install_signal_handlers();
            raise(SIGSEGV);
            _exit(own_segv_seen && alarm(0) > 20 ? 0 : 1);
        }
        if (child > 0)
            waitpid(child, &st, 0);
        CHECK_MSG(child > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "child with its own SIGSEGV handler: wait status %d", st);
    }

    char dir[] = "/tmp/mpress-inject-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];

    /* The entry point the driver calls. Without a driver CUPTI refuses to enable activities:
     * the tracer must say so in the event file and still return (the program runs on). With
     * a driver it starts, and says that. */
    snprintf(path, sizeof(path), "%s/init.events", dir);
    setenv(MPRESS_EVENTS_ENV, path, 1);
    CHECK_INT(InitializeInjection(), 1);
    CHECK_INT(InitializeInjection(), 1); /* a second call is harmless */
    inject_flush();
    {
        struct mpress_trace *t = NULL;
        struct mpress_error err = {0};
        CHECK_MSG(mpress_trace_load(path, &t, &err) == 0, "%s", err.text);
        if (t) {
            struct mpress_profile p;
            struct mpress_trace_summary s;
            CHECK_INT(mpress_trace_analyse(t, NULL, &p, &s, &err), MPRESS_EINPUT); /* no ops */
            int has_driver = access("/proc/driver/nvidia/version", F_OK) == 0;
            if (!has_driver) {
                CHECK(!s.tracer_ok);
                CHECK_MSG(strstr(s.tracer_error, "cupti") != NULL, "error: '%s'",
                          s.tracer_error);
            } else {
                CHECK(s.tracer_ok || s.tracer_error[0]);
            }
            fprintf(stderr, "InitializeInjection here: %s\n",
                    s.tracer_ok ? "started" : s.tracer_error);
            mpress_profile_finish(&p);
            mpress_trace_destroy(t);
        }
    }
    inject_set_output(-1);
    unlink(path);
    /* Where CUPTI did start (a GPU machine), hand over what it holds now, with output off, so
     * that its real device records cannot land in the hand-made trace below. */
    inject_flusher_stop();
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);

    snprintf(path, sizeof(path), "%s/t.events", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return check_done();
    fprintf(f, "{\"format\":\"mpress-events\",\"version\":1}\n");
    fflush(f);
    inject_set_output(fileno(f));

    /* Ranges through the NVTX callback, as CUPTI would deliver them: ids 1 (fwd:layer0.mlp),
     * 2 ("inner", nested in 1), 3 (bwd:layer0.mlp), 4 (a registered-string domain range). */
    uint64_t base = inject_now();
    nvtxRangePushA_params p1 = {.message = "fwd:layer0.mlp"};
    nvtx(CUPTI_CBID_NVTX_nvtxRangePushA, &p1, NULL);
    nvtxEventAttributes_t attr;
    memset(&attr, 0, sizeof(attr));
    attr.version = NVTX_VERSION;
    attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attr.messageType = NVTX_MESSAGE_TYPE_ASCII;
    attr.message.ascii = "inner";
    nvtxRangePushEx_params p2 = {.eventAttrib = &attr};
    nvtx(CUPTI_CBID_NVTX_nvtxRangePushEx, &p2, NULL);
    nvtx(CUPTI_CBID_NVTX_nvtxRangePop, NULL, NULL);
    nvtx(CUPTI_CBID_NVTX_nvtxRangePop, NULL, NULL);
    nvtx(CUPTI_CBID_NVTX_nvtxRangePop, NULL, NULL); /* unbalanced: ignored */
    nvtxRangePushA_params p3 = {.message = "bwd:layer0.mlp"};
    nvtx(CUPTI_CBID_NVTX_nvtxRangePushA, &p3, NULL);
    nvtx(CUPTI_CBID_NVTX_nvtxRangePop, NULL, NULL);
    static int handle_target;
    nvtxStringHandle_t handle = (nvtxStringHandle_t)&handle_target;
    nvtxDomainRegisterStringA_params reg = {.domain = NULL, .string = "fwd:registered"};
    nvtx(CUPTI_CBID_NVTX_nvtxDomainRegisterStringA, &reg, &handle);
    nvtxEventAttributes_t rattr = attr;
    rattr.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    rattr.message.registered = handle;
    nvtxDomainRangePushEx_params p4 = {.domain = NULL, .core = {.eventAttrib = &rattr}};
    nvtx(CUPTI_CBID_NVTX_nvtxDomainRangePushEx, &p4, NULL);
    nvtxDomainRangePop_params p5 = {.domain = NULL};
    nvtx(CUPTI_CBID_NVTX_nvtxDomainRangePop, &p5, NULL);

    /* A child forked now (a data-loader worker) must neither write the parent's buffered
     * lines again nor add its own. */
    pid_t pid = fork();
    if (pid == 0) {
        inject_event("\"ev\":\"note\",\"what\":\"from the child\"");
        inject_flush();
        _exit(0);
    }
    CHECK(pid > 0);
    int wst = 0;
    if (pid > 0)
        waitpid(pid, &wst, 0);

    /* One activity buffer with every kind the tracer enables, plus one it does not decode. */
    buf = aligned_alloc(8, 1 << 16);
    memset(buf, 0, 1 << 16);
    uint64_t t0 = base + 1000000000ull; /* activity a second later: after every pop */

    inject_device_t dev;
    memset(&dev, 0, sizeof(dev));
    dev.kind = CUPTI_ACTIVITY_KIND_DEVICE;
    dev.id = 0;
    dev.name = "NVIDIA Fake";
    dev.globalMemorySize = 1ull << 30;
    APPEND(dev);

    ext(10, 2);
    inject_kernel_t k;
    memset(&k, 0, sizeof(k));
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = t0 + 100;
    k.end = t0 + 300;
    k.correlationId = 10;
    k.name = "gemm<\"x\">";
    APPEND(k);
    inject_memcpy2_t pc;
    memset(&pc, 0, sizeof(pc));
    pc.kind = CUPTI_ACTIVITY_KIND_MEMCPY2;
    pc.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_PTOP;
    pc.bytes = 1 << 20;
    pc.start = t0 + 250;
    pc.end = t0 + 400;
    pc.deviceId = 1;
    pc.srcDeviceId = 0;
    pc.dstDeviceId = 1;
    pc.correlationId = 10;
    APPEND(pc);
    ext(11, 2);
    memory(11, CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE,
           0xdead000, 4096, t0 + 150);
    memory(11, CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, CUPTI_ACTIVITY_MEMORY_KIND_PINNED,
           0xbeef000, 1 << 20, t0 + 160);
    inject_memcpy_t hc;
    memset(&hc, 0, sizeof(hc));
    hc.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    hc.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
    hc.bytes = 1 << 20;
    hc.start = t0 + 500;
    hc.end = t0 + 600;
    hc.correlationId = 99; /* no external correlation: outside every range */
    APPEND(hc);

    ext(12, 3);
    inject_memset_t ms;
    memset(&ms, 0, sizeof(ms));
    ms.kind = CUPTI_ACTIVITY_KIND_MEMSET;
    ms.bytes = 4096;
    ms.start = t0 + 1000;
    ms.end = t0 + 1050;
    ms.correlationId = 12;
    APPEND(ms);
    memory(12, CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE,
           0xdead000, 4096, t0 + 1010);

    inject_pool_t pool;
    memset(&pool, 0, sizeof(pool));
    pool.kind = CUPTI_ACTIVITY_KIND_MEMORY_POOL;
    pool.memoryPoolOperationType = CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED;
    pool.size = 1 << 21;
    pool.timestamp = t0;
    APPEND(pool);
    inject_api_t api;
    memset(&api, 0, sizeof(api));
    api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    api.cbid = 20;
    api.start = t0 + 90;
    api.end = t0 + 95;
    api.correlationId = 10;
    api.threadId = 77;
    APPEND(api);
    inject_marker_t mk;
    memset(&mk, 0, sizeof(mk));
    mk.kind = CUPTI_ACTIVITY_KIND_MARKER;
    mk.flags = CUPTI_ACTIVITY_FLAG_MARKER_START;
    mk.timestamp = t0;
    mk.id = 5;
    mk.name = "phase";
    APPEND(mk);
    inject_overhead_t oh;
    memset(&oh, 0, sizeof(oh));
    oh.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
    oh.overheadKind = CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH;
    oh.start = t0 + 2000;
    oh.end = t0 + 2100;
    APPEND(oh);
    /* Kernels CUPTI could not time (0 = CUPTI_TIMESTAMP_UNKNOWN), or whose end a forced
     * flush handed over before it was written: left out and counted, never written with an
     * end before their start (the reader would refuse the whole file). */
    inject_kernel_t untimed = k;
    untimed.start = 0;
    untimed.end = 0;
    APPEND(untimed);
    untimed.start = t0 + 3000;
    untimed.end = 0;
    APPEND(untimed);
    CUpti_ActivityContext3 ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.kind = CUPTI_ACTIVITY_KIND_CONTEXT;
    APPEND(ctx);

    /* Count what the decoder walks (output off), then hand the buffer over as CUPTI would:
     * the completion handler decodes it into the file and frees it. */
    uint64_t unknown = 0;
    inject_set_output(-1);
    uint64_t n = inject_decode_buffer(buf, used, &unknown);
    CHECK_INT(n, 18); /* every record above, the unknown one included */
    CHECK_INT(unknown, 1);
    inject_set_output(fileno(f));
    inject_buffer_completed(NULL, 0, buf, 1 << 16, used);
    buf = NULL;
    inject_set_output(-1);
    fclose(f);

    /* The raw lines: names escaped, pool/api/marker/overhead present. */
    FILE *r = fopen(path, "r");
    char line[4096];
    int saw_kernel = 0, saw_pool = 0, saw_api = 0, saw_marker = 0, saw_over = 0, pushes = 0;
    int saw_parent = 0, saw_child = 0, saw_untimed = 0, saw_walk_note = 0, kernels = 0;
    while (r && fgets(line, sizeof(line), r)) {
        saw_kernel += strstr(line, "\"name\":\"gemm<\\\"x\\\">\"") != NULL;
        saw_pool += strstr(line, "\"ev\":\"pool\",\"op\":\"created\"") != NULL;
        saw_api += strstr(line, "\"ev\":\"api\",\"api\":\"runtime\",\"cbid\":20,\"corr\":10") != NULL;
        saw_marker += strstr(line, "\"flag\":\"start\",\"name\":\"phase\"") != NULL;
        saw_over += strstr(line, "\"ev\":\"overhead\"") != NULL;
        pushes += strstr(line, "\"ev\":\"push\"") != NULL;
        saw_parent += strstr(line, "\"id\":2,\"parent\":1,") != NULL;
        saw_child += strstr(line, "from the child") != NULL;
        saw_untimed += strstr(line, "\"ev\":\"dropped\",\"n\":2,\"why\":\"no timestamps\"") != NULL;
        saw_walk_note += strstr(line, "cuptiActivityGetNextRecord") != NULL;
        kernels += strstr(line, "\"ev\":\"kernel\"") != NULL;
    }
    if (r)
        fclose(r);
    CHECK_INT(saw_kernel, 1);
    CHECK_INT(saw_pool, 1);
    CHECK_INT(saw_api, 1);
    CHECK_INT(saw_marker, 1);
    CHECK_INT(saw_over, 1);
    CHECK_INT(pushes, 4);
    CHECK_INT(saw_parent, 1);
    CHECK_INT(saw_child, 0);
    CHECK_INT(saw_untimed, 1);
    CHECK_INT(kernels, 1);
    CHECK_INT(saw_walk_note, 0); /* the walk reached the end of the buffer */

    /* And the analysis of what the tracer wrote. */
    struct mpress_trace *t = NULL;
    struct mpress_error err = {0};
    CHECK_INT(mpress_trace_load(path, &t, &err), 0);
    if (t) {
        struct mpress_profile p;
        struct mpress_trace_summary s;
        CHECK_INT(mpress_trace_analyse(t, NULL, &p, &s, &err), 0);
        CHECK_INT(p.n_ops, 2);
        if (p.n_ops == 2) {
            CHECK_STR(p.ops[0].name, "layer0.mlp");
            CHECK_INT(p.ops[0].layer, 0);
            CHECK_STR(p.ops[1].name, "registered");
            /* kernel [100,300] and peer copy [250,400] in "inner": 300 ns; memset 50 ns */
            CHECK_NEAR(p.ops[0].fwd_s, 300e-9, 1e-9);
            CHECK_NEAR(p.ops[0].bwd_s, 50e-9, 1e-9);
            CHECK_INT(p.ops[0].n_tensors, 1);
            if (p.ops[0].n_tensors == 1)
                CHECK_INT(p.ops[0].tensors[0].bytes, 4096);
            CHECK_INT(p.ops[0].output_bytes, 4096);
        }
        CHECK_STR(p.device, "NVIDIA Fake");
        CHECK_INT(s.n_unattributed, 1); /* the host-to-device copy */
        CHECK_INT(s.n_allocs, 1);       /* pinned memory is not device memory */
        CHECK_INT(s.dropped_records, 2); /* the two untimed kernels */
        CHECK_INT(p.model.layers, 1);
        mpress_profile_finish(&p);
        mpress_trace_destroy(t);
    }
    free(buf);
    unlink(path);
    rmdir(dir);
    return check_done();
}
