"""Configuration loading: TOML, PETREL_* variables, overrides, errors (petrel.config)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from petrel.config import AddressSettingsModel, BrokerConfig, load_config
from petrel.core.settings import AddressSettings
from petrel.errors import ConfigError, PetrelError


def write(tmp_path: Path, text: str, name: str = "broker.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def error_of(*args, **kwargs) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message  # one line for the operator
    return message


def test_defaults_without_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(None, env={})
    assert config.name == "petrel"
    assert config.port == 61616 and config.stomp_port == 61613 and config.http_port == 8161
    assert config.journal_file_size == 10 * 1024 * 1024
    assert config.stomp_heartbeat == (10000, 10000)
    assert config.data_dir == tmp_path / "data"  # relative to the cwd without a file
    assert config.journal_dir == tmp_path / "data" / "journal"
    assert config.bindings_dir == tmp_path / "data" / "bindings"


def test_load_from_toml(tmp_path: Path) -> None:
    path = write(tmp_path, """
name = "b1"
port_offset = 2
journal_datasync = false
journal_file_size = 65536
stomp_heartbeat = [0, 5000]

[address_settings."#"]
dead_letter_address = "DEAD"

[address_settings."orders.#"]
max_delivery_attempts = 3
default_queue_routing_type = "anycast"

