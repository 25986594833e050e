// The heat.* actions: OpenStack Heat stack lifecycle as idempotent calls.
//
// Idempotency, as the executor relies on it (a re-dispatch after a crash carries the same
// key and inputs):
//   heat.stack.create   the stack name comes from the instance; an existing live stack of
//                       that name is adopted instead of a second one being created;
//   heat.stack.wait     read-only; polls through the executor (Outcome::poll);
//   heat.stack.update   PATCH of the same parameters again is harmless;
//   heat.stack.delete   404 means done;
//   heat.resource.mark_unhealthy  marking twice is harmless.
#include "actions/internal/heat.h"

#include <algorithm>
#include <map>
#include <set>

#include <boost/json.hpp>

#include "actions/actions.h"
#include "actions/internal/http.h"
#include "actions/internal/inputs.h"
#include "actions/internal/kinds.h"
#include "actions/internal/openstack.h"

namespace actions {

namespace {

using openstack::Session;

struct Target {
  std::shared_ptr<Session> session;
  json::object extra;
};

// The session for the VIM the state names; an Outcome on failure.
bool open_vim(openstack::Client& client, const json::object& in, const Context& ctx,
              const char* action, Target& t, Outcome& fail) {
  std::string id = str_in(in, "vim_id");
  if (id.empty()) {
    fail = Outcome::failure(ErrorClass::kInvalid, std::string(action) + ": no vim_id");
    return false;
  }
  if (!ctx.vim) {
    fail = Outcome::failure(ErrorClass::kInvalid,
                            std::string(action) + ": this daemon has no VIM registry");
    return false;
  }
  auto rec = ctx.vim(id);
  if (!rec.ok()) {
    fail = Outcome::failure(ErrorClass::kInvalid, std::string(action) + ": VIM \"" + id +
                                                      "\": " + rec.status().message());
    return false;
  }
  const json::object& r = rec.value();
  std::string type = r.contains("type") && r.at("type").is_string()
                         ? std::string(r.at("type").get_string())
                         : std::string();
  if (type != "openstack") {
    fail = Outcome::failure(ErrorClass::kInvalid, std::string(action) + ": VIM \"" + id +
                                                      "\" is a " + (type.empty() ? "?" : type) +
                                                      " VIM, not openstack");
    return false;
  }
  const auto* access = r.if_contains("access");
  if (access == nullptr || !access->is_object()) {
    fail = Outcome::failure(ErrorClass::kInvalid,
                            std::string(action) + ": VIM \"" + id + "\" has no access info");
    return false;
  }
  auto cloud = openstack::cloud_from_json(access->get_object());
  if (!cloud.ok()) {
    fail = Outcome::failure(ErrorClass::kInvalid, std::string(action) + ": VIM \"" + id +
                                                      "\": " + cloud.status().message());
    return false;
  }
  t.session = client.session(cloud.value());
  if (auto* e = r.if_contains("extra"); e != nullptr && e->is_object())
    t.extra = e->get_object();
  return true;
}

// The `files` of a create or update: the package's, plus the files the VIM's own Heat
// environment names (the package's win on a name clash).
json::object stack_files(const json::object& in, const Target& t) {
  json::object files;
  if (auto* f = in.if_contains("files"); f != nullptr && f->is_object())
    files = f->get_object();
  if (auto* vf = t.extra.if_contains("heat_files"); vf != nullptr && vf->is_object()) {
    for (const auto& [k, v] : vf->get_object()) {
      if (!files.contains(k))
        files[k] = v;
    }
  }
  return files;
}

// A heat.* action: resolves the state's VIM to a Keystone session, then does its call.
class HeatAction : public Action {
 public:
  HeatAction(const char* name, std::shared_ptr<openstack::Client> client)
      : name_(name), client_(std::move(client)) {}
  Outcome run(const json::object& in, const Context& ctx) const final {
    Target t;
    Outcome fail;
    if (!open_vim(*client_, in, ctx, name_, t, fail))
      return fail;
    Outcome out = call(in, ctx, t);
    // Messages quote the servers' answers; a server that echoes a credential does not get
    // it into the history.
    if (!out.ok && out.poll_after_ms <= 0)
      out.message = scrub(std::move(out.message), t.session->secrets());
    if (out.poll_after_ms > 0 && out.outputs.is_object()) {
      if (auto* e = out.outputs.get_object().if_contains("last_error"); e && e->is_string())
        *e = scrub(std::string(e->get_string()), t.session->secrets());
    }
    return out;
  }

 protected:
  base::Clock& clock() const { return client_->clock(); }

