"""The declared domain: validation, per-column clip counts, bad input, round trips (DESIGN §3)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from dpsynth.errors import ConfigError, SchemaError
from dpsynth.schema import ClipReport, Column, Schema

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
CHECKINS = {
    "version": 1,
    "columns": [
        {"name": "lat", "lower": 40.5, "upper": 40.95},
        {"name": "lon", "lower": -74.3, "upper": -73.7},
    ],
}
# a value no message may ever show: recognisable in any formatting
SECRET = 40.123456789


@pytest.fixture
def schema() -> Schema:
    return Schema.from_dict(CHECKINS)


# ---- declaration ---------------------------------------------------------------------------


def test_from_dict_builds_columns_in_order(schema: Schema) -> None:
    assert schema.d == 2
    assert schema.names == ("lat", "lon")
    assert schema.columns[1] == Column("lon", -74.3, -73.7)
    assert schema.version == 1


def test_to_dict_round_trips(schema: Schema) -> None:
    assert schema.to_dict() == CHECKINS
    assert Schema.from_dict(schema.to_dict()) == schema
    named = Schema(schema.columns, name="checkins")
    assert Schema.from_dict(named.to_dict()) == named


def test_lower_above_upper_names_column_and_bounds() -> None:
    with pytest.raises(ConfigError) as info:
        Column("age", 90, 18)
    assert str(info.value).startswith("column 'age': bounds (90, 18) must satisfy lower < upper")


def test_equal_bounds_rejected() -> None:
    with pytest.raises(ConfigError, match="lower < upper"):
        Column("x", 1.0, 1.0)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_bounds_rejected(bad: float) -> None:
    with pytest.raises(ConfigError, match="column 'x': lower .* must be a finite number"):
        Column("x", bad, 1.0)
    with pytest.raises(ConfigError, match="column 'x': upper .* must be a finite number"):
        Column("x", 0.0, bad)


def test_infinite_width_rejected() -> None:
    with pytest.raises(ConfigError, match="finite width"):
        Column("x", -1e308, 1e308)


@pytest.mark.parametrize("bad", ["0", None, True])
def test_non_numeric_bounds_rejected(bad: object) -> None:
    with pytest.raises(ConfigError, match="must be a finite number"):
        Column("x", bad, 1.0)  # type: ignore[arg-type]


def test_empty_name_rejected() -> None:
    with pytest.raises(ConfigError, match="non-empty string"):
        Column("", 0, 1)


def test_empty_columns_rejected() -> None:
    with pytest.raises(ConfigError, match="at least one column"):
        Schema(())
    with pytest.raises(ConfigError, match="at least one column"):
        Schema.from_dict({"version": 1, "columns": []})


def test_duplicate_names_rejected() -> None:
    with pytest.raises(ConfigError, match="column name 'a' must be unique"):
        Schema((Column("a", 0, 1), Column("b", 0, 1), Column("a", 0, 2)))


def test_unknown_version_rejected() -> None:
    with pytest.raises(ConfigError, match=r"schema `version` \(2\) must be one of \(1,\)"):
        Schema.from_dict({**CHECKINS, "version": 2})


def test_from_dict_refuses_typos() -> None:
    with pytest.raises(ConfigError, match="schema keys \\['colums'\\]"):
        Schema.from_dict({"version": 1, "colums": []})
    bad_column = {"version": 1, "columns": [{"name": "x", "lower": 0, "uper": 1}]}
    with pytest.raises(ConfigError, match=r"missing \['upper'\], unknown \['uper'\]"):
        Schema.from_dict(bad_column)


def test_from_json_file_reads_the_example() -> None:
    assert Schema.from_json_file(SCHEMAS / "example-schema.json") == Schema.from_dict(CHECKINS)


def test_from_json_file_reports_invalid_json(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"version": 1, "columns": [', encoding="utf-8")
    with pytest.raises(ConfigError, match="must be valid JSON"):
        Schema.from_json_file(path)


def test_example_and_to_dict_validate_against_the_json_schema(schema: Schema) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    meta = json.loads((SCHEMAS / "record-schema.v1.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(meta)
    validator = jsonschema.Draft202012Validator(meta)
    validator.validate(json.loads((SCHEMAS / "example-schema.json").read_text(encoding="utf-8")))
    validator.validate(schema.to_dict())
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({"version": 1, "columns": [{"name": "x", "lower": 0}]})


# ---- records -> points: mapping and clipping -----------------------------------------------


def test_to_unit_maps_affinely(schema: Schema) -> None:
    records = [
        {"lat": 40.5, "lon": -74.3},
        {"lat": 40.95, "lon": -73.7},
        {"lat": 40.725, "lon": -74.0},
    ]
    points, clips = schema.to_unit(records)
    assert points.dtype == np.float64 and points.shape == (3, 2)
    np.testing.assert_allclose(points, [[0, 0], [1, 1], [0.5, 0.5]], rtol=0, atol=1e-12)
    assert clips.total == 0


def test_dicts_and_array_agree(schema: Schema) -> None:
    arr = np.array([[40.6, -74.1], [40.9, -73.8], [39.0, -70.0]])
    from_array, clips_a = schema.to_unit(arr)
    records = [{"lat": a, "lon": b, "user": "ignored"} for a, b in arr.tolist()]
    from_dicts, clips_d = schema.to_unit(records)
    np.testing.assert_array_equal(from_array, from_dicts)
    assert clips_a == clips_d


def test_clipping_is_counted_per_column(schema: Schema) -> None:
    records = [
        {"lat": 41.0, "lon": -74.0},  # lat above
        {"lat": 40.0, "lon": -75.0},  # lat below, lon below
        {"lat": 40.7, "lon": -73.0},  # lon above
        {"lat": 40.7, "lon": -73.7},  # on the bound: not clipped
        {"lat": 40.5, "lon": -74.0},  # on the bound: not clipped
    ]
    points, clips = schema.to_unit(records)
    assert clips == ClipReport(("lat", "lon"), (2, 2))
    assert clips.per_column == {"lat": 2, "lon": 2}
    assert clips.total == 4
    assert points[0, 0] == 1.0 and points[1].tolist() == [0.0, 0.0] and points[2, 1] == 1.0
    assert points.min() >= 0.0 and points.max() <= 1.0


def test_clip_reports_add_up(schema: Schema) -> None:
    _, a = schema.to_unit([{"lat": 99.0, "lon": -74.0}])
    _, b = schema.to_unit([{"lat": 99.0, "lon": 99.0}])
    assert (a + b).per_column == {"lat": 2, "lon": 1}
    with pytest.raises(ValueError, match="must match"):
        a + ClipReport(("x",), (1,))


def test_integers_and_numpy_scalars_accepted() -> None:
    schema = Schema((Column("age", 0, 100),))
    points, _ = schema.to_unit([{"age": 50}, {"age": np.int64(25)}, {"age": np.float32(75.0)}])
    assert points[:, 0].tolist() == [0.5, 0.25, 0.75]
    points, _ = schema.to_unit(np.array([[10], [20]], dtype=np.int32))
    assert points[:, 0].tolist() == [0.1, 0.2]


def test_huge_integer_is_clipped_not_rejected() -> None:
    schema = Schema((Column("age", 0, 100),))
    points, clips = schema.to_unit([{"age": 10**400}, {"age": -(10**400)}])
    assert points[:, 0].tolist() == [1.0, 0.0]
    assert clips.total == 2


def test_empty_batch(schema: Schema) -> None:
    points, clips = schema.to_unit([])
    assert points.shape == (0, 2) and clips.total == 0
    points, _ = schema.to_unit(np.empty((0, 2)))
    assert points.shape == (0, 2)


# ---- bad input -------------------------------------------------------------------------------

BAD_VALUES = [
    (math.nan, "must be finite"),
    (math.inf, "must be finite"),
    (-math.inf, "must be finite"),
    ("40.123456789", "must be a number, not str"),
    (None, "must be a number, not NoneType"),
    (True, "must be a number, not bool"),
    ([SECRET], "must be a number, not list"),
]


@pytest.mark.parametrize(("value", "rule"), BAD_VALUES)
def test_bad_value_raises_with_index_field_rule(schema: Schema, value: object, rule: str) -> None:
    records = [
        {"lat": 40.7, "lon": -74.0},
        {"lat": 40.8, "lon": -74.1},
        {"lat": SECRET, "lon": value},
    ]
    with pytest.raises(SchemaError) as info:
        schema.to_unit(records)
    message = str(info.value)
    assert message.startswith(f"record 2: field 'lon' {rule}")
    # privacy: neither the bad value nor any other value of the record appears
    assert "40.123" not in message and "True" not in message
    assert "nan" not in message and "inf" not in message.replace("±inf are rejected", "")


def test_missing_field_raises(schema: Schema) -> None:
    with pytest.raises(SchemaError, match="^record 1: field 'lon' is missing"):
        schema.to_unit([{"lat": 40.7, "lon": -74.0}, {"lat": SECRET}])


def test_first_bad_record_is_reported(schema: Schema) -> None:
    # record 1 is bad in lon, record 2 in lat: the lowest index wins, whatever the column
    records = [{"lat": 40.7, "lon": -74.0}, {"lat": 40.7}, {"lon": -74.0}]
    with pytest.raises(SchemaError, match="^record 1: field 'lon' is missing"):
        schema.to_unit(records)


def test_non_mapping_record_raises(schema: Schema) -> None:
    with pytest.raises(SchemaError, match="^record 0: record must be a mapping"):
        schema.to_unit([[SECRET, -74.0]])  # type: ignore[list-item]


def test_array_with_nan_or_inf_raises_without_value(schema: Schema) -> None:
    arr = np.array([[SECRET, -74.0], [40.7, np.inf]])
    with pytest.raises(SchemaError) as info:
        schema.to_unit(arr)
    assert str(info.value).startswith("record 1: field 'lon' must be finite")
    assert "40.123" not in str(info.value) and "inf," not in str(info.value)


def test_array_of_wrong_shape_raises(schema: Schema) -> None:
    with pytest.raises(SchemaError, match=r"shape \(4, 3\) must be \(n, 2\)"):
        schema.to_unit(np.zeros((4, 3)))
    with pytest.raises(SchemaError, match=r"shape \(4,\) must be \(n, 2\)"):
        schema.to_unit(np.zeros(4))


def test_array_of_strings_raises(schema: Schema) -> None:
    with pytest.raises(SchemaError, match="must be numeric"):
        schema.to_unit(np.array([["1", "2"]]))


def test_object_array_checked_value_by_value(schema: Schema) -> None:
    arr = np.array([[40.7, -74.0], [40.7, "x"]], dtype=object)
    with pytest.raises(SchemaError, match="^record 1: field 'lon' must be a number, not str"):
        schema.to_unit(arr)


def test_single_record_not_in_a_list_raises(schema: Schema) -> None:
    with pytest.raises(SchemaError, match="wrap a single record in a list"):
        schema.to_unit({"lat": 40.7, "lon": -74.0})  # type: ignore[arg-type]


def test_split_valid_lets_valid_rows_through_and_dead_letters_the_rest(schema: Schema) -> None:
    records = [
        {"lat": 40.7, "lon": -74.0},
        {"lat": SECRET},  # missing lon
        {"lat": 41.5, "lon": -74.0},  # clipped, valid
        {"lat": math.nan, "lon": "x"},  # two problems: the first column's is reported
        "not a record",
        {"lat": 40.6, "lon": -73.9},
    ]
    points, clips, rejects = schema.split_valid(records)  # type: ignore[arg-type]
    expected, _ = schema.to_unit([records[0], records[2], records[5]])  # type: ignore[list-item]
    np.testing.assert_array_equal(points, expected)
    assert clips.per_column == {"lat": 1, "lon": 0}  # rejected rows are not counted as clipped
    assert [i for i, _ in rejects] == [1, 3, 4]
    assert rejects[0][1] == "field 'lon' is missing"
    assert rejects[1][1] == "field 'lat' must be finite (NaN and ±inf are rejected)"
    assert rejects[2][1] == "record must be a mapping of field to number"
    assert all("40.123" not in reason for _, reason in rejects)


def test_split_valid_on_array(schema: Schema) -> None:
    arr = np.array([[40.7, -74.0], [np.nan, -74.0], [40.8, -73.8]])
    points, _, rejects = schema.split_valid(arr)
    assert points.shape == (2, 2)
    assert rejects == [(1, "field 'lat' must be finite (NaN and ±inf are rejected)")]


# ---- points -> records -----------------------------------------------------------------------


def test_round_trip_is_identity_for_in_bounds_data(schema: Schema) -> None:
    rng = np.random.default_rng(7)
    lower, upper = np.array([40.5, -74.3]), np.array([40.95, -73.7])
    values = lower + rng.random((1000, 2)) * (upper - lower)
    values[:2] = [lower, upper]  # the bounds themselves
    points, clips = schema.to_unit(values)
    assert clips.total == 0
    back = schema.from_unit(points)
    assert back.shape == (1000, 2)
    np.testing.assert_allclose(back, values, rtol=0, atol=1e-12)
    assert back[0].tolist() == [40.5, -74.3] and back[1].tolist() == [40.95, -73.7]


def test_round_trip_wide_bounds() -> None:
    schema = Schema((Column("income", 0, 1e6), Column("delta", -5.0, 5.0)))
    rng = np.random.default_rng(8)
    values = np.column_stack([rng.random(500) * 1e6, rng.random(500) * 10 - 5])
    back = schema.from_unit(schema.to_unit(values)[0])
    np.testing.assert_allclose(back, values, rtol=1e-12, atol=1e-12)


def test_from_unit_endpoints_and_shape(schema: Schema) -> None:
    back = schema.from_unit(np.array([[0.0, 1.0], [0.5, 0.5]]))
    assert back[0].tolist() == [40.5, -73.7]
    np.testing.assert_allclose(back[1], [40.725, -74.0], rtol=0, atol=1e-12)
    with pytest.raises(SchemaError, match=r"points shape \(2, 3\) must be \(n, 2\)"):
        schema.from_unit(np.zeros((2, 3)))


def test_records_from_unit(schema: Schema) -> None:
    records = [{"lat": 40.6, "lon": -74.2}, {"lat": 40.9, "lon": -73.8}]
    back = schema.records_from_unit(schema.to_unit(records)[0])
    assert [set(r) for r in back] == [{"lat", "lon"}] * 2
    assert all(type(v) is float for r in back for v in r.values())
    for got, want in zip(back, records, strict=True):
        assert got == pytest.approx(want, abs=1e-12)
