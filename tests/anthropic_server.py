"""A small Anthropic-compatible Messages server on 127.0.0.1, for tests with a real
``ChatAnthropic``.

``POST /v1/messages`` answers from the conversation it is given, never from a counter: the
text names how many messages it read and the last one. Replies carry an id, a stop reason and
usage, like the provider's; ``"stream": true`` answers as the provider's server-sent events.
:attr:`AnthropicServer.sent` keeps each reply as sent; ``hits`` counts requests.
"""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class AnthropicServer:
    """Start with ``with AnthropicServer() as server:``; ``server.base_url`` is the
    ``base_url`` of a ``ChatAnthropic``."""

    def __init__(self) -> None:
        self.hits = 0
        self.sent: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._url = ""

    @property
    def base_url(self) -> str:
        return self._url

    def __enter__(self) -> AnthropicServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                reply = server.reply(body)
                if body.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    for event, data in server.events(reply):
                        self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()
                    return
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop serving: a request after this finds no server."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        """The message for ``body``: from its messages alone."""
        messages = body.get("messages") or []
        last = messages[-1].get("content") if messages else ""
        text = f"Read {len(messages)} messages; last: {json.dumps(last)}"
        answer = {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10 + len(json.dumps(messages)) // 4, "output_tokens": 7},
        }
        with self._lock:
            self.hits += 1
            self.sent.append(answer)
        return answer

    @staticmethod
    def events(reply: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """``reply`` as the provider's stream of events."""
        start = {**reply, "content": [], "stop_reason": None}
        start["usage"] = {"input_tokens": reply["usage"]["input_tokens"], "output_tokens": 1}
        text = reply["content"][0]["text"]
        return [
            ("message_start", {"type": "message_start", "message": start}),
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": text},
                },
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": reply["stop_reason"], "stop_sequence": None},
                    "usage": {"output_tokens": reply["usage"]["output_tokens"]},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
