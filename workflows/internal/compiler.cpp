// The workflow compiler: hook files + built-in steps -> one checked Machine.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <deque>
#include <set>

#include <boost/json.hpp>

#include "workflows/internal/expr.h"
#include "workflows/internal/yaml_json.h"
#include "workflows/workflows.h"

namespace workflows {

namespace {

constexpr const char* kCompilerVersion = "vnflow-compiler/1";
constexpr const char* kWorkflowArtifactType = "vnflow.artifacts.Workflow";

using internal::yaml_to_json;
using K = Type::Kind;

// Calls nest at most this deep, and inlining stops at this many states: a package cannot make
// the compiler build an unbounded machine (a file that calls another twice, which calls a third
// twice...).
constexpr int kMaxCallDepth = 8;
constexpr size_t kMaxStates = 10000;
constexpr size_t kMaxInlinedBytes = size_t{64} << 20;

// A call's file, relative to the folder of the caller's file `from` (both paths in the
// package). Empty, with `err`, when it is absolute, leaves the package or is no plain path.
std::string resolve_call_path(const std::string& from, std::string_view target, std::string& err) {
  bool plain = !target.empty() && target.front() != '/' && target.size() <= 1024 &&
               std::none_of(target.begin(), target.end(), [](char c) {
                 return c == '\\' || c == ':' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
               });
  if (!plain) {
    err = "is not a relative path of a file in the package";
    return {};
  }
  std::vector<std::string> parts;
  auto split = [](std::string_view p, const std::function<bool(std::string_view)>& f) {
    size_t at = 0;
    while (at <= p.size()) {
      size_t end = p.find('/', at);
      end = end == std::string_view::npos ? p.size() : end;
      if (!f(p.substr(at, end - at)))
        return false;
      at = end + 1;
    }
    return true;
  };
  size_t slash = from.rfind('/');
  split(slash == std::string::npos ? std::string_view() : std::string_view(from).substr(0, slash),
        [&](std::string_view seg) {
          if (!seg.empty() && seg != ".")
            parts.emplace_back(seg);
          return true;
        });
  bool inside = split(target, [&](std::string_view seg) {
    if (seg.empty() || seg == ".")
      return true;
    if (seg == "..") {
      if (parts.empty())
        return false;
      parts.pop_back();
      return true;
    }
    parts.emplace_back(seg);
    return true;
  });
  if (!inside || parts.empty()) {
    err = "leaves the package";
    return {};
  }
  std::string out;
  for (const auto& part : parts)
    out += (out.empty() ? "" : "/") + part;
  return out;
}

std::optional<double> parse_duration(std::string_view s) {
  if (s.empty())
    return std::nullopt;
  double mult = 1;
  std::string_view num = s;
  if (s.size() > 2 && s.substr(s.size() - 2) == "ms") {
    mult = 0.001;
    num = s.substr(0, s.size() - 2);
  } else if (s.back() == 's' || s.back() == 'm' || s.back() == 'h') {
    mult = s.back() == 's' ? 1 : s.back() == 'm' ? 60 : 3600;
    num = s.substr(0, s.size() - 1);
  }
  std::string t(num);
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (t.empty() || end == nullptr || *end != '\0' || !std::isfinite(v) || v < 0 ||
      t.find_first_not_of("0123456789.") != std::string::npos)
    return std::nullopt;
  return v * mult;
}

// The location of byte `offset` of a scalar (tosca::Node::location_at: exact across the
// lines of folded, literal and multi-line scalars).
base::SourceLocation shifted(tosca::Node n, uint32_t offset) {
  return n.location_at(offset);
}

TypeRef object_type(std::string name, std::vector<Field> fields) {
  auto t = std::make_shared<Type>();
  t->kind = K::kObject;
  t->name = std::move(name);
  t->fields = std::move(fields);
  return t;
}

// The VNFD facts expressions read, as a JSON value and its type.
void build_vnfd(const tosca::Package& pkg, const tosca::Flavour& fl, json::value& out,
                TypeRef& type) {
  json::object v;
  v["id"] = pkg.vnf.descriptor_id;
  v["version"] = pkg.vnf.descriptor_version;
  v["provider"] = pkg.vnf.provider;
  v["product_name"] = pkg.vnf.product_name;
  v["software_version"] = pkg.vnf.software_version;
  v["flavour_id"] = fl.id;
  v["flavour_description"] = fl.description;
  std::vector<Field> prop_fields;
  json::object props;
  for (const auto& [name, node] : fl.vnf_properties) {
    props[name] = yaml_to_json(node);
    prop_fields.push_back({name, any_type(), false});
  }
  v["properties"] = std::move(props);
  TypeRef vdu_t = object_type("vdu", {{"name", make_type(K::kString), true},
                                      {"min_instances", make_type(K::kInt), true},
                                      {"max_instances", make_type(K::kInt), true},
                                      {"sw_image", make_type(K::kString), true}});
  json::object vdus;
  std::vector<Field> vdu_fields;
  for (const auto& d : fl.vdus) {
    vdus[d.name] = json::object{{"name", d.vdu_name},
                                {"min_instances", d.min_instances},
                                {"max_instances", d.max_instances},
                                {"sw_image", d.sw_image_name}};
    vdu_fields.push_back({d.name, vdu_t, true});
  }
  v["vdus"] = std::move(vdus);
  json::object cps;
  for (const auto& c : fl.cps)
    cps[c.name] = json::object{{"vdu", c.virtual_binding}, {"virtual_link", c.virtual_link}};
  v["cps"] = std::move(cps);
  json::object aspects, default_status;
  for (const auto& a : fl.aspects) {
    json::object deltas;
    for (const auto& [vdu, m] : a.vdu_deltas) {
      json::object dm;
      for (const auto& [delta, n] : m)
        dm[delta] = n;
      deltas[vdu] = std::move(dm);
    }
    aspects[a.id] = json::object{
        {"name", a.name}, {"max_scale_level", a.max_scale_level}, {"deltas", std::move(deltas)}};
    default_status[a.id] = 0;
  }
  v["aspects"] = std::move(aspects);
  json::object levels;
  for (const auto& l : fl.levels) {
    json::object si, vi;
    for (const auto& [asp, n] : l.scale_info)
      si[asp] = n;
    for (const auto& [vdu, n] : l.vdu_instances)
      vi[vdu] = n;
    if (l.id == fl.default_level) {
      for (const auto& [asp, n] : l.scale_info)
        default_status[asp] = n;
    }
    levels[l.id] = json::object{{"scale_info", std::move(si)}, {"vdu_instances", std::move(vi)}};
  }
  v["levels"] = std::move(levels);
  v["default_level"] = fl.default_level;
  v["default_scale_status"] = std::move(default_status);
  // The flavour's BaseHOT (Tacker's layout): every YAML under BaseHOT/<flavour>/ (and its
  // nested/ folder) is a file Heat may need, keyed by its base name; the top template is
  // the one no other file names.
  json::object hot_files;
  std::string prefix = "BaseHOT/" + fl.id + "/";
  std::vector<std::pair<std::string, std::string>> tops;
  for (const auto& f : pkg.files) {
    if (f.rfind(prefix, 0) != 0)
      continue;
    std::string rest = f.substr(prefix.size());
    bool direct = rest.find('/') == std::string::npos;
    bool nested = rest.rfind("nested/", 0) == 0 && rest.find('/', 7) == std::string::npos;
    bool yaml = rest.size() > 5 && (rest.compare(rest.size() - 5, 5, ".yaml") == 0 ||
                                    rest.compare(rest.size() - 4, 4, ".yml") == 0);
    if (!yaml || (!direct && !nested))
      continue;
    auto text = pkg.read_file(f);
    if (!text.ok())
      continue;
    std::string base = rest.substr(rest.rfind('/') == std::string::npos ? 0 : rest.rfind('/') + 1);
    if (direct)
      tops.emplace_back(base, text.value());
    hot_files[base] = text.value();
  }
  std::string top_name, top_text;
  for (const auto& [name, text] : tops) {
    bool referenced = false;
    for (const auto& [other, otext] : hot_files) {
      if (other != name && otext.is_string() &&
          std::string_view(otext.get_string()).find(name) != std::string_view::npos)
        referenced = true;
    }
    if (!referenced && (top_name.empty() || name < top_name)) {
      top_name = name;
      top_text = text;
    }
  }
  if (!top_name.empty())
    hot_files.erase(top_name);
  v["base_hot"] =
      json::object{{"name", top_name}, {"template", top_text}, {"files", std::move(hot_files)}};
  out = std::move(v);

  TypeRef aspect_t = object_type(
      "aspect", {{"name", make_type(K::kString), true},
                 {"max_scale_level", make_type(K::kInt), true},
                 {"deltas", make_type(K::kMap, make_type(K::kMap, make_type(K::kInt))), true}});
  TypeRef level_t =
      object_type("level", {{"scale_info", make_type(K::kMap, make_type(K::kInt)), true},
                            {"vdu_instances", make_type(K::kMap, make_type(K::kInt)), true}});
  TypeRef cp_t = object_type(
      "cp", {{"vdu", make_type(K::kString), true}, {"virtual_link", make_type(K::kString), true}});
  type = object_type(
      "vnfd",
      {{"id", make_type(K::kString), true},
       {"version", make_type(K::kString), true},
       {"provider", make_type(K::kString), true},
       {"product_name", make_type(K::kString), true},
       {"software_version", make_type(K::kString), true},
       {"flavour_id", make_type(K::kString), true},
       {"flavour_description", make_type(K::kString), true},
       {"properties", object_type("VNF properties", prop_fields), true},
       {"vdus", object_type("VDUs", vdu_fields), true},
       {"cps", make_type(K::kMap, cp_t), true},
       {"aspects", make_type(K::kMap, aspect_t), true},
       {"levels", make_type(K::kMap, level_t), true},
       {"default_level", make_type(K::kString), true},
       {"default_scale_status", make_type(K::kMap, make_type(K::kInt)), true},
       {"base_hot",
        object_type("BaseHOT", {{"name", make_type(K::kString), true},
                                {"template", make_type(K::kString), true},
                                {"files", make_type(K::kMap, make_type(K::kString)), true}}),
        true}});
}

struct Pending {  // what the type-check pass needs of a state
  tosca::Node node;
  std::string short_name;
};

struct CallInfo {       // what the type check needs of a called file
  std::string path;     // in the package
  std::string segment;  // its states' segment: the call state's name
  TypeRef inputs;       // object of the declared inputs
  json::object defaults;
  tosca::Node outputs;  // the declared outputs (a map), or none
};

class Compiler {
 public:
  Compiler(base::Diagnostics& diags, Machine& m) : diags_(diags), m_(m) {}

