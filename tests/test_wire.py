"""The data-only reply format (core/wire.py): what workers send back decodes to the same values,
and nothing else decodes at all."""

from __future__ import annotations

import json
import math
import pickle
import struct

import pytest
import torch

from nnforge.core import wire


def _roundtrip(v):
    return wire.decode(wire.encode(v))


def test_plain_data_and_tensors_come_back_as_they_went() -> None:
    x = torch.randn(2, 3, 4, 5)
    cl = x.to(memory_format=torch.channels_last)
    value = {"a": [1, 2.5, None, True, "s"], "t": (1, (2,)), 3: "int key", "nan": float("nan"),
             "inf": -math.inf, "c": 1 + 2j, "b": b"\x00\xff", "dtype": torch.bfloat16,
             "x": x, "cl": cl, "bf": torch.ones(3, dtype=torch.bfloat16), "bool": torch.tensor([True, False]),
             "empty": torch.empty(0, 3), "scalar": torch.tensor(2.5, requires_grad=True), "$": "a dollar key"}
    got = _roundtrip(value)
    assert got["a"] == [1, 2.5, None, True, "s"] and got["t"] == (1, (2,)) and got[3] == "int key"
    assert math.isnan(got["nan"]) and got["inf"] == -math.inf and got["c"] == 1 + 2j and got["b"] == b"\x00\xff"
    assert got["dtype"] is torch.bfloat16 and got["$"] == "a dollar key"
    assert torch.equal(got["x"], x) and got["x"].is_contiguous()
    assert torch.equal(got["cl"], cl) and got["cl"].stride() == cl.stride()  # the layout travels too
    assert got["bf"].dtype == torch.bfloat16 and torch.equal(got["bool"], torch.tensor([True, False]))
    assert got["empty"].shape == (0, 3) and got["scalar"].requires_grad and got["scalar"].item() == 2.5


def test_objects_that_are_not_data_are_refused_when_sent() -> None:
    class Thing:
        pass

    with pytest.raises(TypeError, match="Thing is not plain data"):
        wire.encode({"k": [Thing()]})
    with pytest.raises(TypeError, match="not plain data"):
        wire.encode(print)


def _message(doc, blobs=b""):
    text = json.dumps(doc).encode()
    return wire.MAGIC + struct.pack("!I", len(text)) + text + blobs


@pytest.mark.parametrize("message, why", [
    (pickle.dumps(("ok", 1)), "bad magic"),
    (wire.MAGIC + struct.pack("!I", 99) + b"{}", "truncated"),
    (_message({"$": "os.system", "v": "touch /tmp/x"}), "unknown tag"),
    (_message({"$": "tensor", "dtype": "float32", "shape": [4], "at": 0, "n": 8}, b"\x00" * 8), "needs 16 bytes"),
    (_message({"$": "tensor", "dtype": "object", "shape": [1], "at": 0, "n": 1}, b"\x00"), "unknown dtype"),
    (_message({"$": "bytes", "at": 5, "n": 10}, b"abc"), "out of range"),
    (_message({"$": "float", "v": "__import__('os')"}), "nan, inf or -inf"),
    (wire.MAGIC + struct.pack("!I", 3) + b"NaN", "non-finite"),
])
def test_forged_and_garbage_messages_are_wire_errors(message, why) -> None:
    with pytest.raises(wire.WireError, match=why):
        wire.decode(message)
