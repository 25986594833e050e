// Machine <-> JSON, and the renderers (text, dot, mermaid, seqdiag; PlantUML: plantuml.cpp).
#include <algorithm>
#include <sstream>

#include <boost/json.hpp>

#include "workflows/internal/expr.h"
#include "workflows/internal/render.h"
#include "workflows/workflows.h"

namespace workflows {

namespace {

// /2: a machine with calls (a daemon of vnflow before them refuses it instead of reading a
// call as something else); /1 otherwise, as before.
constexpr const char* kFormat = "vnflow-machine/1";
constexpr const char* kFormatCalls = "vnflow-machine/2";

std::string name_at(const Machine& m, int i) {
  return i >= 0 && static_cast<size_t>(i) < m.states.size() ? m.states[static_cast<size_t>(i)].name
                                                            : std::string();
}

json::value retry_json(const RetryPolicy& r) {
  json::array on;
  for (const auto& c : r.on)
    on.push_back(json::string(c));
  return json::object{{"attempts", r.attempts},
                      {"backoff_s", r.backoff_s},
                      {"factor", r.factor},
                      {"max_delay_s", r.max_delay_s},
                      {"on", std::move(on)}};
}

std::string str(const json::object& o, std::string_view k) {
  const json::value* v = o.if_contains(k);
  return v != nullptr && v->is_string() ? std::string(v->get_string()) : std::string();
}
double num(const json::object& o, std::string_view k, double dflt) {
  const json::value* v = o.if_contains(k);
  return v != nullptr && v->is_number() ? v->to_number<double>() : dflt;
}

std::string fmt_seconds(double s) {
  std::ostringstream o;
  if (s >= 3600 && static_cast<int64_t>(s) % 3600 == 0)
    o << static_cast<int64_t>(s) / 3600 << "h";
  else if (s >= 60 && static_cast<int64_t>(s) % 60 == 0 && s == static_cast<int64_t>(s))
    o << static_cast<int64_t>(s) / 60 << "m";
  else if (s < 1 && s > 0)
    o << static_cast<int64_t>(s * 1000) << "ms";
  else
    o << s << "s";
  return o.str();
}

// A quoted dot ID; a line break becomes dot's own "\n" (a backslash is escaped, so a label
// shows what it holds).
std::string dot_id(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string mermaid_id(const std::string& s) {
  std::string out;
  for (char c : s)
    out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

std::string one_line(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '"')
      c = c == '\n' ? ' ' : '\'';
  }
  return s;
}

}  // namespace

std::string participant_of(const State& s) {
  if (s.kind != StateKind::kAction)
    return "vnflow";
  const ActionSpec* spec = ActionCatalog::builtin().find(s.action);
  if (spec == nullptr)
    return "vnflow";
  if (spec->participant == "vnflow")
    return s.action.rfind("instance.", 0) == 0 ? "VnfInstance (vnflow DB)" : "vnflow host";
  if (spec->participant == "VIM")
    return "VIM registry";
  return spec->participant;
}

json::value Machine::to_json() const {
  json::array sts;
  for (const auto& s : states) {
    json::object o;
    o["name"] = s.name;
    o["segment"] = s.segment;
    o["kind"] = std::string(workflows::to_string(s.kind));
    if (!s.description.empty())
      o["description"] = s.description;
    if (s.kind == StateKind::kAction) {
      o["action"] = s.action;
      o["with"] = s.with.source();
      if (!s.for_each.empty()) {
        o["for_each"] = s.for_each;
        o["as"] = s.as;
        o["parallelism"] = s.parallelism;
      }
      o["timeout_s"] = s.timeout_s;
      o["retry"] = retry_json(s.retry);
      if (s.compensate) {
        o["compensate"] = json::object{{"action", s.compensate->action},
                                       {"with", s.compensate->with.source()},
                                       {"timeout_s", s.compensate->timeout_s}};
      }
    }
    if (s.kind == StateKind::kChoice) {
      json::array cs;
      for (const auto& c : s.choices)
        cs.push_back(json::object{{"when", c.condition}, {"next", name_at(*this, c.next)}});
      o["choices"] = std::move(cs);
    }
    if (s.kind == StateKind::kWait)
      o["wait"] = s.wait_seconds.source();
    if (s.kind == StateKind::kFail)
      o["message"] = s.message.source();
    if (s.kind == StateKind::kCall) {
      o["call"] = s.call;
      o["with"] = s.with.source();
      if (!s.for_each.empty()) {
        o["for_each"] = s.for_each;
        o["as"] = s.as;
      }
      o["body"] = name_at(*this, s.body);
      if (!s.returns.empty())
        o["returns"] = s.returns.source();
    }
    if (s.owner >= 0)
      o["owner"] = name_at(*this, s.owner);
    if (s.next >= 0)
      o["next"] = name_at(*this, s.next);
    if (s.on_failure >= 0)
      o["on_failure"] = name_at(*this, s.on_failure);
    o["where"] =
        json::object{{"file", s.where.file}, {"line", s.where.line}, {"column", s.where.column}};
    sts.push_back(std::move(o));
  }
  bool calls = std::any_of(states.begin(), states.end(),
                           [](const State& s) { return s.kind == StateKind::kCall; });
  return json::object{{"format", calls ? kFormatCalls : kFormat},
                      {"operation", operation},
                      {"flavour", flavour},
                      {"package_digest", package_digest},
                      {"compiler_version", compiler_version},
                      {"start", name_at(*this, start)},
                      {"vnfd", vnfd},
                      {"states", std::move(sts)}};
}

base::Result<std::shared_ptr<const Machine>> Machine::from_json(const json::value& v) {
  auto bad = [](std::string m) { return base::Status::InvalidArgument("stored machine: " + m); };
  if (!v.is_object() ||
      (str(v.get_object(), "format") != kFormat && str(v.get_object(), "format") != kFormatCalls))
    return bad("not a " + std::string(kFormat) + " or " + kFormatCalls +
               " document (a newer vnflow's machine?)");
  const auto& o = v.get_object();
  auto m = std::make_shared<Machine>();
  m->operation = str(o, "operation");
  m->flavour = str(o, "flavour");
  m->package_digest = str(o, "package_digest");
  m->compiler_version = str(o, "compiler_version");
  if (const json::value* vn = o.if_contains("vnfd"))
    m->vnfd = *vn;
  const json::value* sts = o.if_contains("states");
  if (sts == nullptr || !sts->is_array())
    return bad("no states");
  std::map<std::string, int> index;
  for (const auto& sv : sts->get_array()) {
    if (!sv.is_object())
      return bad("a state is not an object");
    index[str(sv.get_object(), "name")] = static_cast<int>(index.size());
  }
  auto idx = [&](const json::object& so, std::string_view k) {
    std::string n = str(so, k);
    auto it = index.find(n);
    return n.empty() || it == index.end() ? -1 : it->second;
  };
  for (const auto& sv : sts->get_array()) {
    const auto& so = sv.get_object();
    State s;
    s.name = str(so, "name");
    s.segment = str(so, "segment");
    s.description = str(so, "description");
    std::string kind = str(so, "kind");
    if (kind != "action" && kind != "choice" && kind != "wait" && kind != "succeed" &&
        kind != "call" && kind != "fail")
      return bad(s.name + ": unknown state kind \"" + kind + "\"");
    s.kind = kind == "action"    ? StateKind::kAction
             : kind == "choice"  ? StateKind::kChoice
             : kind == "wait"    ? StateKind::kWait
             : kind == "succeed" ? StateKind::kSucceed
             : kind == "call"    ? StateKind::kCall
                                 : StateKind::kFail;
    s.action = str(so, "action");
    if (const json::value* w = so.if_contains("with")) {
      auto t = Template::parse(*w);
      if (!t.ok())
        return bad(s.name + ": " + t.status().message());
      s.with = std::move(t).value();
    }
    s.for_each = str(so, "for_each");
    if (!s.for_each.empty()) {
      std::string err;
      uint32_t off = 0;
      s.for_each_expr = Expr::parse(s.for_each, &err, &off);
      if (!s.for_each_expr)
        return bad(s.name + ": for_each: " + err);
      s.as = str(so, "as");
      s.parallelism = static_cast<int>(num(so, "parallelism", 0));
    }
    s.timeout_s = num(so, "timeout_s", 0);
    if (const json::value* r = so.if_contains("retry"); r != nullptr && r->is_object()) {
      const auto& ro = r->get_object();
      s.retry.attempts = static_cast<int>(num(ro, "attempts", 1));
      s.retry.backoff_s = num(ro, "backoff_s", 1);
      s.retry.factor = num(ro, "factor", 2);
      s.retry.max_delay_s = num(ro, "max_delay_s", 300);
      s.retry.on.clear();
      if (const json::value* on = ro.if_contains("on"); on != nullptr && on->is_array()) {
        for (const auto& c : on->get_array())
          s.retry.on.emplace_back(c.is_string() ? std::string(c.get_string()) : "");
      }
    }
    if (const json::value* c = so.if_contains("compensate"); c != nullptr && c->is_object()) {
      Compensation comp;
      comp.action = str(c->get_object(), "action");
      comp.timeout_s = num(c->get_object(), "timeout_s", 60);
      if (const json::value* w = c->get_object().if_contains("with")) {
        auto t = Template::parse(*w);
        if (!t.ok())
          return bad(s.name + ": compensate: " + t.status().message());
        comp.with = std::move(t).value();
      }
      s.compensate = std::move(comp);
    }
    if (const json::value* cs = so.if_contains("choices"); cs != nullptr && cs->is_array()) {
      for (const auto& cv : cs->get_array()) {
        if (!cv.is_object())
          return bad(s.name + ": bad choice");
        Choice ch;
        ch.condition = str(cv.get_object(), "when");
        std::string err;
        uint32_t off = 0;
        ch.expr = Expr::parse(ch.condition, &err, &off);
        if (!ch.expr)
          return bad(s.name + ": when: " + err);
        ch.next = idx(cv.get_object(), "next");
        s.choices.push_back(std::move(ch));
      }
    }
    if (const json::value* w = so.if_contains("wait")) {
      auto t = Template::parse(*w);
      if (!t.ok())
        return bad(s.name + ": wait: " + t.status().message());
      s.wait_seconds = std::move(t).value();
    }
    if (const json::value* msg = so.if_contains("message")) {
      auto t = Template::parse(*msg);
      if (!t.ok())
        return bad(s.name + ": message: " + t.status().message());
      s.message = std::move(t).value();
    }
    s.next = idx(so, "next");
    s.on_failure = idx(so, "on_failure");
    s.call = str(so, "call");
    s.body = idx(so, "body");
    s.owner = idx(so, "owner");
    if (s.kind == StateKind::kCall && s.body < 0)
      return bad(s.name + ": a call without its workflow's states");
    if (const json::value* rt = so.if_contains("returns")) {
      auto t = Template::parse(*rt);
      if (!t.ok())
        return bad(s.name + ": returns: " + t.status().message());
      s.returns = std::move(t).value();
    }
    if (const json::value* w = so.if_contains("where"); w != nullptr && w->is_object()) {
      s.where.file = str(w->get_object(), "file");
      s.where.line = static_cast<uint32_t>(num(w->get_object(), "line", 0));
      s.where.column = static_cast<uint32_t>(num(w->get_object(), "column", 0));
    }
    m->states.push_back(std::move(s));
  }
  m->start = idx(o, "start");
  if (m->start < 0)
    return bad("no start state");
  m->digest = base::digest_hex(base::DigestAlgorithm::kSha256, json::serialize(v));
  return std::shared_ptr<const Machine>(std::move(m));
}

std::optional<Format> parse_format(std::string_view s) {
  if (s == "text")
    return Format::kText;
  if (s == "dot")
    return Format::kDot;
  if (s == "mermaid")
    return Format::kMermaid;
  if (s == "seqdiag")
    return Format::kSeqdiag;
  if (s == "plantuml")
    return Format::kPlantuml;
  if (s == "json")
    return Format::kJson;
  return std::nullopt;
}

std::string render(const Machine& m, Format f) {
  std::ostringstream o;
  switch (f) {
    case Format::kJson:
      o << json::serialize(m.to_json()) << "\n";
      break;
    case Format::kText: {
      o << "operation " << m.operation << ", flavour " << m.flavour << ", " << m.states.size()
        << " states, start " << name_at(m, m.start) << "\n";
      std::string segment;
      for (const auto& s : m.states) {
        if (s.segment != segment) {
          segment = s.segment;
          o << "\n[" << segment << "]\n";
        }
        o << "  " << s.name << ": " << to_string(s.kind);
        if (s.kind == StateKind::kAction) {
          o << " " << s.action;
          if (!s.for_each.empty())
            o << " for each " << s.as << " in ${" << s.for_each << "}"
              << (s.parallelism > 0 ? " (" + std::to_string(s.parallelism) + " at a time)" : "");
          o << ", timeout " << fmt_seconds(s.timeout_s);
          if (s.retry.attempts > 1)
            o << ", " << s.retry.attempts << " attempts on " << [&] {
              std::string l;
              for (const auto& c : s.retry.on)
                l += (l.empty() ? "" : "/") + c;
              return l;
            }();
          if (s.compensate)
            o << ", compensated by " << s.compensate->action;
        }
        if (s.kind == StateKind::kWait)
          o << " " << json::serialize(s.wait_seconds.source());
        if (s.kind == StateKind::kCall)
          o << " " << s.call
            << (s.for_each.empty()
                    ? ""
                    : " for each " + s.as + " in ${" + s.for_each + "}, one after the other");
        o << "\n";
        if (!s.description.empty())
          o << "      " << one_line(s.description) << "\n";
        for (const auto& c : s.choices)
          o << "      when ${" << c.condition << "} -> " << name_at(m, c.next) << "\n";
        if (s.body >= 0)
          o << "      runs -> " << name_at(m, s.body) << "\n";
        if (s.next >= 0)
          o << "      "
            << (s.kind == StateKind::kChoice                    ? "otherwise"
                : s.kind == StateKind::kSucceed && s.owner >= 0 ? "returns"
                                                                : "next")
            << " -> " << name_at(m, s.next) << "\n";
        if (s.on_failure >= 0)
          o << "      on failure -> " << name_at(m, s.on_failure) << "\n";
        if (s.kind == StateKind::kSucceed && s.next < 0)
          o << "      -> COMPLETED\n";
        if (s.kind == StateKind::kFail)
          o << "      -> FAILED_TEMP\n";
        if ((s.kind == StateKind::kAction || s.kind == StateKind::kCall) && s.on_failure < 0)
          o << "      on failure -> FAILED_TEMP\n";
      }
      break;
    }
    case Format::kDot: {
      o << "digraph " << dot_id(m.operation)
        << " {\n  rankdir=TB;\n  compound=true;\n  node [shape=box, style=rounded];\n";
      o << "  \"[start]\" [shape=circle, label=\"\", width=0.2, style=filled, fillcolor=black];\n";
      o << "  \"COMPLETED\" [shape=doublecircle];\n  \"FAILED_TEMP\" [shape=doublecircle, "
           "color=red];\n";
      // Only what an operation of this flavour can reach: a choice decided by the VNFD
      // alone shows the one branch it takes (a package without a stack template has no
      // Heat steps to draw).
      const FlavourReach fr = flavour_reach(m);
      auto reached = [&](const State& s) {
        return fr.reach[static_cast<size_t>(&s - m.states.data())];
      };
      std::map<std::string, std::vector<const State*>> by_segment;
      std::vector<std::string> order;
      for (const auto& s : m.states) {
        if (!reached(s))
          continue;
        if (!by_segment.count(s.segment))
          order.push_back(s.segment);
        by_segment[s.segment].push_back(&s);
      }
      int cluster = 0;
      for (const auto& seg : order) {
        o << "  subgraph cluster_" << cluster++ << " {\n    label=" << dot_id(seg) << ";\n";
        for (const State* s : by_segment[seg]) {
          std::string label = s->name.substr(s->segment.size() + 1);
          if (s->kind == StateKind::kAction)
            label += "\n" + s->action + (s->for_each.empty() ? "" : " (for each)");
          else if (s->kind == StateKind::kCall)
            label += "\ncall " + s->call + (s->for_each.empty() ? "" : " (for each)");
          else
            label += "\n" + std::string(to_string(s->kind));
          o << "    " << dot_id(s->name) << " [label=" << dot_id(label) << "];\n";
        }
        o << "  }\n";
      }
      o << "  \"[start]\" -> " << dot_id(name_at(m, m.start)) << ";\n";
      for (const auto& s : m.states) {
        if (!reached(s))
          continue;
        // -1: any branch may be taken; else the one this flavour takes.
        int only = fr.fixed[static_cast<size_t>(&s - m.states.data())];
        for (const auto& c : s.choices)
          if (only < 0 || only == c.next)
            o << "  " << dot_id(s.name) << " -> " << dot_id(name_at(m, c.next))
              << " [label=" << dot_id(one_line(c.condition) + (only < 0 ? "" : " (this flavour)"))
              << "];\n";
        if (s.body >= 0)
          o << "  " << dot_id(s.name) << " -> " << dot_id(name_at(m, s.body))
            << " [label=\"call\"];\n";
        if (s.next >= 0 && (only < 0 || only == s.next))
          o << "  " << dot_id(s.name) << " -> " << dot_id(name_at(m, s.next))
            << (s.kind == StateKind::kSucceed && s.owner >= 0 ? " [label=\"return\"]"
                : s.kind != StateKind::kChoice                ? ""
                : only < 0                                    ? " [label=\"otherwise\"]"
                           : " [label=\"otherwise (this flavour)\"]")
            << ";\n";
        if (s.on_failure >= 0)
          o << "  " << dot_id(s.name) << " -> " << dot_id(name_at(m, s.on_failure))
            << " [style=dashed, color=red, label=\"failure\"];\n";
        if (s.kind == StateKind::kSucceed && s.next < 0)
          o << "  " << dot_id(s.name) << " -> \"COMPLETED\";\n";
        if (s.kind == StateKind::kFail)
          o << "  " << dot_id(s.name) << " -> \"FAILED_TEMP\" [color=red];\n";
      }
      // An action state without on_failure stops in FAILED_TEMP when it fails: one edge per
      // file from its box, not one per state (a package's machine has dozens of them).
      cluster = 0;
      for (const auto& seg : order) {
        const State* first = nullptr;
        size_t count = 0;
        for (const State* s : by_segment[seg]) {
          if ((s->kind == StateKind::kAction || s->kind == StateKind::kCall) && s->on_failure < 0) {
            first = first != nullptr ? first : s;
            ++count;
          }
        }
        if (first != nullptr)
          o << "  " << dot_id(first->name) << " -> \"FAILED_TEMP\" [ltail=cluster_" << cluster
            << ", style=dashed, color=red, label="
            << dot_id(count == 1
                          ? "failure (1 state without on_failure)"
                          : "failure (" + std::to_string(count) + " states without on_failure)")
            << "];\n";
        ++cluster;
      }
      o << "}\n";
      break;
    }
    case Format::kMermaid: {
      o << "stateDiagram-v2\n";
      for (const auto& s : m.states) {
        std::string label = s.name + (s.kind == StateKind::kAction ? ": " + s.action : "");
        o << "  state \"" << one_line(label) << "\" as " << mermaid_id(s.name) << "\n";
      }
      o << "  [*] --> " << mermaid_id(name_at(m, m.start)) << "\n";
      for (const auto& s : m.states) {
        std::string id = mermaid_id(s.name);
        for (const auto& c : s.choices)
          o << "  " << id << " --> " << mermaid_id(name_at(m, c.next)) << ": "
            << one_line(c.condition) << "\n";
        if (s.body >= 0)
          o << "  " << id << " --> " << mermaid_id(name_at(m, s.body)) << ": call\n";
        if (s.next >= 0)
          o << "  " << id << " --> " << mermaid_id(name_at(m, s.next))
            << (s.kind == StateKind::kChoice ? ": otherwise" : "") << "\n";
        if (s.on_failure >= 0)
          o << "  " << id << " --> " << mermaid_id(name_at(m, s.on_failure)) << ": failure\n";
        if ((s.kind == StateKind::kSucceed && s.next < 0))
          o << "  " << id << " --> [*]\n";
        if (s.kind == StateKind::kFail)
          o << "  " << id << " --> FAILED_TEMP\n";
      }
      break;
    }
    case Format::kPlantuml:
      o << render_plantuml(m);
      break;
    case Format::kSeqdiag: {
      // In the form of the seeds' diagrams: the client's request, then each state as a
      // call from vnflow to the participant its action talks to, in the order of the main
      // path (choices shown as notes).
      std::vector<std::string> parts = {"Client", "vnflow"};
      for (const auto& s : m.states) {
        std::string p = participant_of(s);
        if (p != "vnflow" && std::find(parts.begin(), parts.end(), p) == parts.end())
          parts.push_back(p);
      }
      o << "seqdiag {\n\nnode_width = 80; edge_length = 160;\n\n";
      for (const auto& p : parts)
        o << "\"" << p << "\" ";
      o << "\n\n\"Client\" -> \"vnflow\"\n\n[label = \"" << m.operation << " request\"];\n\n";
      o << "\"Client\" <-- \"vnflow\"\n\n[label = \"operation id (STARTING)\"];\n\n";
      // Walk every state once, main path first (next edges), then the rest in order.
      std::vector<bool> seen(m.states.size(), false);
      std::vector<int> order;
      for (int i = m.start; i >= 0 && !seen[static_cast<size_t>(i)];
           i = m.states[static_cast<size_t>(i)].next) {
        seen[static_cast<size_t>(i)] = true;
        order.push_back(i);
      }
      for (size_t i = 0; i < m.states.size(); ++i) {
        if (!seen[i])
          order.push_back(static_cast<int>(i));
      }
      for (int i : order) {
        const State& s = m.states[static_cast<size_t>(i)];
        std::string p = participant_of(s);
        std::string label = s.name;
        if (!s.description.empty())
          label += ": " + s.description;
        else if (s.kind == StateKind::kAction)
          label += " (" + s.action + ")";
        if (!s.for_each.empty())
          label += " [for each " + s.as + "]";
        if (s.kind != StateKind::kAction) {
          o << "\"vnflow\" -> \"vnflow\"\n\n[label = \"" << one_line(label) << " ["
            << to_string(s.kind) << "]\"];\n\n";
          continue;
        }
        o << "\"vnflow\" -> \"" << p << "\"\n\n[label = \"" << one_line(label) << "\"];\n\n";
        o << "\"vnflow\" <-- \"" << p << "\"\n\n[label = \"\"];\n\n";
      }
      o << "}\n";
      break;
    }
  }
  return o.str();
}

}  // namespace workflows
