"""The users file: scrypt hashes, TOML round trip, re-reading a changed file (petrel.security.users)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from petrel.errors import ConfigError
from petrel.security.subject import Subject
from petrel.security.users import UserStore, hash_password, verify_password


def test_hash_round_trip_and_wrong_password() -> None:
    stored = hash_password("s3cret")
    assert stored.startswith("scrypt$") and "s3cret" not in stored
    assert verify_password("s3cret", stored)
    assert not verify_password("s3cret ", stored)
    assert not verify_password("", stored)
    assert hash_password("s3cret") != stored  # a new salt each time


@pytest.mark.parametrize("stored", ["", "plain", "scrypt$x$8$1$AA==$AA==", "md5$1$2$3$4$5", "scrypt$16384$8$1$!!$AA=="])
def test_a_malformed_hash_verifies_nothing(stored: str) -> None:
    assert not verify_password("anything", stored)


def test_save_load_authenticate(tmp_path: Path) -> None:
    path = tmp_path / "etc" / "users.toml"
    store = UserStore(path)
    store.add("alice", "wonder", ["app", "audit"])
    store.add('bob "the" builder', "pw", [])
    assert store.save()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert "wonder" not in text and "scrypt$" in text

    again = UserStore.load(path)
    assert again.authenticate("alice", "wonder") == Subject("alice", frozenset({"app", "audit"}))
    assert again.authenticate("alice", "wrong") is None
    assert again.authenticate("nobody", "wonder") is None
    assert again.authenticate('bob "the" builder', "pw") == Subject('bob "the" builder', frozenset())
    assert again.roles_of("alice") == frozenset({"app", "audit"})
    assert again.roles_of("nobody") == frozenset()


def test_a_verified_password_is_remembered_until_it_changes(tmp_path: Path) -> None:
    store = UserStore(tmp_path / "users.toml")
    store.add("alice", "one", ["app"])
    assert store.remembered("alice", "one") is None  # never verified
    assert store.authenticate("alice", "one") is not None
    assert store.remembered("alice", "one") == Subject("alice", frozenset({"app"}))
    assert store.remembered("alice", "two") is None
    store.reset("alice", password="two")
    assert store.remembered("alice", "one") is None


def test_add_remove_reset(tmp_path: Path) -> None:
    store = UserStore(tmp_path / "users.toml")
    store.add("alice", "one", ["app"])
    with pytest.raises(ValueError, match="already exists"):
        store.add("alice", "two", ["app"])
    store.reset("alice", password="two")
    assert store.authenticate("alice", "one") is None
    assert store.authenticate("alice", "two").roles == frozenset({"app"})
    store.reset("alice", roles=["admin"])
    assert store.authenticate("alice", "two").roles == frozenset({"admin"})
    store.remove("alice")
    assert store.authenticate("alice", "two") is None
    with pytest.raises(KeyError):
        store.remove("alice")
    with pytest.raises(KeyError):
        store.reset("alice", password="x")


@pytest.mark.parametrize("role", ["", "$internal", "a,b", " "])
def test_bad_role_names_are_refused(tmp_path: Path, role: str) -> None:
    with pytest.raises(ValueError, match="role name"):
        UserStore(tmp_path / "u.toml").add("alice", "pw", [role])


def test_a_missing_file_is_an_empty_store(tmp_path: Path) -> None:
    store = UserStore.load(tmp_path / "none.toml")
    assert store.users == {} and store.authenticate("admin", "admin") is None


def test_refresh_sees_another_process_change_the_file(tmp_path: Path) -> None:
    path = tmp_path / "users.toml"
    writer = UserStore(path)
    writer.add("alice", "one", ["app"])
    writer.save()
    reader = UserStore.load(path)
    assert reader.authenticate("alice", "one") is not None  # now remembered as verified
    writer.reset("alice", password="two", roles=["other"])
    writer.save()
    reader.refresh()
    assert reader.authenticate("alice", "one") is None  # the remembered check is gone
    assert reader.authenticate("alice", "two") == Subject("alice", frozenset({"other"}))


def test_exclusive_save_does_not_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "users.toml"
    first = UserStore(path)
    first.add("admin", "first", ["admin"])
    assert first.save(exclusive=True)
    second = UserStore(path)
    second.add("admin", "second", ["admin"])
    assert not second.save(exclusive=True)
    assert UserStore.load(path).authenticate("admin", "first") is not None
    assert [p.name for p in tmp_path.iterdir()] == ["users.toml"]  # no temporary file left


@pytest.mark.parametrize("text, expected", [
    ("[users.alice\n", "invalid TOML"),
    ("[users.alice]\npassword = 'plain'\n", 'users."alice".password: must be a scrypt hash'),
    ("[users.alice]\npassword = 'scrypt$1'\nroles = 'app'\n", 'users."alice".roles: must be a list'),
    ("[users.alice]\npasword = 'x'\n", 'users."alice".pasword: unknown key'),
    ("[groups]\n", "groups: unknown key"),
])
def test_a_bad_file_names_the_entry(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "users.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        UserStore.load(path)
    assert str(path) in str(info.value) and expected in str(info.value)

