"""The sandbox runs untrusted programs in real worker subprocesses and survives whatever they do.

Tests that check what a worker process itself goes through (it dies, it is recycled, its own
temp dir, its pid) pin `slate="reuse"`, where the worker is the process that ran the test; the
fork server's side of each (the template lives on, every test a fresh process) is in
tests/test_clean_slate.py."""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from nnforge.oracle.sandbox import (PoolClosedError, WorkerOutcome, WorkerPool, compile_threads_per_worker,
                                   scrubbed_environ, usable_cores)

EXEC = "nnforge.oracle.worker:exec_program"
REPO = Path(__file__).resolve().parents[1]


def run(pool: WorkerPool, program: str, entry: str = "main", *args, timeout_s: float | None = None) -> WorkerOutcome:
    return pool.call(EXEC, {"program": program, "entry": entry, "args": list(args)}, timeout_s=timeout_s)


ABORT = """
import os

def blow_up_with_abort():
    os.abort()

def main():
    blow_up_with_abort()
"""


def test_abort_is_a_segfault_with_sigabrt_and_the_programs_traceback_and_the_pool_survives(make_pool):
    pool = make_pool(size=1, slate="reuse")
    out = run(pool, ABORT)
    assert out.status == "segfault"
    assert out.signal == "SIGABRT"
    assert "blow_up_with_abort" in out.traceback
    assert out.frames[-1][2] == "blow_up_with_abort"
    assert out.frames[-1][1] == 5
    dead_pid = out.worker_pid

    after = run(pool, "def main():\n    return 41 + 1\n")
    assert after.status == "ok" and after.value == 42
    assert after.worker_pid != dead_pid
    stats = pool.stats()
    assert stats["restarts"] == 1 and stats["segfaults"] == 1 and stats["alive"] == 1


def test_ctypes_null_read_is_a_segfault_with_sigsegv(make_pool):
    pool = make_pool()
    out = run(pool, "import ctypes\n\ndef read_null():\n    return ctypes.string_at(0)\n", "read_null")
    assert out.status == "segfault"
    assert out.signal == "SIGSEGV"
    assert any(func == "read_null" for _, _, func in out.frames)


def test_infinite_loop_times_out_reports_where_it_hung_and_the_pool_carries_on(make_pool):
    pool = make_pool(timeout_s=30.0, slate="reuse")
    start = time.monotonic()
    out = run(pool, "def spin_forever():\n    while True:\n        pass\n", "spin_forever", timeout_s=1.5)
    assert out.status == "timeout"
    assert 1.5 <= out.elapsed_s < 5
    assert time.monotonic() - start < 8
    assert "spin_forever" in out.traceback  # faulthandler dump taken (SIGUSR1) before the kill
    assert out.frames and out.frames[-1][2] == "spin_forever"
    assert not _pid_alive(out.worker_pid)

    assert run(pool, "def main():\n    return 'alive'\n").value == "alive"
    assert pool.stats()["timeouts"] == 1


def test_memory_over_the_limit_is_oom(make_pool):
    pool = make_pool(memory_mb=300, timeout_s=30.0, slate="reuse")
    program = """
import time

def hog():
    blocks = []
    while True:
        blocks.append(b"x" * (50 << 20))  # written, so it counts in RSS
        time.sleep(0.01)
"""
    out = run(pool, program, "hog")
    assert out.status == "oom", out
    assert "300 MB" in out.exc_message
    assert out.elapsed_s < 10
    assert not _pid_alive(out.worker_pid)
    assert run(pool, "def main():\n    return 1\n").status == "ok"
    assert pool.stats()["ooms"] == 1


def test_an_exception_is_a_structured_error_and_the_worker_lives_on(make_pool):
    pool = make_pool()
    program = """
def check(n):
    if n > 2:
        raise ValueError(f"n too large: {n}")
    return n

def main(n):
    return check(n)
"""
    out = run(pool, program, "main", 5)
    assert out.status == "error"
    assert out.exc_type == "ValueError"
    assert out.exc_message == "n too large: 5"
    assert [func for _, _, func in out.frames] == ["main", "check"]
    assert out.frames[-1][1] == 4
    assert "raise ValueError" in out.traceback
    again = run(pool, program, "main", 1)
    assert again.status == "ok" and again.value == 1
    assert again.worker_pid == out.worker_pid


