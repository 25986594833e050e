#!/usr/bin/python3
"""The variant set of bench/csar_validate.sh: the corpus CSARs with their SOL001 copies
re-serialised.

  sol001_variants.py INDEX IN_DIR OUT_DIR

For every CSAR of INDEX (the index.tsv that tosca_parser_peer.py pack wrote in IN_DIR),
writes OUT_DIR/<same name>.csar and OUT_DIR/index.tsv. Each package's own copies of
the ETSI SOL001 type files (etsi_nfv_sol001_*_types.yaml) are re-serialised from their
YAML event stream with another layout and the same meaning: 4-space indentation, block
style everywhere (flow collections written as blocks), the other quote character for
every quoted scalar, a comment line before every top-level entry and every key, and
CRLF line endings. Every other member is copied as it is. Each rewritten file is
checked to load (yaml.safe_load) to the same data as the original; the run fails if one
does not. Prints the number of files rewritten.

Needs Debian's /usr/bin/python3 with python3-yaml (PyYAML), a dependency of
python3-tosca-parser.
"""
import os
import re
import sys
import zipfile

import yaml

SOL001_COPY = re.compile(r"(^|/)etsi_nfv_sol001_[a-z_]*types\.yaml$")
KEY_LINE = re.compile(r"^( *)(- +)*[A-Za-z_][A-Za-z0-9_.-]*:( |$)")
BLOCK_HEADER = re.compile(r"[|>][-+]?$")


def reserialise(text):
    events = []
    for e in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(e, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            e.flow_style = False
        elif isinstance(e, yaml.ScalarEvent) and e.style in ("'", '"'):
            e.style = '"' if e.style == "'" else "'"
        events.append(e)
    out = yaml.emit(events, indent=4, width=1 << 20, allow_unicode=True)
    lines = []
    block_indent = None  # inside a block scalar's content: the indent of its header line
    for n, line in enumerate(out.split("\n")):
        indent = len(line) - len(line.lstrip(" "))
        if block_indent is not None:
            if line.strip() == "" or indent > block_indent:
                lines.append(line)
                continue
            block_indent = None
        if KEY_LINE.match(line):
            lines.append(" " * indent + "# re-serialised for the bench, line %d" % n)
        lines.append(line)
        if BLOCK_HEADER.search(line.rstrip()):
            block_indent = indent
    return "\r\n".join(lines)


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: sol001_variants.py INDEX IN_DIR OUT_DIR")
    index, in_dir, out_dir = sys.argv[1:]
    os.makedirs(out_dir, exist_ok=True)
    rewritten = 0
    with open(index) as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    for row in rows:
        csar = row[0]
        with zipfile.ZipFile(os.path.join(in_dir, csar)) as src, \
                zipfile.ZipFile(os.path.join(out_dir, csar), "w",
                                compression=zipfile.ZIP_DEFLATED) as dst:
            for info in src.infolist():
                data = src.read(info)
                if SOL001_COPY.search(info.filename):
                    text = data.decode("utf-8")
                    variant = reserialise(text)
                    if yaml.safe_load(variant) != yaml.safe_load(text):
                        sys.exit("sol001_variants: %s!%s: the variant does not load to the same "
                                 "data" % (csar, info.filename))
                    if variant == text:
                        sys.exit("sol001_variants: %s!%s: the variant is the same text"
                                 % (csar, info.filename))
                    data = variant.encode("utf-8")
                    rewritten += 1
                dst.writestr(info, data)
    with open(os.path.join(out_dir, "index.tsv"), "w") as f:
        for row in rows:
            f.write("\t".join(row) + "\n")
    print(rewritten)


if __name__ == "__main__":
    main()
