// Loader behaviour on small in-memory packages.
#include "tosca/internal/loader.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include <catch2/catch.hpp>

#include "tosca/internal/document.h"
#include "tosca/internal/meta.h"
#include "tosca/internal/source.h"
#include "tosca/tosca.h"

namespace {

using Files = std::map<std::string, std::string>;

const char* kMeta =
    "TOSCA-Meta-File-Version: 1.0\n"
    "CSAR-Version: 1.1\n"
    "Created-By: vnflow tests\n"
    "Entry-Definitions: Definitions/top.yaml\n";

const char* kTop = R"(tosca_definitions_version: tosca_simple_yaml_1_2
imports:
  - etsi_nfv_sol001_common_types.yaml
  - etsi_nfv_sol001_vnfd_types.yaml
  - types.yaml
  - df_simple.yaml
topology_template:
  inputs:
    selected_flavour:
      type: string
  node_templates:
    VNF:
      type: example.VNF
      properties:
        flavour_id: { get_input: selected_flavour }
        descriptor_id: 11111111-2222-3333-4444-555555555555
        descriptor_version: '1.0'
        provider: Example
        product_name: Example VNF
        software_version: '1.0'
        vnfm_info: [ '0:vnflow' ]
)";

const char* kTypes = R"(tosca_definitions_version: tosca_simple_yaml_1_2
imports:
  - etsi_nfv_sol001_common_types.yaml
  - etsi_nfv_sol001_vnfd_types.yaml
node_types:
  example.VNF:
    derived_from: tosca.nodes.nfv.VNF
    properties:
      flavour_description:
        type: string
        default: ""
    interfaces:
      Vnflcm:
        type: tosca.interfaces.nfv.Vnflcm
)";

const char* kDf = R"(tosca_definitions_version: tosca_simple_yaml_1_2
imports:
  - etsi_nfv_sol001_common_types.yaml
  - etsi_nfv_sol001_vnfd_types.yaml
  - types.yaml
topology_template:
  substitution_mappings:
    node_type: example.VNF
    properties:
      flavour_id: simple
    requirements:
      virtual_link_external: [ CP1, virtual_link ]
  node_templates:
    VNF:
      type: example.VNF
      properties:
        flavour_description: A simple flavour
      interfaces:
        Vnflcm:
          instantiate_end:
            implementation: setup
          heal_end: []
      artifacts:
        setup:
          type: tosca.artifacts.Implementation.Bash
          file: ../Scripts/setup.sh
    VDU1:
      type: tosca.nodes.nfv.Vdu.Compute
      properties:
        name: VDU1
        description: worker
        vdu_profile:
          min_number_of_instances: 1
          max_number_of_instances: 3
      capabilities:
        virtual_compute:
          properties:
            virtual_memory:
              virtual_mem_size: 512 MB
            virtual_cpu:
              num_virtual_cpu: 1
    CP1:
      type: tosca.nodes.nfv.VduCp
      properties:
        layer_protocols: [ ipv4 ]
        order: 0
      requirements:
        - virtual_binding: VDU1
  policies:
    - scaling_aspects:
        type: tosca.policies.nfv.ScalingAspects
        properties:
          aspects:
            worker:
              name: worker
              description: worker aspect
              max_scale_level: 2
              step_deltas: [ delta_1 ]
    - VDU1_scaling_aspect_deltas:
        type: tosca.policies.nfv.VduScalingAspectDeltas
        properties:
          aspect: worker
          deltas:
            delta_1:
              number_of_instances: 1
        targets: [ VDU1 ]
    - instantiation_levels:
        type: tosca.policies.nfv.InstantiationLevels
        properties:
          levels:
            instantiation_level_1:
              description: smallest
              scale_info:
                worker:
                  scale_level: 0
          default_level: instantiation_level_1
)";

