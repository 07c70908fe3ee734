"""Normalisation, signatures and the same-bug test: pure functions, no compiler needed."""

import json

from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Frame, Symptom, Verdict
from nnforge.triage.interesting import same_bug
from nnforge.triage.normalize import compiler_frames, normalize_message
from nnforge.triage.signature import canonical_form, signature_of, similarity

TORCH = "torch/_inductor/lowering.py"


def _crash(message: str, *, line: int = 10, rung: str = "inductor", op_frame: str = "make_fallback",
           exc: str = "RuntimeError") -> Verdict:
    frames = (
        Frame("/work/main/oracle/job.py", 300, "run_rung"),
        Frame("torch/_dynamo/eval_frame.py", 511, "__call__"),
        Frame("torch/_inductor/graph.py", 1000 + line, "call_function"),
        Frame(TORCH, 2000 + line, op_frame),
        Frame("functools.py", 40, "wrapper"),
        Frame("torch/_ops.py", 700 + line, "__call__"),
    )
    return Verdict(target="inductor", symptom=Symptom.CRASH, rung=rung, exc_type=exc, exc_message=message, frames=frames)


PROGRAM = """import torch


class Model(torch.nn.Module):
    def forward(self, {a}, {b}):
        {c} = torch.sin({a}) * {k}
        {d} = {c} + {b}.to(torch.{dt})
        return ({d},)


def make_inputs():
    return (torch.randn([{n}, 3]), torch.randn([{n}, 3]))
"""


def _case(**kw):
    names = dict(a="x", b="y", c="t", d="out", k="2.0", n="4", dt="float32")
    names.update(kw)
    return TestCase(program=PROGRAM.format(**names))


def test_normalize_message_strips_numbers_shapes_addresses_paths_and_generated_names():
    msg = ("Expected size 16 but got [2, 3, 4] for v12 (w3, n5_dim, tmp_ab12) at 0x7f3a2b in program_4711_3 "
           "from /tmp/nnforge-worker-x/program_1_2.py:17 and torch.Size([1, 4])")
    out = normalize_message(msg)
    for gone in ("16", "[2, 3, 4]", "v12", "w3", "n5_dim", "tmp_ab12", "0x7f3a2b", "4711", "/tmp", "Size(["):
        assert gone not in out, (gone, out)
    assert out.startswith("Expected size <num> but got <shape> for <name>")
    assert "<addr>" in out and "<path>" in out and "<module>" in out


def test_normalize_message_keeps_torch_op_names_and_dtypes_and_masks_the_operator_tvm_names():
    out = normalize_message("no lowering for aten.conv2d on float16 and bfloat16, 3 times")
    assert out == "no lowering for aten.conv2d on float16 and bfloat16, <num> times"
    # TVM 0.27 lacks one LLVM intrinsic lowering for acos, asin and atan alike; its type check
    # names whichever binary operator met it first: one bug each, not one per operator
    intrinsic = 'unknown intrinsic ir.Op(span=None, name="tirx.{}", num_inputs=1, support_level=10)'
    assert len({normalize_message(intrinsic.format(op)) for op in ("acos", "asin", "atan")}) == 1
    binary = "Binary operators must have the same datatype for both operands. However, R.{}(lv, lv1) uses float16"
    assert normalize_message(binary.format("subtract")) == normalize_message(binary.format("divide"))
    assert "conv2d" in normalize_message("conv2d got an input of rank 3")  # a plain word stays


def test_compiler_frames_skip_wrappers_and_own_code_and_drop_line_numbers():
    frames = _crash("x").frames
    assert compiler_frames(frames) == (f"{TORCH}:make_fallback", "torch/_inductor/graph.py:call_function")
    planted = (Frame("/work/main/oracle/backend.py", 1, "compile_and_run"),
               Frame("/x/site/torch/_functorch/aot_autograd.py", 5, "aot_module_simplified"),
               Frame("/work/main/oracle/faulty.py", 53, "fw_compiler"),
               Frame("/work/main/oracle/faulty.py", 42, "lower_faulty_op"))
    assert compiler_frames(planted, limit=2) == ("nnforge/oracle/faulty.py:lower_faulty_op",
                                                 "nnforge/oracle/faulty.py:fw_compiler")


def test_crashes_differing_only_in_numbers_shapes_and_lines_share_a_signature():
    a = signature_of(_crash("shape [2, 3] is invalid for input of size 6 (v3)", line=1), _case())
    b = signature_of(_crash("shape [8, 16, 1] is invalid for input of size 128 (v77)", line=9), _case(n="9"))
    assert a.digest == b.digest
    assert similarity(a, b) == 1.0


