"""The corpus's HTTP service: /items fails once with 503 (so the read is retried), then lists
items; /orders answers a POST with the order it was sent. Writes its port to the file named by
its one argument, then serves until killed."""
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

seen = {"items": 0}


class Handler(BaseHTTPRequestHandler):
    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.startswith("/items"):
            seen["items"] += 1
            if seen["items"] == 1:
                return self.reply(503, {"error": "warming up"})
            return self.reply(200, {"items": [{"name": "a", "value": 1}, {"name": "b", "value": 2}, {"name": "c", "value": 3}]})
        if self.path.startswith("/data.json"):
            return self.reply(200, {"items": [{"name": "x", "value": 5}]})
        self.reply(404, {"error": "no such path"})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        sent = json.loads(self.rfile.read(length) or b"null")
        self.reply(201, {"order": 1, "received": sent})

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", 0), Handler)
with open(sys.argv[1], "w") as f:
    f.write(str(server.server_address[1]))
server.serve_forever()
