// A daemon on a database: the checks of the database's folder and files, the
// single-daemon lock, signals and drain, around one Engine.
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/datagram_protocol.hpp>
#include <boost/asio/signal_set.hpp>
#include <fcntl.h>
#include <pwd.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "engine/engine.h"

namespace engine {

namespace {

std::string who(uid_t uid) {
  std::string s = "uid " + std::to_string(uid);
  struct passwd pw;
  struct passwd* found = nullptr;
  std::vector<char> buf(4096);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr)
    s += " (" + std::string(found->pw_name) + ")";
  return s;
}

std::string octal(mode_t m) {
  char b[8];
  std::snprintf(b, sizeof b, "%04o", static_cast<unsigned>(m & 07777));
  return b;
}

// Creates the missing folders of `dir`, each 0700.
base::Status make_dirs(const std::filesystem::path& dir) {
  std::error_code ec;
  if (dir.empty() || std::filesystem::exists(dir, ec))
    return base::Status::Ok();
  if (base::Status s = make_dirs(dir.parent_path()); !s.ok())
    return s;
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return base::Status::Unavailable("cannot create folder \"" + dir.string() +
                                     "\": " + std::strerror(errno));
  return base::Status::Ok();
}

// The database's folder decides who can swap the database or read the key beside it: it
// must belong to this user (or root) and be writable by nobody else, sticky or not.
base::Status check_folder(const std::filesystem::path& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0)
    return base::Status::Unavailable("cannot use folder \"" + dir.string() +
                                     "\": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return base::Status::FailedPrecondition("\"" + dir.string() + "\" is not a folder");
  uid_t me = ::geteuid();
  if (st.st_uid != me && st.st_uid != 0)
    return base::Status::PermissionDenied(
        "the database folder \"" + dir.string() + "\" belongs to " + who(st.st_uid) + ", not to " +
        who(me) + ": its owner could read the secrets or swap the database; refusing it");
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return base::Status::PermissionDenied(
        "the database folder \"" + dir.string() + "\" is writable by group or others (mode " +
        octal(st.st_mode) + "): they could swap the database; refusing it");
  return base::Status::Ok();
}

// A descriptor closed on scope exit.
struct Fd {
  int fd = -1;
  Fd() = default;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0)
      ::close(fd);
  }
};

// The file whose inode is locked: a symlink or a hard link to it is the same database.
std::string lock_path(const std::string& path) {
  std::error_code ec;
  std::string real = std::filesystem::canonical(path, ec).string();
  return ec ? path : real;
}

// The daemon's wake socket: a datagram socket beside the database file (the real one, so
// every name of the file finds it). "" when the path does not fit a socket address.
std::string wake_path(const std::string& db) {
  std::string p = lock_path(db) + ".wake";
  return p.size() < sizeof(sockaddr_un::sun_path) ? p : std::string();
}

// A key file, when it exists, belongs to this user and is private.
base::Status check_key_file(const std::string& key) {
  uid_t me = ::geteuid();
  struct stat st;
  if (::stat(key.c_str(), &st) == 0) {
    if (st.st_uid != me)
      return base::Status::PermissionDenied("the key file \"" + key + "\" belongs to " +
                                            who(st.st_uid) + ", not to " + who(me) +
                                            "; refusing it");
    if ((st.st_mode & 077) != 0)
      return base::Status::PermissionDenied("the key file \"" + key + "\" has mode " +
                                            octal(st.st_mode) +
                                            ": others could read or change it; refusing it");
  }
  return base::Status::Ok();
}

// The key of a PostgreSQL database is shared by configuration: every daemon and CLI on it
// is given the same file ($VNFLOW_DB_KEY, else ~/.local/share/vnflow/postgres.key).
std::string postgres_key_path() {
  if (const char* k = std::getenv("VNFLOW_DB_KEY"); k != nullptr && *k != '\0')
    return k;
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr && *home != '\0' ? home : ".") +
         "/.local/share/vnflow/postgres.key";
}

}  // namespace

