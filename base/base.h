// base: the shared floor of vnflow. Every other module depends on it; it depends on
// nothing of ours.
//
// Main types:
//   Status / Result<T>  run-time failures of operations (I/O, servers, stores). The code
//                       carries the retry decision, which the engine owns.
//   Diagnostic(s)       problems in user input (CSAR, TOSCA, workflows), located by
//                       file:line:column and collected, never thrown, so a user sees
//                       every problem of one run at once.
//   digest helpers      SHA-2 family digests used by the CSAR manifest checks and later
//                       by SFTP verification.
//   Clock               time behind an interface (LevelDB's Env): the engine, timers,
//                       backoff, token renewal and stall detection ask a Clock, so tests
//                       run them on a ManualClock in milliseconds instead of sleeping.
//   Metrics             counters, gauges and histograms a daemon keeps in memory and
//                       shows in Prometheus' text format (docs/operations.md).
//   LogFields           the fields (op_id, instance_id, state, attempt) a structured log
//                       line carries besides its message.
//
// Not here: domain types, Asio, logging sinks (the daemon sets those).
// Threading: all types are values; a Diagnostics sink is not thread-safe; Metrics is.
// Design notes: docs/architecture.md, docs/diagnostics.md.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

namespace base {

// Aborts with file and line in every build. Only for invariants (bugs), never for input.
#define BASE_CHECK(cond)                                                            \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                 \
    }                                                                               \
  } while (false)

// ---------------------------------------------------------------------------------------
// Status and Result

enum class StatusCode {
  kOk,
  kCancelled,
  kInvalidArgument,
  kDeadlineExceeded,
  kNotFound,
  kAlreadyExists,
  kPermissionDenied,
  kFailedPrecondition,
  kAborted,  // what was held was lost (a daemon's lease), not refused up front
  kUnavailable,
  kUnauthenticated,
  kInternal,
};

std::string_view to_string(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  static Status InvalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status FailedPrecondition(std::string m) {
    return {StatusCode::kFailedPrecondition, std::move(m)};
  }
  static Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
  static Status PermissionDenied(std::string m) {
    return {StatusCode::kPermissionDenied, std::move(m)};
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "not_found: file \"x\" does not exist"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or the Status saying why there is none. Kept until the toolchain has
// std::expected (g++ 12 only has it with -std=c++23, clang 14 not with libstdc++ 12).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    BASE_CHECK(!std::get<Status>(v_).ok());
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  // REQUIRES: ok()
  T& value() & {
    BASE_CHECK(ok());
    return std::get<T>(v_);
  }
  const T& value() const& {
    BASE_CHECK(ok());
    return std::get<T>(v_);
  }
  // By value, so that `for (auto& x : f().value())` cannot dangle.
  T value() && {
    BASE_CHECK(ok());
    return std::get<T>(std::move(v_));
  }
  // The failure; Status::Ok() when ok().
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }

 private:
  std::variant<T, Status> v_;
};

// ---------------------------------------------------------------------------------------
// Located diagnostics

// Lines and columns count from 1; 0 means unknown.
struct SourceLocation {
  std::string file;  // "vnf.csar!Definitions/vnfd.yaml" for a file inside a CSAR
  uint32_t line = 0;
  uint32_t column = 0;
};

enum class Severity { kError, kWarning, kNote };
std::string_view to_string(Severity s);

// A problem in user input. Never thrown: each phase appends to a Diagnostics sink and
// carries on. Messages are lowercase, without a trailing period, names in double quotes.
struct Diagnostic {
  Severity severity = Severity::kError;
  std::string code;  // stable id such as "T0203", listed in docs/diagnostics.md
  SourceLocation where;
  std::string message;
  std::vector<std::string> notes;  // context lines printed after the diagnostic
};

// "pkg.csar!Definitions/vnfd.yaml:42:13: error: unknown node type \"X\" [T0203]"
// followed by one "  note: ..." line per note. Every field goes through printable(): the
// text a human reads never carries raw bytes from a package.
std::string to_string(const Diagnostic& d);

