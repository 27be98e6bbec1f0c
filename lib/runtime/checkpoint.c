/* Checkpoints: an 8-byte magic, a little-endian 64-bit header length, a JSON header (model
 * config, step, seed, and one entry per owned weight with the offset of its data) and the raw
 * tensors. Layout: docs/formats.md, "Checkpoint". Written whole to a temporary file and renamed,
 * so a failed run never leaves a truncated file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "mpress/json.h"
#include "runtime_internal.h"

static const char magic[8] = {'M', 'P', 'R', 'E', 'S', 'S', 'C', 'K'};

struct part {
    const char *name;
    void *p;
    uint64_t bytes;
};

/* The stored parts of an owned parameter, in file order. */
static int parts_of(const struct mpress_host_param *p, struct part out[4])
{
    int n = 0;
    uint64_t n4 = p->n * sizeof(float);
    out[n++] = (struct part){"weights", p->w, p->n * (uint64_t)mpress_dtype_size(p->dtype)};
    if (p->master)
        out[n++] = (struct part){"master", p->master, n4};
    if (p->m)
        out[n++] = (struct part){"momentum", p->m, n4};
    if (p->v)
        out[n++] = (struct part){"variance", p->v, n4};
    return n;
}

static json_t *header(const struct mpress_model *m, const struct mpress_host_params *ps,
                      uint32_t step, uint64_t seed, uint64_t *data_bytes)
{
    const struct mpress_model_config *c = &m->config;
    json_t *root = json_object(), *model = json_object(), *ts = json_array();
    json_object_set_new(root, "format", json_string(MPRESS_CHECKPOINT_FORMAT));
    json_object_set_new(root, "version", json_integer(MPRESS_CHECKPOINT_VERSION));
    json_object_set_new(root, "step", json_integer(step));
    char sd[24];
    snprintf(sd, sizeof(sd), "%llu", (unsigned long long)seed);
    json_object_set_new(root, "seed", json_string(sd));
    json_object_set_new(model, "name", json_string(c->name));
    json_object_set_new(model, "family", json_string(c->family));
    json_object_set_new(model, "layers", json_integer(c->layers));
    json_object_set_new(model, "hidden", json_integer(c->hidden));
    json_object_set_new(model, "heads", json_integer(c->heads));
    json_object_set_new(model, "ffn", json_integer(c->ffn));
    json_object_set_new(model, "seq", json_integer(c->seq));
    json_object_set_new(model, "vocab", json_integer(c->vocab));
    json_object_set_new(model, "micro_batch", json_integer(c->micro_batch));
    json_object_set_new(model, "dtype", json_string(c->dtype));
    json_object_set_new(model, "optimizer", json_string(c->optimizer));
    json_object_set_new(model, "flash_attention", json_boolean(c->flash_attention));
    json_object_set_new(root, "model", model);
    uint64_t off = 0;
    for (int i = 0; i < ps->n; i++) {
        const struct mpress_host_param *p = &ps->p[i];
        if (p->owner >= 0)
            continue;
        struct part pt[4];
        int np = parts_of(p, pt);
        json_t *t = json_object(), *names = json_array();
        json_object_set_new(t, "op", json_string(m->ops[p->op].name));
        json_object_set_new(t, "weight", json_string(m->ops[p->op].weights[p->index].role));
        json_object_set_new(t, "dtype", json_string(mpress_dtype_name(p->dtype)));
        json_object_set_new(t, "elements", json_integer((json_int_t)p->n));
        json_object_set_new(t, "offset", json_integer((json_int_t)off));
        for (int k = 0; k < np; k++) {
            json_array_append_new(names, json_string(pt[k].name));
            off += pt[k].bytes;
        }
        json_object_set_new(t, "parts", names);
        json_array_append_new(ts, t);
    }
    json_object_set_new(root, "tensors", ts);
    *data_bytes = off;
    return root;
}

