"""The LLM mutator: a chat model rewrites a program to exercise one root-cause category.

One `LLMMutator` per category (`llm_mutators(client, ...)` builds them all). A mutation is:

1. pick up to three few-shot examples for the category by Thompson sampling (`ExampleBank`);
   a category with none yet is started off with an offline rule's mutant of this very program;
2. fill the category's prompt template (`prompts/mutate/<category>.md`, with `prompts/system.md`)
   with the seed program, its invocation sequence and the examples; ask the model;
3. take the reply's code block and check it: it parses, defines `class Model` and
   `make_inputs`, imports only allowed modules, differs from the seed, then runs in eager through
   the probe (a sandbox worker: LLM-written code never runs in this process);
4. on a failed check, send the program and the error back (`prompts/repair.md`), at most
   `max_repairs` times; credit the examples shown with the outcome.

When there is no client, the endpoint is unavailable (`LLMUnavailable`: unreachable, budget spent,
keeps failing) or the model never produced a program that passes, the mutator falls back to an
offline rule of the same category, so a campaign never stops for the LLM. It says so once per
client (a warning), not once per case; the mutant's meta names the fallback and why.
"""

from __future__ import annotations

import ast
import json
import logging
import random
import re
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable

from nnforge.core.calls import CallStep
from nnforge.core.llm import LLMClient, LLMUnavailable, cache_key
from nnforge.core.prompt_files import prompt_text, render
from nnforge.core.testcase import TestCase
from nnforge.mutators.ast_tools import ProgramContractError, ProgramTree
from nnforge.mutators.base import CATEGORIES, SEQUENCE_CATEGORIES, Mutator, Probe, derive, ensure_calls, mutators_for
from nnforge.mutators.examples import ExampleBank

log = logging.getLogger(__name__)

N_EXAMPLES = 3
ALLOWED_IMPORTS = frozenset({
    "torch", "numpy", "math", "cmath", "functools", "itertools", "collections", "dataclasses", "typing",
    "operator", "contextlib", "enum", "abc", "copy", "numbers", "random", "statistics", "string", "warnings",
    "types", "weakref", "heapq", "bisect", "fractions", "decimal", "inspect", "__future__",
})
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.S)


# -- prompts -------------------------------------------------------------------------------------------------

def format_examples(programs: list[str]) -> str:
    if not programs:
        return "(none yet)"
    return "\n\n".join(f"### Example {i}\n\n```python\n{p.strip()}\n```" for i, p in enumerate(programs, 1))


# -- reading and checking a reply ------------------------------------------------------------------------------
class ReplyError(ValueError):
    """The reply does not hold a usable program (or sequence); the message goes into the repair prompt."""


@dataclass(frozen=True)
class ParsedReply:
    program: str
    calls: tuple[CallStep, ...] | None = None  # only for "stateful"


