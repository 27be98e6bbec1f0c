#!/usr/bin/env python3
"""The host backend's whole model against PyTorch: for each model, the C exporter
(tests/runtime/export.c) runs one step of the reference trainer on initial weights from a seed and
writes the weights, tokens, labels, dropout masks, losses, accumulated gradients and the weights
after AdamW. This script builds the same model from torch.nn.functional in float64 with the same
masks, and compares the per-micro-batch losses, every gradient, and the weights after
torch.optim.AdamW stepped from the C gradients (a gradient within its tolerance but near AdamW's
eps moves its weight by a different fraction of lr, so the step is checked on its own). Tolerances (fp32 C against float64 torch): loss relative 1e-5; a gradient
tensor max |C - torch| <= 2e-5 * max |torch| (+ 1e-7); weights after the step within 2 % of the
learning rate. Exit 0 ok, 1 mismatch, 77 when torch can be neither imported nor installed from
PyPI (pip --user, else a virtual environment in OUT_DIR).

usage: torch_check.py EXPORT_EXE OUT_DIR MODEL [MODEL...]"""
import math
import os
import struct
import subprocess
import sys


def have_torch(python):
    return subprocess.run([python, "-c", "import torch"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def find_torch(outdir):
    """A Python that imports torch: this one; else this one after `pip install --user torch`;
    else a virtual environment under outdir with torch from PyPI. None when none can be had."""
    if have_torch(sys.executable):
        return sys.executable
    print("torch not found; installing it from PyPI", file=sys.stderr)
    try:
        subprocess.run([sys.executable, "-m", "pip", "install", "--user", "--quiet", "torch"],
                       timeout=3600)
        if have_torch(sys.executable):
            return sys.executable
        venv = os.path.join(outdir, "torch-venv")
        py = os.path.join(venv, "bin", "python")
        if not os.path.exists(py):
            subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=600)
        if not have_torch(py):
            subprocess.run([py, "-m", "pip", "install", "--quiet", "torch"], check=True,
                           timeout=3600)
        if have_torch(py):
            return py
    except (OSError, subprocess.SubprocessError) as e:
        print("cannot install torch: %s" % e, file=sys.stderr)
    return None


def read_export(path):
    import torch
    recs = {}
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"MPRTEST1", "bad magic"
    pos = 8
    dt = {0: (torch.float32, 4), 1: (torch.int64, 8), 2: (torch.uint8, 1)}
    while pos < len(data):
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4
        name = data[pos:pos + n].decode()
        pos += n
        code, ndim = struct.unpack_from("<II", data, pos)
        pos += 8
        dims = list(struct.unpack_from("<%dq" % ndim, data, pos))
        pos += 8 * ndim
        t, esz = dt[code]
        count = math.prod(dims)
        buf = bytearray(data[pos:pos + count * esz])
        pos += count * esz
        x = torch.frombuffer(buf, dtype=t).clone() if count else torch.zeros(0, dtype=t)
        recs[name] = x.reshape(dims)
    return recs


def model_loss(W, R, mb, cfg, hp):
    """One micro-batch's loss, Megatron's pre-LN transformer as lib/model/transformer.c lays it
    out: activations [s, b, h], qkv columns q | k | v with head i at i*d."""
    import torch
    import torch.nn.functional as F
    L, H, A, Fd, S, V, B, bert = cfg
    D = H // A
    p_hidden, p_attn, eps = hp[0], hp[1], hp[2]
    pre = "mb%d/" % mb

    def mask(name, p):
        return R[pre + name].to(torch.float64) / (1.0 - p)

    tok = R[pre + "data.tokens"].t()  # [s, b]
    x = W["embedding.word"][tok] + W["embedding.position"][:, None, :]
    if bert:
        x = x + W["embedding.token_type"][R[pre + "data.token_types"].t()]
    x = x * mask("embedding.dropout_mask", p_hidden)
    for l in range(L):
        n = "layer%d." % l
        h1 = F.layer_norm(x, (H,), W[n + "ln1.gamma"], W[n + "ln1.beta"], eps)
        qkv = F.linear(h1, W[n + "qkv.weight"], W[n + "qkv.bias"])

        def heads(part):
            return qkv[..., part * H:(part + 1) * H].reshape(S, B, A, D).permute(1, 2, 0, 3)
        q, k, v = heads(0), heads(1), heads(2)
        sc = q @ k.transpose(-1, -2) / math.sqrt(D)
        if not bert:
            causal = torch.ones(S, S, dtype=torch.bool).triu(1)
            sc = sc.masked_fill(causal, float("-inf"))
        P = torch.softmax(sc, dim=-1) * mask(n + "attn_core.dropout_mask", p_attn)
        ctx = (P @ v).permute(2, 0, 1, 3).reshape(S, B, H)
        proj = F.linear(ctx, W[n + "attn_proj.weight"], W[n + "attn_proj.bias"])
        x1 = x + proj * mask(n + "attn_residual.dropout_mask", p_hidden)
        h2 = F.layer_norm(x1, (H,), W[n + "ln2.gamma"], W[n + "ln2.beta"], eps)
        up = F.linear(h2, W[n + "mlp_up.weight"], W[n + "mlp_up.bias"])
        act = F.gelu(up, approximate="tanh")
        down = F.linear(act, W[n + "mlp_down.weight"], W[n + "mlp_down.bias"])
        x = x1 + down * mask(n + "mlp_residual.dropout_mask", p_hidden)
    f = F.layer_norm(x, (H,), W["final_layernorm.gamma"], W["final_layernorm.beta"], eps)
    labels = R[pre + "data.labels"].t().reshape(-1)
    if not bert:
        logits = f @ W["embedding.word"].t()
        return F.cross_entropy(logits.reshape(-1, V), labels)
    t = F.linear(f, W["head.dense_weight"], W["head.dense_bias"])
    u = F.layer_norm(F.gelu(t, approximate="tanh"), (H,), W["head.ln_gamma"], W["head.ln_beta"],
                     eps)
    logits = u @ W["embedding.word"].t() + W["head.decoder_bias"]
    pooled = torch.tanh(F.linear(f[0], W["head.pooler_weight"], W["head.pooler_bias"]))
    nsp = F.linear(pooled, W["head.nsp_weight"], W["head.nsp_bias"])
    return (F.cross_entropy(logits.reshape(-1, V), labels) +
            F.cross_entropy(nsp, R[pre + "data.nsp_labels"]))


def check(path, model):
    import torch
    torch.set_default_dtype(torch.float64)
    R = read_export(path)
    cfg = [int(v) for v in R["config"].tolist()]
    hp = [float(v) for v in R["hparams"].tolist()]
    M = int(R["micro_batches"][0])
    names = [k[3:] for k in R if k.startswith("w0/")]
    W = {n: R["w0/" + n].to(torch.float64).requires_grad_(True) for n in names}
    ok = True
    total = 0
    worst_loss = 0.0
    for mb in range(M):
        loss = model_loss(W, R, mb, cfg, hp)
        c = float(R["mb%d/loss" % mb][0])
        rel = abs(c - loss.item()) / abs(loss.item())
        worst_loss = max(worst_loss, rel)
        if rel > 1e-5:
            print("%s: micro-batch %d loss C %.9g torch %.9g" % (model, mb, c, loss.item()))
            ok = False
        total = total + loss / M
    total.backward()
    worst = 0.0
    for n in names:
        g = W[n].grad
        gc = R["g/" + n].to(torch.float64)
        err = (gc - g).abs().max().item()
        scale = g.abs().max().item()
        r = err / (2e-5 * scale + 1e-7)
        worst = max(worst, r)
        if r > 1:
            print("%s: gradient %s max |C - torch| %.3g, max |torch| %.3g" % (model, n, err, scale))
            ok = False
    # The step from the C gradients: AdamW's first step moves a weight by lr·g/(|g| + eps), so a
    # gradient within its tolerance but near eps (1e-8) moves it by a different fraction of lr;
    # the gradients are checked above, the step here.
    for n in names:
        W[n].grad = R["g/" + n].to(torch.float64).clone()
    lr, b1, b2, aeps, wd = hp[3:8]
    decay = [W[n] for n in names if int(R["decay/" + n][0])]
    nodecay = [W[n] for n in names if not int(R["decay/" + n][0])]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=lr, betas=(b1, b2), eps=aeps)
    opt.step()
    worst_w = 0.0
    for n in names:
        err = (R["w1/" + n].to(torch.float64) - W[n].detach()).abs().max().item()
        worst_w = max(worst_w, err / lr)
        if err > 0.02 * lr:
            print("%s: weight %s after AdamW differs by %.3g (lr %.3g)" % (model, n, err, lr))
            ok = False
    print("%s: %d micro-batches, %d parameter tensors: loss rel diff %.2e; worst gradient at "
          "%.3f of its tolerance; weights after AdamW within %.2e lr" %
          (model, M, len(names), worst_loss, worst, worst_w))
    return ok


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    exe, outdir, models = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(outdir, exist_ok=True)
    try:
        import torch  # noqa: F401
    except ImportError:
        py = find_torch(outdir)
        if py is None:
            print("skipped: torch cannot be imported or installed", file=sys.stderr)
            return 77
        # a fresh interpreter: one that was installed into just now with `pip --user` has no
        # user site directory on its path if that directory did not exist when it started
        return subprocess.run([py] + sys.argv).returncode
    ok = True
    for model in models:
        path = os.path.join(outdir, "torch-check-%s.bin" % model)
        subprocess.run([exe, model, "fp32", "2", path], check=True)
        ok = check(path, model) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
