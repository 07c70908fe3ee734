"""Test-only backends with planted faults, so the oracle, blame and triage can be tested on bugs
whose answer is known. Never part of a default target list: they run only when named.

Each is AOTAutograd (as `aot_eager`) with a faulty forward compiler, and each fault fires only
when the captured ATen graph contains a chosen op (`op` parameter, e.g. `faulty_crash:sin`;
without it, always). That makes them behave like real lowering bugs: a reducer that removes the
op makes the bug go away, one that keeps it keeps the bug.

| target             | ladder                         | fault (when the graph has aten.<op>)                         |
| ------------------ | ------------------------------ | ------------------------------------------------------------ |
| `faulty_perturb`   | dynamo -> faulty_perturb       | first floating output scaled by (1 + eps) plus eps (eps=1e-2) |
| `faulty_crash`     | dynamo -> faulty_crash         | RuntimeError "faulty_crash: no lowering for aten.<op>" raised from `lower_faulty_op` |
| `faulty_segv`      | dynamo -> faulty_segv          | os.abort() (SIGABRT: the worker dies)                        |
| `faulty_lost_write`| dynamo -> faulty_lost_write    | writes to int attributes of the model's modules during a call are undone (Dynamo's side-effect replay lost) |

Three distinct faults for triage tests: `faulty_perturb:add`, `faulty_crash:sin`, `faulty_segv:relu`.

`faulty_chaos` (for the sandbox's flood benchmark, bench/flood.py) kills its worker a different
way per graph, chosen by a hash of the graph's code: SIGSEGV, a hang, a memory blow-up, an exit,
a child that outlives the call (the call itself then passes), or a plain pass.

`op` may list alternatives, `faulty_crash:sin|cos`: the fault fires for the first listed op the
graph contains and names that op (a graph with both crashes on `sin`, one with only `cos` on
`cos`). One target then plants two distinguishable bugs, which is how triage tests check that a
reducer keeps the bug it started with instead of sliding onto another one. `op` may also ask
for ops together, `faulty_crash:sin&cos`: the fault fires only on a graph that has them all (as a
fusion bug needs both of its ops in one graph), which is how the reducer's tests plant a bug that
two members of a pack show together and neither alone.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from nnforge.oracle.backend import TargetSpec, register_backend, register_target
from nnforge.oracle.torch_backends import TorchCompileBackend

CRASH_MESSAGE = "faulty_crash: no lowering for aten.{op}"


def graph_ops(gm: Any) -> set[str]:
    """Names of the ATen ops (overload packets, e.g. `sin`) called in an FX graph."""
    names = set()
    for node in gm.graph.nodes:
        if node.op == "call_function":
            text = str(node.target)  # "aten.sin.default"
            if text.startswith("aten."):
                names.add(text.split(".")[1])
    return names


def lower_faulty_op(op: str) -> None:
    """The fake lowering that fails: the crash location triage should find."""
    raise RuntimeError(CRASH_MESSAGE.format(op=op))


def _faulty_compiler(fault: str, op: str | None, eps: float) -> Any:
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    together = op is not None and "&" in op
    wanted = None if op is None else op.split("&" if together else "|")

    def fw_compiler(gm: Any, example_inputs: Any) -> Callable:
        present = graph_ops(gm)
        if together:
            hit = op if all(o in present for o in wanted) else None
        else:
            hit = None if wanted is None else next((o for o in wanted if o in present), None)
        triggered = wanted is None or hit is not None
        if triggered and fault == "crash":
            lower_faulty_op(hit or "any")
        if triggered and fault == "abort":
            os.abort()
        if fault == "chaos":
            _chaos(gm)
        if fault == "amin_zero_init":
            _amin_from_zero(gm)
        if not (triggered and fault == "perturb"):
            return make_boxed_func(gm.forward)
        return make_boxed_func(_first_float_off(gm, eps))

    def bw_compiler(gm: Any, example_inputs: Any) -> Callable:
        if fault != "grad_perturb":  # the backward's first floating-point gradient comes back off
            return make_boxed_func(gm.forward)
        return make_boxed_func(_first_float_off(gm, eps))

    return aot_autograd(fw_compiler=fw_compiler, bw_compiler=bw_compiler)


def _first_float_off(gm: Any, eps: float) -> Callable:
    """gm's forward, its first floating-point result scaled by 1 + eps and shifted by eps."""
    import torch

    def perturbed(*args: Any) -> Any:
        outs = list(gm.forward(*args))
        for i, o in enumerate(outs):
            if isinstance(o, torch.Tensor) and o.is_floating_point():
                outs[i] = o * (1 + eps) + eps
                break
        return outs

    return perturbed


