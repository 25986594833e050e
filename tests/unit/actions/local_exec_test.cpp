// local.exec's supervisor: the plan's wire format, and what the running supervisor is (its
// program, its command line and environment, its priority). The hostile hooks themselves
// (timeouts, escapees, snooping) are in tests/hostile/hostile_hooks_test.sh.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "actions/actions.h"
#include "actions/internal/hook_plan.h"

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The processes whose parent is this one and whose program is named `comm`.
std::vector<int> children_named(const std::string& comm) {
  std::vector<int> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    std::string stat = slurp(e.path() / "stat");
    size_t close = stat.rfind(')');
    size_t open = stat.find('(');
    if (close == std::string::npos || open == std::string::npos)
      continue;
    std::istringstream rest(stat.substr(close + 2));
    std::string state;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid == ::getpid() && stat.substr(open + 1, close - open - 1) == comm)
      out.push_back(std::stoi(name));
  }
  return out;
}

// A call's context as the engine gives it, working in `dir`.
actions::Context context_in(const fs::path& dir) {
  actions::Context ctx;
  ctx.op_id = "op-1";
  ctx.instance_id = "inst-1";
  ctx.state = "s";
  ctx.key = "op-1/s/1";
  ctx.work_dir = dir.string();
  ctx.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  return ctx;
}

int nice_of(int pid) {
  std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string f;
  for (int i = 3; i <= 19; ++i)  // field 19 is nice
    rest >> f;
  return std::stoi(f);
}

}  // namespace

TEST_CASE("hook plan: what the daemon encodes the supervisor decodes, and nothing else") {
  actions::HookPlan p;
  p.exe = "/bin/sh";
  p.argv = {"/bin/sh", "-c", "echo hi"};
  p.env = {"PATH=/bin", "A_PASSWORD=x\ny", std::string("EMPTY=")};
  p.hidden = {"/var/lib/vnflow/vnflow.db"};
  p.work_dir = "/tmp/w";
  p.run_uid = 1000;
  p.run_gid = 1001;
  p.sandbox = actions::Sandbox::kUserNs;
  p.daemon_pid = 4242;
  p.has_lock = true;
  std::string wire = actions::encode_hook_plan(p);
  actions::HookPlan q;
  REQUIRE(actions::decode_hook_plan(wire, q));
  CHECK(q.exe == p.exe);
  CHECK(q.argv == p.argv);
  CHECK(q.env == p.env);
  CHECK(q.hidden == p.hidden);
  CHECK(q.work_dir == p.work_dir);
  CHECK(q.run_uid == 1000);
  CHECK(q.run_gid == 1001);
  CHECK(q.sandbox == actions::Sandbox::kUserNs);
  CHECK(q.daemon_pid == 4242);
  CHECK(q.has_lock);

  // Every truncation, trailing bytes, another version, an empty argv: refused.
  for (size_t n = 0; n < wire.size(); ++n) {
    actions::HookPlan t;
    CHECK_FALSE(actions::decode_hook_plan(wire.substr(0, n), t));
  }
  actions::HookPlan t;
  CHECK_FALSE(actions::decode_hook_plan(wire + "x", t));
  std::string other = wire;
  other[4 + std::string(actions::kHookPlanVersion).size() - 1] = '9';
  CHECK_FALSE(actions::decode_hook_plan(other, t));
  actions::HookPlan empty = p;
  empty.argv.clear();
  CHECK_FALSE(actions::decode_hook_plan(actions::encode_hook_plan(empty), t));
  // A list count larger than the plan itself is refused before anything is allocated.
  std::string huge;
  using actions::hook_plan_detail::put;
  for (const char* f :
       {actions::kHookPlanVersion, "1", "0", "-1", "-1", "0", "/w", "/bin/true", "99999999"})
    put(huge, f);
  CHECK_FALSE(actions::decode_hook_plan(huge, t));
}

