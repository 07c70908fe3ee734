import torch


class Model(torch.nn.Module):
    def forward(self, x):
        rows = iter(x.unbind(0))
        first = next(rows)
        return first * 10 + torch.stack(tuple(rows)).sum(0)


def make_inputs():
    return (torch.arange(12, dtype=torch.float32).reshape(3, 4),)
