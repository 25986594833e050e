// A fast reader for the plain subset of YAML that VNFDs are written in: block maps and
// sequences, plain and quoted one-line scalars, one-line flow collections, comments.
// It emits the same events, with the same marks, as yaml-cpp's parser, into the same
// tree builder; on anything outside the subset (anchors, tags, block or multi-line
// scalars, multi-line flow, directives, tabs, ...) it gives up before emitting anything
// and the caller parses the file with yaml-cpp. tests/unit/tosca/fast_yaml_test.cpp and
// the fuzz target check that both readers agree on every file the fast one accepts.
#include "tosca/internal/fast_yaml.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>
#include <vector>

#include <yaml-cpp/emitterstyle.h>
#include <yaml-cpp/mark.h>

namespace tosca::internal {

namespace {

struct Bail {
  const char* why;
};

// A scalar's value is a slice of the text read, or, when reading changed it (escapes,
// folded lines, block scalars), of the reader's arena: no string per event.
struct Event {
  enum Kind : uint8_t { kScalar, kNull, kSeqStart, kSeqEnd, kMapStart, kMapEnd } kind;
  bool quoted;
  bool in_arena;
  uint32_t line, col;  // 0-based, as YAML::Mark
  uint32_t off, len;   // the value in the text or the arena
};

// The events in order, in chunks of 64 KiB: appending never copies the ones before, and
// the replay frees each chunk once past it, so the events and the tree they build never
// both exist in full.
class EventList {
 public:
  void push_back(const Event& e) {
    if (size_ % kChunk == 0)
      chunks_.push_back(std::make_unique_for_overwrite<Event[]>(kChunk));
    chunks_.back()[size_ % kChunk] = e;
    ++size_;
  }
  size_t size() const { return size_; }
  Event& operator[](size_t i) { return chunks_[i / kChunk][i % kChunk]; }
  Event& back() { return (*this)[size_ - 1]; }
  void clear() {
    chunks_.clear();
    size_ = 0;
  }
  // Calls f(event) for each in order; `consume` frees the events as it goes.
  template <typename F>
  void each(F&& f, bool consume) {
    for (size_t c = 0; c < chunks_.size(); ++c) {
      size_t n = std::min(kChunk, size_ - c * kChunk);
      for (size_t i = 0; i < n; ++i)
        f(chunks_[c][i]);
      if (consume)
        chunks_[c].reset();
    }
    if (consume)
      clear();
  }

 private:
  static constexpr size_t kChunk = 2048;
  std::vector<std::unique_ptr<Event[]>> chunks_;
  size_t size_ = 0;
};

// A set of bytes looked up in a table, for the indicator checks on every scalar. NUL is in
// every set, as it is for std::strchr(set, c), which these replace.
struct ByteSet {
  bool in[256] = {};
  constexpr explicit ByteSet(std::string_view s) {
    in[0] = true;
    for (char c : s)
      in[static_cast<unsigned char>(c)] = true;
  }
  bool operator()(char c) const { return in[static_cast<unsigned char>(c)]; }
};

constexpr ByteSet kKeyStartIndicators("[]{},#&*!|>%@`?");
constexpr ByteSet kPlainStartIndicators("]},#&*!|>%@`?");
constexpr ByteSet kNotPlainValue("\"'[{|>");
constexpr ByteSet kContinuationIndicators("-?:,[]{}#&*!|>'\"%@`");
constexpr ByteSet kFlowIndicators(",]}#&*!|>%@`?:-");

// How many bytes of `s` are `c`: in runs of 255 with a byte counter, which the compiler
// turns into byte-wide vector compares (std::count widens every byte to 64 bits).
size_t count_byte(std::string_view s, char c) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    size_t end = std::min(s.size(), i + 255);
    uint8_t run = 0;
    for (; i < end; ++i)
      run = static_cast<uint8_t>(run + (s[i] == c));
    n += run;
  }
  return n;
}

struct Line {
  uint32_t no;            // 0-based line number
  uint32_t indent;        // leading spaces
  std::string_view text;  // the whole line, without the newline
};

class Reader {
 public:
  Reader(std::string_view text, std::string& arena) : text_(text), arena_(arena) { split(text); }

  // nullptr when the whole text is inside the subset (its events are in `out`, their
  // changed values in the arena), else why not.
  const char* run(EventList& out) {
    out_ = &out;
    if (bad_ != nullptr)
      return bad_;
    // The offsets are 32 bits; texts this large are yaml-cpp's (and the loader's limits').
    if (text_.size() >= (uint32_t{1} << 31))
      return "a text over 2 GiB";
    try {
      if (lines_.empty()) {
        return "no content";  // an empty document: let yaml-cpp say what it is
      }
      cur_ = 0;
      parse_block(lines_[0].indent);
      if (cur_ != lines_.size())
        throw Bail{"trailing content"};
      return nullptr;
    } catch (const Bail& b) {
      out.clear();
      arena_.clear();
      return b.why;
    }
  }

