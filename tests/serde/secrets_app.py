"""An application with secrets planted in every channel, run in its own process by
tests/serde/test_secrets.py: ``python tests/serde/secrets_app.py MODE`` (see :data:`MODES`).

The process configures nothing but the environment: telemetry goes where the standard
variables say (the local JSONL files, or OTLP), exactly as in a deployment. Each planted value
is unique, so a test that finds one in the exported bytes, the store or ``spanpoint show``
knows which channel leaked it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NotRequired

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# --- the planted secrets, by channel --------------------------------------------------------
# Opaque values (no recognisable shape) can only be kept home by their key names; shaped
# values (sk-proj-…, ghp_…, a DSN password, Bearer …) by the value patterns, whatever the key.

CONFIG = {
    "openai_key": "PLANTcfgOpenaiKey7f3a",
    "accesstoken": "PLANTcfgAccesstoken91c2",
    "accessToken": "PLANTcfgAccessToken5d0e",
    "passWord": "PLANTcfgPassWord44b1",
    "db_url": "postgresql://app:PLANTcfgDsnPw8e21@db.internal:5432/app",
    "jwt": "PLANTcfgJwtOpaque0c9d",
    "webhook": "https://hooks.example.com/services/PLANTcfgWebhook6a7b",
    "search_url": "https://search.example.com/q?lang=en&token=PLANTcfgQueryTok3f4e",
}
CONFIG_SECRETS = (
    "PLANTcfgOpenaiKey7f3a",
    "PLANTcfgAccesstoken91c2",
    "PLANTcfgAccessToken5d0e",
    "PLANTcfgPassWord44b1",
    "PLANTcfgDsnPw8e21",
    "PLANTcfgJwtOpaque0c9d",
    "PLANTcfgWebhook6a7b",
    "PLANTcfgQueryTok3f4e",
)
HEADERS = {
    "Ocp-Apim-Subscription-Key": "PLANThdrApimKey2b8c",
    "x-functions-key": "PLANThdrFunctionsKey7e1a",
    "Authorization": "Bearer PLANThdrBearerTok90af",
}
HEADER_SECRETS = ("PLANThdrApimKey2b8c", "PLANThdrFunctionsKey7e1a", "PLANThdrBearerTok90af")
CONTEXT = {
    "privatekey": "PLANTctxPrivatekey3c5d",
    "ssn": "PLANTctxSsn078051120",
    "apiToken": "PLANTctxApiToken61e0",
    "tenant": "acme",
}
CONTEXT_SECRETS = ("PLANTctxPrivatekey3c5d", "PLANTctxSsn078051120", "PLANTctxApiToken61e0")
STATE = {
    "password": "PLANTstatePassword5f2c",
    "db_url": "mysql://svc:PLANTstateDsnPw1d9e@db.internal/app",
}
STATE_SECRETS = ("PLANTstatePassword5f2c", "PLANTstateDsnPw1d9e")
MSG_OPENAI = "sk-proj-PLANTmsgOpenai0123456789ab"
MSG_DSN_PW = "PLANTmsgDsnPw77c3"
MESSAGE_SECRETS = (MSG_OPENAI, MSG_DSN_PW)
TOOL_ARG_KEY = "PLANTtoolArgApiKey4a6b"
TOOL_ARG_GH = "ghp_PLANTtoolArgGithub0123456789abcdef"
TOOL_ARG_PASSWORDS = ("PLANTtoolArgPasswordsOne3c1d", "PLANTtoolArgPasswordsTwo8e2f")
TOOL_ARG_HF = "hf_PLANTtoolArgHuggingFace0123456789abcd"
TOOL_ARG_SECRETS = (TOOL_ARG_KEY, TOOL_ARG_GH, *TOOL_ARG_PASSWORDS, TOOL_ARG_HF)
TOOL_RESULT_BEARER = "PLANTtoolResultBearer8d1f"
TOOL_RESULT_SECRETS = (TOOL_RESULT_BEARER,)
EXC_OPENAI = "sk-proj-PLANTexcOpenai0123456789abcd"
EXC_GH = "ghp_PLANTexcGithubToken0123456789abcd"
EXC_DSN_PW = "PLANTexcDsnPw52e7"
EXC_CAUSE_PW = "PLANTexcCausePw0b3a"
EXC_URL_KEY = "PLANTexcUrlApiKey6d2a"
EXC_REPR_KEY = "PLANTexcReprApiKey1f7c"
EXC_GITLAB = "glpat-PLANTexcGitlab0123456789"
EXCEPTION_SECRETS = (
    EXC_OPENAI,
    EXC_GH,
    EXC_DSN_PW,
    EXC_CAUSE_PW,
    EXC_URL_KEY,
    EXC_REPR_KEY,
    EXC_GITLAB,
)
ENV = {
    "OPENAI_API_KEY": "sk-proj-PLANTenvOpenai0123456789abcd",
    "AZURE_OPENAI_API_KEY": "PLANTenvAzureKey9c4d",
    "DATABASE_URL": "postgresql://u:PLANTenvDsnPw3e8f@db/app",
}
ENV_SECRETS = ("sk-proj-PLANTenvOpenai0123456789abcd", "PLANTenvAzureKey9c4d", "PLANTenvDsnPw3e8f")

#: ``(zero-code?, strategy)`` per mode.
MODES: dict[str, tuple[bool, str]] = {
    "zero-code-graph_call": (True, "graph_call"),
    "zero-code-calls": (True, "calls"),
    "runner-graph_call": (False, "graph_call"),
    "runner-calls": (False, "calls"),
}
RUN_OK, RUN_FAILED = "vault-ok", "vault-failed"


def build(zero_code: bool, strategy: str) -> Any:
    from langchain.agents import AgentState, create_agent  # after instrument(): patched
    from langchain_core.messages import BaseMessage
    from langchain_core.tools import tool

    import spanpoint
    from fakes import ConversationModel

    class SecretState(AgentState[Any]):
        password: NotRequired[str]
        db_url: NotRequired[str]

    class VaultModel(ConversationModel):
        """Answers from the conversation; refuses a conversation that asks it to explode."""

        def answer(self, messages: Any) -> Any:
            last = next(m for m in reversed(messages) if isinstance(m, BaseMessage))
            if last.type == "human" and "explode" in str(last.content):
                try:
                    raise ValueError(f"login with password={EXC_CAUSE_PW} refused")
                except ValueError as cause:
                    dsn = f"postgresql://bot:{EXC_DSN_PW}@db.internal/app"
                    raise RuntimeError(
                        f"provider refused key {EXC_OPENAI} and {EXC_GH} for {dsn}; "
                        f"url=https://api.example.com/v1/chat?api_key={EXC_URL_KEY}&n=1 "
                        f"request={ {'api_key': EXC_REPR_KEY, 'model': 'm'} } "
                        f"mirror token {EXC_GITLAB}"
                    ) from cause
            return super().answer(messages)

    @tool
    def lookup(city: str, api_key: str, note: str, passwords: list[str]) -> str:
        """Look up the weather of a city."""
        assert api_key == TOOL_ARG_KEY and TOOL_ARG_GH in note  # the tool really had them
        assert tuple(passwords) == TOOL_ARG_PASSWORDS and TOOL_ARG_HF in note
        return f"sunny in {city}; fetched with Authorization: Bearer {TOOL_RESULT_BEARER}"

    args = {
        "city": "Paris",
        "api_key": TOOL_ARG_KEY,
        "note": f"cloned with {TOOL_ARG_GH}, pulled with {TOOL_ARG_HF}",
        "passwords": list(TOOL_ARG_PASSWORDS),
    }
    model = VaultModel(plan=[[{"name": "lookup", "args": args}]], final="All done.")
    middleware = [spanpoint.CheckpointMiddleware()] if not zero_code and strategy == "calls" else []
    return create_agent(
        model,
        [lookup],
        middleware=middleware,
        state_schema=SecretState,
        context_schema=dict,
        name="vault",
    )


def main(mode: str) -> None:
    import spanpoint
    from spanpoint.graph import GraphRunner, RunRequest

    zero_code, strategy = MODES[mode]
    if zero_code:
        from spanpoint.instrumentation import SpanpointInstrumentor

        SpanpointInstrumentor().instrument(strategy=strategy)
    agent = build(zero_code, strategy)
    runner = GraphRunner(agent, name="vault", strategy=strategy)  # type: ignore[arg-type]
    configurable = {**CONFIG, "headers": HEADERS, "max_tokens": 256}
    for text, run_id in (
        (f"hi, my key is {MSG_OPENAI}, db postgresql://me:{MSG_DSN_PW}@db/x", RUN_OK),
        ("please explode", RUN_FAILED),
    ):
        state = {"messages": [("user", text)], **STATE}
        for _ in range(2):  # executed, then replayed (or failed twice)
            try:
                with spanpoint.run(run_id):
                    if zero_code:
                        agent.invoke(
                            state,
                            config={"configurable": {**configurable, "thread_id": run_id}},
                            context=CONTEXT,
                        )
                    else:
                        request = RunRequest.start(
                            state, thread_id=run_id, configurable=configurable, context=CONTEXT
                        )
                        runner.invoke(request)
            except RuntimeError as exc:
                assert run_id == RUN_FAILED and EXC_OPENAI in str(exc), exc
            else:
                assert run_id == RUN_OK
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1])