Files good_package() {
  return {{"TOSCA-Metadata/TOSCA.meta", kMeta},
          {"Definitions/top.yaml", kTop},
          {"Definitions/types.yaml", kTypes},
          {"Definitions/df_simple.yaml", kDf},
          {"Scripts/setup.sh", "#!/bin/sh\necho ok\n"}};
}

struct Loaded {
  std::shared_ptr<const tosca::Package> pkg;
  base::Diagnostics diags;
  std::string text() const {
    std::string out;
    for (const auto& d : diags.sorted())
      out += base::to_string(d) + "\n";
    return out;
  }
  bool has(const std::string& code) const {
    for (const auto& d : diags.items()) {
      if (d.code == code)
        return true;
    }
    return false;
  }
};

Loaded load(Files files) {
  Loaded l;
  l.pkg = tosca::internal::load_from_source(
      tosca::internal::open_memory("t.csar", std::move(files)), tosca::LoadOptions{}, l.diags);
  return l;
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  auto pos = s.find(from);
  REQUIRE(pos != std::string::npos);
  return s.replace(pos, from.size(), to);
}

}  // namespace

TEST_CASE("a well-formed package loads without findings", "[tosca][loader]") {
  Loaded l = load(good_package());
  INFO(l.text());
  REQUIRE(l.pkg != nullptr);
  CHECK(l.diags.empty());
  CHECK(l.pkg->vnf.product_name == "Example VNF");
  CHECK(l.pkg->vnf.provider == "Example");
  REQUIRE(l.pkg->flavours.size() == 1);
  const tosca::Flavour& f = l.pkg->flavours[0];
  CHECK(f.id == "simple");
  CHECK(f.description == "A simple flavour");
  REQUIRE(f.vdus.size() == 1);
  CHECK(f.vdus[0].max_instances == 3);
  REQUIRE(f.cps.size() == 1);
  CHECK(f.cps[0].virtual_binding == "VDU1");
  CHECK(f.cps[0].external_link == "virtual_link_external");
  REQUIRE(f.aspects.size() == 1);
  CHECK(f.aspects[0].vdu_deltas.at("VDU1").at("delta_1") == 1);
  CHECK(f.default_level == "instantiation_level_1");
  REQUIRE(f.lcm_operations.size() == 2);
  CHECK(f.lcm_operations[0].name == "instantiate_end");
  REQUIRE(f.lcm_operations[0].implementation.has_value());
  REQUIRE(f.lcm_operations[0].implementation->primary_artifact.has_value());
  CHECK(f.lcm_operations[0].implementation->primary_artifact->path == "Scripts/setup.sh");
  CHECK(f.lcm_operations[0].implementation->primary_artifact->present);
  CHECK_FALSE(f.lcm_operations[1].implementation.has_value());
  // merged VNF properties: top-level node + flavour node + flavour_id
  bool saw_descriptor = false, saw_flavour = false;
  for (const auto& [k, v] : f.vnf_properties) {
    if (k == "descriptor_id")
      saw_descriptor = v.scalar() == "11111111-2222-3333-4444-555555555555";
    if (k == "flavour_id")
      saw_flavour = v.scalar() == "simple";
  }
  CHECK(saw_descriptor);
  CHECK(saw_flavour);
}

TEST_CASE("every problem of a package is reported in one run, located", "[tosca][loader]") {
  Files f = good_package();
  f["Definitions/df_simple.yaml"] =
      replace(replace(f["Definitions/df_simple.yaml"], "type: tosca.nodes.nfv.VduCp",
                      "type: tosca.nodes.nfv.VduCpp"),
              "max_number_of_instances: 3", "max_number_of_instances: three");
  Loaded l = load(f);
  INFO(l.text());
  CHECK(l.has("T0030"));
  CHECK(l.has("T0042"));
  CHECK(l.text().find("t.csar!Definitions/df_simple.yaml:") != std::string::npos);
  CHECK(l.text().find("did you mean \"tosca.nodes.nfv.VduCp\"") != std::string::npos);
}

