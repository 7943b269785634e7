"""Bitwise verification: the cases a fused kernel most plausibly gets subtly wrong."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sktune.verify import Mismatch, bitwise_equal, compare_outputs, flatten_outputs, ulp_distance

finite_f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
any_f32 = st.floats(width=32)


def f32_from_bits(bits: int) -> torch.Tensor:
    return torch.tensor([bits], dtype=torch.int32).view(torch.float32)


def test_nan_payload_difference_detected() -> None:
    a = f32_from_bits(0x7FC00000)
    b = f32_from_bits(0x7FC00001)
    assert math.isnan(a.item()) and math.isnan(b.item())
    assert not bitwise_equal(a, b)
    (m,) = compare_outputs([a], [b])
    assert (m.reason, m.count, m.first_index, m.max_ulp) == ("values", 1, (0,), 1)
    assert bitwise_equal(a, a.clone())


def test_negative_zero_detected() -> None:
    a = torch.tensor([1.0, 0.0])
    b = torch.tensor([1.0, -0.0])
    assert torch.equal(a, b)  # why bitwise comparison is needed at all
    assert not bitwise_equal(a, b)
    (m,) = compare_outputs([a], [b])
    assert (m.reason, m.count, m.first_index, m.max_ulp) == ("values", 1, (1,), 0)


def test_bf16_one_ulp_change() -> None:
    a = torch.linspace(-2.0, 3.0, 20).reshape(4, 5).to(torch.bfloat16)
    b = a.clone()
    bits = b.view(torch.int16)
    bits[2, 3] += 1
    bits[3, 1] -= 1
    assert not bitwise_equal(a, b)
    mismatches = compare_outputs((a,), (b,))
    assert mismatches == [Mismatch(0, 2, (2, 3), 1, "values", "2 of 20 elements differ")]
    assert ulp_distance(a, b).dtype == torch.int64
    assert int(ulp_distance(a, b).sum()) == 2


def test_float32_nextafter_is_one_ulp() -> None:
    x = torch.tensor([1.0, -1.0, 0.0, 3.4e38, 1e-45])
    y = torch.nextafter(x, torch.full_like(x, math.inf))
    assert ulp_distance(x, y).tolist() == [1, 1, 1, 1, 1]


def test_crossing_zero() -> None:
    smallest_neg = f32_from_bits(-0x7FFFFFFF)  # bits 0x80000001
    smallest_pos = f32_from_bits(1)
    assert smallest_neg.item() < 0 < smallest_pos.item()
    assert ulp_distance(smallest_neg, smallest_pos).item() == 2
    assert ulp_distance(torch.tensor([-0.0]), torch.tensor([0.0])).item() == 0


def test_float64_extremes_saturate_instead_of_wrapping() -> None:
    big = torch.finfo(torch.float64).max
    d = ulp_distance(torch.tensor([-big, 1.0], dtype=torch.float64), torch.tensor([big, -1.0], dtype=torch.float64))
    assert d[0].item() == torch.iinfo(torch.int64).max
    assert d[1].item() == 2 * 0x3FF0000000000000


def test_int_and_bool_tensors() -> None:
    a = torch.tensor([[1, 2], [3, 4]], dtype=torch.int32)
    b = torch.tensor([[1, 2], [7, 4]], dtype=torch.int32)
    assert ulp_distance(a, b).tolist() == [[0, 0], [4, 0]]
    (m,) = compare_outputs([a], [b])
    assert (m.reason, m.count, m.first_index, m.max_ulp) == ("values", 1, (1, 0), 4)
    extremes = torch.tensor([torch.iinfo(torch.int64).min], dtype=torch.int64)
    assert ulp_distance(extremes, -extremes - 1).item() == torch.iinfo(torch.int64).max
    t = torch.tensor([True, False])
    assert ulp_distance(t, ~t).tolist() == [1, 1]
    assert compare_outputs([t], [t.clone()]) == []


def test_shape_and_dtype_mismatch() -> None:
    a = torch.zeros(2, 3)
    (m,) = compare_outputs([a], [torch.zeros(3, 2)])
    assert m.reason == "shape" and m.output_index == 0
    assert not bitwise_equal(a, torch.zeros(3, 2))
    (m,) = compare_outputs([a, a], [a, a.double()])
    assert m.reason == "dtype" and m.output_index == 1
    assert not bitwise_equal(a, a.double())
    with pytest.raises(ValueError):
        ulp_distance(a, torch.zeros(3, 2))


def test_output_count_mismatch() -> None:
    a = torch.zeros(2)
    (m,) = compare_outputs([a, a], [a, a, a])
    assert (m.reason, m.output_index, m.count) == ("count", 2, 1)
    assert m.to_json()["reason"] == "count"


def test_non_contiguous_inputs_compare_by_value() -> None:
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    transposed = base.t()
    same = transposed.contiguous()
    assert not transposed.is_contiguous()
    assert bitwise_equal(transposed, same)
    assert compare_outputs([transposed], [same]) == []
    other = same.clone()
    other[1, 2] = 100.0
    (m,) = compare_outputs([transposed], [other])
    assert m.first_index == (1, 2)


def test_nested_flattening() -> None:
    a, b, c = torch.zeros(1), torch.ones(2), torch.full((3,), 2.0)
    flat = flatten_outputs((a, [b, (c,)], ()))
    assert [t.shape[0] for t in flat] == [1, 2, 3]
    assert flatten_outputs(a)[0] is a
    assert compare_outputs((a, [b, (c,)]), [a, b, c]) == []
    values = torch.return_types.max((torch.ones(2), torch.zeros(2, dtype=torch.int64)))
    assert len(flatten_outputs(values)) == 2
    # A dict's values in its order (a Hugging Face ModelOutput is a dict).
    assert [t.shape[0] for t in flatten_outputs({"logits": c, "hidden": (a, b)})] == [3, 1, 2]


@pytest.mark.parametrize("bad", [None, 1.5, {"x": None}])
def test_non_tensor_output_raises(bad: object) -> None:
    with pytest.raises(TypeError, match="NoneType" if isinstance(bad, dict) else type(bad).__name__):
        flatten_outputs((torch.zeros(1), bad))


def test_mismatch_json() -> None:
    m = Mismatch(1, 2, (0, 3), 5, "values")
    assert m.to_json() == {"output_index": 1, "count": 2, "first_index": [0, 3], "max_ulp": 5, "reason": "values", "detail": ""}


@settings(max_examples=200, deadline=None)
@given(st.lists(any_f32, min_size=1, max_size=16), st.data())
def test_ulp_zero_on_self_and_symmetric(xs: list[float], data: st.DataObject) -> None:
    ys = data.draw(st.lists(any_f32, min_size=len(xs), max_size=len(xs)))
    a = torch.tensor(xs, dtype=torch.float32)
    b = torch.tensor(ys, dtype=torch.float32)
    assert ulp_distance(a, a).eq(0).all()
    assert torch.equal(ulp_distance(a, b), ulp_distance(b, a))
    assert ulp_distance(a, b).ge(0).all()


@settings(max_examples=300, deadline=None)
@given(finite_f32)
def test_nextafter_is_one_ulp(x: float) -> None:
    t = torch.tensor([x], dtype=torch.float32)
    assert ulp_distance(t, torch.nextafter(t, torch.tensor([math.inf]))).item() == 1


@settings(max_examples=100, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_nextafter_is_one_ulp_float64(x: float) -> None:
    t = torch.tensor([x], dtype=torch.float64)
    down = torch.nextafter(t, torch.tensor([-math.inf], dtype=torch.float64))
    assert ulp_distance(down, t).item() == 1
