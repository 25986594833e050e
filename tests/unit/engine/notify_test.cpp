// Subscriptions and notices: what a subscription request may hold, the notices the stores
// write in the transaction of each change (SQLite, or PostgreSQL under --suite postgres),
// the filters, the notification bodies, the delivery record, secrets at rest.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <libpq-fe.h>
#include <unistd.h>

#include "actions/actions.h"
#include "engine/engine.h"
#include "tosca/tosca.h"

#include "tests/fakes/callback_server.h"
#include "tests/unit/engine/store_param.h"

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

std::string source_root() {
  const char* r = std::getenv("VNFLOW_SOURCE_ROOT");
  return r != nullptr ? r : ".";
}

struct Db {
  fs::path dir;
  vnflow_test::TestDb tdb;
  std::unique_ptr<engine::Store> store;
  std::string package_id;
  Db() {
    std::string tmpl = (fs::temp_directory_path() / "vnflow-notify-test-XXXXXX").string();
    dir = ::mkdtemp(tmpl.data());
    tdb = vnflow_test::new_test_db(dir);
    auto s = tdb.open();
    REQUIRE(s.ok());
    store = std::move(s).value();
    base::Diagnostics diags;
    auto p = engine::onboard_package(*store, source_root() + "/csar-samples/local-demo", diags);
    REQUIRE(p.ok());
    package_id = p.value().id;
  }
  ~Db() {
    store.reset();
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  engine::SubscriptionRecord subscribe(const std::string& api, json::object request) {
    engine::NotifyOptions o;
    o.test_callback = false;
    if (!request.contains("callbackUri"))
      request["callbackUri"] = "http://127.0.0.1:9/cb";
    auto s = engine::create_subscription(*store, api, request, o);
    INFO(s.status().to_string());
    REQUIRE(s.ok());
    return s.value();
  }
  std::string request(const std::string& instance, const std::string& op) {
    json::value body = op == "instantiate"
                           ? json::parse(R"({"flavourId": "simple", "additionalParams":
                                 {"work_dir": ")" +
                                         (dir / "vnfs").string() + R"(", "nodes": ["a"]}})")
                           : json::value(json::object{{"terminationType", "FORCEFUL"}});
    base::Diagnostics diags;
    auto r = engine::request_operation(*store, instance, op, body, diags);
    INFO(r.status().to_string());
    REQUIRE(r.ok());
    return r.value().id;
  }
  void run() {
    engine::EngineOptions o;
    o.workers = 2;
    o.work_root = (dir / "work").string();
    o.poll = std::chrono::milliseconds(5);
    engine::Engine e(*store, actions::Registry::standard(), o);
    e.run_until_idle();
  }
  std::vector<engine::NoticeRecord> notices() {
    auto n = store->notices_after({}, 1000);
    REQUIRE(n.ok());
    return n.value();
  }
};

std::string line(const engine::NoticeRecord& n) {
  return n.kind + (n.operation.empty() ? "" : " " + n.operation) +
         (n.state.empty() ? "" : " " + n.state);
}

}  // namespace

TEST_CASE("notices: written with each change while a subscription exists, in commit order") {
  Db db;
  auto before = engine::create_instance(*db.store, db.package_id, "before", "");
  REQUIRE(before.ok());
  CHECK(db.notices().empty());  // no subscription yet: nothing is written

  db.subscribe("vnflcm/v1", {});
  auto inst = engine::create_instance(*db.store, db.package_id, "web-1", "");
  REQUIRE(inst.ok());
  std::string i = inst.value().id;
  std::string op1 = db.request(i, "instantiate");
  db.run();
  std::string op2 = db.request(i, "terminate");
  db.run();
  REQUIRE(engine::delete_instance(*db.store, i).ok());

  std::vector<std::string> got;
  auto ns = db.notices();
  for (const auto& n : ns)
    got.push_back(line(n));
  CHECK(got == std::vector<std::string>{"instance_created", "op instantiate STARTING",
                                        "op instantiate PROCESSING", "op instantiate COMPLETED",
                                        "op terminate STARTING", "op terminate PROCESSING",
                                        "op terminate COMPLETED", "instance_deleted"});
  for (size_t k = 1; k < ns.size(); ++k)
    CHECK(ns[k - 1].at < ns[k].at);
  REQUIRE(ns.size() == 8);
  CHECK(ns[1].op_id == op1);
  CHECK(ns[4].op_id == op2);
  CHECK(ns[0].instance_id == i);
  CHECK(ns[7].instance_id == i);
  // What filters match on, as it was at the change (the instance is gone by now).
  CHECK(ns[7].subject.at("instance_name") == "web-1");
  CHECK(ns[7].subject.at("vnfd_id") == "3b0c9f1e-5a2d-4e8f-9c6b-7d1e2f3a4b5c");
  CHECK(ns[3].subject.at("provider") == "vnflow");
  CHECK(ns[3].at_ms >= ns[1].at_ms);

  // Every subscription gone: the notices go at the next prune, and no new ones are written.
  auto subs = db.store->list_subscriptions(false);
  REQUIRE(subs.ok());
  for (const auto& s : subs.value())
    REQUIRE(engine::delete_subscription(*db.store, s.id).ok());
  auto pruned = db.store->prune_notices();
  REQUIRE(pruned.ok());
  CHECK(pruned.value() == 8);
  db.request(before.value().id, "instantiate");
  db.run();
  CHECK(db.notices().empty());
}

