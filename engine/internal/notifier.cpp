// The notification sender (engine.h, Notifier): each subscription's notices in commit order,
// one exchange at a time, its progress recorded in the store; a scheduler thread and a few
// sender threads, so that a slow receiver holds only its own subscription.
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include "engine/engine.h"
#include "engine/internal/commands.h"

namespace engine {

namespace {

using Type = base::Metrics::Type;

std::string_view api_version(std::string_view api) {
  if (api == "vnflcm/v2")
    return "2.0.0";
  if (api == "vnflcm/v1")
    return "1.3.0";
  return "2.1.0";  // vnfpkgm/v1
}

bool has_auth_type(const json::object& auth, std::string_view type) {
  const json::value* t = auth.if_contains("authType");
  if (t == nullptr || !t->is_array())
    return false;
  return std::any_of(t->get_array().begin(), t->get_array().end(),
                     [&](const json::value& v) { return v.is_string() && v.get_string() == type; });
}

std::string member_text(const json::object& o, std::string_view params, std::string_view key) {
  const json::value* p = o.if_contains(params);
  if (p == nullptr || !p->is_object())
    return {};
  const json::value* v = p->get_object().if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->get_string()) : std::string();
}

// A URI as error messages show it: without its query, which may carry a token.
std::string shown(const std::string& uri) {
  return uri.substr(0, uri.find('?'));
}

// Why an exchange got no answer, without the transport's words (which may tell an open port
// from a closed one): only that the address was not allowed.
std::string why(const base::Status& st) {
  return st.code() == base::StatusCode::kPermissionDenied
             ? "not contacted: its address is outside --notify-allow"
             : "no answer";
}

// OAuth 2.0 client credentials (RFC 6749 4.4): the access token and for how long it holds.
struct Token {
  std::string value;
  std::chrono::steady_clock::time_point until;
};

base::Result<Token> fetch_token(const json::object& auth, const NotifyOptions& o) {
  actions::HttpCall c;
  c.method = "POST";
  c.url = member_text(auth, "paramsOauth2ClientCredentials", "tokenEndpoint");
  c.headers = {
      {"Content-Type", "application/x-www-form-urlencoded"},
      {"Accept", "application/json"},
      {"Authorization", actions::basic_authorization(
                            member_text(auth, "paramsOauth2ClientCredentials", "clientId"),
                            member_text(auth, "paramsOauth2ClientCredentials", "clientPassword"))}};
  c.body = "grant_type=client_credentials";
  c.ca_file = o.ca_file;
  c.allow = o.allow;
  c.max_body = 64 * 1024;
  c.timeout = o.timeout;
  auto r = actions::http_call(c);
  if (!r.ok())
    return base::Status::Unavailable("token endpoint " + shown(c.url) + ": " + why(r.status()) +
                                     " (" + std::string(base::to_string(r.status().code())) + ")");
  if (r.value().status != 200)
    return base::Status::Unavailable("token endpoint " + shown(c.url) + ": HTTP " +
                                     std::to_string(r.value().status) + " (200 expected)");
  boost::system::error_code ec;
  json::value v = json::parse(r.value().body, ec);
  const json::value* t =
      !ec && v.is_object() ? v.get_object().if_contains("access_token") : nullptr;
  if (t == nullptr || !t->is_string() || t->get_string().empty() || t->get_string().size() > 8192)
    return base::Status::Unavailable("token endpoint " + shown(c.url) +
                                     ": no access_token in its answer");
  for (char ch : t->get_string()) {
    if (static_cast<unsigned char>(ch) < 0x21 || static_cast<unsigned char>(ch) > 0x7e)
      return base::Status::Unavailable("token endpoint " + shown(c.url) +
                                       ": the access_token is not a token");
  }
  Token out;
  out.value = std::string(t->get_string());
  int64_t seconds = 300;  // a token without expires_in is asked for again after 5 minutes
  if (const json::value* e = v.get_object().if_contains("expires_in"); e && e->is_number()) {
    boost::system::error_code ec2;
    double d = e->to_number<double>(ec2);
    if (!ec2 && d > 0)
      seconds = static_cast<int64_t>(std::min(d, 86400.0));
  }
  // Renewed a little before it runs out.
  out.until =
      std::chrono::steady_clock::now() + std::chrono::seconds(std::max<int64_t>(0, seconds - 10));
  return out;
}

// Caches the tokens of OAUTH2_CLIENT_CREDENTIALS subscriptions, by subscription.
class Tokens {
 public:
  // The Authorization header's value for `s` ("" for none). `renew`: the last one was refused.
  base::Result<std::string> authorization(const SubscriptionRecord& s, const NotifyOptions& o,
                                          bool renew) {
    if (has_auth_type(s.auth, "OAUTH2_CLIENT_CREDENTIALS")) {
      {
        std::lock_guard<std::mutex> l(mu_);
        auto it = tokens_.find(s.id);
        if (it != tokens_.end() && !renew && std::chrono::steady_clock::now() < it->second.until)
          return "Bearer " + it->second.value;
      }
      auto t = fetch_token(s.auth, o);
      if (!t.ok())
        return t.status();
      std::lock_guard<std::mutex> l(mu_);
      if (tokens_.size() > 10000)
        tokens_.clear();
      tokens_[s.id] = t.value();
      return "Bearer " + t.value().value;
    }
    if (has_auth_type(s.auth, "BASIC"))
      return actions::basic_authorization(member_text(s.auth, "paramsBasic", "userName"),
                                          member_text(s.auth, "paramsBasic", "password"));
    return std::string();
  }
  void forget(const std::string& id) {
    std::lock_guard<std::mutex> l(mu_);
    tokens_.erase(id);
  }

