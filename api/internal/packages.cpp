// The routes of /vnfpkgm/v1 (SOL005 VNF package management, docs/api.md): paths and
// methods, request bodies parsed and bounded, the engine's package commands called,
// VnfPkgInfo, package content, VNFD and artifacts written. The rules (states, onboarding,
// who may be deleted) are the engine's.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <set>
#include <string>

#include <boost/json.hpp>

#include "api/internal/router.h"

namespace api::internal {

namespace {

// Fetching a package for upload_from_uri holds a server thread this long at most.
constexpr std::chrono::seconds kFetchTimeout{30};

json::object package_doc(const Ctx& c, const engine::PackageRecord& p, bool in_use) {
  json::object o = engine::vnf_package_view(p, in_use);
  std::string self = c.url("/vnf_packages/" + p.id);
  json::object links{{"self", href(self)}, {"packageContent", href(self + "/package_content")}};
  if (p.onboarding_state == "ONBOARDED")
    links["vnfd"] = href(self + "/vnfd");
  o["_links"] = std::move(links);
  return o;
}

HttpResponse empty_response(int status) {
  HttpResponse r;
  r.status = status;
  return r;
}

HttpResponse bytes_response(std::string content_type, std::string body) {
  HttpResponse r;
  r.content_type = std::move(content_type);
  r.body = std::move(body);
  return r;
}

// A zip archive of `files` (path, bytes), stored without compression: what a client
// unpacks, not what it keeps (the package content is the stored zip as uploaded).
uint32_t crc32(std::string_view data) {
  static const std::array<uint32_t, 256> kTable = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = (c & 1) != 0 ? 0xedb88320U ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xffffffffU;
  for (unsigned char b : data)
    c = kTable[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffU;
}

void put16(std::string& out, uint32_t v) {
  out.push_back(static_cast<char>(v & 0xff));
  out.push_back(static_cast<char>((v >> 8) & 0xff));
}
void put32(std::string& out, uint32_t v) {
  put16(out, v & 0xffff);
  put16(out, v >> 16);
}

std::string stored_zip(const std::vector<std::pair<std::string, std::string>>& files) {
  std::string out, central;
  for (const auto& [name, data] : files) {
    auto offset = static_cast<uint32_t>(out.size());
    uint32_t crc = crc32(data);
    auto size = static_cast<uint32_t>(data.size());
    auto name_len = static_cast<uint32_t>(name.size());
    put32(out, 0x04034b50);                      // local file header
    for (uint32_t v : {20U, 0U, 0U, 0U, 0x21U})  // version, flags, stored, time, 1980-01-01
      put16(out, v);
    put32(out, crc);
    put32(out, size);
    put32(out, size);
    put16(out, name_len);
    put16(out, 0);
    out += name;
    out += data;
    put32(central, 0x02014b50);  // central directory entry
    for (uint32_t v : {20U, 20U, 0U, 0U, 0U, 0x21U})
      put16(central, v);
    put32(central, crc);
    put32(central, size);
    put32(central, size);
    for (uint32_t v : {name_len, 0U, 0U, 0U, 0U})  // name, extra, comment, disk, attributes
      put16(central, v);
    put32(central, 0);
    put32(central, offset);
    central += name;
  }
  auto cd_offset = static_cast<uint32_t>(out.size());
  auto cd_size = static_cast<uint32_t>(central.size());
  out += central;
  put32(out, 0x06054b50);  // end of central directory
  put16(out, 0);
  put16(out, 0);
  put16(out, static_cast<uint32_t>(files.size()));
  put16(out, static_cast<uint32_t>(files.size()));
  put32(out, cd_size);
  put32(out, cd_offset);
  put16(out, 0);
  return out;
}

// The media types an Accept header names, without parameters.
std::set<std::string> accepted_types(std::string_view accept) {
  std::set<std::string> out;
  while (!accept.empty()) {
    size_t comma = accept.find(',');
    std::string_view t = accept.substr(0, comma);
    t = t.substr(0, t.find(';'));
    while (!t.empty() && t.front() == ' ')
      t.remove_prefix(1);
    while (!t.empty() && t.back() == ' ')
      t.remove_suffix(1);
    if (!t.empty())
      out.emplace(t);
    if (comma == std::string_view::npos)
      break;
    accept.remove_prefix(comma + 1);
  }
  return out;
}

std::string media_type(std::string_view content_type) {
  std::string_view t = content_type.substr(0, content_type.find(';'));
  while (!t.empty() && t.back() == ' ')
    t.remove_suffix(1);
  return std::string(t);
}

HttpResponse create_package(const Ctx& c) {
  json::object body;
  if (auto bad = parse_body(c.req, body))
    return *bad;
  json::object user_data;
  for (const auto& [k, v] : body) {
    if (k != "userDefinedData")
      return problem_response(
          400, "Bad Request",
          "unknown attribute \"" + std::string(k).substr(0, 60) + "\" in CreateVnfPkgInfoRequest");
    if (!v.is_object())
      return problem_response(400, "Bad Request", "userDefinedData must be an object");
    user_data = v.get_object();
  }
  auto p = engine::create_package(c.store, std::move(user_data));
  if (!p.ok())
    return from_status(p.status());
  HttpResponse r = json_response(201, package_doc(c, p.value(), false));
  r.headers.emplace_back("Location", c.url("/vnf_packages/" + p.value().id));
  return r;
}

// Onboarding's outcome is the package's state (ONBOARDED, or CREATED with the reason), so
// both answer 202; a request that changes nothing answers why.
HttpResponse upload(const Ctx& c, const std::string& id, std::string bytes) {
  base::Diagnostics diags;
  auto p = engine::upload_package(c.store, id, std::move(bytes), diags, c.checks);
  if (!p.ok())
    return from_status(p.status());
  return empty_response(202);
}

HttpResponse upload_content(const Ctx& c, const std::string& id) {
  std::string ct = media_type(c.req.content_type);
  if (ct != "application/zip" && ct != "application/octet-stream")
    return problem_response(
        415, "Unsupported Media Type",
        "package content must be application/zip, not \"" + ct.substr(0, 60) + "\"");
  if (c.req.body.empty())
    return problem_response(400, "Bad Request", "the request has no package content");
  return upload(c, id, c.req.body);
}

HttpResponse upload_from_uri(const Ctx& c, const std::string& id) {
  json::object body;
  if (auto bad = parse_body(c.req, body))
    return *bad;
  std::string fields[3];
  static constexpr const char* kNames[3] = {"addressInformation", "userName", "password"};
  for (const auto& [k, v] : body) {
    int i = 0;
    while (i < 3 && k != kNames[i])
      ++i;
    if (i == 3)
      return problem_response(400, "Bad Request",
                              "unknown attribute \"" + std::string(k).substr(0, 60) +
                                  "\" in UploadVnfPkgFromUriRequest");
    if (!v.is_string())
      return problem_response(400, "Bad Request", std::string(kNames[i]) + " must be a string");
    fields[i] = std::string(v.get_string());
  }
  if (fields[0].empty())
    return problem_response(400, "Bad Request",
                            "UploadVnfPkgFromUriRequest needs addressInformation");
  auto p = c.store.get_package(id);
  if (!p.ok())
    return from_status(p.status());
  auto bytes = engine::fetch_package(fields[0], fields[1], fields[2], kFetchTimeout);
  if (!bytes.ok())
    return problem_response(400, "Bad Request",
                            "cannot read the package: " + bytes.status().message());
  return upload(c, p.value().id, std::move(bytes).value());
}

HttpResponse vnfd(const Ctx& c, const std::string& id) {
  auto pkg = engine::open_package(c.store, id);
  if (!pkg.ok())
    return from_status(pkg.status());
  std::vector<std::string> files = engine::vnfd_files(*pkg.value());
  auto types = accepted_types(c.req.accept);
  bool any = types.empty() || types.count("*/*") > 0;
  bool text = any || types.count("text/plain") > 0 || types.count("text/*") > 0;
  bool zip = any || types.count("application/zip") > 0 || types.count("application/*") > 0;
  if (text && files.size() == 1) {
    auto f = pkg.value()->read_file(files[0], engine::kMaxPackageBytes);
    if (!f.ok())
      return from_status(f.status());
    return bytes_response("text/plain", std::move(f).value());
  }
  if (!zip)
    return problem_response(
        406, "Not Acceptable",
        text ? "the VNFD is " + std::to_string(files.size()) +
                   " files: it is served as application/zip only"
             : "the VNFD is served as text/plain (a single file) or application/zip");
  std::vector<std::pair<std::string, std::string>> entries;
  const auto& all = pkg.value()->files;
  if (std::binary_search(all.begin(), all.end(), "TOSCA-Metadata/TOSCA.meta"))
    files.insert(files.begin(), "TOSCA-Metadata/TOSCA.meta");
  for (const auto& name : files) {
    auto f = pkg.value()->read_file(name, engine::kMaxPackageBytes);
    if (!f.ok())
      return from_status(f.status());
    entries.emplace_back(name, std::move(f).value());
  }
  return bytes_response("application/zip", stored_zip(entries));
}

HttpResponse artifact(const Ctx& c, const std::string& id) {
  // The path as sent, a segment at a time: "." and ".." are never a file of a package,
  // and a segment may not hide a separator behind %2F.
  std::string path;
  for (size_t i = 3; i < c.t.segs.size(); ++i) {
    auto seg = percent_decode(c.t.segs[i], false);
    if (!seg || seg->empty() || *seg == "." || *seg == ".." ||
        seg->find_first_of(std::string_view("/\\\0", 3)) != std::string::npos)
      return problem_response(400, "Bad Request",
                              "the artifact path may not hold \".\", \"..\", empty or encoded "
                              "separators, or NUL");
    path += (path.empty() ? "" : "/") + *seg;
  }
  auto pkg = engine::open_package(c.store, id);
  if (!pkg.ok())
    return from_status(pkg.status());
  const auto& all = pkg.value()->files;
  if (!std::binary_search(all.begin(), all.end(), path))
    return problem_response(404, "Not Found",
                            "package " + id + " has no artifact \"" + path.substr(0, 200) + "\"");
  auto f = pkg.value()->read_file(path, engine::kMaxPackageBytes);
  if (!f.ok())
    return from_status(f.status());
  return bytes_response("application/octet-stream", std::move(f).value());
}

}  // namespace

HttpResponse packages(const Ctx& c) {
  const auto& s = c.t.segs;
  const std::string& m = c.req.method;
  if (!s.empty() && s[0] == "subscriptions")
    return subscriptions(c);
  if (s.empty() || s[0] != "vnf_packages")
    return not_found(c.t);
  std::set<std::string> in_use;
  auto insts = c.store.list_instances();
  if (!insts.ok())
    return from_status(insts.status());
  for (const auto& i : insts.value())
    in_use.insert(i.package_id);
  if (s.size() == 1) {
    if (m == "POST")
      return create_package(c);
    if (m != "GET")
      return method_not_allowed(m, "GET, POST");
    auto ps = c.store.list_packages();
    if (!ps.ok())
      return from_status(ps.status());
    std::vector<json::object> docs;
    for (const auto& p : ps.value())
      docs.push_back(package_doc(c, p, in_use.count(p.id) > 0));
    return list_response(
        c, std::move(docs),
        {{"softwareImages", "additionalArtifacts", "userDefinedData", "checksum"}, true});
  }
  const std::string& id = s[1];
  if (s.size() == 2) {
    if (m == "GET") {
      auto p = c.store.get_package(id);
      if (!p.ok())
        return from_status(p.status());
      return json_response(200, package_doc(c, p.value(), in_use.count(p.value().id) > 0));
    }
    if (m == "PATCH") {
      json::object body;
      if (auto bad = parse_body(c.req, body))
        return *bad;
      auto changed = engine::modify_package(c.store, id, body);
      if (!changed.ok())
        return from_status(changed.status());
      return json_response(200, changed.value());
    }
    if (m == "DELETE") {
      if (base::Status st = engine::delete_package(c.store, id); !st.ok())
        return from_status(st);
      return empty_response(204);
    }
    return method_not_allowed(m, "GET, PATCH, DELETE");
  }
  if (s[2] == "package_content" && s.size() == 3) {
    if (m == "PUT")
      return upload_content(c, id);
    if (m != "GET")
      return method_not_allowed(m, "GET, PUT");
    auto p = c.store.get_package(id);
    if (!p.ok())
      return from_status(p.status());
    if (p.value().onboarding_state != "ONBOARDED")
      return problem_response(409, "Conflict",
                              "package " + p.value().id + " is " + p.value().onboarding_state +
                                  ": it has no content yet");
    auto bytes = c.store.package_bytes(p.value().id);
    if (!bytes.ok())
      return from_status(bytes.status());
    return bytes_response("application/zip", std::move(bytes).value());
  }
  if (s[2] == "package_content" && s.size() == 4 && s[3] == "upload_from_uri") {
    if (m != "POST")
      return method_not_allowed(m, "POST");
    return upload_from_uri(c, id);
  }
  if (s[2] == "vnfd" && s.size() == 3) {
    if (m != "GET")
      return method_not_allowed(m, "GET");
    return vnfd(c, id);
  }
  if (s[2] == "artifacts" && s.size() >= 4) {
    if (m != "GET")
      return method_not_allowed(m, "GET");
    return artifact(c, id);
  }
  return not_found(c.t);
}

}  // namespace api::internal