TEST_CASE(
    "local.exec: the supervisor is vnflow-hook, not a fork of the daemon; no secret on "
    "its command line or in its environment; hooks run 10 nicer than the daemon") {
  char tmpl[] = "/tmp/vnflow-local-exec-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  fs::path dir = tmpl;
  const actions::Registry registry = actions::Registry::standard();
  const actions::Kind* k = registry.find("local.exec");
  REQUIRE(k != nullptr);
  actions::Context ctx = context_in(dir);
  // The hook waits until the test has looked at it (or 10 s).
  json::object in{{"shell",
                   "i=0; while [ ! -e go ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); "
                   "done; echo \"$API_PASSWORD\" | wc -c; nice"},
                  {"env", json::object{{"API_PASSWORD", "s3cr3t-Zq81"}}}};
  actions::Outcome out;
  std::thread t([&] { out = k->run(in, ctx); });

  std::vector<int> sups;
  for (int i = 0; i < 500 && sups.empty(); ++i) {
    sups = children_named("vnflow-hook");
    if (sups.empty())
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string helper;
  REQUIRE(sups.size() == 1);
  errno = 0;
  const int own_nice = ::getpriority(PRIO_PROCESS, 0);
  // The supervisor is not dumpable: only root reads its /proc files.
  if (::geteuid() == 0) {
    std::string proc = "/proc/" + std::to_string(sups[0]);
    std::error_code ec;
    helper = fs::read_symlink(proc + "/exe", ec).string();
    CHECK(fs::path(helper).filename() == "vnflow-hook");
    CHECK(helper != fs::read_symlink("/proc/self/exe").string());
    std::string cmdline = slurp(proc + "/cmdline");
    std::string env_block = slurp(proc + "/environ");
    CHECK(cmdline.find("s3cr3t") == std::string::npos);
    CHECK(env_block.find("s3cr3t") == std::string::npos);
    CHECK(env_block.empty());
    CHECK(nice_of(sups[0]) == own_nice);  // the supervisor keeps the daemon's priority
  }
  std::ofstream(dir / "go") << "";
  t.join();
  REQUIRE(out.ok);
  // The hook: 10 nicer than the daemon (a test run niced, as the package build runs it, too).
  CHECK(out.outputs.as_object().at("stdout").as_string() ==
        "12\n" + std::to_string(std::min(own_nice + 10, 19)) + "\n");

  SECTION("a supervisor given no valid plan says so and runs nothing") {
    if (helper.empty())
      return;  // not root: its path was not readable
    int fd = ::memfd_create("plan", 0);
    REQUIRE(fd >= 0);
    REQUIRE(::write(fd, "garbage", 7) == 7);
    int err[2];
    REQUIRE(::pipe(err) == 0);
    // Out of the way of the dup2 targets (2 and 5), so that one cannot clobber the other.
    auto move_high = [](int& f) {
      int high = ::fcntl(f, F_DUPFD_CLOEXEC, 64);
      ::close(f);
      f = high;
    };
    move_high(fd);
    move_high(err[1]);
    REQUIRE((fd >= 64 && err[1] >= 64));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd, 5);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    char* argv[] = {const_cast<char*>("vnflow-hook"), nullptr};
    char* envp[] = {nullptr};
    pid_t pid = 0;
    REQUIRE(::posix_spawn(&pid, helper.c_str(), &fa, nullptr, argv, envp) == 0);
    posix_spawn_file_actions_destroy(&fa);
    ::close(err[1]);
    ::close(fd);
    std::string msg;
    char buf[256];
    for (ssize_t r; (r = ::read(err[0], buf, sizeof buf)) > 0;)
      msg.append(buf, static_cast<size_t>(r));
    ::close(err[0]);
    int st = 0;
    REQUIRE(::waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 125);
    CHECK(msg.find("no valid plan") != std::string::npos);
  }
  fs::remove_all(dir);
}

TEST_CASE("local.exec: a hook cannot forge its exit status through its supervisor's report pipe") {
  // The supervisor reports the hook's wait status on its fd 3. A dumpable supervisor let a
  // hook of the daemon's own user open /proc/<supervisor>/fd/3 and write a status of 0
  // before failing; the daemon then took the failure for a success. Root may open any
  // process's fds, so the daemon here is a child of the test running as nobody.
  if (::geteuid() != 0) {
    WARN("not root: cannot become nobody to run a daemon of another user; not run");
    return;
  }
  char tmpl[] = "/tmp/vnflow-local-exec-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  fs::path dir = tmpl;
  fs::permissions(dir, fs::perms::all);
  std::string forge =
      "printf '\\000\\000\\000\\000' > /proc/$PPID/fd/3 && echo forged >&2; sleep 0.2; exit 7";
  const actions::Registry registry = actions::Registry::standard();
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0)
      ::_exit(3);
    actions::Context ctx = context_in(dir);
    actions::Outcome out = registry.find("local.exec")->run(json::object{{"shell", forge}}, ctx);
    // 0: judged as the hook really ended; 1: the forged status was believed.
    ::_exit(out.ok ? 1 : out.message.find("exit status 7") != std::string::npos ? 0 : 2);
  }
  int st = 0;
  REQUIRE(::waitpid(pid, &st, 0) == pid);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  fs::remove_all(dir);
}