TEST_CASE("a missing artifact file is an error naming the file", "[tosca][loader]") {
  Files f = good_package();
  f.erase("Scripts/setup.sh");
  Loaded l = load(f);
  CHECK(l.has("T0065"));
  CHECK(l.text().find("\"../Scripts/setup.sh\" is missing") != std::string::npos);
}

TEST_CASE("get_input must name a declared input", "[tosca][loader]") {
  Files f = good_package();
  f["Definitions/top.yaml"] = replace(f["Definitions/top.yaml"], "get_input: selected_flavour",
                                      "get_input: selected_flavor");
  Loaded l = load(f);
  CHECK(l.has("T0050"));
  CHECK(l.text().find("did you mean \"selected_flavour\"") != std::string::npos);
}

TEST_CASE("constraints on property values are enforced", "[tosca][loader]") {
  Files f = good_package();
  // SOL001 VduCp layer_protocols entries must be one of the listed protocols.
  f["Definitions/df_simple.yaml"] = replace(
      f["Definitions/df_simple.yaml"], "layer_protocols: [ ipv4 ]", "layer_protocols: [ ipx ]");
  Loaded l = load(f);
  INFO(l.text());
  CHECK(l.has("T0043"));
}

TEST_CASE("scaling deltas must name a declared aspect", "[tosca][loader][sol001]") {
  Files f = good_package();
  f["Definitions/df_simple.yaml"] =
      replace(f["Definitions/df_simple.yaml"], "aspect: worker", "aspect: workers");
  Loaded l = load(f);
  CHECK(l.has("T0071"));
}

TEST_CASE("Vnflcm operations outside the interface are rejected", "[tosca][loader]") {
  Files f = good_package();
  f["Definitions/df_simple.yaml"] =
      replace(f["Definitions/df_simple.yaml"], "heal_end: []", "heal_ending: []");
  Loaded l = load(f);
  CHECK(l.has("T0063"));
  CHECK(l.text().find("did you mean \"heal_end\"") != std::string::npos);
}

TEST_CASE("TOSCA.meta digests are verified", "[tosca][meta]") {
  Files f = good_package();
  std::string good = base::digest_hex(base::DigestAlgorithm::kSha256, f["Scripts/setup.sh"]);
  f["TOSCA-Metadata/TOSCA.meta"] = std::string(kMeta) +
                                   "\nName: Scripts/setup.sh\nContent-Type: text/x-sh\n"
                                   "Algorithm: SHA-256\nHash: " +
                                   good + "\n";
  CHECK_FALSE(load(f).diags.has_errors());
  f["Scripts/setup.sh"] += "# tampered\n";
  Loaded l = load(f);
  CHECK(l.has("C0016"));
  CHECK(l.text().find("computed: ") != std::string::npos);
}

TEST_CASE("a manifest's entries are verified and must cover the package", "[tosca][meta]") {
  Files f = good_package();
  f["TOSCA-Metadata/TOSCA.meta"] = std::string(kMeta) + "ETSI-Entry-Manifest: example.mf\n";
  std::string mf =
      "metadata:\n  vnf_provider_id: Example\n  vnf_product_name: Example VNF\n"
      "  vnf_release_date_time: 2026-11-22T10:00:00+00:00\n  vnf_package_version: '1.0'\n\n";
  for (const auto& [path, content] : good_package()) {
    if (path.rfind("TOSCA-Metadata", 0) == 0 || path == "Scripts/setup.sh")
      continue;
    mf += "Source: " + path + "\nAlgorithm: SHA-512\nHash: " +
          base::digest_hex(base::DigestAlgorithm::kSha512, content) + "\n\n";
  }
  f["example.mf"] = mf;
  Loaded l = load(f);
  INFO(l.text());
  CHECK_FALSE(l.diags.has_errors());
  CHECK(l.has("C0024"));  // Scripts/setup.sh is not listed
  f["example.mf"] +=
      "Source: Files/none.bin\nAlgorithm: SHA-256\nHash: " + std::string(64, 'a') + "\n";
  CHECK(load(f).has("C0015"));
}

