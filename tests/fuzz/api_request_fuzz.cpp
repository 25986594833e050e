// libFuzzer target: the REST API as a network client reaches it. The input is one request:
// a line "METHOD TARGET", header lines "Name: value", an empty line, the body. It is built
// into the API's request as api/internal/server.cpp builds it (Content-Type, Accept,
// Version, Host) and dispatched through the Router, against a real engine on a real SQLite
// store in a temporary folder: the local demo package onboarded, an empty package, an
// instance never instantiated, one marked INSTANTIATED and a queued instantiate. "$PKG",
// "$NEWPKG", "$INST", "$LIVE", "$OP", "$VNFD" and "$TMP" in the target and body stand for
// their ids (and the folder), so the fuzzer reaches past "not found". The store goes back
// to that state every kResetEvery requests, so it stays bounded. No daemon: operations are
// only queued. upload_from_uri never leaves the folder: file:///X reads $TMP/files/X, and
// other URLs are made file URLs there too (no network).
//
// Never a crash, a sanitizer report or a hang; every answer has a status the API sends
// (2xx to 5xx), a 4xx or 5xx answer is a ProblemDetails (application/problem+json with its
// status, title and detail), a JSON answer is JSON, and a healthy store never answers 500.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/json.hpp>
#include <unistd.h>

#include "engine/engine.h"

#include "api/internal/router.h"

#ifndef VNFLOW_SOURCE_ROOT
#error "VNFLOW_SOURCE_ROOT (the source tree, for csar-samples/local-demo) must be defined"
#endif

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using api::internal::HttpRequest;
using api::internal::HttpResponse;

constexpr int kResetEvery = 256;
constexpr size_t kMaxInput = 1 << 16;

[[noreturn]] void fail(const std::string& what, const HttpRequest& req, const HttpResponse& r) {
  std::fprintf(stderr, "%s\nrequest: %s %s\nanswer: %d %s\n%s\n", what.c_str(), req.method.c_str(),
               req.target.c_str(), r.status, r.content_type.c_str(),
               r.body.substr(0, 2000).c_str());
  std::abort();
}

[[noreturn]] void setup_failed(const std::string& what) {
  std::fprintf(stderr, "api_request fixture: %s\n", what.c_str());
  std::abort();
}

struct Fixture {
  fs::path root;  // the temporary folder: work/ (the live store), pristine/, files/
  std::string pkg, newpkg, inst, live, op, vnfd;
  std::unique_ptr<engine::Store> store;
  int runs = 0;
  size_t queued = 0;
  std::function<void()> on_queued = [this] { ++queued; };

