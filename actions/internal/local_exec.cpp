// local.exec: a command on the engine host, bounded in time and output, isolated from the
// daemon (docs/security.md, "Hooks").
//
// Process layout. The daemon forks a supervisor (S) for each call; S forks the hook (H) in
// a process group of its own. S is a child subreaper, so every descendant of H, even one
// that left H's group with setsid, stays below S. S reports H's pid and then H's wait
// status on a pipe the moment H exits, then kills whatever H left behind and exits. At the
// state's deadline (or a hard stop) the daemon sends S SIGTERM: S kills the tree and exits.
// S dies with the daemon (PR_SET_PDEATHSIG), taking the tree with it.
//
// Hooks of a dead daemon. Every S holds a shared lock on <work root>/.hooks.lock, taken by
// its daemon; a new daemon takes that lock exclusively (claim_hook_lock) before it runs
// anything, so no step of a previous daemon is still running when it re-dispatches.
//
// Isolation. H gets a clean environment (no variable of the daemon's), runs in its
// instance's work directory, and — where the kernel allows a mount namespace (a user
// namespace when the daemon is not root) — sees /dev/null in place of the database, its WAL
// and its key file. A root daemon runs hooks as Context::run_uid/run_gid when set.
//
// Between fork and exec only async-signal-safe calls are made: everything is prepared
// before the fork.
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <boost/json.hpp>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "actions/actions.h"
#include "actions/internal/kinds.h"

namespace actions {

namespace {

constexpr int64_t kDefaultMaxOutput = 64 * 1024;
constexpr int64_t kMaxMaxOutput = 16 << 20;
constexpr const char* kHookPath = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";

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

// ---------------------------------------------------------------------------------------
// Isolation probe: can this process give a child a mount namespace of its own?

enum class Sandbox { kNone, kMountNs, kUserNs };

// The uid/gid map lines for a user namespace that maps the daemon's ids onto themselves.
struct IdMaps {
  std::string uid_map, gid_map;
};

IdMaps id_maps() {
  IdMaps m;
  m.uid_map = std::to_string(::geteuid()) + " " + std::to_string(::geteuid()) + " 1\n";
  m.gid_map = std::to_string(::getegid()) + " " + std::to_string(::getegid()) + " 1\n";
  return m;
}

bool write_file(const char* path, const char* data, size_t n) {
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  bool ok = ::write(fd, data, n) == static_cast<ssize_t>(n);
  ::close(fd);
  return ok;
}

// After fork: enter a new mount namespace (and a user namespace when not root) whose
// mounts do not propagate back. Async-signal-safe.
bool enter_namespaces(Sandbox mode, const IdMaps& maps) {
  if (mode == Sandbox::kUserNs) {
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
      return false;
    if (!write_file("/proc/self/setgroups", "deny", 4) ||
        !write_file("/proc/self/uid_map", maps.uid_map.data(), maps.uid_map.size()) ||
        !write_file("/proc/self/gid_map", maps.gid_map.data(), maps.gid_map.size()))
      return false;
  } else if (::unshare(CLONE_NEWNS) != 0) {
    return false;
  }
  return ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
}

Sandbox probe_sandbox() {
  IdMaps maps = id_maps();
  for (Sandbox mode : {::geteuid() == 0 ? Sandbox::kMountNs : Sandbox::kUserNs}) {
    pid_t pid = ::fork();
    if (pid < 0)
      return Sandbox::kNone;
    if (pid == 0) {
      bool ok = enter_namespaces(mode, maps) &&
                ::mount("/dev/null", "/dev/null", nullptr, MS_BIND, nullptr) == 0;
      ::_exit(ok ? 0 : 1);
    }
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
      return mode;
  }
  return Sandbox::kNone;
}

Sandbox sandbox_mode() {
  static std::once_flag once;
  static Sandbox mode = Sandbox::kNone;
  std::call_once(once, [] { mode = probe_sandbox(); });
  return mode;
}

// ---------------------------------------------------------------------------------------
// The supervisor (after fork: async-signal-safe code only)

// Everything the child processes need, prepared before the fork.
struct Plan {
  std::string exe;  // resolved path
  std::vector<std::string> argv_s, envp_s, hidden;
  std::vector<char*> argv, envp;
  std::string work_dir;
  int run_uid = -1, run_gid = -1;
  Sandbox sandbox = Sandbox::kNone;
  IdMaps maps;
  pid_t daemon_pid = 0;
};

void write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return;
    c += w;
    n -= static_cast<size_t>(w);
  }
}

void say(const char* msg) {
  write_all(2, msg, std::strlen(msg));
}

