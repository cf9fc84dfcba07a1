"""An OpenAI Agents SDK agent made durable: its model calls, tool calls and handoffs are steps.

    from agents import Agent, function_tool
    import tenure
    from tenure.integrations import openai_agents as durable

    @function_tool
    def refund(order_id: str) -> str: ...

    billing = Agent(name="billing", instructions="Refund orders.", tools=[refund])
    triage = Agent(name="triage", instructions="Route the ticket.", handoffs=[billing])

    rt = tenure.Runtime("sqlite:///runs.db")
    rt.add_model("default", tenure.providers.OpenAICompatible(...))
    durable.register(rt, triage, effects={"refund": "non_idempotent_write"})
    rt.run(tenure.RunRequest(agent="triage", input={"prompt": "refund order 7"}))

`register` adds an agent function (SPEC §20) whose input is the user's `prompt` and the
run's `context` (JSON, given to the SDK as the run context, or turned into one by the
`context=` factory). Each segment runs the SDK's `Runner` from the start with every agent's
model replaced by one that asks `ctx.model` (each request journaled, with usage and cost),
every function tool of the agent and of the agents it hands off to wrapped so that a call is
a `ctx.step` with the tool's declared effect, and every handoff recorded as a step named
`handoff-AGENT`, and every guardrail's check as a step `guardrail-NAME` (input guardrails
run before the agent rather than beside its first request). A tool without a declared effect
is a `non_idempotent_write` (said in the log at registration). The run's output is the final
agent's output as JSON. Tracing is disabled (a run's journal is its trace).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import inspect
import json
import re
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeGuard

try:
    import agents
    from agents import (
        FunctionTool,
        GuardrailFunctionOutput,
        Handoff,
        ModelResponse,
        RunConfig,
        Runner,
        handoff,
    )
    from agents.models.chatcmpl_converter import Converter
    from agents.models.interface import Model
    from agents.usage import Usage as AgentsUsage
    from openai.types.chat import ChatCompletionMessage
    from openai.types.chat.chat_completion_message_function_tool_call import (
        ChatCompletionMessageFunctionToolCall,
        Function,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "tenure.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'tenure[openai-agents]'"
    ) from exc

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

FRAMEWORK = "openai-agents"
HANDOFF_PREFIX = "handoff-"
GUARDRAIL_PREFIX = "guardrail-"
_STEP: contextvars.ContextVar[ToolContext | None] = contextvars.ContextVar(
    "tenure_openai_agents_step", default=None
)


def step_context() -> ToolContext | None:
    """Inside a function tool of a registered agent: the step's `tenure.ToolContext` (its
    `idempotency_key` is `RUN_ID:POSITION`, the same on every retry of this call); None
    elsewhere."""
    return _STEP.get()


def register(
    rt: Runtime,
    agent: agents.Agent[Any],
    *,
    name: str | None = None,
    effects: Mapping[str, ToolEffect | str] | None = None,
    model: str | None = None,
    context: Callable[[Any], Any] | None = None,
    probes: Mapping[str, Callable[[ToolContext, dict[str, Any]], Probe]] | None = None,
    max_turns: int = 10,
) -> str:
    """Register `agent` (with the agents it hands off to) on `rt` as the agent function
    `name` (default: the agent's name) and return that name. `effects` maps function tool
    names to their effect (others: `non_idempotent_write`); `model` is the tenure model every
    agent's requests go to (default: the run's); `context` turns the run's JSON `context`
    into the SDK's run context; `probes` maps a write tool to `probe(tool_context,
    arguments) -> tenure.Probe` (SPEC §16)."""
    if not isinstance(agent, agents.Agent):
        raise InvalidRequest(f"{FRAMEWORK}: expected an agents.Agent, got {agent!r}")
    agent_name = name or agent.name
    declared = declared_effects(FRAMEWORK, effects)
    reachable = _reachable(agent)
    known = sorted({t.name for a in reachable for t in a.tools if _is_function(t)})
    dynamic = any(a.mcp_servers for a in reachable)  # their tools are known at run time
    check_effects(FRAMEWORK, agent_name, declared, known, more_at_run_time=dynamic)
    for server in _servers(reachable):
        say_listed_at_run_time(FRAMEWORK, agent_name, f"MCP server {server.name}", declared)
    checked = check_probes(FRAMEWORK, agent_name, declared, probes, known)
    make_context = context if context is not None else (lambda value: value)
    undeclared = Undeclared(FRAMEWORK, agent_name, declared)

    def run_agent(ctx: AgentContext, prompt: str, context: Any = None) -> Any:
        runner = _Runner(ctx, declared, checked, model, undeclared)
        return runner.run(agent, prompt, make_context(context), max_turns)

    run_agent.__doc__ = (
        f"The OpenAI Agents SDK agent {agent_name}, made durable.\n\n"
        "Args:\n"
        "    prompt: the user's prompt\n"
        "    context: the run context, as JSON\n"
    )
    rt.agent(name=agent_name)(run_agent)
    return agent_name


def _step_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)


def _is_function(tool: Any) -> TypeGuard[FunctionTool]:
    return isinstance(tool, FunctionTool)


def _target(item: Any) -> agents.Agent[Any] | None:
    if isinstance(item, agents.Agent):
        return item
    return None


def _reachable(agent: agents.Agent[Any]) -> list[agents.Agent[Any]]:
    """The agent and every agent it may hand off to (named as agents), each once."""
    found: dict[int, agents.Agent[Any]] = {}
    todo = [agent]
    while todo:
        current = todo.pop()
        if id(current) in found:
            continue
        found[id(current)] = current
        todo.extend(t for h in current.handoffs if (t := _target(h)) is not None)
    return list(found.values())


def _servers(reachable: list[agents.Agent[Any]]) -> list[Any]:
    """The MCP servers the agents hold, each once."""
    found: dict[int, Any] = {}
    for agent in reachable:
        for server in agent.mcp_servers:
            found.setdefault(id(server), server)
    return list(found.values())


class _Runner:
    """One segment's run of the SDK's Runner, its model calls, tools and handoffs as steps."""

    def __init__(
        self,
        ctx: AgentContext,
        declared: Mapping[str, ToolEffect],
        probes: Mapping[str, Callable[..., Probe]],
        model: str | None,
        undeclared: Undeclared,
    ) -> None:
        self.ctx = ctx
        self.declared = declared
        self.probes = probes
        self.model = model
        self.undeclared = undeclared
        self._wrapped: dict[int, agents.Agent[Any]] = {}

    def run(self, agent: agents.Agent[Any], prompt: str, context: Any, max_turns: int) -> Any:
        start = self.wrap(agent)
        config = RunConfig(model=StepModel(self), tracing_disabled=True)

        async def main() -> Any:
            # The agents' MCP servers are connected for this segment on the process loop,
            # where their tools are listed and called (as steps).
            held = [HeldOnProcessLoop(s) for s in _servers(_reachable(agent))]
            entered: list[HeldOnProcessLoop] = []
            try:
                for server in held:
                    await server.enter()
                    entered.append(server)
                return await Runner.run(
                    start, prompt, context=context, run_config=config, max_turns=max_turns
                )
            finally:
                for server in reversed(entered):
                    await server.exit()

        # Its own loop in the segment's thread: every step blocks it while it runs, which
        # keeps the steps in one order on every replay (tools called in parallel included).
        result = asyncio.run(main())
        output = result.final_output
        return to_jsonable_python(output)

    def wrap(self, agent: agents.Agent[Any]) -> agents.Agent[Any]:
        """A copy of `agent` whose function tools and handoffs are steps (each agent once:
        handoffs may form a cycle)."""
        known = self._wrapped.get(id(agent))
        if known is not None:
            return known
        copy = agent.clone()
        self._wrapped[id(agent)] = copy
        copy.tools = [self._tool(t) if _is_function(t) else t for t in agent.tools]
        copy.handoffs = [self._handoff(h) for h in agent.handoffs]
        # Input guardrails before the agent, not beside its first request: a guardrail's
        # step and the request then take their positions in one order on every replay.
        copy.input_guardrails = [
            dataclasses.replace(
                g, guardrail_function=self._guardrail(g), name=g.get_name(), run_in_parallel=False
            )
            for g in agent.input_guardrails
        ]
        copy.output_guardrails = [
            dataclasses.replace(g, guardrail_function=self._guardrail(g), name=g.get_name())
            for g in agent.output_guardrails
        ]
        if agent.mcp_servers:
            # An MCP server's tools are listed at each turn: wrapped as they come, so that
            # none runs outside a step.
            listed = copy.get_mcp_tools

            async def get_mcp_tools(run_context: Any) -> list[Any]:
                tools: list[Any] = await on_process_loop(listed(run_context))
                self.undeclared.seen(
                    f"the MCP servers of agent {agent.name}", (t.name for t in tools)
                )
                return [self._tool(t) if _is_function(t) else t for t in tools]

            copy.get_mcp_tools = get_mcp_tools  # type: ignore[method-assign]
        return copy

    def _tool(self, tool: FunctionTool) -> FunctionTool:
        invoke = tool.on_invoke_tool
        name = tool.name
        runner = self

        async def on_invoke_tool(tool_context: Any, arguments: str) -> Any:
            args = json.loads(arguments or "{}")

            async def tool_step(context: ToolContext, args: Any) -> Any:
                token = _STEP.set(context)
                try:
                    return to_jsonable_python(await invoke(tool_context, arguments))
                finally:
                    _STEP.reset(token)

            tool_step.__name__ = name
            effect = effect_of(runner.declared, name)
            return runner.ctx.step(
                tool_step, args, name=name, effect=effect, probe=runner.probes.get(name)
            )

        return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)

    def _guardrail(self, guardrail: Any) -> Callable[..., Any]:
        """A guardrail's function as a step `guardrail-NAME`: it runs once, and its verdict
        (output_info as JSON, tripwire) comes back from the journal on every replay."""
        check_function = guardrail.guardrail_function
        step_name = GUARDRAIL_PREFIX + _step_name(guardrail.get_name())
        runner = self

        async def guarded(run_context: Any, agent: Any, value: Any) -> GuardrailFunctionOutput:
            async def check(checked: Any) -> dict[str, Any]:
                found = check_function(run_context, agent, value)
                if inspect.isawaitable(found):
                    found = await found
                return {
                    "output_info": to_jsonable_python(found.output_info),
                    "tripwire_triggered": bool(found.tripwire_triggered),
                }

            check.__name__ = step_name
            verdict = runner.ctx.step(check, to_jsonable_python(value), name=step_name)
            return GuardrailFunctionOutput(
                output_info=verdict["output_info"],
                tripwire_triggered=bool(verdict["tripwire_triggered"]),
            )

        return guarded

    def _handoff(self, item: Any) -> Handoff[Any, Any]:
        given: Handoff[Any, Any] = item if isinstance(item, Handoff) else handoff(item)
        invoke = given.on_invoke_handoff
        runner = self
        step_name = HANDOFF_PREFIX + _step_name(given.agent_name)

        async def on_invoke_handoff(run_context: Any, arguments: str) -> Any:
            # The handoff, with its own callback (`on_handoff`), runs once, as a step; the
            # agent it returns is wrapped like the first.
            target: list[agents.Agent[Any]] = []

            async def handed(args: Any) -> str:
                target.append(await invoke(run_context, arguments))
                return target[0].name

            handed.__name__ = step_name
            args = json.loads(arguments) if arguments else None
            runner.ctx.step(handed, args, name=step_name)
            if not target:  # replayed: the handoff ran in an earlier segment
                found = _target(item)
                if found is None:  # a Handoff object gives its agent only by being invoked
                    found = await invoke(run_context, arguments)
                target.append(found)
            return runner.wrap(target[0])

        return dataclasses.replace(given, on_invoke_handoff=on_invoke_handoff)

    def ask(
        self,
        system_instructions: str | None,
        items: Any,
        tools: list[Any],
        handoffs: list[Handoff[Any, Any]],
    ) -> ModelResponse:
        messages: list[dict[str, Any]] = []
        if system_instructions:
            messages.append({"role": "system", "content": system_instructions})
        messages.extend(to_jsonable_python(m) for m in Converter.items_to_messages(items))
        shown = [Converter.tool_to_openai(t) for t in tools if _is_function(t)]
        shown += [Converter.convert_handoff_tool(h) for h in handoffs]
        specs = [_spec(t) for t in shown]
        reply = self.ctx.model(messages, model=self.model, tools=specs)
        return to_response(reply)


def _spec(tool: Any) -> ToolSpec:
    function = tool["function"]
    return ToolSpec(
        function["name"], function.get("description") or "", dict(function["parameters"])
    )


def to_response(reply: ModelReply) -> ModelResponse:
    """tenure's ModelReply as the SDK's response items (usage kept)."""
    calls: list[Any] = [
        ChatCompletionMessageFunctionToolCall(
            id=call.id,
            type="function",
            function=Function(name=call.name, arguments=json.dumps(call.args)),
        )
        for call in reply.tool_calls
    ]
    message = ChatCompletionMessage(role="assistant", content=reply.text, tool_calls=calls or None)
    usage = AgentsUsage(
        requests=1,
        input_tokens=reply.usage.input_tokens,
        output_tokens=reply.usage.output_tokens,
        total_tokens=reply.usage.input_tokens + reply.usage.output_tokens,
    )
    items = Converter.message_to_output_items(message)
    return ModelResponse(output=items, usage=usage, response_id=None)


class StepModel(Model):
    """The SDK's model interface over `ctx.model`: every request a journaled step."""

    def __init__(self, runner: _Runner) -> None:
        self._runner = runner

    async def get_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> ModelResponse:
        return self._runner.ask(system_instructions, input, tools, handoffs)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError(
            "tenure.integrations.openai_agents: run with Runner.run (a run's answer text "
            "streams through tenure's own publisher, SPEC §18)"
        )


__all__ = [
    "GUARDRAIL_PREFIX",
    "HANDOFF_PREFIX",
    "StepModel",
    "register",
    "step_context",
    "to_response",
]
