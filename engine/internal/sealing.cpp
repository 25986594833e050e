// Secrets at rest (sealing.h): the key file and its check value, sealing and opening secret
// fields, outputs and VIM records, key rotation.
#include "engine/internal/sealing.h"

#include <cstdio>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <boost/json.hpp>
#include <unistd.h>

#include "actions/actions.h"
#include "engine/engine.h"

namespace engine::internal {

namespace {

constexpr std::string_view kLegacyFieldAad = "vnflow-field";
constexpr std::string_view kKeyCheckText = "vnflow database key check";

// A cheap test before any parsing: most texts name no secret at all. A text that holds a
// secret-named field contains that name, so the field-name rule itself, applied to the whole
// text, is the test (one word list, one letter-case rule: they cannot drift apart).
bool may_hold_secret(std::string_view t) {
  return actions::is_secret_name(t) || actions::has_url_password(t);
}

struct SealWalk {
  const std::string& key;
  std::string owner;
  std::string err;
  std::vector<std::string> path;

  std::string aad() const {
    std::string a = owner + "#";
    for (const auto& p : path)
      a += "/" + p;
    return a;
  }

  bool seal_value(json::value& x) {
    bool is_str = x.is_string();
    if (is_str && x.get_string().starts_with(kSealedPrefix))
      return true;  // sealed already (it opens only where it was sealed)
    if (is_str && x.get_string().empty())
      return true;
    std::string plain = is_str ? std::string(x.get_string()) : json::serialize(x);
    auto c = base::seal(key, plain, aad());
    if (!c.ok()) {
      err = c.status().message();
      return false;
    }
    x = std::string(kSealedPrefix) + (is_str ? "s1:" : "j1:") + c.value();
    return true;
  }

  // Seals every secret-named field below `v`.
  bool seal(json::value& v) {
    if (v.is_array()) {
      size_t i = 0;
      for (auto& x : v.get_array()) {
        path.push_back(std::to_string(i++));
        bool ok = seal(x);
        path.pop_back();
        if (!ok)
          return false;
      }
      return true;
    }
    if (v.is_string() && actions::has_url_password(v.get_string()))
      return seal_value(v);  // a URL's password (a proxy setting): the string sealed whole
    if (!v.is_object())
      return true;
    for (auto& kv : v.get_object()) {
      path.emplace_back(kv.key());
      bool ok = !kv.value().is_null() && actions::is_secret_name(kv.key()) ? seal_value(kv.value())
                                                                           : seal(kv.value());
      path.pop_back();
      if (!ok)
        return false;
    }
    return true;
  }

