#!/usr/bin/python3
"""Clients for tests/api/api_load_test.sh: CLIENTS threads, each on a keep-alive
connection of its own, against the vnflow API.

  load_client.py drill EP TOKEN INSTANCES_FILE INST_JSON CLIENTS REQUESTS SECS
      The instances of INSTANCES_FILE (one id a line) are instantiated, one operation
      each, by the first clients (each takes the next instance, submits, polls the
      operation until it ends, takes the next); the other clients read (an instance, the
      instance list, an operation). Exactly REQUESTS requests in all, within SECS.
      Prints one JSON line: counts by status, errors, the accepted operations, read
      latency p50/p99 (ms).

  load_client.py submit EP TOKEN INSTANCES_FILE INST_JSON CLIENTS OUT_FILE SECS
      Each instance instantiated once (no polling) until the instances run out, the
      daemon dies or SECS pass; OUT_FILE gets one line per instance tried:
      "ID accepted OP", "ID http CODE", "ID refused -" (no connection: nothing sent) or
      "ID lost ERROR" (no answer: outcome unknown).
"""
import http.client
import json
import sys
import threading
import time
import urllib.parse


class Conn:
    def __init__(self, ep, token):
        u = urllib.parse.urlsplit(ep)
        self.host, self.port = u.hostname, u.port
        self.token = token
        self.c = None

    def call(self, method, path, body=None):
        """(status, headers dict, body bytes); raises OSError/HTTPException on no answer."""
        if self.c is None:
            self.c = http.client.HTTPConnection(self.host, self.port, timeout=30)
        headers = {"X-Auth-Token": self.token, "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            self.c.request(method, path, body=body, headers=headers)
            r = self.c.getresponse()
            data = r.read()
        except Exception:
            self.c.close()
            self.c = None
            raise
        if r.getheader("Connection", "").lower() == "close":
            self.c.close()
            self.c = None
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data


def percentile(xs, p):
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100.0))]


def drill(ep, token, instances, inst_body, clients, requests, secs):
    lock = threading.Lock()
    todo = list(instances)
    state = {"tickets": requests, "status": {}, "errors": [], "accepted": [], "reads": []}
    deadline = time.monotonic() + secs
    # Each submit needs one ticket: keep them for the instances still to do.
    reserved = [len(todo)]

    def ticket(submit):
        with lock:
            spare = state["tickets"] - (0 if submit else reserved[0])
            if spare <= 0 or time.monotonic() > deadline:
                return False
            state["tickets"] -= 1
            if submit:
                reserved[0] -= 1
            return True

    def record(status, what):
        with lock:
            state["status"][str(status)] = state["status"].get(str(status), 0) + 1
            if status >= 300 or status == 0:
                state["errors"].append(what)

    def submitter(conn):
        while True:
            with lock:
                if not todo:
                    return
                inst = todo.pop()
            if not ticket(True):
                return
            try:
                st, h, _ = conn.call("POST", "/vnflcm/v1/vnf_instances/%s/instantiate" % inst, inst_body)
            except Exception as e:  # noqa: BLE001 (any failure is the test's error)
                record(0, "submit %s: %s" % (inst, e))
                continue
            record(st, "submit %s: HTTP %d" % (inst, st))
            if st != 202:
                continue
            op = h.get("location", "").rsplit("/", 1)[-1]
            with lock:
                state["accepted"].append(op)
            while ticket(False):  # poll until it ends (reads like any other)
                t = time.monotonic()
                try:
                    st, _, body = conn.call("GET", "/vnflcm/v1/vnf_lcm_op_occs/" + op)
                except Exception as e:  # noqa: BLE001
                    record(0, "poll %s: %s" % (op, e))
                    break
                with lock:
                    state["reads"].append(time.monotonic() - t)
                record(st, "poll %s: HTTP %d" % (op, st))
                if st != 200 or json.loads(body)["operationState"] in ("COMPLETED", "FAILED_TEMP", "FAILED"):
                    break
                time.sleep(0.05)

    def reader(conn, n):
        paths = ["/vnflcm/v1/vnf_instances/%s" % instances[n % len(instances)],
                 "/vnflcm/v1/vnf_instances?filter=(eq,instantiationState,INSTANTIATED)&fields=id",
                 "/vnflcm/v1/api_versions"]
        i = n
        while ticket(False):
            path = paths[i % len(paths)]
            with lock:
                if i % 4 == 3 and state["accepted"]:
                    path = "/vnflcm/v1/vnf_lcm_op_occs/" + state["accepted"][i % len(state["accepted"])]
            i += 1
            t = time.monotonic()
            try:
                st, _, _ = conn.call("GET", path)
            except Exception as e:  # noqa: BLE001
                record(0, "GET %s: %s" % (path, e))
                continue
            with lock:
                state["reads"].append(time.monotonic() - t)
            record(st, "GET %s: HTTP %d" % (path, st))

    submitters = max(1, clients // 2)
    threads = []
    start = time.monotonic()
    for n in range(clients):
        conn = Conn(ep, token)
        f = (lambda c=conn: submitter(c)) if n < submitters else (lambda c=conn, k=n: reader(c, k))
        threads.append(threading.Thread(target=f, daemon=True))
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.1, deadline - time.monotonic() + 30))
    elapsed = time.monotonic() - start
    reads = state["reads"]
    print(json.dumps({
        "requests": requests - state["tickets"], "seconds": round(elapsed, 2),
        "status": state["status"], "errors": state["errors"][:20], "error_count": len(state["errors"]),
        "accepted": state["accepted"], "not_submitted": len(todo),
        "reads": len(reads), "read_p50_ms": round(percentile(reads, 50) * 1000, 2),
        "read_p99_ms": round(percentile(reads, 99) * 1000, 2)}))


def submit(ep, token, instances, inst_body, clients, out_file, secs):
    lock = threading.Lock()
    todo = list(instances)
    lines = []
    deadline = time.monotonic() + secs

    def worker():
        conn = Conn(ep, token)
        while time.monotonic() < deadline:
            with lock:
                if not todo:
                    return
                inst = todo.pop()
            try:
                st, h, _ = conn.call("POST", "/vnflcm/v1/vnf_instances/%s/instantiate" % inst, inst_body)
            except ConnectionRefusedError:  # nothing was sent: certainly no operation
                with lock:
                    lines.append("%s refused -" % inst)
                time.sleep(0.2)
                continue
            except Exception as e:  # noqa: BLE001: no answer, the outcome is unknown
                with lock:
                    lines.append("%s lost %s" % (inst, type(e).__name__))
                time.sleep(0.2)
                continue
            with lock:
                if st == 202:
                    lines.append("%s accepted %s" % (inst, h.get("location", "").rsplit("/", 1)[-1]))
                else:
                    lines.append("%s http %d" % (inst, st))

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.1, deadline - time.monotonic() + 30))
    with open(out_file, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    mode, ep, token, inst_file, inst_json, clients = sys.argv[1:7]
    with open(inst_file) as f:
        instances = [l.strip() for l in f if l.strip()]
    with open(inst_json) as f:
        body = f.read()
    if mode == "drill":
        drill(ep, token, instances, body, int(clients), int(sys.argv[7]), float(sys.argv[8]))
    else:
        submit(ep, token, instances, body, int(clients), sys.argv[7], float(sys.argv[8]))


if __name__ == "__main__":
    main()
