// A read-only view of a (possibly multi-GB) file: memory-mapped where the platform allows (mmap on POSIX,
// CreateFileMapping/MapViewOfFile on Windows, the UTF-8 path widened), otherwise reads of just the byte
// ranges asked for. Either way read(offset, n, out) copies bytes; nothing is loaded up front, so the tied
// embedding matrix costs only the pages of the rows a prompt touches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gsurg {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path, bool allow_map = true);  // throws gsurg::Error naming the file
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  uint64_t size() const { return size_; }
  bool mapped() const { return base_ != nullptr; }
  const std::string& path() const { return path_; }
  // Copies bytes [offset, offset+n) into out; throws when the range passes the end of the file.
  void read(uint64_t offset, size_t n, void* out) const;
  // The mapping's first byte (null when reading through the stream). Valid while this object lives.
  const unsigned char* data() const { return base_; }
  // Drops this process's pages of the whole pages inside [offset, offset+n) from its resident set
  // (madvise MADV_DONTNEED on a read-only shared mapping: the bytes stay what the file holds, a later
  // access faults them back in from the page cache). Nothing on Windows or when not mapped.
  void release(uint64_t offset, uint64_t n) const;

 private:
  std::string path_;
  uint64_t size_ = 0;
  const unsigned char* base_ = nullptr;  // the mapping, or null when reading through the stream
  void* stream_ = nullptr;               // std::FILE* of the fallback
#ifdef _WIN32
  void* file_handle_ = nullptr;
  void* mapping_handle_ = nullptr;
#endif
};

}  // namespace gsurg
