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
#include <deque>
#include <string>
#include <vector>

#include <yaml-cpp/emitterstyle.h>
#include <yaml-cpp/mark.h>

namespace tosca::internal {

namespace {

struct Bail {};

struct Event {
  enum Kind : uint8_t { kScalar, kNull, kSeqStart, kSeqEnd, kMapStart, kMapEnd } kind;
  bool quoted = false;
  uint32_t line = 0, col = 0;  // 0-based, as YAML::Mark
  std::string value;
};

struct Line {
  uint32_t no;            // 0-based line number
  uint32_t indent;        // leading spaces
  std::string_view text;  // the whole line, without the newline
};

class Reader {
 public:
  explicit Reader(std::string_view text) { split(text); }

  bool run(std::deque<Event>& out) {
    out_ = &out;
    try {
      if (lines_.empty()) {
        return false;  // an empty document: let yaml-cpp say what it is
      }
      cur_ = 0;
      parse_block(lines_[0].indent);
      if (cur_ != lines_.size())
        throw Bail{};
      return true;
    } catch (const Bail&) {
      return false;
    }
  }

 private:
  void split(std::string_view text) {
    uint32_t no = 0;
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string_view::npos)
        end = text.size();
      std::string_view l = text.substr(start, end - start);
      if (!l.empty() && l.back() == '\r') {
        if (end == text.size()) {
          bad_ = true;  // a lone CR at the very end: yaml-cpp keeps it in the scalar
        }
        l.remove_suffix(1);
      }
      if (l.find('\r') != std::string_view::npos) {
        bad_ = true;  // a CR that ends no line
      }
      uint32_t ind = 0;
      while (ind < l.size() && l[ind] == ' ')
        ++ind;
      bool blank = ind == l.size() || l[ind] == '#';
      if (ind < l.size() && l[ind] == '\t')
        bad_ = true;
      if (!blank) {
        // Directives, document markers and tabs are outside the subset.
        if (l.rfind("---", 0) == 0 || l.rfind("...", 0) == 0 || l[0] == '%')
          bad_ = true;
        lines_.push_back({no, ind, l});
      } else if (ind < l.size() && l[ind] == '\t') {
        bad_ = true;
      }
      ++no;
      start = end + 1;
    }
    ends_with_newline_ = !text.empty() && text.back() == '\n';
    eof_line_ = static_cast<uint32_t>(std::count(text.begin(), text.end(), '\n'));
    if (bad_)
      lines_.clear();
  }

  // Position of the next token after the current line, where yaml-cpp marks an empty
  // value: the next content line's first character, or the end of the text.
  void next_token_mark(uint32_t& line, uint32_t& col) const {
    if (cur_ < lines_.size()) {
      line = lines_[cur_].no;
      col = lines_[cur_].indent;
    } else {
      // At the end of a text ending in a newline, yaml-cpp marks the start of the line
      // after it; without the final newline its mark depends on the last tokens.
      if (!ends_with_newline_)
        throw Bail{};
      line = eof_line_;
      col = 0;
    }
  }

