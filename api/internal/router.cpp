// The routes of /vnflcm/v1, /vnflcm/v2 and /vnfpkgm/v1 (docs/api.md): paths and methods,
// request bodies parsed and bounded, the engine's commands called, SOL bodies written. The
// rules (what a request may be, which state allows what) are the engine's. /vnflcm/v2 is
// the same routes over the same commands; it differs in its Version (2.0.0, required on
// requests), vimConnectionInfo as a map, and no cancel.
#include "api/internal/router.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string_view>

#include <boost/json.hpp>

namespace api::internal {

namespace {

constexpr std::string_view kLcm = "/vnflcm/v1";
constexpr std::string_view kLcm2 = "/vnflcm/v2";
constexpr std::string_view kPkgm = "/vnfpkgm/v1";
constexpr std::string_view kLcmVersion = "1.3.0";
constexpr std::string_view kLcm2Version = "2.0.0";

bool is_v2(const Ctx& c) {
  return c.prefix == kLcm2;
}
constexpr size_t kMaxIdBytes = 128;
constexpr unsigned kMaxJsonDepth = 64;

// The task resources of an instance and the engine's operation each one requests.
const std::map<std::string, std::string, std::less<>> kTasks = {
    {"instantiate", "instantiate"},
    {"terminate", "terminate"},
    {"heal", "heal"},
    {"scale", "scale"},
    {"change_ext_conn", "change_ext_conn"}};

}  // namespace

HttpResponse json_response(int status, const json::value& v) {
  HttpResponse r;
  r.status = status;
  r.content_type = "application/json";
  r.body = json::serialize(v);
  return r;
}

namespace {

int http_status(const base::Status& s) {
  switch (s.code()) {
    case base::StatusCode::kNotFound:
      return 404;
    case base::StatusCode::kInvalidArgument:
      return 400;
    case base::StatusCode::kFailedPrecondition:
    case base::StatusCode::kAlreadyExists:
    case base::StatusCode::kAborted:
      return 409;
    case base::StatusCode::kPermissionDenied:
      return 403;
    case base::StatusCode::kUnauthenticated:
      return 401;
    case base::StatusCode::kUnavailable:
      return 503;
    case base::StatusCode::kDeadlineExceeded:
      return 504;
    case base::StatusCode::kOk:
    case base::StatusCode::kCancelled:
    case base::StatusCode::kInternal:
      break;
  }
  return 500;
}

const char* title_of(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 406:
      return "Not Acceptable";
    case 409:
      return "Conflict";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Entity";
    case 503:
      return "Service Unavailable";
    default:
      return "Internal Server Error";
  }
}

}  // namespace

HttpResponse from_status(const base::Status& s, const base::Diagnostics* diags) {
  int code = http_status(s);
  std::string detail = s.message();
  if (diags != nullptr) {
    size_t n = 0;
    for (const auto& d : diags->items()) {
      if (d.severity != base::Severity::kError)
        continue;
      if (++n > 20) {
        detail += "\n...";
        break;
      }
      detail += "\n" + base::to_string(d);
    }
  }
  return problem_response(code, title_of(code), detail);
}

HttpResponse method_not_allowed(const std::string& method, std::string allow) {
  HttpResponse r = problem_response(
      405, "Method Not Allowed", "method " + method + " is not supported here; allowed: " + allow);
  r.headers.emplace_back("Allow", std::move(allow));
  return r;
}

// A JSON object body, or the 4xx saying why not.
std::optional<HttpResponse> parse_body(const HttpRequest& req, json::object& out) {
  std::string_view ct = req.content_type;
  ct = ct.substr(0, ct.find(';'));
  while (!ct.empty() && ct.back() == ' ')
    ct.remove_suffix(1);
  if (ct != "application/json" && ct != "application/merge-patch+json")
    return problem_response(
        415, "Unsupported Media Type",
        "the request body must be application/json, not \"" + std::string(ct.substr(0, 60)) + "\"");
  json::parse_options po;
  po.max_depth = kMaxJsonDepth;
  boost::system::error_code ec;
  json::value v = json::parse(req.body, ec, {}, po);
  if (ec)
    return problem_response(400, "Bad Request", "malformed JSON body: " + ec.message());
  if (!v.is_object())
    return problem_response(400, "Bad Request", "the request body must be a JSON object");
  out = std::move(v.get_object());
  return std::nullopt;
}

