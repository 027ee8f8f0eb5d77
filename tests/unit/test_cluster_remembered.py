"""The peers' bindings a node remembers across a restart (cluster/remembered.py)."""

from __future__ import annotations

from petrel.cluster import remembered


def test_saved_bindings_load_back(tmp_path) -> None:
    path = tmp_path / remembered.FILE_NAME
    entries = [{"via": "n2", "key": "app.sub@n2", "remote_key": "app.sub", "name": "app.sub",
                "address": "events", "routing_type": 0, "filter": None, "origin": "n2", "distance": 1}]
    remembered.save(path, entries)
    assert remembered.load(path) == entries
    assert not path.with_name(path.name + ".tmp").exists()


def test_a_missing_or_damaged_file_means_nothing_remembered(tmp_path) -> None:
    path = tmp_path / remembered.FILE_NAME
    assert remembered.load(path) == []
    path.write_text("{not json")
    assert remembered.load(path) == []
