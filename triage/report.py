"""`report.md` for a cluster: a draft GitHub issue a maintainer can act on.

The template writes the whole draft from the run's own data: title, what goes wrong, the blame
ladder and the guilty layer, the repro, observed vs expected with numbers, versions, suggested
labels. With an LLM configured (`NNFORGE_LLM_PROVIDER`), the model may rewrite the prose, and
only the prose: its draft is accepted only if every code block, every number and every version
string of the template is still in it verbatim; otherwise, or on any error, the template stands.
Code, numbers and versions therefore always come from the run, never from the model.

The layout follows PyTorch's bug template (`### 🐛 Describe the bug`, `### Versions`).
"""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from nnforge.core.prompt_files import prompt_text
from nnforge.core.signature import Signature
from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Symptom, Verdict

REPORT_FILE = "report.md"
TITLE_LIMIT = 110

# Who maintains each layer, for the title prefix and the labels.
_LAYER_NAMES = {
    "dynamo": "dynamo", "aot_autograd": "aot_autograd", "inductor": "inductor",
    "onnx_export": "onnx export", "onnx_dynamo_export": "onnx export (dynamo=True)",
    "ort_kernels": "ORT kernels", "ort_optimizer": "ORT optimizer",
    "tvm_frontend": "TVM ONNX frontend", "tvm_pipeline": "TVM Relax pipeline",
}
_RUNG_LABELS = {"dynamo": "module: dynamo", "aot_autograd": "module: aotdispatch", "inductor": "module: inductor"}
_SYMPTOM_WORDS = {
    Symptom.CRASH: "crashes", Symptom.SEGFAULT: "kills the process", Symptom.TIMEOUT: "hangs",
    Symptom.OOM: "runs out of memory", Symptom.MISMATCH: "gives a wrong result",
    Symptom.NAN_MISMATCH: "gives NaN/Inf where eager is finite (or the reverse)",
    Symptom.EXCEPTION_MISMATCH: "raises where eager does not (or the reverse)",
}


@dataclass(frozen=True)
class ReportDraft:
    title: str
    body: str  # the Markdown of report.md, title included as its first heading
    labels: tuple[str, ...]
    repo: str  # "pytorch/pytorch", "microsoft/onnxruntime", "apache/tvm"
    prose_by: str = "template"  # or "llm:<model>"

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "labels": list(self.labels), "repo": self.repo, "prose_by": self.prose_by}


# -- facts from the run -----------------------------------------------------------------------------
def _family(target: str) -> str:
    from nnforge.oracle.backend import parse_target

    try:
        return parse_target(target).spec.family
    except ValueError:
        return "torch"


# A TVM rung covers import, lowering, code generation and the VM: where a crash's frames are, it
# names the part that raised (the innermost match wins: the frames run outermost first)
_TVM_PARTS = (("relax/frontend/onnx", "TVM ONNX frontend"), ("relax/transform", "TVM Relax passes"),
              ("relax/backend", "TVM Relax passes"), ("tirx/", "TVM TIR lowering"), ("tir/", "TVM TIR lowering"),
              ("target/llvm", "TVM LLVM codegen"), ("codegen", "TVM LLVM codegen"), ("runtime/", "TVM runtime"))


def layer_name(rung: str | None, frames: Any = ()) -> str:
    """Who the title names: the rung's layer; for a TVM rung's crash, the part of TVM that raised."""
    if (rung or "").startswith("tvm_") and frames:
        for f in reversed(list(frames)):
            path = str(getattr(f, "file", f)).replace("\\", "/")
            part = next((name for key, name in _TVM_PARTS if key in path), None)
            if part is not None:
                return part
    return _LAYER_NAMES.get(rung or "", rung or "unknown layer")


def issue_repo(verdict: Verdict) -> str:
    """Where the issue belongs: the project that owns the guilty layer."""
    rung = verdict.rung or ""
    if rung.startswith("ort_"):
        return "microsoft/onnxruntime"
    if rung.startswith("tvm_"):
        return "apache/tvm"
    return "pytorch/pytorch"


