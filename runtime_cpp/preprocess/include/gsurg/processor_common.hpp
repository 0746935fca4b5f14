// What the families' image processors (runtime_cpp/families/<name>/src/*_image_processor.cpp) compute the
// same way:
// - the errors and lookups of a preprocessor_config-like JSON object: "image_processor: KEY must be WHAT,
//   not VALUE" ("missing" when absent), an optional boolean;
// - Python's round() for a float (the nearest integer, ties to even; exact, independent of the FP mode);
// - the normalisation of an 8-bit channel value, as HF and the Python references compute it:
//   float32(u8 * rescale_factor) computed in float64, then (x - float32(mean)) / float32(std) in float32,
//   as a 256-entry table per channel.
#pragma once

#include <array>
#include <string>

#include <nlohmann/json.hpp>

namespace gsurg {
namespace processor {

[[noreturn]] void bad(const std::string& key, const std::string& what, const nlohmann::json* value);
const nlohmann::json* find(const nlohmann::json& j, const char* key);
bool get_bool(const nlohmann::json& j, const char* key, bool fallback);
double round_half_even(double x);

using NormaliseTable = std::array<std::array<float, 256>, 3>;
NormaliseTable normalise_table(double rescale_factor, const std::array<double, 3>& mean,
                               const std::array<double, 3>& std_dev);

}  // namespace processor
}  // namespace gsurg
