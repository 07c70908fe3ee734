"""A small compiler-like git history and an issue export, built fresh for tests and benchmarks.

The repository mimics the layout of PyTorch: code under torch_like/, regression tests under
test/inductor/ (and one under test/other/). `build_repo` returns the commit shas by label so tests
can say which commits must be found; `EXPECTED` states what the miner should make of each.
"""

from __future__ import annotations

import json
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

TEST_FILE = "test/inductor/test_x.py"

_HEADER = '''\
import torch
from torch.testing._internal.common_utils import TestCase, run_tests

SCALE = 2.0


def _scale(x):
    return x * SCALE


class TestX(TestCase):
    def common(self, fn, args):
        ref = fn(*args)
        res = torch.compile(fn)(*args)
        self.assertEqual(ref, res)

    def test_existing(self):
        def fn(x):
            return x.relu()

        self.common(fn, (torch.randn(4),))
'''

_TESTS = {
    "clamp": '''
    def test_clamp_negative(self):
        def fn(x, lo):
            return torch.clamp(x, min=lo)

        x = torch.randn(8, device=self.device)
        opt_fn = torch.compile(fn)
        self.assertEqual(fn(x, -0.5), opt_fn(x, -0.5))
''',
    "sum": '''
    def test_sum_empty_dim(self):
        def fn(x):
            return _scale(x).sum(dim=())

        self.common(fn, (torch.randn(4),))
''',
    "strides": '''
    def test_repro_module(self):
        class Repro(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv2d(3, 4, 3)

            def forward(self, x):
                return self.conv(x).permute(0, 2, 3, 1).contiguous()

        mod = Repro().eval()
        x = torch.randn(1, 3, 8, 8).to(memory_format=torch.channels_last)
        ref = mod(x)
        res = torch.compile(mod)(x)
        self.assertEqual(ref, res)

    def test_decorated_channels_last(self):
        w = torch.randn(1, 4, 1, 1)

        @torch.compile
        def f(x, y):
            return (x + y * w).contiguous(memory_format=torch.channels_last)

        f(torch.randn(2, 4, 5, 5), torch.randn(2, 4, 5, 5))

    def test_helper_only(self):
        self.run_conv_case(channels_last=True)

    def test_bad_shapes(self):
        def fn(x):
            return x @ torch.randn(5, 5)

        self.common(fn, (torch.randn(3, 4),))
''',
    "relu_only": '''
    def test_relu_inplace(self):
        def fn(x):
            return torch.relu_(x.clone())

        self.common(fn, (torch.randn(6),))
''',
}

_LOWERING = {
    0: "def lower_clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n",
    1: "def lower_clamp(x, lo, hi):\n    lo = type(x)(lo)  # promote the Python scalar bound to the input dtype\n"
       "    return max(lo, min(x, hi))\n",
    2: "\ndef lower_cat(xs):\n    if len(xs) == 1:  # fast path\n        return xs[0]\n    return sum(xs, [])\n",
    3: "\ndef lower_sum(x, dims):\n    if len(dims) == 0:  # a reduction over no dims is the identity, not a full reduction\n"
       "        return x\n    return reduce_sum(x, dims)\n",
    6: "\ndef lower_conv(x, w, layout):\n    # keep channels_last strides: the output layout follows the input's memory format\n"
       "    if layout == 'channels_last':\n        return conv_nhwc(x, w).contiguous_strides(layout)\n"
       "    return conv_nchw(x, w)\n",
}

# label -> what the miner should decide (with paths=["test/inductor"])
EXPECTED: dict[str, dict[str, Any]] = {
    "initial": {"fix": False},
    "clamp_fix": {"fix": True, "tests": ["TestX.test_clamp_negative"], "valid": ["TestX.test_clamp_negative"]},
    "cat_feature": {"fix": False},
    "sum_fix": {"fix": True, "tests": ["TestX.test_sum_empty_dim"], "valid": ["TestX.test_sum_empty_dim"],
                "category": "I3"},
    "docs": {"fix": False},
    "misc_other_path": {"fix": False},  # outside test/inductor: not even scanned with paths
    "strides_fix": {"fix": True,
                    "tests": ["TestX.test_repro_module", "TestX.test_decorated_channels_last", "TestX.test_helper_only",
                              "TestX.test_bad_shapes"],
                    "extracted": ["TestX.test_repro_module", "TestX.test_decorated_channels_last",
                                  "TestX.test_bad_shapes"],
                    "valid": ["TestX.test_repro_module", "TestX.test_decorated_channels_last"], "category": "I1"},
    "test_only": {"fix": False},  # adds a test, touches no code, message says nothing of a fix
}


