// actions: the pure parts of the Heat actions and the secret sealing the VIM registry uses.
// The calls are tested on a scripted Keystone + Heat (heat_sweep_test.cpp) and against a
// real one (tests/openstack/).
#include "actions/actions.h"

#include <filesystem>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include "actions/internal/heat.h"
#include "actions/internal/http.h"
#include "actions/internal/openstack.h"

namespace json = boost::json;

namespace {

// Runs an inline kind the way the engine does: found in the registry, run on the record.
actions::Outcome run_inline(std::string_view name, const json::object& in, json::value& record) {
  static const actions::Registry r = actions::Registry::standard();
  const actions::Kind* k = r.find(name);
  REQUIRE(k != nullptr);
  REQUIRE(k->runs_inline());
  return k->run_inline(in, record);
}

}  // namespace

TEST_CASE("sealed secrets open only with their key and owner") {
  auto dir = std::filesystem::temp_directory_path() / ("vnflow-seal-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "k").string();
  auto k1 = base::load_or_create_key(path);
  REQUIRE(k1.ok());
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  auto k2 = base::load_or_create_key(path);  // the same key is read back
  REQUIRE(k2.ok());
  CHECK(k1.value() == k2.value());

  auto sealed = base::seal(k1.value(), "hunter2", "vim-1");
  REQUIRE(sealed.ok());
  CHECK(sealed.value().find("hunter2") == std::string::npos);
  CHECK(base::unseal(k1.value(), sealed.value(), "vim-1").value() == "hunter2");
  // Moved to another record, or altered: refused.
  CHECK(base::unseal(k1.value(), sealed.value(), "vim-2").status().code() ==
        base::StatusCode::kPermissionDenied);
  std::string altered = sealed.value();
  altered[altered.size() - 3] = altered[altered.size() - 3] == 'a' ? 'b' : 'a';
  CHECK_FALSE(base::unseal(k1.value(), altered, "vim-1").ok());
  // A key file others can read is refused.
  ::chmod(path.c_str(), 0644);
  CHECK(base::load_or_create_key(path).status().code() == base::StatusCode::kPermissionDenied);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a URL's password is a secret wherever it stands (proxy settings)") {
  size_t len = 0;
  CHECK(actions::url_password("https://user2:password2@host2:port2", &len) == 14);
  CHECK(len == 9);
  CHECK(actions::url_password("http://host:3128/a@b", &len) == std::string_view::npos);
  CHECK(actions::url_password("http://user@host", &len) == std::string_view::npos);
  CHECK(actions::url_password("no url: a:b@c", &len) == std::string_view::npos);
  // Not a URL with a password: an image digest, a port list, a scheme that carries none.
  CHECK(actions::url_password("docker://alpine:3.19@sha256:0123abcd", &len) ==
        std::string_view::npos);
  CHECK(actions::url_password("http://proxy:3128,ops@example.com", &len) == std::string_view::npos);
  CHECK(actions::url_password("http://[::1]:8080/x", &len) == std::string_view::npos);
  CHECK(actions::url_password("socks5h://u:pw12@[fd00::1]:1080", &len) == 12);
  CHECK(len == 4);
  CHECK(actions::redact_url_passwords("a http://u:p@h:1 b ftp://v:q@k c") ==
        "a http://u:***@h:1 b ftp://v:***@k c");
  CHECK(actions::redact_url_passwords("x http://u:p1@h y https://v:p2@k/z") ==
        "x http://u:***@h y https://v:***@k/z");
  json::value seed = json::parse(R"({"proxy": {"http_proxy": "http://user1:password1@host1:port1",
      "no_proxy": "10.0.0.1,registry.example.com"}, "list": ["https://a:b@c"]})");
  CHECK(json::serialize(actions::redact(seed)) ==
        R"({"proxy":{"http_proxy":"http://user1:***@host1:port1",)"
        R"("no_proxy":"10.0.0.1,registry.example.com"},"list":["https://a:***@c"]})");
}