TEST_CASE("imports never leave the package root", "[tosca][hostile]") {
  Files f = good_package();
  f["Definitions/top.yaml"] = replace(f["Definitions/top.yaml"], "  - types.yaml\n",
                                      "  - ../../etc/passwd.yaml\n  - types.yaml\n");
  Loaded l = load(f);
  CHECK(l.has("T0012"));
}

TEST_CASE("a remote import is resolved from the catalog or refused", "[tosca][loader]") {
  Files f = good_package();
  f["Definitions/top.yaml"] = replace(
      f["Definitions/top.yaml"], "  - etsi_nfv_sol001_common_types.yaml\n",
      "  - https://forge.etsi.org/rep/nfv/SOL001/raw/v2.6.1/etsi_nfv_sol001_common_types.yaml\n");
  CHECK_FALSE(load(f).diags.has_errors());
  f["Definitions/top.yaml"] =
      replace(f["Definitions/top.yaml"], "https://forge.etsi.org/rep/nfv/SOL001/raw/v2.6.1/",
              "https://example.invalid/");
  CHECK(load(f).has("T0014"));
}

TEST_CASE("a package without TOSCA-Metadata needs exactly one root YAML", "[tosca][meta]") {
  Files f = {{"a.yaml", "tosca_definitions_version: tosca_simple_yaml_1_2\n"},
             {"b.yaml", "tosca_definitions_version: tosca_simple_yaml_1_2\n"}};
  CHECK(load(f).has("C0013"));
}

TEST_CASE("TOSCA.meta is read block by block", "[tosca][meta]") {
  base::Diagnostics diags;
  auto meta = tosca::internal::parse_tosca_meta(
      "TOSCA-Meta-File-Version: 1.0\nCSAR-Version: 1.1\nCreated-by: X\n"
      "Entry-Definitions: Definitions/a.yaml\nETSI-Entry-Manifest: a.mf\n\n"
      "Name: Files/x.img\nContent-type: application/x-iso9066-image\n\n"
      "Name: Scripts/a.sh\nContent-Type: text/x-sh\nAlgorithm: SHA-256\nHash: 00\n",
      "TOSCA.meta", diags);
  CHECK(diags.empty());
  CHECK(meta.entry_definitions == "Definitions/a.yaml");
  CHECK(meta.entry_manifest == "a.mf");
  REQUIRE(meta.files.size() == 2);
  CHECK(meta.files[0].name == "Files/x.img");
  CHECK(meta.files[0].hash.empty());
  CHECK(meta.files[1].algorithm == "SHA-256");
  CHECK(meta.files[1].where.line == 10);
}

TEST_CASE("TOSCA.meta without Entry-Definitions is refused", "[tosca][meta]") {
  Files f = good_package();
  f["TOSCA-Metadata/TOSCA.meta"] =
      "TOSCA-Meta-File-Version: 1.0\nCSAR-Version: 1.1\nCreated-By: x\n";
  Loaded l = load(f);
  CHECK(l.has("C0010"));
}

TEST_CASE("a CSAR made by zipping the package folder gets a hint", "[tosca][meta]") {
  Files f;
  for (const auto& [path, content] : good_package())
    f["vnf/" + path] = content;
  Loaded l = load(f);
  CHECK(l.has("C0013"));
  CHECK(l.text().find("archive the folder's contents, not the folder itself") != std::string::npos);
}

