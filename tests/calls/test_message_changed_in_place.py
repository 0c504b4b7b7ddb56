"""A message changed in place between two attempts of one run is a new input.

A notebook or a service keeps a conversation's message objects and edits them: a part of the
content, a provider field, a tool call's arguments, with no assignment to the message's
fields. The next attempt of the same run id must execute the model call with what the message
holds now, never replay the answer to what it held before; an attempt with no change still
replays. Generated over every route a model call takes (see ``ROUTES``) and every container a
message holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

import spanpoint
from fakes import ConversationModel, count_effect, read_effects


class EchoModel(ConversationModel):
    """Answers with everything the user's messages hold, so an answer shows what it saw."""

    effects: str = ""

    def answer(self, messages: Sequence[BaseMessage]) -> AIMessage:
        count_effect(self.effects, "model")
        said = [[m.content, m.additional_kwargs] for m in messages if m.type == "human"]
        return AIMessage(content=f"you said {said}")


#: middleware: CheckpointMiddleware in the agent; seams: GraphRunner(strategy="calls");
#: zero_code: the instrumentor's default (the graph call is the boundary); zero_code_calls:
#: the instrumentor with the calls strategy.
ROUTES = ["middleware", "seams", "zero_code", "zero_code_calls"]

EDITS: dict[str, Callable[[HumanMessage], None]] = {
    "a part's text": lambda m: m.content[0].__setitem__("text", "refund 99999"),
    "a part appended": lambda m: m.content.append({"type": "text", "text": "and 5 more"}),
    "a provider field": lambda m: m.additional_kwargs.__setitem__("priority", "urgent"),
    "a nested field": lambda m: m.additional_kwargs["meta"].__setitem__("amount", 99999),
    "1 for True": lambda m: m.additional_kwargs["meta"].__setitem__("approved", 1),
}


def attempt(route: str, agent: Any, run_id: str, message: HumanMessage) -> str:
    """The agent's answer to ``message`` in an attempt of ``run_id``."""
    request = {"messages": [message]}
    with spanpoint.run(run_id):
        if route == "seams":
            runner = spanpoint.GraphRunner(agent, name="refunds", strategy="calls")
            out = runner.invoke(request, thread_id=run_id).output
        else:
            out = agent.invoke(request)
    return str(out["messages"][-1].content)


@pytest.mark.parametrize("route", ROUTES, indirect=True)
@pytest.mark.parametrize("edit", list(EDITS))
def test_a_message_changed_in_place_executes_again(route: str, edit: str, tmp_path: Path) -> None:
    effects = tmp_path / "effects.txt"
    model = EchoModel(effects=str(effects))
    middleware = [spanpoint.CheckpointMiddleware()] if route == "middleware" else []
    agent = create_agent(model, [], middleware=middleware)
    message = HumanMessage(
        [{"type": "text", "text": "refund 10"}],
        additional_kwargs={"meta": {"amount": 10, "approved": True}},
    )
    run_id = f"refund-{route}-{edit}"
    first = attempt(route, agent, run_id, message)
    assert "refund 10" in first
    assert attempt(route, agent, run_id, message) == first
    assert read_effects(effects)["model"] == 1, "an unchanged attempt did not replay"
    EDITS[edit](message)
    second = attempt(route, agent, run_id, message)
    assert read_effects(effects)["model"] == 2, "the changed message's answer was replayed"
    assert second != first
    assert second == model.answer([message]).content
