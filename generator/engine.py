"""The solver-based generator: grows a random, valid operator graph one op at a time.

Every insertion is checked incrementally with z3, so each edge type-checks and every shape is
solvable; a cheap (dtype, rank) match happens before the solver is asked anything. Forward
insertion consumes existing values; backward insertion replaces a placeholder with the output of
a new op, so graphs get several inputs and outputs. Attribute binning adds random log-scale
buckets as extra constraints (dropped when unsat) so that solutions are not all boundary values.
"""

from __future__ import annotations

import functools
import inspect
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import z3

from nnforge.core.dtypes import ALL_DTYPES, is_float
from nnforge.generator.abstract import AbsTensor, as_int, fresh_shape
from nnforge.generator.graph_facts import TENTATIVE, ValueBookkeeping
from nnforge.generator.ir import Graph, Node, Value
from nnforge.generator.pointwise import ChainCache, lineages
from nnforge.generator.spec import OpSpec, all_ops, norm_dim, pick
from nnforge.generator.value_facts import (
    SIZE_ONE_OPS, SIZED_OPS, Concrete, Facts, along_axes, hopeless, shrinks_help, triangle_drops,
)
from nnforge.generator.z3_state import WATCHDOG, Z3_LOCK, fresh_main_context


@dataclass(frozen=True)
class GeneratorConfig:
    n_nodes: int = 10
    seed: int = 0
    ops: tuple[str, ...] | None = None  # operator names; None: every registered op
    exclude_ops: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ALL_DTYPES  # dtypes of placeholders
    binning: bool = True
    max_dim: int = 16  # cap on every dim of every value
    max_elems: int = 4096  # cap on the elements of every value
    max_rank: int = 5
    zero_size_prob: float = 0.03  # chance that a placeholder may have a 0-size dim
    forward_prob: float = 0.65
    weight_prob: float = 0.3  # chance that a float placeholder becomes an nn.Parameter
    timeout_ms: float = 4000.0  # per model: whatever is built by then is the model
    onnx_only: bool = False  # only ops whose spec claims ONNX export
    # operator instances never to build, as an operator's name, instance_key(op, input dtypes) or
    # rank_key(op, first input's rank): for ONNX targets, those the
    # installed export path was seen to refuse (core/export_table.py, learned by probing)
    blocked: frozenset[str] = frozenset()
    # placeholders of these float dtypes become weights, never forward's inputs (ONNX backends take no
    # bfloat16 inputs, but a bfloat16 parameter exports as an initializer)
    weight_only_dtypes: tuple[str, ...] = ()


@dataclass
class _Val:
    id: int
    t: AbsTensor
    placeholder: bool
    weight_hint: bool = False
    zero_ok: bool = False


@dataclass
class _Node:
    id: int
    spec: OpSpec
    inputs: list[int]
    outputs: list[int]


@dataclass
class GenStats:
    attempts: int = 0
    inserted: int = 0
    unsat: int = 0
    no_match: int = 0
    bins_kept: int = 0
    bins_dropped: int = 0
    solver_ms: float = 0.0
    solver_unknown: int = 0  # queries cut short by the rlimit or the watchdog
    timed_out: bool = False


@dataclass
class Generated:
    graph: Graph
    stats: GenStats
    onnx_exportable: bool
    elapsed_ms: float
    seed: int
    config: GeneratorConfig = field(repr=False, default_factory=GeneratorConfig)


# Reductions that have a value over no elements at all (none that a domain of the op itself
# rules out), and that value.
_EMPTY_REDUCTION = {"sum": 0.0, "nansum": 0.0, "count_nonzero": 0.0, "vector_norm": 0.0, "prod": 1.0}


def instance_key(op: str, in_dtypes: Sequence[str]) -> str:
    """An operator instance as far as its input dtypes go: `pow(int16,int16)`."""
    return f"{op}({','.join(in_dtypes)})"


def rank_key(op: str, first_rank: int) -> str:
    """An operator instance as far as the rank of its first input goes: `pixel_shuffle@3`."""
    return f"{op}@{first_rank}"


