// What users ask of the engine: onboard, create, request, retry / rollback / fail /
// cancel, replay. Each is one short transaction on the Store; the daemon does the rest.
#include "engine/internal/commands.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <list>
#include <mutex>
#include <optional>
#include <random>

#include <boost/json.hpp>

#include "engine/engine.h"
#include "engine/internal/cursor.h"
#include "engine/internal/vim_actions.h"
#include "tosca/tosca.h"

namespace engine {

std::string_view to_string(OpState s) {
  switch (s) {
    case OpState::kStarting:
      return "STARTING";
    case OpState::kProcessing:
      return "PROCESSING";
    case OpState::kCompleted:
      return "COMPLETED";
    case OpState::kFailedTemp:
      return "FAILED_TEMP";
    case OpState::kFailed:
      return "FAILED";
    case OpState::kRollingBack:
      return "ROLLING_BACK";
    case OpState::kRolledBack:
      return "ROLLED_BACK";
  }
  return "?";
}

std::optional<OpState> parse_op_state(std::string_view s) {
  for (OpState o :
       {OpState::kStarting, OpState::kProcessing, OpState::kCompleted, OpState::kFailedTemp,
        OpState::kFailed, OpState::kRollingBack, OpState::kRolledBack}) {
    if (to_string(o) == s)
      return o;
  }
  return std::nullopt;
}

bool is_final(OpState s) {
  return s == OpState::kCompleted || s == OpState::kFailed || s == OpState::kRolledBack;
}

bool is_active(OpState s) {
  return s == OpState::kStarting || s == OpState::kProcessing || s == OpState::kRollingBack;
}

std::string new_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  uint64_t a = rng(), b = rng();
  a = (a & 0xffffffffffff0fffULL) | 0x0000000000004000ULL;  // version 4
  b = (b & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;  // variant 1
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xffff),
                static_cast<unsigned>(b >> 48),
                static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return buf;
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {

constexpr size_t kMaxDescriptionBytes = 4096;
constexpr int64_t kMaxScaleSteps = 1000;

}  // namespace

base::Status check_text(const char* what, const std::string& s, size_t max) {
  if (s.size() > max)
    return base::Status::InvalidArgument(std::string(what) + " is " + std::to_string(s.size()) +
                                         " bytes; the limit is " + std::to_string(max));
  if (!base::is_valid_utf8(s))
    return base::Status::InvalidArgument(std::string(what) + " is not UTF-8");
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f)
      return base::Status::InvalidArgument(std::string(what) + " holds a control character (code " +
                                           std::to_string(c) + ")");
  }
  // C1 controls (U+0080..U+009F) are two bytes in UTF-8: C2 80..C2 9F.
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    if (static_cast<unsigned char>(s[i]) == 0xc2 && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(s[i + 1]) <= 0x9f)
      return base::Status::InvalidArgument(std::string(what) + " holds a control character");
  }
  return base::Status::Ok();
}

base::Result<InstanceRecord> create_instance(Store& store, std::string_view package_id,
                                             std::string name, std::string description) {
  if (base::Status s = check_text("name", name, kMaxNameBytes); !s.ok())
    return s;
  if (base::Status s = check_text("description", description, kMaxDescriptionBytes); !s.ok())
    return s;
  auto pkg = store.get_package(package_id);
  if (!pkg.ok())
    return pkg.status();
  if (pkg.value().onboarding_state != "ONBOARDED" || pkg.value().operational_state != "ENABLED")
    return base::Status::FailedPrecondition("package " + pkg.value().id + " is " +
                                            pkg.value().onboarding_state + " and " +
                                            pkg.value().operational_state +
                                            "; instances are created only from ONBOARDED and "
                                            "ENABLED packages");
  InstanceRecord r;
  r.id = new_id();
  r.package_id = pkg.value().id;
  r.name = name.empty() ? "vnf-" + r.id.substr(0, 8) : name;
  r.instantiation_state = "NOT_INSTANTIATED";
  r.created_ms = now_ms();
  json::object rec{{"id", r.id},
                   {"name", r.name},
                   {"package_id", r.package_id},
                   {"vnfd_id", pkg.value().vnfd_id},
                   {"instantiation_state", "NOT_INSTANTIATED"}};
  if (!description.empty())
    rec["description"] = description;
  r.record = std::move(rec);
  base::Status s = store.create_instance(r);
  if (!s.ok())
    return s;
  return r;
}

