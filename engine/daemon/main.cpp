// vnflow: the command line and (in later issues) the daemon. This is the composition
// root: the only place that wires modules together and talks to the terminal.
//
//   vnflow csar validate PATH... [--json] [--no-digests] [--strict]
//   vnflow csar inspect PATH [--flavour ID] [--json]
//
// Exit status: 0 success (every package valid), 1 a package is not valid, 2 usage error.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "base/base.h"
#include "engine/daemon/cli.h"
#include "engine/daemon/cli_internal.h"
#include "tosca/tosca.h"

namespace vnflow_cli {

namespace json = boost::json;

namespace {

constexpr const char* kUsage =
    "usage: vnflow <command> [options]\n"
    "\n"
    "commands:\n"
    "  csar validate PATH... [--json] [--no-digests] [--strict]\n"
    "      check packages (.csar/.zip files or folders); diagnostics on stderr\n"
    "  csar inspect PATH [--flavour ID] [--json]\n"
    "      show the VNF, its flavours, VDUs, CPs, VLs, aspects, levels and Vnflcm operations\n"
    "  workflow show PATH [--flavour ID] --op OP [--format text|dot|mermaid|seqdiag|json]\n"
    "      the state machine an LCM operation compiles to (hooks + built-in steps)\n"
    "  workflow check PATH [--flavour ID]\n"
    "      compile every LCM operation of a package; located diagnostics on stderr\n"
    "  package onboard PATH | list                      [--db FILE] [--json]\n"
    "      validate a package, compile every operation, store it; prints its id\n"
    "  instance create --package ID [--name N] | list | show ID | delete ID\n"
    "  instance instantiate|heal|scale|terminate|change-ext-conn|modify ID --request FILE.json\n"
    "      queue an LCM operation (SOL003 request body); prints the operation id\n"
    "  op list [--instance ID] [--state S] | show OP | history OP | wait OP | watch OP\n"
    "  op retry|rollback|fail|cancel OP\n"
    "  op replay OP --dry-run [--package PATH] | --from STATE\n"
    "  vim register --name N [--from-env | --cloud NAME | --auth-url URL --username U\n"
    "      --password-file F --project P] [--heat-env FILE] [--default] | list | show | delete\n"
    "      the VIM registry (OpenStack, Kubernetes); secrets sealed at rest, never printed\n"
    "  daemon [--workers N] [--work-dir DIR]\n"
    "      run queued operations; resumes interrupted ones; SIGTERM drains\n"
    "      the database: --db FILE, else $VNFLOW_DB, else ~/.local/share/vnflow/vnflow.db\n"
    "  version\n"
    "\n"
    "options:\n"
    "  --json          one JSON document on stdout instead of text\n"
    "  --no-digests    do not recompute manifest / TOSCA.meta digests\n"
    "  --strict        turn off the named quirks (docs/diagnostics.md, \"Quirks\")\n"
    "  --repeat N      load each package N times and report the median time (benchmarks)\n"
    "\n"
    "exit status: 0 all packages valid, 1 a package is invalid, 2 usage error\n";

struct Args {
  std::vector<std::string> paths;
  bool json = false;
  bool strict = false;
  bool digests = true;
  int repeat = 1;
  std::string flavour;
};

bool parse_args(const std::vector<std::string>& argv, size_t start, Args& a, std::string& err) {
  for (size_t i = start; i < argv.size(); ++i) {
    const std::string& s = argv[i];
    if (s == "--json") {
      a.json = true;
    } else if (s == "--strict") {
      a.strict = true;
    } else if (s == "--no-digests") {
      a.digests = false;
    } else if (s == "--flavour" || s == "--flavor") {
      if (i + 1 >= argv.size()) {
        err = s + " needs a flavour id";
        return false;
      }
      a.flavour = argv[++i];
    } else if (s == "--repeat") {
      if (i + 1 >= argv.size()) {
        err = "--repeat needs a count";
        return false;
      }
      try {
        a.repeat = std::stoi(argv[++i]);
      } catch (...) {
        a.repeat = 0;
      }
      if (a.repeat < 1 || a.repeat > 100000) {
        err = "--repeat needs a count between 1 and 100000";
        return false;
      }
    } else if (s.size() > 1 && s[0] == '-') {
      err = "unknown option \"" + s + "\"";
      return false;
    } else {
      a.paths.push_back(s);
    }
  }
  return true;
}

tosca::LoadOptions options_from(const Args& a) {
  tosca::LoadOptions o;
  o.verify_digests = a.digests;
  if (a.strict) {
    o.quirk_artifact_path_from_root = false;
  }
  return o;
}

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

void print_diags(const base::Diagnostics& diags) {
  for (const auto& d : diags.sorted()) {
    std::cerr << base::to_string(d) << "\n";
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int cmd_validate(const Args& a) {
  if (a.paths.empty()) {
    std::cerr << "vnflow csar validate: no package given\n" << kUsage;
    return 2;
  }
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
      pkg = tosca::load_package(path, opts, d);
      auto t1 = std::chrono::steady_clock::now();
      times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      if (r == 0)
        diags = std::move(d);
    }
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
      json::array ds;
      for (const auto& d : diags.sorted())
        ds.push_back(diag_json(d));
      o["diagnostics"] = std::move(ds);
      packages.push_back(std::move(o));
    } else {
      print_diags(diags);
      std::cout << (valid ? "valid   " : "invalid ") << path;
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
    std::cout << json::serialize(doc) << "\n";
  }
  return all_valid ? 0 : 1;
}

std::string artifact_text(const tosca::Artifact& a) {
  std::string s = a.name;
  if (!a.type.empty())
    s += " (" + a.type + ")";
  if (!a.file.empty())
    s += " -> " + a.file + (a.present ? "" : " [missing]");
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

void print_flavour(const tosca::Flavour& f) {
  std::cout << "\nflavour " << f.id;
  if (!f.description.empty())
    std::cout << ": " << f.description;
  std::cout << "\n  file: " << f.file << "\n  vnf node: " << f.vnf_node << " (" << f.vnf_type
            << ")\n";
  std::cout << "  vdus:\n";
  for (const auto& v : f.vdus) {
    std::cout << "    " << v.name << " (" << v.type << ") instances " << v.min_instances << ".."
              << v.max_instances;
    if (v.sw_image) {
      std::cout << ", image " << artifact_text(*v.sw_image);
    } else if (!v.sw_image_name.empty()) {
      std::cout << ", image " << v.sw_image_name;
    }
    if (!v.storages.empty()) {
      std::cout << ", storage";
      for (const auto& s : v.storages)
        std::cout << " " << s;
    }
    std::cout << "\n";
  }
  std::cout << "  connection points:\n";
  for (const auto& c : f.cps) {
    std::cout << "    " << c.name << " on " << c.virtual_binding << " -> "
              << (!c.virtual_link.empty()    ? c.virtual_link
                  : !c.external_link.empty() ? "external " + c.external_link
                                             : std::string("(unbound)"))
              << "\n";
  }
  std::cout << "  virtual links:\n";
  for (const auto& v : f.vls) {
    std::cout << "    " << v.name;
    for (const auto& p : v.layer_protocols)
      std::cout << " " << p;
    std::cout << "\n";
  }
  if (!f.storages.empty()) {
    std::cout << "  storage:\n";
    for (const auto& s : f.storages)
      std::cout << "    " << s.name << " " << s.size << "\n";
  }
  if (!f.aspects.empty()) {
    std::cout << "  scaling aspects:\n";
    for (const auto& a : f.aspects) {
      std::cout << "    " << a.id << " max_scale_level " << a.max_scale_level;
      for (const auto& [vdu, deltas] : a.vdu_deltas) {
        for (const auto& [d, n] : deltas)
          std::cout << ", " << vdu << " +" << n << " per " << d;
      }
      std::cout << "\n";
    }
  }
  if (!f.levels.empty()) {
    std::cout << "  instantiation levels (default " << f.default_level << "):\n";
    for (const auto& l : f.levels) {
      std::cout << "    " << l.id;
      for (const auto& [vdu, n] : l.vdu_instances)
        std::cout << " " << vdu << "=" << n;
      for (const auto& [asp, n] : l.scale_info)
        std::cout << " " << asp << "@" << n;
      std::cout << "\n";
    }
  }
  std::cout << "  vnflcm operations:\n";
  if (f.lcm_operations.empty())
    std::cout << "    (none)\n";
  for (const auto& op : f.lcm_operations) {
    std::cout << "    " << op.name << " -> ";
    if (!op.implementation) {
      std::cout << "(no implementation)\n";
      continue;
    }
    if (op.implementation->primary_artifact) {
      std::cout << artifact_text(*op.implementation->primary_artifact);
    } else {
      std::cout << op.implementation->primary;
    }
    for (const auto& d : op.implementation->dependencies)
      std::cout << " + " << d;
    std::cout << "\n";
  }
}

int cmd_inspect(const Args& a) {
  if (a.paths.size() != 1) {
    std::cerr << "vnflow csar inspect: give exactly one package\n" << kUsage;
    return 2;
  }
  base::Diagnostics diags;
  auto pkg = tosca::load_package(a.paths[0], options_from(a), diags);
  if (!a.json)
    print_diags(diags);
  if (!pkg) {
    if (a.json) {
      json::object doc;
      json::array ds;
      for (const auto& d : diags.sorted())
        ds.push_back(diag_json(d));
      doc["valid"] = false;
      doc["diagnostics"] = std::move(ds);
      std::cout << json::serialize(doc) << "\n";
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
      known += (known.empty() ? "" : ", ") + f.id;
    std::cerr << "vnflow csar inspect: no flavour \"" << a.flavour << "\" (flavours: " << known
              << ")\n";
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
    json::array ds;
    for (const auto& d : diags.sorted())
      ds.push_back(diag_json(d));
    doc["diagnostics"] = std::move(ds);
    std::cout << json::serialize(doc) << "\n";
    return valid ? 0 : 1;
  }
  std::cout << "package " << pkg->display_name << (valid ? "" : "  (has errors)") << "\n";
  std::cout << "  digest: sha256:" << pkg->digest << "\n";
  std::cout << "  entry: " << pkg->entry_definitions << " (" << pkg->tosca_version << ")\n";
  for (const auto& [k, v] : pkg->template_metadata)
    std::cout << "  " << k << ": " << v << "\n";
  std::cout << "vnf " << pkg->vnf.product_name << " " << pkg->vnf.software_version << " by "
            << pkg->vnf.provider << "\n";
  std::cout << "  descriptor: " << pkg->vnf.descriptor_id << " version "
            << pkg->vnf.descriptor_version << "\n  node type: " << pkg->vnf.node_type << "\n";
  std::cout << "  flavours:";
  for (const auto& f : pkg->flavours)
    std::cout << " " << f.id;
  std::cout << "\n";
  for (const auto* f : flavours)
    print_flavour(*f);
  return valid ? 0 : 1;
}

}  // namespace

int run(const std::vector<std::string>& argv) {
  if (argv.size() < 2 || argv[1] == "--help" || argv[1] == "-h" || argv[1] == "help") {
    std::cout << kUsage;
    return argv.size() < 2 ? 2 : 0;
  }
  if (argv[1] == "version" || argv[1] == "--version") {
    std::cout << "vnflow 0.1.0\n";
    return 0;
  }
  if (argv[1] == "workflow")
    return cmd_workflow(argv);
  if (argv[1] == "package" || argv[1] == "instance" || argv[1] == "op" || argv[1] == "vim" ||
      argv[1] == "daemon")
    return cmd_engine(argv);
  if (argv[1] == "csar" && argv.size() >= 3) {
    Args a;
    std::string err;
    if (!parse_args(argv, 3, a, err)) {
      std::cerr << "vnflow csar " << argv[2] << ": " << err << "\n";
      return 2;
    }
    if (argv[2] == "validate")
      return cmd_validate(a);
    if (argv[2] == "inspect")
      return cmd_inspect(a);
  }
  std::cerr << "vnflow: unknown command";
  for (size_t i = 1; i < argv.size() && i < 3; ++i)
    std::cerr << " \"" << argv[i] << "\"";
  std::cerr << "\n" << kUsage;
  return 2;
}

}  // namespace vnflow_cli

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  try {
    return vnflow_cli::run(args);
  } catch (const std::exception& e) {
    // Never a crash: an escaped exception is a bug, reported as such.
    std::cerr << "vnflow: internal error: " << e.what() << "\n";
    return 3;
  }
}
