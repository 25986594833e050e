// YAML -> located tree, on yaml-cpp's event API: no yaml-cpp node graph is built (it
// costs more than the parse), aliases become shared nodes and are never expanded, and
// the limits are checked while the events arrive, so an alias or nesting bomb stops
// early instead of exhausting memory.
#include "tosca/internal/document.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <unordered_map>

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include "tosca/internal/fast_yaml.h"

namespace tosca {

using internal::Document;
using internal::RawNode;

Node::Kind Node::kind() const {
  return doc_ ? doc_->nodes[index_].kind : Kind::kNone;
}

std::string_view Node::scalar() const {
  // "" rather than a default string_view: callers pass the data pointer on to memcpy-based
  // code (Boost.JSON keys), where a null pointer is undefined even for size 0.
  if (!doc_) {
    return std::string_view("", 0);
  }
  const RawNode& r = doc_->nodes[index_];
  if (r.kind != Kind::kScalar) {
    return std::string_view("", 0);
  }
  return std::string_view(doc_->text).substr(r.text_off, r.text_len);
}

bool Node::quoted() const {
  return doc_ && doc_->nodes[index_].quoted != 0;
}

size_t Node::size() const {
  if (!doc_) {
    return 0;
  }
  const RawNode& r = doc_->nodes[index_];
  if (r.kind == Kind::kMap) {
    return r.count / 2;
  }
  return r.kind == Kind::kSequence ? r.count : 0;
}

Node Node::item(size_t i) const {
  const RawNode& r = doc_->nodes[index_];
  BASE_CHECK(r.kind == Kind::kSequence && i < r.count);
  return Node(doc_, doc_->kids[r.first + i]);
}

Node Node::key(size_t i) const {
  const RawNode& r = doc_->nodes[index_];
  BASE_CHECK(r.kind == Kind::kMap && 2 * i < r.count);
  return Node(doc_, doc_->kids[r.first + 2 * i]);
}

Node Node::value(size_t i) const {
  const RawNode& r = doc_->nodes[index_];
  BASE_CHECK(r.kind == Kind::kMap && 2 * i + 1 < r.count);
  return Node(doc_, doc_->kids[r.first + 2 * i + 1]);
}

Node Node::get(std::string_view k) const {
  if (!is_map()) {
    return {};
  }
  const RawNode& r = doc_->nodes[index_];
  for (uint32_t i = 0; i + 1 < r.count; i += 2) {
    Node kn(doc_, doc_->kids[r.first + i]);
    if (kn.is_scalar() && kn.scalar() == k) {
      return Node(doc_, doc_->kids[r.first + i + 1]);
    }
  }
  return {};
}

base::SourceLocation Node::location() const {
  if (!doc_) {
    return {};
  }
  const RawNode& r = doc_->nodes[index_];
  return {doc_->display, r.line, r.column};
}

base::SourceLocation Node::location_at(uint32_t offset) const {
  base::SourceLocation loc = location();
  if (!doc_ || loc.line == 0)
    return loc;
  const RawNode& r = doc_->nodes[index_];
  std::string_view value = scalar();
  std::string_view src = doc_->source;
  if (r.kind != Kind::kScalar || offset > value.size() || src.empty())
    return loc;
  // The node's mark as a byte of the source.
  size_t j = 0;
  for (uint32_t line = 1; line < r.line; ++line) {
    j = src.find('\n', j);
    if (j == std::string_view::npos)
      return loc;
    ++j;
  }
  j += r.column - 1;
  if (j >= src.size())
    return loc;
  uint32_t line = r.line, column = r.column;
  auto advance = [&] {
    if (src[j] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
    ++j;
  };
  // A node's mark is at its anchor (&name) or tag (!tag, !<...>) when it has one: past them
  // and the blanks after them to the scalar itself.
  while (j < src.size() && (src[j] == '&' || src[j] == '!')) {
    while (j < src.size() && src[j] != ' ' && src[j] != '\t' && src[j] != '\n' && src[j] != '\r')
      advance();
    while (j < src.size() && (src[j] == ' ' || src[j] == '\t' || src[j] == '\n' || src[j] == '\r'))
      advance();
  }
  if (j >= src.size())
    return loc;
  char first = src[j];
  if (first == '|' || first == '>') {
    while (j < src.size() && src[j] != '\n')  // the header line: indicator, chomping, comment
      advance();
  } else if (first == '"' || first == '\'') {
    advance();
  }
  // Walk the value and the source together: equal bytes match; blanks and line breaks in
  // the source that the value does not have (indentation, folding, chomping) are passed
  // over, with the spaces or line breaks a fold made of them. Anything else (an escape)
  // and the text cannot be followed.
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  size_t i = 0;
  while (i < offset) {
    if (j >= src.size())
      return loc;
    if (value[i] == src[j]) {
      ++i;
      advance();
    } else if (blank(src[j])) {
      while (j < src.size() && blank(src[j]))
        advance();
      while (i < offset && (value[i] == ' ' || value[i] == '\n'))
        ++i;
    } else {
      return loc;
    }
  }
  // Past the blanks before the byte's own character, which must be the source's there.
  if (i < value.size() && !blank(value[i])) {
    while (j < src.size() && blank(src[j]))
      advance();
    if (j >= src.size() || src[j] != value[i])
      return loc;
  }
  return {doc_->display, line, column};
}

namespace {

bool needs_quotes(std::string_view s) {
  if (s.empty()) {
    return true;
  }
  for (char c : s) {
    if (std::strchr(":{}[],#&*!|>'\"%@`\n", c) != nullptr) {
      return true;
    }
  }
  return s.front() == ' ' || s.back() == ' ' || s.front() == '-' || s.front() == '?';
}

void flow(Node n, std::string& out, int depth) {
  if (depth > 32) {
    out += "...";
    return;
  }
  switch (n.kind()) {
    case Node::Kind::kNone:
    case Node::Kind::kNull:
      out += "null";
      return;
    case Node::Kind::kScalar: {
      std::string_view s = n.scalar();
      if (n.quoted() || needs_quotes(s)) {
        out += '"' + base::json_escape(s) + '"';
      } else {
        out += s;
      }
      return;
    }
    case Node::Kind::kSequence:
      out += '[';
      for (size_t i = 0; i < n.size(); ++i) {
        if (i)
          out += ", ";
        flow(n.item(i), out, depth + 1);
      }
      out += ']';
      return;
    case Node::Kind::kMap:
      out += '{';
      for (size_t i = 0; i < n.size(); ++i) {
        if (i)
          out += ", ";
        flow(n.key(i), out, depth + 1);
        out += ": ";
        flow(n.value(i), out, depth + 1);
      }
      out += '}';
      return;
  }
}

}  // namespace

std::string to_yaml_flow(Node n) {
  std::string out;
  flow(n, out, 0);
  return out;
}

namespace internal {

namespace {

struct StopParse {
  std::string code, message;
  uint32_t line = 0, column = 0;
};

// Builds the tree from yaml-cpp events.
class Builder : public YAML::EventHandler {
 public:
  Builder(Document& doc, const YamlLimits& limits, base::Diagnostics& diags)
      : doc_(doc), limits_(limits), diags_(diags) {}

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    add_leaf(mark, anchor, Node::Kind::kNull, {}, false);
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = anchors_.find(anchor);
    if (it == anchors_.end()) {
      throw StopParse{"T0001", "alias refers to an unknown anchor", line(mark), col(mark)};
    }
    attach(it->second, mark);
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    bool quoted = tag != "?";
    Node::Kind kind = Node::Kind::kScalar;
    if (!quoted && plain_null(value)) {
      kind = Node::Kind::kNull;
    }
    add_leaf(mark, anchor, kind, value, quoted);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(mark, anchor, Node::Kind::kSequence);
  }
  void OnSequenceEnd() override { close(); }

  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(mark, anchor, Node::Kind::kMap);
  }
  void OnMapEnd() override { close(); }

  bool done() const { return root_set_; }
  uint32_t root() const { return root_; }
  uint64_t expanded() const { return root_set_ ? weight_[root_] : 0; }

 private:
  struct Frame {
    uint32_t index;
    std::vector<uint32_t> children;
  };

  static uint32_t line(const YAML::Mark& m) { return static_cast<uint32_t>(m.line + 1); }
  static uint32_t col(const YAML::Mark& m) { return static_cast<uint32_t>(m.column + 1); }

  uint32_t new_node(const YAML::Mark& mark, Node::Kind kind, bool quoted) {
    RawNode r;
    r.kind = kind;
    r.quoted = quoted ? 1 : 0;
    r.line = line(mark);
    r.column = col(mark);
    doc_.nodes.push_back(r);
    weight_.push_back(1);
    return static_cast<uint32_t>(doc_.nodes.size() - 1);
  }

  void add_leaf(const YAML::Mark& mark, YAML::anchor_t anchor, Node::Kind kind,
                std::string_view text, bool quoted) {
    uint32_t idx = new_node(mark, kind, quoted);
    if (kind == Node::Kind::kScalar) {
      doc_.nodes[idx].text_off = static_cast<uint32_t>(doc_.text.size());
      doc_.nodes[idx].text_len = static_cast<uint32_t>(text.size());
      doc_.text.append(text);
    }
    if (anchor != 0) {
      anchors_[anchor] = idx;
    }
    attach(idx, mark);
  }

  void open(const YAML::Mark& mark, YAML::anchor_t anchor, Node::Kind kind) {
    if (stack_.size() >= limits_.max_depth) {
      throw StopParse{"T0003",
                      "YAML nesting deeper than " + std::to_string(limits_.max_depth) + " levels",
                      line(mark), col(mark)};
    }
    uint32_t idx = new_node(mark, kind, false);
    if (anchor != 0) {
      pending_anchor_.push_back({anchor, idx});
    }
    stack_.push_back(Frame{idx, {}});
  }

  void close() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    RawNode& r = doc_.nodes[f.index];
    r.first = static_cast<uint32_t>(doc_.kids.size());
    r.count = static_cast<uint32_t>(f.children.size());
    doc_.kids.insert(doc_.kids.end(), f.children.begin(), f.children.end());
    if (r.kind == Node::Kind::kMap) {
      check_duplicate_keys(f.index);
    }
    // An anchor on a collection becomes visible once the collection is complete (an
    // alias inside itself would be a cycle, which YAML forbids).
    for (auto it = pending_anchor_.begin(); it != pending_anchor_.end();) {
      if (it->second == f.index) {
        anchors_[it->first] = it->second;
        it = pending_anchor_.erase(it);
      } else {
        ++it;
      }
    }
    uint64_t w = weight_[f.index];
    if (stack_.empty()) {
      finish_root(f.index);
    } else {
      stack_.back().children.push_back(f.index);
      weight_[stack_.back().index] += w;
      check_weight(stack_.back().index, r.line, r.column);
    }
  }

  void attach(uint32_t idx, const YAML::Mark& mark) {
    if (stack_.empty()) {
      finish_root(idx);
      return;
    }
    stack_.back().children.push_back(idx);
    weight_[stack_.back().index] += weight_[idx];
    check_weight(stack_.back().index, line(mark), col(mark));
  }

  void check_weight(uint32_t parent, uint32_t l, uint32_t c) {
    // The weight of a node is its size with every alias expanded: what a consumer that
    // copies aliases would build. Bounding it stops "billion laughs" documents.
    total_ = std::max(total_, weight_[parent]);
    if (weight_[parent] + limits_.used_before > limits_.max_nodes) {
      throw StopParse{"T0004",
                      limits_.used_before == 0
                          ? "YAML document expands to more than " +
                                std::to_string(limits_.max_nodes) + " nodes (alias bomb?)"
                          : "the package's YAML files expand to more than " +
                                std::to_string(limits_.max_nodes) +
                                " nodes in all; this file stops at the limit (" +
                                std::to_string(limits_.used_before) + " in earlier files)",
                      l, c};
    }
  }

  void finish_root(uint32_t idx) {
    root_ = idx;
    root_set_ = true;
  }

  void check_duplicate_keys(uint32_t map_index) {
    const RawNode& r = doc_.nodes[map_index];
    std::vector<std::pair<std::string_view, uint32_t>> keys;
    keys.reserve(r.count / 2);
    for (uint32_t i = 0; i < r.count; i += 2) {
      const RawNode& k = doc_.nodes[doc_.kids[r.first + i]];
      if (k.kind == Node::Kind::kScalar) {
        keys.emplace_back(std::string_view(doc_.text).substr(k.text_off, k.text_len),
                          doc_.kids[r.first + i]);
      }
    }
    if (keys.size() < 2) {
      return;
    }
    std::stable_sort(keys.begin(), keys.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 1; i < keys.size(); ++i) {
      if (keys[i].first == keys[i - 1].first) {
        const RawNode& k = doc_.nodes[keys[i].second];
        const RawNode& first = doc_.nodes[keys[i - 1].second];
        base::Diagnostic d{base::Severity::kError,
                           "T0005",
                           doc_.at(k.line, k.column),
                           "duplicate key \"" + std::string(keys[i].first) + "\"",
                           {}};
        d.notes.push_back("first defined at line " + std::to_string(first.line));
        diags_.add(std::move(d));
      }
    }
  }

  Document& doc_;
  const YamlLimits& limits_;
  base::Diagnostics& diags_;
  std::vector<Frame> stack_;
  std::vector<uint64_t> weight_;
  std::unordered_map<YAML::anchor_t, uint32_t> anchors_;
  std::vector<std::pair<YAML::anchor_t, uint32_t>> pending_anchor_;
  uint64_t total_ = 0;
  uint32_t root_ = 0;
  bool root_set_ = false;
};

}  // namespace