TEST_CASE("a TOSCA.meta of garbage says what is wrong, not that it is empty", "[tosca][meta]") {
  Files f = good_package();
  f["TOSCA-Metadata/TOSCA.meta"] = "\n<html>\n  <body>not a meta file</body>\n</html>\n";
  Loaded l = load(f);
  INFO(l.text());
  CHECK(l.text().find("is empty") == std::string::npos);
  CHECK(l.text().find("t.csar!TOSCA-Metadata/TOSCA.meta:2:1: error: TOSCA.meta holds no \"Key: "
                      "value\" line: 3 lines of something else, the first at line 2 [C0010]") !=
        std::string::npos);
  Files empty = good_package();
  empty["TOSCA-Metadata/TOSCA.meta"] = "\n\n";
  CHECK(load(empty).text().find("TOSCA.meta is empty") != std::string::npos);
}

TEST_CASE("bytes from the package reach a human's screen escaped", "[tosca][meta][hostile]") {
  Files f = good_package();
  f["TOSCA-Metadata/TOSCA.meta"] =
      std::string(
          "TOSCA-Meta-File-Version: 1.0\nCSAR-Version: 1.1\nCreated-By: t\n"
          "Entry-Definitions: Definitions/top.yaml\nX-\x1b]0;owned\x07: v\n"
          "ETSI-Entry-Manifest: top.mf\n\nName: Files/\x1b[2Jred") +
      '\0' + ".bin\r\nContent-Type: x\n";
  f["top.mf"] = "metadata:\n  vnf_provider_id: t\n";
  f["Files/x\nt.csar!fake.yaml:1:1: error: all good [T0000]"] = "x";
  f["Definitions/types.yaml"] = replace(f["Definitions/types.yaml"], "tosca.nodes.nfv.VNF",
                                        "tosca.nodes.\x1b[31mVNF\xc2\x9b");
  Loaded l = load(f);
  std::string text = l.text();
  INFO(text);
  REQUIRE(l.diags.size() >= 4);
  for (unsigned char c : text)
    CHECK((c >= 0x20 || c == '\n'));  // no ESC, NUL, BEL, CR
  // One line per diagnostic and per note: a name cannot fake a line of its own.
  size_t expected_lines = 0;
  for (const auto& d : l.diags.sorted())
    expected_lines += 1 + d.notes.size();
  CHECK(static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) == expected_lines);
  CHECK(text.find("Files/\\x1b[2Jred\\x00.bin") != std::string::npos);
  CHECK(text.find("X-\\x1b]0;owned\\x07") != std::string::npos);
  CHECK(text.find("Files/x\\nt.csar!fake.yaml") != std::string::npos);
  CHECK(text.find("tosca.nodes.\\x1b[31mVNF\\u009b") != std::string::npos);
  // --json: the serialiser escapes control characters; what it passes through (DEL, C1,
  // bidi controls, bytes that are not UTF-8, from a folder's file names) becomes \u escapes,
  // and the document stays valid UTF-8 JSON.
  std::string json =
      base::printable("{\"file\":\"a\xff\x7f\xc2\x9b\xe2\x80\xae\"}", base::PrintMode::kJson);
  CHECK(json == "{\"file\":\"a\\u00ff\\u007f\\u009b\\u202e\"}");
}

namespace {

// A source that counts how often each file is digested.
class CountingSource : public tosca::internal::FileSource {
 public:
  explicit CountingSource(Files files)
      : inner_(tosca::internal::open_memory("t.csar", std::move(files))) {
    files_ = inner_->files();
    set_display("t.csar", "t.csar!", true);
  }
  base::Result<std::string> read(std::string_view path, uint64_t max_bytes) override {
    return inner_->read(path, max_bytes);
  }
  base::Result<std::string> digest(std::string_view path, base::DigestAlgorithm a) override {
    ++digests[std::string(path)];
    return inner_->digest(path, a);
  }
  base::Result<std::string> package_digest() override { return inner_->package_digest(); }
  std::map<std::string, int> digests;

 private:
  std::unique_ptr<tosca::internal::FileSource> inner_;
};

}  // namespace

