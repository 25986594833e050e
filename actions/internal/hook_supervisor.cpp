// vnflow-hook: the supervisor of one local.exec call (docs/security.md, "Hooks").
//
// The daemon starts it with posix_spawn (local_exec.cpp) for each call: a fresh, small
// process, not a fork of the daemon. A forked supervisor was a copy-on-write twin of the
// daemon for as long as its hook ran, so each page the daemon's threads wrote took a fault
// and a TLB shootdown; with hooks running all the time that cost the API ten times its
// latency (bench/api.sh, issue 19).
//
// fds on entry: 0-2 the hook's stdin/stdout/stderr pipes, 3 the report pipe, 4 the hook
// lock (when the plan says so), 5 the plan (hook_plan.h, a memfd). The environment is
// empty: the hook's own travels in the plan, so nothing of it (LD_PRELOAD from a package's
// env, say) applies to this process, which may run as root.
//
// What it does: it forks the hook (H) in a process group of its own, is a child subreaper
// so every descendant of H, even one that left H's group with setsid, stays below it,
// reports H's pid and then H's wait status on fd 3 the moment H exits, then kills whatever
// H left behind and exits. SIGTERM from the daemon (a deadline, a hard stop) kills the tree;
// it dies with the daemon (PR_SET_PDEATHSIG), taking the tree with it.
//
// `vnflow-hook --probe N` answers whether this kernel gives a child the isolation of
// Sandbox N (exit 0) or not (exit 1).
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "actions/internal/hook_plan.h"

using actions::Sandbox;

namespace {

constexpr int kHookNice = 10;

// The plan, ready for execve.
struct Exec {
  actions::HookPlan plan;
  std::vector<char*> argv, envp;
};

bool write_file(const char* path, const char* data, size_t n) {
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  bool ok = ::write(fd, data, n) == static_cast<ssize_t>(n);
  ::close(fd);
  return ok;
}

// Enters a new mount namespace (and a user namespace when not root) whose mounts do not
// propagate back.
bool enter_namespaces(Sandbox mode) {
  if (mode == Sandbox::kUserNs) {
    // The maps name our ids onto themselves, read before unshare: inside the new user
    // namespace they read as the overflow id until the maps are written.
    std::string uid_map = std::to_string(::geteuid()) + " " + std::to_string(::geteuid()) + " 1\n";
    std::string gid_map = std::to_string(::getegid()) + " " + std::to_string(::getegid()) + " 1\n";
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
      return false;
    if (!write_file("/proc/self/setgroups", "deny", 4) ||
        !write_file("/proc/self/uid_map", uid_map.data(), uid_map.size()) ||
        !write_file("/proc/self/gid_map", gid_map.data(), gid_map.size()))
      return false;
  } else if (::unshare(CLONE_NEWNS) != 0) {
    return false;
  }
  return ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
}

void say(const char* msg) {
  actions::write_fully(2, msg, std::strlen(msg));
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

[[noreturn]] void run_hook(const Exec& p) {
  ::setpgid(0, 0);
  // Hooks yield the CPU to the daemon: its API, commits and lease renewals must not wait
  // behind a burst of hook processes (at nice 0 they took 10x the API's latency with 200
  // operations running hooks, bench/api.sh). An idle machine runs a hook as fast as before.
  // The supervisor itself stays at the daemon's priority: it must kill a tree in time.
  // Relative to the daemon's own (a daemon run at nice 5 runs hooks at 15; 19 at most).
  [[maybe_unused]] int niced = ::nice(kHookNice);
  if (p.plan.sandbox != Sandbox::kNone) {
    if (!enter_namespaces(p.plan.sandbox)) {
      say("vnflow: cannot isolate the hook (mount namespace)\n");
      ::_exit(126);
    }
    for (const auto& h : p.plan.hidden) {
      if (::mount("/dev/null", h.c_str(), nullptr, MS_BIND, nullptr) != 0 && errno != ENOENT) {
        say("vnflow: cannot hide the database from the hook\n");
        ::_exit(126);
      }
    }
  }
  if (p.plan.run_gid >= 0 && p.plan.run_uid >= 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(static_cast<gid_t>(p.plan.run_gid)) != 0 ||
        ::setuid(static_cast<uid_t>(p.plan.run_uid)) != 0) {
      say("vnflow: cannot switch to the hook user\n");
      ::_exit(126);
    }
  }
  if (!p.plan.work_dir.empty() && ::chdir(p.plan.work_dir.c_str()) != 0) {
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
  ::execve(p.plan.exe.c_str(), p.argv.data(), p.envp.data());
  say(errno == ENOENT ? "vnflow: cannot run the command: no such file\n"
                      : "vnflow: cannot run the command: exec failed\n");
  ::_exit(127);
}

// The supervisor: fd 0-2 the hook's pipes, fd 3 the report pipe, fd 4 the hook lock (when
// the plan says so).
[[noreturn]] void supervise(const Exec& p) {
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != p.plan.daemon_pid)
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
    actions::write_fully(3, report, sizeof report);
    ::_exit(0);
  }
  if (hook == 0)
    run_hook(p);
  ::setpgid(hook, hook);  // also done by the hook; whichever comes first
  int32_t hook_pid = hook;
  actions::write_fully(3, &hook_pid, sizeof hook_pid);
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
        actions::write_fully(3, &status, sizeof status);
        kill_tree(hook);
        ::_exit(0);
      }
    }
  }
}

bool read_plan(int fd, std::string& out) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0 ||
      static_cast<size_t>(st.st_size) > actions::kHookPlanMax)
    return false;
  out.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < out.size()) {
    ssize_t r = ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(got));
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

// A sanitizer build's supervisor has an empty environment, so the suite's ASAN_OPTIONS and
// UBSAN_OPTIONS never reach it: its findings must still stop it loudly (in the hook's
// stderr and as a failed call). Unused in other builds.
extern "C" const char* __asan_default_options();
extern "C" const char* __ubsan_default_options();
extern "C" const char* __asan_default_options() {
  return "abort_on_error=1:halt_on_error=1";
}
extern "C" const char* __ubsan_default_options() {
  return "abort_on_error=1:halt_on_error=1:print_stacktrace=1";
}

int main(int argc, char** argv) {
  // Not dumpable, as the daemon it comes from: a hook of the same user must not open our
  // report pipe through /proc/PID/fd (and forge its own exit status) nor ptrace us.
  ::prctl(PR_SET_DUMPABLE, 0);
  if (argc == 3 && std::strcmp(argv[1], "--probe") == 0) {
    int mode = std::atoi(argv[2]);
    if (mode != 1 && mode != 2)
      return 2;
    bool ok = enter_namespaces(static_cast<Sandbox>(mode)) &&
              ::mount("/dev/null", "/dev/null", nullptr, MS_BIND, nullptr) == 0;
    return ok ? 0 : 1;
  }
  Exec e;
  std::string wire;
  if (argc != 1 || !read_plan(5, wire) || !actions::decode_hook_plan(wire, e.plan)) {
    say("vnflow-hook: no valid plan on fd 5 (a daemon of another vnflow version?)\n");
    return 125;
  }
  ::close(5);
  if (!e.plan.has_lock)
    ::close(4);  // whatever the daemon left there is not ours
  for (auto& s : e.plan.argv)
    e.argv.push_back(s.data());
  e.argv.push_back(nullptr);
  for (auto& s : e.plan.env)
    e.envp.push_back(s.data());
  e.envp.push_back(nullptr);
  supervise(e);
}
