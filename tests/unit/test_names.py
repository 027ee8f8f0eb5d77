"""The rules for queue and address names (petrel.core.names), on any text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from petrel.core.names import MAX_NAME_BYTES, InvalidName, check_name, name_problem
from petrel.core.errors import RoutingError


@pytest.mark.parametrize("name", ["orders", "orders.eu", "$.petrel.sf.c.n", "a-b_c/d:e", "ünïcødé.名前",
                                  "x" * MAX_NAME_BYTES, "DLQ", "client-1.sub-1"])
def test_good_names(name):
    assert name_problem(name) is None
    check_name("queue", name)


@pytest.mark.parametrize(("name", "problem"), [
    ("", "needs a name"),
    ("a.#", "wildcard character '#'"),
    ("news.eu*", "wildcard character '*'"),
    ("a..b", "empty word"),
    (".a", "empty word"),
    ("a.", "empty word"),
    ("x\0y", "control character"),
    ("x\x7fy", "control character"),
    ("line\nbreak", "control character"),
    ("x" * (MAX_NAME_BYTES + 1), "over the 255-byte limit"),
    ("é" * 128, "256 bytes long"),  # bytes, not characters
])
def test_bad_names(name, problem):
    with pytest.raises(InvalidName, match=problem) as caught:
        check_name("address", name)
    assert isinstance(caught.value, RoutingError)  # every protocol turns it into its error


def test_a_temporary_queue_has_room_for_its_subscription_id():
    name = "t" * MAX_NAME_BYTES + ".0b7a9bb4-3e51-4bd2-9b2e-5b1e4c0c3f5e"
    check_name("queue", name, temporary=True)
    with pytest.raises(InvalidName):
        check_name("queue", name)


@given(st.text(max_size=300))
def test_any_text_is_accepted_or_refused_with_a_reason(name):
    problem = name_problem(name)
    bad = (not name or len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES
           or any(c in name for c in "#*") or any(ord(c) < 32 or ord(c) == 127 for c in name)
           or name.startswith(".") or name.endswith(".") or ".." in name)
    assert (problem is not None) == bad
    if bad:
        with pytest.raises(InvalidName):
            check_name("queue", name)