TEST_CASE("a file listed in TOSCA.meta and in the manifest is hashed once", "[tosca][meta]") {
  std::string image(1u << 16, 'i');
  std::string hash = base::digest_hex(base::DigestAlgorithm::kSha256, image);
  std::vector<tosca::MetaFileEntry> meta = {{"Files/image.img", "", "SHA-256", hash, {}}};
  std::vector<tosca::MetaFileEntry> manifest = {{"Files/image.img", "", "SHA-256", hash, {}},
                                                {"Files/image.img", "", "SHA-256", hash, {}}};
  CountingSource src({{"Files/image.img", image}});
  base::Diagnostics d;
  tosca::internal::verify_listed_files(src, meta, "TOSCA.meta", true, d);
  tosca::internal::verify_listed_files(src, manifest, "the manifest", true, d);
  CHECK(src.digests["Files/image.img"] == 1);
  REQUIRE(d.size() == 1);  // the repeated manifest entry
  CHECK(d.items()[0].code == "C0014");
}

TEST_CASE("a VDU boots one SwImage, described by sw_image_data", "[tosca][loader][sol001]") {
  const std::string image = R"(      artifacts:
        image:
          type: tosca.artifacts.nfv.SwImage
          file: ../Files/image.qcow2
)";
  const std::string image_data = R"(        sw_image_data:
          name: image
          version: '1.0'
          checksum: { algorithm: sha-256, hash: 0000 }
          container_format: bare
          disk_format: qcow2
          min_disk: 1 GB
          size: 1 GB
)";
  Files f = good_package();
  f["Files/image.qcow2"] = "qcow";
  std::string df = f["Definitions/df_simple.yaml"];
  std::string vdu_props = "        description: worker\n";
  // The baseline: one image with its data is fine.
  Files ok = f;
  ok["Definitions/df_simple.yaml"] =
      replace(replace(df, vdu_props, vdu_props + image_data),
              "      capabilities:\n        virtual_compute:",
              image + "      capabilities:\n        virtual_compute:");
  Loaded good = load(ok);
  INFO(good.text());
  CHECK_FALSE(good.diags.has_errors());
  REQUIRE(good.pkg->flavours.at(0).vdus.at(0).sw_image.has_value());

  Files two = ok;
  two["Definitions/df_simple.yaml"] =
      replace(ok["Definitions/df_simple.yaml"], image, image + R"(        image2:
          type: tosca.artifacts.nfv.SwImage
          file: ../Files/image.qcow2
)");
  Loaded l2 = load(two);
  INFO(l2.text());
  CHECK(l2.text().find("df_simple.yaml:47:9: error: VDU \"VDU1\" has a second SwImage artifact "
                       "\"image2\"; a VDU boots one image [T0021]\n  note: the first is "
                       "\"image\" at line 44") != std::string::npos);
  CHECK(l2.diags.error_count() == 1);

  Files no_data = ok;
  no_data["Definitions/df_simple.yaml"] = replace(ok["Definitions/df_simple.yaml"], image_data, "");
  Loaded l3 = load(no_data);
  INFO(l3.text());
  CHECK(l3.text().find("error: VDU \"VDU1\": SwImage artifact \"image\" needs "
                       "properties.sw_image_data") != std::string::npos);
  CHECK(l3.diags.error_count() == 1);
}

