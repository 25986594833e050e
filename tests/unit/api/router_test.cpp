// The routes over a real SQLite store with the local demo onboarded: bodies, status codes,
// headers, paging, and bad requests answered 4xx with a ProblemDetails that change nothing.
#include "api/internal/router.h"

#include <cstdlib>
#include <filesystem>
#include <string>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <unistd.h>

#include "engine/engine.h"

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using api::internal::HttpRequest;
using api::internal::HttpResponse;
using api::internal::Router;

constexpr const char* kVnfdId = "3b0c9f1e-5a2d-4e8f-9c6b-7d1e2f3a4b5c";

struct Fixture {
  fs::path dir;
  std::unique_ptr<engine::Store> store;
  std::string package_id;
  Fixture() {
    std::string tmpl = (fs::temp_directory_path() / "vnflow-api-test-XXXXXX").string();
    dir = ::mkdtemp(tmpl.data());
    auto s = engine::open_database((dir / "vnflow.db").string());
    REQUIRE(s.ok());
    store = std::move(s).value();
    const char* root = std::getenv("VNFLOW_SOURCE_ROOT");
    REQUIRE(root != nullptr);
    base::Diagnostics diags;
    auto p = engine::onboard_package(*store, std::string(root) + "/csar-samples/local-demo", diags);
    REQUIRE(p.ok());
    package_id = p.value().id;
  }
  ~Fixture() {
    store.reset();
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  HttpResponse call(std::string method, std::string target, std::string body = "",
                    size_t page_size = 100) {
    auto no_test = std::make_shared<engine::NotifyOptions>();
    no_test->test_callback = false;  // subscriptions here are checked, not called
    Router r(*store, page_size, {}, {}, no_test);
    HttpRequest req{std::move(method),
                    std::move(target),
                    body.empty() ? "" : "application/json",
                    std::move(body),
                    "http://h:1",
                    "",
                    ""};
    return r.handle(req);
  }
};

std::string header(const HttpResponse& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name)
      return v;
  }
  return "";
}

json::value body(const HttpResponse& r) {
  return json::parse(r.body);
}

void require_problem(const HttpResponse& r, int status) {
  CHECK(r.status == status);
  CHECK(r.content_type == "application/problem+json");
  auto b = body(r);
  CHECK(b.at("status") == status);
  CHECK(!b.at("detail").as_string().empty());
}

TEST_CASE("create, show and list VNF instances", "[api][router]") {
  Fixture f;
  auto c = f.call("POST", "/vnflcm/v1/vnf_instances",
                  R"({"vnfdId":")" + std::string(kVnfdId) +
                      R"(","vnfInstanceName":"one","vnfInstanceDescription":"d"})");
  REQUIRE(c.status == 201);
  auto inst = body(c).as_object();
  std::string id(inst.at("id").as_string());
  CHECK(header(c, "Location") == "http://h:1/vnflcm/v1/vnf_instances/" + id);
  CHECK(header(c, "Version") == "1.3.0");
  CHECK(inst.at("vnfInstanceName") == "one");
  CHECK(inst.at("vnfInstanceDescription") == "d");
  CHECK(inst.at("vnfdId") == kVnfdId);
  CHECK(inst.at("vnfProvider") == "vnflow");
  CHECK(inst.at("instantiationState") == "NOT_INSTANTIATED");
  CHECK(inst.at("_links").at("instantiate").at("href").as_string() ==
        "http://h:1/vnflcm/v1/vnf_instances/" + id + "/instantiate");

  auto show = f.call("GET", "/vnflcm/v1/vnf_instances/" + id);
  REQUIRE(show.status == 200);
  CHECK(body(show) == inst);

  auto list = f.call("GET", "/vnflcm/v1/vnf_instances");
  REQUIRE(list.status == 200);
  CHECK(body(list).as_array().size() == 1);
  auto none = f.call("GET", "/vnflcm/v1/vnf_instances?filter=(eq,vnfInstanceName,two)");
  CHECK(body(none).as_array().empty());
  auto one = f.call("GET", "/vnflcm/v1/vnf_instances?filter=(eq,vnfInstanceName,one)");
  CHECK(body(one).as_array().size() == 1);
}

