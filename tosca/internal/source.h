// tosca::internal::FileSource: the files of one package, from a zip archive or a folder.
// Opening a source checks the whole package against the Limits (entry count, total size,
// compression ratio, unsafe names, links leaving the package) before anything is read.
// Nothing is ever extracted to disk.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/base.h"
#include "tosca/tosca.h"

namespace tosca::internal {

class FileSource {
 public:
  virtual ~FileSource() = default;

  // Every regular file, as normalized package paths ("Definitions/vnfd.yaml"), sorted.
  const std::vector<std::string>& files() const { return files_; }
  bool exists(std::string_view path) const;
  // True when `path` is a folder prefix of some file ("Definitions").
  bool is_dir(std::string_view path) const;

  // Reads a whole file of at most `max_bytes`.
  virtual base::Result<std::string> read(std::string_view path, uint64_t max_bytes) = 0;
  // Streams a file through a digest; lowercase hex.
  virtual base::Result<std::string> digest(std::string_view path, base::DigestAlgorithm a) = 0;
  // digest(), remembered: a file listed in TOSCA.meta and in the manifest is read once.
  base::Result<std::string> digest_once(const std::string& path, base::DigestAlgorithm a);
  // SHA-256 identifying the whole package (archive bytes, or names and contents).
  virtual base::Result<std::string> package_digest() = 0;

  // "pkg.csar!Definitions/vnfd.yaml" or "path/to/folder/Definitions/vnfd.yaml".
  std::string display(std::string_view path) const;
  const std::string& display_name() const { return display_name_; }
  bool is_archive() const { return archive_; }
  void set_display(std::string name, std::string prefix, bool archive) {
    display_name_ = std::move(name);
    display_prefix_ = std::move(prefix);
    archive_ = archive;
  }

 protected:
  std::vector<std::string> files_;
  std::string display_name_;
  std::string display_prefix_;  // "pkg.csar!" or "folder/"
  bool archive_ = false;
  std::map<std::pair<std::string, base::DigestAlgorithm>, base::Result<std::string>> digests_;
};

// Joins and normalizes a relative reference against a folder inside the package.
// Returns false when the result would leave the package root or is absolute.
bool join_package_path(std::string_view base_dir, std::string_view ref, std::string& out);
// The folder part of a package path ("Definitions" for "Definitions/x.yaml", "" at root).
std::string dir_of(std::string_view path);
// Checks an archive entry name: relative, no "..", no backslash, no NUL, no drive letter.
bool is_safe_entry_name(std::string_view name, std::string& why);

std::unique_ptr<FileSource> open_zip_file(const std::string& path, const Limits& limits,
                                          base::Diagnostics& diags);
std::unique_ptr<FileSource> open_zip_bytes(std::string display_name, std::string bytes,
                                           const Limits& limits, base::Diagnostics& diags);
std::unique_ptr<FileSource> open_directory(const std::string& path, const Limits& limits,
                                           base::Diagnostics& diags);
// An in-memory package (path -> content), for unit tests and fuzzing.
// Packs a folder package into zip bytes (for storing it).
base::Result<std::string> pack_directory(const std::string& path, const Limits& limits);

std::unique_ptr<FileSource> open_memory(std::string display_name,
                                        std::map<std::string, std::string> files);

}  // namespace tosca::internal
