/* Small valid documents built in C for the format tests, and the mutate-and-reject helpers. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <dirent.h>

#include "samples.h"

void sample_topology(struct mpress_topology *t)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "quarter-dgx1");
    snprintf(t->description, sizeof(t->description), "4 GPUs of a DGX-1 for tests");
    t->n_gpus = 4;
    for (int i = 0; i < 4; i++) {
        struct mpress_topo_gpu *g = &t->gpus[i];
        snprintf(g->model, sizeof(g->model), "V100-SXM2-32GB");
        g->memory_bytes = 34359738368ULL;
        g->reserve_bytes = 1073741824ULL;
        g->flops_fp16 = 125e12;
        g->flops_fp32 = 15.7e12;
        g->hbm_bytes_per_s = 900e9;
        g->nvlink_ports = 6;
        g->pcie_switch = i / 2;
        g->socket = i / 2;
    }
    t->fabric = MPRESS_FABRIC_DIRECT;
    /* The DGX-1 cube-mesh restricted to GPUs 0-3: double links 0-3, 3-2, 2-1; single 0-1,
     * 0-2, 1-3. */
    static const int links[4][4] = {{0, 1, 1, 2}, {1, 0, 2, 1}, {1, 2, 0, 2}, {2, 1, 2, 0}};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            t->nvlinks[i][j] = links[i][j];
    t->nvlink_bytes_per_s = 25e9;
    t->pcie_bytes_per_s = 12e9;
    t->n_switches = 2;
    t->switches[0].uplink_bytes_per_s = 12e9;
    t->switches[0].socket = 0;
    t->switches[1].uplink_bytes_per_s = 12e9;
    t->switches[1].socket = 1;
    t->n_sockets = 2;
    t->socket_link_bytes_per_s = 19.2e9;
    t->host_memory_bytes = 549755813888ULL;
    t->host_memory_bytes_per_s = 76.8e9;
    t->cpu_flops = 1.2e12;
    snprintf(t->bandwidth_source, sizeof(t->bandwidth_source), "datasheet");
}

static void add_tensor(struct mpress_op *op, int op_index, const char *name, uint64_t bytes,
                       double recompute_s)
{
    struct mpress_saved_tensor *t = &op->tensors[op->n_tensors++];
    snprintf(t->id, sizeof(t->id), "%.40s.%.40s", op->name, name);
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->bytes = bytes;
    t->recompute_s = recompute_s;
    t->recompute_op = op_index;
}

void sample_profile(struct mpress_profile *p)
{
    mpress_profile_init(p);
    snprintf(p->source, sizeof(p->source), "analytic");
    snprintf(p->device, sizeof(p->device), "V100-SXM2-32GB");
    struct mpress_model_config *m = &p->model;
    snprintf(m->name, sizeof(m->name), "toy-2l");
    snprintf(m->family, sizeof(m->family), "gpt");
    m->layers = 2;
    m->hidden = 256;
    m->heads = 4;
    m->ffn = 1024;
    m->seq = 128;
    m->vocab = 1000;
    m->micro_batch = 2;
    snprintf(m->dtype, sizeof(m->dtype), "fp16");
    snprintf(m->optimizer, sizeof(m->optimizer), "adam");
    m->flash_attention = 0;

    static const struct {
        const char *name, *kind;
        int layer;
        uint64_t params;
    } spec[8] = {
        {"embed", "embedding", -1, 256000}, {"layer0.attn", "attention", 0, 263168},
        {"layer0.mlp", "mlp", 0, 525568},   {"layer1.attn", "attention", 1, 263168},
        {"layer1.mlp", "mlp", 1, 525568},   {"final_ln", "layernorm", -1, 512},
        {"lm_head", "linear", -1, 256000},  {"loss", "cross_entropy", -1, 0},
    };
    p->n_ops = 8;
    p->ops = calloc(8, sizeof(*p->ops));
    for (int i = 0; i < 8; i++) {
        struct mpress_op *op = &p->ops[i];
        snprintf(op->name, sizeof(op->name), "%s", spec[i].name);
        snprintf(op->kind, sizeof(op->kind), "%s", spec[i].kind);
        op->layer = spec[i].layer;
        op->fwd_s = 0.00125 * (i + 1);
        op->bwd_s = 0.0025 * (i + 1);
        op->fwd_flops = 2.0e9 * (i + 1);
        op->params = spec[i].params;
        op->param_bytes = 2 * op->params;        /* fp16 weights */
        op->grad_bytes = 2 * op->params;         /* fp16 gradients */
        op->optim_bytes = 12 * op->params;       /* fp32 master + Adam m and v */
        op->workspace_bytes = 1048576ULL * (uint64_t)i;
        op->output_bytes = 131072;
        op->tensors = calloc(2, sizeof(*op->tensors));
    }
    /* Not a round number: checks that reals survive at the pinned precision. */
    p->ops[3].fwd_s = 1.0 / 3.0 * 1e-3;
    add_tensor(&p->ops[1], 1, "qkv_out", 393216, 0.0005);
    add_tensor(&p->ops[1], 1, "softmax_out", 262144, 0.00075);
    add_tensor(&p->ops[2], 2, "fc1_out", 524288, 0.001);
    add_tensor(&p->ops[2], 2, "gelu_out", 524289, 0.0002);
    add_tensor(&p->ops[3], 3, "qkv_out", 393216, 0.0005);
    add_tensor(&p->ops[3], 3, "softmax_out", 262144, 0.00075);
    add_tensor(&p->ops[4], 4, "fc1_out", 524288, 0.001);
    add_tensor(&p->ops[4], 4, "gelu_out", 524289, 0.0002);
    add_tensor(&p->ops[5], 5, "ln_out", 131072, 0.0001);
    add_tensor(&p->ops[6], 6, "logits", 512000, 0.002);
}

