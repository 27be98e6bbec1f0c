/* Named model configs (the zoo), config checks and the mpress-model config file.
 * Sizes and their sources are listed in docs/models.md. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "mpress/json.h"
#include "mpress/model.h"

struct zoo_entry {
    const char *name, *family;
    int layers, hidden, heads, seq, vocab, micro_batch;
    double published; /* parameters as published, 0 when the config is not a published model */
};

/* ffn is 4 * hidden for all of them. Vocabularies: GPT-2 BPE 50257 (Radford et al. 2019, used
 * by GPT-3 too), BERT WordPiece 30522 (Devlin et al. 2019, also Megatron-BERT). GPT-3 rows are
 * Brown et al. 2020, Table 2.1, except: 1.3B uses 16 heads of 128 (the table's 24 heads do not
 * divide d_model 2048; d_head 128 is the table's), 13B uses d_model 5120 = 40 x 128 (the table
 * prints 5140, which 40 heads of 128 contradict). Megatron-BERT: Shoeybi et al. 2019, Table 4.
 * gpt-20b is not a published model: GPT-3 6.7B's width at 96 layers, about 20B parameters, the
 * planner's benchmark case (deep enough that 1F1B's memory imbalance dominates).
 * Columns: name, family, layers, hidden, heads, seq, vocab, micro-batch, published parameters
 * (0: not a published model). One list of rows feeds both the table and the name list. */
#define ZOO(X)                                                                                   \
    X("gpt-tiny", "gpt", 2, 64, 4, 32, 512, 2, 0)                                               \
    X("bert-tiny", "bert", 2, 64, 4, 32, 512, 2, 0)                                             \
    X("gpt2-124m", "gpt", 12, 768, 12, 1024, 50257, 1, 124e6)                                   \
    X("gpt2-355m", "gpt", 24, 1024, 16, 1024, 50257, 1, 355e6)                                  \
    X("gpt2-774m", "gpt", 36, 1280, 20, 1024, 50257, 1, 774e6)                                  \
    X("gpt2-1.5b", "gpt", 48, 1600, 25, 1024, 50257, 1, 1558e6)                                 \
    X("gpt3-1.3b", "gpt", 24, 2048, 16, 2048, 50257, 1, 1.3e9)                                  \
    X("gpt3-2.7b", "gpt", 32, 2560, 32, 2048, 50257, 1, 2.7e9)                                  \
    X("gpt3-6.7b", "gpt", 32, 4096, 32, 2048, 50257, 1, 6.7e9)                                  \
    X("gpt3-13b", "gpt", 40, 5120, 40, 2048, 50257, 1, 13e9)                                    \
    X("gpt3-175b", "gpt", 96, 12288, 96, 2048, 50257, 1, 175e9)                                 \
    X("gpt-20b", "gpt", 96, 4096, 32, 2048, 50257, 1, 0)                                        \
    X("bert-base", "bert", 12, 768, 12, 512, 30522, 1, 110e6)                                   \
    X("bert-large", "bert", 24, 1024, 16, 512, 30522, 1, 340e6)                                 \
    X("megatron-bert-1.3b", "bert", 24, 2048, 32, 512, 30522, 1, 1.3e9)                         \
    X("megatron-bert-3.9b", "bert", 48, 2560, 40, 512, 30522, 1, 3.9e9)

#define ZOO_ROW(name, family, l, h, a, s, v, mb, pub) {name, family, l, h, a, s, v, mb, pub},
#define ZOO_NAME(name, family, l, h, a, s, v, mb, pub) name,
static const struct zoo_entry zoo[] = {ZOO(ZOO_ROW)};
static const char *const zoo_names[] = {ZOO(ZOO_NAME) NULL};
#define N_ZOO (sizeof(zoo) / sizeof(zoo[0]))

const char *const *mpress_model_names(void)
{
    return zoo_names;
}

static void fill(const struct zoo_entry *z, struct mpress_model_config *out)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%s", z->name);
    snprintf(out->family, sizeof(out->family), "%s", z->family);
    out->layers = z->layers;
    out->hidden = z->hidden;
    out->heads = z->heads;
    out->ffn = 4 * z->hidden;
    out->seq = z->seq;
    out->vocab = z->vocab;
    out->micro_batch = z->micro_batch;
    snprintf(out->dtype, sizeof(out->dtype), "fp16");
    snprintf(out->optimizer, sizeof(out->optimizer), "adam");
    out->flash_attention = 0;
}

