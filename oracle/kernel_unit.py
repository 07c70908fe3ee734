"""Compile all C++ kernels of one Inductor graph as a single translation unit (#19).

Inductor's CPU backend builds every fused kernel as a shared library of its own: one compiler
run per kernel, and each run first loads the ~150 MB precompiled ATen header, which costs more
than most kernels (bench/cxx_cost.py: 0.5-0.7 s of a 0.7-1.2 s run). A fuzzer compiles
thousands of small graphs of a few kernels each, so that fixed cost is the largest share of a
test (bench/phases.py). Here the wrapper module's kernels are collected as it declares them and
built together, in one compiler run with the flags Inductor would have used for each, into one
library whose Python module exposes one entry point per kernel.

What stays as Inductor does it: every kernel's source text, the flags (the same vector ISA and
optimisation level: every CPU kernel has them alike), the entry points' argument conversion,
the on-disk cache (the unit is cached by its source like any kernel). What changes: where the
translation units end. Kernels have no calls between them, so no optimisation crosses from one
to another. When the unit does not compile (a compiler error in one kernel, or two kernels that
define the same helper), every kernel is built again on its own through Inductor's own path,
so an error a test reports is the one Inductor raises, for the kernel that raised it.

Findings are only listed as bugs once their `repro.py` reproduces in a fresh process, and
repro.py runs stock torch.compile, so nothing here can file a bug Inductor does not have.
`NNFORGE_INDUCTOR_KERNEL_UNIT=each` (read by the worker) turns it off.
"""

from __future__ import annotations

import os
import threading
from typing import Any

ENV = "NNFORGE_INDUCTOR_KERNEL_UNIT"
MODES = ("one", "each")
# what each mode means, in the words summary.md uses
DESCRIPTIONS = {"one": "one C++ compiler run per graph (oracle/kernel_unit.py; NNFORGE_INDUCTOR_KERNEL_UNIT=each: "
                       "one per kernel, as Inductor does)",
                "each": "one C++ compiler run per kernel, as Inductor does (NNFORGE_INDUCTOR_KERNEL_UNIT=each)"}

_installed = False
_stats = {"units": 0, "kernels": 0, "fallbacks": 0}
_lock = threading.Lock()

# One Python entry point per kernel, as Inductor's own binding has it, with the argument
# conversion functions shared by all of them.
_PRELUDE = """
// NNForge: the kernels of one Inductor graph, built as one translation unit.
"""

_BINDING_HEAD = """
// Python bindings to call nnforge_kernel_<i>() (Inductor's binding, one entry point per kernel):
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sstream>
#include <cstdlib>
#include <cerrno>

static void* (*_torchinductor_pyobject_tensor_data_ptr)(PyObject* obj);

template <typename T> static inline T parse_arg(PyObject* args, size_t n) {
    static_assert(std::is_pointer_v<T>, "arg type must be pointer or long");
    return static_cast<T>(_torchinductor_pyobject_tensor_data_ptr(PyTuple_GET_ITEM(args, n)));
}
template <> inline int64_t parse_arg<int64_t>(PyObject* args, size_t n) {
    auto result = PyLong_AsSsize_t(PyTuple_GET_ITEM(args, n));
    if(result == -1 && PyErr_Occurred()) [[unlikely]]
        throw std::runtime_error("expected int arg");
    return result;
}
template <> inline uintptr_t parse_arg<uintptr_t>(PyObject* args, size_t n) {
    auto result = PyLong_AsVoidPtr(PyTuple_GET_ITEM(args, n));
    if(result == reinterpret_cast<void*>(-1) && PyErr_Occurred()) [[unlikely]]
        throw std::runtime_error("expected int arg");
    return reinterpret_cast<uintptr_t>(result);
}
template <> inline float parse_arg<float>(PyObject* args, size_t n) {
    auto result = PyFloat_AsDouble(PyTuple_GET_ITEM(args, n));
    if(result == -1.0 && PyErr_Occurred()) [[unlikely]]
        throw std::runtime_error("expected float arg");
    return static_cast<float>(result);
}
"""

_ENTRY = """
static PyObject* nnforge_kernel_{i}_py(PyObject* self, PyObject* args) {{
    try {{
        if(!PyTuple_CheckExact(args)) [[unlikely]]
            throw std::runtime_error("tuple args required");
        if(PyTuple_GET_SIZE(args) != {arg_len}) [[unlikely]]
            throw std::runtime_error("requires {arg_len} args");
        nnforge_kernel_{i}({parse}); Py_RETURN_NONE;
    }} catch(std::exception const& e) {{
        PyErr_SetString(PyExc_RuntimeError, e.what());
        return nullptr;
    }} catch(...) {{
        PyErr_SetString(PyExc_RuntimeError, "unhandled error");
        return nullptr;
    }}
}}
"""

