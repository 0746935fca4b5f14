// The family lookup, the program's name, and the parts of family.hpp every family shares.
#include "gsurg/family_registry.hpp"

#include <algorithm>
#include <string>

#include "gsurg/error.hpp"
#include "gsurg/optional_parts.hpp"

namespace gsurg {

namespace {
const char* g_program_name = "gsurg_run";
}  // namespace

Family::~Family() = default;
Positions::~Positions() = default;

RopeTables TextPositions::tables(int start, int rows) const {
  return text_rope_tables(start, rows, head_dim_, theta_, full_width_);
}

int count_id(const std::vector<int>& ids, int id) {
  return static_cast<int>(std::count(ids.begin(), ids.end(), id));
}

const FamilyEntry* find_family(const std::string& name) {
  for (const FamilyEntry& f : families()) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

void set_program_name(const char* name) { g_program_name = name; }

void part_missing(const char* part, const char* flag, const char* instead) {
  throw Error(std::string("this ") + g_program_name + " was built without runtime_cpp/" + part + ": " + flag +
              " is unavailable (use " + instead + ")");
}
const char* program_name() { return g_program_name; }

}  // namespace gsurg
