// StoreWrapper: an engine::Store that passes every call to another Store (LevelDB's
// EnvWrapper is the model). A fault-injecting or timing store derives from it and overrides
// only the calls it changes, so a new Store (PostgreSQL) reuses every such test unchanged.
// The inner store is borrowed: it must outlive the wrapper.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "engine/engine.h"

namespace vnflow_test {

class StoreWrapper : public engine::Store {
 public:
  explicit StoreWrapper(engine::Store& inner) : inner_(inner) {}

  engine::Store& inner() { return inner_; }

  // A wrapper that can wait in a read (a stuck or slow store) must override this with
  // false, or decline in a NoWaitReads scope (NoWaitReads::decline()).
  bool reads_never_wait() const override { return inner_.reads_never_wait(); }

  base::Status apply(const std::vector<const engine::Batch*>& batches) override {
    return inner_.apply(batches);
  }

  base::Result<engine::PackageRecord> put_package(const engine::PackageRecord& rec,
                                                  const std::string& bytes) override {
    return inner_.put_package(rec, bytes);
  }
  base::Result<engine::PackageRecord> get_package(std::string_view id) override {
    return inner_.get_package(id);
  }
  base::Result<std::string> package_bytes(std::string_view id) override {
    return inner_.package_bytes(id);
  }
  base::Result<std::vector<engine::PackageRecord>> list_packages() override {
    return inner_.list_packages();
  }
  base::Status update_package(const engine::PackageRecord& rec, const std::string* bytes,
                              std::string_view expect_state) override {
    return inner_.update_package(rec, bytes, expect_state);
  }
  base::Status delete_package(std::string_view id) override { return inner_.delete_package(id); }

  base::Status create_instance(const engine::InstanceRecord& rec) override {
    return inner_.create_instance(rec);
  }
  base::Result<engine::InstanceRecord> get_instance(std::string_view id) override {
    return inner_.get_instance(id);
  }
  base::Result<std::vector<engine::InstanceRecord>> list_instances() override {
    return inner_.list_instances();
  }
  base::Status delete_instance(std::string_view id) override { return inner_.delete_instance(id); }

  base::Status put_machine(const std::string& digest, const std::string& body) override {
    return inner_.put_machine(digest, body);
  }
  base::Result<std::string> get_machine(std::string_view digest) override {
    return inner_.get_machine(digest);
  }

  base::Status create_op(const engine::OpRecord& rec) override { return inner_.create_op(rec); }
  base::Result<engine::OpRecord> get_op(std::string_view id) override { return inner_.get_op(id); }
  base::Result<std::vector<engine::OpRecord>> list_ops(const engine::OpFilter& f) override {
    return inner_.list_ops(f);
  }
  base::Result<std::vector<engine::OpCount>> count_ops() override { return inner_.count_ops(); }
  base::Result<engine::OpRecord> transition(std::string_view id,
                                            const std::vector<engine::OpState>& from,
                                            engine::OpState to,
                                            const std::optional<std::string>& error) override {
    return inner_.transition(id, from, to, error);
  }
  base::Status request_cancel(std::string_view id) override { return inner_.request_cancel(id); }

  base::Result<std::vector<engine::OpRecord>> runnable(bool all) override {
    return inner_.runnable(all);
  }
  base::Result<Lease> register_daemon(const std::string& name, int64_t ttl_ms) override {
    return inner_.register_daemon(name, ttl_ms);
  }
  base::Status renew(const Lease& lease) override { return inner_.renew(lease); }
  void release(const Lease& lease) override { inner_.release(lease); }
  base::Result<std::vector<engine::OpRecord>> claim(const Lease& lease, bool first,
                                                    size_t limit) override {
    return inner_.claim(lease, first, limit);
  }
  base::Result<std::vector<std::string>> cancel_requests() override {
    return inner_.cancel_requests();
  }
  base::Result<std::vector<engine::EventRecord>> history(std::string_view op_id) override {
    return inner_.history(op_id);
  }
  base::Result<boost::json::object> outputs(std::string_view op_id) override {
    return inner_.outputs(op_id);
  }

  base::Status put_vim(const engine::VimRecord& rec) override { return inner_.put_vim(rec); }
  base::Result<engine::VimRecord> get_vim(std::string_view id_or_name, bool with_secrets) override {
    return inner_.get_vim(id_or_name, with_secrets);
  }
  base::Result<std::vector<engine::VimRecord>> list_vims() override { return inner_.list_vims(); }
  base::Status delete_vim(std::string_view id) override { return inner_.delete_vim(id); }

  base::Status put_subscription(const engine::SubscriptionRecord& rec) override {
    return inner_.put_subscription(rec);
  }
  base::Result<engine::SubscriptionRecord> get_subscription(std::string_view id,
                                                            bool with_secrets) override {
    return inner_.get_subscription(id, with_secrets);
  }
  base::Result<std::vector<engine::SubscriptionRecord>> list_subscriptions(
      bool with_secrets) override {
    return inner_.list_subscriptions(with_secrets);
  }
  base::Status delete_subscription(std::string_view id) override {
    return inner_.delete_subscription(id);
  }
  base::Status record_delivery(const engine::SubscriptionRecord& rec) override {
    return inner_.record_delivery(rec);
  }
  base::Result<std::vector<engine::NoticeRecord>> notices_after(const engine::NoticeCursor& after,
                                                                size_t limit) override {
    return inner_.notices_after(after, limit);
  }
  base::Result<int64_t> prune_notices() override { return inner_.prune_notices(); }
  base::Result<std::vector<std::string>> due_subscriptions(int64_t now) override {
    return inner_.due_subscriptions(now);
  }
  base::Result<bool> claim_subscription(std::string_view id, const std::string& owner,
                                        int64_t ttl_ms) override {
    return inner_.claim_subscription(id, owner, ttl_ms);
  }
  std::vector<std::string> private_files() const override { return inner_.private_files(); }
  base::Status rotate_key() override { return inner_.rotate_key(); }

 private:
  engine::Store& inner_;
};

// Every pure virtual of engine::Store is forwarded: a Store that gains one breaks this line
// until the wrapper forwards it too.
static_assert(!std::is_abstract_v<StoreWrapper>, "StoreWrapper must override every pure virtual");

}  // namespace vnflow_test
