"""The reducer: the smallest case that still shows the same bug, checked in the sandbox.

Passes, in order, each delta debugging over one kind of part (see ddmin.py):

0. `members`: a pack of mutants (mutators/pack.py) becomes the one member that shows the bug
   alone on its slice of the pack's values, when one does, else the fewest members that show it
   together (a smaller pack);
1. `calls`: the invocation sequence, fewest calls that still show the bug;
2. `graph`: the generator graph's outputs (the guilty output's cone), its nodes, then the
   outputs left (graph_reduce.py), for cases whose program is still their graph's materialisation;
3. `statements`, `dtypes`, `outputs`, `expressions`, `keywords`, `literals`: the program's syntax
   tree and its inputs' dtypes (float32 where the bug allows it; program_reduce.py), for any program.

Every candidate is judged by the oracle on the one target, in a worker, with a time limit, and
accepted only when `same_bug` holds against the verdict being preserved (interesting.py).
Answers are cached by the candidate's content hash. When the query limit or the time budget
runs out the best case so far is kept (a query is not started when the latest one's cost would
take it past the budget); the final case is always checked once more, first
without the lines nothing reads (a pass cut short by the budget leaves them behind).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable

from nnforge.core.limits import VALUE_SEARCH_BUDGET_MS
from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Verdict
from nnforge.mutators.pack import subpack, unpack
from nnforge.triage import graph_reduce as gr
from nnforge.triage import program_reduce as pr
from nnforge.triage.canonical import program_ops
from nnforge.triage.ddmin import ddmin
from nnforge.triage.interesting import same_bug, why_not

PASSES = ("members", "calls", "graph", "statements", "dtypes", "outputs", "expressions", "keywords", "literals")


def case_size(case: TestCase) -> dict[str, int]:
    """ops (operators in forward), lines (non-blank program lines), calls (invocation sequence)."""
    lines = sum(1 for line in case.program.splitlines() if line.strip() and not line.strip().startswith("#"))
    members = case.meta.get("pack_members") or [{"program": case.program}]  # a pack's forward calls its members
    ops = sum(len(program_ops(m["program"])) for m in members)
    return {"ops": ops, "lines": lines, "calls": len(case.calls)}


_SIZE_NOUNS = (("ops", "operator"), ("lines", "line"), ("calls", "call"))


def size_words(size: dict[str, Any]) -> str:
    """A case_size() for a reader: "1 operator, 10 lines", and "3 calls" when not the usual one."""
    return ", ".join(f"{size[key]} {noun}{'' if size[key] == 1 else 's'}" for key, noun in _SIZE_NOUNS
                     if key in size and (key != "calls" or size[key] != 1))


def removed_nothing(before: dict[str, Any], after: dict[str, Any]) -> bool:
    return all(before.get(key) == after.get(key) for key, _ in _SIZE_NOUNS)


def describe_reduction(before: dict[str, Any], after: dict[str, Any]) -> str:
    """"reduced from 3 operators, 14 lines to 1 operator, 9 lines" or "the reduction removed nothing
    (1 operator, 10 lines)": never a "from X to X" that leaves a reader comparing two equal sizes."""
    if removed_nothing(before, after):
        return f"the reduction removed nothing ({size_words(after)})"
    return f"reduced from {size_words(before)} to {size_words(after)}"


# Ways to make a training sequence simpler, tried in order on every call at once: no backward at
# all, then no optimizer steps, no second backward, no requires_grad toggles.
TRAINING_SIMPLIFICATIONS = (
    lambda s: s.forward_only(),
    lambda s: replace(s, optimizer=None, zero_grad=False),
    lambda s: replace(s, retain_graph=False),
    lambda s: replace(s, param_requires_grad={}),
)


@dataclass(frozen=True)
class ReductionResult:
    case: TestCase  # the reduced case, with its values
    verdict: Verdict  # of the reduced case (from the final check)
    queries: int  # sandbox checks run (cache hits not counted)
    elapsed_s: float
    before: dict[str, int]
    after: dict[str, int]
    steps: list[str] = field(default_factory=list)
    verified: bool = True  # the final check showed the same bug (else `case` is the input case)
    cache_hits: int = 0
    exhausted: str | None = None  # "queries" | "time" when a limit stopped the search

    def to_json(self) -> dict[str, Any]:
        return {"case_id": self.case.case_id, "verdict": self.verdict.to_json(), "queries": self.queries,
                "elapsed_s": round(self.elapsed_s, 3), "before": dict(self.before), "after": dict(self.after),
                "steps": list(self.steps), "verified": self.verified, "cache_hits": self.cache_hits,
                "exhausted": self.exhausted}