  TypeScope base_scope;
  // Reads the files calls name; how diagnostics name a file of the package.
  FileReader reader;
  std::function<std::string(const std::string&)> display;

  // Adds one file's states (and, after them, those of the files it calls); returns the index
  // of its start state, or -1. `path`: the file's path in the package, which its calls are
  // relative to. `owner`: the call state that runs this file (-1: a hook or built-in steps).
  int add_segment(const std::string& segment, tosca::Node root, const std::string& path = {},
                  int owner = -1, int depth = 0) {
    if (!root.is_map()) {
      diags_.error("W0001", root.location(), "a workflow is a map with \"start\" and \"states\"");
      return -1;
    }
    static const std::vector<std::string> kTop = {"description", "start", "states"};
    static const std::vector<std::string> kCalled = {"description", "start", "states", "inputs",
                                                     "outputs"};
    for (size_t i = 0; i < root.size(); ++i) {
      std::string_view k = root.key(i).scalar();
      if (owner < 0 && (k == "inputs" || k == "outputs"))
        diags_.error("W0046", root.key(i).location(),
                     "\"" + std::string(k) +
                         "\" belongs to a workflow that a state calls; a hook's inputs are the "
                         "request (request.additionalParams)");
      else
        unknown_key(root.key(i), owner < 0 ? kTop : kCalled, "workflow");
    }
    tosca::Node states = root.get("states");
    if (!states || !states.is_map() || states.size() == 0) {
      diags_.error("W0003", states ? states.location() : root.location(),
                   "a workflow needs a non-empty map \"states\"");
      return -1;
    }
    size_t first = m_.states.size();
    std::map<std::string, int> local;
    for (size_t i = 0; i < states.size(); ++i) {
      tosca::Node key = states.key(i);
      std::string name(key.scalar());
      bool ok = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
      });
      if (!ok) {
        diags_.error("W0002", key.location(),
                     "state name \"" + name +
                         "\" must be letters, digits or \"_\" (expressions read it as states." +
                         name + ")");
      }
      State s;
      s.name = segment + "." + name;
      s.segment = segment;
      s.where = key.location();
      s.owner = owner;
      local[name] = static_cast<int>(m_.states.size());
      m_.states.push_back(std::move(s));
      pending_.push_back({states.value(i), name});
    }
    segments_[segment] = local;
    size_t last = m_.states.size();
    for (size_t i = first; i < last; ++i)
      parse_state(i, local);
    for (size_t i = first; i < last; ++i) {
      if (m_.states[i].kind == StateKind::kCall && !m_.states[i].call.empty())
        expand_call(i, path, depth + 1);
    }
    tosca::Node start = root.get("start");
    parsing_segment_ = segment;
    if (!start) {
      cut_error("W0003", root.location(), "a workflow needs \"start\": the first state");
      return -1;
    }
    int first_state = target(start, local);
    if (first_state >= 0)
      segment_starts_.insert(first_state);
    return first_state;
  }

  // Inlines the file call state `i` names: its states get the call's name as their segment
  // and go back to the call when they succeed; its declared inputs and outputs are kept for
  // the type check.
  void expand_call(size_t i, const std::string& from, int depth) {
    const std::string caller_segment = m_.states[i].segment;
    tosca::Node cn = pending_[i].node.get("call");
    const std::string target = m_.states[i].call;
    const std::string who =
        "state \"" + pending_[i].short_name + "\" calls \"" + base::printable(target) + "\"";
    parsing_segment_ = caller_segment;
    if (!reader) {
      cut_error("W0046", cn.location(),
                who +
                    ": a call is compiled with its package (vnflow workflow show PACKAGE --op "
                    "OP), or with `workflow check` on the file in its folder");
      return;
    }
    std::string err;
    std::string path = resolve_call_path(from, target, err);
    if (path.empty()) {
      cut_error("W0046", cn.location(), who + ", which " + err);
      return;
    }
    if (std::find(call_stack_.begin(), call_stack_.end(), path) != call_stack_.end()) {
      std::string chain;
      for (const auto& c : call_stack_)
        chain += c + " -> ";
      cut_error("W0046", cn.location(),
                who + ", which is already running: " + chain + path +
                    " (a workflow may not call itself, directly or through others)");
      return;
    }
    if (depth > kMaxCallDepth) {
      cut_error("W0046", cn.location(),
                who + ": calls nest at most " + std::to_string(kMaxCallDepth) + " deep");
      return;
    }
    if (m_.states.size() > kMaxStates) {
      cut_error("W0046", cn.location(),
                who + ": the operation already has " + std::to_string(m_.states.size()) +
                    " states with the calls inlined; at most " + std::to_string(kMaxStates));
      return;
    }
    // Each file is read and parsed once; every inlining is charged its size, so a small
    // package cannot make the compiler build gigabytes (a large file called many times).
    auto cached = files_.find(path);
    if (cached == files_.end()) {
      auto text = reader(path);
      if (!text.ok()) {
        cut_error("W0046", cn.location(), who + ": " + text.status().message());
        return;
      }
      auto file = tosca::parse_yaml_file(display ? display(path) : path, text.value(),
                                         tosca::Limits{}, diags_);
      cached = files_.emplace(path, std::make_pair(file, text.value().size())).first;
    }
    const auto& [file, bytes] = cached->second;
    if (file == nullptr) {
      cut_segments_.insert(caller_segment);
      return;
    }
    inlined_bytes_ += bytes;
    if (inlined_bytes_ > kMaxInlinedBytes) {
      cut_error("W0046", cn.location(),
                who + ": the operation's calls inline more than " +
                    std::to_string(kMaxInlinedBytes >> 20) + " MiB of workflow text");
      return;
    }
    tosca::Node root = file->root();
    CallInfo info;
    info.path = path;
    info.segment = m_.states[i].name;
    if (root.is_map())
      declarations(root, info);
    size_t first = m_.states.size();
    call_stack_.push_back(path);
    int body = add_segment(info.segment, root, path, static_cast<int>(i), depth);
    call_stack_.pop_back();
    parsing_segment_ = caller_segment;
    State& call = m_.states[i];
    call.body = body;
    if (body < 0)
      cut_segments_.insert(caller_segment);
    for (size_t j = first; j < m_.states.size(); ++j) {
      State& st = m_.states[j];
      if (st.segment == info.segment && st.kind == StateKind::kSucceed)
        st.next = static_cast<int>(i);
      // A failure the called file does not handle goes where the call's own would.
      if ((st.kind == StateKind::kAction || st.kind == StateKind::kCall) && st.on_failure < 0)
        st.on_failure = call.on_failure;
    }
    // The declared defaults (literal text: a `${` there is not an expression), then what
    // the call gives.
    json::object merged = escaped(info.defaults).as_object();
    tosca::Node with = pending_[i].node.get("with");
    for (size_t k = 0; with && with.is_map() && k < with.size(); ++k)
      merged[with.key(k).scalar()] = yaml_to_json(with.value(k));
    auto t = Template::parse(json::value(std::move(merged)));
    if (t.ok())
      call.with = std::move(t).value();
    else if (!with || !with.is_map())  // the call's own `with` errors are reported where it is
      diags_.error("W0046", cn.location(), who + ": its inputs: " + t.status().message());
    calls_[static_cast<int>(i)] = std::move(info);
  }

