"""One record per operator holds what it does to values; every reader takes it from there."""

import math

import pytest
import torch

from nnforge.generator import numerics as N
from nnforge.generator.spec import all_ops
from nnforge.oracle.safe_domain import MARGIN, SAFE_DOMAIN, LossMode


def test_every_record_names_an_operator_spec():
    no_spec = {"ndtri"}  # value search meets it in programs from other sources
    assert set(N.NUMERICS) - set(all_ops()) == no_spec


def test_a_record_is_given_once_and_only_with_known_facts():
    with pytest.raises(ValueError):
        N._op("log", monotone=N.UP)
    with pytest.raises(TypeError):
        N._op("no_such_op", shiny=True)
    assert "no_such_op" not in N.NUMERICS


def test_the_safe_domain_loss_of_an_op_is_zero_inside_its_domain_and_positive_outside():
    for name, r in N.NUMERICS.items():
        if r.domain is None or r.poles is not None:
            continue
        lo, hi = r.domain.lo, r.domain.hi
        inside = (max(lo, -4.0) + min(hi, 4.0)) / 2 if math.isfinite(lo) or math.isfinite(hi) else 0.0
        outside = [b + d for b, d in ((lo, -0.5), (hi, 0.5)) if math.isfinite(b)]
        loss = SAFE_DOMAIN[name]
        x = torch.tensor([inside])
        assert float(loss((x,), {}, torch.float32, LossMode())) == 0.0, name
        for v in outside:
            assert float(loss((torch.tensor([v]),), {}, torch.float32, LossMode())) > 0.0, (name, v)
        if r.domain.lo_open and math.isfinite(lo):  # an open end is kept a margin away
            assert float(loss((torch.tensor([lo + MARGIN / 2]),), {}, torch.float32, LossMode())) > 0.0, name


def test_poles_are_what_the_losses_push_away_from():
    for name in N.ops_where(poles=N.present):
        loss = SAFE_DOMAIN[name]
        assert float(loss((torch.tensor([0.0]),), {}, torch.float32, LossMode())) > 0.0, name
        assert float(loss((torch.tensor([0.5]),), {}, torch.float32, LossMode())) == 0.0, name
    gamma = N.ops_where(poles="gamma")
    assert gamma == {"lgamma", "digamma"}
    for name in gamma:  # every negative integer too, but not what lies between
        assert float(SAFE_DOMAIN[name]((torch.tensor([-2.0]),), {}, torch.float32, LossMode())) > 0.0
        assert float(SAFE_DOMAIN[name]((torch.tensor([-1.5]),), {}, torch.float32, LossMode())) == 0.0


def test_elements_kept_are_one_relation_read_by_value_facts_and_the_chain_check():
    from nnforge.generator import pointwise

    assert pointwise.ELEMENT_PRESERVING == N.ops_where(elements=N.REARRANGES)
    assert pointwise.ELEMENT_SUBSET == N.ops_where(elements=N.SUBSET)
    assert not (N.ops_where(elements=N.REARRANGES) & N.ops_where(elements=N.SUBSET))


def test_monotone_maps_agree_with_torch_where_finite():
    probes = torch.tensor([-3.0, -1.0, -0.4, 0.0, 0.2, 0.9, 1.5, 4.0], dtype=torch.float64)
    for name, r in N.NUMERICS.items():
        if r.fn is None or not hasattr(torch, name):
            continue
        want = getattr(torch, name)(probes)
        for p, w in zip(probes.tolist(), want.tolist()):
            if math.isfinite(w) and (r.domain is None or r.domain.lo <= p <= r.domain.hi):
                assert math.isclose(r.fn(p), w, rel_tol=1e-6, abs_tol=1e-9), (name, p)
