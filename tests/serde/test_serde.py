"""Fingerprints and stored JSON texts never change with how they are encoded.

A fingerprint is part of every checkpoint key: if the text it hashes changed between
versions, a store written by one version would stop replaying under the next.
"""

from __future__ import annotations

import json

import hypothesis
import pytest

from spanpoint import serde

VALUES = [
    {"__map__": [["b", 1.5], ["a", 'é"\n\t\u2028'], ["c", [None, True, False, 10**30, -0.0]]]},
    "plain",
    "",
    3,
    -2.5e-9,
    None,
    [],
    {},
    {"z": {"y": [1, {"x": "ü", "a": ["😀"]}]}, "a": 0},
]


@pytest.mark.parametrize("value", VALUES)
def test_the_stable_text_is_json_with_sorted_keys_compact_and_unescaped(value: object) -> None:
    expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert serde._stable_json(value) == expected


@pytest.mark.parametrize("value", VALUES)
def test_json_text_is_json_dumps(value: object) -> None:
    assert serde.json_text(value) == json.dumps(value)


def test_a_fingerprint_is_pinned() -> None:
    # Typed fingerprints (issue 17) changed every key once; a change here means every stored
    # key changes with it (say so in docs/design-notes.md, as "Typed fingerprints" does).
    assert serde.fingerprint({"ticket": 42, "tags": ["a", "b"], "note": "é"}) == (
        "a1eef149c4f0ed4ae8303c3f3507a63f195b1b67cbf1b43bc26fdbe968cd6cbc"
    )


def test_unencodable_values_are_a_type_error() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        serde._stable_json({"a": object()})


# A flat mapping of plain values (a step's arguments) takes a shorter path to its digest
# (serde.fingerprint): it must hash exactly the text the general canonical view hashes.
FLAT = [
    {},
    {"i": 1},
    {"ticket": 42, "status": "open", "priority": 2.5, "urgent": True, "owner": None},
    {"nan": float("nan"), "inf": float("-inf"), "zero": -0.0, "big": 10**30},
    {"surrogate": "x\ud800", "é": "ü\u2028"},
    {"b": 1, "a": True},
]


@pytest.mark.parametrize("value", FLAT)
def test_a_flat_mapping_hashes_its_canonical_view(value: dict[str, object]) -> None:
    general = serde.text_digest(serde._stable_json(serde.canonical(value)))
    assert serde.fingerprint(value) == general


def test_a_flat_mapping_fingerprint_is_pinned() -> None:
    # The value the general path gave before the flat-mapping path existed (issue 18 item 4).
    assert (
        serde.fingerprint(
            {"ticket": 42, "status": "open", "priority": 2.5, "urgent": True, "owner": None}
        )
        == "eed3c35180752cd6444428fa84d263f91b1fd8c45165a176f523f188c3988cf7"
    )


@hypothesis.settings(max_examples=300, deadline=None, derandomize=True)
@hypothesis.given(
    hypothesis.strategies.recursive(
        hypothesis.strategies.integers(),
        lambda inner: (
            hypothesis.strategies.lists(inner)
            | hypothesis.strategies.dictionaries(hypothesis.strategies.text(), inner)
            | hypothesis.strategies.dictionaries(hypothesis.strategies.integers(), inner)
            | hypothesis.strategies.lists(inner).map(tuple)
        ),
        max_leaves=12,
    )
)
def test_ints_of_any_size_read_back_exactly(value: object) -> None:
    # msgpack holds 64 bits; a wider int is still an output that must replay as itself.
    tag, data = serde.dumps(value)
    back = serde.loads(tag, data)
    assert back == value and type(back) is type(value)
    assert serde.dumps(back) == (tag, data)


def test_a_stored_int_that_is_not_a_number_is_corrupt_not_a_crash() -> None:
    forged = serde._ext(serde._EXT_ONE_ARG, "builtins", "int", "twelve")
    tag, data = serde._writer().dumps_typed([forged])
    with pytest.raises(serde.CorruptCheckpointError):
        serde.loads(tag, data)
