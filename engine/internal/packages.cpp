// The package commands (engine.h): onboard, create, upload, fetch, modify, delete and open
// a VNF package, each checked as the loader and the workflow compiler check it.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>

#include <boost/json.hpp>

#include "engine/engine.h"
#include "engine/internal/commands.h"
#include "tosca/tosca.h"

namespace engine {

namespace {

// The files a compiled machine reads from its package (ssh.put `source:` when it is not an
// expression) must be in the package: a typo fails now, not on the VNF's VM.
void check_package_files(const tosca::Package& pkg, const workflows::Machine& m,
                         base::Diagnostics& diags) {
  for (const auto& st : m.states) {
    if (st.action != "ssh.put" || !st.with.source().is_object())
      continue;
    const json::value* src = st.with.source().as_object().if_contains("source");
    if (src == nullptr || !src->is_string())
      continue;
    std::string path(src->get_string());
    if (path.find("${") != std::string::npos)
      continue;
    while (path.rfind("./", 0) == 0)
      path.erase(0, 2);
    if (!std::binary_search(pkg.files.begin(), pkg.files.end(), path)) {
      diags.error(
          "W0044", st.where,
          "ssh.put source \"" + std::string(src->get_string()) + "\" is not a file of the package");
    }
  }
}

}  // namespace

void check_package_workflows(const tosca::Package& pkg, base::Diagnostics& diags) {
  // Every operation must compile before the package is accepted: a packager learns of a
  // broken hook now, not in the middle of a heal. Its findings are capped per kind, as the
  // loader's are (a package of many flavours repeats one broken hook in each).
  base::Diagnostics found;
  found.cap_per_kind(tosca::kMaxFindingsPerKind);
  for (const auto& fl : pkg.flavours) {
    for (const auto& op : workflows::operations()) {
      auto m = workflows::compile(pkg, {op.name, fl.id}, found);
      if (m)
        check_package_files(pkg, *m, found);
    }
  }
  diags.merge(found);
}

namespace {

// The loader (signatures checked) and check_package_workflows over zip `bytes`: the record
// to store (id and state left to the caller), or why not, with the diagnostics in `diags`.
// An option-2 zip becomes the CSAR it holds.
base::Result<PackageRecord> check_package(const std::string& name, std::string& bytes,
                                          base::Diagnostics& diags,
                                          const PackageCheckOptions& options) {
  auto pkg = tosca::load_signed_package_from_zip_bytes(name, bytes, options.load,
                                                       options.signatures, diags);
  if (pkg == nullptr || diags.has_errors())
    return base::Status::InvalidArgument("package \"" + name +
                                         "\" is not valid; nothing was stored");
  check_package_workflows(*pkg, diags);
  if (diags.has_errors())
    return base::Status::InvalidArgument(
        "package \"" + name + "\" has workflows that do not compile; nothing was stored");
  PackageRecord rec;
  rec.digest = base::digest_hex(base::DigestAlgorithm::kSha256, bytes);
  rec.name = name;
  rec.provider = pkg->vnf.provider;
  rec.product = pkg->vnf.product_name;
  rec.version = pkg->vnf.software_version;
  rec.vnfd_id = pkg->vnf.descriptor_id;
  rec.vnfd_version = pkg->vnf.descriptor_version;
  rec.onboarded_ms = now_ms();
  return rec;
}

constexpr size_t kMaxUserDataBytes = 64 * 1024;
constexpr size_t kMaxFailureErrors = 20;

bool is_zip(std::string_view bytes) {
  return bytes.size() >= 4 && bytes.substr(0, 2) == "PK" &&
         ((bytes[2] == 3 && bytes[3] == 4) || (bytes[2] == 5 && bytes[3] == 6));
}

}  // namespace

base::Result<PackageRecord> onboard_package(Store& store, const std::string& path,
                                            base::Diagnostics& diags,
                                            const PackageCheckOptions& options) {
  auto bytes = tosca::package_archive_bytes(path, options.load.limits);
  if (!bytes.ok())
    return bytes.status();
  std::string name = path;
  while (name.size() > 1 && name.back() == '/')
    name.pop_back();
  if (auto slash = name.find_last_of('/'); slash != std::string::npos)
    name = name.substr(slash + 1);
  auto rec = check_package(name, bytes.value(), diags, options);
  if (!rec.ok())
    return rec.status();
  rec.value().id = new_id();
  rec.value().user_data = json::serialize(json::object{{"name", name}});
  return store.put_package(rec.value(), bytes.value());
}

base::Result<PackageRecord> create_package(Store& store, json::object user_data) {
  PackageRecord rec;
  rec.id = new_id();
  rec.name = "package-" + rec.id.substr(0, 8);
  rec.onboarding_state = "CREATED";
  rec.operational_state = "DISABLED";
  rec.user_data = json::serialize(user_data);
  if (rec.user_data.size() > kMaxUserDataBytes)
    return base::Status::InvalidArgument(
        "userDefinedData is " + std::to_string(rec.user_data.size()) + " bytes; the limit is " +
        std::to_string(kMaxUserDataBytes));
  rec.onboarded_ms = now_ms();
  return store.put_package(rec, "");
}

base::Result<PackageRecord> upload_package(Store& store, std::string_view id, std::string bytes,
                                           base::Diagnostics& diags,
                                           const PackageCheckOptions& options) {
  auto cur = store.get_package(id);
  if (!cur.ok())
    return cur.status();
  PackageRecord rec = std::move(cur).value();
  if (rec.onboarding_state != "CREATED")
    return base::Status::FailedPrecondition("package " + rec.id + " is " + rec.onboarding_state +
                                            "; content is accepted only while it is CREATED");
  if (bytes.size() > kMaxPackageBytes)
    return base::Status::InvalidArgument("the package is " + std::to_string(bytes.size()) +
                                         " bytes; the limit is " +
                                         std::to_string(kMaxPackageBytes));
  if (!is_zip(bytes))
    return base::Status::InvalidArgument("the package content is not a zip archive");
  // PROCESSING while the loader runs: a second upload meanwhile is refused.
  PackageRecord busy = rec;
  busy.onboarding_state = "PROCESSING";
  busy.failure.clear();
  if (base::Status s = store.update_package(busy, nullptr, "CREATED"); !s.ok())
    return s;
  auto checked = check_package(rec.name, bytes, diags, options);
  base::Status stored = checked.status();
  if (checked.ok()) {
    PackageRecord done = std::move(checked).value();
    done.id = rec.id;
    done.name = rec.name;
    done.user_data = rec.user_data;
    done.onboarding_state = "ONBOARDED";
    done.operational_state = "ENABLED";
    stored = store.update_package(done, &bytes, "PROCESSING");
    if (stored.ok())
      return done;
  }
  // Back to CREATED with the reason: the located errors, then the summary.
  std::string why;
  size_t n = 0;
  for (const auto& d : diags.items()) {
    if (d.severity != base::Severity::kError)
      continue;
    if (++n > kMaxFailureErrors) {
      why += "...\n";
      break;
    }
    why += base::to_string(d) + "\n";
  }
  why += stored.message();
  busy.onboarding_state = "CREATED";
  busy.failure = why;
  if (base::Status s = store.update_package(busy, nullptr, "PROCESSING"); !s.ok())
    return s;
  return busy;
}

base::Result<std::string> fetch_package(std::string_view uri, std::string_view user,
                                        std::string_view password, std::chrono::seconds timeout) {
  std::string shown(uri.substr(0, 200));
  if (uri.rfind("http://", 0) == 0 || uri.rfind("https://", 0) == 0) {
    return actions::http_get(std::string(uri), user, password, kMaxPackageBytes,
                             std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
  }
  if (uri.rfind("file://", 0) != 0)
    return base::Status::InvalidArgument("\"" + shown +
                                         "\": only file://, http:// and https:// URLs are read");
  std::string path(uri.substr(7));
  if (path.empty() || path[0] != '/')
    return base::Status::InvalidArgument("\"" + shown + "\": a file URL needs an absolute path");
  std::error_code ec;
  auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::is_regular_file(st))
    return base::Status::NotFound("\"" + shown + "\" is not a regular file");
  auto size = std::filesystem::file_size(path, ec);
  if (ec || size > kMaxPackageBytes)
    return base::Status::InvalidArgument("\"" + shown + "\" is over " +
                                         std::to_string(kMaxPackageBytes) + " bytes");
  std::ifstream in(path, std::ios::binary);
  std::string bytes(static_cast<size_t>(size), '\0');
  if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size())))
    return base::Status::Unavailable("\"" + shown + "\" could not be read");
  return bytes;
}

