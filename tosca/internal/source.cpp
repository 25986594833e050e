// Package sources. The only file that includes <zip.h>.
#include "tosca/internal/source.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <libdeflate.h>
#include <sys/stat.h>
#include <zip.h>

namespace tosca::internal {

namespace fs = std::filesystem;

bool FileSource::exists(std::string_view path) const {
  return std::binary_search(files_.begin(), files_.end(), path,
                            [](std::string_view a, std::string_view b) { return a < b; });
}

bool FileSource::is_dir(std::string_view path) const {
  std::string prefix(path);
  if (prefix.empty()) {
    return true;
  }
  prefix += '/';
  auto it = std::lower_bound(files_.begin(), files_.end(), prefix);
  return it != files_.end() && it->compare(0, prefix.size(), prefix) == 0;
}

base::Result<std::string> FileSource::digest_once(const std::string& path,
                                                  base::DigestAlgorithm a) {
  auto it = digests_.find({path, a});
  if (it == digests_.end())
    it = digests_.emplace(std::make_pair(path, a), digest(path, a)).first;
  return it->second;
}

std::string FileSource::display(std::string_view path) const {
  return display_prefix_ + std::string(path);
}

std::string dir_of(std::string_view path) {
  auto pos = path.rfind('/');
  return pos == std::string_view::npos ? std::string() : std::string(path.substr(0, pos));
}

bool join_package_path(std::string_view base_dir, std::string_view ref, std::string& out) {
  if (ref.empty() || ref.front() == '/' || ref.find('\\') != std::string_view::npos ||
      ref.find('\0') != std::string_view::npos) {
    return false;
  }
  std::vector<std::string_view> parts;
  auto push_all = [&](std::string_view s) -> bool {
    size_t start = 0;
    while (start <= s.size()) {
      size_t end = s.find('/', start);
      if (end == std::string_view::npos) {
        end = s.size();
      }
      std::string_view seg = s.substr(start, end - start);
      if (seg == "..") {
        if (parts.empty()) {
          return false;
        }
        parts.pop_back();
      } else if (!seg.empty() && seg != ".") {
        parts.push_back(seg);
      }
      start = end + 1;
    }
    return true;
  };
  if (!push_all(base_dir) || !push_all(ref)) {
    return false;
  }
  out.clear();
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) {
      out += '/';
    }
    out += parts[i];
  }
  return !out.empty();
}

bool is_safe_entry_name(std::string_view name, std::string& why) {
  if (name.empty()) {
    why = "empty name";
    return false;
  }
  if (name.find('\0') != std::string_view::npos) {
    why = "NUL byte in name";
    return false;
  }
  if (name.front() == '/') {
    why = "absolute path";
    return false;
  }
  if (name.find('\\') != std::string_view::npos) {
    why = "backslash in path";
    return false;
  }
  if (name.size() >= 2 && name[1] == ':') {
    why = "drive letter";
    return false;
  }
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string_view::npos) {
      end = name.size();
    }
    if (name.substr(start, end - start) == "..") {
      why = "\"..\" component";
      return false;
    }
    start = end + 1;
  }
  return true;
}

namespace {

constexpr uint64_t kRatioFloorBytes = 1u << 20;  // small entries may compress very well

std::string normalize_entry(std::string_view name) {
  while (name.size() >= 2 && name.substr(0, 2) == "./") {
    name.remove_prefix(2);
  }
  return std::string(name);
}

class ZipSource : public FileSource {
 public:
  ~ZipSource() override {
    if (za_ != nullptr) {
      zip_discard(za_);
    }
    if (inflater_ != nullptr) {
      libdeflate_free_decompressor(inflater_);
    }
  }

