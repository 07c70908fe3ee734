import sys, collections, re
cats = [  # (label, substring) checked from the innermost frame outwards; first hit wins
    ("c++ build (python side)", "_inductor/codecache.py"), ("c++ build (python side)", "cpp_builder.py"),
    ("c++ build (python side)", "kernel_unit.py"),
    ("inductor codegen", "_inductor/codegen/"),
    ("inductor scheduler", "_inductor/scheduler.py"),
    ("inductor lowering", "_inductor/lowering.py"), ("inductor lowering", "_inductor/ir.py"),
    ("inductor lowering", "_inductor/graph.py"), ("inductor fx passes", "_inductor/fx_passes"),
    ("inductor other", "_inductor/"),
    ("aot autograd", "_functorch/"),
    ("dynamo", "_dynamo/"),
    ("value search", "value_search"),
    ("oracle (reference, compare)", "nnforge/oracle"),
]
outer = collections.Counter(); total = 0
for path in sys.argv[1:]:
    for line in open(path):
        line = line.rstrip()
        if not line: continue
        stack, n = line.rsplit(" ", 1); n = int(n); total += n
        frames = stack.split(";")
        label = "other"
        # attribute fake-tensor / sympy work to the innermost subsystem that called it
        for f in reversed(frames):
            hit = next((l for l, s in cats if s in f), None)
            if hit: label = hit; break
        outer[label] += n
for l, n in outer.most_common(): print(f"{l:32s} {n:7d} {100*n/total:5.1f}%")
print("total samples", total)
