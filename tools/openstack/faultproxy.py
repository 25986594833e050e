#!/usr/bin/python3
"""faultproxy: an HTTP/1.1-aware TCP proxy on 127.0.0.1 that injects faults.

Put it in front of Heat or Keystone and point the client at it:

    faultproxy.py --listen 18104 --upstream 18004 --control 18105

It relays requests and responses byte for byte (keep-alive, chunked bodies,
"Expect: 100-continue" included) and changes nothing unless a fault is
armed. Faults are armed through the control endpoint or a control file,
with commands (several may be given, separated by newlines or ';'):

    pass            disarm everything
    fail N [CODE]   answer the next N requests itself with CODE (default 503)
                    and a JSON error body; they never reach the upstream
    reset N         next N requests: close the client connection with a TCP
                    reset, no answer, nothing forwarded
    close N         same, but a plain close (FIN): "empty reply"
    delay MS [N]    hold each request MS milliseconds before handling it
                    (the next N requests only, or until pass / delay 0)

Control endpoint (--control PORT, on 127.0.0.1):
    curl -d 'fail 2' http://127.0.0.1:PORT/     (or POST /fail/2, /pass, ...)
    curl http://127.0.0.1:PORT/                 state and counters, JSON
Control file (--control-file PATH): checked before each request; whenever
its content or mtime changes, its commands are applied once.

Bounded: at most --max-connections client connections, --io-timeout
seconds of silence per socket, --lifetime seconds overall (0: no limit).
Exits 0 on SIGTERM or SIGINT. Standard library only; run it with
/usr/bin/python3 (or any python3 >= 3.7).
"""
import argparse
import ssl
import hashlib
import http
import http.server
import json
import os
import selectors
import signal
import socket
import struct
import sys
import threading
import time

MAX_HEAD = 64 * 1024
CHUNK = 64 * 1024


class Faults:
    """The armed faults and counters; thread-safe."""

    def __init__(self, control_file=None):
        self.lock = threading.Lock()
        self.control_file = control_file
        self.file_key = None
        self.fail_left = 0
        self.fail_code = 503
        self.reset_left = 0
        self.close_left = 0
        self.delay_ms = 0
        self.delay_left = None  # None: every request until disarmed
        self.counts = dict(requests=0, passed=0, failed=0, reset=0, closed=0,
                           delayed=0, upstream_errors=0, refused_connections=0)

    # -- commands ---------------------------------------------------------
    def apply(self, text):
        """Apply commands; returns None or raises ValueError."""
        with self.lock:
            for raw in text.replace(';', '\n').splitlines():
                words = raw.split('#', 1)[0].split()
                if words:
                    self._apply_one(words)

    def _apply_one(self, words):
        cmd, args = words[0].lower(), words[1:]

        def number(i, default=None):
            if i < len(args):
                value = int(args[i])
                if value < 0:
                    raise ValueError('negative number in %r' % ' '.join(words))
                return value
            if default is None:
                raise ValueError('%s needs a number' % cmd)
            return default

        if cmd == 'pass' and not args:
            self.fail_left = self.reset_left = self.close_left = 0
            self.delay_ms, self.delay_left = 0, None
        elif cmd == 'fail' and len(args) <= 2:
            self.fail_left = number(0)
            self.fail_code = number(1, 503)
            if not 400 <= self.fail_code <= 599:
                raise ValueError('fail CODE must be 400..599')
        elif cmd == 'reset' and len(args) == 1:
            self.reset_left = number(0)
        elif cmd == 'close' and len(args) == 1:
            self.close_left = number(0)
        elif cmd == 'delay' and len(args) in (1, 2):
            self.delay_ms = number(0)
            self.delay_left = number(1) if len(args) == 2 else None
        else:
            raise ValueError('unknown command %r' % ' '.join(words))

    def poll_file(self):
        if not self.control_file:
            return
        try:
            st = os.stat(self.control_file)
            with open(self.control_file, 'rb') as f:
                data = f.read(4096)
        except OSError:
            return
        key = (st.st_mtime_ns, st.st_size, hashlib.sha1(data).hexdigest())
        with self.lock:
            if key == self.file_key:
                return
            self.file_key = key
        text = data.decode('utf-8', 'replace')
        try:
            self.apply(text)
            log('control file %s applied: %s' % (self.control_file, text.strip().replace('\n', '; ')))
        except ValueError as err:
            log('control file %s ignored: %s' % (self.control_file, err))

    # -- per request ------------------------------------------------------
    def next_action(self):
        """Decide the fate of one request: (action, delay_seconds, code)."""
        self.poll_file()
        with self.lock:
            self.counts['requests'] += 1
            delay = 0.0
            if self.delay_ms and (self.delay_left is None or self.delay_left > 0):
                delay = self.delay_ms / 1000.0
                self.counts['delayed'] += 1
                if self.delay_left is not None:
                    self.delay_left -= 1
            if self.reset_left:
                self.reset_left -= 1
                self.counts['reset'] += 1
                return 'reset', delay, None
            if self.close_left:
                self.close_left -= 1
                self.counts['closed'] += 1
                return 'close', delay, None
            if self.fail_left:
                self.fail_left -= 1
                self.counts['failed'] += 1
                return 'fail', delay, self.fail_code
            self.counts['passed'] += 1
            return 'pass', delay, None

    def count(self, name):
        with self.lock:
            self.counts[name] += 1

    def state(self):
        with self.lock:
            return {'armed': {'fail': self.fail_left, 'fail_code': self.fail_code,
                              'reset': self.reset_left, 'close': self.close_left,
                              'delay_ms': self.delay_ms, 'delay_left': self.delay_left},
                    'counts': dict(self.counts)}


