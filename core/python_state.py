"""Python-side state a call can change: plain-data attributes of a model's modules and plain-data
globals of its program.

Why it is compared after every call, like outputs: Dynamo must replay a write such as
`self.calls += 1`, `self.seen.append(...)` or `_LOG.append(...)` after its graph runs. When it
loses one, no tensor need differ on that call, and a later call may show it only through whatever
ops happen to read the value, so the bug would be keyed (and split) by those ops. Compared here,
the lost write is seen on the call that made it and named by what was written (`side_effect_kind`).

`python_state` is embedded in every `repro.py` (triage/repro.py copies its source), so it imports
nothing but torch and defines its helpers inside.
"""

from __future__ import annotations

from typing import Any

ATTRIBUTE_PREFIX = "self"  # keys: "self.<module path>.<name>" for attributes, "global <name>" for globals
GLOBAL_PREFIX = "global "


def python_state(model: Any, program_globals: dict[str, Any] | None = None) -> dict[str, Any]:
    """{key: value} for every plain-data attribute of `model` and its submodules (nn.Module's own
    bookkeeping left out) and every plain-data global in `program_globals`. Plain data: None, bool,
    int, float, complex, str, tensors that are no parameters, and lists, tuples, dicts and sets of
    those, up to a few levels deep; functions, classes, modules and other objects are skipped."""
    import torch

    internal = set(vars(torch.nn.Module()))  # _parameters, _buffers, _modules, hooks, training ...
    internal |= {"_is_torch_compile", "_orig_mod", "_torchdynamo_orig_callable"}  # set by torch.compile itself

    def plain(value: Any, depth: int = 0) -> bool:
        if value is None or isinstance(value, (bool, int, float, complex, str)):
            return True
        if isinstance(value, torch.Tensor):
            return not isinstance(value, torch.nn.Parameter)
        if depth >= 3:
            return False
        if isinstance(value, (list, tuple, set, frozenset)):
            return len(value) <= 256 and all(plain(v, depth + 1) for v in value)
        if isinstance(value, dict):
            return len(value) <= 256 and all(isinstance(k, (str, int)) and plain(v, depth + 1)
                                             for k, v in value.items())
        return False

    def copy(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.detach().clone()
        if isinstance(value, (set, frozenset)):
            return sorted(value, key=repr)
        if isinstance(value, dict):
            return {k: copy(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(copy(v) for v in value) if type(value) in (list, tuple) else [copy(v) for v in value]
        return value

    state: dict[str, Any] = {}
    try:
        modules = list(model.named_modules())
    except Exception:  # a program whose module tree is broken: nothing to compare
        modules = []
    for prefix, module in modules:
        for name, value in list(vars(module).items()):
            if name in internal or name.startswith("__") or not plain(value):
                continue
            state[".".join(p for p in (ATTRIBUTE_PREFIX, prefix, name) if p)] = copy(value)
    for name, value in list((program_globals or {}).items()):
        if not name.startswith("__") and plain(value):
            state[GLOBAL_PREFIX + name] = copy(value)
    return state


def value_kind(value: Any) -> str:
    """A value's kind for root-cause keys: `int`, `float`, `bool`, `str`, `None`, `container`,
    or the type's name (`Tensor`)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float, str)):
        return type(value).__name__
    if value is None:
        return "None"
    return "container" if isinstance(value, (list, dict, tuple, set, frozenset)) else type(value).__name__


def side_effect_kind(key: str, value: Any) -> str:
    """What a lost write was, without names or values: `module attribute (int)`, `global (container)`."""
    where = "global" if key.startswith(GLOBAL_PREFIX) else "module attribute"
    return f"{where} ({value_kind(value)})"