base::Status check_database(const std::string& path) {
  // The folder of the file (SQLite), or of the key file (PostgreSQL, whose database's own
  // access rules are PostgreSQL's).
  bool pg = is_postgres_url(path);
  std::filesystem::path dir = std::filesystem::path(pg ? postgres_key_path() : path).parent_path();
  if (dir.empty())
    dir = ".";
  if (base::Status s = make_dirs(dir); !s.ok())
    return s;
  if (base::Status s = check_folder(dir); !s.ok())
    return s;
  if (pg)
    return check_key_file(postgres_key_path());
  uid_t me = ::geteuid();
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode))
      return base::Status::FailedPrecondition("\"" + path + "\" is not a regular file");
    if (st.st_uid != me)
      return base::Status::PermissionDenied("the database \"" + path + "\" belongs to " +
                                            who(st.st_uid) + ", not to " + who(me) +
                                            "; refusing it");
    // SQLite keeps a WAL per file name: two names of one file (a hard link) would each get a
    // journal of their own and corrupt it.
    if (st.st_nlink > 1)
      return base::Status::FailedPrecondition(
          "the database \"" + path + "\" has " + std::to_string(st.st_nlink) +
          " hard links: each name would get a journal of its own; use one name (a symbolic "
          "link is fine)");
    // SQLite would take a 0-byte file for a new database and write a schema into it.
    if (st.st_size == 0)
      return base::Status::FailedPrecondition(
          "\"" + path + "\" is empty: not a vnflow database; remove it to start a new one");
  }
  // Through a symlink, the WAL and the key are beside the file it points to.
  std::error_code ec;
  std::filesystem::path real = std::filesystem::weakly_canonical(path, ec);
  if (ec)
    real = path;
  else if (base::Status s = check_folder(real.parent_path()); !s.ok())
    return s;
  return check_key_file(real.string() + ".key");
}

base::Result<std::unique_ptr<Store>> open_database(const std::string& path) {
  if (base::Status s = check_database(path); !s.ok())
    return s;
  if (is_postgres_url(path))
    return open_postgres_store(path, postgres_key_path());
  return open_sqlite_store(path);
}

base::Status check_daemon_name(std::string_view name) {
  bool ok = !name.empty() && name.size() <= 64;
  for (char c : name)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-');
  if (!ok)
    return base::Status::InvalidArgument(
        "a daemon's name is 1 to 64 letters, digits, '.', '_' or '-' (--name)");
  return base::Status::Ok();
}

base::Status check_hook_user(std::string_view user, std::string_view subject) {
  std::string who_says(subject);
  if (::geteuid() != 0)
    return base::Status::InvalidArgument(who_says +
                                         " needs the daemon to run as root (it runs as " +
                                         who(::geteuid()) + "; hooks run as that user)");
  struct passwd pw;
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  std::string name(user);
  if (::getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr)
    return base::Status::InvalidArgument(who_says + ": no user \"" + name + "\"");
  if (found->pw_uid == 0)
    return base::Status::InvalidArgument(who_says + " must not be root");
  return base::Status::Ok();
}

base::Status rotate_database_key(const std::string& path) {
  if (base::Status s = check_database(path); !s.ok())
    return s;
  if (is_postgres_url(path)) {
    // Holding the daemons' lock alone: refused while a daemon runs on the database.
    auto store = open_postgres_store(path, postgres_key_path(), DbLock::kAlone);
    if (!store.ok() && store.status().message().find("a daemon is running") != std::string::npos)
      return base::Status::FailedPrecondition("a daemon is running on " + display_db(path) +
                                              "; stop every daemon before rotating the key");
    if (!store.ok())
      return store.status();
    return store.value()->rotate_key();
  }
  if (::access(path.c_str(), F_OK) != 0)
    return base::Status::NotFound("no database \"" + path + "\"");
  Fd lock;
  lock.fd = ::open(lock_path(path).c_str(), O_RDONLY | O_CLOEXEC);
  if (lock.fd < 0 || ::flock(lock.fd, LOCK_EX | LOCK_NB) != 0)
    return base::Status::FailedPrecondition("a daemon is running on " + path +
                                            "; stop it before rotating the key");
  auto store = open_sqlite_store(path);
  if (!store.ok())
    return store.status();
  return store.value()->rotate_key();
}

// ---------------------------------------------------------------------------------------
// Service manager

namespace {

// $NOTIFY_SOCKET, read once and removed from the environment (hooks inherit the
// environment and must not speak for the daemon); "" when not started by systemd.
const std::string& notify_socket() {
  static const std::string path = [] {
    const char* p = std::getenv("NOTIFY_SOCKET");
    std::string s = p != nullptr ? p : "";
    ::unsetenv("NOTIFY_SOCKET");
    if (s.size() >= sizeof(sockaddr_un::sun_path) || (s[0] != '/' && s[0] != '@'))
      s.clear();
    return s;
  }();
  return path;
}

}  // namespace

