#include <algorithm>
#include <cctype>
#include <iterator>

#include <boost/json.hpp>

#include "actions/actions.h"
#include "actions/internal/kinds.h"

namespace actions {

Signature Signature::of(const std::vector<std::string_view>& inputs,
                        const std::vector<std::string_view>& outputs) {
  auto parse = [](const std::vector<std::string_view>& spellings) {
    std::vector<Field> out;
    for (std::string_view sp : spellings) {
      size_t colon = sp.find(": ");
      BASE_CHECK(colon != std::string_view::npos && colon > 0);
      Field f;
      f.name = std::string(sp.substr(0, colon));
      f.type = std::string(sp.substr(colon + 2));
      if (f.name.back() == '?') {
        f.name.pop_back();
        f.required = false;
      }
      out.push_back(std::move(f));
    }
    return out;
  };
  Signature s;
  s.inputs = parse(inputs);
  s.outputs = parse(outputs);
  return s;
}

Outcome Kind::run(const json::object& inputs, const Context& ctx) const {
  if (action_ == nullptr)
    return Outcome::failure(ErrorClass::kInvalid,
                            name_ + " runs inline on the engine's thread, not on a worker");
  return action_->run(inputs, ctx);
}

Outcome Kind::run_inline(const json::object& inputs, json::value& record) const {
  if (!inline_)
    return Outcome::failure(ErrorClass::kInvalid, name_ + " does not run inline");
  return inline_(inputs, record);
}

Registry Registry::standard(Services services) {
  Registry r;
  add_local_exec(r);
  add_instance_actions(r);
  add_heat_actions(r, services);
  add_ssh_actions(r);
  add_http_actions(r, services);
  return r;
}

void Registry::add(std::string name, Signature signature, std::shared_ptr<const Action> action) {
  auto k = std::make_shared<Kind>();
  k->name_ = name;
  k->signature_ = std::move(signature);
  k->action_ = std::move(action);
  kinds_[std::move(name)] = std::move(k);
}

void Registry::add(std::string name, std::shared_ptr<const Action> action) {
  const Kind* old = find(name);
  add(name, old != nullptr ? old->signature() : Signature{}, std::move(action));
}

void Registry::add_inline(std::string name, Signature signature, InlineFn fn) {
  auto k = std::make_shared<Kind>();
  k->name_ = name;
  k->signature_ = std::move(signature);
  k->inline_ = std::move(fn);
  kinds_[std::move(name)] = std::move(k);
}

const Kind* Registry::find(std::string_view name) const {
  auto it = kinds_.find(name);
  return it == kinds_.end() ? nullptr : it->second.get();
}

std::vector<const Kind*> Registry::kinds() const {
  std::vector<const Kind*> out;
  for (const auto& kv : kinds_)
    out.push_back(kv.second.get());
  return out;
}

bool is_secret_name(std::string_view name) {
  // Also the HTTP headers that carry credentials (Authorization, Proxy-Authorization,
  // Cookie, Set-Cookie, X-Api-Key): an http.request's headers and its answer's.
  // One pass, no copy (ASCII letters in either case): it runs on every key of every output
  // and on each cursor and output text a commit seals (Sealer::sealed_text), several times
  // per transition.
  // By first letter (the table below finds each letter's run).
  static constexpr std::string_view kWords[] = {
      "api_key", "apikey",      "api-key",    "authorization", "cookie", "credential", "password",
      "passwd",  "private_key", "privatekey", "passphrase",    "secret", "token"};
  constexpr int kN = static_cast<int>(std::size(kWords));
  struct Table {
    unsigned char lower[256];
    unsigned char from[256], to[256];  // the words [from, to) start with this letter
    constexpr Table() : lower(), from(), to() {
      for (int c = 0; c < 256; ++c)
        lower[c] = static_cast<unsigned char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
      for (int k = kN - 1; k >= 0; --k) {
        auto c = static_cast<unsigned char>(kWords[k][0]);
        if (to[c] == 0)
          to[c] = static_cast<unsigned char>(k + 1);
        from[c] = static_cast<unsigned char>(k);
      }
      for (int c = 'a'; c <= 'z'; ++c) {
        from[c - 'a' + 'A'] = from[c];
        to[c - 'a' + 'A'] = to[c];
      }
    }
  };
  static constexpr Table t;
  const auto* p = reinterpret_cast<const unsigned char*>(name.data());
  const size_t n = name.size();
  for (size_t i = 0; i + 5 <= n; ++i) {  // no word is shorter than 5
    for (int w = t.from[p[i]]; w < t.to[p[i]]; ++w) {
      std::string_view word = kWords[w];
      if (n - i < word.size())
        continue;
      size_t k = 1;
      while (k < word.size() && t.lower[p[i + k]] == static_cast<unsigned char>(word[k]))
        ++k;
      if (k == word.size())
        return true;
    }
  }
  return false;
}

std::string scrub(std::string s, const std::vector<std::string>& secrets) {
  for (const auto& sec : secrets) {
    for (size_t p = s.find(sec); p != std::string::npos; p = s.find(sec, p + 3))
      s.replace(p, sec.size(), "***");
  }
  return s;
}

namespace {

// The schemes whose URLs carry credentials in vnflow's inputs: proxies (http, https, socks)
// and ftp. Other "x://a:b@c" texts (docker://image:tag@sha256:...) are not URLs with a
// password.
bool credential_scheme(std::string_view scheme) {
  std::string l(scheme);
  for (auto& c : l)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (std::string_view k :
       {"http", "https", "socks", "socks4", "socks4a", "socks5", "socks5h", "ftp", "ftps"}) {
    if (l == k)
      return true;
  }
  return false;
}

// A URL's host and optional port: a name or IPv4 address, or [IPv6], then :port.
bool host_port(std::string_view h) {
  if (h.empty())
    return false;
  size_t end = 0;
  if (h[0] == '[') {
    end = h.find(']');
    if (end == std::string_view::npos || end == 1 ||
        h.substr(1, end - 1).find_first_not_of("0123456789abcdefABCDEF:.") !=
            std::string_view::npos)
      return false;
    ++end;
  } else {
    end = h.find(':');
    end = end == std::string_view::npos ? h.size() : end;
    std::string_view name = h.substr(0, end);
    if (name.empty() ||
        name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                               "0123456789.-_") != std::string_view::npos)
      return false;
  }
  if (end == h.size())
    return true;
  // Digits, or a placeholder such as Tacker's documented "host1:port1".
  std::string_view port = h.substr(end);
  return port.size() >= 2 && port.size() <= 16 && port[0] == ':' &&
         port.substr(1).find_first_not_of(
             "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
             "0123456789") == std::string_view::npos;
}

}  // namespace

