import torch
x = torch.randn(256, 256).to("ocl")
for step in range(5):
    y = torch.cumsum(x @ x, dim=1)  # cumsum has no OpenCL kernel: a CPU fallback at this line
    total = y.sum().item()          # a sync
print("ok", total)
