/* The event-file analyser on hand-written traces (tests/profile/events/). Every expected number
 * is worked out by hand in the comments from the events in the file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "mpress/trace.h"

static const char *srcdir;

static int analyse(const char *name, int warmup, struct mpress_profile *p,
                   struct mpress_trace_summary *sum)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/profile/events/%s", srcdir, name);
    struct mpress_trace *t;
    struct mpress_error err = {0};
    int rc = mpress_trace_load(path, &t, &err);
    CHECK_MSG(rc == 0, "%s: %s", name, err.text);
    if (rc)
        return rc;
    struct mpress_trace_options opt;
    mpress_trace_options_init(&opt);
    opt.warmup_steps = warmup;
    rc = mpress_trace_analyse(t, &opt, p, sum, &err);
    CHECK_MSG(rc == 0, "%s: %s", name, err.text);
    mpress_trace_destroy(t);
    return rc;
}

/* The profile must also be a valid mpress-profile file: save and load it back. */
static void check_roundtrip(const struct mpress_profile *p)
{
    char dir[] = "/tmp/mpress-trace-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof(path), "%s/p.json", dir);
    struct mpress_error err = {0};
    int rc = mpress_profile_save(path, p, &err);
    CHECK_MSG(rc == 0, "save: %s", err.text);
    struct mpress_profile q;
    rc = mpress_profile_load(path, &q, &err);
    CHECK_MSG(rc == 0, "load: %s:%d:%d: %s: %s", err.file, err.line, err.column, err.path,
              err.text);
    if (rc == 0) {
        CHECK_INT(q.n_ops, p->n_ops);
        CHECK_STR(q.source, "cupti");
    }
    mpress_profile_finish(&q);
    unlink(path);
    rmdir(dir);
}

static void test_nested(void)
{
    struct mpress_profile p;
    struct mpress_trace_summary s;
    if (analyse("nested.events", -1, &p, &s) == 0) {
        CHECK_STR(p.source, "cupti");
        CHECK_STR(p.device, "Test GPU");
        CHECK_INT(p.n_ops, 2);
        CHECK_STR(p.ops[0].name, "embed");
        CHECK_STR(p.ops[1].name, "attn");
        /* embed forward: k1 [210,250] in fwd:embed and k2 [240,300] in the nested range
         * "inner" overlap: union [210,300] = 90 ns. Backward: memset [800,830] = 30 ns. */
        CHECK_NEAR(p.ops[0].fwd_s, 90e-9, 1e-12);
        CHECK_NEAR(p.ops[0].bwd_s, 30e-9, 1e-12);
        /* attn: k3 [400,470] = 70 ns; backward k4 [600,700] and a memcpy [650,720] = 120 ns */
        CHECK_NEAR(p.ops[1].fwd_s, 70e-9, 1e-12);
        CHECK_NEAR(p.ops[1].bwd_s, 120e-9, 1e-12);
        /* embed: 4096 B under param:embed; 0x2000 (1000 B) made in forward and freed in
         * bwd:embed is saved; 0x3000 (500 B) lives and dies inside "inner" (part of the op
         * range) so it is workspace; 0x4000 (800 B) is the last allocation still live when
         * fwd:embed ends: the output. The pinned 99999 B does not count. */
        CHECK_INT(p.ops[0].param_bytes, 4096);
        CHECK_INT(p.ops[0].params, 2048); /* fp16: 2 bytes each */
        CHECK_INT(p.ops[0].grad_bytes, 0);
        CHECK_INT(p.ops[0].workspace_bytes, 500);
        CHECK_INT(p.ops[0].output_bytes, 800);
        CHECK_INT(p.ops[0].n_tensors, 1);
        if (p.ops[0].n_tensors == 1) {
            CHECK_INT(p.ops[0].tensors[0].bytes, 1000);
            CHECK_STR(p.ops[0].tensors[0].id, "embed.saved0");
            CHECK_INT(p.ops[0].tensors[0].recompute_op, 0);
            CHECK_NEAR(p.ops[0].tensors[0].recompute_s, 90e-9, 1e-12);
        }
        /* attn: 0x5000 (2000 B) and 0x6000 (300 B) freed in bwd:attn are saved, in that order;
         * 0x6000 is also the output; 0x7000 (64 B) made in backward and never freed is a
         * gradient; 0x9000 (128 B) under optim:attn is optimizer state. */
        CHECK_INT(p.ops[1].n_tensors, 2);
        if (p.ops[1].n_tensors == 2) {
            CHECK_INT(p.ops[1].tensors[0].bytes, 2000);
            CHECK_INT(p.ops[1].tensors[1].bytes, 300);
            CHECK_STR(p.ops[1].tensors[1].id, "attn.saved1");
        }
        CHECK_INT(p.ops[1].output_bytes, 300);
        CHECK_INT(p.ops[1].grad_bytes, 64);
        CHECK_INT(p.ops[1].optim_bytes, 128);
        CHECK_INT(p.ops[1].param_bytes, 0);
        CHECK_INT(p.ops[1].workspace_bytes, 0);
        /* Live bytes: +4096 +1000 +500 -500 +800 +2000 (= 7896, the peak) -800 +300 ... */
        CHECK_INT(s.n_devices, 1);
        CHECK_INT(s.devices[0].peak_bytes, 7896);
        CHECK_INT(s.n_allocs, 9);
        CHECK_INT(s.n_frees, 5);
        CHECK_INT(s.n_gpu_activities, 7); /* 4 kernels, a memcpy, a memset, the stray */
        CHECK_INT(s.n_unattributed, 1);               /* the "stray" kernel */
        CHECK_INT(s.unattributed_persistent_bytes, 7); /* 0x8000 outside every range */
        CHECK_INT(s.n_steps, 1);
        CHECK_INT(s.n_steps_used, 1);
        CHECK(s.tracer_ok);
        CHECK(s.clean_exit);
        check_roundtrip(&p);
    }
    mpress_profile_finish(&p);
}

