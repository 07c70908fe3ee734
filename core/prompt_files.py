"""Prompt templates are files in the `nnforge.prompts` package (prompts/ in the repository), one
per role and category, so that they can be read, diffed and tuned without touching code."""

from __future__ import annotations

from importlib import resources
from string import Template


def prompt_text(name: str) -> str:
    """A prompt file by its path inside prompts/, e.g. "system.md", "mutate/B1.md", "history/convert.md"."""
    node = resources.files("nnforge.prompts")
    for part in name.split("/"):
        node = node.joinpath(part)
    return node.read_text(encoding="utf-8")


def render(name: str, **values: str) -> str:
    """Fill a template's `$name` placeholders (KeyError names a missing one)."""
    return Template(prompt_text(name)).substitute(values)
