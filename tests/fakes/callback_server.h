// A notification callback on 127.0.0.1 for the notifier's unit test and the engine bench: a
// bare HTTP/1.1 server (persistent connections unless `keep_alive` is false or the client
// asks to close; requests served in arrival order, one thread polling every connection) that
// answers GET 204 and POST `status` (204 unless set), and keeps each POST it answered 2xx with
// its receipt time.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
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
  std::atomic<int> status{204};             // the answer to a POST
  std::atomic<bool> keep_alive{true};       // false: "Connection: close" on every answer
  std::atomic<bool> close_silently{false};  // close after each answer without saying so
  std::atomic<bool> interim{false};         // a "100 Continue" nobody asked for before each
  std::atomic<int> posts{0};                // POSTs read, whatever the answer
  std::atomic<int> connections{0};          // connections accepted
  std::vector<Post> answered() {
    std::lock_guard<std::mutex> l(mu_);
    return answered_;
  }

 private:
  void loop() {
    std::map<int, std::string> open;  // connection -> bytes read and not yet served
    while (!stop_) {
      std::vector<pollfd> ps{{fd_, POLLIN, 0}};
      for (const auto& [c, in] : open)
        ps.push_back({c, POLLIN, 0});
      if (::poll(ps.data(), ps.size(), 50) <= 0)
        continue;
      if ((ps[0].revents & POLLIN) != 0) {
        int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0 && open.size() < 64) {
          open[c];
          connections++;
        } else if (c >= 0) {
          ::close(c);
        }
      }
      for (size_t i = 1; i < ps.size(); ++i) {
        if (ps[i].revents == 0)
          continue;
        int c = ps[i].fd;
        char buf[8192];
        ssize_t n = ::recv(c, buf, sizeof buf, 0);
        bool keep = n > 0 && open[c].size() < (1u << 20);
        if (keep) {
          open[c].append(buf, static_cast<size_t>(n));
          while (keep && serve_one(c, open[c], keep)) {
          }
        }
        if (!keep) {
          ::close(c);
          open.erase(c);
        }
      }
    }
    for (const auto& [c, in] : open)
      ::close(c);
  }

  // Serves the first request of `in` if it has all arrived (its header, then Content-Length
  // bytes of body), and removes it. False when it is not complete yet; `keep` false when the
  // connection is to close after it.
  bool serve_one(int c, std::string& in, bool& keep) {
    size_t head_end = in.find("\r\n\r\n");
    if (head_end == std::string::npos)
      return false;
    std::string head = in.substr(0, head_end);
    size_t cl = head.find("Content-Length: ");
    size_t need = head_end + 4 +
                  (cl != std::string::npos ? std::strtoul(head.c_str() + cl + 16, nullptr, 10) : 0);
    if (in.size() < need)
      return false;
    int64_t now = engine::now_ms();
    bool post = in.rfind("POST ", 0) == 0;
    int st = post ? status.load() : 204;
    keep = keep_alive && head.find("Connection: close") == std::string::npos;
    std::string reply = std::string(interim ? "HTTP/1.1 100 Continue\r\n\r\n" : "") + "HTTP/1.1 " +
                        std::to_string(st) + " X\r\nContent-Length: 0\r\n" +
                        (keep ? "" : "Connection: close\r\n") + "\r\n";
    if (post) {
      posts++;
      if (st >= 200 && st <= 299) {
        std::lock_guard<std::mutex> l(mu_);
        answered_.push_back({now, in.substr(head_end + 4, need - head_end - 4)});
      }
    }
    in.erase(0, need);
    if (::send(c, reply.data(), reply.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(reply.size()) ||
        close_silently)
      keep = false;
    return true;
  }

  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread t_;
  std::mutex mu_;
  std::vector<Post> answered_;
};

}  // namespace vnflow_test