base::Result<json::object> modify_package(Store& store, std::string_view id,
                                          const json::object& changes) {
  auto cur = store.get_package(id);
  if (!cur.ok())
    return cur.status();
  PackageRecord rec = std::move(cur).value();
  json::object out;
  for (const auto& [k, v] : changes) {
    if (k != "operationalState" && k != "userDefinedData")
      return base::Status::InvalidArgument("unknown attribute \"" + std::string(k).substr(0, 60) +
                                           "\" in VnfPkgInfoModifications");
  }
  if (changes.empty())
    return base::Status::InvalidArgument(
        "VnfPkgInfoModifications needs operationalState or userDefinedData");
  if (const json::value* st = changes.if_contains("operationalState")) {
    if (!st->is_string() || (st->get_string() != "ENABLED" && st->get_string() != "DISABLED"))
      return base::Status::InvalidArgument("operationalState must be ENABLED or DISABLED");
  }
  const json::value* ud = changes.if_contains("userDefinedData");
  if (ud != nullptr && !ud->is_object())
    return base::Status::InvalidArgument("userDefinedData must be an object");
  if (rec.onboarding_state != "ONBOARDED")
    return base::Status::FailedPrecondition("package " + rec.id + " is " + rec.onboarding_state +
                                            ", not ONBOARDED");
  if (const json::value* st = changes.if_contains("operationalState")) {
    if (st->get_string() == rec.operational_state)
      return base::Status::FailedPrecondition("package " + rec.id + " is already " +
                                              rec.operational_state);
    rec.operational_state = std::string(st->get_string());
    out["operationalState"] = *st;
  }
  if (ud != nullptr) {
    boost::system::error_code ec;
    json::value data = json::parse(rec.user_data, ec);
    if (ec || !data.is_object())
      data = json::object{};
    json::object merged = data.get_object();
    json::object changed;
    for (const auto& [k, v] : ud->get_object()) {
      const json::value* old = merged.if_contains(k);
      if (v.is_null() ? old == nullptr : (old != nullptr && *old == v))
        continue;
      changed[k] = v;
      if (v.is_null())
        merged.erase(k);
      else
        merged[k] = v;
    }
    if (changed.empty() && out.empty())
      return base::Status::FailedPrecondition("userDefinedData of package " + rec.id +
                                              " already holds these values");
    rec.user_data = json::serialize(merged);
    if (rec.user_data.size() > kMaxUserDataBytes)
      return base::Status::InvalidArgument(
          "userDefinedData would be " + std::to_string(rec.user_data.size()) +
          " bytes; the limit is " + std::to_string(kMaxUserDataBytes));
    if (!changed.empty())
      out["userDefinedData"] = std::move(changed);
  }
  if (base::Status s = store.update_package(rec, nullptr, "ONBOARDED"); !s.ok())
    return s;
  return out;
}

