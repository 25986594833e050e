// http.request against a scripted transport: what it sends (method, URL, query, headers,
// body, credentials, the idempotency key), what it answers (outputs, parsed JSON), how each
// failure is classified for the retry policy, the probe (get-or-create), and the inputs it
// refuses before sending anything. tests/http/http_request_test.sh runs it for real.
#include <chrono>
#include <string>
#include <vector>

#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include "actions/actions.h"
#include "actions/internal/http.h"

#include "tests/unit/actions/scripted_transport.h"

namespace json = boost::json;
using actions::ErrorClass;
using actions::Outcome;

namespace {

// Records the options of each call and answers from a ScriptedTransport.
struct Net final : actions::http::Transport {
  test::ScriptedTransport script;
  std::vector<actions::http::Options> options;
  base::Result<actions::http::Response> send(const actions::http::Request& req,
                                             const actions::http::Options& opt) override {
    options.push_back(opt);
    return script.send(req, opt);
  }
  const std::vector<actions::http::Request>& requests() const { return script.requests; }
};

std::string header(const actions::http::Request& r, std::string_view name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name)
      return v;
  }
  return "(none)";
}

struct Fixture {
  Net net;
  actions::Registry registry;
  actions::Context ctx;
  Fixture() : registry(make()) {
    ctx.op_id = "op1";
    ctx.state = "instantiate_end.create";
    ctx.key = "op1/instantiate_end.create/1";
    ctx.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    ctx.vim = [](std::string_view id) -> base::Result<json::object> {
      if (id == "k8s")
        return json::object{
            {"id", "k8s"},
            {"type", "kubernetes"},
            {"access", json::object{{"server", "https://k8s.test:6443/"},
                                    {"bearer_token", "vim-token-123"},
                                    {"ssl_ca_cert", "-----BEGIN CERTIFICATE-----\nX\n"}}}};
      if (id == "os")
        return json::object{{"id", "os"}, {"type", "openstack"}, {"access", json::object{}}};
      return base::Status::NotFound("no VIM " + std::string(id));
    };
  }
  actions::Registry make() {
    actions::Services s;
    s.transport = &net;
    return actions::Registry::standard(s);
  }
  Outcome run(const std::string& inputs_json) {
    return registry.find("http.request")->run(json::parse(inputs_json).as_object(), ctx);
  }
};

actions::http::Response json_answer(int status, std::string body) {
  return test::response(status, std::move(body), {{"content-type", "application/json"}});
}

}  // namespace

TEST_CASE("http.request: a GET with a query answers the parsed JSON, status and headers") {
  Fixture f;
  f.net.script.on("GET", "http://api.test/v1/networks",
                  test::response(200, R"({"items":[{"name":"n1"}]})",
                                 {{"content-type", "application/json; charset=utf-8"},
                                  {"x-request-id", "r1"},
                                  {"set-cookie", "a=1"},
                                  {"set-cookie", "b=2"}}));
  auto out = f.run(R"({"url":"http://api.test/v1/networks",
                      "query":{"name":"a b&c","limit":10,"tag":["x","y"],"skip":null}})");
  REQUIRE(out.ok);
  const auto& o = out.outputs.as_object();
  CHECK(o.at("status").as_int64() == 200);
  CHECK(o.at("json").at("items").at(0).at("name").as_string() == "n1");
  CHECK(o.at("body").as_string() == "");
  CHECK(o.at("probed").as_bool() == false);
  CHECK(o.at("headers").at("x-request-id").as_string() == "r1");
  CHECK(o.at("headers").at("set-cookie").as_string() == "a=1, b=2");
  REQUIRE(f.net.requests().size() == 1);
  const auto& req = f.net.requests()[0];
  CHECK(req.method == "GET");
  CHECK(req.url == "http://api.test/v1/networks?name=a%20b%26c&limit=10&tag=x&tag=y");
  CHECK(header(req, "Idempotency-Key") == "(none)");  // a GET changes nothing
  CHECK(header(req, "Accept").find("application/json") == 0);
  CHECK(req.body.empty());
  CHECK(f.net.options[0].max_body == 1u << 20);
}

