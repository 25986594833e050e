// ssh.exec / ssh.put / ssh.get against real OpenSSH sshd in network-namespace VMs
// (tools/vms/vm.sh), started by tests/ssh/ssh_test.sh, which passes:
//   VNFLOW_SSH_HOSTS  "ADDR_A ADDR_B"        two VMs
//   VNFLOW_SSH_VMS    "NAME_A NAME_B"        their vm.sh names
//   VNFLOW_SSH_USER, VNFLOW_SSH_PASSWORD, VNFLOW_SSH_KEY (a private key file)
//   VNFLOW_VM_SH      tools/vms/vm.sh
//   VNFLOW_SSH_DOWN   an address in the VM subnet where nothing answers
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include "actions/actions.h"
#include "actions/internal/ssh.h"

namespace json = boost::json;
using actions::Outcome;
using Clock = std::chrono::steady_clock;

namespace {

std::string env(const char* k) {
  const char* v = std::getenv(k);
  return v != nullptr ? v : "";
}
std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;)
    out.push_back(w);
  return out;
}
std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream o;
  o << f.rdbuf();
  return o.str();
}
std::string sh(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr)
    return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0)
    out.append(buf, n);
  ::pclose(p);
  return out;
}

struct Env {
  std::vector<std::string> hosts = words(env("VNFLOW_SSH_HOSTS"));
  std::vector<std::string> vms = words(env("VNFLOW_SSH_VMS"));
  std::string user = env("VNFLOW_SSH_USER");
  std::string password = env("VNFLOW_SSH_PASSWORD");
  std::string key = slurp(env("VNFLOW_SSH_KEY"));
  std::string vm_sh = env("VNFLOW_VM_SH");
  std::string down = env("VNFLOW_SSH_DOWN");
  bool ready() const { return hosts.size() >= 2 && vms.size() >= 2 && !user.empty(); }
};

const Env& E() {
  static Env e;
  return e;
}

actions::Registry& registry() {
  static actions::Registry r = actions::Registry::standard();
  return r;
}

actions::Context context(const std::string& state, int timeout_ms = 20000) {
  actions::Context c;
  c.op_id = "op-1";
  c.instance_id = "inst-1";
  c.state = state;
  c.key = "op-1/" + state + "/1";
  c.deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  return c;
}

json::object target(const std::string& host, bool with_key) {
  json::object t{{"host", host}, {"username", E().user}};
  if (with_key)
    t["private_key"] = E().key;
  else
    t["password"] = E().password;
  return t;
}

Outcome run(const std::string& action, json::object in, const actions::Context& ctx) {
  const actions::Action* a = registry().find(action);
  REQUIRE(a != nullptr);
  return a->run(in, ctx);
}

Outcome exec(const std::string& host, const std::string& cmd, bool with_key = true,
             json::object extra = {}, const actions::Context& ctx = context("exec")) {
  json::object in = target(host, with_key);
  in["command"] = cmd;
  for (const auto& kv : extra)
    in[kv.key()] = kv.value();
  return run("ssh.exec", in, ctx);
}

std::string out_of(const Outcome& o) {
  INFO(o.message);
  REQUIRE(o.ok);
  return std::string(o.outputs.at("stdout").as_string());
}

}  // namespace

TEST_CASE("ssh.exec: password and key authentication, exit status, outputs, pinning") {
  if (!E().ready())
    FAIL("run through tests/ssh/ssh_test.sh (no VMs given)");
  const std::string& a = E().hosts[0];
  auto pw = exec(a, "id -un", false);
  CHECK(out_of(pw) == E().user + "\n");
  CHECK(pw.outputs.at("exit_code") == 0);
  // First use pins the host key with the result.
  REQUIRE(pw.pin_host_keys.contains(a + ":22"));
  std::string fp(pw.pin_host_keys.at(a + ":22").as_string());
  CHECK(fp.rfind("SHA256:", 0) == 0);
  CHECK(pw.outputs.at("host_key").as_string() == fp);

  auto key = exec(a, "echo $((6 * 7))", true);
  CHECK(out_of(key) == "42\n");

  auto bad = exec(a, "echo 'it broke' >&2; exit 3");
  CHECK_FALSE(bad.ok);
  CHECK(bad.error_class == base::ErrorClass::kFailed);
  CHECK(bad.message.find("exit status 3") != std::string::npos);
  CHECK(bad.message.find("it broke") != std::string::npos);
  CHECK(exec(a, "exit 3", true, json::object{{"success_codes", json::array{0, 3}}}).ok);

  auto noisy = exec(a, "echo warning >&2", true, json::object{{"stderr_must_be_empty", true}});
  CHECK_FALSE(noisy.ok);
  CHECK(noisy.message.find("stderr is not empty: warning") != std::string::npos);
  CHECK(exec(a, "echo warning >&2").ok);  // not asked: stderr is only output
}