HttpResponse not_found(const Target& t) {
  return problem_response(404, "Not Found", "no such resource: " + t.path.substr(0, 200));
}

namespace {

// A task was queued: 202, no body (python-tackerclient prints its message only then), and
// the operation occurrence's URL. `wake`: tell the engine (on_queued); not when the
// operation went through c.create_op, which wakes it only when it merely queued it.
HttpResponse accepted(const Ctx& c, const std::string& op_id, bool wake = true) {
  if (wake && c.on_queued)
    c.on_queued();
  HttpResponse r;
  r.status = 202;
  r.headers.emplace_back("Location", c.url("/vnf_lcm_op_occs/" + op_id));
  return r;
}

}  // namespace

json::object href(std::string u) {
  return json::object{{"href", std::move(u)}};
}

namespace {

// ---------------------------------------------------------------------------------------
// Views with links

json::object instance_doc(const Ctx& c, const engine::InstanceRecord& i,
                          const engine::PackageRecord& p) {
  json::object o = engine::vnf_instance_view(i, p);
  if (json::value* vci = o.if_contains("vimConnectionInfo"); is_v2(c) && vci && vci->is_array()) {
    // v2 (SOL003 3.x): a map of the same entries by their id.
    json::object by_id;
    for (auto& e : vci->get_array()) {
      if (!e.is_object())
        continue;
      json::object entry = e.get_object();
      const json::value* id = entry.if_contains("id");
      std::string key = id && id->is_string() ? std::string(id->get_string())
                                              : "vim" + std::to_string(by_id.size());
      entry.erase("id");
      by_id[key] = std::move(entry);
    }
    *vci = std::move(by_id);
  }
  std::string self = c.url("/vnf_instances/" + i.id);
  json::object links{{"self", href(self)}};
  if (i.instantiation_state == "INSTANTIATED") {
    links["terminate"] = href(self + "/terminate");
    links["scale"] = href(self + "/scale");
    links["heal"] = href(self + "/heal");
    links["changeExtConn"] = href(self + "/change_ext_conn");
  } else {
    links["instantiate"] = href(self + "/instantiate");
  }
  o["_links"] = std::move(links);
  return o;
}

json::object op_doc(const Ctx& c, const engine::OpRecord& op) {
  json::object o = engine::op_view(op);
  std::string self = c.url("/vnf_lcm_op_occs/" + op.id);
  json::object links{{"self", href(self)},
                     {"vnfInstance", href(c.url("/vnf_instances/" + op.instance_id))}};
  if (op.state == engine::OpState::kFailedTemp) {
    links["retry"] = href(self + "/retry");
    links["rollback"] = href(self + "/rollback");
    links["fail"] = href(self + "/fail");
  }
  if (!is_v2(c) &&
      (op.state == engine::OpState::kStarting || op.state == engine::OpState::kProcessing))
    links["cancel"] = href(self + "/cancel");
  o["_links"] = std::move(links);
  return o;
}

// ---------------------------------------------------------------------------------------
// Lists: filter, page, select

const std::set<std::string, std::less<>> kListParams = {"filter",
                                                        "all_fields",
                                                        "fields",
                                                        "exclude_fields",
                                                        "exclude-fields",
                                                        "exclude_default",
                                                        "nextpage_opaque_marker"};

}  // namespace

HttpResponse list_response(const Ctx& c, std::vector<json::object> docs,
                           const DefaultExclusion& d) {
  auto q = parse_query(c.t.query);
  if (!q.ok())
    return from_status(q.status());
  for (const auto& [k, v] : q.value().params) {
    if (!kListParams.count(k))
      return problem_response(400, "Bad Request",
                              "unsupported query parameter \"" + k.substr(0, 60) + "\"");
  }
  std::optional<Filter> filter;
  if (const auto* f = q.value().find("filter")) {
    if (!f->has_value())
      return problem_response(400, "Bad Request", "filter needs a value");
    auto pf = parse_filter(**f);
    if (!pf.ok())
      return from_status(pf.status());
    filter = std::move(pf).value();
  }
  auto sel = parse_selector(q.value());
  if (!sel.ok())
    return from_status(sel.status());
  size_t start = 0;
  if (const auto* m = q.value().find("nextpage_opaque_marker")) {
    bool found = false;
    for (size_t i = 0; i < docs.size() && m->has_value(); ++i) {
      const json::value* id = docs[i].if_contains("id");
      if (id != nullptr && id->is_string() && id->get_string() == **m) {
        start = i + 1;
        found = true;
        break;
      }
    }
    if (!found)
      return problem_response(400, "Bad Request",
                              "nextpage_opaque_marker does not name an entry of this list");
  }
  json::array page;
  std::string last;
  bool more = false;
  for (size_t i = start; i < docs.size(); ++i) {
    if (filter && !matches(*filter, docs[i]))
      continue;
    if (page.size() == c.page_size) {
      more = true;
      break;
    }
    last = std::string(docs[i].at("id").as_string());
    page.push_back(apply_selector(sel.value(), d, std::move(docs[i])));
  }
  HttpResponse r = json_response(200, page);
  if (more)
    r.headers.emplace_back("Link", next_link(c.req.base_url, c.t.path, q.value(), last));
  return r;
}