LOG_LOCK = threading.Lock()
LOG_OUT = sys.stderr
QUIET = False


def log(msg):
    if QUIET:
        return
    with LOG_LOCK:
        LOG_OUT.write('%s faultproxy: %s\n' % (time.strftime('%H:%M:%S'), msg))
        LOG_OUT.flush()


# ------------------------------------------------------------- HTTP framing
class Closed(Exception):
    """The peer closed the connection (or went silent too long)."""


def parse_head(raw):
    """(first line, {lower-case name: value}) of a request or response head."""
    lines = raw.decode('iso-8859-1').split('\r\n')
    headers = {}
    for line in lines[1:]:
        if ':' in line:
            name, value = line.split(':', 1)
            name = name.strip().lower()
            value = value.strip()
            headers[name] = headers[name] + ', ' + value if name in headers else value
    return lines[0], headers


def body_framer(headers, default_mode):
    """A BodyFramer for a message with these headers."""
    if 'chunked' in headers.get('transfer-encoding', '').lower():
        return BodyFramer('chunked')
    if 'content-length' in headers:
        try:
            length = int(headers['content-length'].split(',')[0])
        except ValueError:
            raise Closed('bad Content-Length')
        return BodyFramer('length', length)
    return BodyFramer(default_mode)


class BodyFramer:
    """Tells where a message body ends in a byte stream, incrementally.

    mode: 'none' (no body), 'length' (Content-Length), 'chunked', or 'eof'
    (the body runs until the connection closes).
    """

    def __init__(self, mode, length=0):
        self.mode = mode
        self.left = length
        self.line = b''
        self.state = 'size'  # chunked: size, data, data_end, trailer
        self.done = mode == 'none' or (mode == 'length' and length == 0)

    def feed(self, data):
        """Number of leading bytes of data that belong to this body."""
        if self.done:
            return 0
        if self.mode == 'eof':
            return len(data)
        if self.mode == 'length':
            used = min(self.left, len(data))
            self.left -= used
            self.done = self.left == 0
            return used
        pos = 0
        while pos < len(data) and not self.done:
            if self.state in ('size', 'trailer'):
                end = data.find(b'\n', pos)
                if end < 0:
                    self.line += data[pos:]
                    pos = len(data)
                    break
                line = (self.line + data[pos:end]).rstrip(b'\r')
                self.line = b''
                pos = end + 1
                if self.state == 'size':
                    try:
                        size = int(line.split(b';', 1)[0].strip() or b'0', 16)
                    except ValueError:
                        raise Closed('bad chunk size')
                    if size == 0:
                        self.state = 'trailer'
                    else:
                        self.state, self.left = 'data', size
                elif line == b'':
                    self.done = True
            elif self.state == 'data':
                used = min(self.left, len(data) - pos)
                pos += used
                self.left -= used
                if self.left == 0:
                    self.state, self.left = 'data_end', 2
            else:  # data_end: the CRLF after a chunk
                used = min(self.left, len(data) - pos)
                pos += used
                self.left -= used
                if self.left == 0:
                    self.state = 'size'
        return pos


