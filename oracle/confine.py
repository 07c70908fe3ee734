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

`probe()` tells the parent which of these the machine allows, so a campaign prints the isolation
in force. This module imports only the standard library: it runs before the worker does.
"""

from __future__ import annotations

import ctypes
import os
import sys

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000
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
    for name, fn in (("no_network", isolate_network), ("fence", _probe_fence), ("drop_caps", drop_capabilities)):
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
    os.execv(target[0], target)
    return 127  # pragma: no cover - execv does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