namespace {

// ---------------------------------------------------------------------------------------
// /vnflcm/v1

HttpResponse api_versions(std::string_view prefix, std::vector<std::string_view> versions) {
  json::array list;
  for (auto v : versions)
    list.push_back(json::object{{"version", v}, {"isDeprecated", false}});
  return json_response(200, json::object{{"uriPrefix", prefix}, {"apiVersions", std::move(list)}});
}

// The packages by id, for the instances' views.
std::map<std::string, engine::PackageRecord> packages_by_id(engine::Store& store) {
  std::map<std::string, engine::PackageRecord> out;
  auto ps = store.list_packages();
  if (ps.ok()) {
    for (auto& p : ps.value())
      out.emplace(p.id, p);
  }
  return out;
}

HttpResponse create_instance(const Ctx& c) {
  json::object body;
  if (auto bad = parse_body(c.req, body))
    return *bad;
  static const std::set<std::string, std::less<>> kKnown = {"vnfdId", "vnfInstanceName",
                                                            "vnfInstanceDescription", "metadata"};
  for (const auto& [k, v] : body) {
    if (!kKnown.count(k))
      return problem_response(
          400, "Bad Request",
          "unknown attribute \"" + std::string(k).substr(0, 60) + "\" in CreateVnfRequest");
  }
  const json::value* vnfd = body.if_contains("vnfdId");
  if (vnfd == nullptr || !vnfd->is_string())
    return problem_response(400, "Bad Request", "CreateVnfRequest needs vnfdId (a string)");
  std::string name, description;
  for (auto [key, to] :
       {std::pair{"vnfInstanceName", &name}, std::pair{"vnfInstanceDescription", &description}}) {
    if (const json::value* v = body.if_contains(key)) {
      if (!v->is_string())
        return problem_response(400, "Bad Request", std::string(key) + " must be a string");
      *to = std::string(v->get_string());
    }
  }
  if (body.contains("metadata"))
    return problem_response(400, "Bad Request",
                            "metadata at creation is not supported yet (docs/api.md)");
  auto pkg = engine::package_for_vnfd(c.store, std::string_view(vnfd->get_string()));
  if (pkg.status().code() == base::StatusCode::kNotFound)
    return problem_response(422, "Unprocessable Entity", pkg.status().message());
  if (!pkg.ok())
    return from_status(pkg.status());
  auto inst =
      engine::create_instance(c.store, pkg.value().id, std::move(name), std::move(description));
  if (!inst.ok())
    return from_status(inst.status());
  HttpResponse r = json_response(201, instance_doc(c, inst.value(), pkg.value()));
  r.headers.emplace_back("Location", c.url("/vnf_instances/" + inst.value().id));
  return r;
}

// A task (an LCM operation, modify_info for PATCH) through the engine's request path.
HttpResponse request_task(const Ctx& c, const std::string& id, const std::string& operation) {
  json::object body;
  if (c.req.body.empty() && operation == "terminate")
    body = {};
  else if (auto bad = parse_body(c.req, body))
    return *bad;
  base::Diagnostics diags;
  auto op = engine::request_operation(c.store, id, operation, body, diags, c.create_op);
  if (!op.ok())
    return from_status(op.status(), &diags);
  return accepted(c, op.value().id, !c.create_op);
}

HttpResponse instances(const Ctx& c) {
  const auto& s = c.t.segs;
  const std::string& m = c.req.method;
  if (s.size() == 1) {
    if (m == "GET") {
      auto list = c.store.list_instances();
      if (!list.ok())
        return from_status(list.status());
      auto pkgs = packages_by_id(c.store);
      std::vector<json::object> docs;
      for (const auto& i : list.value()) {
        auto p = pkgs.find(i.package_id);
        docs.push_back(instance_doc(c, i, p != pkgs.end() ? p->second : engine::PackageRecord{}));
      }
      return list_response(c, std::move(docs),
                           {{"vnfConfigurableProperties", "vimConnectionInfo",
                             "instantiatedVnfInfo", "metadata", "extensions"},
                            true});
    }
    if (m == "POST")
      return create_instance(c);
    return method_not_allowed(m, "GET, POST");
  }
  const std::string& id = s[1];
  if (s.size() == 2) {
    if (m == "GET") {
      auto i = c.store.get_instance(id);
      if (!i.ok())
        return from_status(i.status());
      auto p = c.packages.get(c.store, i.value().package_id);
      return json_response(
          200, instance_doc(c, i.value(), p.ok() ? p.value() : engine::PackageRecord{}));
    }
    if (m == "DELETE") {
      if (base::Status st = engine::delete_instance(c.store, id); !st.ok())
        return from_status(st);
      HttpResponse r;
      r.status = 204;
      return r;
    }
    if (m == "PATCH")
      return request_task(c, id, "modify_info");
    return method_not_allowed(m, "GET, PATCH, DELETE");
  }
  if (s.size() == 3) {
    auto task = kTasks.find(s[2]);
    if (task == kTasks.end())
      return not_found(c.t);
    if (m != "POST")
      return method_not_allowed(m, "POST");
    return request_task(c, id, task->second);
  }
  return not_found(c.t);
}

HttpResponse op_occs(const Ctx& c) {
  const auto& s = c.t.segs;
  const std::string& m = c.req.method;
  if (s.size() == 1) {
    if (m != "GET")
      return method_not_allowed(m, "GET");
    engine::OpFilter f;
    f.limit = 1000000;
    auto page = engine::list_operations(c.store, f);
    if (!page.ok())
      return from_status(page.status());
    std::vector<json::object> docs;
    for (const auto& op : page.value().ops)
      docs.push_back(op_doc(c, op));
    // SOL003 names these as excluded by default, yet ETSI's conformance schema requires
    // operationParams in a plain list (and Tacker's v1 lists them): excluded only on
    // exclude_default.
    return list_response(
        c, std::move(docs),
        {{"operationParams", "error", "resourceChanges", "changedInfo", "changedExtConnectivity"},
         false});
  }
  const std::string& id = s[1];
  if (s.size() == 2) {
    if (m != "GET")
      return method_not_allowed(m, "GET");
    auto op = c.store.get_op(id);
    if (!op.ok())
      return from_status(op.status());
    return json_response(200, op_doc(c, op.value()));
  }
  if (s.size() == 3 && s[2] == "cancel" && !is_v2(c)) {
    if (m != "POST")
      return method_not_allowed(m, "POST");
    // CancelMode {cancelMode: GRACEFUL|FORCEFUL}: optional; vnflow cancels between steps
    // either way (a running action finishes), so the mode is checked, not used.
    if (!c.req.body.empty()) {
      json::object body;
      if (auto bad = parse_body(c.req, body))
        return *bad;
      for (const auto& [k, v] : body) {
        if (k != "cancelMode")
          return problem_response(
              400, "Bad Request",
              "unknown attribute \"" + std::string(k).substr(0, 60) + "\" in CancelMode");
        if (!v.is_string() || (v.get_string() != "GRACEFUL" && v.get_string() != "FORCEFUL"))
          return problem_response(400, "Bad Request",
                                  "cancelMode must be \"GRACEFUL\" or \"FORCEFUL\"");
      }
    }
    if (base::Status st = engine::cancel_operation(c.store, id); !st.ok())
      return from_status(st);
    return accepted(c, id);
  }
  if (s.size() == 3 && (s[2] == "retry" || s[2] == "rollback" || s[2] == "fail")) {
    if (m != "POST")
      return method_not_allowed(m, "POST");
    auto op = s[2] == "retry"      ? engine::retry_operation(c.store, id)
              : s[2] == "rollback" ? engine::rollback_operation(c.store, id)
                                   : engine::fail_operation(c.store, id);
    if (!op.ok())
      return from_status(op.status());
    if (s[2] == "fail")
      return json_response(200, op_doc(c, op.value()));
    return accepted(c, op.value().id);
  }
  return not_found(c.t);
}

HttpResponse lcm(const Ctx& c) {
  const auto& s = c.t.segs;
  if (s.size() == 1 && s[0] == "api_versions") {
    if (c.req.method != "GET")
      return method_not_allowed(c.req.method, "GET");
    return is_v2(c) ? api_versions(kLcm2, {kLcm2Version}) : api_versions(kLcm, {kLcmVersion});
  }
  if (is_v2(c)) {
    // Tacker's v2 rule (api-clients.md a.6): every request but api_versions names 2.0.0
    // (an "-impl:..." suffix allowed).
    std::string_view v = c.req.version;
    v = v.substr(0, v.find("-impl:"));
    if (c.req.version.empty())
      return problem_response(400, "Bad Request", "/vnflcm/v2 needs a Version header (2.0.0)");
    if (v != kLcm2Version)
      return problem_response(
          406, "Not Acceptable",
          "/vnflcm/v2 serves Version 2.0.0, not \"" + c.req.version.substr(0, 40) + "\"");
  }
  if (!s.empty() && s[0] == "vnf_instances")
    return instances(c);
  if (!s.empty() && s[0] == "vnf_lcm_op_occs")
    return op_occs(c);
  if (!s.empty() && s[0] == "subscriptions")
    return subscriptions(c);
  return not_found(c.t);
}

}  // namespace

