"""Operator specs, one module per family; importing this package registers them all."""

from importlib import import_module

_FAMILIES = ("elementwise", "comparison", "reduction", "shape", "nn_conv", "nn_pool", "nn_norm", "nn_linear", "nn_resample", "nn_misc", "cast")

for _family in _FAMILIES:
    try:
        import_module(f"{__name__}.{_family}")
    except ModuleNotFoundError as e:  # a family not written yet
        if e.name != f"{__name__}.{_family}":
            raise