namespace {

// Gives a known tree the marks of the text just read: the builder makes one node per
// scalar, null and collection start, in event order, so the n-th such event is node n.
// The digest that found the tree only made it a candidate: each event must be the node it
// would build (kind, quoting, value) and each collection must end after as many children as
// the node has, or the tree is not this text's (ok() is false).
class Relocate : public YAML::EventHandler {
 public:
  explicit Relocate(Document& doc) : doc_(doc) {}
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& m, YAML::anchor_t) override { node(m, Node::Kind::kNull, 0); }
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override { ok_ = false; }
  void OnScalar(const YAML::Mark& m, const std::string& tag, YAML::anchor_t,
                const std::string& value) override {
    bool quoted = tag != "?";
    if (!quoted && plain_null(value)) {
      node(m, Node::Kind::kNull, 0);
      return;
    }
    const RawNode* r = node(m, Node::Kind::kScalar, quoted ? 1 : 0);
    if (r != nullptr && std::string_view(doc_.text).substr(r->text_off, r->text_len) != value)
      ok_ = false;
  }
  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    open(m, Node::Kind::kSequence);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    open(m, Node::Kind::kMap);
  }
  void OnMapEnd() override { close(); }
  bool ok() const { return ok_ && open_.empty() && next_ == doc_.nodes.size(); }

 private:
  struct Open {
    uint32_t index;
    uint32_t children;
  };
  // The next node, given this text's mark, if it is of that kind and quoting; else nullptr.
  const RawNode* node(const YAML::Mark& m, Node::Kind kind, uint8_t quoted) {
    if (!ok_ || next_ >= doc_.nodes.size() || doc_.nodes[next_].kind != kind ||
        doc_.nodes[next_].quoted != quoted) {
      ok_ = false;
      return nullptr;
    }
    if (!open_.empty())
      ++open_.back().children;
    RawNode& r = doc_.nodes[next_++];
    r.line = static_cast<uint32_t>(m.line + 1);
    r.column = static_cast<uint32_t>(m.column + 1);
    return &r;
  }
  void open(const YAML::Mark& m, Node::Kind kind) {
    if (node(m, kind, 0) != nullptr)
      open_.push_back({static_cast<uint32_t>(next_ - 1), 0});
  }
  void close() {
    if (!ok_ || open_.empty() || doc_.nodes[open_.back().index].count != open_.back().children) {
      ok_ = false;
      return;
    }
    open_.pop_back();
  }
  Document& doc_;
  std::vector<Open> open_;
  size_t next_ = 0;
  bool ok_ = true;
};

}  // namespace

