"""Confine a sandbox worker before it starts: `python -m nnforge.oracle.confine [FLAGS] -- ARGV...`.

The worker runs programs an LLM or a mutator wrote, so before `execv(ARGV)` this launcher takes
away what such a program could misuse, strongest first, and dies (exit 126, a line on stderr
saying why) rather than start a worker weaker than asked:

- `--no-network`: a network namespace of its own, with no interface up: no connection leaves
  it, to the internet or to a listener on 127.0.0.1 (as root directly; otherwise inside a new
  user namespace that maps the caller's own uid, where the kernel allows one).
- `--read-only PATH` (repeatable), `--writable PATH`, `--hide FILE`: a mount namespace of its
  own in which each read-only path (the campaign folder, the checkout, the home directory) is
  bind-mounted read-only, each writable one (the worker's work dir, the compile cache) is bound
  read-write again on top, and each hidden file (a `.env` holding API keys) shows as empty.
- `--drop-caps`: when running as root, every capability is dropped from the bounding set and
  `no_new_privs` is set, so the exec'd worker is root in name only: it cannot ptrace, read a
  non-dumpable process's `/proc/<pid>/environ` (the parent marks itself non-dumpable), load
  modules, mount, or override file permissions of files it does not own.

- `--call-*` flags (`CallConfinement`): how each run is confined on its own. A worker that is a
  fork server applies them to every call it forks (`fork_confined`); given `--call-work DIR`, this
  launcher applies them to the one run of ARGV (a repro check): a pid namespace of the run's own,
  a mount namespace in which every mount is read-only but the run's work dir and compile cache
  (bound under an empty call root every uid can reach), a fresh /proc and /dev/shm, and the
  unprivileged uid with no capabilities.

`probe()` tells the parent which of these the machine allows, so a campaign prints the isolation
in force. This module imports only the standard library: it runs before the worker does.
"""

from __future__ import annotations

import ctypes
import os
import re
import struct
import sys

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
PR_SET_PDEATHSIG = 1
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
_CAP_LAST = 63
_CAPSET_VERSION_3 = 0x20080522
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91}

_libc = ctypes.CDLL(None, use_errno=True)


class ConfineError(OSError):
    pass


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise ConfineError(err, f"{what}: {os.strerror(err)}")


def enter_namespaces(flags: int) -> str:
    """Enter new namespaces (CLONE_NEW* `flags`): directly as root, else inside a new user
    namespace that maps the caller's own uid and gid. Returns how."""
    if _libc.unshare(flags) == 0:
        return "namespaces"
    if os.geteuid() == 0:
        _check(-1, f"unshare({flags:#x})")
    uid, gid = os.getuid(), os.getgid()
    _check(_libc.unshare(CLONE_NEWUSER | flags), f"unshare(CLONE_NEWUSER | {flags:#x})")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        try:
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
        except OSError as e:
            raise ConfineError(e.errno or 1, f"writing /proc/self/{name}: {e}") from None
    return "user namespace + namespaces"


def isolate_network() -> str:
    """Enter a network namespace of our own (no interface up: nothing connects anywhere)."""
    return enter_namespaces(CLONE_NEWNET)


def _kept_flags(path: bytes) -> int:
    """The mount flags a remount must keep (inside a user namespace the kernel refuses to drop
    nosuid, nodev, noexec or the atime flags of the mount underneath)."""
    try:
        f = os.statvfs(path).f_flag
    except OSError:
        return 0
    out = f & (2 | 4 | 8 | 1024 | 2048)  # nosuid, nodev, noexec, noatime, nodiratime: same bits
    return out | ((1 << 21) if f & 4096 else 0)  # relatime


def _mount(source: bytes | None, target: bytes, flags: int) -> None:
    _check(_libc.mount(source, target, None, flags, None), f"mount {target.decode(errors='replace')}")


