"""Offline rewrites aimed at the frontend categories (graph capture: TorchDynamo), A1-H1.

Every rule picks one tensor-valued name X in forward and splices code after it that routes X
through the category's Python construct and rebinds X to a value of the same dtype and shape, so
the rest of the program runs unchanged. Scratch names in the templates (`_obj`, `_Scaled`,
`self._calls`) are replaced by fresh identifiers; `X` stands for the anchor.
"""

from __future__ import annotations

import ast

from nnforge.core.calls import CallStep
from nnforge.mutators.ast_tools import expr, guard, instantiate
from nnforge.mutators.base import AnchorRule, ensure_calls, register_mutator


# -- A: Python objects --------------------------------------------------------------------------------------
@register_mutator
class DunderObject(AnchorRule):
    """Route X through a user class with __call__, __len__, __eq__/__ne__, __getattr__ and a property."""

    name = "a1_dunder_object"
    category = "A1"
    needs = ("a float tensor in forward",)

    def rewrite(self, tree, anchor, rng, case):
        self.splice(tree, anchor, {
            "module": """
class _Scaled:
    scale = 0.5

    def __init__(self, t):
        self.t = t
        self.offset = 0.25

    def __call__(self, k):
        return self.t * (self.scale * k) + self.offset

    def __len__(self):
        return self.t.dim()

    def __eq__(self, other):
        return isinstance(other, _Scaled) and self.t.shape == other.t.shape

    def __ne__(self, other):
        return not self.__eq__(other)

    def __getattr__(self, name):
        if name == 'double_scale':
            return type(self).scale * 2
        raise AttributeError(name)

    @property
    def rank(self):
        return self.t.dim()
""",
            "forward": """
_obj = _Scaled(X)
if _obj == _Scaled(X) and (not _obj != _obj) and len(_obj) == _obj.rank:
    X = _obj(_obj.double_scale)
""",
        })
        return None


@register_mutator
class ModuleMixin(AnchorRule):
    """A submodule built by multiple inheritance (mixin + nn.Module), class vs instance attributes, a dataclass config."""

    name = "a1_module_mixin"
    category = "A1"
    needs = ("a float tensor in forward",)

    def rewrite(self, tree, anchor, rng, case):
        tree.ensure_import("dataclasses")
        self.splice(tree, anchor, {
            "module": """
class _Affine:
    gain = 2.0

    def affine(self, t):
        return t * self.gain + self.shift


class _Block(_Affine, torch.nn.Module):

    def __init__(self):
        super().__init__()
        self.shift = 0.5
        self.gain = 0.5


@dataclasses.dataclass
class _Cfg:
    scale: float = 1.0
    enabled: bool = True
""",
            "init": "self._blk = _Block()\nself._cfg = _Cfg()\n",
            "forward": """
if self._cfg.enabled and _Affine.gain != self._blk.gain:
    X = self._blk.affine(X) * self._cfg.scale
""",
        })
        return None


@register_mutator
class FunctionValues(AnchorRule):
    """Functions as values: a closure from a factory, functools.partial, an lru_cache helper, map/filter/sorted(key=)."""

    name = "a2_function_values"
    category = "A2"
    needs = ("a float tensor in forward",)

    def rewrite(self, tree, anchor, rng, case):
        tree.ensure_import("functools")
        self.splice(tree, anchor, {
            "module": """
def _make_scaler(k):

    def _scale(t):
        return t * k
    return _scale


@functools.lru_cache(maxsize=None)
def _coef(n):
    return 1.0 / (n + 2)
""",
            "forward": """
_fns = [_make_scaler(0.5), functools.partial(torch.mul, other=0.25)]
_parts = list(map(lambda _f: _f(X), _fns))
_parts = sorted(_parts, key=lambda _t: _t.dim())
_kept = list(filter(lambda _t: _t is not None, _parts))
X = sum(_kept) * _coef(X.dim()) + X
""",
        })
        return None


