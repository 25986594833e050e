# rest_api.py: a stand-in of a resource REST API (the kind seed 004's cluster-create flow
# drives: get-or-create of networks, security groups, keys, VMs) for tests of http.request.
# Written for vnflow's tests; run with Debian's /usr/bin/python3, standard library only.
#
#   rest_api.py --port P --log FILE [--token T] [--tls CERT KEY] [--port-file F]
#
# Serves HTTP/1.1 on 127.0.0.1:P (HTTPS with --tls) until killed:
#   GET    /v1/<kind>              200 {"items": [...]}
#   GET    /v1/<kind>/<name>       200 the resource, or 404
#   POST   /v1/<kind>              {"name": ...} -> 201 the resource (an "id" added); 409 when
#                                  the name exists. kind "keypairs" answers the key's
#                                  "material" too (a PEM private key, kept only in the answer:
#                                  a field name no secret-name rule would guess). A POST carrying an
#                                  Idempotency-Key seen before gets the first answer again and
#                                  creates nothing.
#   DELETE /v1/<kind>/<name>       204, or 404
#   POST   /_control/fault         {"method", "path", "status" | "delay_ms" | "race", "times"}:
#                                  the next `times` matching requests answer `status` (a body
#                                  {"message": ...}), or are answered after `delay_ms`; "race":
#                                  the next POST finds the name created by someone else (409)
# With --token, every /v1 request needs "Authorization: Bearer T" (else 401).
# Each /v1 request is logged as one JSON line: method, path, query, idempotency_key, auth
# (ok | missing | wrong), status, and the body sent.
import argparse
import json
import ssl
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock = threading.Lock()
resources = {}  # kind -> name -> resource
answers = {}  # idempotency key -> (status, body)
faults = []  # {"method", "path", "status" | "delay_ms" | "race", "times"}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "rest-standin/1"

    def log_message(self, *args):
        pass

    def reply(self, status, body=None):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n > 1 << 20:
            raise ValueError("body too large")
        return self.rfile.read(n) if n else b""

    def record(self, status, raw):
        url = urllib.parse.urlsplit(self.path)
        auth = self.headers.get("Authorization")
        entry = {
            "method": self.command,
            "path": url.path,
            "query": url.query,
            "idempotency_key": self.headers.get("Idempotency-Key"),
            "auth": "missing" if not auth else ("ok" if auth == "Bearer " + (args.token or "") else "wrong"),
            "status": status,
            "body": raw.decode("utf-8", "replace"),
        }
        with lock, open(args.log, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def fault(self, path):
        with lock:
            for f in faults:
                if f["method"] == self.command and f["path"] == path and f["times"] > 0:
                    f["times"] -= 1
                    return dict(f)
        return None

    def handle_any(self):
        url = urllib.parse.urlsplit(self.path)
        try:
            raw = self.body()
        except ValueError:
            return self.reply(413, {"message": "too large"})
        if url.path == "/_control/fault" and self.command == "POST":
            f = json.loads(raw)
            f.setdefault("times", 1)
            with lock:
                faults.append(f)
            return self.reply(204)
        parts = [p for p in url.path.split("/") if p]
        if not parts or parts[0] != "v1" or len(parts) not in (2, 3):
            return self.reply(404, {"message": "no such route"})
        status, answer = self.serve(parts, raw, url.path)
        self.record(status, raw)
        self.reply(status, answer)

    def serve(self, parts, raw, path):
        if args.token and self.headers.get("Authorization") != "Bearer " + args.token:
            return 401, {"message": "authentication required"}
        f = self.fault(path)
        if f and "status" in f:
            return f["status"], {"message": "injected fault %d" % f["status"]}
        if f and "delay_ms" in f:
            time.sleep(f["delay_ms"] / 1000.0)
        kind = parts[1]
        with lock:
            table = resources.setdefault(kind, {})
            if self.command in ("GET", "HEAD") and len(parts) == 2:
                return 200, {"items": list(table.values())}
            if self.command in ("GET", "HEAD"):
                r = table.get(parts[2])
                return (200, r) if r else (404, {"message": "no %s %s" % (kind, parts[2])})
            if self.command == "DELETE" and len(parts) == 3:
                if table.pop(parts[2], None) is None:
                    return 404, {"message": "no %s %s" % (kind, parts[2])}
                return 204, None
            if self.command == "POST" and len(parts) == 2:
                key = self.headers.get("Idempotency-Key")
                if key and key in answers:
                    return answers[key]
                try:
                    want = json.loads(raw)
                    name = want["name"]
                except (ValueError, KeyError, TypeError):
                    return 400, {"message": "a JSON body with a name is needed"}
                if f and f.get("race"):
                    table[name] = dict(want, id=str(uuid.uuid4()), by="someone else")
                if name in table:
                    return 409, {"message": "%s %s exists" % (kind, name)}
                r = dict(want, id=str(uuid.uuid4()))
                table[name] = r
                answer = dict(r)
                if kind == "keypairs":
                    answer["material"] = "-----BEGIN PRIVATE KEY-----\nSECRETKEY-" + uuid.uuid4().hex + "\n-----END PRIVATE KEY-----\n"
                if key:
                    answers[key] = (201, answer)
                return 201, answer
        return 405, {"message": "method not allowed"}

    do_GET = do_HEAD = do_POST = do_DELETE = do_PUT = do_PATCH = handle_any


parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--log", required=True)
parser.add_argument("--token")
parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
args = parser.parse_args()

server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
server.daemon_threads = True
if args.tls:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.tls[0], args.tls[1])
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
server.serve_forever()