static void test_steps(void)
{
    struct mpress_profile p;
    struct mpress_trace_summary s;
    if (analyse("steps.events", -1, &p, &s) == 0) {
        CHECK_INT(s.n_steps, 4);
        CHECK_INT(s.n_steps_used, 3);
        CHECK_INT(p.n_ops, 1);
        /* forward kernels 1000 (warm-up), 10, 30, 20 ns: median of the last three = 20 */
        CHECK_NEAR(p.ops[0].fwd_s, 20e-9, 1e-12);
        /* backward 500 (warm-up), 40, 40, 60 ns: median 40 */
        CHECK_NEAR(p.ops[0].bwd_s, 40e-9, 1e-12);
        /* step lengths 100, 300, 200 ns after warm-up: median 200 */
        CHECK_NEAR(s.step_s, 200e-9, 1e-12);
        /* Address reuse: 0xa000 is allocated in every step and 0xb000 twice in step 3 (200 B
         * freed inside the forward = workspace, then 300 B freed in backward = saved). Saved
         * tensors come from the last step: 1000 and 300 B. */
        CHECK_INT(p.ops[0].n_tensors, 2);
        if (p.ops[0].n_tensors == 2) {
            CHECK_INT(p.ops[0].tensors[0].bytes, 1000);
            CHECK_INT(p.ops[0].tensors[1].bytes, 300);
        }
        CHECK_INT(p.ops[0].workspace_bytes, 200);
        /* the 64 B made in the warm-up step's backward and never freed is a gradient */
        CHECK_INT(p.ops[0].grad_bytes, 64);
        CHECK_INT(p.ops[0].param_bytes, 0);
        /* peak: step 0 has 1000 + 64 live; step 3 has 64 + 1000 + 300 = 1364 */
        CHECK_INT(s.devices[0].peak_bytes, 1364);
        CHECK_INT(s.unmatched_frees, 0);
        CHECK_STR(p.device, "unknown");
        check_roundtrip(&p);
    }
    mpress_profile_finish(&p);

    /* no warm-up: forward median of 1000, 10, 30, 20 = (20 + 30) / 2 */
    if (analyse("steps.events", 0, &p, &s) == 0)
        CHECK_NEAR(p.ops[0].fwd_s, 25e-9, 1e-12);
    mpress_profile_finish(&p);
}