  bool open(const Limits& limits, base::Diagnostics& diags, zip_source_t* src,
            const std::string& file_path) {
    limits_ = limits;
    zip_error_t err;
    zip_error_init(&err);
    if (src != nullptr) {
      za_ = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &err);
      if (za_ == nullptr) {
        zip_source_free(src);
      }
    } else {
      int code = 0;
      za_ = zip_open(file_path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code);
      zip_error_init_with_code(&err, code);
    }
    if (za_ == nullptr) {
      if (zip_error_code_zip(&err) == ZIP_ER_EXISTS) {
        // libzip's consistency check refuses archives with two entries of one name.
        diags.error("C0009", {display_name_, 0, 0},
                    "archive has two entries with the same name; which one is meant is ambiguous");
      } else {
        diags.error("C0002", {display_name_, 0, 0},
                    std::string("not a readable zip archive: ") + zip_error_strerror(&err));
      }
      zip_error_fini(&err);
      return false;
    }
    zip_error_fini(&err);
    zip_int64_t n = zip_get_num_entries(za_, 0);
    if (n < 0) {
      diags.error("C0002", {display_name_, 0, 0}, "corrupt zip archive: cannot count entries");
      return false;
    }
    if (static_cast<uint64_t>(n) > limits.max_entries) {
      diags.error("C0005", {display_name_, 0, 0},
                  "archive has " + std::to_string(n) + " entries; the limit is " +
                      std::to_string(limits.max_entries));
      return false;
    }
    uint64_t total = 0;
    bool ok = true;
    std::map<std::string, std::string> links;  // link path -> target path
    for (zip_int64_t i = 0; i < n; ++i) {
      zip_stat_t st;
      zip_stat_init(&st);
      if (zip_stat_index(za_, static_cast<zip_uint64_t>(i), 0, &st) != 0 ||
          !(st.valid & ZIP_STAT_NAME)) {
        diags.error("C0002", {display_name_, 0, 0},
                    "corrupt zip archive: entry " + std::to_string(i) + " unreadable");
        ok = false;
        continue;
      }
      std::string raw = st.name;
      std::string why;
      if (!is_safe_entry_name(raw, why)) {
        diags.error("C0003", {display_name_, 0, 0},
                    "unsafe entry name \"" + raw + "\" (" + why + ") refused");
        ok = false;
        continue;
      }
      std::string name = normalize_entry(raw);
      if (name.empty() || name.back() == '/') {
        continue;  // a folder entry
      }
      if ((st.valid & ZIP_STAT_ENCRYPTION_METHOD) && st.encryption_method != ZIP_EM_NONE) {
        diags.error("C0023", {display_name_ + "!" + name, 0, 0},
                    "encrypted entry; vnflow reads only unencrypted packages");
        ok = false;
        continue;
      }
      uint64_t size = (st.valid & ZIP_STAT_SIZE) ? st.size : 0;
      uint64_t comp = (st.valid & ZIP_STAT_COMP_SIZE) ? st.comp_size : 0;
      total += size;
      if (size > kRatioFloorBytes &&
          size / std::max<uint64_t>(comp, 1) > limits.max_compression_ratio) {
        diags.error("C0007", {display_name_ + "!" + name, 0, 0},
                    "compression ratio " + std::to_string(size / std::max<uint64_t>(comp, 1)) +
                        ":1 exceeds the limit " + std::to_string(limits.max_compression_ratio) +
                        ":1 (zip bomb?)");
        ok = false;
        continue;
      }
      zip_uint8_t opsys = 0;
      zip_uint32_t attr = 0;
      if (zip_file_get_external_attributes(za_, static_cast<zip_uint64_t>(i), 0, &opsys, &attr) ==
              0 &&
          opsys == ZIP_OPSYS_UNIX && S_ISLNK(attr >> 16)) {
        // A link inside the archive: allowed only when its target stays in the package.
        std::string target;
        auto content = read_index(static_cast<zip_uint64_t>(i), 4096);
        std::string resolved;
        if (!content.ok() || !join_package_path(dir_of(name), content.value(), resolved)) {
          diags.error("C0004", {display_name_ + "!" + name, 0, 0},
                      "symbolic link points outside the package (-> \"" +
                          (content.ok() ? content.value() : std::string("?")) + "\"); refused");
          ok = false;
          continue;
        }
        links[name] = resolved;
        continue;
      }
      if (!index_.emplace(name, static_cast<zip_uint64_t>(i)).second) {
        diags.error("C0009", {display_name_ + "!" + name, 0, 0}, "duplicate entry in archive");
        ok = false;
        continue;
      }
      sizes_[name] = size;
    }
    if (total > limits.max_total_bytes) {
      diags.error("C0006", {display_name_, 0, 0},
                  "archive expands to " + std::to_string(total) + " bytes; the limit is " +
                      std::to_string(limits.max_total_bytes));
      ok = false;
    }
    for (const auto& [link, target] : links) {
      auto it = index_.find(target);
      if (it == index_.end()) {
        diags.error("C0004", {display_name_ + "!" + link, 0, 0},
                    "symbolic link target \"" + target + "\" is not a file of the package");
        ok = false;
        continue;
      }
      index_.emplace(link, it->second);
      sizes_[link] = sizes_[target];
    }
    for (const auto& [name, idx] : index_) {
      files_.push_back(name);
    }
    std::sort(files_.begin(), files_.end());
    return ok;
  }