@register_mutator
class TensorAttributes(AnchorRule):
    """Tensor attributes as Python values: .shape, .dtype, .device, .requires_grad, .data."""

    name = "a3_tensor_attributes"
    category = "A3"
    needs = ("a float tensor in forward",)

    def rewrite(self, tree, anchor, rng, case):
        self.splice(tree, anchor, {
            "forward": """
_shape = tuple(X.shape)
_kind = (X.dtype, X.device, X.requires_grad)
_out = torch.zeros(_shape, dtype=_kind[0], device=_kind[1])
if _kind[2]:
    _out = _out + X
else:
    _out.add_(X.data)
X = _out + float(len(_shape)) * 0.125
""",
        })
        return None


@register_mutator
class ParameterVsBuffer(AnchorRule):
    """A frozen nn.Parameter next to a registered buffer, read in forward and branched on via requires_grad."""

    name = "a3_param_buffer"
    category = "A3"
    needs = ("a float tensor in forward",)

    def rewrite(self, tree, anchor, rng, case):
        self.splice(tree, anchor, {
            "init": """
self._frozen = torch.nn.Parameter(torch.tensor(0.5), requires_grad=False)
self.register_buffer('_bias', torch.tensor(0.25))
""",
            "forward": """
X = X * self._frozen.to(X.dtype) + self._bias.to(X.dtype) * (2.0 if self._frozen.requires_grad else 1.0)
""",
        })
        return None


# -- B: containers ---------------------------------------------------------------------------------------------
@register_mutator
class ListDictOps(AnchorRule):
    """dict setdefault/update/pop with default, list reverse/pop, sorted(key=), slicing with a step, `in`, list comparison."""

    name = "b1_list_dict_ops"
    category = "B1"
    needs = ("a float tensor in forward",)

    def rewrite(self, tree, anchor, rng, case):
        self.splice(tree, anchor, {
            "forward": """
_d = {'a': X, 'b': X * 2.0}
_d.setdefault('c', X + 1.0)
_d.setdefault('a', X * 3.0)
_d.update({'b': X - 1.0})
_vals = list(_d.values())
_vals.reverse()
_last = _vals.pop()
_miss = _d.pop('zz', None)
_keys = sorted(_d.keys(), key=lambda _k: -ord(_k))
_pick = _vals[::2]
_tags = {len(_vals), len(_keys)}
if _miss is None and 'c' in _d and _keys[0] == 'c' and [1, 2] < [1, 3] and 2 in _tags:
    X = _pick[0] * 0.5 + _last * 0.5
""",
        })
        return None


@register_mutator
class StructuredContainers(AnchorRule):
    """namedtuple, OrderedDict.move_to_end, nn.ModuleDict/ModuleList iteration and indexing, a nested container output."""

    name = "b2_structured_containers"
    category = "B2"
    needs = ("a float tensor in forward",)

    def rewrite(self, tree, anchor, rng, case):
        tree.ensure_import("collections")
        self.splice(tree, anchor, {
            "module": "_Pair = collections.namedtuple('_Pair', ['lo', 'hi'])\n",
            "init": """
self._acts = torch.nn.ModuleDict({'clip': torch.nn.Hardtanh(-3.0, 3.0), 'same': torch.nn.Identity()})
self._stack = torch.nn.ModuleList([torch.nn.Identity(), torch.nn.Hardtanh(-4.0, 4.0)])
""",
            "forward": """
_p = _Pair(lo=X * 0.5, hi=X)
_od = collections.OrderedDict()
_od['hi'] = _p.hi
_od['lo'] = _p.lo
_od.move_to_end('hi')
_acc = list(_od.values())[0]
for _key, _mod in self._acts.items():
    _acc = _mod(_acc)
for _i, _mod in enumerate(self._stack):
    _acc = self._stack[_i](_acc) if _i % 2 == 0 else _mod(_acc)
X = _acc + _p[1] * 0.5
""",
        })
        if rng.random() < 0.5:
            tree.append_output(expr("{'nested': [X, (X,)], 'rank': X.dim()}", X=anchor.name))
        return None