namespace {

// What a process keeps of the stored packages it has loaded and the machines it has
// compiled from them. A package's content never changes once onboarded, so both are keyed
// by its content digest: a daemon serving the API loads and compiles each (package,
// operation, flavour) once, not on every request. A few of each, the most recent first.
template <typename T>
class RecentCache {
 public:
  explicit RecentCache(size_t cap) : cap_(cap) {}
  std::optional<T> get(const std::string& key) {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = items_.begin(); it != items_.end(); ++it) {
      if (it->first == key) {
        items_.splice(items_.begin(), items_, it);
        return items_.front().second;
      }
    }
    return std::nullopt;
  }
  void put(const std::string& key, T value) {
    std::lock_guard<std::mutex> l(mu_);
    items_.emplace_front(key, std::move(value));
    if (items_.size() > cap_)
      items_.pop_back();
  }

 private:
  size_t cap_;
  std::mutex mu_;
  std::list<std::pair<std::string, T>> items_;
};

struct Loaded {
  std::shared_ptr<const tosca::Package> pkg;
  base::Diagnostics diags;  // what loading it said (warnings), said again on each use
};
struct Compiled {
  std::shared_ptr<const workflows::Machine> m;
  base::Diagnostics diags;
};
RecentCache<Loaded> g_packages(8);
RecentCache<Compiled> g_machines(32);

std::shared_ptr<const tosca::Package> load_stored_package(Store& store,
                                                          const std::string& package_id,
                                                          base::Diagnostics& diags,
                                                          base::Status* err,
                                                          std::string* digest = nullptr) {
  auto rec = store.get_package(package_id);
  if (!rec.ok()) {
    *err = rec.status();
    return nullptr;
  }
  const std::string& key = rec.value().digest;
  if (digest != nullptr)
    *digest = key;
  if (!key.empty()) {
    if (auto hit = g_packages.get(key)) {
      diags.merge(hit->diags);
      return hit->pkg;
    }
  }
  auto bytes = store.package_bytes(rec.value().id);
  if (!bytes.ok()) {
    *err = bytes.status();
    return nullptr;
  }
  tosca::LoadOptions lo;
  lo.verify_digests = false;  // verified when it was onboarded; the bytes are the same
  base::Diagnostics mine;
  auto pkg =
      tosca::load_package_from_zip_bytes(rec.value().name, std::move(bytes).value(), lo, mine);
  diags.merge(mine);
  if (pkg == nullptr || mine.has_errors()) {
    *err = base::Status::Internal("the stored package " + package_id + " no longer loads");
    return nullptr;
  }
  if (!key.empty())
    g_packages.put(key, Loaded{pkg, mine});
  return pkg;
}

// workflows::compile of a stored package, once per (content, operation, flavour).
std::shared_ptr<const workflows::Machine> compile_stored(const tosca::Package& pkg,
                                                         const std::string& digest,
                                                         const std::string& operation,
                                                         const std::string& flavour,
                                                         base::Diagnostics& diags) {
  std::string key = digest.empty() ? "" : digest + "\n" + operation + "\n" + flavour;
  if (!key.empty()) {
    if (auto hit = g_machines.get(key)) {
      diags.merge(hit->diags);
      return hit->m;
    }
  }
  base::Diagnostics mine;
  auto m = workflows::compile(pkg, {operation, flavour}, mine);
  diags.merge(mine);
  if (m != nullptr && !key.empty())
    g_machines.put(key, Compiled{m, mine});
  return m;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v)
    out += (out.empty() ? "" : sep) + s;
  return out;
}

}  // namespace

