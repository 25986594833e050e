// One operation in memory (stepper.h, Run): its secrets, its history values, the states
// on a cycle of its machine.
#include <algorithm>
#include <functional>

#include "engine/internal/stepper.h"

namespace engine {

using workflows::Machine;
using workflows::State;

namespace {

constexpr size_t kHistoryStringLimit = 4096;

// Collects the string leaves of `v` (or only those under secret-named fields) that are long
// enough to be worth scrubbing.
void collect_secrets(const json::value& v, bool all, std::vector<std::string>& out) {
  if (v.is_string()) {
    std::string_view sv = v.get_string();
    // The passwords of the URLs in it (a proxy setting): those alone, so that the URL's
    // redacted form (user:***@host, as views and the history show it) stays as it is.
    size_t len = 0;
    for (size_t from = 0, at;
         from < sv.size() &&
         (at = actions::url_password(sv.substr(from), &len)) != std::string_view::npos;
         from += at + len) {
      std::string_view pw = sv.substr(from + at, len);
      if (pw.size() >= 4 && pw != "***")
        out.emplace_back(pw);
    }
    if (all && sv.size() >= 4)
      out.emplace_back(sv);
    // Output usually ends in a newline that a message quoting it drops.
    size_t b = sv.find_first_not_of(" \t\r\n"), e = sv.find_last_not_of(" \t\r\n");
    if (all && b != std::string_view::npos && e - b + 1 >= 4 && e - b + 1 < sv.size())
      out.emplace_back(sv.substr(b, e - b + 1));
  } else if (v.is_array()) {
    for (const auto& x : v.get_array())
      collect_secrets(x, all, out);
  } else if (v.is_object()) {
    for (const auto& kv : v.get_object())
      collect_secrets(kv.value(), all || actions::is_secret_name(kv.key()), out);
  }
}

// A string for_history() cut already: the first kHistoryStringLimit bytes, then
// "...(N bytes)".
bool already_cut(std::string_view s) {
  if (s.size() <= kHistoryStringLimit)
    return false;
  std::string_view tail = s.substr(kHistoryStringLimit);
  constexpr std::string_view kOpen = "...(", kClose = " bytes)";
  if (tail.size() <= kOpen.size() + kClose.size() || tail.substr(0, kOpen.size()) != kOpen ||
      tail.substr(tail.size() - kClose.size()) != kClose)
    return false;
  std::string_view n = tail.substr(kOpen.size(), tail.size() - kOpen.size() - kClose.size());
  return std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

json::value for_history(const json::value& v, const std::vector<std::string>& secrets) {
  json::value r = actions::redact(v);
  std::function<void(json::value&)> cut = [&](json::value& x) {
    if (x.is_string() && !secrets.empty())
      x = json::string(actions::scrub(std::string(x.get_string()), secrets));
    // A number that is a known secret (secret_fields' PIN, echoed by a later answer).
    if (x.is_number() && !secrets.empty() &&
        std::find(secrets.begin(), secrets.end(), json::serialize(x)) != secrets.end())
      x = "***";
    if (x.is_string() && x.get_string().size() > kHistoryStringLimit &&
        !already_cut(x.get_string())) {
      size_t n = x.get_string().size();
      std::string s(x.get_string().subview(0, kHistoryStringLimit));
      x = json::string(s + "...(" + std::to_string(n) + " bytes)");
    } else if (x.is_object()) {
      for (auto& kv : x.get_object())
        cut(kv.value());
    } else if (x.is_array()) {
      for (auto& i : x.get_array())
        cut(i);
    }
  };
  cut(r);
  return r;
}

bool Run::is_cyclic(int index) const {
  return cyclic && index >= 0 && static_cast<size_t>(index) < cyclic->size() &&
         (*cyclic)[static_cast<size_t>(index)] != 0;
}
int Run::visit() const {
  auto it = c.visits.find(c.cur);
  return is_cyclic(c.cur) && it != c.visits.end() ? it->second : 1;
}

void Run::learn_secrets(const json::value& v, bool all) {
  std::vector<std::string> found;
  collect_secrets(v, all, found);
  for (auto& f : found) {
    if (std::find(secrets.begin(), secrets.end(), f) == secrets.end())
      secrets.push_back(std::move(f));
  }
  // Longest first, so that a secret containing another is scrubbed whole.
  std::sort(secrets.begin(), secrets.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
}

std::shared_ptr<const std::vector<char>> cyclic_states(const Machine& m) {
  size_t n = m.states.size();
  std::vector<std::vector<int>> out(n);
  for (size_t v = 0; v < n; ++v) {
    const State& s = m.states[v];
    for (int w : {s.next, s.on_failure, s.body})
      if (w >= 0 && static_cast<size_t>(w) < n)
        out[v].push_back(w);
    for (const auto& c : s.choices)
      if (c.next >= 0 && static_cast<size_t>(c.next) < n)
        out[v].push_back(c.next);
  }
  auto res = std::make_shared<std::vector<char>>(n, 0);
  std::vector<int> index(n, -1), low(n, 0), stack;
  std::vector<char> on_stack(n, 0);
  int counter = 0;
  for (size_t root = 0; root < n; ++root) {
    if (index[root] >= 0)
      continue;
    std::vector<std::pair<int, size_t>> frames{{static_cast<int>(root), 0}};
    while (!frames.empty()) {
      auto& [v, i] = frames.back();
      auto uv = static_cast<size_t>(v);
      if (i == 0 && index[uv] < 0) {
        index[uv] = low[uv] = counter++;
        stack.push_back(v);
        on_stack[uv] = 1;
      }
      if (i < out[uv].size()) {
        int w = out[uv][i++];
        auto uw = static_cast<size_t>(w);
        if (index[uw] < 0)
          frames.emplace_back(w, 0);
        else if (on_stack[uw])
          low[uv] = std::min(low[uv], index[uw]);
        continue;
      }
      if (low[uv] == index[uv]) {
        std::vector<int> comp;
        int w;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack[static_cast<size_t>(w)] = 0;
          comp.push_back(w);
        } while (w != v);
        bool self_loop = std::find(out[uv].begin(), out[uv].end(), v) != out[uv].end();
        if (comp.size() > 1 || self_loop)
          for (int c : comp)
            (*res)[static_cast<size_t>(c)] = 1;
      }
      int done_v = v;
      frames.pop_back();
      if (!frames.empty()) {
        auto up = static_cast<size_t>(frames.back().first);
        low[up] = std::min(low[up], low[static_cast<size_t>(done_v)]);
      }
    }
  }
  return res;
}

}  // namespace engine
