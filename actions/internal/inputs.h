// Reading an action's inputs: a field of the wanted type, else the default (the compiler has
// checked the types against the catalog; a machine read back from JSON has not, so nothing
// here trusts them).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <boost/json/object.hpp>

namespace actions {

inline std::string str_in(const boost::json::object& in, std::string_view k,
                          std::string dflt = {}) {
  const boost::json::value* v = in.if_contains(k);
  return v != nullptr && v->is_string() ? std::string(v->get_string()) : dflt;
}

inline int64_t int_in(const boost::json::object& in, std::string_view k, int64_t dflt) {
  const boost::json::value* v = in.if_contains(k);
  return v != nullptr && v->is_int64() ? v->get_int64() : dflt;
}

inline bool bool_in(const boost::json::object& in, std::string_view k, bool dflt = false) {
  const boost::json::value* v = in.if_contains(k);
  return v != nullptr && v->is_bool() ? v->get_bool() : dflt;
}

}  // namespace actions