// Kills every descendant of the calling process (a subreaper) and reaps them.
void kill_tree(pid_t group) {
  if (group > 0)
    ::kill(-group, SIGKILL);
  char path[64] = "/proc/self/task/";
  {
    // Append our pid (the supervisor is single-threaded: its tid is its pid).
    char num[24];
    int n = 0;
    for (pid_t p = ::getpid(); p > 0; p /= 10)
      num[n++] = static_cast<char>('0' + p % 10);
    size_t len = std::strlen(path);
    while (n > 0)
      path[len++] = num[--n];
    std::memcpy(path + len, "/children", 10);
  }
  for (int round = 0; round < 2000; ++round) {
    int st = 0;
    bool reaped = false;
    while (::waitpid(-1, &st, WNOHANG) > 0)
      reaped = true;
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    char buf[4096];
    ssize_t n = fd >= 0 ? ::read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
      ::close(fd);
    bool any = false;
    if (n > 0) {
      pid_t pid = 0;
      for (ssize_t i = 0; i <= n; ++i) {
        char c = i < n ? buf[i] : ' ';
        if (c >= '0' && c <= '9') {
          pid = pid * 10 + (c - '0');
        } else if (pid > 0) {
          ::kill(pid, SIGKILL);
          any = true;
          pid = 0;
        }
      }
    }
    if (!any && !reaped) {
      errno = 0;
      if (::waitpid(-1, &st, WNOHANG) < 0 && errno == ECHILD)
        return;
      struct timespec ts {
        0, 2000000
      };
      ::nanosleep(&ts, nullptr);
    }
  }
}

[[noreturn]] void run_hook(const Plan& p) {
  ::setpgid(0, 0);
  if (p.sandbox != Sandbox::kNone) {
    if (!enter_namespaces(p.sandbox, p.maps)) {
      say("vnflow: cannot isolate the hook (mount namespace)\n");
      ::_exit(126);
    }
    for (const auto& h : p.hidden) {
      if (::mount("/dev/null", h.c_str(), nullptr, MS_BIND, nullptr) != 0 && errno != ENOENT) {
        say("vnflow: cannot hide the database from the hook\n");
        ::_exit(126);
      }
    }
  }
  if (p.run_gid >= 0 && p.run_uid >= 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(static_cast<gid_t>(p.run_gid)) != 0 ||
        ::setuid(static_cast<uid_t>(p.run_uid)) != 0) {
      say("vnflow: cannot switch to the hook user\n");
      ::_exit(126);
    }
  }
  if (!p.work_dir.empty() && ::chdir(p.work_dir.c_str()) != 0) {
    say("vnflow: cannot enter the work directory\n");
    ::_exit(126);
  }
  // Default dispositions (the daemon ignores SIGPIPE; a hook must not inherit that) and an
  // empty mask.
  for (int sig = 1; sig < NSIG; ++sig)
    ::signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::umask(022);  // not the daemon's 077: files a hook makes are readable as usual
  ::close_range(3, ~0U, 0);
  ::execve(p.exe.c_str(), p.argv.data(), p.envp.data());
  say(errno == ENOENT ? "vnflow: cannot run the command: no such file\n"
                      : "vnflow: cannot run the command: exec failed\n");
  ::_exit(127);
}

// The supervisor: fd 0-2 the hook's pipes, fd 3 the report pipe, fd 4 the hook lock.
[[noreturn]] void supervise(const Plan& p) {
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != p.daemon_pid)
    ::_exit(1);  // the daemon died before we could ask to be told
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  sigset_t wait_set;
  sigemptyset(&wait_set);
  for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP})
    sigaddset(&wait_set, sig);
  ::sigprocmask(SIG_BLOCK, &wait_set, nullptr);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGPIPE})
    ::signal(sig, SIG_DFL);
  pid_t hook = ::fork();
  if (hook < 0) {
    int32_t report[2] = {0, 127 << 8};
    write_all(3, report, sizeof report);
    ::_exit(0);
  }
  if (hook == 0)
    run_hook(p);
  ::setpgid(hook, hook);  // also done by the hook; whichever comes first
  int32_t hook_pid = hook;
  write_all(3, &hook_pid, sizeof hook_pid);
  // The supervisor keeps no end of the hook's pipes: EOF comes when the tree is gone.
  int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int fd = 0; fd < 3; ++fd)
    ::dup2(devnull, fd);
  for (;;) {
    siginfo_t info;
    int sig = ::sigwaitinfo(&wait_set, &info);
    if (sig < 0)
      continue;
    if (sig != SIGCHLD) {
      kill_tree(hook);
      ::_exit(0);
    }
    int st = 0;
    pid_t r;
    while ((r = ::waitpid(-1, &st, WNOHANG)) > 0) {
      if (r == hook) {
        int32_t status = st;
        write_all(3, &status, sizeof status);
        kill_tree(hook);
        ::_exit(0);
      }
    }
  }
}