  // `v` with every `${` in its strings written `$${`: a template that evaluates to `v`.
  static json::value escaped(const json::value& v) {
    if (v.is_string()) {
      std::string out;
      std::string_view t = v.get_string();
      for (size_t k = 0; k < t.size(); ++k) {
        if (t[k] == '$' && k + 1 < t.size() && t[k + 1] == '{')
          out += '$';
        out += t[k];
      }
      return json::value(out);
    }
    if (v.is_array()) {
      json::array a;
      for (const auto& x : v.get_array())
        a.push_back(escaped(x));
      return a;
    }
    if (v.is_object()) {
      json::object o;
      for (const auto& kv : v.get_object())
        o[kv.key()] = escaped(kv.value());
      return o;
    }
    return v;
  }

  // A called file's `inputs` (name: {type, default, required, description}) and `outputs`.
  void declarations(tosca::Node root, CallInfo& info) {
    std::vector<Field> fields;
    auto good_name = [](std::string_view n) {
      return !n.empty() && std::all_of(n.begin(), n.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
      });
    };
    if (tosca::Node in = root.get("inputs")) {
      if (!in.is_map())
        diags_.error("W0001", in.location(),
                     "\"inputs\" is a map: name -> {type, default, required, description}");
      for (size_t k = 0; in.is_map() && k < in.size(); ++k) {
        std::string name(in.key(k).scalar());
        tosca::Node d = in.value(k);
        if (!good_name(name)) {
          diags_.error("W0002", in.key(k).location(),
                       "input name \"" + base::printable(name) +
                           "\" must be letters, digits or \"_\" (expressions read it as inputs." +
                           base::printable(name) + ")");
          continue;
        }
        if (!d.is_map() || !d.get("type")) {
          diags_.error("W0001", d.location(),
                       "input \"" + name +
                           "\" is a map with \"type\" (and default, required, "
                           "description)");
          continue;
        }
        static const std::vector<std::string> kInput = {"type", "default", "required",
                                                        "description"};
        for (size_t j = 0; j < d.size(); ++j)
          unknown_key(d.key(j), kInput, "input");
        TypeRef t = parse_type_name(d.get("type").scalar(), [](std::string_view n) {
          return ActionCatalog::builtin().type(n);
        });
        if (t == nullptr) {
          diags_.error("W0013", d.get("type").location(),
                       "unknown type \"" + base::printable(std::string(d.get("type").scalar())) +
                           "\" (string, integer, number, boolean, any, list(T), map(T))");
          t = any_type();
        }
        bool required = true;
        if (tosca::Node dv = d.get("default")) {
          json::value v = yaml_to_json(dv);
          std::vector<std::string> problems;
          check_value(v, *t, "default", problems);
          for (const auto& pr : problems)
            diags_.error("W0013", dv.location(), "input \"" + name + "\": " + pr);
          info.defaults[name] = std::move(v);
          required = false;
        }
        if (tosca::Node r = d.get("required")) {
          json::value v = yaml_to_json(r);
          if (!v.is_bool())
            diags_.error("W0013", r.location(), "\"required\" is true or false");
          else
            required = v.get_bool() && !d.get("default");
        }
        fields.emplace_back(name, t, required, std::string(d.get("description").scalar()));
      }
    }
    info.inputs = object_type("inputs of " + info.path, std::move(fields));
    if (tosca::Node out = root.get("outputs")) {
      if (!out.is_map()) {
        diags_.error("W0001", out.location(), "\"outputs\" is a map: name -> value");
      } else {
        for (size_t k = 0; k < out.size(); ++k) {
          if (!good_name(out.key(k).scalar()))
            diags_.error("W0002", out.key(k).location(),
                         "output name \"" + base::printable(std::string(out.key(k).scalar())) +
                             "\" must be letters, digits or \"_\"");
        }
        info.outputs = out;
      }
    }
  }

  // Links a segment's final succeed states to the start of the next segment.
  void link(const std::string& segment, int next_start) {
    for (auto& s : m_.states) {
      if (s.segment == segment && s.kind == StateKind::kSucceed)
        s.next = next_start;
    }
  }

  void check_graph() {
    size_t n = m_.states.size();
    std::vector<std::vector<int>> succ(n), pred(n);
    for (size_t i = 0; i < n; ++i) {
      for (int t : edges(m_.states[i])) {
        succ[i].push_back(t);
        pred[static_cast<size_t>(t)].push_back(static_cast<int>(i));
      }
    }
    std::vector<bool> reach(n, false);
    std::deque<int> q;
    if (m_.start >= 0) {
      reach[static_cast<size_t>(m_.start)] = true;
      q.push_back(m_.start);
    }
    while (!q.empty()) {
      int i = q.front();
      q.pop_front();
      for (int t : succ[static_cast<size_t>(i)]) {
        if (!reach[static_cast<size_t>(t)]) {
          reach[static_cast<size_t>(t)] = true;
          q.push_back(t);
        }
      }
    }
    std::vector<bool> term(n, false);
    for (size_t i = 0; i < n; ++i) {
      const State& s = m_.states[i];
      if ((s.kind == StateKind::kSucceed && s.next < 0) || s.kind == StateKind::kFail) {
        term[i] = true;
        q.push_back(static_cast<int>(i));
      }
    }
    while (!q.empty()) {
      int i = q.front();
      q.pop_front();
      for (int p : pred[static_cast<size_t>(i)]) {
        if (!term[static_cast<size_t>(p)]) {
          term[static_cast<size_t>(p)] = true;
          q.push_back(p);
        }
      }
    }
    // A transition missing or to a missing state (W0003, W0004, a state of no or two kinds)
    // cuts the graph: what looks unreachable or stuck behind it is the same mistake again.
    // Then a state is called unreachable only when it is in another file than the cuts and
    // no transition at all leads to it; stuck states are not reported.
    for (size_t i = 0; i < n; ++i) {
      const State& st = m_.states[i];
      // A file's start is reached from the file before it: not an orphan when a cut in
      // that file took the link away.
      bool orphan = static_cast<int>(i) != m_.start && !cut_segments_.count(st.segment) &&
                    !segment_starts_.count(static_cast<int>(i)) &&
                    std::none_of(pred[i].begin(), pred[i].end(),
                                 [i](int p) { return p != static_cast<int>(i); });
      if (!reach[i] && (cut_segments_.empty() || orphan))
        diags_.error("W0030", st.where, "state \"" + short_name(i) + "\" is unreachable");
    }
    if (cut_segments_.empty())
      report_stuck(reach, term, succ, pred);
    reach_ = std::move(reach);
    succ_ = std::move(succ);
    pred_ = std::move(pred);
  }

  // Dominators, then every template and expression against its scope. Each action state
  // k gets a second node n+k, "k succeeded", between k and its `next`; its on_failure edge
  // leaves from k itself. A state may read states.K exactly when n+k dominates it.
  void check_types() {
    size_t n = m_.states.size();
    size_t nn = 2 * n;
    std::vector<std::vector<int>> pred(nn);
    auto edge = [&](size_t from, int to) {
      if (to >= 0)
        pred[static_cast<size_t>(to)].push_back(static_cast<int>(from));
    };
    for (size_t k = 0; k < n; ++k) {
      const State& st = m_.states[k];
      if (st.kind == StateKind::kAction) {
        edge(k, static_cast<int>(n + k));
        edge(n + k, st.next);
        edge(k, st.on_failure);
      } else if (st.kind == StateKind::kCall) {
        // The call's outputs exist once it is left for `next`: after its last item returned
        // (or at once for an empty list).
        edge(k, st.body);
        edge(k, static_cast<int>(n + k));
        edge(n + k, st.next);
        edge(k, st.on_failure);
      } else {
        edge(k, st.next);
        for (const auto& c : st.choices)
          edge(k, c.next);
      }
    }
    std::vector<bool> reach(nn, false);
    {
      std::vector<std::vector<int>> succ(nn);
      for (size_t v = 0; v < nn; ++v) {
        for (int p : pred[v])
          succ[static_cast<size_t>(p)].push_back(static_cast<int>(v));
      }
      std::deque<int> q;
      if (m_.start >= 0) {
        reach[static_cast<size_t>(m_.start)] = true;
        q.push_back(m_.start);
      }
      while (!q.empty()) {
        int v = q.front();
        q.pop_front();
        for (int t : succ[static_cast<size_t>(v)]) {
          if (!reach[static_cast<size_t>(t)]) {
            reach[static_cast<size_t>(t)] = true;
            q.push_back(t);
          }
        }
      }
    }
    // Immediate dominators (Cooper, Harvey and Kennedy's iterative algorithm over reverse
    // postorder): linear in practice, so machines of thousands of states compile quickly.
    std::vector<std::vector<int>> succ(nn);
    for (size_t v = 0; v < nn; ++v) {
      for (int p : pred[v])
        succ[static_cast<size_t>(p)].push_back(static_cast<int>(v));
    }
    std::vector<int> order;  // postorder
    std::vector<int> rpo(nn, -1);
    if (m_.start >= 0) {
      std::vector<char> seen(nn, 0);
      std::vector<std::pair<int, size_t>> stack{{m_.start, 0}};
      seen[static_cast<size_t>(m_.start)] = 1;
      while (!stack.empty()) {
        auto& [v, next] = stack.back();
        auto& out = succ[static_cast<size_t>(v)];
        if (next < out.size()) {
          int t = out[next++];
          if (!seen[static_cast<size_t>(t)]) {
            seen[static_cast<size_t>(t)] = 1;
            stack.push_back({t, 0});
          }
        } else {
          order.push_back(v);
          stack.pop_back();
        }
      }
      std::reverse(order.begin(), order.end());
      for (size_t k = 0; k < order.size(); ++k)
        rpo[static_cast<size_t>(order[k])] = static_cast<int>(k);
    }
    std::vector<int> idom(nn, -1);
    if (m_.start >= 0)
      idom[static_cast<size_t>(m_.start)] = m_.start;
    auto intersect = [&](int a, int b) {
      while (a != b) {
        while (rpo[static_cast<size_t>(a)] > rpo[static_cast<size_t>(b)])
          a = idom[static_cast<size_t>(a)];
        while (rpo[static_cast<size_t>(b)] > rpo[static_cast<size_t>(a)])
          b = idom[static_cast<size_t>(b)];
      }
      return a;
    };
    bool changed = true;
    while (changed) {
      changed = false;
      for (int v : order) {
        if (v == m_.start)
          continue;
        int nd = -1;
        for (int p : pred[static_cast<size_t>(v)]) {
          if (idom[static_cast<size_t>(p)] < 0)
            continue;
          nd = nd < 0 ? p : intersect(p, nd);
        }
        if (nd >= 0 && idom[static_cast<size_t>(v)] != nd) {
          idom[static_cast<size_t>(v)] = nd;
          changed = true;
        }
      }
    }
    // The dominator tree numbered in DFS order: x dominates y exactly when y's interval
    // lies in x's, so "does k's success node dominate i" is two comparisons.
    std::vector<int> tin(nn, -1), tout(nn, -1);
    if (m_.start >= 0) {
      std::vector<std::vector<int>> kids(nn);
      for (size_t v = 0; v < nn; ++v)
        if (idom[v] >= 0 && static_cast<int>(v) != m_.start)
          kids[static_cast<size_t>(idom[v])].push_back(static_cast<int>(v));
      int clock = 0;
      std::vector<std::pair<int, size_t>> stack{{m_.start, 0}};
      tin[static_cast<size_t>(m_.start)] = clock++;
      while (!stack.empty()) {
        auto& [v, next] = stack.back();
        auto& ks = kids[static_cast<size_t>(v)];
        if (next < ks.size()) {
          int c = ks[next++];
          tin[static_cast<size_t>(c)] = clock++;
          stack.push_back({c, 0});
        } else {
          tout[static_cast<size_t>(v)] = clock++;
          stack.pop_back();
        }
      }
    }
    // Each file's action states with their output types, built once.
    std::map<std::string, std::map<std::string, TypeScope::StateOutput>> outputs;
    for (size_t k = 0; k < n; ++k) {
      const State& o = m_.states[k];
      if (o.kind != StateKind::kAction)
        continue;
      const ActionSpec* spec = ActionCatalog::builtin().find(o.action);
      TypeRef out = spec ? spec->output_type : any_type();
      if (!o.for_each.empty())
        out = make_type(K::kList, out);
      outputs[o.segment][short_name(k)] = {static_cast<int>(k), out};
    }
    // States whose success node dominates state i (i reachable; i < n never equals it).
    // A state a cut made unreachable has no known order: no W0021 for it. (For a state
    // still reached, the missing transition could only add paths: its W0021 stands.)
    auto ran_before = [&tin, &tout, n, cut = !cut_segments_.empty()](size_t i, int k) {
      if (cut && tin[i] < 0)
        return true;
      size_t x = n + static_cast<size_t>(k);
      return tin[i] >= 0 && tin[x] >= 0 && tin[x] <= tin[i] && tout[i] <= tout[x];
    };
    // The calls' outputs, innermost first (a called file's states follow its call's): each
    // declared output is checked where the called file succeeds, in every one of its succeed
    // states, and its type is the call's output type.
    for (size_t k = n; k-- > 0;) {
      if (m_.states[k].kind != StateKind::kCall)
        continue;
      auto ci = calls_.find(static_cast<int>(k));
      if (ci == calls_.end()) {  // its file could not be read (W0046): no more errors from it
        outputs[m_.states[k].segment][short_name(k)] = {static_cast<int>(k), any_type()};
        continue;
      }
      State& call = m_.states[k];
      std::vector<size_t> rets;
      for (size_t j = k + 1; j < n; ++j)
        if (m_.states[j].segment == ci->second.segment && m_.states[j].kind == StateKind::kSucceed)
          rets.push_back(j);
      std::vector<Field> fields;
      tosca::Node out = ci->second.outputs;
      if (out && !rets.empty()) {
        TypeScope scope = base_scope;
        scope.states = &outputs[ci->second.segment];
        scope.inputs = ci->second.inputs;
        scope.ran_before = [&ran_before, &rets](int x) {
          return std::all_of(rets.begin(), rets.end(), [&](size_t r) { return ran_before(r, x); });
        };
        for (size_t j = 0; j < out.size(); ++j) {
          std::string name(out.key(j).scalar());
          TypeRef t = check_template(out.value(j), any_type(), scope, "output \"" + name + "\"");
          fields.emplace_back(name, t, true);
        }
        auto t = make_template(out);
        if (t.ok())
          call.returns = std::move(t).value();
      }
      TypeRef type = object_type("outputs of " + ci->second.path, std::move(fields));
      if (!call.for_each.empty())
        type = make_type(K::kList, type);
      outputs[call.segment][short_name(k)] = {static_cast<int>(k), type};
    }
    for (size_t i = 0; i < n; ++i) {
      State& s = m_.states[i];
      TypeScope scope = base_scope;
      scope.states = &outputs[s.segment];
      scope.self_index = static_cast<int>(i);
      if (auto ci = calls_.find(s.owner); ci != calls_.end())
        scope.inputs = ci->second.inputs;
      scope.ran_before = [&ran_before, i](int k) { return ran_before(i, k); };
      check_state(i, s, scope);
    }
  }

 private:
  std::string short_name(size_t i) const { return pending_[i].short_name; }

  // W0031: the reachable states with no path to an end. Their successors are stuck too, so
  // they drain into loops nothing leaves (the bottom strongly connected components of the
  // stuck states): one error per loop, naming its states, at its first state; the states
  // that only lead into a loop (the built-in steps before a looping hook, say) are counted in
  // its message, not reported each.
  void report_stuck(const std::vector<bool>& reach, const std::vector<bool>& term,
                    const std::vector<std::vector<int>>& succ,
                    const std::vector<std::vector<int>>& pred) {
    size_t n = reach.size();
    std::vector<bool> stuck(n);
    size_t stuck_count = 0;
    for (size_t i = 0; i < n; ++i) {
      stuck[i] = reach[i] && !term[i];
      stuck_count += stuck[i] ? 1 : 0;
    }
    if (stuck_count == 0)
      return;
    // Kosaraju, iteratively: finish order on succ, then components on pred.
    std::vector<int> order;
    std::vector<bool> seen(n, false);
    for (size_t root = 0; root < n; ++root) {
      if (!stuck[root] || seen[root])
        continue;
      std::vector<std::pair<int, size_t>> stack{{static_cast<int>(root), 0}};
      seen[root] = true;
      while (!stack.empty()) {
        auto& [v, k] = stack.back();
        const auto& out = succ[static_cast<size_t>(v)];
        if (k < out.size()) {
          int w = out[k++];
          if (stuck[static_cast<size_t>(w)] && !seen[static_cast<size_t>(w)]) {
            seen[static_cast<size_t>(w)] = true;
            stack.push_back({w, 0});
          }
        } else {
          order.push_back(v);
          stack.pop_back();
        }
      }
    }
    std::vector<int> comp(n, -1);
    int comps = 0;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      if (comp[static_cast<size_t>(*it)] >= 0)
        continue;
      std::vector<int> todo{*it};
      comp[static_cast<size_t>(*it)] = comps;
      while (!todo.empty()) {
        int v = todo.back();
        todo.pop_back();
        for (int w : pred[static_cast<size_t>(v)]) {
          if (stuck[static_cast<size_t>(w)] && comp[static_cast<size_t>(w)] < 0) {
            comp[static_cast<size_t>(w)] = comps;
            todo.push_back(w);
          }
        }
      }
      ++comps;
    }
    std::vector<bool> bottom(static_cast<size_t>(comps), true);
    std::vector<std::vector<size_t>> members(static_cast<size_t>(comps));
    for (size_t v = 0; v < n; ++v) {
      if (!stuck[v])
        continue;
      members[static_cast<size_t>(comp[v])].push_back(v);
      for (int w : succ[v]) {
        if (comp[static_cast<size_t>(w)] != comp[v])
          bottom[static_cast<size_t>(comp[v])] = false;
      }
    }
    size_t in_loops = 0, loops = 0;
    for (int c = 0; c < comps; ++c) {
      in_loops += bottom[static_cast<size_t>(c)] ? members[static_cast<size_t>(c)].size() : 0;
      loops += bottom[static_cast<size_t>(c)] ? 1 : 0;
    }
    for (int c = 0; c < comps; ++c) {
      const auto& ms = members[static_cast<size_t>(c)];
      if (!bottom[static_cast<size_t>(c)])
        continue;
      std::string msg;
      const auto& own = succ[ms[0]];
      if (ms.size() == 1 &&
          std::find(own.begin(), own.end(), static_cast<int>(ms[0])) == own.end()) {
        msg = "state \"" + short_name(ms[0]) + "\" has no path to a succeed or fail state";
      } else if (ms.size() == 1) {
        msg = "state \"" + short_name(ms[0]) + "\" loops on itself with no way out";
      } else {
        std::string names;
        for (size_t k = 0; k < ms.size() && k < 8; ++k)
          names += (k == 0 ? "\"" : ", \"") + short_name(ms[k]) + "\"";
        if (ms.size() > 8)
          names += " and " + std::to_string(ms.size() - 8) + " more";
        msg = "states " + names + " loop with no way out";
      }
      if (ms.size() > 1 || msg.find(" loops ") != std::string::npos)
        msg += ": none reaches a succeed or fail state";
      if (stuck_count > in_loops) {
        size_t others = stuck_count - in_loops;
        msg += " (" + std::to_string(others) + " other state" +
               (others == 1 ? " leads" : "s lead") +
               (loops == 1 ? " only into it)" : " only into loops like it)");
      }
      diags_.error("W0031", m_.states[ms[0]].where, msg);
    }
  }

  static std::vector<int> edges(const State& s) {
    std::vector<int> out;
    if (s.body >= 0)
      out.push_back(s.body);
    if (s.next >= 0)
      out.push_back(s.next);
    if (s.on_failure >= 0)
      out.push_back(s.on_failure);
    for (const auto& c : s.choices) {
      if (c.next >= 0)
        out.push_back(c.next);
    }
    return out;
  }

  void unknown_key(tosca::Node key, const std::vector<std::string>& allowed, const char* what) {
    std::string k(key.scalar());
    if (std::find(allowed.begin(), allowed.end(), k) != allowed.end())
      return;
    std::string msg = "unknown key \"" + k + "\" in a " + what;
    std::string hint = base::closest_match(k, allowed);
    if (!hint.empty())
      msg += "; did you mean \"" + hint + "\"?";
    diags_.error("W0002", key.location(), msg);
  }

  // An error that leaves a transition of the file being read missing or pointing nowhere
  // (W0001, W0003, W0004, W0032): the file's graph is cut (cut_segments_).
  void cut_error(const char* code, const base::SourceLocation& where, const std::string& msg) {
    diags_.error(code, where, msg);
    cut_segments_.insert(parsing_segment_);
  }

  int target(tosca::Node n, const std::map<std::string, int>& local) {
    std::string name(n.scalar());
    auto it = local.find(name);
    if (n.is_scalar() && it != local.end())
      return it->second;
    std::vector<std::string> names;
    for (const auto& kv : local)
      names.push_back(kv.first);
    std::string msg = "no state \"" + name + "\" in this workflow";
    std::string hint = base::closest_match(name, names);
    if (!hint.empty())
      msg += "; did you mean \"" + hint + "\"?";
    cut_error("W0004", n.location(), msg);
    return -1;
  }

  std::optional<double> duration(tosca::Node n, const char* what) {
    std::optional<double> d;
    if (n.is_scalar())
      d = parse_duration(n.scalar());
    if (!d)
      diags_.error("W0041", n.location(),
                   std::string(what) + " must be a duration such as 30s, 5m, 1h, 500ms or a " +
                       "number of seconds, not \"" + tosca::to_yaml_flow(n) + "\"");
    return d;
  }

  double positive(tosca::Node n, double d) {
    if (d <= 0)
      diags_.error("W0041", n.location(), "a timeout must be longer than 0");
    return d;
  }

  void parse_state(size_t i, const std::map<std::string, int>& local) {
    State& s = m_.states[i];
    parsing_segment_ = s.segment;
    tosca::Node n = pending_[i].node;
    if (!n.is_map()) {
      cut_error("W0001", n.location(), "a state is a map (action, choice, wait, succeed or fail)");
      return;
    }
    static const std::vector<std::string> kKinds = {"action",  "choice", "wait",
                                                    "succeed", "fail",   "call"};
    std::vector<std::string> kinds;
    for (const auto& k : kKinds) {
      if (n.get(k))
        kinds.push_back(k);
    }
    if (kinds.size() != 1) {
      cut_error("W0032", s.where,
                kinds.empty() ? "state \"" + pending_[i].short_name +
                                    "\" needs one of action, choice, wait, succeed, fail, call"
                              : "state \"" + pending_[i].short_name + "\" has both \"" + kinds[0] +
                                    "\" and \"" + kinds[1] + "\"");
      return;
    }
    const std::string& kind = kinds[0];
    std::vector<std::string> allowed = {"description", kind};
    if (kind == "action")
      allowed.insert(allowed.end(), {"with", "timeout", "retry", "for_each", "as", "parallelism",
                                     "next", "on_failure", "compensate"});
    else if (kind == "choice")
      allowed.push_back("default");
    else if (kind == "wait")
      allowed.push_back("next");
    else if (kind == "call")
      allowed.insert(allowed.end(),
                     {"with", "for_each", "as", "next", "on_failure", "parallelism"});
    if (kind == "call" && n.get("parallelism"))
      diags_.error("W0002", n.get("parallelism").location(),
                   "a call runs its items one after the other: \"parallelism\" is an action's "
                   "(a called file can fan out within each item)");
    for (size_t k = 0; k < n.size(); ++k)
      unknown_key(n.key(k), allowed, (kind + " state").c_str());
    s.description = std::string(n.get("description").scalar());
    if (kind == "action") {
      s.kind = StateKind::kAction;
      s.action = std::string(n.get("action").scalar());
      const ActionSpec* spec = ActionCatalog::builtin().find(s.action);
      if (spec == nullptr) {
        std::string msg = "unknown action \"" + s.action + "\"";
        std::string hint = base::closest_match(s.action, ActionCatalog::builtin().names());
        if (!hint.empty())
          msg += "; did you mean \"" + hint + "\"?";
        diags_.error("W0010", n.get("action").location(), msg);
      }
      if (tosca::Node t = n.get("timeout")) {
        if (auto d = duration(t, "timeout"))
          s.timeout_s = positive(t, *d);
      } else if (spec != nullptr && spec->side_effects) {
        diags_.error("W0014", s.where,
                     "state \"" + pending_[i].short_name + "\" runs \"" + s.action +
                         "\", which has side effects, and needs a \"timeout\"");
      } else {
        s.timeout_s = 60;
      }
      if (tosca::Node r = n.get("retry"))
        parse_retry(r, s.retry);
      if (tosca::Node fe = n.get("for_each")) {
        s.for_each = std::string(fe.scalar());
        if (tosca::Node as = n.get("as"))
          s.as = std::string(as.scalar());
        if (tosca::Node p = n.get("parallelism")) {
          json::value pv = yaml_to_json(p);
          if (!pv.is_int64() || pv.get_int64() < 0)
            diags_.error("W0013", p.location(), "parallelism must be an integer >= 0");
          else
            s.parallelism = static_cast<int>(pv.get_int64());
        }
      } else if (n.get("as") || n.get("parallelism")) {
        diags_.error("W0002", (n.get("as") ? n.get("as") : n.get("parallelism")).location(),
                     "\"as\" and \"parallelism\" only apply with \"for_each\"");
      }
      if (tosca::Node c = n.get("compensate")) {
        if (!c.is_map() || !c.get("action")) {
          diags_.error("W0001", c.location(),
                       "\"compensate\" is a map with \"action\" and \"with\"");
        } else {
          static const std::vector<std::string> kComp = {"action", "with", "timeout"};
          for (size_t k = 0; k < c.size(); ++k)
            unknown_key(c.key(k), kComp, "compensation");
          Compensation comp;
          comp.action = std::string(c.get("action").scalar());
          const ActionSpec* cspec = ActionCatalog::builtin().find(comp.action);
          if (cspec == nullptr)
            diags_.error("W0010", c.get("action").location(),
                         "unknown action \"" + comp.action + "\"");
          if (tosca::Node t = c.get("timeout")) {
            if (auto d = duration(t, "timeout"))
              comp.timeout_s = positive(t, *d);
          } else if (cspec != nullptr && cspec->side_effects) {
            diags_.error("W0014", c.location(),
                         "the compensation runs \"" + comp.action +
                             "\", which has side effects, and needs a \"timeout\"");
          } else {
            comp.timeout_s = 60;
          }
          s.compensate = std::move(comp);
        }
      }
      next_and_on_failure(i, n, local);
    } else if (kind == "choice") {
      s.kind = StateKind::kChoice;
      tosca::Node list = n.get("choice");
      if (!list.is_seq() || list.size() == 0) {
        cut_error("W0001", list.location(), "\"choice\" is a list of {when, next}");
      } else {
        for (size_t k = 0; k < list.size(); ++k) {
          tosca::Node c = list.item(k);
          if (!c.is_map() || !c.get("when") || !c.get("next")) {
            cut_error("W0001", c.location(), "a choice is a map with \"when\" and \"next\"");
            continue;
          }
          static const std::vector<std::string> kChoice = {"when", "next"};
          for (size_t j = 0; j < c.size(); ++j)
            unknown_key(c.key(j), kChoice, "choice");
          Choice ch;
          ch.condition = std::string(c.get("when").scalar());
          ch.next = target(c.get("next"), local);
          s.choices.push_back(std::move(ch));
        }
      }
      if (tosca::Node d = n.get("default"))
        s.next = target(d, local);
      else
        cut_error("W0003", s.where,
                  "choice state \"" + pending_[i].short_name + "\" needs \"default\"");
    } else if (kind == "wait") {
      s.kind = StateKind::kWait;
      if (tosca::Node nx = n.get("next"))
        s.next = target(nx, local);
      else
        cut_error("W0003", s.where, "state \"" + pending_[i].short_name + "\" needs \"next\"");
    } else if (kind == "call") {
      s.kind = StateKind::kCall;
      tosca::Node c = n.get("call");
      if (!c.is_scalar() || c.scalar().empty())
        cut_error("W0001", c.location(), "\"call\" names a workflow file of the package");
      else
        s.call = std::string(c.scalar());
      if (tosca::Node fe = n.get("for_each")) {
        s.for_each = std::string(fe.scalar());
        if (tosca::Node as = n.get("as"))
          s.as = std::string(as.scalar());
      } else if (n.get("as")) {
        diags_.error("W0002", n.get("as").location(), "\"as\" only applies with \"for_each\"");
      }
      next_and_on_failure(i, n, local);
      if (s.on_failure == static_cast<int>(i))
        diags_.error("W0046", n.get("on_failure").location(),
                     "a call's on_failure cannot be the call itself (go through a state that "
                     "decides, such as a wait, to run the call again from its first item)");
    } else if (kind == "succeed") {
      s.kind = StateKind::kSucceed;
    } else {
      s.kind = StateKind::kFail;
    }
  }

  // An action's or a call's `next` (required) and `on_failure`.
  void next_and_on_failure(size_t i, tosca::Node n, const std::map<std::string, int>& local) {
    State& s = m_.states[i];
    if (tosca::Node nx = n.get("next"))
      s.next = target(nx, local);
    else
      cut_error("W0003", s.where, "state \"" + pending_[i].short_name + "\" needs \"next\"");
    if (tosca::Node f = n.get("on_failure"))
      s.on_failure = target(f, local);
  }

  void parse_retry(tosca::Node r, RetryPolicy& p) {
    if (!r.is_map()) {
      diags_.error("W0042", r.location(),
                   "\"retry\" is a map: attempts, backoff, factor, max_delay, on");
      return;
    }
    static const std::vector<std::string> kRetry = {"attempts", "backoff", "factor", "max_delay",
                                                    "on"};
    for (size_t k = 0; k < r.size(); ++k)
      unknown_key(r.key(k), kRetry, "retry policy");
    if (tosca::Node a = r.get("attempts")) {
      json::value v = yaml_to_json(a);
      if (!v.is_int64() || v.get_int64() < 1 || v.get_int64() > 1000)
        diags_.error("W0042", a.location(), "attempts must be an integer from 1 to 1000");
      else
        p.attempts = static_cast<int>(v.get_int64());
    }
    if (tosca::Node b = r.get("backoff")) {
      if (auto d = duration(b, "backoff"))
        p.backoff_s = *d;
    }
    if (tosca::Node m = r.get("max_delay")) {
      if (auto d = duration(m, "max_delay"))
        p.max_delay_s = *d;
    }
    if (tosca::Node f = r.get("factor")) {
      json::value v = yaml_to_json(f);
      if (!v.is_number() || v.to_number<double>() < 1)
        diags_.error("W0042", f.location(), "factor must be a number >= 1");
      else
        p.factor = v.to_number<double>();
    }
    if (tosca::Node on = r.get("on")) {
      p.on.clear();
      for (size_t k = 0; on.is_seq() && k < on.size(); ++k) {
        std::string c(on.item(k).scalar());
        const auto& cls = error_classes();
        if (c == "invalid") {
          diags_.error("W0042", on.item(k).location(),
                       "errors of class \"invalid\" are never retried: the inputs are wrong");
        } else if (std::find(cls.begin(), cls.end(), c) == cls.end()) {
          std::string msg = "unknown error class \"" + c + "\" (transient, timeout, failed)";
          std::string hint = base::closest_match(c, cls);
          if (!hint.empty())
            msg += "; did you mean \"" + hint + "\"?";
          diags_.error("W0042", on.item(k).location(), msg);
        } else {
          p.on.push_back(c);
        }
      }
      if (!on.is_seq())
        diags_.error("W0042", on.location(), "\"on\" is a list of error classes");
    }
  }

  // Checks one value of a template against the type it must have; returns its type.
  TypeRef check_template(tosca::Node n, const TypeRef& want, const TypeScope& scope,
                         const std::string& what) {
    TypeRef got;
    if (n.is_scalar())
      check_foreign_template(n);
    if (n.is_scalar() && n.scalar().find("${") != std::string_view::npos) {
      std::vector<StringPart> parts;
      std::string err;
      uint32_t off = 0;
      if (!split_template_string(n.scalar(), parts, &err, &off)) {
        diags_.error("W0020", shifted(n, off), err);
        return any_type();
      }
      bool whole = parts.size() == 1 && parts[0].is_expr;
      for (const auto& p : parts) {
        if (!p.is_expr)
          continue;
        std::string code;
        auto e = Expr::parse(p.text, &err, &off, &code);
        if (!e) {
          diags_.error(code, shifted(n, p.offset + off), "expression: " + err);
          return any_type();
        }
        std::vector<TypeError> errors;
        TypeRef t = check_expr(*e, scope, errors);
        for (const auto& te : errors)
          diags_.error(te.code, shifted(n, p.offset + te.offset), te.message);
        if (whole)
          got = t;
      }
      if (!whole)
        got = make_type(K::kString);
    } else if (n.is_map()) {
      if (want->kind == K::kObject) {
        std::vector<std::string> names;
        for (const auto& f : want->fields)
          names.push_back(f.name);
        for (size_t i = 0; i < n.size(); ++i) {
          std::string k(n.key(i).scalar());
          const Field* f = want->field(k);
          if (f == nullptr) {
            std::string msg =
                "unknown field \"" + k + "\" in " + what + " (" + to_string(*want) + ")";
            std::string hint = base::closest_match(k, names);
            if (!hint.empty())
              msg += "; did you mean \"" + hint + "\"?";
            diags_.error("W0011", n.key(i).location(), msg);
            continue;
          }
          check_template(n.value(i), f->type, scope, what + "." + k);
        }
        for (const auto& f : want->fields) {
          if (f.required && !n.get(f.name))
            diags_.error("W0012", n.location(), what + " needs field \"" + f.name + "\"");
        }
        return want;
      }
      TypeRef elem = want->kind == K::kMap ? want->elem : any_type();
      for (size_t i = 0; i < n.size(); ++i)
        check_template(n.value(i), elem, scope, what + "." + std::string(n.key(i).scalar()));
      got = make_type(K::kMap, elem);
      if (want->kind == K::kAny || want->kind == K::kMap)
        return got;
    } else if (n.is_seq()) {
      TypeRef elem = want->kind == K::kList ? want->elem : any_type();
      for (size_t i = 0; i < n.size(); ++i)
        check_template(n.item(i), elem, scope, what + "[" + std::to_string(i) + "]");
      got = make_type(K::kList, elem);
      if (want->kind == K::kAny || want->kind == K::kList)
        return got;
    } else {
      got = type_of_literal(yaml_to_json(n));
    }
    if (!assignable(*got, *want))
      diags_.error("W0013", n.location(),
                   what + " expects " + to_string(*want) + ", not " + to_string(*got));
    return got;
  }

  // Checks `with:` against an action's inputs.
  void check_inputs(tosca::Node with, const ActionSpec& spec, const TypeScope& scope,
                    const base::SourceLocation& where, const std::string& who) {
    if (with && !with.is_map()) {
      diags_.error("W0013", with.location(), "\"with\" is a map of the action's inputs");
      return;
    }
    std::vector<std::string> names;
    for (const auto& f : spec.inputs)
      names.push_back(f.name);
    for (size_t i = 0; with && i < with.size(); ++i) {
      std::string k(with.key(i).scalar());
      const Field* f = nullptr;
      for (const auto& in : spec.inputs) {
        if (in.name == k)
          f = &in;
      }
      if (f == nullptr) {
        std::string msg = "action \"" + spec.name + "\" has no input \"" + k + "\"";
        std::string hint = base::closest_match(k, names);
        if (!hint.empty())
          msg += "; did you mean \"" + hint + "\"?";
        diags_.error("W0011", with.key(i).location(), msg);
        continue;
      }
      check_template(with.value(i), f->type, scope, "input \"" + k + "\"");
      if (std::find(spec.shell_text.begin(), spec.shell_text.end(), k) != spec.shell_text.end())
        check_shell_text(with.value(i), scope, spec.name, k);
    }
    for (const auto& f : spec.inputs) {
      if (f.required && !(with && with.get(f.name)))
        diags_.error("W0012", with ? with.location() : where,
                     who + ": action \"" + spec.name + "\" needs input \"" + f.name + "\"");
    }
    for (const auto& group : spec.one_of) {
      int given = 0;
      for (const auto& g : group)
        given += (with && with.get(g)) ? 1 : 0;
      if (given != 1) {
        std::string list;
        for (const auto& g : group)
          list += (list.empty() ? "" : ", ") + g;
        diags_.error("W0012", with ? with.location() : where,
                     who + ": action \"" + spec.name + "\" needs exactly one of " + list);
      }
    }
  }

  // W0045 (a warning): "{{ name }}" as Jinja, Ansible or Mustache write it; vnflow sends
  // it as written. "{{." (a Go template, as `docker inspect --format` takes) is not
  // reported.
  void check_foreign_template(tosca::Node n) {
    std::string_view t = n.scalar();
    auto ident = [](char c, bool first) {
      return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_' ||
             (!first && (std::isdigit(static_cast<unsigned char>(c)) != 0 || c == '.'));
    };
    // Each character is looked at by at most one tag's scan: linear in the text.
    for (size_t at = t.find("{{"); at != std::string_view::npos; at = t.find("{{", at + 2)) {
      // ${{ ... }} (GitHub Actions, or $${{ written to mean it) is not Jinja.
      if (at > 0 && t[at - 1] == '$')
        continue;
      size_t i = at + 2;
      while (i < t.size() && (t[i] == ' ' || t[i] == '-'))
        ++i;
      // Jinja's {{ name }}, {{ a.b }}, {{ name | filter }}: a bare dotted name, then the end
      // or a filter. Go templates ({{.X}}, {{json .X}}, {{ if .Values.x }}) have an argument.
      if (i >= t.size() || !ident(t[i], true))
        continue;
      size_t j = i + 1;
      while (j < t.size() && ident(t[j], false))
        ++j;
      std::string_view word = t.substr(i, j - i);
      if (word == "end" || word == "else" || word == "break" || word == "continue")
        continue;  // a Go template's own words
      while (j < t.size() && (t[j] == ' ' || t[j] == '-'))
        ++j;
      if (t.compare(j, 2, "}}") != 0 && (j >= t.size() || t[j] != '|'))
        continue;
      size_t end = std::min(
          t.size(), t.find("}}", j) == std::string_view::npos ? j + 1 : t.find("}}", j) + 2);
      diags_.warning(
          "W0045", shifted(n, static_cast<uint32_t>(at)),
          "\"" + base::printable(std::string(t.substr(at, std::min<size_t>(end - at, 60)))) +
              "\" is another template language's; vnflow's expressions are ${...} "
              "(this text is sent as written)");
      return;
    }
  }

  // W0043: a request value put into text a shell runs, unquoted. `n` is the input's value:
  // the script text, or an argv list whose script is the item after "-c" when argv[0] is a
  // shell (sh -c SCRIPT, bash -ec SCRIPT ...). Other argv items are not parsed by a shell.
  void check_shell_text(tosca::Node n, const TypeScope& scope, const std::string& action,
                        const std::string& input) {
    if (n.is_seq()) {
      if (n.size() < 2 || !n.item(0).is_scalar())
        return;
      std::string_view prog = n.item(0).scalar();
      prog = prog.substr(
          prog.find_last_of('/') == std::string_view::npos ? 0 : prog.find_last_of('/') + 1);
      static const std::set<std::string_view> kShells = {"sh",  "bash", "dash", "ash",
                                                         "ksh", "zsh",  "mksh", "busybox"};
      if (kShells.count(prog) == 0)
        return;
      for (size_t i = 1; i + 1 < n.size(); ++i) {
        std::string_view a = n.item(i).scalar();
        if (a.size() < 2 || a[0] != '-' || a[1] == '-')
          continue;
        if (a.find('c') != std::string_view::npos) {
          check_shell_text(n.item(i + 1), scope, action, input + "[" + std::to_string(i + 1) + "]");
          return;
        }
      }
      return;
    }
    if (!n.is_scalar() || n.scalar().find("${") == std::string_view::npos)
      return;
    std::vector<StringPart> parts;
    std::string err;
    uint32_t off = 0;
    if (!split_template_string(n.scalar(), parts, &err, &off))
      return;  // W0020 already
    for (const auto& p : parts) {
      if (!p.is_expr)
        continue;
      auto e = Expr::parse(p.text, &err, &off);
      if (!e || !carries_request_text(*e, scope))
        continue;
      std::string text = p.text;
      size_t b = text.find_first_not_of(" \t\n");
      size_t en = text.find_last_not_of(" \t\n");
      text = b == std::string::npos ? text : text.substr(b, en - b + 1);
      diags_.warning("W0043", shifted(n, p.offset - 2),
                     "\"${" + text + "}\" puts a request value unquoted into the shell text of " +
                         action + " input \"" + input +
                         "\" (\"x; rm -rf ~\" would run a command); write ${shellquote(" + text +
                         ")}, or pass the value in env: and write \"$NAME\"");
    }
  }

  base::Result<Template> make_template(tosca::Node n) {
    return Template::parse(n ? yaml_to_json(n) : json::value());
  }

  // A fan-out's list (an action's, a call's): one expression giving a list; its items are
  // `as` (and `index`) in the state's scope.
  void check_for_each(tosca::Node n, State& s, TypeScope& scope) {
    tosca::Node fe = n.get("for_each");
    TypeRef lt = check_template(fe, any_type(), scope, "for_each");
    bool whole = fe.is_scalar() && fe.scalar().size() > 3 && fe.scalar().substr(0, 2) == "${" &&
                 fe.scalar().back() == '}';
    if (!whole) {
      diags_.error("W0022", fe.location(), "for_each needs one expression, ${...}, giving a list");
    } else if (lt->kind != K::kList && lt->kind != K::kAny) {
      diags_.error("W0022", fe.location(), "for_each runs over a list; this is " + to_string(*lt));
    } else {
      std::string err;
      uint32_t off = 0;
      s.for_each = std::string(fe.scalar().substr(2, fe.scalar().size() - 3));
      s.for_each_expr = Expr::parse(s.for_each, &err, &off);
    }
    scope.item_from_request = s.for_each_expr && carries_request_text(*s.for_each_expr, scope);
    scope.item_name = s.as;
    scope.item = lt->kind == K::kList ? lt->elem : any_type();
    if (is_scope_name(s.as))
      diags_.error("W0002", n.get("as") ? n.get("as").location() : fe.location(),
                   "\"as: " + s.as + "\" hides a name expressions use; pick another");
  }

  void check_state(size_t i, State& s, TypeScope& scope) {
    tosca::Node n = pending_[i].node;
    if (!n.is_map())
      return;
    const std::string who = "state \"" + pending_[i].short_name + "\"";
    if (s.kind == StateKind::kCall) {
      if (n.get("for_each"))
        check_for_each(n, s, scope);
      auto ci = calls_.find(static_cast<int>(i));
      tosca::Node with = n.get("with");
      if (with && !with.is_map()) {
        diags_.error("W0013", with.location(), "\"with\" is a map of the called workflow's inputs");
      } else if (ci != calls_.end() && with) {
        check_template(with, ci->second.inputs, scope, "the call of " + ci->second.path);
      } else if (ci != calls_.end()) {
        for (const auto& f : ci->second.inputs->fields)
          if (f.required)
            diags_.error("W0012", s.where,
                         who + ": " + ci->second.path + " needs input \"" + f.name + "\"");
      }
    } else if (s.kind == StateKind::kAction) {
      const ActionSpec* spec = ActionCatalog::builtin().find(s.action);
      if (n.get("for_each"))
        check_for_each(n, s, scope);
      if (spec != nullptr)
        check_inputs(n.get("with"), *spec, scope, s.where, who);
      auto t = make_template(n.get("with"));
      if (t.ok())
        s.with = std::move(t).value();
      if (s.compensate) {
        tosca::Node c = n.get("compensate");
        const ActionSpec* cspec = ActionCatalog::builtin().find(s.compensate->action);
        TypeScope cs = scope;
        cs.self = spec ? spec->output_type : any_type();
        // At a rollback the called file's states hold the last item's outputs, not this
        // item's: a compensation there reads its own (self) and its call's inputs only.
        if (s.owner >= 0)
          cs.states_note =
              "a compensation in a called workflow reads self (its state's outputs) and "
              "inputs, not states: at a rollback they hold the last item's outputs";
        if (cspec != nullptr)
          check_inputs(c.get("with"), *cspec, cs, c.location(), who + " compensation");
        auto ct = make_template(c.get("with"));
        if (ct.ok())
          s.compensate->with = std::move(ct).value();
      }
    } else if (s.kind == StateKind::kChoice) {
      tosca::Node list = n.get("choice");
      size_t ci = 0;
      for (size_t k = 0; list.is_seq() && k < list.size(); ++k) {
        tosca::Node w = list.item(k).get("when");
        if (!w)
          continue;
        TypeRef t = check_template(w, make_type(K::kBool), scope, "when");
        (void)t;
        std::string_view src = w.scalar();
        if (ci < s.choices.size()) {
          if (src.size() > 3 && src.substr(0, 2) == "${" && src.back() == '}') {
            std::string err;
            uint32_t off = 0;
            s.choices[ci].condition = std::string(src.substr(2, src.size() - 3));
            s.choices[ci].expr = Expr::parse(s.choices[ci].condition, &err, &off);
          } else {
            diags_.error("W0013", w.location(),
                         "\"when\" needs one expression, ${...}, giving a boolean");
          }
          ++ci;
        }
      }
    } else if (s.kind == StateKind::kWait) {
      tosca::Node w = n.get("wait");
      if (w.is_scalar() && w.scalar().find("${") == std::string_view::npos) {
        if (auto d = duration(w, "wait"))
          s.wait_seconds = Template::parse(json::value(*d)).value();
      } else {
        TypeRef t = check_template(w, any_type(), scope, "wait");
        if (t->kind != K::kInt && t->kind != K::kNumber && t->kind != K::kAny)
          diags_.error("W0013", w.location(),
                       "wait needs a number of seconds, not " + to_string(*t));
        auto tt = make_template(w);
        if (tt.ok())
          s.wait_seconds = std::move(tt).value();
      }
    } else if (s.kind == StateKind::kFail) {
      tosca::Node f = n.get("fail");
      check_template(f, make_type(K::kString), scope, "fail message");
      auto t = make_template(f);
      if (t.ok())
        s.message = std::move(t).value();
    } else if (s.kind == StateKind::kSucceed) {
      json::value v = yaml_to_json(n.get("succeed"));
      if (!(v.is_bool() && v.get_bool()))
        diags_.error("W0013", n.get("succeed").location(), "write \"succeed: true\"");
    }
  }

  base::Diagnostics& diags_;
  Machine& m_;
  std::vector<Pending> pending_;
  std::map<std::string, std::map<std::string, int>> segments_;
  std::vector<bool> reach_;
  // The files (segments) with a transition missing or to no state (W0003, W0004, W0032,
  // W0001), and the one of the state being read.
  std::set<std::string> cut_segments_;
  std::string parsing_segment_;
  std::set<int> segment_starts_;  // each file's start state
  std::vector<std::vector<int>> succ_, pred_;
  // Called files: kept alive (Nodes point into them), the chain being inlined, and each call
  // state's callee.
  std::map<std::string, std::pair<std::shared_ptr<const tosca::YamlFile>, size_t>> files_;
  size_t inlined_bytes_ = 0;
  std::vector<std::string> call_stack_;
  std::map<int, CallInfo> calls_;
};