def recv(sock):
    try:
        data = sock.recv(CHUNK)
    except socket.timeout:
        raise Closed('timeout')
    except OSError as err:
        raise Closed(str(err))
    if not data:
        raise Closed('eof')
    return data


def read_head(sock, buf):
    """(head bytes incl. the blank line, rest of buf); raises Closed."""
    while True:
        end = buf.find(b'\r\n\r\n')
        if end >= 0:
            return buf[:end + 4], buf[end + 4:]
        if len(buf) > MAX_HEAD:
            raise Closed('head too large')
        buf += recv(sock)


def abort(sock, hard):
    """Close a client connection without answering: RST when hard, else FIN."""
    try:
        if hard:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
        sock.close()
    except OSError:
        pass


def finish(sock, grace=2.0):
    """Close after sending a final answer, reading what the client still sends
    (closing with unread input would turn the FIN into a reset)."""
    try:
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(0.2)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            try:
                if not sock.recv(CHUNK):
                    break
            except socket.timeout:
                continue
    except OSError:
        pass
    finally:
        try:
            sock.close()
        except OSError:
            pass


# -------------------------------------------------------------- the proxy
class Proxy:
    def __init__(self, args, faults):
        self.args = args
        self.faults = faults
        self.stop = threading.Event()
        self.slots = threading.BoundedSemaphore(args.max_connections)
        self.active = set()
        self.active_lock = threading.Lock()
        self.serial = 0
        self.tls = None  # an ssl.SSLContext with --tls-cert

    def serve(self, listener):
        sel = selectors.DefaultSelector()
        sel.register(listener, selectors.EVENT_READ)
        deadline = time.monotonic() + self.args.lifetime if self.args.lifetime else None
        while not self.stop.is_set():
            if deadline and time.monotonic() > deadline:
                log('lifetime of %ss reached, exiting' % self.args.lifetime)
                break
            if not sel.select(timeout=0.25):
                continue
            try:
                client, _ = listener.accept()
            except OSError:
                continue
            if not self.slots.acquire(blocking=False):
                self.faults.count('refused_connections')
                log('connection refused: %d connections open' % self.args.max_connections)
                abort(client, hard=True)
                continue
            self.serial += 1
            threading.Thread(target=self.connection, args=(client, self.serial),
                             daemon=True).start()
        sel.close()
        with self.active_lock:
            for sock in list(self.active):
                abort(sock, hard=False)

    def track(self, sock, on):
        with self.active_lock:
            (self.active.add if on else self.active.discard)(sock)

    def connection(self, client, serial):
        upstream = None
        client.settimeout(self.args.io_timeout)
        if self.tls is not None:
            try:
                client = self.tls.wrap_socket(client, server_side=True)
            except (OSError, ssl.SSLError) as err:
                log('#%d TLS handshake failed: %s' % (serial, err))
                abort(client, hard=False)
                self.slots.release()
                return
        self.track(client, True)
        buf = b''
        try:
            while not self.stop.is_set():
                if b'\r\n\r\n' not in buf and not self.wait_request(client, upstream):
                    break
                head, buf = read_head(client, buf)
                first, headers = parse_head(head)
                parts = first.split(' ')
                method = parts[0]
                target = parts[1] if len(parts) > 1 else ''
                action, delay, code = self.faults.next_action()
                if delay:
                    if self.stop.wait(delay):
                        return
                started = time.monotonic()
                if action in ('reset', 'close'):
                    log('#%d %s %s -> %s (injected)' % (serial, method, target, action))
                    abort(client, hard=action == 'reset')
                    return
                if action == 'fail':
                    self.answer_fault(client, buf, headers, code)
                    log('#%d %s %s -> %d (injected)' % (serial, method, target, code))
                    return
                if upstream is None:
                    try:
                        upstream = socket.create_connection(
                            (self.args.upstream_host, self.args.upstream),
                            timeout=self.args.io_timeout)
                    except OSError as err:
                        self.faults.count('upstream_errors')
                        log('#%d %s %s -> upstream unreachable (%s): reset' % (
                            serial, method, target, err))
                        abort(client, hard=True)
                        return
                    self.track(upstream, True)
                status, keep, buf = self.relay(client, upstream, head, headers, method, buf)
                log('#%d %s %s -> %s%s %.0fms' % (
                    serial, method, target, status, ' (delayed %dms)' % (delay * 1000) if delay else '',
                    (time.monotonic() - started) * 1000))
                if not keep:
                    break
        except Closed:
            pass
        finally:
            if upstream is not None:
                self.track(upstream, False)
                try:
                    upstream.close()
                except OSError:
                    pass
            self.track(client, False)
            try:
                client.close()
            except OSError:
                pass
            self.slots.release()

    def wait_request(self, client, upstream):
        """Wait for the client's next request; False when the upstream closed
        the idle keep-alive connection first (the client's is closed too, as
        the service would have done) or the client went silent too long."""
        sel = selectors.DefaultSelector()
        sel.register(client, selectors.EVENT_READ, 'client')
        if upstream is not None:
            sel.register(upstream, selectors.EVENT_READ, 'upstream')
        try:
            deadline = time.monotonic() + self.args.io_timeout
            while not self.stop.is_set() and time.monotonic() < deadline:
                events = sel.select(timeout=0.25)
                if any(key.data == 'upstream' for key, _ in events):
                    return False
                if events:
                    return True
            return False
        finally:
            sel.close()

    def answer_fault(self, client, buf, headers, code):
        """Answer with CODE and a JSON error; the request body is read (and
        dropped) if the client sends it without waiting for 100 Continue."""
        if '100-continue' not in headers.get('expect', '').lower():
            framer = body_framer(headers, 'none')
            framer.feed(buf)
            client.settimeout(2.0)
            try:
                while not framer.done:
                    framer.feed(recv(client))
            except Closed:
                pass
        try:
            title = http.HTTPStatus(code).phrase
        except ValueError:
            title = 'Error'
        body = json.dumps({'error': {'code': code, 'title': title,
                                     'message': 'faultproxy: injected failure'}}).encode()
        head = ('HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n'
                'Content-Length: %d\r\nConnection: close\r\n\r\n' % (code, title, len(body)))
        try:
            client.sendall(head.encode('iso-8859-1') + body)
        except OSError:
            pass
        finish(client)

    def relay(self, client, upstream, head, headers, method, buf):
        """Forward one request (head already read) and its response, bytes
        unchanged. Returns (status, keep connection, leftover client bytes)."""
        upstream.sendall(head)
        req_body = body_framer(headers, 'none')
        used = req_body.feed(buf)
        if used:
            upstream.sendall(buf[:used])
        buf = buf[used:]
        resp_buf = b''
        resp_body = None
        resp_version = resp_conn = ''
        status = '?'
        sel = selectors.DefaultSelector()
        sel.register(upstream, selectors.EVENT_READ, 'upstream')
        if not req_body.done:
            sel.register(client, selectors.EVENT_READ, 'client')
        try:
            while True:
                events = sel.select(timeout=self.args.io_timeout)
                if not events:
                    raise Closed('timeout')
                if self.stop.is_set():
                    raise Closed('stopping')
                for key, _ in events:
                    if key.data == 'client':
                        data = recv(client)
                        used = req_body.feed(data)
                        if used:
                            upstream.sendall(data[:used])
                        buf += data[used:]
                        if req_body.done:
                            sel.unregister(client)
                        continue
                    try:
                        data = upstream.recv(CHUNK)
                    except OSError:
                        data = b''
                    if not data:
                        # upstream closed: fine only for a body that runs to EOF
                        if resp_body is not None and resp_body.mode == 'eof':
                            return status, False, buf
                        raise Closed('upstream closed mid-response')
                    client.sendall(data)
                    resp_buf += data
                    while True:
                        if resp_body is None:
                            end = resp_buf.find(b'\r\n\r\n')
                            if end < 0:
                                if len(resp_buf) > MAX_HEAD:
                                    raise Closed('response head too large')
                                break
                            first, rheaders = parse_head(resp_buf[:end + 4])
                            resp_buf = resp_buf[end + 4:]
                            fields = first.split(' ')
                            status = fields[1] if len(fields) > 1 else '?'
                            if status.startswith('1') and status != '101':
                                continue  # interim answer (100 Continue): already relayed
                            if method == 'HEAD' or status in ('204', '304'):
                                resp_body = BodyFramer('none')
                            else:
                                resp_body = body_framer(rheaders, 'eof')
                            resp_version = fields[0]
                            resp_conn = rheaders.get('connection', '').lower()
                        used = resp_body.feed(resp_buf)
                        resp_buf = resp_buf[used:]
                        break
                    if resp_body is not None and resp_body.done:
                        keep = (req_body.done and 'close' not in resp_conn
                                and resp_version != 'HTTP/1.0'
                                and 'close' not in headers.get('connection', '').lower())
                        return status, keep, buf
        finally:
            sel.close()


