// The CLI logger (log.h): one spdlog logger on stderr, pattern "kiln: <message>".
#include "log.h"

#include <spdlog/sinks/stdout_sinks.h>

namespace kiln::cli {

namespace {

std::shared_ptr<spdlog::logger> make() {
  // Unbuffered, unstyled stderr: messages interleave with the tty progress line and with what
  // child processes (nvcc) print, in order.
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto l = std::make_shared<spdlog::logger>("kiln", sink);
  l->set_pattern("kiln: %v");
  l->set_level(spdlog::level::info);
  l->flush_on(spdlog::level::trace);
  return l;
}

}  // namespace

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> l = make();
  return *l;
}

void set_verbosity(int level) {
  logger().set_level(level < 0   ? spdlog::level::warn
                     : level > 0 ? spdlog::level::debug
                                 : spdlog::level::info);
}

bool notes_shown() {
  return logger().should_log(spdlog::level::info);
}

}  // namespace kiln::cli
