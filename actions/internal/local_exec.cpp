// local.exec: a command on the engine host, bounded in time and output.
#include <cerrno>
#include <cstring>
#include <vector>

#include <boost/json.hpp>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "actions/actions.h"

extern char** environ;

namespace actions {

namespace {

constexpr int64_t kDefaultMaxOutput = 64 * 1024;

struct Pipe {
  int fd[2] = {-1, -1};
  bool open() { return ::pipe2(fd, O_CLOEXEC) == 0; }
  void close_both() {
    for (int& f : fd) {
      if (f >= 0)
        ::close(f);
      f = -1;
    }
  }
};

class Capture {
 public:
  explicit Capture(size_t limit) : limit_(limit) {}
  void add(const char* p, size_t n) {
    size_t room = data_.size() < limit_ ? limit_ - data_.size() : 0;
    data_.append(p, std::min(room, n));
    if (n > room)
      truncated_ = true;
  }
  std::string data_;
  bool truncated_ = false;

 private:
  size_t limit_;
};

std::string last_line(const std::string& s) {
  size_t end = s.find_last_not_of("\n\r ");
  if (end == std::string::npos)
    return "";
  size_t b = s.find_last_of('\n', end);
  std::string line =
      s.substr(b == std::string::npos ? 0 : b + 1, end - (b == std::string::npos ? 0 : b + 1) + 1);
  if (line.size() > 200)
    line = line.substr(0, 200) + "...";
  return line;
}

class LocalExec : public Action {
 public:
  Outcome run(const json::object& in, const Context& ctx) const override {
    std::vector<std::string> argv;
    if (const json::value* c = in.if_contains("command")) {
      for (const auto& a : c->as_array())
        argv.emplace_back(a.as_string());
    } else if (const json::value* sh = in.if_contains("shell")) {
      argv = {"/bin/sh", "-c", std::string(sh->as_string())};
    }
    if (argv.empty())
      return Outcome::failure("invalid",
                              "local.exec: give \"command\" (a non-empty list) or \"shell\"");
    int64_t max_output = kDefaultMaxOutput;
    if (const json::value* m = in.if_contains("max_output");
        m && m->is_int64() && m->get_int64() > 0)
      max_output = m->get_int64();
    std::vector<int64_t> ok_codes = {0};
    if (const json::value* s = in.if_contains("success_codes"); s && s->is_array()) {
      ok_codes.clear();
      for (const auto& v : s->get_array())
        ok_codes.push_back(v.to_number<int64_t>());
    }
    bool stderr_empty = false;
    if (const json::value* s = in.if_contains("stderr_must_be_empty"); s && s->is_bool())
      stderr_empty = s->get_bool();
    std::string stdin_data;
    if (const json::value* s = in.if_contains("stdin"); s && s->is_string())
      stdin_data = std::string(s->get_string());

    // Environment: ours, then the engine's VNFLOW_* facts, then the state's env.
    std::map<std::string, std::string> env;
    for (char** e = environ; e && *e; ++e) {
      std::string kv(*e);
      auto eq = kv.find('=');
      if (eq != std::string::npos)
        env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    env["VNFLOW_OP_ID"] = ctx.op_id;
    env["VNFLOW_INSTANCE_ID"] = ctx.instance_id;
    env["VNFLOW_STATE"] = ctx.state;
    env["VNFLOW_ATTEMPT"] = std::to_string(ctx.attempt);
    env["VNFLOW_IDEMPOTENCY_KEY"] = ctx.key;
    env["VNFLOW_WORK_DIR"] = ctx.work_dir;
    std::vector<std::string> secrets;
    if (const json::value* e = in.if_contains("env"); e && e->is_object()) {
      for (const auto& kv : e->get_object()) {
        std::string v = kv.value().is_string() ? std::string(kv.value().get_string())
                                               : json::serialize(kv.value());
        if (is_secret_name(kv.key()) && !v.empty())
          secrets.push_back(v);
        env[std::string(kv.key())] = v;
      }
    }
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : env)
      env_strings.push_back(k + "=" + v);
    std::vector<char*> envp, args;
    for (auto& s : env_strings)
      envp.push_back(s.data());
    envp.push_back(nullptr);
    for (auto& s : argv)
      args.push_back(s.data());
    args.push_back(nullptr);

    Pipe pin, pout, perr;
    if (!pin.open() || !pout.open() || !perr.open()) {
      pin.close_both();
      pout.close_both();
      perr.close_both();
      return Outcome::failure(
          "transient", "local.exec: cannot create pipes: " + std::string(std::strerror(errno)));
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pin.fd[0], 0);
    posix_spawn_file_actions_adddup2(&fa, pout.fd[1], 1);
    posix_spawn_file_actions_adddup2(&fa, perr.fd[1], 2);
    if (!ctx.work_dir.empty())
      posix_spawn_file_actions_addchdir_np(&fa, ctx.work_dir.c_str());
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(
        &attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&attr, 0);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    auto start = std::chrono::steady_clock::now();
    pid_t pid = -1;
    int rc = posix_spawnp(&pid, args[0], &fa, &attr, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    ::close(pin.fd[0]);
    ::close(pout.fd[1]);
    ::close(perr.fd[1]);
    pin.fd[0] = pout.fd[1] = perr.fd[1] = -1;
    if (rc != 0) {
      pin.close_both();
      pout.close_both();
      perr.close_both();
      return Outcome::failure("invalid",
                              "local.exec: cannot run \"" + argv[0] + "\": " + std::strerror(rc));
    }
    int in_fd = pin.fd[1];
    ::fcntl(in_fd, F_SETFL, O_NONBLOCK);
    if (stdin_data.empty()) {
      ::close(in_fd);
      in_fd = -1;
    }
    pin.fd[1] = -1;
    Capture out(static_cast<size_t>(max_output)), err(static_cast<size_t>(max_output));
    int out_fd = pout.fd[0], err_fd = perr.fd[0];
    size_t in_pos = 0;
    bool timed_out = false, cancelled = false;
    char buf[16384];
    while (out_fd >= 0 || err_fd >= 0) {
      auto now = std::chrono::steady_clock::now();
      if (now >= ctx.deadline) {
        timed_out = true;
        break;
      }
      if (ctx.cancelled != nullptr && ctx.cancelled->load()) {
        cancelled = true;
        break;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(ctx.deadline - now).count();
      pollfd fds[3];
      int n = 0;
      int io[3] = {-1, -1, -1};
      if (out_fd >= 0) {
        fds[n] = {out_fd, POLLIN, 0};
        io[n++] = 1;
      }
      if (err_fd >= 0) {
        fds[n] = {err_fd, POLLIN, 0};
        io[n++] = 2;
      }
      if (in_fd >= 0) {
        fds[n] = {in_fd, POLLOUT, 0};
        io[n++] = 0;
      }
      int pr = ::poll(fds, static_cast<nfds_t>(n), static_cast<int>(std::min<int64_t>(left, 200)));
      if (pr < 0 && errno != EINTR)
        break;
      for (int i = 0; i < n && pr > 0; ++i) {
        if (fds[i].revents == 0)
          continue;
        if (io[i] == 0) {
          ssize_t w = ::write(in_fd, stdin_data.data() + in_pos, stdin_data.size() - in_pos);
          if (w > 0)
            in_pos += static_cast<size_t>(w);
          if (w < 0 || in_pos >= stdin_data.size()) {
            ::close(in_fd);
            in_fd = -1;
          }
          continue;
        }
        int& fd = io[i] == 1 ? out_fd : err_fd;
        ssize_t r = ::read(fd, buf, sizeof buf);
        if (r > 0) {
          (io[i] == 1 ? out : err).add(buf, static_cast<size_t>(r));
        } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
          ::close(fd);
          fd = -1;
        }
      }
    }
    if (timed_out || cancelled)
      ::kill(-pid, SIGKILL);
    for (int fd : {in_fd, out_fd, err_fd}) {
      if (fd >= 0)
        ::close(fd);
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!timed_out && !cancelled) {
      // The group may have children still running after the main process left.
      ::kill(-pid, SIGKILL);
    }
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - start)
                  .count();
    auto scrub = [&](std::string s) {
      for (const auto& sec : secrets) {
        for (size_t p = s.find(sec); p != std::string::npos; p = s.find(sec, p))
          s.replace(p, sec.size(), "***");
      }
      return s;
    };
    std::string what = "local.exec \"" + scrub(argv[0] == "/bin/sh" ? "sh -c ..." : argv[0]) + "\"";
    if (timed_out)
      return Outcome::failure(
          "timeout", what + ": no result within the state's timeout; the command was killed");
    if (cancelled)
      return Outcome::failure("transient", what + ": stopped because the daemon is stopping");
    int64_t code = WIFEXITED(status) ? WEXITSTATUS(status)
                                     : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    json::object o;
    o["exit_code"] = code;
    o["stdout"] = out.data_;
    o["stderr"] = err.data_;
    o["truncated"] = out.truncated_ || err.truncated_;
    o["duration_ms"] = static_cast<int64_t>(ms);
    bool ok = std::find(ok_codes.begin(), ok_codes.end(), code) != ok_codes.end();
    if (!ok) {
      std::string msg =
          what + (WIFSIGNALED(status) ? ": killed by signal " + std::to_string(WTERMSIG(status))
                                      : ": exit status " + std::to_string(code));
      std::string line = last_line(err.data_);
      if (!line.empty())
        msg += ": " + line;
      return Outcome::failure("failed", scrub(msg));
    }
    if (stderr_empty && !err.data_.empty())
      return Outcome::failure("failed", scrub(what + ": wrote to stderr: " + last_line(err.data_)));
    return Outcome::success(std::move(o));
  }
};

}  // namespace

std::shared_ptr<const Action> make_local_exec();
std::shared_ptr<const Action> make_local_exec() {
  return std::make_shared<LocalExec>();
}

}  // namespace actions
