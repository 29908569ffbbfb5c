"""Models: the protocol, the offline scripted model, the streaming wrapper and the provider
adapters."""

from __future__ import annotations

from ._base import Model, ModelRequest
from ._streaming import StreamingModel
from .scripted import ScriptedModel

__all__ = ["Model", "ModelRequest", "ScriptedModel", "StreamingModel"]
