/* Parser of NCCL topology XML dumps (what NCCL_TOPO_DUMP_FILE writes): a small tolerant XML
 * reader (elements, attributes, comments, declarations; text content is ignored), then the
 * NCCL tree: <system> <cpu numaid> <pci busid class device link_speed link_width> ... <gpu dev>
 * <nvlink target count tclass>. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo_internal.h"

#define XML_NAME 32
#define XML_VALUE 256
#define XML_ATTRS 24
#define XML_MAX_NODES 20000
#define XML_MAX_DEPTH 64

struct xattr {
    char name[XML_NAME];
    char value[XML_VALUE];
};

struct xnode {
    char name[XML_NAME];
    int line, col;
    int n_attr;
    struct xattr attr[XML_ATTRS];
    struct xnode *parent, *first, *last, *next;
};

struct xparser {
    const char *file, *text;
    size_t pos;
    /* line/column of pos_lc, advanced monotonically so positions cost O(length) in all */
    size_t pos_lc;
    int line, col;
    struct xnode **nodes;
    int n_nodes;
    struct mpress_error *err;
};

static void where(struct xparser *p, size_t pos, int *line, int *col)
{
    while (p->pos_lc < pos) {
        if (p->text[p->pos_lc] == '\n') {
            p->line++;
            p->col = 1;
        } else {
            p->col++;
        }
        p->pos_lc++;
    }
    *line = p->line;
    *col = p->col;
}