TEST_CASE("http.request: a POST sends JSON and the call's idempotency key") {
  Fixture f;
  f.net.script.on("POST", "http://api.test/v1/networks", json_answer(201, R"({"id":"n-1"})"));
  auto out = f.run(R"({"method":"post","url":"http://api.test/v1/networks",
                      "json":{"name":"net","mtu":1450},"expect":[201]})");
  REQUIRE(out.ok);
  CHECK(out.outputs.at("json").at("id").as_string() == "n-1");
  const auto& req = f.net.requests().at(0);
  CHECK(req.method == "POST");
  CHECK(json::parse(req.body) == json::parse(R"({"name":"net","mtu":1450})"));
  CHECK(header(req, "Content-Type") == "application/json");
  // The call's key without its attempt: a retry after a lost answer sends the same one.
  CHECK(header(req, "Idempotency-Key") == "op1/instantiate_end.create");
  f.ctx.key = "op1/instantiate_end.create[2]/3";
  f.run(R"({"method":"POST","url":"http://api.test/v1/networks","json":{}})");
  CHECK(header(f.net.requests().back(), "Idempotency-Key") == "op1/instantiate_end.create[2]");
  f.ctx.key = "op1/instantiate_end.create/1";
  f.net.script.requests.pop_back();

  SECTION("under another header's name, or none") {
    f.run(R"({"method":"POST","url":"http://api.test/v1/networks","json":{},
              "idempotency_header":"X-Request-Key"})");
    CHECK(header(f.net.requests().at(1), "X-Request-Key") == "op1/instantiate_end.create");
    CHECK(header(f.net.requests().at(1), "Idempotency-Key") == "(none)");
    f.run(R"({"method":"POST","url":"http://api.test/v1/networks","json":{},
              "idempotency_header":""})");
    CHECK(header(f.net.requests().at(2), "Idempotency-Key") == "(none)");
  }
  SECTION("a status outside expect fails") {
    auto o = f.run(R"({"method":"POST","url":"http://api.test/v1/networks","json":{},
                       "expect":[200]})");
    CHECK_FALSE(o.ok);
    CHECK(o.error_class == ErrorClass::kFailed);
  }
}

