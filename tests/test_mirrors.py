"""Tests mirror the source tree (issue #29): a module has a test file named after it.

``src/anfitrion/<package>/<module>.py`` is mirrored by ``tests/<package>/test_<module>.py``, a
``test_<module>_*.py`` beside it, or, in a package, ``test_<package>_<module>[_*].py`` (leading
underscores dropped: ``_gate.py`` → ``tests/test_gate.py``, ``_cli/effects.py`` →
``tests/cli/test_cli_effects.py``); a directory ``tests/<package>/<module>/`` mirrors it too
(``_approvals.py`` → ``tests/approvals/``).

The modules listed below are tested under other names (by topic, through the host or the gateway,
in the security suite); the list only shrinks: the test fails on a module missing from it
without a mirror, and on a listed one that has a mirror now or is gone.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "src" / "anfitrion"
TESTS = ROOT / "tests"

KNOWN_UNMIRRORED = frozenset({
    "_addresses.py", "_answers.py", "_apps.py", "_audit_anchor.py", "_audit_bundle.py",
    "_audit_keys.py", "_audit_trail.py", "_chain.py", "_cli/_common.py", "_cli/approvals.py",
    "_cli/audit.py", "_cli/audit_trail.py", "_cli/auth.py", "_cli/db.py", "_cli/gateway.py",
    "_cli/main.py", "_cli/mcp.py", "_cli/resume.py", "_cli/reviewers.py", "_cli/serve.py",
    "_cli/sessions.py", "_cli/terminal.py", "_cli/tools.py", "_constraints.py", "_dataflow.py",
    "_demo.py", "_effect_arguments.py", "_encodings.py", "_entitlements.py", "_home.py",
    "_identity.py", "_logging.py", "_media.py", "_media_structure.py",
    "_principal.py", "_provenance.py", "_redaction.py", "_resolutions.py", "_throttle.py",
    "integrations/_offered.py", "localmodel/_chatml.py", "localmodel/_grammar.py",
    "localmodel/_handler.py", "localmodel/_server.py", "mcp/_accounts.py",
    "mcp/_conversations.py", "mcp/_egress.py", "mcp/_forwarder.py", "mcp/_gateway_auth.py",
    "mcp/_gateway_content.py",
    "mcp/_http_body.py", "mcp/_instructions.py", "mcp/_listing.py", "mcp/_media.py",
    "mcp/_oauth_login.py", "mcp/_oauth_settings.py", "mcp/_oversized.py",
    "mcp/_queue_guard.py", "mcp/_relay_routing.py", "mcp/_resolve.py", "mcp/_sandbox_run.py",
    "mcp/_sandbox_watch.py", "mcp/_secret_classes.py", "mcp/_server_requests.py",
    "mcp/_stderr.py", "mcp/_upstream_tasks.py", "models/_base.py", "models/_demo_script.py",
    "models/_scripted.py", "models/_sdk.py", "policy/_cedar_export.py", "policy/_core.py",
    "policy/_decision.py", "policy/_declarations.py", "policy/_taint.py",
    "store/_base.py", "store/_memory.py", "store/_postgres.py", "store/_retention.py",
    "store/_rows.py", "store/_sql.py", "store/_wakeups.py", "testing.py",
    "web/_approval_pages.py", "web/_connect.py", "web/_oidc.py", "web/_pages.py",
    "web/_security.py", "web/_signin.py",
})
"""Modules (relative to ``src/anfitrion``) without a mirror yet."""


def mirrored(module: Path, tests: Path = TESTS) -> bool:
    """Whether *module* (relative to the package) has a test file or directory named after it."""
    stem = module.stem.lstrip("_")
    parts = [p.lstrip("_") for p in module.parts[:-1]]
    where = tests.joinpath(*parts)
    names = [f"test_{stem}.py", f"test_{stem}_*.py"]
    if parts:
        names += [f"test_{parts[-1]}_{stem}.py", f"test_{parts[-1]}_{stem}_*.py"]
    return (where / stem).is_dir() or any(any(where.glob(n)) for n in names)


def modules() -> list[Path]:
    return sorted(p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py")
                  if p.name not in ("__init__.py", "__main__.py"))


def test_every_module_has_a_mirror_test_or_is_known_not_to() -> None:
    unmirrored = {m.as_posix() for m in modules() if not mirrored(m)}
    assert sorted(unmirrored - KNOWN_UNMIRRORED) == [], "add a test file named after it"
    assert sorted(KNOWN_UNMIRRORED - unmirrored) == [], (
        "mirrored now, or gone: remove it from KNOWN_UNMIRRORED")


def test_the_gate_and_the_session_have_their_own_test_files() -> None:
    assert mirrored(Path("_gate.py")) and mirrored(Path("_session.py"))


def test_the_mirror_rule_reads_names_and_directories(tmp_path: Path) -> None:
    (tmp_path / "cli").mkdir()
    (tmp_path / "approvals").mkdir()
    (tmp_path / "test_gate.py").touch()
    (tmp_path / "cli" / "test_cli_effects_reconcile.py").touch()
    assert mirrored(Path("_gate.py"), tmp_path)
    assert mirrored(Path("_cli/effects.py"), tmp_path)
    assert mirrored(Path("_approvals.py"), tmp_path)
    assert not mirrored(Path("_session.py"), tmp_path)
    assert not mirrored(Path("_gateway.py"), tmp_path)  # test_gate.py is not its mirror
    assert not mirrored(Path("mcp/_gate.py"), tmp_path)  # a mirror sits in its package's dir