static int xfail(struct xparser *p, size_t pos, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static int xfail(struct xparser *p, size_t pos, const char *fmt, ...)
{
    char text[sizeof(p->err->text)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    int line, col;
    where(p, pos, &line, &col);
    return mpress_error_at(p->err, MPRESS_EINPUT, p->file, line, col, NULL, "%s", text);
}

static int is_name_start(int c)
{
    return isalpha(c) || c == '_' || c == ':';
}

static int is_name_char(int c)
{
    return isalnum(c) || c == '_' || c == ':' || c == '-' || c == '.';
}

static void skip_ws(struct xparser *p)
{
    while (p->text[p->pos] && isspace((unsigned char)p->text[p->pos]))
        p->pos++;
}

static int read_name(struct xparser *p, char *out, const char *what)
{
    size_t start = p->pos;
    if (!is_name_start((unsigned char)p->text[p->pos]))
        return xfail(p, p->pos, "expected %s name", what);
    while (is_name_char((unsigned char)p->text[p->pos]))
        p->pos++;
    if (p->pos - start >= XML_NAME)
        return xfail(p, start, "%s name longer than %d characters", what, XML_NAME - 1);
    memcpy(out, p->text + start, p->pos - start);
    out[p->pos - start] = '\0';
    return 0;
}

/* Attribute value with the five predefined entities and numeric character references below
 * 128 decoded. */
static int read_value(struct xparser *p, char *out)
{
    char q = p->text[p->pos];
    if (q != '"' && q != '\'')
        return xfail(p, p->pos, "expected a quoted attribute value");
    size_t start = ++p->pos, n = 0;
    static const struct {
        const char *ent;
        char c;
    } ents[] = {{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    while (p->text[p->pos] != q) {
        if (!p->text[p->pos])
            return xfail(p, start - 1, "attribute value not closed");
        char c = p->text[p->pos];
        size_t adv = 1;
        if (c == '&') {
            size_t k;
            for (k = 0; k < sizeof(ents) / sizeof(ents[0]); k++)
                if (strncmp(p->text + p->pos, ents[k].ent, strlen(ents[k].ent)) == 0)
                    break;
            if (k < sizeof(ents) / sizeof(ents[0])) {
                c = ents[k].c;
                adv = strlen(ents[k].ent);
            } else if (p->text[p->pos + 1] == '#') {
                char *end;
                int hex = p->text[p->pos + 2] == 'x';
                long v = strtol(p->text + p->pos + 2 + hex, &end, hex ? 16 : 10);
                if (*end != ';' || v < 1 || v > 127)
                    return xfail(p, p->pos, "unsupported character reference");
                c = (char)v;
                adv = (size_t)(end + 1 - (p->text + p->pos));
            } else {
                return xfail(p, p->pos, "unknown entity");
            }
        }
        if (n + 1 >= XML_VALUE)
            return xfail(p, start, "attribute value longer than %d characters", XML_VALUE - 1);
        out[n++] = c;
        p->pos += adv;
    }
    out[n] = '\0';
    p->pos++;
    return 0;
}

static int skip_past(struct xparser *p, const char *end, const char *what)
{
    size_t start = p->pos;
    const char *e = strstr(p->text + p->pos, end);
    if (!e)
        return xfail(p, start, "%s not closed", what);
    p->pos = (size_t)(e - p->text) + strlen(end);
    return 0;
}

/* Parses the whole text; *root is the one top-level element. */
static int xml_parse(struct xparser *p, struct xnode **root)
{
    struct xnode *cur = NULL;
    int depth = 0;
    *root = NULL;
    for (;;) {
        while (p->text[p->pos] && p->text[p->pos] != '<') {
            if (!cur && !isspace((unsigned char)p->text[p->pos]))
                return xfail(p, p->pos, "text outside the root element");
            p->pos++;
        }
        if (!p->text[p->pos])
            break;
        size_t lt = p->pos;
        const char *s = p->text + p->pos;
        if (strncmp(s, "<?", 2) == 0) {
            if (skip_past(p, "?>", "declaration"))
                return MPRESS_EINPUT;
            continue;
        }
        if (strncmp(s, "<!--", 4) == 0) {
            if (skip_past(p, "-->", "comment"))
                return MPRESS_EINPUT;
            continue;
        }
        if (strncmp(s, "<!", 2) == 0) {
            if (skip_past(p, ">", "declaration"))
                return MPRESS_EINPUT;
            continue;
        }
        if (s[1] == '/') {
            char name[XML_NAME];
            p->pos += 2;
            if (read_name(p, name, "closing tag"))
                return MPRESS_EINPUT;
            skip_ws(p);
            if (p->text[p->pos] != '>')
                return xfail(p, p->pos, "expected '>' to end </%s>", name);
            p->pos++;
            if (!cur)
                return xfail(p, lt, "closing tag </%s> without an open element", name);
            if (strcmp(name, cur->name) != 0)
                return xfail(p, lt, "closing tag </%s> does not match <%s> opened at line %d",
                             name, cur->name, cur->line);
            cur = cur->parent;
            depth--;
            continue;
        }
        if (!cur && *root)
            return xfail(p, lt, "a second root element");
        if (p->n_nodes == XML_MAX_NODES)
            return xfail(p, lt, "more than %d elements", XML_MAX_NODES);
        struct xnode *x = calloc(1, sizeof(*x));
        if (!x)
            return mpress_error_set(p->err, MPRESS_ESYSTEM, "out of memory");
        p->nodes[p->n_nodes++] = x;
        where(p, lt, &x->line, &x->col);
        p->pos++;
        if (read_name(p, x->name, "element"))
            return MPRESS_EINPUT;
        x->parent = cur;
        if (cur) {
            if (cur->last)
                cur->last->next = x;
            else
                cur->first = x;
            cur->last = x;
        } else {
            *root = x;
        }
        for (;;) {
            size_t before = p->pos;
            skip_ws(p);
            char c = p->text[p->pos];
            if (c == '/' && p->text[p->pos + 1] == '>') {
                p->pos += 2;
                break;
            }
            if (c == '>') {
                p->pos++;
                if (++depth > XML_MAX_DEPTH)
                    return xfail(p, lt, "elements nested deeper than %d", XML_MAX_DEPTH);
                cur = x;
                break;
            }
            if (!c)
                return xfail(p, lt, "tag <%s> not closed", x->name);
            if (p->pos == before)
                return xfail(p, p->pos, "expected white space before an attribute");
            if (x->n_attr == XML_ATTRS)
                return xfail(p, p->pos, "more than %d attributes", XML_ATTRS);
            struct xattr *a = &x->attr[x->n_attr];
            if (read_name(p, a->name, "attribute"))
                return MPRESS_EINPUT;
            skip_ws(p);
            if (p->text[p->pos] != '=')
                return xfail(p, p->pos, "expected '=' after attribute '%s'", a->name);
            p->pos++;
            skip_ws(p);
            if (read_value(p, a->value))
                return MPRESS_EINPUT;
            for (int k = 0; k < x->n_attr; k++)
                if (strcmp(x->attr[k].name, a->name) == 0)
                    return xfail(p, lt, "attribute '%s' twice in <%s>", a->name, x->name);
            x->n_attr++;
        }
    }
    if (cur)
        return xfail(p, p->pos, "element <%s> opened at line %d is not closed", cur->name,
                     cur->line);
    if (!*root)
        return xfail(p, 0, "no XML element");
    return 0;
}

static const char *attr(const struct xnode *x, const char *name)
{
    for (int i = 0; i < x->n_attr; i++)
        if (strcmp(x->attr[i].name, name) == 0)
            return x->attr[i].value;
    return NULL;
}

/* ---- the NCCL tree ------------------------------------------------------------------------ */

struct nccl {
    const char *file;
    struct mpress_error *err;
    int n_gpus;
    const struct xnode *gpu[MPRESS_MAX_GPUS];   /* by dev */
    const struct xnode *gpu_pci[MPRESS_MAX_GPUS];
    char busid[MPRESS_MAX_GPUS][XML_VALUE];     /* normalised */
    int numa[MPRESS_MAX_GPUS];
    const struct xnode *uplink_bridge[MPRESS_MAX_GPUS]; /* outermost PCIe bridge, or NULL */
    char *notes;
    size_t notes_size;
};

static int nfail(struct nccl *c, const struct xnode *x, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static int nfail(struct nccl *c, const struct xnode *x, const char *fmt, ...)
{
    char text[sizeof(c->err->text)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    return mpress_error_at(c->err, MPRESS_EINPUT, c->file, x ? x->line : 0, x ? x->col : 0,
                           NULL, "%s", text);
}

/* Bus ids compare without case and without the PCI domain ("0000:07:00.0" = "07:00.0"). */
static void norm_busid(const char *in, char *out, size_t size)
{
    const char *s = in;
    int colons = 0;
    for (const char *q = in; *q; q++)
        colons += *q == ':';
    if (colons == 2)
        s = strchr(in, ':') + 1;
    size_t n = 0;
    for (; *s && n + 1 < size; s++)
        out[n++] = (char)tolower((unsigned char)*s);
    out[n] = '\0';
}

static int parse_int_attr(struct nccl *c, const struct xnode *x, const char *name, int base,
                          long min, long max, long *out)
{
    const char *v = attr(x, name);
    if (!v)
        return nfail(c, x, "<%s> has no '%s' attribute", x->name, name);
    char *end;
    long r = strtol(v, &end, base);
    if (!*v || *end || r < min || r > max)
        return nfail(c, x, "<%s> attribute %s=\"%s\": expected an integer in [%ld, %ld]",
                     x->name, name, v, min, max);
    *out = r;
    return 0;
}

/* link_speed "8 GT/s", "16.0 GT/s PCIe" and link_width "16" to bytes/s in *out; 0 when absent
 * or of a speed the table does not know, and link_width "0" (unknown). A width that is not a
 * PCIe link's (an integer up to 32) is an error, not a rate. */
static int pci_rate(struct nccl *c, const struct xnode *x, double *out)
{
    *out = 0;
    const char *sp = attr(x, "link_speed"), *wd = attr(x, "link_width");
    if (!sp || !wd)
        return 0;
    long w;
    if (parse_int_attr(c, x, "link_width", 10, 0, 32, &w))
        return MPRESS_EINPUT;
    char *end;
    double gts = strtod(sp, &end);
    if (end != sp && w > 0)
        *out = topo_pcie_bytes_per_s(gts, (int)w);
    return 0;
}

static int is_bridge(const struct xnode *x)
{
    const char *cls = attr(x, "class");
    return cls && strncmp(cls, "0x0604", 6) == 0;
}

/* numa: the enclosing <cpu>'s numaid (-1 where the kernel reports no NUMA node), or NO_CPU. */
#define NO_CPU (-2)

static int walk(struct nccl *c, const struct xnode *x, int numa)
{
    if (strcmp(x->name, "cpu") == 0) {
        long v;
        if (parse_int_attr(c, x, "numaid", 10, -1, 1 << 20, &v))
            return MPRESS_EINPUT;
        numa = (int)v;
    }
    if (strcmp(x->name, "gpu") == 0) {
        long dev;
        if (parse_int_attr(c, x, "dev", 10, 0, MPRESS_MAX_GPUS - 1, &dev))
            return MPRESS_EINPUT;
        if (c->gpu[dev])
            return nfail(c, x, "GPU dev=\"%ld\" appears twice (also at line %d)", dev,
                         c->gpu[dev]->line);
        const struct xnode *pci = x->parent;
        if (!pci || strcmp(pci->name, "pci") != 0 || !attr(pci, "busid"))
            return nfail(c, x, "<gpu dev=\"%ld\"> is not inside a <pci busid=...> element",
                         dev);
        if (numa == NO_CPU)
            return nfail(c, x, "<gpu dev=\"%ld\"> is not inside a <cpu numaid=...> element",
                         dev);
        c->gpu[dev] = x;
        c->gpu_pci[dev] = pci;
        norm_busid(attr(pci, "busid"), c->busid[dev], sizeof(c->busid[dev]));
        c->numa[dev] = numa;
        const struct xnode *top = NULL;
        for (const struct xnode *a = pci->parent; a && strcmp(a->name, "pci") == 0; a = a->parent)
            if (is_bridge(a))
                top = a;
        c->uplink_bridge[dev] = top;
        if (dev + 1 > c->n_gpus)
            c->n_gpus = (int)dev + 1;
    }
    for (const struct xnode *k = x->first; k; k = k->next)
        if (walk(c, k, numa))
            return MPRESS_EINPUT;
    return 0;
}

int topo_parse_nccl_xml(const char *file, const char *text, struct topo_raw *raw, char *notes,
                        size_t notes_size, struct mpress_error *err)
{
    struct xparser p = {.file = file, .text = text, .line = 1, .col = 1, .err = err};
    struct nccl *c = calloc(1, sizeof(*c));
    p.nodes = calloc(XML_MAX_NODES, sizeof(*p.nodes));
    int rc = MPRESS_EINPUT;
    if (!c || !p.nodes) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        goto done;
    }
    c->file = file;
    c->err = err;
    c->notes = notes;
    c->notes_size = notes_size;
    struct xnode *root;
    if (xml_parse(&p, &root))
        goto done;
    if (strcmp(root->name, "system") != 0) {
        rc = nfail(c, root, "not an NCCL topology dump: the root element is <%s>, not <system>",
                   root->name);
        goto done;
    }
    if (walk(c, root, NO_CPU))
        goto done;
    if (c->n_gpus == 0) {
        rc = nfail(c, root, "no <gpu> element in the dump");
        goto done;
    }
    for (int i = 0; i < c->n_gpus; i++)
        if (!c->gpu[i]) {
            rc = nfail(c, root, "GPUs are numbered up to dev=\"%d\" but dev=\"%d\" is missing",
                       c->n_gpus - 1, i);
            goto done;
        }
    for (int i = 0; i < c->n_gpus; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(c->busid[i], c->busid[j]) == 0) {
                rc = nfail(c, c->gpu_pci[i], "GPUs %d and %d have the same busid '%s'", j, i,
                           c->busid[i]);
                goto done;
            }

    raw->n_gpus = c->n_gpus;
    int ignored = 0;
    for (int i = 0; i < c->n_gpus; i++) {
        int nvswitch = 0;
        for (const struct xnode *l = c->gpu[i]->first; l; l = l->next) {
            if (strcmp(l->name, "nvlink") != 0)
                continue;
            long count;
            if (parse_int_attr(c, l, "count", 10, 1, 64, &count))
                goto done;
            const char *target = attr(l, "target");
            if (!target) {
                rc = nfail(c, l, "<nvlink> has no 'target' attribute");
                goto done;
            }
            char t[XML_VALUE];
            norm_busid(target, t, sizeof(t));
            int peer = -1;
            for (int j = 0; j < c->n_gpus; j++)
                if (strcmp(c->busid[j], t) == 0)
                    peer = j;
            const char *tclass = attr(l, "tclass");
            if (peer == i) {
                rc = nfail(c, l, "GPU %d has an NVLink to itself", i);
                goto done;
            } else if (peer >= 0) {
                raw->links[i][peer] += (int)count;
            } else if (tclass && strcmp(tclass, "0x068000") == 0) {
                /* NCCL gives NVSwitch links the class of an "other bridge" device. */
                nvswitch += (int)count;
            } else {
                ignored += (int)count;
            }
        }
        if (i > 0 && (nvswitch > 0) != (raw->nvswitch_ports > 0)) {
            rc = nfail(c, c->gpu[i], "GPU %d has %d NVSwitch links, GPU 0 has %d", i, nvswitch,
                       raw->nvswitch_ports);
            goto done;
        }
        if (i == 0 || nvswitch < raw->nvswitch_ports)
            raw->nvswitch_ports = nvswitch;
    }
    for (int i = 0; i < c->n_gpus; i++)
        for (int j = 0; j < i; j++)
            if (raw->links[i][j] != raw->links[j][i]) {
                rc = nfail(c, c->gpu[i], "GPU %d lists %d NVLinks to GPU %d, which lists %d "
                           "back", i, raw->links[i][j], j, raw->links[j][i]);
                goto done;
            }
    if (ignored)
        topo_note(notes, notes_size, "%d NVLinks to devices that are neither GPUs of the "
                  "dump nor NVSwitches (CPUs, GPUs left out of the dump) are left out\n",
                  ignored);

    /* Sockets by NUMA id; switches by the outermost PCIe bridge above each GPU. */
    for (int i = 0; i < c->n_gpus; i++) {
        raw->socket_of[i] = c->numa[i];
        raw->switch_known[i] = 1;
        const struct xnode *b = c->uplink_bridge[i];
        raw->switch_of[i] = i;
        for (int j = 0; j < i; j++)
            if (b && c->uplink_bridge[j] == b)
                raw->switch_of[i] = raw->switch_of[j];
        if ((rc = pci_rate(c, b ? b : c->gpu_pci[i], &raw->uplink_of[i])) != 0)
            goto done;
    }
    if ((rc = pci_rate(c, c->gpu_pci[0], &raw->pcie_bytes_per_s)) != 0)
        goto done;

    /* The GPU model from the PCI device id. */
    const char *devid = attr(c->gpu_pci[0], "device");
    raw->spec = NULL;
    if (devid) {
        unsigned id = (unsigned)strtoul(devid, NULL, 16);
        raw->spec = topo_gpu_spec_by_pci_id(id);
        for (int i = 1; i < c->n_gpus; i++) {
            const char *d = attr(c->gpu_pci[i], "device");
            if (!d || strtoul(d, NULL, 16) != id) {
                rc = nfail(c, c->gpu_pci[i], "GPU %d has PCI device id %s, GPU 0 has %s: mixed "
                           "GPU models are not supported", i, d ? d : "(none)", devid);
                goto done;
            }
        }
        if (!raw->spec)
            topo_note(notes, notes_size, "PCI device id %s is not in the GPU table\n", devid);
    }
    rc = MPRESS_OK;
done:
    if (p.nodes)
        for (int i = 0; i < p.n_nodes; i++)
            free(p.nodes[i]);
    free(p.nodes);
    free(c);
    return rc;
}