def test_child_environment_has_no_api_keys_or_tokens(make_pool, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-programs")
    monkeypatch.setenv("NNFORGE_LLM_API_KEY", "sk-also-not")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_nope")
    monkeypatch.setenv("NNFORGE_SANDBOX_PROBE", "visible")
    pool = make_pool(env={"EXTRA_SETTING": "given"}, slate="reuse")
    out = run(pool, "import os\n\ndef main():\n    return dict(os.environ)\n")
    assert out.status == "ok"
    env = out.value
    for secret in ("OPENAI_API_KEY", "NNFORGE_LLM_API_KEY", "GITHUB_TOKEN"):
        assert secret not in env
    assert env["NNFORGE_SANDBOX_PROBE"] == "visible"
    assert env["EXTRA_SETTING"] == "given"
    assert env["PATH"] == os.environ["PATH"]
    assert env["TORCHINDUCTOR_CACHE_DIR"] == pool.inductor_cache_dir
    assert "sk-not-for-programs" not in repr(env)


def test_scrubbing_keeps_ordinary_variables():
    env = scrubbed_environ({"PATH": "/bin", "HOME": "/h", "LANG": "C.UTF-8", "AWS_REGION": "x",
                            "HF_HOME": "/hf", "DB_PASSWORD": "p", "MY_SECRET_THING": "s", "OMP_NUM_THREADS": "1"})
    assert env == {"PATH": "/bin", "HOME": "/h", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1"}


INDUCTOR_THREADS = """
import torch._inductor.config as inductor_config

def main():
    return inductor_config.compile_threads
"""


def test_compile_threads_split_the_cores_among_workers():
    assert compile_threads_per_worker(2, cores=2) == 1
    assert compile_threads_per_worker(1, cores=2) == 2
    assert compile_threads_per_worker(4, cores=16) == 4
    assert compile_threads_per_worker(3, cores=2) == 1  # never 0: Inductor then compiles in-process


def test_each_worker_runs_its_share_of_the_cores_in_inductor_compile_threads(make_pool, monkeypatch):
    """Two workers must not each start a compile pool as wide as the machine (oversubscription)."""
    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    pool = make_pool(size=2)
    out = run(pool, INDUCTOR_THREADS)
    assert out.status == "ok", out.traceback
    assert out.value == max(1, usable_cores() // 2)


def test_a_users_inductor_compile_threads_win(make_pool, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "3")
    out = run(make_pool(size=2, slate="reuse"), INDUCTOR_THREADS)
    assert out.status == "ok", out.traceback
    assert out.value == 3


def test_child_runs_in_its_own_temp_dir_removed_at_close(make_pool):
    pool = make_pool(slate="reuse")
    out = run(pool, "import os\n\ndef main():\n    os.chdir('/')\n    return os.getcwd()\n")
    assert out.value == "/"
    out = run(pool, "import os, sys\n\ndef main():\n    return os.getcwd(), sorted(os.listdir('.')), os.getsid(0) == os.getpid()\n")
    cwd, listing, own_session = out.value
    assert own_session
    assert Path(cwd).resolve() != REPO and not Path(cwd).resolve().is_relative_to(REPO)
    assert Path(cwd).name.startswith("nnforge-worker-")
    assert Path(cwd).resolve().is_relative_to(Path(tempfile.gettempdir()).resolve())
    assert any(name.startswith("program_") and name.endswith(".py") for name in listing)
    assert os.path.isdir(cwd)
    pool.close()
    assert not os.path.exists(cwd)
    assert not _pid_alive(out.worker_pid)
    with pytest.raises(PoolClosedError):
        run(pool, "def main():\n    return 1\n")


def test_printing_lots_to_stdout_does_not_break_the_protocol(make_pool):
    pool = make_pool(output_tail_kb=8)
    program = """
import os, sys

def main():
    for i in range(20000):
        print("noise line", i, "x" * 200)
    os.write(1, b"raw bytes on fd 1\\n")
    sys.stderr.write("stderr says goodbye\\n")
    return {"done": True}
"""
    out = run(pool, program)
    assert out.status == "ok", out
    assert out.value == {"done": True}
    assert "noise line 19999" in out.output_tail
    assert out.output_tail.rstrip().endswith("stderr says goodbye")
    assert len(out.output_tail) < 9 * 1024
    assert run(pool, "def main():\n    return 'still fine'\n").value == "still fine"


def test_tensors_round_trip_and_warmup_imports_torch_ahead(make_pool):
    torch = pytest.importorskip("torch")
    pool = make_pool(size=1, preload=("torch",))
    pool.warmup()
    assert pool.stats()["alive"] == 1
    program = """
import sys, torch

def main(x, state):
    return {"doubled": x * 2, "ints": state["ints"] + 1, "torch_was_loaded_first": True}
"""
    x = torch.randn(3, 4, dtype=torch.float64)
    ints = torch.arange(10, dtype=torch.int32).reshape(2, 5)
    out = run(pool, program, "main", x, {"ints": ints})
    assert out.status == "ok", out
    assert torch.equal(out.value["doubled"], x * 2)
    assert out.value["doubled"].dtype == torch.float64
    assert torch.equal(out.value["ints"], ints + 1)
    assert out.elapsed_s < 1.0  # torch was already imported by warmup


def test_a_worker_is_reused_and_recycled_after_recycle_after_calls(make_pool):
    pool = make_pool(recycle_after=3, slate="reuse")
    pids = [run(pool, "import os\n\ndef main():\n    return os.getpid()\n").value for _ in range(4)]
    assert pids[0] == pids[1] == pids[2]
    assert pids[3] != pids[0]
    assert not _pid_alive(pids[0])
    stats = pool.stats()
    assert stats["recycles"] == 1 and stats["restarts"] == 0 and stats["calls"] == 4


def test_results_that_are_not_plain_data_are_errors_and_the_program_is_never_imported_here(make_pool):
    pool = make_pool()
    program = "class Secret:\n    pass\n\ndef main():\n    return Secret()\n"
    # other tests of the suite load trusted programs in-process; only this call's import matters
    before = {name for name in sys.modules if name.startswith("program_")}
    out = run(pool, program)
    assert out.status == "error"
    assert "Secret is not plain data" in out.exc_message
    assert {name for name in sys.modules if name.startswith("program_")} == before

    out = run(pool, "def main():\n    return lambda: 1\n")
    assert out.status == "error" and "not plain data" in out.exc_message
    assert run(pool, "def main():\n    return 3\n").value == 3


# A program that finds the worker's reply pipe and writes its own frame there: a pickle whose
# __reduce__ is os.system, the attack a pickled protocol falls to.
FORGED_REPLY = """
import os, pickle, struct

class Gadget:
    def __reduce__(self):
        return (os.system, ("touch " + {marker!r},))

def main():
    body = pickle.dumps(("ok", Gadget()))
    frame = struct.pack("!4sQ", b"NNF1", len(body)) + body
    for fd in map(int, os.listdir("/proc/self/fd")):
        try:
            if os.readlink(f"/proc/self/fd/{{fd}}").startswith("pipe:") and fd > 2:
                os.write(fd, frame)
        except OSError:
            pass
    return 1
"""


def test_a_forged_reply_frame_is_a_protocol_error_and_its_command_never_runs(make_pool):
    marker = Path(tempfile.mkdtemp(prefix="nnforge-test-")) / "gadget-ran"
    pool = make_pool()
    out = run(pool, FORGED_REPLY.format(marker=str(marker)))
    assert out.status == "error" and out.exc_type == "WorkerProtocolError", out
    assert "not one NNForge writes" in out.exc_message
    time.sleep(0.5)
    assert not marker.exists()  # neither parent nor anyone else unpickled the gadget
    # the suspect worker was replaced: the next call gets a clean answer, not the stray real reply
    assert run(pool, "def main():\n    return 7\n").value == 7


def test_exit_mid_call_is_reported_and_the_next_call_gets_a_fresh_worker(make_pool):
    pool = make_pool()
    out = run(pool, "import os\n\ndef main():\n    os._exit(3)\n")
    assert out.status == "error" and out.exc_type == "WorkerExited"
    assert "status 3" in out.exc_message
    out = run(pool, "import sys\n\ndef main():\n    sys.exit(4)\n")
    assert out.status == "error" and out.exc_type == "SystemExit"
    assert run(pool, "def main():\n    return 'ok'\n").value == "ok"


def _preload_that_exits(folder: Path, starts_that_fail: int) -> dict[str, str]:
    """A module, importable by the workers, that makes the first `starts_that_fail` worker
    start-ups exit before the worker is ready (one marker file per start counts them)."""
    folder.mkdir()
    (folder / "flaky_start.py").write_text(f"""
import os
seen = len(os.listdir({str(folder / 'starts')!r}))
open(os.path.join({str(folder / 'starts')!r}, str(os.getpid())), 'w').close()
if seen < {starts_that_fail}:
    os._exit(5)
""")
    (folder / "starts").mkdir()
    return {"PYTHONPATH": str(folder)}


@pytest.fixture
def free_dir():
    """A folder workers may write (pytest's own tmp_path sits below a folder they see read-only)."""
    with tempfile.TemporaryDirectory(prefix="nnforge-test-") as d:
        yield Path(d)


def test_a_worker_that_dies_before_it_is_ready_costs_the_call_nothing(make_pool, free_dir):
    tmp_path = free_dir
    pool = make_pool(preload=("flaky_start",), env=_preload_that_exits(tmp_path / "mods", 2))
    assert run(pool, "def main():\n    return 'ran'\n").value == "ran"
    stats = pool.stats()
    assert stats["start_failures"] == 2 and stats["started"] == 3
    assert len(os.listdir(tmp_path / "mods" / "starts")) == 3


def test_a_pool_whose_workers_never_start_says_so_and_runs_nothing(make_pool, free_dir):
    tmp_path = free_dir
    pool = make_pool(preload=("flaky_start",), env=_preload_that_exits(tmp_path / "mods", 99))
    out = run(pool, "def main():\n    return 'ran'\n")
    assert out.status == "error" and out.exc_type == "WorkerStartError"
    assert "3 workers in a row did not start" in out.exc_message
    assert len(os.listdir(tmp_path / "mods" / "starts")) == 3


def test_calls_from_many_threads_share_the_workers(make_pool):
    pool = make_pool(size=2, slate="reuse")
    pool.warmup()
    program = "import os, time\n\ndef main():\n    time.sleep(0.6)\n    return os.getpid()\n"
    results: list[WorkerOutcome] = []
    lock = threading.Lock()

    def worker_thread():
        out = run(pool, program)
        with lock:
            results.append(out)

    threads = [threading.Thread(target=worker_thread) for _ in range(4)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    assert [r.status for r in results] == ["ok"] * 4
    assert len({r.value for r in results}) == 2  # two workers, each used twice
    assert 1.2 <= wall < 2.3  # two rounds of two parallel calls, not four serial ones


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# forward() writes a well-formed data-only reply of its own, with the call id it read off the
# worker's stack: the one thing wrong with it is its shape, which is not a job result's
FORGED_JOB_REPLY = '''
import os, struct, sys
import torch
from nnforge.core import wire

class Model(torch.nn.Module):
    def forward(self, x):
        f, call_id = sys._getframe(), -1
        while f is not None:
            call_id = f.f_locals.get("call_id", call_id) if f.f_code.co_name == "_reply_for" else call_id
            f = f.f_back
        body = wire.encode(("ok", {"status": "pwned", "verdicts": "all pass"}, call_id))
        frame = struct.pack("!4sQ", b"NNF1", len(body)) + body
        for fd in map(int, os.listdir("/proc/self/fd")):
            try:
                if fd > 2 and os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                    os.write(fd, frame)
            except OSError:
                pass
        return x + 1

def make_inputs():
    return (torch.randn(3),)
'''


def test_a_forged_job_reply_is_recorded_as_a_protocol_error_verdict(make_pool):
    from nnforge.core.testcase import TestCase
    from nnforge.core.verdict import Symptom
    from nnforge.oracle.oracle import Oracle

    pool = make_pool()
    result = Oracle(pool, ["eager"], 50.0).check(TestCase(program=FORGED_JOB_REPLY))
    [verdict] = result.verdicts
    assert verdict.symptom is Symptom.INVALID
    reason = result.invalid_reason or verdict.detail
    # a worker serving many tests reads the forged frame as the job's reply; a fork server
    # expects its template's end-of-call frame after it and finds the real reply instead
    assert ("protocol error: the job's status is 'pwned'" in reason
            or "a second reply (ok) where the call's end was due" in reason), reason
    # the pool goes on: the worker holding the stray real reply was replaced
    assert run(pool, "def main():\n    return 5\n").value == 5


# -- isolation: hostile programs in real workers ---------------------------------------------------------
READ_PARENT_ENV = """
import os

def main():
    found = []
    try:
        with open(f"/proc/{os.getppid()}/environ", "rb") as f:
            found.append(f.read().decode(errors="replace"))
    except OSError as e:
        found.append(f"denied: {e.strerror}")
    try:  # the parent's working directory, where its .env lives
        found.append(os.readlink(f"/proc/{os.getppid()}/cwd"))
    except OSError as e:
        found.append(f"denied: {e.strerror}")
    return found
"""

# A parent started the way a user starts NNForge, with a key in its environment from the start
# (what /proc/<pid>/environ shows), running the hostile program above in one of its workers.
PARENT_SCRIPT = """
import json, sys
from nnforge.oracle.sandbox import WorkerPool

with WorkerPool(size=1, preload=(), sandbox=sys.argv[1], inductor_cache_dir=sys.argv[2], slate=sys.argv[4]) as pool:
    out = pool.call("nnforge.oracle.worker:exec_program", {"program": sys.argv[3], "entry": "main"})
    print(json.dumps({"ok": out.ok, "value": out.value, "flags": list(pool.isolation.flags),
                      "call_ns": pool.isolation.call_ns}))
"""


def _parent_reads(level: str, tmp_path: Path, slate: str = "fork") -> dict:
    import json
    import subprocess

    env = {**os.environ, "OPENAI_API_KEY": "sk-test-secret-in-the-parent"}
    p = subprocess.run([sys.executable, "-c", PARENT_SCRIPT, level, str(tmp_path / "inductor"), READ_PARENT_ENV,
                        slate], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_a_worker_cannot_read_the_parents_environment(tmp_path):
    for slate in ("fork", "reuse"):  # a forked test's parent is its namespace's relay; a reused worker's, NNForge
        strong = _parent_reads("strong", tmp_path, slate)
        if os.geteuid() == 0 and "--drop-caps" not in strong["flags"] and not strong["call_ns"]:
            pytest.skip("this machine does not let root drop capabilities")
        assert strong["ok"]
        assert not any("sk-test-secret-in-the-parent" in text for text in strong["value"]), strong
        assert all(text.startswith("denied") for text in strong["value"])
    basic = _parent_reads("basic", tmp_path, "reuse")  # weaker on purpose: the key is one file away
    assert "sk-test-secret-in-the-parent" in basic["value"][0] and basic["value"][1] == os.getcwd()


CONNECT_OUT = """
import socket

def main(port):
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect(("127.0.0.1", port))
        return "connected"
    except OSError as e:
        return f"refused: {e}"
"""


def test_a_worker_cannot_reach_a_listener_on_the_loopback(make_pool):
    import socket

    pool = make_pool()
    if "--no-network" not in pool.isolation.flags:
        pytest.skip("no network namespace on this machine: " + pool.isolation.summary())
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    try:
        out = run(pool, CONNECT_OUT, "main", listener.getsockname()[1])
        assert out.ok and out.value.startswith("refused"), out
        assert "no network" in pool.isolation.summary()
        basic = make_pool(sandbox="basic")  # weaker on purpose: the same program gets through
        assert run(basic, CONNECT_OUT, "main", listener.getsockname()[1]).value == "connected"
    finally:
        listener.close()


# -- containment covers every descendant ----------------------------------------------------------------
ESCAPEES = """
import os, subprocess, sys, time

def main(pidfile):
    # a setsid'ed child, and a double fork whose grandchild is orphaned at once
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    pids = [p.pid]
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(w, str(os.getpid()).encode())
            time.sleep(600)
        os._exit(0)
    pids.append(int(os.read(r, 32)))
    with open(pidfile, "w") as f:
        f.write(" ".join(map(str, pids)))
    return pids
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1].startswith("Z")  # a zombie waiting for its reaper is gone
    except FileNotFoundError:
        return True


def _assert_all_gone(pids: list[int], within_s: float = 5.0) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and not all(_gone(p) for p in pids):
        time.sleep(0.1)
    assert all(_gone(p) for p in pids), [open(f"/proc/{p}/cmdline").read() for p in pids if not _gone(p)]


def test_setsid_and_double_forked_children_do_not_outlive_the_test(make_pool):
    scratch = Path(tempfile.mkdtemp(prefix="nnforge-test-"))  # not the test's cwd: workers see that read-only
    pool = make_pool(slate="reuse")
    out = run(pool, ESCAPEES, "main", str(scratch / "pids"))
    assert out.ok, out
    pids = [int(p) for p in (scratch / "pids").read_text().split()]
    assert len(pids) == 2
    _assert_all_gone(pids)
    assert run(pool, "def main():\n    return 1\n").value == 1


ESCAPE_THEN_DIE = ESCAPEES.replace("    return pids\n", "    os.kill(os.getpid(), 9)  # the worker dies with them running\n")


def test_children_do_not_outlive_a_worker_that_dies_in_the_same_call(make_pool):
    """Orphans of a dead worker are reparented to init: only a mark they inherit finds them."""
    scratch = Path(tempfile.mkdtemp(prefix="nnforge-test-"))
    pool = make_pool(slate="reuse")
    out = run(pool, ESCAPE_THEN_DIE, "main", str(scratch / "pids"), timeout_s=60)
    # the orphans hold the reply pipe open: the death is still seen at once, not as a timeout
    assert not out.ok and out.status != "timeout" and out.elapsed_s < 20, out
    pids = [int(p) for p in (scratch / "pids").read_text().split()]
    assert len(pids) == 2
    _assert_all_gone(pids)
    assert run(pool, "def main():\n    return 1\n").value == 1  # a fresh worker took over


HOG_CHILD = """
import subprocess, sys, time

def main():
    subprocess.Popen([sys.executable, "-c", "b = bytearray(700 * 2**20); import time; time.sleep(60)"])
    time.sleep(30)
"""


def test_a_child_process_holding_memory_counts_against_the_limit(make_pool):
    pool = make_pool(memory_mb=400)
    out = run(pool, HOG_CHILD, timeout_s=20)
    assert out.status == "oom", out
    assert "child processes" in out.exc_message


WRITE_INTO = """
import os

def main(folder):
    out = {}
    for name in ("campaign_file", ".env"):
        path = os.path.join(folder, name)
        try:
            with open(path, "a") as f:
                f.write("written by the program")
            out[name] = "written"
        except OSError as e:
            out[name] = f"refused: {e.strerror}"
    with open(os.path.join(folder, ".env")) as f:
        out["env_text"] = f.read()
    with open("scratch.txt", "w") as f:  # its own work dir stays writable
        f.write("ok")
    return out
"""


def test_a_worker_cannot_write_into_the_campaign_folder_or_read_its_env_file(make_pool, tmp_path):
    camp = tmp_path / "campaign"
    camp.mkdir()
    (camp / ".env").write_text("NNFORGE_LLM_API_KEY=sk-test-secret\n")
    pool = make_pool(protect=(str(camp),), slate="reuse")
    if not pool.isolation.fence:
        pytest.skip("no mount namespace on this machine: " + pool.isolation.summary())
    out = run(pool, WRITE_INTO, "main", str(camp))
    assert out.ok, out
    assert out.value["campaign_file"].startswith("refused") and out.value[".env"].startswith("refused")
    assert out.value["env_text"] == ""  # the key file shows empty
    assert not (camp / "campaign_file").exists()
    assert (camp / ".env").read_text() == "NNFORGE_LLM_API_KEY=sk-test-secret\n"  # the parent's view is intact
    basic = make_pool(sandbox="basic", protect=(str(camp),))  # weaker on purpose: the write goes through
    assert run(basic, WRITE_INTO, "main", str(camp)).value["campaign_file"] == "written"
