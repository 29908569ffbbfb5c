"""What the SDK-backed models share: the official client they are built with, and one request.

Each adapter module keeps its pure ``to_wire``/``from_wire`` and says, in a few lines, what
differs: the SDK's call, the stream assembler, the reply reader. Everything else — building the
client from a key, a base URL, a timeout and retries; translating the SDK's errors; streaming
text deltas while the reply is assembled; sending tool names the provider refuses under
stand-ins — is written once here.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar, Protocol

from .._conversation import Reply
from .._home import environment
from ..exceptions import MissingDependencyError, UserError
from ._base import ModelRequest
from ._names import restore_names, wire_safe
from ._profiles import Profile
from ._wire import as_dict, sdk_errors

__all__ = ["Assembler", "WireModel", "sdk_client", "sdk_error_type"]


def _sdk(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependencyError(module, module) from None


def sdk_error_type(module: str) -> type[BaseException]:
    """The root of the SDK's own errors (``APIError``, in both official SDKs).

    Raises:
        MissingDependencyError: the SDK's extra (named like its module) is not installed.
    """
    error: type[BaseException] = _sdk(module).APIError
    return error


def sdk_client(module: str, client_class: str, *, api_key: str | None, key_env: str,
               provider: str, base_url: str | None, timeout: float | None,
               max_retries: int | None, placeholder_key: str | None = None) -> Any:
    """An SDK's async client: the key from *api_key* or *key_env*; without one, the
    *placeholder_key* when a *base_url* is set and the provider allows it.

    Raises:
        MissingDependencyError: the SDK's extra is not installed.
        UserError: no key (and no *base_url* where a placeholder would do).
    """
    sdk = _sdk(module)
    key = api_key or environment().get(key_env)
    if not key:
        if base_url is None or placeholder_key is None:
            raise UserError(f"no {provider} API key: set {key_env}")
        key = placeholder_key
    options: dict[str, Any] = {"api_key": key}
    if base_url is not None:
        options["base_url"] = base_url
    if timeout is not None:
        options["timeout"] = timeout
    if max_retries is not None:
        options["max_retries"] = max_retries
    return getattr(sdk, client_class)(**options)


class Assembler(Protocol):
    """A stream assembler of :mod:`anfitrion.models._streaming`."""

    def feed(self, event: object, /) -> str: ...

    def result(self) -> Any: ...


class WireModel:
    """What the SDK-backed models share: the profile their requests are built with, tool names
    the provider refuses sent under stand-ins and mapped back, and one request sent plain or
    streamed, with the SDK's errors translated.

    A subclass sets the class attributes and ``_profile``, ``_model``, ``_client`` and
    ``_error_type``, and says how to build a body, send it, assemble a stream and read a reply.
    """

    name_prefix: ClassVar[str]
    """What :attr:`name` starts with (``openai-chat`` in ``openai-chat:qwen``)."""
    gen_ai_provider: ClassVar[str]
    """The provider, as OpenTelemetry's ``gen_ai.provider.name`` names it."""
    wire_format: ClassVar[str]
    """The format's id in errors (``AdapterError.provider``, ``ModelError.provider``)."""

    _profile: Profile
    _model: str
    _client: Any
    _error_type: type[BaseException]

    @property
    def name(self) -> str:
        return f"{self.name_prefix}:{self._model}"

    @property
    def provider(self) -> str:
        """The provider, as OpenTelemetry's ``gen_ai.provider.name`` names it."""
        return self.gen_ai_provider

    @property
    def profile(self) -> Profile:
        """The capability flags this model's requests are built with."""
        return self._profile

    async def respond(self, request: ModelRequest) -> Reply:
        """One reply; streams text to ``request.on_text`` when it is set.

        Raises:
            ModelError: the API or the connection failed.
            AdapterError: the response cannot be represented, did not complete, or its stream
                ended early.
        """
        safe, names = wire_safe(request, self._profile)
        return restore_names(await self._respond(safe), names)

    async def _respond(self, request: ModelRequest) -> Reply:
        on_text = request.on_text
        body = self._body(request, stream=on_text is not None)
        with sdk_errors(self._error_type, self.wire_format):
            if on_text is None:
                return self._read(as_dict(await self._create(body)), request)
            assembler = self._assembler()
            async for event in await self._create(body):
                delta = assembler.feed(as_dict(event))
                if delta:
                    on_text(delta)
        return self._read(assembler.result(), request)

    def _body(self, request: ModelRequest, *, stream: bool) -> Any:
        raise NotImplementedError

    async def _create(self, body: Any) -> Any:
        """The SDK's call: a response, or (for a streamed body) an async iterator of events."""
        raise NotImplementedError

    def _assembler(self) -> Assembler:
        raise NotImplementedError

    def _read(self, payload: Any, request: ModelRequest) -> Reply:
        raise NotImplementedError