TEST_CASE(
    "a new subscription starts after the notices already written; prune keeps the slowest's") {
  Db db;
  auto first = db.subscribe("vnflcm/v1", {});
  auto inst = engine::create_instance(*db.store, db.package_id, "a", "");
  REQUIRE(inst.ok());
  auto second = db.subscribe("vnflcm/v2", {});
  auto ns = db.notices();
  REQUIRE(ns.size() == 1);
  auto s1 = db.store->get_subscription(first.id, false);
  auto s2 = db.store->get_subscription(second.id, false);
  REQUIRE(s1.ok());
  REQUIRE(s2.ok());
  CHECK(s1.value().backlog == 1);
  CHECK(s2.value().backlog == 0);  // created after it
  CHECK(s2.value().verbosity == "FULL");
  REQUIRE(db.store->notices_after(s2.value().cursor, 10).value().empty());

  // The first passes the notice: prune deletes it; the cursor never moves back.
  engine::SubscriptionRecord r = s1.value();
  r.cursor = ns[0].at;
  r.delivered = 1;
  REQUIRE(db.store->record_delivery(r).ok());
  CHECK(db.store->get_subscription(first.id, false).value().backlog == 0);
  CHECK(db.store->prune_notices().value() == 1);
  engine::SubscriptionRecord back = r;
  back.cursor = {};
  back.delivered = 0;
  REQUIRE(db.store->record_delivery(back).ok());
  CHECK(db.store->get_subscription(first.id, false).value().delivered == 1);
  REQUIRE(engine::delete_subscription(*db.store, first.id).ok());
  CHECK(db.store->record_delivery(r).code() == base::StatusCode::kNotFound);
  CHECK(engine::delete_subscription(*db.store, first.id).status().code() ==
        base::StatusCode::kNotFound);
}

TEST_CASE("package notices: operational state changed, deleted, onboarded by an upload") {
  Db db;
  db.subscribe("vnfpkgm/v1", {});
  REQUIRE(engine::modify_package(*db.store, db.package_id,
                                 json::object{{"operationalState", "DISABLED"}})
              .ok());
  REQUIRE(engine::delete_package(*db.store, db.package_id).ok());
  // An upload (SOL005: created, then its content) onboards and enables in one write: one
  // onboarding notice, no change notice.
  auto up = engine::create_package(*db.store, json::object());
  REQUIRE(up.ok());
  auto zip =
      tosca::package_archive_bytes(source_root() + "/csar-samples/local-demo", tosca::Limits{});
  REQUIRE(zip.ok());
  base::Diagnostics diags;
  auto onboarded = engine::upload_package(*db.store, up.value().id, zip.value(), diags);
  REQUIRE(onboarded.ok());
  REQUIRE(onboarded.value().onboarding_state == "ONBOARDED");
  std::vector<std::string> got;
  for (const auto& n : db.notices())
    got.push_back(line(n) + " " + n.package_id);
  CHECK(got == std::vector<std::string>{"package_changed DISABLED " + db.package_id,
                                        "package_deleted DISABLED " + db.package_id,
                                        "package_onboarded ENABLED " + up.value().id});
}

