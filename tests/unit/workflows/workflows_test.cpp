// The workflow language: expressions, templates, the compiler and the machine format.
#include "workflows/workflows.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <unistd.h>

#include "tosca/tosca.h"
#include "workflows/internal/expr.h"

namespace json = boost::json;
using workflows::Expr;

namespace {

std::string source_root() {
  const char* r = std::getenv("VNFLOW_SOURCE_ROOT");
  return r != nullptr ? r : ".";
}

json::value eval(const std::string& text, const json::value& request) {
  std::string err;
  uint32_t off = 0;
  auto e = Expr::parse(text, &err, &off);
  INFO(text << ": " << err);
  REQUIRE(e);
  json::value instance = json::parse(R"({"id": "i-1", "vnfcs": [{"id": "c1", "vdu": "VDU1"}]})");
  workflows::Scope s;
  s.request = &request;
  s.instance = &instance;
  auto v = e->evaluate(s);
  INFO(v.status().to_string());
  REQUIRE(v.ok());
  return v.value();
}

std::vector<std::string> type_errors(const std::string& text) {
  std::string err;
  uint32_t off = 0;
  auto e = Expr::parse(text, &err, &off);
  REQUIRE(e);
  workflows::TypeScope scope;
  scope.request = workflows::request_type("scale");
  scope.instance = workflows::ActionCatalog::builtin().type("instance");
  std::vector<workflows::TypeError> errors;
  workflows::check_expr(*e, scope, errors);
  std::vector<std::string> out;
  for (const auto& te : errors)
    out.push_back(te.code + " " + te.message);
  return out;
}

// A template (JSON text) evaluated with `request`.
json::value eval_template(const char* text, const json::value& request) {
  auto t = workflows::Template::parse(json::parse(text));
  REQUIRE(t.ok());
  workflows::Scope s;
  s.request = &request;
  auto v = t.value().evaluate(s);
  REQUIRE(v.ok());
  return v.value();
}

// A workflow's head whose state "s" runs local.exec, then "done"; a test adds s's lines.
const char* const kLocalExecHead = R"(start: s
states:
  done:
    succeed: true
  s:
    action: local.exec
)";

}  // namespace

TEST_CASE("expressions evaluate with JSON semantics") {
  json::value req = json::parse(
      R"({"type": "SCALE_OUT", "numberOfSteps": 2, "additionalParams": {"n": [1, 2, 3]}})");
  CHECK(eval("request.numberOfSteps * 3 + 1", req) == 7);
  CHECK(eval("request.type == 'SCALE_OUT' && !(1 > 2)", req) == true);
  CHECK(eval("len(request.additionalParams.n)", req) == 3);
  CHECK(eval("request.additionalParams.n[-1]", req) == 3);
  CHECK(eval("default(request.missing, 'x')", req) == "x");
  CHECK(eval("default(request.additionalParams.n[9], 0)", req) == 0);
  CHECK(eval("contains(instance.vnfcs, 'id', 'c1')", req) == true);
  CHECK(eval("'n=' + request.numberOfSteps", req) == "n=2");
  CHECK(eval("int(trim(' 42\\n'))", req) == 42);
  CHECK(eval("join(['a', 'b'], ',')", req) == "a,b");
  CHECK(eval("merge({}, request.additionalParams)", req).as_object().size() == 1);
}

TEST_CASE("a missing value is an error that names the path") {
  json::value req = json::parse(R"({"additionalParams": {}})");
  std::string err;
  uint32_t off = 0;
  auto e = Expr::parse("request.additionalParams.port_no + 1", &err, &off);
  workflows::Scope s;
  s.request = &req;
  auto v = e->evaluate(s);
  REQUIRE_FALSE(v.ok());
  CHECK(v.status().message() == "request.additionalParams.port_no is not set");
}

TEST_CASE("syntax errors carry an offset") {
  std::string err;
  uint32_t off = 0;
  CHECK_FALSE(Expr::parse("request.type == ", &err, &off));
  CHECK(err == "expression ends too early");
  CHECK(off == 16);
  CHECK_FALSE(Expr::parse("a ? b", &err, &off));
  CHECK(off == 2);
}

TEST_CASE("the type checker knows request bodies and the instance record") {
  CHECK(type_errors("request.aspectId").empty());
  CHECK(type_errors("request.aspectid") ==
        std::vector<std::string>{
            "W0021 request has no field \"aspectid\"; did you mean \"aspectId\"?"});
  CHECK(type_errors("request.numberOfSteps + 'a'").empty());  // string concatenation
  CHECK(type_errors("request.numberOfSteps && true") ==
        std::vector<std::string>{"W0013 \"&&\" needs boolean, not integer"});
  CHECK(type_errors("len(request.numberOfSteps)").size() == 1);
  CHECK(type_errors("instance.vnfcs[0].vdu").empty());
  CHECK(type_errors("instance.vnfcs[0].vdux").size() == 1);
  CHECK(type_errors("nope.x") == std::vector<std::string>{"W0021 unknown name \"nope\""});
}

TEST_CASE("templates keep types of whole expressions and interpolate the rest") {
  CHECK(eval_template(R"({"a": "${request.n}", "b": "n=${request.n}", "c": [1, "${request.n}"]})",
                      json::parse(R"({"n": 5})")) ==
        json::parse(R"({"a": 5, "b": "n=5", "c": [1, 5]})"));
  CHECK_FALSE(workflows::Template::parse(json::value("${unterminated")).ok());
}

TEST_CASE("requests are checked against the SOL003 bodies") {
  CHECK(workflows::check_request("instantiate", json::parse(R"({"flavourId": "simple"})")).empty());
  auto p = workflows::check_request("instantiate", json::parse(R"({"additionalParams": []})"));
  REQUIRE(p.size() == 2);
  CHECK(p[0] == "flavourId: required");
  CHECK(p[1].rfind("additionalParams: expected a map", 0) == 0);
  CHECK(workflows::check_request("scale", json::parse("[]")) ==
        std::vector<std::string>{"the request body must be a JSON object"});
}

TEST_CASE("every operation of the local demo compiles and round-trips through JSON") {
  base::Diagnostics diags;
  auto pkg =
      tosca::load_package(source_root() + "/csar-samples/local-demo", tosca::LoadOptions{}, diags);
  REQUIRE(pkg);
  REQUIRE_FALSE(diags.has_errors());
  for (const auto& op : workflows::operations()) {
    INFO(op.name);
    auto m = workflows::compile(*pkg, {op.name, ""}, diags);
    for (const auto& d : diags.items())
      INFO(base::to_string(d));
    REQUIRE(m);
    auto back = workflows::Machine::from_json(m->to_json());
    REQUIRE(back.ok());
    CHECK(back.value()->digest == m->digest);
    CHECK(back.value()->states.size() == m->states.size());
    CHECK(workflows::render(*back.value(), workflows::Format::kText) ==
          workflows::render(*m, workflows::Format::kText));
    for (auto f :
         {workflows::Format::kDot, workflows::Format::kMermaid, workflows::Format::kSeqdiag})
      CHECK_FALSE(workflows::render(*m, f).empty());
  }
  auto inst = workflows::compile(*pkg, {"instantiate", ""}, diags);
  // One machine: the hook follows the built-in steps.
  CHECK(inst->states[static_cast<size_t>(inst->start)].name == "instantiate.has_stack");
  CHECK(inst->find("instantiate.create_stack") >= 0);
  CHECK(inst->find("instantiate.record") >= 0);
  CHECK(inst->find("instantiate_end.configure") >= 0);
  // dot: a state's label breaks its line with dot's \n, escaped once (dot shows a line
  // break, not a backslash).
  auto dot = workflows::render(*inst, workflows::Format::kDot);
  CHECK(dot.find("[label=\"configure\\nlocal.exec") != std::string::npos);
  CHECK(dot.find("\\\\n") == std::string::npos);
  // Failures that stop the operation: one edge per file's box, not one per action state.
  size_t to_failed = 0;
  for (size_t at = 0; (at = dot.find("-> \"FAILED_TEMP\"", at)) != std::string::npos; ++at)
    ++to_failed;
  std::set<std::string> segments;
  for (const auto& s : inst->states)
    segments.insert(s.segment);
  CHECK(to_failed <= segments.size() + 2);  // + the fail states
  CHECK(dot.find("[ltail=cluster_0, style=dashed, color=red, label=\"failure (") !=
        std::string::npos);
  // Only this flavour's branches: the demo has no stack template, so no Heat steps, and the
  // choice that decides it shows the one branch it takes.
  CHECK(dot.find("create_stack") == std::string::npos);
  CHECK(dot.find("heat.") == std::string::npos);
  CHECK(dot.find("\"instantiate.has_stack\" -> ") != std::string::npos);
  CHECK(dot.find("(this flavour)") != std::string::npos);
  auto seq = workflows::render(*inst, workflows::Format::kSeqdiag);
  CHECK(seq.find("\"vnflow\" -> \"vnflow host\"") != std::string::npos);
  CHECK(seq.find("\"vnflow\" -> \"VnfInstance (vnflow DB)\"") != std::string::npos);
}