 private:
  std::mutex mu_;
  std::map<std::string, Token> tokens_;
};

// One exchange with `s`'s callback (its authorization asked of `tokens`, once more with a new
// token when an OAuth2 one is refused), on `session`'s kept connection when there is one.
// OK for a 2xx answer.
base::Status exchange(const SubscriptionRecord& s, const NotifyOptions& o, Tokens& tokens,
                      const std::string& method, const std::string& body,
                      actions::HttpSession* session = nullptr) {
  for (int round = 0; round < 2; ++round) {
    auto authz = tokens.authorization(s, o, round > 0);
    if (!authz.ok())
      return authz.status();
    actions::HttpCall c;
    c.method = method;
    c.url = s.callback_uri;
    c.headers = {{"Accept", "application/json"}, {"Version", std::string(api_version(s.api))}};
    if (!body.empty())
      c.headers.emplace_back("Content-Type", "application/json");
    if (!authz.value().empty())
      c.headers.emplace_back("Authorization", authz.value());
    c.body = body;
    c.ca_file = o.ca_file;
    c.allow = o.allow;
    c.may_resend = true;  // at least once: receivers deduplicate on the id
    c.max_body = 64 * 1024;
    c.timeout = o.timeout;
    auto r = session != nullptr ? session->call(c) : actions::http_call(c);
    if (!r.ok())
      return base::Status::Unavailable(method + " " + shown(s.callback_uri) + ": " +
                                       why(r.status()) + " (" +
                                       std::string(base::to_string(r.status().code())) + ")");
    int code = r.value().status;
    if (code >= 200 && code <= 299)
      return base::Status::Ok();
    if (code == 401 && round == 0 && has_auth_type(s.auth, "OAUTH2_CLIENT_CREDENTIALS"))
      continue;
    return base::Status::Unavailable(method + " " + shown(s.callback_uri) + ": HTTP " +
                                     std::to_string(code));
  }
  return base::Status::Unavailable(method + " " + shown(s.callback_uri) + ": HTTP 401");
}

}  // namespace

base::Status test_callback(const SubscriptionRecord& s, const NotifyOptions& options) {
  Tokens tokens;
  base::Status st = exchange(s, options, tokens, "GET", "");
  if (!st.ok())
    return base::Status::FailedPrecondition(
        "the test of callbackUri failed (a GET must answer "
        "204): " +
        st.message());
  return st;
}