 protected:
  virtual Outcome call(const json::object& in, const Context& ctx, const Target& t) const = 0;

 private:
  const char* name_;
  std::shared_ptr<openstack::Client> client_;
};

// "name/id" -> "/stacks/name/id"; "name" -> "/stacks/name".
std::string stack_path(const std::string& ref) {
  auto slash = ref.find('/');
  if (slash == std::string::npos)
    return "/stacks/" + http::percent_encode(ref);
  return "/stacks/" + http::percent_encode(ref.substr(0, slash)) + "/" +
         http::percent_encode(ref.substr(slash + 1));
}

// The "name/id" at the end of a Heat link or Location header.
std::string ref_from_link(const std::string& href) {
  auto pos = href.rfind("/stacks/");
  if (pos == std::string::npos)
    return {};
  return href.substr(pos + 8);
}

struct StackInfo {
  bool found = false;
  std::string name, id, status, reason;
  json::object outputs;
  // Heat's clock: when the stack was created / last updated, and "now" from the Date header.
  std::chrono::system_clock::time_point created, updated, server_now;
};

// GET a stack by "name" or "name/id". By name alone Heat answers 302 to name/id.
bool show_stack(Session& s, const std::string& ref, std::chrono::steady_clock::time_point dl,
                StackInfo& info, openstack::CallError& err) {
  std::string path = stack_path(ref);
  auto r = s.call("orchestration", "GET", path, nullptr, {200, 302, 404}, dl, "GET " + path);
  if (!r.ok) {
    err = r.error;
    return false;
  }
  if (r.reply.status == 404) {
    info.found = false;
    return true;
  }
  if (r.reply.status == 302) {
    std::string full = ref_from_link(r.reply.location);
    if (full.empty() || full == ref) {
      err = {ErrorClass::kTransient, "GET " + path + ": a redirect without a stack id", 302};
      return false;
    }
    return show_stack(s, full, dl, info, err);
  }
  const json::value* st =
      r.reply.body.is_object() ? r.reply.body.get_object().if_contains("stack") : nullptr;
  if (st == nullptr || !st->is_object()) {
    err = {ErrorClass::kTransient, "GET " + path + ": an answer without a stack", 200};
    return false;
  }
  const auto& o = st->get_object();
  info.found = true;
  info.name = str_in(o, "stack_name");
  info.id = str_in(o, "id");
  info.status = str_in(o, "stack_status");
  info.reason = str_in(o, "stack_status_reason");
  info.created = openstack::parse_iso_time(str_in(o, "creation_time"));
  info.updated = openstack::parse_iso_time(str_in(o, "updated_time"));
  info.server_now = r.reply.date;
  if (auto* outs = o.if_contains("outputs"); outs != nullptr && outs->is_array()) {
    for (const auto& x : outs->get_array()) {
      if (!x.is_object())
        continue;
      const auto& xo = x.get_object();
      std::string k = str_in(xo, "output_key");
      if (!k.empty())
        info.outputs[k] = xo.contains("output_value") ? xo.at("output_value") : json::value();
    }
  }
  return true;
}

bool live(const StackInfo& i) {
  return i.found && i.status.rfind("DELETE_", 0) != 0;
}

class StackCreate final : public HeatAction {
 public:
  explicit StackCreate(std::shared_ptr<openstack::Client> c)
      : HeatAction("heat.stack.create", std::move(c)) {}