TEST_CASE("subscription requests are checked, member by member, and nothing is stored") {
  Db db;
  engine::NotifyOptions o;
  o.test_callback = false;
  struct Bad {
    std::string api, body, says;
  };
  std::vector<Bad> bad = {
      {"vnflcm/v1", R"({})", "needs callbackUri"},
      {"vnflcm/v1", R"({"callbackUri": 7})", "callbackUri must be a string"},
      {"vnflcm/v1", R"({"callbackUri": "ftp://h/x"})", "http:// or https://"},
      {"vnflcm/v1", R"({"callbackUri": "http://u:p@h/x"})", "must not carry credentials"},
      {"vnflcm/v1", R"({"callbackUri": "http:///x"})", "has no host"},
      {"vnflcm/v1", R"({"callbackUri": "http://h/\u001b[2J"})", "no spaces, control"},
      {"vnflcm/v1", R"({"callbackUri": "http://h/x", "verbosity": "FULL"})",
       "unknown member \"verbosity\""},
      {"vnflcm/v2", R"({"callbackUri": "http://h/x", "verbosity": "LOUD"})",
       "verbosity must be one of FULL, SHORT"},
      {"vnflcm/v1", R"({"callbackUri": "http://h/x", "filter": {"operationTypes": []}})",
       "filter.operationTypes must not be empty"},
      {"vnflcm/v1", R"({"callbackUri": "http://h/x", "filter": {"operationTypes": ["EXPLODE"]}})",
       "filter.operationTypes[0] must be one of"},
      {"vnflcm/v1",
       R"({"callbackUri": "http://h/x", "filter": {"vnfInstanceSubscriptionFilter": {"vnfdIds": [1]}}})",
       "filter.vnfInstanceSubscriptionFilter.vnfdIds[0] must be a string"},
      {"vnflcm/v1",
       R"({"callbackUri": "http://h/x", "filter": {"vnfInstanceSubscriptionFilter": {"vnfProductsFromProviders": [{"vnfProducts": []}]}}})",
       "needs vnfProvider"},
      {"vnflcm/v1",
       R"({"callbackUri": "http://h/x", "filter": {"notificationTypes": ["VnfPackageOnboardingNotification"]}})",
       "must be one of VnfLcmOperationOccurrenceNotification"},
      {"vnfpkgm/v1", R"({"callbackUri": "http://h/x", "filter": {"usageState": ["BUSY"]}})",
       "filter.usageState[0] must be one of IN_USE, NOT_IN_USE"},
      {"vnflcm/v1", R"({"callbackUri": "http://h/x", "authentication": {"authType": ["BASIC"]}})",
       "needs paramsBasic for BASIC"},
      {"vnflcm/v1",
       R"({"callbackUri": "http://h/x", "authentication": {"authType": ["TLS_CERT"]}})",
       "TLS_CERT is not supported"},
      {"vnflcm/v1",
       R"({"callbackUri": "http://h/x", "authentication": {"authType": ["OAUTH2_CLIENT_CREDENTIALS"],
          "paramsOauth2ClientCredentials": {"clientId": "c", "clientPassword": "p", "tokenEndpoint": "file:///etc/passwd"}}})",
       "tokenEndpoint must be an http:// or https:// URI"},
      {"vnflcm/v1",
       R"({"callbackUri": "http://h/x", "authentication": {"authType": ["OAUTH2_CLIENT_CREDENTIALS"],
          "paramsOauth2ClientCredentials": {"clientId": "c", "clientPassword": "p", "tokenEndpoint": "http://192.0.2.1:8080/token"}}})",
       "tokenEndpoint must be an https:// URI (the client's password is sent to it)"},
      {"vnflcm/v1",
       R"({"callbackUri": "http://h/x", "authentication": {"authType": ["OAUTH2_CLIENT_CREDENTIALS"],
          "paramsOauth2ClientCredentials": {"clientId": "c", "clientPassword": "p", "tokenEndpoint": "http://127.0.0.1.example.com/token"}}})",
       "except on a loopback address"},
      {"vnfpkgm/v2", R"({"callbackUri": "http://h/x"})", "no subscriptions on API"},
  };
  for (const auto& b : bad) {
    INFO(b.body);
    auto r = engine::create_subscription(*db.store, b.api, json::parse(b.body).as_object(), o);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == base::StatusCode::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains(b.says));
  }
  CHECK(db.store->list_subscriptions(false).value().empty());
}

