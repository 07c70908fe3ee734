"""Ad-hoc: run a campaign and split the process tree's CPU seconds by process kind."""
import os, subprocess, sys, time, collections
out = sys.argv[1]; budget = sys.argv[2]
env = dict(os.environ)
p = subprocess.Popen([".venv/bin/nnforge", "campaign", "-o", out, "--plain", "--budget", budget, "--targets", "inductor",
                      "--nodes", "10", "--workers", "2", "--llm", "none"], stdout=open(out + ".log", "w"),
                     stderr=subprocess.STDOUT, env=env)
tick = os.sysconf("SC_CLK_TCK")
seen = {}  # pid -> (kind, cpu)
def children_map():
    m = collections.defaultdict(list)
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                s = open(f"/proc/{d}/stat").read()
                r = s.rsplit(")", 1)[1].split()
                m[int(r[1])].append(int(d))
            except Exception: pass
    return m
def kind_of(pid):
    try:
        cmd = open(f"/proc/{pid}/cmdline").read().replace("\0", " ")
    except Exception: return "?"
    if pid == p.pid: return "parent"
    if "cc1plus" in cmd or "g++" in cmd or " ld" in cmd or "collect2" in cmd or "/as " in cmd: return "compiler"
    if "sandbox" in cmd or "worker" in cmd: return "worker"
    if "repro" in cmd: return "repro"
    return "other:" + cmd[:60]
while p.poll() is None:
    m = children_map(); stack = [p.pid]; tree = []
    while stack:
        x = stack.pop(); tree.append(x); stack.extend(m.get(x, []))
    for pid in tree:
        try:
            r = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            cpu = (int(r[11]) + int(r[12]) + int(r[13]) + int(r[14])) / tick  # own + waited children
            own = (int(r[11]) + int(r[12])) / tick
            k = seen.get(pid, (kind_of(pid), 0, 0))[0]
            seen[pid] = (k, own, cpu)
        except Exception: pass
    time.sleep(0.2)
tot = collections.Counter()
for pid, (k, own, cpu) in seen.items():
    tot[k if not k.startswith("other") else "other"] += own
for k, v in tot.most_common(): print(f"{k:12s} {v:8.1f} s")
others = collections.Counter(k for k, *_ in seen.values() if k.startswith("other"))
print(others.most_common(10))
