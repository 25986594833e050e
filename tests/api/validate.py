# validate.py SCHEMA_FILE JSON_FILE: checks a response body against one of ETSI's
# conformance-test JSON schemas (../shared/etsi-schemas) with Debian's python3-jsonschema.
# Exit 0 when valid; 1 with the first error's path and message; 2 when not JSON.
import json
import sys

import jsonschema

schema_file, body_file = sys.argv[1], sys.argv[2]
# ETSI's VnfPackageChangeNotification schema is written in cp1252 (a typographic quote in a
# description), the others in UTF-8.
with open(schema_file, "rb") as f:
    raw = f.read()
try:
    schema = json.loads(raw.decode("utf-8"))
except UnicodeDecodeError:
    schema = json.loads(raw.decode("cp1252"))
try:
    with open(body_file, encoding="utf-8") as f:
        body = json.load(f)
except ValueError as e:
    print(f"{body_file}: not JSON: {e}")
    sys.exit(2)
cls = jsonschema.validators.validator_for(schema)
errors = sorted(cls(schema, format_checker=jsonschema.FormatChecker()).iter_errors(body),
                key=lambda e: list(e.path))
if errors:
    e = errors[0]
    path = "/".join(str(p) for p in e.path) or "(top)"
    print(f"{body_file}: {len(errors)} schema error(s); first at {path}: {e.message[:300]}")
    sys.exit(1)
