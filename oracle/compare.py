"""Deciding whether a compiled result is wrong, by the rules PyTorch applies to fuzzer reports.

- Tolerances are `torch.testing.assert_close`'s defaults for the output's dtype.
- A result outside tolerance is still not a bug when it is at least as close to a float64 run
  of the same program as eager is (RMSE, like `torch._dynamo.utils.same(fp64_ref=...)`): the
  compiler reordered arithmetic, it did not compute something else.
- Integer and bool outputs are compared exactly, except where the float64 run agrees with the
  compiled value (a rounding or comparison that flipped because eager was the imprecise one),
  or, for integers, is strictly closer to it than eager: int16(1 / x) of a bfloat16 x is 32000
  in eager (the reciprocal rounded to bfloat16), 32149 compiled and 32126 in float64. Integer
  arithmetic alone is the same in the float64 run, so there eager and float64 agree and the
  rule accepts nothing.
- Index outputs of argmax/argmin/max/min/sort/topk are not compared where the reduced values
  tie: which index wins a tie is unspecified. topk with sorted=False leaves the order of its k
  results unspecified: its values are compared sorted along that dim, its indices not at all.
- Non-finite positions are compared on their own: NaN vs Inf vs finite is `nan_mismatch`.
  (Where both are non-finite the kind is compared too: a compiled -inf where eager says NaN is
  how lost NaN propagation shows after a log or a division, e.g. log(softshrink(NaN)).)
- Rounding-noise evidence (oracle/rounding_noise.py, optional `noise` bands per leaf path): a
  position that fails every rule above still passes where the compiled value lies within what
  one rounding per op, done differently, produces on this program: for floats a value within a
  few times the jittered runs' spread or a non-finite kind some jittered run also produced; for
  integers a value between the least and greatest the runs produced there (exactly theirs where
  rounding does not move it), for bools a value some run produced.
- Outputs may be nested tuples/lists/dicts of tensors and Python values; a different structure,
  shape or dtype is a mismatch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from nnforge.core.verdict import Symptom

FP64_MULTIPLIER = 2.0  # compiled RMSE may be up to this many times eager's (as dynamo's `same`)
# float16/bfloat16 results: 3, as `same` allows them, because where eager rounds after every op a
# backend may round once, or accumulate in its own order, and low precision magnifies either
FP64_MULTIPLIER_LOW_PRECISION = 3.0


# -- tolerances --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float


_TOLERANCES = {  # torch.testing.assert_close defaults
    "float16": Tolerance(1e-3, 1e-5),
    "bfloat16": Tolerance(1.6e-2, 1e-5),
    "float32": Tolerance(1.3e-6, 1e-5),
    "float64": Tolerance(1e-7, 1e-7),
    "complex32": Tolerance(1e-3, 1e-5),
    "complex64": Tolerance(1.3e-6, 1e-5),
    "complex128": Tolerance(1e-7, 1e-7),
}


def default_tolerance(dtype: Any) -> Tolerance:
    """assert_close's default for `dtype` (a torch dtype or its name); float32's for others."""
    name = str(dtype).removeprefix("torch.")
    return _TOLERANCES.get(name, _TOLERANCES["float32"])


# -- result ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Comparison:
    symptom: Symptom  # PASS, MISMATCH or NAN_MISMATCH
    path: str | None = None  # which leaf disagreed, e.g. "[1]" or "['logits']"
    leaf_index: int | None = None  # its position among the flattened leaves
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    fp64_rmse_actual: float | None = None
    fp64_rmse_eager: float | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.symptom is Symptom.PASS


PASS = Comparison(Symptom.PASS)


# -- flattening --------------------------------------------------------------------------------
def flatten(value: Any, path: str = "") -> list[tuple[str, Any]]:
    """(path, leaf) pairs in a stable order; dicts by sorted key, sequences by position."""
    if isinstance(value, dict):
        out: list[tuple[str, Any]] = []
        for k in sorted(value, key=repr):
            out.extend(flatten(value[k], f"{path}[{k!r}]"))
        return out
    if isinstance(value, (tuple, list)):
        out = []
        for i, v in enumerate(value):
            out.extend(flatten(v, f"{path}[{i}]"))
        return out
    return [(path, value)]


def tensor_leaves(value: Any) -> list[tuple[str, Any]]:
    import torch

    return [(p, v) for p, v in flatten(value) if isinstance(v, torch.Tensor)]


# -- comparing ---------------------------------------------------------------------------------
def compare_outputs(
    expected: Any,
    actual: Any,
    *,
    fp64: Any = None,
    tie_masks: dict[str, Any] | None = None,
    tensors_only: bool = False,
    noise: dict[str, Any] | None = None,
) -> Comparison:
    """Compare a whole (nested) output; the first disagreeing leaf decides.

    `fp64`: the same output from the float64 run (or None). `tie_masks`: path -> bool tensor,
    True where an index output is unspecified (a tie). `tensors_only`: `actual` is a flat list of
    tensors (ONNX-style) to be matched against the tensor leaves of `expected`. `noise`: path ->
    NoiseBand (rounding_noise.py) for float leaves; a pass that needed one notes it in `detail`.
    """
    exp = tensor_leaves(expected) if tensors_only else flatten(expected)
    if tensors_only:
        act = [(p, v) for p, v in zip((p for p, _ in exp), list(actual))]
        if len(list(actual)) != len(exp):
            return Comparison(Symptom.MISMATCH, detail=f"expected {len(exp)} tensor outputs, got {len(list(actual))}")
    else:
        act = flatten(actual)
        if [p for p, _ in exp] != [p for p, _ in act]:
            return Comparison(Symptom.MISMATCH, detail=f"output structure differs: expected leaves {[p for p, _ in exp]}, got {[p for p, _ in act]}")
    ref: dict[str, Any] = {}
    if fp64 is not None:
        ref_leaves = tensor_leaves(fp64) if tensors_only else flatten(fp64)
        if [p for p, _ in ref_leaves] == [p for p, _ in exp]:
            ref = dict(ref_leaves)
    notes = []
    for i, ((path, e), (_, a)) in enumerate(zip(exp, act)):
        c = compare_leaf(e, a, fp64=ref.get(path), tie_mask=(tie_masks or {}).get(path), noise=(noise or {}).get(path))
        if not c.ok:
            return Comparison(c.symptom, path or "<output>", i, c.max_abs_err, c.max_rel_err,
                              c.fp64_rmse_actual, c.fp64_rmse_eager, f"{path}: {c.detail}" if path else c.detail)
        if c.detail:
            notes.append(f"{path}: {c.detail}" if path else c.detail)
    return Comparison(Symptom.PASS, detail="; ".join(notes)) if notes else PASS


def compare_leaf(expected: Any, actual: Any, *, fp64: Any = None, tie_mask: Any = None, noise: Any = None) -> Comparison:
    import torch

    if isinstance(expected, torch.Tensor) or isinstance(actual, torch.Tensor):
        if not (isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor)):
            return Comparison(Symptom.MISMATCH, detail=f"expected {type(expected).__name__}, got {type(actual).__name__}")
        return compare_tensors(expected, actual, fp64=fp64 if isinstance(fp64, torch.Tensor) else None, tie_mask=tie_mask,
                               noise=noise)
    if isinstance(expected, bool) or isinstance(actual, bool) or isinstance(expected, int) and isinstance(actual, int):
        if type(fp64) is type(actual) is type(expected) and fp64 == actual:
            return PASS  # an integer (say int() of a float sum) where the float64 run sides with the compiled value
        if type(expected) is not type(actual) or expected != actual:
            return Comparison(Symptom.MISMATCH, detail=f"expected {expected!r}, got {actual!r}")
        return PASS
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        t = torch.tensor([float(expected)], dtype=torch.float64)
        u = torch.tensor([float(actual)], dtype=torch.float64)
        r = torch.tensor([float(fp64)], dtype=torch.float64) if isinstance(fp64, (int, float)) else None
        c = _compare_float(t, u, r, default_tolerance("float32"))
        return c if c.ok else Comparison(c.symptom, None, None, c.max_abs_err, c.max_rel_err, c.fp64_rmse_actual,
                                        c.fp64_rmse_eager, f"expected {expected!r}, got {actual!r}")
    try:
        same = type(expected) is type(actual) and bool(expected == actual)
    except Exception:
        same = repr(expected) == repr(actual)
    return PASS if same else Comparison(Symptom.MISMATCH, detail=f"expected {expected!r}, got {actual!r}")


def compare_tensors(expected: Any, actual: Any, *, fp64: Any = None, tie_mask: Any = None, noise: Any = None) -> Comparison:
    """One tensor against another (see the module docstring for the rules). `noise`: a NoiseBand
    for this tensor (float dtypes only; see oracle/rounding_noise.py)."""
    import torch

    if expected.shape != actual.shape:
        return Comparison(Symptom.MISMATCH, detail=f"shape {tuple(actual.shape)} instead of {tuple(expected.shape)}")
    if expected.dtype != actual.dtype:
        return Comparison(Symptom.MISMATCH, detail=f"dtype {actual.dtype} instead of {expected.dtype}")
    if isinstance(tie_mask, Unspecified):
        return Comparison(Symptom.PASS, detail="computed from the index of tied values (unspecified): not compared")
    if isinstance(tie_mask, Unordered) and expected.dim() > tie_mask.dim and not expected.is_complex():
        d = tie_mask.dim  # compare as the sets they are: sorted along the unordered dim
        expected, actual = expected.sort(dim=d).values, actual.sort(dim=d).values
        fp64 = fp64.sort(dim=d).values if fp64 is not None and tuple(fp64.shape) == tuple(expected.shape) else None
        tie_mask, noise = None, None
    elif isinstance(tie_mask, Unordered):
        tie_mask = None
    e, a = _dense(expected), _dense(actual)
    r = _dense(fp64) if fp64 is not None and tuple(fp64.shape) == tuple(e.shape) else None
    if e.is_complex():
        noise = None  # complex results are not jittered
        e, a = torch.view_as_real(e), torch.view_as_real(a)
        r = torch.view_as_real(r.to(torch.complex128)) if r is not None and r.is_complex() else None
    if e.dtype == torch.bool or not (e.is_floating_point()):
        return _compare_exact(e, a, r, tie_mask, noise if getattr(noise, "values", None) is not None else None)
    noise = noise if getattr(noise, "spread", None) is not None else None
    return _compare_float(e, a, r, default_tolerance(expected.dtype), noise)


def _dense(t: Any) -> Any:
    import torch

    t = t.detach()
    if t.layout != torch.strided:
        t = t.to_dense()
    if t.is_quantized:
        t = t.dequantize()
    return t.cpu()


def _compare_exact(e: Any, a: Any, r: Any, tie_mask: Any, noise: Any = None) -> Comparison:
    import torch

    differ = e != a
    if tie_mask is not None and tuple(tie_mask.shape) == tuple(e.shape):
        differ = differ & ~tie_mask.bool()
    if r is not None:
        r_same_kind = r.to(e.dtype) if not r.is_floating_point() or e.dtype == torch.bool else r.round().to(e.dtype)
        differ = differ & (a != r_same_kind)  # the float64 run sides with the compiled value
        if e.dtype != torch.bool and bool(differ.any()):
            r64 = r_same_kind.to(torch.float64)
            closer = (a.to(torch.float64) - r64).abs() < (e.to(torch.float64) - r64).abs()
            differ = differ & ~closer  # ... or is nearer the compiled value than eager's
    if bool(differ.any()) and noise is not None and tuple(noise.values.shape[1:]) == tuple(e.shape):
        by_noise = differ & noise.explains(a)  # a value rounding alone gives eager there
        differ = differ & ~by_noise
        if not bool(differ.any()):
            return Comparison(Symptom.PASS, detail=noise.note(int(by_noise.sum()), e.numel()))
    if not bool(differ.any()):
        return PASS
    n = int(differ.sum())
    idx = tuple(int(i) for i in differ.nonzero()[0])
    err = (e.to(torch.float64) - a.to(torch.float64)).abs()[differ]
    return Comparison(Symptom.MISMATCH, max_abs_err=float(err.max()) if err.numel() else None,
                      detail=f"{n} of {e.numel()} values differ exactly (first at {idx}: expected {e[idx].item()}, got {a[idx].item()})")


def _compare_float(e: Any, a: Any, r: Any, tol: Tolerance, noise: Any = None) -> Comparison:
    import torch

    e64, a64 = e.to(torch.float64), a.to(torch.float64)
    explained = None  # where rounding noise covers the compiled value (computed only when needed)

    def rounding_explains(where: Any) -> Any:
        nonlocal explained
        if noise is None or tuple(noise.center.shape) != tuple(e.shape):
            return torch.zeros_like(where)
        if explained is None:
            explained = noise.explains(a64, tol)
        return where & explained
    r64 = r.to(torch.float64) if r is not None else None
    fin_e, fin_a = torch.isfinite(e64), torch.isfinite(a64)
    same_nonfinite = (torch.isnan(e64) & torch.isnan(a64)) | (~fin_e & ~fin_a & (e64 == a64))
    bad_nonfinite = (~fin_e | ~fin_a) & ~same_nonfinite
    if bool(bad_nonfinite.any()) and r64 is not None:
        # Eager over- or under-flowed where float64 did not (or the other way round): accept the
        # positions where the compiled value agrees with float64 about finiteness and value.
        fin_r = torch.isfinite(r64)
        agrees = (fin_a == fin_r) & (~fin_a & ((torch.isnan(a64) & torch.isnan(r64)) | (a64 == r64))
                                     | fin_a & ((a64 - r64).abs() <= tol.atol + 10 * tol.rtol * r64.abs()))
        bad_nonfinite = bad_nonfinite & ~agrees
    by_noise = rounding_explains(bad_nonfinite) if bool(bad_nonfinite.any()) else None
    if by_noise is not None:
        bad_nonfinite = bad_nonfinite & ~by_noise
    if bool(bad_nonfinite.any()):
        idx = tuple(int(i) for i in bad_nonfinite.nonzero()[0])
        n = int(bad_nonfinite.sum())
        return Comparison(Symptom.NAN_MISMATCH,
                          detail=f"{n} of {e.numel()} positions differ in NaN/Inf (first at {idx}: expected {e64[idx].item()}, got {a64[idx].item()})")
    both = fin_e & fin_a
    diff = (e64 - a64).abs()
    close = diff <= tol.atol + tol.rtol * e64.abs()
    failing = both & ~close

    def noise_pass() -> Comparison | None:
        """PASS with a note when rounding noise covers every position that still fails."""
        covered = rounding_explains(failing)
        if bool((failing & ~covered).any()):
            return None
        n = int(covered.sum()) + (int(by_noise.sum()) if by_noise is not None else 0)
        return Comparison(Symptom.PASS, detail=noise.note(n, e.numel())) if n else PASS

    if not bool(failing.any()):
        return noise_pass() if by_noise is not None and bool(by_noise.any()) else PASS
    max_abs = float(diff[both].max())
    rel = diff / e64.abs().clamp_min(1e-30)
    max_rel = float(rel[both].max())
    idx = tuple(int(i) for i in failing.nonzero()[0])
    where = f"first at {idx}: expected {e64[idx].item():.8g}, got {a64[idx].item():.8g}"
    if r64 is not None:
        usable = both & torch.isfinite(r64)
        if bool(usable.any()):
            rmse_a = float(((a64 - r64)[usable] ** 2).mean().sqrt())
            rmse_e = float(((e64 - r64)[usable] ** 2).mean().sqrt())
            low = e.dtype in (torch.float16, torch.bfloat16)
            multiplier = FP64_MULTIPLIER_LOW_PRECISION if low else FP64_MULTIPLIER
            # in float16/bfloat16, one rounding at the output's magnitude is precision by definition
            floor = tol.atol / 10.0 + (torch.finfo(e.dtype).eps * float((r64[usable] ** 2).mean().sqrt()) if low else 0.0)
            if rmse_a <= multiplier * rmse_e + floor:
                return PASS  # no worse than eager, judged by the float64 run
            if (c := noise_pass()) is not None:
                return c
            return Comparison(Symptom.MISMATCH, None, None, max_abs, max_rel, rmse_a, rmse_e,
                              f"{int(failing.sum())} of {e.numel()} values outside rtol={tol.rtol:g}, atol={tol.atol:g} ({where}); "
                              f"RMSE against float64 {rmse_a:.3g} vs eager's {rmse_e:.3g}")
    if (c := noise_pass()) is not None:
        return c
    return Comparison(Symptom.MISMATCH, None, None, max_abs, max_rel, None, None,
                      f"{int(failing.sum())} of {e.numel()} values outside rtol={tol.rtol:g}, atol={tol.atol:g} ({where}); no float64 evidence")


# -- ties of index-returning ops, recorded during the eager run ---------------------------------
_INDEX_OPS = {"argmax": "extreme", "argmin": "extreme", "max": "extreme_dim", "min": "extreme_dim",
              "sort": "sort", "topk": "topk"}
# Ops that read the sign bit of an operand (position): of a zero or a NaN, that bit is not the
# value's meaning (0.0 == -0.0; a NaN has no sign), and compilers legitimately differ in it
# (x * 0 for a negative x, a masked row filled with zeros one way or the other), so what they
# compute from a zero or NaN there is unspecified.
_SIGN_READERS = {"copysign": 1, "signbit": 0, "atan2": 0}
# Ops that convert a float operand (position) into an integer result. C and C++ leave a float ->
# integer conversion of NaN, of an infinity or of a value whose truncation the integer type cannot
# hold undefined; PyTorch's kernels use a plain cast, so eager gives the most negative integer on
# x86 while a compiler's vectorised code may saturate, wrap or give 0. What is computed from such
# a conversion is unspecified.
_INT_CONVERTERS = {"_to_copy": 0, "to": 0, "copy_": 1, "copy": 1}


@dataclass(frozen=True)
class Unordered:
    """In place of a tie mask: the leaf's order along `dim` is unspecified (topk with sorted=False
    returns its k values in any order), so it is compared sorted along that dim."""

    dim: int


@dataclass(frozen=True)
class Unspecified:
    """In place of a tie mask: the leaf was computed from indices of tied values (topk or argmax
    of a constant row, then used to index or multiply), so its value is whatever index the
    implementation chose: not compared at all."""


class TieRecorder:
    """A dispatch mode for the eager reference run: remembers index outputs that saw ties.

    Matching is by the output tensor's storage identity, so only index tensors returned from
    forward as they were produced get a mask; `masks_for(out)` maps output paths to masks.
    An index output that saw a tie also taints whatever is computed from it: such an output is
    `Unspecified` (constant and tied value bins make these common); so does an op that read the
    sign bit of a zero or a NaN (`_SIGN_READERS`), and a float -> integer conversion of a value
    the integer type cannot hold (`_INT_CONVERTERS`). Also notes whether any random op ran
    (`used_rng`).
    """

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        recorder = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                try:
                    recorder._observe(func, args, kwargs or {}, out)
                except Exception:  # recording must never change what eager does
                    pass
                return out

        self._mode = _Mode()
        self._masks: dict[tuple, Any] = {}
        self._tainted: dict[int, Any] = {}  # storage pointer -> a tensor on it (held, so the memory is not reused)
        self.used_rng = False

    def __enter__(self) -> "TieRecorder":
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)

    @staticmethod
    def _key(t: Any) -> tuple:
        return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()))

    def _observe(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        import torch

        if torch.Tag.nondeterministic_seeded in func.tags:
            self.used_rng = True
        if self._tainted and any(self._is_tainted(a) for a in _tensor_leaves((args, kwargs))):
            for o in _tensor_leaves(out):
                self._taint(o)
        src_at = _INT_CONVERTERS.get(func.overloadpacket.__name__)
        if src_at is not None and len(args) > src_at and _undefined_int_conversion(args[src_at], out):
            for o in _tensor_leaves(out):
                self._taint(o)
            return
        sign_at = _SIGN_READERS.get(func.overloadpacket.__name__)
        if sign_at is not None and len(args) > sign_at and isinstance(args[sign_at], torch.Tensor) \
                and args[sign_at].is_floating_point():
            s = args[sign_at]
            if bool(((s == 0) | torch.isnan(s)).any()):
                for o in _tensor_leaves(out):
                    self._taint(o)
            return
        kind = _INDEX_OPS.get(func.overloadpacket.__name__)
        if kind is None:
            return
        x = args[0]
        if not isinstance(x, torch.Tensor) or x.numel() == 0:
            return
        if kind == "extreme":
            dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
            keepdim = kwargs.get("keepdim", args[2] if len(args) > 2 else False)
            mask = self._extreme_ties(x, dim, keepdim, func.overloadpacket.__name__ == "argmax")
            self._masks[self._key(out)] = mask
            if bool(mask.any()):
                self._taint(out)
        elif kind == "extreme_dim" and isinstance(out, (tuple, list)) and len(out) == 2:
            dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
            if dim is None or not isinstance(dim, int):
                return
            keepdim = kwargs.get("keepdim", args[2] if len(args) > 2 else False)
            mask = self._extreme_ties(x, dim, keepdim, func.overloadpacket.__name__ == "max")
            self._masks[self._key(out[1])] = mask
            if bool(mask.any()):
                self._taint(out[1])
        elif kind in ("sort", "topk") and isinstance(out, (tuple, list)) and len(out) == 2:
            values, indices = out
            if kind == "topk":
                d = kwargs.get("dim", args[2] if len(args) > 2 else -1)
            else:
                d = kwargs.get("dim", args[1] if len(args) > 1 and isinstance(args[1], int) else -1)
            d = d % max(x.dim(), 1)
            if kind == "topk" and not kwargs.get("sorted", args[4] if len(args) > 4 else True):
                # which k values is defined, their order is not: values compare sorted, indices not at all
                self._masks[self._key(values)] = Unordered(d)
                self._masks[self._key(indices)] = torch.ones(indices.shape, dtype=torch.bool)
                self._taint(indices)  # and whatever is computed from them, values too: their order is free
                self._taint(values)
                return
            # A returned value ties when it also occurs elsewhere in its slice of the input.
            xs = x.movedim(d, -1).unsqueeze(-2)  # (..., 1, n)
            vs = values.movedim(d, -1).unsqueeze(-1)  # (..., k, 1)
            counts = (vs == xs).sum(-1)  # (..., k)
            self._masks[self._key(indices)] = (counts > 1).movedim(-1, d)
            if bool((counts > 1).any()):
                self._taint(indices)

    def _taint(self, t: Any) -> None:
        self._tainted[t.untyped_storage().data_ptr()] = t

    def _is_tainted(self, t: Any) -> bool:
        return t.untyped_storage().data_ptr() in self._tainted

    @staticmethod
    def _extreme_ties(x: Any, dim: Any, keepdim: bool, is_max: bool) -> Any:
        import torch

        if x.dim() == 0:
            return torch.zeros((), dtype=torch.bool)
        if dim is None:
            ext = x.max() if is_max else x.min()
            tie = (x == ext).sum() > 1
            return tie.reshape([1] * x.dim()) if keepdim else tie
        ext = x.amax(dim=dim, keepdim=True) if is_max else x.amin(dim=dim, keepdim=True)
        tie = (x == ext).sum(dim=dim, keepdim=True) > 1
        return tie if keepdim else tie.squeeze(dim)

    def masks_for(self, out: Any) -> dict[str, Any]:
        import torch

        masks = {}
        for path, leaf in flatten(out):
            if not isinstance(leaf, torch.Tensor):
                continue
            m = self._masks.get(self._key(leaf))
            if isinstance(m, Unordered):
                masks[path] = m
            elif m is not None and not leaf.is_floating_point() and bool(m.any()):
                masks[path] = m.clone()
            elif m is None and self._is_tainted(leaf):
                masks[path] = Unspecified()
        return masks


def _undefined_int_conversion(src: Any, out: Any) -> bool:
    """Whether converting the float tensor `src` into the integer tensor `out` met a value C
    leaves undefined: NaN, an infinity, or one whose truncation lies outside `out`'s dtype."""
    import torch

    if not isinstance(src, torch.Tensor) or not isinstance(out, torch.Tensor) or not src.is_floating_point() \
            or out.is_floating_point() or out.is_complex() or out.dtype == torch.bool or src.numel() == 0:
        return False
    info = torch.iinfo(out.dtype)
    t = src.detach().to(torch.float64).trunc()  # NaN and infinities stay what they are
    inside = (t >= float(info.min)) & (t < float(info.max) + 1.0)  # both bounds are exact in float64
    return not bool(inside.all())


def _tensor_leaves(tree: Any) -> list[Any]:
    import torch

    return [x for x in torch.utils._pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


def rmse(a: Any, b: Any) -> float:
    import torch

    d = (a.to(torch.float64) - b.to(torch.float64))
    return math.sqrt(float((d * d).mean())) if d.numel() else 0.0