def fence_files(read_only: list[str], writable: list[str], hidden: list[str]) -> None:
    """In the mount namespace entered before: hidden files, then read-only binds (which carry the
    hidden files along), then writable binds on top (see the module docstring). Paths that do
    not exist are skipped."""
    _mount(None, b"/", MS_REC | MS_PRIVATE)  # nothing we mount here leaks out to the host
    for path in hidden:  # first: the read-only binds below take these along (MS_REC)
        if os.path.isfile(path):  # an empty file of our own, bound read-only over it, then unlinked
            import tempfile

            fd, empty = tempfile.mkstemp(prefix="nnforge-hidden-")
            os.close(fd)
            try:
                target = os.fsencode(os.path.realpath(path))
                _mount(os.fsencode(empty), target, MS_BIND)
                _mount(None, target, MS_BIND | MS_REMOUNT | MS_RDONLY | _kept_flags(target))
            finally:
                os.unlink(empty)
    for path in read_only:
        if os.path.isdir(path):
            p = os.fsencode(os.path.realpath(path))
            _mount(p, p, MS_BIND | MS_REC)
            _mount(None, p, MS_BIND | MS_REMOUNT | MS_RDONLY | _kept_flags(p))
    for path in writable:
        if os.path.isdir(path):
            p = os.fsencode(os.path.realpath(path))
            _mount(p, p, MS_BIND | MS_REC)
            _mount(None, p, MS_BIND | MS_REMOUNT | _kept_flags(p))  # a bind inside a read-only one starts read-only


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """No capability now or after exec (root included), and no way to gain one back."""
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    if os.geteuid() != 0:
        return  # an unprivileged process has none to drop (and may not touch the bounding set)
    for cap in range(_CAP_LAST + 1):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL: no such cap
            _check(-1, f"prctl(PR_CAPBSET_DROP, {cap})")
    nr = _SYS_CAPSET.get(os.uname().machine)
    if nr is None:
        raise ConfineError(95, f"capset: unknown syscall number on {os.uname().machine}")
    header = _CapHeader(_CAPSET_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.syscall(nr, ctypes.byref(header), data), "capset")


def make_non_dumpable() -> bool:
    """Mark this process non-dumpable: its /proc files (environ, cmdline, cwd, fds) become
    unreadable to other processes without CAP_SYS_PTRACE. False when the kernel refused."""
    return _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


# -- one call, one confinement ----------------------------------------------------------------
# A sandbox worker is a fork server: it imports torch and the compilers once and forks every
# call from that template, so nothing one test did to its process reaches the next. Where the
# machine allows, each forked call also gets a pid namespace of its own (it sees and can signal
# nothing outside it, and everything in it dies with it), a mount namespace in which the whole
# system is read-only but its own work dir and the compile cache, a fresh /proc and /dev/shm,
# and, when NNForge runs as root, an unprivileged uid with no capabilities.
UNPRIVILEGED_UID = 65534  # "nobody" on Debian and most distributions
CALL_WORK, CALL_CACHE = "work", "cache"  # under the call root: where a confined call finds its dirs


class CallConfinement:
    """What a forked call is confined by; `call_root` is an empty directory every uid can reach
    (the worker's own folders may sit below folders the unprivileged uid cannot enter, so a
    call sees its work dir and the cache bound there: `<call_root>/work`, `<call_root>/cache`)."""

    def __init__(self, *, pid_ns: bool = False, read_only_system: bool = False, uid: int | None = None,
                 drop_caps: bool = False, call_root: str | None = None, cache_dir: str | None = None):
        if (read_only_system or uid is not None) and not (pid_ns and call_root):
            raise ValueError("a read-only system and a uid of its own need the call's own namespaces and a call root")
        self.pid_ns, self.read_only_system, self.uid = pid_ns, read_only_system, uid
        self.drop_caps, self.call_root, self.cache_dir = drop_caps, call_root, cache_dir

    def argv(self) -> list[str]:
        out: list[str] = []
        if self.pid_ns:
            out.append("--call-pid-ns")
        if self.read_only_system:
            out.append("--call-read-only-system")
        if self.uid is not None:
            out += ["--call-uid", str(self.uid)]
        if self.drop_caps:
            out.append("--call-drop-caps")
        if self.call_root:
            out += ["--call-root", self.call_root]
        if self.cache_dir:
            out += ["--call-cache", self.cache_dir]
        return out

    @classmethod
    def from_argv(cls, flags: list[str]) -> "CallConfinement":
        def value(name: str) -> str | None:
            vals = _values(flags, name)
            return vals[-1] if vals else None

        uid = value("--call-uid")
        return cls(pid_ns="--call-pid-ns" in flags, read_only_system="--call-read-only-system" in flags,
                   uid=None if uid is None else int(uid), drop_caps="--call-drop-caps" in flags,
                   call_root=value("--call-root"), cache_dir=value("--call-cache"))

    def paths(self, work_dir: str) -> tuple[str, str | None]:
        """(work dir, cache dir) as the confined call sees them."""
        if self.pid_ns and self.call_root:
            return (os.path.join(self.call_root, CALL_WORK),
                    os.path.join(self.call_root, CALL_CACHE) if self.cache_dir else None)
        return work_dir, self.cache_dir


