// A notification callback on 127.0.0.1 for the notifier's unit test and the engine bench: a
// bare HTTP/1.1 server (one request a connection, in arrival order) that answers GET 204 and
// POST `status` (204 unless set), and keeps each POST it answered 2xx with its receipt time.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/engine.h"

namespace vnflow_test {

class CallbackServer {
 public:
  struct Post {
    int64_t received_ms = 0;  // engine::now_ms() once it was read
    std::string body;
  };

  CallbackServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(fd_, 128) != 0)
      throw std::runtime_error("callback server: cannot listen on 127.0.0.1");
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    t_ = std::thread([this] { loop(); });
  }
  ~CallbackServer() {
    stop_ = true;
    t_.join();
    ::close(fd_);
  }
  CallbackServer(const CallbackServer&) = delete;
  CallbackServer& operator=(const CallbackServer&) = delete;

  std::string uri() const { return "http://127.0.0.1:" + std::to_string(port_) + "/cb"; }
  std::atomic<int> status{204};  // the answer to a POST
  std::atomic<int> posts{0};     // POSTs read, whatever the answer
  std::vector<Post> answered() {
    std::lock_guard<std::mutex> l(mu_);
    return answered_;
  }

 private:
  void loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0)
        continue;
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) {
        serve(c);
        ::close(c);
      }
    }
  }
  // One request: its header, then Content-Length bytes of body (each read bounded in time).
  void serve(int c) {
    std::string in;
    char buf[8192];
    size_t need = std::string::npos, head_end = std::string::npos;
    for (int reads = 0; reads < 1000 && (need == std::string::npos || in.size() < need); ++reads) {
      pollfd p{c, POLLIN, 0};
      if (::poll(&p, 1, 2000) <= 0)
        return;
      ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0)
        return;
      in.append(buf, static_cast<size_t>(n));
      if (head_end == std::string::npos && (head_end = in.find("\r\n\r\n")) != std::string::npos) {
        size_t cl = in.find("Content-Length: ");
        need = head_end + 4 +
               (cl != std::string::npos && cl < head_end
                    ? std::strtoul(in.c_str() + cl + 16, nullptr, 10)
                    : 0);
      }
    }
    int64_t now = engine::now_ms();
    bool post = in.rfind("POST ", 0) == 0;
    int st = post ? status.load() : 204;
    std::string reply =
        "HTTP/1.1 " + std::to_string(st) + " X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    if (post) {
      posts++;
      if (st >= 200 && st <= 299) {
        std::lock_guard<std::mutex> l(mu_);
        answered_.push_back({now, in.substr(head_end + 4)});
      }
    }
    (void)::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
  }

  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread t_;
  std::mutex mu_;
  std::vector<Post> answered_;
};

}  // namespace vnflow_test