TEST_CASE("a callback that does not answer the test GET refuses the subscription") {
  Db db;
  engine::NotifyOptions o;  // test_callback: a GET to a port nobody listens on
  o.timeout = std::chrono::milliseconds(2000);
  auto r = engine::create_subscription(*db.store, "vnflcm/v1",
                                       json::object{{"callbackUri", "http://127.0.0.1:9/cb"}}, o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == base::StatusCode::kFailedPrecondition);
  CHECK_THAT(r.status().message(), Catch::Contains("test of callbackUri failed"));
  CHECK(db.store->list_subscriptions(false).value().empty());
}

TEST_CASE("token endpoints over plain http only on loopback; callbacks only where allowed") {
  Db db;
  engine::NotifyOptions o;
  o.test_callback = false;
  for (const char* ok : {"http://127.0.0.1:8080/token", "http://localhost/token",
                         "http://[::1]:80/token", "https://192.0.2.1/token"}) {
    INFO(ok);
    json::object req{
        {"callbackUri", "http://h/x"},
        {"authentication",
         json::object{
             {"authType", json::array{"OAUTH2_CLIENT_CREDENTIALS"}},
             {"paramsOauth2ClientCredentials",
              json::object{{"clientId", "c"}, {"clientPassword", "p"}, {"tokenEndpoint", ok}}}}}};
    auto r = engine::create_subscription(*db.store, "vnflcm/v1", req, o);
    CHECK(r.ok());
  }
  // --notify-allow without the callback's address: its test refused before any connection.
  vnflow_test::CallbackServer cb;
  engine::NotifyOptions fenced;
  fenced.allow = {actions::parse_network("10.0.0.0/8").value(),
                  actions::parse_network("fd00::/8").value()};
  auto r = engine::create_subscription(*db.store, "vnflcm/v1",
                                       json::object{{"callbackUri", cb.uri()}}, fenced);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == base::StatusCode::kFailedPrecondition);
  CHECK_THAT(r.status().message(), Catch::Contains("outside --notify-allow"));
  CHECK(cb.connections.load() == 0);
  // With it: tested and stored.
  fenced.allow.push_back(actions::parse_network("127.0.0.0/8").value());
  CHECK(engine::create_subscription(*db.store, "vnflcm/v1", json::object{{"callbackUri", cb.uri()}},
                                    fenced)
            .ok());
  CHECK(cb.connections.load() == 1);
}

TEST_CASE("networks: addresses and prefixes, IPv4 and IPv6, bad ones refused") {
  auto n = actions::parse_network("10.1.0.0/16");
  REQUIRE(n.ok());
  CHECK(n.value().prefix == 16);
  CHECK_FALSE(n.value().v6);
  CHECK(actions::parse_network("192.0.2.7").value().prefix == 32);
  CHECK(actions::parse_network("2001:db8::/32").value().v6);
  CHECK(actions::parse_network("::1").value().prefix == 128);
  for (const char* bad : {"", "10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/-1", "10.0.0/8",
                          "host.example/8", "10.0.0.0/8/8", "10.0.0.0/1x"}) {
    INFO(bad);
    CHECK_FALSE(actions::parse_network(bad).ok());
  }
  // Matching, through a session: only addresses inside are connected to.
  vnflow_test::CallbackServer cb;
  actions::HttpSession s;
  auto get = [&](std::vector<std::string> nets) {
    actions::HttpCall c;
    c.url = cb.uri();
    c.timeout = std::chrono::milliseconds(3000);
    for (const auto& t : nets)
      c.allow.push_back(actions::parse_network(t).value());
    auto r = s.call(c);
    return r.ok() ? std::to_string(r.value().status)
                  : std::string(base::to_string(r.status().code()));
  };
  CHECK(get({"127.0.0.2/32"}) == "permission_denied");
  CHECK(get({"126.0.0.0/8", "::1/128"}) == "permission_denied");
  CHECK(get({"128.0.0.0/1"}) == "permission_denied");
  CHECK(cb.connections.load() == 0);
  CHECK(get({"127.0.0.0/31"}) == "204");
  CHECK(get({"0.0.0.0/0"}) == "204");
  CHECK(get({"::ffff:127.0.0.1/128"}) != "204");  // an IPv6 network never holds an IPv4 peer
  CHECK(get({"127.0.0.1"}) == "204");
}