static void set_action(struct mpress_plan_action *a, int op, int tensor, enum mpress_action kind,
                       int evict, int prefetch)
{
    memset(a, 0, sizeof(*a));
    a->op = op;
    a->tensor = tensor;
    a->action = kind;
    a->evict_after_op = evict;
    a->prefetch_before_op = prefetch;
}

void sample_plan(struct mpress_plan *plan)
{
    mpress_plan_init(plan);
    snprintf(plan->generator, sizeof(plan->generator), "mpress test");
    snprintf(plan->policy, sizeof(plan->policy), "ilp");
    sample_profile(&plan->profile);
    sample_topology(&plan->topology);
    plan->schedule = MPRESS_SCHEDULE_1F1B;
    plan->micro_batches = 4;
    plan->prefetch_lookahead = 1;

    plan->n_stages = 3;
    plan->stages = calloc(3, sizeof(*plan->stages));
    plan->stages[0] = (struct mpress_plan_stage){.first_op = 0, .last_op = 2, .gpu = 2};
    plan->stages[1] = (struct mpress_plan_stage){.first_op = 3, .last_op = 4, .gpu = 0,
                                                 .optimizer_on_host = 1};
    plan->stages[2] = (struct mpress_plan_stage){.first_op = 5, .last_op = 7, .gpu = 3};

    plan->n_actions = 10;
    plan->actions = calloc(10, sizeof(*plan->actions));
    struct mpress_plan_action *a = plan->actions;
    set_action(&a[0], 1, 0, MPRESS_ACTION_KEEP, -1, -1);
    set_action(&a[1], 1, 1, MPRESS_ACTION_RECOMPUTE, 1, 2);
    set_action(&a[2], 2, 0, MPRESS_ACTION_HOST_SWAP, 2, 2);
    set_action(&a[3], 2, 1, MPRESS_ACTION_D2D_SWAP, 2, 2);
    a[3].n_peers = 2;
    a[3].peers[0] = 1;
    a[3].peer_bytes[0] = 262145;
    a[3].peers[1] = 0;
    a[3].peer_bytes[1] = 262144;   /* 262145 + 262144 = 524289, the tensor's bytes */
    set_action(&a[4], 3, 0, MPRESS_ACTION_KEEP, -1, -1);
    set_action(&a[5], 3, 1, MPRESS_ACTION_D2D_SWAP, 3, 4);
    a[5].n_peers = 1;
    a[5].peers[0] = 1;
    a[5].peer_bytes[0] = 262144;
    set_action(&a[6], 4, 0, MPRESS_ACTION_RECOMPUTE, 4, 4);
    set_action(&a[7], 4, 1, MPRESS_ACTION_KEEP, -1, -1);
    set_action(&a[8], 5, 0, MPRESS_ACTION_KEEP, -1, -1);
    set_action(&a[9], 6, 0, MPRESS_ACTION_HOST_SWAP, 6, 7);

    plan->n_gpus = 4;
    plan->gpus = calloc(4, sizeof(*plan->gpus));
    static const int stage_of_gpu[4] = {1, -1, 0, 2};
    for (int g = 0; g < 4; g++) {
        struct mpress_plan_gpu *pg = &plan->gpus[g];
        pg->gpu = g;
        pg->stage = stage_of_gpu[g];
        pg->capacity = 34359738368ULL;
        pg->weights = 1000000ULL * (uint64_t)(g + 1);
        pg->gradients = 1000000ULL * (uint64_t)(g + 1);
        pg->optimizer = g == 0 ? 0 : 6000000ULL * (uint64_t)(g + 1);
        pg->activations = 3000000ULL + (uint64_t)g;
        pg->parked = g == 1 ? 524289 : 0;
        pg->working = 786432;
        pg->buffers = 262144;
        pg->reserve = 1073741824ULL;
        pg->peak = pg->weights + pg->gradients + pg->optimizer + pg->activations + pg->parked +
                   pg->working + pg->buffers + pg->reserve;
        pg->bound = pg->peak + 262144; /* a workspace that meets every kept tensor */
    }
    plan->iteration_s = 0.25;
    plan->samples_per_s = 32;   /* 4 micro-batches x 2 samples / 0.25 s */
    snprintf(plan->solver.status, sizeof(plan->solver.status), "optimal");
    plan->solver.objective = 0.25;
    plan->solver.bound = 0.2499;
    plan->solver.gap = 0.0004;
    plan->solver.rows = 120;
    plan->solver.cols = 80;
    plan->solver.integer_cols = 40;
    plan->solver.nonzeros = 600;
    plan->solver.nodes = -1;
    plan->n_baselines = 3;
    plan->baselines[0] = (struct mpress_plan_baseline){.policy = "none", .fits = 0};
    plan->baselines[1] =
        (struct mpress_plan_baseline){.policy = "recompute", .fits = 1, .iteration_s = 0.31};
    plan->baselines[2] =
        (struct mpress_plan_baseline){.policy = "swap", .fits = 1, .iteration_s = 0.29};
}