 private:
  void split(std::string_view text) {
    eof_line_ = static_cast<uint32_t>(count_byte(text, '\n'));
    raw_.reserve(eof_line_ + 1);
    lines_.reserve(eof_line_ + 1);
    // Every CR must end a line (CRLF); counted once over the text rather than looked for
    // in each line.
    size_t crs = static_cast<size_t>(count_byte(text, '\r'));
    size_t line_end_crs = 0;
    uint32_t no = 0;
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string_view::npos)
        end = text.size();
      std::string_view l = text.substr(start, end - start);
      if (!l.empty() && l.back() == '\r') {
        if (end == text.size()) {
          bad_ = "a lone CR at the end";  // yaml-cpp keeps it in the scalar
        }
        l.remove_suffix(1);
        ++line_end_crs;
      }
      raw_.push_back(l);
      uint32_t ind = 0;
      while (ind < l.size() && l[ind] == ' ')
        ++ind;
      bool blank = ind == l.size() || l[ind] == '#';
      if (ind < l.size() && l[ind] == '\t')
        bad_ = "a tab in the indent";
      if (!blank) {
        // Directives, document markers and tabs are outside the subset.
        if (l.rfind("---", 0) == 0 || l.rfind("...", 0) == 0 || l[0] == '%')
          bad_ = "a document marker or directive";
        lines_.push_back({no, ind, l});
      } else if (ind < l.size() && l[ind] == '\t') {
        bad_ = "a tab in the indent";
      }
      ++no;
      start = end + 1;
    }
    ends_with_newline_ = !text.empty() && text.back() == '\n';
    // The last line, when no newline ends it, made of blanks only.
    size_t last_nl = text.rfind('\n');
    std::string_view tail = text.substr(last_nl == std::string_view::npos ? 0 : last_nl + 1);
    ends_in_blanks_ = !tail.empty() && tail.find_first_not_of(" \t") == std::string_view::npos;
    if (crs != line_end_crs)
      bad_ = "a CR that ends no line";
    if (bad_ != nullptr)
      lines_.clear();
  }

  // Position of the next token after the current line, where yaml-cpp marks an empty
  // value: the next content line's first character, or the end of the text.
  void next_token_mark(uint32_t& line, uint32_t& col) const {
    if (cur_ < lines_.size()) {
      line = lines_[cur_].no;
      col = lines_[cur_].indent;
    } else {
      // At the end of the text yaml-cpp marks column 0 of the line the text ends on: the
      // line after the last newline, empty or a comment. Unless that line is blanks with no
      // newline after them: then the column depends on the indents yaml-cpp unwinds there
      // (or a tab is its error), and the fast reader steps aside.
      if (ends_in_blanks_)
        throw Bail{"blanks after the last newline"};
      line = eof_line_;
      col = 0;
    }
  }

  void emit(Event::Kind k, uint32_t line, uint32_t col) {
    out_->push_back(Event{k, false, false, line, col, 0, 0});
  }

  // A scalar whose value is `s`, a slice of the text.
  void emit_slice(std::string_view s, uint32_t line, uint32_t col, bool quoted) {
    out_->push_back(Event{Event::kScalar, quoted, false, line, col,
                          static_cast<uint32_t>(s.data() - text_.data()),
                          static_cast<uint32_t>(s.size())});
  }

  // A scalar whose value is the arena's bytes from `off` to its end.
  void emit_arena(size_t off, uint32_t line, uint32_t col, bool quoted) {
    out_->push_back(Event{Event::kScalar, quoted, true, line, col, static_cast<uint32_t>(off),
                          static_cast<uint32_t>(arena_.size() - off)});
  }

  static bool is_space(char c) { return c == ' '; }

  // Where a comment starts in `s` from `pos` (a '#' at the start or after a space), or
  // npos. Quotes are handled by the callers, which only call this on plain text.
  static size_t comment_at(std::string_view s, size_t pos) {
    for (size_t i = pos; i < s.size(); ++i) {
      if (s[i] == '#' && (i == 0 || s[i - 1] == ' '))
        return i;
    }
    return std::string_view::npos;
  }

  static bool rest_blank(std::string_view s, size_t pos) {
    while (pos < s.size() && s[pos] == ' ')
      ++pos;
    return pos == s.size() || s[pos] == '#';
  }

  // Block node starting at the current line's column `col`.
  void parse_block(uint32_t col) { parse_block_at(cur_, col); }

  void parse_block_at(size_t line_index, uint32_t col) {
    // Deep nesting is yaml-cpp's (and the builder's limit's) business, not a recursion here.
    if (++depth_ > 128)
      throw Bail{"nesting"};
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    const Line& l = lines_[line_index];
    std::string_view t = l.text;
    if (col >= t.size())
      throw Bail{"empty node"};
    char c = t[col];
    if (c == '-' && (col + 1 == t.size() || t[col + 1] == ' ')) {
      parse_seq(col);
      return;
    }
    if (find_key_colon(t, col) != std::string_view::npos) {
      parse_map(col);
      return;
    }
    // A lone scalar or flow collection as the whole node.
    size_t end = parse_inline(t, col, l.no);
    if (!rest_blank(lines_[cur_].text, end))
      throw Bail{"block scalar junk"};
    ++cur_;
  }

  // For "key: ..." at `col`, the index of the ':' ending the key; npos if the line is not
  // a key line.
  static size_t find_key_colon(std::string_view t, size_t col) {
    if (col >= t.size())
      return std::string_view::npos;
    char c = t[col];
    if (c == '"' || c == '\'') {
      size_t q = col + 1;
      while (q < t.size()) {
        if (t[q] == c) {
          if (c == '\'' && q + 1 < t.size() && t[q + 1] == '\'') {
            q += 2;
            continue;
          }
          if (c == '"' && t[q - 1] == '\\') {
            ++q;
            continue;
          }
          break;
        }
        ++q;
      }
      if (q >= t.size())
        return std::string_view::npos;
      size_t k = q + 1;
      while (k < t.size() && t[k] == ' ')
        ++k;
      if (k < t.size() && t[k] == ':' && (k + 1 == t.size() || t[k + 1] == ' '))
        return k;
      return std::string_view::npos;
    }
    if (kKeyStartIndicators(c))
      return std::string_view::npos;
    for (size_t i = col; i < t.size(); ++i) {
      if (t[i] == '#' && i > col && t[i - 1] == ' ')
        return std::string_view::npos;
      if (t[i] == ':' && (i + 1 == t.size() || t[i + 1] == ' '))
        return i;
    }
    return std::string_view::npos;
  }

  void parse_map(uint32_t col) {
    // The first key may sit after "- " on a sequence line, so the first line is read at
    // `col` whatever its indent; the following keys must start at column `col`.
    const Line& first = lines_[cur_];
    emit(Event::kMapStart, first.no, col);
    bool first_key = true;
    while (cur_ < lines_.size()) {
      const Line& l = lines_[cur_];
      if (!first_key) {
        if (l.indent < col)
          break;
        if (l.indent > col)
          throw Bail{"map indent"};
        if (l.text[col] == '-' && (col + 1 == l.text.size() || l.text[col + 1] == ' '))
          break;
      }
      first_key = false;
      std::string_view t = l.text;
      size_t colon = find_key_colon(t, col);
      if (colon == std::string_view::npos)
        throw Bail{"not a key line"};
      // key
      if (t[col] == '"' || t[col] == '\'') {
        size_t end = parse_quoted(t, col, l.no);
        size_t k = end;
        while (k < colon && t[k] == ' ')
          ++k;
        if (k != colon)
          throw Bail{"junk after quoted key"};
      } else {
        std::string_view key = t.substr(col, colon - col);
        while (!key.empty() && key.back() == ' ')
          key.remove_suffix(1);
        if (key.empty())
          throw Bail{"empty key"};
        emit_plain(key, l.no, col, false);
      }
      size_t v = colon + 1;
      while (v < t.size() && t[v] == ' ')
        ++v;
      if (v == t.size() || t[v] == '#') {
        ++cur_;
        if (cur_ < lines_.size() && lines_[cur_].indent > col) {
          parse_block(lines_[cur_].indent);
        } else if (cur_ < lines_.size() && lines_[cur_].indent == col &&
                   lines_[cur_].text[col] == '-' &&
                   (col + 1 == lines_[cur_].text.size() || lines_[cur_].text[col + 1] == ' ')) {
          parse_seq(col);  // "key:\n- item": a sequence at the key's own indent
        } else {
          uint32_t nl, nc;
          next_token_mark(nl, nc);
          emit(Event::kNull, nl, nc);
        }
        continue;
      }
      size_t end = parse_inline(t, v, l.no, static_cast<int>(col));
      if (!rest_blank(lines_[cur_].text, end))
        throw Bail{"junk after value"};
      ++cur_;
      if (cur_ < lines_.size() && lines_[cur_].indent > col)
        continue_plain(t, v, col);
    }
    emit(Event::kMapEnd, 0, 0);
  }

  void parse_seq(uint32_t col) {
    const Line& first = lines_[cur_];
    emit(Event::kSeqStart, first.no, col);
    bool first_item = true;
    while (cur_ < lines_.size()) {
      const Line& l = lines_[cur_];
      if (!first_item) {
        if (l.indent < col)
          break;
        if (l.indent > col)
          throw Bail{"seq indent"};
      }
      std::string_view t = l.text;
      if (!(t[col] == '-' && (col + 1 == t.size() || t[col + 1] == ' '))) {
        if (first_item)
          throw Bail{"not a seq item"};
        break;
      }
      first_item = false;
      size_t v = col + 1;
      while (v < t.size() && t[v] == ' ')
        ++v;
      if (v == t.size() || t[v] == '#') {
        ++cur_;
        if (cur_ < lines_.size() && lines_[cur_].indent > col) {
          parse_block(lines_[cur_].indent);
        } else {
          uint32_t nl, nc;
          next_token_mark(nl, nc);
          emit(Event::kNull, nl, nc);
        }
        continue;
      }
      if (t[v] == '-' && (v + 1 == t.size() || t[v + 1] == ' ')) {
        parse_seq_inline(static_cast<uint32_t>(v));
        continue;
      }
      if (find_key_colon(t, v) != std::string_view::npos) {
        parse_map(static_cast<uint32_t>(v));
        continue;
      }
      size_t end = parse_inline(t, v, l.no, static_cast<int>(col));
      if (!rest_blank(lines_[cur_].text, end))
        throw Bail{"junk after item"};
      ++cur_;
      if (cur_ < lines_.size() && lines_[cur_].indent > col)
        continue_plain(t, v, col);
    }
    emit(Event::kSeqEnd, 0, 0);
  }

  // "- - x": a sequence starting inside a sequence line at column `col`.
  void parse_seq_inline(uint32_t col) { parse_seq(col); }

  // A scalar or flow collection starting at t[pos] on the current line; returns the index
  // after it on the line it ends on, which is the current line then (a flow collection may
  // go on over several).
  size_t parse_inline(std::string_view t, size_t pos, uint32_t line, int parent = -2) {
    char c = t[pos];
    if ((c == '|' || c == '>') && parent >= -1)
      return parse_block_scalar(t, pos, line, parent);
    if (c == '[' || c == '{') {
      fl_ = cur_;
      size_t end = parse_flow(pos, 0);
      cur_ = fl_;
      return end;
    }
    if (c == '"' || c == '\'')
      return parse_quoted(t, pos, line);
    if (kPlainStartIndicators(c))
      throw Bail{"indicator starts plain"};
    if (c == '-' && (pos + 1 == t.size() || t[pos + 1] == ' '))
      throw Bail{"dash starts plain"};
    if (c == ':' && (pos + 1 == t.size() || t[pos + 1] == ' '))
      throw Bail{"colon starts plain"};
    // One pass to the comment or the end of the line: the scalar ends there, and every byte
    // before it must be one a block plain scalar may hold (safe_plain). "a: b: c" and
    // similar are errors yaml-cpp reports; leave them to it.
    size_t end = pos;
    for (; end < t.size(); ++end) {
      char d = t[end];
      if (d == '#' && t[end - 1] == ' ')  // end > pos: a plain scalar never starts with '#'
        break;
      if (d == ':' && (end + 1 == t.size() || t[end + 1] == ' '))
        throw Bail{"colon in plain value"};
      if (!plain_byte(d, false))
        throw Bail{"plain character"};
    }
    std::string_view s = t.substr(pos, end - pos);
    while (!s.empty() && s.back() == ' ')
      s.remove_suffix(1);
    emit_slice(s, line, static_cast<uint32_t>(pos), false);
    return pos + s.size();
  }

  // The lines after a plain scalar that began at t[v] (the value of a map entry or
  // sequence item at column `col`), indented more than `col`: the scalar goes on there
  // (YAML 1.2, 7.3.3), each line break folded into a space. The continuation lines'
  // text joins the scalar just emitted. Empty or comment lines among them, a comment
  // after the first line, a line that starts with an indicator or holds ": " or " #",
  // and values that are not plain scalars are left to yaml-cpp.
  void continue_plain(std::string_view t, size_t v, uint32_t col) {
    if (kNotPlainValue(t[v]) || comment_at(t, v) != std::string_view::npos)
      throw Bail{"multi-line value"};
    Event& e = out_->back();
    BASE_CHECK(e.kind == Event::kScalar && !e.quoted);
    // The joined value is new text: the scalar moves to the arena's end, where it grows.
    if (!e.in_arena) {
      size_t off = arena_.size();
      arena_.append(text_.substr(e.off, e.len));
      e.in_arena = true;
      e.off = static_cast<uint32_t>(off);
    }
    BASE_CHECK(size_t{e.off} + e.len == arena_.size());
    uint32_t prev = lines_[cur_ - 1].no;
    while (cur_ < lines_.size() && lines_[cur_].indent > col) {
      const Line& c = lines_[cur_];
      if (c.no != prev + 1)
        throw Bail{"multi-line plain with empty or comment lines"};
      std::string_view s = c.text.substr(c.indent);
      while (!s.empty() && s.back() == ' ')
        s.remove_suffix(1);
      if (kContinuationIndicators(s[0]))
        throw Bail{"multi-line plain indicator"};
      if (comment_at(s, 0) != std::string_view::npos || s.back() == ':' ||
          s.find(": ") != std::string_view::npos)
        throw Bail{"multi-line plain key or comment"};
      if (!safe_plain(s, false))
        throw Bail{"plain character"};
      arena_ += ' ';
      arena_.append(s);
      e.len = static_cast<uint32_t>(arena_.size() - e.off);
      prev = c.no;
      ++cur_;
    }
  }

  // A literal (|) or folded (>) block scalar whose header is at t[pos], the value of a map
  // entry or sequence item at column `parent` (YAML 1.2, 8.1). Its content lines are raw
  // lines, comment-like and blank ones included. Returns the index after the last content
  // line and leaves cur_ on that content line, so the caller's "rest of the line is blank,
  // next line" moves past the scalar. Explicit indentation indicators, tabs, white lines
  // with more spaces than the content's indent, more-indented folded lines and a scalar
  // that ends the text without a newline are left to yaml-cpp.
  size_t parse_block_scalar(std::string_view t, size_t pos, uint32_t line, int parent) {
    char style = t[pos];
    char chomp = 0;
    size_t i = pos + 1;
    if (i < t.size() && (t[i] == '-' || t[i] == '+'))
      chomp = t[i++];
    if (i < t.size() && t[i] != ' ')
      throw Bail{"block scalar header"};
    if (!rest_blank(t, i))
      throw Bail{"block scalar header"};
    // The content's indent: the first non-white line's.
    size_t first = line + 1, r = first;
    size_t indent = 0, lead_spaces = 0;
    for (; r < raw_.size(); ++r) {
      std::string_view l = raw_[r];
      size_t sp = l.find_first_not_of(' ');
      if (sp != std::string_view::npos) {
        indent = sp;
        break;
      }
      lead_spaces = std::max(lead_spaces, l.size());
    }
    if (r == raw_.size() || static_cast<int>(indent) <= parent)
      throw Bail{"empty block scalar"};
    if (lead_spaces > indent)
      throw Bail{"block scalar white line"};
    // The lines, until one less indented than the content.
    std::vector<std::string_view> body;  // "" for an empty line
    size_t end = first;
    for (r = first; r < raw_.size(); ++r) {
      std::string_view l = raw_[r];
      size_t sp = l.find_first_not_of(' ');
      if (sp == std::string_view::npos) {
        if (l.size() > indent)
          throw Bail{"block scalar white line"};
        body.emplace_back();
        continue;
      }
      if (sp < indent)
        break;
      std::string_view content = l.substr(indent);
      if (content.find('\t') != std::string_view::npos)
        throw Bail{"tab in block scalar"};
      if (style == '>' && content[0] == ' ')
        throw Bail{"folded more-indented line"};
      body.push_back(content);
      end = r + 1;
    }
    if (r == raw_.size() && !ends_with_newline_)
      throw Bail{"no final newline"};
    // Trailing empty lines are chomping's; the rest is the text.
    size_t trailing = 0;
    while (!body.empty() && body.back().empty()) {
      body.pop_back();
      ++trailing;
    }
    size_t off = arena_.size();
    std::string& value = arena_;
    size_t empties = 0;
    bool any = false;
    for (std::string_view l : body) {
      if (l.empty()) {
        ++empties;
        continue;
      }
      if (any) {
        // A line break: kept in literal style; folded, it is a space between two lines,
        // or only the empty lines' breaks when there are some.
        if (style == '|' || empties == 0)
          value += style == '|' ? '\n' : ' ';
      }
      value.append(empties, '\n');
      empties = 0;
      value.append(l);
      any = true;
    }
    if (chomp != '-')
      value += '\n';
    if (chomp == '+')
      value.append(trailing, '\n');
    emit_arena(off, line, static_cast<uint32_t>(pos), true);
    // The last content line the scalar took (or its header line).
    while (cur_ + 1 < lines_.size() && lines_[cur_ + 1].no < end)
      ++cur_;
    return lines_[cur_].no == line ? t.size() : lines_[cur_].text.size();
  }

  // Plain scalars may hold only characters whose meaning yaml-cpp and the YAML spec agree
  // on. Inside a flow collection that is letters, digits and a few punctuation marks:
  // anything else (indicators such as '?', '*', '&', '!', '|', quotes, brackets, '#',
  // control characters) goes to yaml-cpp. In block context, where the callers have already
  // ended the scalar at ": " and " #" and refused an indicator as its first character,
  // YAML 1.2 (rule [130], ns-plain-char) lets every other printable character in, quotes
  // and brackets included ("the value \"ipv6\"", "[0-9]+|x"); tabs, DEL and the other
  // control characters still go to yaml-cpp.
  // One table, built at compile time: bit 1 set for the bytes a flow plain scalar may
  // hold, bit 2 for a block one's (every scalar byte goes through here).
  struct PlainBytes {
    uint8_t bits[256] = {};
    constexpr PlainBytes() {
      for (int c = 0; c < 256; ++c) {
        bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        bool punct = false;
        for (const char* p = " _-./:+=()~,;@$<>^"; *p != 0; ++p)
          punct = punct || c == static_cast<unsigned char>(*p);
        if (c >= 0x80 || alnum || punct)
          bits[c] |= 1;
        if (c >= 0x80 || (c >= 0x20 && c < 0x7f))
          bits[c] |= 2;
      }
    }
  };

  static bool plain_byte(char ch, bool flow) {
    static constexpr PlainBytes kTable;
    return (kTable.bits[static_cast<unsigned char>(ch)] & (flow ? 1 : 2)) != 0;
  }

  static bool safe_plain(std::string_view s, bool flow) {
    for (char ch : s) {
      if (!plain_byte(ch, flow))
        return false;
    }
    return true;
  }

  void emit_plain(std::string_view s, uint32_t line, uint32_t col, bool flow) {
    if (!safe_plain(s, flow))
      throw Bail{"plain character"};
    emit_slice(s, line, col, false);
  }

  size_t parse_quoted(std::string_view t, size_t pos, uint32_t line) {
    char q = t[pos];
    // The value is the text between the quotes until an escape or a doubled quote changes
    // it; from there on it is built in the arena, a run of unchanged bytes at a time.
    size_t i = pos + 1;
    size_t run = i;  // start of the bytes not yet copied
    size_t off = arena_.size();
    bool built = false;  // the value is in the arena
    auto flush = [&](size_t to) {
      arena_.append(t.substr(run, to - run));
      built = true;
    };
    for (;;) {
      if (i >= t.size())
        throw Bail{"multi-line quoted"};  // continues on the next line
      char c = t[i];
      if (c == q) {
        if (q == '\'' && i + 1 < t.size() && t[i + 1] == '\'') {
          flush(i + 1);  // one quote of the two
          i += 2;
          run = i;
          continue;
        }
        break;
      }
      if (q == '"' && c == '\\') {
        if (i + 1 >= t.size())
          throw Bail{"escape at end"};
        char e = t[i + 1];
        char out;
        switch (e) {
          case '"':
          case '\\':
          case '/':
            out = e;
            break;
          case 'n':
            out = '\n';
            break;
          case 't':
            out = '\t';
            break;
          case 'r':
            out = '\r';
            break;
          default:
            throw Bail{"rare escape"};  // rarer escapes: yaml-cpp decides
        }
        flush(i);
        arena_ += out;
        i += 2;
        run = i;
        continue;
      }
      if (static_cast<unsigned char>(c) < 0x20)
        throw Bail{"control character"};
      ++i;
    }
    if (built) {
      flush(i);
      emit_arena(off, line, static_cast<uint32_t>(pos), true);
    } else {
      emit_slice(t.substr(pos + 1, i - pos - 1), line, static_cast<uint32_t>(pos), true);
    }
    return i + 1;
  }

  // Flow collection starting at column `pos` of content line fl_ ('[' or '{'); returns the
  // index after it on the line it ends on, which fl_ is then. Line breaks and comments
  // between its items are white space (YAML 1.2, 7.4); a scalar that itself goes on over a
  // line break (a multi-line plain or quoted scalar) is left to yaml-cpp.
  size_t parse_flow(size_t pos, int depth) {
    if (depth > 32)
      throw Bail{"flow nesting"};
    std::string_view t = lines_[fl_].text;
    char open = t[pos];
    char close = open == '[' ? ']' : '}';
    emit(open == '[' ? Event::kSeqStart : Event::kMapStart, lines_[fl_].no,
         static_cast<uint32_t>(pos));
    size_t i = pos + 1;
    auto skip = [&] {
      for (;;) {
        t = lines_[fl_].text;
        while (i < t.size() && t[i] == ' ')
          ++i;
        if (i < t.size() && !(t[i] == '#' && t[i - 1] == ' '))
          return;
        // The end of the line, or a comment to its end: on to the next content line.
        if (fl_ + 1 >= lines_.size())
          throw Bail{"unterminated flow"};
        ++fl_;
        i = 0;
      }
    };
    skip();
    if (t[i] == close) {
      emit(open == '[' ? Event::kSeqEnd : Event::kMapEnd, 0, 0);
      return i + 1;
    }
    for (;;) {
      skip();
      if (open == '{') {
        i = flow_scalar_or_collection(i, depth, /*key=*/true);
        skip();
        if (t[i] != ':')
          throw Bail{"flow map no colon"};
        ++i;
        if (i < t.size() && t[i] != ' ')
          throw Bail{"flow colon no space"};
        skip();
        i = flow_scalar_or_collection(i, depth, false);
      } else {
        // "[ valid_values: [ 1 ] ]": a "key: value" item is a single-pair map.
        size_t at = out_->size();
        bool scalar_item = t[i] != '[' && t[i] != '{';
        i = flow_scalar_or_collection(i, depth, scalar_item);
        t = lines_[fl_].text;
        size_t k = i;
        while (k < t.size() && t[k] == ' ')
          ++k;
        if (scalar_item && k < t.size() && t[k] == ':') {
          if (k + 1 < t.size() && t[k + 1] != ' ')
            throw Bail{"flow pair colon"};
          // The key, one scalar event, moves one place on for the map's start.
          BASE_CHECK(out_->size() == at + 1);
          Event key = (*out_)[at];
          (*out_)[at] = Event{Event::kMapStart, false, false, key.line, key.col, 0, 0};
          out_->push_back(key);
          i = k + 1;
          skip();
          i = flow_scalar_or_collection(i, depth, false);
          emit(Event::kMapEnd, 0, 0);
        }
      }
      skip();
      if (t[i] == ',') {
        ++i;
        skip();
        if (t[i] == close)
          throw Bail{"flow trailing comma"};  // leave to yaml-cpp
        continue;
      }
      if (t[i] == close) {
        emit(open == '[' ? Event::kSeqEnd : Event::kMapEnd, 0, 0);
        return i + 1;
      }
      throw Bail{"flow junk"};
    }
  }

  // A scalar or collection inside a flow collection, at column i of content line fl_;
  // returns the index after it on the line it ends on (fl_).
  size_t flow_scalar_or_collection(size_t i, int depth, bool key) {
    std::string_view t = lines_[fl_].text;
    uint32_t line = lines_[fl_].no;
    char c = t[i];
    if (c == '[' || c == '{') {
      if (key)
        throw Bail{"flow key collection"};
      return parse_flow(i, depth + 1);
    }
    if (c == '"' || c == '\'')
      return parse_quoted(t, i, line);
    if (kFlowIndicators(c)) {
      // '-' may start a plain scalar ("-1") but not "- "
      if (!(c == '-' && i + 1 < t.size() && t[i + 1] != ' ' && t[i + 1] != ',' && t[i + 1] != ']' &&
            t[i + 1] != '}')) {
        throw Bail{"flow indicator"};
      }
    }
    size_t start = i;
    while (i < t.size()) {
      char d = t[i];
      if (d == ',' || d == ']' || d == '}' || d == '[' || d == '{')
        break;
      if (d == ':' && (i + 1 == t.size() || t[i + 1] == ' ' || t[i + 1] == ',' || t[i + 1] == ']' ||
                       t[i + 1] == '}')) {
        break;
      }
      if (d == '#' && t[i - 1] == ' ')
        throw Bail{"flow comment"};
      ++i;
    }
    // A plain scalar that reaches the end of the line may go on on the next one.
    if (i == t.size())
      throw Bail{"multi-line flow scalar"};
    if (t[i] == '[' || t[i] == '{')
      throw Bail{"flow collection after scalar"};
    std::string_view s = t.substr(start, i - start);
    while (!s.empty() && s.back() == ' ')
      s.remove_suffix(1);
    if (s.empty())
      throw Bail{"flow empty scalar"};
    if (!key && t[i] == ':')
      throw Bail{"flow single pair"};  // "[a: b]" single-pair maps
    emit_plain(s, line, static_cast<uint32_t>(start), true);
    return start + s.size();
  }

  std::string_view text_;
  std::string& arena_;
  std::vector<Line> lines_;
  std::vector<std::string_view> raw_;  // every line, blank and comment lines too, by number
  EventList* out_ = nullptr;
  size_t cur_ = 0;
  size_t fl_ = 0;  // the content line a flow collection has reached
  uint32_t eof_line_ = 0;
  bool ends_with_newline_ = false;
  bool ends_in_blanks_ = false;
  int depth_ = 0;
  const char* bad_ = nullptr;  // why the text is outside the subset, found while splitting
};

}  // namespace