TEST_CASE("dot draws the Heat steps of a flavour with a stack template, and only those") {
  base::Diagnostics diags;
  auto pkg =
      tosca::load_package(source_root() + "/csar-samples/heat-demo", tosca::LoadOptions{}, diags);
  REQUIRE(pkg);
  auto m = workflows::compile(*pkg, {"instantiate", ""}, diags);
  REQUIRE(m);
  auto dot = workflows::render(*m, workflows::Format::kDot);
  CHECK(dot.find("\"instantiate.create_stack\" [label=") != std::string::npos);
  CHECK(dot.find("\"instantiate.has_stack\" -> \"instantiate.parameters\" "
                 "[label=\"vnfd.base_hot.template != '' (this flavour)\"]") != std::string::npos);
  CHECK(dot.find("\"instantiate.has_stack\" -> \"instantiate.record\"") == std::string::npos);
  // The text form still lists every state of the machine.
  auto text = workflows::render(*m, workflows::Format::kText);
  for (const auto& s : m->states)
    CHECK(text.find(s.name) != std::string::npos);
}

TEST_CASE("a hook that is not a workflow is refused with the reason") {
  base::Diagnostics diags;
  auto pkg = tosca::load_package(source_root() + "/tests/unit/workflows/bash-hook-package",
                                 tosca::LoadOptions{}, diags);
  REQUIRE(pkg);
  auto m = workflows::compile(*pkg, {"instantiate", ""}, diags);
  CHECK(m == nullptr);
  bool found = false;
  for (const auto& d : diags.items())
    found = found ||
            (d.code == "W0040" && d.message.find("which vnflow cannot run") != std::string::npos);
  CHECK(found);
}

namespace {

base::Result<json::value> try_eval(const std::string& text, const json::value& request) {
  std::string err;
  uint32_t off = 0;
  auto e = Expr::parse(text, &err, &off);
  REQUIRE(e);
  workflows::Scope s;
  s.request = &request;
  return e->evaluate(s);
}

// What /bin/sh makes of WORD: the arguments it splits it into, each followed by "|".
std::string sh_words(const std::string& word) {
  std::string cmd = "printf '%s|' " + word;
  std::string quoted_cmd = "sh -c " + base::shell_quote(cmd);
  std::string out;
  FILE* p = ::popen(quoted_cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0)
    out.append(buf, n);
  ::pclose(p);
  return out;
}

std::vector<std::string> compile_diags(const std::string& yaml, bool* compiled = nullptr) {
  base::Diagnostics diags;
  auto m = workflows::compile_file("wf.yaml", yaml, "instantiate", "instantiate_end", diags);
  if (compiled != nullptr)
    *compiled = m != nullptr;
  std::vector<std::string> out;
  for (const auto& d : diags.sorted())
    out.push_back(base::to_string(d));
  return out;
}

// The diagnostics of a workflow that must not compile, one per line.
std::string refused(const std::string& yaml, size_t* count) {
  bool compiled = true;
  auto diags = compile_diags(yaml, &compiled);
  CHECK_FALSE(compiled);
  std::string all;
  for (const auto& d : diags)
    all += d + "\n";
  *count = diags.size();
  return all;
}

}  // namespace

TEST_CASE("shellquote() makes one shell word of any value") {
  json::value req = json::parse(R"({"additionalParams": {"n": 7}})");
  CHECK(eval("shellquote('a b')", req) == "'a b'");
  CHECK(eval("shellquote(\"it's\")", req) == "'it'\\''s'");
  CHECK(eval("shellquote('')", req) == "''");
  CHECK(eval("shellquote(request.additionalParams.n)", req) == "'7'");
  for (std::string hostile : {"x; touch /tmp/pwned", "$(id) `id` $HOME", "a'b\"c\\d", "\n-rf *",
                              "'", "''", "tab\there"}) {
    INFO(hostile);
    auto q = eval("shellquote(request.v)", json::object{{"v", hostile}});
    CHECK(sh_words(std::string(q.as_string())) == hostile + "|");
  }
  CHECK(type_errors("shellquote(request.aspectId)").empty());
  CHECK(type_errors("shellquote(1, 2)") ==
        std::vector<std::string>{"W0013 shellquote() takes 1 arguments, not 2"});
}

TEST_CASE("pathsafe() lets only a plain file name through") {
  json::value req = json::parse(R"({"n": 42})");
  CHECK(eval("pathsafe('node-a.conf_1')", req) == "node-a.conf_1");
  CHECK(eval("pathsafe(request.n)", req) == "42");
  CHECK(eval("pathsafe('.hidden')", req) == ".hidden");
  CHECK(eval("pathsafe('" + std::string(255, 'a') + "')", req).as_string() ==
        std::string(255, 'a'));
  for (const std::string& bad :
       std::vector<std::string>{"../../victim", "..", ".", "", "a/b", "/etc", "-rf", "x; rm", "a b",
                                std::string(256, 'a'), "caf\xc3\xa9", "a\nb"}) {
    INFO(bad);
    auto v = try_eval("pathsafe(request.v)", json::object{{"v", bad}});
    REQUIRE_FALSE(v.ok());
    CHECK(v.status().message().rfind("pathsafe(): \"", 0) == 0);
    CHECK(v.status().message().find("is not a safe file name") != std::string::npos);
  }
  // The value is named, escaped: no raw newline or non-ASCII byte reaches a message.
  CHECK(try_eval("pathsafe(request.v)", json::object{{"v", "../../victim"}}).status().message() ==
        "pathsafe(): \"../../victim\" is not a safe file name (1 to 255 of A-Z a-z 0-9 . _ -, "
        "not \".\" or \"..\", not starting with \"-\")");
  auto nl = try_eval("pathsafe(request.v)", json::object{{"v", "a\nb\xc3\xa9\""}});
  CHECK(nl.status().message().rfind("pathsafe(): \"a\\x0ab\\xc3\\xa9\\\"\" is", 0) == 0);
  CHECK_FALSE(try_eval("pathsafe(request.v)", json::object{{"v", json::array{}}}).ok());
  CHECK(type_errors("pathsafe(request.aspectId)").empty());
  CHECK(type_errors("pathsafe(request.numberOfSteps)").empty());
  CHECK(type_errors("pathsafe(instance.vnfcs)") ==
        std::vector<std::string>{"W0013 pathsafe() needs a string or an integer, not list(vnfc)"});
}