class _OutOfBudget(Exception):
    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


class Reducer:
    """Reduces cases that fail on `target`.

    `oracle_source` is a WorkerPool (queries run as `Oracle(pool, [target]).check`) or a
    callable `factory(targets: list[str]) -> Oracle`-like object with `check(case)`.
    """

    def __init__(self, oracle_source: Any, target: str, *, timeout_s: float = 60, max_queries: int = 300,
                 time_budget_s: float = 300, passes: Iterable[str] = PASSES, value_search_budget_ms: float = VALUE_SEARCH_BUDGET_MS,
                 seed: int = 0):
        from nnforge.oracle.oracle import Oracle

        unknown = set(passes) - set(PASSES)
        if unknown:
            raise ValueError(f"unknown reduction passes {sorted(unknown)}; known: {', '.join(PASSES)}")
        self.target = target
        self.timeout_s = float(timeout_s)
        self.max_queries = int(max_queries)
        self.time_budget_s = float(time_budget_s)
        self.passes = tuple(p for p in PASSES if p in set(passes))
        if hasattr(oracle_source, "call"):
            self.pool = oracle_source
            self.oracle = Oracle(oracle_source, [target], value_search_budget_ms, timeout_s=self.timeout_s, seed=seed)
        elif callable(oracle_source):
            self.oracle = oracle_source([target])
            self.pool = getattr(self.oracle, "pool", None)
        else:
            raise TypeError("Reducer needs a WorkerPool or a factory(targets) -> Oracle")
        self.seed = seed

    # -- public --------------------------------------------------------------------------------
    def reduce(self, case: TestCase, verdict: Verdict) -> ReductionResult:
        """The smallest case found that shows `verdict`'s bug (see the module docstring)."""
        if verdict.target != self.target:
            raise ValueError(f"the verdict is for {verdict.target!r}, this reducer for {self.target!r}")
        if not verdict.is_bug:
            raise ValueError(f"nothing to reduce: the verdict is {verdict.symptom.value}")
        run = _Run(self, verdict)
        before = case_size(case)
        if case.inputs is None:  # values first: every candidate keeps concrete values
            got = run.query(case, force=True)
            if got is None or not same_bug(verdict, got[0]):
                raise ValueError("the case does not show the bug on this target any more "
                                 f"({why_not(verdict, got[0]) if got else 'no answer'})")
            case = got[1]
        run.current = case
        try:
            for name in self.passes:
                getattr(run, f"pass_{name}")()
        except _OutOfBudget as e:
            run.exhausted = e.what
            run.steps.append(f"stopped: out of {e.what}; keeping the best case so far")
        final, final_verdict, verified = run.verify(case, verdict)
        final = run.with_dtypes(final)
        return ReductionResult(case=final, verdict=final_verdict, queries=run.queries,
                               elapsed_s=time.monotonic() - run.start, before=before, after=case_size(final),
                               steps=run.steps, verified=verified, cache_hits=run.cache_hits, exhausted=run.exhausted)


