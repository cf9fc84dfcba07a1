"""Agents written with a framework, run as tenure agent functions (SPEC §20).

`tenure.integrations.pydantic_ai` (extra `tenure[pydantic-ai]`) and
`tenure.integrations.openai_agents` (extra `tenure[openai-agents]`) wrap an agent the user
already has: its model requests become `ctx.model` steps and its tool calls `ctx.step` steps,
so a run resumed after a crash replays them from the journal instead of repeating them.
"""