  Fixture() {
    std::string tmpl = (fs::temp_directory_path() / "vnflow-fuzz-api-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      setup_failed("mkdtemp");
    root = tmpl;
    fs::create_directories(root / "work");
    fs::create_directories(root / "files");
    build();
    store.reset();  // closed, so the files hold everything
    fs::copy(root / "work", root / "pristine", fs::copy_options::recursive);
    open();
  }

  ~Fixture() {
    store.reset();
    std::error_code ec;
    fs::remove_all(root, ec);
  }

  void open() {
    auto s = engine::open_database((root / "work" / "vnflow.db").string());
    if (!s.ok())
      setup_failed(s.status().message());
    store = std::move(s).value();
  }

  void build() {
    open();
    base::Diagnostics diags;
    auto p = engine::onboard_package(
        *store, std::string(VNFLOW_SOURCE_ROOT) + "/csar-samples/local-demo", diags);
    if (!p.ok())
      setup_failed("onboarding the local demo: " + p.status().message());
    pkg = p.value().id;
    vnfd = p.value().vnfd_id;
    auto np = engine::create_package(*store, json::object{{"k", "v"}});
    if (!np.ok())
      setup_failed(np.status().message());
    newpkg = np.value().id;
    auto i = engine::create_instance(*store, pkg, "fuzz", "never instantiated");
    if (!i.ok())
      setup_failed(i.status().message());
    inst = i.value().id;
    auto q = engine::create_instance(*store, pkg, "queued", "");
    if (!q.ok())
      setup_failed(q.status().message());
    auto o = engine::request_operation(
        *store, q.value().id, "instantiate",
        json::parse(R"({"flavourId": "simple", "additionalParams": {"nodes": ["n1"]}})"), diags);
    if (!o.ok())
      setup_failed("queueing an instantiate: " + o.status().message());
    op = o.value().id;
    // An instance as a finished instantiate leaves it (no daemon runs here).
    engine::InstanceRecord l = q.value();
    l.id = "00000000-0000-4000-8000-00000000f022";
    l.name = "live";
    l.instantiation_state = "INSTANTIATED";
    json::object rec = l.record.as_object();
    rec["id"] = l.id;
    rec["name"] = l.name;
    rec["instantiation_state"] = "INSTANTIATED";
    rec["flavour_id"] = "simple";
    rec["vnfcs"] = json::array{json::object{{"id", "c1"}, {"vdu", "VDU1"}}};
    rec["metadata"] = json::object{};
    l.record = std::move(rec);
    if (base::Status s = store->create_instance(l); !s.ok())
      setup_failed(s.message());
    live = l.id;
    // What upload_from_uri may read: a few files, none a package.
    std::FILE* f = std::fopen((root / "files" / "not-a-zip").c_str(), "w");
    if (f == nullptr)
      setup_failed("writing files/not-a-zip");
    std::fputs("PK\x03\x04 but not a zip\n", f);
    std::fclose(f);
  }

  void reset_if_due() {
    if (++runs % kResetEvery != 0)
      return;
    store.reset();
    fs::remove_all(root / "work");
    fs::copy(root / "pristine", root / "work", fs::copy_options::recursive);
    open();
  }

  std::string expand(std::string_view in) const {
    std::string out;
    out.reserve(in.size());
    const std::pair<std::string_view, const std::string*> names[] = {
        {"$NEWPKG", &newpkg}, {"$PKG", &pkg},   {"$INST", &inst},        {"$LIVE", &live},
        {"$OP", &op},         {"$VNFD", &vnfd}, {"$TMP", &root.native()}};
    for (size_t i = 0; i < in.size();) {
      bool done = false;
      if (in[i] == '$') {
        for (const auto& [name, value] : names) {
          if (in.substr(i, name.size()) == name) {
            out += *value;
            i += name.size();
            done = true;
            break;
          }
        }
      }
      if (!done)
        out += in[i++];
    }
    return out;
  }

  // upload_from_uri reads only files/: file:///X is files/X, any other URL's text after
  // "://" too.
  void confine_uri(HttpRequest& req) const {
    if (req.target.find("upload_from_uri") == std::string::npos)
      return;
    boost::system::error_code ec;
    json::value v = json::parse(req.body, ec);
    if (ec || !v.is_object())
      return;
    json::value* a = v.get_object().if_contains("addressInformation");
    if (a == nullptr || !a->is_string())
      return;
    std::string uri(a->get_string());
    size_t scheme = uri.find("://");
    if (scheme == std::string::npos)
      return;  // refused as it is: no scheme
    std::string rest = uri.substr(scheme + 3);
    if (uri.rfind("file://", 0) == 0 && (rest.empty() || rest[0] != '/'))
      return;  // refused as it is: a relative file URL
    *a = "file://" + (root / "files").string() + "/" + rest;
    req.body = json::serialize(v);
  }
};

bool token_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// The request line and headers as Beast accepts them (a token method, a target of visible
// characters, header values without controls but tab); nullopt for what it answers 400.
std::optional<HttpRequest> parse_request(std::string_view in, const std::string& base_url,
                                         const Fixture& fx) {
  size_t nl = in.find('\n');
  std::string_view line = in.substr(0, nl);
  in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
  size_t sp = line.find(' ');
  if (sp == std::string_view::npos || sp == 0)
    return std::nullopt;
  HttpRequest req;
  req.method = std::string(line.substr(0, sp));
  for (char c : req.method) {
    if (!token_char(c))
      return std::nullopt;
  }
  req.target = fx.expand(line.substr(sp + 1));
  if (req.target.empty())
    return std::nullopt;
  for (char c : req.target) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
      return std::nullopt;
  }
  req.base_url = base_url;
  while (!in.empty() && in.front() != '\n') {
    nl = in.find('\n');
    std::string_view h = in.substr(0, nl);
    in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
    size_t colon = h.find(':');
    if (colon == std::string_view::npos || colon == 0)
      return std::nullopt;
    std::string_view name = h.substr(0, colon), value = h.substr(colon + 1);
    for (char c : name) {
      if (!token_char(c))
        return std::nullopt;
    }
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t'))
      value.remove_suffix(1);
    for (char c : value) {
      if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f)
        return std::nullopt;
    }
    auto is = [&](std::string_view n) {
      if (n.size() != name.size())
        return false;
      for (size_t i = 0; i < n.size(); ++i) {
        if (std::tolower(static_cast<unsigned char>(name[i])) != n[i])
          return false;
      }
      return true;
    };
    // The first of each, as req.find() gives it.
    if (is("content-type") && req.content_type.empty())
      req.content_type = std::string(value);
    else if (is("accept") && req.accept.empty())
      req.accept = std::string(value);
    else if (is("version") && req.version.empty())
      req.version = std::string(value);
    else if (is("host")) {
      // As the server: a plausible host names the links' origin.
      bool ok = !value.empty() && value.size() <= 255;
      for (char c : value) {
        ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == ':' ||
                    c == '-' || c == '[' || c == ']');
      }
      if (ok)
        req.base_url = "http://" + std::string(value);
    }
  }
  if (!in.empty())
    in.remove_prefix(1);
  req.body = fx.expand(in);
  return req;
}

