// Transparent huge pages for large allocations (huge_pages.hpp), and the posix_memalign wrapper that
// applies them to ncnn's buffers on Linux.
#include "gsurg/huge_pages.hpp"

#include <atomic>
#include <cstdint>
#include <cstdlib>

#if defined(__linux__) && defined(GSURG_WRAP_POSIX_MEMALIGN)
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#endif

namespace gsurg::huge_pages {

namespace {

std::atomic<bool> g_enabled{false};
std::atomic<size_t> g_advised{0};

#if defined(__linux__) && defined(GSURG_WRAP_POSIX_MEMALIGN)

// Reads a small /sys file without allocating (this runs inside the allocator's wrapper).
size_t read_sys(const char* path, char* buf, size_t cap) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t n = ::read(fd, buf, cap - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  return static_cast<size_t>(n);
}

// The huge page size when THP can be advised (mode "always" or "madvise"), else 0. Computed once.
size_t huge_page_size() {
  static const size_t size = [] {
    char buf[128];
    // The selected mode is the bracketed word: "always [madvise] never".
    if (read_sys("/sys/kernel/mm/transparent_hugepage/enabled", buf, sizeof buf) == 0) return size_t{0};
    if (std::strstr(buf, "[never]") != nullptr) return size_t{0};
    size_t bytes = size_t{2} << 20;
    if (read_sys("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", buf, sizeof buf) > 0) {
      const unsigned long long v = std::strtoull(buf, nullptr, 10);
      if (v >= 4096 && (v & (v - 1)) == 0) bytes = static_cast<size_t>(v);
    }
    return bytes;
  }();
  return size;
}

#endif

}  // namespace

bool supported() {
#if defined(__linux__) && defined(GSURG_WRAP_POSIX_MEMALIGN)
  return huge_page_size() != 0;
#else
  return false;
#endif
}

size_t page_bytes() {
#if defined(__linux__) && defined(GSURG_WRAP_POSIX_MEMALIGN)
  return huge_page_size();
#else
  return 0;
#endif
}

void set_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }

bool enabled() { return g_enabled.load(std::memory_order_relaxed); }

size_t advise(void* p, size_t bytes) {
#if defined(__linux__) && defined(GSURG_WRAP_POSIX_MEMALIGN)
  if (p == nullptr || bytes < kMinBytes || !enabled()) return 0;
  const size_t page = huge_page_size();
  if (page == 0) return 0;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (begin + page - 1) & ~(static_cast<uintptr_t>(page) - 1);
  const uintptr_t last = (begin + bytes) & ~(static_cast<uintptr_t>(page) - 1);
  if (last <= first) return 0;
  if (::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE) != 0) return 0;
  g_advised.fetch_add(last - first, std::memory_order_relaxed);
  return last - first;
#else
  (void)p;
  (void)bytes;
  return 0;
#endif
}

size_t advised_bytes() { return g_advised.load(std::memory_order_relaxed); }

}  // namespace gsurg::huge_pages

#if defined(__linux__) && defined(GSURG_WRAP_POSIX_MEMALIGN)
// The linker's --wrap=posix_memalign sends every call of posix_memalign in the program (ncnn's fastMalloc,
// inlined into its static library's objects, among them) here; __real_posix_memalign is the C library's.
extern "C" int __real_posix_memalign(void** out, size_t alignment, size_t size);

extern "C" int __wrap_posix_memalign(void** out, size_t alignment, size_t size) {
  const int rc = __real_posix_memalign(out, alignment, size);
  if (rc == 0) gsurg::huge_pages::advise(*out, size);
  return rc;
}
#endif