def _unescape_mount_path(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def mount_points() -> list[str]:
    """Every mount point this process sees, outermost first."""
    out = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 4:
                out.append(_unescape_mount_path(fields[4]))
    return out


def make_system_read_only(keep_writable: set[str]) -> None:
    """Remount every mount point read-only (in this mount namespace only) but `keep_writable`."""
    for point in mount_points():
        if point in keep_writable or point == "/proc" or point.startswith("/proc/"):
            continue
        p = os.fsencode(point)
        if _libc.mount(None, p, None, MS_BIND | MS_REMOUNT | MS_RDONLY | _kept_flags(p), None) != 0:
            err = ctypes.get_errno()
            if point == "/" or err not in (2, 13, 22):  # ENOENT/EACCES/EINVAL: a mount hidden below another
                raise ConfineError(err, f"remount {point} read-only: {os.strerror(err)}")


def _bind_dir(fd: int, target: str) -> None:
    os.makedirs(target, exist_ok=True)
    _mount(f"/proc/self/fd/{fd}".encode(), os.fsencode(target), MS_BIND | MS_REC)


def interpreter_paths() -> list[str]:
    """What a Python run needs to reach: the interpreter, its library, the import path."""
    # NNForge's own checkout too: an editable install maps its packages there without sys.path
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = [sys.executable, os.path.realpath(sys.executable), sys.prefix, sys.base_prefix, sys.exec_prefix,
             checkout, *(p for p in sys.path if p)]
    out: list[str] = []
    for p in found:
        real = os.path.realpath(p)
        if os.path.exists(real) and real not in out:
            out.append(real)
    return out


def _blocks(path: str, uid: int) -> bool:
    """True when `uid` (no groups, no capabilities) may not pass through directory `path`."""
    st = os.stat(path)
    return not (st.st_mode & 0o001 or (st.st_uid == uid and st.st_mode & 0o100))


def expose_paths(paths: list[str], uid: int) -> None:
    """Let `uid` reach `paths` where a folder above one does not let it through (a Python under
    /root, mode 0700): such a folder is covered by an empty tmpfs that `uid` may pass, with only
    the entries on the way to `paths` bound back. Nothing else in that folder shows."""
    needed: dict[str, set[str]] = {}
    for path in paths:
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts) - 1):
            folder = "/" + "/".join(parts[:depth + 1])
            needed.setdefault(folder, set()).add(parts[depth + 1])
    for folder in sorted(needed, key=lambda f: f.count("/")):
        if not os.path.isdir(folder) or not _blocks(folder, uid):
            continue
        fds = {name: os.open(os.path.join(folder, name), os.O_PATH) for name in needed[folder]
               if os.path.lexists(os.path.join(folder, name))}
        _check(_libc.mount(b"tmpfs", os.fsencode(folder), b"tmpfs", MS_NOSUID | MS_NODEV, b"size=1m,mode=0755"),
               f"cover {folder}")
        for name, fd in fds.items():
            target = os.path.join(folder, name)
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.mkdir(target)
            else:
                open(target, "w").close()
            _mount(f"/proc/self/fd/{fd}".encode(), os.fsencode(target), MS_BIND | MS_REC)
            os.close(fd)


def _enter_call_namespaces(conf: CallConfinement, work_dir: str) -> None:
    """As the new pid namespace's init, before its one child: the call's view of the files."""
    fds = [os.open(work_dir, os.O_RDONLY | os.O_DIRECTORY)]
    if conf.cache_dir:
        fds.append(os.open(conf.cache_dir, os.O_RDONLY | os.O_DIRECTORY))
    _mount(None, b"/", MS_REC | MS_PRIVATE)
    root = os.fsencode(conf.call_root)
    _check(_libc.mount(b"tmpfs", root, b"tmpfs", MS_NOSUID | MS_NODEV, b"size=1m,mode=0755"), "mount the call root")
    keep = {os.path.join(conf.call_root, CALL_WORK)}
    _bind_dir(fds[0], os.path.join(conf.call_root, CALL_WORK))
    if conf.cache_dir:
        _bind_dir(fds[1], os.path.join(conf.call_root, CALL_CACHE))
        keep.add(os.path.join(conf.call_root, CALL_CACHE))
    for fd in fds:
        os.close(fd)
    if conf.uid is not None:
        expose_paths(interpreter_paths(), conf.uid)
    if conf.read_only_system:
        make_system_read_only(keep)
    _check(_libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mount a fresh /proc")
    if os.path.isdir("/dev/shm"):
        _check(_libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV, b"size=64m,mode=1777"),
               "mount a private /dev/shm")


