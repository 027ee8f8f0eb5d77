"""``petrel create``: the instance directory and its generated broker.toml."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from petrel.cli import main
from petrel.cli.create import TABLES, render_broker_toml, toml_value
from petrel.config import BrokerConfig, load_config
from petrel.core.settings import AddressSettings

from cli_harness import clean_env, restore_logging  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("clean_env")


def create(*args: str):
    return CliRunner().invoke(main, ["create", *args])


def test_create_makes_a_loadable_instance(tmp_path: Path) -> None:
    instance = tmp_path / "broker1"
    result = create(str(instance), "--name", "alpha", "--port-offset", "4")
    assert result.exit_code == 0, result.output
    assert (instance / "broker.toml").is_file()
    assert (instance / "data" / "journal").is_dir()
    assert (instance / "data" / "bindings").is_dir()
    assert str(instance / "broker.toml") in result.stdout
    assert str(instance / "data" / "journal") in result.stdout
    assert f"petrel run --config {instance / 'broker.toml'}" in result.stdout

    config = load_config(instance / "broker.toml", env={})
    assert config.name == "alpha"
    assert config.port_offset == 4
    assert config.listen_port() == 61620
    assert config.data_dir == instance / "data"
    assert config.journal_dir.is_dir() and config.bindings_dir.is_dir()


def test_name_defaults_to_the_directory_name(tmp_path: Path) -> None:
    assert create(str(tmp_path / "east-1")).exit_code == 0
    assert load_config(tmp_path / "east-1" / "broker.toml", env={}).name == "east-1"


def test_existing_empty_directory_is_fine(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert create(str(tmp_path / "empty")).exit_code == 0


def test_non_empty_directory_needs_force(tmp_path: Path) -> None:
    instance = tmp_path / "busy"
    instance.mkdir()
    (instance / "notes.txt").write_text("keep me")
    result = create(str(instance))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("petrel: error: ")
    assert "not empty" in lines[0] and "--force" in lines[0]
    assert not (instance / "broker.toml").exists()

    result = create(str(instance), "--force", "--name", "forced")
    assert result.exit_code == 0, result.output
    assert (instance / "notes.txt").read_text() == "keep me"
    assert load_config(instance / "broker.toml", env={}).name == "forced"


def test_bad_port_offset_writes_nothing(tmp_path: Path) -> None:
    result = create(str(tmp_path / "x"), "--port-offset", "-1")
    assert result.exit_code == 2
    assert "port_offset: Input should be greater than or equal to 0" in result.stderr
    assert not (tmp_path / "x").exists()


def test_directory_that_is_a_file_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    result = create(str(tmp_path / "file"))
    assert result.exit_code == 2
    assert result.stderr.startswith("petrel: error: ")


def test_every_setting_is_listed_with_its_default() -> None:
    text = render_broker_toml(name="n")
    listed = set(re.findall(r"^#? ?([a-z_]+) = ", text, flags=re.M))
    broker_fields = set(BrokerConfig.model_fields) - set(TABLES)
    address_fields = {f for f in AddressSettings.__dataclass_fields__}
    assert broker_fields | address_fields <= listed
    assert '[address_settings."#"]' in text
    assert "# [[cluster_connections]]" in text
    # only the instance's own settings are active
    active = set(re.findall(r"^([a-z_]+) = ", text, flags=re.M))
    assert active == {"name", "data_dir", "port_offset"}


def test_uncommenting_every_default_changes_nothing(tmp_path: Path) -> None:
    lines = []
    for line in render_broker_toml(name="n").splitlines():
        setting = re.fullmatch(r"# ([a-z_]+ = .*|\[address_settings\..*\])", line)
        if setting and "<unset>" not in line:
            line = setting.group(1)
        lines.append(line)
    path = tmp_path / "all.toml"
    path.write_text("\n".join(lines))
    raw = tomllib.loads(path.read_text())
    assert len(raw) > 20 and "#" in raw["address_settings"]

    config = load_config(path, env={})
    defaults = load_config(None, env={}, overrides={"name": "n", "data_dir": tmp_path / "data"})
    assert config.model_dump(exclude={"address_settings"}) == defaults.model_dump(exclude={"address_settings"})
    assert config.address_settings_repository().match("any.address") == AddressSettings().resolved()


def test_odd_names_survive_the_round_trip(tmp_path: Path) -> None:
    name = 'a "quoted" \\ näme\twith\x7fcontrol'
    text = render_broker_toml(name=name)
    assert tomllib.loads(text)["name"] == name


@settings(max_examples=200, deadline=None)
@given(st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",))),
    st.integers(-2**63, 2**63 - 1),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.integers(0, 10**6), max_size=3),
))
def test_toml_value_round_trips(value) -> None:
    assert tomllib.loads(f"x = {toml_value(value)}")["x"] == value


def test_create_a_cluster_node(tmp_path: Path) -> None:
    instance = tmp_path / "node2"
    result = create(str(instance), "--cluster", "tcp://10.0.0.2:61616", "--static-connector", "tcp://10.0.0.1:61616",
                    "--cluster-password", "s3cret", "--message-load-balancing", "strict")
    assert result.exit_code == 0, result.output
    config = load_config(instance / "broker.toml", env={})
    cc = config.cluster_connections[0]
    assert (cc.connector, cc.static_connectors, cc.message_load_balancing) == (
        "tcp://10.0.0.2:61616", ["tcp://10.0.0.1:61616"], "STRICT")
    assert (config.cluster_user, config.cluster_password) == ("petrel-cluster", "s3cret")


@pytest.mark.parametrize("args, words", [
    (["--cluster", "tcp://h:1"], "--cluster-password"),
    (["--static-connector", "tcp://h:1"], "go with --cluster"),
    (["--cluster", "udp://h:1", "--cluster-password", "x"], "only tcp://"),
])
def test_create_refuses_incomplete_cluster_options(tmp_path: Path, args, words) -> None:
    result = create(str(tmp_path / "n"), *args)
    assert result.exit_code == 2 and words in result.output, result.output
    assert not (tmp_path / "n").exists()


def test_create_with_ha_writes_a_loadable_pair(tmp_path):
    from click.testing import CliRunner

    from petrel.cli import main
    from petrel.config import load_config

    runner = CliRunner()
    shared = tmp_path / "shared"
    for role in ("primary", "backup"):
        result = runner.invoke(main, ["create", str(tmp_path / role), "--ha", "shared-store", "--ha-role", role,
                                      "--data-dir", str(shared)])
        assert result.exit_code == 0, result.output
        config = load_config(tmp_path / role / "broker.toml")
        assert (config.ha_policy.kind, config.ha_policy.role, config.data_dir) == ("shared_store", role, shared)
    result = runner.invoke(main, ["create", str(tmp_path / "r"), "--ha", "replication"])
    assert result.exit_code == 2 and "--cluster" in result.output
