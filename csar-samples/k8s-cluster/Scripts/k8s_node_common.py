#!/usr/bin/env python3
"""Node-side helper of the k8s-cluster VNF package (shared by the real and the stand-in
node scripts, run as root by them).

The workflows of the package (Workflows/*.yaml) upload two files to every node:

  /etc/vnflow-k8s/cluster.json   (0644) the cluster as the VNFM sees it: install mode,
                                 CIDRs, the API address, the VDU/CP names and the VNFCs
                                 ("nodes"; "exclude" lists VNFCs being removed)
  /etc/vnflow-k8s/secrets.json   (0600) private registries (with their passwords), proxy
                                 settings and the registries' CA certificates (a bundle)

and call the node script, which calls this helper for everything that is list or JSON
processing or that writes configuration files. Every command is idempotent: running it
again with the same inputs leaves the same files (no duplicate lines).
Nothing here ever prints a password or a token.

Usage: k8s_node_common.py COMMAND [ARGS]   (see main() for the commands)
"""

import base64
import fcntl
import json
import os
import re
import subprocess
import sys
import tempfile

ETC = "/etc/vnflow-k8s"
CLUSTER = ETC + "/cluster.json"
SECRETS = ETC + "/secrets.json"
CA_STAGE = "/var/lib/vnflow-k8s/registry-ca"
HOSTS = "/etc/hosts"
BEGIN = "# BEGIN vnflow k8s cluster (managed by vnflow, do not edit)"
END = "# END vnflow k8s cluster"


def die(msg, code=2):
    print("k8s_node_common: " + msg, file=sys.stderr)
    sys.exit(code)


def load(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        if default is not None:
            return default
        die(path + " is missing (the workflow uploads it first)")
    except ValueError as e:
        die(path + " is not JSON: " + str(e))


def cluster():
    return load(CLUSTER)


def secrets():
    return load(SECRETS, {})


def write_atomic(path, text, mode=0o644):
    """Writes path only when its content changes; returns True when it changed."""
    try:
        with open(path) as f:
            if f.read() == text:
                os.chmod(path, mode)
                return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    d = os.path.dirname(path) or "."
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".vnflow-", dir=d)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return True


class Lock:
    """flock on a file beside the state: parallel fan-out items on one node serialise."""

    def __init__(self, name):
        os.makedirs("/var/lib/vnflow-k8s", exist_ok=True)
        self.f = open("/var/lib/vnflow-k8s/." + name + ".lock", "w")

    def __enter__(self):
        fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *a):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


# ------------------------------------------------------------------------------ nodes


def role_of(c, v):
    if v.get("vdu") == c.get("master_vdu", "masterNode"):
        return "master"
    if v.get("vdu") == c.get("worker_vdu", "workerNode"):
        return "worker"
    return None


def ip_of(c, v):
    role = role_of(c, v)
    cp = c.get("master_cp") if role == "master" else c.get("worker_cp")
    return (v.get("addresses") or {}).get(cp) or v.get("address") or ""


def name_of(role, ip):
    """Kubernetes node (and host) name: master-10-0-0-5. Unique per address, unlike
    Tacker's master<last octet>, which collides across subnets."""
    return "%s-%s" % (role, re.sub(r"[^0-9A-Za-z]", "-", ip).strip("-").lower())


def node(c, v):
    role = role_of(c, v)
    ip = ip_of(c, v)
    if role is None or not ip:
        return None
    return {"id": v.get("id", ""), "role": role, "ip": ip, "name": name_of(role, ip),
            "created": v.get("created", "")}


def members(c):
    """The cluster's nodes: "nodes" minus "exclude", masters first, oldest first."""
    gone = {v.get("id") for v in c.get("exclude") or []}
    out = []
    for v in c.get("nodes") or []:
        if v.get("id") in gone:
            continue
        n = node(c, v)
        if n is not None:
            out.append(n)
    out.sort(key=lambda n: (n["role"] != "master", n["created"]))
    return out