int mpress_model_find(const char *name, struct mpress_model_config *out)
{
    if (!name)
        return -1;
    for (size_t i = 0; i < N_ZOO; i++) {
        if (strcasecmp(name, zoo[i].name) == 0) {
            fill(&zoo[i], out);
            return 0;
        }
    }
    return -1;
}

double mpress_model_published_params(const char *name)
{
    for (size_t i = 0; name && i < N_ZOO; i++)
        if (strcasecmp(name, zoo[i].name) == 0)
            return zoo[i].published;
    return 0;
}

/* ---- checks ------------------------------------------------------------------------------ */

static int bad(struct mpress_error *err, const char *field, const char *fmt, long v, long lo,
               long hi)
{
    if (err) {
        snprintf(err->path, sizeof(err->path), "%s", field);
        err->line = err->column = 0;
    }
    return mpress_error_set(err, MPRESS_EUSAGE, fmt, v, lo, hi);
}

static const struct {
    const char *field;
    size_t off;
    int lo, hi;
} config_ranges[] = {
    {"layers", offsetof(struct mpress_model_config, layers), 1, MPRESS_MODEL_MAX_LAYERS},
    {"hidden", offsetof(struct mpress_model_config, hidden), 1, MPRESS_MODEL_MAX_HIDDEN},
    {"heads", offsetof(struct mpress_model_config, heads), 1, MPRESS_MODEL_MAX_HEADS},
    {"ffn", offsetof(struct mpress_model_config, ffn), 1, MPRESS_MODEL_MAX_FFN},
    {"seq", offsetof(struct mpress_model_config, seq), 1, MPRESS_MODEL_MAX_SEQ},
    {"vocab", offsetof(struct mpress_model_config, vocab), 1, MPRESS_MODEL_MAX_VOCAB},
    {"micro_batch", offsetof(struct mpress_model_config, micro_batch), 1,
     MPRESS_MODEL_MAX_MICRO_BATCH},
};
#define N_CONFIG_RANGES (sizeof(config_ranges) / sizeof(config_ranges[0]))

int mpress_model_config_range(const char *field, int *lo, int *hi)
{
    for (size_t i = 0; i < N_CONFIG_RANGES; i++)
        if (strcmp(field, config_ranges[i].field) == 0) {
            *lo = config_ranges[i].lo;
            *hi = config_ranges[i].hi;
            return 0;
        }
    return -1;
}

/* Reads integer field of the model-config file within its range. */
static int read_ranged(const struct mpress_json_doc *doc, const json_t *root, const char *field,
                       int *out, struct mpress_error *err)
{
    int lo = 0, hi = 0;
    mpress_model_config_range(field, &lo, &hi);
    return mpress_jread_int(doc, root, "", field, lo, hi, out, err);
}

int mpress_model_config_check(const struct mpress_model_config *m, struct mpress_error *err)
{
    for (size_t i = 0; i < N_CONFIG_RANGES; i++) {
        int v;
        memcpy(&v, (const char *)m + config_ranges[i].off, sizeof(v));
        if (v < config_ranges[i].lo || v > config_ranges[i].hi)
            return bad(err, config_ranges[i].field, "%ld is out of range [%ld, %ld]", v,
                       config_ranges[i].lo, config_ranges[i].hi);
    }
    if (m->hidden % m->heads != 0) {
        if (err)
            snprintf(err->path, sizeof(err->path), "heads");
        return mpress_error_set(err, MPRESS_EUSAGE, "%d heads do not divide hidden %d",
                                m->heads, m->hidden);
    }
    if (strcmp(m->family, "gpt") != 0 && strcmp(m->family, "bert") != 0) {
        if (err)
            snprintf(err->path, sizeof(err->path), "family");
        return mpress_error_set(err, MPRESS_EUSAGE, "unknown family '%s' (gpt or bert)",
                                m->family);
    }
    enum mpress_dtype t;
    if (mpress_dtype_parse(m->dtype, &t) != 0 || t == MPRESS_DTYPE_U8 || t == MPRESS_DTYPE_I64) {
        if (err)
            snprintf(err->path, sizeof(err->path), "dtype");
        return mpress_error_set(err, MPRESS_EUSAGE, "unknown dtype '%s' (fp16, bf16 or fp32)",
                                m->dtype);
    }
    if (strcmp(m->optimizer, "adam") != 0 && strcmp(m->optimizer, "sgd") != 0) {
        if (err)
            snprintf(err->path, sizeof(err->path), "optimizer");
        return mpress_error_set(err, MPRESS_EUSAGE, "unknown optimizer '%s' (adam or sgd)",
                                m->optimizer);
    }
    /* Every byte count must stay exact in a double (2^53) so that sums are exact: bound the
     * largest totals, the saved bytes of all layers and the fp32 logits. */
    double s = m->seq, b = m->micro_batch, h = m->hidden, a = m->heads;
    double total = m->layers * s * b * (34.0 * h + 8.0 * m->ffn + 5.0 * a * s) +
                   8.0 * s * b * m->vocab + 16.0 * ((double)m->vocab * h + 13.0 * h * h);
    if (total > 9.0e15) {
        if (err)
            snprintf(err->path, sizeof(err->path), "seq");
        return mpress_error_set(err, MPRESS_EUSAGE,
                                "the model is too large to describe (%.3g bytes of activations "
                                "and states)",
                                total);
    }
    return 0;
}

