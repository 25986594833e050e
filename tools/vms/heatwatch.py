#!/usr/bin/python3
"""Fake Nova for vnflow's tests: boots a test VM (tools/vms/vm.sh) for every
fake OS::Nova::Server that Heat reports, and removes it when the server is
gone.

Every --interval seconds (for at most --lifetime seconds) it lists the
stacks whose name starts with --prefix, their resources (nested_depth 5),
and for each OS::Nova::Server (a nested stack of tests/openstack/fake/
server.yaml) reads the nested stack's outputs first_address / networks.
The VM of a server is named <--name-prefix><first 12 hex digits of its
physical_resource_id>, so a server replaced by a heal gets a new VM. Only
addresses in 10.231.0.0/16 (the VM bridge) are acted on. Every change is
one line in --log-file.

Standard library only; run it with /usr/bin/python3, as root (vm.sh is).
"""
import argparse
import ipaddress
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
VM_NET = ipaddress.ip_network("10.231.0.0/16")
HOST_ADDR = ipaddress.ip_address("10.231.0.1")
GONE_STATES = {"DELETE_IN_PROGRESS", "DELETE_COMPLETE", "CREATE_FAILED", "INIT_COMPLETE"}


def parse_openrc(path):
    env = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("export "):
                line = line[7:]
            if "=" not in line or line.startswith("#"):
                continue
            k, v = line.split("=", 1)
            v = v.strip()
            if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
                v = v[1:-1]
            env[k.strip()] = v
    for k in ("OS_AUTH_URL", "OS_USERNAME", "OS_PASSWORD", "OS_PROJECT_NAME"):
        if not env.get(k):
            raise SystemExit(f"heatwatch: {k} missing in {path}")
    return env


class ApiError(Exception):
    def __init__(self, status, msg):
        super().__init__(f"HTTP {status}: {msg}")
        self.status = status


class Heat:
    """Heat REST client with Keystone v3 password auth (token again on 401)."""

    def __init__(self, rc, heat_url=None, timeout=10):
        self.rc = rc
        self.fixed_url = heat_url.rstrip("/") if heat_url else None
        self.url = self.fixed_url
        self.timeout = timeout
        self.token = None
        # no proxies: the services are on loopback
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _open(self, req):
        try:
            with self.opener.open(req, timeout=self.timeout) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()
        except (urllib.error.URLError, OSError) as e:
            raise ApiError(0, f"{req.get_method()} {req.full_url}: {e}") from None

    def authenticate(self):
        rc = self.rc
        body = {"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": rc["OS_USERNAME"], "password": rc["OS_PASSWORD"],
                "domain": {"name": rc.get("OS_USER_DOMAIN_NAME", "Default")}}}},
            "scope": {"project": {"name": rc["OS_PROJECT_NAME"],
                                  "domain": {"name": rc.get("OS_PROJECT_DOMAIN_NAME", "Default")}}}}}
        url = rc["OS_AUTH_URL"].rstrip("/") + "/auth/tokens"
        req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
        status, headers, data = self._open(req)
        if status != 201:
            raise ApiError(status, f"POST {url}: {data[:300]!r}")
        self.token = headers.get("X-Subject-Token")
        if not self.token:
            raise ApiError(status, "no X-Subject-Token in Keystone's answer")
        if not self.fixed_url:
            iface = rc.get("OS_INTERFACE", "public")
            catalog = json.loads(data)["token"].get("catalog", [])
            urls = [e["url"] for s in catalog if s.get("type") == "orchestration"
                    for e in s.get("endpoints", []) if e.get("interface") == iface]
            if not urls:
                raise ApiError(status, "no orchestration endpoint in the token's catalog")
            self.url = urls[0].rstrip("/")

    def get(self, path_or_url):
        """GET a Heat path (or a full link) -> parsed JSON. Raises ApiError."""
        for attempt in (1, 2):
            if self.token is None:
                self.authenticate()
            url = path_or_url if path_or_url.startswith("http") else self.url + path_or_url
            req = urllib.request.Request(url, headers={"X-Auth-Token": self.token, "Accept": "application/json"})
            status, _, data = self._open(req)
            if status == 401 and attempt == 1:
                self.token = None
                continue
            if status != 200:
                raise ApiError(status, f"GET {url}: {data[:300]!r}")
            return json.loads(data)
        raise ApiError(401, "unauthorized after a new token")


def in_vm_net(addr):
    try:
        a = ipaddress.ip_address(str(addr))
    except ValueError:
        return False
    return (a in VM_NET and a != HOST_ADDR and a != VM_NET.network_address
            and a != VM_NET.broadcast_address)


