"""Root-cause keys: one cluster per bug, whatever program carried it (triage/rootcause.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nnforge.core.calls import CallStep
from nnforge.core.testcase import TestCase
from nnforge.core.verdict import Symptom, Verdict
from nnforge.triage.report import issue_title
from nnforge.triage.rootcause import compiler_error_line, provisional_key, state_changes
from nnforge.triage.signature import signature_of

SUB_CLAMP = '''
import torch

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 1.5

    def forward(self, x):
        return torch.clamp(x - 1.0, min=0.0) * self.scale

def make_inputs():
    return (torch.ones(3),)
'''

ADD_TRIU = '''
import torch

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.alpha = 0.5

    def forward(self, x):
        return torch.triu(x + self.alpha)

def make_inputs():
    return (torch.ones(3, 3),)
'''

CPP_FAILURE = """backend='inductor' raised:
CppCompileError: C++ compile error

Command:
g++ /root/.cache/nnforge/inductor/ab/cabc123.cpp -shared -fPIC -O3 -o /root/.cache/nnforge/inductor/ab/cabc123.so

Output:
/root/.cache/nnforge/inductor/ab/cabc123.cpp: In function 'void kernel(const float*, float*)':
/root/.cache/nnforge/inductor/ab/cabc123.cpp:17:52: error: 'tmp0_tail' was not declared in this scope; did you mean 'tmp0'?
   17 |             auto tmp2 = std::atan2(tmp0, tmp1_tail);
"""


def _stale(program: str, step: CallStep) -> tuple[Verdict, TestCase]:
    case = TestCase(program=program, calls=(CallStep(), step))
    v = Verdict(target="inductor", symptom=Symptom.MISMATCH, rung="dynamo", call_index=1, stateful=True,
                max_abs_err=0.5)
    return v, case


def test_a_stale_state_bug_is_one_cluster_whatever_ops_carried_it() -> None:
    a = signature_of(*_stale(SUB_CLAMP, CallStep(set_attrs={"scale": 2.5})))
    b = signature_of(*_stale(ADD_TRIU, CallStep(set_attrs={"alpha": 3.0})))
    assert a.digest == b.digest
    assert provisional_key(*_stale(SUB_CLAMP, CallStep(set_attrs={"scale": 2.5}))) == \
        provisional_key(*_stale(ADD_TRIU, CallStep(set_attrs={"alpha": 3.0})))
    # stale values that come back NaN (a log of the stale input) are the same state bug
    nan_v, nan_case = _stale(ADD_TRIU, CallStep(set_attrs={"alpha": 3.0}))
    assert signature_of(replace(nan_v, symptom=Symptom.NAN_MISMATCH), nan_case).digest == a.digest


def test_stale_state_after_a_different_change_is_another_cluster() -> None:
    float_attr = signature_of(*_stale(SUB_CLAMP, CallStep(set_attrs={"scale": 2.5})))
    bool_attr = signature_of(*_stale(SUB_CLAMP, CallStep(set_attrs={"scale": True})))
    training = signature_of(*_stale(SUB_CLAMP, CallStep(mode="eval")))
    assert len({float_attr.digest, bool_attr.digest, training.digest}) == 3


def test_state_changes_name_kinds_not_values() -> None:
    v, case = _stale(SUB_CLAMP, CallStep(set_attrs={"scale": 2.5}, grad_enabled=False))
    assert state_changes(case, v) == ("attribute (float)", "grad mode")


def test_a_wrong_result_that_is_not_stale_still_keys_on_its_operators() -> None:
    v = Verdict(target="inductor", symptom=Symptom.MISMATCH, rung="inductor", max_abs_err=1.0)
    assert signature_of(v, TestCase(program=SUB_CLAMP)).digest != signature_of(v, TestCase(program=ADD_TRIU)).digest


def test_a_cpp_compile_failure_keys_and_is_titled_by_the_compilers_error_line() -> None:
    v = Verdict(target="inductor", symptom=Symptom.CRASH, rung="inductor",
                exc_type="torch._inductor.exc.InductorError", exc_message=CPP_FAILURE)
    assert compiler_error_line(CPP_FAILURE) == "'<name>' was not declared in this scope; did you mean '<name>'?"
    title = issue_title(v, TestCase(program=SUB_CLAMP))
    assert "'tmp0_tail' was not declared in this scope" in title and title.startswith("[inductor]")
    other_paths = CPP_FAILURE.replace("cabc123", "cdef456").replace("17:52", "23:8")
    v2 = Verdict(target="inductor", symptom=Symptom.CRASH, rung="inductor",
                 exc_type="torch._inductor.exc.InductorError", exc_message=other_paths)
    assert signature_of(v, TestCase(program=SUB_CLAMP)).digest == signature_of(v2, TestCase(program=ADD_TRIU)).digest


def test_a_stale_state_title_names_the_state_change() -> None:
    v, case = _stale(SUB_CLAMP, CallStep(set_attrs={"scale": 2.5}))
    title = issue_title(v, case)
    assert "stale state after attribute (float)" in title and "call 1" in title


@pytest.mark.parametrize("message", ["index 7 is out of bounds for dimension 0 with size 3",
                                     "index 12 is out of bounds for dimension 1 with size 40"])
def test_crash_provisional_keys_ignore_numbers(message: str) -> None:
    v = Verdict(target="inductor", symptom=Symptom.CRASH, rung="inductor", exc_type="IndexError", exc_message=message)
    ref = Verdict(target="inductor", symptom=Symptom.CRASH, rung="inductor", exc_type="IndexError",
                  exc_message="index 1 is out of bounds for dimension 0 with size 2")
    assert provisional_key(v, TestCase(program=SUB_CLAMP)) == provisional_key(ref, TestCase(program=ADD_TRIU))



def test_a_failed_g_plus_plus_run_keeps_its_error_line_in_the_verdict_message():
    import subprocess

    from nnforge.oracle.job import _message
    from nnforge.triage.rootcause import compiler_error_line

    stderr = ("/c/k.cpp: In function 'void kernel(const float*, bool*)':\n"
              "/c/k.cpp:18:38: error: no match for 'operator+' (operand types are 'VecMask<float, 1>' and "
              "'VecMask<float, 1>')\n")
    e = subprocess.CalledProcessError(1, ["g++", "/c/k.cpp", "-O3"], output=stderr.encode())
    message = _message(e)
    assert message.startswith("Command '['g++'")  # the headline names only the command ...
    assert compiler_error_line(message) == "no match for 'operator+' (operand types are '<name>' and '<name>')"


def test_tvm_binding_variable_names_do_not_split_a_crash() -> None:
    """TVM numbers its Relax bindings (lv, lv24) by where the failing op sits in the graph."""
    template = ("Binary operators must have the same datatype for both operands.  However, "
                "R.subtract(R.const(1.0, \"float32\"), {var}) uses datatype T.float32 on the LHS (Type of "
                "R.Tensor((), dtype=\"float32\")), and datatype T.float16 on the RHS (Type of R.Tensor({shape}, "
                "dtype=\"float16\")).")
    keys = {provisional_key(Verdict(target="tvm", symptom=Symptom.CRASH, rung="tvm_frontend", exc_type="TypeError",
                                    exc_message=template.format(var=var, shape=shape)), TestCase(program=SUB_CLAMP))
            for var, shape in (("lv24", "(2, 5, 1, 1, 3)"), ("lv", "(15,)"))}
    assert len(keys) == 1
