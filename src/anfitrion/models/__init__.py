"""Models: the protocol, the offline scripted model, the streaming wrapper and the provider
adapters."""

from __future__ import annotations

from ._base import Model, ModelRequest
from ._registry import resolve_model
from ._scripted import ScriptedModel
from ._streaming import StreamingModel

__all__ = ["Model", "ModelRequest", "ScriptedModel", "StreamingModel", "resolve_model"]
