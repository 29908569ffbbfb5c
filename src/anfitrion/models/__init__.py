"""Models: the protocol, the offline scripted model (and its steps :func:`call` and
:func:`reply`), the streaming wrapper, model strings (:func:`resolve_model`, :func:`as_model`)
and the provider adapters."""

from __future__ import annotations

from ._base import Model, ModelRequest
from ._registry import as_model, resolve_model
from ._scripted import ScriptedModel, call, reply
from ._streaming import StreamingModel

__all__ = ["Model", "ModelRequest", "ScriptedModel", "StreamingModel", "as_model", "call",
           "reply", "resolve_model"]