TEST_CASE("a request value put unquoted into shell text is a warning (W0043), not an error") {
  const std::string head = kLocalExecHead;
  bool compiled = false;
  auto d = compile_diags(head + R"(    with:
      shell: mkdir -p /x/${request.additionalParams.name}
    timeout: 10s
    next: done
)",
                         &compiled);
  CHECK(compiled);  // a warning does not stop the machine
  REQUIRE(d.size() == 1);
  CHECK(d[0] ==
        "wf.yaml:8:26: warning: \"${request.additionalParams.name}\" puts a request value unquoted "
        "into the shell text of local.exec input \"shell\" (\"x; rm -rf ~\" would run a "
        "command); write ${shellquote(request.additionalParams.name)}, or pass the value in "
        "env: and write \"$NAME\" [W0043]");

  auto count = [&](const std::string& with) {
    auto ds = compile_diags(head + with);
    int n = 0;
    for (const auto& x : ds) {
      INFO(x);
      CHECK(x.find("[W0043]") != std::string::npos);
      n += 1;
    }
    return n;
  };
  // Reported: direct reads, through default()/string()/+, the item of a request list, the
  // script of sh -c, ssh.exec's command.
  CHECK(count("    with: {shell: \"echo ${default(request.additionalParams.x, 'a')} "
              "${string(request.flavourId)} ${'a' + request.flavourId}\"}\n"
              "    timeout: 1s\n    next: done\n") == 3);
  CHECK(count("    for_each: ${request.additionalParams.nodes}\n    as: node\n"
              "    with: {shell: \"touch ${node}\"}\n    timeout: 1s\n    next: done\n") == 1);
  CHECK(count("    with: {command: [/bin/bash, -ec, \"touch ${request.flavourId}\"]}\n"
              "    timeout: 1s\n    next: done\n") == 1);
  CHECK(count("    for_each: ${request.additionalParams.nodes}\n    with: {shell: \"true\"}\n"
              "    timeout: 1s\n    next: done\n    compensate:\n      action: local.exec\n"
              "      with: {shell: \"rm ${item}\"}\n      timeout: 1s\n") == 1);
  CHECK(compile_diags(R"(start: s
states:
  s:
    action: ssh.exec
    with: {host: h, username: u, command: "systemctl restart ${request.flavourId}"}
    timeout: 10s
    next: done
  done:
    succeed: true
)")
            .size() == 1);
  // Not reported: quoted, checked, numbers and booleans, other roots, env, plain argv.
  CHECK(count("    with: {shell: \"echo ${shellquote(request.flavourId)} "
              "${pathsafe(request.flavourId)} ${int(request.additionalParams.n)} "
              "${len(request.additionalParams.nodes)} ${request.flavourId == 'a'} "
              "${default(request.additionalParams.n, 1) > 2} ${instance.id} ${op.id}\"}\n"
              "    timeout: 1s\n    next: done\n") == 0);
  CHECK(count("    for_each: ${instance.vnfcs}\n    as: node\n"
              "    with: {shell: \"ping ${node.address}\"}\n    timeout: 1s\n    next: done\n") ==
        0);
  CHECK(count("    with: {shell: \"mkdir \\\"$D\\\"\", env: {D: \"${request.flavourId}\"}}\n"
              "    timeout: 1s\n    next: done\n") == 0);
  CHECK(count("    with: {command: [mkdir, -p, \"${request.flavourId}\"], "
              "stdin: \"${request.flavourId}\"}\n    timeout: 1s\n    next: done\n") == 0);
}

TEST_CASE("requests: integers are int64 within their bounds, strings bounded, no sealed values") {
  auto problems = [](const char* op, const std::string& body) {
    return workflows::check_request(op, json::parse(body));
  };
  using V = std::vector<std::string>;
  // gracefulTerminationTimeout: seconds, 0..86400.
  CHECK(
      problems("terminate", R"({"terminationType": "GRACEFUL", "gracefulTerminationTimeout": 30})")
          .empty());
  CHECK(problems("terminate", R"({"terminationType": "GRACEFUL", "gracefulTerminationTimeout": 0})")
            .empty());
  CHECK(problems("terminate",
                 R"({"terminationType": "GRACEFUL", "gracefulTerminationTimeout": 86400})")
            .empty());
  CHECK(problems("terminate", R"({"terminationType": "GRACEFUL",
                                  "gracefulTerminationTimeout": 9223372036854775807})") ==
        V{"gracefulTerminationTimeout: must be an integer from 0 to 86400 seconds, not "
          "9223372036854775807"});
  CHECK(problems("terminate",
                 R"({"terminationType": "GRACEFUL", "gracefulTerminationTimeout": -5})") ==
        V{"gracefulTerminationTimeout: must be an integer from 0 to 86400 seconds, not -5"});
  CHECK(problems("terminate",
                 R"({"terminationType": "GRACEFUL", "gracefulTerminationTimeout": 2.5})") ==
        V{"gracefulTerminationTimeout: expected an integer, found 2.5E0"});
  CHECK(problems("terminate", R"({"terminationType": "SOMETIMES"})") ==
        V{"terminationType: must be FORCEFUL or GRACEFUL, not \"SOMETIMES\""});
  // numberOfSteps: 1..1000; 2^64-1 is not an int64.
  CHECK(problems("scale", R"({"type": "SCALE_OUT", "aspectId": "a", "numberOfSteps": 1000})")
            .empty());
  CHECK(problems("scale", R"({"type": "SCALE_OUT", "aspectId": "a",
                              "numberOfSteps": 18446744073709551615})") ==
        V{"numberOfSteps: expected an integer below 2^63, found 18446744073709551615"});
  CHECK(problems("scale", R"({"type": "SCALE_OUT", "aspectId": "a",
                              "numberOfSteps": 9223372036854775807})") ==
        V{"numberOfSteps: must be an integer from 1 to 1000, not 9223372036854775807"});
  CHECK(problems("scale", R"({"type": "SCALE_IN", "aspectId": "a", "numberOfSteps": 0})") ==
        V{"numberOfSteps: must be an integer from 1 to 1000, not 0"});
  CHECK(problems("scale", R"({"type": "SCALE_UP", "aspectId": "a"})") ==
        V{"type: must be SCALE_OUT or SCALE_IN, not \"SCALE_UP\""});
  // Ids and names: at most 255 bytes, no control characters; descriptions 4096 bytes.
  std::string id255(255, 'f'), id256(256, 'f');
  CHECK(problems("instantiate", R"({"flavourId": ")" + id255 + "\"}").empty());
  CHECK(problems("instantiate", R"({"flavourId": ")" + id256 + "\"}") ==
        V{"flavourId: longer than 255 bytes (256)"});
  CHECK(problems("instantiate", R"({"flavourId": "a\nb"})") ==
        V{"flavourId: contains control characters"});
  CHECK(problems("heal", R"({"vnfcInstanceId": ["ok", ")" + id256 + "\"]}") ==
        V{"vnfcInstanceId[1]: longer than 255 bytes (256)"});
  CHECK(problems("heal", R"({"cause": "two\nlines"})").empty());
  CHECK(
      problems("modify_info", R"({"vnfInstanceDescription": ")" + std::string(4097, 'd') + "\"}") ==
      V{"vnfInstanceDescription: longer than 4096 bytes (4097)"});
  // Sealed values never come from a request: not as a value, in a list, or as a key.
  CHECK(problems("instantiate", R"({"flavourId": "simple", "additionalParams":
                                    {"db": {"password": "vnflow-sealed:s1:AAAA"}}})") ==
        V{"additionalParams.db.password: sealed values are not accepted in requests"});
  CHECK(problems("instantiate", R"({"flavourId": "simple", "vimConnectionInfo":
                                    [{"accessInfo": {"password": "vnflow-sealed:j1:x"}}]})") ==
        V{"vimConnectionInfo[0].accessInfo.password: sealed values are not accepted in requests"});
  CHECK(problems("instantiate", R"({"flavourId": "vnflow-sealed:s1:x"})") ==
        V{"flavourId: sealed values are not accepted in requests"});
  CHECK(problems("instantiate",
                 R"({"flavourId": "simple", "additionalParams": {"vnflow-sealed:k": 1}})") ==
        V{"additionalParams.vnflow-sealed:k: sealed values are not accepted in requests"});
  CHECK(problems("instantiate",
                 R"({"flavourId": "simple", "additionalParams": {"note": "not vnflow-sealed:"}})")
            .empty());
}

namespace {

std::string repeat(std::string_view s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i)
    out += s;
  return out;
}

}  // namespace

TEST_CASE("an expression nested past the budget is W0023 at the first level too many") {
  // Each shape recursed once per level in the parser or in the walks over the tree (the
  // fuzzer's stack overflow was 200,000 "("); 200,000 levels would take megabytes of stack.
  const size_t n = 200000;
  const size_t max = Expr::kMaxDepth;
  struct Shape {
    std::string text;
    uint32_t first_too_deep;  // offset of the token at which the budget runs out
  };
  const std::vector<Shape> shapes = {
      {repeat("(", n) + "1" + repeat(")", n), static_cast<uint32_t>(max)},
      {repeat("[", n) + "1" + repeat("]", n), static_cast<uint32_t>(max)},
      {repeat("len(", n) + "1" + repeat(")", n), static_cast<uint32_t>(4 * max)},
      {repeat("!", n) + "true", static_cast<uint32_t>(max - 1)},
      {repeat("-", n) + "1", static_cast<uint32_t>(max - 1)},
      // A chain fails at the operator of its first node too many: "+" number 100.
      {"1" + repeat(" + 1", n), static_cast<uint32_t>(4 * max - 2)},
      {"request" + repeat(".a", n), static_cast<uint32_t>(2 * max + 6)},
      {"request" + repeat("[0]", n), static_cast<uint32_t>(3 * max + 4)},
      {repeat("request[", n) + "0" + repeat("]", n), static_cast<uint32_t>(8 * max)},
  };
  for (const auto& s : shapes) {
    INFO(s.text.substr(0, 40));
    std::string err, code;
    uint32_t off = 0;
    CHECK_FALSE(Expr::parse(s.text, &err, &off, &code));
    CHECK(code == "W0023");
    CHECK(err.find("nested deeper than 100 levels") != std::string::npos);
    CHECK(off == s.first_too_deep);
  }
  // A syntax error keeps its own code.
  std::string err, code;
  uint32_t off = 0;
  CHECK_FALSE(Expr::parse("1 +", &err, &off, &code));
  CHECK(code == "W0020");
}