size_t url_password(std::string_view s, size_t* length) {
  for (size_t at = s.find("://"); at != std::string_view::npos; at = s.find("://", at + 3)) {
    size_t scheme = at;
    while (scheme > 0 && std::isalnum(static_cast<unsigned char>(s[scheme - 1])))
      --scheme;
    if (!credential_scheme(s.substr(scheme, at - scheme)))
      continue;
    // The authority: up to the next '/', '?', '#', blank, quote or comma.
    size_t start = at + 3;
    size_t end = s.find_first_of("/?# \t\r\n\"',", start);
    std::string_view auth = s.substr(start, end == std::string_view::npos ? s.npos : end - start);
    size_t alpha = auth.rfind('@');
    if (alpha == std::string_view::npos || !host_port(auth.substr(alpha + 1)))
      continue;
    size_t colon = auth.substr(0, alpha).find(':');
    if (colon == std::string_view::npos || colon + 1 == alpha)
      continue;
    *length = alpha - colon - 1;
    return start + colon + 1;
  }
  return std::string_view::npos;
}

bool has_url_password(std::string_view s) {
  size_t len = 0;
  return url_password(s, &len) != std::string_view::npos;
}

std::string redact_url_passwords(std::string s) {
  std::string out;
  size_t from = 0, len = 0;
  for (size_t at;
       (at = url_password(std::string_view(s).substr(from), &len)) != std::string_view::npos;) {
    out.append(s, from, at).append("***");
    from += at + len;
  }
  if (from == 0)
    return s;
  out.append(s, from, std::string::npos);
  return out;
}

