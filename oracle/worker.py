"""The sandbox worker: the child side of `nnforge.oracle.sandbox.WorkerPool`.

Started as `python -u -m nnforge.oracle.worker --workdir DIR [--preload torch]` with its stdin
and stdout as pipes to the parent and stderr on a log file. It serves calls until stdin closes:

    parent -> child   frame(pickle(("call", "package.module:function", payload, call_id)))
    child  -> parent  frame(wire(("ok", value, call_id))) | frame(wire(("error", {type, message, traceback, frames}, call_id)))

A frame is a 4-byte magic and an 8-byte big-endian length followed by its body. Requests are
pickled (the parent is trusted, the child may read what it likes). Replies are never pickled:
the program under test can reach the reply pipe, so a reply is data only (`nnforge.core.wire`:
JSON plus raw tensor bytes), and whatever a program writes there can at worst be a malformed
reply, which the parent records as a protocol error. The call id lets the parent drop frames
of earlier calls: a program that wrote a frame of its own leaves the real reply behind it.

Untrusted code may print anything, so the protocol pipes are duplicated to private fds first and
fd 1 is pointed at the log (fd 0 at /dev/null). faulthandler writes to `faulthandler.log` in
the work dir on a fatal signal, and on SIGUSR1, which the parent sends before killing a call that
ran out of time: either way the parent reads where the program was.

This module imports only the standard library: a worker must start fast and must not import
anything the program could break.
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import os
import pickle
import shutil
import signal
import struct
import sys
import threading
import time
import traceback
from typing import Any, BinaryIO

from nnforge.core import wire

HEADER = struct.Struct("!4sQ")  # magic, body length: garbage on the pipe is caught, not waited on
MAGIC = b"NNF1"
FAULT_LOG = "faulthandler.log"
OUTPUT_LOG = "output.log"
PICKLE_PROTOCOL = pickle.HIGHEST_PROTOCOL


# -- framing (used by both sides) ---------------------------------------------------------------
def encode_frame(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=PICKLE_PROTOCOL)
    return HEADER.pack(MAGIC, len(data)) + data


def encode_reply(obj: Any) -> bytes:
    """A child-to-parent frame: data only (see the module docstring)."""
    data = wire.encode(obj)
    return HEADER.pack(MAGIC, len(data)) + data


def write_all(stream: BinaryIO, data: bytes) -> None:
    """Write every byte: an unbuffered pipe write may take only part of a large frame."""
    view = memoryview(data)
    while view:
        n = stream.write(view)
        view = view[n or 0:]


def _read_exact(stream: BinaryIO, n: int) -> bytes | None:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = stream.readinto(view[got:])
        if not k:
            return None
        got += k
    return bytes(buf) if n < 4096 else buf  # pickle.loads takes either


def read_frame_bytes(stream: BinaryIO) -> bytes | None:
    """The next frame's pickled body, or None at end of stream."""
    header = _read_exact(stream, HEADER.size)
    if header is None:
        return None
    magic, size = HEADER.unpack(header)
    if magic != MAGIC:
        raise ValueError(f"corrupt frame header {header!r}")
    return _read_exact(stream, size)


# -- resolving and calling ------------------------------------------------------------------
def resolve(func_path: str) -> Any:
    """`"package.module:attr.attr"` -> the object. Only trusted NNForge functions are named here."""
    module_name, sep, attr_path = func_path.partition(":")
    if not sep or not module_name or not attr_path:
        raise ValueError(f"function path must look like 'package.module:function', got {func_path!r}")
    obj: Any = importlib.import_module(module_name)
    for part in attr_path.split("."):
        obj = getattr(obj, part)
    return obj