TEST_CASE("expressions up to the nesting budget parse, check and evaluate") {
  const size_t max = Expr::kMaxDepth;
  json::value req = json::parse(R"({"a": [[7]]})");
  CHECK(eval(repeat("(", max - 1) + "1" + repeat(")", max - 1), req) == 1);
  CHECK(eval("0" + repeat(" + 1", max - 1), req) == static_cast<int64_t>(max - 1));
  CHECK(eval(repeat("!", max - 1) + "true", req) == false);  // 99 negations
  CHECK(eval(repeat("[", max - 1) + "1" + repeat("]", max - 1), req).is_array());
  CHECK(type_errors("0" + repeat(" + 1", max - 1)).empty());
  // One level more is refused.
  std::string err;
  uint32_t off = 0;
  CHECK_FALSE(Expr::parse("0" + repeat(" + 1", max), &err, &off));
  CHECK_FALSE(Expr::parse(repeat("(", max) + "1" + repeat(")", max), &err, &off));
}

TEST_CASE("workflow check of a when: 200,000 brackets deep reports W0023 there") {
  // `vnflow workflow check FILE` compiles through compile_file; it died with SIGSEGV.
  const size_t n = 200000;
  std::string yaml =
      "start: which\n"
      "states:\n"
      "  which:\n"
      "    choice:\n"
      "      - when: ${" +
      repeat("(", n) + "1" + repeat(")", n) +
      "}\n"
      "        next: done\n"
      "    default: done\n"
      "  done:\n"
      "    succeed: true\n";
  bool compiled = true;
  auto diags = compile_diags(yaml, &compiled);
  CHECK_FALSE(compiled);
  REQUIRE(diags.size() == 1);
  // Line 5, column 17 is the first "(" of the expression; the budget runs out 100 later.
  CHECK(diags[0].rfind("wf.yaml:5:117: error: expression: expression nested deeper than 100 "
                       "levels",
                       0) == 0);
  CHECK(diags[0].find("[W0023]") != std::string::npos);
}

TEST_CASE("the fuzzers' stack overflow findings compile to diagnostics") {
  for (const char* name :
       {"workflow-expr-stack-overflow.yaml", "workflow-expr-stack-overflow-2.yaml"}) {
    INFO(name);
    std::string path = source_root() + "/tests/fuzz/workflow-corpus/" + name;
    std::FILE* f = std::fopen(path.c_str(), "rb");
    REQUIRE(f != nullptr);
    std::string text;
    char buf[65536];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof buf, f)) > 0)
      text.append(buf, got);
    std::fclose(f);
    // The compiler built a template of every `with:` value, "cofdition" too (an unknown
    // input, W0011), and the parser recursed through thousands of "[" in it.
    bool compiled = true;
    auto diags = compile_diags(text, &compiled);
    CHECK_FALSE(compiled);
    CHECK(std::any_of(diags.begin(), diags.end(), [](const std::string& d) {
      return d.find("has no input \"cofdition\"") != std::string::npos;
    }));
    auto t = workflows::Template::parse(json::value(text));
    REQUIRE_FALSE(t.ok());
    CHECK(t.status().message().rfind("expression nested deeper than 100 levels", 0) == 0);
  }
}

namespace {

// The message of an expression whose evaluation fails.
std::string eval_error(const std::string& text) {
  std::string err;
  uint32_t off = 0;
  auto e = Expr::parse(text, &err, &off);
  INFO(text << ": " << err);
  REQUIRE(e);
  json::value req = json::object{};
  workflows::Scope s;
  s.request = &req;
  auto v = e->evaluate(s);
  INFO(text);
  REQUIRE_FALSE(v.ok());
  return v.status().message();
}

}  // namespace

TEST_CASE("integer arithmetic past int64 is an error, not a wrapped or undefined value") {
  json::value req = json::object{};
  CHECK(eval("9223372036854775806 + 1", req) == INT64_MAX);
  CHECK(eval("-9223372036854775807 - 1", req) == INT64_MIN);
  CHECK(eval("int(-9.2e18)", req) == static_cast<int64_t>(-9.2e18));
  for (const char* text : {"9223372036854775807 + 1", "-9223372036854775807 - 2",
                           "4611686018427387904 * 2", "(-9223372036854775807 - 1) / -1",
                           "(-9223372036854775807 - 1) % -1", "-(-9223372036854775807 - 1)"}) {
    CHECK(eval_error(text).find("integer overflow in ") != std::string::npos);
  }
  for (const char* text : {"int(1e300)", "int(-1e300)", "int(9223372036854775808.0)"})
    CHECK(eval_error(text).find("out of range") != std::string::npos);
}

TEST_CASE("the evaluator checks a call's arity itself (a machine read back is not type-checked)") {
  CHECK(eval_error("len()") == "len() takes 1 arguments, not 0");
  CHECK(eval_error("default(1)") == "default() takes 2 arguments, not 1");
  CHECK(eval_error("find([], 'a')") == "find() takes 3 arguments, not 2");
  CHECK(eval_error("nosuch(1)") == "unknown function \"nosuch\"");
  // The type checker says the same at compile time.
  CHECK(type_errors("len()") == std::vector<std::string>{"W0013 len() takes 1 arguments, not 0"});
}

TEST_CASE("a workflow's compile time grows linearly with its states (a hostile package's cost)") {
  // Every state reads the one before it; the type check built each state's scope from every
  // other state (quadratic: ~0.3 s at 2,000 states, minutes at 30,000). A wall-clock limit
  // fails on a slow build (ASan) or a loaded machine, so the test compares the compiler with
  // itself: four times the states may cost about four times the time, never sixteen. Each
  // size keeps its fastest of three runs, so a pause of the machine does not count.
  auto chain = [](int n) {
    std::string yaml = "start: s0\nstates:\n";
    for (int i = 0; i < n; ++i) {
      yaml += "  s" + std::to_string(i) + ":\n    action: local.exec\n    with:\n";
      yaml += i == 0 ? std::string("      command: [\"true\"]\n")
                     : "      command: [\"echo\", \"${states.s" + std::to_string(i - 1) +
                           ".stdout}\"]\n";
      yaml += "    timeout: 10s\n    next: " + (i + 1 < n ? "s" + std::to_string(i + 1) : "done") +
              "\n";
    }
    return yaml + "  done:\n    succeed: true\n";
  };
  auto fastest = [](const std::string& yaml) {
    double best = 1e9;
    for (int run = 0; run < 3; ++run) {
      auto t0 = std::chrono::steady_clock::now();
      bool compiled = false;
      auto diags = compile_diags(yaml, &compiled);
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      INFO((diags.empty() ? std::string() : diags[0]));
      CHECK(compiled);
      CHECK(diags.empty());
    }
    return best;
  };
  double small = fastest(chain(2000));
  double large = fastest(chain(8000));
  INFO("2,000 states: " << small << " s; 8,000 states: " << large << " s");
  CHECK(large < 8 * small);
}