std::unique_ptr<Document> parse_yaml(std::string_view text, std::string display,
                                     const YamlLimits& limits, base::Diagnostics& diags,
                                     bool use_fast_path, KnownTree known) {
  auto doc = std::make_unique<Document>();
  doc->display = std::move(display);
  // A UTF-8 byte order mark is allowed and ignored. YAML 1.2.2 rule [211] lets a stream open
  // with any number of document prefixes, each with its own mark, so all go.
  while (text.size() >= 3 && std::memcmp(text.data(), "\xEF\xBB\xBF", 3) == 0)
    text.remove_prefix(3);
  if (!base::is_valid_utf8(text)) {
    diags.error("C0020", doc->start(), "file is not valid UTF-8 text");
    return nullptr;
  }
  if (text.find('\0') != std::string_view::npos) {
    diags.error("C0020", doc->start(), "file contains NUL bytes; not a text file");
    return nullptr;
  }
  doc->source = std::string(text);
  FastYaml fast;
  bool fast_read = use_fast_path && fast.read(text);
  if (fast_read && known != nullptr) {
    // Same meaning, same events but for their marks, so the same tree once the marks are
    // this text's. Known trees are clean: no diagnostics to merge.
    // The events are kept: if they turn out not to be the tree's (digests that collide),
    // the text is built as any other.
    if (auto tree = known(fast.meaning())) {
      Relocate relocate(*tree);
      fast.replay(relocate, true);
      if (relocate.ok()) {
        tree->display = std::move(doc->display);
        return tree;
      }
    }
  }
  // Room for the tree built here (not for a known one: for a large file these are large
  // allocations the known tree never touches).
  doc->nodes.reserve(text.size() / 16 + 16);
  doc->text.reserve(text.size() / 2);
  base::Diagnostics local;
  Builder builder(*doc, limits, local);
  try {
    if (fast_read) {
      fast.replay(builder);
      diags.merge(local);
      doc->has_root = builder.done();
      doc->root_index = builder.root();
      doc->expanded_nodes = builder.expanded();
      return doc;
    }
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    parser.HandleNextDocument(builder);
    if (builder.done()) {
      // A second document in a TOSCA file is almost always a mistake (a stray "---").
      struct Counter : YAML::EventHandler {
        void OnDocumentStart(const YAML::Mark&) override {}
        void OnDocumentEnd() override {}
        void OnNull(const YAML::Mark&, YAML::anchor_t) override { any = true; }
        void OnAlias(const YAML::Mark&, YAML::anchor_t) override { any = true; }
        void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                      const std::string&) override {
          any = true;
        }
        void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                             YAML::EmitterStyle::value) override {
          any = true;
        }
        void OnSequenceEnd() override {}
        void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                        YAML::EmitterStyle::value) override {
          any = true;
        }
        void OnMapEnd() override {}
        bool any = false;
      } counter;
      if (parser.HandleNextDocument(counter) && counter.any) {
        local.error("T0001", doc->start(), "more than one YAML document in a TOSCA file");
      }
    }
  } catch (const StopParse& stop) {
    diags.merge(local);
    diags.error(stop.code, doc->at(stop.line, stop.column), stop.message);
    return nullptr;
  } catch (const YAML::DeepRecursion& e) {
    diags.merge(local);
    diags.error("T0003", doc->at(e.mark.line + 1, e.mark.column + 1), "YAML nesting too deep");
    return nullptr;
  } catch (const YAML::Exception& e) {
    diags.merge(local);
    std::string msg = e.msg.empty() ? "invalid YAML" : e.msg;
    if (!msg.empty()) {
      msg[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(msg[0])));
    }
    diags.error("T0001", doc->at(e.mark.line + 1, e.mark.column + 1), "YAML syntax: " + msg);
    return nullptr;
  }
  diags.merge(local);
  doc->has_root = builder.done();
  doc->root_index = builder.root();
  doc->expanded_nodes = builder.expanded();
  return doc;
}