  base::Result<std::string> read(std::string_view path, uint64_t max_bytes) override {
    auto it = index_.find(std::string(path));
    if (it == index_.end()) {
      return base::Status::NotFound("no file \"" + std::string(path) + "\" in the package");
    }
    if (sizes_[it->first] > max_bytes) {
      return base::Status::FailedPrecondition("file is " + std::to_string(sizes_[it->first]) +
                                              " bytes; the limit is " + std::to_string(max_bytes));
    }
    return read_index(it->second, max_bytes, sizes_[it->first]);
  }

  base::Result<std::string> digest(std::string_view path, base::DigestAlgorithm a) override {
    auto it = index_.find(std::string(path));
    if (it == index_.end()) {
      return base::Status::NotFound("no file \"" + std::string(path) + "\" in the package");
    }
    zip_file_t* f = zip_fopen_index(za_, it->second, 0);
    if (f == nullptr) {
      return base::Status::Internal(std::string("cannot open entry: ") + zip_strerror(za_));
    }
    base::Hasher h(a);
    char buf[65536];
    uint64_t total = 0;
    for (;;) {
      zip_int64_t got = zip_fread(f, buf, sizeof buf);
      if (got < 0) {
        std::string why = zip_error_strerror(zip_file_get_error(f));
        zip_fclose(f);
        return base::Status::Internal("corrupt entry: " + why);
      }
      if (got == 0) {
        break;
      }
      total += static_cast<uint64_t>(got);
      if (total > limits_.max_total_bytes) {
        zip_fclose(f);
        return base::Status::FailedPrecondition("entry expands beyond the package size limit");
      }
      h.update(std::string_view(buf, static_cast<size_t>(got)));
    }
    zip_fclose(f);
    return h.hex_final();
  }

  base::Result<std::string> package_digest() override { return archive_digest_; }

  zip_t* za_ = nullptr;
  std::string archive_digest_;
  std::string bytes_;  // backing store for archives opened from memory

 private:
  // Inflates straight into the string returned. `size` is what the archive's directory
  // says the entry holds, which a hostile archive may overstate: room is made for that
  // much at once up to 1 MiB (and max_bytes), then it grows as the bytes come.
  base::Result<std::string> read_index(zip_uint64_t idx, uint64_t max_bytes, uint64_t size = 0) {
    if (std::string out; inflate_whole(idx, max_bytes, out))
      return out;
    zip_file_t* f = zip_fopen_index(za_, idx, 0);
    if (f == nullptr) {
      return base::Status::Internal(std::string("cannot open entry: ") + zip_strerror(za_));
    }
    constexpr uint64_t kFirstRoom = 1u << 20;
    // max_bytes + 1 bytes at most: one past the limit tells that the entry is over it.
    const uint64_t most = max_bytes == UINT64_MAX ? max_bytes : max_bytes + 1;
    std::string out;
    // One byte past the expected end, so the end is seen in the same read.
    out.resize(static_cast<size_t>(std::min({size + 1, kFirstRoom, most})));
    size_t have = 0;
    for (;;) {
      if (have == out.size())
        out.resize(
            static_cast<size_t>(std::min<uint64_t>(std::max<uint64_t>(have * 2, 65536), most)));
      zip_int64_t got = zip_fread(f, out.data() + have, out.size() - have);
      if (got < 0) {
        std::string why = zip_error_strerror(zip_file_get_error(f));
        zip_fclose(f);
        return base::Status::Internal("corrupt entry: " + why);
      }
      if (got == 0) {
        break;
      }
      have += static_cast<size_t>(got);
      if (have > max_bytes) {
        zip_fclose(f);
        return base::Status::FailedPrecondition("entry is larger than " +
                                                std::to_string(max_bytes) + " bytes");
      }
    }
    zip_fclose(f);
    out.resize(have);
    return out;
  }

