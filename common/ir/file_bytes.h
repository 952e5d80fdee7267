// Bytes of a file region that a tensor reads only when it must (ONNX external data, the
// raw_data of a large .onnx file, a plan's weights.bin): weights stay on disk through
// import, planning and plan writing, and are never held twice.
//
// resident() is false until the first bytes() call; bytes() then maps the region
// (MAP_PRIVATE: a write stays private, as with any copy) when its offset keeps dc's 64-byte
// alignment, or reads it into an aligned buffer. copy_to() reads any part without making
// the region resident, from memory once it is.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "ir/lazy_bytes.h"

namespace dc {

class FileBytes : public LazyBytes {
 public:
  // The caller has checked that [offset, offset + size) lies within the file.
  FileBytes(std::string path, uint64_t offset, size_t size);
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;

  const std::string& path() const { return path_; }
  uint64_t offset() const { return offset_; }
  size_t size() const override { return size_; }
  bool resident() const override { return data_.load(std::memory_order_acquire) != nullptr; }

  // The whole region in memory (once, thread-safe). UserError if the file has shrunk or
  // vanished since import.
  std::byte* bytes() override;
  // Bytes [from, from + n) of the region into dst. UserError as for bytes().
  void copy_to(size_t from, size_t n, void* dst) const override;

 private:
  std::string path_;
  uint64_t offset_;
  size_t size_;
  std::mutex mu_;
  std::shared_ptr<std::byte[]> holder_;  // owns the mapping or the buffer
  std::atomic<std::byte*> data_{nullptr};
};

// A whole file mapped read-only: only the pages read are loaded (load_onnx scans a .onnx
// file's structure without touching its weights).
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // UserError if it cannot be read
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

// Reads [offset, offset + n) of `path` into dst; UserError naming the file if it is
// missing or shorter.
void read_file_range(const std::string& path, uint64_t offset, size_t n, void* dst);

}  // namespace dc