std::string resolve_exe(const std::string& name) {
  if (name.find('/') != std::string::npos)
    return name;
  std::string path = kHookPath;
  size_t b = 0;
  while (b <= path.size()) {
    size_t e = path.find(':', b);
    if (e == std::string::npos)
      e = path.size();
    std::string cand = path.substr(b, e - b) + "/" + name;
    if (::access(cand.c_str(), X_OK) == 0)
      return cand;
    b = e + 1;
  }
  return "";
}

void read_some(int& fd, Capture& cap) {
  char buf[16384];
  ssize_t r = ::read(fd, buf, sizeof buf);
  if (r > 0) {
    cap.add(buf, static_cast<size_t>(r));
  } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
    ::close(fd);
    fd = -1;
  }
}

class LocalExec : public Action {
 public:
  Outcome run(const json::object& in, const Context& ctx) const override {
    // A hook that closes its stdin early makes our writes fail with EPIPE: SIGPIPE stays
    // blocked on this thread whatever the process does with it (the hook's own mask and
    // dispositions are reset before it starts).
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_set, nullptr);
    Plan p;
    if (const json::value* c = in.if_contains("command")) {
      for (const auto& a : c->as_array())
        p.argv_s.emplace_back(a.as_string());
    } else if (const json::value* sh = in.if_contains("shell")) {
      p.argv_s = {"/bin/sh", "-c", std::string(sh->as_string())};
    }
    if (p.argv_s.empty())
      return Outcome::failure(ErrorClass::kInvalid,
                              "local.exec: give \"command\" (a non-empty list) or \"shell\"");
    for (const auto& a : p.argv_s) {
      if (a.find('\0') != std::string::npos)
        return Outcome::failure(ErrorClass::kInvalid, "local.exec: an argument holds a NUL byte");
    }
    int64_t max_output = kDefaultMaxOutput;
    if (const json::value* m = in.if_contains("max_output");
        m && m->is_int64() && m->get_int64() > 0)
      max_output = std::min(m->get_int64(), kMaxMaxOutput);
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

