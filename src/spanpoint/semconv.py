"""Every attribute, event, metric and span name spanpoint emits, in one place.

Names that exist in ``opentelemetry-semantic-conventions`` are re-exported from there.
Names that upstream has not yet accepted are module-level ``Final`` constants with a
comment naming the proposal they follow, so that renaming them later is a one-line change.
"""

from __future__ import annotations

import functools
import os
from typing import Final

from opentelemetry.semconv.attributes import error_attributes as _error
from opentelemetry.semconv.attributes import server_attributes as _server

from spanpoint._compat import gen_ai_attributes as _gen_ai
from spanpoint._compat import gen_ai_metrics as _gen_ai_metrics

INSTRUMENTATION_NAME: Final = "spanpoint"

# --- GenAI semantic conventions (upstream names) -------------------------------------
GEN_AI_OPERATION_NAME: Final = _gen_ai.GEN_AI_OPERATION_NAME
GEN_AI_PROVIDER_NAME: Final = _gen_ai.GEN_AI_PROVIDER_NAME
GEN_AI_AGENT_NAME: Final = _gen_ai.GEN_AI_AGENT_NAME
GEN_AI_AGENT_ID: Final = _gen_ai.GEN_AI_AGENT_ID
GEN_AI_WORKFLOW_NAME: Final = _gen_ai.GEN_AI_WORKFLOW_NAME
GEN_AI_CONVERSATION_ID: Final = _gen_ai.GEN_AI_CONVERSATION_ID
GEN_AI_REQUEST_MODEL: Final = _gen_ai.GEN_AI_REQUEST_MODEL
GEN_AI_REQUEST_MAX_TOKENS: Final = _gen_ai.GEN_AI_REQUEST_MAX_TOKENS
GEN_AI_REQUEST_TEMPERATURE: Final = _gen_ai.GEN_AI_REQUEST_TEMPERATURE
GEN_AI_REQUEST_TOP_P: Final = _gen_ai.GEN_AI_REQUEST_TOP_P
GEN_AI_REQUEST_TOP_K: Final = _gen_ai.GEN_AI_REQUEST_TOP_K
GEN_AI_REQUEST_SEED: Final = _gen_ai.GEN_AI_REQUEST_SEED
GEN_AI_REQUEST_STOP_SEQUENCES: Final = _gen_ai.GEN_AI_REQUEST_STOP_SEQUENCES
GEN_AI_REQUEST_FREQUENCY_PENALTY: Final = _gen_ai.GEN_AI_REQUEST_FREQUENCY_PENALTY
GEN_AI_REQUEST_PRESENCE_PENALTY: Final = _gen_ai.GEN_AI_REQUEST_PRESENCE_PENALTY
GEN_AI_OUTPUT_TYPE: Final = _gen_ai.GEN_AI_OUTPUT_TYPE
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = _gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
# Input tokens written to a provider's cache: renamed upstream (semantic-conventions-genai #440,
# ``cache_creation`` -> ``cache_write``); the newer name has no Python constant yet, and which
# of the two is emitted is OTEL_SEMCONV_STABILITY_OPT_IN's choice (GEN_AI_RENAMED below).
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: Final = _gen_ai.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS
GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS: Final = "gen_ai.usage.cache_write.input_tokens"
SERVER_ADDRESS: Final = _server.SERVER_ADDRESS
SERVER_PORT: Final = _server.SERVER_PORT
GEN_AI_RESPONSE_MODEL: Final = _gen_ai.GEN_AI_RESPONSE_MODEL
GEN_AI_RESPONSE_ID: Final = _gen_ai.GEN_AI_RESPONSE_ID
GEN_AI_RESPONSE_FINISH_REASONS: Final = _gen_ai.GEN_AI_RESPONSE_FINISH_REASONS
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: Final = _gen_ai.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK
GEN_AI_USAGE_INPUT_TOKENS: Final = _gen_ai.GEN_AI_USAGE_INPUT_TOKENS
GEN_AI_USAGE_OUTPUT_TOKENS: Final = _gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS
GEN_AI_TOKEN_TYPE: Final = _gen_ai.GEN_AI_TOKEN_TYPE
GEN_AI_TOOL_NAME: Final = _gen_ai.GEN_AI_TOOL_NAME
GEN_AI_TOOL_CALL_ID: Final = _gen_ai.GEN_AI_TOOL_CALL_ID
GEN_AI_TOOL_TYPE: Final = _gen_ai.GEN_AI_TOOL_TYPE
GEN_AI_TOOL_CALL_ARGUMENTS: Final = _gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS
GEN_AI_INPUT_MESSAGES: Final = _gen_ai.GEN_AI_INPUT_MESSAGES
GEN_AI_OUTPUT_MESSAGES: Final = _gen_ai.GEN_AI_OUTPUT_MESSAGES
GEN_AI_SYSTEM_INSTRUCTIONS: Final = _gen_ai.GEN_AI_SYSTEM_INSTRUCTIONS
GEN_AI_TOOL_DESCRIPTION: Final = _gen_ai.GEN_AI_TOOL_DESCRIPTION
GEN_AI_TOOL_CALL_RESULT: Final = _gen_ai.GEN_AI_TOOL_CALL_RESULT
ERROR_TYPE: Final = _error.ERROR_TYPE