struct FastYaml::Events {
  std::string_view text;
  std::string arena;
  EventList list;

  std::string_view value(const Event& e) const {
    return std::string_view(e.in_arena ? arena : text).substr(e.off, e.len);
  }
};

FastYaml::FastYaml() = default;
FastYaml::~FastYaml() = default;

namespace {

// Whether byte `i` of `p` is a character YAML does not call printable (a C1 control is
// 0xC2 then 0x80..0x9F).
bool non_printable_at(const unsigned char* p, size_t i) {
  unsigned char c = p[i];
  return (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f ||
         (i > 0 && p[i - 1] == 0xC2 && c >= 0x80 && c <= 0x9F);
}

// Eight bytes at a time, exact per byte (no carry crosses a byte: each byte's low seven
// bits are added to at most 0x7f): a control other than tab, LF or CR, or DEL, anywhere in
// the word ends the scan; a word with a byte above 0x7f is looked at byte by byte for the
// C1 controls (rare in a VNFD).
bool has_non_printable(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  constexpr uint64_t kOnes = 0x0101010101010101ull, kLow7 = 0x7f7f7f7f7f7f7f7full;
  constexpr uint64_t kHighs = 0x8080808080808080ull;
  // High bit set in each byte of v that is below `lim` (lim <= 0x80).
  auto below = [](uint64_t v, uint64_t lim) {
    return ~((((v & kLow7) + kOnes * (0x80 - lim)) | v)) & kHighs;
  };
  // High bit set in each byte of v equal to `b`.
  auto equal = [](uint64_t v, uint64_t b) {
    uint64_t x = v ^ (kOnes * b);
    return ~((((x & kLow7) + kLow7) | x)) & kHighs;
  };
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    uint64_t ctrl = below(v, 0x20) & ~(equal(v, '\t') | equal(v, '\n') | equal(v, '\r'));
    if ((ctrl | equal(v, 0x7f)) != 0)
      return true;
    if ((v & kHighs) != 0) {
      for (size_t j = i; j < i + 8; ++j) {
        if (non_printable_at(p, j))
          return true;
      }
    }
  }
  for (; i < n; ++i) {
    if (non_printable_at(p, i))
      return true;
  }
  return false;
}

}  // namespace

