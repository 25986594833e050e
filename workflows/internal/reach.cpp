// Which states an operation of the machine's flavour can reach: what the diagrams draw
// (plantuml.cpp, machine.cpp's dot). A choice whose conditions read only the VNFD takes one
// branch for every operation of the flavour (a package without a stack template never
// reaches the Heat steps).
#include <vector>

#include "workflows/internal/expr.h"
#include "workflows/internal/render.h"
#include "workflows/workflows.h"

namespace workflows {

namespace {

// True when `e` reads nothing but the VNFD: its names are `vnfd` alone (no request, instance,
// outputs, nor a map()/filter() element, which stand for what they range over).
bool reads_only_vnfd(const Expr& e) {
  if (e.op == Expr::Op::kRoot)
    return e.name == "vnfd";
  if (e.op == Expr::Op::kCall && (e.name == "map" || e.name == "filter"))
    return false;
  for (const auto& k : e.kids) {
    if (!reads_only_vnfd(*k))
      return false;
  }
  return true;
}

// Where a choice goes for every operation of this flavour: its conditions, when they read
// only the VNFD (the machine pins its facts), evaluated. -1 when one reads anything else
// (default(request.x, false) evaluates without a request, yet a request decides it): then
// every branch may be taken.
int taken(const Machine& m, const State& s) {
  Scope sc;
  sc.vnfd = &m.vnfd;
  for (const auto& c : s.choices) {
    if (!c.expr || !reads_only_vnfd(*c.expr))
      return -1;
    auto v = evaluate(*c.expr, sc);
    if (!v.ok() || !v.value().is_bool())
      return -1;
    if (v.value().get_bool())
      return c.next;
  }
  return s.next;
}

}  // namespace

FlavourReach flavour_reach(const Machine& m) {
  size_t n = m.states.size();
  FlavourReach r;
  r.fixed.assign(n, -1);
  r.reach.assign(n, false);
  std::vector<int> todo = {m.start};
  while (!todo.empty()) {
    int i = todo.back();
    todo.pop_back();
    if (i < 0 || static_cast<size_t>(i) >= n || r.reach[static_cast<size_t>(i)])
      continue;
    r.reach[static_cast<size_t>(i)] = true;
    const State& s = m.states[static_cast<size_t>(i)];
    todo.push_back(s.on_failure);
    todo.push_back(s.body);
    if (s.kind == StateKind::kChoice && (r.fixed[static_cast<size_t>(i)] = taken(m, s)) >= 0) {
      todo.push_back(r.fixed[static_cast<size_t>(i)]);
      continue;
    }
    todo.push_back(s.next);
    for (const auto& c : s.choices)
      todo.push_back(c.next);
  }
  return r;
}

}  // namespace workflows
