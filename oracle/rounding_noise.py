"""Rounding-noise evidence: how far rounding alone moves each output of this program, on these values.

The float64 run tells whether a compiled result is as close to the exact answer as eager is. It
cannot judge a program that amplifies rounding: a bfloat16 intermediate of ~70 (ulp 0.5) used as
the exponent of a float64 power moves the output by a factor ~3 when it is rounded one ulp the
other way, which a compiler that fuses and rounds once (Inductor) does. Whichever of eager or the
compiled value happens to land nearer the float64 answer then decides by luck.

So when a float output fails the other checks, the eager program is run again a few times under
`RoundingJitter`: every ATen op that rounds has its floating result moved by one unit in the last
place of its dtype (float16, bfloat16, float32 and float64), per element, all up, all down, then
in random directions. The spread of those runs around eager's output is how much one rounding per
op, done differently, moves each output element. A compiled value within `NOISE_MULTIPLIER` times
that spread (plus the dtype's tolerance) is a different rounding, not a different computation. A
non-finite compiled value is explained where some jittered run produced the same kind (NaN, +inf
or -inf) there: rounding moved an intermediate across a domain boundary.

Why these choices:
- One ulp per op, not more: a compiler that skips a rounding, or rounds a wider intermediate
  once, differs from eager by at most half an ulp per op it fuses; a different implementation of
  a transcendental function by a few ulps. One ulp in each run and a multiplier of 4 cover both,
  while a wrong computation (a wrong constant, a dropped term: at least ~1e-2 relative) stays
  thousands of ulps outside in any program that does not amplify rounding.
- float64 too: the same runs cost nothing more, float64 ulps are tiny (so a program that does not
  amplify them gets no slack), and a float64 program that does amplify them (cancellation, an
  exponent) is exactly where a compiled float64 result may differ by far more than its tolerance.
- Only results that rounding produced are moved. Data movement and selection (views, copies,
  cat, where, max, sort, floor, relu, abs, ...) are exact in every implementation; moving their
  results would invent noise no compiler makes (floor(x) - 1 ulp truncates to the integer below).
  Of the other ops' float16/bfloat16/float32 results, an element stays put where the op computed
  in float64 gives the same value (0 * x, pow(x, 0), 2 + 3: moving an exact 0 to the smallest
  subnormal would turn log(0) = -inf into a finite number no compiler computes); a float64
  result stays put where it is a small integer (ulp at most 1/16), which rounding almost never
  lands on. A dtype conversion moves only the elements it actually rounded.
- All-up and all-down runs first: a monotone chain that rounding pushes across a boundary (floor,
  a comparison, softshrink's threshold, a domain edge) is crossed by one of them for certain, not
  with the luck of random signs; the random runs cover everything that is not monotone.

Integer and bool outputs get no spread, no multiplier: they are compared exactly, except that a
compiled value is accepted at a position where some jittered eager run produced exactly that
value (`ExactBand`). An integer computed from a rounded float (`x.long()` of a bfloat16 57.25
that a fused kernel computes as 56.96 in float32; `x > 0.5` of a value one ulp from 0.5; argmax
of two values one ulp apart) is decided by rounding, and the jittered runs show which integers
rounding can give there; any other integer is still a mismatch.

Not covered: complex results are not moved; ops that mutate arguments their schema does not
declare mutable (native_batch_norm's running statistics) are moved only in the result they return.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from nnforge.oracle.compare import Tolerance, flatten

JITTER_TRIALS = 8  # eager runs per measurement: all up, all down, then random directions
NOISE_MULTIPLIER = 4.0  # a compiled value may stray this many times the observed spread
JITTER_SEED = 0x5EED
SMALL_INTEGER_ULP = 1.0 / 16  # integer-valued results whose ulp is at most this are taken as exact

# ATen ops (overload packet names) whose results are exact in every implementation: they move,
# select, compare or fill values without arithmetic that rounds.
EXACT_OPS = frozenset("""
    clone contiguous cat stack hstack vstack index index_select gather take take_along_dim masked_select
    index_fill masked_fill masked_scatter where fill fill_ zero zero_ zeros ones full empty
    empty_like zeros_like ones_like full_like new_zeros new_ones new_full new_empty empty_strided scalar_tensor
    constant_pad_nd reflection_pad1d reflection_pad2d reflection_pad3d replication_pad1d replication_pad2d
    replication_pad3d repeat tile flip roll rot90 tril triu diag diag_embed diagonal_scatter slice_scatter
    select_scatter as_strided_scatter narrow_copy unfold_copy pixel_shuffle pixel_unshuffle channel_shuffle
    relu relu_ abs abs_ neg neg_ sign sgn floor floor_ ceil ceil_ round round_ trunc trunc_ frac fix
    max min amax amin maximum minimum fmax fmin clamp clamp_ clamp_min clamp_max hardtanh hardtanh_
    threshold hardshrink heaviside copysign fmod nan_to_num sort topk kthvalue median nanmedian mode
    cummax cummin max_pool1d max_pool2d max_pool3d max_pool2d_with_indices max_pool3d_with_indices
    adaptive_max_pool1d adaptive_max_pool2d adaptive_max_pool3d max_unpool2d max_unpool3d
    embedding one_hot repeat_interleave unique_consecutive unique_dim _unique2 lift_fresh lift_fresh_copy
    alias_copy detach_copy permute_copy t_copy transpose_copy view_copy expand_copy squeeze_copy
    unsqueeze_copy select_copy slice_copy diagonal_copy