TEST_CASE("http.request: failures are classified for the retry policy") {
  Fixture f;
  auto at = [&](int status, std::string body = R"({"message":"no"})") {
    f.net.script.on("GET", "http://api.test/x", json_answer(status, std::move(body)));
    return f.run(R"({"url":"http://api.test/x?api_key=SECRET-Q"})");
  };
  CHECK(at(503).error_class == ErrorClass::kTransient);
  CHECK(at(500).error_class == ErrorClass::kTransient);
  CHECK(at(429).error_class == ErrorClass::kTransient);
  CHECK(at(408).error_class == ErrorClass::kTransient);
  CHECK(at(404).error_class == ErrorClass::kInvalid);
  CHECK(at(403).error_class == ErrorClass::kInvalid);
  CHECK(at(302).error_class == ErrorClass::kFailed);  // redirects are not followed
  auto o = at(500, "\n  {\"message\":\"db \x1b[31mdown\"}");
  CHECK_FALSE(o.ok);
  CHECK(o.message.find("http.request GET http://api.test/x: HTTP 500: {\"message\":\"db ") == 0);
  CHECK(o.message.find('\x1b') == std::string::npos);      // a terminal-safe message
  CHECK(o.message.find("SECRET-Q") == std::string::npos);  // the query stays out of it
  auto long_body = at(500, std::string(5000, 'z'));
  CHECK(long_body.message.size() < 400);

  auto transport = [&](base::Status st) {
    f.net.script.on("GET", "http://api.test/y",
                    [st](const actions::http::Request&) -> base::Result<actions::http::Response> {
                      return st;
                    });
    return f.run(R"({"url":"http://api.test/y?token=SECRET-Q"})");
  };
  auto refused = transport(base::Status::Unavailable(
      "GET http://api.test/y?token=SECRET-Q: connect: Connection refused"));
  CHECK(refused.error_class == ErrorClass::kTransient);
  CHECK(refused.message == "http.request GET http://api.test/y: connect: Connection refused");
  CHECK(transport({base::StatusCode::kDeadlineExceeded, "GET x: read: timed out"}).error_class ==
        ErrorClass::kTimeout);
  CHECK(transport(base::Status::InvalidArgument("GET x: TLS handshake: certificate verify failed"))
            .error_class == ErrorClass::kInvalid);
  CHECK(transport(base::Status::FailedPrecondition("GET x: read: the answer's body is larger"))
            .error_class == ErrorClass::kFailed);
  CHECK(transport(base::Status(base::StatusCode::kPermissionDenied, "outside the networks"))
            .error_class == ErrorClass::kInvalid);
}

TEST_CASE("http.request: a JSON answer that is not JSON fails; other bodies are text") {
  Fixture f;
  f.net.script.on("GET", "http://api.test/bad", json_answer(200, "{not json"));
  auto bad = f.run(R"({"url":"http://api.test/bad"})");
  CHECK_FALSE(bad.ok);
  CHECK(bad.error_class == ErrorClass::kFailed);
  CHECK(bad.message.find("not JSON") != std::string::npos);
  std::string deep(100, '[');
  f.net.script.on("GET", "http://api.test/deep", json_answer(200, deep + std::string(100, ']')));
  CHECK(f.run(R"({"url":"http://api.test/deep"})").error_class == ErrorClass::kFailed);
  f.net.script.on("GET", "http://api.test/text",
                  test::response(200, "hello", {{"content-type", "text/plain"}}));
  auto text = f.run(R"({"url":"http://api.test/text"})");
  REQUIRE(text.ok);
  CHECK(text.outputs.at("body").as_string() == "hello");
  CHECK(text.outputs.at("json").is_null());
  f.net.script.on("GET", "http://api.test/bin",
                  test::response(200, std::string("\xff\xfe\x01", 3)));
  auto bin = f.run(R"({"url":"http://api.test/bin"})");
  REQUIRE(bin.ok);
  CHECK(base::is_valid_utf8(bin.outputs.at("body").as_string()));
  f.run(R"({"url":"http://api.test/text","max_response":10})");
  CHECK(f.net.options.back().max_body == 10);
}

TEST_CASE("http.request: a probe makes get-or-create one state") {
  Fixture f;
  bool exists = false;
  f.net.script.on("GET", "http://api.test/v1/networks/net",
                  [&](const actions::http::Request&) -> base::Result<actions::http::Response> {
                    return exists ? json_answer(200, R"({"name":"net","id":"old"})")
                                  : json_answer(404, R"({"message":"no"})");
                  });
  f.net.script.on("POST", "http://api.test/v1/networks",
                  [&](const actions::http::Request&) -> base::Result<actions::http::Response> {
                    exists = true;
                    return json_answer(201, R"({"name":"net","id":"new"})");
                  });
  std::string in = R"({"method":"POST","url":"http://api.test/v1/networks","json":{"name":"net"},
                       "probe":{"url":"http://api.test/v1/networks/net"}})";
  auto first = f.run(in);
  REQUIRE(first.ok);
  CHECK(first.outputs.at("json").at("id").as_string() == "new");
  CHECK(first.outputs.at("probed").as_bool() == false);
  REQUIRE(f.net.requests().size() == 2);
  CHECK(f.net.requests()[0].method == "GET");
  CHECK(header(f.net.requests()[0], "Idempotency-Key") == "(none)");
  CHECK(f.net.requests()[0].body.empty());
  // Dispatched again (a daemon died after the POST): the probe finds it, nothing is sent.
  auto again = f.run(in);
  REQUIRE(again.ok);
  CHECK(again.outputs.at("json").at("id").as_string() == "old");
  CHECK(again.outputs.at("probed").as_bool() == true);
  CHECK(f.net.requests().size() == 3);

  SECTION("a probe answer neither found nor absent fails as that status does; no call") {
    f.net.script.on("GET", "http://api.test/v1/networks/net", json_answer(503, "{}"));
    auto o = f.run(in);
    CHECK(o.error_class == ErrorClass::kTransient);
    CHECK(o.message.find("http.request probe GET") == 0);
    CHECK(f.net.requests().size() == 4);
  }
  SECTION("found and absent are the author's") {
    f.net.script.on("GET", "http://api.test/v1/networks/net", json_answer(204, ""));
    auto o = f.run(R"({"method":"POST","url":"http://api.test/v1/networks","json":{},
                       "probe":{"url":"http://api.test/v1/networks/net","found":[204]}})");
    CHECK(o.ok);
    CHECK(o.outputs.at("probed").as_bool());
  }
  SECTION("a probe reads") {
    auto o = f.run(R"({"method":"POST","url":"http://api.test/v1/networks","json":{},
                       "probe":{"method":"DELETE"}})");
    CHECK(o.error_class == ErrorClass::kInvalid);
    CHECK(f.net.requests().size() == 3);
  }
}

TEST_CASE("http.request: credentials from auth or from a Kubernetes VIM, to its server only") {
  Fixture f;
  f.net.script.on("GET", "http://api.test/", json_answer(200, "{}"));
  f.net.script.on("GET", "https://k8s.test:6443/", json_answer(200, "{}"));
  f.net.script.on("GET", "https://K8S.test:6443/", json_answer(200, "{}"));
  REQUIRE(f.run(R"({"url":"http://api.test/a","auth":{"type":"basic","username":"u",
                    "password":"p"}})")
              .ok);
  CHECK(header(f.net.requests().back(), "Authorization") == "Basic dTpw");
  REQUIRE(f.run(R"({"url":"http://api.test/a","auth":{"type":"bearer","token":"t0k"}})").ok);
  CHECK(header(f.net.requests().back(), "Authorization") == "Bearer t0k");

  auto vim = f.run(R"({"url":"/api/v1/namespaces","vim_id":"k8s"})");
  REQUIRE(vim.ok);
  CHECK(f.net.requests().back().url == "https://k8s.test:6443/api/v1/namespaces");
  CHECK(header(f.net.requests().back(), "Authorization") == "Bearer vim-token-123");
  CHECK(f.net.options.back().ca_pem.find("BEGIN CERTIFICATE") != std::string::npos);
  REQUIRE(f.run(R"({"url":"https://K8S.test:6443/version","vim_id":"k8s"})").ok);

  size_t sent = f.net.requests().size();
  auto other = f.run(R"({"url":"https://evil.test:6443/steal","vim_id":"k8s"})");
  CHECK(other.error_class == ErrorClass::kInvalid);
  CHECK(other.message.find("the VIM's credentials go nowhere else") != std::string::npos);
  CHECK(f.run(R"({"url":"http://k8s.test:6443/x","vim_id":"k8s"})").error_class ==
        ErrorClass::kInvalid);  // another scheme is another origin
  CHECK(f.run(R"({"url":"/x","vim_id":"os"})").error_class == ErrorClass::kInvalid);
  CHECK(f.run(R"({"url":"/x","vim_id":"nope"})").error_class == ErrorClass::kInvalid);
  CHECK(f.run(R"({"url":"/x","vim_id":"k8s","auth":{"type":"bearer","token":"t"}})").error_class ==
        ErrorClass::kInvalid);
  CHECK(
      f.run(R"({"url":"/x","vim_id":"k8s","headers":{"Authorization":"Bearer x"}})").error_class ==
      ErrorClass::kInvalid);
  CHECK(f.net.requests().size() == sent);  // none of these sent anything
}

TEST_CASE("http.request: bad inputs are refused before anything is sent") {
  Fixture f;
  f.net.script.on("GET", "http://api.test/", json_answer(200, "{}"));
  const char* bad[] = {
      R"({"url":"ftp://api.test/"})",
      R"({"url":"http://user:pw@api.test/"})",
      R"({"url":"http://api.test/a b"})",
      R"({"url":"http://api.test/","method":"TRACE"})",
      R"({"url":"http://api.test/","method":"GET\r\nX: y"})",
      R"({"url":"http://api.test/","headers":{"X-A":"1\r\nInjected: 1"}})",
      R"({"url":"http://api.test/","headers":{"Bad Name":"1"}})",
      R"({"url":"http://api.test/","headers":{"Host":"other"}})",
      R"({"url":"http://api.test/","headers":{"Content-Length":"5"}})",
      R"({"url":"http://api.test/","headers":{"X-A":7}})",
      R"({"url":"http://api.test/","json":{"a":1}})",
      R"({"url":"http://api.test/","method":"POST","json":{},"body":"x"})",
      R"({"url":"http://api.test/","method":"POST","body":7})",
      R"({"url":"http://api.test/","query":{"a":{"b":1}}})",
      R"({"url":"http://api.test/","query":"a=1"})",
      R"({"url":"http://api.test/","auth":{"type":"digest"}})",
      R"({"url":"http://api.test/","auth":{"type":"basic","username":"u"}})",
      R"({"url":"http://api.test/","auth":{"type":"bearer","token":"t","extra":1}})",
      R"({"url":"http://api.test/","ca_cert":"not a pem"})",
      R"({"url":"http://api.test/","expect":[]})",
      R"({"url":"http://api.test/","expect":[99]})",
      R"({"url":"http://api.test/","expect":["200"]})",
      R"({"url":"http://api.test/","max_response":0})",
      R"({"url":"http://api.test/","max_response":1000000000})",
      R"({"url":"http://api.test/","idempotency_header":"a b"})",
      R"({"url":"http://api.test/","idempotency_header":"Content-Length"})",
      R"({"url":"http://api.test/","idempotency_header":"authorization"})",
      R"({"method":"GET"})",
      R"({"url":7})",
      R"({"url":"http://api.test/","probe":{"url":"http://api.test/","cache":true}})",
      R"({"url":"http://api.test/","probe":"yes"})",
  };
  for (const char* in : bad) {
    INFO(in);
    auto o = f.run(in);
    CHECK_FALSE(o.ok);
    CHECK(o.error_class == ErrorClass::kInvalid);
    CHECK(o.message.find("http.request") == 0);
    CHECK(o.message.find('\r') == std::string::npos);
  }
  CHECK(f.net.requests().empty());
}

TEST_CASE("http.request: credentials an answer echoes are never quoted") {
  Fixture f;
  f.net.script.on("GET", "http://api.test/",
                  [](const actions::http::Request& r) -> base::Result<actions::http::Response> {
                    // A server that quotes the request's Authorization header in its error.
                    return json_answer(401, R"({"error":"bad header )" +
                                                header(r, "Authorization") + R"(, try again"})");
                  });
  auto bearer =
      f.run(R"({"url":"http://api.test/a","auth":{"type":"bearer","token":"tok-SECRET-1"}})");
  CHECK(bearer.error_class == ErrorClass::kInvalid);
  CHECK(bearer.message.find("tok-SECRET-1") == std::string::npos);
  CHECK(bearer.message.find("bad header ***") != std::string::npos);
  auto basic = f.run(R"({"url":"http://api.test/a","auth":{"type":"basic","username":"u",
                         "password":"pw-SECRET-2"}})");
  CHECK(basic.message.find("dTpwdy1TRUNSRVQtMg") == std::string::npos);  // base64 of u:pw...
  CHECK(basic.message.find("pw-SECRET-2") == std::string::npos);
  f.net.script.on("GET", "https://k8s.test:6443/",
                  [](const actions::http::Request& r) -> base::Result<actions::http::Response> {
                    return json_answer(500, R"({"echo":")" + header(r, "Authorization") + R"("})");
                  });
  auto vim = f.run(R"({"url":"/x","vim_id":"k8s"})");
  CHECK(vim.error_class == ErrorClass::kTransient);
  CHECK(vim.message.find("vim-token-123") == std::string::npos);
  // A VIM's token in a successful answer does not reach the outputs either (the engine does
  // not know it, so nothing else would hide it).
  f.net.script.on("GET", "https://k8s.test:6443/ok",
                  [](const actions::http::Request& r) -> base::Result<actions::http::Response> {
                    return json_answer(200,
                                       R"({"whoami":")" + header(r, "Authorization") + R"("})");
                  });
  auto ok = f.run(R"({"url":"/ok","vim_id":"k8s"})");
  REQUIRE(ok.ok);
  CHECK(ok.outputs.at("json").at("whoami") == "***");
  // A package's CA never vouches for the server a VIM's token goes to.
  auto ca = f.run(R"({"url":"/x","vim_id":"k8s","ca_cert":"-----BEGIN CERTIFICATE-----\nX\n"})");
  CHECK(ca.error_class == ErrorClass::kInvalid);
  CHECK(ca.message.find("not both") != std::string::npos);
  // A URL that is not one is named without its query, terminal-safe.
  auto url = f.run("{\"url\":\"https://api:84x/?api_key=K\\u001b[2J\"}");
  CHECK(url.error_class == ErrorClass::kInvalid);
  CHECK(url.message.find("api_key") == std::string::npos);
  CHECK(url.message.find('\x1b') == std::string::npos);
}

TEST_CASE("http.request: the daemon's allowed networks reach the transport") {
  Net net;
  actions::Services s;
  s.transport = &net;
  s.http_allow = actions::parse_networks("10.0.0.0/8,127.0.0.1").value();
  auto registry = actions::Registry::standard(s);
  net.script.on("GET", "http://api.test/", json_answer(200, "{}"));
  actions::Context ctx;
  ctx.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  registry.find("http.request")->run(json::object{{"url", "http://api.test/"}}, ctx);
  REQUIRE(net.options.size() == 1);
  CHECK(net.options[0].allow.size() == 2);
  CHECK_FALSE(actions::parse_networks("10.0.0.0/8,nope").ok());
}
