// Subscriptions and notifications: what a subscription request may hold, which notices a
// subscription hears of, and the notification bodies (docs/notifications.md). Pure rules;
// the sender is notifier.cpp, the notices are written by the stores.
#include <algorithm>
#include <atomic>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>

#include <boost/json.hpp>

#include "engine/engine.h"
#include "engine/internal/commands.h"

namespace engine {

namespace {

// Whether an http(s) URI's host is this machine's loopback (localhost, 127.0.0.0/8, ::1).
bool loopback_host(std::string_view uri) {
  std::string_view rest = uri.substr(uri.find("://") + 3);
  std::string_view host = rest.substr(0, rest.find_first_of("/?#"));
  if (!host.empty() && host.front() == '[') {
    host = host.substr(1, host.find(']') - 1);
  } else if (size_t colon = host.rfind(':'); colon != std::string_view::npos) {
    host = host.substr(0, colon);
  }
  return base::is_loopback_host(host);
}

constexpr size_t kMaxUriBytes = 2048;
constexpr size_t kMaxListEntries = 256;
constexpr size_t kMaxSubscriptionTextBytes = 1024;
constexpr size_t kMaxSubscriptions = 1000;
constexpr size_t kMaxFilterBytes = 16 * 1024;
constexpr int kMaxCallbackTests = 4;

constexpr std::string_view kLcmOccNotification = "VnfLcmOperationOccurrenceNotification";
constexpr std::string_view kCreationNotification = "VnfIdentifierCreationNotification";
constexpr std::string_view kDeletionNotification = "VnfIdentifierDeletionNotification";
constexpr std::string_view kOnboardingNotification = "VnfPackageOnboardingNotification";
constexpr std::string_view kChangeNotification = "VnfPackageChangeNotification";

bool is_lcm(std::string_view api) {
  return api.rfind("vnflcm/", 0) == 0;
}

// The checks of a request's members, each error naming the member by its path.
class Checker {
 public:
  base::Status error;

  bool fail(const std::string& path, const std::string& what) {
    if (error.ok())
      error = base::Status::InvalidArgument(path + " " + what);
    return false;
  }
  bool text(const json::value& v, const std::string& path) {
    if (!v.is_string())
      return fail(path, "must be a string");
    std::string s(v.get_string());
    if (s.empty())
      return fail(path, "must not be empty");
    if (base::Status st = check_text(path.c_str(), s, kMaxSubscriptionTextBytes); !st.ok()) {
      if (error.ok())
        error = base::Status::InvalidArgument(st.message());
      return false;
    }
    return true;
  }
  bool one_of(const json::value& v, const std::string& path,
              std::initializer_list<std::string_view> allowed) {
    if (!text(v, path))
      return false;
    if (std::find(allowed.begin(), allowed.end(), std::string_view(v.get_string())) ==
        allowed.end()) {
      std::string list;
      for (std::string_view a : allowed)
        list += (list.empty() ? "" : ", ") + std::string(a);
      return fail(path, "must be one of " + list);
    }
    return true;
  }
  // A list of 1..kMaxListEntries entries, each checked by `each`.
  template <typename F>
  bool list(const json::value& v, const std::string& path, F each) {
    if (!v.is_array())
      return fail(path, "must be a list");
    const auto& a = v.get_array();
    if (a.empty())
      return fail(path, "must not be empty (leave it out to match everything)");
    if (a.size() > kMaxListEntries)
      return fail(path, "has more than " + std::to_string(kMaxListEntries) + " entries");
    for (size_t i = 0; i < a.size(); ++i) {
      if (!each(a[i], path + "[" + std::to_string(i) + "]"))
        return false;
    }
    return true;
  }
  bool texts(const json::value& v, const std::string& path) {
    return list(v, path, [&](const json::value& e, const std::string& p) { return text(e, p); });
  }
  // An object whose members are all in `known`, each checked by `member`, the `required`
  // ones present.
  template <typename F>
  bool object(const json::value& v, const std::string& path,
              std::initializer_list<std::string_view> known,
              std::initializer_list<std::string_view> required, F member) {
    if (!v.is_object())
      return fail(path, "must be an object");
    const auto& o = v.get_object();
    for (std::string_view r : required) {
      if (!o.contains(r))
        return fail(path, "needs " + std::string(r));
    }
    for (const auto& kv : o) {
      std::string key(kv.key());
      std::string p = path.empty() ? key : path + "." + key;
      if (std::find(known.begin(), known.end(), std::string_view(key)) == known.end()) {
        std::string shown = key.size() > 60 ? key.substr(0, 60) + "..." : key;
        return fail(path.empty() ? "the request" : path,
                    "has an unknown member \"" + base::printable(shown) + "\"");
      }
      if (!member(key, kv.value(), p))
        return false;
    }
    return true;
  }

