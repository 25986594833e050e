// The SQLite Store (sqlite_store.h): the key's check value, VIM records, key rotation. The
// sealing rules themselves are sealing.h's, shared with every store.
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <SQLiteCpp/SQLiteCpp.h>
#include <boost/json.hpp>

#include "engine/engine.h"
#include "engine/internal/sealing.h"
#include "engine/internal/sqlite_store.h"

namespace engine::internal {

// Called inside init's transaction (Sealer::settle decides).
base::Status SqliteStore::check_key() {
  SQLite::Statement q(w_, "SELECT value FROM meta WHERE key = 'key_check'");
  std::string check;
  if (q.executeStep())
    check = q.getColumn(0).getString();
  q.reset();
  auto settled = sealer_.settle(check, [&] { return has_sealed_data(); });
  if (!settled.ok())
    return settled.status();
  if (!settled.value().empty()) {
    SQLite::Statement ins(w_, "INSERT INTO meta(key, value) VALUES('key_check', ?)");
    ins.bind(1, settled.value());
    ins.exec();
  }
  return base::Status::Ok();
}

bool SqliteStore::has_sealed_data() {
  // SQLite's outputs also ride on events (reseal_event_outputs).
  SQLite::Statement q(w_, has_sealed_sql() +
                              " OR EXISTS(SELECT 1 FROM events WHERE instr(outputs, "
                              "'vnflow-sealed:') > 0)");
  return q.executeStep() && q.getColumn(0).getInt() != 0;
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
  auto sealed = sealer_.seal_vim(rec.access, rec.id);
  if (!sealed.ok())
    return sealed.status();
  std::lock_guard lock(wmu_);
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
    auto rd = readers_.acquire();
    base::Status s = guard([&] {
      auto q_use = rd->q.prepare(
          "SELECT id, name, type, summary, sealed, extra, is_default, created_ms"
          " FROM vims WHERE id = ?1 OR name = ?1 ORDER BY id = ?1 DESC LIMIT 1");
      SQLite::Statement& q = *q_use;
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
    auto access = sealer_.open_vim(sealed, out.id);
    if (!access.ok())
      return access.status();
    out.access = std::move(access).value();
  }
  return out;
}

base::Result<std::vector<VimRecord>> SqliteStore::list_vims() {
  auto rd = readers_.acquire();
  std::vector<VimRecord> out;
  base::Status s = guard([&] {
    auto q_use = rd->q.prepare(
        "SELECT id, name, type, summary, sealed, extra, is_default, created_ms"
        " FROM vims ORDER BY created_ms, id");
    SQLite::Statement& q = *q_use;
    while (q.executeStep())
      out.push_back(read_vim(q));
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Status SqliteStore::delete_vim(std::string_view id) {
  std::lock_guard lock(wmu_);
  return guard([&] {
    SQLite::Statement d(w_, "DELETE FROM vims WHERE id = ?");
    d.bind(1, std::string(id));
    if (d.exec() == 0)
      return base::Status::NotFound("no VIM \"" + std::string(id) + "\"");
    return base::Status::Ok();
  });
}

// The outputs that ride on events (sqlite_ops.cpp, apply): {state: stored text} objects,
// each state's text sealed for its own owner. Inside rotate_key's transaction.
base::Status SqliteStore::reseal_event_outputs() {
  struct Row {
    int64_t id;
    std::string outputs;
  };
  std::vector<Row> changed;
  SQLite::Statement q(w_,
                      "SELECT o.id, e.id, e.outputs FROM events e JOIN ops o ON o.num = e.opn"
                      " WHERE instr(e.outputs, 'vnflow-sealed:') > 0");
  while (q.executeStep()) {
    std::string op_id = text(q, 0);
    json::value o = parse_or_null(text(q, 2));
    if (!o.is_object())
      continue;
    bool any = false;
    for (auto& kv : o.get_object()) {
      if (!kv.value().is_string())
        continue;
      std::string t(kv.value().get_string()), out;
      base::Status rs =
          sealer_.reseal_text(t, "op/" + op_id + "/output/" + std::string(kv.key()), out);
      if (!rs.ok())
        return base::Status::FailedPrecondition("cannot rotate the key: " + rs.message());
      if (out != t) {
        kv.value() = out;
        any = true;
      }
    }
    if (any)
      changed.push_back({q.getColumn(1).getInt64(), json::serialize(o)});
  }
  for (const auto& r : changed) {
    SQLite::Statement u(w_, "UPDATE events SET outputs = ?2 WHERE id = ?1");
    u.bind(1, r.id);
    u.bind(2, r.outputs);
    u.exec();
  }
  return base::Status::Ok();
}

base::Status SqliteStore::rotate_key() {
  if (base::Status s = sealer_.begin_rotation(); !s.ok())
    return s;
  std::lock_guard lock(wmu_);
  base::Status st = guard([&] {
    w_.exec("BEGIN IMMEDIATE");
    try {
      base::Status rs = sealer_.reseal_columns(
          [](int n) { return "?" + std::to_string(n); },
          [&](const std::string& sql) {
            SQLite::Statement q(w_, sql);
            std::vector<std::pair<std::string, std::string>> rows;
            while (q.executeStep())
              rows.emplace_back(text(q, 0), text(q, 1));
            return rows;
          },
          [&](const std::string& sql, const std::string& key, const std::string& value) {
            SQLite::Statement u(w_, sql);
            u.bind(1, key);
            u.bind(2, value);
            u.exec();
          });
      if (!rs.ok()) {
        rollback_quietly();
        return rs;
      }
      if (rs = reseal_event_outputs(); !rs.ok()) {
        rollback_quietly();
        return rs;
      }
      std::vector<std::pair<std::string, std::string>> vims;
      SQLite::Statement q(w_, "SELECT id, sealed FROM vims");
      while (q.executeStep()) {
        std::string out;
        base::Status vs = sealer_.reseal_vim(text(q, 1), text(q, 0), out);
        if (!vs.ok()) {
          rollback_quietly();
          return base::Status::FailedPrecondition("cannot rotate the key: " + vs.message());
        }
        vims.emplace_back(text(q, 0), std::move(out));
      }
      for (const auto& [id, sealed] : vims) {
        SQLite::Statement u(w_, "UPDATE vims SET sealed = ?2 WHERE id = ?1");
        u.bind(1, id);
        u.bind(2, sealed);
        u.exec();
      }
      auto check = sealer_.next_check();
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
    sealer_.abort_rotation();
    return st;
  }
  return sealer_.finish_rotation();
}

std::vector<std::string> SqliteStore::private_files() const {
  const std::string& key = sealer_.key_path();
  std::string db = db_file();
  // The daemon's wake socket too (daemon.cpp): a hook has no business poking the daemon.
  return {db, db + "-wal", db + "-shm", key, db + ".wake"};
}

}  // namespace engine::internal