void check(const HttpRequest& req, const HttpResponse& r) {
  if (r.status < 200 || r.status > 599)
    fail("a status the API never sends", req, r);
  if (r.status == 500)
    fail("500 from a healthy store", req, r);
  if (r.status >= 400) {
    if (r.content_type != "application/problem+json")
      fail("an error that is not a ProblemDetails", req, r);
    boost::system::error_code ec;
    json::value v = json::parse(r.body, ec);
    const json::object* o = !ec && v.is_object() ? &v.get_object() : nullptr;
    const json::value* status = o != nullptr ? o->if_contains("status") : nullptr;
    const json::value* title = o != nullptr ? o->if_contains("title") : nullptr;
    const json::value* detail = o != nullptr ? o->if_contains("detail") : nullptr;
    if (status == nullptr || !status->is_int64() || status->get_int64() != r.status ||
        title == nullptr || !title->is_string() || detail == nullptr || !detail->is_string() ||
        detail->get_string().empty())
      fail("a ProblemDetails without its status, title or detail", req, r);
    return;
  }
  if (r.status == 204 && !r.body.empty())
    fail("a 204 with a body", req, r);
  if (r.content_type == "application/json") {
    boost::system::error_code ec;
    (void)json::parse(r.body, ec);
    if (ec)
      fail("an application/json answer that is not JSON", req, r);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kMaxInput)
    return 0;
  static Fixture fx;
  auto req = parse_request(std::string_view(reinterpret_cast<const char*>(data), size),
                           "http://127.0.0.1:9890", fx);
  if (!req)
    return 0;
  fx.confine_uri(*req);
  // A router per request: the store is reopened on reset, and the server's Router holds no
  // state of its own but the store.
  // No callback test: a fuzzed callbackUri must never be asked anything (the network rule).
  static const auto no_test = [] {
    auto o = std::make_shared<engine::NotifyOptions>();
    o->test_callback = false;
    return std::shared_ptr<const engine::NotifyOptions>(o);
  }();
  api::internal::Router r(*fx.store, 3, fx.on_queued, {}, no_test);
  HttpResponse answer;
  try {
    answer = r.handle(*req);
  } catch (const std::exception& e) {
    // The server answers 500 (server.cpp); for a request against a healthy store that is a
    // bug, as above.
    std::fprintf(stderr, "the router threw: %s\n", e.what());
    std::abort();
  }
  check(*req, answer);
  fx.reset_if_due();
  return 0;
}