TEST_CASE("states.NAME: itself, a state that may not have run, one of another file, a typo") {
  std::string yaml = R"(start: a
states:
  a:
    action: local.exec
    with:
      command: ["echo", "${states.a.stdout}"]
    timeout: 10s
    next: pick
  pick:
    choice:
      - when: ${states.a.exit_code == 0}
        next: b
    default: c
  b:
    action: local.exec
    with:
      command: ["true"]
    timeout: 10s
    next: c
  c:
    action: local.exec
    with:
      command: ["echo", "${states.b.stdout}", "${states.aa.stdout}", "${states.a.stdout}"]
    timeout: 10s
    next: done
  done:
    succeed: true
)";
  size_t count = 0;
  std::string all = refused(yaml, &count);
  INFO(all);
  REQUIRE(count == 3);
  CHECK(all.find("no state \"a\" before this one") != std::string::npos);  // itself
  CHECK(all.find("state \"b\" may not have run") != std::string::npos);
  CHECK(all.find("no state \"aa\" before this one; did you mean \"a\"?") != std::string::npos);
}

TEST_CASE("a transition to a missing state is the one error: no cascade behind it") {
  // "nxet" cuts the graph after a: b and done look unreachable, a looks stuck, and c's
  // read of states.b looks unordered. All of that is the same typo, reported once.
  std::string yaml = R"(start: a
states:
  a:
    action: local.exec
    with:
      command: ["true"]
    timeout: 10s
    next: nxet
  b:
    action: local.exec
    with:
      command: ["echo", "${states.a.stdout}"]
    timeout: 10s
    next: c
  c:
    action: local.exec
    with:
      command: ["echo", "${states.b.stdout}", "${nosuch.x}"]
    timeout: 10s
    next: done
  done:
    succeed: true
)";
  size_t count = 0;
  std::string all = refused(yaml, &count);
  INFO(all);
  REQUIRE(count == 2);
  CHECK(all.find("no state \"nxet\" in this workflow") != std::string::npos);
  CHECK(all.find("unknown name \"nosuch\"") != std::string::npos);  // other errors still come
}

