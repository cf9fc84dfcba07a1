"""Model providers: `Scripted` (deterministic, for tests and the demo), `OpenAICompatible`
(any chat-completions endpoint, through the optional `openai` extra) and `Fallback` (a
chain of providers).

`OpenAICompatible` is imported on first use, so that `import tenure` works without the
`openai` package installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tenure.providers._base import ModelCall, ModelReply, Price, Provider, ToolCall, ToolSpec
from tenure.providers.fallback import Fallback
from tenure.providers.scripted import Scripted

if TYPE_CHECKING:
    from tenure.providers.openai import OpenAICompatible

__all__ = [
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

_LAZY = frozenset({"OpenAICompatible"})


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from tenure.providers import openai

        return getattr(openai, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
