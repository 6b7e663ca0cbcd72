// How wide the terminal is, and how many of its columns a UTF-8 string takes: what fsdpctl's
// redrawn lines (`watch`'s progress line) fit themselves to, so that a redraw never wraps.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace fsdpd::client {

// The columns of the terminal on `fd` (ioctl TIOCGWINSZ); where that fails or says 0, $COLUMNS
// when it is a positive number; else 80. Cheap enough to ask before every redraw, which is how a
// resized terminal (SIGWINCH) is noticed.
size_t TerminalColumns(int fd);

// The columns `text` takes: one per code point, which holds for ASCII and for the block and box
// characters fsdpctl draws (none of them wide or combining).
size_t DisplayColumns(std::string_view text);

// `text` cut to at most `columns` columns, at a code point boundary.
std::string FitColumns(std::string_view text, size_t columns);

// `text` broken at spaces into lines of at most `columns` columns, the lines after the first
// indented by `indent` spaces (a word too long for a line is cut); for one-off lines printed on
// a terminal, which then lose nothing and never wrap mid-word. No line breaks inside `text`.
std::vector<std::string> WrapColumns(std::string_view text, size_t columns, size_t indent);

}  // namespace fsdpd::client