void notify_service(std::string_view message) {
  const std::string& path = notify_socket();
  if (path.empty())
    return;
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  if (path[0] == '@')
    a.sun_path[0] = '\0';  // an abstract socket
  auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
  if (::sendto(fd, message.data(), message.size(), MSG_NOSIGNAL,
               reinterpret_cast<const sockaddr*>(&a), len) < 0)
    spdlog::warn("cannot tell the service manager \"{}\": {}",
                 std::string(message.substr(0, message.find('\n'))), std::strerror(errno));
  ::close(fd);
}

// ---------------------------------------------------------------------------------------
// Daemon

struct Daemon::Impl {
  DaemonOptions opt;
  // The daemon's metrics: the engine's counters, the store's counts at each scrape, and
  // whatever a REST API beside it adds (api::ServerOptions::metrics).
  base::Metrics metrics;
  std::chrono::steady_clock::time_point counted_at{};  // the collector's last store count
  std::atomic<int> signals_seen{0};
  std::atomic<Engine*> running{nullptr};
  boost::asio::io_context sig_io;
  boost::asio::signal_set signals{sig_io};
  // Commands that queue work send a datagram here (wake_daemon): the engine reads its queue
  // at once instead of at its next poll. Used on the signal thread only.
  boost::asio::local::datagram_protocol::socket wake_sock{sig_io};
  std::array<char, 16> wake_buf{};
  std::string wake_bound;  // the socket's path while bound
  std::thread sig_thread;
  // Declared before the store, so closed after it: closing any descriptor of the database
  // file drops this process's POSIX locks on it, SQLite's included.
  Fd lock;
  std::unique_ptr<Store> store;
  std::unique_ptr<Engine> engine;
  // A store that signals queued work itself (PostgreSQL's LISTEN/NOTIFY: a request committed
  // by any process, on any host): this thread sleeps on it and wakes the engine. Stopped
  // (within one wait) before the store and the engine go.
  std::thread work_thread;
  std::atomic<bool> work_stop{false};
  // The notification sender; declared after the engine and the store, so it stops first.
  std::unique_ptr<Notifier> notifier;

  explicit Impl(DaemonOptions o) : opt(std::move(o)) {}

  ~Impl() {
    stop_work_thread();
    sig_io.stop();
    if (sig_thread.joinable())
      sig_thread.join();
    boost::system::error_code ec;
    wake_sock.close(ec);
    if (!wake_bound.empty())
      ::unlink(wake_bound.c_str());
  }

  void start_work_thread() {
    if (store->wait_for_work(std::chrono::milliseconds(0)) == Store::WorkSignal::kUnsupported)
      return;
    work_thread = std::thread([this] {
      while (!work_stop.load()) {
        // A bounded wait, so a stop is seen within it.
        if (store->wait_for_work(std::chrono::milliseconds(200)) == Store::WorkSignal::kQueued) {
          if (Engine* e = running.load())
            e->wake();
        }
      }
    });
  }

  void stop_work_thread() {
    work_stop = true;
    if (work_thread.joinable())
      work_thread.join();
  }

  // On the signal thread. Best effort: without the socket, requests wait for the poll.
  void open_wake_socket(const std::string& path) {
    if (path.empty()) {
      spdlog::info(
          "the database's path is too long for a wake socket: new requests are read "
          "every --poll-ms");
      return;
    }
    // A socket left by a daemon that died: this one holds the database's lock now.
    ::unlink(path.c_str());
    namespace local = boost::asio::local;
    boost::system::error_code ec;
    wake_sock.open(local::datagram_protocol(), ec);
    if (!ec)
      wake_sock.bind(local::datagram_protocol::endpoint(path), ec);
    if (ec) {
      spdlog::warn("wake socket {}: {}; new requests are read every --poll-ms", path, ec.message());
      wake_sock.close(ec);
      return;
    }
    ::chmod(path.c_str(), 0600);
    wake_bound = path;
    receive_wake();
  }

  void receive_wake() {
    wake_sock.async_receive(boost::asio::buffer(wake_buf),
                            [this](const boost::system::error_code& ec, size_t) {
                              if (ec)
                                return;
                              if (Engine* e = running.load())
                                e->wake();
                              receive_wake();
                            });
  }

