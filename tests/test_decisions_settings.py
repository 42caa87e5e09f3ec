"""The settings rules at their boundaries: what counts as a boolean, a whole number in
range, a quantity, a list (`_typed`, one row of `KEYS`), and the rules across keys; each
wrong value is one problem naming the setting and the fix."""

from __future__ import annotations

from typing import Any

from infra.settings import KEYS, _typed, quantity_amount


def typed(kind: tuple, value: Any) -> tuple[Any, list[str]]:
    problems: list[str] = []
    return _typed(kind, value, problems.append), problems


def test_booleans_are_true_or_false_and_nothing_else() -> None:
    for value, expected in ((True, True), (False, False), ("TRUE", True), (" false ", False)):
        assert typed(("bool",), value) == (expected, [])
    assert typed(("bool",), "yes") == (False, ["'yes' is not a boolean; use true or false"])


def test_whole_numbers_in_range_including_both_ends() -> None:
    kind = ("int", 1, 8, " workers")
    for value in (1, 8, "8 "):
        assert typed(kind, value)[1] == [], value
    assert typed(kind, 9) == (9, ["9 is out of range; use 1..8 workers"])
    assert typed(kind, 0) == (0, ["0 is out of range; use 1..8 workers"])
    # A YAML boolean is not a number, though Python's int(True) is 1.
    assert typed(kind, True) == (1, ["'True' is not a whole number; use an integer 1..8"])


def test_quantities_must_be_positive_and_reach_the_minimum() -> None:
    assert quantity_amount("0") == 0.0 and quantity_amount("500m") == 0.5
    assert quantity_amount("-1") is None and quantity_amount("lots") is None
    assert typed(("quantity", 0, ""), "500m") == ("500m", [])
    assert typed(("quantity", 0, " for the cache"), "0") == (
        "0", ["'0' is too small for the cache"])


def test_lists_are_lists_of_strings_and_empty_text_is_an_empty_list() -> None:
    assert typed(("list",), "") == ((), [])
    assert typed(("list",), '[" a ", "b"]') == (("a", "b"), [])
    assert typed(("list",), "[1]") == ((), [
        "must be a list of strings; in Pulumi.<stack>.yaml write a YAML list, or run "
        "`pulumi config set --path '<key>[0]' <value>`"])


def test_every_key_has_a_kind_the_reader_knows() -> None:
    assert {kind[0] for kind in KEYS.values()} == {
        "bool", "int", "str", "list", "levels", "choice", "quantity"}