  void emit(Event::Kind k, uint32_t line, uint32_t col, std::string value = {},
            bool quoted = false) {
    out_->push_back(Event{k, quoted, line, col, std::move(value)});
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
      throw Bail{};
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    const Line& l = lines_[line_index];
    std::string_view t = l.text;
    if (col >= t.size())
      throw Bail{};
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
    if (!rest_blank(t, end))
      throw Bail{};
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
    if (std::strchr("[]{},#&*!|>%@`?", c) != nullptr)
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
          throw Bail{};
        if (l.text[col] == '-' && (col + 1 == l.text.size() || l.text[col + 1] == ' '))
          break;
      }
      first_key = false;
      std::string_view t = l.text;
      size_t colon = find_key_colon(t, col);
      if (colon == std::string_view::npos)
        throw Bail{};
      // key
      if (t[col] == '"' || t[col] == '\'') {
        size_t end = parse_quoted(t, col, l.no);
        size_t k = end;
        while (k < colon && t[k] == ' ')
          ++k;
        if (k != colon)
          throw Bail{};
      } else {
        std::string_view key = t.substr(col, colon - col);
        while (!key.empty() && key.back() == ' ')
          key.remove_suffix(1);
        if (key.empty())
          throw Bail{};
        emit_plain(key, l.no, col);
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
      size_t end = parse_inline(t, v, l.no);
      if (!rest_blank(t, end))
        throw Bail{};
      ++cur_;
      if (cur_ < lines_.size() && lines_[cur_].indent > col)
        throw Bail{};  // multi-line value
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
          throw Bail{};
      }
      std::string_view t = l.text;
      if (!(t[col] == '-' && (col + 1 == t.size() || t[col + 1] == ' '))) {
        if (first_item)
          throw Bail{};
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
      size_t end = parse_inline(t, v, l.no);
      if (!rest_blank(t, end))
        throw Bail{};
      ++cur_;
      if (cur_ < lines_.size() && lines_[cur_].indent > col)
        throw Bail{};
    }
    emit(Event::kSeqEnd, 0, 0);
  }

  // "- - x": a sequence starting inside a sequence line at column `col`.
  void parse_seq_inline(uint32_t col) { parse_seq(col); }

  // A scalar or flow collection inside one line; returns the index after it.
  size_t parse_inline(std::string_view t, size_t pos, uint32_t line) {
    char c = t[pos];
    if (c == '[' || c == '{')
      return parse_flow(t, pos, line, 0);
    if (c == '"' || c == '\'')
      return parse_quoted(t, pos, line);
    if (std::strchr("]},#&*!|>%@`?", c) != nullptr)
      throw Bail{};
    if (c == '-' && (pos + 1 == t.size() || t[pos + 1] == ' '))
      throw Bail{};
    if (c == ':' && (pos + 1 == t.size() || t[pos + 1] == ' '))
      throw Bail{};
    size_t end = comment_at(t, pos);
    if (end == std::string_view::npos)
      end = t.size();
    std::string_view s = t.substr(pos, end - pos);
    while (!s.empty() && s.back() == ' ')
      s.remove_suffix(1);
    // "a: b: c" and similar are errors yaml-cpp reports; leave them to it.
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == ':' && (i + 1 == s.size() || s[i + 1] == ' '))
        throw Bail{};
    }
    emit_plain(s, line, static_cast<uint32_t>(pos));
    return pos + s.size();
  }

  // Plain scalars may hold only characters whose meaning yaml-cpp and the YAML spec agree
  // on in every context; anything else (indicators such as '?', '*', '&', '!', '|',
  // quotes, brackets, '#', control characters) goes to yaml-cpp.
  static bool safe_plain(std::string_view s) {
    for (char ch : s) {
      auto c = static_cast<unsigned char>(ch);
      if (c >= 0x80 || std::isalnum(c))
        continue;
      if (std::strchr(" _-./:+=()~,;@$<>^", ch) == nullptr || ch == '\0')
        return false;
    }
    return true;
  }

  void emit_plain(std::string_view s, uint32_t line, uint32_t col) {
    if (!safe_plain(s))
      throw Bail{};
    emit(Event::kScalar, line, col, std::string(s), false);
  }

  size_t parse_quoted(std::string_view t, size_t pos, uint32_t line) {
    char q = t[pos];
    std::string value;
    size_t i = pos + 1;
    for (;;) {
      if (i >= t.size())
        throw Bail{};  // continues on the next line
      char c = t[i];
      if (c == q) {
        if (q == '\'' && i + 1 < t.size() && t[i + 1] == '\'') {
          value += '\'';
          i += 2;
          continue;
        }
        break;
      }
      if (q == '"' && c == '\\') {
        if (i + 1 >= t.size())
          throw Bail{};
        char e = t[i + 1];
        switch (e) {
          case '"':
            value += '"';
            break;
          case '\\':
            value += '\\';
            break;
          case '/':
            value += '/';
            break;
          case 'n':
            value += '\n';
            break;
          case 't':
            value += '\t';
            break;
          case 'r':
            value += '\r';
            break;
          default:
            throw Bail{};  // rarer escapes: yaml-cpp decides
        }
        i += 2;
        continue;
      }
      if (static_cast<unsigned char>(c) < 0x20)
        throw Bail{};
      value += c;
      ++i;
    }
    emit(Event::kScalar, line, static_cast<uint32_t>(pos), std::move(value), true);
    return i + 1;
  }

  // One-line flow collection starting at t[pos] ('[' or '{'); returns the index after it.
  size_t parse_flow(std::string_view t, size_t pos, uint32_t line, int depth) {
    if (depth > 32)
      throw Bail{};
    char open = t[pos];
    char close = open == '[' ? ']' : '}';
    emit(open == '[' ? Event::kSeqStart : Event::kMapStart, line, static_cast<uint32_t>(pos));
    size_t i = pos + 1;
    auto skip = [&] {
      while (i < t.size() && t[i] == ' ')
        ++i;
      if (i >= t.size())
        throw Bail{};  // continues on the next line
    };
    skip();
    if (t[i] == close) {
      emit(open == '[' ? Event::kSeqEnd : Event::kMapEnd, 0, 0);
      return i + 1;
    }
    for (;;) {
      skip();
      if (open == '{') {
        i = flow_scalar_or_collection(t, i, line, depth, /*key=*/true);
        skip();
        if (t[i] != ':')
          throw Bail{};
        ++i;
        if (i < t.size() && t[i] != ' ')
          throw Bail{};
        skip();
        i = flow_scalar_or_collection(t, i, line, depth, false);
      } else {
        // "[ valid_values: [ 1 ] ]": a "key: value" item is a single-pair map.
        size_t at = out_->size();
        bool scalar_item = t[i] != '[' && t[i] != '{';
        i = flow_scalar_or_collection(t, i, line, depth, scalar_item);
        size_t k = i;
        while (k < t.size() && t[k] == ' ')
          ++k;
        if (scalar_item && k < t.size() && t[k] == ':') {
          if (k + 1 < t.size() && t[k + 1] != ' ')
            throw Bail{};
          const Event& key = (*out_)[at];
          out_->insert(out_->begin() + static_cast<std::ptrdiff_t>(at),
                       Event{Event::kMapStart, false, key.line, key.col, {}});
          i = k + 1;
          skip();
          i = flow_scalar_or_collection(t, i, line, depth, false);
          emit(Event::kMapEnd, 0, 0);
        }
      }
      skip();
      if (t[i] == ',') {
        ++i;
        skip();
        if (t[i] == close)
          throw Bail{};  // trailing comma: leave to yaml-cpp
        continue;
      }
      if (t[i] == close) {
        emit(open == '[' ? Event::kSeqEnd : Event::kMapEnd, 0, 0);
        return i + 1;
      }
      throw Bail{};
    }
  }

  size_t flow_scalar_or_collection(std::string_view t, size_t i, uint32_t line, int depth,
                                   bool key) {
    char c = t[i];
    if (c == '[' || c == '{') {
      if (key)
        throw Bail{};
      return parse_flow(t, i, line, depth + 1);
    }
    if (c == '"' || c == '\'')
      return parse_quoted(t, i, line);
    if (std::strchr(",]}#&*!|>%@`?:-", c) != nullptr) {
      // '-' may start a plain scalar ("-1") but not "- "
      if (!(c == '-' && i + 1 < t.size() && t[i + 1] != ' ' && t[i + 1] != ',' && t[i + 1] != ']' &&
            t[i + 1] != '}')) {
        throw Bail{};
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
        throw Bail{};
      ++i;
    }
    if (i < t.size() && (t[i] == '[' || t[i] == '{'))
      throw Bail{};
    std::string_view s = t.substr(start, i - start);
    while (!s.empty() && s.back() == ' ')
      s.remove_suffix(1);
    if (s.empty())
      throw Bail{};
    if (!key && i < t.size() && t[i] == ':')
      throw Bail{};  // "[a: b]" single-pair maps
    emit_plain(s, line, static_cast<uint32_t>(start));
    return start + s.size();
  }

  std::vector<Line> lines_;
  std::deque<Event>* out_ = nullptr;
  size_t cur_ = 0;
  uint32_t eof_line_ = 0;
  bool ends_with_newline_ = false;
  int depth_ = 0;
  bool bad_ = false;
};

}  // namespace