void declare_notify_metrics(base::Metrics& m) {
  m.declare("vnflow_notifications_total", Type::kCounter,
            "Notification deliveries attempted, by result (ok, error).", {"result"});
  m.declare("vnflow_notification_latency_seconds", Type::kHistogram,
            "From the commit of a change to the receiver's answer to its notification (first "
            "attempts that succeeded).",
            {}, base::Metrics::exponential_buckets(0.001, 2, 16));  // 1 ms .. 33 s
  m.declare("vnflow_notification_backlog", Type::kGauge,
            "Notices the subscriptions have not passed yet, summed over subscriptions.", {});
  m.declare("vnflow_subscriptions", Type::kGauge, "Subscriptions, by whether they are failing.",
            {"failing"});
}

void collect_notify_metrics(base::Metrics& m, Store& store) {
  auto subs = store.list_subscriptions(false);
  if (!subs.ok())
    return;  // the last values stay
  int64_t backlog = 0, failing = 0;
  for (const auto& sub : subs.value()) {
    backlog += sub.backlog;
    failing += sub.failing ? 1 : 0;
  }
  m.set("vnflow_notification_backlog", {}, static_cast<double>(backlog));
  m.set("vnflow_subscriptions", {"true"}, static_cast<double>(failing));
  m.set("vnflow_subscriptions", {"false"},
        static_cast<double>(static_cast<int64_t>(subs.value().size()) - failing));
}

constexpr size_t kMaxSessions = 16;

struct Notifier::Impl {
  Store& store;
  NotifyOptions opt;
  base::Metrics* metrics;
  base::Clock* clock;
  Tokens tokens;

  std::mutex mu;
  std::condition_variable cv;    // the scheduler's
  std::condition_variable work;  // the senders'
  bool stopping = false, poked = false, started = false;
  std::set<std::string> busy;  // subscriptions queued or being served
  std::deque<std::string> queue;
  // Subscriptions not served again before a time: their store calls failed, or another
  // daemon holds them. In memory: a restart tries at once.
  std::map<std::string, std::chrono::steady_clock::time_point> held;
  // A kept connection per subscription, used by the sender serving it (one at a time);
  // closed after 10 s unused, at most kMaxSessions.
  std::map<std::string, std::unique_ptr<actions::HttpSession>> sessions;
  std::thread scheduler;
  std::vector<std::thread> senders;
  std::chrono::steady_clock::time_point last_prune, last_warning;

  Impl(Store& s, NotifyOptions o, base::Metrics* m, base::Clock* c)
      : store(s), opt(std::move(o)), metrics(m), clock(c) {}

  // A warning about the store at most every 10 s (a store that is down fails every look).
  void warn_store(const std::string& what, const base::Status& st) {
    auto now = std::chrono::steady_clock::now();
    {
      std::lock_guard<std::mutex> l(mu);
      if (now - last_warning < std::chrono::seconds(10))
        return;
      last_warning = now;
    }
    spdlog::warn("notifications: {}: {}", what, st.message());
  }

  void hold(const std::string& id, std::chrono::milliseconds d) {
    std::lock_guard<std::mutex> l(mu);
    held[id] = std::chrono::steady_clock::now() + d;
  }

  void schedule_loop() {
    while (true) {
      {
        std::unique_lock<std::mutex> l(mu);
        cv.wait_for(l, opt.poll, [&] { return stopping || poked; });
        if (stopping)
          return;
        poked = false;
      }
      schedule();
      // Commits come hundreds a second under load: one look per few milliseconds serves them
      // all (the store is asked once, not once per commit).
      std::unique_lock<std::mutex> l(mu);
      cv.wait_for(l, std::chrono::milliseconds(5), [&] { return stopping; });
    }
  }

  void schedule() {
    auto steady = std::chrono::steady_clock::now();
    auto due = store.due_subscriptions(clock->wall_ms());
    if (!due.ok()) {
      warn_store("cannot read the subscriptions", due.status());
    } else {
      std::lock_guard<std::mutex> l(mu);
      for (const std::string& id : due.value()) {
        auto h = held.find(id);
        if (h != held.end()) {
          if (steady < h->second)
            continue;
          held.erase(h);
        }
        if (busy.insert(id).second)
          queue.push_back(id);
      }
    }
    work.notify_all();
    if (steady - last_prune > std::chrono::seconds(10)) {
      last_prune = steady;
      close_idle_sessions(steady - std::chrono::seconds(10));
      if (auto p = store.prune_notices(); !p.ok())
        warn_store("cannot prune delivered notices", p.status());
    }
  }