  // The common case, a deflated entry that is what the directory says, inflated in one call
  // by libdeflate (several times zlib's speed, which libzip uses) and its CRC-32 checked.
  // Anything else (another method, encryption, a size over max_bytes or not the entry's,
  // corrupt data, a CRC that does not match) returns false, and read_index goes libzip's
  // way, which also says what is wrong.
  bool inflate_whole(zip_uint64_t idx, uint64_t max_bytes, std::string& out) {
    zip_stat_t st;
    zip_stat_init(&st);
    constexpr zip_uint64_t kNeed = ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_CRC |
                                   ZIP_STAT_COMP_METHOD | ZIP_STAT_ENCRYPTION_METHOD;
    // Deflate stores what does not shrink at five bytes per 64 KiB block: a larger
    // compressed size is not this entry's.
    if (zip_stat_index(za_, idx, 0, &st) != 0 || (st.valid & kNeed) != kNeed ||
        st.comp_method != ZIP_CM_DEFLATE || st.encryption_method != ZIP_EM_NONE || st.size == 0 ||
        st.size > max_bytes || st.comp_size > st.size + st.size / 1024 + 64)
      return false;
    zip_file_t* f = zip_fopen_index(za_, idx, ZIP_FL_COMPRESSED);
    if (f == nullptr)
      return false;
    std::string packed(static_cast<size_t>(st.comp_size), '\0');
    zip_int64_t got = zip_fread(f, packed.data(), packed.size());
    zip_fclose(f);
    if (got != static_cast<zip_int64_t>(packed.size()))
      return false;
    if (inflater_ == nullptr && (inflater_ = libdeflate_alloc_decompressor()) == nullptr)
      return false;
    out.resize(static_cast<size_t>(st.size));
    // No actual-size out parameter: the data must fill exactly st.size bytes.
    if (libdeflate_deflate_decompress(inflater_, packed.data(), packed.size(), out.data(),
                                      out.size(), nullptr) != LIBDEFLATE_SUCCESS ||
        libdeflate_crc32(0, out.data(), out.size()) != st.crc) {
      out.clear();
      return false;
    }
    return true;
  }

  libdeflate_decompressor* inflater_ = nullptr;
  Limits limits_;
  std::map<std::string, zip_uint64_t> index_;
  std::map<std::string, uint64_t> sizes_;
};

