"""The optional LLM side of history mining: convert tests the rules cannot, guess categories.

History mining works without a model; with one configured (core/llm.py, NNFORGE_LLM_PROVIDER) it
converts the regression tests and repro scripts the rule-based extractor gives up on, and it
replaces the keyword guess of a root cause. When the model cannot answer (`LLMUnavailable`:
unreachable, budget spent, ...) this wrapper says so once through `on_note` and from then on
answers None, so the caller falls back to rules only. What the model writes is untrusted: it is
only checked for the TestCase contract here; the caller runs it in the sandbox like any mutant.
"""

from __future__ import annotations

import re
from string import Template
from typing import Any, Callable

from nnforge.core.llm import LLMClient, LLMUnavailable
from nnforge.core.prompt_files import prompt_text
from nnforge.generator.history_category import CategoryGuess, normalise_category
from nnforge.generator.history_extract import check_contract


_FENCE = re.compile(r"```([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)


class HistoryLLM:
    """Wraps an `LLMClient` (anything with `complete(system, user, purpose=...) -> str`)."""

    def __init__(self, client: Any, on_note: Callable[[str], None] | None = None):
        self.client = client
        self.on_note = on_note or (lambda _msg: None)
        self.down_reason = ""
        self.conversions = 0
        self.failed_conversions = 0
        self._unavailable = (LLMUnavailable,)

    @classmethod
    def from_settings(cls, settings: Any, on_note: Callable[[str], None] | None = None) -> "HistoryLLM | None":
        """None when no model is configured (provider "none") or core/llm.py cannot make a client."""
        try:
            client = LLMClient.from_settings(settings)
        except Exception as e:  # a bad provider name, langchain missing: rules only, said once
            (on_note or (lambda _m: None))(f"LLM not used ({type(e).__name__}: {e}); rules only")
            return None
        return cls(client, on_note) if client is not None else None

    @property
    def available(self) -> bool:
        return not self.down_reason

    def _complete(self, system: str, user: str, purpose: str) -> str | None:
        if self.down_reason:
            return None
        try:
            return self.client.complete(system, user, purpose=purpose)
        except self._unavailable as e:
            self.down_reason = str(e) or type(e).__name__
            self.on_note(f"LLM unavailable ({self.down_reason}); continuing with rules only")
            return None

    def convert(self, code: str, *, context: str = "", origin: str = "a compiler's test suite",
                why: str = "no known test shape") -> str | None:
        """A TestCase program converted from `code`, or None (no model, no usable reply)."""
        user = Template(prompt_text("history/convert_user.md")).safe_substitute(
            origin=origin, why=why, context=context or "# (none)", code=code)
        reply = self._complete(prompt_text("history/convert.md"), user, "history-convert")
        if reply is None:
            return None
        program = _program_in(reply)
        if program is None or check_contract(program):
            self.failed_conversions += 1
            return None
        self.conversions += 1
        return program

    def categorize(self, text: str) -> CategoryGuess | None:
        """The model's category for a fix (commit or report), or None (no model, unreadable reply)."""
        reply = self._complete(prompt_text("history/categorize.md"), text[:12000], "history-categorize")
        if reply is None:
            return None
        cat = normalise_category(reply)
        if cat is None:
            return None
        reason = reply.strip().splitlines()[0][:300]
        return CategoryGuess(cat, reason, "llm", 0.0)


def _program_in(reply: str) -> str | None:
    blocks = [body for lang, body in _FENCE.findall(reply) if lang.lower() in ("python", "py", "python3", "")]
    blocks = [b for b in blocks if "class Model" in b]
    if blocks:
        return max(blocks, key=len)
    return reply if "class Model" in reply and not check_contract(reply) else None