  bool products(const json::value& v, const std::string& path) {
    return list(v, path, [&](const json::value& e, const std::string& p) {
      return object(
          e, p, {"vnfProvider", "vnfProducts"}, {"vnfProvider"},
          [&](const std::string& k, const json::value& m, const std::string& mp) {
            if (k == "vnfProvider")
              return text(m, mp);
            return list(m, mp, [&](const json::value& pe, const std::string& pp) {
              return object(
                  pe, pp, {"vnfProductName", "versions"}, {"vnfProductName"},
                  [&](const std::string& k2, const json::value& m2, const std::string& p2) {
                    if (k2 == "vnfProductName")
                      return text(m2, p2);
                    return list(m2, p2, [&](const json::value& ve, const std::string& vp) {
                      return object(
                          ve, vp, {"vnfSoftwareVersion", "vnfdVersions"}, {"vnfSoftwareVersion"},
                          [&](const std::string& k3, const json::value& m3, const std::string& p3) {
                            return k3 == "vnfSoftwareVersion" ? text(m3, p3) : texts(m3, p3);
                          });
                    });
                  });
            });
          });
    });
  }

  bool filter(const json::value& v, bool lcm) {
    if (lcm) {
      return object(
          v, "filter",
          {"vnfInstanceSubscriptionFilter", "notificationTypes", "operationTypes",
           "operationStates"},
          {}, [&](const std::string& k, const json::value& m, const std::string& p) {
            if (k == "vnfInstanceSubscriptionFilter") {
              return object(
                  m, p,
                  {"vnfdIds", "vnfProductsFromProviders", "vnfInstanceIds", "vnfInstanceNames"}, {},
                  [&](const std::string& k2, const json::value& m2, const std::string& p2) {
                    return k2 == "vnfProductsFromProviders" ? products(m2, p2) : texts(m2, p2);
                  });
            }
            if (k == "notificationTypes")
              return list(m, p, [&](const json::value& e, const std::string& ep) {
                return one_of(e, ep,
                              {kLcmOccNotification, kCreationNotification, kDeletionNotification});
              });
            if (k == "operationTypes")
              return list(m, p, [&](const json::value& e, const std::string& ep) {
                return one_of(e, ep,
                              {"INSTANTIATE", "SCALE", "SCALE_TO_LEVEL", "CHANGE_FLAVOUR",
                               "TERMINATE", "HEAL", "OPERATE", "CHANGE_EXT_CONN", "MODIFY_INFO",
                               "CREATE_SNAPSHOT", "REVERT_TO_SNAPSHOT", "CHANGE_VNFPKG"});
              });
            return list(m, p, [&](const json::value& e, const std::string& ep) {
              return one_of(e, ep,
                            {"STARTING", "PROCESSING", "COMPLETED", "FAILED_TEMP", "FAILED",
                             "ROLLING_BACK", "ROLLED_BACK"});
            });
          });
    }
    return object(v, "filter",
                  {"notificationTypes", "vnfProductsFromProviders", "vnfdId", "vnfPkgId",
                   "operationalState", "usageState"},
                  {}, [&](const std::string& k, const json::value& m, const std::string& p) {
                    if (k == "notificationTypes")
                      return list(m, p, [&](const json::value& e, const std::string& ep) {
                        return one_of(e, ep, {kOnboardingNotification, kChangeNotification});
                      });
                    if (k == "vnfProductsFromProviders")
                      return products(m, p);
                    if (k == "operationalState")
                      return list(m, p, [&](const json::value& e, const std::string& ep) {
                        return one_of(e, ep, {"ENABLED", "DISABLED"});
                      });
                    if (k == "usageState")
                      return list(m, p, [&](const json::value& e, const std::string& ep) {
                        return one_of(e, ep, {"IN_USE", "NOT_IN_USE"});
                      });
                    return texts(m, p);
                  });
  }

