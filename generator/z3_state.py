"""z3's process-wide state, which every generator in a process shares.

Three things outlive one generated model and so do not belong to the generator that grows it:
the lock under which spec objects and solver terms are made and dropped (z3 contexts are not
thread-safe, and the campaign's triage thread materialises graphs while its loop generates),
the main context that each model starts afresh (z3 hash-conses terms per context: a reused one
would make a seed solve differently in a long-lived process), and the one watchdog thread that
interrupts a query past its wall time.
"""

from __future__ import annotations

import threading
import time

import z3

# z3 contexts are not thread-safe, and specs make their terms in z3's one global main context:
# a thread that materialises a graph (the campaign's triage) while another solves (the campaign's
# generator) corrupts reference counts and segfaults. Whoever makes or drops spec objects or
# solver terms in a process with several threads holds this lock for the objects' whole life.
Z3_LOCK = threading.RLock()


def fresh_main_context() -> None:
    """Give this model a new z3 main context.

    z3 hash-conses terms per context, and models depend on term ids: a variable name that an
    earlier model created (`v0_d0`) would make the same seed solve differently in a long-lived
    process than in a fresh one. Specs build terms with plain `z3.Int`/`z3.If` (main context), so
    the main context itself is replaced; terms of earlier models keep their own context alive.
    """
    z3._main_ctx = None  # z3 has no public reset; main_ctx() creates a new one on next use


class Watchdog:
    """One long-lived thread that interrupts the z3 query in flight once its wall time is up.

    Starting a timer thread per query cost more than the queries themselves.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._ctx: z3.Context | None = None
        self._thread: threading.Thread | None = None

    def arm(self, ctx: z3.Context, seconds: float) -> None:
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="z3-watchdog", daemon=True)
                self._thread.start()
            self._ctx, self._deadline = ctx, time.monotonic() + seconds
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._ctx = self._deadline = None

    def _run(self) -> None:
        with self._cond:
            while True:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                if self._ctx is not None:
                    self._ctx.interrupt()
                self._ctx = self._deadline = None


WATCHDOG = Watchdog()