class DirSource : public FileSource {
 public:
  bool open(const std::string& path, const Limits& limits, base::Diagnostics& diags) {
    limits_ = limits;
    std::error_code ec;
    root_ = fs::canonical(path, ec);
    if (ec) {
      diags.error("C0001", {display_name_, 0, 0}, "cannot open package folder: " + ec.message());
      return false;
    }
    bool ok = true;
    uint64_t total = 0;
    std::string root_prefix = root_.generic_string();
    if (root_prefix.back() != '/')
      root_prefix += '/';
    fs::recursive_directory_iterator it(root_, fs::directory_options::none, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      const fs::directory_entry& e = *it;
      // The iterator yields root_/<rel>; cut the prefix instead of fs::relative(), which
      // resolves every path component with a system call.
      std::string full = e.path().generic_string();
      std::string rel = full.size() > root_prefix.size() ? full.substr(root_prefix.size()) : "";
      if (files_.size() >= limits.max_entries) {
        diags.error("C0005", {display_name_, 0, 0},
                    "package has more than " + std::to_string(limits.max_entries) + " files");
        return false;
      }
      if (e.is_symlink(ec)) {
        fs::path target;
        if (!link_inside(e.path(), rel, target, diags)) {
          ok = false;
          ec.clear();
          continue;
        }
        if (fs::is_directory(target, ec)) {
          // Links to folders inside the package are followed by listing their files; a
          // link in there is held to the same rule.
          for (const auto& sub : fs::recursive_directory_iterator(target, ec)) {
            std::string inner = sub.path().lexically_relative(target).generic_string();
            fs::path real = sub.path();
            if (sub.is_symlink(ec) && !link_inside(sub.path(), rel + "/" + inner, real, diags)) {
              ok = false;
              continue;
            }
            if (fs::is_regular_file(real, ec))
              add_file(rel + "/" + inner, real, total);
          }
          ec.clear();
          continue;
        }
        if (fs::is_regular_file(target, ec)) {
          add_file(rel, target, total);
        }
        ec.clear();
        continue;
      }
      if (e.is_regular_file(ec)) {
        add_file(rel, e.path(), total);
      }
    }
    if (ec) {
      diags.error("C0001", {display_name_, 0, 0}, "cannot list package folder: " + ec.message());
      return false;
    }
    if (total > limits.max_total_bytes) {
      diags.error("C0006", {display_name_, 0, 0},
                  "package holds " + std::to_string(total) + " bytes; the limit is " +
                      std::to_string(limits.max_total_bytes));
      ok = false;
    }
    std::sort(files_.begin(), files_.end());
    return ok;
  }

  // Follows every hop of the link at `link` (package path `rel`); true with the final
  // `target` when it is inside the package, else a located C0004 saying which it is: a way
  // out, or a loop (a chain that never ends stays inside, but leads nowhere).
  bool link_inside(const fs::path& link, const std::string& rel, fs::path& target,
                   base::Diagnostics& diags) {
    std::error_code ec;
    std::string first = fs::read_symlink(link, ec).generic_string();
    target = fs::weakly_canonical(link, ec);
    if (ec == std::errc::too_many_symbolic_link_levels) {
      diags.error("C0004", {display(rel), 0, 0},
                  "symbolic links loop (-> \"" + first + "\" -> ... never ends); refused");
      return false;
    }
    fs::path inner = target.lexically_relative(root_);
    if (ec || target.is_relative() || inner.empty() || inner == "." || *inner.begin() == "..") {
      diags.error("C0004", {display(rel), 0, 0},
                  "symbolic link points outside the package (-> \"" + first + "\"); refused");
      return false;
    }
    return true;
  }

  base::Result<std::string> read(std::string_view path, uint64_t max_bytes) override {
    auto it = paths_.find(std::string(path));
    if (it == paths_.end()) {
      return base::Status::NotFound("no file \"" + std::string(path) + "\" in the package");
    }
    std::error_code ec;
    auto size = fs::file_size(it->second, ec);
    if (ec) {
      return base::Status::NotFound(ec.message());
    }
    if (size > max_bytes) {
      return base::Status::FailedPrecondition("file is " + std::to_string(size) +
                                              " bytes; the limit is " + std::to_string(max_bytes));
    }
    std::ifstream in(it->second, std::ios::binary);
    std::string out(size, '\0');
    in.read(out.data(), static_cast<std::streamsize>(size));
    if (!in) {
      return base::Status::Internal("cannot read \"" + std::string(path) + "\"");
    }
    return out;
  }

