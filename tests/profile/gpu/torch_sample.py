# A tiny PyTorch training loop for the GPU check's --nvtx-torch --memory pass: nothing in it
# knows about mpress; the ranges come from the sitecustomize that `--nvtx-torch` installs.
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                            torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(64, 1024, device="cuda")
for _ in range(4):
    opt.zero_grad(set_to_none=True)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
torch.cuda.synchronize()
print("torch_sample: done")