static void test_two_devices(void)
{
    struct mpress_profile p;
    struct mpress_trace_summary s;
    if (analyse("twodev.events", -1, &p, &s) == 0) {
        CHECK_INT(p.n_ops, 2);
        CHECK_STR(p.device, "First GPU"); /* the lowest ordinal names the profile */
        CHECK_NEAR(p.ops[0].fwd_s, 10e-9, 1e-12);
        /* b: peer memcpy [26,30] + kernel [30,60] on device 1 = 34 ns */
        CHECK_NEAR(p.ops[1].fwd_s, 34e-9, 1e-12);
        CHECK_NEAR(p.ops[1].bwd_s, 8e-9, 1e-12);
        CHECK_NEAR(p.ops[0].bwd_s, 5e-9, 1e-12);
        /* 0x1000 on device 0 (1000 B) and on device 1 (3000 B) are different tensors */
        CHECK_INT(p.ops[0].n_tensors, 1);
        CHECK_INT(p.ops[1].n_tensors, 1);
        if (p.ops[0].n_tensors == 1 && p.ops[1].n_tensors == 1) {
            CHECK_INT(p.ops[0].tensors[0].bytes, 1000);
            CHECK_INT(p.ops[1].tensors[0].bytes, 3000);
        }
        CHECK_INT(p.ops[1].workspace_bytes, 500);
        CHECK_INT(s.n_devices, 2);
        CHECK_INT(s.devices[0].id, 0); /* sorted, though the file names device 1 first */
        for (int d = 0; d < s.n_devices; d++) {
            if (s.devices[d].id == 0) {
                CHECK_INT(s.devices[d].peak_bytes, 1000);
                CHECK_INT(s.devices[d].memory_bytes, 1000);
            } else {
                CHECK_INT(s.devices[d].id, 1);
                CHECK_INT(s.devices[d].peak_bytes, 3500);
                CHECK_STR(s.devices[d].name, "Second GPU");
            }
        }
        CHECK(!s.clean_exit); /* no "end" event */
        check_roundtrip(&p);
    }
    mpress_profile_finish(&p);
}

static void test_torch(void)
{
    struct mpress_profile p;
    struct mpress_trace_summary s;
    if (analyse("torch.events", -1, &p, &s) == 0) {
        CHECK_INT(p.n_ops, 3);
        if (p.n_ops == 3) {
            CHECK_STR(p.ops[0].name, "aten::linear.0");
            CHECK_STR(p.ops[1].name, "aten::relu");
            CHECK_STR(p.ops[2].name, "aten::linear.1");
            CHECK_STR(p.ops[0].kind, "aten::linear");
            CHECK_NEAR(p.ops[0].fwd_s, 40e-9, 1e-12);
            CHECK_NEAR(p.ops[1].fwd_s, 5e-9, 1e-12);
            CHECK_NEAR(p.ops[2].fwd_s, 20e-9, 1e-12);
            /* AddmmBackward0 seq 9 -> linear.1 (first seq 8); ReluBackward0 seq 7 -> relu;
             * stashed seq 6 and TBackward0 seq 5 -> linear.0 (first seq 5): 80 + 3 ns */
            CHECK_NEAR(p.ops[2].bwd_s, 60e-9, 1e-12);
            CHECK_NEAR(p.ops[1].bwd_s, 7e-9, 1e-12);
            CHECK_NEAR(p.ops[0].bwd_s, 83e-9, 1e-12);
        }
        CHECK_INT(s.n_unattributed, 0);
    }
    mpress_profile_finish(&p);
}

static void test_merge(void)
{
    struct mpress_profile timing, mem;
    struct mpress_trace_summary s;
    struct mpress_error err = {0};
    if (analyse("steps.events", -1, &timing, &s) == 0 &&
        analyse("steps.events", 0, &mem, &s) == 0) {
        /* pretend the memory pass saw other bytes: they must come across, times must not */
        mem.ops[0].grad_bytes = 4242;
        mem.ops[0].tensors[0].bytes = 77;
        CHECK_INT(mpress_trace_merge_memory(&timing, &mem, &err), 0);
        CHECK_INT(timing.ops[0].grad_bytes, 4242);
        CHECK_INT(timing.ops[0].tensors[0].bytes, 77);
        CHECK_NEAR(timing.ops[0].fwd_s, 20e-9, 1e-12);
        CHECK_NEAR(timing.ops[0].tensors[0].recompute_s, 20e-9, 1e-12);
    }
    mpress_profile_finish(&mem);
    if (analyse("nested.events", -1, &mem, &s) == 0) {
        CHECK_INT(mpress_trace_merge_memory(&timing, &mem, &err), MPRESS_EINPUT);
        CHECK(strstr(err.text, "the memory pass has 2 ops") != NULL);
    }
    mpress_profile_finish(&mem);
    mpress_profile_finish(&timing);
}