  // Opens every sealed value below `v`; false (the reason in `err`) when one does not open.
  // The others are opened all the same.
  bool open(json::value& v) {
    bool all = true;
    if (v.is_string()) {
      std::string_view sv = v.get_string();
      if (!sv.starts_with(kSealedPrefix))
        return true;
      std::string_view body = sv.substr(kSealedPrefix.size());
      std::string where = path.empty() ? std::string("a value") : "field \"" + path.back() + "\"";
      if (body.starts_with("s1:") || body.starts_with("j1:")) {
        auto plain = base::unseal(key, body.substr(3), aad());
        if (!plain.ok()) {
          err = "sealed " + where + " of " + owner +
                " does not open here: " + plain.status().message();
          return false;
        }
        if (body[0] == 's') {
          v = plain.value();
        } else {
          boost::system::error_code ec;
          json::value parsed = json::parse(plain.value(), ec);
          if (ec) {
            err = "sealed " + where + " of " + owner + " is not JSON";
            return false;
          }
          v = std::move(parsed);
        }
        return true;
      }
      auto plain = base::unseal(key, body, kLegacyFieldAad);
      if (!plain.ok()) {
        err = "sealed " + where + " of " + owner + ": " + plain.status().message();
        return false;
      }
      v = plain.value();
      return true;
    }
    if (v.is_array()) {
      size_t i = 0;
      for (auto& x : v.get_array()) {
        path.push_back(std::to_string(i++));
        all = open(x) && all;
        path.pop_back();
      }
    } else if (v.is_object()) {
      for (auto& kv : v.get_object()) {
        path.emplace_back(kv.key());
        all = open(kv.value()) && all;
        path.pop_back();
      }
    }
    return all;
  }
};

// A value sealed whole: opened with `key`, "" when it does not open.
base::Result<std::string> open_whole(const std::string& key, std::string_view text,
                                     const std::string& owner) {
  if (!text.starts_with(kSealedPrefix) || text.substr(kSealedPrefix.size(), 3) != "j1:")
    return base::Status::FailedPrecondition(owner + " is not sealed whole");
  return base::unseal(key, text.substr(kSealedPrefix.size() + 3), owner + "#");
}

}  // namespace

bool any_string(const json::value& v, const std::function<bool(std::string_view)>& p) {
  if (v.is_string())
    return p(v.get_string());
  if (v.is_array()) {
    for (const auto& x : v.get_array()) {
      if (any_string(x, p))
        return true;
    }
  } else if (v.is_object()) {
    for (const auto& kv : v.get_object()) {
      if (any_string(kv.value(), p))
        return true;
    }
  }
  return false;
}

bool has_sealed(const json::value& v) {
  return any_string(v, [](std::string_view s) { return s.starts_with(kSealedPrefix); });
}

const std::vector<SealedColumn>& sealed_columns() {
  static const std::vector<SealedColumn> columns = {
      {"ops", "id", "request", "op/", "/request"},
      {"ops", "id", "cursor", "op/", "/cursor"},
      {"instances", "id", "record", "instance/", ""},
      {"outputs", "op_id || '/output/' || state", "value", "op/", ""},
      {"subscriptions", "id", "auth", "subscription/", "/auth"},
  };
  return columns;
}

std::string has_sealed_sql() {
  std::string sql = "SELECT EXISTS(SELECT 1 FROM vims)";
  for (const auto& c : sealed_columns())
    sql += std::string(" OR EXISTS(SELECT 1 FROM ") + c.table + " WHERE " + c.value + " LIKE '%" +
           std::string(kSealedPrefix) + "%')";
  return sql;
}

json::value parse_or_null(const std::string& s) {
  if (s.empty())
    return nullptr;
  boost::system::error_code ec;
  json::value v = json::parse(s, ec);
  return ec ? json::value(nullptr) : v;
}

json::object object_or_empty(const std::string& s) {
  json::value v = parse_or_null(s);
  return v.is_object() ? std::move(v.get_object()) : json::object();
}

std::string subscription_auth_types(const json::object& auth) {
  const json::value* t = auth.if_contains("authType");
  return t != nullptr ? json::serialize(*t) : "[]";
}

std::string Sealer::seal_subscription_auth(const SubscriptionRecord& s) {
  if (s.auth.empty())
    return {};
  return sealed_whole(json::serialize(s.auth), "subscription/" + s.id + "/auth");
}

base::Status Sealer::read_subscription_auth(SubscriptionRecord& r, const std::string& types,
                                            const std::string& sealed, bool open) {
  r.auth.clear();
  json::value t = parse_or_null(types);
  if (t.is_array() && !t.get_array().empty())
    r.auth["authType"] = std::move(t);
  if (!open || sealed.empty())
    return base::Status::Ok();
  json::value v = open_output(sealed, "subscription/" + r.id + "/auth");
  if (!v.is_object())
    return base::Status::FailedPrecondition("the authentication of subscription " + r.id +
                                            " does not open with the key file");
  r.auth = std::move(v.get_object());
  return base::Status::Ok();
}

base::Result<std::string> Sealer::settle(const std::string& check,
                                         const std::function<bool()>& has_sealed_data) {
  bool key_exists = ::access(key_path_.c_str(), F_OK) == 0;
  if (!key_exists && (!check.empty() || has_sealed_data()))
    return base::Status::FailedPrecondition(
        "the database holds sealed secrets but its key file " + key_path_ +
        " is missing; restore it (vnflow does not make a new key for a database with "
        "sealed data)");
  auto k = base::load_or_create_key(key_path_);
  if (!k.ok())
    return k.status();
  std::string next_path = key_path_ + ".new";
  bool next_exists = ::access(next_path.c_str(), F_OK) == 0;
  std::string new_check;
  if (!check.empty()) {
    auto plain = base::unseal(k.value(), check, kKeyCheckText);
    if (!plain.ok() && next_exists) {
      // A rotation committed but did not rename its key into place: finish it.
      auto next = base::load_or_create_key(next_path);
      if (next.ok() && base::unseal(next.value(), check, kKeyCheckText).ok() &&
          ::rename(next_path.c_str(), key_path_.c_str()) == 0) {
        k = next;
        plain = base::unseal(k.value(), check, kKeyCheckText);
        next_exists = false;
      }
    }
    if (!plain.ok() || plain.value() != kKeyCheckText)
      return base::Status::PermissionDenied(
          "the key file " + key_path_ +
          " does not open this database's secrets (the key of another database?)");
    if (next_exists)
      ::unlink(next_path.c_str());  // a rotation that never committed
  } else {
    auto c = base::seal(k.value(), kKeyCheckText, kKeyCheckText);
    if (!c.ok())
      return c.status();
    new_check = c.value();
  }
  std::lock_guard<std::mutex> l(mu_);
  key_ = k.value();
  return new_check;
}

base::Result<std::string> Sealer::key() {
  std::lock_guard<std::mutex> l(mu_);
  if (key_.empty())
    return base::Status::FailedPrecondition("no sealing key for " + key_path_);
  return key_;
}

std::string Sealer::sealed_text(const std::string& text, const std::string& owner) {
  if (!may_hold_secret(text))
    return text;
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec)
    return text;
  auto k = key();
  if (!k.ok())
    throw std::runtime_error("cannot seal a secret field: " + k.status().message());
  SealWalk w{k.value(), owner, {}, {}};
  if (!w.seal(v))
    throw std::runtime_error("cannot seal a secret field: " + w.err);
  return json::serialize(v);
}

