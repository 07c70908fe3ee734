import json, sys, time
from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Verdict
from nnforge.oracle.sandbox import WorkerPool
from nnforge.triage.reducer import Reducer
folder = sys.argv[1]
case = TestCase.load(folder)
vs = json.load(open(f"{folder}/verdicts.json"))
vs = vs if isinstance(vs, list) else vs.get("verdicts", [vs])
v = [Verdict.from_json(x) for x in vs]
v = [x for x in v if x.is_bug][0]
print("verdict", v.symptom, v.target, len(case.meta.get("pack_members", [])), "members")
with WorkerPool(size=1, timeout_s=120, memory_mb=6000) as pool:
    t = time.time()
    r = Reducer(pool, v.target, max_queries=60, time_budget_s=float(sys.argv[2])).reduce(case, v)
    print(time.time() - t, r.before, r.after, r.queries)
    print("\n".join(r.steps))
    print(r.case.program)