  bool authentication(const json::value& v) {
    if (!object(
            v, "authentication", {"authType", "paramsBasic", "paramsOauth2ClientCredentials"},
            {"authType"}, [&](const std::string& k, const json::value& m, const std::string& p) {
              if (k == "authType")
                return list(m, p, [&](const json::value& e, const std::string& ep) {
                  if (e.is_string() && e.get_string() == "TLS_CERT")
                    return fail(ep,
                                "TLS_CERT is not supported (BASIC or "
                                "OAUTH2_CLIENT_CREDENTIALS)");
                  return one_of(e, ep, {"BASIC", "OAUTH2_CLIENT_CREDENTIALS"});
                });
              if (k == "paramsBasic")
                return object(m, p, {"userName", "password"}, {"userName", "password"},
                              [&](const std::string&, const json::value& m2,
                                  const std::string& p2) { return text(m2, p2); });
              return object(
                  m, p, {"clientId", "clientPassword", "tokenEndpoint"},
                  {"clientId", "clientPassword", "tokenEndpoint"},
                  [&](const std::string& k2, const json::value& m2, const std::string& p2) {
                    if (k2 != "tokenEndpoint")
                      return text(m2, p2);
                    if (!uri(m2, p2))
                      return false;
                    // The client's password goes there: not in clear over a network.
                    if (m2.get_string().rfind("http://", 0) == 0 && !loopback_host(m2.get_string()))
                      return fail(p2,
                                  "must be an https:// URI (the client's password is "
                                  "sent to it), except on a loopback address");
                    return true;
                  });
            }))
      return false;
    const auto& o = v.get_object();
    for (const auto& t : o.at("authType").get_array()) {
      if (t.get_string() == "BASIC" && !o.contains("paramsBasic"))
        return fail("authentication", "needs paramsBasic for BASIC");
      if (t.get_string() == "OAUTH2_CLIENT_CREDENTIALS" &&
          !o.contains("paramsOauth2ClientCredentials"))
        return fail("authentication",
                    "needs paramsOauth2ClientCredentials for OAUTH2_CLIENT_CREDENTIALS");
    }
    return true;
  }