TEST_CASE("ssh.exec: sudo, env, stdin, the idempotency key, parsers, bounded output") {
  if (!E().ready())
    FAIL("run through tests/ssh/ssh_test.sh (no VMs given)");
  const std::string& a = E().hosts[0];
  CHECK(out_of(exec(a, "id -u", true, json::object{{"sudo", true}})) == "0\n");
  auto envd = exec(
      a, "printf '%s|' \"$GREETING\" \"$QUOTED\"; cat; echo \"|$VNFLOW_IDEMPOTENCY_KEY\"", true,
      json::object{{"env", json::object{{"GREETING", "hello world"}, {"QUOTED", "it's \"$HOME\""}}},
                   {"stdin", "from stdin"}});
  CHECK(out_of(envd) == "hello world|it's \"$HOME\"|from stdin|op-1/exec/1\n");
  CHECK_FALSE(exec(a, "true", true, json::object{{"env", json::object{{"BAD NAME", "x"}}}}).ok);

  auto join = exec(a,
                   "echo 'kubeadm join 10.231.0.11:6443 --token abcdef.0123456789abcdef "
                   "--discovery-token-ca-cert-hash sha256:feed'",
                   true,
                   json::object{{"parse", json::object{{"token", "--token (\\S+)"},
                                                       {"ca_hash", "sha256:([0-9a-f]+)"}}}});
  REQUIRE(join.ok);
  CHECK(join.outputs.at("values").at("token") == "abcdef.0123456789abcdef");
  CHECK(join.outputs.at("values").at("ca_hash") == "feed");
  auto nomatch = exec(a, "echo nothing", true,
                      json::object{{"parse", json::object{{"token", "--token (\\S+)"}}}});
  CHECK_FALSE(nomatch.ok);
  CHECK(nomatch.message.find("parse.token") != std::string::npos);

  auto big =
      exec(a, "head -c 200000 /dev/zero | tr '\\0' x", true, json::object{{"max_output", 1000}});
  REQUIRE(big.ok);
  CHECK(big.outputs.at("stdout").as_string().size() == 1000);
  CHECK(big.outputs.at("truncated") == true);
}

