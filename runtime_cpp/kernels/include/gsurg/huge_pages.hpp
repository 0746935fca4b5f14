// Transparent huge pages for the runtime's large allocations (Linux).
//
// Loading a converted model is dominated by first touches of anonymous memory: ncnn's create_pipeline
// repacks every constant Gemm weight into buffers it allocates (ncnn::fastMalloc, i.e. posix_memalign),
// and each 4 KiB page of them costs a page fault. With the kernel's THP mode at "madvise" (the common
// default) those buffers get 2 MiB pages only when someone asks. This module asks: on Linux the runtime is
// linked with `--wrap=posix_memalign` (gsurg_kernels' link options, so every program and test linking it,
// ncnn's static library included), and the wrapper advises MADV_HUGEPAGE on the whole huge pages inside
// every allocation of at least kMinBytes. Nothing else changes: the memory is glibc's, freed by free().
// Only the pages fully inside an allocation are advised, so no huge page spans memory the caller did not
// ask for. Measured by benchmarks/bench_load.py (the runner with and without --huge-pages).
//
// Off by default (the runner's --huge-pages turns it on). A load's page faults fall ~8x (2.20 M to 0.27 M
// for the README's 2B VLM in fp32), but on a VM whose balloon reports free memory to the host (virtio free page
// reporting, order 9: exactly the 2 MiB blocks a huge page takes) each huge page may be memory the host
// has taken back and must fault in again, and the measured load was then twice as slow as with small
// pages, which the allocator serves from smaller, unreported free blocks first. runtime_cpp/README.md
// has the figures of both cases.
//
// Elsewhere (Windows, macOS, a build without the wrap) supported() is false and advise() does nothing.
#pragma once

#include <cstddef>

namespace gsurg::huge_pages {

// Allocations smaller than this are left alone (they hold at most one whole huge page).
constexpr size_t kMinBytes = size_t{4} << 20;

// Whether this build and kernel can advise: Linux, the wrap linked in, and a THP mode other than "never"
// (/sys/kernel/mm/transparent_hugepage/enabled).
bool supported();

// The kernel's huge page size in bytes (/sys/kernel/mm/transparent_hugepage/hpage_pmd_size: 2 MiB on x86-64
// and on arm64 with 4 KiB base pages, 32 MiB or 512 MiB with 16 KiB or 64 KiB ones), or 0 when !supported().
size_t page_bytes();

// Off by default; the runner's --huge-pages turns it on before anything is loaded.
void set_enabled(bool on);
bool enabled();

// Advises the whole huge pages inside [p, p + bytes) when enabled, supported and bytes >= kMinBytes, for
// memory allocated but not yet touched (pages already faulted in stay small until khugepaged merges them).
// Returns the bytes advised (0 when nothing was).
size_t advise(void* p, size_t bytes);

// Bytes advised so far in this process (the wrapper's and advise()'s), for --verbose and the tests.
size_t advised_bytes();

}  // namespace gsurg::huge_pages
