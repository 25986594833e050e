// Keystone v3 sessions (token cache, re-auth on 401, catalog endpoints).
#include "actions/internal/openstack.h"

#include <algorithm>
#include <ctime>
#include <map>

#include <boost/json.hpp>

#include "actions/actions.h"

namespace actions::openstack {

namespace {

std::string str(const json::object& o, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (auto* v = o.if_contains(n); v != nullptr && v->is_string())
      return std::string(v->get_string());
  }
  return {};
}

// A broken-down UTC time (tm_year + 1900 = the year) as a time point; 0 outside 1970..2200
// (a system_clock time point counts nanoseconds and overflows in 2262).
std::chrono::system_clock::time_point utc_point(std::tm& tm) {
  if (tm.tm_year < 70 || tm.tm_year > 300)
    return {};
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

// "2026-11-23T03:00:00.000000Z" -> time point; epoch on a parse failure.
std::chrono::system_clock::time_point parse_time(const std::string& s) {
  std::tm tm{};
  if (s.size() < 19 || std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon,
                                   &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6)
    return {};
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return utc_point(tm);
}

// "Mon, 23 Nov 2026 08:41:36 GMT" (RFC 9110 IMF-fixdate); 0 when it is not one.
std::chrono::system_clock::time_point parse_http_date(const std::string& s) {
  static const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                  "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  std::tm tm{};
  char mon[4] = {};
  if (std::sscanf(s.c_str(), "%*3s, %2d %3s %4d %2d:%2d:%2d GMT", &tm.tm_mday, mon, &tm.tm_year,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6)
    return {};
  tm.tm_mon = -1;
  for (int i = 0; i < 12; ++i) {
    if (std::string_view(mon) == kMonths[i])
      tm.tm_mon = i;
  }
  if (tm.tm_mon < 0)
    return {};
  tm.tm_year -= 1900;
  return utc_point(tm);
}

CallError transport(const base::Status& s) {
  CallError e;
  e.error_class = s.code() == base::StatusCode::kDeadlineExceeded  ? ErrorClass::kTimeout
                  : s.code() == base::StatusCode::kInvalidArgument ? ErrorClass::kInvalid
                                                                   : ErrorClass::kTransient;
  e.message = s.message();
  return e;
}

std::string api_message(const std::string& body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (!ec && v.is_object()) {
    const auto& o = v.get_object();
    if (auto* err = o.if_contains("error"); err != nullptr && err->is_object()) {
      std::string m = str(err->get_object(), {"message", "title"});
      std::string t = str(err->get_object(), {"type"});
      if (!t.empty() && !m.empty())
        return t + ": " + m;
      if (!m.empty())
        return m;
    }
    std::string m = str(o, {"message", "title", "explanation"});
    if (!m.empty())
      return m;
  }
  std::string b = body.substr(0, 200);
  for (char& c : b) {
    if (c == '\n' || c == '\r')
      c = ' ';
  }
  return b;
}

}  // namespace

std::chrono::system_clock::time_point parse_iso_time(const std::string& s) {
  return parse_time(s);
}

base::Result<Cloud> cloud_from_json(const json::object& a) {
  Cloud c;
  c.auth_url = str(a, {"auth_url", "authUrl"});
  if (c.auth_url.empty()) {
    if (auto* ii = a.if_contains("interfaceInfo"); ii != nullptr && ii->is_object())
      c.auth_url = str(ii->get_object(), {"endpoint"});
  }
  c.username = str(a, {"username"});
  c.password = str(a, {"password"});
  std::string ud = str(a, {"user_domain_name", "userDomain"});
  if (!ud.empty())
    c.user_domain = ud;
  c.project = str(a, {"project_name", "project"});
  c.project_id = str(a, {"project_id", "projectId"});
  std::string pd = str(a, {"project_domain_name", "projectDomain"});
  if (!pd.empty())
    c.project_domain = pd;
  c.app_cred_id = str(a, {"application_credential_id"});
  c.app_cred_name = str(a, {"application_credential_name"});
  c.app_cred_secret = str(a, {"application_credential_secret"});
  c.region = str(a, {"region", "region_name"});
  std::string itf = str(a, {"interface"});
  if (!itf.empty())
    c.interface = itf;
  c.ca_file = str(a, {"cacert", "ca_file"});
  c.orchestration_endpoint = str(a, {"orchestration_endpoint"});
  if (c.auth_url.empty())
    return base::Status::InvalidArgument("the VIM has no auth_url");
  bool app = !c.app_cred_id.empty() || !c.app_cred_name.empty();
  if (app && c.app_cred_secret.empty())
    return base::Status::InvalidArgument("the VIM's application credential has no secret");
  if (!app && (c.username.empty() || c.password.empty()))
    return base::Status::InvalidArgument(
        "the VIM has neither a username and password nor an application credential");
  if (!app && c.project.empty() && c.project_id.empty())
    return base::Status::InvalidArgument("the VIM names no project to scope its token to");
  while (!c.auth_url.empty() && c.auth_url.back() == '/')
    c.auth_url.pop_back();
  if (c.auth_url.size() < 3 || c.auth_url.compare(c.auth_url.size() - 3, 3, "/v3") != 0)
    c.auth_url += "/v3";
  return c;
}

std::shared_ptr<Session> Client::session(const Cloud& c) {
  std::string k =
      c.auth_url + '\n' + c.username + '\n' + c.user_domain + '\n' + c.project + '\n' +
      c.project_id + '\n' + c.project_domain + '\n' + c.app_cred_id + '\n' + c.app_cred_name +
      '\n' + c.region + '\n' + c.interface + '\n' + c.ca_file + '\n' +
      base::digest_hex(base::DigestAlgorithm::kSha256, c.password + '\n' + c.app_cred_secret);
  std::lock_guard<std::mutex> l(mu_);
  auto it = sessions_.find(k);
  if (it != sessions_.end())
    return it->second;
  auto s = std::shared_ptr<Session>(new Session(c, transport_, clock_));
  sessions_.emplace(k, s);
  return s;
}

void Client::forget_all() {
  std::lock_guard<std::mutex> l(mu_);
  sessions_.clear();
}

std::vector<std::string> Session::secrets() const {
  std::vector<std::string> out;
  for (const std::string* s : {&cloud_.password, &cloud_.app_cred_secret}) {
    if (!s->empty())
      out.push_back(*s);
  }
  std::sort(out.begin(), out.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  return out;
}

int Session::auth_count() const {
  std::lock_guard<std::mutex> l(mu_);
  return auth_count_;
}

bool Session::authenticate(std::chrono::steady_clock::time_point deadline, CallError& err) {
  json::object identity;
  bool app = !cloud_.app_cred_id.empty() || !cloud_.app_cred_name.empty();
  if (app) {
    json::object ac{{"secret", cloud_.app_cred_secret}};
    if (!cloud_.app_cred_id.empty()) {
      ac["id"] = cloud_.app_cred_id;
    } else {
      ac["name"] = cloud_.app_cred_name;
      ac["user"] = json::object{{"name", cloud_.username},
                                {"domain", json::object{{"name", cloud_.user_domain}}}};
    }
    identity = json::object{{"methods", json::array{"application_credential"}},
                            {"application_credential", std::move(ac)}};
  } else {
    identity = json::object{
        {"methods", json::array{"password"}},
        {"password",
         json::object{{"user", json::object{{"name", cloud_.username},
                                            {"domain", json::object{{"name", cloud_.user_domain}}},
                                            {"password", cloud_.password}}}}}};
  }
  json::object auth{{"identity", std::move(identity)}};
  if (!app) {
    json::object project;
    if (!cloud_.project_id.empty())
      project["id"] = cloud_.project_id;
    else
      project = json::object{{"name", cloud_.project},
                             {"domain", json::object{{"name", cloud_.project_domain}}}};
    auth["scope"] = json::object{{"project", std::move(project)}};
  }
  http::Request req;
  req.method = "POST";
  req.url = cloud_.auth_url + "/auth/tokens";
  req.headers = {{"Content-Type", "application/json"}, {"Accept", "application/json"}};
  req.body = json::serialize(json::object{{"auth", std::move(auth)}});
  http::Options opt;
  opt.ca_file = cloud_.ca_file;
  opt.deadline = deadline;
  auto r = transport_.send(req, opt);
  if (!r.ok()) {
    err = transport(r.status());
    err.message = "Keystone authentication: " + err.message;
    return false;
  }
  const auto& res = r.value();
  if (res.status != 201 && res.status != 200) {
    err.status = res.status;
    err.error_class = res.status >= 500 ? ErrorClass::kTransient : ErrorClass::kInvalid;
    err.message = "Keystone authentication at " + cloud_.auth_url + " as \"" +
                  (app ? "application credential" : cloud_.username) + "\": HTTP " +
                  std::to_string(res.status) + " " + api_message(res.body);
    return false;
  }
  boost::system::error_code ec;
  json::value v = json::parse(res.body, ec);
  std::string token = res.header("x-subject-token");
  const json::value* tv = !ec && v.is_object() ? v.get_object().if_contains("token") : nullptr;
  if (token.empty() || tv == nullptr || !tv->is_object()) {
    err.error_class = ErrorClass::kTransient;
    err.message = "Keystone authentication: an answer without a token";
    return false;
  }
  const auto& t = tv->get_object();
  token_ = std::move(token);
  expires_ = parse_time(str(t, {"expires_at"}));
  auto issued = parse_time(str(t, {"issued_at"}));
  renew_margin_ = std::chrono::seconds(120);
  if (issued.time_since_epoch().count() != 0 && expires_ > issued)
    renew_margin_ =
        std::clamp(std::chrono::duration_cast<std::chrono::seconds>(expires_ - issued) / 10,
                   std::chrono::seconds(1), std::chrono::seconds(120));
  catalog_ = t.contains("catalog") ? t.at("catalog") : json::value(json::array{});
  project_id_.clear();
  if (auto* p = t.if_contains("project"); p != nullptr && p->is_object())
    project_id_ = str(p->get_object(), {"id"});
  auth_count_++;
  return true;
}

std::string Session::endpoint(const std::string& type, CallError& err) const {
  if (type == "orchestration" && !cloud_.orchestration_endpoint.empty()) {
    std::string url = cloud_.orchestration_endpoint;
    for (const char* pat : {"%(project_id)s", "%(tenant_id)s"}) {
      auto pos = url.find(pat);
      if (pos != std::string::npos)
        url.replace(pos, std::string_view(pat).size(), project_id_);
    }
    while (!url.empty() && url.back() == '/')
      url.pop_back();
    return url;
  }
  if (catalog_.is_array()) {
    for (const auto& svc : catalog_.get_array()) {
      if (!svc.is_object() || str(svc.get_object(), {"type"}) != type)
        continue;
      const auto* eps = svc.get_object().if_contains("endpoints");
      if (eps == nullptr || !eps->is_array())
        continue;
      for (const auto& ep : eps->get_array()) {
        if (!ep.is_object())
          continue;
        const auto& e = ep.get_object();
        if (str(e, {"interface"}) != cloud_.interface)
          continue;
        if (!cloud_.region.empty() && str(e, {"region_id"}) != cloud_.region &&
            str(e, {"region"}) != cloud_.region)
          continue;
        std::string url = str(e, {"url"});
        while (!url.empty() && url.back() == '/')
          url.pop_back();
        return url;
      }
    }
  }
  err.error_class = ErrorClass::kInvalid;
  err.message = "the service catalog of " + cloud_.auth_url + " has no " + cloud_.interface +
                " \"" + type + "\" endpoint" +
                (cloud_.region.empty() ? "" : " in region " + cloud_.region);
  return {};
}

Session::Result Session::call(const std::string& type, const std::string& method,
                              const std::string& path, const json::value* body,
                              std::initializer_list<int> accept,
                              std::chrono::steady_clock::time_point deadline,
                              const std::string& what) {
  Result out;
  for (int round = 0; round < 2; ++round) {
    std::string token, base;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto soon =
          std::chrono::system_clock::time_point(std::chrono::milliseconds(clock_.wall_ms())) +
          renew_margin_;
      if (token_.empty() || round > 0 ||
          (expires_.time_since_epoch().count() != 0 && expires_ < soon)) {
        token_.clear();
        if (!authenticate(deadline, out.error))
          return out;
      }
      base = endpoint(type, out.error);
      if (base.empty())
        return out;
      token = token_;
    }
    http::Request req;
    req.method = method;
    req.url = base + path;
    req.headers = {{"X-Auth-Token", token}, {"Accept", "application/json"}};
    if (body != nullptr) {
      req.headers.emplace_back("Content-Type", "application/json");
      req.body = json::serialize(*body);
    }
    http::Options opt;
    opt.ca_file = cloud_.ca_file;
    opt.deadline = deadline;
    auto r = transport_.send(req, opt);
    if (!r.ok()) {
      out.error = transport(r.status());
      out.error.message = what + ": " + out.error.message;
      return out;
    }
    const auto& res = r.value();
    if (res.status == 401 && round == 0)
      continue;  // the token was revoked or expired early: authenticate again, once
    for (int a : accept) {
      if (res.status == a) {
        out.ok = true;
        out.reply.status = res.status;
        out.reply.location = res.header("location");
        out.reply.date = parse_http_date(res.header("date"));
        boost::system::error_code ec;
        if (!res.body.empty()) {
          json::value v = json::parse(res.body, ec);
          if (!ec)
            out.reply.body = std::move(v);
        }
        return out;
      }
    }
    out.error.status = res.status;
    std::string msg = api_message(res.body);
    if (res.status >= 500 || res.status == 429)
      out.error.error_class = ErrorClass::kTransient;
    else if (res.status == 409 && msg.find("InProgress") != std::string::npos)
      out.error.error_class = ErrorClass::kTransient;
    else if (res.status == 409)
      out.error.error_class = ErrorClass::kFailed;
    else
      out.error.error_class = ErrorClass::kInvalid;
    out.error.message =
        what + ": HTTP " + std::to_string(res.status) + (msg.empty() ? "" : " " + msg);
    return out;
  }
  return out;
}

}  // namespace actions::openstack

namespace actions {
base::Status check_openstack_access(const json::object& access) {
  auto c = openstack::cloud_from_json(access);
  return c.ok() ? base::Status::Ok() : c.status();
}
}  // namespace actions