TEST_CASE("a cut transition in one hook file hides nothing of another") {
  // The k8s sample's heal: heal_start with a typo ("drian"), and an orphan state added to
  // converge.yaml (heal_end). The typo is the one error of heal_start; the orphan is still
  // called unreachable.
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("vnflow-cut-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::copy(source_root() + "/csar-samples/k8s-cluster", dir, fs::copy_options::recursive);
  auto edit = [&](const char* file, const std::string& from, const std::string& to) {
    std::ifstream in(dir / file);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
    std::ofstream(dir / file) << text;
  };
  edit("Workflows/heal_start.yaml", "    next: drain\n", "    next: drian\n");
  edit("Workflows/converge.yaml", "  done:\n    succeed: true",
       "  orphan:\n    wait: 1s\n    next: done\n\n  done:\n    succeed: true");
  base::Diagnostics diags;
  tosca::LoadOptions opts;
  opts.verify_digests = false;
  auto pkg = tosca::load_package(dir.string(), opts, diags);
  REQUIRE(pkg);
  auto m = workflows::compile(*pkg, {"heal", ""}, diags);
  fs::remove_all(dir);
  CHECK(m == nullptr);
  std::string all;
  size_t unreachable = 0;
  for (const auto& d : diags.sorted()) {
    all += base::to_string(d) + "\n";
    unreachable += d.code == "W0030" ? 1 : 0;
  }
  INFO(all);
  CHECK(all.find("heal_start.yaml") != std::string::npos);
  CHECK(all.find("no state \"drian\" in this workflow") != std::string::npos);
  CHECK(all.find("converge.yaml") != std::string::npos);
  CHECK(all.find("state \"orphan\" is unreachable [W0030]") != std::string::npos);
  CHECK(unreachable == 1);  // not heal_start's drain and the states after it
  CHECK(all.find("W0031") == std::string::npos);

  // A file whose only succeed state is broken: the next file's start is not "unreachable"
  // (it is the built-in steps' here, which the author cannot edit).
  fs::copy(source_root() + "/csar-samples/k8s-cluster", dir, fs::copy_options::recursive);
  edit("Workflows/instantiate_start.yaml", "  done:\n    succeed: true",
       "  done:\n    succeed_: true");
  base::Diagnostics d2;
  auto pkg2 = tosca::load_package(dir.string(), opts, d2);
  REQUIRE(pkg2);
  auto m2 = workflows::compile(*pkg2, {"instantiate", ""}, d2);
  fs::remove_all(dir);
  CHECK(m2 == nullptr);
  std::string all2;
  for (const auto& d : d2.sorted())
    all2 += base::to_string(d) + "\n";
  INFO(all2);
  CHECK(all2.find("[W0032]") != std::string::npos);
  CHECK(all2.find("W0030") == std::string::npos);
}

TEST_CASE("list functions: range, slice, concat, distinct, sort, first, last") {
  json::value req = json::parse(R"({"nodes": ["a", "b", "c", "b"], "n": [3, 1, 2.5]})");
  CHECK(eval("range(3)", req) == json::parse("[0, 1, 2]"));
  CHECK(eval("range(2, 5)", req) == json::parse("[2, 3, 4]"));
  CHECK(eval("range(0)", req) == json::parse("[]"));
  CHECK(eval("range(5, 2)", req) == json::parse("[]"));
  CHECK(eval("slice(request.nodes, 1)", req) == json::parse(R"(["b", "c", "b"])"));
  CHECK(eval("slice(request.nodes, 0, -1)", req) == json::parse(R"(["a", "b", "c"])"));
  CHECK(eval("slice(request.nodes, -2)", req) == json::parse(R"(["c", "b"])"));
  CHECK(eval("slice(request.nodes, 10)", req) == json::parse("[]"));  // clamped, no error
  CHECK(eval("concat(request.nodes, ['x'], [])", req) ==
        json::parse(R"(["a", "b", "c", "b", "x"])"));
  CHECK(eval("distinct(request.nodes)", req) == json::parse(R"(["a", "b", "c"])"));
  CHECK(eval("distinct([1, 1.0, 2])", req) == json::parse("[1, 2]"));
  CHECK(eval("sort(request.n)", req) == json::parse("[1, 2.5, 3]"));
  CHECK(eval("sort(distinct(request.nodes))", req) == json::parse(R"(["a", "b", "c"])"));
  CHECK(eval("first(request.nodes)", req) == "a");
  CHECK(eval("last(request.nodes)", req) == "b");
  CHECK(try_eval("first([])", req).status().code() == base::StatusCode::kNotFound);  // not set
  CHECK(eval("default(first([]), 'none')", req) == "none");
  // Equal numbers are equal however written; big integers compare exactly.
  CHECK(eval("distinct([9007199254740993, 9007199254740992, 1, 1.0, '1'])", req) ==
        json::parse(R"([9007199254740993, 9007199254740992, 1, "1"])"));
  CHECK(eval("sort([9007199254740993, 9007199254740992])", req) ==
        json::parse("[9007199254740992, 9007199254740993]"));
  CHECK_FALSE(try_eval("sort([1, 0.0 / 0.0])", req).ok());  // NaN: refused, not undefined
  json::value big = json::parse(R"({"n": 18446744073709551615})");
  CHECK_FALSE(try_eval("range(request.n)", big).ok());  // not a negative number
  CHECK(type_errors("concat(1)") ==
        std::vector<std::string>{"W0013 concat() takes 2 to 8 arguments, not 1"});
  // "every VM but the leader", and the leader
  CHECK(eval("slice(request.nodes, 1)[0]", req) == "b");
  // Bad input: a clear error, never a huge list.
  CHECK(try_eval("range(100000000)", req).status().message().find("more than 10000") !=
        std::string::npos);
  CHECK(try_eval("range(-9223372036854775807, 9223372036854775807)", req)
            .status()
            .message()
            .find("more than 10000") != std::string::npos);
  CHECK_FALSE(try_eval("sort(['a', 1])", req).ok());
  CHECK_FALSE(try_eval("concat(request.nodes, 'x')", req).ok());
  CHECK(type_errors("range('x')").size() == 1);
  CHECK(type_errors("slice(1, 2)") ==
        std::vector<std::string>{"W0013 slice() needs a list, not integer"});
  CHECK(type_errors("first(slice(request.additionalParams.nodes, 1))").empty());
}

TEST_CASE("map literals: keys and values, typed, checked and bounded like lists") {
  json::value req =
      json::parse(R"({"sets": [{"conn": "aws", "count": 2}, {"conn": "gcp", "count": 1}]})");
  CHECK(eval("{}", req) == json::object());
  CHECK(eval("{name: 'a', 'spec-id': 1 + 1, nested: {x: [1, 2]}}", req) ==
        json::parse(R"({"name": "a", "spec-id": 2, "nested": {"x": [1, 2]}})"));
  // The seed-004 idiom: a VM entry per node of every set.
  CHECK(eval("map(range(request.sets[0].count), i, {name: 'c-' + string(i), "
             "connectionName: request.sets[0].conn})",
             req) == json::parse(R"([{"name": "c-0", "connectionName": "aws"},
                                      {"name": "c-1", "connectionName": "aws"}])"));
  CHECK(eval("{a: 1, b: 'x'}.b", req) == "x");
  // flatten: a node per count of every set, numbered within its set.
  CHECK(eval("flatten(map(request.sets, s, map(range(s.count), i, s.conn + '-' + string(i))))",
             req) == json::parse(R"(["aws-0", "aws-1", "gcp-0"])"));
  CHECK(eval("flatten([[], [1], [[2]]])", req) == json::parse("[1, [2]]"));  // one level
  CHECK_FALSE(try_eval("flatten([1, [2]])", req).ok());
  CHECK(type_errors("flatten([1, 2])") ==
        std::vector<std::string>{"W0013 flatten() needs a list of lists, not list(integer)"});
  CHECK(type_errors("flatten('x')").size() == 1);
  CHECK(type_errors("len(flatten([[1], [2]])[0] + 1)").size() == 1);  // an integer has no len
  // Its keys are known to the type checker.
  CHECK(type_errors("{connection: 'a'}.conection").size() == 1);
  CHECK(type_errors("{connection: 'a'}.conection")[0].find("did you mean \"connection\"") !=
        std::string::npos);
  CHECK(type_errors("len({n: 1}.n)") ==
        std::vector<std::string>{"W0013 len() needs a list, map or string, not integer"});
  CHECK(type_errors("merge({a: 1}, {b: 2})").empty());
  // Syntax errors, located.
  for (const char* bad :
       {"{a 1}", "{a: 1, a: 2}", "{1: 2}", "{a: }", "{a: 1,", "{'a': 1 'b': 2}"}) {
    INFO(bad);
    std::string err;
    uint32_t at = 0;
    CHECK(workflows::Expr::parse(bad, &err, &at) == nullptr);
    CHECK(!err.empty());
  }
  std::string err;
  uint32_t at = 0;
  workflows::Expr::parse("{a: 1, a: 2}", &err, &at);
  CHECK(err.find("the key \"a\" twice") != std::string::npos);
  // Nesting counts towards the depth limit like brackets.
  std::string deep;
  for (int i = 0; i < 120; ++i)
    deep += "{a: ";
  deep += "1";
  for (int i = 0; i < 120; ++i)
    deep += "}";
  std::string code;
  CHECK(workflows::Expr::parse(deep, &err, &at, &code) == nullptr);
  CHECK(code == "W0023");
  // Bounded: at most 1000 keys; a literal's values count against the evaluation's budget.
  std::string many = "{";
  for (int i = 0; i < 1001; ++i)
    many += (i ? ", k" : "k") + std::to_string(i) + ": 0";
  CHECK(workflows::Expr::parse(many + "}", &err, &at) == nullptr);
  CHECK(err.find("at most 1000 keys") != std::string::npos);
  json::value big = json::parse(R"({"s": ")" + std::string(5 << 20, 'x') + R"("})");
  CHECK(try_eval("{a: request.s, b: request.s}", big).ok());
  CHECK(try_eval("{a: request.s, b: request.s, c: request.s, d: request.s}", big)
            .status()
            .message()
            .find("16 MiB") != std::string::npos);
}

TEST_CASE("if(): one branch, chosen by a boolean, the other not evaluated") {
  json::value req = json::parse(R"({"probed": true, "n": 3, "vms": ["a", "b"]})");
  CHECK(eval("if(request.probed, 'GET', 'DELETE')", req) == "GET");
  CHECK(eval("if(request.n > 5, 'big', 'small')", req) == "small");
  CHECK(eval("if(len(request.vms) == 2, request.vms[1], 'none')", req) == "b");
  // The branch not taken may read what is not there.
  CHECK(eval("if(true, 1, request.missing.deeper)", req) == 1);
  CHECK(eval("if(false, request.missing.deeper, [2])", req) == json::parse("[2]"));
  CHECK(try_eval("if(true, request.missing.deeper, 1)", req).status().code() ==
        base::StatusCode::kNotFound);
  CHECK_FALSE(try_eval("if(request.n, 1, 2)", req).ok());  // an integer is not a condition
  CHECK(type_errors("if('yes', 1, 2)") ==
        std::vector<std::string>{"W0013 if() needs a boolean condition, not string"});
  CHECK(type_errors("if(true, 1)") ==
        std::vector<std::string>{"W0013 if() takes 3 arguments, not 2"});
  CHECK(type_errors("if(request.additionalParams.x == 1, 'a', 'b')").empty());
  CHECK(type_errors("len(if(true, 'ab', 'c'))").empty());
}

TEST_CASE("map and filter: an expression per element, with a name for it") {
  json::value req = json::parse(
      R"({"vms": [{"name": "m0", "role": "leader", "ip": "10.0.0.1"},
                  {"name": "w1", "role": "worker", "ip": "10.0.0.2"},
                  {"name": "w2", "role": "worker", "ip": "10.0.0.3"}],
          "n": [1, 2, 3]})");
  CHECK(eval("map(request.vms, vm, vm.name)", req) == json::parse(R"(["m0", "w1", "w2"])"));
  CHECK(eval("filter(request.vms, vm, vm.role != 'leader')[1].ip", req) == "10.0.0.3");
  CHECK(eval("map(filter(request.vms, vm, vm.role == 'worker'), vm, vm.name + '=' + vm.ip)", req) ==
        json::parse(R"(["w1=10.0.0.2", "w2=10.0.0.3"])"));
  CHECK(eval("map(request.n, x, x * 10)", req) == json::parse("[10, 20, 30]"));
  CHECK(eval("filter(map(range(6), i, i * i), x, x % 2 == 0)", req) == json::parse("[0, 4, 16]"));
  CHECK(eval("map([], x, x)", req) == json::parse("[]"));
  // Nested: the inner name sees the outer one.
  CHECK(eval("map(request.n, a, len(filter(request.n, b, b < a)))", req) ==
        json::parse("[0, 1, 2]"));
  // Type-checked: the element's type flows into the expression, the result's out of it.
  CHECK(type_errors("map('abc', x, x)") ==
        std::vector<std::string>{"W0013 map() needs a list, not string"});
  CHECK(type_errors("filter([1, 2], x, x + 1)") ==
        std::vector<std::string>{"W0013 filter()'s condition must be a boolean, not integer"});
  CHECK(type_errors("map([1], x, y)").size() == 1);
  CHECK(type_errors("map([1], x, y)")[0].find("unknown name \"y\"; did you mean \"x\"?") !=
        std::string::npos);
  CHECK(type_errors("len(map([1], x, x)) + 1").empty());
  CHECK(type_errors("map([1], x + 1, x)") ==
        std::vector<std::string>{"W0013 map()'s second argument names the element: a name such "
                                 "as x, not an expression"});
  CHECK(type_errors("map([1], request, request)")[0].find("already means something here") !=
        std::string::npos);
  CHECK(type_errors("map([1], x, map([2], x, x))")[0].find("\"x\" already means") !=
        std::string::npos);
  CHECK(type_errors("map([1], x)") ==
        std::vector<std::string>{"W0013 map() takes 3 arguments, not 2"});
  // The name exists only inside the call.
  CHECK(type_errors("concat(map([1], x, x), [x])").size() == 1);
  // At run time too (a machine read back is not type-checked).
  CHECK(try_eval("filter([1], x, 1)", req).status().message().find("not a boolean") !=
        std::string::npos);
  CHECK(try_eval("map(1, x, x)", req).status().message().find("map() of an integer") !=
        std::string::npos);
  CHECK_FALSE(try_eval("map([1], op, 1)", req).ok());
  // Cost: every element visited counts against the evaluation's budget, so nested calls
  // over long lists stop instead of running on (10^8 evaluations here).
  auto t0 = std::chrono::steady_clock::now();
  auto r = try_eval("filter(range(10000), a, len(filter(range(10000), b, false)) == 0)", req);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("exceed 16 MiB") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
  // What a read in the body copies counts too: a 620 KB string or a big request read per
  // item stops at the budget, not at 6 GB or minutes of copying.
  json::value big =
      json::parse(R"({"s": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"})");
  big.as_object()["blob"] = std::string(1u << 20, 'b');
  for (const char* text :
       {"map([join(range(10000), request.s)], s, map(range(10000), i, s))",
        "map(range(10000), i, request)",
        "map([join(range(10000), request.s)], s, map(range(10000), i, map(range(20), j,"
        " len(s) + len(s))))",
        "filter(range(10000), i, len(request.blob) > 0)"}) {
    t0 = std::chrono::steady_clock::now();
    auto over = try_eval(text, big);
    INFO(text);
    REQUIRE_FALSE(over.ok());
    CHECK(over.status().message().find("exceed 16 MiB") != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  }
  // Reads of small values through a big request stay cheap: a path copies what it ends at.
  CHECK(eval("len(filter(range(5000), i, request.s != ''))", big) == 5000);
  // The evaluator refuses a name an enclosing call gave, as the compiler does.
  CHECK_FALSE(try_eval("map([1], x, map([2], x, x))", req).ok());
}