  base::Result<std::string> digest(std::string_view path, base::DigestAlgorithm a) override {
    auto it = paths_.find(std::string(path));
    if (it == paths_.end()) {
      return base::Status::NotFound("no file \"" + std::string(path) + "\" in the package");
    }
    std::ifstream in(it->second, std::ios::binary);
    if (!in) {
      return base::Status::Internal("cannot read \"" + std::string(path) + "\"");
    }
    base::Hasher h(a);
    char buf[65536];
    while (in.read(buf, sizeof buf) || in.gcount() > 0) {
      h.update(std::string_view(buf, static_cast<size_t>(in.gcount())));
    }
    return h.hex_final();
  }

  base::Result<std::string> package_digest() override {
    base::Hasher h(base::DigestAlgorithm::kSha256);
    for (const auto& f : files_) {
      auto d = digest(f, base::DigestAlgorithm::kSha256);
      if (!d.ok()) {
        return d.status();
      }
      h.update(f);
      h.update(std::string_view("\0", 1));
      h.update(d.value());
    }
    return h.hex_final();
  }

 private:
  void add_file(const std::string& rel, const fs::path& real, uint64_t& total) {
    std::error_code ec;
    total += fs::file_size(real, ec);
    files_.push_back(rel);
    paths_[rel] = real;
  }

  Limits limits_;
  fs::path root_;
  std::map<std::string, fs::path> paths_;
};

class MemorySource : public FileSource {
 public:
  explicit MemorySource(std::map<std::string, std::string> files) : data_(std::move(files)) {
    for (const auto& [k, v] : data_) {
      files_.push_back(k);
    }
  }
  base::Result<std::string> read(std::string_view path, uint64_t max_bytes) override {
    auto it = data_.find(std::string(path));
    if (it == data_.end()) {
      return base::Status::NotFound("no file \"" + std::string(path) + "\" in the package");
    }
    if (it->second.size() > max_bytes) {
      return base::Status::FailedPrecondition("file is larger than " + std::to_string(max_bytes) +
                                              " bytes");
    }
    return it->second;
  }
  base::Result<std::string> digest(std::string_view path, base::DigestAlgorithm a) override {
    auto it = data_.find(std::string(path));
    if (it == data_.end()) {
      return base::Status::NotFound("no file \"" + std::string(path) + "\" in the package");
    }
    return base::digest_hex(a, it->second);
  }
  base::Result<std::string> package_digest() override {
    base::Hasher h(base::DigestAlgorithm::kSha256);
    for (const auto& [k, v] : data_) {
      h.update(k);
      h.update(std::string_view("\0", 1));
      h.update(base::digest_hex(base::DigestAlgorithm::kSha256, v));
    }
    return h.hex_final();
  }

 private:
  std::map<std::string, std::string> data_;
};

std::string base_name(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') {
    p.pop_back();
  }
  auto pos = p.rfind('/');
  return pos == std::string::npos ? p : p.substr(pos + 1);
}

}  // namespace

std::unique_ptr<FileSource> open_zip_file(const std::string& path, const Limits& limits,
                                          base::Diagnostics& diags) {
  auto src = std::make_unique<ZipSource>();
  src->set_display(base_name(path), base_name(path) + "!", true);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    diags.error("C0001", {src->display_name(), 0, 0}, "no such package file or folder");
    return nullptr;
  }
  {
    std::ifstream in(path, std::ios::binary);
    base::Hasher h(base::DigestAlgorithm::kSha256);
    char buf[65536];
    while (in.read(buf, sizeof buf) || in.gcount() > 0) {
      h.update(std::string_view(buf, static_cast<size_t>(in.gcount())));
    }
    src->archive_digest_ = h.hex_final();
  }
  if (!src->open(limits, diags, nullptr, path)) {
    return nullptr;
  }
  return src;
}

