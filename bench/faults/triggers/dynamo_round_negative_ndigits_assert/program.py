import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.total = 37.0

    def forward(self, x):
        return x * round(self.total, -1)


def make_inputs():
    return (torch.arange(6, dtype=torch.float32).reshape(2, 3),)