# ------------------------------------------------------------ control API
def control_server(port, faults):
    class Handler(http.server.BaseHTTPRequestHandler):
        def reply(self, code, obj):
            body = (json.dumps(obj, indent=1) + '\n').encode()
            self.send_response(code)
            self.send_header('Content-Type', 'application/json')
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self.reply(200, faults.state())

        def do_POST(self):
            length = int(self.headers.get('Content-Length') or 0)
            text = self.rfile.read(min(length, 4096)).decode('utf-8', 'replace') if length else ''
            path = self.path.strip('/')
            if path:
                text = path.replace('/', ' ') + '\n' + text
            try:
                faults.apply(text)
            except ValueError as err:
                self.reply(400, {'error': str(err)})
                return
            log('control: %s' % text.strip().replace('\n', '; '))
            self.reply(200, faults.state())

        do_PUT = do_POST

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(('127.0.0.1', port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={'poll_interval': 0.25},
                     daemon=True).start()
    return server


def main():
    global LOG_OUT, QUIET
    parser = argparse.ArgumentParser(
        description='HTTP-aware fault-injecting TCP proxy on 127.0.0.1',
        epilog=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--listen', type=int, required=True, help='port to listen on (127.0.0.1)')
    parser.add_argument('--upstream', type=int, required=True, help='port of the real service')
    parser.add_argument('--upstream-host', default='127.0.0.1', help='a loopback address')
    parser.add_argument('--control', type=int, help='port of the control endpoint (127.0.0.1)')
    parser.add_argument('--control-file', help='file whose commands are applied when it changes')
    parser.add_argument('--initial', default='pass', help='commands applied at start')
    parser.add_argument('--max-connections', type=int, default=64)
    parser.add_argument('--io-timeout', type=float, default=120.0)
    parser.add_argument('--lifetime', type=float, default=0, help='exit after this many seconds (0: never)')
    parser.add_argument('--pid-file')
    parser.add_argument('--log-file', help='default: stderr')
    parser.add_argument('--quiet', action='store_true')
    parser.add_argument('--tls-cert', help='serve HTTPS with this PEM certificate (chain)')
    parser.add_argument('--tls-key', help='the private key of --tls-cert')
    args = parser.parse_args()

    for name in ('listen', 'control'):
        port = getattr(args, name)
        if port is not None and not 1024 < port < 32768:
            parser.error('--%s %d: use a port in 1025..32767 (32768 and up is the '
                         'ephemeral range)' % (name, port))
    if not (args.upstream_host.startswith('127.') or args.upstream_host == 'localhost'):
        parser.error('--upstream-host must be a loopback address')
    if args.max_connections < 1:
        parser.error('--max-connections must be at least 1')

    if args.log_file:
        LOG_OUT = open(args.log_file, 'a', buffering=1)
    QUIET = args.quiet
    faults = Faults(args.control_file)
    try:
        faults.apply(args.initial)
    except ValueError as err:
        parser.error('--initial: %s' % err)
    if args.control_file:
        faults.poll_file()  # a file present at start is applied now

    proxy = Proxy(args, faults)
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error('--tls-cert and --tls-key go together')
    if args.tls_cert:
        proxy.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        proxy.tls.load_cert_chain(args.tls_cert, args.tls_key)

    def on_signal(signum, _frame):
        log('signal %d: stopping' % signum)
        proxy.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(('127.0.0.1', args.listen))
    listener.listen(64)
    control = control_server(args.control, faults) if args.control else None
    if args.pid_file:
        with open(args.pid_file, 'w') as f:
            f.write('%d\n' % os.getpid())
    log('listening on 127.0.0.1:%d -> %s:%d%s%s' % (
        args.listen, args.upstream_host, args.upstream,
        ', control http://127.0.0.1:%d/' % args.control if control else '',
        ', control file %s' % args.control_file if args.control_file else ''))
    try:
        proxy.serve(listener)
    finally:
        listener.close()
        if control:
            control.shutdown()
            control.server_close()
        if args.pid_file:
            try:
                os.unlink(args.pid_file)
            except OSError:
                pass
    log('stopped; counts %s' % json.dumps(faults.state()['counts']))
    return 0


if __name__ == '__main__':
    sys.exit(main())
