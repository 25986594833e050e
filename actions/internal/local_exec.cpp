// local.exec: a command on the engine host, bounded in time and output, isolated from the
// daemon (docs/security.md, "Hooks").
//
// Process layout. The daemon starts a supervisor (S, the program vnflow-hook,
// hook_supervisor.cpp) for each call with posix_spawn; S forks the hook (H) in
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
// S is a program of its own, not a fork of the daemon: a forked S was a copy-on-write
// twin of the daemon while its hook ran, and every page the daemon then wrote faulted.
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <boost/json.hpp>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "actions/actions.h"
#include "actions/internal/hook_plan.h"
#include "actions/internal/kinds.h"

namespace actions {

namespace {

namespace fs = std::filesystem;

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
// The supervisor program and how to start it

// Where vnflow-hook is. A binary of a build tree (tests, benches, a developer's build: its
// folder's parent holds meson-private/) runs the tree's own; an installed one runs the
// one `meson install` put in libexecdir. No build path is compiled in (the package stays
// reproducible), and a file planted in some build folder is never run by an installed
// binary: its parent folder (/usr for /usr/bin/vnflow) is no build root.
const std::string& helper_path() {
  static const std::string path = [] {
    std::error_code ec;
    fs::path root = fs::canonical("/proc/self/exe", ec).parent_path().parent_path();
    if (!ec && fs::is_directory(root / "meson-private", ec) &&
        fs::exists(root / "actions" / "vnflow-hook", ec))
      return (root / "actions" / "vnflow-hook").string();
    return std::string(VNFLOW_HOOK_HELPER_INSTALLED);
  }();
  return path;
}

struct FileActions {
  posix_spawn_file_actions_t f;
  FileActions() { posix_spawn_file_actions_init(&f); }
  ~FileActions() { posix_spawn_file_actions_destroy(&f); }
};

// Starts vnflow-hook with `args` after its name, its fds as `fa` arranges them, an empty
// environment, every signal at its default and none blocked (the calling worker blocks
// SIGPIPE; the daemon ignores it). 0, or posix_spawn's error number.
int spawn_helper(pid_t& pid, const FileActions& fa, std::vector<const char*> args) {
  std::vector<char*> argv{const_cast<char*>("vnflow-hook")};
  for (const char* a : args)
    argv.push_back(const_cast<char*>(a));
  argv.push_back(nullptr);
  char* envp[] = {nullptr};
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  int e = ::posix_spawn(&pid, helper_path().c_str(), &fa.f, &attr, argv.data(), envp);
  posix_spawnattr_destroy(&attr);
  return e;
}

// Waits for a child of ours to end, at most `wait`; false if it did not.
bool wait_child(pid_t pid, int pidfd, std::chrono::milliseconds wait, int& status) {
  auto until = std::chrono::steady_clock::now() + wait;
  for (;;) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR))
      return true;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    until - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0)
      return false;
    if (pidfd >= 0) {
      pollfd pf{pidfd, POLLIN, 0};
      ::poll(&pf, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    } else {
      ::usleep(1000);  // a kernel without pidfd_open (before 5.3)
    }
  }
}

// Isolation probe: can this process give a child a mount namespace of its own? The answer
// is kept once the probe ran; a supervisor that could not even start (a partial install or
// upgrade) is asked again at the next hook, and meanwhile no hook runs: a hook with files to
// hide must never run unisolated because the probe failed once (run() refuses it).
struct Probe {
  std::mutex mu;
  bool done = false;
  Sandbox mode = Sandbox::kNone;
  std::string error;  // why the supervisor could not start, when it could not
};

Probe& probe() {
  static Probe p;
  return p;
}

