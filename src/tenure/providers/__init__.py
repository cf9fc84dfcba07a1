"""Model providers: `Scripted` (deterministic, for tests and the demo), `OpenAICompatible`
(any chat-completions endpoint, through the optional `openai` extra), `Anthropic` (Claude's
Messages API, through the optional `anthropic` extra) and `Fallback` (a chain of providers).

`OpenAICompatible` and `Anthropic` are imported on first use, so that `import tenure` works
without either SDK installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tenure.providers._base import (
    AsyncProvider,
    ModelCall,
    ModelReply,
    Price,
    Provider,
    ToolCall,
    ToolSpec,
)
from tenure.providers.fallback import Fallback
from tenure.providers.scripted import Scripted

if TYPE_CHECKING:
    from tenure.providers.anthropic import Anthropic
    from tenure.providers.openai import OpenAICompatible

__all__ = [
    "Anthropic",
    "AsyncProvider",
    "Fallback",
    "ModelCall",
    "ModelReply",
    "OpenAICompatible",
    "Price",
    "Provider",
    "Scripted",
    "ToolCall",
    "ToolSpec",
]


def __getattr__(name: str) -> Any:
    if name == "OpenAICompatible":
        from tenure.providers import openai

        return openai.OpenAICompatible
    if name == "Anthropic":
        from tenure.providers import anthropic

        return anthropic.Anthropic
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
