"""WorkerPool: run trusted NNForge functions on untrusted programs in throwaway subprocesses.

Every generated or LLM-written program runs only inside a worker (`nnforge.oracle.worker`):
a freshly spawned interpreter in its own session and process group, with a temp dir as cwd,
an environment stripped of API keys and tokens, a per-call timeout and an RSS watchdog. A worker
serves many calls; when one kills it, that call's `WorkerOutcome` says how (`segfault` with the
signal and the faulthandler traceback, `timeout` with where it hung, `oom`) and the next call
gets a fresh worker. The parent never imports the program under test.

    with WorkerPool(size=2, timeout_s=30) as pool:
        pool.warmup()
        out = pool.call("nnforge.oracle.worker:exec_program", {"program": src, "entry": "main"})
"""

from __future__ import annotations

import fcntl
import fnmatch
import os
import queue
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field, replace
from typing import Any

from nnforge.core import wire
from nnforge.oracle.compile_cache import fresh_compile_cache
from nnforge.oracle.worker import (FAULT_LOG, HEADER, MAGIC, OUTPUT_LOG, WORKER_MARK, descendants_with_depth,
                                   encode_frame, kill_marked, kill_tree, strip_worker_frames)

STATUSES = ("ok", "error", "segfault", "timeout", "oom")

# Environment variables a program must never see. Matched case-insensitively on the name.
SECRET_ENV_PATTERNS = (
    "*KEY*", "*TOKEN*", "*SECRET*", "*PASSWORD*", "*PASSWD*", "*CREDENTIAL*", "*AUTH*",
    "*COOKIE*", "*SESSION*", "*PROXY*",
    "OPENAI_*", "ANTHROPIC_*", "HF_*", "HUGGING*", "AWS_*", "GITHUB_*", "GH_*", "GITLAB_*",
    "AZURE_*", "GOOGLE_*", "GCP_*", "GCLOUD_*", "LANGCHAIN_*", "LANGSMITH_*", "WANDB_*",
    "COHERE_*", "MISTRAL_*", "GROQ_*", "TOGETHER_*", "REPLICATE_*", "DEEPSEEK_*",
    "NNFORGE_LLM_*", "SSH_*", "GPG_*", "DOCKER_*", "KUBE*", "NETRC", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL",
)

_FRAME_LINE = re.compile(r'^\s*File "(?P<file>.*)", line (?P<line>\d+) in (?P<func>.*?)\s*$')
_POLL_S = 0.05
_TREE_POLL_S = 0.5  # the whole process tree's memory is summed this often (a /proc scan)
MAX_DESCENDANTS = 256  # processes a call may have running at once below its worker
START_ATTEMPTS = 3  # fresh workers a call tries before it reports that none would start
_DUMP_WAIT_S = 1.0
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_PIPE_BYTES = 1 << 20  # the default /proc/sys/fs/pipe-max-size
_FIRST_CHUNK = 1 << 20  # a reply's buffer starts this big and doubles as bytes arrive
HANDSHAKE_MAX_BYTES = 1 << 20
_END_OF_CALL_WAIT_S = 10.0  # for a fork server's word that a killed call is gone


@dataclass(frozen=True)
class WorkerOutcome:
    """What one call did. `value` is set only when `status == "ok"`; frames run outermost first."""

    status: str
    value: Any = None
    exc_type: str | None = None
    exc_message: str | None = None
    traceback: str = ""
    frames: list[tuple[str, int, str]] = field(default_factory=list)
    signal: str | None = None
    elapsed_s: float = 0.0
    output_tail: str = ""
    worker_pid: int = 0

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"WorkerOutcome.status must be one of {STATUSES}, got {self.status!r}")

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict[str, Any]:
        """Everything but `value` (which may be any picklable object); `value_repr` stands in."""
        return {
            "status": self.status,
            "value_repr": None if self.value is None else repr(self.value)[:2000],
            "exc_type": self.exc_type,
            "exc_message": self.exc_message,
            "traceback": self.traceback,
            "frames": [list(f) for f in self.frames],
            "signal": self.signal,
            "elapsed_s": self.elapsed_s,
            "output_tail": self.output_tail,
            "worker_pid": self.worker_pid,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "WorkerOutcome":
        return cls(
            status=data["status"],
            value=None,
            exc_type=data.get("exc_type"),
            exc_message=data.get("exc_message"),
            traceback=data.get("traceback", ""),
            frames=[(f[0], int(f[1]), f[2]) for f in data.get("frames", [])],
            signal=data.get("signal"),
            elapsed_s=float(data.get("elapsed_s", 0.0)),
            output_tail=data.get("output_tail", ""),
            worker_pid=int(data.get("worker_pid", 0)),
        )


class PoolClosedError(RuntimeError):
    """A call was made on (or was running when someone closed) a closed WorkerPool."""


# -- environment ----------------------------------------------------------------------------
def is_secret_env_name(name: str) -> bool:
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pattern) for pattern in SECRET_ENV_PATTERNS)