TEST_CASE("lists page with a Link that carries the filter", "[api][router]") {
  Fixture f;
  for (const char* n : {"a1", "a2", "b1", "a3"}) {
    REQUIRE(f.call("POST", "/vnflcm/v1/vnf_instances",
                   R"({"vnfdId":")" + std::string(kVnfdId) + R"(","vnfInstanceName":")" + n + "\"}")
                .status == 201);
  }
  std::string target = "/vnflcm/v1/vnf_instances?filter=(cont,vnfInstanceName,a)";
  std::vector<std::string> names;
  for (int pages = 0; pages < 10; ++pages) {
    auto r = f.call("GET", target, "", 2);
    REQUIRE(r.status == 200);
    auto page = body(r);
    for (const auto& e : page.as_array())
      names.emplace_back(e.at("vnfInstanceName").as_string());
    std::string link = header(r, "Link");
    if (link.empty())
      break;
    REQUIRE(link.find("rel=\"next\"") != std::string::npos);
    REQUIRE(link.find("filter=") != std::string::npos);
    auto from = link.find("/vnflcm"), to = link.find('>');
    target = link.substr(from, to - from);
  }
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"a1", "a2", "a3"});
}

TEST_CASE("instantiate is the engine's request path: 202 and the op occurrence", "[api][router]") {
  Fixture f;
  auto c =
      f.call("POST", "/vnflcm/v1/vnf_instances", R"({"vnfdId":")" + std::string(kVnfdId) + "\"}");
  std::string id(body(c).at("id").as_string());
  std::string inst = "/vnflcm/v1/vnf_instances/" + id + "/instantiate";
  // The engine's check of the request: a flavour the package does not have.
  require_problem(f.call("POST", inst, R"({"flavourId":"nosuch"})"), 400);
  auto r =
      f.call("POST", inst,
             R"({"flavourId":"simple","additionalParams":{"work_dir":"/tmp/x","nodes":["a"]}})");
  REQUIRE(r.status == 202);
  CHECK(r.body.empty());
  std::string loc = header(r, "Location");
  REQUIRE(loc.find("/vnflcm/v1/vnf_lcm_op_occs/") != std::string::npos);
  std::string op_id = loc.substr(loc.rfind('/') + 1);
  auto op = f.call("GET", "/vnflcm/v1/vnf_lcm_op_occs/" + op_id);
  REQUIRE(op.status == 200);
  CHECK(body(op).at("operationState") == "STARTING");
  CHECK(body(op).at("operation") == "INSTANTIATE");
  CHECK(body(op).at("vnfInstanceId").as_string() == id);
  // A second one while the first is open: 409 naming it.
  auto again = f.call("POST", inst, R"({"flavourId":"simple"})");
  require_problem(again, 409);
  CHECK(body(again).at("detail").as_string().find(op_id) != std::string::npos);
  auto ops = f.call("GET", "/vnflcm/v1/vnf_lcm_op_occs?filter=(eq,vnfInstanceId," + id + ")");
  CHECK(body(ops).as_array().size() == 1);
  // PATCH is the engine's modify_info request: refused while the instantiate is open.
  require_problem(f.call("PATCH", "/vnflcm/v1/vnf_instances/" + id, R"({"vnfInstanceName":"n"})"),
                  409);
  // Retry of an operation that is not FAILED_TEMP.
  require_problem(f.call("POST", "/vnflcm/v1/vnf_lcm_op_occs/" + op_id + "/retry"), 409);
}

TEST_CASE("packages list and show as VnfPkgInfo", "[api][router]") {
  Fixture f;
  auto l = f.call("GET", "/vnfpkgm/v1/vnf_packages");
  REQUIRE(l.status == 200);
  REQUIRE(body(l).as_array().size() == 1);
  auto p = body(l).as_array()[0].as_object();
  CHECK(p.at("onboardingState") == "ONBOARDED");
  CHECK(p.at("usageState") == "NOT_IN_USE");
  CHECK_FALSE(p.contains("checksum"));  // default-excluded in lists
  auto s = f.call("GET", "/vnfpkgm/v1/vnf_packages/" + f.package_id);
  REQUIRE(s.status == 200);
  CHECK(body(s).at("checksum").at("algorithm") == "SHA-256");
  CHECK(header(s, "Version").empty());
}