base::Status normalize_vim_connections(Store& store, json::value& request, bool required,
                                       std::string_view instance_id) {
  if (!request.is_object())
    return base::Status::Ok();
  auto& r = request.get_object();
  json::value* vci = r.if_contains("vimConnectionInfo");
  // SOL003 v2 writes a map keyed by connection id; v1 a list. vnflow keeps a list.
  if (vci != nullptr && vci->is_object()) {
    json::array list;
    for (const auto& [k, v] : vci->get_object()) {
      json::value e = v;
      if (e.is_object() && !e.get_object().contains("id"))
        e.get_object()["id"] = k;
      list.push_back(std::move(e));
    }
    *vci = std::move(list);
  }
  if (vci == nullptr || vci->is_null() || (vci->is_array() && vci->get_array().empty())) {
    if (!required)
      return base::Status::Ok();
    auto vims = store.list_vims();
    if (!vims.ok())
      return vims.status();
    for (const auto& v : vims.value()) {
      if (v.is_default && v.type == "openstack") {
        r["vimConnectionInfo"] = json::array{
            json::object{{"id", "default"}, {"vimId", v.id}, {"vimType", etsi_vim_type(v.type)}}};
        return base::Status::Ok();
      }
    }
    return base::Status::InvalidArgument(
        "this flavour creates a Heat stack and the request has no vimConnectionInfo, and no "
        "default VIM is registered (vnflow vim register ... --default)");
  }
  if (!vci->is_array())
    return base::Status::InvalidArgument("vimConnectionInfo must be a list or a map");
  int i = 0;
  for (auto& e : vci->get_array()) {
    std::string where = "vimConnectionInfo[" + std::to_string(i++) + "]";
    if (!e.is_object())
      return base::Status::InvalidArgument(where + " is not a map");
    auto& o = e.get_object();
    std::string vim_id = o.contains("vimId") && o.at("vimId").is_string()
                             ? std::string(o.at("vimId").get_string())
                             : std::string();
    json::value* access = o.if_contains("accessInfo");
    if (access != nullptr && access->is_object() && !access->get_object().empty()) {
      std::string vim_type_text = o.contains("vimType") && o.at("vimType").is_string()
                                      ? std::string(o.at("vimType").get_string())
                                      : std::string();
      if (vim_type(vim_type_text).empty())
        return base::Status::InvalidArgument(
            where +
            ".vimType must name an OpenStack (ETSINFV.OPENSTACK_KEYSTONE.V_3) or "
            "Kubernetes (ETSINFV.KUBERNETES.V_1, ETSINFV.HELM.V_3) VIM to register its "
            "accessInfo");
      VimRecord v;
      v.id = vim_id.empty() ? new_id() : vim_id;
      v.type = vim_type_text;
      v.access = access->get_object();
      if (auto* ii = o.if_contains("interfaceInfo"); ii != nullptr && ii->is_object()) {
        for (const auto& [k, val] : ii->get_object()) {
          std::string key = k == "endpoint"
                                ? (vim_type(vim_type_text) == "openstack" ? "auth_url" : "server")
                                : std::string(k);
          if (!v.access.contains(key))
            v.access[key] = val;
        }
      }
      auto reg = register_vim(store, std::move(v), instance_id);
      if (!reg.ok())
        return base::Status(reg.status().code(), where + ": " + reg.status().message());
      json::object slim{{"id", o.contains("id") ? o.at("id") : json::value(where)},
                        {"vimId", reg.value().id},
                        {"vimType", vim_type_text}};
      e = std::move(slim);
      continue;
    }
    if (vim_id.empty()) {
      if (required)
        return base::Status::InvalidArgument(where + " has neither a vimId nor accessInfo");
      continue;
    }
    auto v = store.get_vim(vim_id, false);
    if (!v.ok()) {
      if (required)
        return base::Status::InvalidArgument(where + ".vimId \"" + vim_id +
                                             "\" is not a registered VIM (vnflow vim list)");
      continue;
    }
    o["vimId"] = v.value().id;  // a name becomes the id
  }
  return base::Status::Ok();
}

base::Status delete_instance(Store& store, std::string_view instance_id) {
  return store.delete_instance(instance_id);
}