def find_node(c, spec):
    """spec: a VNFC id, or a VNFC record as JSON."""
    spec = spec.strip()
    if spec.startswith("{"):
        try:
            n = node(c, json.loads(spec))
        except ValueError:
            die("not a VNFC record: " + spec[:80])
        if n is None:
            die("the VNFC record names no master/worker address")
        return n
    for v in c.get("nodes") or []:
        if v.get("id") == spec:
            n = node(c, v)
            if n is not None:
                return n
    die("no VNFC %s in %s" % (spec, CLUSTER))


def cmd_node(args):
    """node SPEC -> "role ip name" of a VNFC (SPEC: id or JSON record)."""
    n = find_node(cluster(), args[0] if args else os.environ.get("VNFC_ID", ""))
    print(n["role"], n["ip"], n["name"])


def cmd_members(args):
    """members [master|worker] -> "role ip name" per cluster node."""
    for n in members(cluster()):
        if not args or n["role"] == args[0]:
            print(n["role"], n["ip"], n["name"])


def cmd_get(args):
    """get KEY -> a scalar of cluster.json."""
    v = cluster().get(args[0], "")
    print(v if not isinstance(v, (dict, list)) else json.dumps(v))


def cmd_ids_to_ips(args):
    """ids-to-ips JSON_LIST_OF_VNFC_IDS -> the nodes' addresses, one a line."""
    c = cluster()
    try:
        ids = set(json.loads(args[0] if args else "[]"))
    except ValueError:
        die("ids-to-ips: not a JSON list")
    for v in c.get("nodes") or []:
        if v.get("id") in ids:
            n = node(c, v)
            if n is not None:
                print(n["ip"])


# ------------------------------------------------------------------------------ /etc/hosts


def cmd_hosts(args):
    """Rewrites the managed block of /etc/hosts: one line per cluster node, then the
    registries' hosts_string entries. Lines outside the block are kept as they are."""
    c = cluster()
    lines = ["%s %s" % (n["ip"], n["name"]) for n in members(c)]
    for r in secrets().get("registries") or []:
        for entry in re.split(r"[,\n]", str(r.get("hosts_string") or "")):
            entry = " ".join(entry.split())
            if entry and not HOSTS_ENTRY.match(entry):
                die("private registry hosts_string entry %r is not \"<IP address> <host name>\"" % entry[:100])
            if entry and entry not in lines:
                lines.append(entry)
    with Lock("hosts"):
        try:
            with open(HOSTS) as f:
                old = f.read().splitlines()
        except FileNotFoundError:
            old = []
        kept, inside = [], False
        for ln in old:
            if ln == BEGIN:
                inside = True
            elif ln == END:
                inside = False
            elif not inside:
                kept.append(ln)
        while kept and kept[-1] == "":
            kept.pop()
        text = "\n".join(kept + [BEGIN] + lines + [END]) + "\n"
        changed = write_atomic(HOSTS, text, 0o644)
    print("/etc/hosts: %d managed line(s)%s" % (len(lines), "" if changed else " (unchanged)"))


# ------------------------------------------------------------------------------ registries


# A registry's server: a host name, an IPv4 address or a [IPv6] address, then an optional
# :port. It names directories (/etc/docker/certs.d/SERVER), so no "/" and no "..".
REGISTRY_SERVER = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
    r"|\[[0-9A-Fa-f:.]{2,45}\])(?::[0-9]{1,5})?$")
# A hosts_string entry: "<IP address> <host name> [<alias>...]", as an /etc/hosts line.
HOSTS_ENTRY = re.compile(r"^[0-9A-Fa-f:.]{2,45}(?: [A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)+$")


def registries():
    out = []
    for r in secrets().get("registries") or []:
        server = str(r.get("server") or "").strip()
        if not REGISTRY_SERVER.match(server):
            die("private registry server %r is not a host name or address with an optional :port" % server[:100])
        out.append(dict(r, server=server, connection_type=str(r.get("connection_type", ""))))
    return out


