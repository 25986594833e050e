#!/usr/bin/python3
"""The tosca-parser side of bench/csar_validate.sh: build the CSARs, time the peer.

Two subcommands, both run by Debian's /usr/bin/python3:

  pack CORPUS OUT_DIR
      Finds every package under CORPUS (a directory that holds a TOSCA-Metadata entry,
      directory or file), zips each one (deflate, paths relative to the package
      directory) into OUT_DIR/NN_<name>.csar and writes OUT_DIR/index.tsv with the
      columns csar, package (path relative to CORPUS). Both tools time these files.

  time INDEX OUT_TSV [--repeats N] [--expect-under DIR]
      Parses each CSAR of INDEX the way Tacker's csar_utils.load_csar_data() does,
      ToscaTemplate(csar_path, None, True), N times (default 3) in this one warm
      interpreter, and writes OUT_TSV: csar, package, result (accepted|rejected),
      median_ms, the N times, and the first line of the error. A parse that raises
      is timed too. --expect-under makes the run fail unless toscaparser is imported
      from DIR (the overlay that csar_validate.sh puts first on PYTHONPATH).

Network: before toscaparser is imported, name resolution, socket connects and
urllib's urlopen are replaced by functions that raise at once, so a remote
`imports:` URL becomes a parse error without a packet being sent.
Scratch: tosca-parser extracts each CSAR into the temp directory and leaves it there;
`time` gives the parser a private temp directory (under $TMPDIR), empties it after
every package (outside the timed region) and removes it at the end.
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import zipfile


# ---------------------------------------------------------------- pack
def find_packages(corpus):
    found = []
    for dirpath, dirnames, _ in os.walk(corpus):
        dirnames.sort()
        if os.path.lexists(os.path.join(dirpath, "TOSCA-Metadata")):
            found.append(dirpath)
    return found


def zip_package(pkg_dir, csar_path):
    with zipfile.ZipFile(csar_path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for dirpath, dirnames, filenames in os.walk(pkg_dir):
            dirnames.sort()
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                z.write(path, os.path.relpath(path, pkg_dir))


def cmd_pack(args):
    corpus = os.path.abspath(args.corpus)
    if not os.path.isdir(corpus):
        sys.exit(f"tosca_parser_peer: no corpus at {corpus}")
    packages = find_packages(corpus)
    if not packages:
        sys.exit(f"tosca_parser_peer: no package (no TOSCA-Metadata) under {corpus}")
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "index.tsv"), "w") as index:
        for i, pkg in enumerate(packages, 1):
            csar = f"{i:02d}_{os.path.basename(pkg)}.csar"
            zip_package(pkg, os.path.join(args.out_dir, csar))
            index.write(f"{csar}\t{os.path.relpath(pkg, corpus)}\n")
    print(len(packages))


# ---------------------------------------------------------------- time
class NetworkDisabled(OSError):
    pass


def block_network():
    """Make every way out of this process fail at once, before any I/O."""
    import socket
    import urllib.error
    import urllib.request

    def refuse(*_args, **_kwargs):
        raise NetworkDisabled("network disabled by the benchmark")

    def refuse_url(url, *_args, **_kwargs):
        target = getattr(url, "full_url", url)
        raise urllib.error.URLError(f"network disabled by the benchmark ({target})")

    for name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "create_connection"):
        setattr(socket, name, refuse)
    socket.socket.connect = refuse
    socket.socket.connect_ex = refuse
    urllib.request.urlopen = refuse_url


def first_error_line(exc, csar_path):
    # ValidationError: 'The input "..." failed validation with the following error(s):'
    # and then one error per line; the first listed error is the informative one.
    lines = [ln.strip() for ln in str(exc).replace(csar_path, "<csar>").splitlines() if ln.strip()]
    if len(lines) > 1 and "failed validation" in lines[0]:
        lines = lines[1:]
    text = lines[0] if lines else ""
    return f"{type(exc).__name__}: {text}"[:240].replace("\t", " ")


def empty_dir(path):
    for name in os.listdir(path):
        full = os.path.join(path, name)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full, ignore_errors=True)
        else:
            os.unlink(full)


def cmd_time(args):
    block_network()
    scratch = tempfile.mkdtemp(prefix="tosca-parser-scratch-")
    os.environ["TMPDIR"] = scratch
    tempfile.tempdir = scratch
    try:
        run_peer(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_peer(args, scratch):
    import logging
    logging.disable(logging.CRITICAL)   # the parser logs each error it collects; not timed work

    t0 = time.perf_counter()
    import toscaparser
    from toscaparser.tosca_template import ToscaTemplate
    import_ms = (time.perf_counter() - t0) * 1e3
    module_dir = os.path.dirname(os.path.realpath(toscaparser.__file__))
    if args.expect_under:
        want = os.path.realpath(args.expect_under)
        if not module_dir.startswith(want + os.sep):
            sys.exit(f"tosca_parser_peer: toscaparser imported from {module_dir}, not from {want}")
    try:
        import importlib.metadata
        version = importlib.metadata.version("tosca-parser")
    except Exception:  # noqa: BLE001 - the version is informational only
        version = "unknown"
    print(f"tosca-parser {version} from {module_dir}; import {import_ms:.0f} ms", file=sys.stderr)

    csar_dir = os.path.dirname(os.path.abspath(args.index))
    with open(args.index) as f:
        jobs = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    with open(args.out_tsv, "w") as out:
        for csar, package in jobs:
            path = os.path.join(csar_dir, csar)
            times, error = [], None
            for _ in range(args.repeats):
                t = time.perf_counter()
                try:
                    ToscaTemplate(path, None, True)
                    ok = True
                except Exception as e:  # noqa: BLE001 - the parser raises many kinds
                    ok = False
                    err = e
                times.append((time.perf_counter() - t) * 1e3)
                if not ok and error is None:
                    error = first_error_line(err, path)
                empty_dir(scratch)
            result = "accepted" if error is None else "rejected"
            out.write("\t".join([csar, package, result, f"{statistics.median(times):.3f}",
                                 ",".join(f"{t:.1f}" for t in times), error or "-"]) + "\n")
            out.flush()


# ---------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="zip every package of the corpus into a .csar")
    p.add_argument("corpus")
    p.add_argument("out_dir")
    p.set_defaults(run=cmd_pack)
    t = sub.add_parser("time", help="time ToscaTemplate on each .csar of an index")
    t.add_argument("index")
    t.add_argument("out_tsv")
    t.add_argument("--repeats", type=int, default=3)
    t.add_argument("--expect-under", default="")
    t.set_defaults(run=cmd_time)
    args = ap.parse_args()
    if getattr(args, "repeats", 1) < 1:
        ap.error("--repeats must be at least 1")
    args.run(args)


if __name__ == "__main__":
    main()
