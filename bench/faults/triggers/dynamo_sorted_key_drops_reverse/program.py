import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.widths = [3, -7, 5]

    def forward(self, x):
        order = sorted(self.widths, key=abs, reverse=True)
        return x * order[0] + order[1]


def make_inputs():
    return (torch.arange(6, dtype=torch.float32).reshape(2, 3),)
