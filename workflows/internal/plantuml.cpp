// The PlantUML renderer: an operation's machine as a sequence diagram in the form of the
// seeds' own diagrams (seed 004's cluster-create.puml): the client's request, then each state
// as a call from vnflow to the participant its action talks to, with the participants
// drawn from the actions (the VNF's VMs, Heat, the VIM registry, each REST API a package
// calls, the instance record, the engine host), fan-outs as `loop` groups, retries as
// `loop` groups inside them, choices as `alt` groups, the built-in steps and each hook as
// `==` sections, failure paths and compensations as notes.
#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "workflows/internal/render.h"
#include "workflows/workflows.h"

namespace workflows {

namespace {

// A package's text (names, descriptions, expressions) in a diagram: one line (PlantUML is
// line-based: nothing in it starts another command), at most 160 bytes (cut on a character
// boundary), and inert. PlantUML expands %functions anywhere in a line (%getenv("HOME"),
// %load_json), embeds <img:FILE-or-URL> (a reader's local file, or a fetch), and links
// [[URL]]: those characters are written as entities, which it shows as they are. A '"'
// would end a quoted participant name: it becomes '.
std::string label(std::string s) {
  if (s.size() > 160) {
    size_t cut = 157;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80)
      --cut;
    s = s.substr(0, cut) + "...";
  }
  std::string out;
  for (char c : s) {
    if (c == '\n' || c == '\r' || c == '\t')
      out += ' ';
    else if (c == '%')
      out += "&#37;";
    else if (c == '<')
      out += "&#60;";
    else if (c == '[')
      out += "&#91;";
    else if (c == '"')
      out += '\'';
    else
      out += c;
  }
  return out;
}

// The REST API an http.request calls, named for the reader: a literal URL's host, or the
// last name of the expression the URL starts with ("${request.additionalParams.tumblebug.url}
// /ns/..." is tumblebug), or the VIM's API with vim_id.
std::string http_participant(const State& s) {
  const json::value& with = s.with.source();
  const json::object* w = with.if_object();
  if (w == nullptr)
    return "REST API";
  if (const json::value* v = w->if_contains("vim_id"); v != nullptr && !v->is_null())
    return "VIM API";
  const json::value* u = w->if_contains("url");
  if (u == nullptr || !u->is_string())
    return "REST API";
  std::string url(u->get_string());
  if (size_t sep = url.find("://"); sep != std::string::npos && url.rfind("${", 0) != 0) {
    std::string host = url.substr(sep + 3);
    host = host.substr(0, host.find_first_of("/?"));
    return host.empty() ? "REST API" : host;
  }
  if (url.rfind("${", 0) == 0) {
    std::string expr = url.substr(2, url.find('}') == std::string::npos ? 0 : url.find('}') - 2);
    std::vector<std::string> names;
    std::string cur;
    for (char c : expr) {
      if (std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_') {
        cur += c;
      } else {
        if (!cur.empty())
          names.push_back(cur);
        cur.clear();
        if (c != '.')
          break;  // a call or an operator: the path so far names it
      }
    }
    if (!cur.empty())
      names.push_back(cur);
    while (!names.empty() && (names.back() == "url" || names.back() == "endpoint" ||
                              names.back() == "base_url" || names.back() == "api_url"))
      names.pop_back();
    if (!names.empty() && names.back() != "additionalParams" && names.back() != "request")
      return names.back();
  }
  return "REST API";
}

std::string who(const State& s) {
  if (s.kind == StateKind::kAction && s.action == "http.request")
    return http_participant(s);
  return participant_of(s);
}

std::string alias(const std::map<std::string, std::string>& ids, const std::string& p) {
  auto it = ids.find(p);
  return it == ids.end() ? "vnflow" : it->second;
}

std::string retry_text(const RetryPolicy& r) {
  std::string on;
  for (const auto& c : r.on)
    on += (on.empty() ? "" : ", ") + c;
  return "up to " + std::to_string(r.attempts) + " tries on " + on;
}

}  // namespace

