// openstack: Keystone v3 sessions and the Heat calls the heat.* actions make.
//
// A Cloud is a VIM's access info. A Client caches one Session per credential (one Client
// per actions::Registry): a token is reused until shortly before it expires (its clock),
// and a 401 re-authenticates once. Endpoints come from the token's catalog (service type,
// interface, region). Every request goes through the Client's http::Transport.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <boost/json/value.hpp>

#include "actions/actions.h"
#include "actions/internal/http.h"
#include "base/base.h"

namespace actions::openstack {

namespace json = boost::json;

struct Cloud {
  std::string auth_url;  // Keystone; "/v3" is appended when missing
  std::string username, password, user_domain = "Default";
  std::string project, project_id, project_domain = "Default";
  std::string app_cred_id, app_cred_name, app_cred_secret;
  std::string region;
  std::string interface = "public";
  std::string ca_file;
  // Replaces the catalog's orchestration URL (like openstackclient's endpoint override);
  // "%(project_id)s" / "%(tenant_id)s" become the token's project id.
  std::string orchestration_endpoint;
};

// From a VIM's access info: {auth_url, username, password, user_domain_name, project_name,
// project_id, project_domain_name, application_credential_id|_name, _secret, region,
// interface, cacert}. Also accepts the SOL003 accessInfo spellings (project, userDomain,
// projectDomain) and interfaceInfo.endpoint as auth_url.
base::Result<Cloud> cloud_from_json(const json::object& access);

// An error of an OpenStack call, classified for the retry policy: transient (refused,
// reset, 5xx, 409 in progress), timeout, invalid (400, 401 after re-auth, 403, 404 on
// create), failed (anything else). `message` names the call; it never holds a secret.
// "2026-11-23T08:41:37Z" / "...37.000000" (Keystone, Heat), as UTC; 0 when it is not one.
std::chrono::system_clock::time_point parse_iso_time(const std::string& s);

struct CallError {
  ErrorClass error_class = ErrorClass::kFailed;
  std::string message;
  int status = 0;  // HTTP status, 0 for transport errors
};

struct Reply {
  int status = 0;
  json::value body;  // null when the body is empty or not JSON
  std::string location;
  std::chrono::system_clock::time_point date;  // the server's clock (Date header), or 0
};

class Session;

// The sessions of one registry, and where their requests and time come from. Thread-safe.
class Client {
 public:
  Client(http::Transport& transport, base::Clock& clock) : transport_(transport), clock_(clock) {}
  // The cached session for these credentials (created on first use).
  std::shared_ptr<Session> session(const Cloud& cloud);
  // Drops every cached token.
  void forget_all();
  base::Clock& clock() const { return clock_; }

 private:
  http::Transport& transport_;
  base::Clock& clock_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Session>> sessions_;
};

class Session {
 public:
  // Calls `service_type`'s endpoint: `path` is appended to the catalog URL. Statuses
  // in `accept` are returned as replies; any other is a CallError.
  struct Result {
    bool ok = false;
    Reply reply;
    CallError error;
  };
  Result call(const std::string& service_type, const std::string& method, const std::string& path,
              const json::value* body, std::initializer_list<int> accept,
              std::chrono::steady_clock::time_point deadline, const std::string& what);

  // The credentials' secrets (password, application credential secret) that are set:
  // what a message built from a server's answer must not repeat.
  std::vector<std::string> secrets() const;

  // For tests: how many times this session authenticated.
  int auth_count() const;

 private:
  friend class Client;
  Session(Cloud c, http::Transport& t, base::Clock& clock)
      : cloud_(std::move(c)), transport_(t), clock_(clock) {}
  bool authenticate(std::chrono::steady_clock::time_point deadline, CallError& err);
  std::string endpoint(const std::string& service_type, CallError& err) const;

  Cloud cloud_;
  http::Transport& transport_;
  base::Clock& clock_;
  mutable std::mutex mu_;
  std::string token_;
  std::chrono::system_clock::time_point expires_;
  // A token is renewed this long before it expires: a tenth of its lifetime, 1 s..2 min
  // (a cloud with 20 s tokens still gets ~18 s of reuse out of each).
  std::chrono::seconds renew_margin_{120};
  json::value catalog_;
  std::string project_id_;
  int auth_count_ = 0;
};

}  // namespace actions::openstack