  // The kept connection of subscription `id`. At most kMaxSessions are kept: the least
  // recently used one no sender is using makes room (each holds a socket, an io_context's
  // descriptors and maybe a resolver thread).
  actions::HttpSession& session(const std::string& id) {
    std::unique_ptr<actions::HttpSession> evicted;  // destroyed unlocked
    std::lock_guard<std::mutex> l(mu);
    auto it = sessions.find(id);
    if (it != sessions.end())
      return *it->second;
    if (sessions.size() >= kMaxSessions) {
      auto lru = sessions.end();
      for (auto i = sessions.begin(); i != sessions.end(); ++i) {
        if (busy.count(i->first) == 0 &&
            (lru == sessions.end() || i->second->last_used() < lru->second->last_used()))
          lru = i;
      }
      if (lru != sessions.end()) {
        evicted = std::move(lru->second);
        sessions.erase(lru);
      }
    }
    auto& p = sessions[id];
    p = std::make_unique<actions::HttpSession>();
    return *p;
  }

  // Closes the connections of subscriptions gone or unused since `before` (never one a
  // sender is using). Destroyed outside the lock: an io_context whose lookup still runs
  // waits for it.
  void close_idle_sessions(std::chrono::steady_clock::time_point before) {
    std::vector<std::unique_ptr<actions::HttpSession>> closed;
    {
      std::lock_guard<std::mutex> l(mu);
      for (auto it = sessions.begin(); it != sessions.end();) {
        if (busy.count(it->first) == 0 && it->second->last_used() < before) {
          closed.push_back(std::move(it->second));
          it = sessions.erase(it);
        } else {
          ++it;
        }
      }
    }
  }

  // Subscription `id` is gone: its token and connection too.
  void forget(const std::string& id) {
    tokens.forget(id);
    std::lock_guard<std::mutex> l(mu);
    auto it = sessions.find(id);
    if (it != sessions.end())
      it->second->close();
  }

  void sender_loop() {
    while (true) {
      std::string id;
      {
        std::unique_lock<std::mutex> l(mu);
        work.wait(l, [&] { return stopping || !queue.empty(); });
        if (stopping)
          return;
        id = std::move(queue.front());
        queue.pop_front();
      }
      bool progressed = deliver(id);
      {
        std::lock_guard<std::mutex> l(mu);
        busy.erase(id);
        if (progressed)
          poked = true;  // it may have more
      }
      if (progressed)
        cv.notify_one();
    }
  }

  bool stop_requested() {
    std::lock_guard<std::mutex> l(mu);
    return stopping;
  }

