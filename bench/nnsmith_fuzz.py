"""Runs inside a separate virtualenv that has `nnsmith` installed (never imported by NNForge).

nnsmith's own fuzzing loop (what `nnsmith.cli.fuzz`'s FuzzingLoop.run does: `model_gen` ->
materialise -> `refine_weights` -> `make_oracle` -> `verify_testcase`) against torch.compile
with Inductor, for a wall-clock budget, so bench/campaign.py can put its tests per minute and
compiler coverage beside NNForge's on the same machine and torch.

nnsmith 0.1.0 (the latest release on PyPI) ships no torch.compile backend (its backends are
torchjit, onnxruntime, tvm (Relay), xla, tflite, tensorrt), so this file adds one written the
way its backends are: a BackendFactory whose callable is the TorchModel under
`torch.compile(backend="inductor")`. Dynamo's caches are reset before each test, since every
nnsmith model shares one `forward` code object and would otherwise hit the recompile limit and
silently fall back to eager.

Usage: PY bench/nnsmith_fuzz.py SECONDS [--coverage] [--nodes N] [--seed S]
Prints one JSON line: tests, bugs, failed generations, seconds per stage, and (with --coverage)
a timeline of covered lines in torch/_dynamo, torch/_inductor, torch/_functorch.
"""

import argparse
import json
import os
import random
import tempfile
import time
import warnings


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("seconds", type=float)
    ap.add_argument("--coverage", action="store_true")
    ap.add_argument("--nodes", type=int, default=5)  # nnsmith's default mgen.max_nodes
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    warnings.filterwarnings("ignore")
    import numpy as np
    import torch
    from multipledispatch import dispatch
    from omegaconf import OmegaConf

    import nnsmith
    from nnsmith.backends.factory import BackendFactory
    from nnsmith.cli.model_exec import verify_testcase
    from nnsmith.graph_gen import model_gen
    from nnsmith.materialize import Model, TestCase
    from nnsmith.materialize.torch import TorchModel
    from nnsmith.narrow_spec import auto_opset

    class PT2Factory(BackendFactory):
        @property
        def system_name(self) -> str:
            return "pt2"

        @property
        def version(self) -> str:
            return torch.__version__

        @dispatch(TorchModel)
        def make_backend(self, model: TorchModel):
            torch._dynamo.reset()
            net = model.torch_model.eval()
            compiled = torch.compile(net, backend="inductor")

            def closure(inputs):
                with torch.no_grad():
                    out = compiled(*[torch.from_numpy(v) for v in inputs.values()])
                return {k: v.cpu().detach().resolve_conj().numpy() if v.is_conj() else v.cpu().detach().numpy()
                        for k, v in zip(net.output_like.keys(), out)}

            return closure

    cfg = OmegaConf.load(os.path.join(os.path.dirname(nnsmith.__file__), "config", "main.yaml"))
    cmp_cfg = cfg["cmp"]
    factory = PT2Factory(target="cpu", optmax=True)
    model_type = Model.init("torch", backend_target="cpu")
    model_type.add_seed_setter()
    opset = auto_opset(model_type, None, vulops=bool(cfg["mgen"]["vulops"]))
    mgen = cfg["mgen"]

    cov = None
    covered: dict[str, set[int]] = {}
    if args.coverage:
        import coverage

        root = os.path.dirname(os.path.abspath(torch.__file__))
        cov = coverage.Coverage(data_file=None, config_file=False, branch=False,
                                include=[os.path.join(root, p, "*") for p in ("_dynamo", "_inductor", "_functorch")])
        cov.set_option("run:disable_warnings", ["no-data-collected", "module-not-measured", "already-imported"])

    def take_coverage() -> int:
        if cov is None:
            return 0
        cov.stop()
        data = cov.get_data()
        for f in data.measured_files():
            covered.setdefault(f, set()).update(data.lines(f) or ())
        cov.erase()
        cov.start()
        return sum(len(v) for v in covered.values())

    rng = random.Random(args.seed)
    out_root = tempfile.mkdtemp(prefix="nnsmith-fuzz-")
    tests = bugs = failed_gen = 0
    t_gen = t_eval = 0.0
    timeline = []
    if cov is not None:
        cov.start()
    start = time.time()
    next_sample = 10.0
    while time.time() - start < args.seconds:
        seed = rng.getrandbits(32)
        t0 = time.time()
        try:
            ir = model_gen(opset=opset, method=mgen["method"], seed=seed, max_elem_per_tensor=mgen["max_elem_per_tensor"],
                           max_nodes=args.nodes, timeout_ms=mgen["timeout_ms"]).make_concrete()
            model = model_type.from_gir(ir)
            model.refine_weights()
            testcase = TestCase(model, model.make_oracle())
        except Exception:
            failed_gen += 1
            continue
        t1 = time.time()
        ok = verify_testcase(cmp_cfg, factory=factory, testcase=testcase,
                             output_dir=os.path.join(out_root, f"bug-{bugs}"), crash_safe=False, timeout=None)
        t2 = time.time()
        bugs += 0 if ok else 1
        tests += 1
        t_gen += t1 - t0
        t_eval += t2 - t1
        if t2 - start >= next_sample:
            timeline.append({"elapsed_s": round(t2 - start, 1), "tests": tests, "covered_lines": take_coverage()})
            next_sample += 10.0
    elapsed = time.time() - start
    final_cov = take_coverage() if cov is not None else None
    if cov is not None:
        cov.stop()
    timeline.append({"elapsed_s": round(elapsed, 1), "tests": tests, "covered_lines": final_cov or 0})
    print(json.dumps({"nnsmith": nnsmith.__version__ if hasattr(nnsmith, "__version__") else "?",
                      "torch": torch.__version__, "numpy": np.__version__, "seconds": round(elapsed, 1),
                      "tests": tests, "bugs": bugs, "failed_generation": failed_gen,
                      "tests_per_min": round(60.0 * tests / elapsed, 2) if elapsed > 0 else 0.0,
                      "stage_s": {"generate": round(t_gen, 1), "compile_and_compare": round(t_eval, 1)},
                      "covered_lines": final_cov, "timeline": timeline if cov is not None else None}))


if __name__ == "__main__":
    main()
