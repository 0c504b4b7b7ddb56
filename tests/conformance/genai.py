"""The GenAI semantic conventions for the spans spanpoint emits, as checkable rules.

Each operation lists its span name pattern, span kind, and attributes by requirement level
(required, conditionally required, recommended, opt-in), with the type each value must have.
``violations(span)`` returns what a span gets wrong; an empty list means it conforms.
Source: the OpenTelemetry GenAI semantic conventions (gen-ai-spans.md, inference and
execute_tool operations), as docs/semconv.md cites them: the GenAI spans of
open-telemetry/semantic-conventions-genai (model/gen-ai/spans.yaml, registry.yaml) and the
cost attributes proposed there (``gen_ai.usage.cost.*``, inference spans only).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from referencing import Registry, Resource

from spanpoint import semconv


def _str(v: Any) -> bool:
    return isinstance(v, str) and bool(v)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _str_array(v: Any) -> bool:
    return isinstance(v, tuple | list) and all(isinstance(x, str) for x in v)


SCHEMAS = Path(__file__).parent / "schemas"

#: The JSON Schema each content attribute's value must satisfy (tests/conformance/schemas).
MESSAGE_SCHEMAS = {
    semconv.GEN_AI_INPUT_MESSAGES: "gen-ai-input-messages.json",
    semconv.GEN_AI_OUTPUT_MESSAGES: "gen-ai-output-messages.json",
    semconv.GEN_AI_SYSTEM_INSTRUCTIONS: "gen-ai-system-instructions.json",
    semconv.GEN_AI_TOOL_DEFINITIONS: "gen-ai-tool-definitions.json",
}


@functools.cache
def _validator(file: str) -> jsonschema.protocols.Validator:
    resources = []
    for path in SCHEMAS.glob("*.json"):
        schema = json.loads(path.read_text())
        resources.append((schema["$id"], Resource.from_contents(schema)))
    schema = json.loads((SCHEMAS / file).read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, registry=Registry().with_resources(resources))


def message_schema_errors(key: str, value: Any) -> list[str]:
    """Why ``value`` is not a valid ``key`` attribute (JSON text) by its GenAI schema."""
    try:
        document = json.loads(value)
    except (TypeError, ValueError) as exc:
        return [f"{key} is not JSON: {exc}"]
    return [
        f"{key}{''.join(f'[{p!r}]' for p in error.absolute_path)}: {error.message}"
        for error in _validator(MESSAGE_SCHEMAS[key]).iter_errors(document)
    ]


def message_violations(span: ReadableSpan) -> list[str]:
    """Every GenAI message attribute of ``span`` and of its events checked by its schema."""
    sources: list[tuple[str, Mapping[str, Any]]] = [(span.name, span.attributes or {})]
    sources += [(f"{span.name} event {e.name}", e.attributes or {}) for e in span.events]
    return [
        f"{where}: {problem}"
        for where, attrs in sources
        for key in MESSAGE_SCHEMAS.keys() & attrs.keys()
        for problem in message_schema_errors(key, attrs[key])
    ]


def _messages_json(v: Any) -> bool:
    return _json(v)  # the structure is checked by message_violations, against the schemas


def _json(v: Any) -> bool:
    try:
        json.loads(v)
    except (TypeError, ValueError):
        return False
    return True


@dataclass(frozen=True)
class Operation:
    """One GenAI operation's span rules."""

    name: str
    kind: SpanKind
    target: str  # the attribute whose value follows the operation name in the span name
    required: dict[str, Callable[[Any], bool]]
    recommended: dict[str, Callable[[Any], bool]]
    opt_in: dict[str, Callable[[Any], bool]] = field(default_factory=dict)
    allowed_values: dict[str, frozenset[str]] = field(default_factory=dict)


