import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.amax(x, dim=1) * 2


def make_inputs():
    return (-torch.arange(1, 25, dtype=torch.int32).reshape(3, 8),)