  void catch_signals() {
    signals.add(SIGTERM);
    signals.add(SIGINT);
    signals.add(SIGHUP);
    wait_signal();
    sig_thread = std::thread([this] { sig_io.run(); });
  }

  void wait_signal() {
    signals.async_wait([this](const boost::system::error_code& ec, int sig) {
      if (ec)
        return;
      if (sig == SIGHUP) {
        reload();
        wait_signal();
        return;
      }
      int n = ++signals_seen;
      spdlog::info(
          "signal {}: {}", sig,
          n == 1 ? "draining (in-flight steps finish; a second signal stops now)" : "stopping now");
      if (n == 1)
        notify_service("STOPPING=1\nSTATUS=draining");
      if (Engine* e = running.load())
        e->stop(n == 1);
      wait_signal();
    });
  }

  // SIGHUP: the owner's reload, told to the service manager (systemd's ExecReload).
  // Only while running (not while starting, nor draining) does the service manager hear of
  // it: READY=1 at its end would otherwise say a start or a drain was over.
  void reload() {
    if (!opt.on_reload) {
      spdlog::info("signal {}: nothing to reload", SIGHUP);
      return;
    }
    spdlog::info("signal {}: reloading", SIGHUP);
    bool tell = running.load() != nullptr && signals_seen.load() == 0;
    if (tell)
      notify_service("RELOADING=1\nSTATUS=reloading");
    try {
      opt.on_reload();
    } catch (const std::exception& e) {
      spdlog::error("reload failed, nothing changed: {}", e.what());
    }
    if (tell && signals_seen.load() == 0)
      notify_service("READY=1\nSTATUS=running the operations of " + display_db(opt.db_path));
  }

