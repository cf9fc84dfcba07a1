"""A pydantic-ai agent made durable: its model requests and tool calls are steps of a run.

    from pydantic_ai import Agent
    import tenure
    from tenure.integrations import pydantic_ai as durable

    support = Agent(instructions="Answer support tickets.", output_type=Answer)

    @support.tool_plain
    def refund(order_id: str) -> str: ...

    rt = tenure.Runtime("sqlite:///runs.db")
    rt.add_model("default", tenure.providers.OpenAICompatible(...))
    durable.register(rt, support, name="support", effects={"lookup": "read_only"})
    rt.run(tenure.RunRequest(agent="support", input={"prompt": "refund order 7"}))

`register` adds an agent function (SPEC §20) whose input is the user's `prompt` and the
run's `deps` (JSON, validated against the agent's `deps_type`, or turned into deps by the
`deps=` factory). Each segment runs the pydantic-ai agent from the start with a model that
asks `ctx.model` (so every request is journaled, with its usage and cost, under capacity,
streaming and budgets) and with its toolsets wrapped so that every tool call is a `ctx.step`
with the tool's declared effect: a resumed run gets recorded answers and recorded tool
results back, and a write tool that ran is never run again. A tool without a declared effect
is a `non_idempotent_write` (said in the log at registration). The run's output is the
agent's output as JSON (a pydantic model is dumped).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

try:
    import pydantic_ai
    from pydantic_ai.exceptions import ModelRetry
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        ModelResponsePart,
        RetryPromptPart,
        SystemPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.tools import RunContext, ToolDefinition
    from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, WrapperToolset
    from pydantic_ai.toolsets.abstract import ToolsetTool
    from pydantic_ai.usage import RequestUsage
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "tenure.integrations.pydantic_ai needs pydantic-ai: pip install 'tenure[pydantic-ai]'"
    ) from exc

from pydantic import TypeAdapter, ValidationError
from pydantic_core import to_jsonable_python

from tenure._errors import InvalidRequest
from tenure._types import Probe, ToolContext, ToolEffect
from tenure.agent._functions import AgentContext
from tenure.integrations._common import (
    HeldOnProcessLoop,
    Undeclared,
    check_effects,
    check_probes,
    declared_effects,
    effect_of,
    on_process_loop,
    say_listed_at_run_time,
)
from tenure.providers._base import ModelReply, ToolSpec

if TYPE_CHECKING:
    from tenure.runtime import Runtime

FRAMEWORK = "pydantic-ai"
# How a tool's ModelRetry crosses the journal: recorded as the step's result, raised again
# (on the first run and on every replay) where pydantic-ai expects it.
_RETRY_KEY = "__tenure_model_retry__"
_STEP: contextvars.ContextVar[ToolContext | None] = contextvars.ContextVar(
    "tenure_pydantic_ai_step", default=None
)


def step_context() -> ToolContext | None:
    """Inside a tool call of a registered agent: the step's `tenure.ToolContext` (its
    `idempotency_key` is `RUN_ID:POSITION`, the same on every retry of this call, to pass to
    the outside system the tool writes to); None elsewhere."""
    return _STEP.get()


def register(
    rt: Runtime,
    agent: pydantic_ai.Agent[Any, Any],
    *,
    name: str | None = None,
    effects: Mapping[str, ToolEffect | str] | None = None,
    model: str | None = None,
    deps: Callable[[Any], Any] | None = None,
    probes: Mapping[str, Callable[[ToolContext, dict[str, Any]], Probe]] | None = None,
) -> str:
    """Register `agent` on `rt` as the agent function `name` (default: the agent's name) and
    return that name. `effects` maps tool names to their effect (others:
    `non_idempotent_write`); `model` is the tenure model its requests go to (default: the
    run's); `deps` turns the run's JSON `deps` into the agent's dependencies (default:
    validated against the agent's `deps_type`). `probes` maps a write tool's name to its
    probe, `probe(tool_context, arguments) -> tenure.Probe`: asked whether a call cut off by
    a crash happened (SPEC §16) instead of dead-lettering the run."""
    if not isinstance(agent, pydantic_ai.Agent):
        raise InvalidRequest(f"{FRAMEWORK}: expected a pydantic_ai.Agent, got {agent!r}")
    agent_name = name or agent.name
    if not agent_name:
        raise InvalidRequest(f"{FRAMEWORK}: the agent has no name: pass name=")
    declared = declared_effects(FRAMEWORK, effects)
    known = _function_tools(agent)
    # An MCP server's toolset names its tools only when asked, at run time: `effects` may
    # name them (undeclared, they are fenced as non-idempotent writes like any other).
    dynamic = any(not isinstance(t, FunctionToolset) for t in agent.toolsets)
    check_effects(FRAMEWORK, agent_name, declared, known, more_at_run_time=dynamic)
    for toolset in agent.toolsets:
        if not isinstance(toolset, FunctionToolset):
            say_listed_at_run_time(FRAMEWORK, agent_name, _label(toolset), declared)
    checked = check_probes(FRAMEWORK, agent_name, declared, probes, known)
    make_deps = deps if deps is not None else _deps_parser(agent)
    undeclared = Undeclared(FRAMEWORK, agent_name, declared)

    def run_agent(ctx: AgentContext, prompt: str, deps: Any = None) -> Any:
        runner = _Runner(ctx, agent, declared, checked, model, undeclared)
        return runner.run(prompt, make_deps(deps))

    run_agent.__doc__ = _description(agent, agent_name)
    rt.agent(name=agent_name)(run_agent)
    return agent_name


def _description(agent: pydantic_ai.Agent[Any, Any], agent_name: str) -> str:
    return (
        f"The pydantic-ai agent {agent_name}, made durable.\n\n"
        "Args:\n"
        "    prompt: the user's prompt\n"
        "    deps: the agent's dependencies, as JSON\n"
    )


def _function_tools(agent: pydantic_ai.Agent[Any, Any]) -> list[str]:
    """The names of the function tools known before any run (an MCP server's tools are
    known only once it is asked, at run time: they take the default effect unless named)."""
    names: list[str] = []
    for toolset in agent.toolsets:
        if isinstance(toolset, FunctionToolset):
            names.extend(toolset.tools)
    return names


def _deps_parser(agent: pydantic_ai.Agent[Any, Any]) -> Callable[[Any], Any]:
    deps_type = agent.deps_type
    if deps_type is type(None):
        return lambda value: None
    adapter: TypeAdapter[Any] = TypeAdapter(deps_type)

    def parse(value: Any) -> Any:
        try:
            return adapter.validate_python(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "deps"
            raise InvalidRequest(f"{FRAMEWORK}: invalid deps: {where}: {first['msg']}") from None

    return parse


class _Runner:
    """One segment's run of the pydantic-ai agent, its requests and tool calls as steps."""

    def __init__(
        self,
        ctx: AgentContext,
        agent: pydantic_ai.Agent[Any, Any],
        declared: Mapping[str, ToolEffect],
        probes: Mapping[str, Callable[..., Probe]],
        model: str | None,
        undeclared: Undeclared,
    ) -> None:
        self.ctx = ctx
        self.agent = agent
        self.declared = declared
        self.probes = probes
        self.model = model
        self.undeclared = undeclared

    def run(self, prompt: str, deps: Any) -> Any:
        model = FunctionModel(self._request, model_name=f"tenure:{self.model or 'run'}")
        toolsets = [
            StepToolset(
                t if isinstance(t, FunctionToolset) else ProcessLoopToolset(t, self.undeclared),
                self,
            )
            for t in self.agent.toolsets
        ]

        async def main() -> Any:
            # Every toolset wrapped, the agent's own function tools included (so they are
            # taken out of it for the run: `tools=[]`).
            with self.agent.override(model=model, toolsets=toolsets, tools=[]):
                result = await self.agent.run(prompt, deps=deps)
            return result.output

        # Its own loop in the segment's thread: the model and tool steps block it while they
        # run, which keeps them in one order on every replay (parallel tool calls included).
        output = asyncio.run(main())
        return to_jsonable_python(output)

    async def _request(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        tools = [_spec(t) for t in (*info.function_tools, *info.output_tools)]
        chat = to_chat(messages, info.instructions)
        reply = self.ctx.model(chat, model=self.model, tools=tools)
        return to_response(reply)

    def call(self, name: str, args: dict[str, Any], run: Callable[[], Any]) -> Any:
        """The tool call as a step named after the tool, with its declared effect."""

        async def tool_step(context: ToolContext, arguments: dict[str, Any]) -> Any:
            token = _STEP.set(context)
            try:
                return await run()
            except ModelRetry as retry:
                return {_RETRY_KEY: retry.message}
            finally:
                _STEP.reset(token)

        tool_step.__name__ = name
        effect = effect_of(self.declared, name)
        # The arguments go as one value: a tool's own argument may be called `name`.
        probe = self.probes.get(name)
        result = self.ctx.step(tool_step, args, name=name, effect=effect, probe=probe)
        if isinstance(result, dict) and set(result) == {_RETRY_KEY}:
            raise ModelRetry(str(result[_RETRY_KEY]))
        return result


class StepToolset(WrapperToolset[Any]):
    """A toolset whose every call is a step of the tenure run."""

    def __init__(self, wrapped: AbstractToolset[Any], runner: _Runner) -> None:
        super().__init__(wrapped)
        self._runner = runner

    def visit_and_replace(
        self, visitor: Callable[[AbstractToolset[Any]], AbstractToolset[Any]]
    ) -> AbstractToolset[Any]:
        return self  # its calls are steps: nothing may wrap the tools inside it again

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        wrapped = self.wrapped

        def run() -> Any:
            return wrapped.call_tool(name, tool_args, ctx, tool)

        return self._runner.call(name, to_jsonable_python(tool_args), run)


class ProcessLoopToolset(WrapperToolset[Any]):
    """A toolset that holds a connection (an MCP server's session), kept on tenure's process
    loop, where its calls run as steps (`HeldOnProcessLoop` says why); its tools are listed
    there too."""

    def __init__(self, wrapped: AbstractToolset[Any], undeclared: Undeclared) -> None:
        super().__init__(wrapped)
        self._undeclared = undeclared
        self._entered = 0
        self._held = HeldOnProcessLoop(wrapped)

    async def __aenter__(self) -> ProcessLoopToolset:
        self._entered += 1
        if self._entered == 1:
            try:
                await self._held.enter()
            except BaseException:
                self._entered = 0
                raise
        return self

    async def __aexit__(self, *args: Any) -> bool | None:
        self._entered -= 1
        if self._entered == 0:
            await self._held.exit()
        return None

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools: dict[str, ToolsetTool[Any]] = await on_process_loop(self.wrapped.get_tools(ctx))
        self._undeclared.seen(_label(self.wrapped), tools)
        return tools

    def visit_and_replace(
        self, visitor: Callable[[AbstractToolset[Any]], AbstractToolset[Any]]
    ) -> AbstractToolset[Any]:
        return self


def _label(toolset: AbstractToolset[Any]) -> str:
    return f"toolset {toolset.id}" if toolset.id else f"its {type(toolset).__name__}"


def _spec(tool: ToolDefinition) -> ToolSpec:
    return ToolSpec(tool.name, tool.description or "", dict(tool.parameters_json_schema))


def to_chat(messages: list[ModelMessage], instructions: str | None) -> list[dict[str, Any]]:
    """pydantic-ai's history as chat-completions messages (the journal's form)."""
    chat: list[dict[str, Any]] = []
    if instructions:
        chat.append({"role": "system", "content": instructions})
    for message in messages:
        if isinstance(message, ModelRequest):
            chat.extend(_request_messages(message))
        elif isinstance(message, ModelResponse):
            chat.append(_response_message(message))
    return chat


def _request_messages(message: ModelRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, SystemPromptPart):
            out.append({"role": "system", "content": part.content})
        elif isinstance(part, UserPromptPart):
            content = part.content
            text = content if isinstance(content, str) else _text(content)
            out.append({"role": "user", "content": text})
        elif isinstance(part, ToolReturnPart):
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": part.tool_call_id,
                    "content": part.model_response_str(),
                }
            )
        elif isinstance(part, RetryPromptPart):
            if part.tool_name is None:
                out.append({"role": "user", "content": part.model_response()})
            else:
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": part.tool_call_id,
                        "content": part.model_response(),
                    }
                )
    return out


