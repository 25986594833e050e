// The routes: one request in, one response out, over the Store and the engine's commands.
// No sockets (the server does HTTP), so tests drive it directly.
#pragma once

#include <string>
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
};

struct HttpResponse {
  int status = 200;
  std::string content_type;  // "" for no body
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // Location, Link, Allow, Version
};

HttpResponse problem_response(int status, std::string title, std::string detail);

class Router {
 public:
  Router(engine::Store& store, size_t page_size, std::function<void()> on_queued = {})
      : store_(store), page_size_(page_size), on_queued_(std::move(on_queued)) {}
  HttpResponse handle(const HttpRequest& req);

 private:
  engine::Store& store_;
  size_t page_size_;
  std::function<void()> on_queued_;
};

}  // namespace api::internal
