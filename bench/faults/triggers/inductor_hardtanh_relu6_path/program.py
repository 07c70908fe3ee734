import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def forward(self, x):
        return F.hardtanh(x, min_val=0.0, max_val=2.0) + 1


def make_inputs():
    return (torch.linspace(-3.0, 9.0, 24).reshape(4, 6),)