CHAT = Operation(
    name=semconv.OP_CHAT,
    kind=SpanKind.CLIENT,
    target=semconv.GEN_AI_REQUEST_MODEL,
    required={semconv.GEN_AI_OPERATION_NAME: _str, semconv.GEN_AI_PROVIDER_NAME: _str},
    recommended={
        semconv.GEN_AI_REQUEST_MODEL: _str,
        semconv.GEN_AI_RESPONSE_MODEL: _str,
        semconv.GEN_AI_RESPONSE_FINISH_REASONS: _str_array,
        semconv.GEN_AI_USAGE_INPUT_TOKENS: _int,
        semconv.GEN_AI_USAGE_OUTPUT_TOKENS: _int,
        semconv.GEN_AI_OUTPUT_TYPE: _str,
    },
    opt_in={
        semconv.GEN_AI_INPUT_MESSAGES: _messages_json,
        semconv.GEN_AI_OUTPUT_MESSAGES: _messages_json,
        semconv.GEN_AI_SYSTEM_INSTRUCTIONS: _json,
        semconv.GEN_AI_TOOL_DEFINITIONS: _json,
        semconv.GEN_AI_REQUEST_TEMPERATURE: _num,
        semconv.GEN_AI_REQUEST_MAX_TOKENS: _int,
        semconv.GEN_AI_REQUEST_TOP_P: _num,
        semconv.GEN_AI_REQUEST_TOP_K: _num,
        semconv.GEN_AI_REQUEST_SEED: _int,
        semconv.GEN_AI_REQUEST_FREQUENCY_PENALTY: _num,
        semconv.GEN_AI_REQUEST_PRESENCE_PENALTY: _num,
        semconv.GEN_AI_REQUEST_STOP_SEQUENCES: _str_array,
        semconv.GEN_AI_RESPONSE_ID: _str,
        semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: _num,
        semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: _int,
        # Both spellings of the cache-write count: OTEL_SEMCONV_STABILITY_OPT_IN picks them.
        semconv.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: _int,
        semconv.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS: _int,
        semconv.SERVER_ADDRESS: _str,
        semconv.SERVER_PORT: _int,
        semconv.GEN_AI_USAGE_COST_AMOUNT: _num,
        semconv.GEN_AI_USAGE_COST_CURRENCY: _str,
        semconv.GEN_AI_USAGE_COST_SOURCE: _str,
    },
    allowed_values={
        semconv.GEN_AI_OUTPUT_TYPE: frozenset({"text", "json", "image", "speech"}),
        semconv.GEN_AI_USAGE_COST_SOURCE: frozenset({"provider", "local"}),
    },
)

#: Cost belongs on inference spans only: a parent summing it under these names would be
#: counted again by every backend that sums them (docs/design-notes.md, "Cost").
COST_ATTRIBUTES = frozenset(
    {
        semconv.GEN_AI_USAGE_COST_AMOUNT,
        semconv.GEN_AI_USAGE_COST_CURRENCY,
        semconv.GEN_AI_USAGE_COST_SOURCE,
    }
)

#: A replayed chat span paid nothing: spanpoint's deliberate deviation from the recommended
#: usage attributes, whose counts it carries under these names instead (docs/semconv.md).
REPLAYED_USAGE = {
    semconv.GEN_AI_USAGE_INPUT_TOKENS: semconv.REPLAY_SAVED_INPUT_TOKENS,
    semconv.GEN_AI_USAGE_OUTPUT_TOKENS: semconv.REPLAY_SAVED_OUTPUT_TOKENS,
}

EXECUTE_TOOL = Operation(
    name=semconv.OP_EXECUTE_TOOL,
    kind=SpanKind.INTERNAL,
    target=semconv.GEN_AI_TOOL_NAME,
    required={semconv.GEN_AI_OPERATION_NAME: _str},
    recommended={
        semconv.GEN_AI_TOOL_NAME: _str,
        semconv.GEN_AI_TOOL_CALL_ID: _str,
        semconv.GEN_AI_TOOL_TYPE: _str,
        semconv.GEN_AI_TOOL_DESCRIPTION: _str,
    },
    opt_in={
        semconv.GEN_AI_TOOL_CALL_ARGUMENTS: _json,
        semconv.GEN_AI_TOOL_CALL_RESULT: _json,
    },
    allowed_values={semconv.GEN_AI_TOOL_TYPE: frozenset({"function", "extension", "datastore"})},
)

# invoke_agent (gen-ai-agent-spans.md): an agent run inside the process, so INTERNAL. The
# conventions make gen_ai.provider.name required for agents backed by one provider; a LangGraph
# agent may call several, so it is not required here.
INVOKE_AGENT = Operation(
    name=semconv.OP_INVOKE_AGENT,
    kind=SpanKind.INTERNAL,
    target=semconv.GEN_AI_AGENT_NAME,
    required={semconv.GEN_AI_OPERATION_NAME: _str},
    recommended={
        semconv.GEN_AI_AGENT_NAME: _str,
        semconv.GEN_AI_CONVERSATION_ID: _str,
        semconv.GEN_AI_USAGE_INPUT_TOKENS: _int,
        semconv.GEN_AI_USAGE_OUTPUT_TOKENS: _int,
    },
    opt_in={semconv.GEN_AI_AGENT_ID: _str},
)