TEST_CASE("a secret's name is found in any letter case and anywhere in the name") {
  for (const char* yes :
       {"password", "ADMIN_PASSWORD", "db.Passwd", "client_secret", "X-Auth-Token", "tokenId",
        "ssh_private_key", "PrivateKey", "credentials", "api_key", "ApiKey", "X-Api-Key",
        "passphrase", "Proxy-Authorization", "Set-Cookie", "{\"vim\":{\"password\":\"p\"}}"})
    CHECK(actions::is_secret_name(yes));
  for (const char* no : {"", "p", "pass", "user", "tok", "api", "secre", "auth", "cook", "private",
                         "command", "{\"stdout\":\"ok\"}"})
    CHECK_FALSE(actions::is_secret_name(no));
  // A word cut by the end of the text is not one.
  CHECK_FALSE(actions::is_secret_name("xx_passwor"));
  CHECK_FALSE(actions::is_secret_name("x_tok"));
}

TEST_CASE("URLs are parsed or refused with the reason") {
  auto u = actions::http::parse_url("https://heat.example:8004/v1/abc?x=1");
  REQUIRE(u.ok());
  CHECK(u.value().host == "heat.example");
  CHECK(u.value().port == "8004");
  CHECK(u.value().target == "/v1/abc?x=1");
  CHECK(actions::http::parse_url("http://[::1]/v3").value().host == "::1");
  CHECK(actions::http::parse_url("http://h").value().port == "80");
  CHECK_FALSE(actions::http::parse_url("ftp://h/").ok());
  CHECK_FALSE(actions::http::parse_url("http://user:pw@h/").ok());
  CHECK_FALSE(actions::http::parse_url("http://h:99999999/").ok());
  CHECK_FALSE(actions::http::parse_url("no-scheme").ok());
}

TEST_CASE("a VIM's access info is checked before any call") {
  json::object a{{"auth_url", "http://127.0.0.1:5000"},
                 {"username", "u"},
                 {"password", "p"},
                 {"project_name", "vnf"}};
  auto c = actions::openstack::cloud_from_json(a);
  REQUIRE(c.ok());
  CHECK(c.value().auth_url == "http://127.0.0.1:5000/v3");
  a.erase("password");
  auto bad = actions::check_openstack_access(a);
  CHECK_FALSE(bad.ok());
  CHECK(bad.message().find("password") != std::string::npos);
  CHECK(actions::check_openstack_access(json::object{{"auth_url", "http://k/v3"},
                                                     {"application_credential_id", "i"},
                                                     {"application_credential_secret", "s"}})
            .ok());
}

TEST_CASE("the nfv parameter follows the level, the scale status and the external links") {
  json::value vnfd = json::parse(R"({
    "vdus": {"front": {"min_instances": 1, "max_instances": 1, "sw_image": "img"},
             "worker": {"min_instances": 1, "max_instances": 3, "sw_image": ""}},
    "cps": {"front_CP1": {"vdu": "front", "virtual_link": ""},
            "worker_CP1": {"vdu": "worker", "virtual_link": "internal"}},
    "aspects": {"wa": {"max_scale_level": 2, "deltas": {"worker": {"delta_1": 1}}}},
    "levels": {"l1": {"scale_info": {"wa": 0}, "vdu_instances": {}}},
    "default_level": "l1"})");
  json::object in{{"vnfd", vnfd},
                  {"scale_status", json::object{{"wa", 2}}},
                  {"ext_virtual_links", json::parse(R"([{"resourceId": "net-1",
                      "extCps": [{"cpdId": "front_CP1"}]}])")},
                  {"overrides", json::parse(R"({"VDU": {"front": {"flavor": "m1.large"}}})")}};
  json::value record;
  auto out = run_inline("heat.parameters", in, record);
  REQUIRE(out.ok);
  const auto& nfv = out.outputs.at("parameters").at("nfv");
  CHECK(nfv.at("VDU").at("worker").at("desired_capacity").as_int64() == 3);
  CHECK(nfv.at("VDU").at("front").at("desired_capacity").as_int64() == 1);
  CHECK(nfv.at("VDU").at("front").at("flavor").as_string() == "m1.large");
  CHECK(nfv.at("VDU").at("front").at("image").as_string() == "img");
  CHECK(nfv.at("CP").at("front_CP1").at("network").as_string() == "net-1");
  CHECK(nfv.at("CP").at("worker_CP1").at("network").as_string() == "internal");
  // Beyond max_instances: clamped.
  in["scale_status"] = json::object{{"wa", 7}};
  auto clamped = actions::heat_parameters(in);
  CHECK(clamped.outputs.at("parameters")
            .at("nfv")
            .at("VDU")
            .at("worker")
            .at("desired_capacity")
            .as_int64() == 3);
}