  Outcome call(const json::object& in, const Context& ctx, const Target& t) const override {
    std::string name = str_in(in, "name");
    if (name.empty())
      return Outcome::failure(ErrorClass::kInvalid, "heat.stack.create: no stack name");
    std::string what = "heat.stack.create of stack \"" + name + "\"";
    // Read back first: a re-dispatch after a crash finds the stack the first call made.
    StackInfo info;
    openstack::CallError err;
    if (!show_stack(*t.session, name, ctx.deadline, info, err))
      return Outcome::failure(err.error_class, what + ": " + err.message);
    if (live(info))
      return adopted(info);
    if (info.found)
      return Outcome::failure(ErrorClass::kTransient,
                              what + ": a stack of that name is still being deleted");

    json::object body{{"stack_name", name}, {"disable_rollback", true}};
    body["template"] = in.contains("template") ? in.at("template") : json::value("");
    json::object files = stack_files(in, t);
    // The VIM may carry an environment of its own (a resource_registry mapping types
    // this cloud provides differently) with the files it names.
    json::value env = in.contains("environment") ? in.at("environment") : json::value();
    if (auto* ve = t.extra.if_contains("heat_environment"); ve != nullptr && !ve->is_null()) {
      if (env.is_null() || (env.is_object() && env.get_object().empty()))
        env = *ve;
    }
    if (!files.empty())
      body["files"] = std::move(files);
    if (!env.is_null())
      body["environment"] = std::move(env);
    if (auto* p = in.if_contains("parameters"); p != nullptr && p->is_object())
      body["parameters"] = *p;
    body["timeout_mins"] = int_in(in, "timeout_mins", 60);
    json::value bv = std::move(body);
    auto r = t.session->call("orchestration", "POST", "/stacks", &bv, {201, 409}, ctx.deadline,
                             "POST /stacks");
    if (!r.ok) {
      return Outcome::failure(r.error.error_class, what + ": " + r.error.message);
    }
    if (r.reply.status == 409) {
      // Created by a concurrent or earlier call we did not see answer: adopt it.
      if (!show_stack(*t.session, name, ctx.deadline, info, err))
        return Outcome::failure(err.error_class, what + ": " + err.message);
      if (live(info))
        return adopted(info);
      return Outcome::failure(ErrorClass::kTransient,
                              what + ": HTTP 409 and no live stack of that name");
    }
    std::string id;
    if (r.reply.body.is_object()) {
      if (auto* st = r.reply.body.get_object().if_contains("stack");
          st != nullptr && st->is_object())
        id = str_in(st->get_object(), "id");
    }
    if (id.empty())
      return Outcome::failure(ErrorClass::kTransient, what + ": HTTP 201 without a stack id");
    return Outcome::success(json::object{
        {"stack_id", id}, {"stack_name", name}, {"stack", name + "/" + id}, {"adopted", false}});
  }

 private:
  static Outcome adopted(const StackInfo& i) {
    return Outcome::success(json::object{{"stack_id", i.id},
                                         {"stack_name", i.name},
                                         {"stack", i.name + "/" + i.id},
                                         {"adopted", true}});
  }
};

class StackWait final : public HeatAction {
 public:
  explicit StackWait(std::shared_ptr<openstack::Client> c)
      : HeatAction("heat.stack.wait", std::move(c)) {}

  Outcome call(const json::object& in, const Context& ctx, const Target& t) const override {
    std::string ref = str_in(in, "stack");
    std::string until = str_in(in, "until", "CREATE_COMPLETE");
    int64_t every = std::clamp<int64_t>(int_in(in, "poll_ms", 1000), 50, 60000);
    std::string what = "heat.stack.wait for stack \"" + ref + "\" to reach " + until;
    if (ref.empty())
      return Outcome::failure(ErrorClass::kInvalid, "heat.stack.wait: no stack");
    if (until != "CREATE_COMPLETE" && until != "UPDATE_COMPLETE" && until != "DELETE_COMPLETE" &&
        until != "GONE")
      return Outcome::failure(ErrorClass::kInvalid, what +
                                                        ": \"until\" is one of CREATE_COMPLETE, "
                                                        "UPDATE_COMPLETE, DELETE_COMPLETE, GONE");
    StackInfo info;
    openstack::CallError err;
    // GONE: the name is free again (Heat refuses a new stack of that name until then).
    std::string lookup = until == "GONE" ? ref.substr(0, ref.find('/')) : ref;
    if (!show_stack(*t.session, lookup, ctx.deadline, info, err)) {
      if (err.error_class ==
          ErrorClass::kTransient)  // Heat restarting: keep polling within the timeout
        return Outcome::poll(every * 2, json::object{{"last_error", err.message}});
      return Outcome::failure(err.error_class, what + ": " + err.message);
    }
    if (!info.found) {
      if (until == "GONE" || until == "DELETE_COMPLETE")
        return Outcome::success(
            json::object{{"status", "GONE"}, {"reason", ""}, {"outputs", json::object{}}});
      return Outcome::failure(ErrorClass::kFailed, what + ": the stack does not exist");
    }
    if (info.status == until)
      return done(info);
    if (until == "GONE" && info.status == "DELETE_COMPLETE")
      return Outcome::poll(every);  // soft-deleted; the name frees a moment later
    if (info.status.size() > 7 && info.status.compare(info.status.size() - 7, 7, "_FAILED") == 0)
      return Outcome::failure(ErrorClass::kFailed, what + ": " + info.status + ": " + info.reason);
    if (info.status.find("_IN_PROGRESS") != std::string::npos) {
      if (until != "GONE" && until != "DELETE_COMPLETE" && stalled(ctx, t, info))
        return resume(ctx, t, info, what, every);
      return Outcome::poll(every, json::object{{"status", info.status}});
    }
    // A stack created and then updated (an operator's `stack update --existing`, or a
    // resume below) is complete too.
    if (until == "CREATE_COMPLETE" && info.status == "UPDATE_COMPLETE")
      return done(info);
    // A finished state of another action (e.g. CREATE_COMPLETE while waiting for an update
    // that has not started yet is not possible with PATCH 202; treat it as unexpected).
    if (until == "UPDATE_COMPLETE" && info.status == "CREATE_COMPLETE")
      return Outcome::poll(every, json::object{{"status", info.status}});
    return Outcome::failure(
        ErrorClass::kFailed,
        what + ": the stack is " + info.status + (info.reason.empty() ? "" : ": " + info.reason));
  }