Sandbox sandbox_mode() {
  Probe& pr = probe();
  std::lock_guard<std::mutex> l(pr.mu);
  if (pr.done)
    return pr.mode;
  Sandbox mode = ::geteuid() == 0 ? Sandbox::kMountNs : Sandbox::kUserNs;
  std::string arg = std::to_string(static_cast<int>(mode));
  FileActions fa;
  for (int fd = 0; fd < 3; ++fd)
    posix_spawn_file_actions_addopen(&fa.f, fd, "/dev/null", O_RDWR, 0);
  posix_spawn_file_actions_addclosefrom_np(&fa.f, 3);
  pid_t pid = 0;
  if (int e = spawn_helper(pid, fa, {"--probe", arg.c_str()}); e != 0) {
    pr.error = "cannot start the hook supervisor " + helper_path() + ": " + std::strerror(e);
    return Sandbox::kNone;
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  pr.done = true;
  pr.error.clear();
  pr.mode = WIFEXITED(st) && WEXITSTATUS(st) == 0 ? mode : Sandbox::kNone;
  return pr.mode;
}

// Why no hook can run at all ("" when the probe ran).
std::string probe_error() {
  Probe& pr = probe();
  std::lock_guard<std::mutex> l(pr.mu);
  return pr.done ? std::string() : pr.error;
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
    HookPlan p;
    if (const json::value* c = in.if_contains("command")) {
      for (const auto& a : c->as_array())
        p.argv.emplace_back(a.as_string());
    } else if (const json::value* sh = in.if_contains("shell")) {
      p.argv = {"/bin/sh", "-c", std::string(sh->as_string())};
    }
    if (p.argv.empty())
      return Outcome::failure(ErrorClass::kInvalid,
                              "local.exec: give \"command\" (a non-empty list) or \"shell\"");
    for (const auto& a : p.argv) {
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
      p.env.push_back(k + "=" + v);
    p.exe = resolve_exe(p.argv[0]);
    auto scrub = [&](std::string s) { return actions::scrub(std::move(s), secrets); };
    std::string what =
        "local.exec \"" + scrub(p.argv[0] == "/bin/sh" ? "sh -c ..." : p.argv[0]) + "\"";
    if (p.exe.empty())
      return Outcome::failure(ErrorClass::kInvalid, what + ": no such command on the hook PATH");
    p.work_dir = ctx.work_dir;
    p.run_uid = ctx.run_uid;
    p.run_gid = ctx.run_gid;
    p.hidden = ctx.private_files;
    p.sandbox = p.hidden.empty() ? Sandbox::kNone : sandbox_mode();
    if (!p.hidden.empty() && p.sandbox == Sandbox::kNone) {
      if (std::string why = probe_error(); !why.empty())
        return Outcome::failure(ErrorClass::kTransient, "local.exec: " + why);
    }
    p.daemon_pid = ::getpid();
    p.has_lock = ctx.hook_lock_fd >= 0;
    std::string wire = encode_hook_plan(p);
    if (wire.size() > kHookPlanMax)
      return Outcome::failure(ErrorClass::kInvalid,
                              what + ": its arguments and environment are over 64 MiB");

    // The plan goes to the supervisor in a memfd (hook_plan.h says why not on its command
    // line).
    int plan_fd = ::memfd_create("vnflow-hook-plan", MFD_CLOEXEC);
    if (plan_fd < 0 || !write_fully(plan_fd, wire.data(), wire.size())) {
      int e = errno;
      if (plan_fd >= 0)
        ::close(plan_fd);
      return Outcome::failure(ErrorClass::kTransient,
                              "local.exec: cannot pass the plan to the hook's supervisor: " +
                                  std::string(std::strerror(e)));
    }
    Pipe pin, pout, perr, prep;
    if (!pin.open() || !pout.open() || !perr.open() || !prep.open()) {
      int e = errno;
      for (Pipe* x : {&pin, &pout, &perr, &prep})
        x->close_both();
      ::close(plan_fd);
      return Outcome::failure(ErrorClass::kTransient,
                              "local.exec: cannot create pipes: " + std::string(std::strerror(e)));
    }
    auto start = std::chrono::steady_clock::now();
    // The supervisor's fds: 0-2 the hook's pipes, 3 the report pipe, 4 the hook lock, 5 the
    // plan. Moved high first so that the dup2s cannot clobber one another.
    int hi_in = ::fcntl(pin.fd[0], F_DUPFD_CLOEXEC, 64);
    int hi_out = ::fcntl(pout.fd[1], F_DUPFD_CLOEXEC, 64);
    int hi_err = ::fcntl(perr.fd[1], F_DUPFD_CLOEXEC, 64);
    int hi_rep = ::fcntl(prep.fd[1], F_DUPFD_CLOEXEC, 64);
    int hi_plan = ::fcntl(plan_fd, F_DUPFD_CLOEXEC, 64);
    int hi_lock = ctx.hook_lock_fd >= 0 ? ::fcntl(ctx.hook_lock_fd, F_DUPFD_CLOEXEC, 64) : -1;
    ::close(plan_fd);
    int spawn_err = 0;
    pid_t sup = -1;
    if (hi_in < 0 || hi_out < 0 || hi_err < 0 || hi_rep < 0 || hi_plan < 0 ||
        (ctx.hook_lock_fd >= 0 && hi_lock < 0)) {
      spawn_err = errno;
    } else {
      FileActions fa;
      posix_spawn_file_actions_adddup2(&fa.f, hi_in, 0);
      posix_spawn_file_actions_adddup2(&fa.f, hi_out, 1);
      posix_spawn_file_actions_adddup2(&fa.f, hi_err, 2);
      posix_spawn_file_actions_adddup2(&fa.f, hi_rep, 3);
      if (hi_lock >= 0)
        posix_spawn_file_actions_adddup2(&fa.f, hi_lock, 4);
      posix_spawn_file_actions_adddup2(&fa.f, hi_plan, 5);
      posix_spawn_file_actions_addclosefrom_np(&fa.f, 6);
      spawn_err = spawn_helper(sup, fa, {});
      if (spawn_err != 0)
        sup = -1;
    }
    for (int fd : {hi_in, hi_out, hi_err, hi_rep, hi_plan, hi_lock}) {
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
      return Outcome::failure(ErrorClass::kTransient,
                              "local.exec: cannot start the hook's supervisor " + helper_path() +
                                  ": " + std::string(std::strerror(spawn_err)));
    }
    int sup_fd = static_cast<int>(::syscall(SYS_pidfd_open, sup, 0));
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
    if (!wait_child(sup, sup_fd, std::chrono::seconds(5), sup_status)) {
      ::kill(sup, SIGKILL);
      if (hook_pid > 0)
        ::kill(-hook_pid, SIGKILL);
      while (::waitpid(sup, &sup_status, 0) < 0 && errno == EINTR) {
      }  // SIGKILLed: it ends, and is reaped here, not left a zombie
    }
    if (sup_fd >= 0)
      ::close(sup_fd);
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
    if (rep_len < 8) {
      std::string line = last_line(err.data_);
      return Outcome::failure(ErrorClass::kFailed,
                              scrub(what +
                                    ": the command's supervisor ended without reporting its "
                                    "exit status" +
                                    (line.empty() ? std::string() : ": " + line)));
    }
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
  if (std::string why = probe_error(); !why.empty())
    return "none: " + why + "; no hook can run";
  return "none: this kernel gives no mount namespace to this user, so hooks can read the "
         "database and its key file";
}

}  // namespace actions
