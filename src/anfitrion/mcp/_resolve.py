"""What a stdio server's command runs, resolved offline: pinned with the server's identity.

- ``npx PACKAGE``, ``uvx PACKAGE`` and ``pipx run PACKAGE``: the package's name and the
  version installed where the tool would take it from (``node_modules`` of the working
  folder, the npm cache's ``_npx`` folders; uv's tool folder and cache; pipx's run cache),
  in the environment the server is started with (the gateway's, and the entry's ``env``);
- ``python -m MODULE``: the distribution that provides the module in that interpreter's
  environment, and its version;
- any local executable, and a script given to an interpreter: the SHA-256 of the file.

A version or file that differs from the approved one is a changed identity. Nothing here
reaches a network: what is not installed resolves to ``None`` (and is pinned as such).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from .._home import environment

__all__ = ["package_spec", "resolve_program"]

RUNNERS = ("npx", "uvx", "pipx")
INTERPRETERS = re.compile(r"(python|pypy)[0-9.]*|node|nodejs|deno|bun|bash|sh|dash|zsh|ruby|"
                          r"perl|php")
_OPTIONS_WITH_VALUE = frozenset({"-p", "--package", "--from", "--with", "--python", "-c",
                                 "--call", "--spec", "--index-url", "--registry"})


def _sha256(path: str) -> str | None:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def package_spec(command: str, args: Sequence[str]) -> tuple[int, str] | None:
    """For a runner command (``npx``/``uvx``/``pipx run``): the index of the package argument
    and the argument; else ``None``. ``--from SPEC`` (uvx) and ``--spec SPEC`` (pipx) name
    the package when given."""
    runner = os.path.basename(command)
    if runner not in RUNNERS:
        return None
    i = 0
    if runner == "pipx":
        if not args or args[0] != "run":
            return None
        i = 1
    while i < len(args):
        arg = args[i]
        if arg in ("--from", "--spec") and i + 1 < len(args):
            return i + 1, args[i + 1]
        if arg in _OPTIONS_WITH_VALUE:
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        return i, arg
    return None


def _split_spec(runner: str, spec: str) -> tuple[str, str | None]:
    if runner == "npx":
        at = spec.rfind("@")
        return (spec[:at], spec[at + 1:]) if at > 0 else (spec, None)
    match = re.match(r"([A-Za-z0-9._-]+)(?:\[[^\]]*\])?\s*(?:==|@)\s*([A-Za-z0-9.+!_-]+)$", spec)
    if match:
        return match.group(1), match.group(2)
    return re.split(r"[\[<>=!~@ ]", spec, maxsplit=1)[0], None


def _npm_version(name: str, cwd: str | None, home: str | None) -> str | None:
    candidates = [Path(cwd or os.getcwd(), "node_modules", name, "package.json")]
    if home:
        candidates += sorted(Path(home, ".npm", "_npx").glob(f"*/node_modules/{name}/package.json"),
                             key=lambda p: p.stat().st_mtime, reverse=True)
    for candidate in candidates:
        try:
            version = json.loads(candidate.read_text(encoding="utf-8")).get("version")
        except (OSError, ValueError):
            continue
        if isinstance(version, str):
            return version
    return None


def _dist_version(name: str, root: Path) -> str | None:
    wanted = re.sub(r"[-_.]+", "_", name).lower()
    for info in sorted(root.glob("*.dist-info"), reverse=True):
        dist, _, version = info.name[:-len(".dist-info")].partition("-")
        if re.sub(r"[-_.]+", "_", dist).lower() == wanted and version:
            return version
    return None


def _newest_first(roots: Sequence[Path]) -> list[Path]:
    def mtime(root: Path) -> float:
        try:
            return root.stat().st_mtime
        except OSError:
            return 0.0
    return sorted(roots, key=mtime, reverse=True)


def _python_tool_version(runner: str, name: str, requested: str | None, home: str | None,
                         environ: Mapping[str, str]) -> str | None:
    """The version ``uvx``/``pipx run`` would run, from what is on disk.

    ``uvx`` runs the tool installed by ``uv tool install`` (``UV_TOOL_DIR``) when it satisfies
    the request, else an environment cached in uv's cache (``archive-v0``). ``pipx run`` never
    runs what ``pipx install`` made: with its uv backend (uv installed) it runs through uv's
    cache too, with its pip backend through its own venv cache (``PIPX_HOME/.cache`` or
    ``~/.cache/pipx``). Cached environments count newest first; a requested version counts
    only where that exact version is installed."""
    if not home:
        return None
    data = environ.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share")
    cache = environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    uv_cache = Path(environ.get("UV_CACHE_DIR") or os.path.join(cache, "uv"))
    cached = [*uv_cache.glob("archive-v0/*/lib/python*/site-packages")]
    installed: list[Path] = []
    if runner == "uvx":
        tools = Path(environ.get("UV_TOOL_DIR") or os.path.join(data, "uv", "tools"))
        installed = [*tools.glob(f"{name}/lib/python*/site-packages")]
    else:
        pipx_home = environ.get("PIPX_HOME")
        pipx_cache = Path(pipx_home, ".cache") if pipx_home else Path(cache, "pipx")
        cached += [*pipx_cache.glob("*/lib/python*/site-packages")]
    for root in [*installed, *_newest_first(cached)]:
        version = _dist_version(name, root)
        if version is not None and (requested is None or version == requested):
            return version
    return None


@functools.lru_cache(maxsize=256)
def _module_distribution(site_packages: str, module: str) -> tuple[str, str] | None:
    top = module.split(".", 1)[0]
    for dist in metadata.distributions(path=[site_packages]):
        files = dist.files or []
        if any(f.parts and f.parts[0] in (top, f"{top}.py") for f in files):
            return str(dist.metadata["Name"]), str(dist.version)
    return None


def _python_module(executable: str, args: Sequence[str]) -> dict[str, Any] | None:
    if "-m" not in args[:3]:
        return None
    index = list(args).index("-m")
    if index + 1 >= len(args):
        return None
    venv = Path(os.path.abspath(executable)).parent.parent
    for site in sorted(venv.glob("lib/python*/site-packages")):
        found = _module_distribution(str(site), args[index + 1])
        if found:
            return {"package": found[0], "version": found[1]}
    return None


def resolve_program(command: str, args: Sequence[str], *, env_path: str | None,
                    cwd: str | None = None, environ: Mapping[str, str] | None = None
                    ) -> dict[str, Any]:
    """What *command* runs here: ``executable`` and its ``sha256``; for runners the
    ``package`` and installed ``version``; for an interpreter, its ``script`` (and
    ``script_sha256``) or, for ``python -m``, the module's package and version."""
    environ = environment() if environ is None else environ
    home = environ.get("HOME")
    found: dict[str, Any] = {}
    executable = command if os.sep in command else shutil.which(command, path=env_path)
    if executable is not None and os.path.isfile(executable):
        real = os.path.realpath(executable)
        found.update(executable=real, sha256=_sha256(real))
    runner = os.path.basename(command)
    spec = package_spec(command, args)
    if spec is not None:
        name, version = _split_spec(runner, spec[1])
        installed = (_npm_version(name, cwd, home) if runner == "npx"
                     else _python_tool_version(runner, name, version, home, environ))
        found.update(package=name, requested=version, version=installed)
        return found
    if INTERPRETERS.fullmatch(runner) or (executable and INTERPRETERS.fullmatch(
            os.path.basename(os.path.realpath(executable)))):
        module = _python_module(executable or command, args)
        if module is not None:
            found.update(module)
            return found
        for arg in args:
            script = arg if os.path.isabs(arg) or cwd is None else os.path.join(cwd, arg)
            if not arg.startswith("-") and os.path.isfile(script):
                found.update(script=os.path.realpath(script),
                             script_sha256=_sha256(os.path.realpath(script)))
                break
    return found