def build_repo(root: str | Path) -> dict[str, str]:
    """Create the repository at `root`; returns {label: sha}."""
    import git

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    repo = git.Repo.init(root)
    who = git.Actor("Fixture Author", "fixture@example.com")
    when = datetime(2024, 1, 1, tzinfo=timezone.utc)
    shas: dict[str, str] = {}
    tests: list[str] = []
    lowering = [_LOWERING[0]]

    def write(rel: str, text: str) -> None:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    def commit(label: str, message: str, files: list[str]) -> None:
        nonlocal when
        when += timedelta(days=1)
        repo.index.add(files)
        stamp = when.strftime("%Y-%m-%dT%H:%M:%S+0000")
        c = repo.index.commit(message, author=who, committer=who, author_date=stamp, commit_date=stamp)
        shas[label] = c.hexsha

    def test_file() -> str:
        return _HEADER + "".join(tests) + "\n\nif __name__ == '__main__':\n    run_tests()\n"

    write("torch_like/__init__.py", "")
    write("torch_like/lowering.py", "".join(lowering))
    write(TEST_FILE, test_file())
    write("README.md", "# torch_like\n\nA tiny compiler.\n")
    commit("initial", "Initial import", ["torch_like/__init__.py", "torch_like/lowering.py", TEST_FILE, "README.md"])

    lowering[0] = _LOWERING[1]
    tests.append(_TESTS["clamp"])
    write("torch_like/lowering.py", "".join(lowering))
    write(TEST_FILE, test_file())
    commit("clamp_fix", "Fix clamp lowering with a negative lower bound\n\nThe Python scalar bound was not "
                        "promoted to the input's dtype.", ["torch_like/lowering.py", TEST_FILE])

    lowering.append(_LOWERING[2])
    write("torch_like/lowering.py", "".join(lowering))
    commit("cat_feature", "Add a fast path for cat of one tensor", ["torch_like/lowering.py"])

    lowering.append(_LOWERING[3])
    tests.append(_TESTS["sum"])
    write("torch_like/lowering.py", "".join(lowering))
    write(TEST_FILE, test_file())
    commit("sum_fix", "Fix #123: sum over an empty dim list reduced everything\n\nA reduction with dim=() "
                      "must be the identity.", ["torch_like/lowering.py", TEST_FILE])

    write("README.md", "# torch_like\n\nA tiny compiler for tensors.\n")
    commit("docs", "Fix typo in README", ["README.md"])

    write("torch_like/misc.py", "def misc(x):\n    return x\n")
    write("test/other/test_misc.py", "import torch\n\n\ndef test_misc_op():\n    def fn(x):\n"
                                     "        return x + 1\n\n    torch.compile(fn)(torch.randn(3))\n")
    commit("misc_other_path", "Improve misc op handling", ["torch_like/misc.py", "test/other/test_misc.py"])

    lowering.append(_LOWERING[6])
    tests.append(_TESTS["strides"])
    write("torch_like/lowering.py", "".join(lowering))
    write(TEST_FILE, test_file())
    commit("strides_fix", "Keep channels_last strides in conv lowering (#4567)", ["torch_like/lowering.py", TEST_FILE])

    tests.append(_TESTS["relu_only"])
    write(TEST_FILE, test_file())
    commit("test_only", "Add a test for relu_ on a clone", [TEST_FILE])
    return shas


# -- an issue export ----------------------------------------------------------------------------------------------
_RUNNABLE = textwrap.dedent('''\
    Compiling this model gives a different result from eager:

    ```python
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(6, 4)

        def forward(self, x):
            return self.lin(x).transpose(0, 1).amax(dim=0)

    model = Model().cuda()
    x = torch.randn(3, 6, device="cuda")
    out = torch.compile(model)(x)
    print((out - model(x)).abs().max())
    ```

    Output:

    ```
    Traceback (most recent call last):
      File "repro.py", line 14, in <module>
    AssertionError: mismatch
    ```
''')

_RAISES = textwrap.dedent('''\
    This crashes:

    ```py
    import torch

    def fn(a, b):
        return a @ b

    x = torch.randn(3)
    y = torch.randn(4)
    torch.compile(fn)(x, y)
    ```
''')

ISSUES: list[Any] = [
    {"number": 101, "title": "Inductor gives a wrong result for amax after transpose", "body": _RUNNABLE,
     "labels": [{"name": "oncall: pt2"}, {"name": "module: inductor"}], "state": "closed",
     "html_url": "https://example.com/issues/101"},
    {"number": 102, "title": "matmul of mismatched vectors crashes under torch.compile", "body": _RAISES,
     "labels": ["bug"], "state": "open"},
    {"number": 103, "title": "Recompiles on every call when a Python float changes",
     "body": "Passing a different float each call triggers a recompile every time; the cache_size_limit is hit.",
     "labels": [], "state": "open"},
    {"number": 104, "title": "no body at all", "labels": []},
    {"number": 105, "title": "null body", "body": None, "labels": []},
    {"number": 106, "title": "labels are a string", "body": "see title", "labels": "bug"},
    "not an issue object",
]


def write_issues(path: str | Path) -> Path:
    path = Path(path)
    path.write_text(json.dumps(ISSUES, indent=1))
    return path