# -- C: iterator state --------------------------------------------------------------------------------------------
@register_mutator
class PartialIterators(AnchorRule):
    """A generator and an iterator consumed partially, zip of unequal lengths, enumerate(start=), itertools.islice."""

    name = "c1_partial_iterators"
    category = "C1"
    needs = ("a float tensor in forward",)

    def rewrite(self, tree, anchor, rng, case):
        tree.ensure_import("itertools")
        self.splice(tree, anchor, {
            "module": """
def _steps(t):
    yield t * 0.5
    yield t * 0.25
    yield t * 0.125
""",
            "forward": """
_gen = _steps(X)
_first = next(_gen)
_it = iter([X, _first, X + 1.0])
next(_it)
_pairs = list(zip(range(2), _it, _gen))
_acc = _first
for _k, (_n, _a, _b) in enumerate(_pairs, start=1):
    _acc = _acc + _a * (0.1 * _k) + _b
_rest = list(itertools.islice(_it, 5))
X = _acc if not _rest else X
""",
        })
        return None


# -- D: type conversions ---------------------------------------------------------------------------------------------
@register_mutator
class ScalarRoundTrip(AnchorRule):
    """Python scalars from tensors (.item(), float(), int(), bool(), tolist()) mixed back into tensor math."""

    name = "d1_scalar_roundtrip"
    category = "D1"
    packable = False  # a pack would move or dilute what it tests
    needs = ("a float tensor in forward",)

    def rewrite(self, tree, anchor, rng, case):
        self.splice(tree, anchor, {
            "forward": """
_flat = X.reshape(-1)
_s = float(torch.tanh(_flat[:1].sum()).item())
_n = int(_flat.numel() > 0)
_vals = _flat[:2].tolist()
_b = bool(len(_vals) == min(2, _flat.numel()))
X = X * (1.0 + 0.5 * _s) + (0.25 * _n if _b else 0.0)
""",
        })
        return None


@register_mutator
class ShapeArithmetic(AnchorRule):
    """Sizes as Python ints: reshape/view computed from sizes, // and % on sizes, torch._check."""

    name = "d2_shape_arithmetic"
    category = "D2"
    float_ = False
    min_rank = 1
    needs = ("a tensor of rank >= 1 in forward",)

    def rewrite(self, tree, anchor, rng, case):
        self.splice(tree, anchor, {
            "forward": """
_shape = X.shape
_last = _shape[-1]
_rows = X.numel() // max(_last, 1)
torch._check(_rows >= 0)
_half = _last // 2 + _last % 2
_mat = X.reshape(_rows, _last)
X = torch.cat([_mat[:, :_half], _mat[:, _half:]], dim=1).view(_shape)
""",
        })
        return None


# -- E: context and scope ------------------------------------------------------------------------------------------
@register_mutator
class GlobalsAndClosures(AnchorRule):
    """A module-level global read and another written, a nested function with nonlocal, an imported function."""

    name = "e1_globals_closures"
    category = "E1"
    needs = ("a float tensor in forward",)

    def rewrite(self, tree, anchor, rng, case):
        stmts, mapping = instantiate(tree, {
            "module": "from math import sqrt as _sqrt\n_GAIN = 0.5\n_SEEN = 0\n",
            "forward": """
_SEEN = _SEEN + 1
_total = X * _GAIN

def _bump(_t):
    nonlocal _total
    _total = _total + _t * _sqrt(0.25)
    return _total
_bump(X)
X = _total
""",
        }, X=anchor.name)
        tree.add_module_level(stmts["module"])
        tree.insert_after(anchor, guard(stmts["forward"], self.guard_for(anchor), X=anchor.name))
        tree.declare_global(mapping["_SEEN"])
        return None