TEST_CASE("ssh.exec: a command past the state's deadline is killed on the VM") {
  if (!E().ready())
    FAIL("run through tests/ssh/ssh_test.sh (no VMs given)");
  const std::string& a = E().hosts[0];
  auto t0 = Clock::now();
  auto slow = exec(a, "sleep 37", true, {}, context("slow", 1500));
  auto took = Clock::now() - t0;
  CHECK_FALSE(slow.ok);
  CHECK(slow.error_class == base::ErrorClass::kTimeout);
  CHECK(took < std::chrono::seconds(5));
  // The remote process is gone (the channel was signalled and closed).
  std::string left;
  for (int i = 0; i < 20; ++i) {
    left = out_of(exec(a, "pgrep -c -f '[s]leep 37' || true"));
    if (left == "0\n")
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(left == "0\n");
}

TEST_CASE("host keys: pinned, changed, known_hosts") {
  if (!E().ready())
    FAIL("run through tests/ssh/ssh_test.sh (no VMs given)");
  const std::string& a = E().hosts[0];
  actions::ssh_drop_pooled_sessions();
  auto first = exec(a, "true");
  REQUIRE(first.ok);
  std::string fp(first.outputs.at("host_key").as_string());

  auto ctx = context("pinned");
  ctx.host_keys[a + ":22"] = fp;
  auto same = exec(a, "true", true, {}, ctx);
  REQUIRE(same.ok);
  CHECK(same.pin_host_keys.empty());  // nothing new to pin

  actions::ssh_drop_pooled_sessions();
  auto wrong = context("changed");
  wrong.host_keys[a + ":22"] = "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
  auto refused = exec(a, "true", true, {}, wrong);
  CHECK_FALSE(refused.ok);
  CHECK(refused.error_class == base::ErrorClass::kInvalid);
  CHECK(refused.message.find("host key changed") != std::string::npos);
  // A pooled session does not bypass the check either.
  REQUIRE(exec(a, "true").ok);
  CHECK_FALSE(exec(a, "true", true, {}, wrong).ok);
  auto healed = exec(a, "true", true, json::object{{"allow_changed_host_key", true}}, wrong);
  REQUIRE(healed.ok);
  CHECK(healed.pin_host_keys.at(a + ":22").as_string() == fp);  // the new key is pinned

  CHECK_FALSE(exec(a, "true", true, json::object{{"host_key", "SHA256:nope"}}).ok);
  CHECK(exec(a, "true", true, json::object{{"host_key", fp}}).ok);

  std::string kh = env("TMPDIR").empty() ? "/tmp" : env("TMPDIR");
  kh += "/vnflow-ssh-test-known_hosts";
  sh("ssh-keyscan -t ed25519 " + a + " > " + kh + " 2>/dev/null");
  actions::ssh_drop_pooled_sessions();
  CHECK(exec(a, "true", true, json::object{{"known_hosts", kh}}).ok);
  sh("ssh-keyscan -t ed25519 " + E().hosts[1] + " 2>/dev/null | sed 's/^[^ ]*/" + a + "/' > " + kh);
  auto other = exec(a, "true", true, json::object{{"known_hosts", kh}});
  CHECK_FALSE(other.ok);
  CHECK(other.message.find("known_hosts") != std::string::npos);
  std::remove(kh.c_str());
}

TEST_CASE("secrets stay out of messages; bad credentials are not retried") {
  if (!E().ready())
    FAIL("run through tests/ssh/ssh_test.sh (no VMs given)");
  const std::string& a = E().hosts[0];
  json::object in = target(a, false);
  in["password"] = "wrong-Pa55word";
  in["command"] = "true";
  auto r = run("ssh.exec", in, context("badpw"));
  CHECK_FALSE(r.ok);
  CHECK(r.error_class == base::ErrorClass::kInvalid);
  CHECK(r.message.find("refused") != std::string::npos);
  CHECK(r.message.find("wrong-Pa55word") == std::string::npos);
  // sudo with a password goes through stdin, not the command line.
  auto s = exec(a, "ps -eo args | grep -c '[s]udo-secret-Pw' || true", true,
                json::object{{"sudo", true}, {"sudo_password", "sudo-secret-Pw"}});
  CHECK(out_of(s) == "0\n");
}

TEST_CASE("connections: retried while the VM boots, pooled, parallel, refreshed after a restart") {
  if (!E().ready())
    FAIL("run through tests/ssh/ssh_test.sh (no VMs given)");
  const std::string& a = E().hosts[0];
  const std::string& b = E().hosts[1];
  const std::string& vm_b = E().vms[1];
  actions::ssh_drop_pooled_sessions();

  // Nothing answers: connection attempts go on for connect_within, then "transient".
  if (!E().down.empty()) {
    auto t0 = Clock::now();
    auto r = exec(E().down, "true", true, json::object{{"connect_within", 2}});
    CHECK_FALSE(r.ok);
    CHECK((r.error_class == base::ErrorClass::kTransient ||
           r.error_class == base::ErrorClass::kTimeout));
    CHECK(Clock::now() - t0 >= std::chrono::milliseconds(1500));
    CHECK(Clock::now() - t0 < std::chrono::seconds(15));
  }

  // sshd down while the call starts ("the VM is booting"), up 1.5 s later.
  REQUIRE(std::system((E().vm_sh + " kill-sshd " + vm_b).c_str()) == 0);
  std::thread boot([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    std::system((E().vm_sh + " start-sshd " + vm_b).c_str());
  });
  auto t0 = Clock::now();
  auto late = exec(b, "hostname -I", true, json::object{{"connect_within", 20}});
  boot.join();
  INFO(late.message);
  CHECK(late.ok);
  CHECK(Clock::now() - t0 >= std::chrono::milliseconds(1400));

  // One session per host is kept and reused: later calls skip the handshake.
  auto t1 = Clock::now();
  for (int i = 0; i < 10; ++i)
    REQUIRE(exec(b, "true").ok);
  auto ten = Clock::now() - t1;
  CHECK(actions::ssh_pooled_sessions() >= 1);
  CHECK(ten < std::chrono::seconds(3));

  // The server restarts: the pooled session is dead; the next call connects again.
  REQUIRE(std::system((E().vm_sh + " kill-sshd " + vm_b).c_str()) == 0);
  REQUIRE(std::system((E().vm_sh + " start-sshd " + vm_b).c_str()) == 0);
  auto after = exec(b, "echo again");
  INFO(after.message);
  CHECK(after.ok);
  // The same for SFTP: an upload over a pooled session that died connects again.
  REQUIRE(std::system((E().vm_sh + " kill-sshd " + vm_b).c_str()) == 0);
  REQUIRE(std::system((E().vm_sh + " start-sshd " + vm_b).c_str()) == 0);
  json::object put = target(b, true);
  put["path"] = "/tmp/after-restart.txt";
  put["content"] = "again\n";
  auto uploaded = run("ssh.put", put, context("put-after-restart"));
  INFO(uploaded.message);
  CHECK(uploaded.ok);

  // Many calls on two hosts in parallel (the executor's worker threads do this).
  std::vector<std::thread> ts;
  std::atomic<int> good{0};
  for (int i = 0; i < 8; ++i) {
    ts.emplace_back([&, i] {
      auto r = exec(i % 2 ? a : b, "echo " + std::to_string(i), true, {},
                    context("par" + std::to_string(i)));
      if (r.ok && r.outputs.at("stdout").as_string() == std::to_string(i) + "\n")
        good++;
    });
  }
  for (auto& t : ts)
    t.join();
  CHECK(good == 8);
}

TEST_CASE("ssh.put / ssh.get: content, package files, sudo, verify, idempotent re-upload") {
  if (!E().ready())
    FAIL("run through tests/ssh/ssh_test.sh (no VMs given)");
  const std::string& a = E().hosts[0];
  std::string mib(1 << 20, '\0');
  for (size_t i = 0; i < mib.size(); ++i)
    mib[i] = static_cast<char>((i * 7919) >> 3);
  auto ctx = context("put");
  ctx.package_file = [&](std::string_view p) -> base::Result<std::string> {
    if (p == "Files/images/registry.tar")
      return mib;
    return base::Status::NotFound("no file " + std::string(p));
  };
  json::object in = target(a, true);
  in["path"] = "/home/" + E().user + "/vnflow/registry.tar";
  in["source"] = "Files/images/registry.tar";
  in["mode"] = "0640";
  auto put = run("ssh.put", in, ctx);
  INFO(put.message);
  REQUIRE(put.ok);
  CHECK(put.outputs.at("changed") == true);
  CHECK(put.outputs.at("size") == (1 << 20));
  std::string sha(put.outputs.at("sha256").as_string());
  CHECK(
      out_of(exec(
          a,
          "sha256sum < ~/vnflow/registry.tar | cut -d' ' -f1; stat -c %a ~/vnflow/registry.tar")) ==
      sha + "\n640\n");
  auto again = run("ssh.put", in, ctx);
  REQUIRE(again.ok);
  CHECK(again.outputs.at("changed") == false);  // read back, not sent again

  json::object gin = target(a, false);
  gin["path"] = "/home/" + E().user + "/vnflow/registry.tar";
  auto got = run("ssh.get", gin, context("get"));
  REQUIRE(got.ok);
  CHECK(got.outputs.at("sha256").as_string() == sha);
  CHECK(got.outputs.at("content").as_string().size() == mib.size());
  gin["max_bytes"] = 1000;
  auto too_big = run("ssh.get", gin, context("get2"));
  CHECK_FALSE(too_big.ok);
  CHECK(too_big.message.find("max_bytes") != std::string::npos);

  json::object root = target(a, true);
  root["path"] = "/etc/docker/daemon.json";
  root["content"] = "{\"insecure-registries\": [\"10.231.0.12:5000\"]}\n";
  root["sudo"] = true;
  root["mode"] = "0600";
  auto placed = run("ssh.put", root, context("sudo-put"));
  INFO(placed.message);
  REQUIRE(placed.ok);
  CHECK(out_of(exec(a, "stat -c '%U %a' /etc/docker/daemon.json")) == "root 600\n");
  json::object rget = target(a, true);
  rget["path"] = "/etc/docker/daemon.json";
  rget["sudo"] = true;
  auto rgot = run("ssh.get", rget, context("sudo-get"));
  REQUIRE(rgot.ok);
  CHECK(rgot.outputs.at("content") == root["content"]);
  // Without sudo the file cannot be read: a clear failure, not an empty success.
  rget["sudo"] = false;
  CHECK_FALSE(run("ssh.get", rget, context("nosudo-get")).ok);

  // The connection is lost between the handshake and the SFTP request (sshd killed, the
  // VM rebooting): "transient", so the state's retry policy tries again; not "failed".
  // (ssh.put's loss mid-upload: its own test case below.)
  REQUIRE(exec(a, "touch ~/.vnflow-sftp-dies").ok);
  json::object lost_get = target(a, true);
  lost_get["path"] = "/home/" + E().user + "/vnflow/registry.tar";
  auto dropped_get = run("ssh.get", lost_get, context("get-lost"));
  REQUIRE(exec(a, "rm -f ~/.vnflow-sftp-dies").ok);
  INFO(dropped_get.message);
  CHECK_FALSE(dropped_get.ok);
  CHECK(dropped_get.error_class == base::ErrorClass::kTransient);
  CHECK(dropped_get.message.find("connection was lost") != std::string::npos);
  CHECK(run("ssh.get", lost_get, context("get-after-lost")).ok);

  json::object missing = target(a, true);
  missing["path"] = "/tmp/x";
  missing["source"] = "Files/none";
  auto nf = run("ssh.put", missing, ctx);
  CHECK_FALSE(nf.ok);
  CHECK(nf.error_class == base::ErrorClass::kInvalid);
}

namespace {

// 'text' for the local shell.
std::string shq(const std::string& s) {
  std::string o = "'";
  for (char c : s)
    o += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return o + "'";
}
// Runs CMD as root inside the VM's namespaces (tools/vms/vm.sh exec).
std::string vm_exec(const std::string& vm, const std::string& cmd) {
  return sh(E().vm_sh + " exec " + vm + " sh -c " + shq(cmd) + " 2>&1");
}

}  // namespace

TEST_CASE("ssh.exec: env values go over stdin, byte for byte, never on a command line (ps)") {
  if (!E().ready())
    FAIL("run through tests/ssh/ssh_test.sh (no VMs given)");
  const std::string& a = E().hosts[0];
  const std::string& vm = E().vms[0];
  // A user whose sudo asks for a password (sudo -S); the test user's sudo does not.
  const std::string pw_user = "vnfpw", pw = "pw-Sudo-4711";
  vm_exec(vm,
          "id " + pw_user + " >/dev/null 2>&1 || useradd -m -s /bin/sh " + pw_user + "; echo " +
              pw_user + ":" + pw + " | chpasswd; echo '" + pw_user +
              " ALL=(ALL:ALL) ALL' > /etc/sudoers.d/91-vnfpw; chmod 440 /etc/sudoers.d/91-vnfpw");

  const std::string marker = "Zq7-s3cr3t";
  const std::string secret =
      marker + " with  spaces 'single' \"double\" $HOME `id` \\n \\\\ %s\nsecond line\n\n";
  const std::string own_stdin = "own stdin\nvnflow-env 1\n\nno newline at the end";
  struct Mode {
    const char* name;
    bool sudo;
    bool password_user;  // log in as pw_user, sudo -S with its password
    bool password_given;
  };
  for (Mode m : {Mode{"no sudo", false, false, false}, Mode{"sudo -n", true, false, false},
                 Mode{"sudo -S, sudo does not ask", true, false, true},
                 Mode{"sudo -S, sudo asks", true, true, true}}) {
    INFO(m.name);
    json::object in = m.password_user
                          ? json::object{{"host", a}, {"username", pw_user}, {"password", pw}}
                          : target(a, true);
    in["command"] = "sleep 2; id -u; printf '%s|' \"$DB_PASSWORD\" \"$PLAIN\"; cat";
    in["env"] = json::object{{"DB_PASSWORD", secret}, {"PLAIN", "plain value"}};
    in["stdin"] = own_stdin;
    if (m.sudo)
      in["sudo"] = true;
    if (m.password_given)
      in["sudo_password"] = m.password_user ? pw : "not-asked-Pw";
    Outcome r;
    std::thread t([&] { r = run("ssh.exec", in, context("env-ps")); });
    // While the command sleeps, no process on the VM shows the value in its arguments.
    std::vector<std::string> seen;
    for (int i = 0; i < 8; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      seen.push_back(vm_exec(vm, "ps -ww -eo args"));
    }
    t.join();
    bool saw_command = false, saw_secret = false;
    for (const auto& ps : seen) {
      saw_command = saw_command || ps.find("sleep 2") != std::string::npos;
      saw_secret = saw_secret || ps.find(marker) != std::string::npos ||
                   ps.find("plain value") != std::string::npos;
    }
    CHECK(saw_command);  // ps did look while the command ran
    CHECK_FALSE(saw_secret);
    INFO(r.message);
    REQUIRE(r.ok);
    std::string out(r.outputs.at("stdout").as_string());
    size_t eol = out.find('\n');
    REQUIRE(eol != std::string::npos);
    CHECK((out.substr(0, eol) == "0") == m.sudo);  // root exactly when under sudo
    // The value with its quotes, backslashes, newline and trailing newlines; then the
    // state's own stdin exactly (no sudo password line, no environment left in it).
    CHECK(out.substr(eol + 1) == secret + "|plain value|" + own_stdin);
  }
  vm_exec(vm, "rm -f /etc/sudoers.d/91-vnfpw; userdel -r " + pw_user + " 2>/dev/null; true");
}

TEST_CASE("ssh.put: a connection lost mid-upload is transient and moves nothing into place") {
  if (!E().ready())
    FAIL("run through tests/ssh/ssh_test.sh (no VMs given)");
  const std::string& a = E().hosts[0];
  const std::string& vm = E().vms[0];
  const std::string dir = "/home/" + E().user + "/vnflow";
  const std::string path = dir + "/lost.bin";
  vm_exec(vm, "rm -f " + shq(path) + " " + shq(dir) + "/.vnflow-*");
  json::object in = target(a, true);
  in["path"] = path;
  std::string big(128u << 20, '\0');
  for (size_t i = 0; i < big.size(); i += 4096)
    big[i] = static_cast<char>(i >> 12);
  in["content"] = std::move(big);
  Outcome dropped;
  std::thread put([&] { dropped = run("ssh.put", in, context("put-lost")); });
  // Once the upload's `cat` runs, it is stopped: the channel's window fills and the upload
  // stalls part-way. Then that connection's sshd is killed, and the `cat` goes on.
  const std::string stop =
      "for p in $(pgrep -f 'if ca[t] > '); do pp=$(ps -o ppid= -p $p | tr -d ' '); "
      "[ \"$(ps -o comm= -p \"$pp\")\" = sshd ] || continue; c=$(pgrep -P $p -x cat) || continue; "
      "kill -STOP $c && echo \"$pp $c\"; done; true";
  std::string pids;
  for (int i = 0; i < 400 && pids.empty(); ++i) {
    pids = vm_exec(vm, stop);
    if (pids.empty())
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::istringstream ps(pids);
  std::string session, cat;
  ps >> session >> cat;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  bool stalled = out_of(exec(a, "ls -A ~/vnflow | grep -c '^[.]vnflow-' || true")) == "1\n";
  vm_exec(vm, "kill -9 " + session + "; kill -CONT " + cat);
  put.join();
  CHECK_FALSE(session.empty());
  CHECK(stalled);  // the temporary file was there, being written
  INFO(dropped.message);
  CHECK_FALSE(dropped.ok);
  CHECK(dropped.error_class == base::ErrorClass::kTransient);
  // The shell on the VM sees its input end early: the size differs, nothing is moved into
  // place, and the temporary file goes.
  std::string left;
  for (int i = 0; i < 100; ++i) {
    left = vm_exec(vm, "pgrep -f 'if ca[t] > ' >/dev/null && echo running; test -e " + shq(path) +
                           " && echo placed; ls -A " + shq(dir) + " | grep '^[.]vnflow-'; true");
    if (left.find("running") == std::string::npos)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(left.empty());
  json::object small = target(a, true);
  small["path"] = path;
  small["content"] = "found\n";
  auto again = run("ssh.put", small, context("put-after-lost"));
  INFO(again.message);
  REQUIRE(again.ok);
  CHECK(out_of(exec(a, "cat ~/vnflow/lost.bin")) == "found\n");
}

TEST_CASE(
    "ssh.put / ssh.get: remote paths are absolute and normalised; .., NUL, newlines refused") {
  if (!E().ready())
    FAIL("run through tests/ssh/ssh_test.sh (no VMs given)");
  const std::string& a = E().hosts[0];
  const std::string home = "/home/" + E().user;
  auto put = [&](const std::string& host, const std::string& path) {
    json::object in = target(host, true);
    in["path"] = path;
    in["content"] = "x\n";
    in["connect_within"] = 20;
    return run("ssh.put", in, context("put-path"));
  };
  auto get = [&](const std::string& path) {
    json::object in = target(a, true);
    in["path"] = path;
    return run("ssh.get", in, context("get-path"));
  };
  struct Bad {
    std::string path, why;
  };
  for (const Bad& b :
       {Bad{"vnflow/relative.txt", "must be absolute"},
        Bad{home + "/vnflow/../.profile", "must not have \"..\" components"},
        Bad{"/tmp/..", "must not have \"..\" components"}, Bad{home + "/x\ny", "control character"},
        Bad{home + "/x" + std::string(1, '\0') + "y", "control character"},
        Bad{home + "/vnflow/", "names a directory"}, Bad{"", "is empty"}}) {
    INFO(b.path);
    auto p = put(a, b.path);
    CHECK_FALSE(p.ok);
    CHECK(p.error_class == base::ErrorClass::kInvalid);
    CHECK(p.message.find(b.why) != std::string::npos);
    auto g = get(b.path);
    CHECK_FALSE(g.ok);
    CHECK(g.error_class == base::ErrorClass::kInvalid);
    CHECK(g.message.find(b.why) != std::string::npos);
  }
  CHECK(out_of(exec(a, "test -e ~/x || test -e ~/vnflow/relative.txt && echo found || true")) ==
        "");
  // Refused before connecting: a host where nothing answers does not delay the answer.
  if (!E().down.empty()) {
    auto t0 = Clock::now();
    auto p = put(E().down, "../x");
    CHECK(p.error_class == base::ErrorClass::kInvalid);
    CHECK(Clock::now() - t0 < std::chrono::seconds(2));
  }
  // "//" and "." components are dropped; the output names the normal path.
  auto ok = put(a, home + "//vnflow/./norm/f.txt");
  INFO(ok.message);
  REQUIRE(ok.ok);
  CHECK(ok.outputs.at("path").as_string() == home + "/vnflow/norm/f.txt");
  CHECK(out_of(exec(a, "cat ~/vnflow/norm/f.txt")) == "x\n");
  auto back = get(home + "/./vnflow//norm/f.txt");
  REQUIRE(back.ok);
  CHECK(back.outputs.at("content") == "x\n");
}
