// base::Metrics: families of series in maps under one mutex, rendered on demand.
#include <algorithm>
#include <charconv>
#include <cmath>

#include "base/base.h"

namespace base {

namespace {

bool valid_name(std::string_view n) {
  if (n.empty())
    return false;
  for (size_t i = 0; i < n.size(); ++i) {
    char c = n[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9'))
      return false;
  }
  return true;
}

// A sample value: integers as such, others in the shortest form that reads back the same.
void put_number(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
  } else if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
  } else {
    // Plain decimals where they are short (le="0.0001", as Prometheus' own clients write
    // bucket bounds), the shortest exact form otherwise.
    char buf[64];
    double a = std::fabs(v);
    auto r = a >= 1e-6 && a < 1e15
                 ? std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed)
                 : std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
  }
}

// Backslash and newline escaped, and the double quote in a label value (the format's
// escapes; help text leaves quotes alone).
void put_escaped(std::string& out, std::string_view v, bool label_value) {
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '"' && label_value)
      out += "\\\"";
    else
      out += c;
  }
}

}  // namespace

struct Metrics::State {
  struct Series {
    double value = 0;              // counter, gauge
    std::vector<uint64_t> counts;  // histogram: per bucket (not cumulative), +Inf last
    double sum = 0;
    uint64_t count = 0;
  };
  struct Family {
    std::string name, help;
    Type type = Type::kCounter;
    std::vector<std::string> labels;
    std::vector<double> buckets;
    std::map<std::vector<std::string>, Series> series;
  };
  std::mutex mu;
  // Held by text() from its collectors to its rendering: two scrapes at once cannot see
  // each other's half-refreshed gauges (cleared, not yet set again).
  std::mutex collect_mu;
  std::vector<std::unique_ptr<Family>> families;  // declaration order
  std::map<std::string, Family*, std::less<>> by_name;
  std::vector<std::function<void(Metrics&)>> collectors;

  // Under mu.
  Family& family(std::string_view name) {
    auto it = by_name.find(name);
    BASE_CHECK(it != by_name.end());
    return *it->second;
  }
  Series& series(Family& f, Labels values, Type want) {
    BASE_CHECK(f.type == want || (want == Type::kCounter && f.type == Type::kGauge));
    BASE_CHECK(values.size() == f.labels.size());
    std::vector<std::string> key(values.begin(), values.end());
    auto [s, fresh] = f.series.try_emplace(std::move(key));
    if (fresh && f.type == Type::kHistogram)
      s->second.counts.assign(f.buckets.size() + 1, 0);
    return s->second;
  }
};

Metrics::Metrics() : s_(std::make_unique<State>()) {}
Metrics::~Metrics() = default;

void Metrics::declare(std::string_view name, Type type, std::string_view help,
                      std::vector<std::string> label_names, std::vector<double> buckets) {
  BASE_CHECK(valid_name(name));
  for (const auto& l : label_names)
    BASE_CHECK(valid_name(l) && l.find(':') == std::string::npos && l != "le");
  BASE_CHECK(type == Type::kHistogram || buckets.empty());
  BASE_CHECK(std::is_sorted(buckets.begin(), buckets.end()) &&
             std::adjacent_find(buckets.begin(), buckets.end()) == buckets.end());
  std::lock_guard<std::mutex> l(s_->mu);
  if (auto it = s_->by_name.find(name); it != s_->by_name.end()) {
    const State::Family& f = *it->second;
    BASE_CHECK(f.type == type && f.labels == label_names && f.buckets == buckets);
    return;
  }
  auto f = std::make_unique<State::Family>();
  f->name = std::string(name);
  f->help = std::string(help);
  f->type = type;
  f->labels = std::move(label_names);
  f->buckets = std::move(buckets);
  if (f->labels.empty()) {
    // A family without labels has its one series from the start: a counter reads 0 before
    // its first event, so rate() and increase() see that event.
    State::Series& s = f->series[{}];
    if (type == Type::kHistogram)
      s.counts.assign(f->buckets.size() + 1, 0);
  }
  s_->by_name.emplace(f->name, f.get());
  s_->families.push_back(std::move(f));
}

void Metrics::add(std::string_view name, Labels values, double v) {
  std::lock_guard<std::mutex> l(s_->mu);
  s_->series(s_->family(name), values, Type::kCounter).value += v;
}

