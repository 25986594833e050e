// vnflow workflow show|check: the compiled state machines of a package.
#include <fstream>
#include <iostream>
#include <iterator>

#include "engine/daemon/cli_internal.h"
#include "workflows/workflows.h"

namespace vnflow_cli {

namespace {

void print_diags(const base::Diagnostics& diags) {
  for (const auto& d : diags.sorted())
    std::cerr << base::to_string(d) << "\n";
}

}  // namespace

// vnflow workflow show PATH [--flavour ID] --op OP [--format text|dot|mermaid|seqdiag|json]
// vnflow workflow check PATH [--flavour ID]      (every operation)
int cmd_workflow(const std::vector<std::string>& argv) {
  if (argv.size() < 4 || (argv[2] != "show" && argv[2] != "check")) {
    std::cerr << "usage: vnflow workflow show PATH [--flavour ID] --op OP [--format FMT]\n"
                 "       vnflow workflow check PATH [--flavour ID]\n";
    return 2;
  }
  bool check = argv[2] == "check";
  std::string path = argv[3], flavour, op;
  workflows::Format format = workflows::Format::kText;
  for (size_t i = 4; i < argv.size(); ++i) {
    const std::string& s = argv[i];
    auto need = [&](const char* what) -> const std::string* {
      if (i + 1 >= argv.size()) {
        std::cerr << "vnflow workflow: " << s << " needs " << what << "\n";
        return nullptr;
      }
      return &argv[++i];
    };
    if (s == "--flavour" || s == "--flavor") {
      const std::string* v = need("a flavour id");
      if (v == nullptr)
        return 2;
      flavour = *v;
    } else if (s == "--op") {
      const std::string* v = need("an operation");
      if (v == nullptr)
        return 2;
      op = *v;
    } else if (s == "--format") {
      const std::string* v = need("text, dot, mermaid, seqdiag or json");
      if (v == nullptr)
        return 2;
      auto f = workflows::parse_format(*v);
      if (!f) {
        std::cerr << "vnflow workflow: unknown format \"" << *v
                  << "\" (text, dot, mermaid, seqdiag, json)\n";
        return 2;
      }
      format = *f;
    } else {
      std::cerr << "vnflow workflow: unknown option \"" << s << "\"\n";
      return 2;
    }
  }
  if (!check && op.empty()) {
    std::cerr << "vnflow workflow show: --op is required (instantiate, terminate, heal, scale, "
                 "change_ext_conn, modify_info)\n";
    return 2;
  }
  base::Diagnostics diags;
  bool yaml_file = path.size() > 5 && (path.substr(path.size() - 5) == ".yaml" ||
                                       path.substr(path.size() - 4) == ".yml");
  if (yaml_file) {
    // One workflow file on its own, as the `<op>_end` hook of an operation.
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::cerr << "vnflow workflow: cannot read \"" << path << "\"\n";
      return 1;
    }
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (op.empty())
      op = "instantiate";
    const auto* info = workflows::find_operation(op);
    if (info == nullptr) {
      std::cerr << "vnflow workflow: unknown operation \"" << op << "\"\n";
      return 2;
    }
    auto m = workflows::compile_file(path, text, op, info->hook + "_end", diags);
    print_diags(diags);
    if (m == nullptr)
      return 1;
    if (check)
      std::cout << "ok      " << path << " (" << m->states.size() << " states)\n";
    else
      std::cout << workflows::render(*m, format);
    return 0;
  }
  auto pkg = tosca::load_package(path, tosca::LoadOptions{}, diags);
  if (pkg == nullptr || diags.has_errors()) {
    print_diags(diags);
    std::cerr << "vnflow workflow: the package is not valid\n";
    return 1;
  }
  if (check) {
    int failed = 0;
    for (const auto& o : workflows::operations()) {
      base::Diagnostics d;
      auto m = workflows::compile(*pkg, {o.name, flavour}, d);
      print_diags(d);
      std::cout << (m ? "ok      " : "invalid ") << o.name;
      if (m)
        std::cout << " (" << m->states.size() << " states)";
      std::cout << "\n";
      failed += m ? 0 : 1;
    }
    return failed == 0 ? 0 : 1;
  }
  auto m = workflows::compile(*pkg, {op, flavour}, diags);
  print_diags(diags);
  if (m == nullptr)
    return 1;
  std::cout << workflows::render(*m, format);
  return 0;
}

}  // namespace vnflow_cli