TEST_CASE("VNFCs come from VDU resources, with their CP addresses in the same member stack") {
  json::array res = json::parse(R"([
    {"resource_name": "front", "resource_type": "OS::Nova::Server", "resource_status": "CREATE_COMPLETE",
     "physical_resource_id": "s1", "links": [{"rel": "stack", "href": "http://h/v1/p/stacks/root/r1"}]},
    {"resource_name": "front_CP1", "resource_type": "OS::Neutron::Port", "resource_status": "CREATE_COMPLETE",
     "physical_resource_id": "p1", "attributes": {"fixed_ips": [{"ip_address": "10.0.0.5"}]},
     "links": [{"rel": "stack", "href": "http://h/v1/p/stacks/root/r1"}]},
    {"resource_name": "worker", "resource_type": "OS::Nova::Server", "resource_status": "UPDATE_COMPLETE",
     "physical_resource_id": "s2", "links": [{"rel": "stack", "href": "http://h/v1/p/stacks/m1/i1"}]},
    {"resource_name": "worker_CP1", "resource_type": "OS::Neutron::Port", "resource_status": "CREATE_COMPLETE",
     "physical_resource_id": "p2", "attributes": {"fixed_ips": [{"ip_address": "10.0.0.6"}]},
     "links": [{"rel": "stack", "href": "http://h/v1/p/stacks/m1/i1"}]},
    {"resource_name": "worker", "resource_type": "OS::Nova::Server", "resource_status": "DELETE_COMPLETE",
     "physical_resource_id": "gone", "links": [{"rel": "stack", "href": "http://h/v1/p/stacks/m0/i0"}]}
  ])")
                        .as_array();
  json::object vdus{{"front", json::object{}}, {"worker", json::object{}}};
  json::object cps{{"front_CP1", json::object{{"vdu", "front"}}},
                   {"worker_CP1", json::object{{"vdu", "worker"}}}};
  auto inv = actions::heat_inventory(res, vdus, cps);
  const auto& vnfcs = inv.at("vnfcs").as_array();
  REQUIRE(vnfcs.size() == 2);  // the deleted member is not a VNFC
  CHECK(vnfcs[0].at("vdu").as_string() == "front");
  CHECK(vnfcs[0].at("address").as_string() == "10.0.0.5");
  CHECK(vnfcs[1].at("stack_id").as_string() == "m1/i1");
  CHECK(vnfcs[1].at("addresses").at("worker_CP1").as_string() == "10.0.0.6");
}

