// Fast path for the plain YAML subset of VNFDs (see fast_yaml.cpp), and the digest of a
// text's meaning, by which the type files vnflow ships are recognised whatever their layout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <yaml-cpp/eventhandler.h>

#include "base/base.h"

namespace tosca::internal {

// One read of a text by the fast reader.
class FastYaml {
 public:
  FastYaml();
  ~FastYaml();
  FastYaml(const FastYaml&) = delete;
  FastYaml& operator=(const FastYaml&) = delete;

  // Reads `text` and returns true when it is inside the subset; otherwise returns false,
  // keeps nothing, and why() names what made the reader step aside ("multi-line value").
  // The events refer to `text`, which must outlive replay().
  bool read(std::string_view text);
  const char* why() const { return why_; }

  // After a successful read: the digest of the text's meaning, computed from the events
  // read (see MeaningDigest), so two texts that differ only in indentation,
  // comments, line endings or quote style have the same one.
  const std::string& meaning() const { return meaning_; }

  // Emits the events into `handler` exactly as YAML::Parser would, freeing them as it goes
  // (once per read), or with `keep` keeping them for another replay.
  void replay(YAML::EventHandler& handler, bool keep = false);

 private:
  struct Events;
  std::unique_ptr<Events> events_;
  const char* why_ = nullptr;
  std::string meaning_;
};

// Emits the events of `text` into `handler`, exactly as YAML::Parser would, and returns
// true; or returns false without emitting anything when the text uses YAML outside the
// subset, and the caller must parse it with yaml-cpp.
bool fast_parse_yaml(std::string_view text, YAML::EventHandler& handler);

// Whether a plain (unquoted) scalar is null in YAML 1.2's core schema: "", "~", "null",
// "Null" or "NULL". The tree builder and the meaning digest both ask this.
bool plain_null(std::string_view value);

// A fast 64-bit hash (not cryptographic): it finds candidates, and never decides alone that
// two texts are the same; whoever finds a candidate by it confirms by comparing.
class QuickHash {
 public:
  void add(uint64_t word) {
    h_ = (h_ ^ word) * 0x9E3779B97F4A7C15ull;
    h_ ^= h_ >> 29;
  }
  // Its length with `tag` (what the caller says the bytes are) in one word, then its bytes.
  void add(std::string_view bytes, uint8_t tag = 0);
  uint64_t value() const;

 private:
  uint64_t h_ = 0x243F6A8885A308D3ull;
};
uint64_t quick_hash(std::string_view bytes);

// The digest of a document's meaning: QuickHash over its events in order, each the node's
// kind, whether a scalar was quoted (a quoted "1" or "null" is a string, a plain one not)
// and the scalar's value after unquoting and escapes, length-prefixed; a plain null in any
// spelling ("key:", "~", "null") is the null it builds. Marks (lines and
// columns), comments, indentation, line endings and the quote character are not in it.
// The fast reader computes it from its events; the catalog generator gets it from the same
// reader, so a package's copy and the shipped file are digested by this one function. It
// only finds a candidate: parse_yaml serves a known tree only once the events match it.
class MeaningDigest {
 public:
  void scalar(bool quoted, std::string_view value);
  void null();
  void open(bool map);
  void close(bool map);
  std::string hex() const;  // 16 hex digits

 private:
  QuickHash hash_;
};

}  // namespace tosca::internal