 private:
  // A stack that has been IN_PROGRESS with no new event (nested ones included) for the
  // VIM's heat_stall_secs (default 600; 0 = never) is taken to be orphaned: its Heat engine
  // died mid-operation, and a convergence engine does not pick such a stack up again.
  // Times are Heat's own (Date header), so clock skew between the hosts does not matter.
  bool stalled(const Context& ctx, const Target& t, const StackInfo& info) const {
    int64_t stall = int_in(t.extra, "heat_stall_secs", 600);
    if (stall <= 0)
      return false;
    auto now =
        info.server_now.time_since_epoch().count() != 0
            ? info.server_now
            : std::chrono::system_clock::time_point(std::chrono::milliseconds(clock().wall_ms()));
    auto last = std::max(info.created, info.updated);
    auto limit = std::chrono::seconds(stall);
    if (last.time_since_epoch().count() == 0 || now - last < limit)
      return false;
    std::string path = stack_path(info.name + "/" + info.id) +
                       "/events?sort_dir=desc&sort_keys=event_time&limit=1&nested_depth=5";
    auto r =
        t.session->call("orchestration", "GET", path, nullptr, {200}, ctx.deadline, "GET " + path);
    if (!r.ok || !r.reply.body.is_object())
      return false;  // no verdict without the events
    const json::value* evs = r.reply.body.get_object().if_contains("events");
    if (evs != nullptr && evs->is_array()) {
      for (const auto& e : evs->get_array()) {
        if (e.is_object())
          last = std::max(last, openstack::parse_iso_time(str_in(e.get_object(), "event_time")));
      }
    }
    if (r.reply.date.time_since_epoch().count() != 0)
      now = r.reply.date;
    return now - last >= limit;
  }

  // An orphaned stack is resumed by an update that keeps everything (PATCH with no
  // changes): the convergence engine starts a new traversal from the stored template and
  // creates what is missing. The wait goes on; it ends at UPDATE_COMPLETE.
  static Outcome resume(const Context& ctx, const Target& t, const StackInfo& info,
                        const std::string& what, int64_t every) {
    std::string path = stack_path(info.name + "/" + info.id);
    json::value body = json::object{};
    auto r = t.session->call("orchestration", "PATCH", path, &body, {202}, ctx.deadline,
                             "PATCH " + path + " (resume a stalled stack)");
    if (!r.ok) {
      if (r.error.error_class == ErrorClass::kTransient)
        return Outcome::poll(every * 2, json::object{{"last_error", r.error.message}});
      return Outcome::failure(r.error.error_class, what + ": " + info.status +
                                                       " made no progress and could not be "
                                                       "resumed: " +
                                                       r.error.message);
    }
    return Outcome::poll(every, json::object{{"status", info.status}, {"resumed", true}});
  }

  static Outcome done(const StackInfo& i) {
    return Outcome::success(json::object{{"status", i.status},
                                         {"reason", i.reason},
                                         {"stack", i.name + "/" + i.id},
                                         {"outputs", i.outputs}});
  }
};

class StackUpdate final : public HeatAction {
 public:
  explicit StackUpdate(std::shared_ptr<openstack::Client> c)
      : HeatAction("heat.stack.update", std::move(c)) {}

  Outcome call(const json::object& in, const Context& ctx, const Target& t) const override {
    std::string ref = str_in(in, "stack");
    std::string what = "heat.stack.update of stack \"" + ref + "\"";
    json::object body;
    if (auto* p = in.if_contains("parameters"); p != nullptr && p->is_object())
      body["parameters"] = *p;
    if (auto* tp = in.if_contains("template");
        tp != nullptr && tp->is_string() && !tp->get_string().empty()) {
      body["template"] = *tp;
      body["files"] = stack_files(in, t);
    }
    body["timeout_mins"] = int_in(in, "timeout_mins", 60);
    json::value bv = std::move(body);
    auto r = t.session->call("orchestration", "PATCH", stack_path(ref), &bv, {202}, ctx.deadline,
                             "PATCH " + stack_path(ref));
    if (!r.ok)
      return Outcome::failure(r.error.error_class, what + ": " + r.error.message);
    return Outcome::success(json::object{{"stack", ref}});
  }
};

class StackDelete final : public HeatAction {
 public:
  explicit StackDelete(std::shared_ptr<openstack::Client> c)
      : HeatAction("heat.stack.delete", std::move(c)) {}

