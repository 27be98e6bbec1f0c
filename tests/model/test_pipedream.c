/* PipeDream graph import: the real GNMT profile (tests/data/pipedream) read here independently
 * with a plain scan of its lines, then compared with the importer's graph and profile; and bad
 * files rejected with their line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "mpress/model.h"

#define MAXN 256

struct ref {
    int n_nodes, n_edges;
    char id[MAXN][32];
    double fwd[MAXN], bwd[MAXN], act[MAXN], par[MAXN];
    int src[4 * MAXN], dst[4 * MAXN];
};

static int ref_find(const struct ref *r, const char *id)
{
    for (int i = 0; i < r->n_nodes; i++)
        if (strcmp(r->id[i], id) == 0)
            return i;
    return -1;
}

static double value_after(const char *line, const char *key)
{
    const char *p = strstr(line, key);
    if (!p)
        return -1;
    p += strlen(key);
    if (*p != '[')
        return atof(p);
    double sum = 0; /* "[a; b; c]" */
    for (p++; *p && *p != ']';) {
        sum += strtod(p, (char **)&p);
        while (*p == ';' || *p == ' ')
            p++;
    }
    return sum;
}

/* Independent reading: node lines start with their id, edges with a TAB. */
static int ref_load(const char *file, struct ref *r)
{
    FILE *f = fopen(file, "r");
    if (!f)
        return -1;
    char line[4096];
    memset(r, 0, sizeof(*r));
    while (fgets(line, sizeof(line), f)) {
        if (line[0] == '\t') {
            char a[32], b[32];
            if (sscanf(line, " %31s -- %31s", a, b) == 2) {
                r->src[r->n_edges] = ref_find(r, a);
                r->dst[r->n_edges] = ref_find(r, b);
                r->n_edges++;
            }
        } else if (line[0] != '\n') {
            int i = r->n_nodes++;
            sscanf(line, "%31s", r->id[i]);
            r->fwd[i] = value_after(line, "forward_compute_time=");
            r->bwd[i] = value_after(line, "backward_compute_time=");
            r->act[i] = value_after(line, "activation_size=");
            r->par[i] = value_after(line, "parameter_size=");
        }
    }
    fclose(f);
    return 0;
}

static void test_gnmt(const char *file)
{
    static struct ref r;
    CHECK_INT(ref_load(file, &r), 0);
    CHECK_INT(r.n_nodes, 48);
    CHECK_INT(r.n_edges, 58);

    struct mpress_pipedream_graph g;
    struct mpress_error err;
    CHECK_INT(mpress_pipedream_load(file, &g, &err), 0);
    CHECK_INT(g.n_nodes, r.n_nodes);
    CHECK_INT(g.n_edges, r.n_edges);
    mpress_pipedream_finish(&g);

    struct mpress_profile p;
    mpress_profile_init(&p);
    CHECK_INT(mpress_profile_import_pipedream(file, &p, &err), 0);
    CHECK_INT(p.n_ops, 48);
    CHECK_STR(p.source, "import");
    CHECK_STR(p.model.name, "gnmt");
    /* every node exactly once; totals equal the file's sums */
    int pos[MAXN];
    for (int i = 0; i < r.n_nodes; i++)
        pos[i] = -1;
    double fwd = 0, bwd = 0, rf = 0, rb = 0, ra = 0, rp = 0;
    uint64_t pbytes = 0;
    for (int k = 0; k < p.n_ops; k++) {
        int i = ref_find(&r, p.ops[k].name);
        CHECK(i >= 0);
        if (i < 0)
            continue;
        CHECK(pos[i] < 0);
        pos[i] = k;
        fwd += p.ops[k].fwd_s;
        bwd += p.ops[k].bwd_s;
        pbytes += p.ops[k].param_bytes;
        CHECK_NEAR(p.ops[k].fwd_s, r.fwd[i] / 1000, 1e-12);
        CHECK_INT(p.ops[k].param_bytes, (uint64_t)r.par[i]);
        CHECK_INT(p.ops[k].params * 4, (uint64_t)r.par[i]);
        uint64_t saved = p.ops[k].n_tensors ? p.ops[k].tensors[0].bytes : 0;
        CHECK_INT(saved, (uint64_t)r.act[i]);
    }
    for (int i = 0; i < r.n_nodes; i++) {
        rf += r.fwd[i];
        rb += r.bwd[i];
        ra += r.act[i];
        rp += r.par[i];
    }
    CHECK_NEAR(fwd, rf / 1000, 1e-12);
    CHECK_NEAR(bwd, rb / 1000, 1e-12);
    CHECK_INT(pbytes, (uint64_t)rp);
    CHECK_INT(mpress_profile_saved_bytes(&p), (uint64_t)ra);
    /* a topological order: every edge goes forward */
    for (int e = 0; e < r.n_edges; e++) {
        CHECK(r.src[e] >= 0 && r.dst[e] >= 0);
        if (r.src[e] >= 0 && r.dst[e] >= 0)
            CHECK_MSG(pos[r.src[e]] < pos[r.dst[e]], "edge %s -> %s", r.id[r.src[e]],
                      r.id[r.dst[e]]);
    }
    /* what a cut after op k sends: each node placed at or before k with a consumer after k,
     * its activation once */
    for (int k = 0; k < p.n_ops; k++) {
        double want = 0;
        for (int i = 0; i < r.n_nodes; i++) {
            if (pos[i] > k)
                continue;
            int crosses = 0;
            for (int e = 0; e < r.n_edges; e++)
                crosses |= r.src[e] == i && pos[r.dst[e]] > k;
            if (crosses)
                want += r.act[i];
        }
        CHECK_MSG(p.ops[k].output_bytes == (uint64_t)want, "cut after %s: %llu, want %.0f",
                  p.ops[k].name, (unsigned long long)p.ops[k].output_bytes, want);
    }
    /* the first LSTM's three outputs (a list in the file) are summed */
    int i7 = ref_find(&r, "node7");
    CHECK(i7 >= 0 && r.act[i7] == 6291456.0 + 131072.0 + 131072.0);
    /* the result is a valid profile */
    char dir[] = "/tmp/mpress-pd-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof(path), "%s/g.json", dir);
    CHECK_INT(mpress_profile_save(path, &p, &err), 0);
    struct mpress_profile q;
    mpress_profile_init(&q);
    CHECK_INT(mpress_profile_load(path, &q, &err), 0);
    CHECK_INT(q.n_ops, 48);
    mpress_profile_finish(&q);
    unlink(path);
    rmdir(dir);
    mpress_profile_finish(&p);
}

