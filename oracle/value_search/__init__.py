"""Value search: inputs and weights for which no operator of a program yields NaN or Inf.

A test whose reference run produces NaN or Inf somewhere says little about the compiler under
test: NaN comparisons are vacuous, and a NaN that never reaches the output (argmax of a NaN
tensor, `where(mask, log(x), 0)`) still lets eager and compiled code disagree legitimately.
So before a test runs, we look for values that keep every intermediate finite.

The search works on any program, not only generated ones: every operator call is intercepted at
run time by a `TorchFunctionMode`. That level sees `torch.*` functions, `torch.nn.functional`
calls, tensor methods, operators (`a / b`), in-place calls and `x[i] = v`, each as one
user-visible operator, and it sits above autograd, so losses computed on an operator's inputs
can be differentiated back to the model's inputs and weights. (A `TorchDispatchMode` would see
the ATen decompositions instead: internal `-inf` fills of attention masks and the like, and
tensors with no autograd history.)

One iteration:
1. run the model under the interceptor; the first operator whose output is not finite is the
   culprit (its inputs were finite, or an earlier operator would have been the culprit);
2. take an Adam step on the culprit's safe-domain loss (oracle/safe_domain.py), plus the losses
   of operators that were culprits before (so that repairing one does not break another);
   operators with zero gradient (floor, relu's flat side, clamp, casts, comparisons) pass the
   gradient straight through during this run (a clamp only where it would move its operand
   back into range; values exactly on a pole or zero divisor are pushed up, and down when no
   gradient leaves them upwards; operators with a pole, tan and divisors, reverse their slope
   when a descent through them gets stuck, to cross the pole, see safe_domain.PoleCrossing);
3. when there is no usable gradient, the loss stops falling, or `max_descent` steps from one
   start have not succeeded (two culprits that undo each other's repairs), resample instead;
   a step after which an operator *before* the culprit fails (it overshot into another
   operator's forbidden region) is taken back and retried with integer inputs held (if one of
   them moved), else at half the length; steps double while the loss falls steadily but
   slowly, or stays exactly level on the plateau of a step function (the domain is far away:
   y must reach 57 for int8(y / 57) >= 1, x must fall to -100 for -x // 100 >= 1), and a lengthened
   step after which the loss rises (it overshot a narrow domain) is taken back and shortened.

Low-precision tensors are optimised through a float32 master copy; shapes, dtypes and strides
of the inputs never change. Integer inputs (generated programs feed them straight into log,
acos, division) are optimised too: a float master, rounded into the values' original range
(widened when they are all equal, as a lone scalar's are, and further for gradient steps than
for draws, see `slots.int_reach`; a narrow result that wraps is judged on the unwrapped side, see
`intercept._valued`), is what Adam moves; the operators
see a float "shadow" equal to the integers, with the master's gradient (every integer result
downstream gets one too, equal to its own values: `x ^ x` reads 0, not x). Shadows pass through
integer-only operators too (bitwise ops and shifts move with their operand, `~x` as `-x - 1`),
through zero-gradient ones (sign, clamp) straight through, and through operators with several
results (cummax, sort). Integer inputs are resampled from sub-ranges that domains favour
(positives, {-1, 0, 1}, ones, zeros); boolean inputs are only resampled (at random, all set,
none set). Since one joint draw rarely suits several such inputs at once, a resampling is
followed by a sweep: one discrete input at a time, each sub-range is tried and the draw that
gets furthest through the program (then leaves fewest non-finite elements) is kept.

The parts, one job each:
- `search.py`: `ValueSearch`, the frozen configuration (every tuning constant) and `run`;
- `run.py`: `SearchRun`, one search's loop (descend, take back, lengthen, cross, redraw);
- `intercept.py`: the `TorchFunctionMode`s that find the culprit and rewire gradients;
- `slots.py`: the values being searched (float/integer masters, boolean inputs) and restoring them;
- `descent.py`, `resample.py`, `sweep.py`: the three strategies, gradient steps, fresh draws
  and one-input-at-a-time sweeps;
- `result.py`: `SearchResult`, one run's `Outcome`, `FAILURE_CLASSES`;
- `diagnose.py`: one-shot checks and the slow probe for culprits no values can repair.
"""

from nnforge.oracle.value_search.diagnose import checked_call, diagnose, diagnose_program, first_nonfinite
from nnforge.oracle.value_search.result import FAILURE_CLASSES, SearchResult
from nnforge.oracle.value_search.search import ValueSearch

__all__ = ["SearchResult", "ValueSearch", "first_nonfinite", "checked_call", "diagnose", "diagnose_program",
           "FAILURE_CLASSES"]