# gen_ai.operation.name values used by spanpoint.
OP_INVOKE_AGENT: Final = "invoke_agent"
# Proposed upstream for workflow (non-agent) graphs: open-telemetry/semantic-conventions #2912.
OP_INVOKE_WORKFLOW: Final = "invoke_workflow"
OP_CHAT: Final = "chat"
OP_EXECUTE_TOOL: Final = "execute_tool"

# Metrics (upstream names).
METRIC_GEN_AI_OPERATION_DURATION: Final = _gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION
METRIC_GEN_AI_TOKEN_USAGE: Final = _gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE

# --- LangGraph lifecycle (candidate upstream names; align, do not invent rivals) -------
# Proposed in the GenAI SIG's agent-framework lifecycle work (gen_ai.agent.* events).
EVENT_AGENT_PAUSED: Final = "gen_ai.agent.paused"
EVENT_AGENT_RESUMED: Final = "gen_ai.agent.resumed"
EVENT_AGENT_CHECKPOINTED: Final = "gen_ai.agent.checkpointed"
GEN_AI_AGENT_CHECKPOINT_ID: Final = "gen_ai.agent.checkpoint.id"

# LangGraph-specific attributes (no upstream proposal yet; namespaced to the framework).
LANGGRAPH_CHECKPOINT_NS: Final = "langgraph.checkpoint.ns"
LANGGRAPH_NEXT_NODES: Final = "langgraph.next_nodes"
LANGGRAPH_INTERRUPT_COUNT: Final = "langgraph.interrupt.count"
LANGGRAPH_INTERRUPT_IDS: Final = "langgraph.interrupt.ids"
LANGGRAPH_NODE: Final = "langgraph.node"
LANGGRAPH_STREAM_MODE: Final = "langgraph.stream.mode"
LANGGRAPH_TASK_ID: Final = "langgraph.task.id"
LANGGRAPH_CHECKPOINTER: Final = "langgraph.checkpointer"

# --- spanpoint's own names -----------------------------------------------------------
SPAN_RUN: Final = "spanpoint.run"

RUN_ID: Final = "spanpoint.run.id"
RUN_NAME: Final = "spanpoint.run.name"
RUN_ATTEMPT: Final = "spanpoint.run.attempt"
RUN_STATUS: Final = "spanpoint.run.status"
RUN_COMMIT_FAILURES: Final = "spanpoint.run.commit_failures"
#: ``"async"`` on a run whose checkpoints a background committer wrote (absent: ``"sync"``).
RUN_DURABILITY: Final = "spanpoint.run.durability"

