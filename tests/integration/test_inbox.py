"""Inbox rules: stored once, many inboxes, malformed input refused with nothing stored."""

from __future__ import annotations

import pytest

from tests.conftest import T0
from wakeful.core.errors import InvalidInput
from wakeful.core.settings import MAX_PAYLOAD_BYTES
from wakeful.core.store import Store
from wakeful.devtools.audit import count_events


def test_a_delivery_is_stored_once_and_the_repeat_reports_duplicate(store: Store) -> None:
    first = store.ingest("T1:U1", "slack", "Ev1", {"text": "hi"}, T0)
    again = store.ingest("T1:U1", "slack", "Ev1", {"text": "hi"}, T0 + 1)
    assert first.stored and not first.duplicate
    assert again.duplicate and not again.stored
    assert [e.source_id for e in store.events("T1:U1")] == ["Ev1"]


def test_the_same_source_id_from_another_source_is_another_event(store: Store) -> None:
    store.ingest("T1:U1", "slack", "42", {}, T0)
    assert store.ingest("T1:U1", "webhook", "42", {}, T0).stored
    assert len(store.events("T1:U1")) == 2


def test_key_is_global_so_a_repeat_into_another_inbox_is_still_a_duplicate(store: Store) -> None:
    store.ingest("T1:U1", "slack", "Ev1", {}, T0)
    assert store.ingest("T1:U2", "slack", "Ev1", {}, T0).duplicate
    assert store.events("T1:U2") == []


def test_many_inboxes_in_one_store_are_kept_apart(store: Store) -> None:
    for u in range(5):
        for i in range(3):
            store.ingest(f"T1:U{u}", "slack", f"Ev{u}-{i}", {"i": i}, T0 + i)
    for u in range(5):
        events = store.events(f"T1:U{u}")
        assert [e.payload["i"] for e in events] == [0, 1, 2]
        assert {e.inbox for e in events} == {f"T1:U{u}"}


def test_payload_round_trips_unicode_and_sql_looking_text(store: Store) -> None:
    payload = {"text": "Robert'); DROP TABLE events;-- ✓ 日本語 \u0000 🎉", "n": [1, 2.5, None]}
    store.ingest("T1:U1", "slack", "Ev-odd", payload, T0)
    # Everything but the NUL, which both stores keep as U+FFFD (PostgreSQL cannot hold it).
    kept = {**payload, "text": payload["text"].replace("\u0000", "\ufffd")}
    assert store.events("T1:U1")[0].payload == kept


@pytest.mark.parametrize(
    ("inbox", "source", "source_id", "payload", "message"),
    [
        ("T1:U1", "", "Ev1", {}, "source"),
        ("T1:U1", "slack", "", {}, "source_id"),
        ("", "slack", "Ev1", {}, "inbox"),
        ("T1:U1", "slack", "Ev1", {"x": {1, 2}}, "JSON"),
        ("T1:U1", "slack", "Ev1", {"x": float("nan")}, "JSON"),
        ("T1:U1", "slack", "Ev1", {"x": "y" * MAX_PAYLOAD_BYTES}, "cap"),
    ],
)
def test_malformed_input_is_a_value_error_and_stores_nothing(
    store: Store, inbox: str, source: str, source_id: str, payload: object, message: str
) -> None:
    store.ingest("T1:U1", "slack", "before", {"keep": True}, T0)
    with pytest.raises(ValueError, match=message) as info:
        store.ingest(inbox, source, source_id, payload, T0)
    assert isinstance(info.value, InvalidInput)
    assert count_events(store) == 1
    assert store.events("T1:U1")[0].payload == {"keep": True}


def test_payload_just_under_the_cap_is_accepted(store: Store) -> None:
    text = "y" * (MAX_PAYLOAD_BYTES - len('{"x":""}'))
    assert store.ingest("T1:U1", "slack", "big", {"x": text}, T0).stored