[address_settings."orders.eu"]
redelivery_delay = 250
""")
    config = load_config(path, env={})
    assert (config.name, config.port_offset, config.journal_datasync) == ("b1", 2, False)
    assert config.journal_file_size == 65536
    assert config.stomp_heartbeat == (0, 5000)
    assert config.listen_port() == 61618 and config.listen_stomp_port() == 61615
    assert config.listen_http_port() == 8163

    repo = config.address_settings_repository()
    eu = repo.match("orders.eu")
    assert (eu.dead_letter_address, eu.max_delivery_attempts, eu.redelivery_delay) == ("DEAD", 3, 250)
    assert eu.default_queue_routing_type == "ANYCAST"
    assert repo.match("invoices") == AddressSettings(dead_letter_address="DEAD").resolved()


def test_relative_data_dir_is_relative_to_the_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    instance = tmp_path / "instance"
    instance.mkdir()
    path = write(instance, 'data_dir = "store"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert load_config(path, env={}).data_dir == instance / "store"
    # no data_dir in the file: the default is relative to the file too
    assert load_config(write(instance, "", "empty.toml"), env={}).data_dir == instance / "data"
    # from the environment or a flag: relative to the cwd
    assert load_config(path, env={"PETREL_DATA_DIR": "envdir"}).data_dir == elsewhere / "envdir"
    assert load_config(path, env={}, overrides={"data_dir": Path("flagdir")}).data_dir == elsewhere / "flagdir"
    assert load_config(path, env={}, overrides={"data_dir": tmp_path / "abs"}).data_dir == tmp_path / "abs"


def test_port_zero_and_minus_one_are_not_offset() -> None:
    config = load_config(None, env={}, overrides={"port": 0, "stomp_port": -1, "port_offset": 5})
    assert config.listen_port() == 0
    assert config.listen_stomp_port() == -1


def test_environment_overrides_file_and_flags_override_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "port_offset = 1\nname = \"file\"\njournal_datasync = true\n")
    env = {
        "PETREL_PORT_OFFSET": "2",
        "PETREL_JOURNAL_DATASYNC": "false",
        "PETREL_DATA_DIR": "/x",
        "PETREL_STOMP_HEARTBEAT": "100, 200",
        "PETREL_LOG_LEVEL": "DEBUG",  # not a setting, but allowed
        "PETREL_TEST_SOMETHING": "1",  # reserved for tooling
        "HOME": "/root",  # not ours
    }
    config = load_config(path, env=env)
    assert config.port_offset == 2
    assert config.journal_datasync is False
    assert config.data_dir == Path("/x")
    assert config.stomp_heartbeat == (100, 200)
    assert config.name == "file"

    config = load_config(path, env=env, overrides={"port_offset": 7, "name": None})
    assert config.port_offset == 7
    assert config.name == "file"  # None overrides are ignored


def test_default_env_is_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PETREL_ID_CACHE_SIZE", "77")
    assert load_config(None).id_cache_size == 77


def test_unknown_key_in_file_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, "port_ofset = 1\n")
    message = error_of(path, env={})
    assert message == f"{path}: port_ofset: unknown setting (did you mean port_offset?)"


def test_unknown_key_in_address_settings_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, '[address_settings."orders.#"]\nmax-delivery-attempts = 3\n')
    message = error_of(path, env={})
    assert message == (f'{path}: address_settings."orders.#".max-delivery-attempts: unknown setting '
                       "(did you mean max_delivery_attempts?)")


def test_type_error_names_key_and_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, 'journal_file_size = "abc"\n')
    message = error_of(Path("broker.toml"), env={})
    assert message.startswith("broker.toml: journal_file_size: Input should be a valid integer")
    assert message.endswith("(got 'abc')")


def test_nested_type_error(tmp_path: Path) -> None:
    path = write(tmp_path, '[address_settings."#"]\nauto_create_queues = "maybe"\n')
    message = error_of(path, env={})
    assert message.startswith(f'{path}: address_settings."#".auto_create_queues: Input should be a valid boolean')
    assert "(got 'maybe')" in message


def test_several_errors_on_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, "port = 70000\njournal_compact_percentage = 101\n")
    message = error_of(path, env={})
    assert f"{path}: port: Input should be less than or equal to 65535 (got 70000)" in message
    assert f"{path}: journal_compact_percentage: Input should be less than or equal to 100 (got 101)" in message


@pytest.mark.parametrize(
    ("toml", "fragment"),
    [
        ("port = -2", "port: Input should be greater than or equal to -1"),
        ("stomp_port = 65536", "stomp_port: Input should be less than or equal to 65535"),
        ("journal_file_size = 4096", "journal_file_size: Input should be greater than or equal to 65536"),
        ("journal_file_size = 70000", "journal_file_size: Input should be a multiple of 4096"),
        ("journal_min_files = 1", "journal_min_files: Input should be greater than or equal to 2"),
        ("max_frame_size = 0", "max_frame_size: Input should be greater than or equal to 1"),
        ("journal_compact_percentage = -1", "journal_compact_percentage: Input should be greater than or equal to 0"),
        ("stomp_heartbeat = [1, 2, 3]", "stomp_heartbeat: Tuple should have at most 2 items"),
        ("stomp_heartbeat = [1, -1]", "stomp_heartbeat[1]: Input should be greater than or equal to 0"),
        ('journal_type = "ASYNCIO"', "journal_type: Input should be 'NIO'"),
        ("message_expiry_scan_period = 0", "message_expiry_scan_period: must be -1 (never) or a positive"),
        ("port_offset = 100\nport = 65500", "port: 65500 + port_offset 100 is above 65535"),
        ('name = ""', "name: String should have at least 1 character"),
        ("address_settings = 3", "address_settings: Input should be a valid dictionary"),
        ('[address_settings."#"]\ndefault_address_routing_type = "BROADCAST"',
         "default_address_routing_type: Input should be 'ANYCAST' or 'MULTICAST'"),
        ('[address_settings."#"]\nmax_delivery_attempts = -2',
         'address_settings."#".max_delivery_attempts: Input should be greater than or equal to -1'),
    ],
)
def test_range_validation(tmp_path: Path, toml: str, fragment: str) -> None:
    path = write(tmp_path, toml + "\n")
    assert fragment in error_of(path, env={})


def test_bad_environment_value_names_the_variable() -> None:
    message = error_of(None, env={"PETREL_PORT_OFFSET": "two"})
    assert message.startswith("environment: PETREL_PORT_OFFSET: Input should be a valid integer")
    assert message.endswith("(got 'two')")


def test_unknown_petrel_variable_is_an_error() -> None:
    message = error_of(None, env={"PETREL_PORT_OFSET": "1", "PETREL_ZZZ": "x"})
    assert "PETREL_PORT_OFSET (did you mean PETREL_PORT_OFFSET?)" in message
    assert "PETREL_ZZZ" in message


def test_the_client_commands_variables_do_not_stop_a_broker() -> None:
    env = {"PETREL_URL": "tcp://h:61616", "PETREL_USER": "u", "PETREL_PASSWORD": "p",
           "PETREL_MANAGEMENT_URL": "http://h:8161", "PETREL_PORT": "7000"}
    assert load_config(None, env=env).port == 7000


def test_address_settings_cannot_come_from_the_environment() -> None:
    assert "can only be set in the config file" in error_of(None, env={"PETREL_ADDRESS_SETTINGS": "{}"})


def test_bad_override_is_named() -> None:
    assert error_of(None, env={}, overrides={"port": 99999}).startswith("command line: port: Input should be")
    assert error_of(None, env={}, overrides={"prot": 1}) == "command line: prot: unknown setting (did you mean port?)"


def test_unreadable_files(tmp_path: Path) -> None:
    assert error_of(tmp_path / "missing.toml", env={}) == f"{tmp_path / 'missing.toml'}: no such config file"
    assert "is a directory" in error_of(tmp_path, env={})
    bad = write(tmp_path, "port = = 3\n", "bad.toml")
    assert error_of(bad, env={}).startswith(f"{bad}: invalid TOML: ")
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"name = \"\xff\"\n")
    assert error_of(binary, env={}).startswith(f"{binary}: invalid TOML")


def test_config_error_is_a_petrel_error_with_exit_code_2() -> None:
    assert issubclass(ConfigError, PetrelError)
    assert ConfigError.exit_code == 2 and PetrelError.exit_code == 1


def test_config_is_immutable() -> None:
    config = load_config(None, env={})
    with pytest.raises(Exception):
        config.port = 1  # type: ignore[misc]


def test_address_settings_model_mirrors_the_dataclass() -> None:
    fields = [f.name for f in dataclasses.fields(AddressSettings)]
    assert list(AddressSettingsModel.model_fields) == fields
    assert all(info.default is None for info in AddressSettingsModel.model_fields.values())
    assert all(info.description for info in AddressSettingsModel.model_fields.values())
    assert all(info.description for info in BrokerConfig.model_fields.values())