""".split())
CONVERSION_OPS = frozenset({"_to_copy", "copy", "copy_", "to"})  # move only the elements they rounded


def _floating(t: Any) -> bool:
    import torch

    return (isinstance(t, torch.Tensor) and t.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64)
            and t.layout == torch.strided and not t.is_quantized and t.numel() > 0 and t.device.type != "meta")


class RoundingJitter:
    """A dispatch mode that moves the floating result of every rounding ATen op by one ulp.

    `direction`: +1 (every element toward +inf), -1 (toward -inf) or 0 (each element at random,
    from a private generator seeded with `seed`: the program's own random draws are untouched).
    """

    def __init__(self, direction: int = 0, seed: int = JITTER_SEED):
        from torch.utils._python_dispatch import TorchDispatchMode

        jitter = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return jitter._run(func, args, kwargs or {})

        self._mode = _Mode()
        self.direction = direction
        self.seed = seed
        self._generators: dict[Any, Any] = {}
        self.moved_ops = 0  # how many op results were moved (the measurement is void without any)

    def __enter__(self) -> "RoundingJitter":
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)

    # -- per op ------------------------------------------------------------------------------------
    def _run(self, func: Any, args: tuple, kwargs: dict) -> Any:
        import torch

        name = func.overloadpacket.__name__
        if (name[:-1] if name.endswith("_") else name) in EXACT_OPS or func.is_view \
                or torch.Tag.nondeterministic_seeded in func.tags:
            return func(*args, **kwargs)
        source = None
        if name in CONVERSION_OPS:
            source = args[1] if name == "copy_" and len(args) > 1 else (args[0] if args else None)
            if not isinstance(source, torch.Tensor):
                return func(*args, **kwargs)
        wide = None if source is not None else _in_float64(func, args, kwargs)  # before args are written
        out = func(*args, **kwargs)
        returns = func._schema.returns
        single = isinstance(out, torch.Tensor)
        items = [out] if single else list(out) if isinstance(out, (tuple, list)) else []
        if len(items) != len(returns):
            return out
        wides = [wide] if single else list(wide) if isinstance(wide, (tuple, list)) else [None] * len(items)
        if len(wides) != len(items):
            wides = [None] * len(items)
        for i, (ret, v, w) in enumerate(zip(returns, items, wides)):
            if not _floating(v):
                continue
            if ret.alias_info is None:  # a fresh result: replace it
                moved = self._nudge(v, _exact(v, source, w))
                if moved is not None:
                    items[i] = moved
            elif ret.alias_info.is_write:  # in place or out=: move it where it is
                moved = self._nudge(v, _exact(v, source, w))
                if moved is not None:
                    v.copy_(moved)
        if single:
            return items[0]
        return type(out)(items) if type(out) in (tuple, list) else out

    def _nudge(self, t: Any, exact: Any) -> Any:
        """`t` with every element not `exact` moved one ulp; None when nothing moves."""
        import torch

        x = t.detach()
        if self.direction:
            up = torch.full(x.shape, self.direction > 0, dtype=torch.bool, device=x.device)
        else:
            up = torch.randint(0, 2, x.shape, generator=self._generator(x.device), device=x.device) == 1
        inf = torch.tensor(float("inf"), dtype=x.dtype, device=x.device)
        moved = torch.nextafter(x, torch.where(up, inf, -inf))
        stay = ~torch.isfinite(x) | ~torch.isfinite(moved) | exact
        if bool(stay.all()):
            return None
        self.moved_ops += 1
        return torch.where(stay, x, moved)

    def _generator(self, device: Any) -> Any:
        import torch

        g = self._generators.get(device)
        if g is None:
            g = torch.Generator(device=device)
            g.manual_seed(self.seed)
            self._generators[device] = g
        return g


_NARROW = ("float16", "bfloat16", "float32")


def _in_float64(func: Any, args: tuple, kwargs: dict) -> Any:
    """The op once more on float64 copies of its float arguments (float dtypes asked for become
    float64): where the narrow result equals this, the op did not round. None when it cannot run.
    An op with no float tensor argument that still gives a float result (tanh of a uint8, an
    integer true division) computed in float32 by promotion: its integer arguments are widened
    too, or its rounded result would equal its own recompute and pass for exact."""
    import torch
    from torch.utils._pytree import tree_leaves, tree_map

    promoted = not any(isinstance(x, torch.Tensor) and x.is_floating_point() for x in tree_leaves((args, kwargs)))

    def widen(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            wide = str(x.dtype).removeprefix("torch.") in _NARROW or (
                promoted and not x.is_floating_point() and not x.is_complex() and x.dtype != torch.bool)
            return x.detach().to(torch.float64) if wide else x.detach().clone()  # a copy: nothing is written twice
        if isinstance(x, torch.dtype) and str(x).removeprefix("torch.") in _NARROW:
            return torch.float64
        return x

    try:
        return func(*tree_map(widen, args), **tree_map(widen, kwargs))
    except Exception:
        return None


def _exact(x: Any, source: Any, wide: Any) -> Any:
    """Bool tensor: the elements of the op result `x` that no rounding produced.

    A conversion from `source`: where converting back gives the source. A float16, bfloat16 or
    float32 result: where it equals the op computed in float64 (`wide`). A float64 result (or one
    whose float64 recompute failed): where it is an integer with an ulp of at most
    SMALL_INTEGER_ULP, which rounding almost never lands on and exact arithmetic often does.
    """
    import torch

    x = x.detach()
    if source is not None:
        try:
            return x.to(source.dtype) == source
        except Exception:
            pass
    if x.dtype != torch.float64 and isinstance(wide, torch.Tensor) and wide.shape == x.shape:
        return x.to(torch.float64) == wide.to(x.device)
    inf = torch.tensor(float("inf"), dtype=x.dtype, device=x.device)
    ulp = (torch.nextafter(x, inf) - x).abs()
    return (x == x.round()) & (ulp <= SMALL_INTEGER_ULP)


# -- what the jittered runs show, per output element ------------------------------------------------
def _comparable(eager: Any, jittered: list[Any]) -> list[Any]:
    """The jittered runs' tensors that match eager's in shape and dtype (data-dependent shapes may
    differ; such runs are left out)."""
    import torch

    return [j for j in jittered if isinstance(j, torch.Tensor) and j.shape == eager.shape and j.dtype == eager.dtype]


@dataclass(frozen=True)
class NoiseBand:
    """Where rounding alone puts one output tensor, element by element.

    `center`: eager's value (where eager is non-finite: the middle of the finite jittered values);
    `spread`: the largest distance of a finite jittered value from it; `nan`, `pos_inf`, `neg_inf`,
    `finite`: whether eager or some jittered run produced that kind of value there.
    """

    center: Any
    spread: Any
    nan: Any
    pos_inf: Any
    neg_inf: Any
    finite: Any
    runs: int

    @classmethod
    def observe(cls, eager: Any, jittered: list[Any]) -> "NoiseBand | None":
        """From eager's tensor and the same tensor of each jittered run (runs whose tensor has
        another shape or dtype, as data-dependent shapes may, are left out)."""
        import torch

        if not _floating(eager):
            return None
        same = _comparable(eager, jittered)
        if not same:
            return None
        obs = torch.stack([eager.detach().cpu().to(torch.float64)] + [j.detach().cpu().to(torch.float64) for j in same])
        fin = torch.isfinite(obs)
        lo = torch.where(fin, obs, torch.inf).amin(0)
        hi = torch.where(fin, obs, -torch.inf).amax(0)
        finite = fin.any(0)
        e = obs[0]
        center = torch.where(torch.isfinite(e), e, torch.where(finite, (lo + hi) / 2, torch.nan))
        spread = torch.where(finite, torch.maximum(hi - center, center - lo), torch.zeros_like(e))
        return cls(center, spread, torch.isnan(obs).any(0), (obs == torch.inf).any(0), (obs == -torch.inf).any(0),
                   finite, len(same))

    def explains(self, actual: Any, tol: Tolerance) -> Any:
        """Bool tensor: where the float64 `actual` is within what rounding alone produces."""
        import torch

        a = actual.to(torch.float64)
        center = torch.nan_to_num(self.center, nan=0.0)
        near = (a - center).abs() <= NOISE_MULTIPLIER * self.spread + tol.atol + tol.rtol * center.abs()
        return torch.where(torch.isnan(a), self.nan,
                           torch.where(a == torch.inf, self.pos_inf,
                                       torch.where(a == -torch.inf, self.neg_inf, self.finite & near)))

    def note(self, positions: int, total: int) -> str:
        return (f"{positions} of {total} values differ from eager only as much as rounding does (within "
                f"{NOISE_MULTIPLIER:g}x the spread of {self.runs} eager runs with every rounding op's result moved one ulp)")


@dataclass(frozen=True)
class ExactBand:
    """The values an integer or bool output took, element by element, in eager and the jittered
    runs (`values`: one row per run, eager first)."""

    values: Any
    runs: int

    @classmethod
    def observe(cls, eager: Any, jittered: list[Any]) -> "ExactBand | None":
        import torch

        if not isinstance(eager, torch.Tensor) or eager.is_floating_point() or eager.is_complex() or eager.numel() == 0:
            return None
        same = _comparable(eager, jittered)
        if not same:
            return None
        return cls(torch.stack([eager.detach().cpu()] + [j.detach().cpu() for j in same]), len(same))

    def explains(self, actual: Any) -> Any:
        """Bool tensor: where `actual`'s value lies between the least and the greatest value the
        runs (eager and jittered) produced. Where they all agree that is their one value, so an
        integer that rounding does not move is compared exactly; where rounding moves it, a
        compiled value between two that rounding gives is one more rounding of the same float:
        int16 of a bfloat16 lerp near -6112 is -6112 or -6144 in the jittered runs, -6105
        compiled, where Inductor kept the lerp in float32 before the cast."""
        import torch

        a = actual.to(self.values.dtype)
        if a.dtype == torch.bool:
            return (self.values == a.unsqueeze(0)).any(0)
        return (self.values.amin(0) <= a) & (a <= self.values.amax(0))

    def note(self, positions: int, total: int) -> str:
        return (f"{positions} of {total} values differ from eager but lie within what eager gives with every rounding "
                f"op's result moved one ulp ({self.runs} such runs)")


@dataclass(frozen=True)
class RoundingNoise:
    """Bands for every real tensor leaf of every call: bands[(call, part)][path] (a NoiseBand for
    float leaves, an ExactBand for integer and bool ones)."""

    bands: dict[tuple[int, str], dict[str, NoiseBand | ExactBand]]
    runs: int
    moved_ops: int
    elapsed_s: float

    def for_part(self, call_index: int, part: str) -> dict[str, NoiseBand | ExactBand]:
        return self.bands.get((call_index, part), {})


def _parts(out: Any) -> dict[str, Any]:
    return {"output": out.outputs, "inputs after the call": out.args_after,
            "module state after the call": out.state_after}


def measure(run_jittered: Callable[[RoundingJitter], list[Any]], eager: list[Any], *,
            trials: int = JITTER_TRIALS, seed: int = JITTER_SEED) -> RoundingNoise:
    """Run the program `trials` times under jitter (`run_jittered(mode)` returns the CallOutputs
    of the calls it completed) and band every floating leaf of eager's CallOutputs."""
    import time

    start = time.perf_counter()
    runs: list[list[Any]] = []
    moved = 0
    for k in range(trials):
        direction = (1, -1)[k] if k < 2 else 0
        jitter = RoundingJitter(direction, seed + k)
        try:
            runs.append(run_jittered(jitter))
        except Exception:
            runs.append([])  # this run tells nothing; the others still do
        moved += jitter.moved_ops
    bands: dict[tuple[int, str], dict[str, NoiseBand | ExactBand]] = {}
    for i, ref in enumerate(eager):
        for part, value in _parts(ref).items():
            if value is None:
                continue
            jittered_leaves = [dict(flatten(_parts(r[i])[part])) for r in runs if i < len(r) and _parts(r[i])[part] is not None]
            part_bands = {}
            for path, leaf in flatten(value):
                same_leaf = [j.get(path) for j in jittered_leaves]
                band = NoiseBand.observe(leaf, same_leaf) or ExactBand.observe(leaf, same_leaf)
                if band is not None:
                    part_bands[path] = band
            if part_bands:
                bands[(i, part)] = part_bands
    return RoundingNoise(bands, sum(1 for r in runs if r), moved, time.perf_counter() - start)


def eager_jittered_runner(fresh: Callable[[], tuple[Any, list[Any]]], calls: int) -> Callable[[RoundingJitter], list[Any]]:
    """A `run_jittered` for `measure`: eager on a fresh (model, calls) pair, the first `calls`
    calls, jitter active only while the model runs (not while the calls' state changes apply)."""
    from nnforge.oracle.backend import CallFailed
    from nnforge.oracle.torch_backends import EagerBackend

    class _JitteredEager(EagerBackend):
        def __init__(self, jitter: RoundingJitter):
            super().__init__()
            self.jitter = jitter

        def run_one(self, model: Any, args: tuple[Any, ...], call_index: int) -> Any:
            with self.jitter:
                return model(*args)

    def run(jitter: RoundingJitter) -> list[Any]:
        model, steps = fresh()
        try:
            return _JitteredEager(jitter).compile_and_run(model, steps[:calls])
        except CallFailed as e:
            return e.partial

    return run
