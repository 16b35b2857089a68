"""Arrow arrays built and read without ``pa.array`` or ``to_numpy`` (pipeline/arrow.py), checked
against pyarrow's own conversions, whatever the values, chunks and slices."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from batchenum.pipeline.arrow import bools_to_numpy, from_list

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@given(st.lists(INT64))
def test_a_list_of_ints_is_the_array_pa_array_makes(values):
    built = from_list(values, pa.int64())
    assert built is not None and built.equals(pa.array(values, type=pa.int64()))


@given(st.lists(st.text()))
def test_a_list_of_strings_is_the_array_pa_array_makes(values):
    built = from_list(values, pa.string())
    assert built is not None and built.equals(pa.array(values, type=pa.string()))
    assert built.to_pylist() == values


def test_values_pa_array_must_judge_are_left_to_it():
    for values, arrow_type in (
        ([1, True], pa.int64()),  # a bool is an int to Python, not to a column of counts
        ([1, None], pa.int64()),
        ([2**63], pa.int64()),
        (["a", None], pa.string()),
        (["\ud800"], pa.string()),  # a lone surrogate has no UTF-8
        ([1.5], pa.float64()),
        ([1], pa.string()),
    ):
        assert from_list(values, arrow_type) is None, values


@given(st.lists(st.lists(st.booleans()), min_size=1), st.integers(0, 5), st.integers(0, 5))
def test_a_boolean_column_reads_as_its_values(chunks, start, cut):
    column = pa.chunked_array([pa.array(chunk, type=pa.bool_()) for chunk in chunks], type=pa.bool_())
    column = column.slice(min(start, len(column)), max(0, len(column) - start - cut))
    values = bools_to_numpy(column)
    assert values.dtype == bool and values.tolist() == column.to_pylist()
    for chunk in column.chunks:
        assert bools_to_numpy(chunk).tolist() == chunk.to_pylist()
