/* Import of PipeDream profiler graphs (msr-fiddle/pipedream, the profiler's graph.txt files):
 * node lines "ID -- DESCRIPTION -- forward_compute_time=F, backward_compute_time=B,
 * activation_size=A, parameter_size=P" (milliseconds, bytes; A may be a list "[a; b; c]") and
 * edge lines "\tSRC -- DST". The graph becomes a profile in a deterministic topological order
 * so that mpress can plan models measured by someone else. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpress/json.h"
#include "mpress/model.h"
#include "pipedream_internal.h"

struct parser {
    const char *file;
    struct mpress_error *err;
    struct mpress_pipedream_graph *g;
    int cap_nodes, cap_edges;
    char **edge_src, **edge_dst; /* names, resolved once all nodes are known */
};

static int fail_at(struct parser *p, int line, int col, const char *fmt, const char *arg)
{
    return mpress_error_at(p->err, MPRESS_EINPUT, p->file, line, col, "", fmt, arg);
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
}

/* Copies s[0..n) with whitespace runs collapsed to one space and ends trimmed. */
static void collapse(const char *s, size_t n, char *out, size_t size)
{
    size_t k = 0;
    int pending = 0;
    for (size_t i = 0; i < n; i++) {
        if (is_space(s[i])) {
            pending = k > 0;
            continue;
        }
        if (pending && k + 1 < size)
            out[k++] = ' ';
        pending = 0;
        if (k + 1 < size)
            out[k++] = s[i];
    }
    out[k] = '\0';
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when the bytes there are not one
 * (overlong forms, surrogates and code points above U+10FFFF are not). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4, min = 0x10000;
    else
        return 0;
    if (n < len)
        return 0;
    unsigned cp = c & (0x3F >> (len - 1));
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

/* Byte offset of the first byte of s[0..n) that does not start valid UTF-8, or n. */
static size_t utf8_invalid_at(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t k = utf8_len((const unsigned char *)s + i, n - i);
        if (!k)
            return i;
        i += k;
    }
    return n;
}

/* Largest k <= n that does not cut a UTF-8 sequence of s in two. */
static size_t utf8_cut(const char *s, size_t n)
{
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return n;
}

/* A node id: one token without spaces. */
static int valid_id(const char *s, size_t n)
{
    if (n == 0 || n >= sizeof(((struct mpress_pipedream_node *)0)->id))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (is_space(s[i]) || s[i] == '-')
            return 0;
    return 1;
}

/* Parses one real ("12.5") at s; returns the end or NULL. */
static const char *parse_real(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v < 0)
        return NULL;
    *out = v;
    return end;
}

/* Value of activation_size: a real, or "[a; b; ...]" summed (a node with several outputs). */
static const char *parse_activation(const char *s, double *out)
{
    if (*s != '[')
        return parse_real(s, out);
    double sum = 0, v;
    s++;
    for (;;) {
        while (*s == ' ')
            s++;
        if (!(s = parse_real(s, &v)))
            return NULL;
        sum += v;
        while (*s == ' ')
            s++;
        if (*s == ']') {
            *out = sum;
            return s + 1;
        }
        if (*s != ';')
            return NULL;
        s++;
    }
}

static const char *const attr_names[4] = {"forward_compute_time", "backward_compute_time",
                                          "activation_size", "parameter_size"};

