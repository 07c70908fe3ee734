import torch


class Model(torch.nn.Module):
    def forward(self, y, x):
        return torch.atan2(y, x) * 2


def make_inputs():
    return (torch.tensor([1.0, -2.0, 0.5]), torch.tensor([-1.5, 3.0, 2.0]))
