"""Data-only encoding for everything a sandboxed worker sends back: no pickle crosses that boundary.

A worker runs code an LLM or a mutator wrote, and that code can reach the worker's reply pipe, so
whatever the parent decodes must be inert data. A message is JSON plus raw byte blobs:

    8-byte magic "NNFWIRE1" | 4-byte JSON length | JSON | blob 0 | blob 1 | ...

JSON holds None, bools, ints, finite floats, strings, lists and string-keyed dicts as
themselves; everything else is a tagged object `{"$": tag, ...}`: tuples, dicts with other keys,
non-finite floats, complex numbers, bytes (a blob), torch dtypes, devices and tensors (dtype,
shape, strides, requires_grad and a blob of their elements). Decoding builds only those
types; an unknown tag, a blob out of range, a size that does not match its dtype and shape,
or anything else that does not parse raises `WireError`. The decoder never imports or calls
anything a message names.

This module imports only the standard library; torch is imported when a tensor is met.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

MAGIC = b"NNFWIRE1"
_LEN = struct.Struct("!I")
MAX_DEPTH = 64

# dtypes a tensor may have on the wire (torch's names) and their element sizes
_DTYPES = {
    "bool": 1, "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint16": 2, "uint32": 4, "uint64": 8,
    "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "complex64": 8, "complex128": 16,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
}


class WireError(ValueError):
    """A message that is not what the wire format allows (forged, truncated or garbage)."""


# -- encoding -----------------------------------------------------------------------------------------------
def encode(value: Any) -> bytes:
    """`value` as a wire message. TypeError names the first value that is not plain data."""
    blobs: list[bytes] = []
    doc = _enc(value, blobs, 0, "value")
    text = json.dumps(doc, allow_nan=False, separators=(",", ":")).encode()
    return b"".join([MAGIC, _LEN.pack(len(text)), text, *blobs])


def _blob(data: bytes, blobs: list[bytes]) -> dict[str, int]:
    start = sum(len(b) for b in blobs)
    blobs.append(data)
    return {"at": start, "n": len(data)}


def _enc(v: Any, blobs: list[bytes], depth: int, where: str) -> Any:
    if depth > MAX_DEPTH:
        raise TypeError(f"{where}: nested deeper than {MAX_DEPTH} levels")
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v) if math.isfinite(v) else {"$": "float", "v": repr(float(v))}
    if isinstance(v, complex):
        return {"$": "complex", "re": _enc(v.real, blobs, depth + 1, where), "im": _enc(v.imag, blobs, depth + 1, where)}
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {"$": "bytes", **_blob(bytes(v), blobs)}
    if isinstance(v, list):
        return [_enc(x, blobs, depth + 1, f"{where}[{i}]") for i, x in enumerate(v)]
    if isinstance(v, tuple):  # torch.Size and named tuples travel as plain tuples
        return {"$": "tuple", "items": [_enc(x, blobs, depth + 1, f"{where}[{i}]") for i, x in enumerate(v)]}
    if isinstance(v, dict):
        if all(type(k) is str for k in v):
            if "$" not in v:
                return {k: _enc(x, blobs, depth + 1, f"{where}[{k!r}]") for k, x in v.items()}
        return {"$": "dict", "items": [[_enc(k, blobs, depth + 1, where), _enc(x, blobs, depth + 1, f"{where}[{k!r}]")]
                                       for k, x in v.items()]}
    kind = type(v).__module__.split(".")[0]
    if kind == "torch":
        return _enc_torch(v, blobs, where)
    if kind == "numpy":
        import numpy as np

        if isinstance(v, np.generic):
            return _enc(v.item(), blobs, depth + 1, where)
        if isinstance(v, np.ndarray):
            import torch

            return {"$": "ndarray", "tensor": _enc_torch(torch.from_numpy(np.ascontiguousarray(v)), blobs, where)}
    raise TypeError(f"{where}: a {type(v).__module__}.{type(v).__qualname__} is not plain data "
                    "(send tensors, numbers, strings, lists, tuples and dicts)")


def _enc_torch(v: Any, blobs: list[bytes], where: str) -> Any:
    import torch

    if isinstance(v, torch.dtype):
        return {"$": "dtype", "v": str(v).replace("torch.", "")}
    if isinstance(v, torch.device):
        return {"$": "device", "v": str(v)}
    if isinstance(v, torch.Tensor):
        if v.layout != torch.strided or v.is_quantized or v.is_meta:
            raise TypeError(f"{where}: a {v.layout} tensor is not plain data (strided tensors only)")
        t = v.detach().cpu()
        dtype = str(t.dtype).replace("torch.", "")
        if dtype not in _DTYPES:
            raise TypeError(f"{where}: dtype {dtype} is not sent over the wire")
        dense = t.contiguous()
        raw = dense.reshape(-1).view(torch.uint8).numpy().tobytes() if dense.numel() else b""
        strides = list(t.stride()) if _dense_permutation(t) else None
        return {"$": "tensor", "dtype": dtype, "shape": list(t.shape), "strides": strides,
                "grad": bool(v.requires_grad), **_blob(raw, blobs)}
    raise TypeError(f"{where}: a torch.{type(v).__qualname__} is not plain data")


def _dense_permutation(t: Any) -> bool:
    """Strides that are a permutation of a contiguous layout (channels_last, a transpose): kept."""
    dims = sorted((s, n) for s, n in zip(t.stride(), t.shape) if n != 1)
    expect = 1
    for s, n in dims:
        if s != expect:
            return False
        expect *= n
    return t.storage_offset() == 0


# -- decoding -----------------------------------------------------------------------------------------------
def decode(message: bytes | bytearray | memoryview) -> Any:
    """The value of a wire message; WireError for anything the format does not allow."""
    data = memoryview(message)
    head = len(MAGIC) + _LEN.size
    if len(data) < head or bytes(data[:len(MAGIC)]) != MAGIC:
        raise WireError("not a wire message (bad magic)")
    (n,) = _LEN.unpack(data[len(MAGIC):head])
    if head + n > len(data):
        raise WireError("truncated message (JSON runs past the end)")
    try:
        doc = json.loads(bytes(data[head:head + n]), parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise WireError(f"the JSON part does not parse: {e}") from None
    return _dec(doc, data[head + n:], 0)


def _no_constant(name: str) -> Any:
    raise WireError(f"bare {name} in JSON (non-finite floats are tagged)")


def _take(d: dict[str, Any], blobs: memoryview) -> memoryview:
    at, n = d.get("at"), d.get("n")
    if type(at) is not int or type(n) is not int or at < 0 or n < 0 or at + n > len(blobs):
        raise WireError(f"blob reference out of range ({at!r}, {n!r})")
    return blobs[at:at + n]


def _dec(v: Any, blobs: memoryview, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise WireError(f"nested deeper than {MAX_DEPTH} levels")
    if v is None or isinstance(v, (bool, str, int, float)):
        return v
    if isinstance(v, list):
        return [_dec(x, blobs, depth + 1) for x in v]
    if not isinstance(v, dict):
        raise WireError(f"unexpected JSON value of type {type(v).__name__}")
    tag = v.get("$")
    if tag is None:
        return {k: _dec(x, blobs, depth + 1) for k, x in v.items()}
    if tag == "tuple":
        return tuple(_dec(x, blobs, depth + 1) for x in _list(v, "items"))
    if tag == "dict":
        out = {}
        for pair in _list(v, "items"):
            if not isinstance(pair, list) or len(pair) != 2:
                raise WireError("a dict item is not a [key, value] pair")
            key = _dec(pair[0], blobs, depth + 1)
            try:
                out[key] = _dec(pair[1], blobs, depth + 1)
            except TypeError:
                raise WireError("a dict key is not hashable") from None
        return out
    if tag == "float":
        text = v.get("v")
        if text not in ("nan", "inf", "-inf"):
            raise WireError(f"a tagged float must be nan, inf or -inf, not {text!r}")
        return float(text)
    if tag == "complex":
        re_, im = _dec(v.get("re"), blobs, depth + 1), _dec(v.get("im"), blobs, depth + 1)
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (re_, im)):
            raise WireError("a complex number needs real parts")
        return complex(re_, im)
    if tag == "bytes":
        return bytes(_take(v, blobs))
    if tag == "dtype":
        return _torch_dtype(v.get("v"))
    if tag == "device":
        import torch

        try:
            return torch.device(str(v.get("v")))
        except (RuntimeError, TypeError) as e:
            raise WireError(f"bad device: {e}") from None
    if tag == "tensor":
        return _dec_tensor(v, blobs)
    if tag == "ndarray":
        inner = v.get("tensor")
        if not isinstance(inner, dict) or inner.get("$") != "tensor":
            raise WireError("an ndarray must wrap a tensor")
        return _dec_tensor(inner, blobs).numpy()
    raise WireError(f"unknown tag {str(tag)[:40]!r}")


def _list(v: dict[str, Any], key: str) -> list[Any]:
    items = v.get(key)
    if not isinstance(items, list):
        raise WireError(f"a tagged {v.get('$')!r} needs a list under {key!r}")
    return items


def _torch_dtype(name: Any) -> Any:
    import torch

    if name not in _DTYPES or not isinstance(getattr(torch, str(name), None), torch.dtype):
        raise WireError(f"unknown dtype {str(name)[:40]!r}")
    return getattr(torch, name)


def _dec_tensor(v: dict[str, Any], blobs: memoryview) -> Any:
    import torch

    dtype = _torch_dtype(v.get("dtype"))
    shape = v.get("shape")
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise WireError(f"bad tensor shape {str(shape)[:80]}")
    numel = math.prod(shape)
    raw = _take(v, blobs)
    if len(raw) != numel * _DTYPES[v["dtype"]]:
        raise WireError(f"tensor of shape {shape} and dtype {v['dtype']} needs {numel * _DTYPES[v['dtype']]} bytes, "
                        f"the message has {len(raw)}")
    if numel == 0:
        t = torch.empty(shape, dtype=dtype)
    else:
        t = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)
    strides = v.get("strides")
    if strides is not None:
        if not isinstance(strides, list) or len(strides) != len(shape) or not all(type(s) is int and s >= 0
                                                                                    for s in strides):
            raise WireError(f"bad tensor strides {str(strides)[:80]}")
        if tuple(strides) != tuple(t.stride()) and numel:
            laid = torch.empty_strided(shape, strides, dtype=dtype)
            if _dense_permutation(laid):
                laid.copy_(t)
                t = laid
            else:
                raise WireError("tensor strides are not a dense layout")
    if v.get("grad") is True:
        if not (t.is_floating_point() or t.is_complex()):
            raise WireError("requires_grad on a tensor that cannot have gradients")
        t.requires_grad_(True)
    return t
