"""Hostile programs against the fork server (the default slate): each probe of a real escape or
corruption is run through a real pool, and what it got is asserted. The probes that need root
or namespaces skip, saying why, on a machine that does not allow them."""

import os
import time
from pathlib import Path

import pytest

from nnforge.oracle import confine
from nnforge.oracle.sandbox import plan_isolation

EXEC = "nnforge.oracle.worker:exec_program"
REPO = Path(__file__).resolve().parents[1]


def run(pool, program, entry="main", timeout_s=None):
    return pool.call(EXEC, {"program": program, "entry": entry}, timeout_s=timeout_s)


def _needs_call_namespaces():
    iso = plan_isolation("strong", "fork")
    if not iso.call_ns:
        pytest.skip("this machine allows no pid and mount namespace per test")
    return iso


PATCH_SOFTPLUS = """
import torch
import torch.nn.functional as F

F.softplus = lambda x, *a, **k: x + 2.0  # at import, for good

def main():
    return 0
"""

SOFTPLUS_OF_ONE = """
import torch
import torch.nn.functional as F

def main():
    return round(float(F.softplus(torch.tensor(1.0))), 4)
"""


@pytest.mark.slow
def test_a_function_patched_by_one_test_does_not_reach_the_next(make_pool):
    """The E1/E2 mutants patch globals on purpose; a worker that served both tests judged the
    clean one wrong (softplus(1) = 3.0). A forked test starts from the template, untouched."""
    fork = make_pool(size=1, preload=("torch",))
    assert run(fork, PATCH_SOFTPLUS).ok
    assert run(fork, SOFTPLUS_OF_ONE).value == 1.3133  # log(1 + e), as if it ran first
    reuse = make_pool(size=1, preload=("torch",), slate="reuse")  # the probe can fail: it does here
    assert run(reuse, PATCH_SOFTPLUS).ok
    assert run(reuse, SOFTPLUS_OF_ONE).value == 3.0


def test_globals_flags_and_the_working_folder_start_clean_for_every_test(make_pool):
    pool = make_pool(size=1)
    dirty = "import os, sys\ndef main():\n    sys.nnforge_left = 1\n    os.environ['LEFT'] = '1'\n" \
            "    open('left.txt', 'w').write('x')\n    return os.getpid()\n"
    look = "import os, sys\ndef main():\n    return [hasattr(sys, 'nnforge_left'), 'LEFT' in os.environ, " \
           "os.path.exists('left.txt')]\n"
    assert run(pool, dirty).ok
    assert run(pool, look).value == [False, False, False]


PROBE_MACHINE = """
import os, signal, socket

def main():
    seen = dict()
    seen["pid"] = os.getpid()
    seen["procs"] = sorted(int(n) for n in os.listdir("/proc") if n.isdigit())
    seen["signalled"] = []
    for pid in range(1, 4096):
        try:
            os.kill(pid, 0)
            seen["signalled"].append(pid)
        except OSError:
            pass
    for name, path in (("shadow", "/etc/shadow"), ("root_home", "/root/.bashrc")):
        try:
            open(path).read()
            seen[name] = "read"
        except OSError as e:
            seen[name] = type(e).__name__
    seen["writes"] = dict()
    for path in ("/nnforge-probe", "/tmp/nnforge-probe-{tag}", "{repo}/nnforge-probe", "{home}/nnforge-probe",
                 "here.txt"):
        try:
            open(path, "w").write("x")
            seen["writes"][path] = "written"
        except OSError as e:
            seen["writes"][path] = type(e).__name__
    try:
        socket.create_connection(("127.0.0.1", {port}), timeout=2)
        seen["loopback"] = "connected"
    except OSError as e:
        seen["loopback"] = type(e).__name__
    seen["uid"] = os.getuid()
    return seen
"""


