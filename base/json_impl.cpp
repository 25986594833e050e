// Boost.JSON, header-only: compiled once here instead of linking libboost_json.
#include <boost/json/src.hpp>
