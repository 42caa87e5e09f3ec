"""The config reader's rules at their boundaries: what counts as a boolean, a whole number
in range, a quantity, a list; each wrong value is one problem naming the setting."""

from __future__ import annotations

from typing import Any

from infra.settings import ConfigReader, quantity_amount


def reader(value: Any) -> ConfigReader:
    return ConfigReader({} if value is None else {"p:k": value}, "p")


def test_booleans_are_true_or_false_and_nothing_else() -> None:
    for value, expected in ((True, True), (False, False), ("TRUE", True), (" false ", False)):
        r = reader(value)
        assert r.boolean("k") is expected and r.problems == []
    r = reader("yes")
    assert r.boolean("k") is False
    assert r.problems == ["p:k: 'yes' is not a boolean; use true or false"]
    missing = reader(None)
    assert missing.boolean("k") is False and len(missing.problems) == 1


def test_whole_numbers_in_range_including_both_ends() -> None:
    for value in (1, 8, "8 "):
        r = reader(value)
        r.integer("k", 1, 8)
        assert r.problems == [], value
    r = reader(9)
    assert r.integer("k", 1, 8) == 9
    assert r.problems == ["p:k: 9 is out of range; use 1..8"]
    r = reader(True)
    assert r.integer("k", 1, 8) == 1
    assert r.problems == ["p:k: 'True' is not a whole number; use an integer 1..8"]


def test_quantities_must_be_positive_and_reach_the_minimum() -> None:
    assert quantity_amount("0") == 0.0 and quantity_amount("500m") == 0.5
    assert quantity_amount("-1") is None and quantity_amount("lots") is None
    r = reader("500m")
    r.quantity("k")
    assert r.problems == []
    r = reader("0")
    r.quantity("k", what=" for the cache")
    assert r.problems == ["p:k: '0' is too small for the cache"]


def test_lists_are_lists_of_strings_and_empty_text_is_an_empty_list() -> None:
    r = reader("")
    assert r.string_list("k") == () and r.problems == []
    r = reader('[" a ", "b"]')
    assert r.string_list("k") == ("a", "b") and r.problems == []
    r = reader("[1]")
    assert r.string_list("k") == ()
    assert r.problems == ["p:k: must be a list of strings; in Pulumi.<stack>.yaml write a "
                          "YAML list, or run `pulumi config set --path 'k[0]' <value>`"]
