/* mpress-profile v1: init/finish/copy, writer and strict loader. Field names and rules are
 * documented in docs/formats.md; everything else in mpress reads struct mpress_profile only. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format_internal.h"
#include "mpress/profile.h"

static const char *const source_names[] = {"analytic", "cupti", "host", "import", NULL};
static const char *const dtype_names[] = {"fp16", "bf16", "fp32", NULL};
static const char *const optimizer_names[] = {"adam", "sgd", NULL};

void mpress_profile_init(struct mpress_profile *p)
{
    memset(p, 0, sizeof(*p));
}

void mpress_profile_finish(struct mpress_profile *p)
{
    if (!p)
        return;
    if (p->ops)
        for (int i = 0; i < p->n_ops; i++)
            free(p->ops[i].tensors);
    free(p->ops);
    memset(p, 0, sizeof(*p));
}

int mpress_profile_copy(struct mpress_profile *dst, const struct mpress_profile *src,
                        struct mpress_error *err)
{
    struct mpress_profile p = *src;
    p.ops = NULL;
    p.n_ops = 0;
    if (src->n_ops > 0) {
        p.ops = calloc((size_t)src->n_ops, sizeof(*p.ops));
        if (!p.ops)
            return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        p.n_ops = src->n_ops;
        for (int i = 0; i < src->n_ops; i++) {
            p.ops[i] = src->ops[i];
            p.ops[i].tensors = NULL;
            if (src->ops[i].n_tensors > 0) {
                p.ops[i].tensors = malloc((size_t)src->ops[i].n_tensors *
                                          sizeof(*p.ops[i].tensors));
                if (!p.ops[i].tensors) {
                    mpress_profile_finish(&p);
                    return mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
                }
                memcpy(p.ops[i].tensors, src->ops[i].tensors,
                       (size_t)src->ops[i].n_tensors * sizeof(*p.ops[i].tensors));
            } else {
                p.ops[i].n_tensors = 0;
            }
        }
    }
    *dst = p;
    return 0;
}

uint64_t mpress_profile_saved_bytes(const struct mpress_profile *p)
{
    uint64_t sum = 0;
    for (int i = 0; i < p->n_ops; i++)
        for (int k = 0; k < p->ops[i].n_tensors; k++)
            sum += p->ops[i].tensors[k].bytes;
    return sum;
}

uint64_t mpress_profile_params(const struct mpress_profile *p)
{
    uint64_t sum = 0;
    for (int i = 0; i < p->n_ops; i++)
        sum += p->ops[i].params;
    return sum;
}

/* ---- writer ----------------------------------------------------------------------------- */

static json_t *model_to_json(struct fmt_out *o, const struct mpress_model_config *m)
{
    json_t *j = json_object();
    if (!j)
        return NULL;
    fmt_set_str(o, j, "name", m->name);
    fmt_set_str(o, j, "family", m->family);
    fmt_set_int(o, j, "layers", m->layers);
    fmt_set_int(o, j, "hidden", m->hidden);
    fmt_set_int(o, j, "heads", m->heads);
    fmt_set_int(o, j, "ffn", m->ffn);
    fmt_set_int(o, j, "seq", m->seq);
    fmt_set_int(o, j, "vocab", m->vocab);
    fmt_set_int(o, j, "micro_batch", m->micro_batch);
    fmt_set_str(o, j, "dtype", m->dtype);
    fmt_set_str(o, j, "optimizer", m->optimizer);
    fmt_set_bool(o, j, "flash_attention", m->flash_attention);
    return j;
}