base::Result<OpRecord> request_operation(Store& store, std::string_view instance_id,
                                         std::string_view operation, const json::value& request,
                                         base::Diagnostics& diags, const OpCreator& create) {
  const workflows::OperationInfo* info = workflows::find_operation(operation);
  if (info == nullptr)
    return base::Status::InvalidArgument("unknown LCM operation \"" + std::string(operation) +
                                         "\"");
  auto inst = store.get_instance(instance_id);
  if (!inst.ok())
    return inst.status();
  // Bounded before anything else looks at it (a 100 MB request would be stored with every
  // transition's history).
  size_t size = json::serialize(request).size();
  if (size > kMaxRequestBytes)
    return base::Status::InvalidArgument("the " + std::string(operation) + " request is " +
                                         std::to_string(size) + " bytes; the limit is " +
                                         std::to_string(kMaxRequestBytes));
  auto problems = workflows::check_request(operation, request);
  if (!problems.empty())
    return base::Status::InvalidArgument("malformed " + std::string(operation) +
                                         " request: " + join(problems, "; "));
  const InstanceRecord& ir = inst.value();
  // An open operation is the most useful thing to tell first: it is why the instance is in
  // the state it is. (create_op checks again, atomically.)
  auto latest = store.list_ops({ir.id, std::nullopt, 1});
  if (latest.ok() && !latest.value().empty() && !is_final(latest.value()[0].state)) {
    const OpRecord& o = latest.value()[0];
    return base::Status::FailedPrecondition(
        "VNF instance " + ir.id + " already has operation " + o.id + " (" + o.operation + ") in " +
        std::string(to_string(o.state)) + "; one operation at a time per instance");
  }
  bool instantiated = ir.instantiation_state == "INSTANTIATED";
  if (operation == "instantiate" && instantiated)
    return base::Status::FailedPrecondition("VNF instance " + ir.id + " is already INSTANTIATED");
  if (operation != "instantiate" && operation != "modify_info" && !instantiated)
    return base::Status::FailedPrecondition("VNF instance " + ir.id +
                                            " is NOT_INSTANTIATED; instantiate it first");
  std::string flavour;
  if (operation == "instantiate") {
    flavour = std::string(request.at("flavourId").as_string());
  } else if (const json::value* f =
                 ir.record.is_object() ? ir.record.get_object().if_contains("flavour_id") : nullptr;
             f != nullptr && f->is_string()) {
    flavour = std::string(f->get_string());
  }
  base::Status err;
  std::string pkg_digest;
  auto pkg = load_stored_package(store, ir.package_id, diags, &err, &pkg_digest);
  if (pkg == nullptr)
    return err;
  if (flavour.empty() && pkg->flavours.size() == 1)
    flavour = pkg->flavours[0].id;
  if (pkg->flavour(flavour) == nullptr) {
    std::vector<std::string> ids;
    for (const auto& f : pkg->flavours)
      ids.push_back(f.id);
    return base::Status::InvalidArgument(
        "flavourId \"" + flavour + "\" is not a flavour of the package (" + join(ids, ", ") + ")");
  }
  auto m = compile_stored(*pkg, pkg_digest, std::string(operation), flavour, diags);
  if (m == nullptr)
    return base::Status::InvalidArgument("the " + std::string(operation) +
                                         " workflow of the package does not compile");
  // Checks that need the VNFD.
  const auto& vnfd = m->vnfd.as_object();
  if (operation == "instantiate") {
    if (const json::value* lvl = request.as_object().if_contains("instantiationLevelId")) {
      if (!vnfd.at("levels").as_object().contains(lvl->as_string()))
        return base::Status::InvalidArgument("instantiationLevelId \"" +
                                             std::string(lvl->as_string()) +
                                             "\" is not a level of flavour " + flavour);
    }
  }
  if (operation == "scale") {
    std::string aspect(request.at("aspectId").as_string());
    if (!vnfd.at("aspects").as_object().contains(aspect))
      return base::Status::InvalidArgument("aspectId \"" + aspect +
                                           "\" is not a scaling aspect of flavour " + flavour);
    std::string type(request.at("type").as_string());
    if (type != "SCALE_OUT" && type != "SCALE_IN")
      return base::Status::InvalidArgument("type must be SCALE_OUT or SCALE_IN, not \"" + type +
                                           "\"");
    int64_t steps = 1;
    if (const json::value* n = request.as_object().if_contains("numberOfSteps")) {
      if (!n->is_int64() || n->get_int64() < 1 || n->get_int64() > kMaxScaleSteps)
        return base::Status::InvalidArgument("numberOfSteps must be an integer from 1 to " +
                                             std::to_string(kMaxScaleSteps));
      steps = n->get_int64();
    }
    // Tacker's is_reverse picks which members a SCALE_IN removes; instance.scale_in_targets
    // reads it. A value it cannot read is refused now, not in the middle of the operation.
    if (const json::value* ap = request.as_object().if_contains("additionalParams");
        ap != nullptr && ap->is_object()) {
      if (const json::value* r = ap->get_object().if_contains("is_reverse");
          r != nullptr && !r->is_null() && !actions::parse_is_reverse(*r))
        return base::Status::InvalidArgument(
            "additionalParams.is_reverse must be true, false, \"True\" or \"False\"");
    }
    // The level it would reach, against the aspect's max_scale_level: refused now, not in
    // the middle of the operation.
    const json::object& asp = vnfd.at("aspects").as_object().at(aspect).as_object();
    int64_t max_level = asp.contains("max_scale_level") && asp.at("max_scale_level").is_int64()
                            ? asp.at("max_scale_level").get_int64()
                            : 0;
    int64_t level = 0;
    const json::value* status =
        ir.record.is_object() ? ir.record.get_object().if_contains("scale_status") : nullptr;
    const json::value* dflt = vnfd.if_contains("default_scale_status");
    if (status != nullptr && status->is_object() && status->get_object().contains(aspect) &&
        status->get_object().at(aspect).is_int64())
      level = status->get_object().at(aspect).get_int64();
    else if (dflt != nullptr && dflt->is_object() && dflt->get_object().contains(aspect) &&
             dflt->get_object().at(aspect).is_int64())
      level = dflt->get_object().at(aspect).get_int64();
    if (type == "SCALE_OUT" && level + steps > max_level)
      return base::Status::InvalidArgument(
          "aspect \"" + aspect + "\" is at scale level " + std::to_string(level) + " of " +
          std::to_string(max_level) + ": a SCALE_OUT by " + std::to_string(steps) +
          " step(s) would pass max_scale_level");
    if (type == "SCALE_IN" && level - steps < 0)
      return base::Status::InvalidArgument("aspect \"" + aspect + "\" is at scale level " +
                                           std::to_string(level) + ": a SCALE_IN by " +
                                           std::to_string(steps) + " step(s) is not possible");
  }
  if (operation == "terminate") {
    std::string t(request.at("terminationType").as_string());
    if (t != "FORCEFUL" && t != "GRACEFUL")
      return base::Status::InvalidArgument("terminationType must be FORCEFUL or GRACEFUL, not \"" +
                                           t + "\"");
  }
  // VIM connections: inline access info is registered (sealed) and replaced by its id, so
  // no secret is stored with the operation; a flavour with a Heat stack needs a VIM.
  json::value req = request;
  bool needs_vim = vnfd.contains("base_hot") &&
                   !vnfd.at("base_hot").as_object().at("template").as_string().empty();
  auto norm = normalize_vim_connections(store, req, operation == "instantiate" && needs_vim, ir.id);
  if (!norm.ok())
    return norm;
  // Stored once per digest: a read instead of a write (and its sync) when it is there.
  base::Status s;
  if (!store.get_machine(m->digest).ok())
    s = store.put_machine(m->digest, json::serialize(m->to_json()));
  if (!s.ok())
    return s;
  OpRecord op;
  op.id = new_id();
  op.instance_id = ir.id;
  op.operation = std::string(operation);
  op.state = OpState::kStarting;
  op.machine_digest = m->digest;
  op.package_digest = m->package_digest;
  op.request = std::move(req);
  op.created_ms = now_ms();
  s = create ? create(op) : store.create_op(op);
  if (!s.ok())
    return s;
  return op;
}

