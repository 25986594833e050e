// The SQLite Store (sqlite_store.h): the key file and its check, sealing and opening secret
// fields and outputs, VIM records, key rotation.
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <SQLiteCpp/SQLiteCpp.h>
#include <boost/json.hpp>
#include <unistd.h>

#include "actions/actions.h"
#include "engine/engine.h"
#include "engine/internal/sqlite_store.h"

namespace engine::internal {

namespace {

constexpr std::string_view kLegacyFieldAad = "vnflow-field";
constexpr std::string_view kKeyCheckText = "vnflow database key check";

// A cheap test before any parsing: most texts name no secret at all. A text that holds a
// secret-named field contains that name, so the field-name rule itself, applied to the whole
// text, is the test (one word list, one letter-case rule: they cannot drift apart).
bool may_hold_secret(std::string_view t) {
  return actions::is_secret_name(t);
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

}  // namespace

// The sealing key, checked (or created for a new database) by init().
base::Result<std::string> SqliteStore::key() {
  std::lock_guard<std::mutex> l(kmu_);
  if (key_.empty())
    return base::Status::FailedPrecondition("no sealing key for " + key_path_);
  return key_;
}

// Called inside init's transaction. A database that has sealed anything records a check
// value sealed with its key: from then on the key file must be there and must open it;
// vnflow never makes a new key for such a database (a hook would otherwise receive
// sealed text as a password, and every secret would be lost).
base::Status SqliteStore::check_key() {
  SQLite::Statement q(w_, "SELECT value FROM meta WHERE key = 'key_check'");
  std::string check;
  if (q.executeStep())
    check = q.getColumn(0).getString();
  q.reset();
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
    SQLite::Statement ins(w_, "INSERT INTO meta(key, value) VALUES('key_check', ?)");
    ins.bind(1, c.value());
    ins.exec();
  }
  std::lock_guard<std::mutex> l(kmu_);
  key_ = k.value();
  return base::Status::Ok();
}

bool SqliteStore::has_sealed_data() {
  SQLite::Statement q(
      w_,
      "SELECT EXISTS(SELECT 1 FROM vims) OR"
      " EXISTS(SELECT 1 FROM ops WHERE instr(request, 'vnflow-sealed:') > 0"
      "        OR instr(cursor, 'vnflow-sealed:') > 0) OR"
      " EXISTS(SELECT 1 FROM instances WHERE instr(record, 'vnflow-sealed:') > 0) OR"
      " EXISTS(SELECT 1 FROM outputs WHERE instr(value, 'vnflow-sealed:') > 0)");
  return q.executeStep() && q.getColumn(0).getInt() != 0;
}

// JSON text as stored: secret fields sealed, bound to `owner`. Throws (the write fails)
// when sealing is impossible, rather than storing a secret in clear.
std::string SqliteStore::sealed_text(const std::string& text, const std::string& owner) {
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

std::string SqliteStore::sealed_text(const json::value& v, const std::string& owner) {
  return sealed_text(json::serialize(v), owner);
}

// A whole value sealed (a secret output): "vnflow-sealed:j1:..." as the column's text.
std::string SqliteStore::sealed_whole(const std::string& json_text, const std::string& owner) {
  auto k = key();
  if (!k.ok())
    throw std::runtime_error("cannot seal a secret output: " + k.status().message());
  auto c = base::seal(k.value(), json_text, owner + "#");
  if (!c.ok())
    throw std::runtime_error("cannot seal a secret output: " + c.status().message());
  return std::string(kSealedPrefix) + "j1:" + c.value();
}

bool SqliteStore::has_sealed(const json::value& v) {
  if (v.is_string())
    return v.get_string().starts_with(kSealedPrefix);
  if (v.is_array()) {
    for (const auto& x : v.get_array()) {
      if (has_sealed(x))
        return true;
    }
  } else if (v.is_object()) {
    for (const auto& kv : v.get_object()) {
      if (has_sealed(kv.value()))
        return true;
    }
  }
  return false;
}

// Opens the sealed values of a value read back. One that does not open (a value moved
// from another record, a wrong key) stays sealed: the executor refuses to use it.
void SqliteStore::open_fields(json::value& v, const std::string& owner) {
  if (!has_sealed(v))
    return;
  auto k = key();
  if (!k.ok())
    return;
  SealWalk w{k.value(), owner, {}, {}};
  w.open(v);
}

OpRecord SqliteStore::opened(OpRecord r) {
  open_fields(r.request, "op/" + r.id + "/request");
  open_fields(r.cursor, "op/" + r.id + "/cursor");
  return r;
}

InstanceRecord SqliteStore::opened(InstanceRecord r) {
  open_fields(r.record, "instance/" + r.id);
  return r;
}

VimRecord SqliteStore::read_vim(SQLite::Statement& q) {
  VimRecord v;
  v.id = text(q, 0);
  v.name = text(q, 1);
  v.type = text(q, 2);
  json::value sm = parse_or_null(text(q, 3));
  if (sm.is_object())
    v.summary = sm.get_object();
  json::value ex = parse_or_null(text(q, 5));
  if (ex.is_object())
    v.extra = ex.get_object();
  v.is_default = q.getColumn(6).getInt() != 0;
  v.created_ms = q.getColumn(7).getInt64();
  return v;
}

base::Status SqliteStore::put_vim(const VimRecord& rec) {
  auto k = key();
  if (!k.ok())
    return k.status();
  auto sealed = base::seal(k.value(), json::serialize(rec.access), rec.id);
  if (!sealed.ok())
    return sealed.status();
  std::lock_guard<std::mutex> lock(wmu_);
  return guard([&] {
    SQLite::Transaction tx(w_);
    SQLite::Statement dup(w_, "SELECT id FROM vims WHERE name = ? AND id <> ?");
    dup.bind(1, rec.name);
    dup.bind(2, rec.id);
    if (dup.executeStep())
      return base::Status(base::StatusCode::kAlreadyExists,
                          "a VIM named \"" + rec.name + "\" exists already (" + text(dup, 0) + ")");
    if (rec.is_default)
      w_.exec("UPDATE vims SET is_default = 0");
    SQLite::Statement ins(w_,
                          "INSERT OR REPLACE INTO vims(id, name, type, summary, sealed, extra,"
                          " is_default, created_ms) VALUES(?, ?, ?, ?, ?, ?, ?, ?)");
    ins.bind(1, rec.id);
    ins.bind(2, rec.name);
    ins.bind(3, rec.type);
    ins.bind(4, json::serialize(rec.summary));
    ins.bind(5, sealed.value());
    ins.bind(6, json::serialize(rec.extra));
    ins.bind(7, rec.is_default ? 1 : 0);
    ins.bind(8, static_cast<int64_t>(rec.created_ms));
    ins.exec();
    tx.commit();
    return base::Status::Ok();
  });
}

base::Result<VimRecord> SqliteStore::get_vim(std::string_view id, bool with_secrets) {
  VimRecord out;
  std::string sealed;
  {
    std::lock_guard<std::mutex> lock(rmu_);
    base::Status s = guard([&] {
      SQLite::Statement q(r_,
                          "SELECT id, name, type, summary, sealed, extra, is_default, created_ms"
                          " FROM vims WHERE id = ?1 OR name = ?1 ORDER BY id = ?1 DESC LIMIT 1");
      q.bind(1, std::string(id));
      if (!q.executeStep())
        return base::Status::NotFound("no VIM \"" + std::string(id) + "\"");
      out = read_vim(q);
      sealed = text(q, 4);
      return base::Status::Ok();
    });
    if (!s.ok())
      return s;
  }
  if (with_secrets) {
    auto k = key();
    if (!k.ok())
      return k.status();
    auto plain = base::unseal(k.value(), sealed, out.id);
    if (!plain.ok())
      return base::Status::PermissionDenied("VIM \"" + out.id + "\": " + plain.status().message());
    json::value a = parse_or_null(plain.value());
    if (a.is_object())
      out.access = a.get_object();
  }
  return out;
}

base::Result<std::vector<VimRecord>> SqliteStore::list_vims() {
  std::lock_guard<std::mutex> lock(rmu_);
  std::vector<VimRecord> out;
  base::Status s = guard([&] {
    SQLite::Statement q(r_,
                        "SELECT id, name, type, summary, sealed, extra, is_default, created_ms"
                        " FROM vims ORDER BY created_ms, id");
    while (q.executeStep())
      out.push_back(read_vim(q));
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Status SqliteStore::delete_vim(std::string_view id) {
  std::lock_guard<std::mutex> lock(wmu_);
  return guard([&] {
    SQLite::Statement d(w_, "DELETE FROM vims WHERE id = ?");
    d.bind(1, std::string(id));
    if (d.exec() == 0)
      return base::Status::NotFound("no VIM \"" + std::string(id) + "\"");
    return base::Status::Ok();
  });
}

base::Status SqliteStore::rotate_key() {
  std::string next_path = key_path_ + ".new";
  ::unlink(next_path.c_str());
  auto next = base::load_or_create_key(next_path);
  if (!next.ok())
    return next.status();
  auto old_key = key();
  if (!old_key.ok())
    return old_key.status();
  const std::string& ok = old_key.value();
  const std::string& nk = next.value();
  std::lock_guard<std::mutex> lock(wmu_);
  base::Status st = guard([&] {
    w_.exec("BEGIN IMMEDIATE");
    try {
      // JSON texts: every sealed value opened with the old key, sealed with the new one.
      auto reseal_json = [&](const std::string& text, const std::string& owner,
                             std::string& out) -> base::Status {
        if (text.find(kSealedPrefix) == std::string::npos) {
          out = text;
          return base::Status::Ok();
        }
        if (std::string_view(text).starts_with(kSealedPrefix)) {  // sealed whole
          auto plain = base::unseal(ok, std::string_view(text).substr(kSealedPrefix.size() + 3),
                                    owner + "#");
          if (!plain.ok())
            return base::Status::FailedPrecondition(owner + " does not open with the key");
          auto c = base::seal(nk, plain.value(), owner + "#");
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
        SealWalk sealer{nk, owner, {}, {}};
        if (!sealer.seal(v))
          return base::Status::Internal(sealer.err);
        out = json::serialize(v);
        return base::Status::Ok();
      };
      struct Column {
        const char* select;
        const char* update;
        std::function<std::string(SQLite::Statement&)> owner;
      };
      std::vector<Column> columns = {
          {"SELECT id, request FROM ops", "UPDATE ops SET request = ?2 WHERE id = ?1",
           [](SQLite::Statement& q) { return "op/" + text(q, 0) + "/request"; }},
          {"SELECT id, cursor FROM ops WHERE cursor IS NOT NULL",
           "UPDATE ops SET cursor = ?2 WHERE id = ?1",
           [](SQLite::Statement& q) { return "op/" + text(q, 0) + "/cursor"; }},
          {"SELECT id, record FROM instances", "UPDATE instances SET record = ?2 WHERE id = ?1",
           [](SQLite::Statement& q) { return "instance/" + text(q, 0); }},
          {"SELECT op_id || char(31) || state, value FROM outputs",
           "UPDATE outputs SET value = ?2 WHERE op_id || char(31) || state = ?1",
           [](SQLite::Statement& q) {
             std::string k = text(q, 0);
             size_t sep = k.find('\x1f');
             return "op/" + k.substr(0, sep) + "/output/" + k.substr(sep + 1);
           }},
      };
      for (const auto& col : columns) {
        std::vector<std::pair<std::string, std::string>> changed;
        SQLite::Statement q(w_, col.select);
        while (q.executeStep()) {
          std::string t = text(q, 1), out;
          base::Status rs = reseal_json(t, col.owner(q), out);
          if (!rs.ok()) {
            rollback_quietly();
            return base::Status::FailedPrecondition("cannot rotate the key: " + rs.message());
          }
          if (out != t)
            changed.emplace_back(text(q, 0), std::move(out));
        }
        for (const auto& [id, value] : changed) {
          SQLite::Statement u(w_, col.update);
          u.bind(1, id);
          u.bind(2, value);
          u.exec();
        }
      }
      std::vector<std::pair<std::string, std::string>> vims;
      SQLite::Statement q(w_, "SELECT id, sealed FROM vims");
      while (q.executeStep()) {
        auto plain = base::unseal(ok, text(q, 1), text(q, 0));
        if (!plain.ok()) {
          rollback_quietly();
          return base::Status::FailedPrecondition("cannot rotate the key: VIM " + text(q, 0) +
                                                  " does not open with the key");
        }
        auto c = base::seal(nk, plain.value(), text(q, 0));
        if (!c.ok()) {
          rollback_quietly();
          return c.status();
        }
        vims.emplace_back(text(q, 0), c.value());
      }
      for (const auto& [id, sealed] : vims) {
        SQLite::Statement u(w_, "UPDATE vims SET sealed = ?2 WHERE id = ?1");
        u.bind(1, id);
        u.bind(2, sealed);
        u.exec();
      }
      auto check = base::seal(nk, kKeyCheckText, kKeyCheckText);
      if (!check.ok()) {
        rollback_quietly();
        return check.status();
      }
      SQLite::Statement u(w_, "UPDATE meta SET value = ? WHERE key = 'key_check'");
      u.bind(1, check.value());
      u.exec();
      w_.exec("COMMIT");
    } catch (...) {
      rollback_quietly();
      throw;
    }
    return base::Status::Ok();
  });
  if (!st.ok()) {
    ::unlink(next_path.c_str());
    return st;
  }
  // Committed: the new key goes into place (an interruption here is finished at the next
  // open, which finds the check value opening with the ".new" key).
  if (::rename(next_path.c_str(), key_path_.c_str()) != 0)
    return base::Status::Unavailable("the secrets are sealed with the new key, but " + next_path +
                                     " could not be renamed to " + key_path_ +
                                     "; the next start does it");
  std::lock_guard<std::mutex> l(kmu_);
  key_ = nk;
  return base::Status::Ok();
}

std::vector<std::string> SqliteStore::private_files() const {
  std::string db = key_path_.substr(0, key_path_.size() - 4);
  return {db, db + "-wal", db + "-shm", key_path_};
}

}  // namespace engine::internal