static json_t *op_to_json(struct fmt_out *o, const struct mpress_op *op)
{
    json_t *j = json_object(), *tensors = json_array();
    if (!j || !tensors) {
        json_decref(j);
        json_decref(tensors);
        return NULL;
    }
    fmt_set_str(o, j, "name", op->name);
    fmt_set_str(o, j, "kind", op->kind);
    fmt_set_int(o, j, "layer", op->layer);
    fmt_set_real(o, j, "fwd_s", op->fwd_s);
    fmt_set_real(o, j, "bwd_s", op->bwd_s);
    fmt_set_real(o, j, "fwd_flops", op->fwd_flops);
    fmt_set_u64(o, j, "params", op->params);
    fmt_set_u64(o, j, "param_bytes", op->param_bytes);
    fmt_set_u64(o, j, "grad_bytes", op->grad_bytes);
    fmt_set_u64(o, j, "optim_bytes", op->optim_bytes);
    fmt_set_u64(o, j, "workspace_bytes", op->workspace_bytes);
    fmt_set_u64(o, j, "output_bytes", op->output_bytes);
    for (int k = 0; k < op->n_tensors; k++) {
        const struct mpress_saved_tensor *t = &op->tensors[k];
        json_t *jt = json_object();
        if (jt) {
            fmt_set_str(o, jt, "id", t->id);
            fmt_set_str(o, jt, "name", t->name);
            fmt_set_u64(o, jt, "bytes", t->bytes);
            fmt_set_real(o, jt, "recompute_s", t->recompute_s);
            fmt_set_int(o, jt, "recompute_op", t->recompute_op);
        }
        fmt_append(o, tensors, jt);
    }
    fmt_set(o, j, "tensors", tensors);
    return j;
}

json_t *mpress_profile_to_json(const struct mpress_profile *p)
{
    struct fmt_out o = {0};
    json_t *root = json_object(), *ops = json_array();
    if (!root || !ops) {
        json_decref(root);
        json_decref(ops);
        return NULL;
    }
    fmt_set_str(&o, root, "format", MPRESS_PROFILE_FORMAT);
    fmt_set_int(&o, root, "version", MPRESS_PROFILE_VERSION);
    fmt_set_str(&o, root, "source", p->source);
    fmt_set_str(&o, root, "device", p->device);
    fmt_set(&o, root, "model", model_to_json(&o, &p->model));
    for (int i = 0; i < p->n_ops; i++)
        fmt_append(&o, ops, op_to_json(&o, &p->ops[i]));
    fmt_set(&o, root, "ops", ops);
    if (o.bad) {
        json_decref(root);
        return NULL;
    }
    return root;
}

/* ---- loader ----------------------------------------------------------------------------- */

static const char *const profile_keys[] = {"format", "version", "source", "device", "model",
                                           "ops", NULL};
static const char *const model_keys[] = {
    "name", "family", "layers", "hidden", "heads", "ffn", "seq", "vocab", "micro_batch",
    "dtype", "optimizer", "flash_attention", NULL};
static const char *const op_keys[] = {
    "name", "kind", "layer", "fwd_s", "bwd_s", "fwd_flops", "params", "param_bytes",
    "grad_bytes", "optim_bytes", "workspace_bytes", "output_bytes", "tensors", NULL};
static const char *const tensor_keys[] = {"id", "name", "bytes", "recompute_s", "recompute_op",
                                          NULL};

static int read_model(const struct mpress_json_doc *doc, const json_t *obj, const char *obj_path,
                      struct mpress_model_config *m, struct mpress_error *err)
{
    json_t *jm;
    char path[512];
    int idx;
    mpress_json_path_key(path, sizeof(path), obj_path, "model");
    if (mpress_jread_object(doc, obj, obj_path, "model", &jm, err) ||
        fmt_check_keys(doc, jm, path, model_keys, err) ||
        fmt_read_name(doc, jm, path, "name", m->name, sizeof(m->name), err) ||
        fmt_read_name(doc, jm, path, "family", m->family, sizeof(m->family), err) ||
        mpress_jread_int(doc, jm, path, "layers", 0, INT_MAX, &m->layers, err) ||
        mpress_jread_int(doc, jm, path, "hidden", 0, INT_MAX, &m->hidden, err) ||
        mpress_jread_int(doc, jm, path, "heads", 0, INT_MAX, &m->heads, err) ||
        mpress_jread_int(doc, jm, path, "ffn", 0, INT_MAX, &m->ffn, err) ||
        mpress_jread_int(doc, jm, path, "seq", 0, INT_MAX, &m->seq, err) ||
        mpress_jread_int(doc, jm, path, "vocab", 0, INT_MAX, &m->vocab, err) ||
        mpress_jread_int(doc, jm, path, "micro_batch", 1, INT_MAX, &m->micro_batch, err) ||
        fmt_read_choice(doc, jm, path, "dtype", dtype_names, &idx, err))
        return MPRESS_EINPUT;
    snprintf(m->dtype, sizeof(m->dtype), "%s", dtype_names[idx]);
    if (fmt_read_choice(doc, jm, path, "optimizer", optimizer_names, &idx, err))
        return MPRESS_EINPUT;
    snprintf(m->optimizer, sizeof(m->optimizer), "%s", optimizer_names[idx]);
    return mpress_jread_bool(doc, jm, path, "flash_attention", &m->flash_attention, err);
}

