/* JSON helpers: deterministic dumps, atomic writes, positions of paths, strict readers. */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "mpress/json.h"

static const char *doc_text = "{\n"
                              "  \"format\": \"x\",\n"
                              "  \"version\": 1,\n"
                              "  \"ops\": [\n"
                              "    {\"name\": \"a\", \"bytes\": 5},\n"
                              "    {\"name\": \"b\", \"bytes\": -3, \"t\": [1, 2.5]}\n"
                              "  ]\n"
                              "}\n";

int main(void)
{
    struct mpress_error err;
    struct mpress_json_doc doc;

    /* dumps: sorted keys, 2-space indent, trailing newline */
    json_t *o = json_pack("{s:i, s:f, s:[i]}", "z", 1, "a", 0.1, "m", 3);
    char *s = mpress_json_dumps(o);
    CHECK_STR(s, "{\n  \"a\": 0.1,\n  \"m\": [\n    3\n  ],\n  \"z\": 1\n}\n");
    free(s);

    /* atomic write: creates the file; a failing write leaves an existing file untouched */
    char dir[] = "/tmp/mpress-json-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof(path), "%s/out.json", dir);
    CHECK_INT(mpress_json_write_file(path, o, &err), 0);
    CHECK_INT(mpress_json_doc_load(&doc, path, &err), 0);
    CHECK_INT(json_integer_value(json_object_get(doc.root, "z")), 1);
    mpress_json_doc_finish(&doc);
    char bad[300];
    snprintf(bad, sizeof(bad), "%s/no-such-dir/out.json", dir);
    CHECK_INT(mpress_json_write_file(bad, o, &err), MPRESS_ESYSTEM);
    CHECK(access(bad, F_OK) != 0);
    CHECK_INT(mpress_json_write_file("", o, &err), MPRESS_EUSAGE);
    json_decref(o);

    /* reading: whole file, NUL-terminated; every way a path can name no readable file is a bad
     * input (exit 3), a path through a regular file included (ENOTDIR) */
    char *text = NULL;
    size_t size = 0;
    CHECK_INT(mpress_read_file(path, 0, &text, &size, &err), 0);
    CHECK(text && size > 10 && text[size] == '\0' && text[0] == '{');
    free(text);
    CHECK_INT(mpress_read_file(path, 10, &text, &size, &err), MPRESS_EINPUT);
    CHECK(text == NULL && strstr(err.text, "larger than 10 bytes") != NULL);
    CHECK_STR(err.file, path);
    CHECK_INT(mpress_read_file(bad, 0, &text, &size, &err), MPRESS_EINPUT);
    char through[300];
    snprintf(through, sizeof(through), "%s/x.json", path);
    CHECK_INT(mpress_read_file(through, 0, &text, &size, &err), MPRESS_EINPUT);
    CHECK(strstr(err.text, "cannot open") != NULL);
    CHECK_INT(mpress_json_doc_load(&doc, through, &err), MPRESS_EINPUT);
    mpress_json_doc_finish(&doc);
    CHECK_INT(mpress_read_file(dir, 0, &text, &size, &err), MPRESS_EINPUT);
    CHECK(text == NULL);
    unlink(path);
    rmdir(dir);

    /* parse errors carry line:column */
    CHECK_INT(mpress_json_doc_parse(&doc, "{\n  \"a\": [1,\n}", 14, "t.json", &err),
              MPRESS_EINPUT);
    CHECK_STR(err.file, "t.json");
    CHECK_INT(err.line, 3);
    mpress_json_doc_finish(&doc);
    CHECK_INT(mpress_json_doc_parse(&doc, "{\"a\": 1, \"a\": 2}", 16, "d.json", &err),
              MPRESS_EINPUT);
    CHECK(strstr(err.text, "duplicate") != NULL);
    mpress_json_doc_finish(&doc);

    /* locate */
    CHECK_INT(mpress_json_doc_parse(&doc, doc_text, strlen(doc_text), "p.json", &err), 0);
    int line, col;
    CHECK_INT(mpress_json_doc_locate(&doc, "version", &line, &col), 0);
    CHECK_INT(line, 3);
    CHECK_INT(col, 14);
    CHECK_INT(mpress_json_doc_locate(&doc, "ops[1].bytes", &line, &col), 0);
    CHECK_INT(line, 6);
    CHECK_INT(col, 28);
    CHECK_INT(mpress_json_doc_locate(&doc, "ops[1].t[1]", &line, &col), 0);
    CHECK_INT(col, 41);
    CHECK_INT(mpress_json_doc_locate(&doc, "ops[2]", &line, &col), -1);
    /* and back: the value at a byte offset (found by plain search here) */
    char vpath[64];
    size_t off = (size_t)(strstr(doc_text, "2.5") - doc_text);
    CHECK_INT(mpress_json_doc_path_at(&doc, off, vpath, sizeof(vpath), &line, &col), 0);
    CHECK_STR(vpath, "ops[1].t[1]");
    CHECK_INT(line, 6);
    CHECK_INT(col, 41);
    CHECK_INT(mpress_json_doc_path_at(&doc, 0, vpath, sizeof(vpath), &line, &col), 0);
    CHECK_STR(vpath, "");
    off = (size_t)(strstr(doc_text, "\"name\"") - doc_text); /* a key, not a value */
    CHECK_INT(mpress_json_doc_path_at(&doc, off, vpath, sizeof(vpath), &line, &col), -1);
    mpress_json_doc_finish(&doc);
    /* text that is JSON only up to the offset, as when the parser stopped there */
    const char *cut = "{\"a\": [1, {\"b\": 7e999, ]]]";
    CHECK(mpress_json_doc_parse(&doc, cut, strlen(cut), "c.json", &err) == MPRESS_EINPUT);
    off = (size_t)(strstr(cut, "7e999") - cut);
    CHECK_INT(mpress_json_doc_path_at(&doc, off, vpath, sizeof(vpath), &line, &col), 0);
    CHECK_STR(vpath, "a[1].b");
    CHECK_INT(col, (int)off + 1);
    mpress_json_doc_finish(&doc);
    CHECK_INT(mpress_json_doc_parse(&doc, doc_text, strlen(doc_text), "p.json", &err), 0);

    /* readers */
    json_t *ops = json_object_get(doc.root, "ops");
    uint64_t u;
    CHECK_INT(mpress_jread_u64(&doc, json_array_get(ops, 0), "ops[0]", "bytes", &u, &err), 0);
    CHECK_INT(u, 5);
    CHECK_INT(mpress_jread_u64(&doc, json_array_get(ops, 1), "ops[1]", "bytes", &u, &err),
              MPRESS_EINPUT);
    char msg[2048];
    mpress_error_format(&err, msg, sizeof(msg));
    CHECK_STR(msg, "p.json:6:28: ops[1].bytes: expected a non-negative integer, got a negative "
                   "integer");
    /* a missing field points at its object */
    CHECK_INT(mpress_jread_u64(&doc, json_array_get(ops, 0), "ops[0]", "time", &u, &err),
              MPRESS_EINPUT);
    CHECK_STR(err.path, "ops[0].time");
    CHECK_INT(err.line, 5);
    CHECK_INT(err.column, 5);
    char str[2];
    CHECK_INT(mpress_jread_str(&doc, doc.root, "", "format", str, sizeof(str), &err), 0);
    CHECK_INT(mpress_jread_str(&doc, json_array_get(ops, 0), "ops[0]", "bytes", str, 2, &err),
              MPRESS_EINPUT);
    int v;
    CHECK_INT(mpress_jread_header(&doc, doc.root, "", "x", 1, &v, &err), 0);
    CHECK_INT(mpress_jread_header(&doc, doc.root, "", "y", 1, &v, &err), MPRESS_EINPUT);
    CHECK_STR(err.path, "format");
    mpress_json_doc_finish(&doc);

    const char *v2 = "{\"format\": \"x\", \"version\": 2}";
    CHECK_INT(mpress_json_doc_parse(&doc, v2, strlen(v2), "v.json", &err), 0);
    CHECK_INT(mpress_jread_header(&doc, doc.root, "", "x", 1, &v, &err), MPRESS_EINPUT);
    CHECK(strstr(err.text, "unsupported") != NULL);
    mpress_json_doc_finish(&doc);
    /* An embedded document: the paths carry its prefix. */
    const char *emb = "{\"inner\": {\"format\": \"x\", \"version\": 2}}";
    CHECK_INT(mpress_json_doc_parse(&doc, emb, strlen(emb), "e.json", &err), 0);
    CHECK_INT(mpress_jread_header(&doc, json_object_get(doc.root, "inner"), "inner", "x", 2, &v,
                                  &err), 0);
    CHECK_INT(v, 2);
    CHECK_INT(mpress_jread_header(&doc, json_object_get(doc.root, "inner"), "inner", "x", 1, &v,
                                  &err), MPRESS_EINPUT);
    CHECK_STR(err.path, "inner.version");
    mpress_json_doc_finish(&doc);

    /* FNV-1a 64 test vectors (Fowler/Noll/Vo reference): "" and "a" */
    char h[17];
    mpress_hash_hex("", 0, h);
    CHECK_STR(h, "cbf29ce484222325");
    mpress_hash_hex("a", 1, h);
    CHECK_STR(h, "af63dc4c8601ec8c");
    CHECK(mpress_fnv1a64("a", 1) == 0xaf63dc4c8601ec8cULL);

    /* Path joins, also in place and cut to the buffer. */
    char pth[16];
    mpress_json_path_key(pth, sizeof(pth), "", "ops");
    CHECK_STR(pth, "ops");
    mpress_json_path_index(pth, sizeof(pth), pth, 12);
    CHECK_STR(pth, "ops[12]");
    mpress_json_path_key(pth, sizeof(pth), pth, "tensors");
    CHECK_STR(pth, "ops[12].tensors");
    mpress_json_path_key(pth, sizeof(pth), pth, "bytes");
    CHECK_STR(pth, "ops[12].tensors");
    mpress_json_path_key(pth, 8, "profile", "ops");
    CHECK_STR(pth, "profile");
    return check_done();
}