TEST_CASE("bad requests get a 4xx ProblemDetails and change nothing", "[api][router]") {
  Fixture f;
  auto c =
      f.call("POST", "/vnflcm/v1/vnf_instances", R"({"vnfdId":")" + std::string(kVnfdId) + "\"}");
  std::string id(body(c).at("id").as_string());
  std::string deep(100, '[');
  struct Case {
    std::string method, target, body;
    int status;
  };
  std::vector<Case> cases = {
      {"GET", "/", "", 404},
      {"GET", "/vnflcm/v1", "", 404},
      {"GET", "/vnflcm/v1/", "", 404},
      {"GET", "/vnflcm/v1/nothing", "", 404},
      {"GET", "/vnflcm/v1/vnf_instances/nosuch", "", 404},
      {"GET", "/vnflcm/v1/vnf_instances/" + std::string(200, 'x'), "", 404},
      {"GET", "/vnflcm/v1/vnf_instances//", "", 404},
      {"GET", "/vnflcm/v1/vnf_lcm_op_occs/nosuch", "", 404},
      {"GET", "/vnfpkgm/v1/vnf_packages/nosuch", "", 404},
      {"GET", "/vnfpkgm/v1/vnf_packages/../../etc/passwd", "", 404},
      {"GET", "/vnflcm/v1/vnf_instances/" + id + "/nosuchtask", "", 404},
      {"PUT", "/vnflcm/v1/vnf_instances", "", 405},
      {"DELETE", "/vnflcm/v1/vnf_lcm_op_occs", "", 405},
      {"POST", "/vnflcm/v1/api_versions", "", 405},
      {"GET", "/vnflcm/v1/vnf_instances/" + id + "/instantiate", "", 405},
      {"POST", "/vnfpkgm/v1/vnf_packages/" + f.package_id, "", 405},
      {"GET", "/vnflcm/v1/vnf_instances?filter=(eq,a", "", 400},
      {"GET", "/vnflcm/v1/vnf_instances?filter", "", 400},
      {"GET", "/vnflcm/v1/vnf_instances?filter=%zz", "", 400},
      {"GET", "/vnflcm/v1/vnf_instances?unknown=1", "", 400},
      {"GET", "/vnflcm/v1/vnf_instances?all_fields&fields=a", "", 400},
      {"GET", "/vnflcm/v1/vnf_instances?nextpage_opaque_marker=nosuch", "", 400},
      {"GET", "/vnfpkgm/v1/vnf_packages?filter=(zz,a,b)", "", 400},
      {"GET", "/vnflcm/v1/vnf_lcm_op_occs?fields=a&exclude-fields=b", "", 400},
      {"POST", "/vnflcm/v1/vnf_instances", "{", 400},
      {"POST", "/vnflcm/v1/vnf_instances", "[]", 400},
      {"POST", "/vnflcm/v1/vnf_instances", "{}", 400},
      {"POST", "/vnflcm/v1/vnf_instances", R"({"vnfdId":5})", 400},
      {"POST", "/vnflcm/v1/vnf_instances", R"({"vnfdId":"x","bogus":1})", 400},
      {"POST", "/vnflcm/v1/vnf_instances", R"({"vnfdId":"nosuch"})", 422},
      {"POST", "/vnflcm/v1/vnf_instances",
       R"({"vnfdId":")" + std::string(kVnfdId) + R"(","vnfInstanceName":7})", 400},
      {"POST", "/vnflcm/v1/vnf_instances", deep, 400},
      {"POST", "/vnflcm/v1/vnf_instances", "\xff\xfe", 400},
      {"POST", "/vnflcm/v1/vnf_instances/" + id + "/instantiate", "{}", 400},
      {"POST", "/vnflcm/v1/vnf_instances/" + id + "/instantiate", R"({"flavourId":3})", 400},
      {"POST", "/vnflcm/v1/vnf_instances/" + id + "/terminate", R"({"terminationType":"FORCEFUL"})",
       409},
      {"POST", "/vnflcm/v1/vnf_instances/" + id + "/terminate", R"({})", 400},
      {"POST", "/vnflcm/v1/vnf_instances/nosuch/instantiate", R"({"flavourId":"simple"})", 404},
      {"POST", "/vnflcm/v1/vnf_lcm_op_occs/nosuch/fail", "", 404},
  };
  for (const auto& k : cases) {
    INFO(k.method << " " << k.target.substr(0, 80) << " " << k.body.substr(0, 40));
    require_problem(f.call(k.method, k.target, k.body), k.status);
  }
  // A body with another content type.
  Router r(*f.store, 100);
  require_problem(
      r.handle({"POST", "/vnflcm/v1/vnf_instances", "text/plain", "{}", "http://h:1", "", ""}),
      415);
  // Nothing was created or started.
  CHECK(f.store->list_instances().value().size() == 1);
  CHECK(f.store->list_ops({}).value().empty());
  auto allow = f.call("PUT", "/vnflcm/v1/vnf_instances");
  CHECK(header(allow, "Allow") == "GET, POST");
  // modify_info: the engine's request type (a name must be a string).
  Fixture g;
  auto gi =
      g.call("POST", "/vnflcm/v1/vnf_instances", R"({"vnfdId":")" + std::string(kVnfdId) + "\"}");
  std::string gid(body(gi).at("id").as_string());
  require_problem(g.call("PATCH", "/vnflcm/v1/vnf_instances/" + gid, R"({"vnfInstanceName":5})"),
                  400);
  auto patch =
      g.call("PATCH", "/vnflcm/v1/vnf_instances/" + gid, R"({"vnfInstanceName":"renamed"})");
  CHECK(patch.status == 202);
  CHECK(header(patch, "Location").find("/vnflcm/v1/vnf_lcm_op_occs/") != std::string::npos);
}

}  // namespace