def suggested_labels(verdict: Verdict) -> tuple[str, ...]:
    """PyTorch's labels for a fuzzer finding on the guilty layer (only for pytorch/pytorch)."""
    if issue_repo(verdict) != "pytorch/pytorch":
        return ()
    if verdict.rung in ("onnx_export", "onnx_dynamo_export"):
        labels = ["module: onnx", "topic: fuzzer"]
    else:
        labels = ["oncall: pt2", "topic: fuzzer"]
    if verdict.symptom in (Symptom.MISMATCH, Symptom.NAN_MISMATCH):
        labels.append("module: correctness (silent)")
    if verdict.rung in _RUNG_LABELS:
        labels.append(_RUNG_LABELS[verdict.rung])
    if verdict.stateful:
        labels.append("module: guards")
    if "dynamic=true" in verdict.target.replace(" ", "").lower():
        labels.append("module: dynamic shapes")
    return tuple(dict.fromkeys(labels))


def _first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def _ops_chain(case: TestCase, limit: int = 5) -> str:
    try:
        from nnforge.triage.canonical import op_names

        ops = list(op_names(case))
    except Exception:
        ops = list(case.meta.get("ops", []))
    if not ops:
        return ""
    chain = " → ".join(ops[:limit])
    return chain + (" → …" if len(ops) > limit else "")


def issue_title(verdict: Verdict, case: TestCase, signature: Any = None) -> str:
    """One line from the root-cause key: the layer, the symptom and what the bug is (the
    compiler's error line for crashes, the state change for stale state, the ops otherwise)."""
    from nnforge.triage.rootcause import (attribute_class, compiler_error_line, describe_state_change, guilty_ops,
                                          is_stale_state, located, statement_ops_of)

    prefix = f"[{layer_name(verdict.rung, verdict.frames)}]"
    chain = _ops_chain(case, limit=4)
    on = f" on {chain}" if chain else ""
    s = verdict.symptom
    cpp_error = compiler_error_line(verdict.exc_message) if s in (Symptom.CRASH, Symptom.EXCEPTION_MISMATCH) else None
    if is_stale_state(verdict, case):
        text = (f"compiled module keeps stale state after {describe_state_change(case, verdict)} "
                f"({'crash' if s is Symptom.CRASH else 'wrong result'} on call {verdict.call_index})")
    elif verdict.side_effect and s is Symptom.MISMATCH:
        text = (f"compiled module loses or changes a write to a {verdict.side_effect} "
                f"(differs after call {verdict.call_index})")
    elif s is Symptom.CRASH and cpp_error:
        text = f"generated C++ does not compile: {_raw_cpp_error(verdict.exc_message) or cpp_error}"
    elif s is Symptom.CRASH:
        text = f"{_short_type(verdict.exc_type)}: {_first_line(verdict.exc_message)}"
    elif s is Symptom.EXCEPTION_MISMATCH:
        text = f"{_short_type(verdict.exc_type)} raised on one side only{on}"
    elif s is Symptom.SEGFAULT:
        text = f"process dies ({_first_line(verdict.exc_message) or 'signal'}) compiling{on or ' the model'}"
    elif (fw := located(verdict)) is not None and not _wrong_form(verdict.detail):
        attrs = ", ".join((str(fw.get("dtype") or "?"),) + attribute_class(fw))
        downstream = " (NaN/Inf further on)" if s is Symptom.NAN_MISMATCH else ""
        inside = f" in {' + '.join(statement_ops_of(fw))}" if fw.get("aten") and not fw.get("piece") else ""
        text = f"wrong values from {' + '.join(guilty_ops(fw))}{inside} ({attrs}){downstream}"
    elif s is Symptom.MISMATCH and verdict.gradient:
        err = f" (max abs err {verdict.max_abs_err:.3g})" if verdict.max_abs_err is not None else ""
        text = f"wrong gradient of {verdict.gradient} in the backward{on}{err}"
    elif s is Symptom.MISMATCH and (form := _wrong_form(verdict.detail)):
        text = f"{form}{on}"
    elif s is Symptom.MISMATCH:
        err = f" (max abs err {verdict.max_abs_err:.3g})" if verdict.max_abs_err is not None else ""
        text = f"silently wrong result{on}{err}"
    elif s is Symptom.NAN_MISMATCH and verdict.gradient:
        text = f"NaN/Inf mismatch with eager in the gradient of {verdict.gradient} in the backward{on}"
    elif s is Symptom.NAN_MISMATCH:
        text = f"NaN/Inf mismatch with eager{on}"
    else:
        text = f"{_SYMPTOM_WORDS.get(s, s.value)}{on}"
    title = f"{prefix} {text}"
    return title if len(title) <= TITLE_LIMIT else title[: TITLE_LIMIT - 1] + "…"


