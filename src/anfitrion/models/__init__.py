"""Models: the protocol, the offline scripted model, and the provider adapters."""

from __future__ import annotations

from ._base import Model, ModelRequest
from .scripted import ScriptedModel

__all__ = ["Model", "ModelRequest", "ScriptedModel"]