class FaultyBackend(TorchCompileBackend):
    fault: str = ""
    params = TorchCompileBackend.params + ("op", "eps")

    def compiler(self) -> Any:
        op = self.options.get("op")
        return _faulty_compiler(self.fault, str(op) if op is not None else None, float(self.options.get("eps", 1e-2)))


@register_backend
class FaultyPerturbBackend(FaultyBackend):
    name = "faulty_perturb"
    fault = "perturb"


@register_backend
class FaultyCrashBackend(FaultyBackend):
    name = "faulty_crash"
    fault = "crash"


@register_backend
class FaultySegvBackend(FaultyBackend):
    name = "faulty_segv"
    fault = "abort"


@register_backend
class FaultyGradPerturbBackend(FaultyBackend):
    """A correct forward and a backward whose first floating-point gradient is off by `eps`:
    only a test that runs a backward can see it."""

    name = "faulty_grad_perturb"
    fault = "grad_perturb"


@register_backend
class FaultyAminZeroInitBackend(FaultyBackend):
    """Integer `amin` whose accumulator starts at 0 instead of the dtype's maximum: wrong only on
    rows whose every value is positive (the shape of a real Inductor bug in small-integer min/max
    reductions), so only values drawn with one sign show it."""

    name = "faulty_amin_zero_init"
    fault = "amin_zero_init"


@register_backend
class FaultyChaosBackend(FaultyBackend):
    name = "faulty_chaos"
    fault = "chaos"


@register_backend
class FaultyLostWriteBackend(TorchCompileBackend):
    """torch.compile(backend="eager") that loses what a call wrote to int attributes of the
    model's modules, as Dynamo does when it fails to replay a side effect after the graph."""

    name = "faulty_lost_write"
    compile_backend = "eager"

    def wrap_compiled(self, model: Any, compiled: Any) -> Any:
        def lost_writes(*args: Any) -> Any:
            before = {(id(m), k): (m, v) for m in model.modules() for k, v in vars(m).items()
                      if type(v) is int}
            try:
                return compiled(*args)
            finally:
                for (_, k), (m, v) in before.items():
                    setattr(m, k, v)

        return lost_writes


CHAOS_MODES = ("segv", "hang", "memory", "exit", "orphan", "pass")


def chaos_mode(code: str) -> str:
    import hashlib

    return CHAOS_MODES[int(hashlib.sha1(code.encode()).hexdigest(), 16) % len(CHAOS_MODES)]


def _amin_from_zero(gm: Any) -> None:
    """Rewrite every integer `aten.amin` of the graph into `min(amin, 0)`."""
    import torch

    graph = gm.graph
    for node in list(graph.nodes):
        val = node.meta.get("val")
        if (node.op == "call_function" and str(node.target).startswith("aten.amin")
                and isinstance(val, torch.Tensor) and not val.is_floating_point() and val.dtype != torch.bool):
            with graph.inserting_after(node):
                wrong = graph.call_function(torch.ops.aten.clamp_max.default, (node, 0))
            node.replace_all_uses_with(wrong, delete_user_cb=lambda user: user is not wrong)
    gm.recompile()


def _chaos(gm: Any) -> None:
    import signal
    import subprocess
    import sys
    import time

    mode = chaos_mode(gm.code)
    if mode == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif mode == "hang":
        time.sleep(3600)
    elif mode == "memory":
        hog = []
        while True:  # until the watchdog stops it
            hog.append(bytearray(64 * 2**20))
            time.sleep(0.01)
    elif mode == "exit":
        os._exit(17)
    elif mode == "orphan":  # a setsid'ed child left behind, still running when the call returns
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], start_new_session=True)


for _name, _doc in (("faulty_perturb", "test-only: wrong output from a planted fault"),
                    ("faulty_crash", "test-only: RuntimeError from a planted fake lowering"),
                    ("faulty_segv", "test-only: os.abort() in a planted fake compiler"),
                    ("faulty_chaos", "test-only: kills its worker a different way per graph (bench/flood.py)"),
                    ("faulty_lost_write", "test-only: writes to int module attributes are lost"),
                    ("faulty_amin_zero_init", "test-only: integer amin starts from 0 (wrong on all-positive rows)"),
                    ("faulty_grad_perturb", "test-only: the backward's first gradient is off by eps")):
    register_target(TargetSpec(_name, ("dynamo", _name), hidden=True, default_param="op", doc=_doc))
