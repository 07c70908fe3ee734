"""Faults in TorchDynamo: guards, builtins, containers, iterators and side-effect replay.

Each is modelled on a class of bug Dynamo has shipped: a guard left out for one kind of value,
so a compiled graph outlives the state it was traced for; a Python builtin modelled without one
of its arguments; a container method whose argument is dropped; an iterator whose position is
forgotten; an attribute mutation traced correctly but never written back after the graph; and
an internal assertion that valid Python trips.
"""

from __future__ import annotations

import functools
from typing import Any

from fault_hook import fired, plant


def _const(vt: Any) -> Any:
    """The Python value of a VariableTracker that is a constant, else a sentinel."""
    try:
        return vt.as_python_constant() if vt.is_python_constant() else _NOT_CONST
    except Exception:
        return _NOT_CONST


_NOT_CONST = object()


def _module_attr(source: Any, member: str | None = None) -> bool:
    """Is `source` an attribute (named `member`, if given) read off an nn.Module?"""
    from torch._dynamo.source import AttrSource, NNModuleSource

    return (isinstance(source, AttrSource) and isinstance(source.base, NNModuleSource)
            and (member is None or source.member == member))


# -- guards ------------------------------------------------------------------------------------------------
@plant("dynamo_module_float_attr_unguarded", layer="dynamo guards", module="torch._dynamo.guards",
       symptom="stale",
       summary="a float attribute of an nn.Module gets no EQUALS_MATCH guard: after it changes, the graph traced with the old value is reused")
def _float_attr_guard(guards: Any) -> None:
    orig = guards.GuardBuilder.EQUALS_MATCH

    @functools.wraps(orig)
    def EQUALS_MATCH(self: Any, guard: Any, recompile_hint: str | None = None) -> None:
        if type(self.get(guard)) is float and _module_attr(guard.originating_source):
            fired("dynamo_module_float_attr_unguarded")
            return
        return orig(self, guard, recompile_hint)

    guards.GuardBuilder.EQUALS_MATCH = EQUALS_MATCH


@plant("dynamo_training_flag_unguarded", layer="dynamo guards", module="torch._dynamo.guards",
       symptom="stale",
       summary="a module's `training` flag read while True installs no guard: after model.eval() the train-mode graph still runs")
def _training_guard(guards: Any) -> None:
    orig = guards.GuardBuilder.BOOL_MATCH

    @functools.wraps(orig)
    def BOOL_MATCH(self: Any, guard: Any) -> None:
        if self.get(guard) is True and _module_attr(guard.originating_source, "training"):
            fired("dynamo_training_flag_unguarded")
            return
        return orig(self, guard)

    guards.GuardBuilder.BOOL_MATCH = BOOL_MATCH


# -- builtins ----------------------------------------------------------------------------------------------
@plant("dynamo_sorted_key_drops_reverse", layer="dynamo builtins", module="torch._dynamo.variables.builtin",
       symptom="mismatch",
       summary="sorted(xs, key=f, reverse=True) is traced as an ascending sort: reverse is dropped whenever a key is given")
def _sorted_reverse(builtin: Any) -> None:
    orig = builtin.BuiltinVariable.call_sorted

    @functools.wraps(orig)
    def call_sorted(self: Any, tx: Any, obj: Any, **kwargs: Any) -> Any:
        key = kwargs.get("key")
        if key is not None and not key.is_constant_none() and "reverse" in kwargs:
            fired("dynamo_sorted_key_drops_reverse")
            kwargs = {k: v for k, v in kwargs.items() if k != "reverse"}
        return orig(self, tx, obj, **kwargs)

    builtin.BuiltinVariable.call_sorted = call_sorted


@plant("dynamo_round_negative_ndigits_assert", layer="dynamo builtins", module="torch._dynamo.variables.builtin",
       symptom="crash",
       summary="round(float, ndigits) with a negative ndigits trips an internal assertion while tracing")
def _round_negative(builtin: Any) -> None:
    orig = builtin.BuiltinVariable.call_round

    @functools.wraps(orig)
    def call_round(self: Any, tx: Any, arg: Any, *args: Any, **kwargs: Any) -> Any:
        nd = _const(args[0]) if args else _const(kwargs["ndigits"]) if "ndigits" in kwargs else None
        if type(nd) is int and nd < 0 and type(_const(arg)) is float:
            fired("dynamo_round_negative_ndigits_assert")
            raise AssertionError(f"round(): expected ndigits >= 0 for a float, got {nd}")
        return orig(self, tx, arg, *args, **kwargs)

    builtin.BuiltinVariable.call_round = call_round


# -- containers --------------------------------------------------------------------------------------------
@plant("dynamo_list_pop_index_ignored", layer="dynamo containers", module="torch._dynamo.variables.lists",
       symptom="mismatch",
       summary="list.pop(i) with an explicit index short of the last one pops the last element instead of element i")
def _list_pop(lists: Any) -> None:
    cls = lists.CommonListMethodsVariable
    orig = cls.call_method

    @functools.wraps(orig)
    def call_method(self: Any, tx: Any, name: str, args: list, kwargs: dict) -> Any:
        if name == "pop" and isinstance(self, lists.ListVariable) and len(args) == 1 and not kwargs:
            i = _const(args[0])
            if type(i) is int and 0 <= i < len(self.items) - 1:
                fired("dynamo_list_pop_index_ignored")
                args = []
        return orig(self, tx, name, args, kwargs)

    cls.call_method = call_method


# -- iterators ---------------------------------------------------------------------------------------------
@plant("dynamo_iter_unpack_restarts", layer="dynamo iterators", module="torch._dynamo.variables.lists",
       symptom="mismatch",
       summary="unpacking a list/tuple iterator (list(it), tuple(it), *it) after next() restarts it from the first element")
def _iter_restart(lists: Any) -> None:
    cls = lists.ListIteratorVariable
    orig = cls.unpack_var_sequence

    @functools.wraps(orig)
    def unpack_var_sequence(self: Any, tx: Any) -> Any:
        if self.index > 0 and not self.is_exhausted:
            fired("dynamo_iter_unpack_restarts")
            self.is_exhausted = True
            return list(self.items)
        return orig(self, tx)

    cls.unpack_var_sequence = unpack_var_sequence


# -- side effects ------------------------------------------------------------------------------------------
@plant("dynamo_module_int_setattr_not_replayed", layer="dynamo side effects", module="torch._dynamo.side_effects",
       symptom="mismatch",
       summary="storing a new int into an existing int attribute of an nn.Module is traced but not written back after the graph")
def _int_setattr(side_effects: Any) -> None:
    cls = side_effects.SideEffects
    orig = cls.codegen_update_mutated

    @functools.wraps(orig)
    def codegen_update_mutated(self: Any, cg: Any, *args: Any, **kwargs: Any) -> Any:
        from torch._dynamo.variables.nn_module import UnspecializedNNModuleVariable

        dropped = []
        for var, attrs in self.store_attr_mutations.items():
            if not isinstance(var, UnspecializedNNModuleVariable):
                continue
            for name, value in list(attrs.items()):
                if type(getattr(var.value, name, None)) is int and type(_const(value)) is int:
                    fired("dynamo_module_int_setattr_not_replayed")
                    dropped.append((attrs, name, value))
                    del attrs[name]
        try:
            return orig(self, cg, *args, **kwargs)
        finally:
            for attrs, name, value in dropped:
                attrs[name] = value

    cls.codegen_update_mutated = codegen_update_mutated