int mpress_checkpoint_save(const char *file, const struct mpress_model *m,
                           const struct mpress_host_params *ps, uint32_t step, uint64_t seed,
                           struct mpress_error *err)
{
    uint64_t data = 0;
    json_t *root = header(m, ps, step, seed, &data);
    char *h = root ? json_dumps(root, JSON_SORT_KEYS | JSON_COMPACT) : NULL;
    json_decref(root);
    if (!h)
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
    uint64_t hl = strlen(h);
    size_t total = 16 + (size_t)hl + (size_t)data;
    char *buf = malloc(total);
    if (!buf) {
        free(h);
        return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory for a %zu-byte checkpoint",
                                total);
    }
    memcpy(buf, magic, 8);
    for (int i = 0; i < 8; i++)
        buf[8 + i] = (char)((hl >> (8 * i)) & 0xff);
    memcpy(buf + 16, h, (size_t)hl);
    free(h);
    char *d = buf + 16 + hl;
    for (int i = 0; i < ps->n; i++) {
        if (ps->p[i].owner >= 0)
            continue;
        struct part pt[4];
        int np = parts_of(&ps->p[i], pt);
        for (int k = 0; k < np; k++) {
            memcpy(d, pt[k].p, (size_t)pt[k].bytes);
            d += pt[k].bytes;
        }
    }
    int rc = mpress_write_file_atomic(file, buf, total, err);
    free(buf);
    return rc;
}

int mpress_checkpoint_load(const char *file, const struct mpress_model *m,
                           struct mpress_host_params *ps, uint32_t *step, uint64_t seed,
                           struct mpress_error *err)
{
    char *text = NULL;
    size_t size = 0;
    int rc = mpress_read_file(file, 0, &text, &size, err);
    if (rc)
        return rc;
    uint64_t hl = 0;
    if (size < 16 || memcmp(text, magic, 8) != 0) {
        free(text);
        return mpress_error_set(err, MPRESS_EINPUT, "%s: not an mpress checkpoint", file);
    }
    for (int i = 0; i < 8; i++)
        hl |= (uint64_t)(unsigned char)text[8 + i] << (8 * i);
    uint64_t data = 0;
    json_t *want = header(m, ps, 0, seed, &data);
    json_error_t je;
    json_t *got = hl <= size - 16 ? json_loadb(text + 16, (size_t)hl, 0, &je) : NULL;
    rc = 0;
    if (!got || !want)
        rc = mpress_error_set(err, MPRESS_EINPUT, "%s: unreadable checkpoint header", file);
    else if (json_integer_value(json_object_get(got, "version")) != MPRESS_CHECKPOINT_VERSION ||
             !json_equal(json_object_get(got, "format"), json_object_get(want, "format")))
        rc = mpress_error_set(err, MPRESS_EINPUT, "%s: not an mpress-checkpoint v%d file", file,
                              MPRESS_CHECKPOINT_VERSION);
    else if (!json_equal(json_object_get(got, "model"), json_object_get(want, "model")) ||
             !json_equal(json_object_get(got, "tensors"), json_object_get(want, "tensors")))
        rc = mpress_error_set(err, MPRESS_EINPUT, "%s: the checkpoint is of another model than "
                              "the plan's %s", file, m->config.name);
    else if (!json_equal(json_object_get(got, "seed"), json_object_get(want, "seed")))
        rc = mpress_error_set(err, MPRESS_EINPUT, "%s: the checkpoint was trained with seed %s; "
                              "this run's seed differs (data and dropout would not continue)",
                              file, json_string_value(json_object_get(got, "seed")));
    else if (size - 16 - hl != data)
        rc = mpress_error_set(err, MPRESS_EINPUT, "%s: %llu bytes of tensors, %llu expected",
                              file, (unsigned long long)(size - 16 - hl),
                              (unsigned long long)data);
    if (!rc) {
        json_t *js = json_object_get(got, "step");
        json_int_t st = json_integer_value(js);
        if (!json_is_integer(js) || st < 0 || st > UINT32_MAX)
            rc = mpress_error_set(err, MPRESS_EINPUT, "%s: field step: not a count of steps",
                                  file);
        else
            *step = (uint32_t)st;
    }
    /* the tensors follow the header; hl <= size - 16 holds once the header has been read */
    const char *d = rc ? NULL : text + 16 + hl;
    for (int i = 0; !rc && i < ps->n; i++) {
        if (ps->p[i].owner >= 0)
            continue;
        struct part pt[4];
        int np = parts_of(&ps->p[i], pt);
        for (int k = 0; k < np; k++) {
            memcpy(pt[k].p, d, (size_t)pt[k].bytes);
            d += pt[k].bytes;
        }
    }
    json_decref(got);
    json_decref(want);
    free(text);
    return rc;
}