def drop_privileges(conf: CallConfinement) -> None:
    """The unprivileged uid (when asked and root), no capabilities, no way to gain any back."""
    if conf.uid is not None and os.geteuid() == 0:
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
        for cap in range(_CAP_LAST + 1):
            if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:
                _check(-1, f"prctl(PR_CAPBSET_DROP, {cap})")
        os.setgroups([])
        os.setresgid(conf.uid, conf.uid, conf.uid)
        os.setresuid(conf.uid, conf.uid, conf.uid)  # the kernel clears every capability with it
    elif conf.drop_caps:
        drop_capabilities()


def hand_over(path: str, uid: int) -> None:
    """Make `path` (a compile cache) and all in it the unprivileged uid's, so its calls can
    write there: before a pool starts, and again after a template's warm-up wrote into it."""
    for root, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            try:
                os.lchown(os.path.join(root, name), uid, uid)
            except OSError:
                pass
    os.chown(path, uid, uid)


_STATUS = struct.Struct("!i")
SETUP_FAILED = 125  # a relay's exit code when the call's confinement could not be set up


def fork_confined(conf: CallConfinement, work_dir: str) -> tuple[int, int]:
    """Fork one confined run. In the caller: (pid to wait for, fd to read the run's wait status
    from, see `wait_confined`). In the confined child: (0, -1), cwd at the call's work dir, its
    privileges dropped; it must end with os._exit.

    With a pid namespace there are two relays: the first child enters the namespaces, the second
    is the namespace's init (which the kernel spares signals it sent itself), and the run is
    init's only child; when the run ends, init exits and the kernel kills whatever is left."""
    if not conf.pid_ns:
        pid = os.fork()
        if pid:
            return pid, -1
        try:
            os.chdir(work_dir)
            drop_privileges(conf)
        except BaseException as e:  # pragma: no cover - the child
            _say_setup_failed(e)
        return 0, -1
    status_r, status_w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(status_w)
        return pid, status_r
    try:  # first relay
        os.close(status_r)
        _libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)
        _check(_libc.unshare(CLONE_NEWPID | CLONE_NEWNS), "unshare(CLONE_NEWPID | CLONE_NEWNS)")
        init = os.fork()
        if init:
            _, status = os.waitpid(init, 0)
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF if os.WIFEXITED(status) else SETUP_FAILED)
        _libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)  # init of the namespace
        _enter_call_namespaces(conf, work_dir)
        run = os.fork()
        if run:
            while True:  # reap every orphan until the run itself ends
                got, status = os.waitpid(-1, 0)
                if got == run:
                    os.write(status_w, _STATUS.pack(status))
                    os._exit(0)
        os.close(status_w)
        os.chdir(conf.paths(work_dir)[0])
        drop_privileges(conf)
    except BaseException as e:  # pragma: no cover - a relay or the run before it starts
        _say_setup_failed(e)
    return 0, -1


def point_environment_at(conf: CallConfinement, work_dir: str) -> None:
    """In the confined run: temp files, home and the compile cache where the run may write."""
    work, cache = conf.paths(work_dir)
    tmp = os.path.join(work, "tmp")
    os.makedirs(tmp, exist_ok=True)
    os.environ.update({"TMPDIR": tmp, "HOME": work})
    if cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    import tempfile

    tempfile.tempdir = None  # computed again from TMPDIR


def _say_setup_failed(e: BaseException) -> None:
    try:
        os.write(2, f"nnforge confine: cannot confine the call: {e}\n".encode())
    finally:
        os._exit(SETUP_FAILED)


def wait_confined(pid: int, status_fd: int) -> int:
    """The run's wait status (as os.waitpid gives it) once every relay is gone."""
    _, status = os.waitpid(pid, 0)
    if status_fd < 0:
        return status
    try:
        data = os.read(status_fd, _STATUS.size)
    finally:
        os.close(status_fd)
    if len(data) == _STATUS.size:
        return _STATUS.unpack(data)[0]
    return status  # a relay died before the run ended (killed from outside, or setup failed)


_PROBE_DIR: list[str] = []  # set by probe() before it forks the fence check