def test_a_test_sees_signals_reads_writes_and_connects_to_nothing_outside_its_own_slate(make_pool, tmp_path):
    import socket

    iso = _needs_call_namespaces()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    tag = os.urandom(4).hex()
    pool = make_pool(size=1)
    program = PROBE_MACHINE.format(tag=tag, repo=str(REPO), home=os.path.expanduser("~"),
                                   port=listener.getsockname()[1])
    out = run(pool, program)
    listener.close()
    assert out.ok, out
    seen = out.value
    assert seen["pid"] == 2 and seen["procs"] == [1, 2]  # its own pid namespace: nothing else to see
    assert set(seen["signalled"]) <= {1, 2}  # the campaign, pid 1 of the machine, other campaigns: out of reach
    assert seen["writes"]["here.txt"] == "written"  # its own work dir only
    for path in ("/nnforge-probe", f"/tmp/nnforge-probe-{tag}", f"{REPO}/nnforge-probe"):
        assert seen["writes"][path] != "written", (path, seen)
        assert not os.path.exists(path)
    assert seen["loopback"] != "connected"
    if iso.call_uid is not None:
        assert seen["uid"] == iso.call_uid
        assert seen["shadow"] == "PermissionError"
        assert seen["root_home"] != "read"
    assert run(pool, "def main():\n    return 'next'\n").value == "next"


KILL_THE_PARENT = """
import os, signal

def main():
    os.kill(os.getppid(), signal.SIGKILL)
    os.kill(1, signal.SIGKILL)
    return "still here"
"""


def test_a_test_that_kills_its_parent_kills_only_its_own_slate(make_pool):
    _needs_call_namespaces()
    pool = make_pool(size=1)
    out = run(pool, KILL_THE_PARENT)
    assert out.status != "ok" or out.value == "still here"
    assert os.getpid() and pool.stats()["alive"] == 1  # this process and the template live on
    assert run(pool, "def main():\n    return 3\n").value == 3


LEAVE_A_DAEMON = """
import os, subprocess, sys

def main():
    # a double-forked sleep in a session of its own, with an empty environment, in "/"
    subprocess.Popen(["/bin/sh", "-c", "cd / && exec env -i /bin/sleep {secs} &"], start_new_session=True)
    return 1
"""


def _sleepers(secs: str) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and f"sleep\0{secs}".encode() in open(f"/proc/{name}/cmdline", "rb").read():
                out.append(int(name))
        except OSError:
            pass
    return out


def test_a_double_forked_daemon_with_no_environment_dies_with_its_test(make_pool):
    _needs_call_namespaces()
    secs = f"{600 + int.from_bytes(os.urandom(2), 'big') % 1000}.25"
    pool = make_pool(size=1)
    assert run(pool, LEAVE_A_DAEMON.format(secs=secs)).ok
    deadline = time.monotonic() + 5
    while _sleepers(secs) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _sleepers(secs) == []


HUGE_HEADER = """
import os, struct

def main():
    frame = struct.pack("!4sQ", b"NNF1", 2 ** 62)
    for fd in map(int, os.listdir("/proc/self/fd")):
        try:
            if fd > 2 and os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                os.write(fd, frame)
        except OSError:
            pass
    return 1
"""


def test_a_frame_header_claiming_more_than_a_reply_can_hold_is_a_protocol_error_before_any_allocation(make_pool):
    pool = make_pool(size=1, memory_mb=500)
    out = run(pool, HUGE_HEADER)
    assert out.status == "error" and out.exc_type == "WorkerProtocolError", out
    assert "over the" in out.exc_message and "limit" in out.exc_message
    assert run(pool, "def main():\n    return 4\n").value == 4


def test_a_pool_without_a_cache_of_the_users_gets_a_fresh_one_and_removes_it(make_pool, monkeypatch):
    monkeypatch.delenv("NNFORGE_INDUCTOR_CACHE_DIR", raising=False)
    pool = make_pool(inductor_cache_dir=None)
    cache = pool.inductor_cache_dir
    assert os.path.isdir(cache) and Path(cache).name.startswith("nnforge-inductor-")
    pool.close()
    assert not os.path.exists(cache)