BOUNDARY_KIND: Final = "spanpoint.boundary.kind"
BOUNDARY_NAME: Final = "spanpoint.boundary.name"
BOUNDARY_PATH: Final = "spanpoint.boundary.path"
BOUNDARY_ORDINAL: Final = "spanpoint.boundary.ordinal"
CHECKPOINT_KEY: Final = "spanpoint.checkpoint.key"
REPLAYED: Final = "spanpoint.replayed"
#: Metric attribute of spanpoint.boundaries: executed | replayed | failed.
OUTCOME: Final = "spanpoint.outcome"
STRATEGY: Final = "spanpoint.strategy"
STATUS: Final = "spanpoint.status"
SERIALIZATION_ERROR: Final = "spanpoint.serialization.error"
STORE_ERROR: Final = "spanpoint.store.error"
#: Set on an executed boundary span when its committed checkpoint failed its integrity check
#: (sha256 mismatch, or a column of the wrong type): the body ran again instead of a replay.
CHECKPOINT_INTEGRITY_ERROR: Final = "spanpoint.checkpoint.integrity_error"
WARNINGS: Final = "spanpoint.warnings"
# Model/tool calls (middleware): a call's CallCheckpointPolicy mode when it is not
# "checkpoint", and what kind of value a tool returned ("command" for a LangGraph Command).
CALL_MODE: Final = "spanpoint.call.mode"
TOOL_RESULT_TYPE: Final = "spanpoint.tool.result_type"

# Boundary kinds (values of spanpoint.boundary.kind).
KIND_GRAPH_CALL: Final = "graph_call"
KIND_MODEL_CALL: Final = "model_call"
KIND_TOOL_CALL: Final = "tool_call"
KIND_STEP: Final = "step"
BOUNDARY_KINDS: Final = frozenset({KIND_GRAPH_CALL, KIND_MODEL_CALL, KIND_TOOL_CALL, KIND_STEP})

# Span events (records, never boundaries).
EVENT_CHECKPOINT_COMMIT_FAILED: Final = "spanpoint.checkpoint.commit_failed"
#: On the parent span when a boundary's commit was refused because its lease was taken over.
EVENT_LEASE_LOST: Final = "spanpoint.lease.lost"
#: Attribute of spanpoint.lease.lost: returned_committed (the caller got the output another
#: execution committed) | failed (none was committed: LeaseLostError).
LEASE_OUTCOME: Final = "spanpoint.lease.outcome"
EVENT_STREAM_CHUNK: Final = "spanpoint.stream.chunk"
EVENT_CALLBACK: Final = "spanpoint.callback"
# Attributes of spanpoint.callback events (LangChain callbacks, recorded by events.py).
CALLBACK_TYPE: Final = "spanpoint.callback.type"
CALLBACK_RUN_ID: Final = "spanpoint.callback.run_id"
CALLBACK_NAME: Final = "spanpoint.callback.name"
CALLBACK_TOKENS: Final = "spanpoint.callback.tokens"
CALLBACK_DOCUMENTS: Final = "spanpoint.callback.documents"
CALLBACK_CONTENT: Final = "spanpoint.callback.content"
EVENT_WAITING: Final = "spanpoint.run.waiting"

# Stream chunk events (spanpoint.stream.chunk) and the stream's totals on its span.
STREAM_INDEX: Final = "spanpoint.stream.index"
STREAM_KEYS: Final = "spanpoint.stream.keys"
STREAM_CONTENT: Final = "spanpoint.stream.content"
STREAM_CHUNKS: Final = "spanpoint.stream.chunks"
EVENTS_DROPPED: Final = "spanpoint.events.dropped"

# Graph calls: captured (redacted, bounded) call data, only as the capture policy allows.
GRAPH_CONFIG: Final = "spanpoint.graph.config"
GRAPH_CONTEXT: Final = "spanpoint.graph.context"
GRAPH_INPUT: Final = "spanpoint.graph.input"
GRAPH_INTERRUPT_VALUES: Final = "spanpoint.graph.interrupt.values"
STREAM_CLOSED_EARLY: Final = "spanpoint.stream.closed_early"

# Rerun with a durable checkpointer (spanpoint.graph.rerun). What a rerun
# graph call did with the thread its earlier attempt left: "continued" (invoke(None) from the
# latest checkpoint) or "returned" (the call had ended: its state, nothing executed).
GRAPH_RERUN: Final = "spanpoint.graph.rerun"