TEST_CASE("types in the wrong section are one finding, not a cascade", "[tosca][loader]") {
  Files f = good_package();
  f["Definitions/types.yaml"] = replace(f["Definitions/types.yaml"], "node_types:\n", R"(node_types:
  example.datatypes.Port:
    derived_from: tosca.datatypes.Root
    properties:
      number: { type: integer }
  example.datatypes.Ports:
    derived_from: example.datatypes.Port
  example.policies.Pin:
    derived_from: tosca.policies.Root
  example.Box:
    derived_from: tosca.nodes.Root
    properties:
      port: { type: example.datatypes.Ports }
)");
  f["Definitions/df_simple.yaml"] =
      replace(f["Definitions/df_simple.yaml"], "  policies:\n", R"(    box:
      type: example.Box
      properties:
        port: { number: 80 }
  policies:
    - pin:
        type: example.policies.Pin
        targets: [ box ]
)");
  Loaded l = load(f);
  INFO(l.text());
  REQUIRE(l.diags.size() == 1);
  CHECK(l.text() ==
        "t.csar!Definitions/types.yaml:6:3: error: node_types holds 3 types that are not a node "
        "type: \"example.datatypes.Port\" (a data type), \"example.datatypes.Ports\" (a data "
        "type), \"example.policies.Pin\" (a policy type) [T0033]\n"
        "  note: each derives from a type of another kind; move them under data_types: and "
        "policy_types:\n");
}

TEST_CASE("a step delta no VduScalingAspectDeltas defines: warning, error when strict",
          "[tosca][loader][sol001]") {
  Files f = good_package();
  f["Definitions/df_simple.yaml"] =
      replace(f["Definitions/df_simple.yaml"], "step_deltas: [ delta_1 ]",
              "step_deltas: [ delta_1, delta_2 ]");
  Loaded lenient = load(f);
  CHECK(lenient.text() ==
        "t.csar!Definitions/df_simple.yaml:58:39: warning: aspect \"worker\": step delta "
        "\"delta_2\" is defined by no VduScalingAspectDeltas policy [T0071]\n");
  tosca::LoadOptions strict;
  strict.quirk_undeclared_step_delta = false;
  base::Diagnostics d;
  (void)tosca::internal::load_from_source(tosca::internal::open_memory("t.csar", f), strict, d);
  REQUIRE(d.size() == 1);
  CHECK(d.items()[0].severity == base::Severity::kError);
  CHECK(d.items()[0].code == "T0071");
}

TEST_CASE("files of one size are one document only when their bytes are the same",
          "[tosca][loader]") {
  auto types = [](const std::string& name) {
    return "tosca_definitions_version: tosca_simple_yaml_1_2\nnode_types:\n  " + name +
           ":\n    derived_from: tosca.nodes.Root\n";
  };
  auto package = [&](const std::string& first, const std::string& second) {
    Files f = good_package();
    f["Definitions/top.yaml"] = replace(
        replace(kTop, "  - df_simple.yaml\n", "  - df_simple.yaml\n  - a.yaml\n  - b.yaml\n"),
        "  node_templates:\n", "  node_templates:\n    Extra:\n      type: example.B\n");
    f["Definitions/a.yaml"] = first;
    f["Definitions/b.yaml"] = second;
    return f;
  };
  // Same size, other bytes: both are read, so example.B is known.
  REQUIRE(types("example.A").size() == types("example.B").size());
  auto two = load(package(types("example.A"), types("example.B")));
  INFO(two.text());
  CHECK_FALSE(two.diags.has_errors());
  // The same bytes under two names: one document, no type defined twice.
  auto same = load(package(types("example.B"), types("example.B")));
  INFO(same.text());
  CHECK_FALSE(same.diags.has_errors());
  auto paths = [](const Loaded& l) {
    std::set<std::string> out;
    for (const auto& d : l.pkg->impl->docs)
      out.insert(d->path);
    return out;
  };
  REQUIRE(two.pkg != nullptr);
  REQUIRE(same.pkg != nullptr);
  CHECK(paths(two).count("Definitions/b.yaml") == 1);
  CHECK(paths(same).count("Definitions/a.yaml") == 1);
  CHECK(paths(same).count("Definitions/b.yaml") == 0);
  CHECK(same.pkg->impl->docs.size() + 1 == two.pkg->impl->docs.size());
  // And a type the files do not define is still unknown.
  auto neither = load(package(types("example.A"), types("example.C")));
  CHECK(neither.diags.has_errors());
}