def code_blocks(reply: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block in the reply."""
    return [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(reply)]


def parse_reply(reply: str, *, want_calls: bool = False) -> ParsedReply:
    """The program (and, if asked, the call sequence) a reply holds; ReplyError says what is missing."""
    blocks = code_blocks(reply)
    python = [b for lang, b in blocks if lang in ("python", "py", "python3", "")]
    program = max((b for b in python if "class Model" in b), key=len, default=None)
    if program is None:
        try:  # a bare program with no fence is fine too
            ast.parse(reply)
            program = reply if "class Model" in reply else None
        except SyntaxError:
            program = None
    if program is None:
        raise ReplyError("the reply has no Python code block holding the program (```python ... ``` with class Model)")
    check_program(program)
    calls = None
    if want_calls:
        js = [b for lang, b in blocks if lang == "json"]
        if not js:
            raise ReplyError("the reply has no ```json block with the invocation sequence")
        try:
            data = json.loads(js[-1])
            if isinstance(data, dict) and "calls" in data:
                data = data["calls"]
            if not isinstance(data, list) or not data:
                raise ValueError("the sequence must be a non-empty JSON list of call objects")
            calls = tuple(CallStep.from_json(d) for d in data)
        except (ValueError, TypeError, KeyError) as e:
            raise ReplyError(f"the ```json invocation sequence is not usable: {e}") from e
    return ParsedReply(program.strip() + "\n", calls)


def check_program(program: str) -> None:
    """Static checks: parses, follows the TestCase contract, imports only allowed modules."""
    try:
        ProgramTree(program)
    except ProgramContractError as e:
        raise ReplyError(str(e)) from e
    for node in ast.walk(ast.parse(program)):
        mods: list[str] = []
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mods = [node.module or ""] if node.level == 0 else ["(relative import)"]
        bad = [m for m in mods if m.split(".")[0] not in ALLOWED_IMPORTS]
        if bad:
            raise ReplyError(f"the program imports {', '.join(bad)}; only torch, numpy, math and pure-Python "
                             f"standard modules ({', '.join(sorted(ALLOWED_IMPORTS - {'__future__'}))}) are allowed")


def same_program(a: str, b: str) -> bool:
    try:
        return ast.dump(ast.parse(a)) == ast.dump(ast.parse(b))
    except SyntaxError:
        return a.strip() == b.strip()


# -- the mutator ---------------------------------------------------------------------------------------------
_warned_lock = threading.Lock()
# Weak, not id(): a client freed and another allocated at its address would inherit its "warned" mark
# and the new campaign would fall back without a word.
_warned: "weakref.WeakSet[LLMClient]" = weakref.WeakSet()
_warned_without_client = False


def warn_once(client: LLMClient | None, message: str) -> None:
    """One warning per client (per process for "no client"): a campaign is told once, not per case."""
    global _warned_without_client
    with _warned_lock:
        if client is None:
            if _warned_without_client:
                return
            _warned_without_client = True
        else:
            if client in _warned:
                return
            _warned.add(client)
    log.warning("%s; using the offline mutators instead", message)


class LLMMutator(Mutator):
    """A chat model rewrites the program to exercise the category (offline rules as the fallback)."""

    uses_probe = True

    def __init__(self, category: str, client: LLMClient | None, *, bank: ExampleBank | None = None,
                 max_repairs: int = 2, n_examples: int = N_EXAMPLES) -> None:
        if category not in CATEGORIES:
            raise ValueError(f"unknown category {category!r}; known: {', '.join(CATEGORIES)}")
        # Instance-level name/category: one LLM mutator per category, not a class per category.
        self.name = f"llm_{category}"  # type: ignore[misc]
        self.category = category  # type: ignore[misc]
        self.needs = ("an LLM endpoint (--llm openai), else an offline rule of the category",)  # type: ignore[misc]
        self.client = client
        self.bank = bank if bank is not None else ExampleBank(None)
        self.max_repairs = max(0, int(max_repairs))
        self.n_examples = n_examples
        self.stats = {"llm_ok": 0, "repaired": 0, "gave_up": 0, "fallback": 0}

    @property
    def summary(self) -> str:
        return f"a chat model rewrites the program to exercise {self.category} (checked, repaired, cached)"

    def applicable(self, case: TestCase) -> bool:
        try:
            ProgramTree(case.program)
        except ProgramContractError:
            return False
        return True

    def mutate(self, case: TestCase, rng: random.Random, probe: Probe | None = None) -> TestCase | None:
        if not self.applicable(case):
            return None
        if self.client is None:
            return self.fallback(case, rng, probe, "no LLM client (provider none)", warn=True)
        try:
            mutant, why = self._ask(case, rng, probe)
        except LLMUnavailable as e:
            return self.fallback(case, rng, probe, f"LLM unavailable: {e}", warn=True)
        return mutant if mutant is not None else self.fallback(case, rng, probe, why, warn=False)

    # -- one conversation -----------------------------------------------------------------------------
    def _ask(self, case: TestCase, rng: random.Random, probe: Probe | None) -> tuple[TestCase | None, str]:
        assert self.client is not None
        examples = self._examples(case, rng, probe)
        system = prompt_text("system.md")
        task = render(f"mutate/{self.category}.md", category=self.category, seed_program=case.program.strip(),
                      seed_calls=json.dumps([c.to_json() for c in case.calls]),
                      examples=format_examples([e.program for e in examples]))
        ids = [e.example_id for e in examples]
        user = task
        stateful = self.category in SEQUENCE_CATEGORIES  # the reply carries a calls sequence
        error = ""
        for attempt in range(self.max_repairs + 1):
            reply = self.client.complete(system, user, purpose=f"mutate {self.category}" + (" repair" if attempt else ""))
            program_text = reply
            try:
                parsed = parse_reply(reply, want_calls=stateful)
                program_text = parsed.program
                if same_program(parsed.program, case.program) and (parsed.calls is None or parsed.calls == case.calls):
                    raise ReplyError("the program is the original, unchanged; rewrite it as the task asks")
                mutant = self._mutant(case, parsed, attempt, key=cache_key(self.client.model, self.client.temperature,
                                                                             system, task))
                error = self._run_check(mutant, probe)
            except ReplyError as e:
                error = str(e)
            if not error:
                self.bank.record(ids, True)
                self.bank.add(self.category, mutant.program, origin="llm")
                self.stats["llm_ok"] += 1
                self.stats["repaired"] += int(attempt > 0)
                return mutant, ""
            if attempt < self.max_repairs:
                user = render("repair.md", task=task, program=_excerpt(program_text), error=error,
                              category=self.category, attempt=str(attempt + 1), max_repairs=str(self.max_repairs),
                              extra_block=", then the sequence in one ```json block" if stateful else "")
        self.bank.record(ids, False)
        self.stats["gave_up"] += 1
        return None, f"LLM mutant failed its checks {self.max_repairs + 1} times (last: {error[:300]})"

    def _mutant(self, case: TestCase, parsed: ParsedReply, repairs: int, key: str) -> TestCase:
        calls = parsed.calls if parsed.calls is not None else ensure_calls(case, 1)
        mutant = derive(case, self, program=parsed.program, calls=calls,
                        note={"llm": {"model": self.client.model if self.client else "", "prompt_hash": key,
                                      "repairs": repairs}})
        # The model may rebind any name: keep only facts the new program itself states (its inputs).
        facts = {k: v.to_json() for k, v in ProgramTree(parsed.program).input_facts().items()}
        return mutant.with_(meta={**mutant.meta, "facts": facts})

    def _run_check(self, mutant: TestCase, probe: Probe | None) -> str:
        """"" when the mutant runs in eager (through the probe), else the error for the repair prompt."""
        if probe is None:
            return ""  # static checks only; the caller validates before use
        detailed: Callable[[TestCase], Any] | None = getattr(probe, "check", None)
        if detailed is not None:
            res = detailed(mutant)
            return "" if res.ok else f"running it in eager failed at {res.stage}: {res.error}"
        return "" if probe(mutant) else "running it in eager failed (no detail available)"

    def _examples(self, case: TestCase, rng: random.Random, probe: Probe | None):
        if not self.bank.examples(self.category):
            starter = self._offline_mutant(case, rng, probe)
            if starter is not None:
                self.bank.add(self.category, starter.program, origin=f"offline:{starter.meta.get('mutator')}")
        return self.bank.pick(self.category, self.n_examples, rng)

    # -- fallback -------------------------------------------------------------------------------------
    def _offline_mutant(self, case: TestCase, rng: random.Random, probe: Probe | None) -> TestCase | None:
        options = [m for m in mutators_for(self.category) if m.applicable(case)]
        rng.shuffle(options)
        for m in options:
            mutant = m.mutate(case, rng, probe if m.uses_probe else None)
            if mutant is not None and (probe is None or probe(mutant)):
                return mutant
        return None

    def fallback(self, case: TestCase, rng: random.Random, probe: Probe | None, why: str, *,
                 warn: bool) -> TestCase | None:
        """An offline mutant of the same category, its meta saying why the LLM was not used."""
        if warn:
            warn_once(self.client, why)
        else:
            log.info("%s: %s; falling back to an offline mutator", self.name, why)
        self.stats["fallback"] += 1
        mutant = self._offline_mutant(case, rng, probe)
        if mutant is None:
            return None
        return mutant.with_(meta={**mutant.meta, "llm_fallback": why})


def _excerpt(text: str, limit: int = 12000) -> str:
    return text if len(text) <= limit else text[:limit] + "\n# ... (cut)"


def llm_mutators(client: LLMClient | None, *, bank: ExampleBank | None = None, max_repairs: int = 2,
                 categories: tuple[str, ...] = CATEGORIES) -> dict[str, LLMMutator]:
    """One LLM mutator per category, sharing one client and one example bank."""
    bank = bank if bank is not None else ExampleBank(None)
    return {c: LLMMutator(c, client, bank=bank, max_repairs=max_repairs) for c in categories}