def ca_bundle():
    """{server: PEM} from the bundle in secrets.json ("# registry: SERVER" headers)."""
    out, server, buf = {}, None, []
    for ln in (secrets().get("registry_ca_bundle") or "").splitlines():
        m = re.match(r"^# registry: (\S+)$", ln)
        if m:
            if server and buf:
                out[server] = "\n".join(buf) + "\n"
            server, buf = m.group(1), []
        elif server is not None and ln.strip():
            buf.append(ln)
    if server and buf:
        out[server] = "\n".join(buf) + "\n"
    return out


def cmd_registries(args):
    """registries MODE: /etc/docker/daemon.json insecure-registries (connection_type "0"),
    /etc/docker/certs.d/SERVER/ca.crt (every registry with certificate_path), and for
    MODE=real also containerd's /etc/containerd/certs.d/SERVER/hosts.toml. Prints
    "changed" when the container runtime needs a restart."""
    mode = args[0] if args else "standin"
    regs = registries()
    cas = ca_bundle()
    changed = False
    http = [r["server"] for r in regs if r["connection_type"] == "0"]
    # daemon.json: keep whatever else is there; insecure-registries is ours.
    path = "/etc/docker/daemon.json"
    conf = load(path, {}) if os.path.exists(path) else {}
    if mode == "real":
        conf.setdefault("exec-opts", ["native.cgroupdriver=systemd"])
        conf.setdefault("log-driver", "json-file")
        conf.setdefault("log-opts", {"max-size": "100m"})
    if http:
        conf["insecure-registries"] = sorted(set(http))
    else:
        conf.pop("insecure-registries", None)
    if conf or os.path.exists(path):
        changed |= write_atomic(path, json.dumps(conf, indent=2, sort_keys=True) + "\n")
    for r in regs:
        s = r["server"]
        if s in cas:  # Tacker places a given CA for HTTP registries too
            changed |= write_atomic("/etc/docker/certs.d/%s/ca.crt" % s, cas[s])
        if mode == "real":
            host = "http://" + s if r["connection_type"] == "0" else "https://" + s
            toml = 'server = "%s"\n\n[host."%s"]\n  capabilities = ["pull", "resolve"]\n' % (host, host)
            if r["connection_type"] == "0":
                toml += "  skip_verify = true\n"
            elif s in cas:
                write_atomic("/etc/containerd/certs.d/%s/ca.crt" % s, cas[s])
                toml += '  ca = "/etc/containerd/certs.d/%s/ca.crt"\n' % s
            changed |= write_atomic("/etc/containerd/certs.d/%s/hosts.toml" % s, toml)
    for r in regs:
        print("registry %s: %s%s" % (r["server"], "HTTP (insecure-registries)" if r["connection_type"] == "0"
                                     else "HTTPS", " with CA" if r["server"] in cas else ""))
    if changed:
        print("changed")


KUBELET_AUTH = "/var/lib/kubelet/config.json"


def cmd_login(args):
    """login MODE: log in to every registry that has a username. MODE=real runs
    `docker login --password-stdin`; MODE=standin writes the entry docker login would
    write to /root/.docker/config.json. Both modes also give kubelet the credentials in
    /var/lib/kubelet/config.json (0600), the file kubelet reads for image pulls whatever
    its HOME and the container runtime (containerd's hosts.toml carries none), so a pod on
    any node pulls from the authenticated registries. The password never reaches argv or
    stdout."""
    mode = args[0] if args else "standin"
    # The file is this package's: rebuilt from the registries, so a registry removed from
    # them (or that lost its username) leaves it too.
    kubelet_auths = {}
    for r in registries():
        user, pw = r.get("username"), r.get("password")
        if not user or pw is None:
            continue
        s = r["server"]
        if mode == "real":
            env = dict(os.environ, HOME="/root")
            p = subprocess.run(["docker", "login", s, "--username", str(user), "--password-stdin"],
                               input=str(pw) + "\n", text=True, capture_output=True, env=env,
                               timeout=120)
            if p.returncode != 0 or "Login Succeeded" not in p.stdout:
                die("docker login %s failed: %s" % (s, (p.stderr or p.stdout).strip()[-300:]), 3)
        else:
            path = "/root/.docker/config.json"
            conf = load(path, {}) if os.path.exists(path) else {}
            auth = base64.b64encode(("%s:%s" % (user, pw)).encode()).decode()
            conf.setdefault("auths", {})[s] = {"auth": auth}
            os.makedirs("/root/.docker", mode=0o700, exist_ok=True)
            write_atomic(path, json.dumps(conf, indent=2, sort_keys=True) + "\n", 0o600)
        kubelet_auths[s] = {"auth": base64.b64encode(("%s:%s" % (user, pw)).encode()).decode()}
        print("registry %s: logged in as %s" % (s, user))
    if kubelet_auths or os.path.exists(KUBELET_AUTH):
        write_atomic(KUBELET_AUTH, json.dumps({"auths": kubelet_auths}, indent=2, sort_keys=True) + "\n", 0o600)


