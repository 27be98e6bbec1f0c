/* Parser of `nvidia-smi topo -m` text dumps: the device matrix (GPU rows and columns, NIC
 * columns), NV# link counts, the PCIe relations PIX/PXB/PHB/NODE/SYS (SOC in old drivers),
 * and the CPU Affinity / NUMA Affinity columns. Colour escapes of newer drivers are skipped. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo_internal.h"

#define MAX_DEVS (2 * MPRESS_MAX_GPUS)
#define MAX_TOKENS (MAX_DEVS + 8)
#define TOKEN_LEN 64

struct token {
    char s[TOKEN_LEN];
    int col; /* 1-based column of its first character */
};

/* Splits one line (up to its '\n') into whitespace-separated tokens; ESC [ ... <letter>
 * sequences are dropped. Returns the token count, or -1 when there are too many. */
static int tokenize(const char *line, struct token *tok, int max)
{
    int n = 0, in = 0;
    size_t len = 0;
    for (int i = 0; line[i] && line[i] != '\n'; i++) {
        char c = line[i];
        if (c == '\x1b' && line[i + 1] == '[') {
            i += 2;
            while (line[i] && line[i] != '\n' && !isalpha((unsigned char)line[i]))
                i++;
            if (!line[i] || line[i] == '\n')
                break;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\r') {
            in = 0;
            continue;
        }
        if (!in) {
            if (n == max)
                return -1;
            in = 1;
            len = 0;
            tok[n].col = i + 1;
            tok[n].s[0] = '\0';
            n++;
        }
        if (len < TOKEN_LEN - 1) {
            tok[n - 1].s[len++] = c;
            tok[n - 1].s[len] = '\0';
        }
    }
    return n;
}

enum rel { REL_SELF, REL_NV, REL_PIX, REL_PXB, REL_PHB, REL_NODE, REL_SYS };

static int parse_rel(const char *s, enum rel *r, int *links)
{
    static const struct {
        const char *name;
        enum rel rel;
    } names[] = {{"X", REL_SELF},    {"PIX", REL_PIX}, {"PXB", REL_PXB}, {"PHB", REL_PHB},
                 {"NODE", REL_NODE}, {"SYS", REL_SYS}, {"SOC", REL_SYS}};
    *links = 0;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(s, names[i].name) == 0) {
            *r = names[i].rel;
            return 0;
        }
    if (s[0] == 'N' && s[1] == 'V' && isdigit((unsigned char)s[2])) {
        char *end;
        long v = strtol(s + 2, &end, 10);
        if (*end || v < 1 || v > 64)
            return -1;
        *r = REL_NV;
        *links = (int)v;
        return 0;
    }
    return -1;
}

static const char *rel_name(enum rel r, int links, char *buf, size_t size)
{
    static const char *const names[] = {"X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS"};
    snprintf(buf, size, "%s", names[r]);
    if (r == REL_NV)
        snprintf(buf, size, "NV%d", links);
    return buf;
}

/* Behind one switch as far as the host uplink goes: PIX (one bridge) or PXB (several bridges
 * short of the host bridge); both share the uplink at the top. */
static int same_switch_rel(enum rel r)
{
    return r == REL_PIX || r == REL_PXB;
}

static int find(int *parent, int i)
{
    while (parent[i] != i)
        i = parent[i] = parent[parent[i]];
    return i;
}

static void unite(int *parent, int a, int b)
{
    a = find(parent, a);
    b = find(parent, b);
    if (a != b)
        parent[a < b ? b : a] = a < b ? a : b;
}

struct smi {
    int n_dev, n_gpus;
    char dev[MAX_DEVS][TOKEN_LEN];
    int gpu_of_dev[MAX_DEVS]; /* GPU index, -1 for a NIC */
    enum rel rel[MAX_DEVS][MAX_DEVS];
    int links[MAX_DEVS][MAX_DEVS];
    char affinity[MPRESS_MAX_GPUS][TOKEN_LEN];
    char numa[MPRESS_MAX_GPUS][TOKEN_LEN];
    int header_line;                /* line number of the header */
    int col_cpu, col_numa, n_extra; /* extra columns after the devices (-1: absent) */
};

