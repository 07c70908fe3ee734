"""Does a bug need the kind of values it was found with? One rerun with the default draw.

A finding whose values came from a value bin (all positive, ties, ...; oracle/value_bins.py) may
or may not depend on them. The reduced case is judged once more with fresh values drawn the
default way (`normal`): when the bug is gone, the report can say that it shows only with values
like the repro's, which is the first thing a maintainer would ask. One draw is evidence, not
proof, and the report words it so.
"""

from __future__ import annotations

from typing import Any

from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Verdict
from nnforge.oracle.value_bins import NORMAL
from nnforge.triage.interesting import same_bug


def needs_its_values(pool: Any, case: TestCase, verdict: Verdict, *, timeout_s: float,
                     value_search_budget_ms: float) -> bool | None:
    """True: the bug did not show with default values; False: it did; None: not asked (the
    values were drawn the default way, or the rerun could not judge)."""
    from nnforge.oracle.oracle import Oracle

    if verdict.value_bin in (None, NORMAL):
        return None
    meta = {k: v for k, v in case.meta.items() if k not in ("values", "value_bin")}
    plain = case.with_(inputs=None, state_dict=None, meta={**meta, "value_bin": NORMAL})
    oracle = Oracle(pool, [verdict.target], value_search_budget_ms, timeout_s=timeout_s)
    result = oracle.check(plain)
    again = next((v for v in result.verdicts if v.target == verdict.target), None)
    if again is None or result.invalid_reason is not None:
        return None
    return not same_bug(verdict, again)
