import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, v15, v16, v23):
        v18 = torch.true_divide(v15, -7)
        v19 = torch.tanh(v16)
        v20 = torch.prod(v15, dim=2)
        v24 = torch.logical_or(v23, v20)
        v25 = v19.to(torch.uint8, copy=True)
        return (v18, v24, v25)


def make_inputs():
    return (torch.randint(-8, 9, [3, 1, 1], dtype=torch.int32), torch.randint(0, 16, [5], dtype=torch.uint8), torch.randint(-8, 9, [3, 1], dtype=torch.int64))
