"""A small OpenAI-compatible chat server on 127.0.0.1, for tests with a real ``ChatOpenAI``.

``POST /v1/chat/completions`` answers from the conversation it is given, never from a
counter: the model's turn is the number of assistant messages already in it. Turn ``n``
makes the tool calls ``plans[model][n]`` (those whose tool the request offers); after the
plan it answers ``finals[model]`` followed by how many messages it read. Replies carry usage
(with token details) and, like a provider's, random completion and tool-call ids, unless
``stable_ids`` makes them digests of the conversation (so the same conversation gets the
same answer, byte for byte). ``"stream": true`` answers as server-sent events, with a usage
chunk when ``stream_options.include_usage`` asks for one.

:attr:`ChatServer.hits` counts requests: a replay that reaches the server shows there.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ChatServer:
    """Start with ``with ChatServer(plans, finals) as server:``; ``server.base_url`` is the
    ``base_url`` of a ``ChatOpenAI``."""

    def __init__(
        self,
        plans: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]] | None = None,
        finals: Mapping[str, str] | None = None,
        *,
        stable_ids: bool = False,
    ) -> None:
        self.plans = {k: [list(t) for t in v] for k, v in (plans or {}).items()}
        self.finals = dict(finals or {})
        self.stable_ids = stable_ids
        self.hits = 0
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._url = ""

    @property
    def base_url(self) -> str:
        """Where the server listens (or listened: the address stays after :meth:`stop`)."""
        return self._url

    def __enter__(self) -> ChatServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.hits += 1
                reply = server.reply(body)
                if body.get("stream"):
                    self._stream(body, reply)
                    return
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, body: dict[str, Any], reply: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for chunk in server.chunks(body, reply):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop serving: a request after this finds no server (connection refused)."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    # --- the answer ------------------------------------------------------------------------

    def _id(self, prefix: str, *parts: Any) -> str:
        if self.stable_ids:
            text = json.dumps(parts, sort_keys=True, default=str)
            return f"{prefix}{hashlib.sha256(text.encode()).hexdigest()[:24]}"
        return f"{prefix}{uuid.uuid4().hex[:24]}"

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        """The chat completion for ``body``: from its messages alone."""
        model = str(body.get("model"))
        messages = body.get("messages") or []
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        offered = {t["function"]["name"] for t in body.get("tools") or []}
        plan = self.plans.get(model, [])
        calls = [c for c in plan[turn] if c["name"] in offered] if turn < len(plan) else []
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if calls:
            message["tool_calls"] = [
                {
                    "id": self._id("call_", messages, i),
                    "type": "function",
                    "function": {"name": c["name"], "arguments": json.dumps(c["args"])},
                }
                for i, c in enumerate(calls)
            ]
            finish = "tool_calls"
        else:
            last = messages[-1].get("content") if messages else ""
            final = self.finals.get(model, "Done.")
            message["content"] = f"{final} ({len(messages)} messages read; last: {last})"
            finish = "stop"
        prompt = sum(len(json.dumps(m)) for m in messages) // 4
        completion = 5 + turn
        return {
            "id": self._id("chatcmpl-", messages),
            "object": "chat.completion",
            "created": int(time.time()),  # a clock value: never in a cassette
            "model": model,
            "system_fingerprint": "fp_local",
            "choices": [
                {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
            },
        }

    def chunks(self, body: dict[str, Any], reply: dict[str, Any]) -> list[dict[str, Any]]:
        """``reply`` as the chunks of a streamed completion."""
        message = reply["choices"][0]["message"]
        base = {k: reply[k] for k in ("id", "created", "model", "system_fingerprint")}
        base["object"] = "chat.completion.chunk"

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            return {**base, "choices": [choice]}

        out = [chunk({"role": "assistant", "content": ""})]
        for word in (message.get("content") or "").split(" "):
            if word:
                out.append(chunk({"content": word + " "}))
        for i, call in enumerate(message.get("tool_calls") or []):
            out.append(chunk({"tool_calls": [{"index": i, **call}]}))
        out.append(chunk({}, reply["choices"][0]["finish_reason"]))
        if (body.get("stream_options") or {}).get("include_usage"):
            out.append({**base, "choices": [], "usage": reply["usage"]})
        return out