static int parse_attrs(struct parser *p, int line, const char *start, const char *s,
                       struct mpress_pipedream_node *nd)
{
    double vals[4];
    int seen[4] = {0, 0, 0, 0};
    for (;;) {
        while (*s == ' ')
            s++;
        const char *eq = strchr(s, '=');
        int col = (int)(s - start) + 1;
        if (!eq)
            return fail_at(p, line, col, "expected NAME=VALUE%s", "");
        int which = -1;
        for (int i = 0; i < 4; i++)
            if ((size_t)(eq - s) == strlen(attr_names[i]) && !strncmp(s, attr_names[i], eq - s))
                which = i;
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)(eq - s < 60 ? eq - s : 60), s);
        if (which < 0)
            return fail_at(p, line, col, "unknown attribute '%s'", name);
        if (seen[which])
            return fail_at(p, line, col, "attribute '%s' given twice", name);
        seen[which] = 1;
        const char *v = eq + 1;
        const char *end = which == 2 ? parse_activation(v, &vals[which])
                                     : parse_real(v, &vals[which]);
        if (!end)
            return fail_at(p, line, (int)(v - start) + 1,
                           "bad value of '%s': expected a non-negative number", name);
        s = end;
        while (*s == ' ' || *s == '\r')
            s++;
        if (*s == '\0' || *s == '\n')
            break;
        if (*s != ',')
            return fail_at(p, line, (int)(s - start) + 1, "expected ',' after '%s'", name);
        s++;
    }
    for (int i = 0; i < 4; i++)
        if (!seen[i])
            return fail_at(p, line, 0, "missing attribute '%s'", attr_names[i]);
    /* Byte counts must stay exact in doubles and 64-bit integers. */
    if (vals[2] > 9e15 || vals[3] > 9e15)
        return fail_at(p, line, 0, "a size above 9e15 bytes is not plausible%s", "");
    nd->fwd_ms = vals[0];
    nd->bwd_ms = vals[1];
    nd->activation_bytes = vals[2];
    nd->parameter_bytes = vals[3];
    return 0;
}

static const char *find_last(const char *s, const char *end, const char *pat)
{
    size_t n = strlen(pat);
    const char *last = NULL;
    for (const char *q = s; q + n <= end; q++)
        if (!memcmp(q, pat, n))
            last = q;
    return last;
}

static int parse_node(struct parser *p, int line, const char *s, const char *end)
{
    const char *a = strstr(s, " -- ");
    const char *b = a ? find_last(s, end, " -- ") : NULL;
    /* b must start after a's separator ends: in "a -- -- b" the two overlap */
    if (!a || !b || b < a + 4 || a >= end || b >= end)
        return fail_at(p, line, 1, "expected 'ID -- DESCRIPTION -- ATTRIBUTES'%s", "");
    if (!valid_id(s, (size_t)(a - s)))
        return fail_at(p, line, 1, "bad node id%s", "");
    struct mpress_pipedream_graph *g = p->g;
    if (g->n_nodes == p->cap_nodes) {
        int cap = p->cap_nodes ? 2 * p->cap_nodes : 64;
        void *nn = realloc(g->nodes, sizeof(*g->nodes) * (size_t)cap);
        if (!nn)
            return mpress_error_set(p->err, MPRESS_ESYSTEM, "out of memory");
        g->nodes = nn;
        p->cap_nodes = cap;
    }
    struct mpress_pipedream_node *nd = &g->nodes[g->n_nodes];
    memset(nd, 0, sizeof(*nd));
    snprintf(nd->id, sizeof(nd->id), "%.*s", (int)(a - s), s);
    const char *d = a + 4;
    char full[4096];
    collapse(d, (size_t)(b - d), full, sizeof(full));
    if (!full[0])
        return fail_at(p, line, (int)(d - s) + 1, "empty description%s", "");
    /* desc is informational and may be cut; kind below keeps long descriptions apart */
    size_t dn = strlen(full) < sizeof(nd->desc) ? strlen(full)
                                                : utf8_cut(full, sizeof(nd->desc) - 1);
    memcpy(nd->desc, full, dn);
    nd->desc[dn] = '\0';
    /* kind (the class the planner groups by) must fit 47 characters: long descriptions keep a
     * prefix and a hash of the whole, so different modules stay different. */
    if (strlen(full) < sizeof(nd->kind)) {
        snprintf(nd->kind, sizeof(nd->kind), "%s", full);
    } else {
        char hex[17];
        mpress_hash_hex(full, strlen(full), hex);
        snprintf(nd->kind, sizeof(nd->kind), "%.*s~%.8s", (int)utf8_cut(full, 38), full, hex);
    }
    nd->line = line;
    int rc = parse_attrs(p, line, s, b + 4, nd);
    if (rc)
        return rc;
    g->n_nodes++;
    return 0;
}