HOSTILE_REPRO = """
import os, socket, sys
findings = []
for n in os.listdir("/proc"):
    if n.isdigit() and int(n) > 2:
        findings.append("saw pid " + n)
for path in (os.path.join({folder!r}, "written-by-repro"), "/root/nnforge-repro-probe"):
    try:
        open(path, "w").write("x")
        findings.append("wrote " + path)
    except OSError:
        pass
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2)
    findings.append("connected")
except OSError:
    pass
for key in ("OPENAI_API_KEY", "NNFORGE_LLM_API_KEY"):
    if key in os.environ:
        findings.append("read " + key)
for path in (os.path.join({folder!r}, ".env"), {user_env!r}):
    try:
        if "sk-" in open(path).read():
            findings.append("read " + path)
    except OSError:
        pass
print("BUG PRESENT:" if not findings else "escaped:", findings)
sys.exit(1 if not findings else 3)
"""


def test_a_repro_check_runs_confined(tmp_path, monkeypatch):
    """Triage's repro check once ran `python repro.py` with a memory limit only: from there a
    program read the campaign's keys, wrote into the checkout and reached the loopback."""
    import socket

    from nnforge.triage.pipeline import run_repro_once

    _needs_call_namespaces()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-repros")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    import shutil
    import tempfile

    from nnforge.core.settings import user_env_file

    # folders every uid may pass and files every uid may read: only the confinement keeps them out
    open_dir = Path(tempfile.mkdtemp(prefix="nnforge-test-open-"))
    os.chmod(open_dir, 0o755)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(open_dir / "config"))
    folder = open_dir / "cluster"
    folder.mkdir(mode=0o755)
    (folder / ".env").write_text("NNFORGE_LLM_API_KEY=sk-in-the-campaign-folder\n")
    os.chmod(folder / ".env", 0o644)
    user_env = user_env_file()
    user_env.parent.mkdir(parents=True, exist_ok=True)
    for d in (open_dir / "config", user_env.parent):
        os.chmod(d, 0o755)
    user_env.write_text("NNFORGE_LLM_API_KEY=sk-in-the-users-config\n")
    os.chmod(user_env, 0o644)
    (folder / "repro.py").write_text(HOSTILE_REPRO.format(folder=str(folder), port=listener.getsockname()[1],
                                                          user_env=str(user_env)))
    try:
        code, out = run_repro_once(folder / "repro.py", timeout_s=60)
        listener.close()
        assert code == 1, out
        assert not (folder / "written-by-repro").exists()
    finally:
        shutil.rmtree(open_dir, ignore_errors=True)


def test_the_machine_says_what_each_test_is_confined_by():
    iso = plan_isolation("strong", "fork")
    text = iso.summary()
    assert "fresh process forked from a warmed template" in text
    probed = confine.probe()
    assert ("own pid namespace" in text) == probed["call_ns"]
    if not probed["call_ns"]:
        assert "a pid namespace per test" in text
    assert "fresh process" not in plan_isolation("strong", "reuse").summary()


def test_a_forked_tests_memory_counts_and_its_template_survives_the_kill(make_pool):
    pool = make_pool(size=1, memory_mb=400, timeout_s=30)
    out = run(pool, "def main():\n    x = bytearray(900 * 2**20)\n    import time\n    time.sleep(5)\n")
    assert out.status == "oom", out
    assert run(pool, "def main():\n    return 5\n").value == 5


def test_a_segfault_in_a_forked_test_is_reported_and_the_template_serves_the_next(make_pool):
    pool = make_pool(size=1)
    out = run(pool, "import ctypes\ndef main():\n    ctypes.string_at(0)\n")
    assert out.status == "segfault" and out.signal == "SIGSEGV"
    assert run(pool, "def main():\n    return 6\n").value == 6
    assert pool.stats()["started"] == 1  # the template was not restarted


def test_a_forked_test_that_hangs_times_out_with_its_stack_and_only_it_is_killed(make_pool):
    pool = make_pool(size=1, timeout_s=30.0)
    start = time.monotonic()
    out = run(pool, "def spin_forever():\n    while True:\n        pass\n", "spin_forever", timeout_s=1.5)
    assert out.status == "timeout"
    assert time.monotonic() - start < 8
    assert out.frames and out.frames[-1][2] == "spin_forever"  # faulthandler dump of the call's process
    assert run(pool, "def main():\n    return 'alive'\n").value == "alive"
    assert pool.stats()["started"] == 1 and pool.stats()["timeouts"] == 1  # the warm template served on
