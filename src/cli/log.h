// The CLI's messages on stderr, through spdlog (formatted by fmt): notes and progress at info
// ("kiln: ..."), details at debug, problems at warn, always with the "kiln: " prefix. `-q` shows
// warnings and errors only, `-v` adds the details. Results go to stdout, never through here.
// Notes whose text predates this ("wrote X", "kiln check: [i/n] ...") keep it and ask
// notes_shown() first, so -q silences them as well; errors are printed whatever the level.
#pragma once

#include <utility>

#include <spdlog/spdlog.h>

namespace kiln::cli {

// -1: quiet (-q), 0: normal, 1: verbose (-v). Call once, before any message.
void set_verbosity(int level);
spdlog::logger& logger();

template <class... A>
void note(fmt::format_string<A...> f, A&&... a) {
  logger().info(f, std::forward<A>(a)...);
}
template <class... A>
void detail(fmt::format_string<A...> f, A&&... a) {
  logger().debug(f, std::forward<A>(a)...);
}
template <class... A>
void warn(fmt::format_string<A...> f, A&&... a) {
  logger().warn(f, std::forward<A>(a)...);
}
// Whether info messages are shown (the tty progress line, which bypasses the logger, asks).
bool notes_shown();

}  // namespace kiln::cli