def form_keys(op: str, attrs: dict[str, Any], skip: Iterable[str] = ()) -> tuple[str, ...]:
    """An operator instance as far as the spelling of its drawn integer attributes goes:
    `permute[dims<0]` where a dim is spelt negative. Dtype and rank keys cannot tell
    `permute((0, 2, 1))` from `permute((0, -1, 1))`, yet the exporter carries only the first, so
    the probe keeps such forms apart. `skip`: the attributes the solver chose (their values come
    from sizes, not from a spelling)."""
    skipped = set(skip)
    out = []
    for name, value in sorted(attrs.items()):
        if name in skipped or isinstance(value, bool):
            continue
        values = value if isinstance(value, (tuple, list)) else (value,)
        if any(isinstance(v, int) and not isinstance(v, bool) and v < 0 for v in values):
            out.append(f"{op}[{name}<0]")
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _takes_out_sig(spec: type[OpSpec]) -> bool:
    return "out_sig" in inspect.signature(spec.__init__).parameters


def _instantiate(spec: type[OpSpec], in_sigs, rng, uid: str, out_sig=None) -> OpSpec:
    """Specs that can aim their attributes at an output type (reshape, reductions) get `out_sig`
    on backward insertion; the rest are built with the three standard arguments."""
    if out_sig is not None and _takes_out_sig(spec):
        return spec(in_sigs, rng, uid, out_sig=out_sig)
    return spec(in_sigs, rng, uid)


def generate_graph(cfg: GeneratorConfig) -> Generated:
    """One model, safe in a process with other threads that touch specs (see `Z3_LOCK`): the
    generator and all its solver terms are made and dropped under the lock."""
    with Z3_LOCK:
        generator = GraphGenerator(cfg)
        try:
            return generator.generate()
        finally:
            del generator


def _solved_attrs(spec: OpSpec, model: z3.ModelRef) -> dict:
    """An op's attributes with the solver's choices filled in from `model`."""
    return {k: (as_int(model, v) if isinstance(v, z3.ArithRef) else v) for k, v in spec.attrs.items()}