namespace {

// A path under one of the APIs: its prefix (/vnflcm/v1, /vnflcm/v2, /vnfpkgm/v1) and the
// segments after it; false (the router's 404) for another path, an empty or overlong
// segment, more than 9 segments.
bool split_api_path(std::string_view path, std::string_view& prefix,
                    std::vector<std::string_view>& segs) {
  prefix = {};
  for (std::string_view p : {kLcm, kLcm2, kPkgm}) {
    if (path.size() > p.size() && path.compare(0, p.size(), p) == 0 && path[p.size()] == '/')
      prefix = p;
  }
  if (prefix.empty())
    return false;
  segs.clear();
  std::string_view rest = path.substr(prefix.size() + 1);
  while (true) {
    size_t slash = rest.find('/');
    std::string_view seg = rest.substr(0, slash);
    if (seg.empty() || seg.size() > kMaxIdBytes)
      return false;
    segs.push_back(seg);
    if (slash == std::string_view::npos)
      return true;
    rest.remove_prefix(slash + 1);
    if (segs.size() > 8)
      return false;
  }
}

}  // namespace

bool is_point_read(std::string_view route) {
  return route.ends_with("/vnf_instances/{id}") || route.ends_with("/vnf_lcm_op_occs/{id}") ||
         route.ends_with("/subscriptions/{id}");
}

