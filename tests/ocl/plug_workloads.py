"""Tiny user workloads (`--models plug_workloads:mlp`) for the plug checks: an MLP that runs natively on ocl,
and one whose forward uses cumsum, which has no OpenCL kernel (a counted CPU fallback per step)."""

import torch
from torch import nn


def mlp(batch_size):
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    batch = (torch.randn(batch_size, 16), torch.randint(0, 4, (batch_size,)))
    return model, batch, nn.functional.cross_entropy


class CumsumNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(16, 4)

    def forward(self, x):
        return self.linear(torch.cumsum(x, dim=1))


def cumsum_net(batch_size):
    batch = (torch.randn(batch_size, 16), torch.randint(0, 4, (batch_size,)))
    return CumsumNet(), batch, nn.functional.cross_entropy