class GraphGenerator(ValueBookkeeping):
    """One generator per model: `GraphGenerator(cfg).generate()`; the same config gives the same graph."""

    def __init__(self, cfg: GeneratorConfig) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        registry = all_ops()
        names = cfg.ops if cfg.ops is not None else tuple(sorted(registry))
        unknown = [n for n in names if n not in registry]
        if unknown:
            raise ValueError(f"unknown operators: {', '.join(unknown)}")
        self.specs: list[type[OpSpec]] = [
            registry[n] for n in names if n not in cfg.exclude_ops and (registry[n].onnx or not cfg.onnx_only)
        ]
        if not self.specs:
            raise ValueError("no operators left to generate with")
        fresh_main_context()
        self.solver = z3.Solver()
        self.solver.set("random_seed", cfg.seed % (2**31))
        self.solver.set("rlimit", self.CHECK_RLIMIT)
        self.vals: dict[int, _Val] = {}
        self.nodes: list[_Node] = []
        self.facts: dict[int, Facts] = {}  # what the graph guarantees about values (placeholders: none)
        # Canonical value id -> the vulnerable unary ops that read it: in any all-finite run the
        # value lies in each one's domain, which narrows its facts for every other consumer.
        self.needs: dict[int, tuple[str, ...]] = {}
        # value -> a value with the very same elements (positive(x), x.contiguous(), x.to(x.dtype)):
        # the self-cancelling rule (x - positive(x) is 0) compares canonical ids
        self.alias: dict[int, int] = {}
        self._chains = ChainCache()  # elementwise chains evaluated so far (generator/pointwise.py)
        self.doomed: _Node | None = None  # the op whose domain the last `_facts_with` found left, if any
        # every constraint kept so far, the binning buckets apart (see `_solve_with`)
        self._hard: list[z3.BoolRef] = []
        self._bins: list[list[z3.BoolRef]] = []
        self.next_id = 0
        self.stats = GenStats()
        self.deadline = time.perf_counter() + cfg.timeout_ms / 1000.0

    # -- public -------------------------------------------------------------------------
    def generate(self) -> Generated:
        t0 = time.perf_counter()
        self.deadline = t0 + self.cfg.timeout_ms / 1000.0
        self.add_placeholder(self._initial_sig())
        max_attempts = self.cfg.n_nodes * 30
        while len(self.nodes) < self.cfg.n_nodes and self.stats.attempts < max_attempts:
            if time.perf_counter() > self.deadline:
                self.stats.timed_out = True
                break
            self.stats.attempts += 1
            spec = self.rng.choice(self.specs)
            if self.rng.random() < self.cfg.forward_prob:
                self.insert_forward(spec)
            else:
                self.insert_backward(spec)
        return self.finish(t0)

    def add_placeholder(self, sig: tuple[str, int], weight_hint: bool = False, bin_now: bool = True) -> int:
        """A new leaf value. Its dims are binned now, or (bin_now=False) by the caller once the
        op consuming it has added its constraints: an op that needs equal dims (cat, bmm) would
        almost never be satisfiable after independent binning."""
        vid = self._new_id()
        zero_ok = self.rng.random() < self.cfg.zero_size_prob
        t = AbsTensor(sig[0], fresh_shape(f"v{vid}", sig[1]))
        self.vals[vid] = _Val(vid, t, placeholder=True, weight_hint=weight_hint, zero_ok=zero_ok)
        lo = 0 if zero_ok else 1
        cons = [z3.And(d >= lo, d <= self.cfg.max_dim) for d in t.shape]
        cons += self._size_cap(t)
        self.solver.add(*cons)
        self._hard += cons
        if bin_now:
            self.bin_placeholders([vid])
        return vid

    def bin_placeholders(self, ids: list[int]) -> None:
        if not self.cfg.binning:
            return
        for vid in ids:
            v = self.vals[vid]
            for d in v.t.shape:
                self._try_bin(d, self.cfg.max_dim, lo=0 if v.zero_ok else 1)

    def insert_forward(self, spec: type[OpSpec], in_ids: list[int] | None = None) -> bool:
        """Append `spec` consuming existing values (and fresh placeholders where none fit)."""
        planned = self._plan_forward(spec) if in_ids is None else (list(in_ids), {})
        if planned is None:
            self.stats.no_match += 1
            return False
        chosen, new_sigs = planned
        new_ids = []
        for j in sorted(new_sigs):  # fresh placeholders fill the open positions, in position order
            sig, weight_hint = new_sigs[j]
            chosen[j] = self.add_placeholder(sig, weight_hint=weight_hint, bin_now=False)
            new_ids.append(chosen[j])
        in_ids = chosen
        ins = [self.vals[i] for i in in_ids]
        if self._blocked(spec.name, [v.t.sig for v in ins]):
            self.stats.no_match += 1
            self._forget(new_ids)
            return False
        op = spec([v.t.sig for v in ins], self.rng, f"n{self._peek_id()}")
        in_facts = [self._facts_of(i) for i in in_ids]
        if hopeless(op, in_facts) or self._form_blocked(op):
            self.stats.no_match += 1
            self._forget(new_ids)
            return False
        needs, facts_after = self._with_need(op, in_ids)
        if facts_after is None:  # its domain would leave another reader of the operand no finite value
            self.stats.no_match += 1
            self._forget(new_ids)
            return False
        tensors = [v.t for v in ins]
        try:
            cons = list(op.requires(tensors))
            outs = op.type_transfer(tensors)
        except Exception as e:  # a spec bug must not stop generation; the self-check catches it
            raise RuntimeError(f"spec {spec.name} failed on inputs {[v.t.sig for v in ins]}: {e}") from e
        if not self._pointwise_ok([*self._steps(), (op, in_ids, [TENTATIVE])], TENTATIVE, facts_after):
            self.stats.no_match += 1  # no single value keeps its elementwise chain finite
            self._forget(new_ids)
            return False
        if not spec.zero_size_ok:
            cons += [d >= 1 for t in tensors for d in t.shape if not isinstance(d, int)]
        for o in outs:
            cons += [d >= 0 for d in o.shape]
            cons += [d <= self.cfg.max_dim * self.cfg.max_dim for d in o.shape if not isinstance(d, int)]
            cons += self._size_cap(o)
        if not self._check_push(cons):
            self.stats.unsat += 1
            self._forget(new_ids)
            return False
        nid = self._new_id()
        out_ids = []
        for o in outs:
            oid = self._new_id()
            self.vals[oid] = _Val(oid, o, placeholder=False)
            out_ids.append(oid)
        self.nodes.append(_Node(nid, op, list(in_ids), out_ids))
        before = (self.needs, self.facts)
        self.needs, self.facts = needs, facts_after
        in_facts = [self._facts_of(i) for i in in_ids]
        made = self._node_facts(op, in_ids, in_facts, [o.dtype for o in outs])
        root = None
        if len(out_ids) == 1:
            steps = self._steps()
            chains = lineages(steps)
            root = chains.get(out_ids[0], (None,))[0]
            made = [self._exact_image(out_ids[0], made[0], steps, chains, self.facts, {}) or made[0]]
        self.facts.update(zip(out_ids, made))
        if root is not None and spec.vulnerable:  # its domain narrows the chain's root for every reader
            refreshed = self._facts_with(root, self._facts_of(root))
            if refreshed is None and self._dooms_graph(before, root):
                # ... so far that an op already in the graph is hopeless: acos(tan(h)) leaves
                # h = 0 only, where relu(tan(h)) divides by 0
                self.solver.pop()
                del self._hard[len(self._hard) - len(cons):]
                self._forget(new_ids + out_ids)
                self.stats.no_match += 1
                return False
            if refreshed is not None:
                self.facts = refreshed
        self._note_alias(op, in_ids, out_ids)
        self.stats.inserted += 1
        self._bin_attrs(op)
        self.bin_placeholders(new_ids)
        return True

    def _blocked(self, op: str, in_sigs: list[tuple[str, int]]) -> bool:
        """The config blocks this instance: by the operator, its input dtypes or its first input's rank."""
        blocked = self.cfg.blocked
        return bool(blocked) and (op in blocked or instance_key(op, [d for d, _ in in_sigs]) in blocked
                                  or rank_key(op, in_sigs[0][1] if in_sigs else 0) in blocked)

    def _form_blocked(self, op: OpSpec) -> bool:
        """The config blocks the spelling of this instance's drawn attributes (form_keys)."""
        blocked = self.cfg.blocked
        return bool(blocked) and any(k in blocked for k in form_keys(op.name, op.attrs, op.solver_attrs()))

    def _dooms_graph(self, before: tuple[dict, dict], root: int) -> bool:
        """Whether the node just appended is to blame for the graph's facts failing once its
        chain's root is refreshed: some op's operands left its domain, and the facts held
        without the node. If so it is taken out again (needs and facts as `before`); if not, it
        stays: a graph that was inconsistent already, or a refresh that only narrowed operands
        to single values, "fixed" (sqrt(-exp(x)) needs exp(x) to underflow to 0: feasible)."""
        if self.doomed is None:
            return False
        node = self.nodes.pop()
        after = (self.needs, self.facts)
        self.needs, self.facts = before
        if self._facts_with(root, self._facts_of(root)) is not None:
            return True
        self.nodes.append(node)
        self.needs, self.facts = after
        return False

    def insert_backward(self, spec: type[OpSpec]) -> bool:
        """Replace a placeholder by the output of a new `spec` node fed by fresh placeholders."""
        candidates = [v for v in self.vals.values() if v.placeholder]
        if not candidates:
            return False
        target = self.rng.choice(candidates)
        in_sigs = spec.deduct_inputs(target.t.sig, self.rng)
        if in_sigs is None or not spec.accepts(in_sigs) or any(r > self.cfg.max_rank for _, r in in_sigs):
            self.stats.no_match += 1
            return False
        if self._blocked(spec.name, list(in_sigs)):
            self.stats.no_match += 1
            return False
        wset = set(spec.weight_inputs)
        new_ids = [self.add_placeholder(s, weight_hint=(i in wset and is_float(s[0])), bin_now=False)
                   for i, s in enumerate(in_sigs)]
        ins = [self.vals[i] for i in new_ids]
        op = _instantiate(spec, [v.t.sig for v in ins], self.rng, f"n{self._peek_id()}", out_sig=target.t.sig)
        tensors = [v.t for v in ins]
        cons = list(op.requires(tensors))
        outs = op.type_transfer(tensors)
        if len(outs) != 1 or outs[0].dtype != target.t.dtype or outs[0].rank != target.t.rank:
            self._forget(new_ids)
            self.stats.no_match += 1
            return False
        in_facts = [self._facts_of(i) for i in new_ids]
        if hopeless(op, in_facts) or self._form_blocked(op):  # lgamma of a fresh bool placeholder
            self._forget(new_ids)
            self.stats.no_match += 1
            return False
        made = self._node_facts(op, new_ids, in_facts, [outs[0].dtype])[0]
        facts_after = self._facts_with(target.id, made) if made != self._facts_of(target.id) else self.facts
        if facts_after is None:  # the new facts would leave a vulnerable op downstream no finite value
            self._forget(new_ids)
            self.stats.no_match += 1
            return False
        if not self._pointwise_ok([(op, new_ids, [target.id]), *self._steps()], target.id, facts_after, made):
            self._forget(new_ids)
            self.stats.no_match += 1
            return False
        if not spec.zero_size_ok:
            cons += [d >= 1 for t in tensors for d in t.shape if not isinstance(d, int)]
        cons += [a == b for a, b in zip(outs[0].shape, target.t.shape)]
        if not self._check_push(cons):
            self.stats.unsat += 1
            self._forget(new_ids)
            return False
        target.placeholder = False
        target.weight_hint = False
        self.facts = facts_after
        self.nodes.insert(0, _Node(self._new_id(), op, new_ids, [target.id]))
        self._note_alias(op, new_ids, [target.id])
        self.stats.inserted += 1
        self._bin_attrs(op)
        self.bin_placeholders(new_ids)
        return True

    def finish(self, t0: float | None = None) -> Generated:
        t0 = time.perf_counter() if t0 is None else t0
        self.solver.set("rlimit", 30 * self.CHECK_RLIMIT)
        res = self._check(wall_s=30 * self.CHECK_WALL_S)
        if res != z3.sat:  # only satisfiable states are kept, so only a pathological timeout lands here
            raise RuntimeError(f"generator state became {res}")
        model = self._avoid_size_one_doom(self.solver.model())
        graph = Graph()
        for v in self.vals.values():
            graph.values[v.id] = Value(v.id, v.t.dtype, v.t.concretise(model))
        placeholders = [v for v in self.vals.values() if v.placeholder]
        for v in placeholders:
            make_weight = is_float(v.t.dtype) and (v.t.dtype in self.cfg.weight_only_dtypes or v.weight_hint
                                                   or self.rng.random() < self.cfg.weight_prob)
            (graph.weights if make_weight else graph.inputs).append(v.id)
        if not graph.inputs and graph.weights:  # forward takes an input: the first weight that may be one
            usable = [i for i, w in enumerate(graph.weights) if graph.values[w].dtype not in self.cfg.weight_only_dtypes]
            if usable:  # (where every placeholder is weight-only, forward takes no input at all)
                graph.inputs.append(graph.weights.pop(usable[0]))
        consumed = {i for n in self.nodes for i in n.inputs}
        onnx_ok = True
        for n in self.nodes:
            attrs = _solved_attrs(n.spec, model)
            graph.nodes.append(Node(n.id, n.spec.name, attrs, list(n.inputs), list(n.outputs), sorted(n.spec.solver_attrs())))
            onnx_ok = onnx_ok and n.spec.exports_onnx(attrs, n.spec.in_sigs)
        graph.outputs = [o for n in self.nodes for o in n.outputs if o not in consumed]
        if not graph.nodes:
            graph.outputs = list(graph.inputs)
        return Generated(graph, self.stats, onnx_ok, (time.perf_counter() - t0) * 1000.0, self.cfg.seed, self.cfg)

    # -- facts known once shapes are solved ------------------------------------------------
    SIZE_ONE_ROUNDS = 3

    def _avoid_size_one_doom(self, model: z3.ModelRef) -> z3.ModelRef:
        """A model where no vulnerable op is hopeless for want of a dim of size 2.

        Some results are constant only at solved sizes (softmax over a dim of size 1 is 1, argsort
        along it is 0), which insertion, working on symbolic shapes, cannot see. Each round blocks
        the size-1 extents upstream of a hopeless op and solves again; if that is unsat (the size
        is forced) the last model stands: generation never fails for this."""
        blocks: list[z3.BoolRef] = []
        for _ in range(self.SIZE_ONE_ROUNDS):
            wants = self._size_one_block(model)  # one per doomed op: all of them at once, or else any
            if not wants:
                return model
            better = None
            for block in [z3.And(wants)] + ([z3.Or(wants)] if len(wants) > 1 else []):
                better = self._solve_with(blocks + [block])
                if better is not None:
                    blocks.append(block)
                    break
            if better is None:
                return model
            model = better
        return model

    def _solve_with(self, extra: list[z3.BoolRef]) -> z3.ModelRef | None:
        """A model of everything so far plus `extra`; binning buckets (which often pin a dim to 1)
        give way where they conflict with `extra`. None if there is none."""
        self.solver.push()
        self.solver.add(*extra)
        try:
            if self._check(wall_s=self.CHECK_WALL_S) == z3.sat:
                return self.solver.model()
        finally:
            self.solver.pop()
        relaxed = z3.Solver()
        relaxed.set("random_seed", self.cfg.seed % (2**31))
        relaxed.set("rlimit", 10 * self.CHECK_RLIMIT)
        relaxed.add(*self._hard, *extra)
        keep = [z3.Bool(f"bin!{i}") for i in range(len(self._bins))]
        relaxed.add(*[z3.Implies(k, z3.And(b)) for k, b in zip(keep, self._bins)])
        for _ in range(4):
            res = self._check(wall_s=self.CHECK_WALL_S, solver=relaxed, assumptions=keep)
            if res == z3.sat:
                return relaxed.model()
            core = {c.get_id() for c in relaxed.unsat_core()} if res == z3.unsat else set()
            if not core:
                return None
            keep = [k for k in keep if k.get_id() not in core]
        return None

    def _size_one_block(self, model: z3.ModelRef) -> list[z3.BoolRef]:
        """For each vulnerable op that the solved sizes make hopeless, a constraint that changes
        some extent feeding it (none where no such extent can change): a size-1 extent grows; one
        of 3 or more that a softmax or a permutation works along (asin of log_softmax over 3
        elements, acos of argsort indices) shrinks to 2; a triangle whose zeros doom it (log of a
        tril) keeps its whole matrix; a sum over an empty operand (0: rsqrt of it) gets one."""
        # node id -> (solved attrs, axes (None: a triangle), shape)
        ones: dict[int, tuple[dict, list[int] | None, tuple[int, ...]]] = {}
        empties: dict[int, list[z3.ArithRef]] = {}  # node id -> the operand's dims solved to 0
        for n in self.nodes:
            if n.spec.name in _EMPTY_REDUCTION:  # a sum over no elements: 0, whatever the values
                shape = self.vals[n.inputs[0]].t.shape
                solved = self.vals[n.inputs[0]].t.concretise(model)
                if 0 in solved and all(0 not in self.vals[o].t.concretise(model) for o in n.outputs):
                    empties[n.id] = [d for d, v in zip(shape, solved) if v == 0 and not isinstance(d, int)]
                    continue
            if n.spec.name == "tril_triu":  # whether it zeroes anything shows only at solved sizes
                attrs = _solved_attrs(n.spec, model)
                shape = tuple(self.vals[n.inputs[0]].t.concretise(model))
                if triangle_drops(n.spec, Concrete((shape,), attrs)):
                    ones[n.id] = (attrs, None, shape)
                continue
            if n.spec.name not in SIZED_OPS:
                continue
            attrs = _solved_attrs(n.spec, model)
            axes = along_axes(n.spec, attrs)
            shape = tuple(self.vals[n.inputs[0]].t.concretise(model))
            size_one = n.spec.name in SIZE_ONE_OPS and axes is not None and all(shape[ax] == 1 for ax in axes)
            if axes is not None and (size_one or shrinks_help(n.spec, attrs, shape)):
                ones[n.id] = (attrs, axes, shape)
        if not ones and not empties:
            return []
        facts: dict[int, Facts] = {}
        made_by: dict[int, _Node] = {}
        doomed: list[_Node] = []
        for n in self.nodes:
            ins = [self._facts_of(i, facts) for i in n.inputs]
            if hopeless(n.spec, ins):
                doomed.append(n)
            concrete = Concrete((ones[n.id][2],), ones[n.id][0]) if n.id in ones else None
            dts = [self.vals[o].t.dtype for o in n.outputs]
            if n.id in empties:
                v = _EMPTY_REDUCTION[n.spec.name]
                made = [Facts(v, v, integral=True, zero=v == 0, fixed=True)] * len(n.outputs)
            else:
                made = self._node_facts(n.spec, n.inputs, ins, dts, concrete)
            facts.update(zip(n.outputs, made))
            made_by.update((o, n) for o in n.outputs)
        wants: list[z3.BoolRef] = []
        for d in doomed:
            lifts: list[z3.BoolRef] = []
            seen: set[int] = set()
            stack = list(d.inputs)
            while stack:  # the size-1 (or shrinkable) nodes upstream of the doomed op
                n = made_by.get(stack.pop())
                if n is None or n.id in seen:
                    continue
                seen.add(n.id)
                stack.extend(n.inputs)
                if n.id in empties and empties[n.id]:
                    lifts.append(z3.And([d >= 1 for d in empties[n.id]]))
                if n.id in ones:
                    _, axes, shape = ones[n.id]
                    if axes is None:
                        lifts.append(self._keep_whole_triangle(n))
                    elif n.spec.name in SIZE_ONE_OPS and all(shape[ax] == 1 for ax in axes):
                        lifts += self._lift_size_one(n, axes)
                    else:
                        lifts += self._shrink_extent(n, axes, shape)
            if lifts:
                wants.append(z3.Or(lifts))
        return wants

    def _keep_whole_triangle(self, n: _Node) -> z3.BoolRef:
        """tril/triu with a diagonal that keeps every element (its zeros doomed an op downstream)."""
        shape, d = self.vals[n.inputs[0]].t.shape, n.spec.attrs["diagonal"]
        if n.spec.attrs["fn"] == "tril":
            return d >= shape[-1] - 1
        return d <= -(shape[-2] - 1)

    def _shrink_extent(self, n: _Node, axes: list[int], solved: tuple[int, ...]) -> list[z3.BoolRef]:
        """Ways for node `n` to work along fewer elements: 2 at most (one axis only) where it
        works along 3 or more at the `solved` sizes, else 1."""
        most = 2 if math.prod(solved[ax] for ax in axes) >= 3 else 1
        shape = self.vals[n.inputs[0]].t.shape
        dim = n.spec.attrs.get("dim")
        if isinstance(dim, z3.ArithRef) and shape:
            return [pick(shape, norm_dim(dim, len(shape))) <= most]
        if len(axes) == 1:
            return [shape[ax] <= most for ax in axes if not isinstance(shape[ax], int)]
        # several axes (logsumexp over a tuple): one of them down to `most`, the others to 1
        return [z3.And([shape[b] <= (most if b == a else 1) for b in axes if not isinstance(shape[b], int)])
                for a in axes if not isinstance(shape[a], int)]

    def _lift_size_one(self, n: _Node, axes: list[int]) -> list[z3.BoolRef]:
        """Ways for node `n` to stop working along extents of size 1: one of them grows (for a
        solver-chosen dim, the extent along whichever dim it picks)."""
        shape = self.vals[n.inputs[0]].t.shape
        dim = n.spec.attrs.get("dim")
        if isinstance(dim, z3.ArithRef) and shape:
            return [pick(shape, norm_dim(dim, len(shape))) >= 2]
        return [shape[ax] >= 2 for ax in axes if not isinstance(shape[ax], int)]

    # -- internals ----------------------------------------------------------------------
    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def _peek_id(self) -> int:
        return self.next_id

    def _initial_sig(self) -> tuple[str, int]:
        """A first placeholder that some allowed operator can consume, so growth can start."""
        allowed = set(self.cfg.dtypes)
        for _ in range(50):
            spec = self.rng.choice(self.specs)
            combos = [c for c in spec.dtype_combos(spec.pick_arity(self.rng)) if c and c[0] in allowed]
            ranks = [r for r in spec.ranks_at(0) if r <= self.cfg.max_rank]
            if combos and ranks:
                return (self.rng.choice(combos)[0], self.rng.choice(ranks))
        return (self.rng.choice(self.cfg.dtypes), self.rng.randint(0, self.cfg.max_rank))

    def _size_cap(self, t: AbsTensor) -> list[z3.BoolRef]:
        """Keep every value under `max_elems` with linear bounds: each dim at most the rank-th root
        of the cap. A product of symbolic dims would be nonlinear, and z3's nonlinear reasoning
        is what makes slow queries (3-D convolutions and pools chained together)."""
        if t.rank == 0:
            return []
        per_dim = max(1, int(round(self.cfg.max_elems ** (1.0 / t.rank))))
        while per_dim ** t.rank > self.cfg.max_elems and per_dim > 1:
            per_dim -= 1
        return [d <= per_dim for d in t.shape if not isinstance(d, int)]

    # One solver query may spend this much of z3's deterministic resource counter (rlimit). A
    # wall-clock timeout would make the same seed give different programs on a loaded machine.
    CHECK_RLIMIT = 3_000_000
    # Some nonlinear queries ignore the rlimit; a watchdog interrupts any query after this long,
    # so a model never hangs (only such pathological queries become timing-dependent).
    CHECK_WALL_S = 2.0

    def _check_push(self, cons: list, is_bin: bool = False) -> bool:
        self.solver.push()
        self.solver.add(*cons)
        t = time.perf_counter()
        ok = self._check() == z3.sat
        self.stats.solver_ms += (time.perf_counter() - t) * 1000
        if not ok:
            self.solver.pop()
        elif is_bin:
            self._bins.append(cons)
        else:
            self._hard += cons
        return ok

    def _check(self, wall_s: float | None = None, solver: z3.Solver | None = None,
               assumptions: list[z3.BoolRef] = ()) -> z3.CheckSatResult:
        solver = self.solver if solver is None else solver
        WATCHDOG.arm(solver.ctx, wall_s or self.CHECK_WALL_S)
        try:
            res = solver.check(*assumptions)
        finally:
            WATCHDOG.disarm()
        if res == z3.unknown:
            self.stats.solver_unknown += 1
        return res

    def _try_bin(self, e: z3.ArithRef, cap: int, lo: int = 0) -> None:
        """Constrain |e| to a random log-scale bucket, aiming first at a random value inside it
        (z3 would otherwise answer with the bucket's edge); keep whatever stays satisfiable."""
        buckets = [(0, 0), (1, 1)] + [(2**k, 2 ** (k + 1) - 1) for k in range(1, max(1, cap.bit_length()))]
        buckets = [(a, b) for a, b in buckets if b >= lo and a <= cap]
        a, b = self.rng.choice(buckets)
        aim = self.rng.randint(max(a, lo), b) if b > max(a, lo) else None
        mag = z3.If(e >= 0, e, -e)
        tries = ([[mag == aim]] if aim is not None else []) + [[mag >= a, mag <= b]]
        if any(self._check_push(cons, is_bin=True) for cons in tries):
            self.stats.bins_kept += 1
        else:
            self.stats.bins_dropped += 1

    def _bin_attrs(self, op: OpSpec) -> None:
        if not self.cfg.binning:
            return
        for v in op.solver_attrs().values():
            self._try_bin(v, 32)

    def _forget(self, ids: list[int]) -> None:
        # placeholders added for a failed insertion stay constrained in the solver but unused;
        # dropping them from the graph is enough (their constraints are satisfiable on their own).
        for i in ids:
            self.vals.pop(i, None)

    def _plan_forward(
            self, spec: type[OpSpec]) -> tuple[list[int | None], dict[int, tuple[tuple[str, int], bool]]] | None:
        """Inputs for `spec`: existing value ids, None where a fresh placeholder is wanted, and
        for those positions the placeholder's (dtype, rank) and whether it is a weight."""
        arity = spec.pick_arity(self.rng)
        combos = spec.dtype_combos(arity)
        if not combos:
            return None
        existing = list(self.vals.values())
        wset = set(spec.weight_inputs)
        for _ in range(6):
            anchor = self.rng.choice(existing)
            fits = [(c, i) for c in combos for i in range(arity)
                    if c[i] == anchor.t.dtype and anchor.t.rank in spec.ranks_at(i) and i not in wset]
            if not fits:
                continue
            combo, pos = self.rng.choice(fits)
            chosen: list[int | None] = [None] * arity
            chosen[pos] = anchor.id
            new_sigs: dict[int, tuple[tuple[str, int], bool]] = {}
            for j in range(arity):
                if j == pos:
                    continue
                pool = [v.id for v in existing if v.t.dtype == combo[j] and v.t.rank in spec.ranks_at(j)]
                if pool and j not in wset and self.rng.random() < 0.7:
                    chosen[j] = self.rng.choice(pool)
                else:
                    ranks = [r for r in spec.ranks_at(j) if r <= self.cfg.max_rank]
                    if not ranks:
                        break
                    new_sigs[j] = ((combo[j], self.rng.choice(ranks)), j in wset and is_float(combo[j]))
            else:
                sigs = [self.vals[c].t.sig if c is not None else new_sigs[j][0] for j, c in enumerate(chosen)]
                if not spec.accepts(sigs):
                    continue
                return chosen, new_sigs
        return None