@register_mutator
class GradModeRegion(AnchorRule):
    """Wrap consecutive forward statements in no_grad / a flipped set_grad_enabled / enable_grad / autocast(enabled=False).

    A region only shows in the graph (as `_set_grad_enabled` / autocast enter-exit) when it changes
    the mode the call runs in; generator seeds make their first call under no_grad, so there a
    `no_grad()` region is nested in `enable_grad()`, and `set_grad_enabled` flips the current mode.
    """

    name = "e2_grad_mode_region"
    category = "E2"
    float_ = False
    needs = ("a forward with at least one assignment",)

    MANAGERS = ("torch.no_grad()", "torch.set_grad_enabled(not torch.is_grad_enabled())", "torch.enable_grad()",
                "torch.autocast('cpu', enabled=False)")

    def candidates(self, tree):
        return [a for a in tree.anchors() if a.after >= 0]

    def rewrite(self, tree, anchor, rng, case):
        body = tree.forward.body
        manager = rng.choice(self.MANAGERS)
        grad_off = ensure_calls(case, 1)[0].grad_enabled is False
        # no_grad under a no_grad call is a no-op (Dynamo drops it, and an enable_grad around only a
        # no_grad too): nest it as enable_grad { first statement; no_grad { the rest } }.
        nest = (manager == "torch.no_grad()" and grad_off) or (manager == "torch.enable_grad()" and rng.random() < 0.5)
        start = anchor.after
        end = start + 1
        while end < len(body) and end - start < 3 and _is_plain_assign(body[end]) and (nest or rng.random() < 0.6):
            end += 1
        inner: list[ast.stmt] = body[start:end]
        if nest:
            manager = "torch.enable_grad()"
            if len(inner) >= 2:
                inner = inner[:1] + [ast.With(items=[ast.withitem(context_expr=expr("torch.no_grad()"))], body=inner[1:])]
        body[start:end] = [ast.With(items=[ast.withitem(context_expr=expr(manager))], body=inner)]
        return None


def _is_plain_assign(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], (ast.Name, ast.Tuple))


@register_mutator
class RaisingWithBlock(AnchorRule):
    """A `with` block that flips grad mode and raises inside the compiled region; the exception is handled.

    Variants: try/except/finally around `with set_grad_enabled(...)`, a user context manager whose
    `__exit__` restores grad mode and swallows the exception, a `contextlib.contextmanager` that
    catches it around its `yield`. The grad mode is flipped (`not torch.is_grad_enabled()`) rather
    than set, so the region changes it whichever mode the call runs in (generator seeds make their
    first call under no_grad, where a plain `no_grad()` would leave no trace in the graph); Dynamo
    must then restore the mode on the exception path, which shows as `_set_grad_enabled` pairs.
    """

    name = "e2_raising_with"
    category = "E2"
    needs = ("a float tensor in forward",)

    VARIANTS = {
        "try_with": {
            "module": """
class _Stop(Exception):
    pass
""",
            "forward": """
_closed = False
try:
    with torch.set_grad_enabled(not torch.is_grad_enabled()):
        _half = X * 0.5
        try:
            raise _Stop(_half)
        finally:
            _closed = True
except _Stop as _e:
    X = X + _e.args[0]
finally:
    X = X if _closed else X * 0.0
""",
        },
        "swallowing_manager": {
            "module": """
class _Stop(Exception):
    pass


class _FlipGrad:

    def __init__(self):
        self.caught = 0

    def __enter__(self):
        self.prev = torch.is_grad_enabled()
        torch.set_grad_enabled(not self.prev)
        return self

    def __exit__(self, exc_type, exc, tb):
        torch.set_grad_enabled(self.prev)
        if exc_type is not None and issubclass(exc_type, _Stop):
            self.caught += 1
            return True
        return False
""",
            "forward": """
_mgr = _FlipGrad()
_keep = X
with _mgr:
    X = X * 0.5
    raise _Stop(X)
X = X + _keep * (0.25 * _mgr.caught)
""",
        },
        "generator_manager": {
            "module": """
class _Stop(Exception):
    pass


@contextlib.contextmanager
def _flipped(t):
    with torch.set_grad_enabled(not torch.is_grad_enabled()):
        try:
            yield t * 0.5
        except _Stop:
            pass
""",
            "forward": """
with _flipped(X) as _half:
    X = X + _half
    raise _Stop()
""",
        },
    }

    def rewrite(self, tree, anchor, rng, case):
        kind = rng.choice(sorted(self.VARIANTS))
        if kind == "generator_manager":
            tree.ensure_import("contextlib")
        self.splice(tree, anchor, self.VARIANTS[kind])
        return None


# -- F: side effects -------------------------------------------------------------------------------------------------
@register_mutator
class AttributeSideEffects(AnchorRule):
    """Mutation outside the graph: a call counter attribute, a list owned by the module, a global list."""

    name = "f1_attribute_side_effects"
    category = "F1"
    float_ = False
    needs = ("a tensor in forward",)

    def rewrite(self, tree, anchor, rng, case):
        self.splice(tree, anchor, {
            "module": "_LOG = []\n",
            "init": "self._calls = 0\nself._seen = []\n",
            "forward": """
self._calls += 1
self._seen.append(tuple(X.shape))
if len(self._seen) > 4:
    self._seen.pop(0)
_LOG.append(self._calls)
del _LOG[:-3]
""",
        })
        return None


