#include "engine/internal/cursor.h"

#include <stdexcept>

namespace engine {

namespace {

json::value item_json(const Item& it) {
  json::object o{{"s", static_cast<int>(it.status)}, {"a", it.attempt}};
  if (!it.inputs.is_null())
    o["in"] = it.inputs;
  // A secret output is kept under a secret-named key, so the store seals it at rest.
  if (!it.outputs.is_null())
    o[it.secret ? "secret_o" : "o"] = it.outputs;
  if (it.redispatches != 0)
    o["rd"] = it.redispatches;
  if (it.wake_ms != 0)
    o["w"] = it.wake_ms;
  if (it.cls)
    o["c"] = base::to_string(*it.cls);
  if (!it.msg.empty())
    o["m"] = it.msg;
  return o;
}

Item item_from(const json::value& v) {
  Item it;
  if (!v.is_object())
    return it;
  const auto& o = v.get_object();
  if (auto* s = o.if_contains("s"); s && s->is_int64())
    it.status = static_cast<ItemStatus>(s->get_int64());
  if (auto* a = o.if_contains("a"); a && a->is_int64())
    it.attempt = static_cast<int>(a->get_int64());
  if (auto* x = o.if_contains("in"))
    it.inputs = *x;
  if (auto* x = o.if_contains("o"))
    it.outputs = *x;
  if (auto* x = o.if_contains("secret_o")) {
    it.outputs = *x;
    it.secret = true;
  }
  if (auto* r = o.if_contains("rd"); r && r->is_int64())
    it.redispatches = static_cast<int>(r->get_int64());
  if (auto* w = o.if_contains("w"); w && w->is_int64())
    it.wake_ms = w->get_int64();
  if (auto* c = o.if_contains("c"); c && c->is_string())
    it.cls = base::parse_error_class(c->get_string()).value_or(base::ErrorClass::kFailed);
  if (auto* m = o.if_contains("m"); m && m->is_string())
    it.msg = std::string(m->get_string());
  return it;
}

}  // namespace

json::value Cursor::to_json() const {
  json::array its;
  for (const auto& it : items)
    its.push_back(item_json(it));
  json::array ds;
  for (const auto& d : done) {
    json::object x{
        {"s", d.state}, {"i", d.item}, {d.secret ? "secret_o" : "o", d.outputs}, {"v", d.value}};
    if (d.visit != 1)
      x["vi"] = d.visit;
    if (!d.inputs.is_null())
      x["in"] = d.inputs;
    ds.push_back(std::move(x));
  }
  json::array fs;
  for (const auto& f : frames)
    fs.push_back(json::object{{"c", f.call},
                              {"v", f.values},
                              {"i", f.index},
                              {"in", f.inputs},
                              {"r", f.results},
                              {"run", f.running}});
  json::object o{{"cur", cur}, {"started", started}, {"seq", seq}};
  json::object body_holder;
  json::object& body = seal_body ? body_holder : o;
  body["items"] = std::move(its);
  if (!visits.empty()) {
    json::object vs;
    for (const auto& [k, n] : visits)
      vs[std::to_string(k)] = n;
    o["visits"] = std::move(vs);
  }
  if (!secret_states.empty()) {
    json::array a;
    for (const auto& n : secret_states)
      a.push_back(json::string(n));
    o["sst"] = std::move(a);
  }
  if (!secret_paths.empty()) {
    json::object sp;
    for (const auto& [state, paths] : secret_paths) {
      json::array a;
      for (const auto& p : paths)
        a.push_back(json::string(p));
      sp[state] = std::move(a);
    }
    o["spaths"] = std::move(sp);
  }
  if (!values.empty())
    body["values"] = values;
  if (!ds.empty())
    body["done"] = std::move(ds);
  if (!fs.empty())
    body["frames"] = std::move(fs);
  if (seal_body)
    o["secret_body"] = std::move(body_holder);
  if (rb_started) {
    o["rb"] = rb;
    o["rb_item"] = item_json(rb_item);
  }
  if (has_vnfcs0)
    o["v0"] = vnfcs0;
  if (!changes.empty())
    o["rc"] = changes;
  // Outputs live in their own table (written once per state), not in the cursor, which
  // every commit rewrites.
  return o;
}

base::Result<Cursor> Cursor::from_json(const json::value& v) {
  if (!v.is_object())
    return base::Status::InvalidArgument("the stored cursor is not an object");
  const auto& top = v.get_object();
  Cursor c;
  // A sealed body (seal_body) holds items, values and done; the rest is at the top.
  json::object merged = top;
  if (const json::value* b = top.if_contains("secret_body"); b != nullptr && b->is_object()) {
    c.seal_body = true;
    for (const auto& kv : b->get_object())
      merged[kv.key()] = kv.value();
  }
  const json::object& o = merged;
  try {
    c.cur = static_cast<int>(o.at("cur").as_int64());
    c.started = o.at("started").as_bool();
    c.seq = o.at("seq").as_int64();
    for (const auto& it : o.at("items").as_array())
      c.items.push_back(item_from(it));
    if (auto* vals = o.if_contains("values"))
      c.values = vals->as_array();
    if (auto* ds = o.if_contains("done")) {
      for (const auto& d : ds->as_array()) {
        Done x;
        x.state = static_cast<int>(d.at("s").as_int64());
        x.item = static_cast<int>(d.at("i").as_int64());
        if (auto* so = d.as_object().if_contains("secret_o")) {
          x.outputs = *so;
          x.secret = true;
        } else {
          x.outputs = d.at("o");
        }
        x.value = d.at("v");
        if (auto* vi = d.as_object().if_contains("vi"))
          x.visit = static_cast<int>(vi->as_int64());
        if (auto* in = d.as_object().if_contains("in"))
          x.inputs = *in;
        c.done.push_back(std::move(x));
      }
    }
    if (auto* fs = o.if_contains("frames")) {
      for (const auto& f : fs->as_array()) {
        Frame x;
        x.call = static_cast<int>(f.at("c").as_int64());
        x.values = f.at("v").as_array();
        x.index = f.at("i").as_int64();
        x.inputs = f.at("in");
        x.results = f.at("r").as_array();
        x.running = f.at("run").as_bool();
        if (x.index < 0 || static_cast<size_t>(x.index) > x.values.size())
          throw std::invalid_argument("frames: an item out of its list");
        c.frames.push_back(std::move(x));
      }
    }
    if (auto* rb = o.if_contains("rb")) {
      c.rb_started = true;
      c.rb = static_cast<int>(rb->as_int64());
      c.rb_item = item_from(o.at("rb_item"));
    }
    if (auto* vs = o.if_contains("visits")) {
      for (const auto& kv : vs->as_object())
        c.visits[std::stoi(std::string(kv.key()))] = static_cast<int>(kv.value().as_int64());
    }
    if (auto* ss = o.if_contains("sst")) {
      for (const auto& n : ss->as_array())
        c.secret_states.emplace_back(n.as_string());
    }
    if (auto* sp = o.if_contains("spaths")) {
      for (const auto& kv : sp->as_object()) {
        auto& paths = c.secret_paths[std::string(kv.key())];
        for (const auto& p : kv.value().as_array())
          paths.emplace_back(p.as_string());
      }
    }
    if (auto* outs = o.if_contains("outputs"))
      c.outputs = outs->as_object();
    if (auto* v0 = o.if_contains("v0")) {
      c.has_vnfcs0 = true;
      c.vnfcs0 = v0->as_array();
      for (const auto& vnfc : c.vnfcs0) {
        const auto& x = vnfc.as_object();
        if (!x.at("id").is_string() || !x.at("vduId").is_string() ||
            !x.at("computeResource").is_object())
          throw std::invalid_argument("v0: a VNFC without id, vduId or computeResource");
      }
    }
    if (auto* rc = o.if_contains("rc"))
      c.changes = rc->as_object();
  } catch (const std::exception& e) {
    return base::Status::InvalidArgument(std::string("the stored cursor is malformed: ") +
                                         e.what());
  }
  return c;
}

}  // namespace engine