  // With wait (the default), the call reads back first and answers only once the stack's
  // name is free again (GET by name = 404): each poll GETs; a live stack is DELETEd.
  Outcome call(const json::object& in, const Context& ctx, const Target& t) const override {
    std::string ref = str_in(in, "stack");
    if (ref.empty())
      return Outcome::success(json::object{{"gone", true}});  // nothing was ever created
    bool wait = true;
    if (auto* w = in.if_contains("wait"); w != nullptr && w->is_bool())
      wait = w->get_bool();
    int64_t every = std::clamp<int64_t>(int_in(in, "poll_ms", 1000), 50, 60000);
    std::string what = "heat.stack.delete of stack \"" + ref + "\"";
    if (wait) {
      StackInfo info;
      openstack::CallError err;
      if (!show_stack(*t.session, ref.substr(0, ref.find('/')), ctx.deadline, info, err)) {
        if (err.error_class == ErrorClass::kTransient)
          return Outcome::poll(every * 2, json::object{{"last_error", err.message}});
        return Outcome::failure(err.error_class, what + ": " + err.message);
      }
      if (!info.found)
        return Outcome::success(json::object{{"gone", true}});
      if (info.status == "DELETE_IN_PROGRESS" || info.status == "DELETE_COMPLETE")
        return Outcome::poll(every, json::object{{"status", info.status}});
      if (info.status == "DELETE_FAILED")
        return Outcome::failure(ErrorClass::kFailed, what + ": DELETE_FAILED: " + info.reason);
      ref = info.name + "/" + info.id;
    }
    auto r = t.session->call("orchestration", "DELETE", stack_path(ref), nullptr, {204, 404},
                             ctx.deadline, "DELETE " + stack_path(ref));
    if (!r.ok) {
      if (wait && r.error.error_class == ErrorClass::kTransient)
        return Outcome::poll(every * 2, json::object{{"last_error", r.error.message}});
      return Outcome::failure(r.error.error_class, what + ": " + r.error.message);
    }
    if (!wait || r.reply.status == 404)
      return Outcome::success(json::object{{"gone", r.reply.status == 404}});
    return Outcome::poll(every, json::object{{"status", "DELETE_IN_PROGRESS"}});
  }
};

class StackOutputs final : public HeatAction {
 public:
  explicit StackOutputs(std::shared_ptr<openstack::Client> c)
      : HeatAction("heat.stack.outputs", std::move(c)) {}

  Outcome call(const json::object& in, const Context& ctx, const Target& t) const override {
    std::string ref = str_in(in, "stack");
    StackInfo info;
    openstack::CallError err;
    if (!show_stack(*t.session, ref, ctx.deadline, info, err))
      return Outcome::failure(err.error_class,
                              "heat.stack.outputs of \"" + ref + "\": " + err.message);
    if (!info.found)
      return Outcome::failure(ErrorClass::kFailed, "heat.stack.outputs: no stack \"" + ref + "\"");
    return Outcome::success(json::object{{"status", info.status}, {"outputs", info.outputs}});
  }
};

class MarkUnhealthy final : public HeatAction {
 public:
  explicit MarkUnhealthy(std::shared_ptr<openstack::Client> c)
      : HeatAction("heat.resource.mark_unhealthy", std::move(c)) {}

