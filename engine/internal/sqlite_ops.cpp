// The SQLite Store (sqlite_store.h): the executor's commits, operations, their outputs and
// events.
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <SQLiteCpp/SQLiteCpp.h>
#include <boost/json.hpp>

#include "engine/engine.h"
#include "engine/internal/sqlite_store.h"

namespace engine::internal {

namespace {

constexpr const char* kOpColumns =
    "id, instance_id, operation, state, machine, package_digest, request, error, cursor, "
    "owner, cancel_requested, wake_at_ms, created_ms, updated_ms";

OpRecord read_op(SQLite::Statement& st) {
  OpRecord r;
  r.id = text(st, 0);
  r.instance_id = text(st, 1);
  r.operation = text(st, 2);
  r.state = parse_op_state(text(st, 3)).value_or(OpState::kFailed);
  r.machine_digest = text(st, 4);
  r.package_digest = text(st, 5);
  r.request = parse_or_null(text(st, 6));
  r.error = parse_or_null(text(st, 7));
  r.cursor = parse_or_null(text(st, 8));
  r.owner = text(st, 9);
  r.cancel_requested = st.getColumn(10).getInt() != 0;
  r.wake_at_ms = st.getColumn(11).getInt64();
  r.created_ms = st.getColumn(12).getInt64();
  r.updated_ms = st.getColumn(13).getInt64();
  return r;
}

}  // namespace

base::Status SqliteStore::apply(const std::vector<const Batch*>& batches) {
  std::lock_guard lock(wmu_);
  return guard([&] {
    run_cached(begin_, "BEGIN IMMEDIATE");
    try {
      int64_t now = now_ms();
      for (const Batch* b : batches) {
        b->fenced = false;
        b->refused = base::Status::Ok();
        if (b->create) {
          // Checked first: a refused create leaves nothing of its batch behind.
          b->refused = insert_op_locked(*b->create);
          if (!b->refused.ok()) {
            b->fenced = true;
            continue;
          }
        }
        for (const auto& o : b->ops) {
          bool full = o.state || o.owner;
          auto& st = full ? *upd_op_ : *upd_op_plain_;
          st.tryReset();  // a cached statement: an earlier failed step's error is not this one's
          int i = 1;
          st.bind(i++, o.op_id);
          if (full) {
            if (o.state)
              st.bind(i++, std::string(to_string(*o.state)));
            else
              st.bind(i++);
          }
          if (o.cursor)
            st.bind(i++, sealed_text(*o.cursor, "op/" + o.op_id + "/cursor"));
          else
            st.bind(i++);
          st.bind(i++, o.set_error ? 1 : 0);
          bind_text_or_null(st, i++, o.error);
          if (o.wake_at_ms)
            st.bind(i++, static_cast<int64_t>(*o.wake_at_ms));
          else
            st.bind(i++);
          if (full) {
            if (o.owner)
              st.bind(i++, *o.owner);
            else
              st.bind(i++);
          }
          st.bind(i++, static_cast<int64_t>(now));
          if (st.exec() != 1) {
            // Fencing: an operation that is no longer active (an operator forced it to
            // FAILED) takes no write from an executor; the rest of the group commits.
            auto cur = get_op_locked(w_, nullptr, o.op_id);
            if (!cur.ok())
              throw std::runtime_error("no operation " + o.op_id);
            b->fenced = true;
          }
        }
        if (b->fenced)
          continue;
        // The outputs of the states this batch finished ride on its last event (one page
        // write fewer per transition than a row of their own); a batch without events
        // (the outputs an operation starts with, replay --from) writes rows of `outputs`.
        std::string outs;
        if (!b->outputs.empty() && !b->events.empty()) {
          json::object o;
          for (const auto& out : b->outputs)
            o[out.state] = sealer_.sealed_output(out);
          outs = json::serialize(o);
        } else {
          for (const auto& out : b->outputs) {
            auto& st = *ins_output_;
            st.tryReset();
            st.bind(1, out.op_id);
            st.bind(2, out.state);
            st.bind(3, sealer_.sealed_output(out));
            st.exec();
          }
        }
        for (size_t k = 0; k < b->events.size(); ++k) {
          const auto& e = b->events[k];
          auto& st = *ins_event_;
          st.tryReset();
          st.bind(1, e.op_id);
          st.bind(2, static_cast<int64_t>(e.seq));
          st.bind(3, static_cast<int64_t>(e.at_ms));
          st.bind(4, e.kind);
          bind_text_or_null(st, 5, e.state);
          if (e.item >= 0)
            st.bind(6, e.item);
          else
            st.bind(6);
          st.bind(7, e.attempt);
          bind_text_or_null(st, 8, e.key);
          if (e.data.is_null())
            st.bind(9);
          else
            st.bind(9, json::serialize(e.data));
          if (k + 1 == b->events.size() && !outs.empty())
            st.bindNoCopy(10, outs);
          else
            st.bind(10);
          if (e.started_ms > 0)
            st.bind(11, static_cast<int64_t>(e.started_ms));
          else
            st.bind(11);
          st.exec();
        }
        for (const auto& i : b->instances) {
          auto& st = *upd_inst_;
          st.tryReset();
          st.bind(1, i.instance_id);
          st.bind(2, i.instantiation_state);
          st.bind(3, sealed_text(i.record, "instance/" + i.instance_id));
          st.exec();
        }
      }
      run_cached(commit_, "COMMIT");
    } catch (...) {
      rollback_quietly();
      throw;
    }
    return base::Status::Ok();
  });
}

void SqliteStore::run_cached(std::unique_ptr<SQLite::Statement>& st, const char* sql) {
  if (!st)
    st = std::make_unique<SQLite::Statement>(w_, sql);
  st->tryReset();  // an earlier failed step's error is not this one's
  try {
    st->exec();
  } catch (...) {
    // Reset at once: a BEGIN IMMEDIATE that met SQLITE_BUSY stays a pending write on the
    // connection until reset (the next writes would run in a transaction it never ends),
    // where sqlite3_exec finalized it.
    st->tryReset();
    throw;
  }
}

base::Status SqliteStore::insert_op_locked(const OpRecord& rec) {
  // The instance first: one deleted since the request was checked fails this operation
  // alone, not (by its foreign key) the group commit it rides in. The statements are
  // prepared once, at the first creation: the INSERT compiles the triggers on ops, which
  // cost a start's commit as much as the rest of its body when prepared on each call.
  if (!ins_op_) {
    sel_inst_ = std::make_unique<SQLite::Statement>(w_, "SELECT 1 FROM instances WHERE id = ?");
    sel_open_ = std::make_unique<SQLite::Statement>(
        w_, std::string("SELECT id, state, operation FROM ops WHERE instance_id = ? AND ") + kOpen);
    // num here, not by the trigger ops_number: its UPDATE would cost every creation a write.
    ins_op_ = std::make_unique<SQLite::Statement>(
        w_, std::string("INSERT INTO ops(") + kOpColumns +
                ", num) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, ?, ?, " + kNextOpNum + ")");
  }
  {
    auto& inst = *sel_inst_;
    inst.tryReset();
    inst.bind(1, rec.instance_id);
    bool found = inst.executeStep();
    inst.tryReset();
    if (!found)
      return base::Status::NotFound("no VNF instance " + rec.instance_id);
  }
  {
    auto& open = *sel_open_;
    open.tryReset();
    open.bind(1, rec.instance_id);
    if (open.executeStep()) {
      base::Status why = base::Status::FailedPrecondition(
          "VNF instance " + rec.instance_id + " already has operation " +
          open.getColumn(0).getString() + " (" + open.getColumn(2).getString() + ") in " +
          open.getColumn(1).getString() + "; one operation at a time per instance");
      open.tryReset();
      return why;
    }
    open.tryReset();
  }
  auto& ins = *ins_op_;
  ins.tryReset();
  ins.clearBindings();
  ins.bind(1, rec.id);
  ins.bind(2, rec.instance_id);
  ins.bind(3, rec.operation);
  ins.bind(4, std::string(to_string(rec.state)));
  ins.bind(5, rec.machine_digest);
  ins.bind(6, rec.package_digest);
  ins.bind(7, sealed_text(rec.request, "op/" + rec.id + "/request"));
  if (rec.error.is_null())
    ins.bind(8);
  else
    ins.bind(8, json::serialize(rec.error));
  if (rec.cursor.is_null())
    ins.bind(9);
  else
    ins.bind(9, sealed_text(rec.cursor, "op/" + rec.id + "/cursor"));
  // An operation the engine creates with its first transition (Engine::start) is its
  // executor's from the start: it never enters ops_unclaimed (one index page fewer).
  if (rec.owner.empty())
    ins.bind(10);
  else
    ins.bind(10, rec.owner);
  ins.bind(11, static_cast<int64_t>(rec.created_ms));
  ins.bind(12, static_cast<int64_t>(rec.created_ms));
  ins.exec();
  return base::Status::Ok();
}

base::Status SqliteStore::create_op(const OpRecord& rec) {
  std::lock_guard lock(wmu_);
  return guard([&] {
    w_.exec("BEGIN IMMEDIATE");
    try {
      if (base::Status why = insert_op_locked(rec); !why.ok()) {
        w_.exec("ROLLBACK");
        return why;
      }
      w_.exec("COMMIT");
    } catch (...) {
      rollback_quietly();
      throw;
    }
    return base::Status::Ok();
  });
}

base::Result<OpRecord> SqliteStore::get_op(std::string_view id) {
  auto rd = readers_.acquire();
  return get_op_locked(rd->db, &rd->q, id);
}

base::Result<std::vector<OpRecord>> SqliteStore::list_ops(const OpFilter& f) {
  auto rd = readers_.acquire();
  std::vector<OpRecord> out;
  base::Status s = guard([&] {
    std::string sql = std::string("SELECT ") + kOpColumns + " FROM ops WHERE 1 = 1";
    if (!f.instance_id.empty())
      sql += " AND instance_id = ?1";
    if (f.state)
      sql += " AND state = ?2";
    sql += " ORDER BY created_ms DESC, id LIMIT ?3";
    auto q_use = rd->q.prepare(sql);
    SQLite::Statement& q = *q_use;
    if (!f.instance_id.empty())
      q.bind(1, f.instance_id);
    if (f.state)
      q.bind(2, std::string(to_string(*f.state)));
    q.bind(3, static_cast<int64_t>(f.limit));
    while (q.executeStep())
      out.push_back(opened(read_op(q)));
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Result<std::vector<OpCount>> SqliteStore::count_ops() {
  auto rd = readers_.acquire();
  std::vector<OpCount> out;
  base::Status s = guard([&] {
    auto q_use =
        rd->q.prepare("SELECT operation, state, count(*) FROM ops GROUP BY operation, state");
    SQLite::Statement& q = *q_use;
    while (q.executeStep()) {
      auto state = parse_op_state(q.getColumn(1).getString());
      if (state)
        out.push_back({q.getColumn(0).getString(), *state, q.getColumn(2).getInt64()});
    }
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Result<OpRecord> SqliteStore::transition(std::string_view id,
                                               const std::vector<OpState>& from, OpState to,
                                               const std::optional<std::string>& error) {
  std::lock_guard lock(wmu_);
  base::Status s = guard([&] {
    w_.exec("BEGIN IMMEDIATE");
    try {
      auto cur = get_op_locked(w_, nullptr, id);
      if (!cur.ok()) {
        w_.exec("ROLLBACK");
        return cur.status();
      }
      bool allowed = false;
      std::string list;
      for (OpState f : from) {
        allowed = allowed || cur.value().state == f;
        list += (list.empty() ? "" : " or ") + std::string(to_string(f));
      }
      if (!allowed) {
        w_.exec("ROLLBACK");
        return base::Status::FailedPrecondition("operation " + std::string(id) + " is " +
                                                std::string(to_string(cur.value().state)) +
                                                "; this needs " + list);
      }
      SQLite::Statement u(
          w_,
          "UPDATE ops SET state = ?2, owner = NULL, cancel_requested = 0,"
          " updated_ms = ?3, error = CASE WHEN ?4 THEN ?5 ELSE error END WHERE id = ?1");
      u.bind(1, std::string(id));
      u.bind(2, std::string(to_string(to)));
      u.bind(3, static_cast<int64_t>(now_ms()));
      u.bind(4, error ? 1 : 0);
      if (error && !error->empty())
        u.bind(5, *error);
      else
        u.bind(5);
      u.exec();
      w_.exec("COMMIT");
    } catch (...) {
      rollback_quietly();
      throw;
    }
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  auto rd = readers_.acquire();
  return get_op_locked(rd->db, &rd->q, id);
}

base::Status SqliteStore::request_cancel(std::string_view id) {
  std::lock_guard lock(wmu_);
  return guard([&] {
    SQLite::Statement u(w_,
                        "UPDATE ops SET cancel_requested = 1 WHERE id = ? AND (state = "
                        "'STARTING' OR state = 'PROCESSING')");
    u.bind(1, std::string(id));
    if (u.exec() == 1)
      return base::Status::Ok();
    auto cur = get_op_locked(w_, nullptr, id);
    if (!cur.ok())
      return cur.status();
    return base::Status::FailedPrecondition(
        "operation " + std::string(id) + " is " + std::string(to_string(cur.value().state)) +
        "; only a STARTING or PROCESSING operation can be cancelled");
  });
}

base::Result<std::vector<OpRecord>> SqliteStore::runnable(bool all) {
  auto rd = readers_.acquire();
  std::vector<OpRecord> out;
  base::Status s = guard([&] {
    std::string sql = std::string("SELECT ") + kOpColumns + " FROM ops WHERE ";
    if (!all)
      sql += "owner IS NULL AND ";
    sql += kRunning;
    sql += " ORDER BY created_ms";
    auto q_use = rd->q.prepare(sql);
    SQLite::Statement& q = *q_use;
    while (q.executeStep())
      out.push_back(opened(read_op(q)));
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Result<std::vector<std::string>> SqliteStore::cancel_requests() {
  auto rd = readers_.acquire();
  std::vector<std::string> out;
  base::Status s = guard([&] {
    auto q_use = rd->q.prepare(
        // Through the index of cancellations: the planner chose ops_running, and read
        // every running operation's row at each poll of the engine.
        std::string("SELECT id FROM ops INDEXED BY ops_cancel WHERE cancel_requested = 1 AND ") +
        kRunning);
    SQLite::Statement& q = *q_use;
    while (q.executeStep())
      out.push_back(q.getColumn(0).getString());
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Result<json::object> SqliteStore::outputs(std::string_view op_id) {
  auto rd = readers_.acquire();
  json::object out;
  base::Status s = guard([&] {
    std::string prefix = "op/" + std::string(op_id) + "/output/";
    // Rows of `outputs` first (an operation's starting outputs), then the events' in order:
    // a state visited again replaces its earlier outputs.
    auto q_use = rd->q.prepare("SELECT state, value FROM outputs WHERE op_id = ?");
    SQLite::Statement& q = *q_use;
    q.bind(1, std::string(op_id));
    while (q.executeStep()) {
      std::string state = q.getColumn(0).getString();
      out[state] = sealer_.open_output(q.getColumn(1).getString(), prefix + state);
    }
    auto e_use = rd->q.prepare(
        "SELECT outputs FROM events WHERE opn = (SELECT num FROM ops WHERE id = ?)"
        " AND outputs IS NOT NULL ORDER BY seq");
    SQLite::Statement& e = *e_use;
    e.bind(1, std::string(op_id));
    while (e.executeStep()) {
      json::value o = parse_or_null(e.getColumn(0).getString());
      if (!o.is_object())
        continue;
      for (const auto& kv : o.get_object())
        if (kv.value().is_string())
          out[kv.key()] = sealer_.open_output(std::string(kv.value().get_string()),
                                              prefix + std::string(kv.key()));
    }
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

base::Result<std::vector<EventRecord>> SqliteStore::history(std::string_view op_id) {
  auto rd = readers_.acquire();
  std::vector<EventRecord> out;
  base::Status s = guard([&] {
    auto q_use = rd->q.prepare(
        "SELECT o.id, e.seq, e.at_ms, e.kind, e.state, e.item, e.attempt, e.key,"
        " e.data, e.started_ms FROM ops o JOIN events e ON e.opn = o.num"
        " WHERE o.id = ? ORDER BY e.seq");
    SQLite::Statement& q = *q_use;
    q.bind(1, std::string(op_id));
    while (q.executeStep()) {
      EventRecord e;
      e.op_id = text(q, 0);
      e.seq = q.getColumn(1).getInt64();
      e.at_ms = q.getColumn(2).getInt64();
      e.kind = text(q, 3);
      e.state = text(q, 4);
      e.item = q.getColumn(5).isNull() ? -1 : q.getColumn(5).getInt();
      e.attempt = q.getColumn(6).getInt();
      e.key = text(q, 7);
      e.data = parse_or_null(text(q, 8));
      e.started_ms = q.getColumn(9).isNull() ? 0 : q.getColumn(9).getInt64();
      out.push_back(std::move(e));
    }
    return base::Status::Ok();
  });
  if (!s.ok())
    return s;
  return out;
}

void SqliteStore::bind_text_or_null(SQLite::Statement& st, int i, const std::string& s) {
  if (s.empty())
    st.bind(i);
  else
    st.bind(i, s);
}

base::Result<OpRecord> SqliteStore::get_op_locked(SQLite::Database& db, StatementCache* cache,
                                                  std::string_view id) {
  OpRecord out;
  base::Status s = guard([&] {
    std::string sql = std::string("SELECT ") + kOpColumns + " FROM ops WHERE id = ?";
    auto read = [&](SQLite::Statement& q) {
      q.bind(1, std::string(id));
      if (!q.executeStep())
        return base::Status::NotFound("no operation \"" + std::string(id) + "\"");
      out = opened(read_op(q));
      return base::Status::Ok();
    };
    if (cache != nullptr) {
      auto q_use = cache->prepare(sql);
      return read(*q_use);
    }
    SQLite::Statement q(db, sql);
    return read(q);
  });
  if (!s.ok())
    return s;
  return out;
}

}  // namespace engine::internal
