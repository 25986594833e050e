// A test double for actions::http::Transport: it answers from a script. Each rule matches a
// method and a URL prefix and answers with a canned response or a function of the request
// (a fake server's state); the rule added last wins, so a test overrides a fake's rule. Every
// request is recorded. The fault hooks see each call by its number and may replace or spoil its
// answer, for fault sweeps (Beast's fail_count).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actions/internal/http.h"

namespace test {

namespace http = actions::http;

class ScriptedTransport final : public http::Transport {
 public:
  using Answer = std::function<base::Result<http::Response>(const http::Request&)>;

  // Answers `method` requests whose URL starts with `url_prefix`.
  void on(std::string method, std::string url_prefix, Answer answer) {
    rules_.push_back({std::move(method), std::move(url_prefix), std::move(answer)});
  }
  void on(std::string method, std::string url_prefix, http::Response canned) {
    on(std::move(method), std::move(url_prefix),
       [canned](const http::Request&) -> base::Result<http::Response> { return canned; });
  }

  // Fault hooks (either may be empty), called with the call's number (1-based). `before`
  // runs first: an answer it returns is delivered and the script does not run (the request
  // never reached the server). `after` sees the script's answer (the server did the work)
  // and may deliver another instead (the answer was lost or garbled on the way back).
  std::function<std::optional<base::Result<http::Response>>(int call, const http::Request& req)>
      before;
  std::function<std::optional<base::Result<http::Response>>(
      int call, const http::Request& req, const base::Result<http::Response>& answered)>
      after;

  base::Result<http::Response> send(const http::Request& req, const http::Options&) override {
    requests.push_back(req);
    int n = static_cast<int>(requests.size());
    if (before) {
      if (auto f = before(n, req))
        return *f;
    }
    base::Result<http::Response> out =
        base::Status::Unavailable(req.method + " " + req.url + ": connect: no route in the script");
    for (auto r = rules_.rbegin(); r != rules_.rend(); ++r) {
      if (r->method == req.method && req.url.compare(0, r->prefix.size(), r->prefix) == 0) {
        out = r->answer(req);
        break;
      }
    }
    if (after) {
      if (auto f = after(n, req, out))
        return *f;
    }
    return out;
  }

  std::vector<http::Request> requests;

 private:
  struct Rule {
    std::string method, prefix;
    Answer answer;
  };
  std::vector<Rule> rules_;
};

inline http::Response response(int status, std::string body,
                               std::vector<std::pair<std::string, std::string>> headers = {}) {
  http::Response r;
  r.status = status;
  r.body = std::move(body);
  r.headers = std::move(headers);
  return r;
}

}  // namespace test