base::Result<OpRecord> retry_operation(Store& store, std::string_view op_id) {
  return store.transition(op_id, {OpState::kFailedTemp}, OpState::kProcessing, std::string());
}

base::Result<OpRecord> rollback_operation(Store& store, std::string_view op_id) {
  return store.transition(op_id, {OpState::kFailedTemp}, OpState::kRollingBack, std::nullopt);
}

base::Result<OpRecord> fail_operation(Store& store, std::string_view op_id, bool force) {
  if (force)
    return store.transition(
        op_id,
        {OpState::kFailedTemp, OpState::kStarting, OpState::kProcessing, OpState::kRollingBack},
        OpState::kFailed, std::nullopt);
  return store.transition(op_id, {OpState::kFailedTemp}, OpState::kFailed, std::nullopt);
}

base::Status cancel_operation(Store& store, std::string_view op_id) {
  return store.request_cancel(op_id);
}

base::Result<OpPage> list_operations(Store& store, OpFilter f) {
  size_t limit = std::max<size_t>(f.limit, 1);
  f.limit = limit + 1;  // one more than shown tells whether there were more
  auto list = store.list_ops(f);
  if (!list.ok())
    return list.status();
  OpPage page;
  page.ops = std::move(list).value();
  page.more = page.ops.size() > limit;
  if (page.more)
    page.ops.resize(limit);
  return page;
}

