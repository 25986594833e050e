// vnflow action list|show: the action reference, from the catalog workflows compile against
// (the same rendering docs/actions.md is generated from).
#include <iostream>
#include <vector>

#include "base/base.h"
#include "cli/cli_internal.h"
#include "workflows/workflows.h"

namespace vnflow_cli {

namespace {

const std::vector<CommandSpec>& action_commands() {
  static const std::vector<CommandSpec> specs = {
      {"action list",
       "usage: vnflow action list [--json | --markdown]\n"
       "\n"
       "The actions a workflow state may run: name, what it talks to, what it does.\n"
       "  --json        every action's whole entry (inputs, outputs, ...) as JSON\n"
       "  --markdown    the whole reference, as docs/actions.md holds it\n",
       {},
       {"--json", "--markdown"},
       0,
       0},
      {"action show",
       "usage: vnflow action show NAME [--json]\n"
       "\n"
       "One action: its inputs (types, which are required, notes), outputs, what a\n"
       "re-dispatch after a daemon's death does, its error classes and an example state.\n"
       "  --json        as JSON\n",
       {},
       {"--json"},
       1,
       1},
  };
  return specs;
}

}  // namespace

int cmd_action(const std::vector<std::string>& argv) {
  int status = 2;
  const CommandSpec* spec = find_subcommand(argv, action_commands(), status);
  if (spec == nullptr)
    return status;
  Opts o;
  if (auto st = parse_command(argv, 3, *spec, o))
    return *st;
  const workflows::ActionCatalog& c = workflows::ActionCatalog::builtin();
  bool as_json = o.flags.count("--json") > 0;
  if (spec->words == "action list") {
    if (as_json && o.flags.count("--markdown") > 0)
      return usage_error(*spec, "--json and --markdown: one of them");
    if (o.flags.count("--markdown") > 0) {
      std::cout << workflows::action_reference_markdown(c);
    } else if (as_json) {
      boost::json::array all;
      for (const auto& n : c.names())
        all.push_back(workflows::action_json(*c.find(n)));
      std::cout << json_text(all) << "\n";
    } else {
      std::cout << workflows::action_list_text(c);
    }
    return 0;
  }
  const std::string& name = o.pos[0];
  const workflows::ActionSpec* a = c.find(name);
  if (a == nullptr) {
    std::cerr << "vnflow action show: no action \"" << printable(name) << "\"";
    if (std::string hint = base::closest_match(name, c.names()); !hint.empty())
      std::cerr << "; did you mean \"" << hint << "\"?";
    std::cerr << " (vnflow action list)\n";
    return 1;
  }
  if (as_json)
    std::cout << json_text(workflows::action_json(*a)) << "\n";
  else
    std::cout << workflows::action_text(*a);
  return 0;
}

}  // namespace vnflow_cli