def cmd_ca_bundle(args):
    """ca-bundle: the CA files staged in /var/lib/vnflow-k8s/registry-ca/SERVER.crt (a
    package file per registry; registries without certificate_path stage a placeholder,
    which is skipped) as one text, "# registry: SERVER" before each PEM."""
    if not os.path.isdir(CA_STAGE):
        return
    for f in sorted(os.listdir(CA_STAGE)):
        if not f.endswith(".crt"):
            continue
        with open(os.path.join(CA_STAGE, f)) as fh:
            pem = fh.read()
        blocks = re.findall(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", pem, re.S)
        if blocks:
            print("# registry: " + f[:-4])
            print("\n".join(blocks))


# ------------------------------------------------------------------------------ proxy


def cmd_proxy(args):
    """proxy MODE: /etc/vnflow-k8s/proxy.env and the systemd drop-ins of containerd and
    docker (MODE=real also apt's proxy). NO_PROXY covers the node addresses, the pod and
    service CIDRs, the API address and localhost. Prints "changed" on a change."""
    mode = args[0] if args else "standin"
    p = secrets().get("proxy") or {}
    c = cluster()
    http, https = p.get("http_proxy") or "", p.get("https_proxy") or ""
    paths = ["/etc/vnflow-k8s/proxy.env",
             "/etc/systemd/system/containerd.service.d/http-proxy.conf",
             "/etc/systemd/system/docker.service.d/http-proxy.conf"]
    if mode == "real":
        paths.append("/etc/apt/apt.conf.d/90vnflow-proxy")
    if not http and not https:
        changed = False
        for f in paths:
            if os.path.exists(f):
                os.unlink(f)
                changed = True
        if changed:
            print("changed")
        return
    no = [x.strip() for x in str(p.get("no_proxy") or "").split(",") if x.strip()]
    no += ["127.0.0.1", "localhost", c.get("cluster_ip", ""), c.get("pod_cidr", ""),
           c.get("service_cidr", ""), p.get("k8s_node_cidr") or ""]
    no += [n["ip"] for n in members(c)]
    seen, no_proxy = set(), []
    for x in no:
        if x and x not in seen:
            seen.add(x)
            no_proxy.append(x)
    np = ",".join(no_proxy)
    env = "HTTP_PROXY=%s\nHTTPS_PROXY=%s\nNO_PROXY=%s\nhttp_proxy=%s\nhttps_proxy=%s\nno_proxy=%s\n" % (
        http, https, np, http, https, np)
    unit = '[Service]\nEnvironment="HTTP_PROXY=%s" "HTTPS_PROXY=%s" "NO_PROXY=%s"\n' % (http, https, np)
    changed = write_atomic(paths[0], env, 0o600)
    changed |= write_atomic(paths[1], unit, 0o600)
    changed |= write_atomic(paths[2], unit, 0o600)
    if mode == "real":
        apt = ""
        if http:
            apt += 'Acquire::http::Proxy "%s";\n' % http
        if https:
            apt += 'Acquire::https::Proxy "%s";\n' % https
        changed |= write_atomic(paths[3], apt, 0o600)
    print("proxy: %s" % ("changed" if changed else "unchanged"))
    if changed:
        print("changed")


# ------------------------------------------------------------------------------ haproxy


def haproxy_cfg(masters):
    srv = "".join("    server %s %s:6443 check\n" % (n["name"], n["ip"]) for n in masters)
    return ("# managed by vnflow: the masters' API servers behind one endpoint (HA clusters)\n"
            "global\n    log /dev/log local0\n    maxconn 4000\n    daemon\n\n"
            "defaults\n    mode tcp\n    log global\n    option tcplog\n"
            "    timeout connect 10s\n    timeout client 1m\n    timeout server 1m\n\n"
            "listen stats\n    bind *:1080\n    mode http\n    stats enable\n    stats uri /\n\n"
            "frontend kubernetes-apiserver\n    bind *:16443\n    default_backend kubernetes-masters\n\n"
            "backend kubernetes-masters\n    balance roundrobin\n" + srv)


def cmd_haproxy(args):
    """haproxy: with more than one master, /etc/haproxy/haproxy.cfg lists every master
    ("server master-IP IP:6443 check"); with one master, there is no HA proxy (a file we
    wrote before is removed). Prints "changed" on a change."""
    ms = [n for n in members(cluster()) if n["role"] == "master"]
    path = "/etc/haproxy/haproxy.cfg"
    with Lock("haproxy"):
        if len(ms) > 1:
            changed = write_atomic(path, haproxy_cfg(ms))
        else:
            changed = False
            if os.path.exists(path) and open(path).read().startswith("# managed by vnflow"):
                os.unlink(path)
                changed = True
    print("haproxy: %d master(s)%s" % (len(ms), ", changed" if changed else ""))
    if changed:
        print("changed")


def cmd_haproxy_drop(args):
    """haproxy-drop IP...: removes those masters' server lines (a heal_start of masters)."""
    path = "/etc/haproxy/haproxy.cfg"
    if not os.path.exists(path):
        print("haproxy: no configuration")
        return
    drop = set(args)
    with Lock("haproxy"):
        lines = open(path).read().splitlines()
        kept = [ln for ln in lines
                if not (ln.strip().startswith("server ") and len(ln.split()) > 2
                        and ln.split()[2].rsplit(":", 1)[0] in drop)]
        changed = write_atomic(path, "\n".join(kept) + "\n") if kept != lines else False
    print("haproxy: dropped %s%s" % (" ".join(sorted(drop)) or "nothing", "" if changed else " (unchanged)"))
    if changed:
        print("changed")


# ------------------------------------------------------------------------------ list files


def cmd_list_add(args):
    """list-add FILE LINE: adds LINE to FILE unless a line with the same first word is
    there (then that line is replaced)."""
    path, line = args[0], " ".join(args[1:])
    key = line.split()[0]
    with Lock("lists"):
        try:
            lines = open(path).read().splitlines()
        except FileNotFoundError:
            lines = []
        out = [ln for ln in lines if ln.split()[:1] != [key]]
        pos = next((i for i, ln in enumerate(lines) if ln.split()[:1] == [key]), len(out))
        out.insert(min(pos, len(out)), line)
        write_atomic(path, "".join(ln + "\n" for ln in out))


def cmd_list_del(args):
    """list-del FILE KEY: removes the lines whose first word is KEY."""
    path, key = args[0], args[1]
    with Lock("lists"):
        try:
            lines = open(path).read().splitlines()
        except FileNotFoundError:
            return
        out = [ln for ln in lines if ln.split()[:1] != [key]]
        if out != lines:
            write_atomic(path, "".join(ln + "\n" for ln in out))


COMMANDS = {
    "node": cmd_node, "members": cmd_members, "get": cmd_get, "ids-to-ips": cmd_ids_to_ips,
    "hosts": cmd_hosts, "registries": cmd_registries, "login": cmd_login,
    "ca-bundle": cmd_ca_bundle, "proxy": cmd_proxy, "haproxy": cmd_haproxy,
    "haproxy-drop": cmd_haproxy_drop, "list-add": cmd_list_add, "list-del": cmd_list_del,
}


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        die("usage: k8s_node_common.py {%s} [ARGS]" % "|".join(sorted(COMMANDS)))
    if os.geteuid() != 0 and sys.argv[1] not in ("node", "members", "get", "ids-to-ips"):
        die("run as root")
    COMMANDS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