/* ---- mpress-model files ------------------------------------------------------------------ */

static const char *const model_keys[] = {
    "format", "version", "name", "family", "layers", "hidden", "heads", "ffn", "seq", "vocab",
    "micro_batch", "dtype", "optimizer", "flash_attention", NULL,
};

int mpress_model_config_load(const char *file, struct mpress_model_config *out,
                             struct mpress_error *err)
{
    struct mpress_json_doc doc;
    int version, rc;
    mpress_error_clear(err);
    if ((rc = mpress_json_doc_load(&doc, file, err)) != 0) {
        mpress_json_doc_finish(&doc);
        return rc;
    }
    struct mpress_model_config m;
    memset(&m, 0, sizeof(m));
    json_t *root = doc.root;
    if (!json_is_object(root)) {
        rc = mpress_json_doc_error(&doc, err, "", "expected an object");
        goto done;
    }
    if ((rc = mpress_jread_header(&doc, doc.root, "", MPRESS_MODEL_FORMAT,
                                  MPRESS_MODEL_VERSION, &version, err)) != 0)
        goto done;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        int known = 0;
        for (int i = 0; model_keys[i]; i++)
            known |= strcmp(key, model_keys[i]) == 0;
        if (!known) {
            rc = mpress_json_doc_error(&doc, err, key, "unknown field");
            goto done;
        }
    }
    if ((rc = mpress_jread_str(&doc, root, "", "name", m.name, sizeof(m.name), err)) ||
        (rc = mpress_jread_str(&doc, root, "", "family", m.family, sizeof(m.family), err)) ||
        (rc = read_ranged(&doc, root, "layers", &m.layers, err)) ||
        (rc = read_ranged(&doc, root, "hidden", &m.hidden, err)) ||
        (rc = read_ranged(&doc, root, "heads", &m.heads, err)) ||
        (rc = read_ranged(&doc, root, "seq", &m.seq, err)) ||
        (rc = read_ranged(&doc, root, "vocab", &m.vocab, err)))
        goto done;
    /* Optional fields and their defaults. */
    m.ffn = 4 * m.hidden;
    m.micro_batch = 1;
    snprintf(m.dtype, sizeof(m.dtype), "fp16");
    snprintf(m.optimizer, sizeof(m.optimizer), "adam");
    if ((json_object_get(root, "ffn") &&
         (rc = read_ranged(&doc, root, "ffn", &m.ffn, err))) ||
        (json_object_get(root, "micro_batch") &&
         (rc = read_ranged(&doc, root, "micro_batch", &m.micro_batch, err))) ||
        (json_object_get(root, "dtype") &&
         (rc = mpress_jread_str(&doc, root, "", "dtype", m.dtype, sizeof(m.dtype), err))) ||
        (json_object_get(root, "optimizer") &&
         (rc = mpress_jread_str(&doc, root, "", "optimizer", m.optimizer, sizeof(m.optimizer),
                                err))) ||
        (json_object_get(root, "flash_attention") &&
         (rc = mpress_jread_bool(&doc, root, "", "flash_attention", &m.flash_attention, err))))
        goto done;
    struct mpress_error cerr;
    mpress_error_clear(&cerr);
    if (mpress_model_config_check(&m, &cerr) != 0) {
        rc = mpress_json_doc_error(&doc, err, cerr.path, "%s", cerr.text);
        goto done;
    }
    *out = m;
    rc = 0;
done:
    mpress_json_doc_finish(&doc);
    return rc;
}