TEST_CASE("filters: every member present must match, any value of a list") {
  engine::NoticeRecord n;
  n.id = "n1";
  n.kind = "op";
  n.operation = "instantiate";
  n.state = "COMPLETED";
  n.instance_id = "i-1";
  n.op_id = "o-1";
  n.subject = {{"instance_name", "web"}, {"vnfd_id", "d-1"},          {"provider", "acme"},
               {"product", "fw"},        {"software_version", "1.0"}, {"vnfd_version", "2.0"}};
  auto sub = [](const std::string& api, const char* filter) {
    engine::SubscriptionRecord s;
    s.id = "s";
    s.api = api;
    s.filter = json::parse(filter).as_object();
    return s;
  };
  CHECK(engine::subscription_matches(sub("vnflcm/v1", "{}"), n));
  CHECK_FALSE(engine::subscription_matches(sub("vnfpkgm/v1", "{}"), n));
  CHECK(engine::subscription_matches(
      sub("vnflcm/v2",
          R"({"operationTypes": ["HEAL", "INSTANTIATE"], "operationStates": ["COMPLETED"]})"),
      n));
  CHECK_FALSE(
      engine::subscription_matches(sub("vnflcm/v1", R"({"operationStates": ["FAILED_TEMP"]})"), n));
  CHECK_FALSE(engine::subscription_matches(
      sub("vnflcm/v1", R"({"notificationTypes": ["VnfIdentifierCreationNotification"]})"), n));
  CHECK(engine::subscription_matches(
      sub("vnflcm/v1", R"({"vnfInstanceSubscriptionFilter": {"vnfInstanceNames": ["db", "web"]}})"),
      n));
  CHECK_FALSE(engine::subscription_matches(
      sub("vnflcm/v1", R"({"vnfInstanceSubscriptionFilter": {"vnfInstanceIds": ["i-2"]}})"), n));
  CHECK(engine::subscription_matches(
      sub("vnflcm/v1",
          R"({"vnfInstanceSubscriptionFilter": {"vnfProductsFromProviders": [{"vnfProvider": "other"},
              {"vnfProvider": "acme", "vnfProducts": [{"vnfProductName": "fw", "versions":
              [{"vnfSoftwareVersion": "1.0", "vnfdVersions": ["2.0"]}]}]}]}})"),
      n));
  CHECK_FALSE(engine::subscription_matches(
      sub("vnflcm/v1",
          R"({"vnfInstanceSubscriptionFilter": {"vnfProductsFromProviders": [{"vnfProvider": "acme",
              "vnfProducts": [{"vnfProductName": "fw", "versions": [{"vnfSoftwareVersion": "1.1"}]}]}]}})"),
      n));
  // operationTypes and operationStates concern operation notifications only.
  engine::NoticeRecord created = n;
  created.kind = "instance_created";
  created.operation.clear();
  created.state.clear();
  CHECK(engine::subscription_matches(sub("vnflcm/v1", R"({"operationStates": ["FAILED"]})"),
                                     created));
  engine::NoticeRecord pkg;
  pkg.kind = "package_changed";
  pkg.package_id = "p-1";
  pkg.subject = {{"vnfd_id", "d-1"}, {"operational_state", "DISABLED"}, {"usage_state", "IN_USE"}};
  CHECK(engine::subscription_matches(
      sub("vnfpkgm/v1", R"({"vnfPkgId": ["p-1"], "operationalState": ["DISABLED"]})"), pkg));
  CHECK_FALSE(
      engine::subscription_matches(sub("vnfpkgm/v1", R"({"usageState": ["NOT_IN_USE"]})"), pkg));
  CHECK_FALSE(engine::subscription_matches(sub("vnflcm/v1", "{}"), pkg));
}