TEST_CASE(
    "group members: oldest first; a scale-in removes the oldest, with is_reverse the newest") {
  // Two members of the worker group (stack g/G): member stacks m1 (older) and m2 (newer).
  json::array res = json::parse(R"([
    {"resource_name": "aaa", "resource_type": "OS::Heat::Stack", "resource_status": "CREATE_COMPLETE",
     "physical_resource_id": "M2", "creation_time": "2026-11-23T10:00:05Z",
     "links": [{"rel": "stack", "href": "http://h/v1/p/stacks/g/G"}]},
    {"resource_name": "bbb", "resource_type": "OS::Heat::Stack", "resource_status": "CREATE_COMPLETE",
     "physical_resource_id": "M1", "creation_time": "2026-11-23T10:00:01Z",
     "links": [{"rel": "stack", "href": "http://h/v1/p/stacks/g/G"}]},
    {"resource_name": "worker", "resource_type": "OS::Nova::Server", "resource_status": "CREATE_COMPLETE",
     "physical_resource_id": "s2", "creation_time": "2026-11-23T10:00:06Z",
     "links": [{"rel": "stack", "href": "http://h/v1/p/stacks/m2/M2"}]},
    {"resource_name": "worker", "resource_type": "OS::Nova::Server", "resource_status": "CREATE_COMPLETE",
     "physical_resource_id": "s1", "creation_time": "2026-11-23T10:00:02Z",
     "links": [{"rel": "stack", "href": "http://h/v1/p/stacks/m1/M1"}]}
  ])")
                        .as_array();
  json::object vdus{{"worker", json::object{}}};
  auto inv = actions::heat_inventory(res, vdus, json::object{});
  const auto& vnfcs = inv.at("vnfcs").as_array();
  REQUIRE(vnfcs.size() == 2);
  CHECK(vnfcs[0].at("id") == "s1");  // oldest first
  CHECK(vnfcs[1].at("group_stack") == "g/G");
  CHECK(vnfcs[1].at("group_resource") == "aaa");

  json::value record;
  json::object vnfd = json::parse(R"({"aspects": {"worker_aspect": {"max_scale_level": 2,
      "deltas": {"worker": {"delta_1": 1}}}}})")
                          .as_object();
  auto one = run_inline(
      "instance.scale_in_targets",
      json::object{{"vnfd", vnfd}, {"aspect", "worker_aspect"}, {"steps", 1}, {"vnfcs", vnfcs}},
      record);
  REQUIRE(one.ok);
  REQUIRE(one.outputs.at("vnfcs").as_array().size() == 1);
  CHECK(one.outputs.at("vnfcs").as_array()[0].at("id") == "s1");  // the oldest goes
  // The one VNFC a scale-in by one step removes, given Tacker's is_reverse.
  auto target = [&](const json::value& flag) -> std::string {
    auto r = run_inline("instance.scale_in_targets",
                        json::object{{"vnfd", vnfd},
                                     {"aspect", "worker_aspect"},
                                     {"steps", 1},
                                     {"vnfcs", vnfcs},
                                     {"is_reverse", flag}},
                        record);
    if (!r.ok)
      return "error: " + r.message;
    REQUIRE(r.outputs.at("vnfcs").as_array().size() == 1);
    return std::string(r.outputs.at("vnfcs").as_array()[0].at("id").as_string());
  };
  for (const json::value& flag : {json::value("True"), json::value(true), json::value("true")})
    CHECK(target(flag) == "s2");  // the newest goes
  for (const json::value& flag : {json::value("False"), json::value(false), json::value(nullptr)})
    CHECK(target(flag) == "s1");
  CHECK(target("yes").find("error: instance.scale_in_targets: is_reverse must be") == 0);
  auto all = run_inline(
      "instance.scale_in_targets",
      json::object{{"vnfd", vnfd}, {"aspect", "worker_aspect"}, {"steps", 5}, {"vnfcs", vnfcs}},
      record);
  REQUIRE(all.ok);
  REQUIRE(all.outputs.at("vnfcs").as_array().size() == 2);
  CHECK(all.outputs.at("vnfcs").as_array()[0].at("id") == "s1");  // in their order
  auto unknown = run_inline(
      "instance.scale_in_targets",
      json::object{{"vnfd", vnfd}, {"aspect", "nope"}, {"steps", 1}, {"vnfcs", vnfcs}}, record);
  CHECK_FALSE(unknown.ok);
  CHECK(unknown.message.find("nope") != std::string::npos);
}