  // Serves subscription `id` for up to 2 s: its notices in order, until one fails. True when
  // it got further (a delivery, or notices passed).
  bool deliver(const std::string& id) {
    auto claim = store.claim_subscription(id, opt.owner, 30000);
    if (!claim.ok()) {
      warn_store("cannot claim subscription " + id, claim.status());
      hold(id, std::chrono::seconds(1));
      return false;
    }
    if (!claim.value()) {  // another daemon sends it
      hold(id, std::chrono::seconds(5));
      return false;
    }
    auto got = store.get_subscription(id, true);
    if (!got.ok()) {
      if (got.status().code() == base::StatusCode::kNotFound) {
        forget(id);  // deleted meanwhile
      } else {
        warn_store("cannot read subscription " + id, got.status());
        hold(id, std::chrono::seconds(5));
      }
      return false;
    }
    SubscriptionRecord s = std::move(got).value();
    actions::HttpSession& conn = session(id);
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    bool failed = false, progressed = false, interrupted = false;
    for (int batch = 0;
         !failed && !interrupted && !stop_requested() && std::chrono::steady_clock::now() < until;
         ++batch) {
      // Deleted meanwhile: nothing more is sent to it.
      if (batch > 0 &&
          store.get_subscription(id, false).status().code() == base::StatusCode::kNotFound) {
        forget(id);
        return progressed;
      }
      auto notices = store.notices_after(s.cursor, 64);
      if (!notices.ok()) {
        warn_store("cannot read notices", notices.status());
        hold(id, std::chrono::seconds(1));
        break;
      }
      if (notices.value().empty())
        break;
      bool changed = false;
      for (const NoticeRecord& n : notices.value()) {
        if (!subscription_matches(s, n)) {
          s.cursor = n.at;
          changed = true;
          continue;
        }
        // A result's body carries the operation's changes, read from its record.
        std::optional<OpRecord> op;
        if (is_result_notice(n)) {
          auto got_op = store.get_op(n.op_id);
          if (got_op.ok()) {
            op = std::move(got_op).value();
          } else if (got_op.status().code() != base::StatusCode::kNotFound) {
            warn_store("cannot read operation " + n.op_id, got_op.status());
            hold(id, std::chrono::seconds(1));
            interrupted = true;
            break;
          }
        }
        std::string body =
            json::serialize(notification_body(s, n, opt.base_url, op ? &*op : nullptr));
        base::Status st = exchange(s, opt, tokens, "POST", body, &conn);
        int64_t now = clock->wall_ms();
        changed = true;
        if (st.ok()) {
          if (metrics != nullptr) {
            metrics->add("vnflow_notifications_total", {"ok"});
            if (s.attempts == 0)
              metrics->observe("vnflow_notification_latency_seconds", {},
                               static_cast<double>(std::max<int64_t>(0, now - n.at_ms)) / 1000);
          }
          if (s.failing)
            spdlog::info("notifications: subscription {} delivers again", s.id);
          s.cursor = n.at;
          s.delivered++;
          s.last_delivered_ms = now;
          s.attempts = 0;
          s.failing_since_ms = 0;
          s.next_attempt_ms = 0;
          s.failing = false;
          s.last_error.clear();
          continue;
        }
        if (metrics != nullptr)
          metrics->add("vnflow_notifications_total", {"error"});
        s.attempts++;
        if (s.failing_since_ms == 0)
          s.failing_since_ms = now;
        int64_t backoff = opt.backoff_min.count();
        for (int i = 1; i < s.attempts && backoff < opt.backoff_max.count(); ++i)
          backoff *= 2;
        backoff = std::min<int64_t>(backoff, opt.backoff_max.count());
        s.next_attempt_ms = now + backoff;
        s.last_error = base::printable(st.message().substr(0, 300));
        if (!s.failing && now - s.failing_since_ms >= opt.retry_for.count()) {
          s.failing = true;
          spdlog::warn("notifications: subscription {} is failing: nothing delivered for {} s: {}",
                       s.id, (now - s.failing_since_ms) / 1000, s.last_error);
        }
        failed = true;
        break;
      }
      if (changed) {
        base::Status st = store.record_delivery(s);
        if (st.code() == base::StatusCode::kNotFound) {
          forget(id);
          return progressed;  // deleted meanwhile
        }
        if (!st.ok()) {
          // What was sent is sent again after the pause (at least once).
          warn_store("cannot record the delivery of subscription " + s.id, st);
          hold(id, std::chrono::seconds(1));
          return progressed;
        }
        progressed = progressed || !failed;
      }
    }
    return progressed;
  }
};

Notifier::Notifier(Store& store, NotifyOptions options, base::Metrics* metrics, base::Clock* clock)
    : impl_(std::make_unique<Impl>(store, std::move(options), metrics, clock)) {
  if (metrics != nullptr)
    declare_notify_metrics(*metrics);
}

Notifier::~Notifier() {
  stop();
}

void Notifier::start() {
  std::lock_guard<std::mutex> l(impl_->mu);
  if (impl_->started)
    return;
  impl_->started = true;
  impl_->scheduler = std::thread([this] { impl_->schedule_loop(); });
  for (int i = 0; i < std::max(1, impl_->opt.senders); ++i)
    impl_->senders.emplace_back([this] { impl_->sender_loop(); });
}

void Notifier::stop() {
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    if (!impl_->started || impl_->stopping)
      return;
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  impl_->work.notify_all();
  if (impl_->scheduler.joinable())
    impl_->scheduler.join();
  for (auto& t : impl_->senders)
    t.join();
  impl_->senders.clear();
}

void Notifier::poke() {
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    impl_->poked = true;
  }
  impl_->cv.notify_one();
}

}  // namespace engine