TEST_CASE("notification bodies: SOL003's fields, a stable id, errors on failures only") {
  engine::SubscriptionRecord s;
  s.id = "sub-1";
  s.api = "vnflcm/v1";
  engine::NoticeRecord n;
  n.id = "n1";
  n.kind = "op";
  n.operation = "heal";
  n.state = "FAILED_TEMP";
  n.instance_id = "i-1";
  n.op_id = "o-1";
  n.at_ms = 1700000000123;
  n.error = json::object{{"state", "x"}, {"class", "transient"}, {"message", "boom"}};
  json::object b = engine::notification_body(s, n, "http://api:9890");
  CHECK(b.at("notificationType") == "VnfLcmOperationOccurrenceNotification");
  CHECK(b.at("notificationStatus") == "RESULT");
  CHECK(b.at("operation") == "HEAL");
  CHECK(b.at("operationState") == "FAILED_TEMP");
  CHECK(b.at("timeStamp") == "2023-11-14T22:13:20.123Z");
  CHECK(b.at("error").at("detail") == "boom");
  CHECK(b.at("_links").at("vnfLcmOpOcc").at("href") ==
        "http://api:9890/vnflcm/v1/vnf_lcm_op_occs/o-1");
  CHECK(b.at("_links").at("subscription").at("href") ==
        "http://api:9890/vnflcm/v1/subscriptions/sub-1");
  CHECK_FALSE(b.contains("verbosity"));
  CHECK(engine::notification_body(s, n, "x").at("id") == b.at("id"));  // stable
  engine::SubscriptionRecord other = s;
  other.id = "sub-2";
  CHECK(engine::notification_body(other, n, "x").at("id") != b.at("id"));
  CHECK_FALSE(b.contains("affectedVnfcs"));
  // A result with its operation: the VNFCs it changed; a completed modify_info's changes.
  engine::OpRecord op;
  op.id = "o-1";
  op.operation = "heal";
  op.state = engine::OpState::kFailedTemp;
  op.cursor = json::parse(R"({"rc": {"affectedVnfcs": [{"id": "c2", "vduId": "VDU1",
      "computeResource": {"resourceId": "c2"}, "changeType": "ADDED"}]}})");
  json::object with = engine::notification_body(s, n, "x", &op);
  CHECK(with.at("affectedVnfcs") == op.cursor.at("rc").at("affectedVnfcs"));
  CHECK_FALSE(with.contains("changedInfo"));
  engine::SubscriptionRecord terse = s;
  terse.verbosity = "SHORT";
  CHECK_FALSE(engine::notification_body(terse, n, "x", &op).contains("affectedVnfcs"));
  engine::NoticeRecord mod = n;
  mod.operation = "modify_info";
  mod.state = "COMPLETED";
  mod.error = nullptr;
  op.operation = "modify_info";
  op.state = engine::OpState::kCompleted;
  op.cursor = json::object{};
  op.request = json::parse(R"({"vnfInstanceName": "renamed", "metadata": {"k": 1},
      "vimConnectionInfo": {"v": {"accessInfo": {"password": "hunter2"}}}})");
  json::object m = engine::notification_body(s, mod, "x", &op);
  CHECK(m.at("changedInfo").at("vnfInstanceName") == "renamed");
  CHECK(m.at("changedInfo").at("metadata") == json::parse(R"({"k": 1})"));
  CHECK(json::serialize(m).find("hunter2") == std::string::npos);
  CHECK_FALSE(m.contains("affectedVnfcs"));
  n.state = "PROCESSING";
  json::object p = engine::notification_body(s, n, "x", &op);
  CHECK(p.at("notificationStatus") == "START");
  CHECK_FALSE(p.contains("error"));
  CHECK_FALSE(p.contains("affectedVnfcs"));
  n.kind = "package_deleted";
  n.package_id = "p-1";
  s.api = "vnfpkgm/v1";
  json::object d = engine::notification_body(s, n, "x");
  CHECK(d.at("notificationType") == "VnfPackageChangeNotification");
  CHECK(d.at("changeType") == "PKG_DELETE");
  CHECK_FALSE(d.contains("operationalState"));
}

