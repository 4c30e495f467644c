"""A real OpenAI-compatible chat-completions server on 127.0.0.1 for tests: `reply(body) -> str` writes each
answer from the request body; every request body is kept in `requests`. Used as `with ChatEndpoint(f) as ep:`."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable


class ChatEndpoint:
    def __init__(self, reply: Callable[[dict], str]):
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                message = {"role": "assistant", "content": reply(body)}
                data = json.dumps({"id": "x", "object": "chat.completion",
                                   "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "ChatEndpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
