#!/usr/bin/env python3
"""Writes tests/golden/bad/<CODE>-<what>/: one failing package per diagnostic code.

Each fixture is a mutation of a minimal valid single-file VNFD (pkg/vnfd.yaml), a small
multi-file package, or an archive (package.csar) built here because it cannot be a folder:
zip-slip names, links, bombs, corrupt bytes. Expected output lives in expected.txt, written
by the golden test with UPDATE_GOLDEN=1 and reviewed by hand.
Usage: tools/make-fixtures.py            (from the repository root)
"""
import os
import shutil
import stat
import zipfile
import hashlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden", "bad")

BASE = """tosca_definitions_version: tosca_simple_yaml_1_2
imports:
  - etsi_nfv_sol001_common_types.yaml
  - etsi_nfv_sol001_vnfd_types.yaml
node_types:
  fx.VNF:
    derived_from: tosca.nodes.nfv.VNF
    interfaces:
      Vnflcm:
        type: tosca.interfaces.nfv.Vnflcm
topology_template:
  inputs:
    selected_flavour:
      type: string
      default: simple
  substitution_mappings:
    node_type: fx.VNF
    properties:
      flavour_id: simple
  node_templates:
    VNF:
      type: fx.VNF
      properties:
        descriptor_id: 0f0f0f0f-0000-4000-8000-000000000001
        descriptor_version: '1.0'
        provider: fixtures
        product_name: fixture
        software_version: '1.0'
        vnfm_info: [ '0:vnflow' ]
        flavour_id: simple
        flavour_description: fixture
    VDU1:
      type: tosca.nodes.nfv.Vdu.Compute
      properties:
        name: VDU1
        description: vdu
        vdu_profile:
          min_number_of_instances: 1
          max_number_of_instances: 2
      capabilities:
        virtual_compute:
          properties:
            virtual_memory:
              virtual_mem_size: 512 MB
            virtual_cpu:
              num_virtual_cpu: 1
"""

META = ("TOSCA-Meta-File-Version: 1.0\nCSAR-Version: 1.1\nCreated-By: fixtures\n"
        "Entry-Definitions: Definitions/vnfd.yaml\n")


def sub(text, old, new):
    assert old in text, old
    return text.replace(old, new, 1)


def add_nodes(extra):
    return BASE + extra