TypeScope make_base_scope(std::string_view operation, TypeRef vnfd) {
  TypeScope s;
  s.request = request_type(operation);
  s.instance = ActionCatalog::builtin().type("instance");
  s.op = ActionCatalog::builtin().type("op");
  s.vnfd = std::move(vnfd);
  return s;
}

void finish(Machine& m) {
  m.compiler_version = kCompilerVersion;
  m.digest = base::digest_hex(base::DigestAlgorithm::kSha256, json::serialize(m.to_json()));
}

}  // namespace

int Machine::find(std::string_view name) const {
  for (size_t i = 0; i < states.size(); ++i) {
    if (states[i].name == name)
      return static_cast<int>(i);
  }
  return -1;
}

std::shared_ptr<const Machine> compile(const tosca::Package& pkg, const CompileOptions& options,
                                       base::Diagnostics& diags) {
  base::SourceLocation pkg_loc{pkg.display_name, 0, 0};
  const OperationInfo* op = find_operation(options.operation);
  if (op == nullptr) {
    std::vector<std::string> names;
    for (const auto& o : operations())
      names.push_back(o.name);
    std::string msg = "unknown LCM operation \"" + options.operation + "\"";
    std::string hint = base::closest_match(options.operation, names);
    if (!hint.empty())
      msg += "; did you mean \"" + hint + "\"?";
    diags.error("W0050", pkg_loc, msg);
    return nullptr;
  }
  const tosca::Flavour* fl = nullptr;
  if (options.flavour.empty() && pkg.flavours.size() == 1) {
    fl = &pkg.flavours[0];
  } else {
    fl = pkg.flavour(options.flavour);
  }
  if (fl == nullptr) {
    std::vector<std::string> ids;
    std::string list;
    for (const auto& f : pkg.flavours) {
      ids.push_back(f.id);
      list += (list.empty() ? "" : ", ") + f.id;
    }
    std::string msg = options.flavour.empty()
                          ? "the package has " + std::to_string(pkg.flavours.size()) +
                                " flavours; choose one (" + list + ")"
                          : "no flavour \"" + options.flavour + "\" (flavours: " + list + ")";
    diags.error("W0050", pkg_loc, msg);
    return nullptr;
  }
  auto m = std::make_shared<Machine>();
  m->operation = op->name;
  m->flavour = fl->id;
  m->package_digest = pkg.digest;
  TypeRef vnfd_type;
  build_vnfd(pkg, *fl, m->vnfd, vnfd_type);

  Compiler c(diags, *m);
  c.base_scope = make_base_scope(op->name, vnfd_type);
  c.reader = [&pkg](const std::string& path) -> base::Result<std::string> {
    if (!std::binary_search(pkg.files.begin(), pkg.files.end(), path))
      return base::Status::NotFound("no file \"" + base::printable(path) + "\" in the package");
    return pkg.read_file(path);
  };
  c.display = [&pkg](const std::string& path) { return pkg.display(path); };
  // Keep every parsed file alive until the machine is built: Nodes point into them.
  std::vector<std::shared_ptr<const tosca::YamlFile>> files;
  std::vector<std::pair<std::string, int>> starts;  // segment, start index
  size_t errors_before = diags.error_count();

  auto add_hook = [&](const std::string& hook) {
    const tosca::LcmOperation* lop = nullptr;
    for (const auto& o : fl->lcm_operations) {
      if (o.name == hook)
        lop = &o;
    }
    if (lop == nullptr || !lop->implementation)
      return;
    const auto& impl = *lop->implementation;
    if (!impl.primary_artifact || impl.primary_artifact->type != kWorkflowArtifactType) {
      std::string what = impl.primary_artifact ? "artifact \"" + impl.primary + "\" of type \"" +
                                                     impl.primary_artifact->type + "\""
                                               : "\"" + impl.primary + "\"";
      diags.add({base::Severity::kError,
                 "W0040",
                 lop->where,
                 hook + " is implemented by " + what + ", which vnflow cannot run",
                 {"vnflow runs hooks written as workflows: an artifact of type " +
                  std::string(kWorkflowArtifactType) + " (import vnflow_types.yaml)"}});
      return;
    }
    const auto& art = *impl.primary_artifact;
    if (!art.present) {
      diags.error("W0040", art.where, "workflow file \"" + art.file + "\" is not in the package");
      return;
    }
    auto text = pkg.read_file(art.path);
    if (!text.ok()) {
      diags.error("W0040", art.where, text.status().message());
      return;
    }
    auto file = tosca::parse_yaml_file(pkg.display(art.path), text.value(), tosca::Limits{}, diags);
    if (file == nullptr)
      return;
    files.push_back(file);
    int start = c.add_segment(hook, file->root(), art.path);
    starts.emplace_back(hook, start);
  };

  add_hook(op->hook + "_start");
  {
    std::string_view src = builtin_source(op->name);
    auto file = tosca::parse_yaml_file("workflows/builtin/" + op->name + ".yaml", src,
                                       tosca::Limits{}, diags);
    BASE_CHECK(file != nullptr);
    files.push_back(file);
    starts.emplace_back(op->name, c.add_segment(op->name, file->root()));
  }
  add_hook(op->hook + "_end");
  for (const auto& st : starts) {
    if (st.second < 0)
      return nullptr;
  }
  for (size_t i = 0; i + 1 < starts.size(); ++i)
    c.link(starts[i].first, starts[i + 1].second);
  m->start = starts.front().second;
  c.check_graph();
  c.check_types();
  if (diags.error_count() > errors_before)
    return nullptr;
  finish(*m);
  return m;
}