def _wrong_form(detail: str | None) -> str | None:
    """"returns int64 where eager returns int8" when the comparison found a wrong dtype or shape
    (oracle/compare.py words them so), not wrong values."""
    m = re.search(r"\bdtype torch\.(\w+) instead of torch\.(\w+)", detail or "")
    if m:
        return f"returns {m.group(1)} where eager returns {m.group(2)}"
    m = re.search(r"\bshape (\([^)]*\)) instead of (\([^)]*\))", detail or "")
    if m:
        return f"returns shape {m.group(1)} where eager returns {m.group(2)}"
    return None


def _raw_cpp_error(message: str | None) -> str | None:
    """The first `error:` line as the compiler printed it (without the path in front)."""
    m = re.search(r"\berror:\s*([^\n]+)", message or "")
    return m.group(1).strip()[:160] if m else None


def _short_type(name: str | None) -> str:
    return (name or "error").rsplit(".", 1)[-1]


def ladder_line(verdict: Verdict) -> str:
    """`dynamo` pass → **`inductor` mismatch**: the rungs run cheapest first, the guilty one bold."""
    from nnforge.oracle.backend import parse_target

    try:
        rungs = list(parse_target(verdict.target).spec.rungs)
    except ValueError:
        rungs = []
    if verdict.rung and verdict.rung not in rungs:
        rungs = [verdict.rung]
    parts = []
    for r in rungs:
        if r == verdict.rung:
            parts.append(f"**`{r}` {verdict.symptom.value}**")
            break
        parts.append(f"`{r}` pass")
    return " → ".join(parts) if parts else f"**`{verdict.rung}` {verdict.symptom.value}**"


_COLLECT_ENV: list[str] = []


def collect_env_text() -> str:
    """`python -m torch.utils.collect_env`'s report, as PyTorch's bug template asks for (once per
    process: it runs a few commands)."""
    if not _COLLECT_ENV:
        try:
            from torch.utils.collect_env import get_pretty_env_info

            _COLLECT_ENV.append(get_pretty_env_info().strip())
        except Exception as e:  # a broken environment still gets the short block
            _COLLECT_ENV.append(f"(torch.utils.collect_env failed: {type(e).__name__}: {e})")
    return _COLLECT_ENV[0]


def _other_runtime_versions(verdict: Verdict) -> list[str]:
    """onnx / onnxruntime / tvm versions where the target goes through them."""
    names = {"ort": ("onnx", "onnxruntime"), "tvm": ("onnx", "tvm")}.get(verdict.target.split(":")[0], ())
    out = []
    for name in names:
        try:
            mod = __import__(name)
            out.append(f"{name} {getattr(mod, '__version__', '?')}")
        except Exception:
            continue
    return out


def versions_block(verdict: Verdict) -> str:
    """The versions the run recorded, then collect_env's report (PyTorch's template asks for it)."""
    return short_versions(verdict) + "\n\n" + collect_env_text()


def short_versions(verdict: Verdict) -> str:
    """The versions the run recorded (the worker's torch and each rung's system), plus Python."""
    lines = [f"python {platform.python_version()} ({platform.platform()})"]
    torch_version = verdict.versions.get("torch")
    if torch_version:
        lines.append(f"torch {torch_version}")
    for name, version in sorted(verdict.versions.items()):
        if version and name != "torch" and version != torch_version:  # torch.compile rungs report torch's
            lines.append(f"{name} {version}")
    if not verdict.versions:
        try:
            import torch

            lines.append(f"torch {torch.__version__}")
        except ImportError:
            pass
    lines += [v for v in _other_runtime_versions(verdict) if v not in lines]
    return "\n".join(lines)


