// The helpers both image processors share (see processor_common.hpp).
#include "gsurg/processor_common.hpp"

#include <cmath>

#include "gsurg/error.hpp"

namespace gsurg {
namespace processor {

void bad(const std::string& key, const std::string& what, const nlohmann::json* value) {
  const std::string shown = value == nullptr ? "missing" : value->dump();
  throw Error("image_processor: " + key + " must be " + what + ", not " + shown);
}

const nlohmann::json* find(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

bool get_bool(const nlohmann::json& j, const char* key, bool fallback) {
  const nlohmann::json* v = find(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) bad(key, "true or false", v);
  return v->get<bool>();
}

double round_half_even(double x) {
  const double lo = std::floor(x);
  const double diff = x - lo;  // exact for |x| < 2^52
  if (diff < 0.5) return lo;
  if (diff > 0.5) return lo + 1.0;
  return std::fmod(lo, 2.0) == 0.0 ? lo : lo + 1.0;
}

NormaliseTable normalise_table(double rescale_factor, const std::array<double, 3>& mean,
                               const std::array<double, 3>& std_dev) {
  NormaliseTable table{};
  for (size_t c = 0; c < 3; ++c) {
    const float m = static_cast<float>(mean[c]);
    const float s = static_cast<float>(std_dev[c]);
    for (int v = 0; v < 256; ++v) {
      const float scaled = static_cast<float>(static_cast<double>(v) * rescale_factor);
      const float centred = scaled - m;
      table[c][static_cast<size_t>(v)] = centred / s;
    }
  }
  return table;
}

}  // namespace processor
}  // namespace gsurg