# Durable waits (spanpoint.waits).
WAIT_NAME: Final = "spanpoint.wait.name"
EVENT_WAIT_RESOLVED: Final = "spanpoint.wait.resolved"

# Log record event names.
LOG_RUN_SUMMARY: Final = "spanpoint.run_summary"

# spanpoint's own metrics.
METRIC_BOUNDARIES: Final = "spanpoint.boundaries"
METRIC_GRAPH_CALLS: Final = "spanpoint.graph.calls"
METRIC_GRAPH_CALL_DURATION: Final = "spanpoint.graph.call.duration"
METRIC_INTERRUPTS: Final = "spanpoint.interrupts"
METRIC_REPLAYS: Final = "spanpoint.replays"
METRIC_GUARD_DETECTIONS: Final = "spanpoint.guard.detections"
METRIC_GUARD_TERMINATIONS: Final = "spanpoint.guard.terminations"
METRIC_GUARD_REFLECTIONS: Final = "spanpoint.guard.reflections"

# Guard attributes and events.
GUARD_STEP: Final = "spanpoint.guard.step"
GUARD_TOKENS: Final = "spanpoint.guard.tokens"
GUARD_TOKENS_ESTIMATED: Final = "spanpoint.guard.tokens.estimated"
GUARD_COST_USD: Final = "spanpoint.guard.cost_usd"
GUARD_STATE: Final = "spanpoint.guard.state"
GUARD_PATTERN: Final = "spanpoint.guard.pattern"
GUARD_CONFIDENCE: Final = "spanpoint.guard.confidence"
GUARD_EVIDENCE: Final = "spanpoint.guard.evidence"
GUARD_REASON: Final = "spanpoint.guard.reason"
GUARD_MODE: Final = "spanpoint.guard.mode"
GUARD_TOOLS: Final = "spanpoint.guard.tools"
GUARD_STOP_KIND: Final = "spanpoint.guard.stop_kind"
GUARD_RESUMABLE: Final = "spanpoint.guard.resumable"
GUARD_SKIPPED_TOOL_CALLS: Final = "spanpoint.guard.skipped_tool_calls"
GUARD_REFLECTIONS: Final = "spanpoint.guard.reflections.used"
GUARD_REFLECTIONS_ALLOWED: Final = "spanpoint.guard.reflections.allowed"
GUARD_REFLECTIONS_GRANTED: Final = "spanpoint.guard.reflections.granted"
GUARD_CORRECTION_AUTHOR: Final = "spanpoint.guard.correction.author"
EVENT_GUARD_DETECTION: Final = "spanpoint.guard.detection"
EVENT_GUARD_REFLECTION: Final = "spanpoint.guard.reflection"
EVENT_GUARD_RECOVERED: Final = "spanpoint.guard.recovered"
EVENT_GUARD_TERMINATED: Final = "spanpoint.guard.terminated"
EVENT_GUARD_RESUMED: Final = "spanpoint.guard.resumed"

# --- looks right where users look (viewers) ------------------------------------------
# Opt-in content: the tools offered to a model (GenAI conventions, gen-ai-tool-definitions).
GEN_AI_TOOL_DEFINITIONS: Final = _gen_ai.GEN_AI_TOOL_DEFINITIONS
# A replayed span names its original as attributes too: trace viewers (Phoenix, Grafana's
# trace list) drop span links, so the link alone leads nowhere. Equal to the link's ids.
REPLAY_ORIGINAL_TRACE_ID: Final = "spanpoint.replay.original.trace_id"
REPLAY_ORIGINAL_SPAN_ID: Final = "spanpoint.replay.original.span_id"
# Appended to a replayed span's name ("chat gpt-5 (replayed)"): the name is the only field
# that Jaeger, Tempo and Phoenix all show in a trace tree (reasons in docs/design-notes.md).
REPLAYED_NAME_SUFFIX: Final = " (replayed)"
# The run's root span is a GenAI workflow span ("invoke_workflow {run name}"); this marks
# it as spanpoint's run root so it can be found whatever the run is called.
RUN_ROOT: Final = "spanpoint.run.root"
# Appended to the root span's name after a run's first attempt: "invoke_workflow triage
# (attempt 2)", so the attempts of one run differ in a trace list.
RUN_ATTEMPT_NAME_SUFFIX: Final = " (attempt {})"
# Agent lifecycle attributes proposed in open-telemetry/semantic-conventions-genai #445
# (beside the gen_ai.agent.paused / resumed / checkpointed events above).
GEN_AI_AGENT_PAUSE_ID: Final = "gen_ai.agent.pause.id"
GEN_AI_AGENT_PAUSE_REASON: Final = "gen_ai.agent.pause.reason"
GEN_AI_AGENT_RESUMED_FROM_TYPE: Final = "gen_ai.agent.resumed_from.type"
GEN_AI_AGENT_RESUMED_FROM_ID: Final = "gen_ai.agent.resumed_from.id"
# Values of gen_ai.agent.pause.reason and gen_ai.agent.resumed_from.type
# (semantic-conventions-genai #445's enums).
PAUSE_REASON_HUMAN_INPUT: Final = "human_input"
RESUMED_FROM_PAUSE: Final = "pause"