def test_different_crash_locations_messages_or_rungs_give_different_signatures():
    base = signature_of(_crash("no lowering for aten.sin"), _case())
    others = [
        signature_of(_crash("no lowering for aten.cos"), _case()),
        signature_of(_crash("no lowering for aten.sin", op_frame="lower_pointwise"), _case()),
        signature_of(_crash("no lowering for aten.sin", rung="aot_eager"), _case()),
        signature_of(_crash("no lowering for aten.sin", exc="AssertionError"), _case()),
    ]
    assert len({base.digest} | {o.digest for o in others}) == 5
    assert all(0.0 < similarity(base, o) < 1.0 for o in others)


def test_canonical_form_ignores_names_and_literals_but_not_ops_or_dtypes():
    a = canonical_form(_case())
    assert a.splitlines()[0] == "sin(float32)->float32"
    assert canonical_form(_case(a="p", b="q", c="v1", d="v2", k="7.5", n="11")) == a
    assert canonical_form(_case(dt="float16")) != a
    other = TestCase(program=PROGRAM.format(a="x", b="y", c="t", d="out", k="2.0", n="4", dt="float32")
                     .replace("torch.sin", "torch.cos"))
    assert canonical_form(other) != a


def test_wrong_output_signatures_key_on_the_canonical_form():
    v = Verdict(target="inductor", symptom=Symptom.MISMATCH, rung="inductor", max_abs_err=0.5)
    a, b = signature_of(v, _case()), signature_of(v, _case(c="zz", k="3.0"))
    assert a.digest == b.digest and a.key == canonical_form(_case())
    cos = TestCase(program=_case().program.replace("torch.sin", "torch.cos"))
    c = signature_of(v, cos)
    assert c.digest != a.digest and 0.0 < similarity(a, c) < 1.0
    assert similarity(a, signature_of(_crash("x"), _case())) == 0.0  # crash vs wrong output
    assert json.loads(json.dumps(a.to_json()))["key"] == a.key


def test_same_bug_needs_same_symptom_rung_type_message_and_top_frame():
    ref = _crash("no lowering for aten.sin", line=1)
    assert same_bug(ref, _crash("no lowering for aten.sin", line=50))  # lines move, the bug does not
    assert not same_bug(ref, _crash("no lowering for aten.cos"))
    assert not same_bug(ref, _crash("no lowering for aten.sin", op_frame="other_lowering"))
    assert not same_bug(ref, _crash("no lowering for aten.sin", rung="aot_eager"))
    assert not same_bug(ref, Verdict(target="inductor", symptom=Symptom.MISMATCH, rung="inductor"))
    assert not same_bug(ref, Verdict(target="inductor", symptom=Symptom.INVALID))


def test_onnx_integer_type_strings_fold_so_one_exporter_bug_is_one_key():
    msgs = [f"[ShapeInferenceError] (op_type:Tanh, node name: /Tanh): input typestr: T, has unsupported type: tensor({t})"
            for t in ("int16", "int64", "uint8", "bool")]
    assert len({normalize_message(m) for m in msgs}) == 1
    float_msg = msgs[0].replace("int16", "float16")
    assert normalize_message(float_msg) != normalize_message(msgs[0])  # float types still tell bugs apart
    assert "op_type:Tanh" in normalize_message(msgs[0])


def test_a_tvm_crash_title_names_the_part_of_tvm_that_raised():
    from nnforge.triage.report import layer_name

    codegen = (Frame("/work/main/oracle/tvm_backends.py", 60, "execute"), Frame("tvm/driver/build_module.py", 1, "compile"),
               Frame("tvm/tirx/build.py", 2, "codegen_build"),
               Frame("/project/src/target/llvm/codegen_llvm.cc", 0, "CodeGenLLVM::CreateIntrinsic"))
    frontend = (Frame("/work/main/oracle/tvm_backends.py", 49, "execute"),
                Frame("tvm/relax/frontend/onnx/onnx_frontend.py", 3, "_convert"))
    assert layer_name("tvm_frontend", codegen) == "TVM LLVM codegen"
    assert layer_name("tvm_frontend", frontend) == "TVM ONNX frontend"
    assert layer_name("tvm_frontend") == "TVM ONNX frontend" and layer_name("inductor", codegen) == "inductor"


def test_a_0d_shape_in_a_tvm_type_error_keys_as_any_other_shape():
    msg = ('Binary operators must have the same datatype for both operands. However, R.add(lv, lv1) uses datatype '
           'T.float32 on the LHS (Type of R.Tensor({}, dtype="float32")), and T.float16 on the RHS')
    assert normalize_message(msg.format("()")) == normalize_message(msg.format("(2, 3)"))
    assert normalize_message("foo() got []") == "foo() got <shape>"  # a call's empty parentheses stay