def write(name, files=None, options=None, archive=None):
    d = os.path.join(ROOT, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    if files is not None:
        for path, content in files.items():
            p = os.path.join(d, "pkg", path)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            mode = "wb" if isinstance(content, bytes) else "w"
            with open(p, mode) as f:
                f.write(content)
    if archive is not None:
        archive(os.path.join(d, "package.csar"))
    if options:
        with open(os.path.join(d, "options.txt"), "w") as f:
            for k, v in options.items():
                f.write(f"{k}={v}\n")


def one(name, text, **kw):
    write(name, {"vnfd.yaml": text}, **kw)


def zip_with(entries, fixups=None):
    def make(path):
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            for name, data, *rest in entries:
                info = zipfile.ZipInfo(name, date_time=(2026, 11, 22, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                if rest and rest[0] == "symlink":
                    info.create_system = 3
                    info.external_attr = (stat.S_IFLNK | 0o777) << 16
                if rest and rest[0] == "encrypted":
                    info.flag_bits |= 0x1
                z.writestr(info, data)
        if fixups:
            fixups(path)
    return make


def main():
    os.makedirs(ROOT, exist_ok=True)
    pkg = [("TOSCA-Metadata/TOSCA.meta", META), ("Definitions/vnfd.yaml", BASE)]

    # --- package and archive ----------------------------------------------------------
    write("C0001-no-such-package")
    def truncate(path):
        data = open(path, "rb").read()
        open(path, "wb").write(data[: len(data) // 2])
    write("C0002-truncated-archive", archive=zip_with(pkg, truncate))
    write("C0003-zip-slip", archive=zip_with(pkg + [("../../evil.yaml", "x: 1\n")]))
    write("C0004-link-leaves-package",
          archive=zip_with(pkg + [("Definitions/passwd.yaml", "../../../etc/passwd", "symlink")]))
    write("C0005-too-many-entries",
          archive=zip_with(pkg + [(f"Files/f{i}", "x") for i in range(12)]),
          options={"max_entries": 10})
    write("C0006-package-too-large", archive=zip_with(pkg), options={"max_total_bytes": 100})
    write("C0007-zip-bomb", archive=zip_with(pkg + [("Files/zeros.bin", b"\0" * (8 << 20))]))
    write("C0008-file-too-large", {"vnfd.yaml": BASE}, options={"max_text_bytes": 200})
    write("C0009-duplicate-entry",
          archive=zip_with(pkg + [("Definitions/vnfd.yaml", BASE)]))
    write("C0010-meta-without-entry",
          {"TOSCA-Metadata/TOSCA.meta": "TOSCA-Meta-File-Version: 1.0\nCSAR-Version: 1.1\n"
                                        "Created-By: fixtures\n",
           "Definitions/vnfd.yaml": BASE})
    write("C0011-meta-unknown-key",
          {"TOSCA-Metadata/TOSCA.meta": META + "Entry-Defintions: Definitions/vnfd.yaml\n",
           "Definitions/vnfd.yaml": BASE})
    write("C0012-entry-definitions-missing",
          {"TOSCA-Metadata/TOSCA.meta": sub(META, "vnfd.yaml", "main.yaml"),
           "Definitions/vnfd.yaml": BASE})
    write("C0013-two-root-templates", {"a.yaml": BASE, "b.yaml": BASE})
    digest = hashlib.sha256(BASE.encode()).hexdigest()
    mf_head = ("metadata:\n  vnf_provider_id: fixtures\n  vnf_product_name: fixture\n"
               "  vnf_release_date_time: 2026-11-22T00:00:00+00:00\n  vnf_package_version: '1.0'\n\n")
    write("C0014-manifest-malformed",
          {"vnfd.yaml": BASE, "vnfd.mf": mf_head + "Source vnfd.yaml\n"})
    write("C0015-listed-file-missing",
          {"vnfd.yaml": BASE,
           "vnfd.mf": mf_head + f"Source: vnfd.yaml\nAlgorithm: SHA-256\nHash: {digest}\n\n"
                                f"Source: Scripts/install.sh\nAlgorithm: SHA-256\nHash: {digest}\n"})
    write("C0016-hash-mismatch",
          {"vnfd.yaml": BASE,
           "vnfd.mf": mf_head + f"Source: vnfd.yaml\nAlgorithm: SHA-256\nHash: {'0' * 64}\n"})
    write("C0017-unsupported-algorithm",
          {"vnfd.yaml": BASE,
           "vnfd.mf": mf_head + f"Source: vnfd.yaml\nAlgorithm: MD5\nHash: {'0' * 32}\n"})
    write("C0018-url-not-verifiable",
          {"vnfd.yaml": BASE,
           "vnfd.mf": mf_head + f"Source: vnfd.yaml\nAlgorithm: SHA-256\nHash: {digest}\n\n"
                                f"Source: https://example.invalid/image.qcow2\nAlgorithm: SHA-256\nHash: {digest}\n"})
    write("C0019-manifest-name",
          {"vnfd.yaml": BASE,
           "other.mf": mf_head + f"Source: vnfd.yaml\nAlgorithm: SHA-256\nHash: {digest}\n"})
    write("C0020-not-utf8", {"vnfd.yaml": BASE.encode() + b"description: caf\xe9\n"})
    write("C0021-meta-is-a-file",
          {"TOSCA-Metadata": "../../other/TOSCA-Metadata/", "Definitions/vnfd.yaml": BASE})
    def mark_encrypted(path):
        # zipfile clears flag bits on write; set "encrypted" (bit 0) in every local and
        # central directory header afterwards.
        data = bytearray(open(path, "rb").read())
        for sig, off in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
            i = data.find(sig)
            while i >= 0:
                data[i + off] |= 1
                i = data.find(sig, i + 4)
        open(path, "wb").write(bytes(data))
    write("C0023-encrypted-entry", archive=zip_with(pkg, mark_encrypted))
    write("C0024-file-not-in-manifest",
          {"vnfd.yaml": BASE, "Scripts/extra.sh": "#!/bin/sh\n",
           "vnfd.mf": mf_head + f"Source: vnfd.yaml\nAlgorithm: SHA-256\nHash: {digest}\n"})

    # --- YAML -------------------------------------------------------------------------
    one("T0001-yaml-syntax", sub(BASE, "    VDU1:\n", "    VDU1: [\n"))
    one("T0003-too-deep", BASE + "dsl_definitions:\n  deep: " + "[" * 12 + "]" * 12 + "\n",
        options={"max_yaml_depth": 8})
    bomb = "dsl_definitions:\n  a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    prev = "a"
    for c in "bcdefg":
        bomb += f"  {c}: &{c} [" + ", ".join([f"*{prev}"] * 10) + "]\n"
        prev = c
    one("T0004-alias-bomb", BASE + bomb, options={"max_yaml_nodes": 100000})
    one("T0005-duplicate-key", sub(BASE, "        name: VDU1\n", "        name: VDU1\n        name: VDU2\n"))

    # --- templates, imports -----------------------------------------------------------
    one("T0010-unknown-tosca-version", sub(BASE, "tosca_simple_yaml_1_2", "tosca_simple_yaml_9_9"))
    one("T0011-import-not-found", sub(BASE, "  - etsi_nfv_sol001_vnfd_types.yaml\n",
                                      "  - etsi_nfv_sol001_vnfd_types.yaml\n  - vendor_types.yaml\n"))
    one("T0012-import-leaves-package", sub(BASE, "  - etsi_nfv_sol001_vnfd_types.yaml\n",
                                           "  - etsi_nfv_sol001_vnfd_types.yaml\n  - ../../outside.yaml\n"))
    chain = {"vnfd.yaml": sub(BASE, "  - etsi_nfv_sol001_vnfd_types.yaml\n",
                              "  - etsi_nfv_sol001_vnfd_types.yaml\n  - d/a1.yaml\n")}
    for i in range(1, 5):
        chain[f"d/a{i}.yaml"] = ("tosca_definitions_version: tosca_simple_yaml_1_2\n"
                                 f"imports:\n  - a{i + 1}.yaml\n")
    chain["d/a5.yaml"] = "tosca_definitions_version: tosca_simple_yaml_1_2\n"
    write("T0013-imports-too-deep", chain, options={"max_import_depth": 3})
    one("T0014-remote-import", sub(BASE, "  - etsi_nfv_sol001_vnfd_types.yaml\n",
                                   "  - etsi_nfv_sol001_vnfd_types.yaml\n  - https://example.invalid/types.yaml\n"))
    one("T0020-unknown-keyname", sub(BASE, "node_types:", "node_type:\n  x: {}\nnode_types:"))
    one("T0021-wrong-shape", sub(BASE, "        vnfm_info: [ '0:vnflow' ]\n", "        vnfm_info: [ '0:vnflow' ]\n")
        + "  groups:\n    g: [ not, a, map ]\n  policies: { not: a list }\n")

    # --- types ------------------------------------------------------------------------
    one("T0030-unknown-node-type", sub(BASE, "type: tosca.nodes.nfv.Vdu.Compute",
                                       "type: tosca.nodes.nfv.Vdu.Compte"))
    one("T0031-derived-from-cycle", sub(BASE, "node_types:\n",
                                        "node_types:\n  fx.A:\n    derived_from: fx.B\n"
                                        "  fx.B:\n    derived_from: fx.A\n"))
    write("T0032-type-defined-twice",
          {"vnfd.yaml": sub(BASE, "  - etsi_nfv_sol001_vnfd_types.yaml\n",
                            "  - etsi_nfv_sol001_vnfd_types.yaml\n  - lib/more_types.yaml\n"),
           "lib/more_types.yaml": "tosca_definitions_version: tosca_simple_yaml_1_2\nnode_types:\n"
                              "  fx.VNF:\n    derived_from: tosca.nodes.Root\n"})
    one("T0033-not-a-node-type", sub(BASE, "type: tosca.nodes.nfv.Vdu.Compute",
                                     "type: tosca.datatypes.nfv.VduProfile"))

    # --- values -----------------------------------------------------------------------
    one("T0040-unknown-property", sub(BASE, "        name: VDU1\n", "        name: VDU1\n        flavor: m1.small\n"))
    one("T0041-required-property", sub(BASE, "        description: vdu\n", ""))
    one("T0042-type-mismatch", sub(BASE, "max_number_of_instances: 2", "max_number_of_instances: two"))
    one("T0043-constraint-violated", sub(BASE, "max_number_of_instances: 2", "max_number_of_instances: -2"))
    one("T0045-bad-constraint",
        sub(sub(BASE, "    interfaces:\n      Vnflcm:", "    properties:\n      tier:\n        type: integer\n"
                "        constraints: [ { approximately: 3 } ]\n        default: 3\n    interfaces:\n      Vnflcm:"),
            "        flavour_description: fixture\n", "        flavour_description: fixture\n        tier: 3\n"))
    one("T0050-unknown-input", sub(BASE, "        product_name: fixture\n",
                                   "        product_name: { get_input: product }\n"))
    one("T0051-bad-function", sub(BASE, "        product_name: fixture\n",
                                  "        product_name: { get_property: product }\n"))

    # --- node template parts ----------------------------------------------------------
    cp = ("    CP1:\n      type: tosca.nodes.nfv.VduCp\n      properties:\n        layer_protocols: [ ipv4 ]\n"
          "        order: 0\n      requirements:\n        - virtual_binding: VDU1\n")
    one("T0060-unknown-requirement", add_nodes(cp.replace("virtual_binding: VDU1", "virtual_bind: VDU1")))
    one("T0061-requirement-target-missing", add_nodes(cp.replace("virtual_binding: VDU1", "virtual_binding: VDU9")))
    one("T0062-unknown-capability", sub(BASE, "virtual_compute:\n", "virtual_computer:\n"))
    ops = ("      interfaces:\n        Vnflcm:\n          instantiate_end:\n            implementation: setup\n"
           "      artifacts:\n        setup:\n          type: tosca.artifacts.Implementation.Bash\n"
           "          file: Scripts/setup.sh\n")
    write("T0063-unknown-operation",
          {"vnfd.yaml": sub(BASE, "        flavour_description: fixture\n",
                            "        flavour_description: fixture\n" + ops.replace("instantiate_end", "instantiate_ending")),
           "Scripts/setup.sh": "#!/bin/sh\n"})
    one("T0064-implementation-missing",
        sub(BASE, "        flavour_description: fixture\n",
            "        flavour_description: fixture\n      interfaces:\n        Vnflcm:\n          instantiate_end:\n"
            "            implementation: Scripts/missing.sh\n"))
    one("T0065-artifact-file-missing",
        sub(BASE, "        flavour_description: fixture\n", "        flavour_description: fixture\n" + ops))
    write("T0066-unknown-artifact-type",
          {"vnfd.yaml": sub(BASE, "        flavour_description: fixture\n",
                            "        flavour_description: fixture\n" + ops.replace("Implementation.Bash", "Implementation.Bsh")),
           "Scripts/setup.sh": "#!/bin/sh\n"})

    # --- policies, groups, VNF --------------------------------------------------------
    aspects = ("  policies:\n    - scaling_aspects:\n        type: tosca.policies.nfv.ScalingAspects\n"
               "        properties:\n          aspects:\n            worker:\n              name: worker\n"
               "              description: worker\n              max_scale_level: 1\n"
               "              step_deltas: [ delta_1 ]\n")
    deltas = ("    - VDU1_deltas:\n        type: tosca.policies.nfv.VduScalingAspectDeltas\n"
              "        properties:\n          aspect: worker\n          deltas:\n            delta_1:\n"
              "              number_of_instances: 1\n        targets: [ VDU1 ]\n")
    one("T0070-policy-target-missing", BASE + aspects + deltas.replace("[ VDU1 ]", "[ VDU2 ]"))
    one("T0071-unknown-aspect", BASE + aspects + deltas.replace("aspect: worker", "aspect: workers"))
    one("T0080-no-vnf", "tosca_definitions_version: tosca_simple_yaml_1_2\ntopology_template:\n"
                        "  node_templates:\n    server:\n      type: tosca.nodes.Compute\n")
    no_sm = BASE.split("  substitution_mappings:")[0] + "  node_templates:" + BASE.split("  node_templates:")[1]
    one("T0081-no-flavour", no_sm)
    write("T0082-flavour-twice",
          {"vnfd.yaml": sub(BASE, "  - etsi_nfv_sol001_vnfd_types.yaml\n",
                            "  - etsi_nfv_sol001_vnfd_types.yaml\n  - lib/df_again.yaml\n"),
           "lib/df_again.yaml": "tosca_definitions_version: tosca_simple_yaml_1_2\ntopology_template:\n"
                            "  substitution_mappings:\n    node_type: fx.VNF\n    properties:\n"
                            "      flavour_id: simple\n"})
    one("T0083-bad-substitution", sub(BASE, "    node_type: fx.VNF\n", "    node_type: fx.VNFF\n"))
    one("T0084-substitution-unknown-node",
        sub(BASE, "      flavour_id: simple\n  node_templates:",
            "      flavour_id: simple\n    requirements:\n      virtual_link_external: [ CP9, virtual_link ]\n  node_templates:"))
    group = ("  groups:\n    anti_affinity:\n      type: tosca.groups.nfv.PlacementGroup\n"
             "      properties:\n        description: spread\n      members: [ VDU1, VDU2 ]\n")
    one("T0090-group-member-missing", BASE + group)
    one("T0091-group-property-missing", BASE + group.replace("      properties:\n        description: spread\n", "")
        .replace("[ VDU1, VDU2 ]", "[ VDU1 ]"))


if __name__ == "__main__":
    main()