TEST_CASE("a subscription's authentication is sealed at rest and only opened when asked") {
  Db db;
  auto s = db.subscribe("vnflcm/v1", json::parse(R"({"authentication": {"authType": ["BASIC"],
                      "paramsBasic": {"userName": "nfvo", "password": "pw-71830-secret"}}})")
                                         .as_object());
  auto plain = db.store->get_subscription(s.id, false);
  REQUIRE(plain.ok());
  CHECK(json::serialize(plain.value().auth) == R"({"authType":["BASIC"]})");
  auto open = db.store->get_subscription(s.id, true);
  REQUIRE(open.ok());
  CHECK(open.value().auth.at("paramsBasic").at("password") == "pw-71830-secret");
  json::object view = engine::subscription_status_view(open.value());
  CHECK(json::serialize(view).find("pw-71830-secret") == std::string::npos);
  CHECK(json::serialize(engine::subscription_view(open.value())).find("authentication") ==
        std::string::npos);
  if (!vnflow_test::on_postgres()) {
    db.store.reset();
    for (const char* suffix : {"", "-wal"}) {
      std::ifstream in(db.tdb.target + suffix, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      CHECK(bytes.find("pw-71830-secret") == std::string::npos);
    }
    auto again = db.tdb.open();
    REQUIRE(again.ok());
    db.store = std::move(again).value();
  }
  if (vnflow_test::on_postgres())
    return;  // a PostgreSQL rotation takes the database alone: lease_test covers it
  REQUIRE(db.store->rotate_key().ok());
  auto rotated = db.store->get_subscription(s.id, true);
  REQUIRE(rotated.ok());
  CHECK(rotated.value().auth.at("paramsBasic").at("password") == "pw-71830-secret");
}

TEST_CASE("PostgreSQL: a notice is not handed out while an older transaction may still add one") {
  if (!vnflow_test::on_postgres()) {
    WARN("skipped on SQLite: its writers are serialised, seq is commit order");
    return;
  }
  Db db;
  db.subscribe("vnflcm/v1", {});
  auto exec = [](PGconn* c, const std::string& sql) {
    PGresult* r = PQexec(c, sql.c_str());
    INFO(PQresultErrorMessage(r));
    CHECK(PQresultStatus(r) == PGRES_COMMAND_OK);
    PQclear(r);
  };
  auto insert = [&](const std::string& id) {
    return "INSERT INTO instances(id, package_id, name, instantiation_state, record, created_ms)"
           " VALUES('" +
           id + "', '" + db.package_id + "', '" + id + "', 'NOT_INSTANTIATED', '{}', 1)";
  };
  PGconn* older = PQconnectdb(db.tdb.target.c_str());
  PGconn* newer = PQconnectdb(db.tdb.target.c_str());
  REQUIRE(PQstatus(older) == CONNECTION_OK);
  REQUIRE(PQstatus(newer) == CONNECTION_OK);
  // The older transaction writes its notice first (a lower seq, a lower xid) and commits last.
  exec(older, "BEGIN");
  exec(older, insert("older"));
  exec(newer, insert("newer"));  // committed at once
  CHECK(db.notices().empty());   // the older one may still commit: nothing is handed out
  exec(older, "COMMIT");
  std::vector<std::string> got;
  for (const auto& n : db.notices())
    got.push_back(n.kind + " " + n.instance_id);
  CHECK(got == std::vector<std::string>{"instance_created older", "instance_created newer"});
  PQfinish(older);
  PQfinish(newer);
}

