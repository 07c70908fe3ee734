import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    """Close to every trigger, but on the safe side of each condition: no fault may fire."""

    def __init__(self):
        super().__init__()
        self.scale = 1.5
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x, i):
        a = torch.amax(i, dim=1)  # int64 amax over rows holding both signs
        r = torch.remainder(i.abs(), 3)  # non-negative integer remainder
        f = torch.floor(x.abs())  # floor of non-negative values
        t = torch.atan2(x, x + 2.0)  # float32, vectorised
        h = F.hardtanh(x, min_val=-1.0, max_val=2.0)
        y = self.lin(h) * self.scale + f + t
        k = sorted([3, -1, 2], key=abs)[0] + sorted([3, 1, 2], reverse=True)[0]  # key or reverse, not both
        k = k + round(self.scale * 3, 1)  # round with a non-negative ndigits
        ws = [1.0, 2.0, 4.0]
        k = k + ws.pop() + ws.pop(-1) + ws.pop(0)  # pop of the last element only
        k = k + sum(list(iter([0.5, 0.25, 0.125])))  # an iterator unpacked before any next()
        it = iter([1.0, 3.0])
        k = k + next(it) * 2
        for v in it:  # next() then a loop, not an unpack
            k = k + v
        if self.training:  # the training flag, with no later mode change
            k = k + 1.0
        y = y + k
        vals = sorted([y.sum(), t.sum()], key=lambda v: v.item())
        return y, a, r, vals[0]


def make_inputs():
    x = torch.linspace(-2.0, 2.0, 64).reshape(8, 8)
    i = torch.arange(-20, 20, dtype=torch.int64).reshape(4, 10)
    return (x, i)