TEST_CASE("a request's route for the metrics: ids out, unknown shapes 'other'", "[api][router]") {
  using api::internal::route_pattern;
  CHECK(route_pattern("/vnflcm/v1/vnf_instances") == "/vnflcm/v1/vnf_instances");
  CHECK(route_pattern("/vnflcm/v1/vnf_instances?filter=(eq,id,x)") == "/vnflcm/v1/vnf_instances");
  CHECK(route_pattern("/vnflcm/v2/vnf_instances/0f1e/instantiate") ==
        "/vnflcm/v2/vnf_instances/{id}/instantiate");
  CHECK(route_pattern("/vnflcm/v1/vnf_lcm_op_occs/abc/retry") ==
        "/vnflcm/v1/vnf_lcm_op_occs/{id}/retry");
  CHECK(route_pattern("/vnfpkgm/v1/vnf_packages/p/artifacts/a/b/c.sh") ==
        "/vnfpkgm/v1/vnf_packages/{id}/artifacts/{path}");
  CHECK(route_pattern("/vnfpkgm/v1/vnf_packages/p/package_content/upload_from_uri") ==
        "/vnfpkgm/v1/vnf_packages/{id}/package_content/upload_from_uri");
  CHECK(route_pattern("/vnflcm/api_versions") == "/vnflcm/api_versions");
  CHECK(route_pattern("/metrics") == "/metrics");
  // What a client makes up never becomes a label value.
  CHECK(route_pattern("/vnflcm/v1/made-up") == "other");
  CHECK(route_pattern("/vnflcm/v1/vnf_instances/x/made-up") == "other");
  CHECK(route_pattern("/vnflcm/v1/vnf_instances/x/instantiate/y") == "other");
  CHECK(route_pattern("/etc/passwd") == "other");
  CHECK(route_pattern("") == "other");
  CHECK(route_pattern("/vnflcm/v1/vnf_instances/") == "other");
  CHECK(route_pattern("/vnflcm/v1/vnf_instances//instantiate") == "other");
  CHECK(route_pattern("/vnflcm/v1/vnf_instances/x/retry") == "other");  // an op occ's task
  CHECK(route_pattern("/vnfpkgm/v1/vnf_instances") == "other");
  CHECK(route_pattern("/vnflcm/v1/api_versions") == "/vnflcm/v1/api_versions");
}