def _text(content: Any) -> str:
    parts = (c if isinstance(c, str) else json.dumps(to_jsonable_python(c)) for c in content)
    return "\n".join(parts)


def _response_message(message: ModelResponse) -> dict[str, Any]:
    text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
    calls = [
        {
            "id": p.tool_call_id,
            "type": "function",
            "function": {"name": p.tool_name, "arguments": p.args_as_json_str()},
        }
        for p in message.parts
        if isinstance(p, ToolCallPart)
    ]
    out: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        out["tool_calls"] = calls
    return out


def to_response(reply: ModelReply) -> ModelResponse:
    """tenure's ModelReply as pydantic-ai's response (usage and cost kept)."""
    parts: list[ModelResponsePart] = []
    if reply.text:
        parts.append(TextPart(reply.text))
    for call in reply.tool_calls:
        parts.append(ToolCallPart(call.name, dict(call.args), tool_call_id=call.id))
    usage = RequestUsage(
        input_tokens=reply.usage.input_tokens, output_tokens=reply.usage.output_tokens
    )
    return ModelResponse(parts=parts, usage=usage, model_name=reply.model or None)


__all__ = [
    "ProcessLoopToolset",
    "StepToolset",
    "register",
    "step_context",
    "to_chat",
    "to_response",
]