std::string route_pattern(std::string_view target) {
  std::string_view path = target.substr(0, target.find('?'));
  if (path == "/metrics" || path == "/vnflcm/api_versions" || path == "/vnfpkgm/api_versions")
    return std::string(path);
  std::string_view prefix;
  std::vector<std::string_view> segs;
  if (!split_api_path(path, prefix, segs))  // the router answers 404
    return "other";
  // The routes the router serves (docs/api.md): a collection, one of its members, and the
  // member's tasks or parts; nothing else, so the label takes a few dozen values at most.
  static constexpr std::string_view kPackageParts[] = {"package_content", "vnfd", "manifest",
                                                       "artifacts"};
  static constexpr std::string_view kInstanceTasks[] = {"instantiate", "terminate", "heal", "scale",
                                                        "change_ext_conn"};
  static constexpr std::string_view kOpTasks[] = {"retry", "rollback", "fail", "cancel"};
  bool pkgm = prefix == kPkgm;
  std::string_view coll = segs[0];
  if (segs.size() == 1 && coll == "api_versions")
    return std::string(prefix) + "/api_versions";
  std::span<const std::string_view> tasks;
  if (pkgm && coll == "vnf_packages")
    tasks = kPackageParts;
  else if (!pkgm && coll == "vnf_instances")
    tasks = kInstanceTasks;
  else if (!pkgm && coll == "vnf_lcm_op_occs")
    tasks = kOpTasks;
  else if (coll == "subscriptions" && segs.size() <= 2)
    tasks = {};
  else
    return "other";
  std::string out = std::string(prefix) + "/" + std::string(coll);
  if (segs.size() >= 2)
    out += "/{id}";
  if (segs.size() >= 3) {
    if (std::find(tasks.begin(), tasks.end(), segs[2]) == tasks.end())
      return "other";
    out += "/" + std::string(segs[2]);
  }
  if (segs.size() >= 4) {
    if (segs[2] == "artifacts")
      out += "/{path}";
    else if (segs.size() == 4 && segs[2] == "package_content" && segs[3] == "upload_from_uri")
      out += "/upload_from_uri";
    else
      return "other";
  }
  return out;
}

