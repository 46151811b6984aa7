"""A two-layer network for the dist scaling tests: a real DDP/FSDP2 training step in milliseconds on a CPU."""


def make(batch_size):
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    batch = (torch.randn(batch_size, 32), torch.randint(0, 8, (batch_size,)))
    return model, batch, torch.nn.functional.cross_entropy