  // An http:// or https:// URI with a host: the rest is the test GET's to judge.
  bool uri(const json::value& v, const std::string& path) {
    if (!v.is_string())
      return fail(path, "must be a string");
    std::string_view s = v.get_string();
    if (s.size() > kMaxUriBytes)
      return fail(path, "is longer than " + std::to_string(kMaxUriBytes) + " bytes");
    for (char ch : s) {
      auto c = static_cast<unsigned char>(ch);
      if (c <= 0x20 || c >= 0x7f)
        return fail(path, "must be a URI (no spaces, control or non-ASCII characters)");
    }
    std::string_view rest;
    if (s.rfind("http://", 0) == 0)
      rest = s.substr(7);
    else if (s.rfind("https://", 0) == 0)
      rest = s.substr(8);
    else
      return fail(path, "must be an http:// or https:// URI");
    std::string_view authority = rest.substr(0, rest.find_first_of("/?#"));
    if (authority.empty())
      return fail(path, "has no host");
    if (authority.find('@') != std::string_view::npos)
      return fail(path, "must not carry credentials (use authentication)");
    if (s.find('#') != std::string_view::npos)
      return fail(path, "must not have a fragment");
    return true;
  }
};

std::string_view notification_type(const NoticeRecord& n) {
  if (n.kind == "op")
    return kLcmOccNotification;
  if (n.kind == "instance_created")
    return kCreationNotification;
  if (n.kind == "instance_deleted")
    return kDeletionNotification;
  if (n.kind == "package_onboarded")
    return kOnboardingNotification;
  if (n.kind == "package_changed" || n.kind == "package_deleted")
    return kChangeNotification;
  return {};
}

const json::array* list_member(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_array() ? &v->get_array() : nullptr;
}

// A filter list: absent matches everything, present matches when it holds `value`.
bool in_list(const json::object& o, std::string_view key, std::string_view value) {
  const json::array* a = list_member(o, key);
  if (a == nullptr)
    return true;
  return std::any_of(a->begin(), a->end(), [&](const json::value& e) {
    return e.is_string() && e.get_string() == value;
  });
}

std::string subject_text(const NoticeRecord& n, std::string_view key) {
  const json::value* v = n.subject.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->get_string()) : std::string();
}

bool products_match(const json::object& f, const NoticeRecord& n) {
  const json::array* providers = list_member(f, "vnfProductsFromProviders");
  if (providers == nullptr)
    return true;
  std::string provider = subject_text(n, "provider"), product = subject_text(n, "product"),
              version = subject_text(n, "software_version"),
              vnfd_version = subject_text(n, "vnfd_version");
  for (const auto& pv : *providers) {
    const json::value* pr = pv.is_object() ? pv.get_object().if_contains("vnfProvider") : nullptr;
    if (pr == nullptr || !pr->is_string() || pr->get_string() != provider)
      continue;
    const json::array* prods = list_member(pv.get_object(), "vnfProducts");
    if (prods == nullptr)
      return true;
    for (const auto& pd : *prods) {
      const json::value* name =
          pd.is_object() ? pd.get_object().if_contains("vnfProductName") : nullptr;
      if (name == nullptr || !name->is_string() || name->get_string() != product)
        continue;
      const json::array* versions = list_member(pd.get_object(), "versions");
      if (versions == nullptr)
        return true;
      for (const auto& ve : *versions) {
        const json::value* sw =
            ve.is_object() ? ve.get_object().if_contains("vnfSoftwareVersion") : nullptr;
        if (sw == nullptr || !sw->is_string() || sw->get_string() != version)
          continue;
        if (in_list(ve.get_object(), "vnfdVersions", vnfd_version))
          return true;
      }
    }
  }
  return false;
}

std::string notification_id(const SubscriptionRecord& s, const NoticeRecord& n) {
  std::string h = base::digest_hex(base::DigestAlgorithm::kSha256, n.id + "/" + s.id);
  // Shaped as a UUID (version 5's layout: derived from a name).
  h[12] = '5';
  h[16] = "89ab"[h[16] % 4];
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) +
         "-" + h.substr(20, 12);
}

}  // namespace