std::shared_ptr<const Machine> compile_file(std::string display, std::string_view text,
                                            std::string_view operation, std::string_view segment,
                                            base::Diagnostics& diags, const FileReader& reader) {
  auto m = std::make_shared<Machine>();
  m->operation = std::string(operation);
  m->vnfd = json::object();
  size_t errors_before = diags.error_count();
  // Calls are relative to the file's folder: the reader's root.
  std::string dir;
  if (size_t slash = display.rfind('/'); slash != std::string::npos)
    dir = display.substr(0, slash + 1);
  std::string own = display.substr(dir.size());
  auto file = tosca::parse_yaml_file(std::move(display), text, tosca::Limits{}, diags);
  if (file == nullptr)
    return nullptr;
  Compiler c(diags, *m);
  c.base_scope = make_base_scope(operation, any_type());
  if (c.base_scope.request == nullptr)
    c.base_scope.request = any_type();
  if (reader) {
    c.reader = reader;
    c.display = [dir](const std::string& path) { return dir + path; };
  }
  m->start = c.add_segment(std::string(segment), file->root(), own);
  if (m->start < 0)
    return nullptr;
  c.check_graph();
  c.check_types();
  if (diags.error_count() > errors_before)
    return nullptr;
  finish(*m);
  return m;
}

}  // namespace workflows