base::Status delete_package(Store& store, std::string_view id) {
  auto cur = store.get_package(id);
  if (!cur.ok())
    return cur.status();
  if (cur.value().operational_state == "ENABLED")
    return base::Status::FailedPrecondition("package " + cur.value().id +
                                            " is ENABLED; disable it first");
  return store.delete_package(cur.value().id);
}

base::Result<PackageRecord> package_for_vnfd(Store& store, std::string_view vnfd_id) {
  auto ps = store.list_packages();
  if (!ps.ok())
    return ps.status();
  const PackageRecord* pkg = nullptr;
  for (const auto& p : ps.value()) {
    if (p.vnfd_id == vnfd_id && p.onboarding_state == "ONBOARDED" &&
        p.operational_state == "ENABLED" && (pkg == nullptr || p.onboarded_ms >= pkg->onboarded_ms))
      pkg = &p;
  }
  if (pkg == nullptr)
    return base::Status::NotFound("no onboarded and enabled VNF package has vnfdId \"" +
                                  std::string(vnfd_id).substr(0, 128) + "\"");
  return *pkg;
}

base::Result<std::shared_ptr<const tosca::Package>> open_package(Store& store,
                                                                 std::string_view id) {
  auto rec = store.get_package(id);
  if (!rec.ok())
    return rec.status();
  if (rec.value().onboarding_state != "ONBOARDED")
    return base::Status::FailedPrecondition("package " + rec.value().id + " is " +
                                            rec.value().onboarding_state + ", not ONBOARDED");
  auto bytes = store.package_bytes(rec.value().id);
  if (!bytes.ok())
    return bytes.status();
  base::Diagnostics diags;
  std::shared_ptr<const tosca::Package> pkg = tosca::load_package_from_zip_bytes(
      rec.value().name, std::move(bytes).value(), tosca::LoadOptions{}, diags);
  if (pkg == nullptr)
    return base::Status::Internal("package " + rec.value().id + " cannot be read");
  return pkg;
}

std::vector<std::string> vnfd_files(const tosca::Package& pkg) {
  std::string dir = pkg.entry_definitions.substr(0, pkg.entry_definitions.rfind('/') + 1);
  std::vector<std::string> out;
  for (const auto& f : pkg.files) {
    if (f.rfind(dir, 0) != 0 || f.find('/', dir.size()) != std::string::npos)
      continue;
    if (f.size() > 5 && (f.substr(f.size() - 5) == ".yaml" || f.substr(f.size() - 4) == ".yml"))
      out.push_back(f);
  }
  return out;
}

base::Result<PackageRecord> PackageIdentities::get(Store& store, const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = known_.find(id); it != known_.end())
      return it->second;
  }
  auto p = store.get_package(id);
  if (!p.ok())
    return p.status();
  PackageRecord ident;
  ident.id = p.value().id;
  ident.vnfd_id = p.value().vnfd_id;
  ident.provider = p.value().provider;
  ident.product = p.value().product;
  ident.version = p.value().version;
  ident.vnfd_version = p.value().vnfd_version;
  ident.onboarding_state = p.value().onboarding_state;
  ident.operational_state.clear();
  ident.user_data.clear();
  if (p.value().onboarding_state == "ONBOARDED" && p.value().id == id) {
    std::lock_guard<std::mutex> lock(mu_);
    if (known_.size() >= capacity_)
      known_.clear();
    known_.emplace(id, ident);
  }
  return ident;
}

}  // namespace engine