def traceback_text(verdict: Verdict) -> str:
    """The crash's frames (outermost first) and its message, as Python prints a traceback."""
    lines = ["Traceback (most recent call last):"]
    for f in verdict.frames:
        lines.append(f'  File "{f.file}", line {f.line}, in {f.function}')
    lines.append(f"{verdict.exc_type or 'Error'}: {verdict.exc_message or ''}".rstrip())
    return "\n".join(lines)


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.6g}"


def observed_section(verdict: Verdict) -> str:
    s = verdict.symptom
    rows = [("symptom", f"`{s.value}`" + (" (stateful: only with the compiler's state kept across calls)"
                                          if verdict.stateful else ""))]
    if verdict.call_index is not None:
        rows.append(("call of the invocation sequence", str(verdict.call_index)))
    if s in (Symptom.MISMATCH, Symptom.NAN_MISMATCH):
        if verdict.output_index is not None:
            rows.append(("output (flattened index)", str(verdict.output_index)))
        rows.append(("expected", "eager PyTorch (reference)"))
        rows.append(("max abs err", _fmt(verdict.max_abs_err)))
        rows.append(("max rel err", _fmt(verdict.max_rel_err)))
        if verdict.fp64_rmse_actual is not None or verdict.fp64_rmse_eager is not None:
            rows.append(("RMSE vs float64, eager", _fmt(verdict.fp64_rmse_eager)))
            rows.append(("RMSE vs float64, compiled", _fmt(verdict.fp64_rmse_actual)))
    table = "| | |\n| --- | --- |\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)
    out = [table]
    if verdict.exc_type or verdict.exc_message:
        msg = (verdict.exc_message or "").strip()
        msg_lines = msg.splitlines()[:12]
        out.append("Error:\n\n```\n" + f"{verdict.exc_type or ''}: " + "\n".join(msg_lines) + "\n```")
    if verdict.frames:
        try:
            from nnforge.triage.normalize import compiler_frames

            frames = compiler_frames(verdict.frames, limit=5)
        except Exception:
            frames = tuple(f"{f.file}:{f.function}" for f in verdict.frames[-5:])
        if frames:
            out.append("Innermost compiler frames: " + ", ".join(f"`{f}`" for f in frames))
    return "\n\n".join(out)


def values_line(case: TestCase, verdict: Verdict, reduction: dict[str, Any] | None = None) -> str | None:
    """What the values the repro runs on have in common that a bug may need ('input 0 (int32,
    4x16): all positive'), read from the values themselves; None when nothing stands out.
    `reduction["values_needed"]`: whether triage saw the bug go away with default values."""
    from nnforge.oracle.value_bins import NORMAL, describe_tensor

    import torch

    parts = []
    for i, x in enumerate(case.inputs or ()):
        said = describe_tensor(x) if isinstance(x, torch.Tensor) else []
        if said:
            dims = "x".join(str(d) for d in x.shape)
            parts.append(f"input {i} ({str(x.dtype).replace('torch.', '')}, {dims}): {', '.join(said)}")
    for name, t in (case.state_dict or {}).items():
        said = describe_tensor(t) if isinstance(t, torch.Tensor) and t.is_floating_point() else []
        if said:
            parts.append(f"`{name}`: {', '.join(said)}")
    if not parts:
        return None
    bin_name = verdict.value_bin
    drawn = (f" (the test's values came from NNForge's value bin `{bin_name}`; inputs the reduction cut out of "
             f"the program hold what the removed operators computed from them)" if bin_name and bin_name != NORMAL else "")
    needed = (reduction or {}).get("values_needed")
    tail = {True: " With fresh values drawn the default way (N(0, 1), integers from [-8, 8]) the bug did not show "
                  "in NNForge's rerun: it seems to need values like these.",
            False: " The bug shows with values drawn the default way too."}.get(needed, "")
    return "The values it runs on, as embedded in `repro.py`" + drawn + ": " + "; ".join(parts) + "." + tail