static int bad(struct mpress_error *err, const char *file, int line, int col, const char *fmt,
               ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

static int bad(struct mpress_error *err, const char *file, int line, int col, const char *fmt,
               ...)
{
    char text[sizeof(err->text)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    return mpress_error_at(err, MPRESS_EINPUT, file, line, col, NULL, "%s", text);
}

/* The header: the first line that starts with GPU0, tokenized into tok (*nt tokens); *line
 * and *lineno at it. */
static int find_header(const char *file, const char *text, struct token *tok,
                       const char **line_out, int *lineno_out, int *nt_out,
                       struct mpress_error *err)
{
    const char *line = text;
    int lineno = 1, nt = 0;
    for (; *line; lineno++) {
        nt = tokenize(line, tok, MAX_TOKENS);
        if (nt > 0 && strcmp(tok[0].s, "GPU0") == 0)
            break;
        const char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : line + strlen(line);
    }
    if (!*line)
        return mpress_error_at(err, MPRESS_EINPUT, file, 1, 1, NULL,
                               "not a topology dump: no `nvidia-smi topo -m` header line "
                               "(GPU0 GPU1 ...) and not an NCCL topology XML");
    if (nt < 0)
        return mpress_error_at(err, MPRESS_EINPUT, file, lineno, 1, NULL,
                               "header names more than %d devices", MAX_DEVS);
    *line_out = line;
    *lineno_out = lineno;
    *nt_out = nt;
    return 0;
}

/* The header's columns (tokens tok[0..nt-1] of line lineno): the devices, GPUs numbered
 * from 0, then the affinity columns. */
static int read_header(const char *file, const struct token *tok, int nt, int lineno,
                       struct smi *m, struct mpress_error *err)
{
    m->header_line = lineno;
    int t = 0;
    while (t < nt && strcmp(tok[t].s, "CPU") != 0 && strcmp(tok[t].s, "NUMA") != 0 &&
           !(strcmp(tok[t].s, "GPU") == 0 && t + 1 < nt && strcmp(tok[t + 1].s, "NUMA") == 0)) {
        if (m->n_dev == MAX_DEVS)
            return mpress_error_at(err, MPRESS_EINPUT, file, lineno, tok[t].col, NULL,
                                   "header names more than %d devices", MAX_DEVS);
        snprintf(m->dev[m->n_dev], TOKEN_LEN, "%s", tok[t].s);
        char *end;
        if (strncmp(tok[t].s, "GPU", 3) == 0 && isdigit((unsigned char)tok[t].s[3])) {
            long g = strtol(tok[t].s + 3, &end, 10);
            if (*end || g != m->n_gpus)
                return bad(err, file, lineno, tok[t].col, "expected column 'GPU%d', found '%s'",
                           m->n_gpus, tok[t].s);
            if (m->n_gpus == MPRESS_MAX_GPUS)
                return mpress_error_at(err, MPRESS_EINPUT, file, lineno, tok[t].col, NULL,
                                       "more than %d GPUs", MPRESS_MAX_GPUS);
            m->gpu_of_dev[m->n_dev] = m->n_gpus++;
        } else {
            m->gpu_of_dev[m->n_dev] = -1;
        }
        m->n_dev++;
        t++;
    }
    /* Columns after the devices, in the order the driver prints them. */
    m->col_cpu = -1, m->col_numa = -1, m->n_extra = 0;
    while (t < nt) {
        if (t + 1 < nt && strcmp(tok[t].s, "CPU") == 0 && strcmp(tok[t + 1].s, "Affinity") == 0) {
            m->col_cpu = m->n_extra++;
            t += 2;
        } else if (t + 1 < nt && strcmp(tok[t].s, "NUMA") == 0 &&
                   strcmp(tok[t + 1].s, "Affinity") == 0) {
            m->col_numa = m->n_extra++;
            t += 2;
        } else if (t + 2 < nt && strcmp(tok[t].s, "GPU") == 0 &&
                   strcmp(tok[t + 1].s, "NUMA") == 0 && strcmp(tok[t + 2].s, "ID") == 0) {
            m->n_extra++;
            t += 3;
        } else {
            return bad(err, file, lineno, tok[t].col, "unknown header column '%s'", tok[t].s);
        }
    }
    return 0;
}

/* One row per device, in the header's order, after the header at line: each entry known,
 * X only on the diagonal, NV# only between GPUs, and the matrix symmetric. */
static int read_rows(const char *file, const char *line, int lineno, struct token *tok,
                     struct smi *m, struct mpress_error *err)
{
    for (int r = 0; r < m->n_dev; r++) {
        const char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : line + strlen(line);
        lineno++;
        int nt = *line ? tokenize(line, tok, MAX_TOKENS) : 0;
        if (nt <= 0 || strcmp(tok[0].s, "Legend:") == 0)
            return bad(err, file, lineno, 1, "the matrix ends after %d of %d rows: expected row "
                       "'%s'", r, m->n_dev, m->dev[r]);
        if (strcmp(tok[0].s, m->dev[r]) != 0)
            return bad(err, file, lineno, tok[0].col, "expected row '%s', found '%s'", m->dev[r],
                       tok[0].s);
        int g = m->gpu_of_dev[r];
        int want = 1 + m->n_dev + (g >= 0 ? m->n_extra : 0);
        /* NIC rows carry no affinity columns; tolerate them either way. */
        if (nt != want && !(g < 0 && nt == 1 + m->n_dev + m->n_extra))
            return bad(err, file, lineno, tok[nt > want ? want : 0].col,
                       "row '%s' has %d entries where the header (line %d) gives %d", m->dev[r],
                       nt - 1, m->header_line, want - 1);
        for (int c = 0; c < m->n_dev; c++) {
            const struct token *k = &tok[1 + c];
            if (parse_rel(k->s, &m->rel[r][c], &m->links[r][c]) != 0)
                return bad(err, file, lineno, k->col,
                           "unknown entry '%s' (expected X, NV#, PIX, PXB, PHB, NODE or SYS)",
                           k->s);
            if ((m->rel[r][c] == REL_SELF) != (r == c))
                return bad(err, file, lineno, k->col, "entry '%s' for %s", k->s,
                           r == c ? "a device and itself (expected X)"
                                  : "two different devices (X means the same one)");
            if (m->rel[r][c] == REL_NV && (g < 0 || m->gpu_of_dev[c] < 0))
                return bad(err, file, lineno, k->col, "NVLink entry '%s' between %s", k->s,
                           "a GPU and a device that is not a GPU");
            /* Symmetric: the row of the other device, already read, must agree. */
            if (c < r && (m->rel[r][c] != m->rel[c][r] || m->links[r][c] != m->links[c][r])) {
                char other[16];
                return bad(err, file, lineno, k->col,
                           "entry '%s' disagrees with row '%s', which has '%s' for '%s'", k->s,
                           m->dev[c], rel_name(m->rel[c][r], m->links[c][r], other, sizeof(other)),
                           m->dev[r]);
            }
        }
        if (g >= 0 && m->col_cpu >= 0)
            snprintf(m->affinity[g], TOKEN_LEN, "%s", tok[1 + m->n_dev + m->col_cpu].s);
        if (g >= 0 && m->col_numa >= 0)
            snprintf(m->numa[g], TOKEN_LEN, "%s", tok[1 + m->n_dev + m->col_numa].s);
    }
    if (m->n_gpus == 0)
        return mpress_error_at(err, MPRESS_EINPUT, file, m->header_line, 1, NULL,
                               "no GPU columns");
    return 0;
}

/* What the matrix says of the GPUs: their links, PCIe switches (union of PIX/PXB
 * relations), sockets and which switches the NVLink entries hide. */
static void fill_raw(const struct smi *m, struct topo_raw *raw, char *notes, size_t notes_size)
{
    /* Links between GPUs. */
    raw->n_gpus = m->n_gpus;
    int gdev[MPRESS_MAX_GPUS];
    for (int d = 0; d < m->n_dev; d++)
        if (m->gpu_of_dev[d] >= 0)
            gdev[m->gpu_of_dev[d]] = d;
    for (int i = 0; i < m->n_gpus; i++)
        for (int j = 0; j < m->n_gpus; j++)
            raw->links[i][j] = m->links[gdev[i]][gdev[j]];

    /* Switches: devices related by PIX/PXB share one, NICs included (two GPUs PIX to the same
     * NIC sit behind the switch that NIC sits behind). */
    int parent[MAX_DEVS];
    for (int d = 0; d < m->n_dev; d++)
        parent[d] = d;
    for (int a = 0; a < m->n_dev; a++)
        for (int b = 0; b < a; b++)
            if (same_switch_rel(m->rel[a][b]))
                unite(parent, a, b);

    /* Sockets: one per distinct CPU affinity, else NUMA affinity, else what the PCIe
     * relations short of SYS connect. */
    int use_aff = m->col_cpu >= 0, use_numa = m->col_numa >= 0;
    for (int i = 0; i < m->n_gpus; i++) {
        if (strcmp(m->affinity[i], "N/A") == 0 || !m->affinity[i][0])
            use_aff = 0;
        if (strcmp(m->numa[i], "N/A") == 0 || !m->numa[i][0])
            use_numa = 0;
    }
    int sparent[MAX_DEVS];
    for (int d = 0; d < m->n_dev; d++)
        sparent[d] = d;
    for (int a = 0; a < m->n_dev; a++)
        for (int b = 0; b < a; b++)
            if (m->rel[a][b] != REL_SYS && m->rel[a][b] != REL_NV)
                unite(sparent, a, b);
    for (int i = 0; i < m->n_gpus; i++) {
        int s = find(sparent, gdev[i]);
        if (use_aff || use_numa)
            for (int k = 0; k <= i; k++)
                if (strcmp(use_aff ? m->affinity[k] : m->numa[k],
                           use_aff ? m->affinity[i] : m->numa[i]) == 0) {
                    s = k;
                    break;
                }
        raw->socket_of[i] = s;
    }
    if (!use_aff && !use_numa)
        topo_note(notes, notes_size, "no CPU affinity in the dump: sockets inferred from the "
                  "PCIe relations (SYS between sockets)\n");

    /* A GPU's switch is unknown when an NV# entry hides its PCIe relation to a GPU on the same
     * socket and no third device tells them apart (PIX/PXB to one of them, not the other). */
    for (int i = 0; i < m->n_gpus; i++) {
        int a = gdev[i];
        raw->switch_of[i] = find(parent, a);
        raw->uplink_of[i] = 0;
        raw->switch_known[i] = 1;
        for (int j = 0; j < m->n_gpus; j++) {
            int b = gdev[j];
            if (i == j || m->rel[a][b] != REL_NV || raw->socket_of[i] != raw->socket_of[j] ||
                find(parent, a) == find(parent, b))
                continue;
            int apart = 0;
            for (int k = 0; k < m->n_dev && !apart; k++)
                if (m->rel[a][k] != REL_NV && m->rel[b][k] != REL_NV && k != a && k != b &&
                    same_switch_rel(m->rel[a][k]) != same_switch_rel(m->rel[b][k]))
                    apart = 1;
            if (!apart)
                raw->switch_known[i] = 0;
        }
    }
    raw->spec = NULL;
    raw->pcie_bytes_per_s = 0;
}

int topo_parse_smi(const char *file, const char *text, struct topo_raw *raw, char *notes,
                   size_t notes_size, struct mpress_error *err)
{
    struct smi *m = calloc(1, sizeof(*m));
    struct token *tok = calloc(MAX_TOKENS, sizeof(*tok));
    int rc = MPRESS_EINPUT;
    if (!m || !tok) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        goto done;
    }
    const char *line = text;
    int lineno = 1, nt = 0;
    rc = find_header(file, text, tok, &line, &lineno, &nt, err);
    if (!rc)
        rc = read_header(file, tok, nt, lineno, m, err);
    if (!rc)
        rc = read_rows(file, line, lineno, tok, m, err);
    if (!rc)
        fill_raw(m, raw, notes, notes_size);
done:
    free(m);
    free(tok);
    return rc;
}