base::Result<std::shared_ptr<const workflows::Machine>> operation_machine(Store& store,
                                                                          const OpRecord& op) {
  auto body = store.get_machine(op.machine_digest);
  if (!body.ok())
    return body.status();
  boost::system::error_code ec;
  json::value v = json::parse(body.value(), ec);
  if (ec)
    return base::Status::Internal("stored machine is not JSON");
  return workflows::Machine::from_json(v);
}

base::Result<ReplayReport> replay_dry_run(Store& store, std::string_view op_id,
                                          const std::string& package_path,
                                          base::Diagnostics& diags) {
  auto op = store.get_op(op_id);
  if (!op.ok())
    return op.status();
  auto own = operation_machine(store, op.value());
  if (package_path.empty()) {
    if (!own.ok())
      return own.status();
    return replay_dry_run(store, op.value(), *own.value());
  }
  auto pkg = tosca::load_package(package_path, tosca::LoadOptions{}, diags);
  if (pkg == nullptr || diags.has_errors())
    return base::Status::InvalidArgument("the package is not valid");
  auto m =
      workflows::compile(*pkg, {op.value().operation, own.ok() ? own.value()->flavour : ""}, diags);
  if (m == nullptr)
    return base::Status::InvalidArgument("the package's " + op.value().operation +
                                         " workflow does not compile");
  return replay_dry_run(store, op.value(), *m);
}

// ---------------------------------------------------------------------------------------
// Replay --from (replay --dry-run is engine/internal/replay.cpp)

base::Result<OpRecord> replay_from(Store& store, std::string_view op_id, std::string_view state) {
  auto op = store.get_op(op_id);
  if (!op.ok())
    return op.status();
  if (!is_final(op.value().state))
    return base::Status::FailedPrecondition(
        "operation " + std::string(op_id) + " is " + std::string(to_string(op.value().state)) +
        "; replay --from starts a new occurrence after a final state "
        "(COMPLETED, FAILED, ROLLED_BACK)");
  auto m = operation_machine(store, op.value());
  if (!m.ok())
    return m.status();
  int idx = m.value()->find(state);
  if (idx < 0) {
    std::vector<std::string> names;
    for (const auto& s : m.value()->states)
      names.push_back(s.name);
    std::string msg = "no state \"" + std::string(state) + "\" in the operation's machine";
    std::string hint = base::closest_match(state, names);
    if (!hint.empty())
      msg += "; did you mean \"" + hint + "\"?";
    return base::Status::InvalidArgument(msg);
  }
  // A called workflow's state runs with its call's item and inputs, which only the call
  // gives: start at the outermost call instead.
  int outer = m.value()->states[static_cast<size_t>(idx)].owner;
  while (outer >= 0 && m.value()->states[static_cast<size_t>(outer)].owner >= 0)
    outer = m.value()->states[static_cast<size_t>(outer)].owner;
  if (outer >= 0)
    return base::Status::InvalidArgument(
        "\"" + std::string(state) + "\" is a state of a called workflow, which runs with its " +
        "call's inputs: replay --from " + m.value()->states[static_cast<size_t>(outer)].name);
  Cursor c;
  c.cur = idx;
  auto outs = store.outputs(op_id);
  if (!outs.ok())
    return outs.status();
  OpRecord n;
  n.id = new_id();
  n.instance_id = op.value().instance_id;
  n.operation = op.value().operation;
  n.state = OpState::kStarting;
  n.machine_digest = op.value().machine_digest;
  n.package_digest = op.value().package_digest;
  n.request = op.value().request;
  n.cursor = c.to_json();
  n.created_ms = now_ms();
  base::Status s = store.create_op(n);
  if (!s.ok())
    return s;
  // The new occurrence starts with the outputs the original had (the daemon only runs it
  // once it is claimed, after this).
  Batch b;
  for (const auto& kv : outs.value())
    b.outputs.push_back({n.id, std::string(kv.key()), json::serialize(kv.value())});
  if (!b.outputs.empty()) {
    s = store.apply({&b});
    if (!s.ok())
      return s;
  }
  return n;
}

}  // namespace engine
