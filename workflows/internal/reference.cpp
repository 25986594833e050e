// The action reference: the catalog (workflows/builtin/actions.yaml) rendered for authors,
// as `vnflow action list|show` prints it and as docs/actions.md is generated (a test keeps
// the file equal to this rendering).
#include <algorithm>
#include <cctype>
#include <sstream>
#include <string>

#include <boost/json.hpp>

#include "workflows/workflows.h"

namespace workflows {

namespace {

std::string type_of(const Field& f) {
  return f.type != nullptr ? to_string(*f.type) : "any";
}

// What a re-dispatch after a daemon's death does: the catalog's word for an action with side
// effects.
std::string idempotency(const ActionSpec& a) {
  if (a.side_effects)
    return "side effects outside vnflow, so a state needs a `timeout`; the dispatch is "
           "committed before the call, and a call cut short by a daemon's death is dispatched "
           "again with the same idempotency key: " +
           a.redispatch;
  return "no side effect outside vnflow's own records: runs again freely";
}

std::string escape_cell(std::string s) {
  for (std::string::size_type at = 0; (at = s.find('|', at)) != std::string::npos; at += 2)
    s.replace(at, 1, "\\|");
  return s;
}

// The notes on inputs: exactly-one groups and shell script inputs.
std::vector<std::string> input_notes(const ActionSpec& a) {
  std::vector<std::string> out;
  for (const auto& g : a.one_of) {
    std::string names;
    for (const auto& n : g)
      names += (names.empty() ? "" : ", ") + n;
    out.push_back("exactly one of: " + names);
  }
  for (const auto& n : a.shell_text) {
    const Field* f = nullptr;
    for (const auto& in : a.inputs)
      f = in.name == n ? &in : f;
    bool argv = f != nullptr && f->type != nullptr && f->type->kind == Type::Kind::kList;
    out.push_back(
        "`" + n + "`" +
        (argv ? ": when its first item is a shell, the script after -c" : ": a shell runs it") +
        "; a request value there is quoted with shellquote() or passed in env (W0043)");
  }
  return out;
}

// A state running the action: its required inputs, and the first of each exactly-one
// group, as placeholders of their type.
std::string example(const ActionSpec& a) {
  std::string out = "my_step:\n  action: " + a.name + "\n";
  std::vector<const Field*> shown;
  for (const auto& f : a.inputs) {
    bool first_of_group = std::any_of(a.one_of.begin(), a.one_of.end(), [&](const auto& g) {
      return !g.empty() && g.front() == f.name;
    });
    if (f.required || first_of_group)
      shown.push_back(&f);
  }
  if (!shown.empty()) {
    out += "  with:\n";
    for (const Field* f : shown)
      out += "    " + f->name + ": ...  # " + type_of(*f) + "\n";
  }
  if (a.side_effects)
    out += "  timeout: 5m\n";
  out += "  next: done\n";
  return out;
}

// GitHub's anchor of a heading: lower case, punctuation dropped.
std::string anchor(std::string_view heading) {
  std::string out;
  for (char ch : heading) {
    if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-')
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    else if (ch == ' ')
      out += '-';
  }
  return out;
}

void fields_text(std::ostringstream& o, const std::vector<Field>& fs) {
  size_t w = 0, tw = 0;
  for (const auto& f : fs) {
    w = std::max(w, f.name.size() + (f.required ? 0 : 1));
    tw = std::max(tw, type_of(f).size());
  }
  for (const auto& f : fs) {
    std::string n = f.name + (f.required ? "" : "?"), t = type_of(f);
    o << "  " << n << std::string(w - n.size() + 2, ' ') << t;
    if (!f.doc.empty())
      o << std::string(tw - t.size() + 2, ' ') << f.doc;
    o << "\n";
  }
}

void fields_markdown(std::ostringstream& o, const std::vector<Field>& fs, bool inputs) {
  o << "| name | type | " << (inputs ? "required" : "always set") << " | notes |\n"
    << "|---|---|---|---|\n";
  for (const auto& f : fs)
    o << "| `" << f.name << "` | `" << type_of(f) << "` | " << (f.required ? "yes" : "no") << " | "
      << escape_cell(f.doc) << " |\n";
}

}  // namespace

std::string action_list_text(const ActionCatalog& c) {
  std::ostringstream o;
  size_t w = 0;
  for (const auto& n : c.names())
    w = std::max(w, n.size());
  for (const auto& n : c.names()) {
    const ActionSpec* a = c.find(n);
    o << n << std::string(w - n.size() + 2, ' ') << a->participant
      << std::string(a->participant.size() < 8 ? 8 - a->participant.size() : 1, ' ')
      << a->description << "\n";
  }
  return o.str();
}

std::string action_text(const ActionSpec& a) {
  std::ostringstream o;
  o << a.name << ": " << a.description << "\n";
  o << "talks to: " << a.participant << "\n";
  o << "re-dispatch: " << idempotency(a) << "\n";
  o << "inputs:\n";
  if (a.inputs.empty())
    o << "  (none)\n";
  fields_text(o, a.inputs);
  for (const auto& n : input_notes(a))
    o << "  " << n << "\n";
  o << "outputs (${states.<state>.<output>} in later states):\n";
  if (a.outputs.empty())
    o << "  (none)\n";
  fields_text(o, a.outputs);
  o << "errors: a failure carries one class of:";
  for (const auto& cls : error_classes())
    o << " " << cls;
  o << " (a state's retry policy names the ones it retries)\n";
  o << "example:\n";
  std::istringstream ex(example(a));
  for (std::string line; std::getline(ex, line);)
    o << "  " << line << "\n";
  return o.str();
}

json::value action_json(const ActionSpec& a) {
  auto fields = [](const std::vector<Field>& fs) {
    json::array out;
    for (const auto& f : fs) {
      json::object x{{"name", f.name}, {"type", type_of(f)}, {"required", f.required}};
      if (!f.doc.empty())
        x["doc"] = f.doc;
      out.push_back(std::move(x));
    }
    return out;
  };
  json::array one_of;
  for (const auto& g : a.one_of) {
    json::array names;
    for (const auto& n : g)
      names.push_back(json::string(n));
    one_of.push_back(std::move(names));
  }
  json::array shell;
  for (const auto& n : a.shell_text)
    shell.push_back(json::string(n));
  json::array classes;
  for (const auto& c : error_classes())
    classes.push_back(json::string(c));
  return json::object{{"name", a.name},
                      {"description", a.description},
                      {"participant", a.participant},
                      {"side_effects", a.side_effects},
                      {"redispatch", idempotency(a)},
                      {"inputs", fields(a.inputs)},
                      {"one_of", std::move(one_of)},
                      {"shell_text", std::move(shell)},
                      {"outputs", fields(a.outputs)},
                      {"error_classes", std::move(classes)},
                      {"example", example(a)}};
}

std::string action_reference_markdown(const ActionCatalog& c) {
  std::ostringstream o;
  o << "# Actions\n\n"
    << "<!-- Generated by `vnflow action list --markdown` from workflows/builtin/actions.yaml;\n"
    << "     tests/cli/cli_test.sh fails when this file differs. Do not edit by hand. -->\n\n"
    << "An action state runs one action (`action:` and its inputs under `with:`); its outputs "
       "are\n`${states.<state>.<output>}` in later states. `vnflow action list` and `vnflow "
       "action show NAME`\nprint the same. A failure carries one error class:";
  for (const auto& cls : error_classes())
    o << " `" << cls << "`";
  o << "\n(docs/workflow-language.md, \"Retries\").\n\n| action | talks to | what it does |\n"
    << "|---|---|---|\n";
  for (const auto& n : c.names()) {
    const ActionSpec* a = c.find(n);
    o << "| [`" << n << "`](#" << anchor(n) << ") | " << escape_cell(a->participant) << " | "
      << escape_cell(a->description) << " |\n";
  }
  for (const auto& n : c.names()) {
    const ActionSpec& a = *c.find(n);
    std::string d = a.description;
    if (!d.empty())
      d[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(d[0])));
    o << "\n## " << a.name << "\n\n" << d << ".\n\n";
    o << "- Talks to: " << a.participant << "\n";
    o << "- Re-dispatch: " << idempotency(a) << "\n";
    for (const auto& note : input_notes(a))
      o << "- Inputs: " << note << "\n";
    o << "\nInputs:\n\n";
    if (a.inputs.empty())
      o << "(none)\n";
    else
      fields_markdown(o, a.inputs, true);
    o << "\nOutputs:\n\n";
    if (a.outputs.empty())
      o << "(none)\n";
    else
      fields_markdown(o, a.outputs, false);
    o << "\nExample:\n\n```yaml\n" << example(a) << "```\n";
  }
  return o.str();
}

}  // namespace workflows