json::value redact(const json::value& v) {
  if (v.is_object()) {
    json::object o;
    for (const auto& kv : v.get_object())
      o[kv.key()] = is_secret_name(kv.key()) && !kv.value().is_null() ? json::value("***")
                                                                      : redact(kv.value());
    return o;
  }
  if (v.is_array()) {
    json::array a;
    for (const auto& item : v.get_array())
      a.push_back(redact(item));
    return a;
  }
  if (v.is_string() && has_url_password(v.get_string()))
    return json::value(redact_url_passwords(std::string(v.get_string())));
  return v;
}

// ---------------------------------------------------------------------------------------
// Instance-record actions

namespace {

Outcome instance_update(const json::object& in, json::value& record) {
  const json::value* set = in.if_contains("set");
  if (set == nullptr || !set->is_object())
    return Outcome::failure(ErrorClass::kInvalid, "instance.update: \"set\" must be a map");
  if (!record.is_object())
    record = json::object();
  json::object& r = record.get_object();
  json::object previous;
  for (const auto& kv : set->get_object()) {
    if (kv.key() == "id" || kv.key() == "package_id" || kv.key() == "vnfd_id")
      return Outcome::failure(ErrorClass::kInvalid,
                              "instance.update: \"" + std::string(kv.key()) + "\" cannot change");
    const json::value* old = r.if_contains(kv.key());
    previous[kv.key()] = old != nullptr ? *old : json::value();
  }
  for (const auto& kv : set->get_object()) {
    if (kv.value().is_null())
      r.erase(kv.key());
    else
      r[kv.key()] = kv.value();
  }
  return Outcome::success(json::object{{"instance", record}, {"previous", std::move(previous)}});
}

Outcome instance_scale(const json::object& in, json::value& record) {
  const json::value* aspect = in.if_contains("aspect");
  const json::value* steps = in.if_contains("steps");
  if (aspect == nullptr || !aspect->is_string() || steps == nullptr || !steps->is_int64())
    return Outcome::failure(ErrorClass::kInvalid,
                            "instance.scale: needs \"aspect\" (string) and \"steps\" (integer)");
  if (!record.is_object())
    record = json::object();
  json::object& r = record.get_object();
  if (!r.contains("scale_status") || !r["scale_status"].is_object())
    r["scale_status"] = json::object();
  json::object& status = r["scale_status"].get_object();
  std::string a(aspect->get_string());
  int64_t before = status.contains(a) && status[a].is_int64() ? status[a].get_int64() : 0;
  int64_t after = 0;
  if (__builtin_add_overflow(before, steps->get_int64(), &after))
    return Outcome::failure(
        ErrorClass::kInvalid,
        "instance.scale: " + std::to_string(steps->get_int64()) + " steps are out of range");
  if (after < 0)
    return Outcome::failure(ErrorClass::kInvalid, "instance.scale: aspect \"" + a +
                                                      "\" is at level " + std::to_string(before) +
                                                      "; cannot scale in by " +
                                                      std::to_string(-steps->get_int64()));
  if (const json::value* max = in.if_contains("max_level");
      max && max->is_int64() && after > max->get_int64())
    return Outcome::failure(ErrorClass::kInvalid,
                            "instance.scale: aspect \"" + a + "\" is at level " +
                                std::to_string(before) + " of " + std::to_string(max->get_int64()) +
                                "; cannot scale out by " + std::to_string(steps->get_int64()));
  status[a] = after;
  return Outcome::success(json::object{{"level", after}, {"previous", before}});
}

Outcome instance_check(const json::object& in) {
  const json::value* c = in.if_contains("condition");
  const json::value* m = in.if_contains("message");
  std::string msg = m != nullptr && m->is_string() ? std::string(m->get_string()) : "check failed";
  if (c == nullptr || !c->is_bool())
    return Outcome::failure(ErrorClass::kInvalid,
                            "instance.check: \"condition\" must be a boolean");
  if (!c->get_bool())
    return Outcome::failure(ErrorClass::kInvalid, msg);
  return Outcome::success(json::object{{"ok", true}});
}

// The VNFCs a scale-in by `steps` removes: for every VDU the aspect scales, delta x steps
// of its VNFCs. `vnfcs` lists them oldest first per VDU, as heat.resources reads them. By
// default the oldest go, oldest first: what Heat removes from a shrinking group and what
// Tacker does; with `is_reverse` (Tacker's additionalParams.is_reverse) the newest, newest
// first. The built-in scale-in marks exactly these for removal, so a scale_start hook that
// calls this with the same inputs sees the same ones.
Outcome instance_scale_in_targets(const json::object& in) {
  const json::value* vnfd = in.if_contains("vnfd");
  const json::value* aspect = in.if_contains("aspect");
  const json::value* steps = in.if_contains("steps");
  const json::value* vnfcs = in.if_contains("vnfcs");
  if (vnfd == nullptr || !vnfd->is_object() || aspect == nullptr || !aspect->is_string() ||
      steps == nullptr || !steps->is_int64() || vnfcs == nullptr || !vnfcs->is_array())
    return Outcome::failure(ErrorClass::kInvalid,
                            "instance.scale_in_targets: needs vnfd, aspect, steps and vnfcs");
  bool reverse = false;
  if (const json::value* r = in.if_contains("is_reverse"); r != nullptr && !r->is_null()) {
    std::optional<bool> flag = parse_is_reverse(*r);
    if (!flag)
      return Outcome::failure(ErrorClass::kInvalid,
                              "instance.scale_in_targets: is_reverse must be true, false, "
                              "\"True\" or \"False\", not " +
                                  json::serialize(*r).substr(0, 64));
    reverse = *flag;
  }
  const json::value* aspects = vnfd->get_object().if_contains("aspects");
  const json::value* a = aspects != nullptr && aspects->is_object()
                             ? aspects->get_object().if_contains(aspect->get_string())
                             : nullptr;
  if (a == nullptr || !a->is_object())
    return Outcome::failure(ErrorClass::kInvalid, "instance.scale_in_targets: no aspect \"" +
                                                      std::string(aspect->get_string()) +
                                                      "\" in the VNFD");
  json::array out;
  const json::value* deltas = a->get_object().if_contains("deltas");
  if (deltas != nullptr && deltas->is_object()) {
    for (const auto& [vdu, per] : deltas->get_object()) {
      int64_t step = 0;
      if (per.is_object()) {
        for (const auto& kv : per.get_object()) {
          if (kv.value().is_int64()) {
            step = kv.value().get_int64();
            break;
          }
        }
      }
      int64_t want = 0;
      if (__builtin_mul_overflow(step, std::max<int64_t>(steps->get_int64(), 0), &want))
        want = INT64_MAX;
      std::vector<const json::value*> of_vdu;
      for (const auto& v : vnfcs->get_array()) {
        const json::value* d = v.is_object() ? v.get_object().if_contains("vdu") : nullptr;
        if (d != nullptr && d->is_string() && d->get_string() == vdu)
          of_vdu.push_back(&v);
      }
      if (reverse)
        std::reverse(of_vdu.begin(), of_vdu.end());
      for (auto it = of_vdu.begin(); it != of_vdu.end() && want > 0; ++it, --want)
        out.push_back(**it);
    }
  }
  return Outcome::success(json::object{{"vnfcs", std::move(out)}});
}

}  // namespace

std::optional<bool> parse_is_reverse(const json::value& v) {
  if (v.is_bool())
    return v.get_bool();
  if (v.is_string()) {
    std::string_view s = v.get_string();
    if (s == "True" || s == "true")
      return true;
    if (s == "False" || s == "false")
      return false;
  }
  return std::nullopt;
}

void add_instance_actions(Registry& r) {
  r.add_inline(
      "instance.update",
      Signature::of({"set: instance_patch"}, {"instance: instance", "previous: instance_patch"}),
      instance_update);
  r.add_inline("instance.scale",
               Signature::of({"aspect: string", "steps: integer", "max_level?: integer"},
                             {"level: integer", "previous: integer"}),
               instance_scale);
  r.add_inline("instance.scale_in_targets",
               Signature::of({"vnfd: any", "aspect: string", "steps: integer", "vnfcs: list(vnfc)",
                              "is_reverse?: any"},
                             {"vnfcs: list(vnfc)"}),
               [](const json::object& in, json::value&) { return instance_scale_in_targets(in); });
  r.add_inline("instance.check",
               Signature::of({"condition: boolean", "message: string"}, {"ok: boolean"}),
               [](const json::object& in, json::value&) { return instance_check(in); });
}

}  // namespace actions