class Watcher:
    def __init__(self, args):
        self.args = args
        self.heat = Heat(parse_openrc(args.openrc), args.heat_url)
        self.vm_sh = args.vm_sh
        self.vms_dir = os.path.realpath(args.vms_dir)
        self.env = dict(os.environ, VNFLOW_VMS_DIR=self.vms_dir)
        self.addr_cache = {}  # physical_resource_id -> address (or None: not ours)
        self.stack_servers = {}  # stack id -> last known {vm name: server}
        self.failed = {}  # vm name -> monotonic time of the last failed up
        self.log_file = open(args.log_file, "a", buffering=1) if args.log_file != "-" else sys.stderr
        self.last_error = None

    def log(self, msg):
        t = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"
        self.log_file.write(f"{stamp} {msg}\n")

    def log_error_once(self, msg):
        if msg != self.last_error:
            self.log(f"error {msg}")
        self.last_error = msg

    # ---------------------------------------------------------- Heat side
    def server_address(self, res):
        pid = res["physical_resource_id"]
        if pid in self.addr_cache:
            return self.addr_cache[pid]
        nested = next((lk["href"] for lk in res.get("links", []) if lk.get("rel") == "nested"), None)
        if not nested:
            return None
        addr = None
        first = self.heat.get(nested + "/outputs/first_address")["output"]
        if first.get("output_error"):
            return None  # not computable (yet); ask again next pass
        if in_vm_net(first.get("output_value")):
            addr = str(first["output_value"])
        else:
            nets = self.heat.get(nested + "/outputs/networks")["output"].get("output_value") or {}
            for ips in nets.values() if isinstance(nets, dict) else []:
                for ip in ips if isinstance(ips, list) else [ips]:
                    if addr is None and in_vm_net(ip):
                        addr = str(ip)
        self.addr_cache[pid] = addr
        return addr

    def live_servers(self):
        """{vm name: server} of every live fake server, or None when Heat did not answer."""
        try:
            stacks = self.heat.get("/stacks")["stacks"]
        except ApiError as e:
            self.log_error_once(f"listing stacks: {e}")
            return None
        pass_errors = 0
        servers = {}
        seen_stacks = set()
        for st in stacks:
            if not st["stack_name"].startswith(self.args.prefix):
                continue
            sid = st["id"]
            seen_stacks.add(sid)
            try:
                path = f"/stacks/{urllib.parse.quote(st['stack_name'])}/{sid}/resources?nested_depth=5"
                resources = self.heat.get(path)["resources"]
                found = {}
                for res in resources:
                    if res.get("resource_type") != "OS::Nova::Server":
                        continue
                    pid = res.get("physical_resource_id") or ""
                    if not pid or res.get("resource_status") in GONE_STATES:
                        continue
                    addr = self.server_address(res)
                    if addr is None:
                        continue
                    name = self.args.name_prefix + pid.replace("-", "")[:12]
                    found[name] = {"addr": addr, "id": pid, "stack": st["stack_name"],
                                   "resource": res.get("resource_name"),
                                   "created": res.get("creation_time") or ""}
                self.stack_servers[sid] = found
            except ApiError as e:
                if e.status != 404:  # a stack that vanished has no servers
                    pass_errors += 1
                    self.log_error_once(f"stack {st['stack_name']}: {e}")
                    found = self.stack_servers.get(sid, {})  # keep what we knew
                else:
                    found = {}
            servers.update(found)
        for sid in list(self.stack_servers):
            if sid not in seen_stacks:
                del self.stack_servers[sid]
        if not pass_errors:
            self.last_error = None  # log the next error again, even if it repeats
        # one VM per address: when a replacement (heal) and its old server
        # briefly share an address, the newer server gets it
        by_addr = {}
        for name, srv in sorted(servers.items(), key=lambda kv: (kv[1]["created"], kv[1]["id"])):
            by_addr[srv["addr"]] = name
        return {name: servers[name] for name in by_addr.values()}

    # ------------------------------------------------------------ VM side
    def current_vms(self):
        vms = {}
        try:
            entries = os.listdir(self.vms_dir)
        except FileNotFoundError:
            return vms
        for n in entries:
            if not n.startswith(self.args.name_prefix):
                continue
            try:
                with open(os.path.join(self.vms_dir, n, "addr")) as f:
                    vms[n] = f.read().strip()
            except OSError:
                pass
        return vms

    def run_vm_sh(self, *argv):
        """Start vm.sh ARGV; returns the Popen."""
        return subprocess.Popen([self.vm_sh, *argv], env=self.env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def finish(self, procs, what):
        """Wait (bounded) for vm.sh runs; log one line each. Returns the failure count."""
        failures = 0
        for name, (p, t0, detail) in procs.items():
            try:
                _, err = p.communicate(timeout=self.args.vm_timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                _, err = p.communicate()
                err = f"vm.sh {what} timed out after {self.args.vm_timeout}s; " + (err or "")
            secs = time.monotonic() - t0
            if p.returncode == 0:
                self.failed.pop(name, None)
                self.log(f"{what} {name} {detail} ({secs:.1f}s)")
            else:
                failures += 1
                self.failed[name] = time.monotonic()
                msg = " ".join((err or "").split())[-400:]
                self.log(f"error {what} {name} {detail}: rc={p.returncode} {msg}")
        return failures

    def reconcile(self):
        """One pass. Returns the number of failed actions, or None if Heat did not answer."""
        servers = self.live_servers()
        if servers is None:
            return None
        vms = self.current_vms()
        downs = {n: a for n, a in vms.items() if n not in servers or servers[n]["addr"] != a}
        now = time.monotonic()
        ups = {n: s for n, s in servers.items()
               if (n not in vms or n in downs)
               and (self.args.once or now - self.failed.get(n, -1e9) >= self.args.retry_secs)}
        failures = 0
        procs = {n: (self.run_vm_sh("down", n), time.monotonic(), a) for n, a in downs.items()}
        failures += self.finish(procs, "down")
        procs = {}
        for n, s in ups.items():
            detail = f"{s['addr']} stack={s['stack']} resource={s['resource']} id={s['id']}"
            procs[n] = (self.run_vm_sh("up", n, s["addr"]), time.monotonic(), detail)
        failures += self.finish(procs, "up")
        return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--openrc", required=True, help="openrc written by tools/openstack/start.sh")
    ap.add_argument("--heat-url", help="Heat v1 URL with project id (default: the token's catalog)")
    ap.add_argument("--prefix", default="vnflow-", help="stack name prefix (default vnflow-)")
    ap.add_argument("--name-prefix", default="hw-", help="prefix of the VMs this watcher owns (default hw-)")
    ap.add_argument("--interval", type=float, default=0.3)
    ap.add_argument("--lifetime", type=float, default=3600, help="exit after this many seconds")
    ap.add_argument("--once", action="store_true", help="one pass, then exit (1 if anything failed)")
    ap.add_argument("--vms-dir", default=os.environ.get("VNFLOW_VMS_DIR", "/tmp/vnflow-vms"))
    ap.add_argument("--vm-sh", default=os.path.join(HERE, "vm.sh"))
    ap.add_argument("--log-file", help="default VMS_DIR/heatwatch.log; - for stderr")
    ap.add_argument("--pid-file")
    ap.add_argument("--retry-secs", type=float, default=2.0, help="wait before retrying a failed up")
    ap.add_argument("--vm-timeout", type=float, default=90.0, help="limit of one vm.sh run")
    ap.add_argument("--down-on-exit", action="store_true", help="down this watcher's VMs when it exits")
    args = ap.parse_args()
    if not (0 < args.interval <= 60) or args.lifetime <= 0:
        ap.error("--interval must be in (0, 60] and --lifetime > 0")
    if not args.name_prefix or "/" in args.name_prefix:
        ap.error("bad --name-prefix")
    os.makedirs(args.vms_dir, exist_ok=True)
    if args.log_file is None:
        args.log_file = os.path.join(args.vms_dir, "heatwatch.log")

    w = Watcher(args)
    stop = threading.Event()

    def on_signal(signum, _frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if args.pid_file:
        with open(args.pid_file, "w") as f:
            f.write(f"{os.getpid()}\n")
    rc = 0
    try:
        if args.once:
            r = w.reconcile()
            rc = 1 if r is None or r > 0 else 0
        else:
            w.log(f"start pid={os.getpid()} prefix={args.prefix} interval={args.interval}s lifetime={args.lifetime}s")
            deadline = time.monotonic() + args.lifetime
            while not stop.is_set() and time.monotonic() < deadline:
                w.reconcile()
                stop.wait(min(args.interval, max(0.0, deadline - time.monotonic())))
            w.log("exit (signal)" if stop.is_set() else "exit (lifetime)")
        if args.down_on_exit:
            procs = {n: (w.run_vm_sh("down", n), time.monotonic(), a) for n, a in w.current_vms().items()}
            w.finish(procs, "down")
    finally:
        if args.pid_file:
            try:
                os.unlink(args.pid_file)
            except OSError:
                pass
    return rc


if __name__ == "__main__":
    sys.exit(main())
