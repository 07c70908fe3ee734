import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.floor(x * 1.5)


def make_inputs():
    return (torch.linspace(-4.1, 3.9, 64).reshape(2, 32),)
