// model.json "family" -> the Family that runs it. The table (families.cpp) holds one entry per family:
// its name and model.json version (schemas/model_json/<name>.v<version>.schema.json), the format string
// its model.json had before families (version 1, refused with a hint to convert again) and a factory.
// Adding a family is one line there; the core never names one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gsurg/family.hpp"

namespace gsurg {

struct FamilyEntry {
  const char* name;
  int64_t version;
  const char* legacy_format;  // model.json "format" of version 1 ("" when there was none)
  std::unique_ptr<Family> (*make)();
};

const std::vector<FamilyEntry>& families();             // families.cpp
const FamilyEntry* find_family(const std::string& name);  // nullptr when unknown

// The name a program reports itself by in errors and usage (main sets it; default "gsurg_run").
void set_program_name(const char* name);
const char* program_name();

}  // namespace gsurg
