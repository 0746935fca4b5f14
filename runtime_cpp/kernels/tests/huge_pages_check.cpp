// huge_pages.hpp against the kernel: the posix_memalign wrapper sees the allocations made inside ncnn's
// static library (an ncnn::Mat is allocated by Mat::create in mat.cpp), advises only large ones and only
// the whole huge pages inside them, only while --huge-pages (set_enabled(true)) is on: off by default. On
// x86-64 the advice is also read back from the kernel: the mapping holding the buffer carries the "hg"
// VmFlag in /proc/self/smaps (not under qemu-user, whose madvise is a no-op and whose smaps are the host's).
// Exit 0 when every check holds, 1 with a line per failed check, 77 (skipped) where huge pages cannot be
// advised (not Linux, or THP mode "never") or where a huge page is not 1-32 MiB (arm64 with 64 KiB base pages
// has 512 MiB ones: 8 of them are more than a test should allocate).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include <mat.h>

#include "gsurg/huge_pages.hpp"

namespace {

int g_failures = 0;

[[maybe_unused]] void expect(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++g_failures;
}

#if defined(__x86_64__) && defined(__linux__)
// The VmFlags line of the /proc/self/smaps mapping that holds address a ("" when none does).
std::string vm_flags_at(const void* a) {
  const uintptr_t x = reinterpret_cast<uintptr_t>(a);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find('-')) {
      inside = lo <= x && x < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

bool has_flag(const std::string& vm_flags, const char* flag) {
  std::istringstream words(vm_flags);
  std::string w;
  while (words >> w)
    if (w == flag) return true;
  return false;
}
#endif

}  // namespace

int main() {
  namespace hp = gsurg::huge_pages;
#if !defined(__linux__)
  // posix_memalign (used below) is POSIX; elsewhere the runtime never advises (supported() is false).
  std::printf("skipped: transparent huge pages are advised on Linux only\n");
  return hp::supported() ? 1 : 77;
#else
  if (!hp::supported()) {
    std::printf("skipped: transparent huge pages cannot be advised here (not Linux, or THP mode never)\n");
    return 77;
  }

  // Every size below is counted in huge pages, whatever their size on this kernel (2 MiB on x86-64 and
  // arm64 with 4 KiB base pages, 32 or 512 MiB on arm64 with 16 or 64 KiB ones).
  const size_t page = hp::page_bytes();
  if (page < hp::kMinBytes / 4 || page > (size_t{32} << 20)) {
    std::printf("skipped: huge pages of %zu bytes; the check allocates 8 of them and needs 1-32 MiB\n", page);
    return 77;
  }
  const size_t mib = size_t{1} << 20;
  const int big_floats = static_cast<int>(8 * page / sizeof(float));  // 8 huge pages
  const std::string big_text = std::to_string(8 * page / mib) + " MiB";

  // Off by default: a large allocation is left alone.
  expect(!hp::enabled(), "huge pages are off until set_enabled(true) (--huge-pages)");
  size_t before = hp::advised_bytes();
  {
    ncnn::Mat idle(big_floats);
    expect(hp::advised_bytes() == before, "by default a " + big_text + " allocation is not advised");
  }

  // --huge-pages: a large Mat of 8 huge pages of floats, allocated by libncnn.a's Mat::create through
  // fastMalloc. Its start need not be page-aligned, so 7 or 8 whole pages lie inside it (6 is the bound).
  hp::set_enabled(true);
  before = hp::advised_bytes();
  ncnn::Mat big(big_floats);
  const size_t large_advised = hp::advised_bytes() - before;
  expect(!big.empty(), "an ncnn::Mat of " + big_text + " was allocated");
  expect(large_advised >= 6 * page && large_advised <= 8 * page && large_advised % page == 0,
         "ncnn's " + big_text + " allocation was advised in whole pages inside its bounds (" +
             std::to_string(large_advised) + " bytes)");
#if defined(__x86_64__) && defined(__linux__)
  const std::string flags = vm_flags_at(static_cast<const char*>(big.data) + 4 * page);
  expect(has_flag(flags, "hg"), "the kernel holds the advice on that mapping (" + flags + ")");
  big.fill(1.f);  // the first touch: where the kernel has a free huge page it is used now (not asserted)
#endif

  // A small one (below kMinBytes) is left alone.
  before = hp::advised_bytes();
  ncnn::Mat small(static_cast<int>(hp::kMinBytes / 4 / sizeof(float)));  // a quarter of kMinBytes
  expect(hp::advised_bytes() == before, "an allocation of a quarter of kMinBytes was not advised");

  // Only whole huge pages inside the range: an unaligned start and a length that is not a multiple.
  void* raw = nullptr;
  const size_t span = 4 * page + page / 2;
  expect(posix_memalign(&raw, 64, span) == 0, "posix_memalign of 4.5 huge pages");
  before = hp::advised_bytes();
  const size_t got = hp::advise(static_cast<char*>(raw) + 4096, span - 8192);
  expect(got > 0 && got <= span - 8192 && got % page == 0,
         "advise() covers only whole huge pages inside the range (" + std::to_string(got) + " bytes)");
  expect(hp::advised_bytes() - before >= got, "advised_bytes() counts it");
  std::free(raw);

  // Off again.
  hp::set_enabled(false);
  before = hp::advised_bytes();
  ncnn::Mat off(big_floats);
  expect(hp::advised_bytes() == before,
         "with set_enabled(false) a " + big_text + " allocation is not advised");
#if defined(__x86_64__) && defined(__linux__)
  const std::string off_flags = vm_flags_at(static_cast<const char*>(off.data) + 4 * page);
  expect(!has_flag(off_flags, "hg"), "and its mapping carries no advice (" + off_flags + ")");
#endif

  std::printf("%s\n", g_failures == 0 ? "all checks passed" : "some checks FAILED");
  return g_failures == 0 ? 0 : 1;
#endif
}
