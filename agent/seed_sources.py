"""Where a campaign's seeds come from: the solver generator and mined compiler history.

A source hands the loop one case per draw. The generator's seed numbers only ever grow, and
the next one is stored before it is used, so a resumed campaign never regenerates a program it
already ran; for ONNX targets it draws again while a program holds a form the export table or
the export gate would stop.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from typing import Callable

from nnforge.agent.campaign_config import CampaignConfig, CampaignSetupError, is_onnx_target
from nnforge.agent.store import CampaignStore
from nnforge.core.testcase import TestCase


ONNX_REDRAWS = 8  # programs drawn again for an ONNX target while a spec says an instance will not export


class GeneratorSource:
    """The solver generator: seed numbers come from the store's counter, never reused."""

    name = "generator"

    def __init__(self, store: CampaignStore, cfg: CampaignConfig):
        self.store, self.cfg = store, cfg
        stored = store.get_meta("campaign_next_seed")
        self.next_seed = int(stored) if stored is not None else cfg.seed
        # target -> operator instances its tests must not hold (the export table; ONNX targets only)
        self.blocked: dict[str, frozenset[str]] = {}
        # (case, target) -> does the case pass the target's export gate (agent/export_gate.py); None: not asked
        self.admit: Callable[[TestCase, str], bool] | None = None

    def draw(self, target: str, rng: random.Random) -> tuple[TestCase, int]:
        from nnforge.generator.engine import GeneratorConfig
        from nnforge.generator.export_probe import onnx_config
        from nnforge.generator.seeds import generate_case

        n = self.next_seed
        self.next_seed += 1
        self.store.set_meta("campaign_next_seed", str(self.next_seed))  # before the seed is used
        onnx = is_onnx_target(target)
        cfg = GeneratorConfig(n_nodes=self.cfg.nodes, seed=n)
        if not onnx:
            return generate_case(cfg)[0], n
        cfg = onnx_config(cfg, self.blocked.get(target, frozenset()))
        case, _ = generate_case(cfg)
        for retry in range(1, ONNX_REDRAWS + 1):  # a form its spec says the exporter refuses (cumprod, stable sort),
            if case.meta.get("onnx_exportable", True) and (self.admit is None or self.admit(case, target)):
                break  # or a program the export gate would stop
            case, _ = generate_case(replace(cfg, seed=n + retry * 1_000_003))
        return case, n


class HistorySource:
    """Seeds mined from a compiler's history (`nnforge history mine/ingest`)."""

    name = "history"

    def __init__(self, folders: list[str]):
        from nnforge.generator.history_seeds import load_history_seeds

        self.cases: list[TestCase] = []
        for folder in folders:
            self.cases += load_history_seeds(folder)
        if not self.cases:
            raise CampaignSetupError(f"no runnable history seeds in {', '.join(folders)}")

    def draw(self, target: str, rng: random.Random) -> tuple[TestCase, int]:
        i = rng.randrange(len(self.cases))
        return self.cases[i], i


def history_prior(folders: list[str]) -> dict[str, float]:
    """The category mix of the history behind the seeds (empty when unknown or unavailable)."""
    from nnforge.generator.history_seeds import category_prior

    mix: Counter[str] = Counter()
    for folder in folders:
        for cat, share in category_prior(folder).items():
            mix[cat] += share / max(len(folders), 1)
    return dict(mix)
