// The plan of one local.exec call, as the daemon hands it to its supervisor, vnflow-hook
// (hook_supervisor.cpp): what to run, where, as whom and how isolated. It travels in a
// memfd on the supervisor's fd 5, never on a command line: the hook's environment may hold
// secrets, and /proc/PID/cmdline is world-readable.
//
// Wire format: kHookPlanVersion, then each field as a 4-byte little-endian length and its
// bytes; a list is its count (a field) and then its items.
#ifndef VNFLOW_ACTIONS_INTERNAL_HOOK_PLAN_H_
#define VNFLOW_ACTIONS_INTERNAL_HOOK_PLAN_H_

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

namespace actions {

// Bumped with every change of the format: a daemon and a supervisor of different builds
// refuse each other with a clear message instead of misreading.
inline constexpr const char* kHookPlanVersion = "vnflow-hook-plan 1";
inline constexpr size_t kHookPlanMax = 64u << 20;

// How the hook is isolated (docs/security.md, "Hooks").
enum class Sandbox { kNone = 0, kMountNs = 1, kUserNs = 2 };

struct HookPlan {
  std::string exe;  // resolved path
  std::vector<std::string> argv, env, hidden;
  std::string work_dir;
  int run_uid = -1, run_gid = -1;
  Sandbox sandbox = Sandbox::kNone;
  int daemon_pid = 0;
  bool has_lock = false;  // fd 4 is the hook lock
};

// Writes all of `data` to `fd` (again after EINTR and short writes); false when it cannot.
// The daemon writes the plan with it, the supervisor its reports.
inline bool write_fully(int fd, const void* data, size_t n) {
  const char* c = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

namespace hook_plan_detail {
inline void put(std::string& out, const std::string& s) {
  uint32_t n = static_cast<uint32_t>(s.size());
  unsigned char len[4] = {static_cast<unsigned char>(n), static_cast<unsigned char>(n >> 8),
                          static_cast<unsigned char>(n >> 16), static_cast<unsigned char>(n >> 24)};
  out.append(reinterpret_cast<const char*>(len), 4);
  out += s;
}
inline void put_list(std::string& out, const std::vector<std::string>& v) {
  put(out, std::to_string(v.size()));
  for (const auto& s : v)
    put(out, s);
}

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  bool get(std::string& s) {
    if (in_.size() - pos_ < 4)
      return false;
    const auto* p = reinterpret_cast<const unsigned char*>(in_.data() + pos_);
    uint32_t n = p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
    pos_ += 4;
    if (in_.size() - pos_ < n)
      return false;
    s.assign(in_, pos_, n);
    pos_ += n;
    return true;
  }
  bool get_int(int& v) {
    std::string s;
    if (!get(s) || s.empty() || s.size() > 11)
      return false;
    char* end = nullptr;
    errno = 0;
    long x = std::strtol(s.c_str(), &end, 10);
    if (*end != '\0' || errno != 0 || x < INT_MIN || x > INT_MAX)
      return false;
    v = static_cast<int>(x);
    return true;
  }
  bool get_list(std::vector<std::string>& v) {
    int n = 0;
    // Each item takes 4 bytes at least: a count the rest cannot hold is refused before
    // anything is allocated.
    if (!get_int(n) || n < 0 || static_cast<size_t>(n) > (in_.size() - pos_) / 4)
      return false;
    v.resize(static_cast<size_t>(n));
    for (auto& s : v) {
      if (!get(s))
        return false;
    }
    return true;
  }
  bool at_end() const { return pos_ == in_.size(); }

 private:
  const std::string& in_;
  size_t pos_ = 0;
};
}  // namespace hook_plan_detail

inline std::string encode_hook_plan(const HookPlan& p) {
  using hook_plan_detail::put;
  std::string out;
  put(out, kHookPlanVersion);
  put(out, std::to_string(p.daemon_pid));
  put(out, std::to_string(static_cast<int>(p.sandbox)));
  put(out, std::to_string(p.run_uid));
  put(out, std::to_string(p.run_gid));
  put(out, p.has_lock ? "1" : "0");
  put(out, p.work_dir);
  put(out, p.exe);
  hook_plan_detail::put_list(out, p.argv);
  hook_plan_detail::put_list(out, p.env);
  hook_plan_detail::put_list(out, p.hidden);
  return out;
}

// False on anything but a complete plan of this version.
inline bool decode_hook_plan(const std::string& in, HookPlan& p) {
  hook_plan_detail::Reader r(in);
  std::string version;
  int sandbox = 0, lock = 0;
  if (!r.get(version) || version != kHookPlanVersion || !r.get_int(p.daemon_pid) ||
      !r.get_int(sandbox) || sandbox < 0 || sandbox > 2 || !r.get_int(p.run_uid) ||
      !r.get_int(p.run_gid) || !r.get_int(lock) || !r.get(p.work_dir) || !r.get(p.exe) ||
      !r.get_list(p.argv) || !r.get_list(p.env) || !r.get_list(p.hidden) || !r.at_end())
    return false;
  p.sandbox = static_cast<Sandbox>(sandbox);
  p.has_lock = lock == 1;
  return !p.exe.empty() && !p.argv.empty();
}

}  // namespace actions

#endif  // VNFLOW_ACTIONS_INTERNAL_HOOK_PLAN_H_