static int parse(const char *text, struct mpress_trace **t, struct mpress_error *err)
{
    return mpress_trace_parse(text, strlen(text), "x.events", t, err);
}

/* A range that names no op ("fwd:" or ", seq = N": found by fuzz_trace) is not an op; before,
 * it became an op with an empty name, a profile that does not load. */
static void test_unnamed(void)
{
    const char *hdr = "{\"format\":\"mpress-events\",\"version\":1}\n";
    const char *names[] = {"fwd:", ", seq = 6", " , seq = 6"};
    for (int i = 0; i < 3; i++) {
        char buf[1024];
        snprintf(buf, sizeof(buf),
                 "%s{\"ev\":\"push\",\"id\":1,\"parent\":0,\"t\":1,\"name\":\"fwd:a\"}\n"
                 "{\"ev\":\"corr\",\"corr\":1,\"ext\":1}\n"
                 "{\"ev\":\"kernel\",\"corr\":1,\"dev\":0,\"start\":2,\"end\":9}\n"
                 "{\"ev\":\"pop\",\"id\":1,\"t\":10}\n"
                 "{\"ev\":\"push\",\"id\":2,\"parent\":0,\"t\":11,\"name\":\"%s\"}\n"
                 "{\"ev\":\"corr\",\"corr\":2,\"ext\":2}\n"
                 "{\"ev\":\"kernel\",\"corr\":2,\"dev\":0,\"start\":12,\"end\":15}\n"
                 "{\"ev\":\"pop\",\"id\":2,\"t\":16}\n{\"ev\":\"end\"}\n",
                 hdr, names[i]);
        struct mpress_trace *t = NULL;
        struct mpress_error err = {0};
        CHECK_INT(parse(buf, &t, &err), 0);
        if (!t)
            continue;
        struct mpress_profile p;
        struct mpress_trace_summary s;
        CHECK_INT(mpress_trace_analyse(t, NULL, &p, &s, &err), 0);
        CHECK_MSG(p.n_ops == 1, "'%s': %d ops", names[i], p.n_ops);
        if (p.n_ops == 1) {
            CHECK_STR(p.ops[0].name, "a");
            check_roundtrip(&p);
        }
        mpress_profile_finish(&p);
        mpress_trace_destroy(t);
    }
}

