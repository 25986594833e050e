# receiver.py PORT OUT [--status N] [--basic USER:PASS] [--oauth CLIENT:SECRET]
#             [--max-seconds N]
# A notification receiver for the tests, on 127.0.0.1:PORT (Python's http.server, Debian's
# /usr/bin/python3). GET (the subscription's callback test) answers 204; POST appends one
# JSON line to OUT, {"path", "authorization" (its scheme), "body"}, and answers 204, or
# --status N without recording. --basic: every request must carry these credentials, else
# 401. --oauth: POST /token is an OAuth 2.0 token endpoint (client credentials, HTTP Basic
# CLIENT:SECRET) handing out a new bearer token each time; other requests need one of them.
# Stops by itself after --max-seconds (default 900).
import argparse
import base64
import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

p = argparse.ArgumentParser()
p.add_argument("port", type=int)
p.add_argument("out")
p.add_argument("--status", type=int, default=204)
p.add_argument("--basic")
p.add_argument("--oauth")
p.add_argument("--max-seconds", type=int, default=900)
args = p.parse_args()

tokens = set()
lock = threading.Lock()


def basic(cred):
    return "Basic " + base64.b64encode(cred.encode()).decode()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def answer(self, status, body=b"", ctype=None):
        self.send_response(status)
        if ctype:
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def authorized(self):
        a = self.headers.get("Authorization", "")
        if args.basic:
            return a == basic(args.basic)
        if args.oauth:
            with lock:
                return a.startswith("Bearer ") and a[7:] in tokens
        return True

    def do_GET(self):
        self.answer(204 if self.authorized() else 401)

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        data = self.rfile.read(min(n, 1 << 20))
        if args.oauth and self.path == "/token":
            ok = (self.headers.get("Authorization", "") == basic(args.oauth)
                  and data == b"grant_type=client_credentials")
            if not ok:
                self.answer(401)
                return
            t = secrets.token_hex(16)
            with lock:
                tokens.add(t)
            body = json.dumps({"access_token": t, "token_type": "bearer", "expires_in": 3600})
            self.answer(200, body.encode(), "application/json")
            return
        if not self.authorized():
            self.answer(401)
            return
        if args.status != 204:
            self.answer(args.status)
            return
        line = json.dumps({"path": self.path,
                           "authorization": self.headers.get("Authorization", "").split(" ")[0],
                           "body": json.loads(data)})
        with lock:
            with open(args.out, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        self.answer(204)


server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
stop = threading.Timer(args.max_seconds, server.shutdown)
stop.daemon = True
stop.start()
server.serve_forever()