class _Run:
    """The state of one reduction: the current best case, the cache and the budget."""

    def __init__(self, reducer: Reducer, verdict: Verdict):
        self.r = reducer
        self.ref = verdict
        self.start = self.budget_start = time.monotonic()
        self.queries = 0
        self.cache_hits = 0
        self.cache: dict[str, tuple[Verdict, TestCase] | None] = {}
        self.current: TestCase = None  # type: ignore[assignment]
        self.steps: list[str] = []
        self.exhausted: str | None = None
        self.last_query_s = 0.0  # what the latest query cost: the estimate of the next one

    # -- queries --------------------------------------------------------------------------------
    def query(self, cand: TestCase, force: bool = False) -> tuple[Verdict, TestCase] | None:
        key = cand.case_id
        if not force and key in self.cache:
            self.cache_hits += 1
            return self.cache[key]
        if not force:
            if self.queries >= self.r.max_queries:
                raise _OutOfBudget("queries")
            # a query that would end past the budget is not started: a timeout finding's queries each
            # wait a whole worker timeout, so "stop once the budget is spent" overran it by one or two
            if time.monotonic() - self.budget_start + self.last_query_s >= self.r.time_budget_s:
                raise _OutOfBudget("time")
        self.queries += 1
        t0 = time.monotonic()
        result = self.r.oracle.check(cand)
        self.last_query_s = time.monotonic() - t0
        answer = (result.verdicts[0], result.case) if result.verdicts else None
        self.cache[key] = answer
        return answer

    def interesting(self, cand: TestCase | None) -> bool:
        if cand is None or cand.case_id == self.current.case_id:
            return False
        got = self.query(cand)
        if got is not None and same_bug(self.ref, got[0]):
            self.current = cand
            return True
        return False

    def verify(self, original: TestCase, verdict: Verdict) -> tuple[TestCase, Verdict, bool]:
        """The final check, on the best case without its dead code when that still shows the bug
        (one query more, whatever the budget left: a pass cut short leaves such lines behind)."""
        try:
            cleaned = pr.without_dead_code(self.current)
        except pr.NotAProgram:
            cleaned = None
        if cleaned is not None:
            got = self.query(cleaned, force=True)
            if got is not None and same_bug(self.ref, got[0]):
                a, b = case_size(self.current), case_size(cleaned)
                self.current = cleaned
                self.steps.append(f"dead code: ops {a['ops']}->{b['ops']}, lines {a['lines']}->{b['lines']}")
                self.steps.append("verified: the reduced case shows the same bug")
                return cleaned, got[0], True
        got = self.query(self.current, force=True)
        if got is not None and same_bug(self.ref, got[0]):
            self.steps.append("verified: the reduced case shows the same bug")
            return self.current, got[0], True
        why = why_not(self.ref, got[0]) if got else "no answer"
        self.steps.append(f"final check failed ({why}); returning the input case")
        return original, verdict, False

    def record(self, case: TestCase) -> tuple[dict[str, Any], dict[str, tuple[str, list[int]]]] | None:
        """Every named intermediate of `case` on its values, computed in a worker (None if that fails)."""
        if self.r.pool is None or case.inputs is None:
            return None
        from nnforge.triage.intermediates import record_in

        try:
            return record_in(self.r.pool, case, seed=self.r.seed, timeout_s=self.r.timeout_s)
        except RuntimeError as e:
            self.steps.append(str(e)[:200])
            return None

    def with_dtypes(self, case: TestCase) -> TestCase:
        """The case with meta["value_dtypes"]: its canonical form then needs no graph."""
        try:
            rec = self.record(case)
        except Exception:
            rec = None
        if rec is None:
            return case
        dtypes = {k: d for k, (d, _) in rec[1].items()}
        return case.with_(meta={**case.meta, "value_dtypes": dtypes})

    def _log(self, name: str, before: TestCase, q0: int) -> None:
        a, b = case_size(before), case_size(self.current)
        self.steps.append(f"{name}: ops {a['ops']}->{b['ops']}, lines {a['lines']}->{b['lines']}, "
                          f"calls {a['calls']}->{b['calls']} ({self.queries - q0} queries)")

    def unpacked(self) -> None:
        """A pack came down to what holds the bug: unpacking is not reduction, so what follows gets
        the whole time budget (the query limit stays shared)."""
        self.budget_start = time.monotonic()

    # -- passes -------------------------------------------------------------------------------------
    def pass_members(self) -> None:
        members = unpack(self.current)
        if not members:
            return
        base, q0 = self.current, self.queries
        for i, member in enumerate(members):
            if self.interesting(member):
                self._log(f"members: member {i} of {len(members)} alone", base, q0)
                self.unpacked()
                return
        if len(members) > 2:  # the bug needs members together: keep the fewest it needs, a search
            self.unpacked()  # that gets the budget the trials alone took (each query compiles a pack)
            kept = ddmin(list(range(len(members))),
                         lambda keep: self.interesting(subpack(base, keep)), min_size=2)
            if len(kept) < len(members):
                self._log(f"members: none of the {len(members)} shows the bug alone, members "
                          f"{kept} together do", base, q0)
                self.unpacked()
                return
        self.steps.append(f"members: none of the {len(members)} shows the bug alone; the pack stays "
                          f"({self.queries - q0} queries)")

    def pass_calls(self) -> None:
        base = self.current
        if any(step.backward for step in base.calls):  # a bug the forward shows needs no backward,
            q0 = self.queries  # and a wrong gradient needs no optimizer step or second backward
            for simpler in TRAINING_SIMPLIFICATIONS:
                calls = tuple(simpler(s) for s in self.current.calls)
                if calls != self.current.calls:
                    self.interesting(self.current.with_(calls=calls))
            self._log("backward", base, q0)
            base = self.current
        if len(base.calls) < 2:
            return
        q0 = self.queries
        steps = list(range(len(base.calls)))
        ddmin(steps, lambda keep: self.interesting(base.with_(calls=tuple(base.calls[i] for i in keep))))
        self._log("calls", base, q0)

    def pass_graph(self) -> None:
        base = self.current
        graph = gr.graph_of(base)
        if graph is None or len(graph.nodes) < 1 or base.inputs is None:
            return
        if any(step.inputs for step in base.calls):
            self.steps.append("graph: skipped (call steps change inputs; program passes handle it)")
            return
        rec = self.record(base)
        if rec is None:
            return
        recorded = rec[0]
        q0 = self.queries
        node_ids = [n.id for n in graph.nodes]
        if len(graph.outputs) > 1:  # outputs first: a few queries drop the chains the bug does not need,
            everything = set(node_ids)  # which node-by-node search would spend its budget on

            def cone_test(keep: list[int]) -> bool:
                return self.interesting(gr.graph_case(base, graph, gr.subgraph(graph, everything, keep), recorded))

            chosen = ddmin(list(graph.outputs), cone_test)
            if len(chosen) < len(graph.outputs):
                node_ids = [n.id for n in gr.subgraph(graph, everything, chosen).nodes]
                if base.meta.get("pack"):  # a generator pack's unpacking, as pass_members is a mutant pack's
                    self.unpacked()
                    self.steps.append(f"graph: outputs {len(graph.outputs)}->{len(chosen)} of a pack of "
                                      f"{len(base.meta['pack'])} ({self.queries - q0} queries); the rest gets "
                                      f"the whole time budget")

        def nodes_test(keep: list[int]) -> bool:
            return self.interesting(gr.graph_case(base, graph, gr.subgraph(graph, set(keep)), recorded))

        kept = ddmin(node_ids, nodes_test) if len(node_ids) > 1 else node_ids
        sub = gr.subgraph(graph, set(kept))
        if len(sub.outputs) > 1:
            outs = sub.outputs

            def outputs_test(keep: list[int]) -> bool:
                return self.interesting(gr.graph_case(base, graph, gr.subgraph(graph, set(kept), keep), recorded))

            ddmin(outs, outputs_test)
        self._log("graph", base, q0)

    def pass_statements(self) -> None:
        base = self.current
        try:
            items = pr.statement_items(base)
        except pr.NotAProgram:
            return
        if len(items) < 1 or base.inputs is None:
            return
        rec = self.record(base)
        recorded, shapes = rec if rec is not None else ({}, {})
        q0 = self.queries
        ddmin(items, lambda keep: self.interesting(pr.without_statements(base, keep, items, recorded, shapes)),
              min_size=1)
        self._log("statements", base, q0)

    def pass_outputs(self) -> None:
        base = self.current
        try:
            n = pr.output_count(base)
        except pr.NotAProgram:
            return
        if n < 2:
            return
        q0 = self.queries
        ddmin(list(range(n)), lambda keep: self.interesting(pr.with_outputs(base, keep)))
        self._log("outputs", base, q0)

    def pass_expressions(self) -> None:
        self._greedy("expressions", pr.expression_candidates)

    def pass_keywords(self) -> None:
        base = self.current
        try:
            items = pr.keyword_items(base)
        except pr.NotAProgram:
            return
        if not items:
            return
        q0 = self.queries
        if not self.interesting(pr.with_keywords(base, [], items)):  # all at once first: the common case
            ddmin(items, lambda keep: self.interesting(pr.with_keywords(base, keep, items)))
        self._log("keywords", base, q0)

    def pass_literals(self) -> None:
        self._greedy("literals", pr.literal_candidates)

    def pass_dtypes(self) -> None:
        self._greedy("dtypes", pr.dtype_candidates)

    def _greedy(self, name: str, candidates: Callable[[TestCase], Iterable[TestCase]]) -> None:
        """Accept the first interesting candidate, then start over on the smaller case."""
        base = self.current
        q0 = self.queries
        seen = {base.case_id}  # never return to a case already left: no cycles
        progressed = True
        while progressed:
            progressed = False
            try:
                cands = list(candidates(self.current))
            except pr.NotAProgram:
                return
            for cand in cands:
                if cand.case_id in seen:
                    continue
                seen.add(cand.case_id)
                if self.interesting(cand):
                    progressed = True
                    break
        self._log(name, base, q0)


def reduce_case(pool: Any, case: TestCase, verdict: Verdict, **options: Any) -> ReductionResult:
    """One-shot convenience: `Reducer(pool, verdict.target, **options).reduce(case, verdict)`."""
    return Reducer(pool, verdict.target, **options).reduce(case, verdict)


__all__ = ["PASSES", "ReductionResult", "Reducer", "case_size", "reduce_case"]
