"""What a search reports (`SearchResult`), what one run of the program under the interceptor
found (`Outcome`), and why a search failed (`FAILURE_CLASSES`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nnforge.oracle.safe_domain import sum_of


@dataclass(frozen=True)
class SearchResult:
    """Outcome of one value search.

    `inputs` and `state_dict` hold the values found (on failure: the values the search started
    from). `culprit` names the operator that was last seen producing NaN/Inf ("output" when only
    the returned value was non-finite, "exception: ..." when the program raised)."""

    success: bool
    inputs: tuple
    state_dict: dict
    iterations: int
    elapsed_ms: float
    culprit: str | None
    initially_finite: bool
    method: str  # "none" | "gradient" | "sampling"
    # On failure, why the last culprit resisted (one of FAILURE_CLASSES); None on success.
    failure: str | None = None
    # False when the values had to leave their bins (the plan's) to become finite
    bins_kept: bool = True

    def to_json(self) -> dict:
        """The scalar fields (the tensors are saved separately, as inputs.pt/state_dict.pt)."""
        return {
            "success": self.success,
            "iterations": self.iterations,
            "elapsed_ms": self.elapsed_ms,
            "culprit": self.culprit,
            "initially_finite": self.initially_finite,
            "method": self.method,
            "failure": self.failure,
            "bins_kept": self.bins_kept,
        }

    @classmethod
    def from_json(cls, data: dict, inputs: tuple = (), state_dict: dict | None = None) -> "SearchResult":
        return cls(inputs=tuple(inputs), state_dict=dict(state_dict or {}), **data)


@dataclass
class Outcome:
    """One run of the program: its culprit and the loss to descend there (none: all finite)."""

    culprit: str | None = None
    key: tuple[int, str] | None = None
    loss: torch.Tensor | None = None
    error: str | None = None
    loss_kind: str = "none"
    dtype: torch.dtype | None = None
    ties: bool = False  # the loss met values exactly on a forbidden point (safe_domain.TieBreak)
    poles: bool = False  # the run passed a gradient through an operator with a pole (PoleCrossing)
    gradient: bool = False  # the culprit's forward is finite, its backward is not (backward mode)


# Why a search failed. The search itself tells the last four apart from what it saw at its
# last culprit; `diagnose` (a separate, slower probe) recognises the first two.
FAILURE_CLASSES = (
    "constant operand",  # the culprit's operands are the same whatever the values: log(x - x)
    "non-finite in every draw",  # operands vary, the op was non-finite in every random draw
    "program raises",  # the values the search reached make the program raise
    "no gradient path",  # outside the domain along operands no gradient reaches; sampling failed
    "low-precision overflow",  # float16/bfloat16 result overflows; shrinking did not cure it
    "overflow",  # float32/64 result overflows; shrinking did not cure it
    "search exhausted",  # a domain loss was descending when the budget ran out
)

_LOW_PRECISION = (torch.float16, torch.bfloat16)

# How far a run that is all finite got (`reach`, the sweep's progress).
ALL_FINITE = 1 << 40


def reach(outcome: Outcome) -> int:
    """How far a run got: the call index of its culprit (a run that raised got nowhere)."""
    if outcome.error is not None and outcome.culprit is None:
        return -1
    if outcome.key is None:
        return ALL_FINITE
    return ALL_FINITE - 1 if outcome.key[0] < 0 else outcome.key[0]


def failure_class(last: Outcome) -> str:
    if last.culprit is None and last.error is not None:
        return "program raises"
    if last.loss_kind == "domain":
        return "search exhausted"
    if last.loss_kind == "magnitude":
        return "low-precision overflow" if last.dtype in _LOW_PRECISION else "overflow"
    return "no gradient path"


def total_loss(loss: torch.Tensor | None, hinges: list[torch.Tensor]) -> torch.Tensor | None:
    """The culprit's loss plus the hinges of earlier culprits (low-precision hinges in float32)."""
    return sum_of([loss] + [h.to(torch.float32) if h.dtype != torch.float64 else h for h in hinges])