std::string Sealer::sealed_text(const json::value& v, const std::string& owner) {
  return sealed_text(json::serialize(v), owner);
}

std::string Sealer::sealed_whole(const std::string& json_text, const std::string& owner) {
  auto k = key();
  if (!k.ok())
    throw std::runtime_error("cannot seal a secret output: " + k.status().message());
  auto c = base::seal(k.value(), json_text, owner + "#");
  if (!c.ok())
    throw std::runtime_error("cannot seal a secret output: " + c.status().message());
  return std::string(kSealedPrefix) + "j1:" + c.value();
}

void Sealer::open_fields(json::value& v, const std::string& owner) {
  if (!has_sealed(v))
    return;
  auto k = key();
  if (!k.ok())
    return;
  SealWalk w{k.value(), owner, {}, {}};
  w.open(v);
}

std::string Sealer::sealed_output(const Batch::OutputWrite& o) {
  std::string owner = "op/" + o.op_id + "/output/" + o.state;
  return o.secret ? sealed_whole(o.value, owner) : sealed_text(o.value, owner);
}

json::value Sealer::open_output(const std::string& t, const std::string& owner) {
  if (!std::string_view(t).starts_with(kSealedPrefix)) {
    json::value v = parse_or_null(t);
    open_fields(v, owner);
    return v;
  }
  // A secret output, sealed whole. One that does not open stays sealed.
  auto k = key();
  if (k.ok()) {
    auto plain = open_whole(k.value(), t, owner);
    if (plain.ok())
      return parse_or_null(plain.value());
  }
  return json::value(t);
}

OpRecord Sealer::opened(OpRecord r) {
  open_fields(r.request, "op/" + r.id + "/request");
  open_fields(r.cursor, "op/" + r.id + "/cursor");
  return r;
}

InstanceRecord Sealer::opened(InstanceRecord r) {
  open_fields(r.record, "instance/" + r.id);
  return r;
}

base::Result<std::string> Sealer::seal_vim(const json::object& access, const std::string& id) {
  auto k = key();
  if (!k.ok())
    return k.status();
  return base::seal(k.value(), json::serialize(access), id);
}

base::Result<json::object> Sealer::open_vim(const std::string& sealed, const std::string& id) {
  auto k = key();
  if (!k.ok())
    return k.status();
  auto plain = base::unseal(k.value(), sealed, id);
  if (!plain.ok())
    return base::Status::PermissionDenied("VIM \"" + id + "\": " + plain.status().message());
  json::value a = parse_or_null(plain.value());
  return a.is_object() ? a.get_object() : json::object();
}