    // A clean environment: nothing of the daemon's (its OS_PASSWORD, its database path),
    // only what docs/workflow-language.md lists, then the state's env.
    std::map<std::string, std::string> env;
    env["PATH"] = kHookPath;
    env["LANG"] = "C.UTF-8";
    env["HOME"] = ctx.work_dir.empty() ? "/" : ctx.work_dir;
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
        std::string k(kv.key());
        if (k.empty() || k.find('=') != std::string::npos || k.find('\0') != std::string::npos ||
            v.find('\0') != std::string::npos)
          return Outcome::failure(ErrorClass::kInvalid,
                                  "local.exec: env name \"" + k + "\" is not valid");
        if (is_secret_name(kv.key()) && !v.empty())
          secrets.push_back(v);
        env[k] = v;
      }
    }
    for (const auto& [k, v] : env)
      p.envp_s.push_back(k + "=" + v);
    for (auto& s : p.envp_s)
      p.envp.push_back(s.data());
    p.envp.push_back(nullptr);
    for (auto& s : p.argv_s)
      p.argv.push_back(s.data());
    p.argv.push_back(nullptr);
    p.exe = resolve_exe(p.argv_s[0]);
    auto scrub = [&](std::string s) { return actions::scrub(std::move(s), secrets); };
    std::string what =
        "local.exec \"" + scrub(p.argv_s[0] == "/bin/sh" ? "sh -c ..." : p.argv_s[0]) + "\"";
    if (p.exe.empty())
      return Outcome::failure(ErrorClass::kInvalid, what + ": no such command on the hook PATH");
    p.work_dir = ctx.work_dir;
    p.run_uid = ctx.run_uid;
    p.run_gid = ctx.run_gid;
    p.hidden = ctx.private_files;
    p.sandbox = p.hidden.empty() ? Sandbox::kNone : sandbox_mode();
    p.maps = id_maps();
    p.daemon_pid = ::getpid();

    Pipe pin, pout, perr, prep;
    if (!pin.open() || !pout.open() || !perr.open() || !prep.open()) {
      for (Pipe* x : {&pin, &pout, &perr, &prep})
        x->close_both();
      return Outcome::failure(ErrorClass::kTransient, "local.exec: cannot create pipes: " +
                                                          std::string(std::strerror(errno)));
    }
    auto start = std::chrono::steady_clock::now();
    // The child's fds: 0-2 the hook's pipes, 3 the report pipe, 4 the hook lock. Moved
    // high first so that the dup2s below cannot clobber one another.
    int hi_in = ::fcntl(pin.fd[0], F_DUPFD_CLOEXEC, 64);
    int hi_out = ::fcntl(pout.fd[1], F_DUPFD_CLOEXEC, 64);
    int hi_err = ::fcntl(perr.fd[1], F_DUPFD_CLOEXEC, 64);
    int hi_rep = ::fcntl(prep.fd[1], F_DUPFD_CLOEXEC, 64);
    int hi_lock = ctx.hook_lock_fd >= 0 ? ::fcntl(ctx.hook_lock_fd, F_DUPFD_CLOEXEC, 64) : -1;
    pid_t sup = ::fork();
    if (sup == 0) {
      ::dup2(hi_in, 0);
      ::dup2(hi_out, 1);
      ::dup2(hi_err, 2);
      ::dup2(hi_rep, 3);
      if (hi_lock >= 0)
        ::dup2(hi_lock, 4);
      ::close_range(hi_lock >= 0 ? 5 : 4, ~0U, 0);
      supervise(p);
    }
    int fork_errno = errno;
    for (int fd : {hi_in, hi_out, hi_err, hi_rep, hi_lock}) {
      if (fd >= 0)
        ::close(fd);
    }
    ::close(pin.fd[0]);
    ::close(pout.fd[1]);
    ::close(perr.fd[1]);
    ::close(prep.fd[1]);
    pin.fd[0] = pout.fd[1] = perr.fd[1] = prep.fd[1] = -1;
    if (sup < 0) {
      for (Pipe* x : {&pin, &pout, &perr, &prep})
        x->close_both();
      return Outcome::failure(ErrorClass::kTransient, "local.exec: cannot start a process: " +
                                                          std::string(std::strerror(fork_errno)));
    }
    int in_fd = pin.fd[1];
    ::fcntl(in_fd, F_SETFL, O_NONBLOCK);
    if (stdin_data.empty()) {
      ::close(in_fd);
      in_fd = -1;
    }
    pin.fd[1] = -1;
    Capture out(static_cast<size_t>(max_output)), err(static_cast<size_t>(max_output));
    int out_fd = pout.fd[0], err_fd = perr.fd[0], rep_fd = prep.fd[0];
    size_t in_pos = 0;
    bool timed_out = false, cancelled = false;
    // The report: the hook's pid, then its wait status.
    char rep_buf[8];
    size_t rep_len = 0;
    bool exited = false;
    std::chrono::steady_clock::time_point exited_at;
    while (out_fd >= 0 || err_fd >= 0 || rep_fd >= 0) {
      auto now = std::chrono::steady_clock::now();
      if (exited && now - exited_at > std::chrono::seconds(2))
        break;  // the supervisor killed the tree; whatever still holds a pipe is gone soon
      if (!exited && now >= ctx.deadline) {
        timed_out = true;
        break;
      }
      if (!exited && ctx.cancelled != nullptr && ctx.cancelled->load()) {
        cancelled = true;
        break;
      }
      auto limit = exited ? exited_at + std::chrono::seconds(2) : ctx.deadline;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(limit - now).count();
      pollfd fds[4];
      int io[4];
      int n = 0;
      if (out_fd >= 0) {
        fds[n] = {out_fd, POLLIN, 0};
        io[n++] = 1;
      }
      if (err_fd >= 0) {
        fds[n] = {err_fd, POLLIN, 0};
        io[n++] = 2;
      }
      if (rep_fd >= 0) {
        fds[n] = {rep_fd, POLLIN, 0};
        io[n++] = 3;
      }
      if (in_fd >= 0) {
        fds[n] = {in_fd, POLLOUT, 0};
        io[n++] = 0;
      }
      int pr =
          ::poll(fds, static_cast<nfds_t>(n), static_cast<int>(std::clamp<int64_t>(left, 0, 200)));
      if (pr < 0 && errno != EINTR)
        break;
      for (int i = 0; i < n && pr > 0; ++i) {
        if (fds[i].revents == 0)
          continue;
        if (io[i] == 0) {
          // A hook that exits or closes its stdin early gives EPIPE here (SIGPIPE is
          // ignored by the daemon): the rest of the input is simply not sent.
          ssize_t w = ::write(in_fd, stdin_data.data() + in_pos, stdin_data.size() - in_pos);
          if (w > 0)
            in_pos += static_cast<size_t>(w);
          if ((w < 0 && errno != EAGAIN && errno != EINTR) || in_pos >= stdin_data.size() ||
              (fds[i].revents & (POLLERR | POLLHUP)) != 0) {
            ::close(in_fd);
            in_fd = -1;
          }
        } else if (io[i] == 3) {
          ssize_t r = ::read(rep_fd, rep_buf + rep_len, sizeof rep_buf - rep_len);
          if (r > 0)
            rep_len += static_cast<size_t>(r);
          if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN) || rep_len == sizeof rep_buf) {
            ::close(rep_fd);
            rep_fd = -1;
            exited = true;
            exited_at = std::chrono::steady_clock::now();
            if (in_fd >= 0) {
              ::close(in_fd);
              in_fd = -1;
            }
          }
        } else {
          read_some(io[i] == 1 ? out_fd : err_fd, io[i] == 1 ? out : err);
        }
      }
    }
    int32_t hook_pid = 0;
    if (rep_len >= 4)
      std::memcpy(&hook_pid, rep_buf, 4);
    if (timed_out || cancelled || !exited)
      ::kill(sup, SIGTERM);
    for (int fd : {in_fd, out_fd, err_fd, rep_fd}) {
      if (fd >= 0)
        ::close(fd);
    }
    // The supervisor exits right after it has killed the tree; bounded all the same.
    int sup_status = 0;
    for (int i = 0;; ++i) {
      pid_t r = ::waitpid(sup, &sup_status, WNOHANG);
      if (r == sup || (r < 0 && errno != EINTR))
        break;
      if (i == 250) {  // 5 s
        ::kill(sup, SIGKILL);
        if (hook_pid > 0)
          ::kill(-hook_pid, SIGKILL);
      }
      ::usleep(20000);
    }
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - start)
                  .count();
    if (timed_out)
      return Outcome::failure(
          ErrorClass::kTimeout,
          what + ": no result within the state's timeout; the command was killed");
    if (cancelled)
      return Outcome::failure(ErrorClass::kTransient,
                              what + ": stopped because the daemon is stopping");
    if (rep_len < 8)
      return Outcome::failure(ErrorClass::kFailed, what +
                                                       ": the command's supervisor ended without "
                                                       "reporting its exit status");
    int32_t status = 0;
    std::memcpy(&status, rep_buf + 4, 4);
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
      return Outcome::failure(
          code == 126 || code == 127 ? ErrorClass::kInvalid : ErrorClass::kFailed, scrub(msg));
    }
    if (stderr_empty && !err.data_.empty())
      return Outcome::failure(ErrorClass::kFailed,
                              scrub(what + ": wrote to stderr: " + last_line(err.data_)));
    return Outcome::success(std::move(o));
  }
};

}  // namespace

