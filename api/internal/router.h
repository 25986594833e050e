// The routes: one request in, one response out, over the Store and the engine's commands.
// No sockets (the server does HTTP), so tests drive it directly.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/engine.h"

#include "api/internal/sol013.h"

namespace api::internal {

struct HttpRequest {
  std::string method;  // GET, POST, ...
  std::string target;  // path?query as sent
  std::string content_type;
  std::string body;
  std::string base_url;  // "http://host:port": where links point
  std::string version;   // the Version header ("" when absent)
  std::string accept;    // the Accept header ("" when absent)
};

struct HttpResponse {
  int status = 200;
  std::string content_type;  // "" for no body
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // Location, Link, Allow, Version
};

HttpResponse problem_response(int status, std::string title, std::string detail);

// What the routes of router.cpp (/vnflcm) and packages.cpp (/vnfpkgm) share.

struct Target {
  std::string path;
  std::vector<std::string> segs;  // after the API prefix
  std::string query;
};

struct Ctx {
  engine::Store& store;
  size_t page_size;
  const std::function<void()>& on_queued;
  const engine::OpCreator& create_op;  // how a requested operation is committed
  const HttpRequest& req;
  const Target& t;
  std::string_view prefix;                    // /vnflcm/v1 or /vnfpkgm/v1
  const engine::PackageCheckOptions& checks;  // for uploaded packages
  const engine::NotifyOptions& notify;        // for new subscriptions (the callback test)
  engine::PackageIdentities& packages;        // the VNFD identity an instance's view shows

  std::string url(std::string_view rest) const {
    return req.base_url + std::string(prefix) + std::string(rest);
  }
};

HttpResponse json_response(int status, const json::value& v);
// The status's HTTP code and message, with the errors of `diags` (the first 20) in detail.
HttpResponse from_status(const base::Status& s, const base::Diagnostics* diags = nullptr);
HttpResponse method_not_allowed(const std::string& method, std::string allow);
HttpResponse not_found(const Target& t);
// A JSON object body (application/json or merge-patch+json), or the 4xx saying why not.
std::optional<HttpResponse> parse_body(const HttpRequest& req, json::object& out);
json::object href(std::string u);
// The documents (in the listing's order) as one page, with its Link when more match.
HttpResponse list_response(const Ctx& c, std::vector<json::object> docs, const DefaultExclusion& d);

// /vnfpkgm/v1 (packages.cpp).
HttpResponse packages(const Ctx& c);
// <prefix>/subscriptions[/{id}] of any of the APIs (router.cpp).
HttpResponse subscriptions(const Ctx& c);

// A request target as a metrics label: its path with every id replaced by {id} (an
// artifact's path by {path}), e.g. /vnflcm/v1/vnf_instances/{id}/instantiate. A path of
// no known shape is "other", so a client cannot make up label values.
std::string route_pattern(std::string_view target);
// True for the routes whose GET reads one record by its key and nothing else (an instance,
// with its package's identity; an operation; a subscription): what the I/O threads may
// answer in a NoWaitReads scope. A package's GET is not one (it asks whether any instance
// uses the package).
bool is_point_read(std::string_view route);

class Router {
 public:
  Router(engine::Store& store, size_t page_size, std::function<void()> on_queued = {},
         std::shared_ptr<const engine::PackageCheckOptions> checks = {},
         std::shared_ptr<const engine::NotifyOptions> notify = {}, engine::OpCreator create_op = {})
      : store_(store),
        page_size_(page_size),
        on_queued_(std::move(on_queued)),
        create_op_(std::move(create_op)),
        checks_(checks ? std::move(checks) : std::make_shared<const engine::PackageCheckOptions>()),
        notify_(notify ? std::move(notify) : std::make_shared<const engine::NotifyOptions>()) {}
  HttpResponse handle(const HttpRequest& req);

 private:
  engine::Store& store_;
  size_t page_size_;
  std::function<void()> on_queued_;
  engine::OpCreator create_op_;
  std::shared_ptr<const engine::PackageCheckOptions> checks_;
  std::shared_ptr<const engine::NotifyOptions> notify_;
  engine::PackageIdentities packages_;
};

}  // namespace api::internal