static void expect_bad(const char *text, int line, const char *what)
{
    char dir[] = "/tmp/mpress-pd-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof(path), "%s/bad.txt", dir);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    struct mpress_profile p;
    struct mpress_error err;
    mpress_profile_init(&p);
    CHECK_INT(mpress_profile_import_pipedream(path, &p, &err), MPRESS_EINPUT);
    CHECK_INT(err.line, line);
    CHECK_STR(err.file, path);
    CHECK_MSG(strstr(err.text, what) != NULL, "'%s' lacks '%s'", err.text, what);
    CHECK_INT(p.n_ops, 0);
    unlink(path);
    rmdir(dir);
}

#define N(id, rest) id " -- Linear(4, 4) -- " rest "\n"
#define OK "forward_compute_time=1.0, backward_compute_time=2.0, activation_size=8.0, " \
           "parameter_size=80.000"

static void test_bad(void)
{
    expect_bad(N("node1", OK) N("node2", "forward_compute_time=1.0, activation_size=8.0, "
                                         "backward_compute_time=2.0"),
               2, "missing attribute 'parameter_size'");
    expect_bad(N("node1", OK) N("node2", "forward_compute_time=x, backward_compute_time=2.0, "
                                         "activation_size=8.0, parameter_size=1"),
               2, "bad value of 'forward_compute_time'");
    expect_bad(N("node1", OK) "\tnode1 -- node9\n", 2, "unknown node 'node9'");
    expect_bad(N("node1", OK) N("node2", OK) "\tnode1 -- node2\n\tnode2 -- node1\n", 1,
               "cycle");
    expect_bad(N("node1", OK) N("node1", OK), 2, "defined twice");
    expect_bad(N("node1", "forward_compute_time=1.0, backward_compute_time=2.0, "
                          "activation_size=[1.0; oops], parameter_size=1"),
               1, "activation_size");
    expect_bad(N("node1", OK) "node2 has no separators\n", 2, "expected 'ID -- DESCRIPTION");
    expect_bad(N("node1", OK ", colour=3"), 1, "unknown attribute 'colour'");
    expect_bad("\n\n", 0, "no node lines");
}

/* Description cut into a kind: short kept, long ones distinct. */
static void test_kinds(void)
{
    char dir[] = "/tmp/mpress-pd-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof(path), "%s/k.graph.txt", dir);
    FILE *f = fopen(path, "w");
    fputs("node1 -- Input0 -- " OK "\n"
          "node2 -- Sequential(  (0): Linear(in_features=1024, out_features=4096)  (1): ReLU) -- "
          OK "\n"
          "node3 -- Sequential(  (0): Linear(in_features=1024, out_features=4096)  (1): Tanh) -- "
          OK "\n"
          "\tnode1 -- node2\n\tnode2 -- node3\n",
          f);
    fclose(f);
    struct mpress_profile p;
    struct mpress_error err;
    mpress_profile_init(&p);
    CHECK_INT(mpress_profile_import_pipedream(path, &p, &err), 0);
    CHECK_INT(p.n_ops, 3);
    CHECK_STR(p.model.name, "k");
    CHECK_STR(p.ops[0].kind, "Input0");
    CHECK(strlen(p.ops[1].kind) == 47 && strchr(p.ops[1].kind, '~'));
    CHECK(strcmp(p.ops[1].kind, p.ops[2].kind) != 0);
    CHECK_INT(p.ops[0].output_bytes, 8);
    CHECK_INT(p.ops[2].output_bytes, 0);
    mpress_profile_finish(&p);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    test_bad();
    test_kinds();
    const char *data = getenv("MPRESS_TESTDATA");
    char file[1024];
    snprintf(file, sizeof(file), "%s/pipedream/gnmt.graph.txt", data ? data : "tests/data");
    CHECK(access(file, R_OK) == 0);
    if (access(file, R_OK) == 0)
        test_gnmt(file);
    return check_done();
}
