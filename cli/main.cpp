// vnflow: the command line and the daemon. This is the composition root: the only place
// that wires modules together and talks to the terminal. This file: main(), the command
// dispatch, what every command group shares (options, --help, escaping; cli_internal.h)
// and the csar commands:
//
//   vnflow csar validate PATH... [--json] [--no-digests] [--strict] [--repeat N]
//                        [--trust CA.pem [--require-signature]] [--signing-cert FILE]
//   vnflow csar inspect PATH [--flavour ID] [--json] [--no-digests] [--strict]
//
// Exit status: 0 success (every package valid), 1 failure (a package is not valid), 2 usage
// error.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <boost/json.hpp>
#include <sys/stat.h>

#include "base/base.h"
#include "cli/cli.h"
#include "cli/cli_internal.h"
#include "engine/engine.h"
#include "tosca/tosca.h"

namespace vnflow_cli {

namespace json = boost::json;

namespace {

constexpr const char* kUsage =
    "usage: vnflow <command> [options]      (vnflow <command> --help: one command's options)\n"
    "\n"
    "commands:\n"
    "  csar validate PATH... [--json] [--no-digests] [--strict] [--repeat N]\n"
    "                [--trust CA.pem [--require-signature]] [--signing-cert FILE]\n"
    "      check packages (.csar/.zip files or folders), their SOL004 signatures and hook\n"
    "      workflows; diagnostics on stderr\n"
    "  csar inspect PATH [--flavour ID] [--json] [--no-digests] [--strict]\n"
    "      show the VNF, its flavours, VDUs, CPs, VLs, aspects, levels and Vnflcm operations\n"
    "  workflow show PATH [--flavour ID] --op OP [--format text|dot|mermaid|seqdiag|json]\n"
    "      the state machine an LCM operation compiles to (hooks + built-in steps)\n"
    "  workflow check PATH [--flavour ID]\n"
    "      compile every LCM operation of a package; located diagnostics on stderr\n"
    "  action list [--json | --markdown] | show NAME [--json]\n"
    "      the actions a workflow state may run: inputs, outputs, behaviour, an example\n"
    "  package onboard PATH [--trust CA.pem [--require-signature]] [--signing-cert FILE]\n"
    "  package list\n"
    "      validate a package, compile every operation, store it; prints its id\n"
    "  instance create --package ID [--name N] [--description T] | list | show ID | delete ID\n"
    "  instance instantiate|heal|scale|terminate|change-ext-conn|modify ID --request FILE.json\n"
    "      queue an LCM operation (SOL003 request body, at most 1 MiB); prints the operation id\n"
    "  op list [--instance ID] [--state S] [--limit N] | show OP | history OP\n"
    "  op wait OP | watch OP [--timeout SECS]\n"
    "  op retry|rollback|cancel OP | fail OP [--force]\n"
    "  op replay OP --dry-run [--package PATH] | --from STATE\n"
    "  vim register --name N [--from-env | --cloud NAME | --auth-url URL --username U\n"
    "      --password-file F --project P] [--heat-env FILE] [--default] | list | show | delete\n"
    "      the VIM registry (OpenStack, Kubernetes); secrets sealed at rest, never printed\n"
    "  subscription list | show ID | delete ID\n"
    "      the notification subscriptions made over the REST API, and their delivery\n"
    "  key rotate\n"
    "      re-seal every secret with a new key (stop the daemon first)\n"
    "  daemon [--workers N] [--work-dir DIR] [--poll-ms N] [--hook-user USER]\n"
    "         [--max-redispatch N] [--name NAME] [--lease-ms N]\n"
    "      run queued operations; resumes interrupted ones; SIGTERM or SIGINT drains, SIGHUP\n"
    "      makes the REST API read its credentials and TLS files again;\n"
    "      on PostgreSQL, several daemons share the work (each its own --name)\n"
    "  version\n"
    "\n"
    "options of the commands on a database (package, instance, op, vim, subscription, key,\n"
    "daemon):\n"
    "  --db FILE       the database, else $VNFLOW_DB, else ~/.local/share/vnflow/vnflow.db;\n"
    "                  its folder must be yours and not writable by others\n"
    "  --json          one JSON document on stdout instead of text\n"
    "options of csar:\n"
    "  --no-digests    do not recompute manifest / TOSCA.meta digests\n"
    "  --strict        turn off the named quirks (docs/diagnostics.md, \"Quirks\")\n"
    "  --repeat N      load each package N times and report the median time (benchmarks)\n"
    "options of csar validate and package onboard (SOL004 signatures, docs/security.md):\n"
    "  --trust FILE    PEM file of trusted CA certificates: verify every signature\n"
    "  --require-signature   with --trust: refuse a package that is not signed\n"
    "  --signing-cert FILE   the signing certificate, when the package does not carry it\n"
    "\n"
    "exit status: 0 success, 1 failure (csar: a package is invalid), 2 usage error\n";

const std::vector<CommandSpec>& csar_commands() {
  static const std::vector<CommandSpec> specs = {
      {"csar validate",
       "usage: vnflow csar validate PATH... [--json] [--no-digests] [--strict] [--repeat N]\n"
       "                            [--trust CA.pem [--require-signature]] [--signing-cert FILE]\n"
       "\n"
       "Checks packages (.csar/.zip archives or folders) and compiles their hook workflows\n"
       "as onboarding does: every problem of every package, located, on stderr; a summary\n"
       "line per package on stdout.\n"
       "\n"
       "  --json          one JSON document on stdout: {valid, packages: [...]}\n"
       "  --no-digests    do not recompute manifest / TOSCA.meta digests\n"
       "  --strict        turn off the named quirks (docs/diagnostics.md, \"Quirks\")\n"
       "  --repeat N      load each package N times and report the median time\n"
       "  --trust FILE    PEM file of trusted CA certificates: verify the SOL004 signatures\n"
       "                  (the manifest's CMS signature, per-artifact signatures, a signed\n"
       "                  zip holding the CSAR); without it a signed package gets a note\n"
       "  --require-signature   with --trust: a package that is not signed is invalid\n"
       "  --signing-cert FILE   the signing certificate (PEM), when the package lacks it\n"
       "\n"
       "exit status: 0 all packages valid, 1 a package is invalid, 2 usage error\n",
       {"--repeat", "--trust", "--signing-cert"},
       {"--json", "--no-digests", "--strict", "--require-signature"},
       1},
      {"csar inspect",
       "usage: vnflow csar inspect PATH [--flavour ID] [--json] [--no-digests] [--strict]\n"
       "\n"
       "Shows the VNF, its deployment flavours, VDUs with instance counts, connection points,\n"
       "virtual links, scaling aspects, instantiation levels and Vnflcm operations.\n"
       "\n"
       "  --flavour ID    only this deployment flavour\n"
       "  --json          one JSON document on stdout\n"
       "  --no-digests    do not recompute manifest / TOSCA.meta digests\n"
       "  --strict        turn off the named quirks (docs/diagnostics.md, \"Quirks\")\n"
       "\n"
       "exit status: 0 valid, 1 the package is invalid, 2 usage error\n",
       {"--flavour", "--flavor"},
       {"--json", "--no-digests", "--strict"},
       1,
       1},
  };
  return specs;
}

struct Args {
  std::vector<std::string> paths;
  bool json = false;
  bool strict = false;
  bool digests = true;
  int repeat = 1;
  std::string flavour;
  tosca::SignatureOptions signatures;
};

// The csar command's Args from its parsed options; false after a usage error.
bool csar_args(const CommandSpec& spec, const Opts& o, Args& a) {
  a.paths = o.pos;
  a.json = o.flags.count("--json") > 0;
  a.strict = o.flags.count("--strict") > 0;
  a.digests = o.flags.count("--no-digests") == 0;
  a.flavour = o.get("--flavour", o.get("--flavor"));
  if (o.kv.count("--repeat")) {
    auto n = parse_positive(o.kv.at("--repeat"), 100000);
    if (!n) {
      usage_error(spec, "--repeat needs a count between 1 and 100000");
      return false;
    }
    a.repeat = static_cast<int>(*n);
  }
  if (o.has("--trust") && !a.digests) {
    usage_error(spec, "--trust needs the digests: the signed manifest covers files by them");
    return false;
  }
  return signature_options(spec, o, a.signatures);
}

tosca::LoadOptions options_from(const Args& a) {
  tosca::LoadOptions o;
  o.verify_digests = a.digests;
  if (a.strict) {
    o.quirk_artifact_path_from_root = false;
    o.quirk_undeclared_step_delta = false;
  }
  return o;
}

}  // namespace

bool signature_options(const CommandSpec& spec, const Opts& o, tosca::SignatureOptions& out) {
  out.required = o.flags.count("--require-signature") > 0;
  if (out.required && !o.has("--trust")) {
    usage_error(spec, "--require-signature needs --trust FILE (the CAs to check against)");
    return false;
  }
  for (const char* opt : {"--trust", "--signing-cert"}) {
    if (!o.has(opt))
      continue;
    auto pem = tosca::read_certificates_pem(o.get(opt));
    if (!pem.ok()) {
      usage_error(spec, std::string(opt) + ": " + pem.status().message());
      return false;
    }
    (std::string(opt) == "--trust" ? out.trust_pem : out.signer_pem) = std::move(pem).value();
  }
  return true;
}

namespace {

json::object diag_json(const base::Diagnostic& d) {
  json::object o;
  o["severity"] = std::string(base::to_string(d.severity));
  o["code"] = d.code;
  o["file"] = d.where.file;
  o["line"] = d.where.line;
  o["column"] = d.where.column;
  o["message"] = d.message;
  json::array notes;
  for (const auto& n : d.notes)
    notes.push_back(json::value(n));
  o["notes"] = std::move(notes);
  return o;
}

// Every diagnostic, in order, as JSON (the --json twin of print_diags).
json::array diags_json(const base::Diagnostics& diags) {
  json::array ds;
  for (const auto& d : diags.sorted())
    ds.push_back(diag_json(d));
  return ds;
}

json::value node_json(tosca::Node n, int depth = 0) {
  if (depth > 64)
    return nullptr;
  switch (n.kind()) {
    case tosca::Node::Kind::kNone:
    case tosca::Node::Kind::kNull:
      return nullptr;
    case tosca::Node::Kind::kScalar:
      return json::value(std::string(n.scalar()));
    case tosca::Node::Kind::kSequence: {
      json::array a;
      for (size_t i = 0; i < n.size(); ++i)
        a.push_back(node_json(n.item(i), depth + 1));
      return a;
    }
    case tosca::Node::Kind::kMap: {
      json::object o;
      for (size_t i = 0; i < n.size(); ++i) {
        o[std::string(n.key(i).scalar())] = node_json(n.value(i), depth + 1);
      }
      return o;
    }
  }
  return nullptr;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int cmd_validate(const Args& a) {
  tosca::LoadOptions opts = options_from(a);
  bool all_valid = true;
  json::array packages;
  for (const auto& path : a.paths) {
    base::Diagnostics diags;
    std::shared_ptr<const tosca::Package> pkg;
    std::vector<double> times;
    for (int r = 0; r < a.repeat; ++r) {
      base::Diagnostics d;
      auto t0 = std::chrono::steady_clock::now();
      pkg = tosca::load_signed_package(path, opts, a.signatures, d);
      auto t1 = std::chrono::steady_clock::now();
      times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      if (r == 0)
        diags = std::move(d);
    }
    if (pkg != nullptr && !diags.has_errors())
      engine::check_package_workflows(*pkg, diags);
    bool valid = pkg != nullptr && !diags.has_errors();
    all_valid = all_valid && valid;
    size_t warnings = diags.size() - diags.error_count();
    if (a.json) {
      json::object o;
      o["path"] = path;
      o["valid"] = valid;
      o["digest"] = pkg ? pkg->digest : "";
      o["errors"] = diags.error_count();
      o["warnings"] = warnings;
      if (a.repeat > 1)
        o["median_ms"] = median(times);
      o["diagnostics"] = diags_json(diags);
      packages.push_back(std::move(o));
    } else {
      print_diags(diags);
      std::cout << (valid ? "valid   " : "invalid ") << printable(path);
      if (diags.error_count() > 0)
        std::cout << "  errors=" << diags.error_count();
      if (warnings > 0)
        std::cout << "  warnings=" << warnings;
      if (a.repeat > 1)
        std::printf("  median_ms=%.3f", median(times));
      std::cout << std::endl;  // keep the summary after this package's diagnostics
    }
  }
  if (a.json) {
    json::object doc;
    doc["valid"] = all_valid;
    doc["packages"] = std::move(packages);
    std::cout << json_text(doc) << "\n";
  }
  return all_valid ? 0 : 1;
}

std::string artifact_text(const tosca::Artifact& a) {
  std::string s = printable(a.name);
  if (!a.type.empty())
    s += " (" + printable(a.type) + ")";
  if (!a.file.empty())
    s += " -> " + printable(a.file) + (a.present ? "" : " [missing]");
  return s;
}

json::object artifact_json(const tosca::Artifact& a) {
  json::object o;
  o["name"] = a.name;
  o["type"] = a.type;
  o["file"] = a.file;
  o["path"] = a.path;
  o["present"] = a.present;
  return o;
}

json::object flavour_json(const tosca::Flavour& f) {
  json::object o;
  o["id"] = f.id;
  o["description"] = f.description;
  o["file"] = f.file;
  o["vnf_node"] = f.vnf_node;
  o["vnf_type"] = f.vnf_type;
  json::object props;
  for (const auto& [k, v] : f.vnf_properties)
    props[k] = node_json(v);
  o["vnf_properties"] = std::move(props);
  json::array ops;
  for (const auto& op : f.lcm_operations) {
    json::object j;
    j["name"] = op.name;
    if (op.implementation) {
      j["primary"] = op.implementation->primary;
      json::array deps;
      for (const auto& d : op.implementation->dependencies)
        deps.push_back(json::value(d));
      j["dependencies"] = std::move(deps);
      if (op.implementation->primary_artifact) {
        j["artifact"] = artifact_json(*op.implementation->primary_artifact);
      }
    } else {
      j["primary"] = nullptr;
    }
    json::object inputs;
    for (const auto& [k, v] : op.inputs)
      inputs[k] = node_json(v);
    j["inputs"] = std::move(inputs);
    ops.push_back(std::move(j));
  }
  o["lcm_operations"] = std::move(ops);
  json::array vdus;
  for (const auto& v : f.vdus) {
    json::object j;
    j["name"] = v.name;
    j["type"] = v.type;
    j["vdu_name"] = v.vdu_name;
    j["min_instances"] = v.min_instances;
    j["max_instances"] = v.max_instances;
    j["sw_image_name"] = v.sw_image_name;
    if (v.sw_image)
      j["sw_image"] = artifact_json(*v.sw_image);
    json::array st;
    for (const auto& s : v.storages)
      st.push_back(json::value(s));
    j["storages"] = std::move(st);
    vdus.push_back(std::move(j));
  }
  o["vdus"] = std::move(vdus);
  json::array cps;
  for (const auto& c : f.cps) {
    json::object j;
    j["name"] = c.name;
    j["type"] = c.type;
    j["virtual_binding"] = c.virtual_binding;
    j["virtual_link"] = c.virtual_link;
    j["external_link"] = c.external_link;
    cps.push_back(std::move(j));
  }
  o["cps"] = std::move(cps);
  json::array vls;
  for (const auto& v : f.vls) {
    json::object j;
    j["name"] = v.name;
    j["type"] = v.type;
    json::array lp;
    for (const auto& p : v.layer_protocols)
      lp.push_back(json::value(p));
    j["layer_protocols"] = std::move(lp);
    vls.push_back(std::move(j));
  }
  o["vls"] = std::move(vls);
  json::array sts;
  for (const auto& s : f.storages) {
    json::object j;
    j["name"] = s.name;
    j["type"] = s.type;
    j["size"] = s.size;
    sts.push_back(std::move(j));
  }
  o["storages"] = std::move(sts);
  json::array aspects;
  for (const auto& a : f.aspects) {
    json::object j;
    j["id"] = a.id;
    j["name"] = a.name;
    j["description"] = a.description;
    j["max_scale_level"] = a.max_scale_level;
    json::array sd;
    for (const auto& d : a.step_deltas)
      sd.push_back(json::value(d));
    j["step_deltas"] = std::move(sd);
    json::object vd;
    for (const auto& [vdu, deltas] : a.vdu_deltas) {
      json::object dj;
      for (const auto& [d, n] : deltas)
        dj[d] = n;
      vd[vdu] = std::move(dj);
    }
    j["vdu_deltas"] = std::move(vd);
    aspects.push_back(std::move(j));
  }
  o["aspects"] = std::move(aspects);
  json::array levels;
  for (const auto& l : f.levels) {
    json::object j;
    j["id"] = l.id;
    j["description"] = l.description;
    json::object si;
    for (const auto& [k, v] : l.scale_info)
      si[k] = v;
    j["scale_info"] = std::move(si);
    json::object vi;
    for (const auto& [k, v] : l.vdu_instances)
      vi[k] = v;
    j["vdu_instances"] = std::move(vi);
    levels.push_back(std::move(j));
  }
  o["levels"] = std::move(levels);
  o["default_level"] = f.default_level;
  json::object ext;
  for (const auto& [k, v] : f.external_links)
    ext[k] = v;
  o["external_links"] = std::move(ext);
  return o;
}

// Every name below comes from the package: printable() keeps a hostile one from
// controlling the terminal.
void print_flavour(const tosca::Flavour& f) {
  auto p = [](std::string_view s) { return printable(s); };
  std::cout << "\nflavour " << p(f.id);
  if (!f.description.empty())
    std::cout << ": " << p(f.description);
  std::cout << "\n  file: " << p(f.file) << "\n  vnf node: " << p(f.vnf_node) << " ("
            << p(f.vnf_type) << ")\n";
  std::cout << "  vdus:\n";
  for (const auto& v : f.vdus) {
    std::cout << "    " << p(v.name) << " (" << p(v.type) << ") instances " << v.min_instances
              << ".." << v.max_instances;
    if (v.sw_image) {
      std::cout << ", image " << artifact_text(*v.sw_image);
    } else if (!v.sw_image_name.empty()) {
      std::cout << ", image " << p(v.sw_image_name);
    }
    if (!v.storages.empty()) {
      std::cout << ", storage";
      for (const auto& s : v.storages)
        std::cout << " " << p(s);
    }
    std::cout << "\n";
  }
  std::cout << "  connection points:\n";
  for (const auto& c : f.cps) {
    std::cout << "    " << p(c.name) << " on " << p(c.virtual_binding) << " -> "
              << (!c.virtual_link.empty()    ? p(c.virtual_link)
                  : !c.external_link.empty() ? "external " + p(c.external_link)
                                             : std::string("(unbound)"))
              << "\n";
  }
  std::cout << "  virtual links:\n";
  for (const auto& v : f.vls) {
    std::cout << "    " << p(v.name);
    for (const auto& lp : v.layer_protocols)
      std::cout << " " << p(lp);
    std::cout << "\n";
  }
  if (!f.storages.empty()) {
    std::cout << "  storage:\n";
    for (const auto& s : f.storages)
      std::cout << "    " << p(s.name) << " " << p(s.size) << "\n";
  }
  if (!f.aspects.empty()) {
    std::cout << "  scaling aspects:\n";
    for (const auto& a : f.aspects) {
      std::cout << "    " << p(a.id) << " max_scale_level " << a.max_scale_level;
      for (const auto& [vdu, deltas] : a.vdu_deltas) {
        for (const auto& [d, n] : deltas)
          std::cout << ", " << p(vdu) << " +" << n << " per " << p(d);
      }
      std::cout << "\n";
    }
  }
  if (!f.levels.empty()) {
    std::cout << "  instantiation levels (default " << p(f.default_level) << "):\n";
    for (const auto& l : f.levels) {
      std::cout << "    " << p(l.id);
      for (const auto& [vdu, n] : l.vdu_instances)
        std::cout << " " << p(vdu) << "=" << n;
      for (const auto& [asp, n] : l.scale_info)
        std::cout << " " << p(asp) << "@" << n;
      std::cout << "\n";
    }
  }
  std::cout << "  vnflcm operations:\n";
  if (f.lcm_operations.empty())
    std::cout << "    (none)\n";
  for (const auto& op : f.lcm_operations) {
    std::cout << "    " << p(op.name) << " -> ";
    if (!op.implementation) {
      std::cout << "(no implementation)\n";
      continue;
    }
    if (op.implementation->primary_artifact) {
      std::cout << artifact_text(*op.implementation->primary_artifact);
    } else {
      std::cout << p(op.implementation->primary);
    }
    for (const auto& d : op.implementation->dependencies)
      std::cout << " + " << p(d);
    std::cout << "\n";
  }
}

int cmd_inspect(const Args& a) {
  base::Diagnostics diags;
  auto pkg = tosca::load_package(a.paths[0], options_from(a), diags);
  if (!a.json)
    print_diags(diags);
  if (!pkg) {
    if (a.json) {
      json::object doc;
      doc["valid"] = false;
      doc["diagnostics"] = diags_json(diags);
      std::cout << json_text(doc) << "\n";
    }
    return 1;
  }
  std::vector<const tosca::Flavour*> flavours;
  for (const auto& f : pkg->flavours) {
    if (a.flavour.empty() || f.id == a.flavour)
      flavours.push_back(&f);
  }
  if (!a.flavour.empty() && flavours.empty()) {
    std::string known;
    for (const auto& f : pkg->flavours)
      known += (known.empty() ? "" : ", ") + printable(f.id);
    std::cerr << "vnflow csar inspect: no flavour \"" << printable(a.flavour)
              << "\" (flavours: " << known << ")\n";
    return 2;
  }
  bool valid = !diags.has_errors();
  if (a.json) {
    json::object doc;
    doc["package"] = pkg->display_name;
    doc["valid"] = valid;
    doc["digest"] = pkg->digest;
    doc["entry_definitions"] = pkg->entry_definitions;
    doc["tosca_definitions_version"] = pkg->tosca_version;
    json::object meta;
    meta["present"] = pkg->meta.present;
    meta["tosca_meta_file_version"] = pkg->meta.meta_file_version;
    meta["csar_version"] = pkg->meta.csar_version;
    meta["created_by"] = pkg->meta.created_by;
    meta["entry_manifest"] = pkg->meta.entry_manifest;
    doc["meta"] = std::move(meta);
    json::object tmd;
    for (const auto& [k, v] : pkg->template_metadata)
      tmd[k] = v;
    doc["template_metadata"] = std::move(tmd);
    json::object vnf;
    vnf["descriptor_id"] = pkg->vnf.descriptor_id;
    vnf["descriptor_version"] = pkg->vnf.descriptor_version;
    vnf["provider"] = pkg->vnf.provider;
    vnf["product_name"] = pkg->vnf.product_name;
    vnf["software_version"] = pkg->vnf.software_version;
    json::array vi;
    for (const auto& v : pkg->vnf.vnfm_info)
      vi.push_back(json::value(v));
    vnf["vnfm_info"] = std::move(vi);
    vnf["node_type"] = pkg->vnf.node_type;
    doc["vnf"] = std::move(vnf);
    json::array fl;
    for (const auto* f : flavours)
      fl.push_back(flavour_json(*f));
    doc["flavours"] = std::move(fl);
    doc["diagnostics"] = diags_json(diags);
    std::cout << json_text(doc) << "\n";
    return valid ? 0 : 1;
  }
  auto p = [](std::string_view s) { return printable(s); };
  std::cout << "package " << p(pkg->display_name) << (valid ? "" : "  (has errors)") << "\n";
  std::cout << "  digest: sha256:" << p(pkg->digest) << "\n";
  std::cout << "  entry: " << p(pkg->entry_definitions) << " (" << p(pkg->tosca_version) << ")\n";
  for (const auto& [k, v] : pkg->template_metadata)
    std::cout << "  " << p(k) << ": " << p(v) << "\n";
  std::cout << "vnf " << p(pkg->vnf.product_name) << " " << p(pkg->vnf.software_version) << " by "
            << p(pkg->vnf.provider) << "\n";
  std::cout << "  descriptor: " << p(pkg->vnf.descriptor_id) << " version "
            << p(pkg->vnf.descriptor_version) << "\n  node type: " << p(pkg->vnf.node_type) << "\n";
  std::cout << "  flavours:";
  for (const auto& f : pkg->flavours)
    std::cout << " " << p(f.id);
  std::cout << "\n";
  for (const auto* f : flavours)
    print_flavour(*f);
  return valid ? 0 : 1;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// What every command group shares (cli_internal.h)

namespace {

bool contains(const std::vector<std::string>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// The synopsis of a usage text: its lines up to the first blank one.
std::string synopsis(const std::string& usage) {
  size_t end = usage.find("\n\n");
  return end == std::string::npos ? usage : usage.substr(0, end + 1);
}

}  // namespace

// The escaping rules live in base::printable (diagnostics use them too).
std::string printable(std::string_view s) {
  return base::printable(s);
}

std::string printable_text(std::string_view s) {
  return base::printable(s, base::PrintMode::kLines);
}

std::string json_safe(std::string_view text) {
  return base::printable(text, base::PrintMode::kJson);
}

std::string json_text(const json::value& v) {
  return json_safe(json::serialize(v));
}

void print_diags(const base::Diagnostics& diags) {
  for (const auto& d : diags.sorted())
    std::cerr << base::to_string(d) << "\n";  // every field made printable there
}

int fail(const base::Status& s) {
  std::cerr << "vnflow: " << printable(s.message()) << "\n";
  return 1;
}

std::optional<long long> parse_positive(std::string_view text, long long max) {
  if (text.empty() || text.size() > 18)
    return std::nullopt;
  long long n = 0;
  for (char c : text) {
    if (c < '0' || c > '9')
      return std::nullopt;
    n = n * 10 + (c - '0');
  }
  if (n < 1 || n > max)
    return std::nullopt;
  return n;
}

std::string suggest(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best = base::closest_match(word, candidates);
  if (!best.empty())
    return best;
  for (const auto& c : candidates) {
    if (c.size() != word.size())
      continue;
    size_t first = 0;
    while (first < c.size() && c[first] == word[first])
      ++first;
    if (first + 1 < c.size() && c[first] == word[first + 1] && c[first + 1] == word[first] &&
        c.substr(first + 2) == word.substr(first + 2))
      return c;
  }
  return "";
}

int usage_error(const CommandSpec& spec, std::string_view message) {
  std::cerr << "vnflow " << spec.words << ": " << printable(message) << "\n"
            << synopsis(spec.usage) << "(vnflow " << spec.words << " --help for more)\n";
  return 2;
}

std::optional<int> parse_command(const std::vector<std::string>& argv, size_t start,
                                 const CommandSpec& spec, Opts& o) {
  std::string err;
  bool help = false;
  bool options_end = false;
  for (size_t i = start; i < argv.size(); ++i) {
    const std::string& s = argv[i];
    if (!options_end && s == "--") {
      options_end = true;
      continue;
    }
    if (options_end || s.size() < 2 || s[0] != '-') {
      o.pos.push_back(s);
      continue;
    }
    if (s == "--help" || s == "-h") {
      help = true;
      continue;
    }
    std::string name = s;
    std::optional<std::string> value;
    if (size_t eq = s.find('='); s.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = s.substr(0, eq);
      value = s.substr(eq + 1);
    }
    if (contains(spec.valued, name)) {
      if (!value && i + 1 >= argv.size()) {
        if (err.empty())
          err = name + " needs a value";
        continue;
      }
      o.kv[name] = value ? *value : argv[++i];
    } else if (contains(spec.flags, name)) {
      if (value && err.empty())
        err = name + " takes no value";
      o.flags.insert(name);
    } else if (err.empty()) {
      std::vector<std::string> known = spec.valued;
      known.insert(known.end(), spec.flags.begin(), spec.flags.end());
      known.push_back("--help");
      err = "unknown option " + name;
      if (std::string hint = suggest(name, known); !hint.empty())
        err += " (did you mean " + hint + "?)";
    }
  }
  // --help wins over any mistake on the same line: it is how one finds the right spelling.
  if (help) {
    std::cout << spec.usage;
    return 0;
  }
  if (!err.empty())
    return usage_error(spec, err);
  if (o.pos.size() < spec.min_pos)
    return usage_error(spec, "missing argument");
  if (o.pos.size() > spec.max_pos)
    return usage_error(spec, "unexpected argument \"" + o.pos[spec.max_pos] + "\"");
  return std::nullopt;
}

const CommandSpec* find_subcommand(const std::vector<std::string>& argv,
                                   const std::vector<CommandSpec>& subs, int& status) {
  const std::string& group = argv[1];
  std::vector<std::string> names;
  std::string usage = "usage: vnflow " + group + " SUBCOMMAND [options]   (vnflow " + group +
                      " SUBCOMMAND --help: its options)\n";
  for (const auto& c : subs) {
    names.push_back(c.words.substr(group.size() + 1));
    // "usage: vnflow ..." becomes "  vnflow ...", its continuation lines move along.
    std::string syn = synopsis(c.usage);
    size_t at = 0;
    while (at < syn.size()) {
      size_t eol = syn.find('\n', at);
      std::string line = syn.substr(at, eol == std::string::npos ? std::string::npos : eol - at);
      at = eol == std::string::npos ? syn.size() : eol + 1;
      if (line.rfind("usage: ", 0) == 0)
        line = "  " + line.substr(7);
      else if (line.rfind("       ", 0) == 0)
        line = line.substr(5);
      usage += line + "\n";
    }
  }
  if (argv.size() >= 3) {
    for (const auto& c : subs) {
      if (c.words == group + " " + argv[2])
        return &c;
    }
  }
  if (argv.size() >= 3 && (argv[2] == "--help" || argv[2] == "-h" || argv[2] == "help")) {
    std::cout << usage;
    status = 0;
    return nullptr;
  }
  if (argv.size() >= 3) {
    std::cerr << "vnflow " << group << ": unknown command \"" << printable(argv[2]) << "\"";
    if (std::string hint = suggest(argv[2], names); !hint.empty())
      std::cerr << " (did you mean " << hint << "?)";
    std::cerr << "\n";
  }
  std::cerr << usage;
  status = 2;
  return nullptr;
}

// ---------------------------------------------------------------------------------------

int run(const std::vector<std::string>& argv) {
  if (argv.size() < 2) {
    std::cerr << kUsage;
    return 2;
  }
  if (argv[1] == "--help" || argv[1] == "-h" || argv[1] == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (argv[1] == "version" || argv[1] == "--version") {
    static const CommandSpec kVersion{"version", "usage: vnflow version\n", {}, {}, 0, 0};
    Opts o;
    if (auto st = parse_command(argv, 2, kVersion, o))
      return *st;
    std::cout << "vnflow 0.1.0\n";
    return 0;
  }
  if (argv[1] == "workflow")
    return cmd_workflow(argv);
  if (argv[1] == "action")
    return cmd_action(argv);
  if (argv[1] == "package" || argv[1] == "instance" || argv[1] == "op" || argv[1] == "vim" ||
      argv[1] == "subscription" || argv[1] == "key" || argv[1] == "daemon")
    return cmd_engine(argv);
  if (argv[1] == "csar") {
    int status = 2;
    const CommandSpec* spec = find_subcommand(argv, csar_commands(), status);
    if (spec == nullptr)
      return status;
    Opts o;
    if (auto st = parse_command(argv, 3, *spec, o))
      return *st;
    Args a;
    if (!csar_args(*spec, o, a))
      return 2;
    return argv[2] == "validate" ? cmd_validate(a) : cmd_inspect(a);
  }
  std::cerr << "vnflow: unknown command \"" << printable(argv[1]) << "\"";
  std::string hint = suggest(argv[1], {"csar", "workflow", "action", "package", "instance", "op",
                                       "vim", "subscription", "key", "daemon", "version"});
  if (!hint.empty())
    std::cerr << " (did you mean " << hint << "?)";
  std::cerr << "\n" << kUsage;
  return 2;
}

}  // namespace vnflow_cli

int main(int argc, char** argv) {
  // Files and folders the commands create (the database, its WAL and SHM, the key, work
  // folders) are the user's alone: 0600 and 0700.
  ::umask(077);
  // A closed pipe (a log reader gone, `vnflow op list | head -1`) is an EPIPE error on
  // write instead of killing the process mid-operation; local.exec restores the default
  // for the hooks it starts.
  std::signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> args(argv, argv + argc);
  try {
    return vnflow_cli::run(args);
  } catch (const std::exception& e) {
    // Never a crash: an escaped exception is a bug, reported as such.
    std::cerr << "vnflow: internal error: " << vnflow_cli::printable(e.what()) << "\n";
    return 3;
  }
}