  Outcome call(const json::object& in, const Context& ctx, const Target& t) const override {
    std::string ref = str_in(in, "stack");
    std::string res = str_in(in, "resource");
    std::string path = stack_path(ref) + "/resources/" + http::percent_encode(res);
    json::value body = json::object{
        {"mark_unhealthy", true}, {"resource_status_reason", str_in(in, "reason", "vnflow heal")}};
    auto r = t.session->call("orchestration", "PATCH", path, &body, {200}, ctx.deadline,
                             "PATCH " + path);
    if (!r.ok)
      return Outcome::failure(r.error.error_class, "heat.resource.mark_unhealthy of \"" + res +
                                                       "\" in stack \"" + ref +
                                                       "\": " + r.error.message);
    return Outcome::success(json::object{{"stack", ref}, {"resource", res}});
  }
};

// added / removed / healed relative to `previous`. A healed VNFC keeps its VDU and its
// (member) stack and gets a new id; it is neither added nor removed.
void vnfc_changes(json::object& inv, const json::array& previous, const json::array& healed_ids) {
  const json::array& now = inv["vnfcs"].as_array();
  auto id_of = [](const json::value& v) {
    return v.is_object() ? str_in(v.get_object(), "id") : std::string();
  };
  auto has_id = [&](const json::array& list, const std::string& id) {
    return std::any_of(list.begin(), list.end(),
                       [&](const json::value& v) { return id_of(v) == id; });
  };
  json::array added, removed, healed;
  std::set<std::string> replaced_new, replaced_old;
  for (const auto& hid : healed_ids) {
    if (!hid.is_string())
      continue;
    std::string old_id(hid.get_string());
    for (const auto& o : previous) {
      if (id_of(o) != old_id)
        continue;
      const auto& oo = o.get_object();
      for (const auto& n : now) {
        const auto& no = n.get_object();
        if (str_in(no, "vdu") == str_in(oo, "vdu") &&
            str_in(no, "stack_id") == str_in(oo, "stack_id") && !replaced_new.count(id_of(n))) {
          healed.push_back(n);
          replaced_new.insert(id_of(n));
          replaced_old.insert(old_id);
          break;
        }
      }
    }
  }
  for (const auto& n : now) {
    if (!has_id(previous, id_of(n)) && !replaced_new.count(id_of(n)))
      added.push_back(n);
  }
  for (const auto& o : previous) {
    if (!has_id(now, id_of(o)) && !replaced_old.count(id_of(o)))
      removed.push_back(o);
  }
  inv["added"] = std::move(added);
  inv["removed"] = std::move(removed);
  inv["healed"] = std::move(healed);
}

class Resources final : public HeatAction {
 public:
  explicit Resources(std::shared_ptr<openstack::Client> c)
      : HeatAction("heat.resources", std::move(c)) {}