namespace {

// The API a prefix serves subscriptions for (engine::SubscriptionRecord::api).
std::string subscription_api(std::string_view prefix) {
  return std::string(prefix.substr(1));  // "/vnflcm/v1" -> "vnflcm/v1"
}

json::object subscription_doc(const Ctx& c, const engine::SubscriptionRecord& s) {
  json::object o = engine::subscription_view(s);
  o["_links"] = json::object{{"self", href(c.url("/subscriptions/" + s.id))}};
  return o;
}

}  // namespace

HttpResponse subscriptions(const Ctx& c) {
  const auto& s = c.t.segs;
  const std::string& m = c.req.method;
  std::string api = subscription_api(c.prefix);
  if (s.size() == 1) {
    if (m == "GET") {
      auto list = c.store.list_subscriptions(false);
      if (!list.ok())
        return from_status(list.status());
      std::vector<json::object> docs;
      for (const auto& sub : list.value()) {
        if (sub.api == api)
          docs.push_back(subscription_doc(c, sub));
      }
      return list_response(c, std::move(docs), {{}, true});
    }
    if (m != "POST")
      return method_not_allowed(m, "GET, POST");
    json::object body;
    if (auto bad = parse_body(c.req, body))
      return *bad;
    auto sub = engine::create_subscription(c.store, api, body, c.notify);
    if (!sub.ok()) {
      // SOL003 5.4.18.3.1 / SOL005 10.4.7.3.1: a failed callback test is 422.
      if (sub.status().code() == base::StatusCode::kFailedPrecondition)
        return problem_response(422, "Unprocessable Entity", sub.status().message());
      return from_status(sub.status());
    }
    // 201 also for a subscription like an existing one: SOL003 allows it, and a 303 makes
    // python-tackerclient send the same POST again to the Location.
    HttpResponse r = json_response(201, subscription_doc(c, sub.value()));
    r.headers.emplace_back("Location", c.url("/subscriptions/" + sub.value().id));
    return r;
  }
  if (s.size() != 2)
    return not_found(c.t);
  auto sub = c.store.get_subscription(s[1], false);
  if (!sub.ok() || sub.value().api != api)
    return problem_response(
        404, "Not Found",
        "no subscription \"" + base::printable(s[1]) + "\" under " + std::string(c.prefix));
  if (m == "GET")
    return json_response(200, subscription_doc(c, sub.value()));
  if (m == "DELETE") {
    if (auto d = engine::delete_subscription(c.store, s[1]); !d.ok())
      return from_status(d.status());
    HttpResponse r;
    r.status = 204;
    return r;
  }
  return method_not_allowed(m, "GET, DELETE");
}

HttpResponse problem_response(int status, std::string title, std::string detail) {
  HttpResponse r;
  r.status = status;
  r.content_type = "application/problem+json";
  r.body = problem_json({status, std::move(title), std::move(detail)});
  return r;
}

HttpResponse Router::handle(const HttpRequest& req) {
  Target t;
  size_t qm = req.target.find('?');
  t.path = req.target.substr(0, qm);
  if (qm != std::string::npos)
    t.query = req.target.substr(qm + 1);
  std::string_view prefix;
  if (t.path == "/vnflcm/api_versions") {
    if (req.method != "GET")
      return method_not_allowed(req.method, "GET");
    HttpResponse r = api_versions("/vnflcm", {kLcmVersion, kLcm2Version});
    r.headers.emplace_back("Version", std::string(kLcmVersion));
    return r;
  }
  std::vector<std::string_view> segs;
  if (!split_api_path(t.path, prefix, segs))
    return not_found(t);
  t.segs.assign(segs.begin(), segs.end());
  Ctx c{store_, page_size_, on_queued_, create_op_, req, t, prefix, *checks_, *notify_, packages_};
  HttpResponse r = prefix == kPkgm ? packages(c) : lcm(c);
  if (prefix != kPkgm)
    r.headers.emplace_back("Version", std::string(prefix == kLcm2 ? kLcm2Version : kLcmVersion));
  return r;
}

}  // namespace api::internal
