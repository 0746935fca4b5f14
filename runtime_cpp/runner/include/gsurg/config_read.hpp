// Checked reads of model.json values the core and the families share (model_config.cpp): each failure is
// a gsurg::Error naming the file and the key.
#pragma once

#include <cstdint>
#include <string>

#include "gsurg/json_access.hpp"

namespace gsurg {

struct ModelConfig;

int positive_int(const JsonDoc& doc, const std::string& key, int64_t limit = 1LL << 31);
double positive_number(const JsonDoc& doc, const std::string& key);
// A file name relative to the model folder, which must exist; its full path.
std::string existing_file(const ModelConfig& cfg, const JsonDoc& doc, const std::string& key);
// "full" (true) or "half" (false).
bool table_width(const JsonDoc& doc, const std::string& key);

}  // namespace gsurg