def strip_worker_frames(frames: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    """Drop the leading frames that belong to the worker's own machinery (runpy, main loop,
    dispatch, exec_program), so a frame list starts at the called function or the program."""
    i = 0
    while i < len(frames) and (frames[i][0] == __file__ or frames[i][0].startswith("<frozen runpy")):
        i += 1
    return frames[i:]


def describe_exception(exc: BaseException) -> dict[str, Any]:
    """The structured error the parent turns into a WorkerOutcome (status `error`)."""
    cls = type(exc)
    type_name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    frames = strip_worker_frames([(fs.filename, fs.lineno or 0, fs.name) for fs in traceback.extract_tb(exc.__traceback__)])
    try:
        message = str(exc)
    except Exception as e:  # an exception whose __str__ itself raises
        message = f"<str() of the exception failed: {e!r}>"
    return {
        "type": type_name,
        "message": message,
        "traceback": "".join(traceback.format_exception(exc)),
        "frames": frames,
    }


def _reply_for(request_body: bytes, workdir: str) -> bytes:
    call_id = -1
    try:
        kind, func_path, payload, call_id = pickle.loads(request_body)
        if kind != "call":
            raise ValueError(f"unknown request kind {kind!r}")
        value = resolve(func_path)(payload)
        reply: tuple[str, Any, int] = ("ok", value, call_id)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt from a program are errors too
        reply = ("error", describe_exception(exc), call_id)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        try:
            os.chdir(workdir)  # a program that chdir'd must not move the next call
        except OSError:
            pass
    _end_of_call_cleanup()
    try:
        return encode_reply(reply)
    except BaseException as exc:  # the value is not plain data
        err = describe_exception(exc)
        err["message"] = f"the result is not plain data: {err['message']}"
        return encode_reply(("error", err, call_id))


# -- trusted helpers callable through the pool ----------------------------------------------
def exec_program(payload: dict[str, Any]) -> Any:
    """Run untrusted program text: load it as a module, then call `entry(*args, **kwargs)` if named.

    payload: {"program": source, "entry": name or None, "args": [...], "kwargs": {...},
    "name": module name stem (default "program")}. Returns the entry's result (plain data: core/wire.py),
    or None when there is no entry.
    """
    from nnforge.oracle.program_loader import load_program

    module = load_program(payload["program"], payload.get("name") or "program")
    entry = payload.get("entry")
    if not entry:
        return None
    func = getattr(module, entry)
    return func(*payload.get("args", ()), **payload.get("kwargs", {}))


def getpid(_payload: Any = None) -> int:
    return os.getpid()


# -- main loop ------------------------------------------------------------------------------
# -- descendants: what a program started must not outlive its call ---------------------------------
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Orphans of our descendants (double forks, setsid daemons) are reparented to us, not to
    init, so they stay findable as our descendants."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()  # after "pid (comm) ": the name may hold spaces
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def descendants(root: int) -> list[int]:
    """Every live process below `root` in the process tree (children first)."""
    return [pid for pid, _ in descendants_with_depth(root)]


def descendants_with_depth(root: int) -> list[tuple[int, int]]:
    """(pid, depth) of every live process below `root`: its children are at depth 1."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            ppid = parent_of(int(name))
            if ppid is not None:
                children.setdefault(ppid, []).append(int(name))
    out, todo = [], [(pid, 1) for pid in children.get(root, ())]
    while todo:
        pid, depth = todo.pop()
        out.append((pid, depth))
        todo.extend((child, depth + 1) for child in children.get(pid, ()))
    return out


def kill_tree(root: int, *, include_root: bool) -> int:
    """SIGKILL everything below `root` (and `root` itself if asked): frozen first, so nothing forks
    away between the scan and the kill. Returns how many processes were signalled."""
    killed: set[int] = set()
    for _ in range(5):
        pids = [p for p in descendants(root) if p not in killed]
        if include_root and root not in killed:
            pids.append(root)
        if not pids:
            break
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        killed.update(pids)
    return len(killed)


WORKER_MARK = "NNFORGE_WORKER_MARK"  # set in each worker's environment; every descendant inherits it


def kill_marked(mark: str, workdir: str) -> int:
    """SIGKILL every process that carries this worker's mark in its environment or runs in its work
    dir. Orphans of a dead worker are reparented to init and no longer descend from anything we
    know; what they inherited is how they are found. Returns how many were signalled."""
    needle = f"{WORKER_MARK}={mark}".encode()
    killed = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        pid = int(name)
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                marked = needle in f.read().split(b"\0")
            if not marked:
                cwd = os.readlink(f"/proc/{pid}/cwd")
                marked = cwd == workdir or cwd.startswith(workdir.rstrip("/") + "/")
        except OSError:
            continue
        if marked:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
    return killed


def _end_of_call_cleanup() -> None:
    """Kill whatever the call left running and reap it: every descendant ends with the test."""
    kill_tree(os.getpid(), include_root=False)
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _watch_parent(parent_pid: int, workdir: str) -> None:
    """Once the parent is gone, remove our work dir and kill our whole process group, so a hung
    program never lingers (the parent normally does both; this covers a parent that crashed)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            try:
                shutil.rmtree(workdir, ignore_errors=True)
                kill_tree(os.getpid(), include_root=False)
                os.killpg(0, signal.SIGKILL)
            finally:
                os._exit(1)


def _warm(func_path: str, args: list[str]) -> str | None:
    """Run a trusted warm-up in the template (imports and first compiles every forked call
    would otherwise pay again); what went wrong, or None."""
    try:
        resolve(func_path)(args)
        return None
    except BaseException as exc:
        return f"warm-up {func_path}: {type(exc).__name__}: {exc}"


def _warm_template(func_path: str, targets: list[str], workdir: str, conf: Any) -> str | None:
    """`_warm`, then back to the work dir, and what the warm-up compiled made the calls' uid's."""
    problem = _warm(func_path, targets)
    os.chdir(workdir)
    if conf.uid is not None and conf.cache_dir:  # what the warm-up compiled, the calls may rewrite
        from nnforge.oracle.confine import hand_over

        hand_over(conf.cache_dir, conf.uid)
    return problem


def _warm_request(body: bytes) -> tuple[str, list[str], int] | None:
    """(function, targets, call id) of a ("warm", ...) request from the parent, else None."""
    try:
        kind, func_path, targets, call_id = pickle.loads(body)
    except Exception:
        return None
    return (func_path, targets, call_id) if kind == "warm" else None


def _call_id_of(body: bytes) -> int:
    try:
        request = pickle.loads(body)
        return int(request[3])
    except Exception:
        return -1


def _point_inductor_at_call_cache() -> None:
    """Inductor fixed its precompiled-header folder when the template imported it: headers the
    warm-up built stay readable there, new ones go to the call's own view of the compile cache."""
    codecache = sys.modules.get("torch._inductor.codecache")
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if codecache is not None and cache and hasattr(codecache, "_HEADER_DIR"):
        codecache._HEADER_DIR = os.path.join(cache, "precompiled_headers")
        codecache._HEADER_LOCK_DIR = os.path.join(codecache._HEADER_DIR, "locks")


def serve_forked(body: bytes, workdir: str, number: int, conf: Any, proto_in: BinaryIO, proto_out: BinaryIO) -> None:
    """One call in a process forked from this template, confined as `conf` says; the reply
    comes from the call's process, then this template's ("exit", wait status, call id) frame."""
    from nnforge.oracle import confine

    call_id = _call_id_of(body)
    call_dir = os.path.join(workdir, f"call-{number}")
    os.mkdir(call_dir, 0o700)
    if conf.uid is not None:
        os.chown(call_dir, conf.uid, conf.uid)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid, status_fd = confine.fork_confined(conf, call_dir)
    if pid == 0:  # the call's own process: it never returns
        try:
            proto_in.close()
            confine.point_environment_at(conf, call_dir)
            _point_inductor_at_call_cache()
            write_all(proto_out, _reply_for(body, os.getcwd()))
        finally:
            os._exit(0)
    status = confine.wait_confined(pid, status_fd)
    _end_of_call_cleanup()
    shutil.rmtree(call_dir, ignore_errors=True)
    write_all(proto_out, encode_reply(("exit", status, call_id)))


def main(argv: list[str] | None = None) -> int:
    from nnforge.oracle.confine import CallConfinement

    parser = argparse.ArgumentParser(prog="nnforge.oracle.worker")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--preload", action="append", default=[])
    parser.add_argument("--fork", action="store_true", help="a fork server: every call in a process of its own")
    parser.add_argument("--warm", default=None, help="module:function run once before the first call")
    parser.add_argument("--warm-arg", action="append", default=[])
    args, rest = parser.parse_known_args(argv)
    conf = CallConfinement.from_argv(rest)
    workdir = os.path.abspath(args.workdir)

    # Take the protocol pipes private before any untrusted code can print.
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
    proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)  # stdout -> the log the parent gave us as stderr

    fault_file = open(os.path.join(workdir, FAULT_LOG), "a", encoding="utf-8")
    faulthandler.enable(file=fault_file, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=fault_file, all_threads=True, chain=False)
    os.chdir(workdir)
    become_subreaper()

    threading.Thread(target=_watch_parent, args=(os.getppid(), workdir), name="nnforge-parent-watch", daemon=True).start()

    preload_errors = []
    for name in args.preload:
        try:
            importlib.import_module(name)
        except BaseException as exc:
            preload_errors.append(f"{name}: {type(exc).__name__}: {exc}")
    if args.warm:
        problem = _warm_template(args.warm, args.warm_arg, workdir, conf)
        if problem:
            preload_errors.append(problem)

    try:
        write_all(proto_out, encode_reply(("ready", os.getpid(), preload_errors)))
        number = 0
        while True:
            body = read_frame_bytes(proto_in)
            if body is None:  # the parent closed the pipe: shut down (it may have crashed, so tidy up)
                shutil.rmtree(workdir, ignore_errors=True)
                return 0
            warm = _warm_request(body) if args.fork else None
            if warm is not None:  # trusted: NNForge's own program, in the template
                func_path, targets, call_id = warm
                write_all(proto_out, encode_reply(("ok", _warm_template(func_path, targets, workdir, conf), call_id)))
            elif args.fork:
                number += 1
                serve_forked(body, workdir, number, conf, proto_in, proto_out)
            else:
                write_all(proto_out, _reply_for(body, workdir))
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    # Keep the module's own globals: run as `-m`, this file is `__main__`, and the helpers above
    # must be the ones `nnforge.oracle.worker:...` resolves to, so call through the real module.
    from nnforge.oracle import worker as _worker_module

    sys.exit(_worker_module.main())
