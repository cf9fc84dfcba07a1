"""Model providers: `Scripted` (deterministic, for tests and the demo) and real endpoints."""

from tenure.providers._base import ModelCall, ModelReply, Provider, ToolCall, ToolSpec
from tenure.providers.scripted import Scripted

__all__ = ["ModelCall", "ModelReply", "Provider", "Scripted", "ToolCall", "ToolSpec"]