_MODULE = """
static PyMethodDef py_methods[] = {{
{methods}
    {{NULL, NULL, 0, NULL}}}};

static struct PyModuleDef py_module =
    {{PyModuleDef_HEAD_INIT, "kernel", NULL, -1, py_methods}};

PyMODINIT_FUNC PyInit_kernel(void) {{
    const char* str_addr = std::getenv("_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR");
    if(!str_addr) {{
        PyErr_SetString(PyExc_RuntimeError, "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR must be set");
        return nullptr;
    }}
    char* endptr = nullptr;
    errno = 0;
    uintptr_t addr = std::strtoull(str_addr, &endptr, 10);
    if(errno != 0 || endptr == str_addr || addr == 0) {{
        PyErr_SetString(PyExc_RuntimeError, "Failed to parse _TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR");
        return nullptr;
    }}
    _torchinductor_pyobject_tensor_data_ptr =
        reinterpret_cast<decltype(_torchinductor_pyobject_tensor_data_ptr)>(addr);
    return PyModule_Create(&py_module);
}}
"""


def unit_source(kernels: list[tuple[list[str], str]]) -> str:
    """One translation unit for `kernels` ((argument types, source) as Inductor declares them).

    Each source is kept as it is; the preprocessor renames its entry point `kernel` to
    `nnforge_kernel_<i>` for the length of that source only, so no text of the kernel is edited.
    """
    parts = [_PRELUDE]
    for i, (_, source) in enumerate(kernels):
        parts += [f"#define kernel nnforge_kernel_{i}\n", source, "\n#undef kernel\n"]
    parts.append(_BINDING_HEAD)
    methods = []
    for i, (argtypes, _) in enumerate(kernels):
        parse = ", ".join(f"parse_arg<{t.replace('const ', '')}>(args, {n})" for n, t in enumerate(argtypes))
        parts.append(_ENTRY.format(i=i, arg_len=len(argtypes), parse=parse))
        methods.append(f'    {{"nnforge_kernel_{i}", nnforge_kernel_{i}_py, METH_VARARGS, ""}},')
    parts.append(_MODULE.format(methods="\n".join(methods)))
    return "".join(parts)


class _Pending:
    """A kernel declared by the wrapper module, built with the others on first use."""

    def __init__(self, unit: "_Unit", index: int) -> None:
        self._unit, self._index = unit, index

    def result(self, timeout: float | None = None) -> Any:
        return self._unit.kernel(self._index)

    def __call__(self, *args: Any) -> Any:  # used before `wait` resolved it: build now
        return self.result()(*args)


class _Unit:
    """The kernels one wrapper module (one AsyncCompile) declared, until they are built."""

    def __init__(self) -> None:
        self.kernels: list[tuple[list[str], str]] = []
        self._built: list[Any] | None = None
        self._lock = threading.Lock()

    def add(self, argtypes: list[str], source: str) -> _Pending:
        self.kernels.append((list(argtypes), source))
        return _Pending(self, len(self.kernels) - 1)

    def kernel(self, index: int) -> Any:
        with self._lock:
            if self._built is None:
                self._built = _build(self.kernels)
        return self._built[index]


def _build(kernels: list[tuple[list[str], str]]) -> list[Any]:
    from torch._inductor.codecache import CppPythonBindingsCodeCache

    if len(kernels) > 1:
        try:
            module = CppPythonBindingsCodeCache.load_async(unit_source(kernels), "cpu")()
            with _lock:
                _stats["units"] += 1
                _stats["kernels"] += len(kernels)
            return [getattr(module, f"nnforge_kernel_{i}") for i in range(len(kernels))]
        except Exception:  # noqa: BLE001 - Inductor's own path below says what is wrong, kernel by kernel
            with _lock:
                _stats["fallbacks"] += 1
    return [CppPythonBindingsCodeCache.load_pybinding(argtypes, source) for argtypes, source in kernels]


def mode() -> str:
    """`one` (the default) or `each`, from the environment; anything else is an error."""
    value = os.environ.get(ENV, "one").strip().lower() or "one"
    if value not in MODES:
        raise ValueError(f"{ENV}={value!r}: expected one of {', '.join(MODES)}")
    return value


def stats() -> dict[str, int]:
    """Units built, kernels in them, and units that fell back to one build per kernel."""
    with _lock:
        return dict(_stats)


def install() -> bool:
    """Route Inductor's CPU kernels through one unit per wrapper module (once per process).

    Returns whether it is on. Idempotent; does nothing under `NNFORGE_INDUCTOR_KERNEL_UNIT=each`.
    """
    global _installed
    if mode() != "one":
        return False
    if _installed:
        return True
    from torch._inductor.async_compile import AsyncCompile

    original_wait = AsyncCompile.wait

    def cpp_pybinding(self: Any, argtypes: list[str], source_code: str) -> Any:
        unit = getattr(self, "_nnforge_unit", None)
        if unit is None or unit._built is not None:
            unit = self._nnforge_unit = _Unit()
        return unit.add(argtypes, source_code)

    def wait(self: Any, scope: dict[str, Any]) -> None:
        for key, value in list(scope.items()):
            if isinstance(value, _Pending):
                scope[key] = value.result()
        return original_wait(self, scope)

    AsyncCompile.cpp_pybinding = cpp_pybinding
    AsyncCompile.wait = wait
    _installed = True
    return True
