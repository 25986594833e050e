# rest_api.py: a stand-in of a resource REST API, for tests of http.request and of seed 004's
# cluster-create flow (csar-samples/ladybug-cluster, whose Tumblebug calls it answers).
# Written for vnflow's tests; run with Debian's /usr/bin/python3, standard library only.
#
#   rest_api.py --port P --log FILE [--token T | --basic USER:PASS] [--tls CERT KEY]
#               [--seed FILE] [--addresses A,B,...] [--ssh-key FILE]
#
# Serves HTTP/1.1 on 127.0.0.1:P (HTTPS with --tls) until killed. Resources live at
# COLLECTION/NAME, for any collection path:
#   GET    COLLECTION/NAME    200 the resource, or 404
#   GET    COLLECTION         200 {"items": [...]} (its resources; none is still 200)
#   POST   COLLECTION         {"name": ...} -> 201 the resource (an "id" added); 409 when the
#                             name exists. A POST carrying an Idempotency-Key seen before
#                             gets the first answer again and creates nothing.
#   DELETE COLLECTION/NAME    204, or 404
#   PUT    COLLECTION/NAME    200, the resource replaced
# Kinds with a secret in their answer (kept only in the answer, a field name no secret-name
# rule would guess): a collection ending in "keypairs" answers "material" (a PEM key made
# up); one ending in "sshKey" keeps "privateKey", the key of --ssh-key (a real one, so that
# the VMs it reaches take it), and answers it to every GET, as Tumblebug does. A collection ending in "mcis" gives each VM of the
# body's "vm" list the next address of --addresses as "publicIP" (the test's VMs).
# --seed: a JSON file {"resources": {PATH: resource}, "echo": [PATH], "collections": [NAME]}:
# resources there before the test starts, paths where a POST answers 200 with its body (a
# lookup), and the names of collections a GET lists while they are empty (a collection is
# known once something was POSTed to it; another path without a resource is a 404).
#   POST   /_control/fault    {"method", "path", "status" | "delay_ms" | "race", "times"}:
#                             the next `times` matching requests answer `status` (a body
#                             {"message": ...}), or are answered after `delay_ms`; "race":
#                             the next POST finds the name created by someone else (409)
# With --token (or --basic), every request but /_control needs "Authorization: Bearer T"
# (or Basic) and gets 401 without it. Each request is logged as one JSON line: method, path,
# query, idempotency_key, auth (ok | missing | wrong), status, and the body sent.
import argparse
import base64
import json
import ssl
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock = threading.Lock()
resources = {}  # "COLLECTION/NAME" -> resource
echo_paths = set()
answers = {}  # idempotency key -> (status, body)
faults = []  # {"method", "path", "status" | "delay_ms" | "race", "times"}
addresses = []  # the VMs' addresses, handed out in order


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

    def auth_state(self):
        got = self.headers.get("Authorization")
        if not got:
            return "missing"
        return "ok" if got == expected_auth else "wrong"

    def record(self, status, raw):
        url = urllib.parse.urlsplit(self.path)
        entry = {
            "method": self.command,
            "path": url.path,
            "query": url.query,
            "idempotency_key": self.headers.get("Idempotency-Key"),
            "auth": self.auth_state(),
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
        path = "/" + "/".join(p for p in url.path.split("/") if p)
        status, answer = self.serve(path, raw)
        self.record(status, raw)
        self.reply(status, answer)

    def serve(self, path, raw):
        if expected_auth and self.auth_state() != "ok":
            return 401, {"message": "authentication required"}
        f = self.fault(path)
        if f and "status" in f:
            return f["status"], {"message": "injected fault %d" % f["status"]}
        if f and "delay_ms" in f:
            time.sleep(f["delay_ms"] / 1000.0)
        with lock:
            if self.command in ("GET", "HEAD"):
                if path in resources:
                    return 200, resources[path]
                items = [r for k, r in resources.items() if k.rsplit("/", 1)[0] == path]
                if items or path.rsplit("/", 1)[-1] in known_collections:
                    return 200, {"items": items}
                return 404, {"message": "%s: not found" % path}
            if self.command == "DELETE":
                if resources.pop(path, None) is None:
                    return 404, {"message": "%s: not found" % path}
                return 204, None
            try:
                want = json.loads(raw) if raw else None
            except ValueError:
                return 400, {"message": "the body is not JSON"}
            if self.command == "PUT":
                if path not in resources:
                    return 404, {"message": "%s: not found" % path}
                resources[path] = dict(want, id=resources[path].get("id"))
                return 200, resources[path]
            if self.command != "POST":
                return 405, {"message": "method not allowed"}
            if path in echo_paths:
                return 200, dict(want or {}, found=True)
            key = self.headers.get("Idempotency-Key")
            if key and key in answers:
                return answers[key]
            if not isinstance(want, dict) or not isinstance(want.get("name"), str):
                return 400, {"message": "a JSON body with a name is needed"}
            name = want["name"]
            if f and f.get("race"):
                resources[path + "/" + name] = dict(want, id=str(uuid.uuid4()), by="someone else")
            if path + "/" + name in resources:
                return 409, {"message": "%s %s exists" % (path, name)}
            known_collections.add(path.rsplit("/", 1)[-1])
            r = dict(want, id=str(uuid.uuid4()))
            if path.endswith("/mcis"):
                vms = []
                for vm in want.get("vm", []):
                    if not addresses:
                        return 503, {"message": "no address left for VM %s" % vm.get("name")}
                    vms.append(dict(vm, id=vm.get("name"), publicIP=addresses.pop(0), status="Running"))
                r["vm"] = vms
            if path.endswith("sshKey") and ssh_key:
                r["privateKey"] = ssh_key  # Tumblebug keeps it: a GET of the key answers it too
            resources[path + "/" + name] = r
            answer = dict(r)
            if path.endswith("keypairs"):
                answer["material"] = ("-----BEGIN PRIVATE KEY-----\nSECRETKEY-" + uuid.uuid4().hex +
                                      "\n-----END PRIVATE KEY-----\n")
            if key:
                answers[key] = (201, answer)
            return 201, answer

    do_GET = do_HEAD = do_POST = do_DELETE = do_PUT = do_PATCH = handle_any


parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--log", required=True)
parser.add_argument("--token")
parser.add_argument("--basic")
parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
parser.add_argument("--seed")
parser.add_argument("--addresses", default="")
parser.add_argument("--ssh-key")
args = parser.parse_args()

expected_auth = None
if args.token:
    expected_auth = "Bearer " + args.token
elif args.basic:
    expected_auth = "Basic " + base64.b64encode(args.basic.encode()).decode()
known_collections = set()
if args.seed:
    with open(args.seed) as f:
        seed = json.load(f)
    resources.update(seed.get("resources", {}))
    echo_paths.update(seed.get("echo", []))
    known_collections.update(seed.get("collections", []))
addresses = [a for a in args.addresses.split(",") if a]
ssh_key = open(args.ssh_key).read() if args.ssh_key else None

server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
server.daemon_threads = True
if args.tls:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.tls[0], args.tls[1])
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
server.serve_forever()
