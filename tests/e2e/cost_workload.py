"""A priced agent run, replayed: what makes the dashboards' *cost saved by replay* panel
show real data.

The fake model answers from the conversation and reports its token usage under a model name
the price table knows (``gpt-4o-mini``), as a provider's response would; the run executes
once and then replays, so replay saves exactly the first attempt's cost. Telemetry goes
where the standard ``OTEL_EXPORTER_OTLP_*`` variables say.

    python tests/e2e/cost_workload.py RUN_ID
"""

from __future__ import annotations

import sys
import uuid
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

import spanpoint

PRICED_AS = {"model_name": "gpt-4o-mini", "model_provider": "openai"}


class PricedModel(BaseChatModel):
    """Looks the order up, then answers; reports usage like a real provider."""

    @property
    def _llm_type(self) -> str:
        return "priced-fake"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        usage = {"input_tokens": 400 * len(messages), "output_tokens": 120, "total_tokens": 0}
        if not any(m.type == "tool" for m in messages):
            call = {"name": "order_status", "args": {"order": "7"}, "id": f"c_{uuid.uuid4().hex}"}
            message = AIMessage("", tool_calls=[call], usage_metadata=usage)
        else:
            message = AIMessage("Order 7 ships tomorrow.", usage_metadata=usage)
        message.response_metadata = dict(PRICED_AS)
        return ChatResult(generations=[ChatGeneration(message=message)])


@tool
def order_status(order: str) -> str:
    """The status of an order."""
    return f"order {order}: ships tomorrow"


def main(run_id: str) -> int:
    """Run the agent twice under ``run_id``; 0 when the second attempt replayed a cost."""
    spanpoint.configure()
    runner = spanpoint.GraphRunner(
        create_agent(PricedModel(), [order_status]), name="orders", strategy="calls"
    )
    results = []
    for _attempt in range(2):
        with spanpoint.run(run_id, name="orders"):
            question = {"messages": [("user", "where is order 7?")]}
            results.append(runner.invoke(question, thread_id=run_id))
    same = results[0].output["messages"][-1].content == results[1].output["messages"][-1].content
    print(f"replayed the same answer: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else f"cost-{uuid.uuid4().hex[:6]}"))
