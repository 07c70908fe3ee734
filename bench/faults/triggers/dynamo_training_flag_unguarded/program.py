import torch


class Model(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        if self.training:
            y = y + 10
        return y


def make_inputs():
    return (torch.arange(6, dtype=torch.float32).reshape(2, 3),)
