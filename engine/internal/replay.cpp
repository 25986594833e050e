// replay --dry-run: re-drives an operation's machine against its recorded results.
#include <map>

#include <boost/json.hpp>

#include "actions/actions.h"
#include "engine/engine.h"
#include "engine/internal/cursor.h"
#include "engine/internal/vim_actions.h"

namespace engine {

namespace json = boost::json;

namespace {

struct Recorded {
  bool ok = false;
  json::value outputs;
  std::string action;
  std::string cls, message;
};

}  // namespace

base::Result<ReplayReport> replay_dry_run(Store& store, const OpRecord& op,
                                          const workflows::Machine& m) {
  auto hist = store.history(op.id);
  if (!hist.ok())
    return hist.status();
  ReplayReport rep;
  // What the recording did: the states it entered, in order, and each call's last result.
  std::vector<std::string> recorded_path;
  std::map<std::pair<std::string, int>, Recorded> results;
  json::value instance;
  bool ended = false;
  for (const auto& e : hist.value()) {
    if (e.kind == "op_processing" && e.data.is_object()) {
      if (const json::value* i = e.data.get_object().if_contains("instance"))
        instance = *i;
    }
    if (e.kind == "rollback_resumed" || e.kind == "compensating")
      break;  // the forward path is what replay re-drives
    bool enters = e.kind == "dispatched" || e.kind == "choice" || e.kind == "waiting" ||
                  (e.kind == "op_failed_temp" && !e.state.empty()) || e.kind == "op_completed";
    if (enters && !e.state.empty() && (recorded_path.empty() || recorded_path.back() != e.state))
      recorded_path.push_back(e.state);
    if (e.kind == "op_completed")
      ended = true;
    auto& r = results[{e.state, e.item}];
    if (e.kind == "dispatched" && e.data.is_object()) {
      if (const json::value* a = e.data.get_object().if_contains("action"))
        r.action = std::string(a->as_string());
    } else if (e.kind == "succeeded") {
      r.ok = true;
      r.outputs = e.data;
    } else if (e.kind == "failed") {
      r.ok = false;
      if (e.data.is_object()) {
        r.cls = std::string(e.data.at("class").as_string());
        r.message = std::string(e.data.at("message").as_string());
      }
    }
  }
  auto cur = Cursor{};
  cur.cur = m.start;
  json::value request = op.request;
  json::value opv = json::object{
      {"id", op.id}, {"operation", op.operation}, {"instance_id", op.instance_id}, {"attempt", 1}};
  std::vector<std::string> path;
  auto diverge = [&](std::string why) {
    rep.diverged = true;
    rep.divergence = std::move(why);
  };
  for (int guard = 0; guard < 10000 && !rep.diverged; ++guard) {
    if (cur.cur < 0 || static_cast<size_t>(cur.cur) >= m.states.size()) {
      diverge("the machine has no state at this point");
      break;
    }
    const workflows::State& s = m.states[static_cast<size_t>(cur.cur)];
    workflows::Scope sc;
    sc.request = &request;
    sc.instance = &instance;
    sc.vnfd = &m.vnfd;
    sc.op = &opv;
    sc.outputs = &cur.outputs;
    sc.segment = s.segment;
    bool final_succeed = s.kind == workflows::StateKind::kSucceed && s.next < 0;
    if (s.kind != workflows::StateKind::kSucceed || final_succeed) {
      size_t n = path.size();
      path.push_back(s.name);
      if (n >= recorded_path.size()) {
        if (!ended)
          break;  // the recording stops here (the operation is still running or failed)
        diverge("the machine goes on to \"" + s.name + "\"; the recording ended after \"" +
                (recorded_path.empty() ? std::string("(nothing)") : recorded_path.back()) + "\"");
        break;
      }
      if (recorded_path[n] != s.name) {
        diverge("step " + std::to_string(n + 1) + ": the machine enters \"" + s.name +
                "\"; the recording entered \"" + recorded_path[n] + "\"");
        break;
      }
    }
    switch (s.kind) {
      case workflows::StateKind::kSucceed:
        if (final_succeed) {
          rep.steps.push_back(s.name + " -> COMPLETED");
          guard = 1 << 20;
          break;
        }
        cur.cur = s.next;
        continue;
      case workflows::StateKind::kFail:
        rep.steps.push_back(s.name + " -> FAILED_TEMP");
        guard = 1 << 20;
        break;
      case workflows::StateKind::kWait:
        rep.steps.push_back(s.name + " -> " + m.states[static_cast<size_t>(s.next)].name);
        cur.cur = s.next;
        continue;
      case workflows::StateKind::kChoice: {
        int next = s.next;
        for (const auto& c : s.choices) {
          auto v = workflows::evaluate(*c.expr, sc);
          if (!v.ok() || !v.value().is_bool()) {
            diverge(s.name + ": when ${" + c.condition +
                    "} cannot be evaluated on the recorded values: " +
                    (v.ok() ? std::string("not a boolean") : v.status().message()));
            break;
          }
          if (v.value().get_bool()) {
            next = c.next;
            break;
          }
        }
        if (rep.diverged)
          break;
        rep.steps.push_back(s.name + " -> " + m.states[static_cast<size_t>(next)].name);
        cur.cur = next;
        continue;
      }
      case workflows::StateKind::kAction: {
        json::array values{nullptr};
        if (s.for_each_expr) {
          auto v = workflows::evaluate(*s.for_each_expr, sc);
          if (!v.ok() || !v.value().is_array()) {
            diverge(s.name + ": for_each cannot be evaluated on the recorded values");
            break;
          }
          values = v.value().get_array();
        }
        json::array outs;
        bool failed = false;
        for (size_t i = 0; i < values.size(); ++i) {
          int item = s.for_each.empty() ? -1 : static_cast<int>(i);
          auto it = results.find({s.name, item});
          if (it == results.end()) {
            if (!ended && path.size() >= recorded_path.size()) {
              failed = true;  // recording stops inside this state
              break;
            }
            diverge(s.name + (item >= 0 ? "[" + std::to_string(item) + "]" : "") +
                    ": the machine calls it; the recording has no such call");
            break;
          }
          if (!it->second.action.empty() && it->second.action != s.action) {
            diverge(s.name + ": the machine runs \"" + s.action + "\"; the recording ran \"" +
                    it->second.action + "\"");
            break;
          }
          if (actions::is_instance_action(s.action) || is_vim_action(s.action)) {
            sc.item = s.for_each.empty() ? nullptr : &values[i];
            sc.item_name = s.as;
            auto in = s.with.evaluate(sc);
            if (in.ok() && in.value().is_object()) {
              if (is_vim_action(s.action))
                run_vim_action(nullptr, s.action, in.value().get_object(), instance);
              else
                actions::run_instance_action(s.action, in.value().get_object(), instance);
            }
          }
          if (!it->second.ok) {
            failed = true;
            break;
          }
          outs.push_back(it->second.outputs);
        }
        if (rep.diverged)
          break;
        if (failed) {
          if (s.on_failure >= 0 && ended) {
            rep.steps.push_back(s.name + " -> " + m.states[static_cast<size_t>(s.on_failure)].name +
                                " (failure)");
            cur.cur = s.on_failure;
            continue;
          }
          rep.steps.push_back(s.name + " -> (recording ends here)");
          guard = 1 << 20;
          break;
        }
        cur.outputs[s.name] =
            s.for_each.empty() ? (outs.empty() ? json::value() : outs[0]) : json::value(outs);
        rep.steps.push_back(s.name + " -> " + m.states[static_cast<size_t>(s.next)].name);
        cur.cur = s.next;
        continue;
      }
    }
    if (guard >= (1 << 20))
      break;
  }
  return rep;
}

}  // namespace engine