void add_local_exec(Registry& r) {
  r.add("local.exec",
        Signature::of(
            {"command?: list(string)", "shell?: string", "env?: map(string)", "stdin?: string",
             "success_codes?: list(integer)", "max_output?: integer",
             "stderr_must_be_empty?: boolean", "hide_output?: boolean", "secret_output?: boolean"},
            {"exit_code: integer", "stdout: string", "stderr: string", "truncated: boolean",
             "duration_ms: integer"}),
        std::make_shared<LocalExec>());
}

base::Result<int> claim_hook_lock(const std::string& work_root, std::chrono::milliseconds wait) {
  std::string path = work_root + "/.hooks.lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    return base::Status::Unavailable("cannot open " + path + ": " + std::strerror(errno));
  auto until = std::chrono::steady_clock::now() + wait;
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (std::chrono::steady_clock::now() >= until) {
      ::close(fd);
      return base::Status::FailedPrecondition(
          "hooks of a previous daemon are still running (they hold " + path +
          "); not resuming anything beside them");
    }
    ::usleep(20000);
  }
  // Shared from now on: each hook's supervisor holds it with us, so the next daemon waits
  // for the last of them.
  ::flock(fd, LOCK_SH);
  return fd;
}

std::string hook_isolation(bool with_private_files) {
  if (!with_private_files)
    return "none";
  switch (sandbox_mode()) {
    case Sandbox::kMountNs:
      return "mount namespace (the database and its key are hidden from hooks)";
    case Sandbox::kUserNs:
      return "user + mount namespace (the database and its key are hidden from hooks)";
    case Sandbox::kNone:
      break;
  }
  return "none: this kernel gives no mount namespace to this user, so hooks can read the "
         "database and its key file";
}

}  // namespace actions