static int parse_edge(struct parser *p, int line, const char *s, const char *end)
{
    const char *t = s;
    while (t < end && is_space(*t))
        t++;
    const char *a = strstr(t, " -- ");
    if (!a || a >= end)
        return fail_at(p, line, (int)(t - s) + 1, "expected 'SRC -- DST'%s", "");
    const char *d = a + 4, *de = end;
    while (de > d && is_space(de[-1]))
        de--;
    if (!valid_id(t, (size_t)(a - t)) || !valid_id(d, (size_t)(de - d)))
        return fail_at(p, line, (int)(t - s) + 1, "expected 'SRC -- DST'%s", "");
    struct mpress_pipedream_graph *g = p->g;
    if (g->n_edges == p->cap_edges) {
        int cap = p->cap_edges ? 2 * p->cap_edges : 64;
        void *ne = realloc(g->edges, sizeof(*g->edges) * (size_t)cap);
        void *ns = realloc(p->edge_src, sizeof(char *) * (size_t)cap);
        if (ns)
            p->edge_src = ns;
        void *nd = realloc(p->edge_dst, sizeof(char *) * (size_t)cap);
        if (nd)
            p->edge_dst = nd;
        if (ne)
            g->edges = ne;
        if (!ne || !ns || !nd)
            return mpress_error_set(p->err, MPRESS_ESYSTEM, "out of memory");
        p->cap_edges = cap;
    }
    int k = g->n_edges;
    p->edge_src[k] = strndup(t, (size_t)(a - t));
    p->edge_dst[k] = strndup(d, (size_t)(de - d));
    g->edges[k].line = line;
    g->edges[k].src = g->edges[k].dst = -1;
    g->n_edges++;
    if (!p->edge_src[k] || !p->edge_dst[k])
        return mpress_error_set(p->err, MPRESS_ESYSTEM, "out of memory");
    return 0;
}

/* Node indices sorted by id (ties by index): duplicates are neighbours and edges resolve by
 * binary search, so a graph of n nodes and e edges loads in O((n + e) log n). */
static const struct mpress_pipedream_node *sort_nodes;

static int cmp_node_id(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    int c = strcmp(sort_nodes[x].id, sort_nodes[y].id);
    return c ? c : (x > y) - (x < y);
}

static int *index_by_id(const struct mpress_pipedream_graph *g)
{
    int *idx = malloc(((size_t)g->n_nodes + 1) * sizeof(int));
    if (!idx)
        return NULL;
    for (int i = 0; i < g->n_nodes; i++)
        idx[i] = i;
    sort_nodes = g->nodes;
    qsort(idx, (size_t)g->n_nodes, sizeof(int), cmp_node_id);
    sort_nodes = NULL;
    return idx;
}