int mpress_profile_from_json(const struct mpress_json_doc *doc, const json_t *obj,
                             const char *obj_path, struct mpress_profile *out,
                             struct mpress_error *err)
{
    struct mpress_profile p;
    struct fmt_names names = {0}, ids = {0};
    char path[512], op_path[512], sub[512], tpath[512];
    json_t *ops;
    int idx, rc = MPRESS_EINPUT;

    mpress_profile_init(&p);
    if (!json_is_object(obj))
        return mpress_json_doc_error(doc, err, obj_path, "expected an object");
    if (mpress_jread_header(doc, obj, obj_path, MPRESS_PROFILE_FORMAT, MPRESS_PROFILE_VERSION,
                            NULL, err) ||
        fmt_check_keys(doc, obj, obj_path, profile_keys, err) ||
        fmt_read_choice(doc, obj, obj_path, "source", source_names, &idx, err))
        return MPRESS_EINPUT;
    snprintf(p.source, sizeof(p.source), "%s", source_names[idx]);
    if (fmt_read_name(doc, obj, obj_path, "device", p.device, sizeof(p.device), err) ||
        read_model(doc, obj, obj_path, &p.model, err) ||
        mpress_jread_array(doc, obj, obj_path, "ops", &ops, err))
        return MPRESS_EINPUT;
    char ops_path[512];
    mpress_json_path_key(ops_path, sizeof(ops_path), obj_path, "ops");
    size_t n_ops = json_array_size(ops);
    if (n_ops < 1)
        return mpress_json_doc_error(doc, err, ops_path, "expected at least one op");
    if (n_ops > MPRESS_MAX_OPS)
        return mpress_json_doc_error(doc, err, ops_path,
                                     "expected at most %d ops (the supported limit), got %zu",
                                     MPRESS_MAX_OPS, n_ops);

    size_t n_tensors_total = 0;
    for (size_t i = 0; i < n_ops; i++) {
        json_t *t = json_object_get(json_array_get(ops, i), "tensors");
        n_tensors_total += json_is_array(t) ? json_array_size(t) : 0;
        if (n_tensors_total > MPRESS_MAX_TENSORS) {
            mpress_json_path_index(op_path, sizeof(op_path), ops_path, i);
            mpress_json_path_key(tpath, sizeof(tpath), op_path, "tensors");
            return mpress_json_doc_error(doc, err, tpath,
                                         "more than %d saved tensors in all ops up to this one "
                                         "(the supported limit)",
                                         MPRESS_MAX_TENSORS);
        }
    }
    p.ops = calloc(n_ops, sizeof(*p.ops));
    if (!p.ops || fmt_names_init(&names, n_ops) || fmt_names_init(&ids, n_tensors_total)) {
        rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
        goto fail;
    }
    p.n_ops = (int)n_ops;

