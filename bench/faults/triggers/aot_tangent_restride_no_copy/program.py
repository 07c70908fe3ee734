import torch


class Model(torch.nn.Module):
    """The gradient of a transposed product, taken inside forward (a graph break): the compiled
    region's output is non-contiguous, the gradient handed to its backward is contiguous."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.arange(1.0, 9.0).reshape(2, 4))

    def forward(self, x):
        y = (x * self.w).t()
        c = torch.arange(8.0).reshape(4, 2)
        (g,) = torch.autograd.grad(y, self.w, grad_outputs=c)
        return g


def make_inputs():
    return (torch.full((2, 4), 3.0),)