# invoke_workflow (proposed upstream, semantic-conventions #2912): a graph that is not an agent.
INVOKE_WORKFLOW = Operation(
    name=semconv.OP_INVOKE_WORKFLOW,
    kind=SpanKind.INTERNAL,
    target=semconv.GEN_AI_WORKFLOW_NAME,
    required={semconv.GEN_AI_OPERATION_NAME: _str, semconv.GEN_AI_WORKFLOW_NAME: _str},
    recommended={
        semconv.GEN_AI_CONVERSATION_ID: _str,
        semconv.GEN_AI_USAGE_INPUT_TOKENS: _int,
        semconv.GEN_AI_USAGE_OUTPUT_TOKENS: _int,
    },
)

OPERATIONS = {op.name: op for op in (CHAT, EXECUTE_TOOL, INVOKE_AGENT, INVOKE_WORKFLOW)}

#: Attributes that carry content: present only when content capture is opted in.
CONTENT_ATTRIBUTES = frozenset(
    {
        semconv.GEN_AI_INPUT_MESSAGES,
        semconv.GEN_AI_OUTPUT_MESSAGES,
        semconv.GEN_AI_SYSTEM_INSTRUCTIONS,
        semconv.GEN_AI_TOOL_DEFINITIONS,
        semconv.GEN_AI_TOOL_CALL_ARGUMENTS,
        semconv.GEN_AI_TOOL_CALL_RESULT,
    }
)


def violations(span: ReadableSpan, *, content: bool = False) -> list[str]:
    """What ``span`` gets wrong against its operation's rules (empty when it conforms)."""
    attrs = dict(span.attributes or {})
    op = OPERATIONS.get(str(attrs.get(semconv.GEN_AI_OPERATION_NAME)))
    if op is None:
        return [f"{span.name}: unknown gen_ai.operation.name {attrs.get('gen_ai.operation.name')}"]
    problems: list[str] = []
    if span.kind is not op.kind:
        problems.append(f"{span.name}: kind {span.kind.name}, expected {op.kind.name}")
    expected_name = f"{op.name} {attrs.get(op.target)}" if attrs.get(op.target) else op.name
    # The two deviations, for trace lists and trees (docs/design-notes.md, issue 19).
    if attrs.get(semconv.REPLAYED) is True:
        expected_name += semconv.REPLAYED_NAME_SUFFIX
    attempt = attrs.get(semconv.RUN_ATTEMPT)
    if attrs.get(semconv.RUN_ROOT) is True and isinstance(attempt, int) and attempt > 1:
        expected_name += semconv.RUN_ATTEMPT_NAME_SUFFIX.format(attempt)
    if span.name != expected_name:
        problems.append(f"{span.name}: name should be {expected_name!r}")
    for key, ok in op.required.items():
        if key not in attrs:
            problems.append(f"{span.name}: required {key} missing")
        elif not ok(attrs[key]):
            problems.append(f"{span.name}: {key}={attrs[key]!r} has the wrong type")
    for key, ok in {**op.recommended, **op.opt_in}.items():
        if key in attrs and not ok(attrs[key]):
            problems.append(f"{span.name}: {key}={attrs[key]!r} has the wrong type")
    for key, allowed in op.allowed_values.items():
        if key in attrs and attrs[key] not in allowed:
            problems.append(f"{span.name}: {key}={attrs[key]!r} not one of {sorted(allowed)}")
    if not content:
        problems.extend(
            f"{span.name}: content attribute {key} without opt-in"
            for key in CONTENT_ATTRIBUTES & attrs.keys()
        )
    if op is not CHAT or attrs.get(semconv.REPLAYED) is True:
        problems.extend(
            f"{span.name}: {key} on a span that paid no inference itself"
            for key in sorted(COST_ATTRIBUTES & attrs.keys())
        )
    if op is CHAT and attrs.get(semconv.REPLAYED) is True:
        problems.extend(
            f"{span.name}: replayed span reports paid usage {key}"
            for key in sorted(k for k in attrs if k.startswith("gen_ai.usage."))
        )
    if semconv.SERVER_PORT in attrs and semconv.SERVER_ADDRESS not in attrs:
        problems.append(f"{span.name}: server.port without server.address")
    if span.status.status_code is StatusCode.ERROR and semconv.ERROR_TYPE not in attrs:
        problems.append(f"{span.name}: failed span without error.type")
    problems.extend(message_violations(span))
    return problems


def missing_recommended(span: ReadableSpan) -> list[str]:
    """Recommended attributes the span does not carry (a replayed chat span's usage counts
    are under spanpoint's saved names: :data:`REPLAYED_USAGE`)."""
    attrs = span.attributes or {}
    op = OPERATIONS[str(attrs.get(semconv.GEN_AI_OPERATION_NAME))]
    replayed = attrs.get(semconv.REPLAYED) is True and op is CHAT
    return [
        key
        for key in op.recommended
        if key not in attrs and not (replayed and REPLAYED_USAGE.get(key) in attrs)
    ]