def draft_report(case: TestCase, verdict: Verdict, *, repro: str, signature: Signature | None = None,
                 cluster_id: str | None = None, count: int = 1, reduction: dict[str, Any] | None = None,
                 repro_output: str | None = None, llm_title: str | None = None, hypothesis: str | None = None,
                 llm_model: str | None = None) -> ReportDraft:
    """The template draft of report.md. `llm_title` / `hypothesis`: what the triage LLM wrote
    (already checked by triage.llm_triage); the last line then says so."""
    title = llm_title or issue_title(verdict, case)
    labels = suggested_labels(verdict)
    repo = issue_repo(verdict)
    what = _SYMPTOM_WORDS.get(verdict.symptom, verdict.symptom.value)
    layer = layer_name(verdict.rung)
    if verdict.side_effect and verdict.symptom is Symptom.MISMATCH:
        sentence = (f"Compiling this model with `{verdict.target}` loses or changes a write the model makes to a "
                    f"{verdict.side_effect}: after call {verdict.call_index} the compiled module's Python state "
                    f"differs from eager's (see the repro's output below), whatever its outputs are.")
    elif verdict.gradient and verdict.symptom in (Symptom.MISMATCH, Symptom.NAN_MISMATCH):
        sentence = (f"Compiling this model with `{verdict.target}` gives a wrong gradient of {verdict.gradient}: "
                    f"the call's outputs agree with eager, but the gradients of their sum weighted by fixed random "
                    f"cotangents (`torch.autograd.grad`) differ beyond `torch.testing.assert_close`'s default "
                    f"tolerances and are further from a float64 run than eager's are.")
    elif verdict.symptom in (Symptom.MISMATCH, Symptom.NAN_MISMATCH):
        sentence = (f"Compiling this model with `{verdict.target}` {what}: the compiled output differs from eager "
                    f"beyond `torch.testing.assert_close`'s default tolerances and is further from a float64 run "
                    f"than eager is, so it is not a rounding difference.")
    elif verdict.symptom is Symptom.CRASH:
        sentence = f"Compiling or running this model with `{verdict.target}` {what}; eager runs it without error."
    else:
        sentence = f"With `{verdict.target}` this model {what}; eager runs it fine."
    blame = (f"Ablation by blame ladder (each rung adds one layer; the first that disagrees with eager is guilty): "
             f"{ladder_line(verdict)}. Guilty layer: **{layer}**.")
    size = ""
    if reduction:
        from nnforge.triage.reducer import removed_nothing, size_words

        b, a = reduction.get("before", {}), reduction.get("after", {})
        if b and a:
            size = (f"{size_words(a)}; the fuzzer's reduction removed nothing" if removed_nothing(b, a)
                    else f"reduced by the fuzzer from {size_words(b)} to {size_words(a)}")
    program_block = "```python\n" + case.program.strip() + "\n```"
    repro_block = (f"The full repro is attached as `repro.py` ({len(repro.splitlines())} lines: the program with its "
                   f"values, the target and the comparison; it needs only what its header says).")
    trace_block = ""
    if verdict.symptom in (Symptom.CRASH, Symptom.EXCEPTION_MISMATCH, Symptom.SEGFAULT) and (verdict.frames or verdict.exc_message):
        trace_block = ("<details><summary>Full traceback</summary>\n\n```\n" + traceback_text(verdict).rstrip()
                       + "\n```\n\n</details>")
    quoted = ""
    if repro_output and repro_output.strip():
        quoted = ("Output of `python repro.py` in a fresh process (expected = eager, actual = the system under test):"
                  f"\n\n```\n{repro_output.strip()}\n```")
    found = "Found by NNForge (a fuzzer for deep-learning compilers)" + (
        f"; cluster `{cluster_id}`, {count} finding{'s' if count != 1 else ''} so far" if cluster_id else "") + "."
    parts = [
        f"# {title}",
        "### 🐛 Describe the bug",
        sentence,
        blame,
    ] + ([f"Root-cause hypothesis (written by an LLM, not verified): {hypothesis}"] if hypothesis else []) + [
        "The program" + (f" ({size})" if size else "") + ":",
        program_block,
    ] + ([values] if (values := values_line(case, verdict, reduction)) else []) + [
        "Standalone repro: `python repro.py` exits 1 while the bug is present and 0 once it is fixed.",
        repro_block,
        "### Error logs",
        observed_section(verdict),
    ] + ([quoted] if quoted else []) + ([trace_block] if trace_block else []) + [
        "### Versions",
        "```\n" + versions_block(verdict) + "\n```",
        "Suggested labels: " + (", ".join(f"`{lb}`" for lb in labels) if labels else "(none)"),
        found,
        llm_note_line(llm_model, bool(llm_title), bool(hypothesis)),
    ]
    return ReportDraft(title=title, body="\n\n".join(parts) + "\n", labels=labels, repo=repo)