void Metrics::set(std::string_view name, Labels values, double v) {
  std::lock_guard<std::mutex> l(s_->mu);
  s_->series(s_->family(name), values, Type::kGauge).value = v;
}

void Metrics::observe(std::string_view name, Labels values, double v) {
  std::lock_guard<std::mutex> l(s_->mu);
  State::Family& f = s_->family(name);
  const std::vector<double>& b = f.buckets;
  State::Series& s = s_->series(f, values, Type::kHistogram);
  size_t i = static_cast<size_t>(std::lower_bound(b.begin(), b.end(), v) - b.begin());
  s.counts[i]++;
  s.sum += v;
  s.count++;
}

void Metrics::clear(std::string_view name) {
  std::lock_guard<std::mutex> l(s_->mu);
  State::Family& f = s_->family(name);
  BASE_CHECK(f.type == Type::kGauge);
  f.series.clear();
}

void Metrics::on_collect(std::function<void(Metrics&)> collector) {
  std::lock_guard<std::mutex> l(s_->mu);
  s_->collectors.push_back(std::move(collector));
}

double Metrics::value(std::string_view name, Labels values) {
  std::lock_guard<std::mutex> l(s_->mu);
  const State::Family& f = s_->family(name);
  auto s = f.series.find(std::vector<std::string>(values.begin(), values.end()));
  if (s == f.series.end())
    return 0;
  return f.type == Type::kHistogram ? static_cast<double>(s->second.count) : s->second.value;
}

std::vector<double> Metrics::exponential_buckets(double first, double factor, int n) {
  std::vector<double> b;
  double v = first;
  for (int i = 0; i < n; ++i, v *= factor)
    b.push_back(v);
  return b;
}

std::string Metrics::text() {
  std::lock_guard<std::mutex> collecting(s_->collect_mu);
  std::vector<std::function<void(Metrics&)>> collectors;
  {
    std::lock_guard<std::mutex> l(s_->mu);
    collectors = s_->collectors;
  }
  for (auto& c : collectors)
    c(*this);
  std::lock_guard<std::mutex> l(s_->mu);
  std::string out;
  // The label set of one series, with an extra label (a histogram's le) when given.
  auto put_labels = [&out](const State::Family& f, const std::vector<std::string>& values,
                           std::string_view extra_name, std::string_view extra_value) {
    if (f.labels.empty() && extra_name.empty())
      return;
    out += '{';
    for (size_t i = 0; i < f.labels.size(); ++i) {
      if (i > 0)
        out += ',';
      out += f.labels[i];
      out += "=\"";
      put_escaped(out, values[i], true);
      out += '"';
    }
    if (!extra_name.empty()) {
      if (!f.labels.empty())
        out += ',';
      out += extra_name;
      out += "=\"";
      out += extra_value;
      out += '"';
    }
    out += '}';
  };
  for (const auto& fp : s_->families) {
    const State::Family& f = *fp;
    out += "# HELP " + f.name + ' ';
    put_escaped(out, f.help, false);
    out += "\n# TYPE " + f.name + ' ';
    out += f.type == Type::kCounter ? "counter" : f.type == Type::kGauge ? "gauge" : "histogram";
    out += '\n';
    for (const auto& [values, s] : f.series) {
      if (f.type != Type::kHistogram) {
        out += f.name;
        put_labels(f, values, "", "");
        out += ' ';
        put_number(out, s.value);
        out += '\n';
        continue;
      }
      uint64_t cumulative = 0;
      for (size_t i = 0; i <= f.buckets.size(); ++i) {
        cumulative += s.counts[i];
        std::string le;
        if (i < f.buckets.size())
          put_number(le, f.buckets[i]);
        else
          le = "+Inf";
        out += f.name + "_bucket";
        put_labels(f, values, "le", le);
        out += ' ' + std::to_string(cumulative) + '\n';
      }
      out += f.name + "_sum";
      put_labels(f, values, "", "");
      out += ' ';
      put_number(out, s.sum);
      out += '\n' + f.name + "_count";
      put_labels(f, values, "", "");
      out += ' ' + std::to_string(s.count) + '\n';
    }
  }
  return out;
}

}  // namespace base