# --- what each call cost, and what replay saved ---------------------------------------
# PROPOSAL, not yet in the GenAI conventions: open-telemetry/semantic-conventions-genai #443
# ("gen_ai.usage.cost.*", open). The amount is priced by genai-prices from the reported usage;
# a model the price table does not know gets neither attribute (never a guessed price).
GEN_AI_USAGE_COST_AMOUNT: Final = "gen_ai.usage.cost.amount"
GEN_AI_USAGE_COST_CURRENCY: Final = "gen_ai.usage.cost.currency"
# Where the amount came from (the proposal's enum: provider | local); spanpoint prices locally.
GEN_AI_USAGE_COST_SOURCE: Final = "gen_ai.usage.cost.source"
COST_SOURCE_LOCAL: Final = "local"
# On a model call's span: true when the price table does not know its model (no cost set).
COST_UNPRICED: Final = "spanpoint.cost.unpriced"
# A replayed model call's span carries no gen_ai.usage.* (nothing was paid: a backend that
# sums, or prices, those attributes would count the call twice); what replay saved is here:
# the call's cost, its currency and its tokens (docs/design-notes.md, "Cost").
REPLAY_SAVED_COST: Final = "spanpoint.replay.saved.cost.amount"
REPLAY_SAVED_COST_CURRENCY: Final = "spanpoint.replay.saved.cost.currency"
REPLAY_SAVED_INPUT_TOKENS: Final = "spanpoint.replay.saved.input_tokens"
REPLAY_SAVED_OUTPUT_TOKENS: Final = "spanpoint.replay.saved.output_tokens"
# The run's root span: cost and tokens of the attempt's executed model calls, and what its
# replayed ones saved. Never under gen_ai.usage.* names: a parent span summing its children
# under those names would be counted again by every backend that sums them.
RUN_EXECUTED_COST: Final = "spanpoint.run.cost"
RUN_SAVED_COST: Final = "spanpoint.run.cost.saved"
RUN_COST_CURRENCY: Final = "spanpoint.run.cost.currency"
RUN_EXECUTED_TOKENS: Final = "spanpoint.run.executed.tokens"
RUN_REPLAYED_TOKENS: Final = "spanpoint.run.replayed.tokens"
# Counters, in the currency's units, per graph (gen_ai.agent.name): the cost of the model
# calls a run executed, and of those it replayed instead.
METRIC_RUN_COST: Final = "spanpoint.run.cost"
METRIC_REPLAY_SAVED_COST: Final = "spanpoint.run.cost.saved"
# Histogram of each executed model call's cost (PROPOSAL beside gen_ai.usage.cost.*: not in
# the GenAI registry at the version checked, docs/semconv.md). Replayed calls are not recorded.
METRIC_GEN_AI_OPERATION_COST: Final = "gen_ai.client.operation.cost"