  // Locks the database file itself (flock on its inode; flock does not touch SQLite's POSIX
  // locks on Linux). A held lock is tried again every 50 ms for 3 s.
  base::Status lock_database() {
    std::string real = lock_path(opt.db_path);
    lock.fd = ::open(real.c_str(), O_RDONLY | O_CLOEXEC);
    if (lock.fd < 0)
      return base::Status::Unavailable("cannot open " + real + ": " + std::strerror(errno));
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    bool said = false;
    while (::flock(lock.fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno == EINTR)
        continue;
      if (errno != EWOULDBLOCK)
        return base::Status::Unavailable("cannot lock " + real + ": " + std::strerror(errno));
      if (signals_seen > 0)
        return base::Status::Unavailable("stopped by a signal while waiting for the lock of " +
                                         real);
      if (std::chrono::steady_clock::now() >= deadline)
        return base::Status::FailedPrecondition("another daemon is running on " + real);
      if (!said)
        spdlog::info("database locked by another process, trying again for 3 s");
      said = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return base::Status::Ok();
  }

  base::Status start() {
    (void)notify_socket();  // out of the environment before any hook can start
    // Hooks run as the daemon's user unless a hook user is given: not dumpable, this
    // process's memory (the database key, VIM secrets) and /proc/<pid>/fd stay out of their
    // reach.
    ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    if (!opt.engine.hook_user.empty()) {
      if (base::Status s = check_hook_user(opt.engine.hook_user); !s.ok())
        return s;
    }
    // Signals are caught from here on (a SIGTERM while waiting for the lock stops the wait).
    catch_signals();
    if (base::Status s = check_database(opt.db_path); !s.ok())
      return s;
    if (is_postgres_url(opt.db_path)) {
      if (opt.name.empty()) {
        char host[256] = {};
        ::gethostname(host, sizeof host - 1);
        opt.name = host;
      }
      if (base::Status s = check_daemon_name(opt.name); !s.ok())
        return s;
      opt.engine.owner = opt.name;
      // No file to lock: daemons share the database (Store leases); the store holds the
      // daemons' shared lock in its session, so a key rotation waits for none of them.
      auto st = open_postgres_store(opt.db_path, postgres_key_path(), DbLock::kDaemon);
      if (!st.ok())
        return st.status();
      store = std::move(st).value();
      // Each daemon's own work root (its hooks' lock is per root): work/<name>.
      if (base::Status s = start_engine(std::filesystem::path(postgres_key_path()).parent_path() /
                                        "work" / opt.name);
          !s.ok())
        return s;
      start_work_thread();  // no wake socket: the store's notifications wake the engine
      return base::Status::Ok();
    }
    // An existing database is locked before SQLite opens it (a second daemon must not touch
    // it, even through another name with a WAL of its own); a new one once SQLite made it.
    bool existed = ::access(opt.db_path.c_str(), F_OK) == 0;
    if (existed) {
      if (base::Status s = lock_database(); !s.ok())
        return s;
    }
    auto st = open_sqlite_store(opt.db_path);
    if (!st.ok())
      return st.status();
    store = std::move(st).value();
    if (!existed) {
      if (base::Status s = lock_database(); !s.ok())
        return s;
    }
    if (base::Status s = store->reserve_log(); !s.ok())
      spdlog::info("database: {} (commits grow the log file)", s.message());
    boost::asio::post(sig_io, [this, p = wake_path(opt.db_path)] { open_wake_socket(p); });
    return start_engine(std::filesystem::path(opt.db_path).parent_path() / "work");
  }

  // The Engine on the opened store; hooks' work root `default_work` unless one was given.
  base::Status start_engine(const std::filesystem::path& default_work) {
    opt.engine.work_root = !opt.work_dir.empty() ? opt.work_dir : default_work.string();
    if (!is_postgres_url(opt.db_path))
      opt.engine.owner = "daemon-" + std::to_string(::getpid());
    opt.engine.metrics = &metrics;
    opt.notify.owner = opt.engine.owner;
    notifier = std::make_unique<Notifier>(*store, opt.notify, &metrics);
    opt.engine.on_commit = [n = notifier.get()] { n->poke(); };
    engine = std::make_unique<Engine>(*store, opt.registry, opt.engine);
    metrics.on_collect([this](base::Metrics& m) {
      if (Engine* e = running.load())
        m.set("vnflow_running_operations", {}, static_cast<double>(e->stats().running_ops));
      // The store's counts scan the operations: at most once per 2 s, however often
      // somebody scrapes (text() runs one collection at a time).
      auto now = std::chrono::steady_clock::now();
      if (now - counted_at < std::chrono::seconds(2))
        return;
      counted_at = now;
      collect_store_metrics(m, *store);
      collect_notify_metrics(m, *store);
    });
    // The work root, and no hook of a previous daemon still running (waits up to 30 s).
    if (base::Status s = engine->prepare(); !s.ok())
      return s;
    running = engine.get();
    if (int n = signals_seen.load(); n > 0)
      engine->stop(n == 1);
    return base::Status::Ok();
  }
};

Daemon::Daemon(DaemonOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Daemon::~Daemon() {
  if (impl_) {
    impl_->stop_work_thread();
    impl_->running = nullptr;
    impl_->sig_io.stop();
    if (impl_->sig_thread.joinable())
      impl_->sig_thread.join();
  }
}

base::Status Daemon::start() {
  return impl_->start();
}

EngineStats Daemon::run() {
  if (!impl_->engine)
    return {};
  spdlog::info("vnflow daemon on {} ({} workers, work dir {})", display_db(impl_->opt.db_path),
               impl_->opt.engine.workers, impl_->opt.engine.work_root);
  impl_->notifier->start();
  impl_->engine->run();
  impl_->notifier->stop();
  auto st = impl_->engine->stats();
  spdlog::info("stopped: {} commits, {} transitions, {} actions", st.commits, st.batches,
               st.actions);
  return st;
}

void Daemon::stop(bool drain) {
  if (Engine* e = impl_->running.load())
    e->stop(drain);
}

void wake_daemon(const std::string& db) {
  if (is_postgres_url(db))
    return;
  std::string path = wake_path(db);
  if (path.empty())
    return;
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  // No daemon, a full queue, a file that is not a socket: the poll reads the request.
  (void)::sendto(fd, "w", 1, MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&a), sizeof a);
  ::close(fd);
}

void Daemon::wake() {
  if (Engine* e = impl_->running.load())
    e->wake();
}

base::Status Daemon::start_op(const OpRecord& op) {
  if (Engine* e = impl_->running.load())
    return e->start(op);
  if (impl_->store == nullptr)
    return base::Status::Unavailable("the daemon has not opened its database");
  return impl_->store->create_op(op);
}

Store* Daemon::store() {
  return impl_->engine ? impl_->store.get() : nullptr;
}

base::Metrics& Daemon::metrics() {
  return impl_->metrics;
}

const DaemonOptions& Daemon::options() const {
  return impl_->opt;
}

}  // namespace engine
