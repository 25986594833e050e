#!/usr/bin/python3
"""Serve Keystone's public v3 WSGI application with waitress (used by start.sh).

usage: keystone-wsgi.py --port PORT --config KEYSTONE_CONF [--host 127.0.0.1]
                        [--access-log FILE]

One worker thread on purpose: Keystone on SQLite with several threads fails
with "SQLite objects created in a thread can only be used in that same
thread" and "database is locked" errors.
"""
import argparse
import os
import sys
import time


def access_logged(app, path):
    """Wrap a WSGI app so that each request adds one line to PATH."""
    out = open(path, 'a', buffering=1)

    def wrapper(environ, start_response):
        began = time.monotonic()
        seen = []

        def recording_start_response(status, headers, exc_info=None):
            seen.append(status.split(' ', 1)[0])
            return start_response(status, headers, exc_info)

        try:
            return app(environ, recording_start_response)
        finally:
            out.write('%s %s %s %s %.3fs\n' % (
                time.strftime('%Y-%m-%dT%H:%M:%S'), environ.get('REQUEST_METHOD'),
                environ.get('PATH_INFO'), seen[0] if seen else '-',
                time.monotonic() - began))
    return wrapper


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument('--port', type=int, required=True)
    parser.add_argument('--config', required=True)
    parser.add_argument('--access-log')
    args = parser.parse_args()

    # Keystone finds its configuration through this variable, and its
    # oslo.config would otherwise try to parse our command line.
    os.environ['OS_KEYSTONE_CONFIG_FILES'] = args.config
    del sys.argv[1:]

    from keystone.server import wsgi as keystone_wsgi
    import waitress

    app = keystone_wsgi.initialize_public_application()
    if args.access_log:
        app = access_logged(app, args.access_log)
    waitress.serve(app, host=args.host, port=args.port, threads=1,
                   ident='keystone', channel_timeout=120)


if __name__ == '__main__':
    main()