// Binary layout (little-endian host order; produced and consumed by the same build):
//   "VNFY1\0" magic, u32 node count, u32 kid count, u32 text length, u32 root,
//   u8 has_root, nodes[], kids[], text bytes.
std::string Document::serialize() const {
  std::string out("VNFY1", 6);
  auto put32 = [&](uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); };
  put32(static_cast<uint32_t>(nodes.size()));
  put32(static_cast<uint32_t>(kids.size()));
  put32(static_cast<uint32_t>(text.size()));
  put32(root_index);
  out.push_back(has_root ? 1 : 0);
  out.append(reinterpret_cast<const char*>(nodes.data()), nodes.size() * sizeof(RawNode));
  out.append(reinterpret_cast<const char*>(kids.data()), kids.size() * sizeof(uint32_t));
  out.append(text);
  return out;
}

std::unique_ptr<Document> Document::deserialize(std::string_view blob) {
  if (blob.size() < 23 || std::memcmp(blob.data(), "VNFY1", 6) != 0) {
    return nullptr;
  }
  uint32_t n, k, t, root;
  std::memcpy(&n, blob.data() + 6, 4);
  std::memcpy(&k, blob.data() + 10, 4);
  std::memcpy(&t, blob.data() + 14, 4);
  std::memcpy(&root, blob.data() + 18, 4);
  size_t need = 23 + size_t{n} * sizeof(RawNode) + size_t{k} * 4 + t;
  if (blob.size() != need) {
    return nullptr;
  }
  auto doc = std::make_unique<Document>();
  doc->has_root = blob[22] != 0;
  doc->root_index = root;
  const char* p = blob.data() + 23;
  // memcpy only with something to copy: an empty vector's data() may be null, which
  // memcpy must not be given even for 0 bytes (UBSan, the fuzzer's empty input).
  doc->nodes.resize(n);
  if (n > 0)
    std::memcpy(doc->nodes.data(), p, size_t{n} * sizeof(RawNode));
  p += size_t{n} * sizeof(RawNode);
  doc->kids.resize(k);
  if (k > 0)
    std::memcpy(doc->kids.data(), p, size_t{k} * 4);
  p += size_t{k} * 4;
  doc->text.assign(p, t);
  return doc;
}

}  // namespace internal
}  // namespace tosca