bool FastYaml::read(std::string_view text) {
  events_.reset();
  meaning_.clear();
  // U+FEFF, the byte order mark: YAML 1.2.2 (5.2, rules [3] and [202]) allows it at the start
  // of a document, where parse_yaml removes it, and inside quoted scalars, never as a plain
  // character. yaml-cpp has its own view of one anywhere else; the fast reader does not
  // guess and steps aside (a fuzzer found the two disagreeing on "\uFEFF\uFEFF").
  if (text.find("\xEF\xBB\xBF") != std::string_view::npos) {
    why_ = "a byte order mark";
    return false;
  }
  // A character YAML does not call printable (C0 controls but tab, line feed and carriage
  // return; DEL; the C1 controls, U+0080..U+009F in UTF-8) anywhere: block scalars, comments
  // and plain scalars alike. yaml-cpp refuses some where the fast reader would keep them (a
  // fuzzer found 0x04 inside a literal block scalar), so it decides them all.
  if (has_non_printable(text)) {
    why_ = "a character YAML does not call printable";
    return false;
  }
  auto events = std::make_unique<Events>();
  events->text = text;
  Reader reader(text, events->arena);
  why_ = reader.run(events->list);
  if (why_ != nullptr)
    return false;
  // The digest comes from the events, not the text: one pass over what was read (a flow
  // sequence's single-pair map gets its start event after its key was read, so the
  // events are only final here).
  MeaningDigest digest;
  events->list.each(
      [&](const Event& e) {
        switch (e.kind) {
          case Event::kScalar:
            digest.scalar(e.quoted, events->value(e));
            break;
          case Event::kNull:
            digest.null();
            break;
          case Event::kSeqStart:
          case Event::kMapStart:
            digest.open(e.kind == Event::kMapStart);
            break;
          case Event::kSeqEnd:
          case Event::kMapEnd:
            digest.close(e.kind == Event::kMapEnd);
            break;
        }
      },
      false);
  meaning_ = digest.hex();
  events_ = std::move(events);
  return true;
}

