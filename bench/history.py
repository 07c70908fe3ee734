"""History mining benchmark: commits scanned per second, fraction of fix commits turned into runnable
seeds, category distribution.

    .venv/bin/python bench/history.py                         # the test fixture (tests/history_fixture.py)
    .venv/bin/python bench/history.py --synthetic 400         # plus a generated 400-commit history
    .venv/bin/python bench/history.py --repo ~/src/pytorch --since 2024-06-01 --paths test/inductor test/dynamo

Seeds are validated in eager in sandbox workers (as `nnforge history mine` does) unless
--no-validate. The synthetic history mixes fixes with regression tests of several shapes (some
the rules cannot convert, some that fail in eager), features, documentation commits, fixes
without tests and test-only commits, over a few test files that grow as real ones do.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from history_fixture import build_repo  # noqa: E402

from nnforge.agent.cmd_history import mine_history  # noqa: E402
from nnforge.oracle.sandbox import WorkerPool  # noqa: E402

_OPS = [("torch.relu(x) + 1", "Fix relu fusion with a broadcast add", "I3"),
        ("x.transpose(0, 1).contiguous() * 2", "Fix wrong strides after transpose", "I1"),
        ("x.half().float().sum(dim=0)", "Fix precision loss in half reduction", "I2"),
        ("x[: x.shape[0] // 2].view(-1)", "Fix view of a size computed from shape arithmetic", "D2"),
        ("torch.where(x > 0, x, torch.full_like(x, float('nan')))", "Fix nan handling in where", "K1"),
        ("x.add_(1).mul(2)", "Fix in-place add on an input", "F2")]
_SHAPES = ("compare", "compile", "module", "helper_only", "bad_eager")


def _test_src(k: int, shape: str, body: str) -> str:
    if shape == "compare":
        return (f"\n    def test_case_{k}(self):\n        def fn(x):\n            return {body}\n\n"
                f"        self.common(fn, (torch.randn(4, {k}),))\n")
    if shape == "compile":
        return (f"\n    def test_case_{k}(self):\n        def fn(x):\n            return {body}\n\n"
                f"        x = torch.randn(4, {k}, device=self.device)\n        opt = torch.compile(fn)\n"
                f"        self.assertEqual(opt(x), fn(x))\n")
    if shape == "module":
        return (f"\n    def test_case_{k}(self):\n        class Repro(torch.nn.Module):\n"
                f"            def forward(self, x):\n                return {body}\n\n"
                f"        mod = Repro()\n        x = torch.randn(4, {k})\n        torch.compile(mod)(x)\n")
    if shape == "helper_only":
        return f"\n    def test_case_{k}(self):\n        self.run_case({k})\n"
    return (f"\n    def test_case_{k}(self):\n        def fn(x):\n            return x @ torch.randn(5, 5)\n\n"
            f"        self.common(fn, (torch.randn(4, 6),))\n")


def build_synthetic(root: Path, n_commits: int, seed: int = 0) -> dict[str, str]:
    """A history of `n_commits` commits over 4 test files and a few code files; {sha: intended category}
    for the commits that fix something."""
    import git

    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    repo = git.Repo.init(root)
    who = git.Actor("Bench", "bench@example.com")
    when = datetime(2023, 1, 1, tzinfo=timezone.utc)
    header = "import torch\n\n\nclass TestOps:\n    def common(self, fn, args):\n        return fn(*args)\n"
    tests: dict[str, list[str]] = {f"test/inductor/test_ops{i}.py": [] for i in range(4)}
    code: dict[str, list[str]] = {f"compiler/pass{i}.py": ["X = 0\n"] for i in range(6)}

    def write(rel: str, text: str) -> None:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    intended: dict[str, str] = {}

    def commit(msg: str, files: list[str]) -> str:
        nonlocal when
        when += timedelta(hours=7)
        stamp = when.strftime("%Y-%m-%dT%H:%M:%S+0000")
        repo.index.add(files)
        return repo.index.commit(msg, author=who, committer=who, author_date=stamp, commit_date=stamp).hexsha

    for rel in tests:
        write(rel, header)
    for rel, lines in code.items():
        write(rel, "".join(lines))
    write("README.md", "# compiler\n")
    commit("Initial import", list(tests) + list(code) + ["README.md"])
    for k in range(1, n_commits):
        kind = rng.choices(["fix_test", "feature", "docs", "fix_no_test", "test_only"], [4, 3, 1, 1, 1])[0]
        cfile = rng.choice(list(code))
        code[cfile].append(f"def f{k}(x):\n    return x + {k}\n")
        body, message, cat = rng.choice(_OPS)
        if kind == "docs":
            write("README.md", f"# compiler\n\nrevision {k}\n")
            commit(f"Fix typo in docs ({k})", ["README.md"])
            continue
        files = []
        if kind in ("fix_test", "feature", "fix_no_test"):
            write(cfile, "".join(code[cfile]))
            files.append(cfile)
        if kind in ("fix_test", "test_only"):
            tfile = rng.choice(list(tests))
            shape = rng.choices(_SHAPES, [4, 4, 3, 1, 1])[0]
            tests[tfile].append(_test_src(k, shape, body))
            write(tfile, header + "".join(tests[tfile]))
            files.append(tfile)
        msg = {"fix_test": f"{message} (#{1000 + k})", "fix_no_test": f"{message}, no test (#{1000 + k})",
               "feature": f"Add pass {k} (#{1000 + k})", "test_only": f"Add coverage for case {k}"}[kind]
        sha = commit(msg, files)
        if kind in ("fix_test", "fix_no_test"):
            intended[sha] = cat
    return intended


def run(label: str, repo: str, pool: WorkerPool | None, paths: tuple[str, ...], since: str | None,
        max_commits: int | None) -> dict:
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        s = mine_history(repo, Path(out), since=since, paths=paths, max_commits=max_commits,
                         call=pool.call if pool else None, workers=pool.size if pool else 1)
        s["total_s"] = time.perf_counter() - t0
    s["label"] = label
    return s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", help="a real checkout to mine as well")
    ap.add_argument("--paths", nargs="*", default=[], help="test folders in --repo (e.g. test/inductor test/dynamo)")
    ap.add_argument("--since", default=None)
    ap.add_argument("--max-commits", type=int, default=None)
    ap.add_argument("--synthetic", type=int, default=0, help="also mine a generated history of this many commits")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-validate", action="store_true")
    args = ap.parse_args()
    console = Console(width=200)
    results = []
    pool = None if args.no_validate else WorkerPool(size=args.workers, timeout_s=60)
    try:
        if pool:
            pool.warmup()
        with tempfile.TemporaryDirectory() as tmp:
            fixture = Path(tmp) / "fixture"
            build_repo(fixture)
            results.append(run("fixture", str(fixture), pool, ("test/inductor",), None, None))
            if args.synthetic:
                synth = Path(tmp) / "synthetic"
                t0 = time.perf_counter()
                intended = build_synthetic(synth, args.synthetic)
                console.print(f"[dim]built a {args.synthetic}-commit history in {time.perf_counter() - t0:.1f} s[/dim]")
                s = run(f"synthetic-{args.synthetic}", str(synth), pool, ("test/inductor",), None, None)
                rows = [r for r in s["fix_commit_list"] if r["sha"] in intended]
                agree = sum(1 for r in rows if r["category"] == intended[r["sha"]])
                console.print(f"category guess agrees with the intended category on {agree} of {len(rows)} "
                              f"synthetic fix commits ({agree / max(1, len(rows)):.0%})")
                results.append(s)
            if args.repo:
                results.append(run(args.repo, args.repo, pool, tuple(args.paths), args.since, args.max_commits))
    finally:
        if pool:
            pool.close()
    table = Table(title="history mining" + ("" if pool else " (not validated)"))
    for col in ("history", "commits", "scan s", "commits/s", "fix commits", "tests added", "extracted", "ran in eager",
                "fixes -> seed", "total s", "categories (fix commits)"):
        table.add_column(col, overflow="fold")
    for s in results:
        cats = s["categories"]
        total = sum(cats.values()) or 1
        table.add_row(s["label"], str(s["scanned"]), f"{s['elapsed_s']:.2f}", f"{s['commits_per_s']:.1f}",
                      str(s["fix_commits"]), str(s["tests_added"]), str(s["extracted"]), str(s["valid"]),
                      f"{s['seed_fraction']:.0%}", f"{s['total_s']:.1f}",
                      ", ".join(f"{c} {n / total:.0%}" for c, n in sorted(cats.items(), key=lambda kv: -kv[1])))
    console.print(table)


if __name__ == "__main__":
    main()