/* ---- temporary files ---------------------------------------------------------------------- */

static char dir_[64];
static char path_[320];

const char *test_dir(void)
{
    if (!dir_[0]) {
        snprintf(dir_, sizeof(dir_), "/tmp/mpress-format-XXXXXX");
        if (!mkdtemp(dir_)) {
            perror("mkdtemp");
            exit(1);
        }
    }
    return dir_;
}

const char *test_path(const char *name)
{
    snprintf(path_, sizeof(path_), "%s/%s", test_dir(), name);
    return path_;
}

void test_cleanup(void)
{
    if (!dir_[0])
        return;
    DIR *d = opendir(dir_);
    if (d) {
        struct dirent *e;
        char p[400];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(p, sizeof(p), "%s/%s", dir_, e->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(dir_);
    dir_[0] = '\0';
}

char *read_all(const char *file, size_t *size)
{
    char *text;
    size_t n;
    if (mpress_read_file(file, 0, &text, &n, NULL) != 0)
        return NULL;
    if (size)
        *size = n;
    return text;
}

const char *write_text(const char *name, const char *text)
{
    const char *p = test_path(name);
    /* A new file rather than one rewritten in place, which ext4 flushes on close
     * (auto_da_alloc): the fuzzers write thousands. */
    remove(p);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(text, 1, strlen(text), f) != strlen(text) || fclose(f) != 0) {
        perror(p);
        exit(1);
    }
    return p;
}

/* ---- JSON paths ---------------------------------------------------------------------------- */

/* Splits the last segment off path: parent gets the rest; returns the key (or NULL and sets
 * *index for an array element). */
static const char *split_last(const char *path, char *parent, size_t size, char *key,
                              size_t ksize, long *index)
{
    size_t n = strlen(path);
    if (n && path[n - 1] == ']') {
        const char *lb = strrchr(path, '[');
        *index = strtol(lb + 1, NULL, 10);
        snprintf(parent, size, "%.*s", (int)(lb - path), path);
        return NULL;
    }
    const char *dot = strrchr(path, '.');
    const char *lb = strrchr(path, ']');
    const char *cut = dot && (!lb || dot > lb) ? dot : NULL;
    if (!cut && lb)
        cut = lb + 1; /* "a[1]b" does not occur; keep it simple */
    if (cut) {
        snprintf(parent, size, "%.*s", (int)(cut - path), path);
        snprintf(key, ksize, "%s", *cut == '.' ? cut + 1 : cut);
    } else {
        parent[0] = '\0';
        snprintf(key, ksize, "%s", path);
    }
    return key;
}

json_t *jget(json_t *root, const char *path)
{
    if (!path[0])
        return root;
    char parent[512], key[256];
    long index = 0;
    const char *k = split_last(path, parent, sizeof(parent), key, sizeof(key), &index);
    json_t *p = jget(root, parent);
    if (!p)
        return NULL;
    return k ? json_object_get(p, k) : json_array_get(p, (size_t)index);
}

void jset(json_t *root, const char *path, json_t *value)
{
    char parent[512], key[256];
    long index = 0;
    const char *k = split_last(path, parent, sizeof(parent), key, sizeof(key), &index);
    json_t *p = jget(root, parent);
    int rc = !p ? -1
             : k ? json_object_set_new(p, k, value)
                 : json_array_set_new(p, (size_t)index, value);
    if (rc != 0) {
        fprintf(stderr, "test bug: cannot set %s\n", path);
        exit(1);
    }
}

void jdel(json_t *root, const char *path)
{
    char parent[512], key[256];
    long index = 0;
    const char *k = split_last(path, parent, sizeof(parent), key, sizeof(key), &index);
    json_t *p = jget(root, parent);
    int rc = !p ? -1 : k ? json_object_del(p, k) : json_array_remove(p, (size_t)index);
    if (rc != 0) {
        fprintf(stderr, "test bug: cannot delete %s\n", path);
        exit(1);
    }
}

/* ---- rejections ------------------------------------------------------------------------ */

int expect_reject_text(load_fn load, const char *text, const char *want_path,
                       const char *want_text, const char *marker)
{
    static int seq;
    char name[32];
    snprintf(name, sizeof(name), "bad%d.json", ++seq);
    const char *file = write_text(name, text);
    char file_copy[320];
    snprintf(file_copy, sizeof(file_copy), "%s", file);
    struct mpress_error err;
    mpress_error_clear(&err);
    int rc = load(file_copy, &err);
    char msg[2048];
    mpress_error_format(&err, msg, sizeof(msg));
    int bad = 0;
    if (rc != MPRESS_EINPUT || err.code != MPRESS_EINPUT)
        bad = 1;
    if (strcmp(err.path, want_path) != 0 || !strstr(err.text, want_text) ||
        strcmp(err.file, file_copy) != 0)
        bad = 1;
    if (marker) {
        const char *at = strstr(text, marker);
        int line = 1, col = 1;
        for (const char *c = text; at && c < at; c++) {
            if (*c == '\n') {
                line++;
                col = 1;
            } else {
                col++;
            }
        }
        if (!at || err.line != line || err.column != col) {
            fprintf(stderr, "  want position %d:%d\n", line, col);
            bad = 1;
        }
    }
    if (bad)
        fprintf(stderr, "rejection mismatch (rc %d): want path '%s', text '%s'\n  got: %s\n", rc,
                want_path, want_text, msg);
    unlink(file_copy);
    return bad;
}

int expect_reject(load_fn load, json_t *doc, const char *want_path, const char *want_text,
                  const char *marker)
{
    char *text = mpress_json_dumps(doc);
    json_decref(doc);
    if (!text) {
        fprintf(stderr, "test bug: cannot dump\n");
        return 1;
    }
    int bad = expect_reject_text(load, text, want_path, want_text, marker);
    free(text);
    return bad;
}