@register_mutator
class InplaceOnViews(AnchorRule):
    """In-place ops through views of a clone (narrow, transpose), out=, copy_; optionally an output aliasing an input."""

    name = "f2_inplace_views"
    category = "F2"
    min_rank = 1
    needs = ("a float tensor of rank >= 1 in forward",)

    def rewrite(self, tree, anchor, rng, case):
        self.splice(tree, anchor, {
            "forward": """
_c = X.clone()
_v = _c.narrow(-1, 0, min(1, _c.shape[-1]))
_v.mul_(2.0)
_c.transpose(0, -1).add_(0.5)
if not _c.requires_grad:
    _o = torch.empty_like(_c)
    torch.add(_c, 0.25, out=_o)
    _c.copy_(_o)
X = _c
""",
        })
        params = [p for p in tree.params() if not p.startswith("_")]
        if params and rng.random() < 0.5:
            tree.append_output(expr("P[...]", P=rng.choice(params)))
        return None


# -- G: guards --------------------------------------------------------------------------------------------------------
@register_mutator
class ChangingScalars(AnchorRule):
    """A call counter used as a Python scalar in tensor math: values that change every call (recompile pressure)."""

    name = "g1_changing_scalars"
    category = "G1"
    needs = ("a float tensor in forward",)

    def rewrite(self, tree, anchor, rng, case):
        self.splice(tree, anchor, {
            "init": "self._step = 0\n",
            "forward": """
self._step += 1
_phase = self._step % 3
_size = X.shape[0] if X.dim() > 0 else 1
X = X * (1.0 + 0.25 * _phase) + 0.0 * _size
""",
        })
        return ensure_calls(case, 4)


@register_mutator
class StateGuards(AnchorRule):
    """Forward branches on an attribute flag, a dict entry, self.training and a global flag; later calls change them."""

    name = "g2_state_guards"
    category = "G2"
    needs = ("a float tensor in forward",)

    def rewrite(self, tree, anchor, rng, case):
        m = self.splice(tree, anchor, {
            "module": "_FLAG = True\n",
            "init": "self._enabled = True\nself._cfg = {'scale': 0.5}\n",
            "forward": """
if self._enabled and _FLAG:
    X = X * self._cfg['scale']
elif self.training:
    X = X + 1.0
else:
    X = X - 1.0
""",
        })
        options = [
            CallStep(set_attrs={m["_enabled"]: False}),
            CallStep(mode="eval"),
            CallStep(set_attrs={m["_cfg"]: {"scale": 2.0}, m["_enabled"]: True}),
            CallStep(set_globals={m["_FLAG"]: False}),
            CallStep(mode="train"),
        ]
        k = rng.randint(2, 4)
        return ensure_calls(case, 1) + tuple(options[:k])


# -- H: graph breaks --------------------------------------------------------------------------------------------------
@register_mutator
class GraphBreaks(AnchorRule):
    """A data-dependent branch, a print, an explicit graph break or a loop over tolist() in the middle of forward."""

    name = "h1_graph_breaks"
    category = "H1"
    packable = False  # a pack would move or dilute what it tests
    needs = ("a float tensor in forward",)

    VARIANTS = {
        "branch": """
if X.sum() > 0:
    X = X * 0.5
else:
    X = X * 2.0
""",
        "print": "print('nnforge:', tuple(X.shape), X.dtype)\n",
        "graph_break": "torch._dynamo.graph_break()\nX = X + 0.5\n",
        "loop": """
_acc = 0.0
for _v in X.reshape(-1)[:2].tolist():
    _acc = _acc + (1.0 if _v > 0 else -1.0)
X = X + _acc * 0.125
""",
    }

    def rewrite(self, tree, anchor, rng, case):
        kinds = rng.sample(sorted(self.VARIANTS), rng.randint(1, 2))
        self.splice(tree, anchor, {"forward": "".join(self.VARIANTS[k] for k in kinds)})
        return None
