"""Delta debugging (Zeller's ddmin): the smallest subset of a list that keeps a test true.

Every reduction pass (graph nodes, statements, outputs, keyword arguments, calls of a sequence)
is ddmin over some list; only what a subset *means* differs, so the search lives here once.
Complements are tried before subsets: removing a chunk is the common win, and it keeps the
granularity coarse for longer.
"""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

T = TypeVar("T")


def ddmin(items: Sequence[T], test: Callable[[list[T]], bool], *, min_size: int = 1) -> list[T]:
    """A 1-minimal subsequence of `items` (order kept) for which `test` holds.

    `test(items)` is assumed true and is not called. Subsets smaller than `min_size` are never
    tested. `test` may raise to stop the search (e.g. out of budget); the caller then keeps the
    best subset it saw accepted.
    """
    current = list(items)
    n = 2
    while len(current) > min_size:
        n = min(n, len(current))
        chunks = _split(current, n)
        progressed = False
        for i in range(len(chunks)):  # complements: drop one chunk
            complement = [x for j, c in enumerate(chunks) if j != i for x in c]
            if len(complement) >= min_size and complement and test(complement):
                current, n, progressed = complement, max(n - 1, 2), True
                break
        if not progressed and n > 2:
            for chunk in chunks:  # subsets: keep one chunk
                if len(chunk) >= min_size and test(chunk):
                    current, n, progressed = chunk, 2, True
                    break
        if not progressed:
            if n >= len(current):
                break
            n = min(len(current), 2 * n)
    return current


def _split(items: list[T], n: int) -> list[list[T]]:
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return [c for c in out if c]