std::string render_plantuml(const Machine& m) {
  std::ostringstream o;
  // The states this flavour can reach (no stack template: no Heat steps).
  size_t n = m.states.size();
  const FlavourReach fr = flavour_reach(m);
  const std::vector<int>& fixed = fr.fixed;
  const std::vector<bool>& reach = fr.reach;
  // Participants in order of first use; vnflow's own record is a database, as the seed
  // draws Ladybug's.
  std::vector<std::string> parts;
  for (size_t i = 0; i < n; ++i) {
    if (!reach[i])
      continue;
    const State& s = m.states[i];
    std::string p = who(s);
    if (p != "vnflow" && std::find(parts.begin(), parts.end(), p) == parts.end())
      parts.push_back(p);
  }
  std::map<std::string, std::string> ids;
  o << "@startuml\n";
  o << "header **vnflow** " << label(m.operation)
    << (m.flavour.empty() ? "" : " (flavour " + label(m.flavour) + ")") << "\n";
  o << "title " << label(m.operation) << "\n";
  o << "hide footbox\n";
  o << "participant \"Client (NFVO)\" as client #d1e0ff\n";
  o << "participant \"vnflow\" as vnflow\n";
  for (size_t i = 0; i < parts.size(); ++i) {
    std::string id = "p" + std::to_string(i + 1);
    ids[parts[i]] = id;
    bool db = parts[i].find("vnflow DB") != std::string::npos;
    o << (db ? "database" : "participant") << " \"" << label(parts[i]) << "\" as " << id
      << (db ? "" : " #eeeeee") << "\n";
  }
  o << "skinparam sequence {\nGroupColor DeepSkyBlue\n}\n";
  o << "activate client\n";
  o << "client -> vnflow : " << label(m.operation) << " request\n";
  o << "vnflow --> client : 202, operation STARTING\n";
  o << "activate vnflow\n";

  // Every reachable state once: the main path first (next edges, or the branch a choice
  // always takes), then the others in order.
  // A call's file is drawn inside its call, as a group (a loop for each item) that ends at
  // the entry -1 - call.
  std::vector<bool> seen(n, false);
  std::vector<int> order;
  std::set<int> grouped;
  std::function<void(int)> walk = [&](int i) {
    while (i >= 0 && static_cast<size_t>(i) < n && !seen[static_cast<size_t>(i)]) {
      seen[static_cast<size_t>(i)] = true;
      order.push_back(i);
      const State& s = m.states[static_cast<size_t>(i)];
      if (s.kind == StateKind::kCall && s.body >= 0) {
        grouped.insert(i);
        walk(s.body);
        order.push_back(-1 - i);
      }
      int f = fixed[static_cast<size_t>(i)];
      i = f >= 0 ? f : s.next;
    }
  };
  walk(m.start);
  bool off_path = false;
  for (size_t i = 0; i < n; ++i) {
    if (!seen[i] && reach[i])
      order.push_back(static_cast<int>(i));
  }
  std::string segment;
  for (size_t k = 0; k < order.size(); ++k) {
    if (order[k] < 0) {
      o << "end\n";
      continue;
    }
    const State& s = m.states[static_cast<size_t>(order[k])];
    if (!off_path && !seen[static_cast<size_t>(order[k])]) {
      off_path = true;
      o << "== off the main path (choices, failure paths) ==\n";
      segment.clear();
    } else if (!off_path && s.owner < 0 && s.segment != segment) {
      segment = s.segment;
      bool builtin = segment == m.operation;
      o << "== " << label(segment) << (builtin ? " (built-in steps)" : " (hook)") << " ==\n";
    }
    std::string short_name = s.name.substr(s.segment.size() + 1);
    std::string what = short_name + (s.description.empty() ? "" : ": " + s.description);
    switch (s.kind) {
      case StateKind::kAction: {
        std::string p = alias(ids, who(s));
        if (!s.for_each.empty())
          o << "loop for each " << label(s.as) << " in " << label(s.for_each)
            << (s.parallelism == 1  ? ", one at a time"
                : s.parallelism > 1 ? ", " + std::to_string(s.parallelism) + " at a time"
                                    : ", all at once")
            << "\n";
        if (s.retry.attempts > 1)
          o << "loop " << retry_text(s.retry) << "\n";
        o << "vnflow -> " << p << " : " << label(what) << " (" << label(s.action) << ")\n";
        o << p << " --> vnflow\n";
        if (s.retry.attempts > 1)
          o << "end\n";
        if (!s.for_each.empty())
          o << "end\n";
        if (s.on_failure >= 0)
          o << "note right of vnflow : on failure: "
            << label(m.states[static_cast<size_t>(s.on_failure)].name) << "\n";
        if (s.compensate)
          o << "note right of vnflow : rollback: " << label(s.compensate->action) << "\n";
        break;
      }
      case StateKind::kChoice: {
        if (int f = fixed[static_cast<size_t>(order[k])]; f >= 0) {
          o << "note right of vnflow : " << label(short_name) << ": this flavour always goes to "
            << label(m.states[static_cast<size_t>(f)].name) << "\n";
          break;
        }
        for (size_t c = 0; c < s.choices.size(); ++c) {
          o << (c == 0 ? "alt " : "else ") << label(s.choices[c].condition) << "\n";
          o << "vnflow -> vnflow : " << label(short_name) << ": to "
            << label(s.choices[c].next >= 0 ? m.states[static_cast<size_t>(s.choices[c].next)].name
                                            : std::string("?"))
            << "\n";
        }
        o << (s.choices.empty() ? "alt otherwise" : "else otherwise") << "\n";
        o << "vnflow -> vnflow : " << label(short_name) << ": to "
          << label(s.next >= 0 ? m.states[static_cast<size_t>(s.next)].name : std::string("?"))
          << "\n";
        o << "end\n";
        break;
      }
      case StateKind::kWait:
        o << "vnflow -> vnflow : " << label(what) << " (a durable wait)\n";
        break;
      case StateKind::kCall:
        if (grouped.count(order[k]))
          o << (s.for_each.empty() ? "group "
                                   : "loop for each " + label(s.as) + " in " + label(s.for_each) +
                                         ", one after the other: ")
            << label(short_name) << ": call " << label(s.call) << "\n";
        else
          o << "vnflow -> vnflow : " << label(what) << ": call " << label(s.call) << "\n";
        if (s.on_failure >= 0)
          o << "note right of vnflow : on failure: "
            << label(m.states[static_cast<size_t>(s.on_failure)].name) << "\n";
        break;
      case StateKind::kSucceed:
        if (s.next < 0)
          o << "vnflow -> client : COMPLETED (notification)\n";
        break;
      case StateKind::kFail:
        o << "vnflow -> client : FAILED_TEMP: " << label(what) << "\n";
        break;
    }
  }
  o << "deactivate vnflow\n";
  o << "deactivate client\n";
  o << "@enduml\n";
  return o.str();
}

}  // namespace workflows