void FastYaml::replay(YAML::EventHandler& handler, bool keep) {
  BASE_CHECK(events_ != nullptr);
  std::unique_ptr<Events> events = std::move(events_);
  static const std::string kPlain = "?", kQuoted = "!";
  std::string value;  // one buffer for every scalar the handler is given
  events->list.each(
      [&](const Event& e) {
        YAML::Mark m;
        m.line = static_cast<int>(e.line);
        m.column = static_cast<int>(e.col);
        switch (e.kind) {
          case Event::kScalar:
            value.assign(events->value(e));
            handler.OnScalar(m, e.quoted ? kQuoted : kPlain, 0, value);
            break;
          case Event::kNull:
            handler.OnNull(m, 0);
            break;
          case Event::kSeqStart:
          case Event::kMapStart:
            if (e.kind == Event::kMapStart)
              handler.OnMapStart(m, "?", 0, YAML::EmitterStyle::Default);
            else
              handler.OnSequenceStart(m, "?", 0, YAML::EmitterStyle::Default);
            break;
          case Event::kSeqEnd:
            handler.OnSequenceEnd();
            break;
          case Event::kMapEnd:
            handler.OnMapEnd();
            break;
        }
      },
      !keep);
  if (keep)
    events_ = std::move(events);
}

bool fast_parse_yaml(std::string_view text, YAML::EventHandler& handler) {
  FastYaml fast;
  if (!fast.read(text))
    return false;
  // Replay only once the whole text is known to be inside the subset, so that a bail-out
  // never leaves a half-built tree.
  fast.replay(handler);
  return true;
}