base::Status Sealer::begin_rotation() {
  std::string next_path = key_path_ + ".new";
  ::unlink(next_path.c_str());
  auto next = base::load_or_create_key(next_path);
  if (!next.ok())
    return next.status();
  if (auto k = key(); !k.ok())
    return k.status();
  std::lock_guard<std::mutex> l(mu_);
  next_ = next.value();
  return base::Status::Ok();
}

// JSON texts: every sealed value opened with the current key, sealed with the new one.
base::Status Sealer::reseal_text(const std::string& text, const std::string& owner,
                                 std::string& out) {
  auto k = key();
  if (!k.ok())
    return k.status();
  const std::string& ok = k.value();
  if (text.find(kSealedPrefix) == std::string::npos) {
    out = text;
    return base::Status::Ok();
  }
  if (std::string_view(text).starts_with(kSealedPrefix)) {  // sealed whole
    auto plain =
        base::unseal(ok, std::string_view(text).substr(kSealedPrefix.size() + 3), owner + "#");
    if (!plain.ok())
      return base::Status::FailedPrecondition(owner + " does not open with the key");
    auto c = base::seal(next_, plain.value(), owner + "#");
    if (!c.ok())
      return c.status();
    out = std::string(kSealedPrefix) + "j1:" + c.value();
    return base::Status::Ok();
  }
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec)
    return base::Status::FailedPrecondition(owner + " is not JSON");
  SealWalk opener{ok, owner, {}, {}};
  if (!opener.open(v))
    return base::Status::FailedPrecondition(opener.err);
  SealWalk sealer{next_, owner, {}, {}};
  if (!sealer.seal(v))
    return base::Status::Internal(sealer.err);
  out = json::serialize(v);
  return base::Status::Ok();
}

base::Status Sealer::reseal_vim(const std::string& sealed, const std::string& id,
                                std::string& out) {
  auto k = key();
  if (!k.ok())
    return k.status();
  auto plain = base::unseal(k.value(), sealed, id);
  if (!plain.ok())
    return base::Status::FailedPrecondition("VIM " + id + " does not open with the key");
  auto c = base::seal(next_, plain.value(), id);
  if (!c.ok())
    return c.status();
  out = c.value();
  return base::Status::Ok();
}

base::Result<std::string> Sealer::next_check() {
  return base::seal(next_, kKeyCheckText, kKeyCheckText);
}

base::Status Sealer::reseal_columns(
    const std::function<std::string(int)>& param,
    const std::function<std::vector<std::pair<std::string, std::string>>(const std::string&)>&
        select,
    const std::function<void(const std::string&, const std::string&, const std::string&)>& update) {
  for (const auto& c : sealed_columns()) {
    std::string key(c.key);
    auto rows = select("SELECT " + key + ", " + c.value + " FROM " + c.table + " WHERE " + c.value +
                       " LIKE '%" + std::string(kSealedPrefix) + "%'");
    std::string sql = std::string("UPDATE ") + c.table + " SET " + c.value + " = " + param(2) +
                      " WHERE " + key + " = " + param(1);
    for (const auto& [k, text] : rows) {
      std::string out;
      base::Status rs = reseal_text(text, c.owner_prefix + k + c.owner_suffix, out);
      if (!rs.ok())
        return base::Status::FailedPrecondition("cannot rotate the key: " + rs.message());
      if (out != text)
        update(sql, k, out);
    }
  }
  return base::Status::Ok();
}

base::Status Sealer::finish_rotation() {
  // Committed: the new key goes into place (an interruption here is finished at the next
  // open, which finds the check value opening with the ".new" key).
  std::string next_path = key_path_ + ".new";
  if (::rename(next_path.c_str(), key_path_.c_str()) != 0)
    return base::Status::Unavailable("the secrets are sealed with the new key, but " + next_path +
                                     " could not be renamed to " + key_path_ +
                                     "; the next start does it");
  std::lock_guard<std::mutex> l(mu_);
  key_ = std::move(next_);
  next_.clear();
  return base::Status::Ok();
}

void Sealer::abort_rotation() {
  ::unlink((key_path_ + ".new").c_str());
  std::lock_guard<std::mutex> l(mu_);
  next_.clear();
}

}  // namespace engine::internal