class Diagnostics {
 public:
  void add(Diagnostic d);
  void error(std::string code, SourceLocation where, std::string message);
  void warning(std::string code, SourceLocation where, std::string message);

  bool has_errors() const { return errors_ > 0; }
  size_t error_count() const { return errors_; }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  const std::vector<Diagnostic>& items() const { return items_; }
  // Sorted by file, line, column, code; exact duplicates removed.
  std::vector<Diagnostic> sorted() const;
  // Appends every diagnostic of `other`.
  void merge(const Diagnostics& other);
  // Keeps at most `n` findings of one kind (code and severity); the rest are only counted,
  // in one more finding "… and N more like this (the first n are shown)" where the first
  // one left out was. 0 (the default) keeps all. Bounds what hostile input can make a
  // checker spend on findings.
  void cap_per_kind(size_t n) { cap_ = n; }
  bool capped() const { return cap_ > 0; }

 private:
  struct Kind {
    size_t seen = 0;
    size_t summary = 0;  // index of the "… and N more" finding
  };
  std::vector<Diagnostic> items_;
  size_t errors_ = 0;
  size_t cap_ = 0;
  std::map<std::pair<std::string, Severity>, Kind> kinds_;
};

// Closest candidate within a small edit distance, for "did you mean" hints; empty if none.
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

// Whether a host (a name, an IPv4 address, an IPv6 address with or without [] and a %scope)
// is this machine's loopback: "localhost", 127.0.0.0/8 or ::1.
bool is_loopback_host(std::string_view host);

// ---------------------------------------------------------------------------------------
// Digests (SHA-2 family)

enum class DigestAlgorithm { kSha224, kSha256, kSha384, kSha512 };

// Accepts "SHA-256", "sha-256", "SHA256", "sha256" (and the 224/384/512 variants).
std::optional<DigestAlgorithm> parse_digest_algorithm(std::string_view name);
std::string_view to_string(DigestAlgorithm a);
size_t digest_hex_length(DigestAlgorithm a);

// Incremental digest; lowercase hex result.
class Hasher {
 public:
  explicit Hasher(DigestAlgorithm a);
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;
  void update(std::string_view data);
  std::string hex_final();

 private:
  void* ctx_;  // EVP_MD_CTX*, hidden so that no OpenSSL header leaks out of base
};

std::string digest_hex(DigestAlgorithm a, std::string_view data);

// ---------------------------------------------------------------------------------------
// Secrets at rest: AES-256-GCM with a 32-byte key kept in a file of its own.

// Reads the key at `path`, or creates it (32 random bytes, mode 0600, O_EXCL) when absent.
// A key file readable by group or others is refused.
Result<std::string> load_or_create_key(const std::string& path);
// "v1:" + hex(nonce[12] | ciphertext | tag[16]). `aad` binds the text to its owner (e.g. the
// VIM id) so a sealed value cannot be moved to another record.
Result<std::string> seal(std::string_view key, std::string_view plain, std::string_view aad);
// Reverses seal(); kPermissionDenied when the key is wrong or the text was altered.
Result<std::string> unseal(std::string_view key, std::string_view sealed, std::string_view aad);

// ---------------------------------------------------------------------------------------
// Text helpers

// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool is_valid_utf8(std::string_view s);
// `s` with ASCII letters lower-cased (header names, schemes, hex digests, file suffixes).
std::string ascii_lower(std::string_view s);
// Escapes a string for a JSON document (without the surrounding quotes).
std::string json_escape(std::string_view s);
// 'text' for a POSIX shell: always single-quoted, a quote inside as '\''.
std::string shell_quote(std::string_view s);
// `s` made safe for a terminal: control characters (ESC, NUL, CR, newline...), DEL, C1
// controls, the bidirectional overrides and isolates, and bytes that are not UTF-8 become
// \n, \x1b, \u202e style escapes, so no name can move the cursor, recolour the screen or
// fake an output line.
//   kLine   everything above (one line of output)
//   kLines  the same, but newlines and tabs are kept (multi-line text such as hook output)
//   kJson   serialized JSON, whose strings are already escaped: only DEL, C1 and the bidi
//           controls, as \u escapes (the same characters to a JSON reader), and bytes that
//           are not UTF-8, as the Latin-1 character of the byte (the document stays valid)
enum class PrintMode { kLine, kLines, kJson };
std::string printable(std::string_view s, PrintMode mode = PrintMode::kLine);