static void test_errors(void)
{
    struct mpress_trace *t = NULL;
    struct mpress_error err = {0};
    const char *hdr = "{\"format\":\"mpress-events\",\"version\":1}\n";
    char buf[1024];

    CHECK_INT(parse("{\"format\":\"mpress-events\",\"version\":2}\n", &t, &err), MPRESS_EINPUT);
    CHECK(strstr(err.text, "unsupported version 2") != NULL);
    CHECK_INT(err.line, 1);
    CHECK_INT(parse("{\"format\":\"mpress-profile\",\"version\":1}\n", &t, &err), MPRESS_EINPUT);
    CHECK_INT(parse("", &t, &err), MPRESS_EINPUT);
    CHECK(strstr(err.text, "empty event file") != NULL);

    snprintf(buf, sizeof(buf), "%s{\"ev\":\"pop\",\"id\":3,\"t\":5}\n", hdr);
    CHECK_INT(parse(buf, &t, &err), MPRESS_EINPUT);
    CHECK_INT(err.line, 2);
    CHECK(strstr(err.text, "never pushed") != NULL);

    snprintf(buf, sizeof(buf), "%s{\"ev\":\"kernel\",\"corr\":1}\n{\"ev\":\"end\"}\n", hdr);
    CHECK_INT(parse(buf, &t, &err), MPRESS_EINPUT);
    CHECK_INT(err.line, 2);
    CHECK_STR(err.path, "dev");

    /* a malformed line in the middle is an error ... */
    snprintf(buf, sizeof(buf), "%s{\"ev\":\"push\",\"id\":1,\"t\":1,\"name\n{\"ev\":\"end\"}\n",
             hdr);
    CHECK_INT(parse(buf, &t, &err), MPRESS_EINPUT);
    CHECK_INT(err.line, 2);
    /* ... but a last line cut short by a crash is dropped */
    snprintf(buf, sizeof(buf),
             "%s{\"ev\":\"push\",\"id\":1,\"parent\":0,\"t\":1,\"name\":\"fwd:x\"}\n"
             "{\"ev\":\"corr\",\"corr\":1,\"ext\":1}\n"
             "{\"ev\":\"kernel\",\"corr\":1,\"dev\":0,\"start\":2,\"end\":9}\n{\"ev\":\"ker",
             hdr);
    CHECK_INT(parse(buf, &t, &err), 0);
    if (t) {
        struct mpress_profile p;
        struct mpress_trace_summary s;
        CHECK_INT(mpress_trace_analyse(t, NULL, &p, &s, &err), 0);
        CHECK(s.truncated_line);
        CHECK_INT(p.n_ops, 1);
        /* never popped: the range runs to the last timestamp, so the kernel counts */
        CHECK_NEAR(p.ops[0].fwd_s, 7e-9, 1e-12);
        mpress_profile_finish(&p);
        mpress_trace_destroy(t);
        t = NULL;
    }

    /* no op ranges at all */
    snprintf(buf, sizeof(buf), "%s{\"ev\":\"kernel\",\"corr\":1,\"dev\":0,\"start\":2,\"end\":9}\n",
             hdr);
    CHECK_INT(parse(buf, &t, &err), 0);
    if (t) {
        struct mpress_profile p;
        CHECK_INT(mpress_trace_analyse(t, NULL, &p, NULL, &err), MPRESS_EINPUT);
        CHECK(strstr(err.text, "no op ranges") != NULL);
        mpress_profile_finish(&p);
        mpress_trace_destroy(t);
    }
    CHECK_INT(mpress_trace_load("/nonexistent/x.events", &t, &err), MPRESS_EINPUT);

    /* a device line without its index: the library returns MPRESS_EINPUT too, not 1 */
    snprintf(buf, sizeof(buf), "%s{\"ev\":\"device\",\"name\":\"GPU\",\"memory\":1000}\n",
             hdr);
    CHECK_INT(parse(buf, &t, &err), MPRESS_EINPUT);
    CHECK_INT(err.line, 2);
    CHECK_STR(err.path, "dev");
}

/* tail.events: step 0 (warm-up) and step 1 each allocate 100 B in fwd:x and free it in bwd:x;
 * step 2 holds no op range (what --nvtx-torch leaves open after the last optimizer step). Step
 * 2 is no training step: the step time is step 1's alone, [200, 300] = 100 ns, and the saved
 * tensors come from step 1, the last step that ran a backward op (100 B). */
static void test_tail_step(void)
{
    struct mpress_profile p;
    struct mpress_trace_summary s;
    if (analyse("tail.events", -1, &p, &s) == 0) {
        CHECK_INT(s.n_steps, 3);
        CHECK_INT(s.n_steps_used, 2);
        CHECK_NEAR(s.step_s, 100e-9, 1e-12);
        CHECK_INT(p.n_ops, 1);
        if (p.n_ops == 1) {
            CHECK_INT(p.ops[0].n_tensors, 1);
            if (p.ops[0].n_tensors == 1)
                CHECK_INT(p.ops[0].tensors[0].bytes, 100);
            CHECK_NEAR(p.ops[0].fwd_s, 10e-9, 1e-12); /* kernel [215, 225] */
        }
    }
    mpress_profile_finish(&p);
}

/* Kernel time of op i in step s (ns), forward and backward: a pattern the test can take the
 * median of by hand. */
static unsigned dur(int i, int s, int bwd)
{
    return 10u + (unsigned)((i * 7 + s * 3 + bwd * 5) % 20);
}

static unsigned med3(unsigned a, unsigned b, unsigned c)
{
    return a > b ? (b > c ? b : a > c ? c : a) : (a > c ? a : b > c ? c : b);
}

