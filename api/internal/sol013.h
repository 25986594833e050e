// SOL013 (ETSI GS NFV-SOL 013 §5) query behaviour, pure: no sockets, no store.
//
//   Query      the query string split and percent-decoded, bounded
//   Filter     attribute filters: (op,attr[/sub...],value[,value...]) joined by ";"
//   Selector   attribute selectors: all_fields, fields, exclude_fields (and the
//              "exclude-fields" python-tackerclient sends), exclude_default
//   Problem    a ProblemDetails body (application/problem+json), status and detail always
//
// Every parser bounds its input (length, count, depth) before the work that depends on it,
// and a filter's evaluation is bounded per document, so hostile input costs linear time.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "base/base.h"

namespace api::internal {

namespace json = boost::json;

constexpr size_t kMaxQueryBytes = 8192;
constexpr size_t kMaxQueryParams = 32;
constexpr size_t kMaxFilterBytes = 4096;
constexpr size_t kMaxFilterTerms = 32;
constexpr size_t kMaxValuesPerTerm = 64;
constexpr size_t kMaxPathDepth = 16;  // segments of one attribute path
constexpr size_t kMaxSelectorPaths = 64;
// Nodes one filter term may visit in one document (arrays on the path fan out).
constexpr size_t kMaxVisitsPerTerm = 4096;

// "%41+b" -> "A b". nullopt for a bad escape (a "%" not followed by two hex digits).
std::optional<std::string> percent_decode(std::string_view s, bool plus_is_space);
// Everything but unreserved characters (RFC 3986 §2.3) as %HH.
std::string percent_encode(std::string_view s);

struct Query {
  // In request order; a parameter without "=" has no value (SOL013's flags).
  std::vector<std::pair<std::string, std::optional<std::string>>> params;
  const std::optional<std::string>* find(std::string_view name) const;
  bool has(std::string_view name) const { return find(name) != nullptr; }
};
// Refused: more than kMaxQueryBytes or kMaxQueryParams, a bad escape, an empty name, a
// parameter given twice.
base::Result<Query> parse_query(std::string_view text);

// ---------------------------------------------------------------------------------------
// Attribute filters (SOL013 §5.2)

enum class FilterOp { kEq, kNeq, kGt, kGte, kLt, kLte, kIn, kNin, kCont, kNcont };

struct FilterTerm {
  FilterOp op = FilterOp::kEq;
  std::vector<std::string> path;  // "a/b" -> {"a", "b"}, escapes (~0 ~1 ~a ~b) undone
  std::vector<std::string> values;
};

struct Filter {
  std::vector<FilterTerm> terms;  // all must match
};

// The filter expression as SOL013 writes it; values may be single-quoted ('' is a quote).
// Errors name the character offset and what was expected there.
base::Result<Filter> parse_filter(std::string_view text);

// Whether `doc` matches every term. A path through an array matches when any element
// does; an attribute the document does not have matches nothing (neq, nin and ncont
// included). Numbers compare as numbers, booleans as true/false, strings byte-wise.
bool matches(const Filter& f, const json::value& doc);

// ---------------------------------------------------------------------------------------
// Attribute selectors (SOL013 §5.3)

struct Selector {
  bool all_fields = false;
  bool exclude_default = false;
  std::vector<std::vector<std::string>> fields;          // fields=a,b/c
  std::vector<std::vector<std::string>> exclude_fields;  // exclude_fields= / exclude-fields=
  // None of the four was given.
  bool none() const {
    return !all_fields && !exclude_default && fields.empty() && exclude_fields.empty();
  }
};

// From the query; combinations SOL013 does not define are refused: all_fields with any
// other, fields with exclude_fields, exclude_fields with exclude_default, both spellings
// of exclude_fields.
base::Result<Selector> parse_selector(const Query& q);

// What a resource type excludes by default (SOL003/SOL005 name the complex attributes),
// and whether that applies when no selector is given (else only with exclude_default).
struct DefaultExclusion {
  std::vector<std::string> attributes;  // top-level names
  bool when_none = true;
};

// `doc` with the selector applied: all_fields keeps everything; exclude_fields removes
// the paths named; exclude_default (or none, when `d.when_none`) removes the default
// attributes, except those `fields` names (a path inside one keeps the whole attribute).
json::object apply_selector(const Selector& s, const DefaultExclusion& d, json::object doc);

// ---------------------------------------------------------------------------------------
// ProblemDetails

struct Problem {
  int status = 500;
  std::string title;
  std::string detail;
};
std::string problem_json(const Problem& p);

// The Link header value of the next page: "<URL>; rel=\"next\"", URL = base + path + every
// original parameter but the marker (flags written as name=1, so clients that drop blank
// values keep them) + nextpage_opaque_marker=marker.
std::string next_link(std::string_view base, std::string_view path, const Query& q,
                      std::string_view marker);

}  // namespace api::internal