// ---------------------------------------------------------------------------------------
// Time

// Where time comes from. Thread-safe. wall_ms() stamps records (milliseconds since the
// epoch); steady() measures durations and deadlines; sleep_for() waits (a ManualClock
// advances instead).
class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t wall_ms() const = 0;
  virtual std::chrono::steady_clock::time_point steady() const = 0;
  virtual void sleep_for(std::chrono::milliseconds d) = 0;
  // The process's real clock (system_clock, steady_clock, this_thread::sleep_for).
  static Clock& real();
};

// A clock that moves only when told (tests): sleep_for() advances it at once.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t start_wall_ms = 1'700'000'000'000) : wall_(start_wall_ms) {}
  int64_t wall_ms() const override { return wall_.load(); }
  std::chrono::steady_clock::time_point steady() const override {
    return std::chrono::steady_clock::time_point(std::chrono::milliseconds(steady_.load()));
  }
  void sleep_for(std::chrono::milliseconds d) override { advance(d); }
  void advance(std::chrono::milliseconds d) {
    wall_ += d.count();
    steady_ += d.count();
  }

 private:
  std::atomic<int64_t> wall_;
  std::atomic<int64_t> steady_{1'000'000};
};

// ---------------------------------------------------------------------------------------
// Error classes

// How a failed workflow step is classified for its state's retry policy (`retry: on:`).
// The one vocabulary of the workflow language (workflows/, which checks `on:` lists) and
// the actions (actions/, which produce them); it sits here because the two may not see
// each other.
//   kTransient  asking again may work (refused, reset, 5xx, a busy resource)
//   kTimeout    no answer within the step's deadline
//   kFailed     the work ran and failed (a non-zero exit, a stack CREATE_FAILED)
//   kInvalid    asking again cannot work (bad inputs, refused credentials, a 4xx)
//   kCancelled  an operator cancelled the operation: never an action's answer, never
//               retried; the class of the FAILED_TEMP it ends in
enum class ErrorClass { kTransient, kTimeout, kFailed, kInvalid, kCancelled };
// The classes an action answers and a workflow's `retry: on:` may name.
inline constexpr ErrorClass kErrorClasses[] = {ErrorClass::kTransient, ErrorClass::kTimeout,
                                               ErrorClass::kFailed, ErrorClass::kInvalid};

// "transient", "timeout", "failed", "invalid": the spelling in workflows and histories.
inline constexpr std::string_view to_string(ErrorClass c) {
  switch (c) {
    case ErrorClass::kTransient:
      return "transient";
    case ErrorClass::kTimeout:
      return "timeout";
    case ErrorClass::kFailed:
      return "failed";
    case ErrorClass::kInvalid:
      return "invalid";
    case ErrorClass::kCancelled:
      return "cancelled";
  }
  return "failed";
}