  Outcome call(const json::object& in, const Context& ctx, const Target& t) const override {
    std::string ref = str_in(in, "stack");
    int64_t depth = std::clamp<int64_t>(int_in(in, "nested_depth", 5), 0, 10);
    std::string path =
        stack_path(ref) + "/resources?nested_depth=" + std::to_string(depth) + "&with_detail=true";
    auto r =
        t.session->call("orchestration", "GET", path, nullptr, {200}, ctx.deadline, "GET " + path);
    if (!r.ok)
      return Outcome::failure(r.error.error_class,
                              "heat.resources of stack \"" + ref + "\": " + r.error.message);
    json::array list;
    if (r.reply.body.is_object()) {
      if (auto* rs = r.reply.body.get_object().if_contains("resources");
          rs != nullptr && rs->is_array())
        list = rs->get_array();
    }
    json::object vdus, cps;
    if (auto* v = in.if_contains("vdus"); v != nullptr && v->is_object())
      vdus = v->get_object();
    if (auto* c = in.if_contains("cps"); c != nullptr && c->is_object())
      cps = c->get_object();
    json::object inv = heat_inventory(list, vdus, cps);
    json::array previous, healed_ids;
    if (auto* p = in.if_contains("previous"); p != nullptr && p->is_array())
      previous = p->get_array();
    if (auto* h = in.if_contains("healed"); h != nullptr && h->is_array())
      healed_ids = h->get_array();
    vnfc_changes(inv, previous, healed_ids);
    return Outcome::success(std::move(inv));
  }
};

}  // namespace

json::object heat_inventory(const json::array& resources, const json::object& vdus,
                            const json::object& cps) {
  json::array out;
  struct Res {
    std::string name, type, status, physical_id, stack, created;
    json::object attributes;
  };
  std::vector<Res> all;
  for (const auto& x : resources) {
    if (!x.is_object())
      continue;
    const auto& o = x.get_object();
    Res r;
    r.name = str_in(o, "resource_name");
    r.type = str_in(o, "resource_type");
    r.status = str_in(o, "resource_status");
    r.physical_id = str_in(o, "physical_resource_id");
    r.created = str_in(o, "creation_time");
    if (auto* links = o.if_contains("links"); links != nullptr && links->is_array()) {
      for (const auto& l : links->get_array()) {
        if (l.is_object() && str_in(l.get_object(), "rel") == "stack")
          r.stack = ref_from_link(str_in(l.get_object(), "href"));
      }
    }
    if (auto* a = o.if_contains("attributes"); a != nullptr && a->is_object())
      r.attributes = a->get_object();
    out.push_back(json::object{{"name", r.name},
                               {"type", r.type},
                               {"status", r.status},
                               {"physical_id", r.physical_id},
                               {"stack", r.stack}});
    all.push_back(std::move(r));
  }
  // VNFCs: each VDU resource, with the addresses of its CPs in the same (member) stack.
  json::array vnfcs;
  auto first_ip = [](const json::object& attrs) -> std::string {
    if (auto* f = attrs.if_contains("fixed_ips"); f != nullptr && f->is_array()) {
      for (const auto& ip : f->get_array()) {
        if (ip.is_object())
          return str_in(ip.get_object(), "ip_address");
      }
    }
    return {};
  };
  for (const auto& r : all) {
    if (!vdus.contains(r.name) || r.status.rfind("DELETE", 0) == 0)
      continue;
    json::object addresses;
    std::string first;
    for (const auto& c : all) {
      if (c.stack != r.stack || !cps.contains(c.name))
        continue;
      const auto& cp = cps.at(c.name);
      if (!cp.is_object() || str_in(cp.get_object(), "vdu") != r.name)
        continue;
      std::string ip = first_ip(c.attributes);
      if (!ip.empty()) {
        addresses[c.name] = ip;
        if (first.empty())
          first = ip;
      }
    }
    if (first.empty()) {
      first = str_in(r.attributes, "first_address");
      if (first.empty()) {
        if (auto* n = r.attributes.if_contains("networks"); n != nullptr && n->is_object()) {
          for (const auto& [net, ips] : n->get_object()) {
            if (ips.is_array() && !ips.get_array().empty() && ips.get_array()[0].is_string()) {
              first = std::string(ips.get_array()[0].get_string());
              break;
            }
          }
        }
      }
    }
    json::object v{{"id", r.physical_id},
                   {"vdu", r.name},
                   {"resource_id", r.physical_id},
                   {"stack_id", r.stack},
                   {"addresses", std::move(addresses)}};
    if (!first.empty())
      v["address"] = first;
    if (!r.created.empty())
      v["created"] = r.created;
    // A member of an aspect's group: its stack is a resource of the group's stack.
    std::string member_id = r.stack.substr(r.stack.find('/') + 1);
    for (const auto& g : all) {
      if (!member_id.empty() && g.physical_id == member_id && !g.stack.empty()) {
        v["group_stack"] = g.stack;
        v["group_resource"] = g.name;
        if (!g.created.empty())
          v["created"] = g.created;  // when the member joined the group
        break;
      }
    }
    vnfcs.push_back(std::move(v));
  }
  // By VDU, then oldest first (scale-in removes the first ones, or with is_reverse the last).
  std::stable_sort(vnfcs.begin(), vnfcs.end(), [](const json::value& a, const json::value& b) {
    auto key = [](const json::value& x) {
      const auto& o = x.get_object();
      return std::make_pair(std::string(o.at("vdu").as_string()), str_in(o, "created"));
    };
    return key(a) < key(b);
  });
  return json::object{{"resources", std::move(out)}, {"vnfcs", std::move(vnfcs)}};
}

void add_heat_actions(Registry& r, const Services& services) {
  auto c = std::make_shared<openstack::Client>(
      services.transport != nullptr ? *services.transport : http::Transport::real(),
      services.clock != nullptr ? *services.clock : base::Clock::real());
  add_heat_parameters(r);
  r.add("heat.stack.create",
        Signature::of(
            {"vim_id: string", "name: string", "template: string", "files?: map(string)",
             "environment?: any", "parameters?: map(any)", "timeout_mins?: integer"},
            {"stack_id: string", "stack_name: string", "stack: string", "adopted: boolean"}),
        std::make_shared<StackCreate>(c));
  r.add("heat.stack.wait",
        Signature::of({"vim_id: string", "stack: string", "until: string", "poll_ms?: integer"},
                      {"status: string", "reason: string", "outputs: map(any)", "stack?: string"}),
        std::make_shared<StackWait>(c));
  r.add("heat.stack.update",
        Signature::of({"vim_id: string", "stack: string", "parameters?: map(any)",
                       "template?: string", "files?: map(string)", "timeout_mins?: integer"},
                      {"stack: string"}),
        std::make_shared<StackUpdate>(c));
  r.add("heat.stack.delete",
        Signature::of({"vim_id: string", "stack: string", "wait?: boolean", "poll_ms?: integer"},
                      {"gone: boolean"}),
        std::make_shared<StackDelete>(c));
  r.add("heat.stack.outputs",
        Signature::of({"vim_id: string", "stack: string"}, {"status: string", "outputs: map(any)"}),
        std::make_shared<StackOutputs>(c));
  r.add("heat.resource.mark_unhealthy",
        Signature::of({"vim_id: string", "stack: string", "resource: string", "reason?: string"},
                      {"stack: string", "resource: string"}),
        std::make_shared<MarkUnhealthy>(c));
  r.add(
      "heat.resources",
      Signature::of({"vim_id: string", "stack: string", "nested_depth?: integer", "vdus?: map(any)",
                     "cps?: map(any)", "previous?: list(vnfc)", "healed?: list(string)"},
                    {"resources: list(any)", "vnfcs: list(vnfc)", "added: list(vnfc)",
                     "removed: list(vnfc)", "healed: list(vnfc)"}),
      std::make_shared<Resources>(c));
}

void add_heat_parameters(Registry& r) {
  r.add_inline("heat.parameters",
               Signature::of({"vnfd: any", "level?: string", "scale_status?: map(integer)",
                              "ext_virtual_links?: list(any)", "overrides?: map(any)"},
                             {"parameters: map(any)"}),
               [](const json::object& in, json::value&) { return heat_parameters(in); });
}

}  // namespace actions