/* 200,000 op ranges in 4 steps, base names repeated every 5000 ops: every op and its
 * backward range found, times the median of steps 1-3, and in about linear time (the earlier
 * analyser compared every range with every earlier one and took minutes at this size). */
static void test_scale(void)
{
    enum { S = 4, N = 25000 };
    size_t cap = (size_t)S * N * 2 * 320 + 4096, n = 0; /* 4 lines of < 300 bytes a range */
    char *buf = malloc(cap);
    CHECK(buf != NULL);
    if (!buf)
        return;
    n += (size_t)snprintf(buf + n, cap - n, "{\"format\":\"mpress-events\",\"version\":1}\n");
    unsigned long long id = 0, corr = 0, t = 0;
    for (int s = 0; s < S; s++) {
        unsigned long long step = ++id;
        n += (size_t)snprintf(buf + n, cap - n,
                              "{\"ev\":\"push\",\"id\":%llu,\"parent\":0,\"t\":%llu,"
                              "\"name\":\"step\"}\n", step, t++);
        for (int b = 0; b < 2; b++)
            for (int k = 0; k < N; k++) {
                int i = b ? N - 1 - k : k;
                unsigned d = dur(i, s, b);
                id++;
                corr++;
                n += (size_t)snprintf(
                    buf + n, cap - n,
                    "{\"ev\":\"push\",\"id\":%llu,\"parent\":%llu,\"t\":%llu,"
                    "\"name\":\"%s:op%d\"}\n{\"ev\":\"corr\",\"corr\":%llu,\"ext\":%llu}\n"
                    "{\"ev\":\"kernel\",\"corr\":%llu,\"dev\":0,\"start\":%llu,\"end\":%llu}\n"
                    "{\"ev\":\"pop\",\"id\":%llu,\"t\":%llu}\n",
                    id, step, t, b ? "bwd" : "fwd", i % 5000, corr, id, corr, t + 1,
                    t + 1 + d, id, t + 2 + d);
                t += 3 + d;
            }
        n += (size_t)snprintf(buf + n, cap - n, "{\"ev\":\"pop\",\"id\":%llu,\"t\":%llu}\n",
                              step, t++);
    }
    struct mpress_trace *tr = NULL;
    struct mpress_error err;
    CHECK_INT(mpress_trace_parse(buf, n, "big.events", &tr, &err), 0);
    free(buf);
    if (!tr)
        return;
    struct mpress_profile p;
    struct mpress_trace_summary sum;
    clock_t c0 = clock();
    CHECK_INT(mpress_trace_analyse(tr, NULL, &p, &sum, &err), 0);
    double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
    CHECK_MSG(secs < 10, "analysing %d ranges took %.1f s of CPU", S * N * 2, secs);
    CHECK_INT(p.n_ops, N);
    int bad_name = 0, bad_fwd = 0, bad_bwd = 0;
    for (int i = 0; i < p.n_ops && p.n_ops == N; i++) {
        char want[32];
        snprintf(want, sizeof(want), "op%d.%d", i % 5000, i / 5000);
        bad_name += strcmp(p.ops[i].name, want) != 0;
        bad_fwd += fabs(p.ops[i].fwd_s - 1e-9 * med3(dur(i, 1, 0), dur(i, 2, 0), dur(i, 3, 0))) >
                   1e-13;
        bad_bwd += fabs(p.ops[i].bwd_s - 1e-9 * med3(dur(i, 1, 1), dur(i, 2, 1), dur(i, 3, 1))) >
                   1e-13;
    }
    CHECK_INT(bad_name, 0);
    CHECK_INT(bad_fwd, 0);
    CHECK_INT(bad_bwd, 0);
    mpress_profile_finish(&p);
    mpress_trace_destroy(tr);
}

int main(void)
{
    srcdir = getenv("MPRESS_SRCDIR");
    if (!srcdir) {
        fprintf(stderr, "MPRESS_SRCDIR not set\n");
        return 1;
    }
    test_nested();
    test_steps();
    test_two_devices();
    test_torch();
    test_merge();
    test_errors();
    test_unnamed();
    test_tail_step();
    test_scale();
    return check_done();
}
