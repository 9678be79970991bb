"""Domain: formats, codec, reasons that never show a value."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpsynth.errors import ConfigError, SchemaError
from dpsynth.tabular.domain import Domain

SPEC = {"version": 1, "name": "demo", "attributes": [
    {"name": "sex", "categories": ["F", "M"]},
    {"name": "age10", "size": 10},
    {"name": "race", "categories": ["a", "b", "c"]},
]}


def test_round_trip_and_properties(tmp_path):
    dom = Domain.from_dict(SPEC)
    assert dom.attributes == ("sex", "age10", "race")
    assert dom.sizes == (2, 10, 3)
    assert dom.n_cells == 60
    path = tmp_path / "d.json"
    path.write_text(json.dumps(dom.to_dict()))
    assert Domain.from_json_file(path) == dom
    assert Domain.from_dict(dom.to_dict()).digest() == dom.digest()


def test_liu_size_map_keeps_order():
    dom = Domain.from_dict({"b": 3, "a": 2})
    assert dom.attributes == ("b", "a") and dom.sizes == (3, 2)


def test_encode_labels_codes_and_reasons():
    dom = Domain.from_dict(SPEC)
    records = [
        {"sex": "M", "age10": 3, "race": "c"},
        {"sex": 0, "age10": "7", "race": 1, "extra": "ignored"},
        {"sex": "Q-secret-value", "age10": 1, "race": "a"},
        {"sex": "F", "age10": 99, "race": "a"},
        {"sex": "F", "race": "a"},
        {"sex": "F", "age10": True, "race": "a"},
        "not a record",
    ]
    codes, reasons = dom.encode(records)
    assert codes.tolist() == [[1, 3, 2], [0, 7, 1]]
    assert codes.dtype == np.int64
    assert reasons[:2] == [None, None]
    assert reasons[2] == "attribute 'sex': unknown category"
    assert reasons[3] == "attribute 'age10': code out of range [0, 10)"
    assert reasons[4] == "attribute 'age10': missing"
    assert "age10" in reasons[5]
    assert reasons[6].startswith("record must be")
    assert all("secret" not in r and "99" not in r for r in reasons if r)
    assert dom.decode(codes) == [{"sex": "M", "age10": 3, "race": "c"},
                                 {"sex": "F", "age10": 7, "race": "b"}]


def test_encode_empty_has_shape():
    codes, reasons = Domain.from_dict(SPEC).encode([])
    assert codes.shape == (0, 3) and reasons == []


@pytest.mark.parametrize("bad", [
    {"version": 1, "attributes": []},
    {"version": 1, "attributes": [{"name": "a", "size": 2}, {"name": "a", "size": 3}]},
    {"version": 1, "attributes": [{"name": "a", "size": 0}]},
    {"version": 1, "attributes": [{"name": "a", "size": 2, "categories": ["x", "y"]}]},
    {"version": 1, "attributes": [{"name": "a", "categories": ["x", "x"]}]},
    {"version": 2, "attributes": [{"name": "a", "size": 2}]},
    {"version": 1, "attributes": [{"name": "a", "size": 2}], "typo": 1},
    {"a": "2"},
])
def test_bad_domains_are_refused(bad):
    with pytest.raises(ConfigError):
        Domain.from_dict(bad)


def test_check_codes_names_attribute_not_value():
    dom = Domain.from_dict(SPEC)
    with pytest.raises(SchemaError, match="attribute 'race'") as info:
        dom.check_codes(np.array([[0, 0, 7]]))
    assert "7" not in str(info.value).replace("[0, 3)", "")
    with pytest.raises(SchemaError, match="shape"):
        dom.check_codes(np.zeros((2, 2), np.int64))


def test_unreadable_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        Domain.from_json_file(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        Domain.from_json_file(tmp_path / "bad.json")