def scrubbed_environ(base: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of `base` (default: os.environ) without anything that looks like a credential."""
    base = dict(os.environ if base is None else base)
    return {k: v for k, v in base.items() if not is_secret_env_name(k)}


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, which a container or taskset narrows)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def compile_threads_per_worker(workers: int, cores: int | None = None) -> int:
    """Inductor compile threads for each of `workers` workers sharing `cores` cores."""
    cores = usable_cores() if cores is None else cores
    return max(1, cores // max(1, workers))


# -- isolation ----------------------------------------------------------------------------------
SANDBOX_LEVELS = ("strong", "basic")


@dataclass(frozen=True)
class Isolation:
    """What confines the workers of a pool, as the campaign prints it."""

    level: str  # "strong" | "basic"
    flags: tuple[str, ...]  # oracle/confine.py flags each worker starts with
    parent_non_dumpable: bool
    missing: tuple[str, ...]  # what "strong" asked for and this machine did not allow
    fence: bool = False  # protected folders read-only, .env files hidden (a mount namespace)
    slate: str = "reuse"  # "fork": every call in a process forked from a warmed template
    call_ns: bool = False  # each forked call: its own pid and mount namespaces, a read-only system
    call_uid: int | None = None  # each forked call runs as this unprivileged uid

    def summary(self) -> str:
        have = ["secrets scrubbed from the environment", "temp working directory"]
        if self.slate == "fork":
            have.append("every test in a fresh process forked from a warmed template (a clean slate)")
        if self.call_ns:
            have.append("each test in its own pid namespace (sees and signals nothing outside it), "
                        "the system read-only but its work dir and the compile cache")
        if self.call_uid is not None:
            have.append(f"each test as unprivileged uid {self.call_uid}")
        if "--no-network" in self.flags:
            have.append("no network (own network namespace)")
        if "--drop-caps" in self.flags or self.call_ns:
            have.append("no capabilities" + (" (root in name only)" if os.geteuid() == 0 and self.call_uid is None
                                             else "") if os.geteuid() == 0 else "no_new_privs")
        if self.parent_non_dumpable:
            have.append("parent's /proc unreadable (non-dumpable)")
        if self.fence:
            have.append("campaign folder, checkout, working directory and home read-only, their .env hidden")
        text = f"sandbox {self.level}: " + ", ".join(have)
        if self.missing:
            text += "; not available here: " + ", ".join(self.missing)
        if self.call_ns:
            pass
        elif self.level == "strong" and not self.fence:
            text += ("; still open: the filesystem (files the worker's uid may read or write, "
                     "the campaign folder and checkout included)")
        elif self.level == "strong":
            text += "; still open: reading files elsewhere that the worker's uid may read"
        return text


_PROBED: dict[str, bool] = {}
_NON_DUMPABLE: list[bool] = []


SLATES = ("fork", "reuse")


def plan_isolation(level: str, slate: str = "fork", uid: int | None = None) -> Isolation:
    """The strongest isolation `level` allows on this machine (probed once per process).

    `slate` "fork" runs every call in a process forked from a warmed template; "reuse" runs many
    calls in one worker process (faster to measure against, not safe: see the README)."""
    from nnforge.oracle import confine

    if level not in SANDBOX_LEVELS:
        raise ValueError(f"sandbox must be one of {', '.join(SANDBOX_LEVELS)}, not {level!r}")
    if slate not in SLATES:
        raise ValueError(f"worker slate must be one of {', '.join(SLATES)}, not {slate!r}")
    if level == "basic":
        return Isolation("basic", (), False, (), slate=slate)
    if not _PROBED:
        _PROBED.update(confine.probe())
    if not _NON_DUMPABLE:  # once, for good: the parent holds the API keys workers must not read
        _NON_DUMPABLE.append(confine.make_non_dumpable())
    call_ns = slate == "fork" and bool(_PROBED.get("call_ns"))
    call_uid = (confine.UNPRIVILEGED_UID if uid is None else uid) if call_ns and _PROBED.get("call_uid") else None
    # The template drops nothing when its calls get namespaces of their own (it makes them; it
    # never runs a program): each call drops its capabilities itself.
    flags = tuple(f for f, key in (("--no-network", "no_network"), ("--drop-caps", "drop_caps"))
                  if _PROBED.get(key) and not (call_ns and f == "--drop-caps"))
    wanted = [("no_network", "a network namespace"), ("fence", "a mount namespace"), ("drop_caps", "dropping capabilities")]
    if slate == "fork":
        wanted.append(("call_ns", "a pid namespace per test"))
        if os.geteuid() == 0:
            wanted.append(("call_uid", "an unprivileged uid per test"))
    missing = tuple(what for key, what in wanted if not _PROBED.get(key))
    return Isolation("strong", flags, _NON_DUMPABLE[0], missing, fence=bool(_PROBED.get("fence")), slate=slate,
                     call_ns=call_ns, call_uid=call_uid)


_FENCE_CHECKED: dict[tuple[str, ...], str | None] = {}


def _fence_fails(args: tuple[str, ...]) -> str | None:
    """Why the launcher cannot confine a worker with `args` here (None: it can). Tried once per
    argument list with /bin/true, a work dir of its own standing in for the worker's."""
    if args not in _FENCE_CHECKED:
        with tempfile.TemporaryDirectory(prefix="nnforge-fence-check-") as d:
            p = subprocess.run([sys.executable, "-m", "nnforge.oracle.confine", *args, "--writable", d, "--",
                                "/bin/true"], capture_output=True, text=True, timeout=60)
        _FENCE_CHECKED[args] = None if p.returncode == 0 else (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
    return _FENCE_CHECKED[args]


def protected_paths(extra: tuple[str, ...] = ()) -> list[str]:
    """What a worker must not write (and whose .env it must not read): `extra` (the campaign
    folder), the parent's working directory, NNForge's own checkout, the home directory and the
    user's NNForge config folder (settings read its .env too: core/settings.py)."""
    from nnforge.core.settings import user_env_file

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = []
    for p in (*extra, os.getcwd(), root, os.path.expanduser("~"), str(user_env_file().parent)):
        real = os.path.realpath(p)
        if real != "/" and os.path.isdir(real) and real not in out:
            out.append(real)
    return out


def fence_args(protect: list[str], writable: list[str]) -> tuple[str, ...]:
    args: list[str] = []
    for p in protect:
        args += ["--read-only", p]
        if os.path.isfile(os.path.join(p, ".env")):
            args += ["--hide", os.path.join(p, ".env")]
    for p in writable:
        args += ["--writable", p]
    return tuple(args)


def default_kernel_unit() -> str:
    from nnforge.core.settings import load_settings

    return load_settings().inductor_kernel_unit


def default_inductor_cache_dir() -> str | None:
    """The user's shared compile cache, or None (the default): each pool or campaign its own."""
    from nnforge.core.settings import load_settings

    path = load_settings().inductor_cache_dir
    return os.path.abspath(os.path.expanduser(path)) if path else None


def call_root_parent() -> str:
    """Where a pool's call root goes: a folder every uid may pass (the temp dir may not be one)."""
    for parent in (tempfile.gettempdir(), "/tmp", "/var/tmp"):
        try:
            if os.stat(parent).st_mode & 0o001:
                return parent
        except OSError:
            continue
    return tempfile.gettempdir()


WARM_UP = "nnforge.oracle.job:warm_up"
_RUN_CASE = "nnforge.oracle.job:run_case"


def _targets_of(func_path: str, payload: Any) -> tuple[str, ...]:
    """The targets a call will compile on (a fork server warms its template for them first)."""
    if func_path != _RUN_CASE or not isinstance(payload, dict):
        return ()
    targets = payload.get("targets") or ()
    return tuple(t for t in targets if isinstance(t, str))


# -- faulthandler dumps -----------------------------------------------------------------------
def frames_from_fault_dump(text: str) -> list[tuple[str, int, str]]:
    """Frames of the thread that crashed (or was signalled), outermost first.

    faulthandler prints "Current thread 0x... (most recent call first):" followed by one
    `File "...", line N in func` per frame; other threads come as "Thread 0x...". Worker
    internals are dropped so the frames start at the called NNForge function.
    """
    blocks: list[tuple[bool, list[tuple[str, int, str]]]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("Current thread") or stripped.startswith("Thread 0x"):
            blocks.append((stripped.startswith("Current thread"), []))
            continue
        m = _FRAME_LINE.match(line)
        if m and blocks:
            blocks[-1][1].append((m["file"], int(m["line"]), m["func"]))
    if not blocks:
        return []
    chosen = next((frames for current, frames in blocks if current), blocks[0][1])
    return strip_worker_frames(list(reversed(chosen)))


def _fault_dump_in(text: str) -> str:
    """A faulthandler dump printed to stderr (when a program re-pointed faulthandler), or ''."""
    for marker in ("Fatal Python error", "Current thread 0x"):
        i = text.rfind(marker)
        if i >= 0:
            return text[i:]
    return ""


class ProtocolError(ValueError):
    """A reply frame that is not one the worker's code writes: forged by the program, or garbage."""


def _load_reply(body: bytes) -> tuple[str, Any, int]:
    """A reply's (kind, data, call id), checked against the shapes a worker writes; never executes anything."""
    try:
        reply = wire.decode(body)
    except wire.WireError as e:
        raise ProtocolError(str(e)) from None
    if not isinstance(reply, tuple) or len(reply) != 3 or reply[0] not in ("ok", "error", "exit") or type(reply[2]) is not int:
        raise ProtocolError(f"a reply must be ('ok', value, id) or ('error', details, id), got {_shape(reply)}")
    kind, data, call_id = reply
    if kind == "exit" and type(data) is not int:
        raise ProtocolError("an exit frame carries the call process's wait status")
    if kind == "error":
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("type", "message", "traceback")):
            raise ProtocolError("an error reply needs the strings type, message and traceback")
        frames = data.get("frames")
        if not isinstance(frames, list) or not all(
                isinstance(f, (list, tuple)) and len(f) == 3 and isinstance(f[0], str) and type(f[1]) is int
                and isinstance(f[2], str) for f in frames):
            raise ProtocolError("an error reply's frames must be [file, line, function] triples")
    return kind, data, call_id


def _shape(value: Any) -> str:
    return f"a {type(value).__name__}" + (f" of {len(value)}" if isinstance(value, (tuple, list)) else "")


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def _tail(path: str, limit: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return ("...[truncated]\n" + text) if size > limit else text


def _truncate(path: str) -> None:
    try:
        os.truncate(path, 0)
    except OSError:
        pass


# -- one worker process -----------------------------------------------------------------------
class _WorkerDied(Exception):
    def __init__(self, why: str, detail: str = "", rss: int = 0):
        super().__init__(why)
        self.why, self.detail, self.rss = why, detail, rss


class _Worker:
    """One child process; used by one thread at a time (the pool hands out whole workers)."""

    def __init__(self, env: dict[str, str], preload: tuple[str, ...], work_root: str | None,
                 confine_flags: tuple[str, ...] = (), worker_flags: tuple[str, ...] = (), run_depth: int = 0,
                 shared_tmp_parent: str | None = None):
        self.workdir = tempfile.mkdtemp(prefix="nnforge-worker-", dir=work_root)
        os.mkdir(os.path.join(self.workdir, "tmp"))
        # A template's temp dir holds what its warm-up built and its calls read at the same path
        # (Inductor's precompiled headers): then it must be one the calls' uid can reach.
        self.tmpdir = os.path.join(self.workdir, "tmp")
        if shared_tmp_parent:
            self.tmpdir = tempfile.mkdtemp(prefix="nnforge-template-tmp-", dir=shared_tmp_parent)
            os.chmod(self.tmpdir, 0o755)
        self.forks = "--fork" in worker_flags
        self.warmed: set[str] = set()  # targets its template has compiled the warm-up program on
        self.run_depth = run_depth  # where a forked call's own processes start below the template
        self.output_log = os.path.join(self.workdir, OUTPUT_LOG)
        self.fault_log = os.path.join(self.workdir, FAULT_LOG)
        child_env = dict(env)
        child_env["TMPDIR"] = self.tmpdir
        self.mark = os.urandom(8).hex()
        child_env[WORKER_MARK] = self.mark  # how its orphans are found once it is gone (worker.kill_marked)
        argv = [sys.executable, "-u", "-m", "nnforge.oracle.worker", "--workdir", self.workdir]
        for name in preload:
            argv += ["--preload", name]
        argv += list(worker_flags)
        if confine_flags and "--read-only" in confine_flags:  # its own work dir stays writable
            confine_flags = (*confine_flags, "--writable", self.workdir)
        if confine_flags:  # the launcher confines itself, then execs the worker
            argv = [sys.executable, "-m", "nnforge.oracle.confine", *confine_flags, "--", *argv]
        with open(self.output_log, "ab") as log:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                cwd=self.workdir, env=child_env, start_new_session=True, close_fds=True,
            )
        self.pid = self.proc.pid
        for stream in (self.proc.stdin, self.proc.stdout):  # fewer wakeups for big tensors
            try:
                fcntl.fcntl(stream.fileno(), _F_SETPIPE_SZ, _PIPE_BYTES)
            except OSError:
                pass
        self.calls = 0
        self.ready = False
        self.preload_errors: list[str] = []

    def alive(self) -> bool:
        return self.proc.poll() is None

    def has_stray_output(self) -> bool:
        """Bytes on the reply pipe between calls: a program wrote a frame of its own there, and
        the worker's real reply would be read as the next call's. Such a worker is replaced."""
        if not self.ready:
            return False
        try:
            readable, _, _ = select.select([self.proc.stdout.fileno()], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)

    # Waiting for one frame, with a deadline and the RSS watchdog. Calls are strictly
    # request/reply, so nothing is ever buffered beyond the frame being read.
    def call_processes(self) -> list[int]:
        """The processes a call runs in: the worker itself, or (a fork server) what it forked for
        the call, less the relays that set up its namespaces."""
        if not self.forks:
            return [self.pid]
        return [pid for pid, depth in descendants_with_depth(self.pid) if depth == self.run_depth + 1]

    def _await_frame(self, deadline: float, memory_bytes: int | None, max_bytes: int) -> bytearray:
        fd = self.proc.stdout.fileno()
        header = bytearray()
        body: bytearray | None = None
        view: memoryview | None = None
        size = got = 0
        next_rss_check = next_tree_check = 0.0
        tree_rss = 0
        while True:
            now = time.monotonic()
            if memory_bytes is not None and now >= next_rss_check:
                rss = 0 if self.forks else _rss_bytes(self.pid)
                if now >= next_tree_check:  # children count too: a program's child holding memory is its memory
                    below = descendants_with_depth(self.pid)
                    if len(below) > MAX_DESCENDANTS:
                        raise _WorkerDied("oom", f"{len(below)} processes below the worker (limit {MAX_DESCENDANTS})",
                                          rss=rss)
                    # a fork server's relays share the template's pages: they are not the call's memory
                    tree_rss = sum(_rss_bytes(p) for p, depth in below if depth > self.run_depth)
                    next_tree_check = now + _TREE_POLL_S
                rss += tree_rss
                if rss > memory_bytes:
                    raise _WorkerDied("oom", rss=rss)
                next_rss_check = now + _POLL_S
            if now >= deadline:
                raise _WorkerDied("timeout")
            readable, _, _ = select.select([fd], [], [], min(_POLL_S, deadline - now))
            if not readable:
                # A dead worker's pipe reaches EOF only once every process holding it is gone: a
                # child it started (a program's subprocess, a compile worker) keeps it open, and the
                # death would read as a timeout a whole call later. Whatever it wrote before it died
                # is still read first.
                if self.proc.poll() is not None and not select.select([fd], [], [], 0)[0]:
                    raise _WorkerDied("exited", "its child processes still held the reply pipe")
                continue
            if body is None:
                chunk = os.read(fd, HEADER.size - len(header))
                if not chunk:
                    raise _WorkerDied("exited")
                header += chunk
                if len(header) < HEADER.size:
                    continue
                magic, size = HEADER.unpack(header)
                if magic != MAGIC:
                    raise _WorkerDied("protocol", f"corrupt frame header {bytes(header)!r}")
                if size > max_bytes:  # checked before any allocation: the header is the program's to forge
                    raise _WorkerDied("protocol", f"a frame of {size} bytes, over the {max_bytes}-byte limit")
                # The buffer grows with what arrives, never with what the header claims.
                body = bytearray(min(size, _FIRST_CHUNK))
                view = memoryview(body)
                if size == 0:
                    return body
            else:
                assert view is not None
                if got == len(body):
                    view.release()
                    body.extend(bytes(min(len(body), size - got)))
                    view = memoryview(body)
                n = os.readv(fd, [view[got:]])
                if n == 0:
                    raise _WorkerDied("exited")
                got += n
                if got == size:
                    view.release()
                    return body

    def wait_ready(self, timeout_s: float) -> None:
        if self.ready:
            return
        body = self._await_frame(time.monotonic() + timeout_s, None, HANDSHAKE_MAX_BYTES)
        try:
            kind, pid, errors = wire.decode(body)
        except (wire.WireError, TypeError, ValueError) as e:
            raise _WorkerDied("protocol", f"malformed handshake: {e}") from None
        if kind != "ready" or pid != self.pid or not isinstance(errors, list):
            raise _WorkerDied("protocol", f"unexpected handshake {str(kind)[:40]!r} from pid {pid!r}")
        self.ready, self.preload_errors = True, list(errors)

    def next_frame(self, deadline: float, memory_bytes: int) -> bytes:
        """The next frame of the call in progress (after a stale one was dropped)."""
        return self._await_frame(deadline, memory_bytes, memory_bytes)

    def request(self, frame: bytes, timeout_s: float, memory_bytes: int) -> bytes:
        """Send one encoded call; return the first reply frame's body. Raises _WorkerDied if the child dies."""
        _truncate(self.output_log)
        _truncate(self.fault_log)
        try:
            self.proc.stdin.write(frame)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise _WorkerDied("exited") from None
        self.calls += 1
        # A reply holds what the call made, which its memory limit bounds.
        return self._await_frame(time.monotonic() + timeout_s, memory_bytes, memory_bytes)

    def dump_stacks(self) -> None:
        """Ask faulthandler in the call's process for every thread's stack (SIGUSR1); wait briefly."""
        targets = self.call_processes()
        for pid in targets:
            try:
                os.kill(pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass
        if not targets:
            return
        end, last = time.monotonic() + _DUMP_WAIT_S, -1
        while time.monotonic() < end:
            time.sleep(0.05)
            size = os.path.getsize(self.fault_log) if os.path.exists(self.fault_log) else 0
            if size > 0 and size == last:
                return
            last = size

    def kill(self) -> int | None:
        """SIGKILL the worker, every process below it (setsid and double-forked ones included: the
        worker is their subreaper), its process group, and what a worker that died on its own left
        behind (found by the mark in their environment); reap the child; returns its exit status."""
        kill_tree(self.pid, include_root=True)
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            status = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state)
            status = None
        kill_marked(self.mark, self.workdir)  # what a worker that died left behind, reparented to init
        return status

    def shutdown(self) -> None:
        """Graceful when idle: close stdin so the loop ends, then make sure the group is gone."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.dispose()

    def dispose(self) -> None:
        self.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        shutil.rmtree(self.workdir, ignore_errors=True)
        if not self.tmpdir.startswith(self.workdir + os.sep):
            shutil.rmtree(self.tmpdir, ignore_errors=True)


# -- the pool ---------------------------------------------------------------------------------
class _Slot:
    """A place for one worker; the pool's queue hands out slots, so a slot has one user at a time."""

    def __init__(self) -> None:
        self.worker: _Worker | None = None


class WorkerPool:
    """N sandboxed workers shared by any number of threads; `call` blocks until one is free.

    `env`: extra variables for the children, set on top of the parent's environment with
    credentials removed (these extras are taken as given, not scrubbed). TORCHINDUCTOR_CACHE_DIR
    is `inductor_cache_dir` (default: Settings.inductor_cache_dir) so compiled kernels stay warm
    across workers and runs. `preload` modules are imported by every worker before it reports
    ready, so a restarted worker is as warm as the first one.
    """

    def __init__(
        self,
        size: int = 1,
        timeout_s: float = 60.0,
        memory_mb: int = 6000,
        recycle_after: int = 200,
        env: dict[str, str] | None = None,
        *,
        inductor_cache_dir: str | None = None,
        preload: tuple[str, ...] | list[str] = ("torch",),
        startup_timeout_s: float = 180.0,
        output_tail_kb: int = 32,
        work_root: str | None = None,
        sandbox: str | None = None,
        protect: tuple[str, ...] | list[str] = (),
        slate: str | None = None,
        warm: tuple[str, ...] | list[str] | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"a pool needs at least one worker, got size={size}")
        from nnforge.core.settings import load_settings

        settings = load_settings()
        sandbox = settings.worker_sandbox if sandbox is None else sandbox
        slate = settings.worker_slate if slate is None else slate
        self.isolation = plan_isolation(sandbox, slate, settings.worker_uid)
        self.size = size
        self.timeout_s = float(timeout_s)
        self.memory_mb = int(memory_mb)
        self.recycle_after = max(1, int(recycle_after))
        self.preload = tuple(preload)
        self.startup_timeout_s = float(startup_timeout_s)
        self.output_tail_bytes = int(output_tail_kb) * 1024
        self.work_root = work_root
        cache_dir = inductor_cache_dir or default_inductor_cache_dir()
        self._own_cache = None
        if cache_dir:  # shared on purpose (a campaign's own, or the user's)
            cache_dir = os.path.abspath(os.path.expanduser(cache_dir))
            if not os.path.isdir(cache_dir) or not os.listdir(cache_dir):
                fresh_compile_cache(cache_dir)
        else:  # no earlier run's kernels: a cache of the pool's own, seeded with trusted probes only
            cache_dir = self._own_cache = fresh_compile_cache()
        self.inductor_cache_dir = cache_dir
        self._call_root = None
        worker_flags: list[str] = []
        if warm is None:  # a forked call would pay Dynamo's and Inductor's first-use cost every time
            warm = ("inductor",) if "torch" in self.preload else ()
        if self.isolation.slate == "fork":
            worker_flags.append("--fork")
            if warm:
                worker_flags += ["--warm", WARM_UP]
                for target in warm:
                    worker_flags += ["--warm-arg", target]
        if self.isolation.call_ns:
            from nnforge.oracle import confine
            from nnforge.oracle.confine import CallConfinement

            self._call_root = tempfile.mkdtemp(prefix="nnforge-call-root-", dir=call_root_parent())
            os.chmod(self._call_root, 0o755)
            if self.isolation.call_uid is not None:
                confine.hand_over(cache_dir, self.isolation.call_uid)
            worker_flags += CallConfinement(pid_ns=True, read_only_system=True, uid=self.isolation.call_uid,
                                            drop_caps=True, call_root=self._call_root, cache_dir=cache_dir).argv()
        self._worker_flags = tuple(worker_flags)
        self._warm = tuple(warm) if self.isolation.slate == "fork" else ()
        # below a fork server's template: the call's process, or two relays and then the call's process
        self._run_depth = 2 if self.isolation.call_ns else 0
        self._confine = self.isolation.flags
        if self.isolation.fence:
            fence = fence_args(protected_paths(tuple(protect)), [cache_dir])
            failed = _fence_fails(self.isolation.flags + fence)
            if failed is None:
                self._confine += fence
            else:  # these very folders cannot be fenced here: say so, and run without the fence
                self.isolation = replace(self.isolation, fence=False,
                                         missing=self.isolation.missing + (f"read-only folders ({failed})",))
        child_env = scrubbed_environ()
        child_env["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
        child_env["PYTHONUNBUFFERED"] = "1"
        # One intra-op thread per worker unless the user says otherwise: the pool already runs
        # one worker per core, and oversubscribed OpenMP makes small ops 10-100x slower.
        child_env.setdefault("OMP_NUM_THREADS", "1")
        # Inductor's C++ compile pool likewise: by default each worker starts one compile
        # process per core, so N workers run N x cores compilers on `cores` cores. A share of the
        # cores per worker (one each on a 2-core machine with 2 workers) judged 1.2-1.44x the
        # programs per minute, mutants not slower (bench/results/stop32, mix-*.txt).
        child_env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(compile_threads_per_worker(size)))
        if self.isolation.slate == "fork":
            # A compile pool started in the template (its warm-up) is threads and pipes no forked
            # call inherits: calls would wait on it for ever. The kernel unit builds a graph's
            # kernels in one compiler run anyway (oracle/kernel_unit.py).
            child_env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
        # Inductor's CPU kernels of one graph in one compiler run (oracle/kernel_unit.py), unless set off.
        child_env.setdefault("NNFORGE_INDUCTOR_KERNEL_UNIT", default_kernel_unit())
        child_env.update(env or {})
        self.kernel_unit = child_env["NNFORGE_INDUCTOR_KERNEL_UNIT"]  # what the workers run, for summary.md
        self._env = child_env

        self._lock = threading.Lock()
        self._closed = False
        self._slots = [_Slot() for _ in range(size)]
        self._free: queue.Queue[_Slot] = queue.Queue()
        for slot in self._slots:
            self._free.put(slot)
        self._next_call_id = 0
        self._stats = {"calls": 0, "ok": 0, "errors": 0, "restarts": 0, "recycles": 0, "start_failures": 0,
                       "timeouts": 0, "segfaults": 0, "ooms": 0, "started": 0}
        self._busy_s = 0.0
        self._finalizer = weakref.finalize(self, _kill_all, self._slots)

    # -- lifecycle ----------------------------------------------------------------------------
    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Kill every worker (busy ones too) and remove their temp dirs. Idempotent."""
        with self._lock:
            self._closed = True
        _kill_all(self._slots)
        for path in (self._own_cache, self._call_root):
            if path:
                shutil.rmtree(path, ignore_errors=True)

    def warmup(self) -> None:
        """Start every worker now and wait until each has imported `preload` (torch by default)."""
        slots = [self._acquire() for _ in range(self.size)]
        try:
            for slot in slots:
                if slot.worker is None or not slot.worker.alive():
                    self._replace(slot, reason=None)
            for slot in slots:
                assert slot.worker is not None
                try:
                    slot.worker.wait_ready(self.startup_timeout_s)
                except _WorkerDied:
                    self._discard(slot)
        finally:
            for slot in slots:
                self._free.put(slot)

    def stats(self) -> dict[str, float]:
        """Call counters, `alive`, `size`, and `busy_s`: seconds workers were held by calls."""
        with self._lock:
            out: dict[str, float] = dict(self._stats)
            out["busy_s"] = round(self._busy_s, 2)
        out["alive"] = sum(1 for s in self._slots if s.worker is not None and s.worker.alive())
        out["size"] = self.size
        return out

    # -- calls --------------------------------------------------------------------------------
    def call(self, func_path: str, payload: Any = None, timeout_s: float | None = None) -> WorkerOutcome:
        """Run `func_path(payload)` in a worker; never raises for what the call did.

        `func_path` is "package.module:function" naming a trusted NNForge function (e.g.
        "nnforge.oracle.worker:exec_program"); the program under test travels inside `payload`.
        """
        if ":" not in func_path:
            raise ValueError(f"function path must look like 'package.module:function', got {func_path!r}")
        timeout = self.timeout_s if timeout_s is None else float(timeout_s)
        with self._lock:
            self._next_call_id += 1
            call_id = self._next_call_id
        try:
            frame = encode_frame(("call", func_path, payload, call_id))
        except Exception as exc:  # the caller's mistake; no worker is involved
            raise TypeError(f"payload for {func_path} cannot be pickled: {exc}") from exc
        slot = self._acquire()
        held = time.monotonic()
        try:
            return self._call_on(slot, frame, timeout, call_id, _targets_of(func_path, payload))
        finally:
            with self._lock:  # seconds a worker was held: tests, triage, probes and start-ups alike
                self._busy_s += time.monotonic() - held
            self._free.put(slot)

    def _acquire(self) -> _Slot:
        while True:
            if self._closed:
                raise PoolClosedError("the WorkerPool is closed")
            try:
                return self._free.get(timeout=0.5)
            except queue.Empty:
                continue

    def _warm_for(self, worker: _Worker, targets: tuple[str, ...]) -> None:
        """Before a fork server's first call on a target, its template compiles NNForge's own warm-up
        program there once (trusted code, in the template itself), so no forked call pays the
        target's first-use cost. A warm-up that fails costs only its time: the call goes on."""
        todo = tuple(t for t in targets if t not in worker.warmed)
        if not todo:
            return
        worker.warmed.update(todo)
        with self._lock:
            self._next_call_id += 1
            warm_id = self._next_call_id
        try:
            body = worker.request(encode_frame(("warm", WARM_UP, list(todo), warm_id)), self.startup_timeout_s,
                                  self.memory_mb * 1024 * 1024)
            _load_reply(body)
        except (_WorkerDied, ProtocolError):
            pass  # the call that follows finds the worker dead or suspect and says so

    def _call_on(self, slot: _Slot, frame: bytes, timeout: float, call_id: int,
                 targets: tuple[str, ...] = ()) -> WorkerOutcome:
        with self._lock:
            self._stats["calls"] += 1
        worker = slot.worker
        if worker is not None and worker.alive() and worker.has_stray_output():
            worker = self._replace(slot, reason="restart")
        elif worker is None or not worker.alive():
            worker = self._replace(slot, reason="restart" if worker is not None else None)
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                worker.wait_ready(self.startup_timeout_s)
                break
            except _WorkerDied as died:
                # A worker that dies before it is ready has not seen the call: not the program's
                # doing, so the call goes to a fresh worker, and only a pool that cannot start
                # any says so.
                tail = _tail(worker.output_log, self.output_tail_bytes)
                self._discard(slot)
                self._raise_if_closed()
                with self._lock:
                    self._stats["start_failures"] += 1
                if attempt == START_ATTEMPTS:
                    return self._count(WorkerOutcome(
                        status="error", exc_type="WorkerStartError",
                        exc_message=f"{START_ATTEMPTS} workers in a row did not start (the last: {died.why}"
                                    f"{': ' + died.detail if died.detail else ''})",
                        traceback=tail, output_tail=tail, worker_pid=worker.pid,
                    ))
                worker = self._replace(slot, reason="restart")

        if worker.forks and targets:
            self._warm_for(worker, targets)
        start = time.monotonic()
        memory = self.memory_mb * 1024 * 1024
        exit_status: int | None = None
        try:
            body = worker.request(frame, timeout, memory)
            parsed = _load_reply(body)
            while parsed[2] != call_id:  # a frame of an earlier call (behind a forged one): dropped
                if parsed[2] > call_id:
                    raise ProtocolError(f"a reply to call {parsed[2]} while call {call_id} runs")
                parsed = _load_reply(worker.next_frame(start + timeout, memory))
            if worker.forks:  # the template's word that the call's process (and all it started) is gone
                if parsed[0] == "exit":
                    exit_status = parsed[1]
                else:
                    done = _load_reply(worker.next_frame(start + timeout, memory))
                    if done[0] != "exit" or done[2] != call_id:
                        raise ProtocolError(f"a second reply ({done[0]}) where the call's end was due")
        except ProtocolError as exc:  # forged or garbage: data only ever, so nothing ran; the worker is suspect
            outcome = WorkerOutcome(
                status="error", exc_type="WorkerProtocolError",
                exc_message=f"the worker's reply is not one NNForge writes (forged by the program?): {exc}",
                elapsed_s=time.monotonic() - start, output_tail=_tail(worker.output_log, self.output_tail_bytes),
                worker_pid=worker.pid,
            )
            self._discard(slot)
            return self._count(outcome)
        except _WorkerDied as died:
            if worker.forks and died.why in ("timeout", "oom"):
                kept = self._end_forked_call(worker, died, time.monotonic() - start, timeout, call_id, memory)
                if kept is not None:  # only the call's processes were killed: the warm template serves on
                    return self._count(kept)
            outcome = self._death_outcome(worker, died, time.monotonic() - start, timeout)
            self._discard(slot)
            self._raise_if_closed()
            self._replace(slot, reason="restart")  # spawn now: it imports while the caller works
            return self._count(outcome)
        elapsed = time.monotonic() - start
        if exit_status is not None:  # the call's process died without a reply; its template lives on
            return self._count(self._forked_death(worker, exit_status, elapsed))
        tail = _tail(worker.output_log, self.output_tail_bytes)
        kind, data, _ = parsed
        if kind == "ok":
            outcome = WorkerOutcome(status="ok", value=data, elapsed_s=elapsed, output_tail=tail, worker_pid=worker.pid)
        else:
            outcome = WorkerOutcome(
                status="error", exc_type=data["type"], exc_message=data["message"],
                traceback=data["traceback"], frames=[tuple(f) for f in data["frames"]],
                elapsed_s=elapsed, output_tail=tail, worker_pid=worker.pid,
            )
        if worker.calls >= self.recycle_after and not worker.forks:  # a template runs no test: nothing to shed
            self._discard(slot, graceful=True)
            if not self._closed:
                self._replace(slot, reason="recycle")
        return self._count(outcome)

    def _end_forked_call(self, worker: _Worker, died: _WorkerDied, elapsed: float, timeout: float, call_id: int,
                         memory: int) -> WorkerOutcome | None:
        """Kill a forked call that ran out of time or memory, and nothing else: its template
        reaps it and says so. None when the template does not (the caller then kills it too)."""
        if died.why == "timeout":
            worker.dump_stacks()
        kill_tree(worker.pid, include_root=False)
        try:
            for _ in range(3):  # the call's own reply may have raced the kill: the template's word follows it
                kind, _, got_id = _load_reply(worker.next_frame(time.monotonic() + _END_OF_CALL_WAIT_S, memory))
                if kind == "exit" and got_id == call_id:
                    return self._death_report(worker, died, elapsed, timeout, -signal.SIGKILL)
        except (_WorkerDied, ProtocolError):
            pass
        return None

    def _forked_death(self, worker: _Worker, status: int, elapsed: float) -> WorkerOutcome:
        """What a forked call's process died of, from its wait status (the template reaped it)."""
        code = os.waitstatus_to_exitcode(status) if (os.WIFEXITED(status) or os.WIFSIGNALED(status)) else 1
        return self._death_report(worker, _WorkerDied("exited"), elapsed, 0.0, code)

    def _death_outcome(self, worker: _Worker, died: _WorkerDied, elapsed: float, timeout: float) -> WorkerOutcome:
        if died.why == "timeout":
            worker.dump_stacks()
        return self._death_report(worker, died, elapsed, timeout, worker.kill())

    def _death_report(self, worker: _Worker, died: _WorkerDied, elapsed: float, timeout: float,
                      status_code: int | None) -> WorkerOutcome:
        dump = ""
        try:
            with open(worker.fault_log, encoding="utf-8", errors="replace") as f:
                dump = f.read()
        except OSError:
            pass
        tail = _tail(worker.output_log, self.output_tail_bytes)
        if not dump.strip():
            dump = _fault_dump_in(tail)
        frames = frames_from_fault_dump(dump)
        common = dict(traceback=dump, frames=frames, elapsed_s=elapsed, output_tail=tail, worker_pid=worker.pid)
        if died.why == "timeout":
            return WorkerOutcome(status="timeout", exc_type="Timeout",
                                 exc_message=f"the call ran longer than {timeout:g} s", signal="SIGKILL", **common)
        if died.why == "oom":
            return WorkerOutcome(status="oom", exc_type="MemoryLimit",
                                 exc_message=(f"the worker's process tree: {died.detail}" if died.detail else
                                              f"worker RSS (with its child processes) {died.rss / 2**20:.0f} MB "
                                              f"exceeded the {self.memory_mb} MB limit"),
                                 signal="SIGKILL", **common)
        if died.why == "protocol":  # the kill that follows is ours, not what the call died of
            return WorkerOutcome(status="error", exc_type="WorkerProtocolError",
                                 exc_message=f"the worker broke the pipe protocol: {died.detail}", **common)
        if status_code is not None and status_code < 0:
            name = _signal_name(-status_code)
            if name == "SIGKILL":  # not sent by us: the kernel's OOM killer, almost always
                return WorkerOutcome(status="oom", exc_type="Killed",
                                     exc_message="the worker was killed by SIGKILL (likely the kernel OOM killer)",
                                     signal=name, **common)
            return WorkerOutcome(status="segfault", exc_type="WorkerCrashed",
                                 exc_message=f"the worker died on {name}", signal=name, **common)
        return WorkerOutcome(status="error", exc_type="WorkerExited",
                             exc_message=f"the worker exited with status {status_code} during the call"
                                         + (f" ({died.detail})" if died.detail else ""),
                             **common)

    # -- bookkeeping ----------------------------------------------------------------------------
    def _replace(self, slot: _Slot, reason: str | None) -> _Worker:
        if slot.worker is not None:
            self._discard(slot)
        self._raise_if_closed()
        worker = _Worker(self._env, self.preload, self.work_root, self._confine, self._worker_flags, self._run_depth,
                         call_root_parent() if self.isolation.call_uid is not None else None)
        worker.warmed.update(self._warm)
        slot.worker = worker
        with self._lock:
            self._stats["started"] += 1
            if reason == "restart":
                self._stats["restarts"] += 1
            elif reason == "recycle":
                self._stats["recycles"] += 1
        if self._closed:  # closed while we were spawning: don't leak the new child
            _kill_all([slot])
            raise PoolClosedError("the WorkerPool was closed")
        return worker

    def _discard(self, slot: _Slot, graceful: bool = False) -> None:
        worker, slot.worker = slot.worker, None
        if worker is not None:
            worker.shutdown() if graceful else worker.dispose()

    def _raise_if_closed(self) -> None:
        if self._closed:
            raise PoolClosedError("the WorkerPool was closed during the call")

    def _count(self, outcome: WorkerOutcome) -> WorkerOutcome:
        key = {"ok": "ok", "error": "errors", "timeout": "timeouts", "segfault": "segfaults", "oom": "ooms"}[outcome.status]
        with self._lock:
            self._stats[key] += 1
        return outcome


def _kill_all(slots: list[_Slot]) -> None:
    for slot in slots:
        worker = slot.worker
        if worker is not None:
            worker.dispose()


# -- one confined run of a script (repro checks) ------------------------------------------------
@dataclass(frozen=True)
class ConfinedRun:
    """What `run_confined` saw: the exit code (124 when it ran out of time, 137 over memory)."""

    returncode: int
    output: str
    timed_out: bool = False
    over_memory: bool = False


def run_confined(script: str | os.PathLike, *, timeout_s: float, memory_mb: int, env: dict[str, str],
                 protect: tuple[str, ...] = (), output_limit: int = 64 * 1024) -> ConfinedRun:
    """`python SCRIPT` in a fresh confined process, as a maintainer would run a repro, but with
    everything a worker's test gets taken away: the script is copied into an empty work dir of
    its own, it gets an empty compile cache (the trusted seed only), no network, its own pid
    namespace, a read-only system, the unprivileged uid, no capabilities, and a memory limit over
    every process it starts. This is the only way NNForge runs a repro script."""
    from nnforge.core.settings import load_settings
    from nnforge.oracle import confine

    settings = load_settings()
    isolation = plan_isolation(settings.worker_sandbox, "fork", settings.worker_uid)
    parent = call_root_parent()
    work = tempfile.mkdtemp(prefix="nnforge-run-", dir=parent)
    root = tempfile.mkdtemp(prefix="nnforge-call-root-", dir=parent)
    cache = fresh_compile_cache()
    log_fd, log_path = tempfile.mkstemp(prefix="nnforge-run-output-")
    try:
        os.chmod(root, 0o755)
        shutil.copyfile(script, os.path.join(work, os.path.basename(script)))
        argv = [sys.executable, "-m", "nnforge.oracle.confine", *isolation.flags]
        if isolation.level == "strong" and isolation.fence:  # the folders read-only, their .env files empty
            argv += list(fence_args(protected_paths(protect), [work, cache]))
        child_env = dict(env)
        if isolation.call_ns:
            if isolation.call_uid is not None:
                confine.hand_over(work, isolation.call_uid)
                confine.hand_over(cache, isolation.call_uid)
            argv += confine.CallConfinement(pid_ns=True, read_only_system=True, uid=isolation.call_uid,
                                            drop_caps=True, call_root=root, cache_dir=cache).argv()
            argv += ["--call-work", work]
        else:
            child_env.update({"TORCHINDUCTOR_CACHE_DIR": cache, "TMPDIR": work, "HOME": work})
        argv += ["--", sys.executable, os.path.basename(script)]
        proc = subprocess.Popen(argv, cwd=work, env=child_env, stdin=subprocess.DEVNULL, stdout=log_fd,
                                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
        code, timed_out, over = _watch_run(proc, timeout_s, memory_mb * 1024 * 1024,
                                           run_depth=2 if isolation.call_ns else 0)
        return ConfinedRun(code, _tail(log_path, output_limit), timed_out, over)
    finally:
        os.close(log_fd)
        for path in (work, root, cache):
            shutil.rmtree(path, ignore_errors=True)
        os.unlink(log_path)


def _watch_run(proc: subprocess.Popen, timeout_s: float, memory_bytes: int, run_depth: int) -> tuple[int, bool, bool]:
    """Wait for a confined run; kill its whole tree when it runs out of time or memory."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            code = proc.wait(timeout=_TREE_POLL_S)
            return code, False, False
        except subprocess.TimeoutExpired:
            pass
        below = descendants_with_depth(proc.pid)
        rss = sum(_rss_bytes(p) for p, depth in below if depth > run_depth)
        timed_out = time.monotonic() >= deadline
        if timed_out or rss > memory_bytes or len(below) > MAX_DESCENDANTS:
            kill_tree(proc.pid, include_root=True)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
            return (124, True, False) if timed_out else (137, False, True)