# --- decisions about a tool call before it runs -----------------------------------------
# PROPOSAL, not yet in the GenAI conventions: open-telemetry/semantic-conventions-genai #535
# (open). One event per tool call a framework, policy or approval flow decided on before it
# ran. spanpoint records the guard's (the calls a stop keeps from running are denied) and the
# approval gates of LangChain's human-in-the-loop middleware (spanpoint.graph.approvals): a
# gated call requires approval at the pause, and is allowed or denied by the resume.
EVENT_TOOL_CALL_DECISION: Final = "gen_ai.tool.call.decision"
GEN_AI_TOOL_CALL_DECISION_OUTCOME: Final = "gen_ai.tool.call.decision.outcome"
# Values of gen_ai.tool.call.decision.outcome (the proposal's enum: allow, deny, require_approval).
DECISION_ALLOW: Final = "allow"
DECISION_DENY: Final = "deny"
DECISION_REQUIRE_APPROVAL: Final = "require_approval"

# --- forks (spanpoint.fork) ------------------------------------------------------------
# A fork's run holds one record that is no boundary: where it came from. Its kind and path
# are these; its key is serde.checkpoint_key(run id, FORK_RECORD_PATH, 0, ""), which no
# boundary can have (a boundary's identity path starts with "/" or a frame identity and "/").
KIND_FORK: Final = "fork"
FORK_RECORD_PATH: Final = "spanpoint.fork"
# On every attempt's run span of a fork (beside a span link, which most viewers drop).
FORK_ORIGIN_RUN_ID: Final = "spanpoint.fork.origin.run_id"
FORK_ORIGIN_TRACE_ID: Final = "spanpoint.fork.origin.trace_id"
FORK_ORIGIN_SPAN_ID: Final = "spanpoint.fork.origin.span_id"
# The cut: the boundary whose output the fork overrides, as `spanpoint fork --at` named it
# ("lookup_ticket#2"), its kind and its key in the fork's run.
FORK_CUT: Final = "spanpoint.fork.cut"
FORK_CUT_KIND: Final = "spanpoint.fork.cut.kind"
FORK_CUT_KEY: Final = "spanpoint.fork.cut.key"
# The value of the link attribute "spanpoint.link" on the link to the original run's span.
LINK_FORK_ORIGIN: Final = "fork_origin"


# --- which GenAI names: OTEL_SEMCONV_STABILITY_OPT_IN -----------------------------------
# Where upstream renamed a GenAI name, the previous one is emitted by default and the newest
# one on opt-in, as the OpenTelemetry instrumentations do (opentelemetry.instrumentation.
# _semconv knows ``gen_ai_latest_experimental`` for GenAI). They have no dual mode for GenAI;
# ``gen_ai_latest_experimental/dup`` is spanpoint's own: both names, for a backend moving
# from one to the other. docs/semconv.md lists the renamed names.
SEMCONV_STABILITY_OPT_IN: Final = "OTEL_SEMCONV_STABILITY_OPT_IN"
OPT_IN_GEN_AI_LATEST: Final = "gen_ai_latest_experimental"
OPT_IN_GEN_AI_DUP: Final = "gen_ai_latest_experimental/dup"


@functools.cache
def gen_ai_opt_in() -> tuple[bool, bool]:
    """(previous names, newest names): which of a renamed GenAI name's spellings to emit,
    from ``$OTEL_SEMCONV_STABILITY_OPT_IN`` (comma-separated), read once per process."""
    opted = {v.strip() for v in os.environ.get(SEMCONV_STABILITY_OPT_IN, "").split(",")}
    if OPT_IN_GEN_AI_DUP in opted:
        return True, True
    if OPT_IN_GEN_AI_LATEST in opted:
        return False, True
    return True, False


#: Every GenAI name upstream renamed that spanpoint emits: previous name -> newest name.
GEN_AI_RENAMED: Final = {
    GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS,
}


def gen_ai_names(previous: str) -> tuple[str, ...]:
    """The names a value is emitted under whose name upstream renamed from ``previous``
    (a key of :data:`GEN_AI_RENAMED`), as ``$OTEL_SEMCONV_STABILITY_OPT_IN`` chooses."""
    emit_previous, emit_newest = gen_ai_opt_in()
    return (previous,) * emit_previous + (GEN_AI_RENAMED[previous],) * emit_newest