namespace actions {

namespace {

void merge_into(json::object& dst, const json::object& src) {
  for (const auto& [k, v] : src) {
    auto* d = dst.if_contains(k);
    if (d != nullptr && d->is_object() && v.is_object())
      merge_into(d->get_object(), v.get_object());
    else
      dst[k] = v;
  }
}

const json::object& obj_at(const json::object& o, const char* k) {
  static const json::object empty;
  auto* v = o.if_contains(k);
  return v != nullptr && v->is_object() ? v->get_object() : empty;
}

}  // namespace

Outcome heat_parameters(const json::object& in) {
  const json::object& vnfd = obj_at(in, "vnfd");
  const json::object& vdus = obj_at(vnfd, "vdus");
  const json::object& cps = obj_at(vnfd, "cps");
  const json::object& aspects = obj_at(vnfd, "aspects");
  const json::object& levels = obj_at(vnfd, "levels");
  std::string level_id = str_in(in, "level");
  if (level_id.empty())
    level_id = str_in(vnfd, "default_level");
  const json::object& level = obj_at(levels, level_id.c_str());
  const json::object& level_vdus = obj_at(level, "vdu_instances");
  const json::object& level_scale = obj_at(level, "scale_info");
  const json::object& status = obj_at(in, "scale_status");

  json::object nfv_vdu;
  for (const auto& [vdu, dv] : vdus) {
    if (!dv.is_object())
      continue;
    const auto& d = dv.get_object();
    int64_t min = int_in(d, "min_instances", 1), max = int_in(d, "max_instances", min);
    int64_t n = int_in(level_vdus, std::string(vdu).c_str(), min);
    for (const auto& [asp, av] : aspects) {
      if (!av.is_object())
        continue;
      const json::object& deltas = obj_at(av.get_object(), "deltas");
      const json::object& per = obj_at(deltas, std::string(vdu).c_str());
      if (per.empty())
        continue;
      int64_t step = 0;
      for (const auto& [name, num] : per) {
        if (num.is_int64()) {
          step = num.get_int64();
          break;
        }
      }
      int64_t at = int_in(status, std::string(asp).c_str(), 0);
      int64_t base = int_in(level_scale, std::string(asp).c_str(), 0);
      n += (at - base) * step;
    }
    n = std::clamp<int64_t>(n, std::min(min, max), std::max(min, max));
    json::object v{{"flavor", std::string(vdu)}, {"desired_capacity", n}};
    std::string image = str_in(d, "sw_image");
    if (!image.empty())
      v["image"] = image;
    nfv_vdu[vdu] = std::move(v);
  }
  json::object nfv_cp;
  for (const auto& [cp, cv] : cps) {
    if (!cv.is_object())
      continue;
    std::string net = str_in(cv.get_object(), "virtual_link");
    if (auto* evl = in.if_contains("ext_virtual_links"); evl != nullptr && evl->is_array()) {
      for (const auto& l : evl->get_array()) {
        if (!l.is_object())
          continue;
        const auto* ext = l.get_object().if_contains("extCps");
        if (ext == nullptr || !ext->is_array())
          continue;
        for (const auto& e : ext->get_array()) {
          if (e.is_object() && str_in(e.get_object(), "cpdId") == cp)
            net = str_in(l.get_object(), "resourceId");
        }
      }
    }
    nfv_cp[cp] = json::object{{"network", net}};
  }
  json::object nfv{{"VDU", std::move(nfv_vdu)}, {"CP", std::move(nfv_cp)}};
  merge_into(nfv, obj_at(in, "overrides"));
  return Outcome::success(json::object{{"parameters", json::object{{"nfv", std::move(nfv)}}}});
}

}  // namespace actions
