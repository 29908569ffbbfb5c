"""Model strings: one line to switch providers.

=====================  ==========================================================
``anthropic:<id>``      Anthropic Messages (``ANTHROPIC_API_KEY``; extra ``anthropic``)
``openai:<id>``         OpenAI Responses (``OPENAI_API_KEY``; extra ``openai``)
``openai-chat:<id>``    Chat Completions: OpenAI, or any compatible server at ``base_url``
``local:<name>``        a local GGUF model in process (``anfitrion.localmodel``)
``scripted:demo``       the offline demo model (no network, no key)
=====================  ==========================================================

Example:
    >>> resolve_model("scripted:demo").name
    'scripted-demo'
"""

from __future__ import annotations

import importlib
from typing import Any

from ..exceptions import MissingDependencyError, UserError
from ._base import Model

__all__ = ["PREFIXES", "as_model", "resolve_model"]

PREFIXES = ("anthropic", "openai", "openai-chat", "local", "scripted")

LOCAL_MODEL_ENTRY = "anfitrion.localmodel"
"""The package that serves ``local:`` models. It sits above the core (an HTTP server and a
CLI), so the registry names it and imports it only when a ``local:`` string is resolved."""


def _local_model(name: str, **options: Any) -> Model:
    try:
        local = importlib.import_module(LOCAL_MODEL_ENTRY)
    except ModuleNotFoundError as exc:
        if exc.name in (LOCAL_MODEL_ENTRY, "llama_cpp"):
            raise MissingDependencyError("local", "llama_cpp") from None
        raise
    model: Model = local.local_model(name, **options)
    return model


def resolve_model(spec: str, *, base_url: str | None = None, **options: Any) -> Model:
    """The model named by *spec* (``provider:model-id``), built with *options*.

    Options go to the model's constructor (``api_key``, ``timeout``, ``max_retries``,
    ``max_tokens``, ``client``, ...).

    Raises:
        UserError: an unknown provider or an empty model id, or a missing API key (the message
            names the environment variable to set).
        MissingDependencyError: the provider's extra is not installed (names the pip command).
    """
    provider, sep, name = spec.partition(":")
    if not sep or not name:
        raise UserError(f"model {spec!r} must look like PROVIDER:MODEL, with PROVIDER one of "
                        f"{', '.join(PREFIXES)}")
    if provider == "anthropic":
        from .anthropic import AnthropicModel
        return AnthropicModel(name, base_url=base_url, **options)
    if provider == "openai":
        from .openai_responses import OpenAIResponsesModel
        return OpenAIResponsesModel(name, base_url=base_url, **options)
    if provider == "openai-chat":
        from .openai_chat import OpenAIChatModel
        return OpenAIChatModel(name, base_url=base_url, **options)
    if provider == "local":
        return _local_model(name, **options)
    if provider == "scripted":
        if name != "demo":
            raise UserError(f"no scripted model {name!r}: the only one is scripted:demo")
        from ._demo_script import demo_model
        return demo_model()
    raise UserError(f"unknown model provider {provider!r} in {spec!r}: use one of "
                    f"{', '.join(PREFIXES)}")


def as_model(model: object) -> Model:
    """*model* itself when it is a :class:`Model`; a model string through :func:`resolve_model`.

    Raises:
        UserError: *model* is neither (``None``, a client object, a class instead of an
            instance, ...), or a model string that :func:`resolve_model` refuses.
        MissingDependencyError: the provider's extra is not installed.
    """
    if isinstance(model, str):
        return resolve_model(model)
    if isinstance(model, Model) and not isinstance(model, type):
        return model
    if model is None:
        shown = "None"
    elif isinstance(model, type):
        shown = f"the class {model.__name__} (make an instance of it)"
    else:
        shown = f"an instance of {type(model).__name__}"
    raise UserError(f"model must be a Model (e.g. ScriptedModel([...]) or "
                    f"resolve_model(...)) or a model string such as 'openai:gpt-4o' or "
                    f"'anthropic:claude-sonnet-4-5', not {shown}")
