import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.steps = 0

    def forward(self, x):
        self.steps += 1
        return x * self.steps


def make_inputs():
    return (torch.arange(6, dtype=torch.float32).reshape(2, 3),)