TEST_CASE("nested map and filter type-check in linear time (a hostile package's cost)") {
  // Each level's list is the level before it: checking it twice per level was 2^depth.
  std::string e = "request.additionalParams.l";
  for (int k = 0; k < 45; ++k)
    e = "map(" + e + ", a, [a])[0]";
  e = "join(map(" + e + ", a, a), ' ')";
  auto t0 = std::chrono::steady_clock::now();
  CHECK(type_errors(e).empty());
  // In shell text: the request's list flows through every level (W0043, once).
  auto diags = compile_diags(std::string(kLocalExecHead) + "    with:\n      shell: echo ${" + e +
                             "}\n    timeout: 10s\n"
                             "    next: done\n");
  REQUIRE(diags.size() == 1);
  CHECK(diags[0].find("[W0043]") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
}

TEST_CASE("$${ is a literal ${ in a template (a shell's ${VAR:-x})") {
  CHECK(eval_template(R"({"shell": "echo $${HOME:-/root} ${request.n} $${X}", "plain": "$${"})",
                      json::parse(R"({"n": 5})")) ==
        json::parse(R"({"shell": "echo ${HOME:-/root} 5 ${X}", "plain": "${"})"));
}

TEST_CASE("index: the fan-out item's position, only in a for_each state") {
  json::value item = "b";
  workflows::Scope s;
  s.item = &item;
  s.item_name = "node";
  s.item_index = 1;
  std::string err;
  uint32_t off = 0;
  auto e = Expr::parse("[index, node, index > 0]", &err, &off);
  REQUIRE(e);
  auto v = e->evaluate(s);
  REQUIRE(v.ok());
  CHECK(v.value() == json::parse(R"([1, "b", true])"));
  // A one-state workflow: `fan` (for_each and as lines, or ""), then a command.
  auto wf = [](const std::string& fan, const std::string& command) {
    return "start: s\nstates:\n  s:\n    action: local.exec\n" + fan + "    with:\n" +
           "      command: " + command + "\n    timeout: 10s\n    next: done\n" +
           "  done:\n    succeed: true\n";
  };
  bool compiled = false;
  CHECK(compile_diags(wf("    for_each: ${slice(request.additionalParams.nodes, 1)}\n"
                         "    as: node\n",
                         R"([echo, "${string(index)}", "${string(index + 1)}"])"),
                      &compiled)
            .empty());
  CHECK(compiled);
  // Outside a fan-out it is unknown; as a fan-out name it would hide the position.
  auto outside = compile_diags(wf("", R"([echo, "${string(index)}"])"));
  REQUIRE(outside.size() == 1);
  CHECK(outside[0].find("\"index\" is only defined in a for_each state") != std::string::npos);
  auto hides = compile_diags(wf("    for_each: ${request.additionalParams.nodes}\n    as: index\n",
                                R"([echo, "${string(index)}"])"));
  REQUIRE_FALSE(hides.empty());
  CHECK(hides[0].find("\"as: index\" hides a name") != std::string::npos);
}

TEST_CASE("an evaluation builds at most 16 MiB, whatever the package or the request") {
  json::value req =
      json::parse(R"({"s": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"})");
  // Nested joins would make 590 MB, then terabytes: refused once past the budget.
  auto r = try_eval("join(range(10000), join(range(10000), join(range(10000), 'x')))", req);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("exceed 16 MiB") != std::string::npos);
  CHECK_FALSE(try_eval("join(range(10000), join(range(1000), request.s))", req).ok());
  // Doubling a list of big strings by concat: refused too.
  std::string grow = "[join(range(10000), request.s)]";
  for (int i = 0; i < 6; ++i)
    grow = "concat(" + grow + ", " + grow + ")";
  CHECK_FALSE(try_eval(grow, req).ok());
  // A template's expressions share one budget.
  std::string many = "{";
  for (int i = 0; i < 40; ++i)
    many += std::string(i ? ", " : "") + "\"k" + std::to_string(i) +
            "\": \"${join(range(10000), join(range(10), request.s))}\"";
  many += "}";
  auto t = workflows::Template::parse(json::parse(many));
  REQUIRE(t.ok());
  workflows::Scope sc;
  sc.request = &req;
  CHECK_FALSE(t.value().evaluate(sc).ok());
  // Ordinary values are far below it.
  CHECK(eval("len(join(range(1000), request.s))", req) == 999 * 62 + 2890);  // + the digits
}

TEST_CASE("request text through the list functions still needs quoting in shell text (W0043)") {
  const std::string head = kLocalExecHead;
  auto warned = [&](const std::string& rest) {
    for (const auto& d : compile_diags(head + rest))
      if (d.find("[W0043]") != std::string::npos)
        return true;
    return false;
  };
  auto shell = [](const std::string& expr) {
    return "    with:\n      shell: echo ${" + expr + "}\n    timeout: 10s\n    next: done\n";
  };
  CHECK(warned(shell("first(request.additionalParams.names)")));
  CHECK(warned(shell("concat(request.additionalParams.ports, [22])[0]")));
  CHECK(warned(shell("first(concat(request.additionalParams.x, [0]))")));
  CHECK(warned(shell("default(request.additionalParams.x, 0)")));
  CHECK(warned(shell("request.additionalParams.x + 1")));
  CHECK(warned(shell("json({name:request.additionalParams.x})")));
  CHECK_FALSE(warned(shell("json({name:shellquote(request.additionalParams.x),n:1})")));
  CHECK_FALSE(warned(shell("len(request.additionalParams.names)")));
  CHECK_FALSE(warned(shell("range(3)[0]")));
  CHECK_FALSE(warned(shell("shellquote(first(request.additionalParams.names))")));
  // map and filter: the element carries what its list carries.
  CHECK(warned(shell("join(map(request.additionalParams.vms, v, v.name), ' ')")));
  CHECK(warned(shell("first(filter(request.additionalParams.names, n, n != 'x'))")));
  CHECK_FALSE(warned(shell("join(map(request.additionalParams.vms, v, shellquote(v.name)), ' ')")));
  CHECK_FALSE(warned(shell("join(map(range(3), i, i * 2), ' ')")));
  // A fan-out item over a list the checker calls list(integer) but a request fills.
  CHECK(warned(R"(    for_each: ${concat(default(request.additionalParams.ports, []), [22])}
    as: port
    with:
      shell: iptables -A INPUT --dport ${port} -j ACCEPT
    timeout: 10s
    next: done
)"));
}

namespace {

// Compiles `files["main.yaml"]` as instantiate_end, its calls read from `files`.
std::shared_ptr<const workflows::Machine> compile_files(
    const std::map<std::string, std::string>& files, base::Diagnostics& diags) {
  return workflows::compile_file("main.yaml", files.at("main.yaml"), "instantiate",
                                 "instantiate_end", diags,
                                 [&files](const std::string& path) -> base::Result<std::string> {
                                   auto it = files.find(path);
                                   if (it == files.end())
                                     return base::Status::NotFound("no " + path);
                                   return it->second;
                                 });
}

std::string all_text(const base::Diagnostics& diags) {
  std::string s;
  for (const auto& d : diags.sorted())
    s += base::to_string(d) + "\n";
  return s;
}

}  // namespace

TEST_CASE("calls: inlined as states of the machine, and stored and read back whole") {
  std::map<std::string, std::string> files = {{"main.yaml", R"(start: each
states:
  each:
    call: sub/one.yaml
    for_each: ${request.additionalParams.names}
    as: n
    with: {name: "${n}"}
    next: done
  done:
    succeed: true
)"},
                                              {"sub/one.yaml", R"(inputs:
  name: {type: string}
outputs:
  said: ${states.say.stdout}
start: say
states:
  say:
    action: local.exec
    with: {command: [echo, "${inputs.name}"]}
    timeout: 5s
    next: ok
  ok:
    succeed: true
)"}};
  base::Diagnostics diags;
  auto m = compile_files(files, diags);
  INFO(all_text(diags));
  REQUIRE(m != nullptr);
  int call = m->find("instantiate_end.each");
  int say = m->find("instantiate_end.each.say");
  int ok = m->find("instantiate_end.each.ok");
  REQUIRE(call >= 0);
  REQUIRE(say >= 0);
  REQUIRE(ok >= 0);
  const auto& c = m->states[static_cast<size_t>(call)];
  CHECK(c.kind == workflows::StateKind::kCall);
  CHECK(c.body == say);
  CHECK(c.call == "sub/one.yaml");
  CHECK(m->states[static_cast<size_t>(say)].owner == call);
  CHECK(m->states[static_cast<size_t>(ok)].next == call);  // a succeed returns to the call
  CHECK(m->states[static_cast<size_t>(say)].where.file == "sub/one.yaml");
  auto back = workflows::Machine::from_json(m->to_json());
  REQUIRE(back.ok());
  CHECK(json::serialize(back.value()->to_json()) == json::serialize(m->to_json()));
  CHECK(back.value()->digest == m->digest);
  const auto& c2 = back.value()->states[static_cast<size_t>(call)];
  CHECK(c2.body == say);
  CHECK(json::serialize(c2.returns.source()) == json::serialize(c.returns.source()));
}

TEST_CASE("calls: bounded depth and size, and no call without the package's files") {
  // A chain main -> f1 -> f2 -> ... -> f10: refused past 8 levels.
  std::map<std::string, std::string> files;
  auto caller = [](const std::string& next) {
    return "start: c\nstates:\n  c:\n    call: " + next +
           "\n    next: d\n  d:\n    succeed: true\n";
  };
  files["main.yaml"] = caller("f1.yaml");
  for (int i = 1; i < 10; ++i)
    files["f" + std::to_string(i) + ".yaml"] = caller("f" + std::to_string(i + 1) + ".yaml");
  files["f10.yaml"] = "start: d\nstates:\n  d:\n    succeed: true\n";
  base::Diagnostics diags;
  CHECK(compile_files(files, diags) == nullptr);
  CHECK(all_text(diags).find("calls nest at most 8 deep") != std::string::npos);

  // 200 calls of a file of 100 states: refused at 10,000 states, quickly.
  std::string big = "start: s0\nstates:\n";
  for (int i = 0; i < 100; ++i)
    big += "  s" + std::to_string(i) + ":\n    wait: 1s\n    next: " +
           (i == 99 ? std::string("end") : "s" + std::to_string(i + 1)) + "\n";
  big += "  end:\n    succeed: true\n";
  std::string many = "start: c0\nstates:\n";
  for (int i = 0; i < 200; ++i)
    many += "  c" + std::to_string(i) + ":\n    call: big.yaml\n    next: " +
            (i == 199 ? std::string("end") : "c" + std::to_string(i + 1)) + "\n";
  many += "  end:\n    succeed: true\n";
  base::Diagnostics d2;
  auto t0 = std::chrono::steady_clock::now();
  CHECK(compile_files({{"main.yaml", many}, {"big.yaml", big}}, d2) == nullptr);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK(all_text(d2).find("states with the calls inlined; at most 10000") != std::string::npos);

  // Without a reader (a file compiled alone), a call is refused, and says how to check it.
  base::Diagnostics d3;
  CHECK(workflows::compile_file("main.yaml", caller("f1.yaml"), "instantiate", "instantiate_end",
                                d3) == nullptr);
  CHECK(all_text(d3).find("a call is compiled with its package") != std::string::npos);
}

TEST_CASE("calls: hostile declarations and defaults are refused or kept literal, not run") {
  // A type nested 200 deep: an error, not a stack overflow.
  std::string deep;
  for (int k = 0; k < 200; ++k)
    deep += "list(";
  deep += "any";
  for (int k = 0; k < 200; ++k)
    deep += ")";
  std::string caller =
      "start: c\nstates:\n  c:\n    call: sub.yaml\n    next: d\n  d:\n    succeed: true\n";
  base::Diagnostics d1;
  CHECK(compile_files({{"main.yaml", caller},
                       {"sub.yaml", "inputs:\n  x: {type: \"" + deep +
                                        "\", default: []}\nstart: ok\nstates:\n  ok:\n    succeed: "
                                        "true\n"}},
                      d1) == nullptr);
  CHECK(all_text(d1).find("unknown type") != std::string::npos);

  // A default is literal text: `${HOME}` is handed over as written.
  base::Diagnostics d2;
  auto m = compile_files(
      {{"main.yaml", caller},
       {"sub.yaml",
        "inputs:\n  cmd: {type: string, default: \"echo ${HOME}\"}\nstart: ok\nstates:\n  ok:\n"
        "    succeed: true\n"}},
      d2);
  INFO(all_text(d2));
  REQUIRE(m != nullptr);
  auto v = m->states[static_cast<size_t>(m->find("instantiate_end.c"))].with.evaluate(
      workflows::Scope{});
  REQUIRE(v.ok());
  CHECK(v.value().at("cmd") == "echo ${HOME}");

  // A call's on_failure may not be the call itself (it would skip the failed item).
  base::Diagnostics d3;
  CHECK(compile_files({{"main.yaml",
                        "start: c\nstates:\n  c:\n    call: sub.yaml\n    next: d\n    "
                        "on_failure: c\n  d:\n    succeed: true\n"},
                       {"sub.yaml", "start: ok\nstates:\n  ok:\n    succeed: true\n"}},
                      d3) == nullptr);
  CHECK(all_text(d3).find("on_failure cannot be the call itself") != std::string::npos);

  // A compensation in a called file reads self and inputs, not states (the last item's).
  base::Diagnostics d4;
  CHECK(compile_files({{"main.yaml", caller}, {"sub.yaml", R"(start: a
states:
  a:
    action: local.exec
    with: {command: ["true"]}
    timeout: 5s
    next: b
  b:
    action: local.exec
    with: {command: ["true"]}
    timeout: 5s
    compensate: {action: local.exec, with: {command: [echo, "${states.a.stdout}"]}, timeout: 5s}
    next: ok
  ok:
    succeed: true
)"}},
                      d4) == nullptr);
  CHECK(all_text(d4).find("a compensation in a called workflow reads self") != std::string::npos);
}

TEST_CASE("calls: a large file called many times is refused by its size, quickly") {
  std::string big =
      "start: ok\nstates:\n  ok:\n    succeed: true\n#" + std::string(1 << 20, 'x') + "\n";
  std::string many = "start: c0\nstates:\n";
  for (int i = 0; i < 300; ++i)
    many += "  c" + std::to_string(i) + ":\n    call: big.yaml\n    next: " +
            (i == 299 ? std::string("end") : "c" + std::to_string(i + 1)) + "\n";
  many += "  end:\n    succeed: true\n";
  base::Diagnostics d;
  auto t0 = std::chrono::steady_clock::now();
  CHECK(compile_files({{"main.yaml", many}, {"big.yaml", big}}, d) == nullptr);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK(all_text(d).find("inline more than 64 MiB") != std::string::npos);
}

TEST_CASE("a stored machine with calls says so; an unknown state kind is refused") {
  std::map<std::string, std::string> files = {
      {"main.yaml",
       "start: c\nstates:\n  c:\n    call: s.yaml\n    next: d\n  d:\n    succeed: true\n"},
      {"s.yaml", "start: ok\nstates:\n  ok:\n    succeed: true\n"}};
  base::Diagnostics d;
  auto m = compile_files(files, d);
  REQUIRE(m != nullptr);
  json::value j = m->to_json();
  CHECK(j.at("format") == "vnflow-machine/2");
  j.at("states").as_array()[0].as_object()["kind"] = "loop";
  auto bad = workflows::Machine::from_json(j);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("unknown state kind \"loop\"") != std::string::npos);
}