bool fast_parse_yaml(std::string_view text, YAML::EventHandler& handler) {
  // U+FEFF, the byte order mark: YAML 1.2.2 (5.2, rules [3] and [202]) allows it at the start
  // of a document, where parse_yaml removes it, and inside quoted scalars, never as a plain
  // character. yaml-cpp has its own view of one anywhere else; the fast reader does not
  // guess and steps aside (a fuzzer found the two disagreeing on "\uFEFF\uFEFF").
  if (text.find("\xEF\xBB\xBF") != std::string_view::npos)
    return false;
  // A deque: it grows without copying itself, and the replay frees it as it goes, so the
  // events and the tree they build never both exist in full.
  std::deque<Event> events;
  Reader reader(text);
  if (!reader.run(events))
    return false;
  // Replay only once the whole text is known to be inside the subset, so that a bail-out
  // never leaves a half-built tree.
  static const std::string kPlain = "?", kQuoted = "!";
  for (; !events.empty(); events.pop_front()) {
    const Event& e = events.front();
    YAML::Mark m;
    m.line = static_cast<int>(e.line);
    m.column = static_cast<int>(e.col);
    switch (e.kind) {
      case Event::kScalar:
        handler.OnScalar(m, e.quoted ? kQuoted : kPlain, 0, e.value);
        break;
      case Event::kNull:
        handler.OnNull(m, 0);
        break;
      case Event::kSeqStart:
        handler.OnSequenceStart(m, "?", 0, YAML::EmitterStyle::Default);
        break;
      case Event::kSeqEnd:
        handler.OnSequenceEnd();
        break;
      case Event::kMapStart:
        handler.OnMapStart(m, "?", 0, YAML::EmitterStyle::Default);
        break;
      case Event::kMapEnd:
        handler.OnMapEnd();
        break;
    }
  }
  return true;
}

}  // namespace tosca::internal
