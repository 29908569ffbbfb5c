"""One store rule for every command: --store > $ANFITRION_STORE > $ANFITRION_HOME >
./anfitrion.toml [store] > the data folder — and commands that find nothing say where."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from anfitrion import default_store_url
from anfitrion._approvals import DeferredApprover
from anfitrion._cli.main import cli
from anfitrion._demo import demo_toolbox
from anfitrion._home import store_choice
from anfitrion._host import Host
from anfitrion.models._demo_script import demo_model


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder as the current folder, with no data folder configured."""
    folder = tmp_path / "project"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.delenv("ANFITRION_HOME", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    return folder


def test_without_configuration_the_store_is_in_the_data_folder(project: Path,
                                                               tmp_path: Path) -> None:
    expected = tmp_path / "xdg" / "anfitrion" / "anfitrion.db"
    assert store_choice().url == f"sqlite:///{expected}"
    assert store_choice().source == "the data folder"
    assert invoke("db", "path").output.strip() == str(expected)


def test_the_project_file_names_the_store_relative_to_its_folder(project: Path) -> None:
    (project / "anfitrion.toml").write_text('[store]\nurl = "sqlite:///data/app.db"\n')
    assert default_store_url() == f"sqlite:///{project / 'data' / 'app.db'}"
    assert invoke("db", "path").output.strip() == str(project / "data" / "app.db")


def test_the_environment_wins_over_the_project_file(project: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "anfitrion.toml").write_text('[store]\nurl = "sqlite:///app.db"\n')
    monkeypatch.setenv("ANFITRION_HOME", str(tmp_path / "home"))
    assert store_choice().url == f"sqlite:///{tmp_path / 'home' / 'anfitrion.db'}"
    monkeypatch.setenv("ANFITRION_STORE", "memory://")
    assert store_choice().url == "memory://"
    assert store_choice("sqlite:///given.db").url == "sqlite:///given.db"


def test_a_project_file_with_a_store_is_still_a_valid_policy(project: Path) -> None:
    (project / "anfitrion.toml").write_text(
        '[defaults]\nwrite = "deny"\n\n[store]\nurl = "sqlite:///app.db"\n')
    result = invoke("policy", "validate")
    assert result.exit_code == 0, result.output
    assert "write → deny" in result.output


@pytest.mark.parametrize("text", ['[store]\nurl = 3\n', '[store]\npath = "x.db"\n',
                                  'store = "sqlite:///x.db"\n'])
def test_a_wrong_store_table_is_a_clear_error(project: Path, text: str) -> None:
    (project / "anfitrion.toml").write_text(text)
    result = invoke("approvals", "list")
    assert result.exit_code == 1
    assert "anfitrion.toml" in result.output
    assert "store" in result.output
    assert "Traceback" not in result.output


def test_every_store_command_uses_the_project_store(project: Path) -> None:
    (project / "anfitrion.toml").write_text('[store]\nurl = "sqlite:///app.db"\n')
    host = Host(model=demo_model(), tools=demo_toolbox(), store=default_store_url(),
                approver=DeferredApprover())
    run = host.run_sync("Save a note for the team: Lisboa 15 °C, partly cloudy.",
                        principal="demo-user")
    [request] = run.pending
    assert request.id in invoke("approvals", "list").output
    assert "approval.requested" in invoke("audit", "show").output
    assert (project / "app.db").exists()


def test_an_empty_list_names_the_store_it_read(anfitrion_home: Path) -> None:
    invoke("db", "migrate")
    out = invoke("approvals", "list").output
    assert out.strip() == (f"no approval request is waiting in "
                           f"sqlite:///{anfitrion_home / 'anfitrion.db'}")
    assert "in memory://" in invoke("approvals", "list", "--all", "--store", "memory://").output
    assert "in memory://" in invoke("approvals", "list", "--unknown",
                                    "--store", "memory://").output


def test_a_missing_request_names_the_store_and_never_a_password() -> None:
    result = invoke("approvals", "show", "0123456789", "--store", "memory://")
    assert result.exit_code == 1
    assert "no approval request '0123456789' in memory://" in result.output


def test_a_short_prefix_is_refused_saying_how_many_characters_are_needed() -> None:
    result = invoke("approvals", "show", "abcd", "--store", "memory://")
    assert result.exit_code == 1
    assert "at least 6 characters" in result.output


def test_serve_reads_the_same_store_as_the_other_commands(
        monkeypatch: pytest.MonkeyPatch, anfitrion_home: Path) -> None:
    pytest.importorskip("uvicorn")
    import uvicorn

    ran: list[object] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: ran.append(app))
    invoke("db", "migrate")
    result = invoke("serve", "--token", "t" * 24)
    assert result.exit_code == 0, result.output
    assert f"(store sqlite:///{anfitrion_home / 'anfitrion.db'})" in result.output
    assert ran


def test_the_project_file_is_read_once_for_the_store_and_the_policy(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #29: one reader of anfitrion.toml; the store rule and the policy share its text,
    and a changed file is read again."""
    import builtins

    from anfitrion.policy import find_policy

    (project / "anfitrion.toml").write_text('[store]\nurl = "sqlite:///one.db"\n'
                                            '[defaults]\nread = "ask"\n')
    opened: list[str] = []
    real_open = builtins.open

    def counting(file: Any, *args: Any, **kwargs: Any) -> Any:
        if str(file).endswith("anfitrion.toml"):
            opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting)
    assert store_choice().url == f"sqlite:///{project / 'one.db'}"
    assert find_policy().defaults["read"].value == "ask"
    assert store_choice().source == "./anfitrion.toml"
    assert len(opened) == 1
    (project / "anfitrion.toml").write_text('[store]\nurl = "sqlite:///two.db"\n')
    assert store_choice().url == f"sqlite:///{project / 'two.db'}"
    assert len(opened) == 2