namespace {
uint64_t mix(uint64_t h) {
  h ^= h >> 31;
  h *= 0x7FB5D329728EA185ull;
  h ^= h >> 27;
  h *= 0x81DADEF4BC2DD44Dull;
  return h ^ (h >> 33);
}
}  // namespace

void QuickHash::add(std::string_view bytes, uint8_t tag) {
  add(static_cast<uint64_t>(bytes.size()) << 8 | tag);
  const char* p = bytes.data();
  size_t n = bytes.size(), i = 0;
  auto word = [&](size_t at) {
    uint64_t w;
    std::memcpy(&w, p + at, 8);
    return w;
  };
  if (n >= 64) {
    // Four lanes side by side (one multiply chain would wait on itself), folded in after.
    uint64_t lane[4] = {h_, h_ ^ 0x13198A2E03707344ull, h_ ^ 0xA4093822299F31D0ull,
                        h_ ^ 0x082EFA98EC4E6C89ull};
    for (; i + 32 <= n; i += 32) {
      for (int k = 0; k < 4; ++k) {
        lane[k] = (lane[k] ^ word(i + 8 * k)) * 0x9E3779B97F4A7C15ull;
        lane[k] ^= lane[k] >> 29;
      }
    }
    for (uint64_t l : lane)
      add(mix(l));
  }
  for (; i + 8 <= n; i += 8)
    add(word(i));
  // The last 1 to 7 bytes in one word: two 4-byte loads that may overlap, or byte by byte.
  if (n - i >= 4) {
    uint32_t lo, hi;
    std::memcpy(&lo, p + i, 4);
    std::memcpy(&hi, p + n - 4, 4);
    add(static_cast<uint64_t>(hi) << 32 | lo);
  } else if (i < n) {
    uint64_t w = 0;
    for (size_t k = i; k < n; ++k)
      w = w << 8 | static_cast<unsigned char>(p[k]);
    add(w);
  }
}

uint64_t QuickHash::value() const {
  return mix(h_);
}

uint64_t quick_hash(std::string_view bytes) {
  QuickHash h;
  h.add(bytes);
  return h.value();
}

bool plain_null(std::string_view v) {
  return v.empty() || v == "~" || v == "null" || v == "Null" || v == "NULL";
}

// The encoding: per event one kind ('S' plain scalar, 'Q' quoted scalar, 'N' null,
// '[' ']' '{' '}'), a scalar's in the word of its length, then its value; so no two event
// streams encode alike.
void MeaningDigest::scalar(bool quoted, std::string_view value) {
  if (!quoted && plain_null(value)) {
    null();
    return;
  }
  hash_.add(value, quoted ? 'Q' : 'S');
}

void MeaningDigest::null() {
  hash_.add('N');
}
void MeaningDigest::open(bool map) {
  hash_.add(map ? '{' : '[');
}
void MeaningDigest::close(bool map) {
  hash_.add(map ? '}' : ']');
}

std::string MeaningDigest::hex() const {
  static const char kHex[] = "0123456789abcdef";
  uint64_t v = hash_.value();
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4)
    out[i] = kHex[v & 15];
  return out;
}

}  // namespace tosca::internal
