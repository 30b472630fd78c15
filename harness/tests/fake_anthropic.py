"""A scripted stand-in for the Anthropic Messages API on loopback, for driving the real Claude Code CLI.

Each ``POST .../v1/messages`` gets the next scripted reply, streamed as server-sent events in the
shape the CLI needs (event lines, the tool input as one ``input_json_delta``, ``content_block_stop``);
every request body is kept for the test to inspect. Anything else gets 404. After the script runs
out, every reply is a short final text, so a misbehaving run ends instead of hanging.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def tool(name: str, **tool_input) -> dict:
    return {"type": "tool_use", "name": name, "input": tool_input}


def _events(blocks: list, number: int) -> bytes:
    out = []

    def event(name, data):
        data = dict(data, type=name)
        out.append("event: %s\ndata: %s\n\n" % (name, json.dumps(data)))
    event("message_start", {"message": {"id": "msg_%04d" % number, "type": "message", "role": "assistant",
                                        "model": "fake-model", "content": [], "stop_reason": None,
                                        "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}})
    uses_tool = False
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
            event("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": block["text"]}})
        else:
            uses_tool = True
            event("content_block_start", {"index": index, "content_block": {
                "type": "tool_use", "id": "toolu_%04d_%d" % (number, index), "name": block["name"], "input": {}}})
            event("content_block_delta", {"index": index, "delta": {"type": "input_json_delta",
                                                                    "partial_json": json.dumps(block["input"])}})
        event("content_block_stop", {"index": index})
    event("message_delta", {"delta": {"stop_reason": "tool_use" if uses_tool else "end_turn", "stop_sequence": None},
                            "usage": {"output_tokens": 20}})
    event("message_stop", {})
    return "".join(out).encode("utf-8")


class FakeAnthropic(object):
    """``with FakeAnthropic(script) as api:`` then ``api.url`` for ANTHROPIC_BASE_URL; ``api.requests``.

    ``on_request(number, body)``, when given, is called as each request arrives, before its reply: the
    moment the effects of the tool calls answered in that request are all in place."""

    def __init__(self, script: list, on_request=None):
        self.script = list(script)
        self.on_request = on_request
        self.requests = []
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.split("?")[0].endswith("/v1/messages"):
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                with owner._lock:
                    number = len(owner.requests)
                    owner.requests.append(body)
                    if owner.on_request is not None:
                        owner.on_request(number, body)
                    blocks = owner.script[number] if number < len(owner.script) else [text("Finished.")]
                data = _events(blocks, number)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()

    def texts(self, number: int) -> str:
        """Every string in request ``number`` (messages only), joined: for asserting on what the CLI sent."""
        found = []

        def walk(value):
            if isinstance(value, str):
                found.append(value)
            elif isinstance(value, dict):
                for item in value.values():
                    walk(item)
            elif isinstance(value, list):
                for item in value:
                    walk(item)
        walk(self.requests[number].get("messages", []))
        return "\n".join(found)