static int find_node(const struct mpress_pipedream_graph *g, const int *by_id, const char *id)
{
    int lo = 0, hi = g->n_nodes;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (strcmp(g->nodes[by_id[mid]].id, id) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < g->n_nodes && !strcmp(g->nodes[by_id[lo]].id, id) ? by_id[lo] : -1;
}

/* The node defined again with the smallest line (the first a line-by-line reader meets), or
 * -1 when every id is unique. */
static int first_duplicate(const struct mpress_pipedream_graph *g, const int *by_id)
{
    int dup = -1;
    for (int k = 1; k < g->n_nodes; k++) {
        int a = by_id[k - 1], b = by_id[k];
        if (strcmp(g->nodes[a].id, g->nodes[b].id) == 0 &&
            (dup < 0 || g->nodes[b].line < g->nodes[dup].line))
            dup = b; /* b > a: the later definition */
    }
    return dup;
}

/* Ordering key: the number in "node<N>", else after all numbered nodes in file order. */
static long node_key(const struct mpress_pipedream_node *n)
{
    if (strncmp(n->id, "node", 4) != 0 || !n->id[4])
        return LONG_MAX;
    char *end;
    errno = 0;
    long v = strtol(n->id + 4, &end, 10);
    return (*end || errno || v < 0) ? LONG_MAX : v;
}

/* Min-heap of ready nodes by (key, index). */
struct heap {
    int *v;
    int n;
    const long *key;
};

static int heap_less(const struct heap *h, int a, int b)
{
    return h->key[a] != h->key[b] ? h->key[a] < h->key[b] : a < b;
}

static void heap_push(struct heap *h, int x)
{
    int i = h->n++;
    while (i > 0 && heap_less(h, x, h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = x;
}

static int heap_pop(struct heap *h)
{
    int top = h->v[0], x = h->v[--h->n], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && heap_less(h, h->v[c + 1], h->v[c]))
            c++;
        if (!heap_less(h, h->v[c], x))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n > 0)
        h->v[i] = x;
    return top;
}

/* Kahn's algorithm taking the ready node of smallest key (then smallest index) each time:
 * O((n + e) log n). */
static int topo_order(struct parser *p)
{
    struct mpress_pipedream_graph *g = p->g;
    int n = g->n_nodes, m = g->n_edges;
    int *indeg = calloc((size_t)n + 1, sizeof(int));
    int *first = calloc((size_t)n + 2, sizeof(int)); /* out-edges of u: adj[first[u]..first[u+1]) */
    int *adj = malloc(((size_t)m + 1) * sizeof(int));
    long *key = calloc((size_t)n + 1, sizeof(long));
    struct heap h = {malloc(((size_t)n + 1) * sizeof(int)), 0, key};
    g->order = calloc((size_t)n + 1, sizeof(int));
    int rc = 0;
    if (!indeg || !first || !adj || !key || !h.v || !g->order) {
        rc = mpress_error_set(p->err, MPRESS_ESYSTEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++)
        key[i] = node_key(&g->nodes[i]);
    for (int e = 0; e < m; e++) {
        indeg[g->edges[e].dst]++;
        first[g->edges[e].src + 1]++;
    }
    for (int u = 0; u < n; u++)
        first[u + 1] += first[u];
    int *fill = calloc((size_t)n + 1, sizeof(int));
    if (!fill) {
        rc = mpress_error_set(p->err, MPRESS_ESYSTEM, "out of memory");
        goto done;
    }
    for (int e = 0; e < m; e++) {
        int u = g->edges[e].src;
        adj[first[u] + fill[u]++] = g->edges[e].dst;
    }
    free(fill);
    for (int i = 0; i < n; i++)
        if (!indeg[i])
            heap_push(&h, i);
    int k = 0;
    for (; k < n && h.n > 0; k++) {
        int best = heap_pop(&h);
        g->order[k] = best;
        indeg[best] = -1; /* done */
        for (int j = first[best]; j < first[best + 1]; j++)
            if (--indeg[adj[j]] == 0)
                heap_push(&h, adj[j]);
    }
    if (k < n) {
        int left = 0;
        while (indeg[left] < 0)
            left++;
        rc = fail_at(p, g->nodes[left].line, 1, "the graph has a cycle: node '%s' is never ready",
                     g->nodes[left].id);
    }
done:
    free(indeg);
    free(first);
    free(adj);
    free(key);
    free(h.v);
    return rc;
}

int mpress_pipedream_load(const char *file, struct mpress_pipedream_graph *out,
                          struct mpress_error *err)
{
    memset(out, 0, sizeof(*out));
    mpress_error_clear(err);
    struct parser p = {file, err, out, 0, 0, NULL, NULL};
    char *text;
    size_t size;
    int rc = mpress_read_file(file, 0, &text, &size, err);
    if (rc)
        return rc;
    int line = 0;
    for (char *buf = text, *next; !rc && buf < text + size; buf = next) {
        line++;
        char *nl = memchr(buf, '\n', (size_t)(text + size - buf));
        next = nl ? nl + 1 : text + size;
        char *end = nl ? nl : text + size;
        if (memchr(buf, '\0', (size_t)(end - buf))) {
            rc = fail_at(&p, line, 0, "not a text file: contains a NUL byte%s", "");
            break;
        }
        size_t bad = utf8_invalid_at(buf, (size_t)(end - buf));
        if (bad < (size_t)(end - buf)) {
            int col = 1;
            for (size_t i = 0; i < bad; i++)
                col += ((unsigned char)buf[i] & 0xC0) != 0x80;
            char what[8];
            snprintf(what, sizeof(what), "0x%02x", (unsigned char)buf[bad]);
            rc = fail_at(&p, line, col, "not UTF-8 text: byte %s", what);
            break;
        }
        while (end > buf && end[-1] == '\r')
            end--;
        *end = '\0';
        const char *t = buf;
        while (t < end && is_space(*t))
            t++;
        if (t == end)
            continue; /* blank line */
        rc = buf[0] == '\t' || buf[0] == ' ' ? parse_edge(&p, line, buf, end)
                                             : parse_node(&p, line, buf, end);
    }
    free(text);
    int *by_id = index_by_id(out);
    if (!by_id) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    } else {
        /* A node defined twice before the first other error is the error to report. */
        int dup = first_duplicate(out, by_id);
        if (dup >= 0 && (!rc || (rc == MPRESS_EINPUT && err->line > out->nodes[dup].line)))
            rc = fail_at(&p, out->nodes[dup].line, 1, "node '%s' defined twice",
                         out->nodes[dup].id);
    }
    if (!rc && out->n_nodes == 0)
        rc = mpress_error_at(err, MPRESS_EINPUT, file, 0, 0, "", "no node lines");
    for (int e = 0; !rc && e < out->n_edges; e++) {
        out->edges[e].src = find_node(out, by_id, p.edge_src[e]);
        out->edges[e].dst = find_node(out, by_id, p.edge_dst[e]);
        const char *missing = out->edges[e].src < 0 ? p.edge_src[e]
                              : out->edges[e].dst < 0 ? p.edge_dst[e]
                                                      : NULL;
        if (missing)
            rc = fail_at(&p, out->edges[e].line, 0, "edge names unknown node '%s'", missing);
    }
    free(by_id);
    for (int e = 0; e < out->n_edges; e++) {
        free(p.edge_src[e]);
        free(p.edge_dst[e]);
    }
    free(p.edge_src);
    free(p.edge_dst);
    if (!rc)
        rc = topo_order(&p);
    if (rc)
        mpress_pipedream_finish(out);
    return rc;
}

void mpress_pipedream_finish(struct mpress_pipedream_graph *g)
{
    if (!g)
        return;
    free(g->nodes);
    free(g->edges);
    free(g->order);
    memset(g, 0, sizeof(*g));
}

/* "dir/gnmt.graph.txt" -> "gnmt" */
static void stem(const char *file, char *out, size_t size)
{
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    snprintf(out, size, "%s", base);
    static const char *const suffixes[] = {".txt", ".graph"};
    for (int i = 0; i < 2; i++) {
        size_t n = strlen(out), k = strlen(suffixes[i]);
        if (n > k && !strcmp(out + n - k, suffixes[i]))
            out[n - k] = '\0';
    }
    /* The name goes into JSON: bytes of a file name that are not UTF-8 become '?'. */
    size_t n = strlen(out);
    for (size_t i = 0; i < n;) {
        size_t k = utf8_len((const unsigned char *)out + i, n - i);
        if (!k) {
            out[i++] = '?';
            continue;
        }
        i += k;
    }
}

int mpress_pipedream_is_input(const struct mpress_pipedream_graph *g, int i)
{
    if (strncmp(g->nodes[i].desc, "Input", 5) != 0)
        return 0;
    for (int e = 0; e < g->n_edges; e++)
        if (g->edges[e].dst == i)
            return 0;
    return 1;
}

int mpress_profile_import_pipedream(const char *file, struct mpress_profile *out,
                                    struct mpress_error *err)
{
    return mpress_profile_import_pipedream_stages(file, 0, out, NULL, err);
}

int mpress_profile_import_pipedream_stages(const char *file, int stages,
                                           struct mpress_profile *out, double *bottleneck_s,
                                           struct mpress_error *err)
{
    struct mpress_pipedream_graph g;
    int rc = mpress_pipedream_load(file, &g, err);
    if (rc)
        return rc;
    double bottleneck = 0;
    if (stages > 0 && (rc = mpress_pipedream_order_stages(&g, stages, file, &bottleneck, err))) {
        mpress_pipedream_finish(&g);
        return rc;
    }
    if (bottleneck_s)
        *bottleneck_s = bottleneck;
    int n = g.n_nodes;
    int *pos = calloc((size_t)n, sizeof(int));
    int *last = calloc((size_t)n, sizeof(int));
    uint64_t *delta = calloc((size_t)n + 1, sizeof(uint64_t));
    struct mpress_op *ops = calloc((size_t)n, sizeof(*ops));
    if (!pos || !last || !ops || !delta) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        goto fail;
    }
    for (int k = 0; k < n; k++)
        pos[g.order[k]] = k;
    /* last[u]: position of u's last consumer (or its own when nothing reads it). */
    for (int i = 0; i < n; i++)
        last[i] = pos[i];
    for (int e = 0; e < g.n_edges; e++) {
        int u = g.edges[e].src, v = g.edges[e].dst;
        if (pos[v] > last[u])
            last[u] = pos[v];
    }
    /* An activation crosses every cut from its producer's position up to (not including) its
     * last consumer's: add it at the first, take it away at the second, sum as k advances. */
    /* The bytes crossing a cut are at most the sum of all activations: that sum must fit the
     * profile's 63-bit sizes (checked before it can pass 2^63: each term is below 9e15). */
    uint64_t total = 0;
    for (int k = 0; k < n; k++) {
        const struct mpress_pipedream_node *nd = &g.nodes[g.order[k]];
        total += (uint64_t)llround(nd->activation_bytes); /* each <= 9e15: cannot wrap */
        if (total > (uint64_t)INT64_MAX) {
            rc = mpress_error_at(err, MPRESS_EINPUT, file, nd->line, 0, "",
                                 "the activations up to node '%s' sum to more than 2^63-1 bytes",
                                 nd->id);
            goto fail;
        }
    }
    for (int u = 0; u < n; u++)
        if (last[u] > pos[u]) {
            uint64_t a = (uint64_t)llround(g.nodes[u].activation_bytes);
            delta[pos[u]] += a;
            delta[last[u]] -= a;
        }
    uint64_t cross = 0;
    for (int k = 0; k < n; k++) {
        const struct mpress_pipedream_node *nd = &g.nodes[g.order[k]];
        struct mpress_op *op = &ops[k];
        snprintf(op->name, sizeof(op->name), "%s", nd->id);
        snprintf(op->kind, sizeof(op->kind), "%s", nd->kind);
        op->layer = -1;
        op->fwd_s = nd->fwd_ms / 1000.0;
        op->bwd_s = nd->bwd_ms / 1000.0;
        /* A model input (a source node described "Input...") is data, not work: the profiler
         * times loading it, which no stage repeats per micro-batch. PipeDream's optimizer
         * (optimizer_graph_hierarchical.py) sets such nodes' times to zero; so does mpress,
         * else the first stage carries that time (635.9 ms on alexnet, 22x its bottleneck). */
        if (mpress_pipedream_is_input(&g, g.order[k])) {
            op->fwd_s = 0;
            op->bwd_s = 0;
        }
        /* PipeDream profiles fp32 PyTorch models: parameters are 4 bytes each; gradients as
         * large; Adam keeps two fp32 moments (the weights are their own master copy). */
        uint64_t pbytes = (uint64_t)llround(nd->parameter_bytes);
        op->params = (pbytes + 2) / 4;
        op->param_bytes = pbytes;
        op->grad_bytes = pbytes;
        op->optim_bytes = 2 * pbytes;
        /* Everything produced at or before k and read after k crosses a cut after k. */
        cross += delta[k];
        op->output_bytes = cross;
        uint64_t abytes = (uint64_t)llround(nd->activation_bytes);
        if (abytes > 0) {
            op->tensors = calloc(1, sizeof(*op->tensors));
            if (!op->tensors) {
                rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
                goto fail;
            }
            op->n_tensors = 1;
            snprintf(op->tensors[0].id, sizeof(op->tensors[0].id), "%s.activation", nd->id);
            snprintf(op->tensors[0].name, sizeof(op->tensors[0].name), "activation");
            op->tensors[0].bytes = abytes;
            op->tensors[0].recompute_s = op->fwd_s;
            op->tensors[0].recompute_op = k;
        }
    }
    mpress_profile_finish(out);
    mpress_profile_init(out);
    snprintf(out->source, sizeof(out->source), "import");
    snprintf(out->device, sizeof(out->device), "unknown");
    stem(file, out->model.name, sizeof(out->model.name));
    snprintf(out->model.family, sizeof(out->model.family), "import");
    out->model.micro_batch = 1;
    snprintf(out->model.dtype, sizeof(out->model.dtype), "fp32");
    snprintf(out->model.optimizer, sizeof(out->model.optimizer), "adam");
    out->n_ops = n;
    out->ops = ops;
    free(pos);
    free(last);
    free(delta);
    mpress_pipedream_finish(&g);
    return 0;
fail:
    if (ops)
        for (int k = 0; k < n; k++)
            free(ops[k].tensors);
    free(ops);
    free(pos);
    free(last);
    free(delta);
    mpress_pipedream_finish(&g);
    return rc;
}