    int flat = 0;
    for (int i = 0; i < p.n_ops; i++) {
        struct mpress_op *op = &p.ops[i];
        json_t *jo, *jt;
        if (fmt_array_object(doc, ops, (size_t)i, ops_path, &jo, op_path, sizeof(op_path), err) ||
            fmt_check_keys(doc, jo, op_path, op_keys, err) ||
            fmt_read_name(doc, jo, op_path, "name", op->name, sizeof(op->name), err) ||
            fmt_read_name(doc, jo, op_path, "kind", op->kind, sizeof(op->kind), err) ||
            mpress_jread_int(doc, jo, op_path, "layer", -1, INT_MAX, &op->layer, err) ||
            mpress_jread_nonneg(doc, jo, op_path, "fwd_s", &op->fwd_s, err) ||
            mpress_jread_nonneg(doc, jo, op_path, "bwd_s", &op->bwd_s, err) ||
            mpress_jread_nonneg(doc, jo, op_path, "fwd_flops", &op->fwd_flops, err) ||
            mpress_jread_u64(doc, jo, op_path, "params", &op->params, err) ||
            mpress_jread_u64(doc, jo, op_path, "param_bytes", &op->param_bytes, err) ||
            mpress_jread_u64(doc, jo, op_path, "grad_bytes", &op->grad_bytes, err) ||
            mpress_jread_u64(doc, jo, op_path, "optim_bytes", &op->optim_bytes, err) ||
            mpress_jread_u64(doc, jo, op_path, "workspace_bytes", &op->workspace_bytes, err) ||
            mpress_jread_u64(doc, jo, op_path, "output_bytes", &op->output_bytes, err) ||
            mpress_jread_array(doc, jo, op_path, "tensors", &jt, err))
            goto fail;
        int prev = fmt_names_add(&names, op->name, i);
        if (prev >= 0) {
            mpress_json_path_key(path, sizeof(path), op_path, "name");
            mpress_json_doc_error(doc, err, path, "duplicate op name \"%s\" (also ops[%d])",
                                  op->name, prev);
            goto fail;
        }
        size_t nt = json_array_size(jt);
        mpress_json_path_key(tpath, sizeof(tpath), op_path, "tensors");
        if (nt > 0) {
            op->tensors = calloc(nt, sizeof(*op->tensors));
            if (!op->tensors) {
                rc = mpress_error_set(err, MPRESS_ESYSTEM, "out of memory");
                goto fail;
            }
        }
        op->n_tensors = (int)nt;
        for (int k = 0; k < op->n_tensors; k++, flat++) {
            struct mpress_saved_tensor *t = &op->tensors[k];
            json_t *jx;
            if (fmt_array_object(doc, jt, (size_t)k, tpath, &jx, path, sizeof(path), err) ||
                fmt_check_keys(doc, jx, path, tensor_keys, err) ||
                fmt_read_name(doc, jx, path, "id", t->id, sizeof(t->id), err) ||
                fmt_read_name(doc, jx, path, "name", t->name, sizeof(t->name), err) ||
                mpress_jread_u64(doc, jx, path, "bytes", &t->bytes, err) ||
                mpress_jread_nonneg(doc, jx, path, "recompute_s", &t->recompute_s, err) ||
                mpress_jread_int(doc, jx, path, "recompute_op", INT_MIN, INT_MAX,
                                 &t->recompute_op, err))
                goto fail;
            if (t->recompute_op < 0 || t->recompute_op >= (int)n_ops) {
                mpress_json_path_key(sub, sizeof(sub), path, "recompute_op");
                mpress_json_doc_error(doc, err, sub, "op %d does not exist (ops has %zu)",
                                      t->recompute_op, n_ops);
                goto fail;
            }
            prev = fmt_names_add(&ids, t->id, flat);
            if (prev >= 0) {
                mpress_json_path_key(sub, sizeof(sub), path, "id");
                mpress_json_doc_error(doc, err, sub, "duplicate tensor id \"%s\"", t->id);
                goto fail;
            }
        }
    }
    fmt_names_free(&names);
    fmt_names_free(&ids);
    *out = p;
    return 0;

fail:
    fmt_names_free(&names);
    fmt_names_free(&ids);
    mpress_profile_finish(&p);
    return rc;
}

int fmt_profile_check(const struct mpress_json_doc *doc, struct mpress_error *err)
{
    struct mpress_profile p;
    int rc = mpress_profile_from_json(doc, doc->root, "", &p, err);
    if (rc == 0)
        mpress_profile_finish(&p);
    return rc;
}

int mpress_profile_load(const char *file, struct mpress_profile *out, struct mpress_error *err)
{
    struct mpress_json_doc doc;
    int rc = fmt_doc_load(&doc, file, err);
    if (rc == 0)
        rc = mpress_profile_from_json(&doc, doc.root, "", out, err);
    fmt_root_position(&doc, err);
    mpress_json_doc_finish(&doc);
    return rc;
}

int mpress_profile_save(const char *file, const struct mpress_profile *p,
                        struct mpress_error *err)
{
    return fmt_save_checked(file, mpress_profile_to_json(p), "profile", fmt_profile_check, err);
}
