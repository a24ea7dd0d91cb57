// An exclusive advisory lock on a lock file (flock), for runs of Kiln that share a directory: the
// output directory of `kiln optimize` and the entries of the result cache (docs/reliability.md).
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>

namespace kiln {

// What a file that is not a regular one is, for messages: "a directory", "a FIFO", "a symbolic
// link", "a socket", "a device", else "not a regular file". `m` is a stat st_mode.
const char* file_kind_name(mode_t m);

// Held from construction to destruction (or release()). The kernel drops the lock when the
// process dies, so a killed run never leaves a stale lock behind; the lock file itself stays (it
// is empty and harmless). The descriptor is close-on-exec: nvcc and the other children a run
// starts do not keep the lock alive after it ends.
class FileLock {
 public:
  FileLock() = default;
  // Creates `path` if missing and takes the lock, blocking while another process holds it
  // (`on_wait` is called once, before blocking, so the caller can say why it waits). Never hangs
  // on a special file: `path` is checked with lstat first and opened non-blocking, and anything
  // but a regular file (a FIFO, a directory, a device, a symbolic link) is refused. When the lock
  // cannot be taken (that, a directory that cannot be written, a file system without flock),
  // held() is false and error() says why; the caller decides whether to go on unlocked.
  explicit FileLock(const std::string& path, const std::function<void()>& on_wait = {});
  FileLock(FileLock&& o) noexcept;
  FileLock& operator=(FileLock&& o) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock() { release(); }

  bool held() const { return fd_ >= 0; }
  const std::string& error() const { return error_; }
  void release();

 private:
  int fd_ = -1;
  std::string error_;
};

}  // namespace kiln