namespace {

template <typename F>
bool eventually(F f, int ms = 5000) {
  for (int i = 0; i < ms / 10; ++i) {
    if (f())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return f();
}

}  // namespace

TEST_CASE("the sender: in order, retried with backoff, failing after the window, then cleared") {
  Db db;
  vnflow_test::CallbackServer cb;
  auto bodies = [&] {
    std::vector<std::string> out;
    for (const auto& p : cb.answered())
      out.push_back(p.body);
    return out;
  };
  base::ManualClock clock;
  auto sub = db.subscribe("vnflcm/v1", json::object{{"callbackUri", cb.uri()}});
  auto inst = engine::create_instance(*db.store, db.package_id, "n1", "");
  REQUIRE(inst.ok());
  engine::NotifyOptions o;
  o.poll = std::chrono::milliseconds(10);
  o.retry_for = std::chrono::milliseconds(60000);
  o.backoff_min = std::chrono::milliseconds(1000);
  o.backoff_max = std::chrono::milliseconds(8000);
  base::Metrics m;
  engine::Notifier n(*db.store, o, &m, &clock);
  n.start();
  // Delivered: the creation notice, once, its cursor recorded.
  REQUIRE(eventually([&] { return bodies().size() == 1; }));
  auto rec = [&] { return db.store->get_subscription(sub.id, false).value(); };
  REQUIRE(eventually([&] { return rec().delivered == 1 && rec().backlog == 0; }));
  CHECK(json::parse(bodies()[0]).at("notificationType") == "VnfIdentifierCreationNotification");
  int connections = cb.connections.load();

  // The receiver fails: each attempt waits for its backoff on the (manual) clock.
  cb.status = 500;
  db.request(inst.value().id, "instantiate");  // STARTING
  REQUIRE(eventually([&] { return rec().attempts == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(cb.posts.load() == 2);  // not tried again before its time
  CHECK(rec().next_attempt_ms == clock.wall_ms() + 1000);
  CHECK_THAT(rec().last_error, Catch::Contains("HTTP 500"));
  for (int attempt = 2; attempt <= 5; ++attempt) {
    clock.advance(std::chrono::milliseconds(8000));
    REQUIRE(eventually([&] { return rec().attempts == attempt; }));
  }
  CHECK(rec().next_attempt_ms - clock.wall_ms() == 8000);  // 1, 2, 4, 8, then 8 s at most
  CHECK_FALSE(rec().failing);
  clock.advance(std::chrono::milliseconds(60000));
  REQUIRE(eventually([&] { return rec().failing; }));
  CHECK(m.value("vnflow_notifications_total", {"error"}) >= 6);

  // It answers again: delivered in order, the failure cleared, nothing skipped.
  cb.status = 204;
  clock.advance(std::chrono::milliseconds(8000));
  REQUIRE(eventually([&] { return bodies().size() == 2; }));
  REQUIRE(eventually([&] { return !rec().failing && rec().attempts == 0; }));
  CHECK(json::parse(bodies()[1]).at("operationState") == "STARTING");
  // Every attempt went over the connection kept since the first delivery.
  CHECK(cb.connections.load() == connections);
  n.stop();
}

TEST_CASE("kept connections: reused, renewed when the server closed them, one per origin") {
  vnflow_test::CallbackServer a, b;
  actions::HttpSession s;
  auto post = [&](const vnflow_test::CallbackServer& to, bool may_resend = true) {
    actions::HttpCall c;
    c.method = "POST";
    c.url = to.uri();
    c.body = "{}";
    c.timeout = std::chrono::milliseconds(5000);
    c.may_resend = may_resend;
    auto r = s.call(c);
    return r.ok() ? r.value().status : -1;
  };
  for (int i = 0; i < 5; ++i)
    CHECK(post(a) == 204);
  CHECK(a.connections.load() == 1);
  // A server that closes after each answer, saying so or not: every call still succeeds,
  // each after the first on a new connection (a silently closed one is found dead when
  // used, and the call sent again).
  a.keep_alive = false;
  for (int i = 0; i < 3; ++i)
    CHECK(post(a) == 204);
  CHECK(a.connections.load() == 3);
  a.keep_alive = true;
  a.close_silently = true;
  for (int i = 0; i < 3; ++i)
    CHECK(post(a) == 204);
  CHECK(a.connections.load() == 6);
  CHECK(a.posts.load() == 11);
  // A POST that may not be sent twice is not: the dead connection's error is the answer.
  CHECK(post(a, false) == -1);
  CHECK(a.posts.load() == 11);
  CHECK(post(a, false) == 204);  // on a new connection
  CHECK(a.connections.load() == 7);
  a.close_silently = false;
  // Interim answers (1xx) are skipped: each call reads its own answer, on one connection.
  a.interim = true;
  for (int i = 0; i < 3; ++i)
    CHECK(post(a) == 204);
  a.status = 500;
  CHECK(post(a) == 500);
  a.status = 204;
  CHECK(post(a) == 204);
  a.interim = false;
  CHECK(a.connections.load() == 8);
  CHECK(a.posts.load() == 17);
  // Another origin: the kept connection moves there, and back.
  CHECK(post(b) == 204);
  CHECK(post(a) == 204);
  CHECK(post(a) == 204);
  CHECK(b.connections.load() == 1);
  CHECK(a.connections.load() == 9);
  // A server gone: an error, not a hang; the session serves again afterwards.
  std::string gone;
  {
    vnflow_test::CallbackServer c;
    gone = c.uri();
    CHECK(post(c) == 204);
  }
  actions::HttpCall c;
  c.url = gone;
  c.timeout = std::chrono::milliseconds(2000);
  auto r = s.call(c);
  CHECK_FALSE(r.ok());
  CHECK(post(a) == 204);
}