std::unique_ptr<FileSource> open_zip_bytes(std::string display_name, std::string bytes,
                                           const Limits& limits, base::Diagnostics& diags) {
  auto src = std::make_unique<ZipSource>();
  src->set_display(display_name, display_name + "!", true);
  src->bytes_ = std::move(bytes);
  src->archive_digest_ = base::digest_hex(base::DigestAlgorithm::kSha256, src->bytes_);
  zip_error_t err;
  zip_error_init(&err);
  zip_source_t* zs = zip_source_buffer_create(src->bytes_.data(), src->bytes_.size(), 0, &err);
  zip_error_fini(&err);
  if (zs == nullptr) {
    diags.error("C0002", {src->display_name(), 0, 0}, "cannot read archive bytes");
    return nullptr;
  }
  if (!src->open(limits, diags, zs, {})) {
    return nullptr;
  }
  return src;
}

std::unique_ptr<FileSource> open_directory(const std::string& path, const Limits& limits,
                                           base::Diagnostics& diags) {
  auto src = std::make_unique<DirSource>();
  std::string prefix = path;
  while (prefix.size() > 1 && prefix.back() == '/') {
    prefix.pop_back();
  }
  src->set_display(base_name(path), prefix + "/", false);
  if (!src->open(path, limits, diags)) {
    return nullptr;
  }
  return src;
}

std::unique_ptr<FileSource> open_memory(std::string display_name,
                                        std::map<std::string, std::string> files) {
  auto src = std::make_unique<MemorySource>(std::move(files));
  src->set_display(display_name, display_name + "!", false);
  return src;
}

}  // namespace tosca::internal

namespace tosca::internal {

base::Result<std::string> pack_directory(const std::string& path, const Limits& limits) {
  base::Diagnostics diags;
  auto src = open_directory(path, limits, diags);
  if (src == nullptr || diags.has_errors()) {
    std::string why = diags.empty() ? "cannot read the folder" : to_string(diags.sorted().front());
    return base::Status::InvalidArgument(why);
  }
  zip_error_t err;
  zip_error_init(&err);
  zip_source_t* buf = zip_source_buffer_create(nullptr, 0, 0, &err);
  if (buf == nullptr) {
    return base::Status::Internal("zip: cannot create a buffer");
  }
  zip_t* za = zip_open_from_source(buf, ZIP_TRUNCATE, &err);
  if (za == nullptr) {
    zip_source_free(buf);
    return base::Status::Internal("zip: cannot open a buffer");
  }
  zip_source_keep(buf);
  // Each file's bytes must outlive zip_close(), which is when libzip reads them.
  std::vector<std::string> contents;
  contents.reserve(src->files().size());
  for (const auto& name : src->files()) {
    auto data = src->read(name, limits.max_total_bytes);
    if (!data.ok()) {
      zip_discard(za);
      zip_source_free(buf);
      return data.status();
    }
    contents.push_back(std::move(data).value());
    zip_source_t* fs = zip_source_buffer(za, contents.back().data(), contents.back().size(), 0);
    zip_int64_t index = fs == nullptr ? -1 : zip_file_add(za, name.c_str(), fs, ZIP_FL_ENC_UTF_8);
    if (index < 0) {
      if (fs != nullptr)
        zip_source_free(fs);
      zip_discard(za);
      zip_source_free(buf);
      return base::Status::Internal("zip: cannot add \"" + name + "\"");
    }
    // A fixed time stamp: the same folder packs into the same bytes (and digest) whenever
    // it is packed, so onboarding it twice finds the stored package.
    zip_file_set_mtime(za, static_cast<zip_uint64_t>(index), 315532800, 0);  // 1980-01-01
  }
  if (zip_close(za) < 0) {
    zip_discard(za);
    zip_source_free(buf);
    return base::Status::Internal("zip: cannot write the archive");
  }
  std::string out;
  zip_stat_t st;
  if (zip_source_open(buf) < 0 || zip_source_stat(buf, &st) < 0) {
    zip_source_free(buf);
    return base::Status::Internal("zip: cannot read the archive back");
  }
  out.resize(st.size);
  zip_int64_t n = zip_source_read(buf, out.data(), st.size);
  zip_source_close(buf);
  zip_source_free(buf);
  if (n < 0 || static_cast<zip_uint64_t>(n) != st.size) {
    return base::Status::Internal("zip: short read of the archive");
  }
  return out;
}

}  // namespace tosca::internal