# The last line of every report says who wrote its prose (PyTorch asks for AI-assisted text to be declared).
TEMPLATE_PROSE = "Prose: NNForge's template; no LLM wrote any of this report."
_PROSE_LINE = re.compile(r"^Prose: .*$", re.M)


def llm_note_line(model: str | None, title: bool, hypothesis: bool) -> str:
    """The last line for a draft: the template's, or which parts the triage LLM wrote."""
    parts = [p for p, on in (("the title", title), ("the root-cause hypothesis", hypothesis)) if on]
    if not parts or not model:
        return TEMPLATE_PROSE
    return (f"Prose: {' and '.join(parts)} were written by an LLM ({model}) and checked to bring no number, version "
            f"or code of their own; everything else is NNForge's template.")


def llm_prose_line(model: str) -> str:
    return (f"Prose: the description was rewritten by an LLM ({model}) from NNForge's template; the code, numbers, "
            f"versions, outputs and repro are NNForge's and were checked to be unchanged.")


# -- the optional LLM rewrite -----------------------------------------------------------------------------
_FENCE = re.compile(r"```.*?```", re.S)
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w])")
_VERSION = re.compile(r"\b\d+\.\d+(?:\.\d+)?(?:[\w.+-]*)")
_INLINE = re.compile(r"`[^`\n]+`")


def protected_spans(text: str) -> list[str]:
    """What a rewrite must keep verbatim: code blocks, inline code, numbers and version strings."""
    spans = _FENCE.findall(text)
    prose = _FENCE.sub(" ", text)
    spans += _INLINE.findall(prose)
    spans += _VERSION.findall(prose)
    spans += _NUMBER.findall(prose)
    return list(dict.fromkeys(spans))


def accept_rewrite(template: str, candidate: str) -> bool:
    """True when `candidate` keeps every protected span of `template` (see `protected_spans`)."""
    if not candidate or not candidate.strip():
        return False
    return all(span in candidate for span in protected_spans(template))


def rewrite_prose(draft: ReportDraft, settings: Any = None, client: Any = None) -> ReportDraft:
    """The draft with prose rewritten by the configured LLM, or the draft itself when no LLM is
    configured, the call fails in any way, or the rewrite lost a code block, number or version."""
    try:
        if client is None:
            from nnforge.core.llm import LLMClient
            from nnforge.core.settings import load_settings

            client = LLMClient.from_settings(settings or load_settings())
        if client is None:
            return draft
        reply = client.complete(prompt_text("report/rewrite.md"), draft.body, purpose="report")
    except Exception:  # LLMUnavailable, a missing package, a bad setting: the template stands
        return draft
    text = _strip_outer_fence(reply)
    if not accept_rewrite(draft.body, text):
        return draft
    if not text.lstrip().startswith(f"# {draft.title}"):
        text = f"# {draft.title}\n\n" + text.lstrip()
    model = str(getattr(client, "model", "?"))
    before = _PROSE_LINE.search(draft.body)
    note = llm_prose_line(model)
    if before is not None and before.group(0) != TEMPLATE_PROSE:  # the triage LLM wrote parts already
        note = before.group(0) + f" The description was then rewritten by an LLM ({model}), numbers and code kept."
    text = _PROSE_LINE.sub("", text).rstrip() + "\n\n" + note  # the model does not get to say
    return replace(draft, body=text.rstrip() + "\n", prose_by=f"llm:{model}")


def _strip_outer_fence(text: str) -> str:
    """Models often wrap the whole answer in ```markdown ... ```: unwrap it."""
    t = (text or "").strip()
    m = re.fullmatch(r"```(?:markdown|md)?\n(.*)\n```", t, re.S)
    return m.group(1) if m else t


def write_report(folder: str | Path, draft: ReportDraft) -> Path:
    path = Path(folder) / REPORT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(draft.body)
    return path
