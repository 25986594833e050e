// What the command groups of the vnflow CLI share: option parsing with per-command usage,
// escaping for the terminal, and the command handlers (one file per command group).
#pragma once

#include <cstddef>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/fwd.hpp>

#include "base/base.h"
#include "tosca/tosca.h"

namespace engine {
class Store;
}

namespace vnflow_cli {

// ---------------------------------------------------------------------------------------
// Options

// One command ("op list", "daemon") and what it accepts. Anything else that starts with
// "-" is refused (exit 2) with a "did you mean" hint; --help and -h print `usage` on stdout
// and exit 0 before anything is opened.
struct CommandSpec {
  std::string words;                // "op list": what follows "vnflow"
  std::string usage;                // "usage: vnflow op list ...\n" and what the options do
  std::vector<std::string> valued;  // options taking a value ("--db")
  std::vector<std::string> flags;   // options without one ("--json")
  size_t min_pos = 0;               // positional arguments
  size_t max_pos = std::numeric_limits<size_t>::max();
};

struct Opts {
  std::vector<std::string> pos;  // positional words after the command's words
  std::map<std::string, std::string> kv;
  std::set<std::string> flags;
  bool has(const std::string& k) const { return kv.count(k) > 0 || flags.count(k) > 0; }
  std::string get(const std::string& k, const std::string& otherwise = "") const {
    auto it = kv.find(k);
    return it != kv.end() ? it->second : otherwise;
  }
};

// Parses argv[start..] for `spec` ("--opt VALUE", "--opt=VALUE", flags, "--" ends the
// options). Returns std::nullopt when the command should run; otherwise the exit status to
// return: 0 after --help/-h (usage on stdout), 2 after a usage error (on stderr).
std::optional<int> parse_command(const std::vector<std::string>& argv, size_t start,
                                 const CommandSpec& spec, Opts& o);
// Prints "vnflow WORDS: MESSAGE" and the command's synopsis on stderr; returns 2.
int usage_error(const CommandSpec& spec, std::string_view message);
// --trust FILE, --signing-cert FILE and --require-signature (csar validate, package
// onboard; docs/security.md) as SOL004 options. false after a usage error (printed).
bool signature_options(const CommandSpec& spec, const Opts& o, tosca::SignatureOptions& out);
// `vnflow GROUP SUB ...`: the spec of SUB among `subs`. Without SUB, or with an unknown
// one, prints the group's usage (stdout and 0 for --help/-h, stderr and 2 otherwise), sets
// `status` and returns nullptr.
const CommandSpec* find_subcommand(const std::vector<std::string>& argv,
                                   const std::vector<CommandSpec>& subs, int& status);
// A strictly positive decimal integer no larger than `max`.
std::optional<long long> parse_positive(std::string_view text, long long max);
// "did you mean" for a mistyped word: base::closest_match, or a candidate that differs by
// one swap of neighbouring characters ("--bd" -> "--db"); "" if none.
std::string suggest(std::string_view word, const std::vector<std::string>& candidates);

// ---------------------------------------------------------------------------------------
// Output

// `s` safe to print on a terminal on one line: C0 controls (newline and ESC too), DEL and
// C1 controls become \n, \r, \t, \xHH or \u00HH; bytes that are not UTF-8 become \xHH.
// Every human (non-JSON) output of names, messages and errors goes through it.
std::string printable(std::string_view s);
// Same, keeping newlines and tabs: for multi-line text (rendered workflows).
std::string printable_text(std::string_view s);
// Compact JSON for stdout: as boost::json::serialize, with DEL and C1 controls escaped as
// \u00HH too (the serializer escapes only C0), so no terminal control reaches the screen.
std::string json_text(const boost::json::value& v);
// Same for JSON text made elsewhere.
std::string json_safe(std::string_view serialized);
// Diagnostics on stderr, one per line, located, with their fields made printable.
void print_diags(const base::Diagnostics& diags);
// "vnflow: MESSAGE" on stderr; returns 1.
int fail(const base::Status& s);

// ---------------------------------------------------------------------------------------
// Command groups

int cmd_workflow(const std::vector<std::string>& argv);  // cli_workflow.cpp
int cmd_action(const std::vector<std::string>& argv);    // cli_action.cpp
// cli_engine.cpp: package, instance, op, vim, daemon (the commands on a database)
int cmd_engine(const std::vector<std::string>& argv);
// cli_vim.cpp: the specs of vim register|list|show|delete and the command itself (called
// by cmd_engine with parsed options and the open store).
const std::vector<CommandSpec>& vim_commands();
int cmd_vim(const CommandSpec& spec, const Opts& o, engine::Store& store);
// cli_subscription.cpp: subscription list|show|delete, as vim's.
const std::vector<CommandSpec>& subscription_commands();
int cmd_subscription(const CommandSpec& spec, const Opts& o, engine::Store& store);

}  // namespace vnflow_cli
