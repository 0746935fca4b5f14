// huge_pages.hpp against the kernel: the posix_memalign wrapper sees the allocations made inside ncnn's
// static library (an ncnn::Mat is allocated by Mat::create in mat.cpp), advises only large ones and only
// the whole huge pages inside them, only while --huge-pages (set_enabled(true)) is on: off by default. On x86-64 the
// advice is also read back from the kernel: the mapping holding the buffer carries the "hg" VmFlag in
// /proc/self/smaps (not under qemu-user, whose madvise is a no-op and whose smaps are the host's).
// Exit 0 when every check holds, 1 with a line per failed check, 77 (skipped) where huge pages cannot be
// advised (not Linux, or THP mode "never").
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include <mat.h>

#include "pvl/huge_pages.hpp"

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
  namespace hp = pvl::huge_pages;
#if !defined(__linux__)
  // posix_memalign (used below) is POSIX; elsewhere the runtime never advises (supported() is false).
  std::printf("skipped: transparent huge pages are advised on Linux only\n");
  return hp::supported() ? 1 : 77;
#else
  if (!hp::supported()) {
    std::printf("skipped: transparent huge pages cannot be advised here (not Linux, or THP mode never)\n");
    return 77;
  }

  // Off by default: a large allocation is left alone.
  expect(!hp::enabled(), "huge pages are off until set_enabled(true) (--huge-pages)");
  size_t before = hp::advised_bytes();
  {
    ncnn::Mat idle(4 << 20);
    expect(hp::advised_bytes() == before, "by default a 16 MiB allocation is not advised");
  }

  // --huge-pages: a large Mat, 16 MiB of floats, allocated by libncnn.a's Mat::create through fastMalloc.
  hp::set_enabled(true);
  before = hp::advised_bytes();
  ncnn::Mat big(4 << 20);
  const size_t large_advised = hp::advised_bytes() - before;
  expect(!big.empty(), "an ncnn::Mat of 16 MiB was allocated");
  expect(large_advised >= (size_t{12} << 20) && large_advised <= (size_t{16} << 20),
         "ncnn's 16 MiB allocation was advised inside its bounds (" + std::to_string(large_advised) + " bytes)");
#if defined(__x86_64__) && defined(__linux__)
  const std::string flags = vm_flags_at(static_cast<const char*>(big.data) + (8 << 20));
  expect(has_flag(flags, "hg"), "the kernel holds the advice on that mapping (" + flags + ")");
  big.fill(1.f);  // the first touch: where the kernel has a free huge page it is used now (not asserted)
#endif

  // A small one is left alone.
  before = hp::advised_bytes();
  ncnn::Mat small(256 << 10);  // 1 MiB
  expect(hp::advised_bytes() == before, "a 1 MiB allocation was not advised");

  // Only whole huge pages inside the range: an unaligned start and a length that is not a multiple.
  void* raw = nullptr;
  const size_t span = size_t{9} << 20;
  expect(posix_memalign(&raw, 64, span) == 0, "posix_memalign of 9 MiB");
  before = hp::advised_bytes();
  const size_t got = hp::advise(static_cast<char*>(raw) + 4096, span - 8192);
  expect(got > 0 && got <= span - 8192 && got % (size_t{2} << 20) == 0,
         "advise() covers only whole 2 MiB pages inside the range (" + std::to_string(got) + " bytes)");
  expect(hp::advised_bytes() - before >= got, "advised_bytes() counts it");
  std::free(raw);

  // Off again.
  hp::set_enabled(false);
  before = hp::advised_bytes();
  ncnn::Mat off(4 << 20);
  expect(hp::advised_bytes() == before, "with set_enabled(false) a 16 MiB allocation is not advised");
#if defined(__x86_64__) && defined(__linux__)
  const std::string off_flags = vm_flags_at(static_cast<const char*>(off.data) + (8 << 20));
  expect(!has_flag(off_flags, "hg"), "and its mapping carries no advice (" + off_flags + ")");
#endif

  std::printf("%s\n", g_failures == 0 ? "all checks passed" : "some checks FAILED");
  return g_failures == 0 ? 0 : 1;
#endif
}
