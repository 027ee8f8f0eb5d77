"""The ``petrel`` group and ``petrel run``: config loading, flags, exit codes."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import types
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import petrel.log
from petrel.cli import PetrelGroup, main
from petrel.config import BrokerConfig
from petrel.errors import PetrelError

from cli_harness import clean_env, restore_logging  # noqa: F401  (fixtures)


class FakeBroker:
    """Stands in for petrel.server.broker: records the config, returns a code."""

    def __init__(self, code: int = 0, error: Exception | None = None) -> None:
        self.code = code
        self.error = error
        self.configs: list[BrokerConfig] = []

    def run(self, config: BrokerConfig) -> int:
        self.configs.append(config)
        if self.error is not None:
            raise self.error
        return self.code


@pytest.fixture
def fake_broker(monkeypatch: pytest.MonkeyPatch, clean_env: None) -> FakeBroker:
    fake = FakeBroker()
    module = types.ModuleType("petrel.server.broker")
    module.run = fake.run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "petrel.server.broker", module)
    return fake


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, list(args), env=env)


def one_line_error(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("petrel: error: ")
    return lines[0][len("petrel: error: "):]


def test_bad_config_exits_2_with_one_line_in_a_real_process(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text('journal_file_size = "abc"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("PETREL_")}
    proc = subprocess.run(
        [sys.executable, "-m", "petrel", "run", "--config", "bad.toml"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("petrel: error: bad.toml: journal_file_size: Input should be a valid integer")
    assert lines[0].endswith("(got 'abc')")


def test_unknown_key_exits_2(tmp_path: Path, fake_broker: FakeBroker) -> None:
    config = tmp_path / "broker.toml"
    config.write_text("prot = 1\n")
    result = invoke("run", "--config", str(config))
    assert result.exit_code == 2
    assert one_line_error(result) == f"{config}: prot: unknown setting (did you mean port?)"
    assert fake_broker.configs == []  # validation happens before the broker starts


def test_missing_config_file_exits_2(tmp_path: Path, fake_broker: FakeBroker) -> None:
    result = invoke("run", "--config", str(tmp_path / "nope.toml"))
    assert result.exit_code == 2
    assert one_line_error(result).endswith("nope.toml: no such config file")


def test_flags_override_file_and_environment(tmp_path: Path, fake_broker: FakeBroker) -> None:
    config = tmp_path / "broker.toml"
    config.write_text('name = "file"\nport_offset = 1\nhost = "10.0.0.1"\n')
    result = invoke(
        "run", "--config", str(config), "--name", "flag", "--data-dir", str(tmp_path / "d"),
        "--port", "0", "--stomp-port", "-1", "--host", "127.0.0.1",
        env={"PETREL_PORT_OFFSET": "5", "PETREL_NAME": "env"},
    )
    assert result.exit_code == 0, result.output
    (cfg,) = fake_broker.configs
    assert cfg.name == "flag"
    assert cfg.port_offset == 5  # env beats file, no flag given
    assert cfg.host == "127.0.0.1"
    assert cfg.data_dir == tmp_path / "d"
    assert cfg.listen_port() == 0 and cfg.listen_stomp_port() == -1


def test_port_offset_flag(fake_broker: FakeBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke("run", "--port-offset", "3")
    assert result.exit_code == 0, result.output
    assert fake_broker.configs[0].listen_port() == 61619
    assert fake_broker.configs[0].data_dir == tmp_path / "data"


def test_broker_toml_in_cwd_is_the_default(tmp_path: Path, fake_broker: FakeBroker,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broker.toml").write_text('name = "from-cwd"\n')
    assert invoke("run").exit_code == 0
    assert fake_broker.configs[-1].name == "from-cwd"
    # PETREL_CONFIG picks another file
    other = tmp_path / "other.toml"
    other.write_text('name = "other"\n')
    assert invoke("run", env={"PETREL_CONFIG": str(other)}).exit_code == 0
    assert fake_broker.configs[-1].name == "other"


def test_exit_code_of_the_broker_is_returned(fake_broker: FakeBroker, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    fake_broker.code = 3
    assert invoke("run").exit_code == 3


def test_petrel_error_from_the_broker_exits_1(fake_broker: FakeBroker, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    fake_broker.error = PetrelError("cannot listen on 0.0.0.0:61616 (all): Address in use")
    result = invoke("run")
    assert result.exit_code == 1
    assert one_line_error(result) == "cannot listen on 0.0.0.0:61616 (all): Address in use"


def test_unexpected_error_is_one_line_and_exit_1(fake_broker: FakeBroker, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    fake_broker.error = RuntimeError("boom")
    result = invoke("run")
    assert result.exit_code == 1
    assert one_line_error(result).startswith("internal error: RuntimeError: boom")


def test_bad_env_setting_exits_2(fake_broker: FakeBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke("run", env={"PETREL_PORTT": "1"})
    assert result.exit_code == 2
    assert "PETREL_PORTT (did you mean PETREL_PORT?)" in one_line_error(result)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["run", "--bogus"], "No such option '--bogus'"),
        (["run", "--port", "x"], "'x' is not a valid integer"),
        (["nosuch"], "No such command 'nosuch'"),
        (["--log-level", "LOUD", "run"], "unknown log level 'LOUD'"),
        (["--log-format", "xml", "run"], "'xml' is not one of"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args: list[str], fragment: str, clean_env: None) -> None:
    result = invoke(*args)
    assert result.exit_code == 2
    assert fragment in one_line_error(result)


def test_help_and_version(clean_env: None) -> None:
    result = invoke("--help")
    assert result.exit_code == 0
    assert "run" in result.stdout and "create" in result.stdout
    result = invoke("run", "--help")
    assert result.exit_code == 0 and "--port-offset" in result.stdout
    result = invoke("--version")
    assert result.exit_code == 0 and petrel.__version__ in result.stdout


def test_log_options_configure_logging(fake_broker: FakeBroker, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert invoke("--log-level", "trace", "--log-format", "json", "run").exit_code == 0
    assert logging.getLogger().level == petrel.log.TRACE
    assert isinstance(petrel.log._handler.formatter, petrel.log.JsonFormatter)
    assert invoke("run", env={"PETREL_LOG_LEVEL": "WARNING"}).exit_code == 0
    assert logging.getLogger().level == logging.WARNING


def test_lazy_commands_that_fail_to_import_are_left_out() -> None:
    @click.command("ok")
    def ok() -> None:
        click.echo("fine")

    group = PetrelGroup("t", lazy={"broken": "petrel.no_such_module:cmd", "notcmd": "petrel.errors:PetrelError"})
    group.add_command(ok)
    runner = CliRunner()
    assert runner.invoke(group, ["ok"]).stdout == "fine\n"
    result = runner.invoke(group, ["--help"])
    assert "ok" in result.stdout and "broken" not in result.stdout and "notcmd" not in result.stdout
    result = runner.invoke(group, ["broken"])
    assert result.exit_code == 2 and "No such command 'broken'" in result.stderr


def test_lazy_command_is_loaded_on_use() -> None:
    group = PetrelGroup("t", lazy={"create": "petrel.cli.create:create"})
    assert "create" not in group.commands
    assert group.list_commands(click.Context(group)) == ["create"]
    assert group.commands["create"].name == "create"
