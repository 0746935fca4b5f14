// The registered families: model.json "family" -> its factory (see family_registry.hpp). A new family
// adds its header and one entry here.
#include "gsurg/family_registry.hpp"
#include "gsurg/family_penguin_vl.hpp"
#include "gsurg/family_qwen3_vl.hpp"

namespace gsurg {

const std::vector<FamilyEntry>& families() {
  static const std::vector<FamilyEntry> table = {
      penguin_vl_entry(),
      qwen3_vl_entry(),
  };
  return table;
}

}  // namespace gsurg
