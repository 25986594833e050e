// vnflow workflow show|check: the compiled state machines of a package.
#include <fstream>
#include <iostream>
#include <iterator>
#include <vector>

#include "cli/cli_internal.h"
#include "workflows/workflows.h"

namespace vnflow_cli {

namespace {

const std::vector<CommandSpec>& workflow_commands() {
  static const std::vector<CommandSpec> specs = {
      {"workflow show",
       "usage: vnflow workflow show PATH --op OP [--flavour ID] [--format FMT]\n"
       "\n"
       "The state machine an LCM operation of a package compiles to (its hooks around the\n"
       "built-in steps). PATH is a package, or one workflow file (.yaml) compiled as the\n"
       "operation's <op>_end hook.\n"
       "\n"
       "  --op OP         instantiate, terminate, heal, scale, change_ext_conn, modify_info\n"
       "  --flavour ID    the deployment flavour (default: the first)\n"
       "  --format FMT    text (default), dot, mermaid, seqdiag, plantuml or json\n",
       {"--op", "--flavour", "--flavor", "--format"},
       {},
       1,
       1},
      {"workflow check",
       "usage: vnflow workflow check PATH [--flavour ID] [--op OP]\n"
       "\n"
       "Compiles every LCM operation of a package, or one workflow file (.yaml) as the\n"
       "<op>_end hook of --op (default instantiate); located diagnostics on stderr.\n"
       "exit status: 0 all compile, 1 one does not, 2 usage error\n",
       {"--flavour", "--flavor", "--op"},
       {},
       1,
       1},
  };
  return specs;
}

// A rendering for the terminal: names and descriptions from the package made printable
// (JSON keeps its meaning: only \\u escapes are added).
std::string rendered(const workflows::Machine& m, workflows::Format format) {
  std::string text = workflows::render(m, format);
  return format == workflows::Format::kJson ? json_safe(text) : printable_text(text);
}

}  // namespace

// vnflow workflow show PATH [--flavour ID] --op OP [--format
// text|dot|mermaid|seqdiag|plantuml|json] vnflow workflow check PATH [--flavour ID]      (every
// operation)
int cmd_workflow(const std::vector<std::string>& argv) {
  int status = 2;
  const CommandSpec* spec = find_subcommand(argv, workflow_commands(), status);
  if (spec == nullptr)
    return status;
  Opts o;
  if (auto st = parse_command(argv, 3, *spec, o))
    return *st;
  bool check = spec->words == "workflow check";
  std::string path = o.pos[0];
  std::string flavour = o.get("--flavour", o.get("--flavor"));
  std::string op = o.get("--op");
  workflows::Format format = workflows::Format::kText;
  if (o.kv.count("--format")) {
    auto f = workflows::parse_format(o.kv.at("--format"));
    if (!f)
      return usage_error(*spec, "unknown format \"" + o.kv.at("--format") +
                                    "\" (text, dot, mermaid, seqdiag, plantuml, json)");
    format = *f;
  }
  if (!check && op.empty())
    return usage_error(*spec,
                       "--op is required (instantiate, terminate, heal, scale, "
                       "change_ext_conn, modify_info)");
  base::Diagnostics diags;
  bool yaml_file = path.size() > 5 && (path.substr(path.size() - 5) == ".yaml" ||
                                       path.substr(path.size() - 4) == ".yml");
  if (yaml_file) {
    // One workflow file on its own, as the `<op>_end` hook of an operation.
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::cerr << "vnflow workflow: cannot read \"" << printable(path) << "\"\n";
      return 1;
    }
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (op.empty())
      op = "instantiate";
    const auto* info = workflows::find_operation(op);
    if (info == nullptr) {
      return usage_error(*spec, "unknown operation \"" + op + "\"");
    }
    // A call names a file relative to this one's folder (resolved and kept inside it by the
    // compiler).
    std::string dir =
        path.rfind('/') == std::string::npos ? "" : path.substr(0, path.rfind('/') + 1);
    workflows::FileReader reader = [dir](const std::string& rel) -> base::Result<std::string> {
      std::ifstream f(dir + rel, std::ios::binary);
      if (!f)
        return base::Status::NotFound("cannot read \"" + printable(dir + rel) + "\"");
      std::string t;
      char buf[65536];
      while (f.read(buf, sizeof buf) || f.gcount() > 0) {
        t.append(buf, static_cast<size_t>(f.gcount()));
        if (t.size() > (16u << 20))
          return base::Status::InvalidArgument("\"" + printable(dir + rel) +
                                               "\" is larger than 16 MiB");
      }
      return t;
    };
    auto m = workflows::compile_file(path, text, op, info->hook + "_end", diags, reader);
    print_diags(diags);
    if (m == nullptr)
      return 1;
    if (check)
      std::cout << "ok      " << printable(path) << " (" << m->states.size() << " states)\n";
    else
      std::cout << rendered(*m, format);
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
    for (const auto& info : workflows::operations()) {
      base::Diagnostics d;
      auto m = workflows::compile(*pkg, {info.name, flavour}, d);
      print_diags(d);
      std::cout << (m ? "ok      " : "invalid ") << printable(info.name);
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
  std::cout << rendered(*m, format);
  return 0;
}

}  // namespace vnflow_cli