// The class spelled `name`; nullopt for any other word.
inline std::optional<ErrorClass> parse_error_class(std::string_view name) {
  for (ErrorClass c : kErrorClasses) {
    if (to_string(c) == name)
      return c;
  }
  if (name == to_string(ErrorClass::kCancelled))
    return ErrorClass::kCancelled;
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------
// Log fields

// Key/value pairs that the log lines written on this thread carry while the scope lives,
// besides their message: what a JSON log (vnflow daemon --log-format json) writes as fields
// of its own, so a collector can select an operation's lines. Scopes nest (an inner one adds
// to the outer ones). The human format ignores them: its messages name what they are about.
class LogFields {
 public:
  using Field = std::pair<std::string, std::string>;
  explicit LogFields(std::initializer_list<Field> fields);
  ~LogFields();
  LogFields(const LogFields&) = delete;
  LogFields& operator=(const LogFields&) = delete;
  // This thread's fields, the outermost scope's first.
  static const std::vector<Field>& current();

 private:
  size_t n_;
};

// ---------------------------------------------------------------------------------------
// A mutex that serves its waiters in the order they came (a ticket lock). A thread that
// unlocks and locks again at once (a group commit after a group commit) queues behind the
// threads already waiting, instead of taking the lock back before they wake, as
// std::mutex lets it: an API request waiting to write is served after at most the commits
// ahead of it. Meets Lockable's lock/unlock (std::lock_guard, std::unique_lock).
class FairMutex {
 public:
  void lock() {
    std::unique_lock<std::mutex> l(mu_);
    uint64_t ticket = next_++;
    cv_.wait(l, [&] { return serving_ == ticket; });
  }
  void unlock() {
    {
      std::lock_guard<std::mutex> l(mu_);
      ++serving_;
    }
    cv_.notify_all();
  }
  // Threads waiting for the lock now (for tests).
  uint64_t waiting() {
    std::lock_guard<std::mutex> l(mu_);
    return next_ - serving_ - (next_ > serving_ ? 1 : 0);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_ = 0, serving_ = 0;
};

// ---------------------------------------------------------------------------------------
// Worker threads fed in bursts. A burst of N jobs (push_all) pushed while W workers sleep
// wakes min(N, W) of them once each (a pool that signals per job pays a futex wake and a
// context switch for each of a burst of 200, as workers faster than the producer fall
// asleep between jobs); a woken worker runs jobs until the queue is empty. Jobs start in the order
// they were pushed. join() runs what is queued, then ends the threads; after it, push() runs
// nothing. Thread-safe.
class WorkQueue {
 public:
  explicit WorkQueue(size_t threads);
  ~WorkQueue();  // join()
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void push(std::function<void()> job);
  // Queues every job of `jobs` (and empties it) under one lock: a burst.
  void push_all(std::vector<std::function<void()>>& jobs);
  void join();
  // Futex wakes made so far (for tests and the bench).
  uint64_t wakes() const;

 private:
  void work();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  size_t sleeping_ = 0, signalled_ = 0;
  uint64_t wakes_ = 0;
  bool joining_ = false;
  std::vector<std::thread> threads_;
};

// ---------------------------------------------------------------------------------------
// Metrics

// A daemon's metrics, in memory, rendered in Prometheus' text exposition format (0.0.4).
// A family is declared once (name, help, label names; a histogram's bucket bounds); its
// series are addressed by label values. Label values must come from small sets (an
// operation, a state, an action kind, an HTTP route pattern and status), never from ids,
// so the number of series stays bounded. Use of an undeclared family, or with the wrong
// number of label values, is a bug: BASE_CHECK. Thread-safe.
class Metrics {
 public:
  enum class Type { kCounter, kGauge, kHistogram };
  using Labels = std::initializer_list<std::string_view>;

  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // `name`: [a-zA-Z_:][a-zA-Z0-9_:]*; `buckets`: increasing upper bounds (histograms only;
  // +Inf is implied). Declaring a family again with the same shape is a no-op.
  void declare(std::string_view name, Type type, std::string_view help,
               std::vector<std::string> label_names, std::vector<double> buckets = {});
  void add(std::string_view name, Labels values, double v = 1);  // counter, gauge
  void set(std::string_view name, Labels values, double v);      // gauge
  void observe(std::string_view name, Labels values, double v);  // histogram
  // Forgets every series of a gauge family (before a collector sets it afresh, so a
  // series that went away does not linger).
  void clear(std::string_view name);
  // Called by text() before rendering (not under the lock): fills gauges read from
  // elsewhere, such as the store's operation counts.
  void on_collect(std::function<void(Metrics&)> collector);
  // The exposition: families in declaration order, series sorted by label values.
  std::string text();
  // One series' value (a histogram's: its count), 0 when it has none yet. For tests.
  double value(std::string_view name, Labels values);

  // `n` bounds from `first`, each `factor` times the one before.
  static std::vector<double> exponential_buckets(double first, double factor, int n);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace base