def _probe_fence() -> None:
    d = _PROBE_DIR[0]
    enter_namespaces(CLONE_NEWNS)
    fence_files([d], [os.path.join(d, "rw")], [])
    try:
        open(os.path.join(d, "x"), "w").close()
    except OSError:
        open(os.path.join(d, "rw", "x"), "w").close()  # read-only outside, writable inside: it works
        return
    raise ConfineError(1, "a read-only bind mount stayed writable")


def _probe_call(uid: int | None) -> None:
    d = os.path.join(_PROBE_DIR[0], f"call-{uid}")
    os.mkdir(d)
    work, root = os.path.join(d, "work"), os.path.join(d, "root")
    for p in (work, root):
        os.makedirs(p, exist_ok=True)
        os.chmod(p, 0o777 if p == work else 0o755)
    conf = CallConfinement(pid_ns=True, read_only_system=True, uid=uid, drop_caps=True, call_root=root)
    pid, status_fd = fork_confined(conf, work)
    if pid == 0:  # the confined run: it sees only itself, may write its work dir only, as the uid asked
        ok = os.getpid() == 2 and sorted(n for n in os.listdir("/proc") if n.isdigit()) == ["1", "2"]
        open("written", "w").close()
        try:
            open(os.path.join(d, "outside"), "w").close()
            ok = False
        except OSError:
            pass
        ok = ok and (uid is None or os.getuid() == uid)
        os._exit(0 if ok else 1)
    status = wait_confined(pid, status_fd)
    if os.waitstatus_to_exitcode(status) != 0 or not os.path.exists(os.path.join(work, "written")):
        raise ConfineError(1, f"a confined call did not run as asked (status {status})")


def probe() -> dict[str, bool]:
    """Which confinements work here: tried in a throwaway child, so this process keeps all."""
    import shutil
    import tempfile

    out = {}
    _PROBE_DIR[:] = [tempfile.mkdtemp(prefix="nnforge-confine-probe-")]
    os.mkdir(os.path.join(_PROBE_DIR[0], "rw"))
    try:
        out.update(_probe_each())
    finally:
        shutil.rmtree(_PROBE_DIR[0], ignore_errors=True)
    return out


def _probe_each() -> dict[str, bool]:
    out = {}
    checks = [("no_network", isolate_network), ("fence", _probe_fence), ("drop_caps", drop_capabilities),
              ("call_ns", lambda: _probe_call(None))]
    if os.geteuid() == 0:
        checks.append(("call_uid", lambda: _probe_call(UNPRIVILEGED_UID)))
    for name, fn in checks:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                fn()
                os._exit(0)
            except BaseException:
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        out[name] = os.waitstatus_to_exitcode(status) == 0
    return out


def _values(flags: list[str], name: str) -> list[str]:
    return [flags[i + 1] for i, f in enumerate(flags[:-1]) if f == name]


def main(argv: list[str]) -> int:
    if "--" not in argv:
        sys.stderr.write("usage: python -m nnforge.oracle.confine [--no-network] [--read-only P] [--writable P] "
                         "[--hide F] [--drop-caps] -- ARGV...\n")
        return 2
    at = argv.index("--")
    flags, target = argv[:at], argv[at + 1:]
    if not target:
        sys.stderr.write("nnforge confine: nothing to run after --\n")
        return 2
    read_only, writable, hidden = _values(flags, "--read-only"), _values(flags, "--writable"), _values(flags, "--hide")
    try:
        ns = (CLONE_NEWNET if "--no-network" in flags else 0) | (CLONE_NEWNS if read_only or hidden else 0)
        if ns:
            enter_namespaces(ns)
        if read_only or hidden:
            fence_files(read_only, writable, hidden)
        if "--drop-caps" in flags:
            drop_capabilities()
    except OSError as e:  # ConfineError, or a temp file that could not be made
        sys.stderr.write(f"nnforge confine: cannot confine the worker: {e.strerror or e}\n")
        return 126
    conf = CallConfinement.from_argv(flags)
    work = _values(flags, "--call-work")
    if not work:
        os.execv(target[0], target)
        return 127  # pragma: no cover - execv does not return
    try:
        pid, status_fd = fork_confined(conf, work[-1])
    except OSError as e:
        sys.stderr.write(f"nnforge confine: cannot confine the run: {e.strerror or e}\n")
        return 126
    if pid == 0:  # the run: its environment points at what it may write, then it becomes the target
        point_environment_at(conf, work[-1])
        os.execv(target[0], target)
    status = wait_confined(pid, status_fd)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