std::string sol_operation(std::string_view operation) {
  std::string out(operation);
  for (char& c : out)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

base::Result<SubscriptionRecord> create_subscription(Store& store, std::string_view api,
                                                     const json::object& request,
                                                     const NotifyOptions& options) {
  bool lcm = is_lcm(api);
  if (!lcm && api != "vnfpkgm/v1")
    return base::Status::InvalidArgument("no subscriptions on API \"" + std::string(api) + "\"");
  Checker c;
  auto member = [&](const std::string& k, const json::value& m, const std::string& p) {
    if (k == "callbackUri")
      return c.uri(m, p);
    if (k == "filter")
      return c.filter(m, lcm);
    if (k == "verbosity")
      return c.one_of(m, p, {"FULL", "SHORT"});
    return c.authentication(m);
  };
  json::value whole(request);
  if (api == "vnflcm/v2")
    c.object(whole, "", {"filter", "callbackUri", "authentication", "verbosity"}, {"callbackUri"},
             member);
  else
    c.object(whole, "", {"filter", "callbackUri", "authentication"}, {"callbackUri"}, member);
  if (!c.error.ok())
    return c.error;
  // Every look of the sender reads it: bounded as a whole, not only list by list.
  if (const json::value* f = request.if_contains("filter");
      f != nullptr && json::serialize(*f).size() > kMaxFilterBytes)
    return base::Status::InvalidArgument("filter is larger than " +
                                         std::to_string(kMaxFilterBytes / 1024) + " KiB");
  SubscriptionRecord s;
  s.id = new_id();
  s.api = std::string(api);
  s.callback_uri = std::string(request.at("callbackUri").get_string());
  if (const json::value* f = request.if_contains("filter"))
    s.filter = f->get_object();
  if (const json::value* a = request.if_contains("authentication"))
    s.auth = a->get_object();
  if (api == "vnflcm/v2") {
    const json::value* v = request.if_contains("verbosity");
    s.verbosity = v != nullptr ? std::string(v->get_string()) : "FULL";
  }
  auto existing = store.list_subscriptions(false);
  if (!existing.ok())
    return existing.status();
  if (existing.value().size() >= kMaxSubscriptions)
    return base::Status::FailedPrecondition("there are " + std::to_string(kMaxSubscriptions) +
                                            " subscriptions already; delete one first");
  if (options.test_callback) {
    // Each test may wait for a slow callback: a few at once, so that subscribing clients
    // cannot hold every thread of the API.
    static std::atomic<int> testing{0};
    if (testing.fetch_add(1) >= kMaxCallbackTests) {
      testing.fetch_sub(1);
      return base::Status::Unavailable("too many subscriptions are being tested; try again");
    }
    base::Status st = test_callback(s, options);
    testing.fetch_sub(1);
    if (!st.ok())
      return st;
  }
  s.created_ms = now_ms();
  if (base::Status st = store.put_subscription(s); !st.ok())
    return st;
  return store.get_subscription(s.id, false);
}

base::Result<SubscriptionRecord> delete_subscription(Store& store, std::string_view id) {
  auto s = store.get_subscription(id, false);
  if (!s.ok())
    return s.status();
  if (base::Status st = store.delete_subscription(id); !st.ok())
    return st;
  return s;
}

json::object subscription_view(const SubscriptionRecord& s) {
  json::object o{{"id", s.id}};
  if (!s.filter.empty())
    o["filter"] = s.filter;
  o["callbackUri"] = s.callback_uri;
  if (!s.verbosity.empty())
    o["verbosity"] = s.verbosity;
  return o;
}

json::object subscription_status_view(const SubscriptionRecord& s) {
  json::object o = subscription_view(s);
  o["api"] = s.api;
  o["createdAt"] = iso_time(s.created_ms);
  if (!s.auth.empty())
    o["authentication"] = actions::redact(s.auth);
  json::object d{{"delivered", s.delivered},
                 {"backlog", s.backlog},
                 {"failing", s.failing},
                 {"attempts", s.attempts}};
  if (s.last_delivered_ms > 0)
    d["lastDeliveredAt"] = iso_time(s.last_delivered_ms);
  if (s.failing_since_ms > 0)
    d["failingSince"] = iso_time(s.failing_since_ms);
  if (s.next_attempt_ms > 0 && s.attempts > 0)
    d["nextAttemptAt"] = iso_time(s.next_attempt_ms);
  if (!s.last_error.empty())
    d["lastError"] = s.last_error;
  o["delivery"] = std::move(d);
  return o;
}

bool subscription_matches(const SubscriptionRecord& s, const NoticeRecord& n) {
  std::string_view type = notification_type(n);
  if (type.empty())
    return false;
  bool lcm_notice =
      type == kLcmOccNotification || type == kCreationNotification || type == kDeletionNotification;
  if (lcm_notice != is_lcm(s.api))
    return false;
  const json::object& f = s.filter;
  if (!in_list(f, "notificationTypes", type))
    return false;
  if (lcm_notice) {
    if (type == kLcmOccNotification) {
      if (!in_list(f, "operationTypes", sol_operation(n.operation)) ||
          !in_list(f, "operationStates", n.state))
        return false;
    }
    const json::value* iv = f.if_contains("vnfInstanceSubscriptionFilter");
    if (iv == nullptr || !iv->is_object())
      return true;
    const json::object& i = iv->get_object();
    return in_list(i, "vnfdIds", subject_text(n, "vnfd_id")) &&
           in_list(i, "vnfInstanceIds", n.instance_id) &&
           in_list(i, "vnfInstanceNames", subject_text(n, "instance_name")) && products_match(i, n);
  }
  return in_list(f, "vnfdId", subject_text(n, "vnfd_id")) && in_list(f, "vnfPkgId", n.package_id) &&
         in_list(f, "operationalState", subject_text(n, "operational_state")) &&
         in_list(f, "usageState", subject_text(n, "usage_state")) && products_match(f, n);
}

bool is_result_notice(const NoticeRecord& n) {
  return n.kind == "op" && n.state != "STARTING" && n.state != "PROCESSING" &&
         n.state != "ROLLING_BACK";
}

json::object notification_body(const SubscriptionRecord& s, const NoticeRecord& n,
                               std::string_view base_url, const OpRecord* op) {
  std::string_view type = notification_type(n);
  std::string base = std::string(base_url) + "/" + s.api;
  json::object o{{"id", notification_id(s, n)},
                 {"notificationType", type},
                 {"subscriptionId", s.id},
                 {"timeStamp", iso_time(n.at_ms)}};
  json::object links{{"subscription", json::object{{"href", base + "/subscriptions/" + s.id}}}};
  if (type == kLcmOccNotification) {
    bool result = is_result_notice(n);
    o["notificationStatus"] = result ? "RESULT" : "START";
    o["operationState"] = n.state;
    o["vnfInstanceId"] = n.instance_id;
    o["operation"] = sol_operation(n.operation);
    o["isAutomaticInvocation"] = false;
    if (!s.verbosity.empty())
      o["verbosity"] = s.verbosity;
    o["vnfLcmOpOccId"] = n.op_id;
    if (n.error.is_object() &&
        (n.state == "FAILED_TEMP" || n.state == "FAILED" || n.state == "ROLLED_BACK"))
      o["error"] = op_problem(n.error);
    if (op != nullptr && op->id == n.op_id && result && s.verbosity != "SHORT") {
      json::object r = op_results(*op);
      if (const json::value* rc = r.if_contains("resourceChanges")) {
        if (const json::value* a = rc->get_object().if_contains("affectedVnfcs"))
          o["affectedVnfcs"] = *a;
      }
      if (const json::value* ci = r.if_contains("changedInfo");
          ci != nullptr && n.state == "COMPLETED")
        o["changedInfo"] = *ci;
    }
    links["vnfInstance"] = json::object{{"href", base + "/vnf_instances/" + n.instance_id}};
    links["vnfLcmOpOcc"] = json::object{{"href", base + "/vnf_lcm_op_occs/" + n.op_id}};
  } else if (type == kCreationNotification || type == kDeletionNotification) {
    o["vnfInstanceId"] = n.instance_id;
    links["vnfInstance"] = json::object{{"href", base + "/vnf_instances/" + n.instance_id}};
  } else {
    o["vnfPkgId"] = n.package_id;
    o["vnfdId"] = subject_text(n, "vnfd_id");
    if (type == kChangeNotification) {
      if (n.kind == "package_deleted") {
        o["changeType"] = "PKG_DELETE";
      } else {
        o["changeType"] = "OP_STATE_CHANGE";
        o["operationalState"] = subject_text(n, "operational_state");
      }
    }
    links["vnfPackage"] = json::object{{"href", base + "/vnf_packages/" + n.package_id}};
  }
  o["_links"] = std::move(links);
  return o;
}

}  // namespace engine
